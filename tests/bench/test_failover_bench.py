"""`actorlog bench failover` runs end to end on a real ZooKeeper and writes the JSON contract.

One run of each scenario on three real nodes; the times themselves are never
asserted on (they live in the benchmark), only that each was measured, that
every process it started is gone and its directory removed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import failover

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_bench_failover_measures_each_scenario_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "failover.json"
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "bench", "failover", "--runs", "1",
         "--partitions", "3", "--session-timeout-ms", "4000", "--dir", str(tmp_path),
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "failover"
    assert doc["config"]["session_timeout_ms"] == 4000
    assert doc["results"]["bound_ms"] == 6000
    for scenario in failover.SCENARIOS:
        spread = doc["results"][scenario]["ms"]
        assert len(doc["results"][scenario]["runs"]) == 1
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
        assert f"{scenario}_within_bound" in doc["ratios"]
    assert "controller_kill" in proc.stdout
    assert [p for p in tmp_path.iterdir() if p.name.startswith("actorlog-failover-")] == []
