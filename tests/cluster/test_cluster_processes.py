"""Cluster nodes of several processes each (num.processes = 2, issue 18) on a real ZooKeeper.

Three nodes, each two `actorlog serve` processes; a topic whose partitions
put a leader and followers in every process of every node. Leadership and
ISR reach the shards of process 1 (they live apart from the ReplicaManager,
the fetchers and the controller of process 0), a follower's batches are
appended by the shard of whichever process owns the partition, a leader
answers replica fetches for partitions of either process, and acks=all
completes through the purgatory of the partition's process for a handler of either.
kill -9 of a whole node fails over as with one process; kill -9 of process 1
of a node restarts it, and its shards learn their roles again and rejoin
every ISR (with num.processes.shard.placement = first, where process 1 holds only
connections, too). Every acknowledged record is read back exactly once, in order.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from actors.topology import spread_index
from tests.broker.rawclient import record_batch
from tests.broker.test_processes import connection_on_process_0
from tests.cluster.test_replication import FAST, TOPIC, KeyedProducer, create_topic, same_logs
from tests.cluster.test_transactions_cluster import CONFIG as TXN_CONFIG
from tests.cluster.test_transactions_cluster import commit_abort_commit
from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.pids import Paused
from tests.fixtures.replication import values_of

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

PROCESSES = 2
SHARDS = 2  # num.partition.shards: shard i lives in process i % num.processes
PARTITIONS = 12
CONFIG = {**FAST, "num.processes": PROCESSES, "num.partition.shards": SHARDS}


def process_of(partition: int) -> int:
    """The process of every node whose shard owns ``partition`` (the same on each node)."""
    return spread_index(TOPIC, partition, SHARDS) % PROCESSES


def roles(leaders: dict[int, int], nodes: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(node, process) -> (partitions it leads, partitions it follows); RF = every node."""
    out = {}
    for node in nodes:
        for k in range(PROCESSES):
            mine = [p for p in leaders if process_of(p) == k]
            out[(node, k)] = (sum(leaders[p] == node for p in mine),
                              sum(leaders[p] != node for p in mine))
    return out


def consume_partitions(bootstrap: str, expected: dict[int, int],
                       timeout_s: float = 60.0) -> dict[int, list[int]]:
    """One confluent-kafka consumer over every partition, from offset 0, until it has
    read ``expected[p]`` records of each."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in expected])
    got: dict[int, list[int]] = {p: [] for p in expected}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and any(
                len(got[p]) < n for p, n in expected.items()):
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got[msg.partition()].append(int(msg.value()))
    finally:
        consumer.close()
    return got


def check_everything_acknowledged_is_there(cluster: Cluster, producer: KeyedProducer,
                                           read_via: str) -> None:
    """Every live replica holds the same log; each acknowledged record is in it exactly once,
    in send order per partition, and a consumer reads exactly that log back."""
    assert producer.failed == []
    logs = {}
    for p in range(PARTITIONS):
        records = wait_for(f"identical replicas of partition {p}",
                           lambda p=p: same_logs(cluster, p), timeout_s=60)
        values = [int(v) for v in values_of(records)]
        assert len(values) == len(set(values)), f"partition {p}: a record written twice"
        assert values == sorted(values), f"partition {p}: records out of send order"
        missing = set(producer.delivered[p]) - set(values)
        assert not missing, f"partition {p}: acknowledged records lost: {sorted(missing)[:10]}"
        logs[p] = values
    consumed = consume_partitions(read_via, {p: len(v) for p, v in logs.items()})
    assert consumed == logs


def make_cluster(cluster_factory: Any, placement: str = "spread",
                 config: dict[str, Any] | None = None) -> tuple[Cluster, dict[int, int]]:
    """num.processes.shard.placement = spread: every process of every node leads some
    partitions and follows others; first: process 0 of each node all of them. ``config``:
    more settings, over CONFIG's."""
    cluster = cluster_factory(config={**CONFIG, "num.processes.shard.placement": placement,
                                      **(config or {})})
    leaders = create_topic(cluster, partitions=PARTITIONS)
    if placement == "spread":
        spread = roles(leaders, list(cluster.nodes))
        assert all(lead and follow for lead, follow in spread.values()), spread
    return cluster, leaders


def test_every_process_of_every_node_leads_and_follows_and_acks_all_reads_back(
        cluster_factory: Any) -> None:
    cluster, _leaders = make_cluster(cluster_factory)
    producer = KeyedProducer(cluster.nodes[1].bootstrap, PARTITIONS, limit=1200).start()
    wait_for("1200 records sent", lambda: producer.sent >= 1200, timeout_s=60)
    producer.finish()
    assert producer.count() == 1200
    check_everything_acknowledged_is_there(cluster, producer, cluster.nodes[3].bootstrap)
    # each acks=all answer reached the handler that waits for it, in whichever process
    # (one of process k answered to process 0's handler of the same name timed out the
    # producer's request, acknowledged only by its retry)
    for node in cluster.nodes.values():
        assert "to unknown request" not in node.log(), node.broker_id


def test_a_whole_node_killed_under_acks_all_fails_over_and_loses_nothing(
        cluster_factory: Any, holds: ExitStack) -> None:
    cluster, leaders = make_cluster(cluster_factory)
    counts = {n: sum(leader == n for leader in leaders.values()) for n in cluster.nodes}
    victim = cluster.nodes[max(counts, key=lambda n: counts[n])]
    # held (tests/fixtures/pids.py): once they exit their pids may be other processes'
    workers = [holds.enter_context(victim.process.hold_worker(pid))
               for pid in victim.worker_pids()]
    assert len(workers) == PROCESSES - 1
    producer = KeyedProducer(cluster.bootstrap, PARTITIONS).start()
    try:
        wait_for("records flowing", lambda: producer.count() > 200, timeout_s=60)
        before = producer.count()
        victim.kill()  # every process of it, kill -9
        wait_for("its process 1 gone", lambda: all(w.exited() for w in workers),
                 timeout_s=10)
        survivors = cluster.live()

        def moved() -> bool:
            views = [n.metadata() for n in survivors]
            return all(v.partitions[(TOPIC, p)].leader not in (-1, victim.broker_id)
                       for v in views for p in range(PARTITIONS))

        wait_for(f"every leadership to leave broker {victim.broker_id}", moved, timeout_s=60)
        wait_for("acknowledgements after the failover",
                 lambda: producer.count() > before + 300, timeout_s=120)
    finally:
        producer.finish()
    check_everything_acknowledged_is_there(cluster, producer, survivors[0].bootstrap)


@pytest.mark.parametrize("placement", ["spread", "first"])
def test_process_1_of_a_node_killed_is_restarted_and_rejoins_every_isr(
        cluster_factory: Any, placement: str) -> None:
    # first: process 1 holds no partition, only connections (the producer's to broker 2
    # handed to it): they drop, its replacement takes new ones, nothing acknowledged is lost
    cluster, _leaders = make_cluster(cluster_factory, placement)
    node = cluster.nodes[2]
    [worker] = node.worker_pids()
    producer = KeyedProducer(cluster.nodes[1].bootstrap, PARTITIONS).start()
    try:
        wait_for("records flowing", lambda: producer.count() > 200, timeout_s=60)
        with node.process.hold_worker(worker) as process_1:  # (its pid may be another's)
            assert process_1.kill()
        wait_for("process 1 of broker 2 restarted",
                 lambda: node.worker_pids() and node.worker_pids()[0] != worker, timeout_s=60)
        before = producer.count()

        def full_isrs() -> bool:
            views = [n.metadata() for n in cluster.nodes.values()]
            return all(len(v.partitions[(TOPIC, p)].isr) == 3
                       for v in views for p in range(PARTITIONS))

        wait_for("broker 2 in every ISR again", full_isrs, timeout_s=60)
        if placement == "spread":
            assert "process 1 restarted: last roles of" in node.log()
            # process 1's shards applied them (RestoreRoles), not waiting for the
            # controller; the ISRs may never have shrunk (a short kill), so they say
            # nothing of when: waited for
            wait_for("process 1's shards to restore their roles",
                     lambda: "restored roles (process 1 restarted)" in node.log(),
                     timeout_s=30)
        wait_for("acknowledgements after the restart",
                 lambda: producer.count() > before + 300, timeout_s=120)
    finally:
        producer.finish()
    assert node.running
    # every replica, node 2's included (process 1's shards as leaders and as followers),
    # holds every acknowledged record
    check_everything_acknowledged_is_there(cluster, producer, cluster.nodes[3].bootstrap)


def test_a_leader_whose_process_1_is_paused_keeps_replicating_its_process_0s_partitions(
        cluster_factory: Any) -> None:
    """Process 1 of broker 1 paused (SIGSTOP): the followers' replica fetches to broker 1
    name partitions of both its processes. Each ReplicaRead of process 1's shard is
    answered NOT_LEADER_OR_FOLLOWER by its deadline (the fetcher backs it off), so process
    0's partitions go on replicating: acks=all produces to one of them are acknowledged
    for longer than replica.lag.time.max.ms, its ISR whole. (Before, the whole replica
    fetch went unanswered, the followers fell out of that ISR too and min.insync.replicas
    refused the produces.) The read deadline is 5 s at least, so a replica fetch naming
    process 1's partitions takes that long: replica.lag.time.max.ms is 16 s here (a
    follower is caught up within two such fetches), replica.socket.timeout.ms 30 s (their
    defaults are 30 s both), and a produce is acknowledged within two fetches."""
    lag_ms = 16_000
    cluster, leaders = make_cluster(cluster_factory, config={
        "replica.lag.time.max.ms": lag_ms, "replica.socket.timeout.ms": 30_000})
    lead = cluster.nodes[1]
    mine = [p for p, n in leaders.items() if n == 1 and process_of(p) == 0]
    theirs = [p for p, n in leaders.items() if n == 1 and process_of(p) == 1]
    assert mine and theirs, leaders
    [worker] = lead.worker_pids()
    client = connection_on_process_0(lead.process, worker, TOPIC, mine[0])
    client.sock.settimeout(60)  # (an acks=all answer takes up to two ~5 s replica fetches)
    try:
        with Paused(lead.process.hold_worker(worker), "process 1 of broker 1") as paused:
            codes = []
            # past the lag time and an ISR check after it (every lag / 2)
            until = time.monotonic() + 1.5 * lag_ms / 1000
            while time.monotonic() < until and len(codes) < 200:
                answer = client.produce(TOPIC, mine[0], record_batch([(None, b"7")]),
                                        acks=-1, timeout_ms=30_000)
                codes.append(answer.error_code)
            assert set(codes) == {0}, codes
            isr = cluster.nodes[2].metadata([TOPIC]).partitions[(TOPIC, mine[0])].isr
            assert len(isr) == 3, isr
            assert paused.continued == 0, "process 1 ran meanwhile"
    finally:
        client.close()


def test_sigterm_of_a_node_moves_its_leaderships_then_stops_every_process_cleanly(
        cluster_factory: Any, holds: ExitStack) -> None:
    cluster, leaders = make_cluster(cluster_factory)
    node = cluster.nodes[2]
    assert any(leader == 2 for leader in leaders.values())
    [worker] = [holds.enter_context(node.process.hold_worker(pid))
                for pid in node.worker_pids()]
    producer = KeyedProducer(cluster.nodes[1].bootstrap, PARTITIONS, limit=600).start()
    wait_for("600 records sent", lambda: producer.sent >= 600, timeout_s=60)
    producer.finish()
    started = time.monotonic()
    assert node.stop() == 0
    took = time.monotonic() - started
    assert "controlled shutdown done after 1 attempt(s)" in node.log(), node.log()[-3000:]
    assert worker.exited()
    assert (node.data_dir / ".kafka_cleanshutdown").exists()
    assert took < 30, took
    # The controller answers the controlled shutdown once the leaderships moved; the
    # others' metadata (each process's copy) gets them by UpdateMetadata after that answer.
    wait_for("node 1's metadata to name leaders on nodes 1 and 3 only", lambda: all(
        view.partitions[(TOPIC, p)].leader in (1, 3)
        for view in cluster.nodes[1].views() for p in range(PARTITIONS)))
    check_everything_acknowledged_is_there(cluster, producer, cluster.nodes[3].bootstrap)


def test_transactions_commit_and_abort_on_partitions_of_either_process(
        cluster_factory: Any) -> None:
    """The markers of a coordinator on one node reach the shards of process 1 of the others
    (through the relay of their process 0) and of its own (directly)."""
    cluster = cluster_factory(3, config={**TXN_CONFIG, "num.processes": PROCESSES})
    commit_abort_commit(cluster)
