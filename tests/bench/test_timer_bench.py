"""`actorlog bench timer` runs at a tiny size and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.timer_bench import RATIO_KEYS, command


@pytest.mark.parametrize("gc_mode", ["on", "paused"])
def test_bench_timer_writes_well_formed_json(tmp_path: Path, gc_mode: str) -> None:
    out = tmp_path / "timer.json"
    result = CliRunner().invoke(
        command,
        [
            "--outstanding",
            "100,1000",
            "--ops",
            "500",
            "--rounds",
            "2",
            "--steady-ops",
            "5000",
            "--timeout-ms",
            "300",
            "--slice-ms",
            "10",
            "--gc",
            gc_mode,
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["bench"] == "timer"
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert set(report["ratios"]) >= set(RATIO_KEYS)
    for key in RATIO_KEYS:
        assert isinstance(report["ratios"][key], float) and report["ratios"][key] > 0
    assert set(report["results"]["steady"]) == {"wheel", "heap"}
    assert set(report["results"]["outstanding"]) == {"100", "1000"}
    assert report["config"]["gc"] == gc_mode
    assert "wheel_1m_vs_1k" in result.output
