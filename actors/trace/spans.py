"""Rebuild spans and Kafka request stages from trace events.

A span is one message: sent by one actor, received and handled by another.
Its mailbox wait is receive time minus send time, its handling time done
minus receive.

Time base. Within one node every difference uses the monotonic clock
(``mono_ns``), which is exact and comparable between the processes of one
host. To put several nodes on one timeline each node gets an *anchor*: the
median of ``wall_ns + clock_offset_ns - mono_ns`` over its events, so that
``aligned = mono_ns + anchor`` is the node's monotonic time expressed on the
reference wall clock (the clock the offsets were estimated against). Two
events on one node differ by exactly their monotonic difference; events on
two nodes differ by their corrected wall clocks.

Kafka request stages (times are the aligned times of one sampled request,
whose trace the Processor starts when a whole request frame has been read):

  request_queue   recv(KafkaRequest) at the handler - net_in
  local           time the handler spent handling this request's messages
                  (the KafkaRequest and every reply it got), clipped to
                  [recv(KafkaRequest), send(KafkaResponse)]
  remote          send(KafkaResponse) - recv(KafkaRequest) - local: waiting
                  on shards, purgatory, the controller, the coordinator
  response_queue  recv(KafkaResponse) at the Processor - send(KafkaResponse)
  send            net_out - recv(KafkaResponse): waiting for earlier
                  responses of the connection, then writing to the socket
  total           net_out - net_in = the sum of the five
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from wire.api_versions import STAGES, api_snake_name

__all__ = [
    "STAGES",
    "RequestTrace",
    "Span",
    "build_spans",
    "format_tree",
    "node_anchors",
    "request_from_trace",
    "request_traces",
]

def node_anchors(events: list[dict[str, Any]]) -> dict[str, int]:
    """Per node: reference wall time minus monotonic time (the median over its events)."""
    diffs: dict[str, list[int]] = defaultdict(list)
    for ev in events:
        diffs[ev["node"]].append(ev["wall_ns"] + ev["clock_offset_ns"] - ev["mono_ns"])
    anchors = {}
    for node, d in diffs.items():
        d.sort()
        anchors[node] = d[len(d) // 2]
    return anchors


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
    anchors: dict[str, int] = field(default_factory=dict, repr=False)

    def at(self, ev: dict[str, Any] | None) -> int | None:
        """An event's aligned time (see the module docstring)."""
        if ev is None:
            return None
        anchor = self.anchors.get(ev["node"])
        if anchor is None:
            return int(ev["wall_ns"] + ev["clock_offset_ns"])
        return int(ev["mono_ns"] + anchor)

    def _delta_ns(self, a: dict[str, Any] | None, b: dict[str, Any] | None) -> int | None:
        if a is None or b is None:
            return None
        if a["node"] == b["node"]:
            return int(b["mono_ns"] - a["mono_ns"])
        ta, tb = self.at(a), self.at(b)
        assert ta is not None and tb is not None
        return tb - ta

    @property
    def mailbox_ns(self) -> int | None:
        return self._delta_ns(self.send, self.recv)

    @property
    def handling_ns(self) -> int | None:
        return self._delta_ns(self.recv, self.done)

    @property
    def start_wall_ns(self) -> int:
        t = self.at(self.send or self.recv or self.done)
        assert t is not None
        return t


def build_spans(events: list[dict[str, Any]], trace_id: int,
                anchors: dict[str, int] | None = None) -> list[Span]:
    """The root spans of one trace, children ordered by start time."""
    mine = [ev for ev in events if ev["trace_id"] == trace_id]
    if anchors is None:
        anchors = node_anchors(mine)
    spans: dict[int, Span] = {}
    for ev in mine:
        if ev["kind"] not in ("send", "recv", "done"):
            continue
        span = spans.get(ev["span_id"])
        if span is None:
            span = spans[ev["span_id"]] = Span(ev["span_id"], ev["parent_span_id"], trace_id,
                                               anchors=anchors)
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


def _us(ns: int | None) -> str:
    return "      ?" if ns is None else f"{ns / 1000:7.0f}"


def format_tree(roots: list[Span], t0: int | None = None) -> list[str]:
    """An indented timeline: offset from the trace start, hop, mailbox and handler time."""
    if not roots:
        return []
    if t0 is None:
        t0 = min(r.start_wall_ns for r in roots)
    lines: list[str] = []

    def walk(span: Span, depth: int) -> None:
        lines.append(
            f"+{(span.start_wall_ns - t0) / 1000:9.0f} us  "
            f"mailbox {_us(span.mailbox_ns)} us  handler {_us(span.handling_ns)} us  "
            f"{'  ' * depth}{span.msg_type}: {span.sender} -> {span.receiver}"
        )
        for child in span.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines


# ------------------------------------------------------------------ requests
@dataclass
class RequestTrace:
    """One sampled Kafka request: where it came from and where its time went."""

    trace_id: int
    node: str
    processor: str
    peer: str
    conn_id: int
    corr_id: int
    api_key: int
    t_in: int
    t_out: int | None
    responses: int
    handler: str | None = None
    stages: dict[str, int] | None = None

    @property
    def total_ns(self) -> int | None:
        return None if self.t_out is None else self.t_out - self.t_in

    @property
    def api(self) -> str:
        return api_snake_name(self.api_key)


def request_traces(events: list[dict[str, Any]],
                   anchors: dict[str, int] | None = None) -> list[RequestTrace]:
    """Every request (a trace with a net_in) in the events, with its stages when complete."""
    if anchors is None:
        anchors = node_anchors(events)
    by_trace: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for ev in events:
        if ev["trace_id"]:
            by_trace[ev["trace_id"]].append(ev)
    out = []
    for tid, evs in by_trace.items():
        req = request_from_trace(tid, evs, anchors)
        if req is not None:
            out.append(req)
    out.sort(key=lambda r: r.t_in)
    return out


def request_from_trace(trace_id: int, evs: list[dict[str, Any]],
                       anchors: dict[str, int]) -> RequestTrace | None:
    def at(ev: dict[str, Any]) -> int:
        return int(ev["mono_ns"] + anchors.get(ev["node"], ev["wall_ns"] + ev["clock_offset_ns"]
                                               - ev["mono_ns"]))

    net_in = [e for e in evs if e["kind"] == "net_in"]
    if not net_in:
        return None
    first = net_in[0]
    outs = sorted(at(e) for e in evs if e["kind"] == "net_out")
    req = RequestTrace(trace_id, first["node"], first["actor"], first["peer"], first["conn_id"],
                       first["corr_id"], first["api_key"], at(first), outs[0] if outs else None,
                       len(outs))
    recv_req = next((e for e in evs if e["kind"] == "recv" and e["msg_type"] == "KafkaRequest"),
                    None)
    send_resp = next((e for e in evs if e["kind"] == "send" and e["msg_type"] == "KafkaResponse"),
                     None)
    recv_resp = next((e for e in evs if e["kind"] == "recv" and e["msg_type"] == "KafkaResponse"),
                     None)
    if recv_req is None or send_resp is None or recv_resp is None or req.t_out is None:
        return req
    req.handler = f"{recv_req['actor']}@{recv_req['node']}"
    t1, t2, t3 = at(recv_req), at(send_resp), at(recv_resp)
    recvs: dict[int, dict[str, Any]] = {}
    dones: dict[int, dict[str, Any]] = {}
    for e in evs:
        if e["actor"] == recv_req["actor"] and e["node"] == recv_req["node"]:
            if e["kind"] == "recv":
                recvs[e["span_id"]] = e
            elif e["kind"] == "done":
                dones[e["span_id"]] = e
    local = 0
    for span_id, r in recvs.items():
        d = dones.get(span_id)
        if d is not None:
            local += max(0, min(at(d), t2) - max(at(r), t1))
    req.stages = {
        "request_queue": t1 - req.t_in,
        "local": local,
        "remote": t2 - t1 - local,
        "response_queue": t3 - t2,
        "send": req.t_out - t3,
    }
    return req
