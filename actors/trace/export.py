"""`actorlog trace export`: trace records to Perfetto/Chrome JSON or OpenTelemetry JSON.

Perfetto (the Chrome trace event JSON that ui.perfetto.dev opens with no
server): one process track per node, one thread track per actor, one slice
per handled message (receive to done) on the receiver's track, a short
``send`` slice on the sender's track where it was sent, a flow arrow from that
send slice to the receiving slice (one ``bind_id`` per message, ``flow_out``
on the sender, ``flow_in`` on the receiver), a ``net`` slice on the receiving
gateway's track for a message that crossed nodes, and an async ``request``
slice per Kafka request from net in to net out. Times are the aligned times of
``actors/trace/spans.py`` in microseconds from the first record.

OTLP: the OpenTelemetry JSON encoding of ``ExportTraceServiceRequest``: one
resource per node, one span per message (send to done, on the receiving
node) and one server span per Kafka request, parent links from the records; a
delayed operation (``wait`` record) is a span whose link names the follower fetch
that completed it.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

from actors.trace.spans import aligned, node_anchors, sender_node
from wire.api_versions import api_snake_name


def _hex(n: int, width: int = 16) -> str:
    return f"{n & ((1 << (4 * width)) - 1):0{width}x}"


def to_perfetto(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The Chrome trace event JSON object for these records."""
    fetches = {r["trace_id"]: r for r in records
               if r["kind"] == "hop" and r["msg_type"] == "ReplicaFetch"}
    records = [r for r in records if r["kind"] in ("hop", "net", "request", "wait")]
    if not records:
        return {"traceEvents": [], "displayTimeUnit": "ns"}
    anchors = node_anchors(records)

    def at(rec: dict[str, Any], name: str) -> int:
        return aligned(anchors, rec, name)

    t0 = min(at(r, "sent_ns") for r in records)

    def us(rec: dict[str, Any], name: str) -> float:
        return (at(rec, name) - t0) / 1000.0

    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}

    def track(node: str, actor: str) -> tuple[int, int]:
        pid = pids.setdefault(node, len(pids) + 1)
        tid = tids.setdefault((node, actor), len(tids) + 1)
        return pid, tid

    out: list[dict[str, Any]] = []
    flow = 0
    for rec in records:
        kind = rec["kind"]
        if kind == "request":
            pid, tid = track(rec["node"], rec["actor"])
            name = f"{api_snake_name(rec['api_key'])} conn {rec['conn_id']} corr {rec['corr_id']}"
            common = {"cat": "request", "pid": pid, "tid": tid, "name": name,
                      "id": "0x" + _hex(rec["trace_id"])}
            out.append({**common, "ph": "b", "ts": us(rec, "recv_ns"),
                        "args": {"peer": rec["sender"], "bytes": rec["bytes"]}})
            out.append({**common, "ph": "e", "ts": us(rec, "done_ns"),
                        "args": {"bytes_out": rec["bytes_out"]}})
            continue
        if kind == "net":
            pid, tid = track(rec["node"], rec["actor"])
            start = us(rec, "recv_ns")
            out.append({"ph": "X", "name": f"net {rec['msg_type']}", "cat": "net", "pid": pid,
                        "tid": tid, "ts": start, "dur": max(0.001, us(rec, "done_ns") - start),
                        "args": {"from": rec["sender"], "span_id": _hex(rec["span_id"]),
                                 "network_us": round(start - us(rec, "sent_ns"), 3)}})
            continue
        flow += 1  # small integers: exact in every JSON reader (span ids need 63 bits)
        if kind == "wait":
            _wait_events(out, rec, fetches.get(rec["link_trace_id"]), flow, us, track)
            continue
        pid, tid = track(rec["node"], rec["actor"])
        start = us(rec, "recv_ns")
        args: dict[str, Any] = {
            "trace_id": _hex(rec["trace_id"]),
            "span_id": _hex(rec["span_id"]),
            "from": rec["sender"],
            "bytes": rec["bytes"],
            "mailbox_us": round(start - us(rec, "sent_ns"), 3),
        }
        if rec["corr_id"] >= 0:
            args["corr_id"] = rec["corr_id"]
        out.append({"ph": "X", "name": rec["msg_type"], "cat": "message", "pid": pid, "tid": tid,
                    "ts": start, "dur": max(0.001, us(rec, "done_ns") - start), "args": args,
                    "bind_id": flow, "flow_in": True})
        s_name = rec["sender"].rpartition("@")[0] or rec["sender"]
        spid, stid = track(sender_node(rec), s_name)
        out.append({"ph": "X", "name": f"send {rec['msg_type']}", "cat": "send", "pid": spid,
                    "tid": stid, "ts": us(rec, "sent_ns"), "dur": 0.001, "bind_id": flow,
                    "flow_out": True, "args": {"to": f"{rec['actor']}@{rec['node']}",
                                               "span_id": _hex(rec["span_id"])}})
    meta = []
    for node, pid in pids.items():
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": node}})
    for (node, actor), tid in tids.items():
        meta.append({"ph": "M", "name": "thread_name", "pid": pids[node], "tid": tid,
                     "args": {"name": actor}})
    out.sort(key=lambda e: e["ts"])
    return {"traceEvents": meta + out, "displayTimeUnit": "ns"}


def _wait_events(out: list[dict[str, Any]], rec: dict[str, Any], fetch: dict[str, Any] | None,
                 flow: int, us: Any, track: Any) -> None:
    """A delayed operation: a slice on the purgatory's track for the wait; when a
    follower's replica fetch completed it, a ``completed`` slice at its end and a flow
    from that fetch (a slice where the follower's fetcher sent it) to it."""
    pid, tid = track(rec["node"], rec["actor"])
    start, end = us(rec, "recv_ns"), us(rec, "done_ns")
    out.append({"ph": "X", "name": rec["msg_type"], "cat": "wait", "pid": pid, "tid": tid,
                "ts": start, "dur": max(0.001, end - start),
                "args": {"trace_id": _hex(rec["trace_id"]), "detail": rec["detail"]}})
    if fetch is None:
        return
    fetcher, _sep, node = fetch["sender"].rpartition("@")
    args = {"fetch_trace_id": _hex(rec["link_trace_id"]), "follower": node,
            "fetcher": fetcher, "fetch_offset": rec["offset"]}
    out.append({"ph": "X", "name": f"{rec['msg_type']} completed", "cat": "ack", "pid": pid,
                "tid": tid, "ts": max(start, end - 0.001), "dur": 0.001, "bind_id": flow,
                "flow_in": True, "args": {**args, "trace_id": _hex(rec["trace_id"])}})
    fpid, ftid = track(node, fetcher)
    out.append({"ph": "X", "name": f"replica fetch at offset {rec['offset']}", "cat": "ack",
                "pid": fpid, "tid": ftid, "ts": us(fetch, "sent_ns"), "dur": 0.001,
                "bind_id": flow, "flow_out": True,
                "args": {**args, "acknowledged": _hex(rec["trace_id"])}})


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _request_span_id(trace_id: int) -> str:
    return hashlib.blake2b(trace_id.to_bytes(8, "big"), digest_size=8).hexdigest()


def to_otlp(records: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenTelemetry ``ExportTraceServiceRequest`` in its JSON encoding."""
    anchors = node_anchors(records)

    def at(rec: dict[str, Any], name: str) -> str:
        return str(aligned(anchors, rec, name))

    requests: dict[int, dict[str, Any]] = {}
    for rec in records:
        if rec["kind"] == "request" and rec["trace_id"]:
            requests.setdefault(rec["trace_id"], rec)
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        if rec["kind"] == "wait" and rec["trace_id"]:
            # a delayed operation; the follower fetch that completed it as a span link
            links = ([{"traceId": _hex(rec["link_trace_id"], 32),
                       "spanId": _hex(rec["link_span_id"])}] if rec["link_trace_id"] else [])
            per_node[rec["node"]].append({
                "traceId": _hex(rec["trace_id"], 32), "spanId": _hex(rec["span_id"]),
                "parentSpanId": _hex(rec["parent_span_id"]) if rec["parent_span_id"] else "",
                "name": rec["msg_type"], "kind": 1,
                "startTimeUnixNano": at(rec, "recv_ns"), "endTimeUnixNano": at(rec, "done_ns"),
                "attributes": [_attr("actorlog.actor", rec["actor"]),
                               _attr("actorlog.detail", rec["detail"]),
                               _attr("actorlog.fetch_offset", rec["offset"])],
                "links": links,
            })
            continue
        if rec["kind"] != "hop" or not rec["trace_id"]:
            continue
        trace_id, parent = rec["trace_id"], rec["parent_span_id"]
        parent_hex = (
            _hex(parent) if parent
            else (_request_span_id(trace_id) if trace_id in requests else "")
        )
        per_node[rec["node"]].append(
            {
                "traceId": _hex(trace_id, 32),
                "spanId": _hex(rec["span_id"]),
                "parentSpanId": parent_hex,
                "name": rec["msg_type"],
                "kind": 1,
                "startTimeUnixNano": at(rec, "sent_ns"),
                "endTimeUnixNano": at(rec, "done_ns"),
                "attributes": [
                    _attr("actorlog.actor", rec["actor"]),
                    _attr("actorlog.peer", rec["sender"]),
                    _attr("actorlog.bytes", rec["bytes"]),
                ],
            }
        )
    for trace_id, req in requests.items():
        per_node[req["node"]].append(
            {
                "traceId": _hex(trace_id, 32),
                "spanId": _request_span_id(trace_id),
                "parentSpanId": "",
                "name": f"kafka.{api_snake_name(req['api_key'])}",
                "kind": 2,
                "startTimeUnixNano": at(req, "recv_ns"),
                "endTimeUnixNano": at(req, "done_ns"),
                "attributes": [
                    _attr("messaging.system", "kafka"),
                    _attr("kafka.api_key", req["api_key"]),
                    _attr("kafka.correlation_id", req["corr_id"]),
                    _attr("actorlog.conn_id", req["conn_id"]),
                    _attr("net.peer", req["sender"]),
                    _attr("actorlog.answered", req["bytes_out"] > 0),
                ],
            }
        )
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [_attr("service.name", "actorlog"), _attr("host.name", node)]
                },
                "scopeSpans": [{"scope": {"name": "actorlog.trace"}, "spans": sp}],
            }
            for node, sp in sorted(per_node.items())
        ]
    }
