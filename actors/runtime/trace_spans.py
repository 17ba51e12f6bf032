"""Rebuild spans from trace events: one span per message, send to done.

A span's mailbox wait is receive time minus send time, and its handling time
is done minus receive. Events of one host compare on the monotonic clock;
across nodes the wall clocks are used, each corrected by its node's
``clock_offset_ns`` estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Span:
    span_id: int
    parent_span_id: int
    trace_id: int
    msg_type: str = "?"
    sender: str = "?"
    receiver: str = "?"
    send: dict[str, Any] | None = None
    recv: dict[str, Any] | None = None
    done: dict[str, Any] | None = None
    children: list[Span] = field(default_factory=list)

    @staticmethod
    def _delta_ns(a: dict[str, Any] | None, b: dict[str, Any] | None) -> int | None:
        if a is None or b is None:
            return None
        if a["node"] == b["node"]:
            return int(b["mono_ns"] - a["mono_ns"])
        return int((b["wall_ns"] + b["clock_offset_ns"]) - (a["wall_ns"] + a["clock_offset_ns"]))

    @property
    def mailbox_ns(self) -> int | None:
        return self._delta_ns(self.send, self.recv)

    @property
    def handling_ns(self) -> int | None:
        return self._delta_ns(self.recv, self.done)

    @property
    def start_wall_ns(self) -> int:
        ev = self.send or self.recv or self.done
        assert ev is not None
        return int(ev["wall_ns"] + ev["clock_offset_ns"])


def build_spans(events: list[dict[str, Any]], trace_id: int) -> list[Span]:
    """The root spans of one trace, children ordered by start time."""
    spans: dict[int, Span] = {}
    for ev in events:
        if ev["trace_id"] != trace_id or ev["kind"] not in ("send", "recv", "done"):
            continue
        span = spans.get(ev["span_id"])
        if span is None:
            span = spans[ev["span_id"]] = Span(ev["span_id"], ev["parent_span_id"], trace_id)
        span.msg_type = ev["msg_type"]
        if ev["kind"] == "send":
            span.send = ev
            span.sender = f"{ev['actor']}@{ev['node']}"
            span.receiver = ev["peer"]
        elif ev["kind"] == "recv":
            span.recv = ev
            span.receiver = f"{ev['actor']}@{ev['node']}"
            span.sender = ev["peer"]
        else:
            span.done = ev
    roots: list[Span] = []
    for span in spans.values():
        parent = spans.get(span.parent_span_id) if span.parent_span_id else None
        (parent.children if parent is not None else roots).append(span)
    for span in spans.values():
        span.children.sort(key=lambda s: s.start_wall_ns)
    roots.sort(key=lambda s: s.start_wall_ns)
    return roots


def format_tree(roots: list[Span]) -> list[str]:
    """An indented timeline: offset from the trace start, hop, mailbox and handler time."""
    if not roots:
        return []
    t0 = min(r.start_wall_ns for r in roots)
    lines: list[str] = []

    def us(ns: int | None) -> str:
        return "      ?" if ns is None else f"{ns / 1000:7.0f}"

    def walk(span: Span, depth: int) -> None:
        lines.append(
            f"+{(span.start_wall_ns - t0) / 1000:9.0f} us  "
            f"mailbox {us(span.mailbox_ns)} us  handler {us(span.handling_ns)} us  "
            f"{'  ' * depth}{span.msg_type}: {span.sender} -> {span.receiver}"
        )
        for child in span.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines
