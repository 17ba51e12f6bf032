"""`actorlog bench memory` runs end to end and writes the JSON contract (small sizes).

A baseline run of the same broker exercises the two-sided path; the figures
themselves are never asserted on (speed and memory live in the benchmark).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import memory

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_bench_memory_writes_every_figure_and_ratio(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "bench", "memory", "--retain-mb", "32",
         "--fetches", "2", "--fetch-mb", "8", "--slow-consumers", "2", "--window-s", "1",
         "--consume-mb", "16", "--rounds", "1", "--baseline-cmd", "actorlog",
         "--dir", str(tmp_path), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["bench"] == "memory"
    assert doc["config"]["candidate_settings"] == memory.BOUNDING_SETTINGS
    for side in ("candidate", "baseline"):
        figures = doc["results"][side]
        assert len(figures["rounds"]) == 1
        for name in memory.FIGURES:
            spread = figures[name]
            assert spread["min"] <= spread["median"] <= spread["max"]
    assert set(doc["ratios"]) == {
        "rss_anon_per_gb_target_over_candidate",
        "pipelined_fetches_rss_target_over_candidate",
        "rss_anon_mb_per_gb_baseline_over_candidate",
        "pipelined_rss_growth_mb_baseline_over_candidate",
        "slow_rss_growth_mb_baseline_over_candidate",
        "consume_mb_per_s_candidate_over_baseline",
    }
    assert all(value > 0 for value in doc["ratios"].values())
    assert "RssAnon growth, MB per GB retained" in proc.stdout
    assert list(tmp_path.glob("actorlog-bench-memory-*")) == []  # data dirs removed


def test_consume_asking_for_more_than_is_retained_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "actors.cli", "bench", "memory", "--retain-mb", "16",
         "--consume-mb", "1024"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--consume-mb 1024 is more than is retained" in proc.stderr
    assert "Traceback" not in proc.stderr
