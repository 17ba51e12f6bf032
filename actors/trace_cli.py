"""`actorlog trace ...`: look at the trace events nodes wrote."""

from __future__ import annotations

from pathlib import Path

import click

from actors.runtime.trace_spans import build_spans, format_tree
from actors.runtime.tracing import read_trace_dirs


def _parse_trace_id(text: str) -> int:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise click.BadParameter(f"trace id must be an integer or 0x-hex, got {text!r}") from None


@click.group("trace")
def group() -> None:
    """Inspect message traces (one request's path across actors and hosts)."""


@group.command("show")
@click.argument("trace_id")
@click.option("--dir", "dirs", multiple=True, required=True, type=click.Path(exists=True),
              help="a node's data dir or trace dir; repeat for every node")
def show(trace_id: str, dirs: tuple[str, ...]) -> None:
    """Print one trace as an indented timeline: actor, node, message, mailbox and handler time."""
    tid = _parse_trace_id(trace_id)
    events = read_trace_dirs([Path(d) for d in dirs])
    roots = build_spans(events, tid)
    if not roots:
        raise click.ClickException(f"trace {trace_id} not found in {', '.join(dirs)}")
    click.echo(f"trace {tid} ({sum(1 for e in events if e['trace_id'] == tid)} events)")
    for line in format_tree(roots):
        click.echo(line)


@group.command("list")
@click.option("--dir", "dirs", multiple=True, required=True, type=click.Path(exists=True))
@click.option("--limit", default=20, show_default=True)
def list_traces(dirs: tuple[str, ...], limit: int) -> None:
    """The most recent trace ids with their first message type."""
    events = read_trace_dirs([Path(d) for d in dirs])
    first: dict[int, dict] = {}
    for ev in events:
        tid = ev["trace_id"]
        if tid and (tid not in first or ev["wall_ns"] < first[tid]["wall_ns"]):
            first[tid] = ev
    for tid, ev in sorted(first.items(), key=lambda kv: kv[1]["wall_ns"])[-limit:]:
        click.echo(f"{tid}  {ev['msg_type']}  {ev['actor']}@{ev['node']}")
