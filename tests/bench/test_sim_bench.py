"""`actorlog bench sim` runs a few short seeds and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.sim_bench import RATIO_KEYS, command


def test_bench_sim_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(command, ["--seeds", "1", "--rounds", "2", "--steps", "2",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["bench"] == "sim"
    assert set(report) == {"bench", "config", "results", "ratios"}
    for key in RATIO_KEYS:
        assert isinstance(report["ratios"][key], float) and report["ratios"][key] > 0
    for key in ("sim_s_per_wall_s", "seeds_per_minute"):
        spread = report["results"][key]
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert "seeds per minute" in result.output
