"""trace show / list / find / tail / export on a real broker's traces, and the pieces underneath."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from click.testing import CliRunner

from actors.cli import cli
from actors.runtime.tracing import Tracer
from actors.trace.export import to_otlp, to_perfetto
from actors.trace.spans import (
    STAGES,
    build_spans,
    causal,
    format_tree,
    node_anchors,
    request_from_trace,
    request_traces,
)
from actors.trace.store import SegmentFollower, parquet_inputs, read_trace_dirs, segments
from tests.fixtures.traces import PRODUCED
from wire import trace_format as tf
from wire import trace_parquet as tp


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["trace", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _produce_ids(data: Path) -> list[int]:
    records = read_trace_dirs([data])
    return [
        r["trace_id"]
        for r in sorted(records, key=lambda r: r["recv_ns"])
        if r["kind"] == "request" and r["api_key"] == 0
    ]


def rec(kind: str, sent: int, recv: int, done: int, actor: str, sender: str, msg: str,
        span: int = 0, parent: int = 0, node: str = "n", offset: int = 0,
        trace_id: int = 7) -> dict[str, Any]:
    return dict(kind=kind, trace_id=trace_id, span_id=span, parent_span_id=parent, node=node,
                actor=actor, sender=sender, msg_type=msg, conn_id=1, corr_id=3, api_key=0,
                bytes=0, bytes_out=0, sent_ns=sent, recv_ns=recv, done_ns=done,
                clock_offset_ns=offset, link_trace_id=0, link_span_id=0, offset=-1, detail="")


def test_a_produce_writes_one_record_per_hop(real_traces: Path) -> None:
    records = read_trace_dirs([real_traces])
    for tid in _produce_ids(real_traces):
        mine = [r for r in records if r["trace_id"] == tid]
        assert sorted((r["kind"], r["msg_type"]) for r in mine) == [
            ("hop", "Append"), ("hop", "AppendDone"), ("hop", "KafkaRequest"),
            ("hop", "KafkaResponse"), ("request", "produce")]
        for r in mine:
            assert r["sent_ns"] <= r["recv_ns"] <= r["done_ns"]
    assert {r["node"] for r in records} == {"1"} or len({r["node"] for r in records}) == 1


def test_the_node_files_are_parquet_that_pyarrow_reads(real_traces: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    files = segments([real_traces])
    assert files and all(f.name.endswith(tf.FILE_SUFFIX) for f in files)
    table = pq.read_table(files[0])
    assert table.column_names == list(tf.FIELDS)
    ours = tp.scan(files[0].read_bytes())
    assert ours.footer_start is not None  # the broker closed it at shutdown
    rows = [row for rg in ours.row_groups for row in tp.iter_rows(rg)]
    assert [tuple(r.values()) for r in table.to_pylist()] == rows


def test_show_prints_every_stage_and_hop_of_a_produce(real_traces: Path) -> None:
    ids = _produce_ids(real_traces)
    assert len(ids) == PRODUCED
    out = _run("show", str(ids[-1]), "--dir", str(real_traces))
    assert "request produce (api 0)" in out
    assert f"trace {ids[-1]} (5 records)" in out
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


def test_list_names_recent_traces(real_traces: Path) -> None:
    out = _run("list", "--dir", str(real_traces), "--limit", "5")
    rows = out.splitlines()
    assert len(rows) == 5
    ids = {r["trace_id"] for r in read_trace_dirs([real_traces])}
    assert all(int(row.split()[0]) in ids for row in rows)


def test_request_stages_add_up_for_every_answered_request(real_traces: Path) -> None:
    reqs = [r for r in request_traces(read_trace_dirs([real_traces])) if r.stages is not None]
    assert {r.api for r in reqs} >= {"produce", "fetch", "metadata"}
    for r in reqs:
        assert sum(r.stages.values()) == r.total_ns  # type: ignore[union-attr]
        assert min(r.stages.values()) >= 0  # type: ignore[union-attr]


def test_stages_from_hand_built_records() -> None:
    records = [
        rec("request", 0, 0, 530, "p", "10.0.0.1:5", "produce"),
        rec("hop", 10, 100, 150, "h", "p@n", "KafkaRequest", 1),
        rec("hop", 130, 200, 270, "s", "h@n", "Append", 2, 1),
        rec("hop", 260, 400, 460, "h", "s@n", "AppendDone", 3, 2),
        rec("hop", 440, 500, 510, "p", "h@n", "KafkaResponse", 4, 3),
    ]
    req = request_from_trace(7, records, {"n": 1000})
    assert req is not None and req.total_ns == 530
    # local: handler busy 100..150 and 400..440 (clipped at the response send)
    assert req.stages == {
        "request_queue": 100,
        "local": 90,
        "remote": 250,
        "response_queue": 60,
        "send": 30,
    }
    # an unfinished request still shows up, from the handler's record of it
    unfinished = request_from_trace(7, records[1:3], {"n": 0})
    assert unfinished is not None and unfinished.t_out is None and unfinished.t_in == 10


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
    rows = [ln for ln in out.splitlines() if " produce " in ln]
    assert len(rows) == PRODUCED
    assert all(" = request_queue " in ln for ln in rows)  # stages whole for every one


def test_follower_reads_a_file_while_it_is_written(tmp_path: Path) -> None:
    tracer = Tracer("n1", tmp_path / "traces", sample_ratio=1.0)
    tracer.start()
    try:
        follower = SegmentFollower([tmp_path])
        assert follower.poll() == []
        tracer.hop(5, 6, 0, "b", "a@n1", "Ping", -1, -1, -1, 0, 1, 2, 3)
        tracer.flush()
        (path,) = segments([tmp_path])
        assert tp.footer_start(path.read_bytes()) is None  # still open: no footer yet
        assert [(r["kind"], r["msg_type"]) for r in follower.poll()] == [("hop", "Ping")]
        tracer.hop(5, 7, 6, "a", "b@n1", "Pong", -1, -1, -1, 0, 4, 5, 6)
        tracer.record("request", 5, 0, 0, "p", "127.0.0.1:1", "produce", 1, 2, 0, 10, 20,
                      sent_ns=0, recv_ns=0, done_ns=7)
        tracer.flush()
        assert [r["msg_type"] for r in follower.poll()] == ["Pong", "produce"]
        assert follower.poll() == []
        late = SegmentFollower([tmp_path], from_end=True)  # `tail` without --from-start
        assert late.poll() == []
    finally:
        tracer.close()
    assert tp.footer_start(path.read_bytes()) is not None  # closed: a complete Parquet file


def test_perfetto_export_has_a_track_per_actor_and_a_flow_per_message(
    real_traces: Path, tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    _run("export", "--format", "perfetto", "--dir", str(real_traces), str(out))
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    records = read_trace_dirs([real_traces])
    hops = [r for r in records if r["kind"] == "hop"]
    procs = {e["args"]["name"]: e["pid"] for e in evs if e.get("name") == "process_name"}
    threads = {(e["pid"], e["args"]["name"]) for e in evs if e.get("name") == "thread_name"}
    receivers = {(procs[r["node"]], r["actor"]) for r in hops}
    senders = {(procs[r["sender"].rpartition("@")[2]], r["sender"].rpartition("@")[0])
               for r in hops}
    assert threads == receivers | senders | {(procs[r["node"]], r["actor"]) for r in records
                                             if r["kind"] == "request"}
    outs = {e["bind_id"]: e for e in evs if e.get("flow_out")}
    ins = {e["bind_id"]: e for e in evs if e.get("flow_in")}
    assert len(outs) == len(ins) == len(hops)  # one arrow per traced message
    assert all(ins[b]["ts"] >= outs[b]["ts"] for b in outs)  # arrows point forward
    requests = [e for e in evs if e.get("cat") == "request"]
    assert sum(e["ph"] == "b" for e in requests) == sum(r["kind"] == "request" for r in records)


def test_export_aligns_two_nodes_with_skewed_clocks() -> None:
    """Node b's wall clock is 5 ms behind; its offset estimate puts its records back in line."""
    skew = 5_000_000
    t = 1_000_000_000
    records = [
        rec("hop", t - 40_000 - skew, t - 30_000, t - 20_000, "x", "y@b", "Hop", 8,
            node="a"),
        rec("hop", t, t + 50_000 - skew, t + 60_000 - skew, "y", "x@a", "Hop", 9, 8, node="b",
            offset=skew),
        rec("net", t, t + 20_000 - skew, t + 21_000 - skew, "_gateway", "x@a", "Hop", 9, 8,
            node="b", offset=skew),
    ]
    doc = to_perfetto(records)
    msg = next(e for e in doc["traceEvents"] if e.get("cat") == "message" and e["pid"] == 2)
    send = next(e for e in doc["traceEvents"]
                if e.get("cat") == "send" and e["bind_id"] == msg["bind_id"])
    assert msg["ts"] - send["ts"] == pytest.approx(50.0)
    assert msg["dur"] == pytest.approx(10.0)
    net = next(e for e in doc["traceEvents"] if e.get("cat") == "net")
    assert net["args"]["network_us"] == pytest.approx(20.0)
    otlp = to_otlp(records)
    spans = {s["spanId"]: s for r in otlp["resourceSpans"] for sc in r["scopeSpans"]
             for s in sc["spans"]}
    span = spans[f"{9:016x}"]
    assert int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"]) == 60_000
    lines = format_tree(build_spans(records, 7))  # the network leg of the crossing hop
    assert "(network 20 us)" in lines[1] and "mailbox      50 us" in lines[1]


def test_anchors_keep_every_crossing_in_order_when_the_estimate_is_off() -> None:
    """Node b's clock is 5 ms behind but its estimate says 3 ms (a loaded host's round
    trips): a message a -> b taking 100 us, one b -> a taking 300 us. The estimate alone
    puts the first arrival 1.9 ms before its send; the crossings bound b's anchor to
    [4.9, 5.3] ms, so it moves to 4.9 ms and the reference node a stays put."""
    skew, guess = 5_000_000, 3_000_000
    t = 1_000_000_000
    records = [
        rec("hop", t, t + 100_000 - skew, t + 110_000 - skew, "y", "x@a", "Hop", 9, 8,
            node="b", offset=guess),
        rec("hop", t + 200_000 - skew, t + 500_000, t + 510_000, "x", "y@b", "Hop", 10, 9,
            node="a"),
    ]
    assert node_anchors(records) == {"a": 0, "b": skew - 100_000}
    assert causal({"a": 0, "b": 7_000_000}, {("a", "b"): 4_900_000,
                                             ("b", "a"): -5_300_000}) == {"a": 0, "b": 5_300_000}
    # contradicting bounds (a clock that drifted) end after a few passes
    assert set(causal({"a": 0, "b": 0}, {("a", "b"): 10, ("b", "a"): 10})) == {"a", "b"}
    doc = to_perfetto(records)
    flows = {e["bind_id"]: e for e in doc["traceEvents"] if e.get("flow_out")}
    for e in doc["traceEvents"]:
        if e.get("flow_in"):
            assert flows[e["bind_id"]]["ts"] <= e["ts"], (flows[e["bind_id"]], e)


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


def _write_file(path: Path, rows: list[tuple[Any, ...]], close: bool) -> None:
    with open(path, "wb") as f:
        w = tp.SegmentWriter(f, {"node": "n", "pid": 1, "started_wall_ns": 0})
        for row in rows:
            w.write_rows([row])
        if close:
            w.close()


def test_torn_tail_is_skipped_and_open_files_are_salvaged_for_spark(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    d = tmp_path / "traces"
    d.mkdir()
    rows = [tuple(rec("hop", i, i + 1, i + 2, "a", "b@n", "Hop", i + 1).values())
            for i in range(5)]
    closed, open_, torn = (d / f"n-{k}-1-000001{tf.FILE_SUFFIX}" for k in (1, 2, 3))
    _write_file(closed, rows, close=True)
    _write_file(open_, rows, close=False)
    _write_file(torn, rows, close=False)
    data = torn.read_bytes()
    torn.write_bytes(data[:-7])  # a crash in the middle of the last row group
    by_file = {p.name: len(tp.scan(p.read_bytes()).row_groups) for p in (closed, open_, torn)}
    assert by_file == {closed.name: 5, open_.name: 5, torn.name: 4}
    assert len(read_trace_dirs([tmp_path])) == 14
    paths, counts = parquet_inputs([tmp_path], tmp_path / "staging")
    assert counts == {"files": 3, "direct": 1, "salvaged": 2, "converted": 0, "reused": 0}
    assert paths[0] == closed  # read where it lies
    assert [pq.read_table(p).num_rows for p in paths] == [5, 5, 4]
    bad = d / f"n-4-1-000001{tf.FILE_SUFFIX}"
    bad.write_bytes(tp.MAGIC + tf.HEADER_MAGIC + b"\x02\x00\x00\x00{}")
    with pytest.raises(ValueError, match="not an actorlog trace file"):
        read_trace_dirs([bad])


def test_version_1_files_are_still_read(tmp_path: Path) -> None:
    """A msgpack file from before one-record-per-hop reads as hops and requests."""
    d = tmp_path / "traces"
    d.mkdir()
    header = {"format": tf.FORMAT_NAME, "version": 1, "fields": list(tf.V1_FIELDS),
              "node": "n", "pid": 1, "started_wall_ns": 0}

    def ev(kind: str, span: int, parent: int, actor: str, peer: str, msg: str, t: int) -> list:
        return [kind, 7, span, parent, "n", actor, peer, msg, 1, 3, 0, 10, t, t + 100, 0]

    events = [
        ev("net_in", 0, 0, "p", "1.2.3.4:5", "request", 0),
        ev("send", 1, 0, "p", "h@n", "KafkaRequest", 10),
        ev("recv", 1, 0, "h", "p@n", "KafkaRequest", 100),
        ev("send", 4, 1, "h", "p@n", "KafkaResponse", 130),
        ev("done", 1, 0, "h", "p@n", "KafkaRequest", 150),
        ev("recv", 4, 1, "p", "h@n", "KafkaResponse", 200),
        ev("net_out", 0, 0, "p", "1.2.3.4:5", "response", 230),
        ev("done", 4, 1, "p", "h@n", "KafkaResponse", 240),
    ]
    path = d / f"n-1-1-000001{tf.V1_FILE_SUFFIX}"
    path.write_bytes(msgpack.packb(header) + b"".join(msgpack.packb(e) for e in events)
                     + msgpack.packb(events[0])[:-2])  # and a torn tail
    records = read_trace_dirs([tmp_path])
    assert sorted((r["kind"], r["msg_type"]) for r in records) == [
        ("hop", "KafkaRequest"), ("hop", "KafkaResponse"), ("request", "produce")]
    (req,) = request_traces(records)
    assert req.stages == {"request_queue": 100, "local": 30, "remote": 0,
                          "response_queue": 70, "send": 30}
    out = _run("show", "7", "--dir", str(tmp_path))
    assert "request produce (api 0)" in out
    tail = _run("tail", "--dir", str(tmp_path), "--from-start", "--seconds", "0")
    assert " produce " in tail
    pq = pytest.importorskip("pyarrow.parquet")
    paths, counts = parquet_inputs([tmp_path], tmp_path / "staging")
    assert counts["converted"] == 1 and pq.read_table(paths[0]).num_rows == 3
    assert parquet_inputs([tmp_path], tmp_path / "staging")[1]["reused"] == 1


def test_analyze_says_how_to_install_spark_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)
    result = CliRunner().invoke(
        cli, ["trace", "analyze", str(tmp_path), "--out", str(tmp_path / "r")]
    )
    assert result.exit_code != 0
    assert "pip install 'actorlog[spark]'" in result.output and "pyspark" in result.output


def test_a_wait_names_the_follower_fetch_that_completed_it_and_export_draws_the_flow() -> None:
    """Synthetic records of a produce (trace 7, leader n1) whose DelayedProduce a fetch
    of n2's fetcher (trace 9) completed: show's tree and the Perfetto flow name it."""

    produce = [
        rec("hop", 100, 110, 120, "handler-0", "processor-0@n1", "KafkaRequest", 1, 0, "n1"),
        rec("hop", 120, 130, 140, "purgatory-0", "shard-0@n1", "WatchProduce", 2, 1, "n1"),
        rec("hop", 500, 510, 520, "handler-0", "purgatory-0@n1", "ProduceReady", 3, 2, "n1"),
    ]
    wait = {**rec("wait", 130, 130, 500, "purgatory-0", "handler-0@n1", "DelayedProduce",
                  4, 2, "n1"),
            "link_trace_id": 9, "link_span_id": 12, "offset": 5, "detail": "x"}
    fetch = [rec("hop", 300, 320, 330, "handler-1", "replica-fetcher-1-0@n2", "ReplicaFetch",
                 11, 0, "n1", trace_id=9),
             rec("hop", 330, 340, 350, "purgatory-0", "shard-0@n1", "PartitionChanged",
                 12, 11, "n1", trace_id=9)]
    records = [*produce, wait, *fetch]
    lines = format_tree(build_spans(records, 7))
    at = next(i for i, line in enumerate(lines) if "WatchProduce" in line)
    assert "DelayedProduce at purgatory-0@n1: completed by the replica fetch of n2 " \
           "(fetcher replica-fetcher-1-0, fetch offset 5)" in lines[at + 1]
    assert lines[at + 1].split("us  ")[1].split() == ["waited", "0"]  # 370 ns
    events = to_perfetto(records)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    end = next(e for e in events if e.get("cat") == "ack" and e.get("flow_in"))
    start = next(e for e in events if e.get("cat") == "ack" and e.get("flow_out"))
    assert end["bind_id"] == start["bind_id"]
    assert names[end["pid"]] == "n1" and names[start["pid"]] == "n2"
    assert start["args"]["fetch_offset"] == 5 and end["name"] == "DelayedProduce completed"
    assert any(e.get("cat") == "wait" and e["name"] == "DelayedProduce" for e in events)
    spans = [sp for rs in to_otlp(records)["resourceSpans"] for ss in rs["scopeSpans"]
             for sp in ss["spans"]]
    waited = next(sp for sp in spans if sp["name"] == "DelayedProduce")
    assert waited["links"] == [{"traceId": f"{9:032x}", "spanId": f"{12:016x}"}]
    assert waited["parentSpanId"] == f"{2:016x}"


def test_a_file_that_is_no_trace_file_and_an_unwritable_out_are_one_line(
        real_traces: Path, tmp_path: Path) -> None:
    """As every command's mistakes: one line and exit status 1, no traceback."""
    import subprocess

    (tmp_path / "node-9-1-1-000001.trace.parquet").write_bytes(b"not parquet\n")
    unreadable = tmp_path / "unreadable"
    (unreadable / "node-9-1-1-000002.trace.parquet").mkdir(parents=True)
    root = Path(__file__).resolve().parents[2]
    for args, said in (
            (["list", "--dir", str(tmp_path)], "not an actorlog trace file"),
            (["list", "--dir", str(unreadable)], "Is a directory"),
            (["find", "--dir", str(tmp_path), "--slowest", "3"], "not an actorlog trace file"),
            (["export", "--format", "perfetto", "--dir", str(real_traces),
              str(tmp_path / "missing" / "out.json")], "cannot write")):
        done = subprocess.run([sys.executable, "-m", "actors.cli", "trace", *args], cwd=root,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
