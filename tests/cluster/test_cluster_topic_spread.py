"""A topic created (or deleted) on a cluster node of two processes is so on every
connection to that node as soon as the client is answered.

Kafka's broker has one metadata cache: a client told "created" by a broker sees the
topic on any connection to it. A node of num.processes = 2 has a cache per handler in
each process, fed by process 0's ReplicaManager; it answers a CreateTopics or a
DeleteTopics once every handler of both processes acknowledged metadata that shows the
change (actors/replica_manager.py, MetadataSync). Here a real one-node cluster on a real
ZooKeeper: connections held by each process (read from /proc), a CreateTopics on one,
then at once a Metadata on every connection, many times over, with timeout_ms 0
(confluent-kafka's admin default) and a positive one; a CreatePartitions and a
DeleteTopics likewise. A process stopped (SIGSTOP) holds a change back: bounded, named,
and past a positive timeout_ms answered REQUEST_TIMED_OUT (a deletion too, as Kafka's
DelayedDeleteTopics).
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from actors.core.metadata_cache import SYNC_WAIT_MS
from actors.topology import spread_index
from bench.scale import tcp_inodes
from tests.broker.rawclient import RawClient
from tests.broker.test_processes import connections_of
from tests.fixtures.cluster import Cluster, ClusterNode

pytestmark = [pytest.mark.multiprocess]

CREATE_TOPICS, DELETE_TOPICS, METADATA, CREATE_PARTITIONS = 19, 20, 3, 37
UNKNOWN = 3  # UNKNOWN_TOPIC_OR_PARTITION
TIMED_OUT = 7  # REQUEST_TIMED_OUT
ROUNDS = 60  # per timeout_ms: each a create and a delete, each checked on every connection
EACH_PROCESS = 2  # connections held by each process


def process_holding(node: ClusterNode, client: RawClient) -> int | None:
    """Which process of ``node`` (0 or 1) holds the broker's end of ``client``'s connection."""
    assert node.pid is not None
    inodes = tcp_inodes(node.port, remote_port=client.sock.getsockname()[1])
    for index, pid in enumerate([node.pid, *node.worker_pids()]):
        if connections_of(pid, inodes):
            return index
    return None


def connections(node: ClusterNode) -> dict[int, list[RawClient]]:
    """EACH_PROCESS connections held by each of the node's two processes (bounded tries)."""
    held: dict[int, list[RawClient]] = {0: [], 1: []}
    spare: list[RawClient] = []
    deadline = time.monotonic() + 30
    while any(len(c) < EACH_PROCESS for c in held.values()):
        assert time.monotonic() < deadline and len(spare) < 64, \
            f"no {EACH_PROCESS} connections in each process: {held}"
        client = RawClient(node.port, client_id=f"spread-{len(spare)}")
        answer = metadata(client, [])  # connected and served: its process is settled
        assert answer.brokers, answer
        index = process_holding(node, client)
        if index is not None and len(held[index]) < EACH_PROCESS:
            held[index].append(client)
        else:
            spare.append(client)
    for client in spare:
        client.close()
    return held


METADATA_VALUES = {"allow_auto_topic_creation": False,
                   "include_cluster_authorized_operations": False,
                   "include_topic_authorized_operations": False}


def metadata(client: RawClient, topics: list[str]) -> Any:
    return client.call(METADATA, 8, {"topics": [{"name": t} for t in topics],
                                     **METADATA_VALUES})


def ask_everywhere(held: dict[int, list[RawClient]], topic: str) -> list[tuple[int, Any]]:
    """A Metadata for ``topic`` on every connection, all sent before any answer is read
    (the latest process's first): (process, its row of ``topic``) each."""
    order = [(index, client) for index in sorted(held, reverse=True) for client in held[index]]
    for _index, client in order:
        client.send(METADATA, 8, {"topics": [{"name": topic}], **METADATA_VALUES})
    rows = []
    for index, client in order:
        _correlation, answer = client.recv()
        [row] = answer.topics
        rows.append((index, row))
    return rows


def seen(row: Any, count: int) -> str | None:
    """None when a Metadata row shows its topic with ``count`` partitions, each with a
    leader; else what it shows."""
    if row.error_code != 0 or len(row.partitions) != count or any(
            p.error_code != 0 or p.leader_id < 0 for p in row.partitions):
        rows = [(p.error_code, p.leader_id) for p in row.partitions]
        return f"error {row.error_code}, partitions (error, leader) {rows}"
    return None


def gone(row: Any) -> str | None:
    """None when a Metadata row says its topic is unknown; else what it shows."""
    return None if row.error_code == UNKNOWN else \
        f"error {row.error_code}, {len(row.partitions)} partition(s)"


def on_process_0(prefix: str) -> str:
    """A topic name whose one partition is process 0's (shard 0 of 2): its LeaderAndIsr
    (or StopReplica), and the UpdateMetadata behind it, need nothing of process 1."""
    return next(f"{prefix}-{i}" for i in range(1000)
                if spread_index(f"{prefix}-{i}", 0, 2) == 0)


@pytest.mark.parametrize("timeout_ms", [0, 30_000])
def test_a_created_grown_or_deleted_topic_is_so_on_every_connection_at_once(
        cluster_factory: Any, timeout_ms: int) -> None:
    cluster: Cluster = cluster_factory(size=1, config={"num.processes": 2})
    node = cluster.nodes[1]
    held = connections(node)
    admin = held[0][0] if timeout_ms else held[1][0]  # ask on one process, then the other
    wrong: list[str] = []
    try:
        for i in range(ROUNDS):
            topic = f"spread-{timeout_ms}-{i}"
            answer = admin.call(CREATE_TOPICS, 7, {
                "topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": timeout_ms, "validate_only": False})
            assert answer.topics[0].error_code == 0, answer
            for index, row in ask_everywhere(held, topic):
                problem = seen(row, 2)
                if problem:
                    wrong.append(f"{topic} created, process {index}: {problem}")
            answer = admin.call(CREATE_PARTITIONS, 3, {
                "topics": [{"name": topic, "count": 4, "assignments": None}],
                "timeout_ms": timeout_ms, "validate_only": False})
            assert answer.results[0].error_code == 0, answer
            for index, row in ask_everywhere(held, topic):
                problem = seen(row, 4)
                if problem:
                    wrong.append(f"{topic} grown to 4, process {index}: {problem}")
            answer = admin.call(DELETE_TOPICS, 4, {"topic_names": [topic],
                                                   "timeout_ms": timeout_ms})
            assert answer.responses[0].error_code == 0, answer
            for index, row in ask_everywhere(held, topic):
                problem = gone(row)
                if problem:
                    wrong.append(f"{topic} deleted, process {index}: {problem}")
    finally:
        for clients in held.values():
            for client in clients:
                client.close()
    assert not wrong, f"{len(wrong)} stale answer(s) of {ROUNDS * 3 * 2 * EACH_PROCESS}:\n" \
                      + "\n".join(wrong[:20])


def test_a_stopped_process_delays_the_answer_a_bounded_time_and_is_named(
        cluster_factory: Any) -> None:
    """Process 1 of the node stopped (SIGSTOP: it acknowledges nothing, as while it
    restarts): a CreateTopics with timeout_ms 0 is answered once the ReplicaManager gives
    up on it (SYNC_WAIT_MS), which it logs naming process 1; the next, even with a short
    positive timeout_ms, does not wait for it again (one give-up an outage). Continued, it
    acknowledges again: the next is answered at once."""
    cluster: Cluster = cluster_factory(size=1, config={"num.processes": 2,
                                                       "num.partition.shards": 2})
    node = cluster.nodes[1]
    held = connections(node)
    admin = held[0][0]  # process 0's: it serves while process 1 is stopped
    for client in held[0][1:] + held[1]:
        client.close()
    [worker] = node.worker_pids()

    def create(topic: str, timeout_ms: int) -> tuple[int, float]:
        began = time.monotonic()
        answer = admin.call(CREATE_TOPICS, 7, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": timeout_ms, "validate_only": False})
        return answer.topics[0].error_code, time.monotonic() - began

    try:
        with node.process.hold_worker(worker) as process_1:
            assert process_1.send_signal(signal.SIGSTOP)
            try:
                stopped = on_process_0("while-stopped")
                code, took = create(stopped, 0)
                assert code == 0
                assert SYNC_WAIT_MS / 1000 - 1 <= took <= SYNC_WAIT_MS / 1000 + 15, took
                [line] = [x for x in node.process.log().splitlines()
                          if f"topic(s) {stopped}:" in x and "did not acknowledge" in x]
                assert "process 1 (handler-" in line and "process 0" not in line, line
                # given up on: the next change does not wait for it again (one give-up
                # an outage, not one a topic change), whatever its timeout
                code, took = create(on_process_0("short"), 2000)
                assert code == 0, (code, took)  # waited for it: REQUEST_TIMED_OUT at 2 s
            finally:
                process_1.send_signal(signal.SIGCONT)
        code, took = create(on_process_0("continued"), 0)
        assert code == 0 and took < SYNC_WAIT_MS / 1000 - 1, took  # not the give-up
    finally:
        admin.close()


def test_a_delete_not_gone_everywhere_by_its_timeout_is_answered_timed_out(
        cluster_factory: Any) -> None:
    """Kafka answers a DeleteTopics REQUEST_TIMED_OUT for a topic still in its metadata
    when timeout_ms is up (DelayedDeleteTopics), and the deletion goes on. Process 1
    stopped (SIGSTOP): its handlers cannot drop the topic from their metadata, so a delete
    with timeout_ms 2000 on process 0's connection is answered REQUEST_TIMED_OUT at its
    timeout, while process 0 no longer serves the topic. Continued (SIGCONT), the deletion
    completes: gone on process 1's connection too, and gone from the cluster."""
    cluster: Cluster = cluster_factory(size=1, config={"num.processes": 2,
                                                       "num.partition.shards": 2})
    node = cluster.nodes[1]
    held = connections(node)
    admin, watcher = held[0][0], held[1][0]
    for client in held[0][1:] + held[1][1:]:
        client.close()
    [worker] = node.worker_pids()
    topic = on_process_0("doomed")
    timeout_ms = 2000

    def delete(name: str, timeout_ms: int) -> tuple[Any, float]:
        began = time.monotonic()
        answer = admin.call(DELETE_TOPICS, 5, {"topic_names": [name], "timeout_ms": timeout_ms})
        [row] = answer.responses  # (v5: with its error_message)
        return row, time.monotonic() - began

    try:
        answer = admin.call(CREATE_TOPICS, 7, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 30_000, "validate_only": False})
        assert answer.topics[0].error_code == 0, answer
        [row] = metadata(watcher, [topic]).topics
        assert seen(row, 1) is None, seen(row, 1)  # on process 1 too, before it stops
        with node.process.hold_worker(worker) as process_1:
            assert process_1.send_signal(signal.SIGSTOP)
            try:
                row, took = delete(topic, timeout_ms)
                assert row.error_code == TIMED_OUT, (row, took)
                assert topic in row.error_message and f"{timeout_ms} ms" in row.error_message
                assert timeout_ms / 1000 - 0.5 <= took <= timeout_ms / 1000 + 15, took
                [row] = metadata(admin, [topic]).topics
                assert gone(row) is None, gone(row)  # process 0 dropped it; 1 is held back
            finally:
                process_1.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while (problem := gone(metadata(watcher, [topic]).topics[0])) is not None:
            assert time.monotonic() < deadline, f"still on process 1 after 30 s: {problem}"
            time.sleep(0.05)
        # the deletion finished (its replica dropped, its znodes removed): deleting it
        # again finds no topic
        while (again := delete(topic, 30_000)[0]).error_code != UNKNOWN:
            assert again.error_code == 0, again  # still marked for deletion: NONE again
            assert time.monotonic() < deadline, f"not deleted after 30 s: {again}"
            time.sleep(0.05)
    finally:
        admin.close()
        watcher.close()
