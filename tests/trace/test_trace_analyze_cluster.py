"""trace analyze on a real Spark standalone cluster (master and worker started by the test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.trace.spans import STAGES, request_traces
from actors.trace.store import read_trace_dirs
from tests.fixtures.spark_cluster import SparkCluster
from tests.fixtures.traces import PRODUCED

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
ROOT = Path(__file__).resolve().parents[2]


def test_analyze_runs_unchanged_on_a_standalone_master(
    real_traces: Path, spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "actors.cli", "trace", "analyze", str(real_traces),
         "--out", str(out), "--master", spark_cluster.master_url],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "ACTORLOG_SPARK_DRIVER_MEMORY": "1g"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 ordering/answer violations" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["per_api_us"]["produce"]["requests"] == PRODUCED
    assert summary["violation_count"] == 0
    # the cluster did the work: the worker ran this application's executor
    apps = [p for p in (spark_cluster.logs / "worker").iterdir() if p.name.startswith("app-")]
    assert apps, "no application ran on the worker"
    assert any((d / "stderr").exists() for app in apps for d in app.iterdir())
    # and its tables say what the Python tools say
    py = {r.trace_id: r for r in request_traces(read_trace_dirs([real_traces]))}
    for r in pq.read_table(out / "requests").to_pylist():
        if r["send_ns"] is not None:
            assert py[r["trace_id"]].stages == {s: r[f"{s}_ns"] for s in STAGES}
