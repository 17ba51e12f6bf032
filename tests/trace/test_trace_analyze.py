"""trace analyze (local Spark) on a real broker's traces, and on a copy with planted faults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from actors.trace.spans import STAGES, request_traces
from actors.trace.store import read_file, read_trace_dirs, segments, write_records
from tests.fixtures.traces import PRODUCED

pytestmark = pytest.mark.slow  # Spark's start alone takes 10-40 s on a busy 2-core machine


def _plant_faults(src: Path, dst: Path) -> tuple[int, int]:
    """Swap the net-out times of two produces of one connection; answer a third one twice."""
    shutil.copytree(src, dst)
    (seg,) = segments([dst])
    meta, records = read_file(seg)
    produces = sorted((r for r in records if r["kind"] == "request" and r["api_key"] == 0),
                      key=lambda r: r["recv_ns"])
    conn = produces[0]["conn_id"]
    first, second, third = [r for r in produces if r["conn_id"] == conn][:3]
    first["done_ns"], second["done_ns"] = second["done_ns"], first["done_ns"]
    records.append({**third, "done_ns": third["done_ns"] + 1000})
    seg.unlink()
    write_records(seg, records, {"node": meta.get("node", "")})
    return first["trace_id"], third["trace_id"]


def test_stages_add_up_and_tables_are_complete(
    real_traces: Path, spark: object, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from actors.trace.analyze import analyze

    summary = analyze([real_traces], tmp_path / "report", spark=spark)
    assert summary["inputs"]["direct"] == summary["inputs"]["files"] >= 1  # read in place
    req = pq.read_table(tmp_path / "report" / "requests").to_pylist()
    produces = [r for r in req if r["api"] == "produce"]
    assert len(produces) == PRODUCED
    complete = [r for r in req if r["send_ns"] is not None]
    assert len(complete) >= len(req) - 2  # a consumer's last fetch may be cut off at shutdown
    for r in complete:
        parts = [r[f"{s}_ns"] for s in STAGES]
        assert sum(parts) == r["total_ns"]
        assert min(parts) >= 0
        assert r["handler"].startswith("handler-")
    # Spark's stages equal the ones `trace show` computes in Python
    py = {r.trace_id: r for r in request_traces(read_trace_dirs([real_traces]))}
    for r in complete:
        assert py[r["trace_id"]].stages == {s: r[f"{s}_ns"] for s in STAGES}
    assert summary["violation_count"] == 0
    assert summary["per_api_us"]["produce"]["requests"] == PRODUCED

    actors = {a["actor"]: a for a in pq.read_table(tmp_path / "report" / "actors").to_pylist()}
    handlers = [a for name, a in actors.items() if name.startswith("handler")]
    assert handlers and any(name.startswith("processor") for name in actors)
    assert sum(a["messages"] for a in handlers) >= 2 * PRODUCED  # request, AppendDone, ...
    for a in actors.values():
        assert 0 <= a["busy_fraction"] <= 1
        assert a["handling_p50_us"] <= a["handling_p99_us"] * 1.05 + 1
    # percentile_approx against exact percentiles of the same hops, with a tolerance
    records = read_trace_dirs([real_traces])
    handling = sorted((r["done_ns"] - r["recv_ns"]) / 1000 for r in records
                      if r["kind"] == "hop" and r["actor"] == handlers[0]["actor"])
    exact = handling[len(handling) // 2]
    assert handlers[0]["handling_p50_us"] == pytest.approx(exact, rel=0.25, abs=50)
    assert handlers[0]["messages"] == len(handling)

    seconds = pq.read_table(tmp_path / "report" / "seconds").to_pylist()
    assert sum(s["requests"] for s in seconds if s["api"] == "produce") == PRODUCED
    html = (tmp_path / "report" / "report.html").read_text()
    assert "produce" in html and "No violations." in html
    for png in ("latency_produce.png", "throughput.png", "mailbox.png"):
        assert (tmp_path / "report" / png).read_bytes()[:4] == b"\x89PNG"


def test_planted_ordering_violation_and_double_answer_are_flagged(
    real_traces: Path, spark: object, tmp_path: Path
) -> None:
    from actors.trace.analyze import analyze

    swapped, doubled = _plant_faults(real_traces, tmp_path / "copy")
    summary = analyze([tmp_path / "copy"], tmp_path / "report", spark=spark, plots=False)
    found = {(v["violation"], v["trace_id"]) for v in summary["violations"]}
    assert ("out_of_order", swapped) in found
    assert ("answered_twice", doubled) in found
    assert summary["violation_count"] == 2


def test_a_file_still_being_written_is_analysed_too(
    real_traces: Path, spark: object, tmp_path: Path
) -> None:
    """A node that is still running (or crashed) leaves a file without a footer."""
    from actors.trace.analyze import analyze

    copy = tmp_path / "copy"
    shutil.copytree(real_traces, copy)
    (seg,) = segments([copy])
    data = seg.read_bytes()
    from wire import trace_parquet as tp

    start = tp.footer_start(data)
    assert start is not None
    seg.write_bytes(data[:start])  # as if the node had not closed it yet
    summary = analyze([copy], tmp_path / "report", spark=spark, plots=False)
    assert summary["inputs"]["salvaged"] == 1
    assert summary["records"] == len(read_trace_dirs([real_traces]))
    assert summary["per_api_us"]["produce"]["requests"] == PRODUCED


def _rec(kind: str, node: str, offset: int, sent: int, recv: int, done: int, actor: str,
         sender: str, msg: str, span: int = 0, parent: int = 0) -> dict[str, object]:
    return dict(kind=kind, trace_id=7, span_id=span, parent_span_id=parent, node=node,
                actor=actor, sender=sender, msg_type=msg, conn_id=1, corr_id=3, api_key=0,
                bytes=10, bytes_out=0, sent_ns=sent, recv_ns=recv, done_ns=done,
                clock_offset_ns=offset, link_trace_id=0, link_span_id=0, offset=-1, detail="")


def test_analyze_lines_up_the_dirs_of_nodes_whose_clocks_differ(
    spark: object, tmp_path: Path
) -> None:
    """A produce handled on node a whose Append went to a shard on node b, whose wall
    clock is 5 s ahead (its gateway measured the offset: clock_offset_ns -5 s). Each
    node's records in its own dir; analyze puts them on a's clock, so the stages and
    b's mailbox wait are what they were, not 5 s off."""
    import pyarrow.parquet as pq

    from actors.trace.analyze import analyze
    from actors.trace.spans import request_from_trace
    from wire import trace_format as tf

    ahead = 5_000_000_000
    p, h, s = "processor-0", "handler-0", "shard-0"
    on_a = [
        _rec("request", "a", 0, 0, 0, 530, p, "10.0.0.1:5", "produce"),
        _rec("hop", "a", 0, 10, 100, 150, h, f"{p}@a", "KafkaRequest", 1),
        _rec("hop", "a", 0, 260 + ahead, 400, 460, h, f"{s}@b", "AppendDone", 3, 2),
        _rec("hop", "a", 0, 440, 500, 510, p, f"{h}@a", "KafkaResponse", 4, 3),
    ]
    on_b = [
        _rec("net", "b", -ahead, 130, 180 + ahead, 190 + ahead, "_gateway", f"{h}@a",
             "Append", 2, 1),
        _rec("hop", "b", -ahead, 130, 200 + ahead, 270 + ahead, s, f"{h}@a", "Append", 2, 1),
    ]
    for node, records in (("a", on_a), ("b", on_b)):
        (tmp_path / node).mkdir()
        write_records(tmp_path / node / f"{node}-1-1-000001{tf.FILE_SUFFIX}", records,
                      {"node": node})
    expected = {"request_queue": 100, "local": 90, "remote": 250, "response_queue": 60,
                "send": 30}
    python_side = request_from_trace(7, on_a + on_b, {"a": 0, "b": -ahead})
    assert python_side is not None and python_side.stages == expected

    summary = analyze([tmp_path / "a", tmp_path / "b"], tmp_path / "report", spark=spark,
                      plots=False)
    assert summary["anchors_ns"] == {"a": 0, "b": -ahead}
    (req,) = pq.read_table(tmp_path / "report" / "requests").to_pylist()
    assert {st: req[f"{st}_ns"] for st in STAGES} == expected and req["total_ns"] == 530
    actors = {(a["node"], a["actor"]): a
              for a in pq.read_table(tmp_path / "report" / "actors").to_pylist()}
    # b's shard waited 70 ns for the Append (sent on a's clock, received on b's)
    assert actors[("b", s)]["mailbox_p50_us"] == pytest.approx(0.07)
    assert actors[("a", h)]["mailbox_p50_us"] == pytest.approx(0.09, abs=0.06)
    assert summary["violation_count"] == 0


def test_analyze_anchors_keep_crossings_in_order(tmp_path: Path) -> None:
    """b's clock is 5 s ahead but its estimate is 1 ms too far: its net record (an Append
    from a that took 50 ns on the wire) bounds its anchor, which moves to that bound, as
    the Python side's does (no Spark: the anchors are computed with pyarrow)."""
    from actors.trace.analyze import node_anchors
    from actors.trace.spans import node_anchors as python_anchors
    from wire import trace_format as tf

    ahead = 5_000_000_000
    wrong = -ahead - 1_000_000
    on_a = [_rec("hop", "a", 0, 10, 100, 150, "handler-0", "processor-0@a", "KafkaRequest", 1)]
    on_b = [_rec("net", "b", wrong, 130, 180 + ahead, 190 + ahead, "_gateway",
                 "handler-0@a", "Append", 2, 1)]
    paths = []
    for node, records in (("a", on_a), ("b", on_b)):
        paths.append(tmp_path / f"{node}-1-1-000001{tf.FILE_SUFFIX}")
        write_records(paths[-1], records, {"node": node})
    assert node_anchors(paths) == python_anchors(on_a + on_b) == {"a": 0, "b": -ahead - 50}
