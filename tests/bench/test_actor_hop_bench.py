"""`actorlog bench actor-hop` runs at a tiny size and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.actor_hop import command


def test_bench_actor_hop_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "hop.json"
    result = CliRunner().invoke(command, [
        "--count", "2000", "--repeats", "2", "--latency-seconds", "0.2",
        "--placement", "same_process", "--placement", "two_process", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "actor-hop"
    assert report["config"]["placements"] == ["same_process", "two_process"]
    assert set(report["ratios"]) == {"same_process_rate", "two_process_rate"}
    assert all(isinstance(v, float) and v > 0 for v in report["ratios"].values())
    for placement in ("same_process", "two_process"):
        rates = report["results"][placement]["actor_rate"]
        assert rates["min"] <= rates["median"] <= rates["max"]
    assert report["results"]["same_process_p99_us"] > 0
    assert "actor/raw" in result.output
