"""`actorlog bench cross-cost` runs briefly and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.cross_cost import command

REPO = Path(__file__).resolve().parents[2]


def test_bench_cross_cost_classifies_its_runs_and_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "cross.json"
    result = CliRunner().invoke(command, ["--tree", str(REPO), "--runs", "1", "--max-runs", "4",
                                          "--requests", "300", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "cross-cost"
    assert report["config"]["trees"] == [str(REPO)]
    kinds = report["results"]["broker_cpu_us_per_request"][str(REPO)]
    assert set(kinds) == {"crossed", "local"}
    # every run with one connection and one partition is one kind or the other
    measured = [s for s in kinds.values() if s is not None]
    assert measured, result.output
    for spread in measured:
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert "broker CPU per request" in result.output and "load average" in result.output
