"""A rolling restart with a producer running the whole time (issue 14).

Each node of three is stopped with SIGTERM (controlled shutdown first) and
started again, one at a time, waiting until it is back in every ISR, while
an idempotent acks=all confluent-kafka producer keeps sending. No delivery
may fail, and every acknowledged record is read back exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.cluster.test_cluster import create
from tests.fixtures.cluster import Cluster, wait_for

# Over 20 s: three node restarts, each waiting for the node to rejoin every ISR.
pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.slow]

MAX_RECORDS = 20_000       # the producer's bound in count ...
MAX_PRODUCE_S = 150.0      # ... and in time


def test_a_rolling_restart_with_an_idempotent_producer_loses_and_duplicates_nothing(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(3)
    create(cluster, "roll", 3, 3, configs={"min.insync.replicas": "2"})
    cluster.wait_topic("roll", 3)
    acked: list[bytes] = []
    failed: list[str] = []
    stop = threading.Event()

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.append(msg.value())

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000})

    def produce() -> None:
        deadline = time.monotonic() + MAX_PRODUCE_S
        for i in range(MAX_RECORDS):
            if stop.is_set() or time.monotonic() > deadline:
                break
            producer.produce("roll", value=f"r-{i}".encode(), key=str(i % 7).encode(),
                             on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(120)

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        wait_for("records acknowledged before the restarts", lambda: len(acked) > 50 or None)
        for node_id in sorted(cluster.nodes):
            before = len(acked)
            cluster.nodes[node_id].stop()
            cluster.nodes[node_id].start()
            other = next(i for i in cluster.nodes if i != node_id)
            wait_for(f"node {node_id} back in every ISR", lambda n=node_id, o=other: all(
                n in part.isr for (t, _p), part in cluster.view(o).partitions.items()
                if t == "roll") or None, timeout_s=60)
            wait_for(f"records acknowledged after node {node_id} came back",
                     lambda b=before: len(acked) > b + 20 or None)
    finally:
        stop.set()
        worker.join(180)
    assert not worker.is_alive()
    assert failed == []
    assert len(acked) > 100

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "roll-check",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen: Counter[bytes] = Counter()
    try:
        consumer.subscribe(["roll"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(seen.values()) < len(acked):
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    seen[msg.value()] += 1
    finally:
        consumer.close()
    assert set(acked) <= set(seen), f"{len(set(acked) - set(seen))} acknowledged records lost"
    assert [v for v, n in seen.items() if n > 1] == []
