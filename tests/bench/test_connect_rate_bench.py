"""`actorlog bench connect-rate` runs briefly and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.connect_rate import command


def test_bench_connect_rate_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "rate.json"
    result = CliRunner().invoke(command, ["--connections", "20", "--rounds", "2",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "connect-rate"
    rates = report["results"]["connections_per_s_by_round"]
    assert set(rates) == {"reuseport", "handoff"}
    assert all(len(v) == 2 and min(v) > 0 for v in rates.values())
    assert report["ratios"]["handoff_vs_reuseport"] > 0
    assert "handoff vs reuseport" in result.output
