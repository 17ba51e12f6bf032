"""Replica fetchers come and go with the partitions they fetch (issue 15), and a
follower keeps the leader's log start offset (DeleteRecords, retention).

Three real nodes, a real ZooKeeper, kafka-python and confluent-kafka clients;
each node's Prometheus endpoint shows which actors run.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient

from tests.broker.test_metrics import scrape
from tests.cluster.test_replication import FAST, TOPIC, create_topic, produce_acks_all, same_logs
from tests.fixtures.broker import free_port
from tests.fixtures.cluster import Cluster, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def metrics_cluster(cluster_factory: Any, **config: Any) -> tuple[Cluster, dict[int, int]]:
    ports = {i: free_port() for i in (1, 2, 3)}
    cluster = cluster_factory(config={**FAST, **config},
                              node_config={i: {"metrics.port": p} for i, p in ports.items()})
    return cluster, ports


def fetchers_running(port: int) -> dict[str, float]:
    """Handled-message counts of the replica fetchers a node runs now."""
    m = scrape(port)
    names = [key.split('actor="')[1].split('"')[0] for key, value in m.items()
             if key.startswith('actorlog_actor_running{actor="replica-fetcher-') and value == 1]
    return {name: m[f'actorlog_actor_messages_handled_total{{actor="{name}"}}'] for name in names}


def test_an_idle_fetcher_stops_and_a_new_partition_starts_it_again(
        cluster_factory: Any) -> None:
    """Deleting the only replicated topic leaves every follower's fetchers without
    partitions: they stop (actors_running goes back down, their handled counts no
    longer move: no fetch traffic), and a new topic of the same leaders starts them
    again, reached by the senders that knew the old ones."""
    cluster, ports = metrics_cluster(cluster_factory)
    before = {i: scrape(p)["actorlog_actors_running"] for i, p in ports.items()}
    leaders = create_topic(cluster, partitions=3)
    acked, errors = produce_acks_all(cluster, [b"a-%d" % i for i in range(50)])
    assert errors == [] and len(acked) == 50
    wait_for("identical replicas", lambda: same_logs(cluster, 0), timeout_s=60)
    running = {i: fetchers_running(p) for i, p in ports.items()}
    for i in ports:
        expected = {f"replica-fetcher-{leader}-0" for leader in leaders.values() if leader != i}
        assert set(running[i]) == expected
        assert scrape(ports[i])["actorlog_actors_running"] == before[i] + len(expected)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        admin.delete_topics([TOPIC])
    finally:
        admin.close()
    wait_for("every fetcher stopped", lambda: all(
        fetchers_running(p) == {} and scrape(p)["actorlog_actors_running"] == before[i]
        for i, p in ports.items()), timeout_s=60)
    for i in ports:
        assert "stopped idle replica fetcher" in cluster.nodes[i].log()
    # No traffic after: nothing reaches a stopped fetcher (its counters stay).
    def handled_by_stopped() -> dict[str, float]:
        out = {}
        for i, p in ports.items():
            for key, value in scrape(p).items():
                if key.startswith('actorlog_actor_messages_handled_total{actor="replica-fetch'):
                    out[f"{i}/{key}"] = value
        return out

    handled = handled_by_stopped()
    assert len(handled) == sum(len(r) for r in running.values())
    time.sleep(1.5)
    assert handled_by_stopped() == handled
    # The same names start again with a new topic, and replicate.
    wait_for("the topic gone", lambda: TOPIC not in cluster.view().topics(), timeout_s=30)
    create_topic(cluster, partitions=3)
    more, errors = produce_acks_all(cluster, [b"b-%d" % i for i in range(50)])
    assert errors == [] and len(more) == 50
    records = wait_for("identical replicas again", lambda: same_logs(cluster, 0), timeout_s=60)
    assert [r.value for r in records] == more
    wait_for("fetchers running again", lambda: all(fetchers_running(p) for p in ports.values()),
             timeout_s=30)
