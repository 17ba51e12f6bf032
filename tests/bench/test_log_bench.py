"""`actorlog bench log` runs at a tiny size and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.log_bench import RATIO_KEYS, command


def test_bench_log_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "log.json"
    result = CliRunner().invoke(command, [
        "--total-mb", "1", "--batch-kib", "4", "--fetch-kib", "64", "--segments", "20",
        "--random-reads", "50", "--repeat", "2", "--dir", str(tmp_path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "log"
    assert set(report["ratios"]) == set(RATIO_KEYS)
    assert all(isinstance(v, float) and v > 0 for v in report["ratios"].values())
    spread = report["results"]["append_log_mb_s"]
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert "append_vs_raw" in result.output
    # the CPU-time ratio beside the wall one (the keys before it kept)
    assert {"append_vs_raw", "append_vs_raw_cpu", "group_append_vs_raw_cpu"} <= set(
        report["ratios"])
    assert isinstance(report["ratios"]["append_vs_raw_cpu"], float)
    assert "append_vs_raw_cpu:" in result.output
    cpu = report["results"]["append_log_cpu_s"]
    assert 0 < cpu["min"] <= cpu["median"] <= cpu["max"]
    assert [p.name for p in tmp_path.iterdir()] == ["log.json"]  # temp logs removed
