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
