"""`actorlog bench replication` runs end to end on three real nodes and a real ZooKeeper,
and writes the JSON contract (small sizes; the figures are never asserted on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_bench_replication_writes_every_figure_and_ratio(tmp_path: Path) -> None:
    out = tmp_path / "replication.json"
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "bench", "replication", "--rounds", "2",
         "--records", "2000", "--rate", "200", "--seconds", "1", "--kills", "1",
         "--partitions", "2", "--session-timeout-ms", "4000", "--catch-up-mb", "8",
         "--catch-up-runs", "2",
         "--dir", str(tmp_path / "c"), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "replication"
    assert doc["config"]["nodes"] == 3 and doc["config"]["kills"] == 1
    for name in ("acks_all_rf3_records_per_s", "acks_1_rf1_records_per_s",
                 "acks_all_rf3_p99_ms", "acks_1_rf1_p99_ms", "leader_kill_to_first_ack_s",
                 "catch_up_mb_per_s", "catch_up_follower_peak_rss_mb"):
        spread = doc["results"][name]
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert len(doc["raw"]["acks_all_rf3_records_per_s"]) == 2
    assert len(doc["raw"]["catch_up_mb_per_s"]) == 2
    assert set(doc["ratios"]) == {"acks_all_rf3_over_acks_1_rf1_throughput",
                                  "acks_all_rf3_over_acks_1_rf1_throughput_vs_kafka_2014",
                                  "acks_1_rf1_over_acks_all_rf3_p99"}
    assert "acks=all RF=3 / acks=1 RF=1" in proc.stdout
