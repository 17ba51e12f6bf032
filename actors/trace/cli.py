"""`actorlog trace ...`: look at the trace records nodes wrote.

show / list / tail / find / export read the trace files directly (Parquet, or
msgpack from before version 2) with no extra installed; export writes Perfetto
or OTLP JSON; analyze runs the PySpark job of ``actors/trace/analyze.py``
(optional extra ``actorlog[spark]``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from actors.trace.spans import (
    STAGES,
    RequestTrace,
    build_spans,
    format_tree,
    node_anchors,
    request_from_trace,
    request_traces,
)
from actors.trace.store import read_trace_dirs
from wire.api_versions import API_KEYS_BY_SNAKE_NAME


class _DirsOption(click.Option):
    """``--dir A B C`` as well as ``--dir A --dir B``: the option takes every following
    word up to the next option (a click option otherwise takes exactly one)."""

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        for name in self.opts:
            option = parser._long_opt.get(name) or parser._short_opt.get(name)
            take_one = option.process

            def take_all(value: Any, state: Any, take_one: Any = take_one) -> None:
                take_one(value, state)
                while state.rargs and not state.rargs[0].startswith("-"):
                    take_one(state.rargs.pop(0), state)

            option.process = take_all


def _dir_option(required: bool = True, exists: bool = True) -> Any:
    return click.option(
        "--dir",
        "dirs",
        cls=_DirsOption,
        multiple=True,
        required=required,
        type=click.Path(exists=exists),
        help="a node's data dir or trace dir: --dir A B, or --dir A --dir B",
    )


def _read(dirs: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every record under ``dirs``; a file that is no trace file is one line, not a
    traceback."""
    try:
        return read_trace_dirs([Path(d) for d in dirs])
    except ValueError as exc:
        raise click.ClickException(
            f"{exc}; give data dirs, their traces dirs or trace files (--dir)") from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {exc.filename}: {exc.strerror}") from None


def _parse_trace_id(text: str) -> int:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise click.BadParameter(f"trace id must be an integer or 0x-hex, got {text!r}") from None


def _us(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / 1000:.0f} us"


def stage_line(req: RequestTrace) -> str:
    """``total X us = request_queue A us + local B us + ...`` (or why it is incomplete)."""
    if req.stages is None:
        return f"total {_us(req.total_ns)} (stages unknown: some records are missing)"
    parts = " + ".join(f"{s} {_us(req.stages[s])}" for s in STAGES)
    return f"total {_us(req.total_ns)} = {parts}"


@click.group("trace")
def group() -> None:
    """Inspect message traces (one request's path across actors and hosts)."""


def _dirs_then_out(dirs: tuple[str, ...], out: str | None) -> tuple[tuple[str, ...], str]:
    """``--dir A B out.json``: the greedy --dir took OUT too; the last word is OUT."""
    if out is None:
        if len(dirs) < 2:
            raise click.UsageError("give the dirs and the output file: --dir DIR [DIR...] OUT")
        dirs, out = dirs[:-1], dirs[-1]
        if Path(out).is_dir():
            raise click.UsageError(f"the last word {out!r} is a directory; give the output "
                                   f"file last: --dir DIR [DIR...] OUT")
    if not dirs:
        raise click.UsageError("give the nodes' data dirs: --dir DIR [DIR...] OUT")
    for d in dirs:
        if not Path(d).exists():
            raise click.BadParameter(f"path {d!r} does not exist", param_hint="--dir")
    return dirs, out


@group.command("show")
@click.argument("trace_id")
@_dir_option()
def show(trace_id: str, dirs: tuple[str, ...]) -> None:
    """Print one trace as a tree: actor, node, message, mailbox wait and handling time.

    For a Kafka request the header gives its stages (request queue, local,
    remote, response queue, send; see actors/trace/spans.py).
    """
    tid = _parse_trace_id(trace_id)
    everything = _read(dirs)
    records = [r for r in everything if r["trace_id"] == tid]
    anchors = node_anchors(records)
    roots = build_spans(everything, tid, anchors)
    req = request_from_trace(tid, records, anchors)
    if not roots and req is None:
        raise click.ClickException(f"trace {trace_id} not found in {', '.join(dirs)}")
    click.echo(f"trace {tid} ({len(records)} records)")
    t0 = None
    if req is not None:
        click.echo(
            f"request {req.api} (api {req.api_key}) conn {req.conn_id} corr {req.corr_id} "
            f"from {req.peer} at {req.processor}@{req.node}"
            + (f", handled by {req.handler}" if req.handler else "")
        )
        click.echo(stage_line(req))
        t0 = req.t_in
        click.echo(f"+{0:9.0f} us  net_in   {req.processor}@{req.node} <- {req.peer}")
    for line in format_tree(roots, t0):
        click.echo(line)
    if req is not None:
        if req.t_out is None:
            click.echo("           net_out  (no response in the traces)")
        else:
            click.echo(
                f"+{(req.t_out - req.t_in) / 1000:9.0f} us  net_out  "
                f"{req.processor}@{req.node} -> {req.peer}"
                + (f"  ({req.responses} responses!)" if req.responses > 1 else "")
            )


@group.command("list")
@_dir_option()
@click.option("--limit", default=20, show_default=True)
def list_traces(dirs: tuple[str, ...], limit: int) -> None:
    """The most recent trace ids with their first message type."""
    records = _read(dirs)
    first: dict[int, dict[str, Any]] = {}
    for rec in records:
        tid = rec["trace_id"]
        if tid and (tid not in first or rec["sent_ns"] < first[tid]["sent_ns"]):
            first[tid] = rec
    if not first:  # as find: nothing to list is a mistake to say, not an empty success
        raise click.ClickException(
            f"no traces in {', '.join(dirs)} (an empty file or a dir without trace files); "
            "give data dirs, their traces dirs or trace files (--dir)")
    for tid, rec in sorted(first.items(), key=lambda kv: kv[1]["sent_ns"])[-limit:]:
        click.echo(f"{tid}  {rec['msg_type']}  {rec['actor']}@{rec['node']}")


def _request_row(req: RequestTrace) -> str:
    when = (
        time.strftime("%H:%M:%S", time.gmtime(req.t_in / 1e9))
        + f".{req.t_in // 1_000_000 % 1000:03d}"
    )
    return (
        f"{when}  {req.trace_id:>20}  {req.api:<13} conn {req.conn_id:<5} corr {req.corr_id:<7} "
        f"{stage_line(req)}"
    )


@group.command("find")
@_dir_option()
@click.option(
    "--slowest",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="how many requests to print, slowest first",
)
@click.option(
    "--api", default=None, help="only this API (Kafka name, e.g. produce, fetch, or a key)"
)
@click.option(
    "--window",
    "window_s",
    type=click.FloatRange(min=0),
    default=None,
    help="only requests that arrived in the last SECONDS of the traces",
)
def find(dirs: tuple[str, ...], slowest: int, api: str | None, window_s: float | None) -> None:
    """The slowest requests (net_in to net_out), with their stages and trace ids."""
    reqs = [
        r
        for r in request_traces(_read(dirs))
        if r.total_ns is not None
    ]
    if api is not None:
        key = int(api) if api.isdigit() else API_KEYS_BY_SNAKE_NAME.get(api.lower())
        if key is None:
            raise click.BadParameter(
                f"unknown API {api!r}; use a Kafka API name or key", param_hint="--api"
            )
        reqs = [r for r in reqs if r.api_key == key]
    if window_s is not None and reqs:
        end = max(r.t_in for r in reqs)
        reqs = [r for r in reqs if r.t_in >= end - window_s * 1e9]
    if not reqs:
        raise click.ClickException("no matching answered requests in the traces")
    reqs.sort(key=lambda r: r.total_ns or 0, reverse=True)
    click.echo(
        f"{len(reqs)} matching requests; the {min(slowest, len(reqs))} slowest "
        f"(trace show TRACE_ID for the tree):"
    )
    for r in reqs[:slowest]:
        click.echo(_request_row(r))


@group.command("tail")
@_dir_option()
@click.option("--events", "raw", is_flag=True,
              help="print every record as it comes, not finished requests")
@click.option("--from-start", is_flag=True, help="begin with what the files already hold")
@click.option(
    "--seconds",
    type=click.FloatRange(min=0),
    default=None,
    help="stop after this long (default: until interrupted)",
)
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True)
def tail(
    dirs: tuple[str, ...], raw: bool, from_start: bool, seconds: float | None, interval: float
) -> None:
    """Follow a running node's trace files: one line per finished request (or per event)."""
    from actors.trace.store import SegmentFollower

    follower = SegmentFollower([Path(d) for d in dirs], from_end=not from_start)
    pending: dict[int, list[dict[str, Any]]] = {}
    finished: dict[int, int] = {}  # trace id -> polls it has waited for its last hops
    anchors: dict[str, int] = {}
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while True:
            new = follower.poll()
            for node, a in node_anchors(new).items():
                anchors.setdefault(node, a)
            for rec in new:
                if raw:
                    click.echo(
                        f"{rec['kind']:<7} {rec['trace_id']:>20} {rec['actor']}@{rec['node']} "
                        f"{rec['msg_type']} from={rec['sender']} bytes={rec['bytes']}"
                    )
                    continue
                if not rec["trace_id"]:
                    continue
                pending.setdefault(rec["trace_id"], []).append(rec)
                if rec["kind"] == "request":
                    finished.setdefault(rec["trace_id"], 0)
            # A request's last hop record may land a moment after its request record:
            # print it once its stages are whole, or after one more poll regardless.
            for tid in list(finished):
                req = request_from_trace(tid, pending[tid], anchors)
                if req is not None and req.stages is None and finished[tid] == 0:
                    finished[tid] = 1
                    continue
                if req is not None:
                    click.echo(_request_row(req))
                del finished[tid], pending[tid]
            if len(pending) > 100_000:  # chains that never end in a request record
                for tid in [t for t in list(pending)[: len(pending) // 2] if t not in finished]:
                    del pending[tid]
            if deadline is not None and time.monotonic() >= deadline:
                for tid in list(finished):  # what is left, stages or not
                    req = request_from_trace(tid, pending[tid], anchors)
                    if req is not None:
                        click.echo(_request_row(req))
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@group.command("export")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["perfetto", "otlp"]),
    default="perfetto",
    show_default=True,
)
@_dir_option(required=False, exists=False)  # the last word may be OUT
@click.option("--trace-id", "trace_ids", multiple=True, help="only these traces (repeatable)")
@click.argument("out", required=False, type=click.Path(dir_okay=False))
def export(fmt: str, dirs: tuple[str, ...], trace_ids: tuple[str, ...], out: str | None) -> None:
    """Write the traces as Perfetto/Chrome JSON (open at ui.perfetto.dev) or OTLP JSON.

    OUT is the last word: ``export --dir A B out.json`` reads A and B.
    """
    from actors.trace.export import to_otlp, to_perfetto

    dirs, out = _dirs_then_out(dirs, out)
    records = _read(dirs)
    if trace_ids:
        wanted = {_parse_trace_id(t) for t in trace_ids}
        # and the follower fetches that completed their waits (the export draws them)
        wanted |= {r["link_trace_id"] for r in records
                   if r["trace_id"] in wanted and r["link_trace_id"]}
        records = [r for r in records if r["trace_id"] in wanted]
    doc = to_perfetto(records) if fmt == "perfetto" else to_otlp(records)
    try:
        with open(out, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc.strerror}") from None
    click.echo(f"wrote {len(records)} records as {fmt} JSON to {out}")


@group.command("analyze")
@_dir_option(required=False)
@click.argument("more_dirs", nargs=-1, type=click.Path(exists=True))
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="report directory: Parquet tables, report.html, plots",
)
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL: local[N], or spark://HOST:PORT of a standalone cluster")
@click.option("--profile", type=click.Choice(["small", "big"]), default=None,
              help="Spark settings: small (one machine) or big (a cluster); "
                   "default: small for local[...], big otherwise")
def analyze(dirs: tuple[str, ...], more_dirs: tuple[str, ...], out: str, master: str,
            profile: str | None) -> None:
    """PySpark job over every node's traces: stages, actors, throughput, ordering check.

    The dirs as for the other trace commands (``--dir A B``); bare dirs are read too.
    Spark reads the nodes' trace files where they lie (a cluster's executors
    must see the same paths).
    """
    dirs = dirs + more_dirs
    if not dirs:
        raise click.UsageError("give the nodes' data dirs: --dir DIR [DIR...]")
    from actors.trace.analyze import MissingExtraError, require_extras
    from actors.trace.analyze import analyze as run

    try:
        require_extras()
    except MissingExtraError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        summary = run([Path(d) for d in dirs], Path(out), master=master, profile=profile)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{summary['records']} records, {summary['requests']} requests "
        f"({summary['incomplete_requests']} incomplete), "
        f"{summary['violation_count']} ordering/answer violations"
    )
    for api, d in sorted(summary["per_api_us"].items()):
        click.echo(
            f"  {api:<14} {d['requests']:>8} requests  total p50 {d['total']['p50']:.0f} us "
            f"p99 {d['total']['p99']:.0f} us"
        )
    for v in summary["violations"][:20]:
        click.echo(
            f"  VIOLATION {v['violation']}: {v['node']} {v['processor']} conn {v['conn_id']} "
            f"corr {v['corr_id']} ({v['api']}): {v['detail']}"
        )
    t = summary["timings"]
    click.echo(
        f"report: {Path(out) / 'report.html'}  (prepare {t['prepare_s']:.1f} s, "
        f"spark start {t['spark_start_s']:.1f} s, job {t['job_s']:.1f} s)"
    )
