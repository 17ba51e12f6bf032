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
    assert report["results"]["figure"] == "requests_per_s"
    assert report["results"]["figure_per_s"]["2"]["median"] > 0
    assert len(report["results"]["figure_per_s_by_round"]["1"]) == 1
    assert "load average" in result.output and "requests/s" in result.output


def test_bench_scale_measures_both_distributions_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = CliRunner().invoke(command, ["--max-processes", "2", "--rounds", "1",
                                          "--duration", "4", "--connections", "4",
                                          "--producers", "1", "--distribution", "reuseport",
                                          "--distribution", "handoff", "--no-progress",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report["ratios"]) == {"processes_2-reuseport_vs_1", "processes_2-handoff_vs_1"}
    split = report["results"]["connections_by_process"]
    # the busiest sample of each run: every process of the broker, the load's connections
    assert len(split["1"][0]) == 1 and split["1"][0][0] >= 4
    assert len(split["2-reuseport"][0]) == 2 and sum(split["2-reuseport"][0]) >= 4
    handoff = split["2-handoff"][0]
    assert len(handoff) == 2 and sum(handoff) >= 4 and abs(handoff[0] - handoff[1]) <= 1
    assert "num.processes=2-handoff" in result.output


def test_bench_scale_measures_placements_on_a_batched_load(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    result = CliRunner().invoke(command, ["--max-processes", "2", "--rounds", "1",
                                          "--duration", "2", "--producers", "1",
                                          "--placement", "spread", "--placement", "first",
                                          "--scenario", "throughput_acks1", "--no-progress",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["config"]["scenario"] == "throughput_acks1"
    assert report["results"]["figure"] == "records_per_s"
    assert set(report["ratios"]) == {"processes_2-spread_vs_1", "processes_2-first_vs_1"}
    for key in ("1", "2-spread", "2-first"):
        assert report["results"]["figure_per_s"][key]["median"] > 0
        assert report["results"]["broker_cpu_ms_per_mb"][key]["median"] > 0
    # the placement reached the brokers: the load's three partitions all in process 0
    # with first, in both processes with spread (consecutive partitions, other shards)
    where = report["results"]["partitions_by_process"]
    assert where["1"] == [[3]], where
    assert where["2-first"] == [[3, 0]], where
    [spread] = where["2-spread"]
    assert sum(spread) == 3 and min(spread) > 0, where
    assert "num.processes=2-first" in result.output and "records/s" in result.output
