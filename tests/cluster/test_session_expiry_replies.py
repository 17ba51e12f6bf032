"""Replies to a node whose ZooKeeper session expired while its process ran on.

A node's answers to another go through its directory, which forgets a peer when the
peer's registration goes and learns it again only when it reads the new one. A follower
paused past its session (SIGSTOP: the process runs on afterwards, its session expired)
fetches again at once when continued, before its leader has read its new registration:
the leader's answer must still reach it. Lost, the follower waited
``replica.socket.timeout.ms`` before asking again, out of the ISR meanwhile.

Two real nodes, a real ZooKeeper, confluent-kafka and kafka-python clients.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.broker.test_metrics import scrape
from tests.fixtures.broker import free_port
from tests.fixtures.cluster import Cluster, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

TOPIC = "expiring"
# The fetch timeout well past the bound the test waits for the follower's return
# (60 s); the leader takes a silent follower out of the ISR after 1 s, before its session
# expires (4 s), so the controller's failure handling has no ISR to change and keeps the
# leader epoch: the follower's fetcher is not made again on its return.
SLOW_TIMEOUT = {"replica.socket.timeout.ms": 60_000, "replica.lag.time.max.ms": 1000,
                "replica.fetch.backoff.ms": 100, "auto.leader.rebalance.enable": False}


def isr(cluster: Cluster, via: int) -> tuple[int, ...]:
    found = cluster.nodes[via].metadata([TOPIC]).partitions.get((TOPIC, 0))
    return tuple(sorted(found.isr)) if found is not None else ()


def produce(cluster: Cluster, count: int, acks: str | int) -> int:
    """To the leader (node 1): how many were acknowledged."""
    acked = []
    producer = Producer({"bootstrap.servers": cluster.nodes[1].bootstrap, "acks": acks,
                         "linger.ms": 2, "message.timeout.ms": 20_000})
    for i in range(count):
        producer.produce(TOPIC, f"v{i}".encode(), partition=0,
                         on_delivery=lambda err, _msg: acked.append(err is None))
    producer.flush(30)
    return sum(acked)


def test_a_follower_whose_session_expired_is_back_in_the_isr_before_the_fetch_timeout(
        cluster_factory: Any) -> None:
    metrics_port = free_port()
    cluster: Cluster = cluster_factory(2, config=SLOW_TIMEOUT, start=False,
                                       node_config={1: {"metrics.port": metrics_port}})
    cluster.nodes[1].start()  # the controller and the leader
    cluster.wait_formed()
    cluster.nodes[2].start()
    cluster.wait_formed()
    assert cluster.controller() == 1
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic(TOPIC, replica_assignments={0: [1, 2]})])
    finally:
        client.close()
    wait_for("both replicas in the ISR", lambda: isr(cluster, 1) == (1, 2))
    # acknowledged by both: node 2's fetcher has had its leader's answers
    assert produce(cluster, 20, "all") == 20
    dead_before = scrape(metrics_port)["actorlog_dead_letters_total"]
    cluster.nodes[2].pause()
    try:
        wait_for("node 2 out of the ISR", lambda: isr(cluster, 1) == (1,))
        # then its session expires: node 1 forgets node 2
        wait_for("node 2's registration to go",
                 lambda: "broker 2 left the cluster" in cluster.nodes[1].log(),
                 timeout_s=cluster.session_timeout_ms / 1000 + 20)
        # records waiting: the leader answers node 2's next fetch at once
        assert produce(cluster, 20, 1) == 20
    finally:
        cluster.nodes[2].resume()
    # Without its answers, node 2 would ask again only after replica.socket.timeout.ms
    # (60 s), past this wait's default
    wait_for("node 2 back in the ISR", lambda: isr(cluster, 1) == (1, 2))
    # what node 1 sent node 2 meanwhile (its answer to node 2's fetch among it) waited for
    # node 2's new registration: none of it was lost
    assert scrape(metrics_port)["actorlog_dead_letters_total"] == dead_before
    assert "registered again as broker 2" in cluster.nodes[2].log()
