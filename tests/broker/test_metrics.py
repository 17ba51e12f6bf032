"""The Prometheus endpoint of a real broker (``actorlog serve --metrics-port``), scraped
after real clients worked against it: every family has HELP and TYPE; requests, errors
by code, bytes and records per topic, latency histograms per API, connections per
listener, log size / log end / high watermark, under-replicated and offline partitions,
consumer group lag, purgatory size per kind, mailbox depth and handling time per actor;
and the Grafana dashboard in deploy/ queries only what a broker exports."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from actors.broker import Broker
from actors.group_coordinator import GroupCoordinator
from actors.metrics_http import gauges
from actors.runtime.config import Config
from tests.broker.rawclient import RawClient, fetch_values, record_batch
from tests.fixtures.broker import BrokerProcess, free_port
from wire.broker_messages import GetStats


def scrape_text(port: int) -> str:
    return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                      timeout=10).read().decode())


def parse(text: str) -> dict[str, float]:
    """Samples by ``name{labels}``; comment lines skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def scrape(port: int) -> dict[str, float]:
    return parse(scrape_text(port))


def test_request_stages_are_exported_and_add_up(tmp_path: Path) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "data", config={"metrics.port": metrics_port}).start()
    try:
        with RawClient(broker.port) as client:
            assert client.create_topic("m", 1) == 0
            for _ in range(20):
                assert client.produce("m", 0, record_batch([(None, b"x")]), acks=1).error_code == 0
            # A request is counted once its response is written (as Kafka counts it, at the
            # completed send), so the client may hold the 20th answer a moment before it is
            # counted. The Processor reads the next request of the connection only after
            # that: one more round trip on it orders every Produce count before the scrape.
            assert client.list_offset("m", 0, -1).error_code == 0
        m = scrape(metrics_port)
    finally:
        assert broker.stop() == 0
    assert m['actorlog_requests_total{api="Produce"}'] == 20
    stages = {
        re.search(r'stage="(\w+)"', k).group(1): v  # type: ignore[union-attr]
        for k, v in m.items()
        if k.startswith('actorlog_request_stage_time_ns_total{api="Produce"')
    }
    assert set(stages) == {"request_queue", "local", "remote", "response_queue", "send"}
    assert all(v >= 0 for v in stages.values())
    assert stages["local"] > 0 and stages["remote"] > 0  # the shard round trip is remote
    total = m['actorlog_request_time_ns_total{api="Produce"}']
    assert abs(sum(stages.values()) - total) <= 20 * 1000  # equal, up to clamping


# ----------------------------------------------------------------- the families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana-actorlog.json"


@pytest.fixture(scope="module")
def worked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """A broker that real clients used: kafka-python produced 30 keyed records to 'm' (2
    partitions) and 5 to 'other', a group committed offset 4 of m-0, a raw Produce hit
    a partition that does not exist, and a long-poll Fetch waits in the purgatory."""
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data",
                           config={"metrics.port": metrics_port,
                                   "group.initial.rebalance.delay.ms": 0,
                                   "offsets.topic.num.partitions": 2}).start()
    try:
        with RawClient(broker.port) as client:
            assert client.create_topic("m", 2) == 0
            assert client.create_topic("other", 1) == 0
            assert client.produce("m", 7, record_batch([(None, b"x")])).error_code == 3
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        for i in range(30):
            producer.send("m", key=b"k%d" % i, value=b"v" * 100, partition=i % 2)
        for _ in range(5):
            producer.send("other", value=b"o" * 10, partition=0)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="lagging",
                                 enable_auto_commit=False, consumer_timeout_ms=2000,
                                 auto_offset_reset="earliest")
        tp = TopicPartition("m", 0)
        consumer.assign([tp])
        assert len([r for r in consumer]) == 15  # read the partition: bytes and records out
        consumer.commit({tp: OffsetAndMetadata(4, "", -1)})
        consumer.close()
        yield broker, metrics_port
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def families(text: str) -> dict[str, str]:
    """Family name -> TYPE, checking that each TYPE has its HELP just before it."""
    types: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert lines[i - 1].startswith(f"# HELP {name} "), lines[i - 1]
            types[name] = kind
    return types


def test_every_family_has_help_and_type_and_samples_belong_to_one(
        worked: tuple[BrokerProcess, int]) -> None:
    text = scrape_text(worked[1])
    types = families(text)
    assert "untyped" not in types.values(), [n for n, k in types.items() if k == "untyped"]
    assert [n for n, k in types.items() if k == "counter" and not n.endswith("_total")] == []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = re.match(r"[a-z_]+", line).group(0)  # type: ignore[union-attr]
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or base in types, line
    wanted = {
        "actorlog_requests_total": "counter", "actorlog_errors_total": "counter",
        "actorlog_request_latency_seconds": "histogram",
        "actorlog_topic_bytes_in_total": "counter", "actorlog_topic_bytes_out_total": "counter",
        "actorlog_topic_records_in_total": "counter",
        "actorlog_topic_records_out_total": "counter", "actorlog_connections": "gauge",
        "actorlog_log_size_bytes": "gauge", "actorlog_log_end_offset": "gauge",
        "actorlog_high_watermark": "gauge", "actorlog_under_replicated_partitions": "gauge",
        "actorlog_offline_partitions": "gauge", "actorlog_consumer_group_lag": "gauge",
        "actorlog_purgatory_size": "gauge", "actorlog_actor_mailbox_depth": "gauge",
        "actorlog_actor_handle_seconds": "summary",
    }
    assert {n: types.get(n) for n in wanted} == wanted


def test_the_numbers_match_what_the_clients_did(worked: tuple[BrokerProcess, int]) -> None:
    broker, port = worked
    with RawClient(broker.port) as client:
        # a long poll that waits in the purgatory while we scrape
        client.send(1, 11, fetch_values("other", 0, 5, max_wait_ms=8000, min_bytes=1))
        deadline = time.monotonic() + 10
        m = scrape(port)
        while m['actorlog_purgatory_size{kind="fetch"}'] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            m = scrape(port)
        assert m['actorlog_purgatory_size{kind="fetch"}'] >= 1
        client.recv()  # the long poll's empty answer after its 8 s wait
    # partitions: what the producers wrote
    assert m['actorlog_log_end_offset{topic="m",partition="0"}'] == 15
    assert m['actorlog_high_watermark{topic="m",partition="1"}'] == 15
    assert m['actorlog_log_end_offset{topic="other",partition="0"}'] == 5
    assert m['actorlog_log_size_bytes{topic="m",partition="0"}'] > 15 * 100
    assert m["actorlog_under_replicated_partitions"] == 0
    assert m["actorlog_offline_partitions"] == 0
    # per topic: 30 records of 100-byte values in, 15 of them read back out
    assert m['actorlog_topic_records_in_total{topic="m"}'] == 30
    assert m['actorlog_topic_records_in_total{topic="other"}'] == 5
    assert m['actorlog_topic_bytes_in_total{topic="m"}'] > 30 * 100
    assert m['actorlog_topic_records_out_total{topic="m"}'] == 15
    assert m['actorlog_topic_bytes_out_total{topic="m"}'] > 15 * 100
    # the group committed 4 of 15: lag 11
    assert m['actorlog_consumer_group_lag{group="lagging",topic="m",partition="0"}'] == 11
    # errors by code: the Produce to partition 7 of a 2-partition topic
    assert m['actorlog_errors_total{api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION"}'] == 1
    # the latency histogram: cumulative, +Inf equals the count equals the requests answered
    produce: dict[float, float] = {}
    for key, value in m.items():
        found = re.search(r'request_latency_seconds_bucket\{api="Produce",le="([^"]+)"', key)
        if found:
            produce[float(found.group(1))] = value
    counts = [produce[b] for b in sorted(produce)]
    assert counts == sorted(counts) and counts[-1] == produce[float("inf")]
    assert produce[float("inf")] == m['actorlog_request_latency_seconds_count{api="Produce"}']
    assert m['actorlog_request_latency_seconds_count{api="Produce"}'] == \
        m['actorlog_requests_total{api="Produce"}'] >= 2
    assert m['actorlog_request_latency_seconds_sum{api="Produce"}'] > 0
    # connections per listener: ours was open during the scrape
    assert m[f'actorlog_connections{{listener="127.0.0.1:{broker.port}"}}'] >= 1
    # actors: handled messages, time in handlers, a depth for each
    for actor in ("shard-0", "handler-0", "processor-0", "coordinator-0"):
        assert m[f'actorlog_actor_messages_handled_total{{actor="{actor}"}}'] > 0, actor
        assert m[f'actorlog_actor_handle_seconds_sum{{actor="{actor}"}}'] > 0, actor
        assert m[f'actorlog_actor_mailbox_depth{{actor="{actor}"}}'] >= 0, actor


def _queried_metrics(dashboard: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for expr in exprs:
        names.update(re.findall(r"\bactorlog_[a-z_]+", expr))
    return names


def test_the_grafana_dashboard_queries_only_exported_metrics(
        worked: tuple[BrokerProcess, int]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queried = _queried_metrics(dashboard)
    assert len(queried) >= 15
    text = scrape_text(worked[1])
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")}
    missing = sorted(queried - samples)
    assert not missing, f"the dashboard queries metrics the broker does not export: {missing}"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])


def test_the_groups_gauge_counts_every_group_without_describing_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape asked each coordinator's GetStats, which builds every group's state (its
    cost grew with the groups), and counted only the groups that had committed offsets.
    It asks for the count and the commits now: a group without a commit counts too, and no
    coordinator's GetStats runs. A broker in this process (its coordinator's GetStats is
    watched); real Kafka clients make the groups."""
    described: list[str] = []
    real_stats = GroupCoordinator.stats

    def watched(self: GroupCoordinator, msg: GetStats) -> dict[str, Any]:
        described.append(self.name)
        return real_stats(self, msg)

    watched.__actorlog_handles__ = (GetStats,)  # type: ignore[attr-defined]
    monkeypatch.setattr(GroupCoordinator, "stats", watched)
    broker = Broker(Config({"listeners": "127.0.0.1:0", "log.dirs": str(tmp_path / "data")}))
    try:
        broker.start()
        bootstrap = f"127.0.0.1:{broker.port}"
        with RawClient(int(broker.port)) as client:
            assert client.create_topic("m", 1) == 0
        tp = TopicPartition("m", 0)
        committing = KafkaConsumer(bootstrap_servers=bootstrap, group_id="committed",
                                   enable_auto_commit=False)
        committing.assign([tp])
        committing.commit({tp: OffsetAndMetadata(0, "", -1)})
        committing.close()
        joined = KafkaConsumer("m", bootstrap_servers=bootstrap, group_id="joined",
                               enable_auto_commit=False)
        deadline = time.monotonic() + 60
        while not joined.assignment() and time.monotonic() < deadline:
            joined.poll(timeout_ms=200)
        assert joined.assignment() == {tp}
        try:
            samples = {(name, tuple(labels)): value for name, labels, value in gauges(broker)}
        finally:
            joined.close()
    finally:
        broker.stop()
    assert described == [], "the scrape built every group's state"
    assert samples[("consumer_groups", ())] == 2  # "joined" committed nothing
    assert samples[("consumer_group_lag", (("group", "committed"), ("topic", "m"),
                                           ("partition", "0")))] == 0
