"""`actorlog trace export`: trace events to Perfetto/Chrome JSON or OpenTelemetry JSON.

Perfetto (the Chrome trace event JSON that ui.perfetto.dev opens with no
server): one process track per node, one thread track per actor, one slice
per handled message (receive to done), a short ``send`` slice where each
message was sent, a flow arrow from that send slice to the receiving slice
(one ``bind_id`` per message, ``flow_out`` on the sender,
``flow_in`` on the receiver), and an async ``request`` slice per Kafka
request from net_in to net_out. Times are the aligned times of
``actors/trace/spans.py`` in microseconds from the first event.

OTLP: the OpenTelemetry JSON encoding of ``ExportTraceServiceRequest``: one
resource per node, one span per message (send to done, on the receiving
node) and one server span per Kafka request, parent links from the events.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

from actors.trace.spans import node_anchors
from wire.api_versions import api_snake_name


def _hex(n: int, width: int = 16) -> str:
    return f"{n & ((1 << (4 * width)) - 1):0{width}x}"


def _index(
    events: list[dict[str, Any]],
) -> tuple[dict[str, int], dict[tuple[int, int], dict[str, Any]]]:
    anchors = node_anchors(events)
    spans: dict[tuple[int, int], dict[str, Any]] = defaultdict(dict)
    for ev in events:
        if ev["kind"] in ("send", "recv", "done") and ev["trace_id"]:
            spans[(ev["trace_id"], ev["span_id"])][ev["kind"]] = ev
    return anchors, spans


def to_perfetto(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The Chrome trace event JSON object for these events."""
    if not events:
        return {"traceEvents": [], "displayTimeUnit": "ns"}
    anchors, spans = _index(events)

    def at(ev: dict[str, Any]) -> int:
        return int(ev["mono_ns"] + anchors[ev["node"]])

    t0 = min(at(ev) for ev in events)

    def us(ev: dict[str, Any]) -> float:
        return (at(ev) - t0) / 1000.0

    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}

    def track(node: str, actor: str) -> tuple[int, int]:
        pid = pids.setdefault(node, len(pids) + 1)
        tid = tids.setdefault((node, actor), len(tids) + 1)
        return pid, tid

    out: list[dict[str, Any]] = []
    for flow, ((trace_id, span_id), kinds) in enumerate(spans.items(), 1):
        recv, done, send = kinds.get("recv"), kinds.get("done"), kinds.get("send")
        bind = flow  # small integers: exact in every JSON reader (span ids need 63 bits)
        if recv is not None:
            pid, tid = track(recv["node"], recv["actor"])
            start = us(recv)
            dur = max(0.001, us(done) - start) if done is not None else 0.001
            args: dict[str, Any] = {
                "trace_id": _hex(trace_id),
                "span_id": _hex(span_id),
                "from": recv["peer"],
                "bytes": recv["bytes"],
            }
            if send is not None:
                args["mailbox_us"] = round(start - us(send), 3)
            if recv["corr_id"] >= 0:
                args["corr_id"] = recv["corr_id"]
            ev = {
                "ph": "X",
                "name": recv["msg_type"],
                "cat": "message",
                "pid": pid,
                "tid": tid,
                "ts": start,
                "dur": dur,
                "args": args,
            }
            if send is not None:
                ev.update(bind_id=bind, flow_in=True)
            out.append(ev)
        if send is not None:
            pid, tid = track(send["node"], send["actor"])
            out.append(
                {
                    "ph": "X",
                    "name": f"send {send['msg_type']}",
                    "cat": "send",
                    "pid": pid,
                    "tid": tid,
                    "ts": us(send),
                    "dur": 0.001,
                    "bind_id": bind,
                    "flow_out": True,
                    "args": {"to": send["peer"], "span_id": _hex(span_id)},
                }
            )
    for ev in events:
        if ev["kind"] in ("net_in", "net_out"):
            pid, tid = track(ev["node"], ev["actor"])
            out.append(
                {
                    "ph": "b" if ev["kind"] == "net_in" else "e",
                    "cat": "request",
                    "tid": tid,
                    "name": f"{api_snake_name(ev['api_key'])} conn {ev['conn_id']} "
                            f"corr {ev['corr_id']}",
                    "id": "0x" + _hex(ev["trace_id"]),
                    "pid": pid,
                    "ts": us(ev),
                    "args": {"peer": ev["peer"], "bytes": ev["bytes"]},
                }
            )
    meta = []
    for node, pid in pids.items():
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": node}})
    for (node, actor), tid in tids.items():
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pids[node],
                "tid": tid,
                "args": {"name": actor},
            }
        )
    out.sort(key=lambda e: e["ts"])
    return {"traceEvents": meta + out, "displayTimeUnit": "ns"}


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _request_span_id(trace_id: int) -> str:
    return hashlib.blake2b(trace_id.to_bytes(8, "big"), digest_size=8).hexdigest()


def to_otlp(events: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenTelemetry ``ExportTraceServiceRequest`` in its JSON encoding."""
    anchors, spans = _index(events)

    def at(ev: dict[str, Any]) -> str:
        return str(int(ev["mono_ns"] + anchors[ev["node"]]))

    requests: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for ev in events:
        if ev["kind"] in ("net_in", "net_out") and ev["trace_id"]:
            requests[ev["trace_id"]].setdefault(ev["kind"], ev)
    per_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (trace_id, span_id), kinds in spans.items():
        first = kinds.get("send") or kinds.get("recv") or kinds["done"]
        end = kinds.get("done") or kinds.get("recv") or first
        where = kinds.get("recv") or first
        parent = first["parent_span_id"]
        parent_hex = (
            _hex(parent)
            if parent
            else (_request_span_id(trace_id) if "net_in" in requests.get(trace_id, {}) else "")
        )
        per_node[where["node"]].append(
            {
                "traceId": _hex(trace_id, 32),
                "spanId": _hex(span_id),
                "parentSpanId": parent_hex,
                "name": first["msg_type"],
                "kind": 1,
                "startTimeUnixNano": at(first),
                "endTimeUnixNano": at(end),
                "attributes": [
                    _attr("actorlog.actor", where["actor"]),
                    _attr("actorlog.peer", where["peer"]),
                    _attr("actorlog.bytes", where["bytes"]),
                ],
            }
        )
    for trace_id, ends in requests.items():
        net_in = ends.get("net_in")
        if net_in is None:
            continue
        net_out = ends.get("net_out", net_in)
        per_node[net_in["node"]].append(
            {
                "traceId": _hex(trace_id, 32),
                "spanId": _request_span_id(trace_id),
                "parentSpanId": "",
                "name": f"kafka.{api_snake_name(net_in['api_key'])}",
                "kind": 2,
                "startTimeUnixNano": at(net_in),
                "endTimeUnixNano": at(net_out),
                "attributes": [
                    _attr("messaging.system", "kafka"),
                    _attr("kafka.api_key", net_in["api_key"]),
                    _attr("kafka.correlation_id", net_in["corr_id"]),
                    _attr("actorlog.conn_id", net_in["conn_id"]),
                    _attr("net.peer", net_in["peer"]),
                    _attr("actorlog.answered", "net_out" in ends),
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
