"""`actorlog bench request-cost` runs a few requests and writes the benchmark JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bench.request_cost import command


def test_bench_request_cost_counts_a_produce(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    result = CliRunner().invoke(command, ["--requests", "20", "--warmup", "5", "--json",
                                          str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"bench", "config", "results", "ratios"}
    assert report["bench"] == "request-cost"
    results = report["results"]
    assert results["python_calls_per_request"] > 0
    # a one-record produce crosses Processor -> handler -> shard -> handler -> Processor
    for name in ("KafkaRequest", "Append", "AppendDone", "KafkaResponse"):
        assert results["hops_by_message"][name] >= 1.0, results["hops_by_message"]
    assert "actor hops per request" in result.output


def test_bench_request_cost_counts_a_fetch(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    result = CliRunner().invoke(command, ["--api", "fetch", "--requests", "20", "--warmup", "5",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["config"]["api"] == "fetch"
    results = report["results"]
    assert results["python_calls_per_request"] > 0
    # a fetch that finds its record crosses Processor -> handler -> shard -> handler -> Processor
    for name in ("KafkaRequest", "Read", "ReadDone", "KafkaResponse"):
        assert results["hops_by_message"][name] >= 1.0, results["hops_by_message"]
    assert "Append" not in results["hops_by_message"]


def test_bench_request_cost_counts_a_batched_produce_of_several_partitions(
        tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    result = CliRunner().invoke(command, ["--partitions", "3", "--records", "50", "--top", "300",
                                          "--requests", "10", "--warmup", "3",
                                          "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["config"]["partitions"] == 3
    assert report["config"]["records"] == 50
    hops = report["results"]["hops_by_message"]
    # one request, one answer; an Append and an AppendDone per shard the 3 partitions are on
    assert hops["KafkaRequest"] == hops["KafkaResponse"] == 1.0, hops
    assert 1.0 < hops["Append"] == hops["AppendDone"] <= 3.0, hops
    # every partition's batch is appended, once
    calls = dict(report["results"]["top_functions"])
    assert calls["core/partition_log.py:append_as_leader"] == 3.0, calls


def test_bench_request_cost_refuses_partitions_for_a_fetch() -> None:
    result = CliRunner().invoke(command, ["--api", "fetch", "--partitions", "2",
                                          "--requests", "5"])
    assert result.exit_code != 0
    assert "count a Produce" in result.output
