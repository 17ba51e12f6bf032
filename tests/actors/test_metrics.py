"""The metrics text without a broker: histogram buckets made cumulative, HELP and TYPE for
every family, label escaping, error codes found at any depth of a response."""

from __future__ import annotations

from actors.metrics import FAMILIES, error_codes, latency_key, render


def test_latency_buckets_are_cumulative_with_inf_sum_and_count() -> None:
    counters: dict[str, int] = {}
    for ns in (200_000, 700_000, 700_000, 3_000_000, 60 * 10**9):
        key = latency_key("Produce", ns)
        counters[key] = counters.get(key, 0) + 1
    counters["request_time_ns_total|api=Produce"] = 2 * 10**9
    text = render(counters)
    lines = [line for line in text.splitlines()
             if line.startswith("actorlog_request_latency_seconds")]
    assert 'actorlog_request_latency_seconds_bucket{api="Produce",le="0.0005"} 1' in lines
    assert 'actorlog_request_latency_seconds_bucket{api="Produce",le="0.001"} 3' in lines
    assert 'actorlog_request_latency_seconds_bucket{api="Produce",le="0.005"} 4' in lines
    assert 'actorlog_request_latency_seconds_bucket{api="Produce",le="30.0"} 4' in lines
    assert 'actorlog_request_latency_seconds_bucket{api="Produce",le="+Inf"} 5' in lines
    assert 'actorlog_request_latency_seconds_count{api="Produce"} 5' in lines
    assert 'actorlog_request_latency_seconds_sum{api="Produce"} 2' in lines


def test_every_family_has_help_then_type_and_labels_are_escaped() -> None:
    text = render({"topic_bytes_in_total|topic=a": 3},
                  [("consumer_group_lag", [("group", 'we"ird\\g'), ("topic", "a")], 2)])
    lines = text.splitlines()
    for name, (kind, _help) in FAMILIES.items():
        if kind == "counter" and not name.endswith("_total"):  # exported with the suffix
            name += "_total"
        i = lines.index(f"# TYPE actorlog_{name} {kind}")
        assert lines[i - 1].startswith(f"# HELP actorlog_{name} ")
    assert 'actorlog_requests_refused_total 0' not in lines  # no sample made up for it
    assert 'actorlog_actor_restarts_total 2' in render({"actor_restarts": 2}).splitlines()
    assert 'actorlog_topic_bytes_in_total{topic="a"} 3' in lines
    assert 'actorlog_consumer_group_lag{group="we\\"ird\\\\g",topic="a"} 2' in lines
    # a counter nobody described still shows, typed untyped
    assert "# TYPE actorlog_something_new untyped" in render({"something_new": 1})


def test_error_codes_are_found_at_every_depth() -> None:
    produce = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0}, {"index": 1, "error_code": 3}]}],
        "throttle_time_ms": 0}
    assert error_codes(produce) == [3]
    assert sorted(error_codes({"error_code": 15, "groups": [{"error_code": 16},
                                                            {"error_code": 0}]})) == [15, 16]
    assert error_codes({"throttle_time_ms": 0}) == []
