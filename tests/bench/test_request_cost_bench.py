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
    # every partition's batch is appended, once (the append's entry is C, LogCore's: the
    # partition state's step after each append is the Python call that counts them)
    calls = dict(report["results"]["top_functions"])
    assert calls["core/partition_state.py:on_leader_append"] == 3.0, calls


def test_bench_request_cost_refuses_partitions_for_a_fetch() -> None:
    result = CliRunner().invoke(command, ["--api", "fetch", "--partitions", "2",
                                          "--requests", "5"])
    assert result.exit_code != 0
    assert "count a Produce" in result.output


def test_a_one_record_produce_and_fetch_skip_the_calls_issue_18_removed(tmp_path: Path) -> None:
    """Calls taken off the small-request path stay off: the Processor decides whether a
    connection reads once per read (_take_frames) and once per answer, not again after
    the read; the leader's produce reads the log end without the property; the codec
    writes one-byte counts without _put_count; the response's metric keys come without
    metric_keys/latency_key calls."""
    for api, gone in (("produce", ("core/partition_log.py:log_end_offset",
                                   "kafka_codec/hot.py:_put_count",
                                   "kafka_codec/hot.py:_count",
                                   "actors/processor.py:metric_keys",
                                   "actors/metrics.py:latency_key")),
                      ("fetch", ("kafka_codec/hot.py:_count",
                                 "kafka_codec/hot.py:_check_keys"))):
        out = tmp_path / f"{api}.json"
        result = CliRunner().invoke(command, ["--api", api, "--requests", "50", "--warmup",
                                              "10", "--top", "400", "--json", str(out)])
        assert result.exit_code == 0, result.output
        calls = dict(json.loads(out.read_text())["results"]["top_functions"])
        # 2 and 1 measured; the half is room for a POLLOUT or a _resume_paused under
        # load, while the decision taken again after each read (3 and 2) still fails
        assert calls.get("actors/processor.py:_decide_reading", 0) <= 2.5, (api, calls)
        assert calls.get("actors/processor.py:_refresh", 0) <= 1.5, (api, calls)
        for name in gone:  # housekeeping (once a second) may call one now and then
            assert calls.get(name, 0) < 0.5, (api, name, calls)
        if api == "fetch":  # the records' size only: over a byte's worth of count
            assert calls.get("kafka_codec/hot.py:_put_count", 0) <= 1.0, calls
            # the row's size once (after the budget's cut), not four times
            assert calls.get("wire/broker_messages.py:size", 0) <= 1.0, calls
