"""The trace benchmarks run end to end at tiny sizes and write the JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors.trace.spans import request_traces
from actors.trace.store import read_trace_dirs, segments
from bench.trace_bench import analyze_command, cost_command
from bench.trace_gen import RECORDS_PER_REQUEST, generate
from wire import trace_parquet as tp


def test_trace_cost_json_has_every_ratio(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    result = CliRunner().invoke(
        cost_command, ["--num-records", "300", "--repeat", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["bench"] == "trace-cost"
    assert set(doc["ratios"]) == {"traced_full_vs_off", "traced_1pct_vs_off"}
    assert all(v > 0 for v in doc["ratios"].values())
    assert doc["results"]["full"]["trace_bytes"] > doc["results"]["off"]["trace_bytes"] == 0
    runs = [r for s in ("off", "1pct", "full") for r in doc["results"][s]["runs"]]
    assert len(runs) == 6 and all(r["acked"] == 300 for r in runs)
    assert len(doc["results"]["paired_ratios"]["full"]["rounds"]) == 2
    assert doc["results"]["load_average"]["max"] >= 0
    assert all(r["broker_cpu_s"] >= 0 and r["broker_cpu_us_per_record"] >= 0 for r in runs)
    assert sum(r["broker_cpu_s"] for r in runs) > 0  # 1,800 records take some CPU ticks
    assert set(doc["results"]["broker_cpu_ratios"]) <= {"full", "1pct"}


def test_generated_traces_are_whole_causal_requests(tmp_path: Path) -> None:
    n = generate(tmp_path, 2000, nodes=2)
    assert n == 2000
    files = segments([tmp_path])
    assert all(tp.footer_start(f.read_bytes()) is not None for f in files)  # closed files
    reqs = request_traces(read_trace_dirs([tmp_path]))
    assert len(reqs) == n // RECORDS_PER_REQUEST
    assert all(r.stages is not None and min(r.stages.values()) >= 0 for r in reqs)
    assert {r.node for r in reqs} == {"node-1", "node-2"}


@pytest.mark.slow
@pytest.mark.timeout(900)  # two Spark starts in a row: minutes each on a busy 2-core machine
def test_trace_analyze_bench_json(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    out = tmp_path / "analyze.json"
    result = CliRunner().invoke(
        analyze_command,
        ["--sizes", "1000,2000", "--repeat", "1", "--master", "local[2]", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert set(doc["ratios"]) == {"scaling_vs_linear", "largest_vs_60s_target",
                                  "largest_cpu_per_core_vs_60s_target"}
    # the job's CPU time counts Spark's JVM too (adopted and reaped by the bench)
    cold = doc["results"]["2000"]["cold"]
    assert cold["cpu_counts_spark_jvm"] is True
    assert cold["cpu_s"] >= 1.0  # a JVM start alone takes seconds of CPU
    assert doc["results"]["2000"]["cold"]["records"] == 2000
    assert doc["results"]["2000"]["cold"]["violations"] == 0
