"""`actorlog bench scale` runs briefly and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.scale import command


def test_bench_scale_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = CliRunner().invoke(command, ["--max-processes", "2", "--rounds", "1",
                                          "--duration", "1", "--connections", "2",
                                          "--no-progress", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "scale"
    assert report["config"]["process_counts"] == [1, 2]
    assert set(report["ratios"]) == {"processes_2_vs_1"}
    assert report["ratios"]["processes_2_vs_1"] > 0
    assert report["results"]["ratio_to_1"]["1"]["median"] == 1.0
    assert "load average" in result.output
