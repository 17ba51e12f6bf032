"""trace analyze (local Spark) on a real broker's traces, and on a copy with planted faults."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgpack
import pytest

from actors.trace.spans import STAGES, request_traces
from actors.trace.store import read_rows, read_trace_dirs, segments
from tests.fixtures.traces import PRODUCED
from wire import trace_format as tf

pytestmark = pytest.mark.slow  # Spark's start alone takes 10-40 s on a busy 2-core machine

F = tf.FIELD_INDEX


def _rewrite(seg: Path, rows: list[list]) -> None:
    header = {
        "format": tf.FORMAT_NAME,
        "version": tf.FORMAT_VERSION,
        "fields": list(tf.FIELDS),
        "node": rows[0][F["node"]],
        "pid": 0,
        "started_wall_ns": 0,
    }
    seg.write_bytes(msgpack.packb(header) + b"".join(msgpack.packb(r) for r in rows))


def _plant_faults(src: Path, dst: Path) -> tuple[int, int]:
    """Swap the net_out times of two produces of one connection; answer a third one twice."""
    shutil.copytree(src, dst)
    (seg,) = segments([dst])
    rows = [list(r) for r in read_rows(seg)[1]]
    produce_ins = [r for r in rows if r[F["kind"]] == "net_in" and r[F["api_key"]] == 0]
    conn = produce_ins[0][F["conn_id"]]
    first, second, third = [r[F["trace_id"]] for r in produce_ins if r[F["conn_id"]] == conn][:3]
    outs = {r[F["trace_id"]]: r for r in rows if r[F["kind"]] == "net_out"}
    a, b = outs[first], outs[second]
    for field in ("mono_ns", "wall_ns"):
        a[F[field]], b[F[field]] = b[F[field]], a[F[field]]
    dup = list(outs[third])
    dup[F["mono_ns"]] += 1000
    rows.append(dup)
    _rewrite(seg, rows)
    return first, third


def test_stages_add_up_and_tables_are_complete(
    real_traces: Path, spark: object, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from actors.trace.analyze import analyze

    summary = analyze([real_traces], tmp_path / "report", spark=spark)
    req = pq.read_table(tmp_path / "report" / "requests").to_pylist()
    produces = [r for r in req if r["api"] == "produce"]
    assert len(produces) == PRODUCED
    complete = [r for r in req if r["send_ns"] is not None]
    assert len(complete) >= len(req) - 2  # a consumer's last fetch may be cut off at shutdown
    for r in complete:
        parts = [r[f"{s}_ns"] for s in STAGES]
        assert abs(sum(parts) - r["total_ns"]) <= 1_000_000
        assert min(parts) >= 0
    # Spark's stages equal the ones `trace show` computes in Python
    py = {r.trace_id: r for r in request_traces(read_trace_dirs([real_traces]))}
    for r in complete:
        assert py[r["trace_id"]].stages == {s: r[f"{s}_ns"] for s in STAGES}
    assert summary["violation_count"] == 0
    assert summary["per_api_us"]["produce"]["requests"] == PRODUCED

    actors = {a["actor"]: a for a in pq.read_table(tmp_path / "report" / "actors").to_pylist()}
    assert {"handler-0", "processor-0"} <= set(actors) or any(
        a.startswith("handler") for a in actors
    )
    handlers = [a for name, a in actors.items() if name.startswith("handler")]
    assert sum(a["messages"] for a in handlers) >= 3 * PRODUCED  # request, AppendDone, ...
    for a in actors.values():
        assert 0 <= a["busy_fraction"] <= 1
        assert a["handling_p50_us"] <= a["handling_p99_us"] * 1.05 + 1
    # percentile_approx against exact percentiles of the same spans, with a tolerance
    events = read_trace_dirs([real_traces])
    recv = {(e["trace_id"], e["span_id"]): e for e in events if e["kind"] == "recv"}
    handling = sorted(
        (e["mono_ns"] - recv[(e["trace_id"], e["span_id"])]["mono_ns"]) / 1000
        for e in events
        if e["kind"] == "done"
        and e["actor"] == handlers[0]["actor"]
        and (e["trace_id"], e["span_id"]) in recv
    )
    exact = handling[len(handling) // 2]
    assert handlers[0]["handling_p50_us"] == pytest.approx(exact, rel=0.25, abs=50)

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
