"""Process 1 of a cluster node killed (kill -9) and restarted: no request finds a partition
led there unknown while its shard restores the roles (num.processes = 2).

Shard i lives in process i % 2; after a restart process 1's shards hold nothing until
process 0's ReplicaManager sends their last roles (RestoreRoles). Requests reach those
shards from process 1's own handlers and from process 0's, which forward to them. The
restarted process serves no connection before its shards hold their roles again, and a
request from process 0's handlers that comes first is answered NOT_LEADER_OR_FOLLOWER
(Kafka's answer for a partition its metadata knows and the broker does not host: the
client refreshes its metadata and retries), never UNKNOWN_TOPIC_OR_PARTITION, which says
the partition does not exist.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.broker.rawclient import RawClient, record_batch
from tests.cluster.test_replication import TOPIC, create_topic
from tests.fixtures.cluster import wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess]

PARTITIONS = 4
CONFIG = {"num.processes": 2, "num.partition.shards": 2}
UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


class Load:
    """Threads that each open a connection, Produce (acks=1) to and Fetch from every
    partition, close it, and again: so new connections reach process 1 as soon as it
    serves, and process 0's handlers forward to its shards all along. Every partition
    error code is kept, with whether it came after the restart was seen."""

    def __init__(self, port: int, threads: int = 3) -> None:
        self.port = port
        self.codes: list[tuple[str, int, bool]] = []
        self.restarted = threading.Event()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        rounds = 0
        while not self.stop.is_set() and time.monotonic() < deadline and rounds < 20_000:
            rounds += 1
            after = self.restarted.is_set()
            try:
                with RawClient(self.port, client_id="restart-load", timeout=10.0) as client:
                    for p in range(PARTITIONS):
                        code = client.produce(TOPIC, p, record_batch([(None, b"v")]),
                                              acks=1).error_code
                        self.codes.append(("produce", int(code), after))
                        code = client.fetch(TOPIC, p, 0, max_bytes=1024).error_code
                        self.codes.append(("fetch", int(code), after))
            except (OSError, EOFError, AssertionError):
                time.sleep(0.01)  # the killed process's connections; a new one next

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads)


def test_requests_right_after_process_1_restarts_never_find_a_partition_unknown(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(size=1, config=CONFIG)
    node = cluster.nodes[1]
    wait_for("process 1", lambda: node.worker_pids(), 60)
    create_topic(cluster, partitions=PARTITIONS, rf=1)

    def all_produce() -> bool:
        with RawClient(node.port) as client:
            return all(client.produce(TOPIC, p, record_batch([(None, b"w")]),
                                      acks=1).error_code == 0 for p in range(PARTITIONS))

    wait_for("every partition taking records", all_produce, 30)

    for life in range(2):  # the window is a few ms: two restarts, under load throughout
        [worker] = node.worker_pids()
        load = Load(node.port)
        try:
            wait_for("load before the kill", lambda ld=load: len(ld.codes) > 50, 30)
            with node.process.hold_worker(worker) as process_1:
                assert process_1.kill()
                wait_for("process 1 to die", lambda: process_1.exited() or None, 10)
            wait_for("process 1 restarted",
                     lambda w=worker: node.worker_pids() and node.worker_pids()[0] != w, 60)
            load.restarted.set()
            seen = len(load.codes)
            wait_for("load after the restart", lambda ld=load, n=seen: len(ld.codes) > n + 400,
                     60)
        finally:
            load.finish()
        unknown = [c for c in load.codes if c[1] == UNKNOWN]
        assert unknown == [], f"life {life}: {len(unknown)} answers UNKNOWN_TOPIC_OR_PARTITION"
        after = [code for _, code, restarted in load.codes if restarted]
        assert after.count(0) > 0, sorted(set(after))
    assert "Traceback" not in node.log(), node.log()[-3000:]
