"""Rebuild spans and Kafka request stages from trace records (one record per hop).

A span is one message: sent by one actor, received and handled by another,
recorded once by the receiver (``kind`` "hop"). Its mailbox wait is receive
time minus send time, its handling time done minus receive; when it crossed
nodes, the receiving gateway's ``net`` record splits the wait into the network
leg (send to gateway) and the local queue (gateway to handler).

Time base. Record times are wall clock. Within one node every difference is
exact. To put several nodes on one timeline each node gets an *anchor*: the
median of its records' ``clock_offset_ns`` (its estimate of the reference
clock minus its own), so ``aligned = t + anchor(node)``. The receive and done
times of a record are on the node that wrote it; the send time is on the
sender's node (the node part of ``sender``). An anchor is then moved, the least
needed, so that no message crossing nodes is received before it was sent.

Kafka request stages (aligned times of one sampled request, whose trace the
Processor starts when a whole request frame has been read):

  request_queue   recv of the KafkaRequest hop at the handler - net in
  local           time the handler spent handling this request's messages
                  (the KafkaRequest and every reply it got), clipped to
                  [recv(KafkaRequest), send(KafkaResponse)]
  remote          send(KafkaResponse) - recv(KafkaRequest) - local: waiting
                  on shards, purgatory, the controller, the coordinator
  response_queue  recv of the KafkaResponse hop at the Processor - its send
  send            net out - recv(KafkaResponse): waiting for earlier
                  responses of the connection, then writing to the socket
  total           net out - net in = the sum of the five

net in and net out are the request record's ``recv_ns`` and ``done_ns``.
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
    "causal",
    "format_tree",
    "node_anchors",
    "request_from_trace",
    "request_traces",
    "sender_node",
    "wait_cause",
]


def node_anchors(records: list[dict[str, Any]]) -> dict[str, int]:
    """Per node: its records' median clock offset to the reference clock, corrected so
    that no message crossing nodes arrives before it was sent (see :func:`causal`)."""
    offsets: dict[str, list[int]] = defaultdict(list)
    least_gap: dict[tuple[str, str], int] = {}  # (from, to) -> max(sent - recv), raw clocks
    for rec in records:
        node = rec["node"]
        offsets[node].append(rec["clock_offset_ns"])
        if rec["kind"] in ("hop", "net"):
            source = sender_node(rec)
            if source != node:
                gap = rec["sent_ns"] - rec["recv_ns"]
                if gap > least_gap.get((source, node), gap - 1):
                    least_gap[(source, node)] = gap
    anchors = {}
    for node, d in offsets.items():
        d.sort()
        anchors[node] = d[len(d) // 2]
    return causal(anchors, least_gap)


def causal(anchors: dict[str, int], least_gap: dict[tuple[str, str], int]) -> dict[str, int]:
    """Move anchors the least needed so every crossing keeps its order: a message sent
    from node A at ``s`` and received on B at ``r`` needs ``r + anchor(B) >= s +
    anchor(A)``. The nodes' estimates come from ping round trips and are off by up to
    half a round trip, milliseconds on a loaded host, more than a fast crossing takes.
    The reference node (the smallest name, as the gateways pick it) stays put; when the
    bounds contradict each other (clocks that drifted during the trace) a few passes
    end with the estimates as close as they got."""
    anchors = dict(anchors)
    if len(anchors) < 2:
        return anchors
    reference = min(anchors)
    for _ in range(len(anchors)):
        moved = False
        for (source, dest), gap in least_gap.items():
            if source not in anchors or dest not in anchors:
                continue
            short = gap - (anchors[dest] - anchors[source])
            if short <= 0:
                continue
            if dest != reference:
                anchors[dest] += short
            else:
                anchors[source] -= short
            moved = True
        if not moved:
            break
    return anchors


def sender_node(rec: dict[str, Any]) -> str:
    """The node a hop or net record's message was sent from (its own node for others)."""
    if rec["kind"] in ("hop", "net"):
        node = rec["sender"].rpartition("@")[2]
        if node:
            return str(node)
    return str(rec["node"])


def aligned(anchors: dict[str, int], rec: dict[str, Any], name: str) -> int:
    """A record's time ``name`` on the reference clock."""
    node = sender_node(rec) if name == "sent_ns" else rec["node"]
    anchor = anchors.get(node)
    if anchor is None:  # a sender node we have no records of: assume the receiver's clock
        anchor = anchors.get(rec["node"], rec["clock_offset_ns"])
    return int(rec[name] + anchor)


@dataclass
class Span:
    """One message, from its hop record (and its network leg, if it crossed nodes)."""

    rec: dict[str, Any]
    anchors: dict[str, int] = field(default_factory=dict, repr=False)
    net: dict[str, Any] | None = None
    children: list[Span] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    """``wait`` records of delayed operations this message started (each with a
    ``cause`` key: :func:`wait_cause`)."""

    @property
    def span_id(self) -> int:
        return int(self.rec["span_id"])

    @property
    def parent_span_id(self) -> int:
        return int(self.rec["parent_span_id"])

    @property
    def msg_type(self) -> str:
        return str(self.rec["msg_type"])

    @property
    def sender(self) -> str:
        return str(self.rec["sender"])

    @property
    def receiver(self) -> str:
        return f"{self.rec['actor']}@{self.rec['node']}"

    def at(self, name: str) -> int:
        return aligned(self.anchors, self.rec, name)

    @property
    def mailbox_ns(self) -> int:
        rec = self.rec
        if sender_node(rec) == rec["node"]:
            return int(rec["recv_ns"] - rec["sent_ns"])
        return self.at("recv_ns") - self.at("sent_ns")

    @property
    def network_ns(self) -> int | None:
        """Send to the receiving gateway (a message that crossed nodes and was traced there)."""
        if self.net is None:
            return None
        return aligned(self.anchors, self.net, "recv_ns") - self.at("sent_ns")

    @property
    def handling_ns(self) -> int:
        return int(self.rec["done_ns"] - self.rec["recv_ns"])

    @property
    def start_ns(self) -> int:
        return self.at("sent_ns")


def fetch_of(records: list[dict[str, Any]], trace_id: int) -> dict[str, Any] | None:
    """The ReplicaFetch hop (on the leader) of a replica fetch's trace, if recorded."""
    return next((r for r in records if r["trace_id"] == trace_id and r["kind"] == "hop"
                 and r["msg_type"] == "ReplicaFetch"), None)


def wait_cause(wait: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """What ended a ``wait`` record, in words: for a wait a follower's fetch completed,
    that fetch (follower node, fetcher, fetch offset, its trace)."""
    if wait["offset"] < 0 and not wait["link_trace_id"]:
        return str(wait["detail"])
    fetch = fetch_of(records, wait["link_trace_id"]) if wait["link_trace_id"] else None
    if fetch is None:
        return str(wait["detail"])
    fetcher, _sep, node = fetch["sender"].rpartition("@")
    text = f"completed by the replica fetch of {node} (fetcher {fetcher}"
    if wait["offset"] >= 0:
        text += f", fetch offset {wait['offset']}"
    return text + f") that moved the high watermark; fetch trace {wait['link_trace_id']}"


def build_spans(records: list[dict[str, Any]], trace_id: int,
                anchors: dict[str, int] | None = None) -> list[Span]:
    """The root spans of one trace, children ordered by send time.

    ``records`` may hold other traces too: a wait completed by a follower's fetch
    names that fetch from its trace's records."""
    mine = [r for r in records if r["trace_id"] == trace_id]
    if anchors is None:
        anchors = node_anchors(mine)
    spans: dict[int, Span] = {}
    nets: dict[int, dict[str, Any]] = {}
    waits: list[dict[str, Any]] = []
    for rec in mine:
        if rec["kind"] == "hop":
            spans[rec["span_id"]] = Span(rec, anchors)
        elif rec["kind"] == "net":
            nets[rec["span_id"]] = rec
        elif rec["kind"] == "wait":
            waits.append(rec)
    roots: list[Span] = []
    for span in spans.values():
        span.net = nets.get(span.span_id)
        parent = spans.get(span.parent_span_id) if span.parent_span_id else None
        (parent.children if parent is not None else roots).append(span)
    for wait in waits:
        owner = spans.get(wait["parent_span_id"])
        if owner is not None:
            owner.waits.append({**wait, "cause": wait_cause(wait, records)})
    for span in spans.values():
        span.children.sort(key=lambda s: s.start_ns)
    roots.sort(key=lambda s: s.start_ns)
    return roots


def _us(ns: int | None) -> str:
    return "      ?" if ns is None else f"{ns / 1000:7.0f}"


def format_tree(roots: list[Span], t0: int | None = None) -> list[str]:
    """An indented timeline: offset from the trace start, hop, mailbox and handler time."""
    if not roots:
        return []
    if t0 is None:
        t0 = min(r.start_ns for r in roots)
    lines: list[str] = []

    def walk(span: Span, depth: int) -> None:
        net = span.network_ns
        lines.append(
            f"+{(span.start_ns - t0) / 1000:9.0f} us  "
            f"mailbox {_us(span.mailbox_ns)} us  handler {_us(span.handling_ns)} us  "
            f"{'  ' * depth}{span.msg_type}: {span.sender} -> {span.receiver}"
            + (f"  (network {net / 1000:.0f} us)" if net is not None else "")
        )
        for wait in span.waits:
            lines.append(
                f"+{(span.at('recv_ns') - t0) / 1000:9.0f} us  "
                f"waited  {(wait['done_ns'] - wait['recv_ns']) / 1000:7.0f} us"
                f"{' ' * 20}{'  ' * (depth + 1)}{wait['msg_type']} "
                f"at {wait['actor']}@{wait['node']}: {wait['cause']}")
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


def request_traces(records: list[dict[str, Any]],
                   anchors: dict[str, int] | None = None) -> list[RequestTrace]:
    """Every request in the records (a request record, or a KafkaRequest hop whose
    request was never finished), with its stages when the trace is complete."""
    if anchors is None:
        anchors = node_anchors(records)
    by_trace: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        if rec["trace_id"]:
            by_trace[rec["trace_id"]].append(rec)
    out = []
    for tid, recs in by_trace.items():
        req = request_from_trace(tid, recs, anchors)
        if req is not None:
            out.append(req)
    out.sort(key=lambda r: r.t_in)
    return out


def request_from_trace(trace_id: int, recs: list[dict[str, Any]],
                       anchors: dict[str, int]) -> RequestTrace | None:
    def at(rec: dict[str, Any], name: str) -> int:
        return aligned(anchors, rec, name)

    finished = sorted((r for r in recs if r["kind"] == "request"), key=lambda r: r["done_ns"])
    hops = [r for r in recs if r["kind"] == "hop"]
    recv_req = next((r for r in hops if r["msg_type"] == "KafkaRequest"), None)
    if finished:
        first = finished[0]
        req = RequestTrace(trace_id, first["node"], first["actor"], first["sender"],
                           first["conn_id"], first["corr_id"], first["api_key"],
                           at(first, "recv_ns"), at(first, "done_ns"), len(finished))
    elif recv_req is not None:
        # never finished: the handler's record of the request says when it came in
        proc, _sep, node = recv_req["sender"].rpartition("@")
        req = RequestTrace(trace_id, node, proc, "?", recv_req["conn_id"], recv_req["corr_id"],
                           recv_req["api_key"], at(recv_req, "sent_ns"), None, 0)
    else:
        return None
    resp = next((r for r in hops if r["msg_type"] == "KafkaResponse"), None)
    if recv_req is None or resp is None or req.t_out is None:
        return req
    req.handler = f"{recv_req['actor']}@{recv_req['node']}"
    t1, t2, t3 = at(recv_req, "recv_ns"), at(resp, "sent_ns"), at(resp, "recv_ns")
    local = 0
    for r in hops:
        if r["actor"] == recv_req["actor"] and r["node"] == recv_req["node"]:
            local += max(0, min(at(r, "done_ns"), t2) - max(at(r, "recv_ns"), t1))
    req.stages = {
        "request_queue": t1 - req.t_in,
        "local": local,
        "remote": t2 - t1 - local,
        "response_queue": t3 - t2,
        "send": req.t_out - t3,
    }
    return req
