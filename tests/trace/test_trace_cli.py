"""trace show / find / tail / export on a real broker's traces, and the pieces underneath."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from actors.cli import cli
from actors.runtime.tracing import Tracer
from actors.trace.export import to_otlp, to_perfetto
from actors.trace.spans import STAGES, request_from_trace, request_traces
from actors.trace.store import SegmentFollower, read_rows, read_trace_dirs, to_parquet
from tests.fixtures.traces import PRODUCED
from wire import trace_format as tf


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["trace", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _produce_ids(data: Path) -> list[int]:
    events = read_trace_dirs([data])
    return [
        e["trace_id"]
        for e in sorted(events, key=lambda e: e["mono_ns"])
        if e["kind"] == "net_in" and e["api_key"] == 0
    ]


def test_show_prints_every_stage_and_hop_of_a_produce(real_traces: Path) -> None:
    ids = _produce_ids(real_traces)
    assert len(ids) == PRODUCED
    out = _run("show", str(ids[-1]), "--dir", str(real_traces))
    assert "request produce (api 0)" in out
    stages = re.search(r"total (\d+) us = " + r" \+ ".join(rf"{s} (-?\d+) us" for s in STAGES), out)
    assert stages, out
    total, parts = int(stages.group(1)), [int(x) for x in stages.groups()[1:]]
    assert all(p >= 0 for p in parts)
    assert abs(sum(parts) - total) <= len(parts)  # each part is rounded to a microsecond
    lines = out.splitlines()
    hops = [ln for ln in lines if "mailbox" in ln]
    assert [h.split(" us  ", 3)[-1].split(":")[0].strip() for h in hops] == [
        "KafkaRequest",
        "Append",
        "AppendDone",
        "KafkaResponse",
    ]
    assert "net_in" in lines[3] and "net_out" in lines[-1]
    # the tree indents each hop under its cause
    depths = [len(h.split(" us  ", 3)[-1]) - len(h.split(" us  ", 3)[-1].lstrip()) for h in hops]
    assert depths == sorted(depths) and depths[0] < depths[-1]


def test_request_stages_add_up_for_every_answered_request(real_traces: Path) -> None:
    reqs = [r for r in request_traces(read_trace_dirs([real_traces])) if r.stages is not None]
    assert {r.api for r in reqs} >= {"produce", "fetch", "metadata"}
    for r in reqs:
        assert sum(r.stages.values()) == r.total_ns  # type: ignore[union-attr]
        assert min(r.stages.values()) >= 0  # type: ignore[union-attr]


def test_stages_from_hand_built_events() -> None:
    def ev(kind: str, t: int, actor: str, msg: str, span: int = 0, parent: int = 0) -> dict:
        return dict(
            kind=kind,
            trace_id=7,
            span_id=span,
            parent_span_id=parent,
            node="n",
            actor=actor,
            peer="x",
            msg_type=msg,
            conn_id=1,
            corr_id=3,
            api_key=0,
            bytes=0,
            mono_ns=t,
            wall_ns=t + 1000,
            clock_offset_ns=0,
        )

    events = [
        ev("net_in", 0, "p", "request"),
        ev("send", 10, "p", "KafkaRequest", 1),
        ev("recv", 100, "h", "KafkaRequest", 1),
        ev("send", 130, "h", "Append", 2, 1),
        ev("done", 150, "h", "KafkaRequest", 1),
        ev("recv", 200, "s", "Append", 2, 1),
        ev("send", 260, "s", "AppendDone", 3, 2),
        ev("done", 270, "s", "Append", 2, 1),
        ev("recv", 400, "h", "AppendDone", 3, 2),
        ev("send", 440, "h", "KafkaResponse", 4, 3),
        ev("done", 460, "h", "AppendDone", 3, 2),
        ev("recv", 500, "p", "KafkaResponse", 4, 3),
        ev("net_out", 530, "p", "response"),
    ]
    req = request_from_trace(7, events, {"n": 1000})
    assert req is not None and req.total_ns == 530
    # local: handler busy 100..150 and 400..440 (clipped at the response send)
    assert req.stages == {
        "request_queue": 100,
        "local": 90,
        "remote": 250,
        "response_queue": 60,
        "send": 30,
    }


def test_find_lists_the_slowest_produces_first(real_traces: Path) -> None:
    out = _run("find", "--dir", str(real_traces), "--slowest", "3", "--api", "produce")
    rows = [ln for ln in out.splitlines() if " produce " in ln]
    assert len(rows) == 3
    totals = [int(re.search(r"total (\d+) us", r).group(1)) for r in rows]  # type: ignore[union-attr]
    assert totals == sorted(totals, reverse=True)
    bad = CliRunner().invoke(cli, ["trace", "find", "--dir", str(real_traces), "--api", "nope"])
    assert bad.exit_code != 0 and "unknown API" in bad.output


def test_tail_prints_finished_requests(real_traces: Path) -> None:
    out = _run("tail", "--dir", str(real_traces), "--from-start", "--seconds", "0")
    assert sum(" produce " in ln for ln in out.splitlines()) == PRODUCED


def test_follower_reads_only_what_was_appended_since_the_last_poll(tmp_path: Path) -> None:
    tracer = Tracer("n1", tmp_path / "traces", sample_ratio=1.0)
    tracer.start()
    try:
        follower = SegmentFollower([tmp_path])
        assert follower.poll() == []
        tracer.event("send", 5, 6, 0, "a", "b@n1", "Ping")
        tracer.flush()
        assert [e["kind"] for e in follower.poll()] == ["send"]
        tracer.event("recv", 5, 6, 0, "b", "a@n1", "Ping")
        tracer.event("done", 5, 6, 0, "b", "a@n1", "Ping")
        tracer.flush()
        assert [e["kind"] for e in follower.poll()] == ["recv", "done"]
        assert follower.poll() == []
        late = SegmentFollower([tmp_path], from_end=True)  # `tail` without --from-start
        assert late.poll() == []
    finally:
        tracer.close()


def test_perfetto_export_has_a_track_per_actor_and_a_flow_per_message(
    real_traces: Path, tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    _run("export", "--format", "perfetto", "--dir", str(real_traces), str(out))
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    events = read_trace_dirs([real_traces])
    procs = {e["args"]["name"]: e["pid"] for e in evs if e.get("name") == "process_name"}
    threads = {(e["pid"], e["args"]["name"]) for e in evs if e.get("name") == "thread_name"}
    actors = {(procs[e["node"]], e["actor"]) for e in events}
    assert threads == actors
    assert len({t for t in threads}) == len([e for e in evs if e.get("name") == "thread_name"])
    outs = {e["bind_id"]: e for e in evs if e.get("flow_out")}
    ins = {e["bind_id"]: e for e in evs if e.get("flow_in")}
    sends = [e for e in events if e["kind"] == "send" and e["trace_id"]]
    assert len(outs) == len(sends) == len({(e["trace_id"], e["span_id"]) for e in sends})
    assert set(ins) == set(outs)  # every traced message was received
    assert all(ins[b]["ts"] >= outs[b]["ts"] for b in outs)  # arrows point forward
    handled = [e for e in evs if e.get("ph") == "X" and e["cat"] == "message"]
    assert len(handled) == sum(1 for e in events if e["kind"] == "recv")


def test_export_aligns_two_nodes_with_skewed_clocks() -> None:
    """Node b's wall clock is 5 ms behind; its offset estimate puts its events back in line."""

    def ev(kind: str, node: str, mono: int, wall: int, off: int, actor: str) -> dict:
        return dict(
            kind=kind,
            trace_id=1,
            span_id=9,
            parent_span_id=0,
            node=node,
            actor=actor,
            peer="?",
            msg_type="Hop",
            conn_id=-1,
            corr_id=-1,
            api_key=-1,
            bytes=0,
            mono_ns=mono,
            wall_ns=wall,
            clock_offset_ns=off,
        )

    skew = 5_000_000
    events = [
        ev("send", "a", 100, 1_000_000_000, 0, "x"),
        ev("recv", "b", 777_000, 1_000_050_000 - skew, skew, "y"),
        ev("done", "b", 787_000, 1_000_060_000 - skew, skew, "y"),
    ]
    doc = to_perfetto(events)
    slices = {e["cat"]: e for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert slices["message"]["ts"] - slices["send"]["ts"] == pytest.approx(50.0)
    assert slices["message"]["dur"] == pytest.approx(10.0)
    otlp = to_otlp(events)
    (span,) = [s for r in otlp["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    assert int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"]) == 60_000


def test_otlp_export_parents_resolve(real_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "otlp.json"
    _run("export", "--format", "otlp", "--dir", str(real_traces), str(out))
    doc = json.loads(out.read_text())
    spans = [s for r in doc["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    ids = {(s["traceId"], s["spanId"]) for s in spans}
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in spans)
    assert all((s["traceId"], s["parentSpanId"]) in ids for s in spans if s["parentSpanId"])
    assert sum(s["name"] == "kafka.produce" for s in spans) == PRODUCED
    assert all(int(s["endTimeUnixNano"]) >= int(s["startTimeUnixNano"]) for s in spans)


def test_torn_tail_is_dropped_and_parquet_segments_are_reused(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    d = tmp_path / "traces"
    d.mkdir()
    seg = d / f"n-1-1-000001{tf.FILE_SUFFIX}"
    header = {
        "format": tf.FORMAT_NAME,
        "version": tf.FORMAT_VERSION,
        "fields": list(tf.FIELDS),
        "node": "n",
        "pid": 1,
        "started_wall_ns": 0,
    }
    row = ["send", 1, 2, 0, "n", "a", "b@n", "Hop", -1, -1, -1, 0, 10, 20, 0]
    whole = msgpack.packb(header) + msgpack.packb(row) * 3
    seg.write_bytes(whole + msgpack.packb(row)[:-3])  # a crash mid-event
    assert len(read_rows(seg)[1]) == 3
    paths, counts = to_parquet([tmp_path], tmp_path / "staging", workers=1)
    assert counts == {"segments": 1, "converted": 1, "reused": 0}
    assert pq.read_table(paths[0]).num_rows == 3
    assert to_parquet([tmp_path], tmp_path / "staging")[1]["reused"] == 1
    bad = d / f"n-1-1-000002{tf.FILE_SUFFIX}"
    bad.write_bytes(msgpack.packb({**header, "version": 99}))
    with pytest.raises(ValueError, match="version 99 is not supported"):
        read_rows(bad)


def test_analyze_says_how_to_install_spark_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from actors.cli import cli

    monkeypatch.setitem(sys.modules, "pyspark", None)
    result = CliRunner().invoke(
        cli, ["trace", "analyze", str(tmp_path), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code != 0
    assert "pip install 'actorlog[spark]'" in result.output and "pyspark" in result.output
