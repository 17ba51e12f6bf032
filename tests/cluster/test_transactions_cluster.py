"""Transactions on a 3-node cluster: the coordinator is the leader of the id's
``__transaction_state`` partition, markers reach partitions led by the other nodes, and
offsets sent in a transaction reach the group coordinator of another node at commit.

kill -9 of the coordinator's node mid-commit (``__transaction_state`` RF 3, min.isr 2; an
output topic RF 3, min.insync.replicas 2, one partition led by each node): once in the
window where PrepareCommit is durable and a marker is not written yet (that partition's
leader paused), at a few delays after commit_transaction starts, and before any EndTxn
(the successor must abort it). A new producer with the same transactional.id settles
the transaction through the new coordinator; a read_committed consumer sees all of the
killed transaction or none of it, the group's offset agrees, and nothing changes once
the killed node is back in every ISR. (In every run so far the timed kills ended in a
commit: the producer retries its EndTxn with the new coordinator.)

kill -9 of the group coordinator's node (the leader of the group's __consumer_offsets
partition) while two producers hold offsets for the group in open transactions: one
commits, one aborts; the successor loads the pending offsets and the markers settle them:
the committed offset shows once, the aborted one never.

A partition whose ISR is below its min.insync.replicas refuses a commit marker
(NOT_ENOUGH_REPLICAS): the transaction stays PrepareCommit, invisible to read_committed,
until the follower is back in the ISR; the coordinator retries without flooding its log.
With __transaction_state's own ISR short, EndTxn is refused (COORDINATOR_NOT_AVAILABLE)
and the client's retries get through once the follower is back.

These found four bugs, fixed in the broker: marker requests lost with their node hung
the transaction in PrepareCommit; markers were acknowledged before the ISR held them;
offsets' fate reached the group coordinators only through the coordinator's answer; a
new coordinator loaded ``__transaction_state`` only to its (lagging) high watermark.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.core.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from tests.broker.rawclient import RawClient
from tests.broker.test_groups import call
from tests.broker.test_transactions import DESCRIBE_TXNS, read_all, values
from tests.cluster.test_cluster import create
from tests.fixtures.cluster import Cluster, ClusterNode, wait_for

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

CONFIG = {
    "transaction.state.log.num.partitions": 6,
    "transaction.state.log.replication.factor": 5,  # capped to the 3 live brokers
    "transaction.state.log.min.isr": 2,
}


def test_transactions_across_nodes(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=CONFIG)
    commit_abort_commit(cluster)
    # __transaction_state: replication capped to the live brokers, min.isr to that
    # (made by the node a FindCoordinator reached; the others learn it by UpdateMetadata)
    cluster.wait_topic("__transaction_state", 6)
    view = cluster.view(2)
    parts = [q for (t, _), q in view.partitions.items() if t == "__transaction_state"]
    assert len(parts) == 6 and all(len(q.replicas) == 3 for q in parts)
    client = AdminClient({"bootstrap.servers": cluster.nodes[1].bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = client.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"


def test_transactions_across_nodes_with_different_actor_counts(cluster_factory: Any) -> None:
    """Nodes run different num.partition.shards and num.group.coordinators: a coordinator
    sends each marker to the shard that owns the partition on its leader's node, by the
    count that node registered (by its own count, markers went to shards that do not exist
    or do not own the partition), and the node that writes the marker on
    __consumer_offsets tells its own GroupCoordinators."""
    counts = {1: (1, 1), 2: (3, 3), 3: (2, 2)}
    cluster = cluster_factory(3, config=CONFIG, node_config={
        i: {"num.partition.shards": s, "num.group.coordinators": c}
        for i, (s, c) in counts.items()})
    commit_abort_commit(cluster)


def commit_abort_commit(cluster: Any) -> None:
    """One producer (on node 1) commits, aborts and commits again over partitions every
    node leads, with offsets sent in the first transaction for a group read via node 3."""
    create(cluster, "tx-orders", 6, 1, via=1)
    leaders = cluster.wait_topic("tx-orders", 6).leaders("tx-orders")
    assert len(set(leaders.values())) == 3  # every node leads some partition
    bs = cluster.nodes[1].bootstrap
    group = Consumer({"bootstrap.servers": cluster.nodes[3].bootstrap, "group.id": "tx-group",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
    p = Producer({"bootstrap.servers": bs, "transactional.id": "cluster-txn", "linger.ms": 5})
    try:
        p.init_transactions(60)
        p.begin_transaction()
        for i, v in enumerate(values("c", 12)):
            p.produce("tx-orders", v, partition=i % 6)
        p.send_offsets_to_transaction([TopicPartition("tx-orders", 0, 7)],
                                      group.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        p.begin_transaction()
        for i, v in enumerate(values("a", 6)):
            p.produce("tx-orders", v, partition=i % 6)
        p.flush(30)
        p.abort_transaction(60)
        p.begin_transaction()
        for i, v in enumerate(values("o", 6)):
            p.produce("tx-orders", v, partition=i % 6)
        p.flush(30)
        via2 = cluster.nodes[2].bootstrap
        assert sorted(read_all(via2, "tx-orders", "read_committed", 6)) == sorted(
            values("c", 12))
        assert len(read_all(via2, "tx-orders", "read_uncommitted", 6)) == 24
        p.commit_transaction(60)
        markers_written(cluster, "cluster-txn")
        assert sorted(read_all(via2, "tx-orders", "read_committed", 6)) == sorted(
            values("c", 12) + values("o", 6))
        committed = group.committed([TopicPartition("tx-orders", 0)], timeout=30)
        assert committed[0].offset == 7
    finally:
        group.close()


# ------------------------------------------------------- kill -9 of the coordinator

OUT = "tx-kill"
GROUP = "tx-kill-group"
KILLED_OFFSET = 1000  # the offset the killed transaction commits for GROUP
SLOW = 2  # the node paused mid-commit: a long ZooKeeper session keeps it registered
KILL_CONFIG = {
    "transaction.state.log.num.partitions": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "offsets.topic.replication.factor": 3,
    "min.insync.replicas": 2,
    "replica.lag.time.max.ms": 1500,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 5000,
    "auto.leader.rebalance.enable": False,
}


class Outcome(NamedTuple):
    committed: list[bytes]  # the baseline transactions' records
    killed: list[bytes]  # the records of the transaction whose commit met the kill
    after: list[bytes]  # what the new producer committed after the kill


def kill_cluster(cluster_factory: Any, slow: bool) -> Cluster:
    node_config = {SLOW: {"zookeeper.session.timeout.ms": 15000}} if slow else None
    cluster = cluster_factory(3, config=KILL_CONFIG, node_config=node_config)
    create(cluster, OUT, 3, 3, via=1, configs={"min.insync.replicas": "2"})
    leaders = cluster.wait_topic(OUT, 3).leaders(OUT)
    assert sorted(leaders.values()) == [1, 2, 3]  # the markers go to every node
    return cluster


def transaction_state_view(cluster: Cluster) -> Any:
    """__transaction_state (made by the first FindCoordinator for a transactional id)
    with a leader for each partition on every node: a ClusterView."""
    wait_for("__transaction_state made by FindCoordinator", lambda: call(
        cluster.nodes[1].bootstrap, FindCoordinatorRequest(key="any", key_type=1), 1
    ).error_code == 0, timeout_s=30)
    return cluster.wait_topic(TRANSACTION_STATE_TOPIC, 3)


def coordinator_of(cluster: Cluster, avoid: set[int]) -> tuple[str, int]:
    """A transactional id whose ``__transaction_state`` partition (Kafka's partitionFor)
    is led by a node not in ``avoid``, and that node; FindCoordinator agrees."""
    view = transaction_state_view(cluster)
    for i in range(100):
        txn_id = f"kill-{i}"
        leader = view.partitions[(TRANSACTION_STATE_TOPIC, partition_for(txn_id, 3))].leader
        if leader not in avoid:
            break
    else:
        raise AssertionError(f"no __transaction_state partition led outside {avoid}")
    answer = call(cluster.nodes[1].bootstrap, FindCoordinatorRequest(key=txn_id, key_type=1), 1)
    assert (answer.error_code, answer.node_id) == (0, leader)
    return txn_id, leader


def txn_producer(cluster: Cluster, txn_id: str) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                     "linger.ms": 5, "transaction.timeout.ms": 60000})


def baseline(p: Producer, group: Consumer, rounds: int = 3) -> list[bytes]:
    """``rounds`` committed transactions over every partition, each sending offsets."""
    sent: list[bytes] = []
    for k in range(rounds):
        p.begin_transaction()
        for i, v in enumerate(values(f"base{k}-", 9)):
            p.produce(OUT, v, partition=i % 3)
            sent.append(v)
        p.send_offsets_to_transaction([TopicPartition(OUT, 0, k + 1)],
                                      group.consumer_group_metadata(), 30)
        p.commit_transaction(60)
    return sent


def open_transaction(p: Producer, group: Consumer) -> list[bytes]:
    """The transaction the kill meets: records on every partition, flushed, and offsets."""
    p.begin_transaction()
    killed = values("killed-", 30)
    for i, v in enumerate(killed):
        p.produce(OUT, v, partition=i % 3)
    p.flush(30)
    p.send_offsets_to_transaction([TopicPartition(OUT, 0, KILLED_OFFSET)],
                                  group.consumer_group_metadata(), 30)
    return killed



def describe_state(node: ClusterNode, txn_id: str) -> str:
    with RawClient(node.port) as raw:
        reply = raw.call(DESCRIBE_TXNS, 0, {"transactional_ids": [txn_id]})
    row = reply.transaction_states[0]
    return str(row.transaction_state) if row.error_code == 0 else f"error {row.error_code}"


def markers_written(cluster: Cluster, txn_id: str) -> None:
    """Until the coordinator of ``txn_id`` says CompleteCommit: EndTxn is answered once
    PrepareCommit is durable (as in Kafka) and the markers are written after, so a
    read_committed read right after the answer may stop at the last stable offset."""
    def complete() -> bool:
        answer = call(cluster.live()[0].bootstrap,
                      FindCoordinatorRequest(key=txn_id, key_type=1), 1)
        node = cluster.nodes.get(answer.node_id) if answer.error_code == 0 else None
        return node is not None and node.running and \
            describe_state(node, txn_id) == "CompleteCommit"

    wait_for(f"the markers of {txn_id}'s commit", complete, timeout_s=30)


def moved_away(cluster: Cluster, txn_id: str, victim: int) -> int:
    """Until every live node names a new leader of the id's partition; that leader."""
    key = (TRANSACTION_STATE_TOPIC, partition_for(txn_id, 3))

    def elected() -> int | None:
        leaders = {n.metadata().partitions[key].leader for n in cluster.live()}
        (leader,) = leaders if len(leaders) == 1 else (None,)
        return leader if leader not in (None, -1, victim) else None

    leader = wait_for(f"{key} led by a node other than {victim}", elected, timeout_s=30)
    assert leader is not None
    return leader


def successor_finishes(cluster: Cluster, txn_id: str) -> list[bytes]:
    """A new producer with the same id: init_transactions completes or aborts the pending
    transaction (it answers CONCURRENT_TRANSACTIONS until then), then commits its own."""
    p = txn_producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    after = values("after-", 6)
    for i, v in enumerate(after):
        p.produce(OUT, v, partition=i % 3)
    p.commit_transaction(60)
    markers_written(cluster, txn_id)
    return after


def check_outcome(cluster: Cluster, outcome: Outcome, group: Consumer,
                  must_commit: bool | None) -> bool:
    """read_committed shows every baseline record once, every record of the killed
    transaction or none, and the group's committed offset agrees; True if it committed."""
    via = cluster.live()[0].bootstrap
    seen = read_all(via, OUT, "read_committed", 3)
    got = collections.Counter(seen)
    assert all(n == 1 for n in got.values()), "a record read twice"
    assert set(outcome.committed) <= set(got), "a committed record is missing"
    assert set(outcome.after) <= set(got), "the successor's records are missing"
    shown = [v for v in outcome.killed if v in got]
    assert len(shown) in (0, len(outcome.killed)), (
        f"half-visible transaction: {len(shown)} of {len(outcome.killed)} records shown")
    committed = bool(shown)
    if must_commit is not None:
        assert committed == must_commit, f"expected committed={must_commit}"
    assert set(got) == set(outcome.committed) | set(outcome.after) | set(shown)
    offset = group.committed([TopicPartition(OUT, 0)], timeout=30)[0].offset
    assert offset == (KILLED_OFFSET if committed else 3), f"group offset {offset}"
    return committed


def restart_and_recheck(cluster: Cluster, victim: int, outcome: Outcome, group: Consumer,
                        committed: bool) -> None:
    """The killed node comes back, every ISR is full again, and the outcome holds."""
    cluster.nodes[victim].start()
    keys = [(OUT, p) for p in range(3)] + [(TRANSACTION_STATE_TOPIC, p) for p in range(3)]

    def full() -> bool:
        return all(len(n.metadata().partitions[k].isr) == 3
                   for n in cluster.live() for k in keys)

    wait_for(f"node {victim} back in every ISR", full, timeout_s=60)
    check_outcome(cluster, outcome, group, committed)


def group_reader(cluster: Cluster) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                     "enable.auto.commit": False, "isolation.level": "read_committed"})


class Opened(NamedTuple):
    """A cluster with three committed transactions and a fourth one open, ready to kill."""

    cluster: Cluster
    txn_id: str
    victim: int
    group: Consumer
    producer: Producer
    committed: list[bytes]
    killed: list[bytes]


@contextmanager
def opened_transaction(cluster_factory: Any, slow: bool, avoid_slow: bool = False
                       ) -> Iterator[Opened]:
    """The common start of the kill tests: the coordinator's node (never the controller,
    nor the paused node when ``avoid_slow``) is the victim; the group reader is closed
    after."""
    cluster = kill_cluster(cluster_factory, slow=slow)
    avoid = {cluster.controller(), *([SLOW] if avoid_slow else [])}
    txn_id, victim = coordinator_of(cluster, avoid=avoid)
    group = group_reader(cluster)
    try:
        p = txn_producer(cluster, txn_id)
        p.init_transactions(60)
        committed = baseline(p, group)
        yield Opened(cluster, txn_id, victim, group, p, committed, open_transaction(p, group))
    finally:
        group.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_coordinator_killed_after_prepare_commit_rolls_the_commit_forward(
        cluster_factory: Any) -> None:
    """The window Kafka cares about, hit every time: the leader of one output partition
    is paused (SIGSTOP), so once PrepareCommit is durable (ISR shrunk to the coordinator
    and one follower) and EndTxn answered, that partition's marker cannot be written; the
    coordinator's node is killed then. The follower that leads next loads PrepareCommit
    and must write the markers: the client was told the commit succeeded."""
    with opened_transaction(cluster_factory, slow=True, avoid_slow=True) as t:
        cluster, victim = t.cluster, t.victim
        cluster.nodes[SLOW].pause()
        try:
            t.producer.commit_transaction(60)  # answered once PrepareCommit is durable
            state = describe_state(cluster.nodes[victim], t.txn_id)
            cluster.nodes[victim].kill()
        finally:
            cluster.nodes[SLOW].resume()
        assert state == "PrepareCommit", f"the kill missed the window: {state}"
        moved_away(cluster, t.txn_id, victim)
        outcome = Outcome(t.committed, t.killed, successor_finishes(cluster, t.txn_id))
        check_outcome(cluster, outcome, t.group, must_commit=True)
        restart_and_recheck(cluster, victim, outcome, t.group, committed=True)


@pytest.mark.slow
@pytest.mark.timeout(180)
# one delay in the suite (0, 5 and 30 ms all passed 5 runs each; every one ended in a
# commit, the client retrying its EndTxn with the new coordinator): the windows that
# matter most have their own tests above and below
@pytest.mark.parametrize("delay_ms", [5])
def test_coordinator_killed_at_commit_time_decides_all_or_nothing(
        cluster_factory: Any, delay_ms: int) -> None:
    """kill -9 of the coordinator's node ``delay_ms`` after commit_transaction starts
    (before the EndTxn, mid-PrepareCommit or mid-markers, as the timing falls): the
    producer succeeds or fails, a successor's init_transactions settles the transaction,
    and every read shows all of it or none; a commit the client saw succeed is kept."""
    with opened_transaction(cluster_factory, slow=False) as t:
        cluster, victim = t.cluster, t.victim
        result: dict[str, Any] = {}

        def commit() -> None:
            try:
                t.producer.commit_transaction(30)
                result["ok"] = True
            except KafkaException as exc:
                result["error"] = exc.args[0]

        thread = threading.Thread(target=commit, daemon=True)
        thread.start()
        time.sleep(delay_ms / 1000)
        cluster.nodes[victim].kill()
        moved_away(cluster, t.txn_id, victim)
        thread.join(45)
        assert not thread.is_alive(), "commit_transaction did not return"
        outcome = Outcome(t.committed, t.killed, successor_finishes(cluster, t.txn_id))
        done = check_outcome(cluster, outcome, t.group,
                             must_commit=True if result.get("ok") else None)
        restart_and_recheck(cluster, victim, outcome, t.group, committed=done)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_coordinator_killed_with_the_transaction_open_has_it_aborted(
        cluster_factory: Any) -> None:
    """kill -9 before any EndTxn: the new coordinator loads the transaction Ongoing; the
    successor's init_transactions fences the old producer and aborts it: none of its
    records, the group's offset not moved, the old producer's commit refused."""
    with opened_transaction(cluster_factory, slow=False) as t:
        t.cluster.nodes[t.victim].kill()
        moved_away(t.cluster, t.txn_id, t.victim)
        outcome = Outcome(t.committed, t.killed, successor_finishes(t.cluster, t.txn_id))
        check_outcome(t.cluster, outcome, t.group, must_commit=False)
        with pytest.raises(KafkaException):
            t.producer.commit_transaction(15)
        restart_and_recheck(t.cluster, t.victim, outcome, t.group, committed=False)


# ------------------------------------------------- markers and min.insync.replicas

ISR_TOPIC = "tx-isr"
ISR_CONFIG = {
    "transaction.state.log.num.partitions": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "replica.lag.time.max.ms": 1000,
    "replica.fetch.backoff.ms": 100,
    # the paused node keeps its session: only its replicas' lag takes it out of the ISRs
    "zookeeper.session.timeout.ms": 15000,
    "auto.leader.rebalance.enable": False,
}


@pytest.mark.timeout(150)
def test_a_commit_waits_for_min_insync_replicas_of_its_partitions_and_of_the_txn_log(
        cluster_factory: Any) -> None:
    """A partition with min.insync.replicas 3 loses a follower (paused) mid-transaction:
    commit_transaction is answered once PrepareCommit is durable (as in Kafka), but the
    partition refuses the marker NOT_ENOUGH_REPLICAS, so the transaction stays
    PrepareCommit and read_committed shows none of it; the coordinator retries, logging the
    refusal once, and the commit completes once the follower is back in the ISR.

    Then __transaction_state's min.insync.replicas goes to 3 and the follower is paused
    again: the PrepareCommit append is refused, EndTxn is answered
    COORDINATOR_NOT_AVAILABLE (the transaction stays Ongoing), and the client's retries
    get through once the follower is back."""
    cluster = cluster_factory(3, config=ISR_CONFIG)
    create(cluster, ISR_TOPIC, 1, 3, via=1, configs={"min.insync.replicas": "3"})
    leader = cluster.wait_topic(ISR_TOPIC, 1).leaders(ISR_TOPIC)[0]
    # the paused node neither leads the partition nor is the controller (ISR changes)
    victim = min(set(cluster.nodes) - {leader, cluster.controller()})
    txn_id, coordinator = coordinator_of(cluster, avoid={victim})
    p = txn_producer(cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    sent = values("isr-", 10)
    for v in sent:
        p.produce(ISR_TOPIC, v, partition=0)
    p.flush(30)
    lead = cluster.nodes[leader]
    cluster.nodes[victim].pause()
    try:
        wait_for(f"node {victim} out of {ISR_TOPIC}-0's ISR", lambda: victim not in
                 lead.metadata([ISR_TOPIC]).partitions[(ISR_TOPIC, 0)].isr, timeout_s=20)
        p.commit_transaction(30)
        time.sleep(1.5)  # a few marker retries
        assert describe_state(cluster.nodes[coordinator], txn_id) == "PrepareCommit"
        assert read_all(lead.bootstrap, ISR_TOPIC, "read_committed") == []
    finally:
        cluster.nodes[victim].resume()
    wait_for("the commit to complete", lambda: describe_state(
        cluster.nodes[coordinator], txn_id) == "CompleteCommit", timeout_s=30)
    assert read_all(lead.bootstrap, ISR_TOPIC, "read_committed") == sent
    log = cluster.nodes[coordinator].log()
    refused = [line for line in log.splitlines()
               if f"marker for {txn_id} on {ISR_TOPIC}-0 failed: NOT_ENOUGH_REPLICAS" in line]
    assert len(refused) == 1, refused
    assert f"markers for {txn_id} written after" in log

    # __transaction_state's own min.insync.replicas (transaction.state.log.min.isr)
    state_key = (TRANSACTION_STATE_TOPIC, partition_for(txn_id, 3))
    coord = cluster.nodes[coordinator]
    wait_for(f"node {victim} back in {state_key}'s ISR", lambda: len(
        coord.metadata([TRANSACTION_STATE_TOPIC]).partitions[state_key].isr) == 3,
        timeout_s=20)
    client = AdminClient({"bootstrap.servers": coord.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, TRANSACTION_STATE_TOPIC,
                              incremental_configs=[ConfigEntry(
                                  "min.insync.replicas", "3",
                                  incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource])[resource].result(30)
    p.begin_transaction()
    more = values("isr-more-", 5)
    for v in more:
        p.produce(ISR_TOPIC, v, partition=0)
    p.flush(30)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(ok=p.commit_transaction(60)),
                              daemon=True)
    cluster.nodes[victim].pause()
    try:
        thread.start()
        wait_for(f"node {victim} out of {state_key}'s ISR", lambda: victim not in
                 coord.metadata([TRANSACTION_STATE_TOPIC]).partitions[state_key].isr,
                 timeout_s=20)
        time.sleep(1)  # the client's EndTxn retries, refused
        assert describe_state(coord, txn_id) == "Ongoing"
        assert thread.is_alive(), "commit_transaction returned with the ISR short"
    finally:
        cluster.nodes[victim].resume()
    thread.join(60)
    assert not thread.is_alive() and "ok" in result
    wait_for("the second commit to complete", lambda: describe_state(
        coord, txn_id) == "CompleteCommit", timeout_s=30)
    assert read_all(lead.bootstrap, ISR_TOPIC, "read_committed") == sent + more
    log = coord.log()
    refused = [line for line in log.splitlines()
               if f"writing to {state_key[0]}-{state_key[1]} failed: NOT_ENOUGH_REPLICAS"
               in line]
    assert 1 <= len(refused) <= 2, refused  # once per error (..._AFTER_APPEND, then not)
    assert f"writing to {state_key[0]}-{state_key[1]} works again after" in log


# ------------------------------------------ kill -9 of the group coordinator mid-commit


def group_coordinator_of(cluster: Cluster, avoid: set[int]) -> tuple[str, int]:
    """A group id whose coordinator (FindCoordinator key type 0) is not in ``avoid``."""
    bs = cluster.nodes[1].bootstrap

    def found(group: str) -> Any:
        answer = call(bs, FindCoordinatorRequest(key=group, key_type=0), 1)
        return answer if answer.error_code == 0 else None

    wait_for("__consumer_offsets made by FindCoordinator", lambda: found("any"), timeout_s=30)
    for i in range(100):
        answer = found(f"gk-{i}")
        if answer is not None and answer.node_id not in avoid:
            return f"gk-{i}", answer.node_id
    raise AssertionError(f"no group coordinated outside {avoid}")


@pytest.mark.timeout(150)
def test_group_coordinator_killed_mid_commit_keeps_committed_offsets_once_and_aborted_never(
        cluster_factory: Any) -> None:
    """Two producers hold offsets for one group in open transactions (pending on the
    group's coordinator); that node is killed (-9), then one commits and the other aborts,
    their markers to __consumer_offsets retried until its partition has a new leader.
    The new group coordinator loads the pending offsets from the log: the committed ones
    become the group's offset (once), the aborted ones never do; read_committed shows
    the committed records once and none of the aborted ones."""
    cluster = kill_cluster(cluster_factory, slow=False)
    group_id, victim = group_coordinator_of(cluster, avoid={cluster.controller()})
    view = transaction_state_view(cluster)
    txn_ids = [t for t in (f"gk-txn-{i}" for i in range(100)) if view.partitions[
        (TRANSACTION_STATE_TOPIC, partition_for(t, 3))].leader != victim][:2]
    group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group_id,
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        keeper, dropper = (txn_producer(cluster, t) for t in txn_ids)
        keeper.init_transactions(60)
        dropper.init_transactions(60)
        committed = baseline(keeper, group, rounds=1)  # the group's offset of OUT-0 is 1
        opened: dict[str, list[bytes]] = {}
        for name, p, tp in (("kept-", keeper, TopicPartition(OUT, 0, KILLED_OFFSET)),
                            ("dropped-", dropper, TopicPartition(OUT, 1, 2 * KILLED_OFFSET))):
            p.begin_transaction()
            opened[name] = values(name, 9)
            for i, v in enumerate(opened[name]):
                p.produce(OUT, v, partition=i % 3)
            p.flush(30)
            p.send_offsets_to_transaction([tp], group.consumer_group_metadata(), 30)
        cluster.nodes[victim].kill()
        keeper.commit_transaction(60)
        dropper.abort_transaction(60)
        for txn_id, state in zip(txn_ids, ("CompleteCommit", "CompleteAbort"), strict=True):
            node = cluster.nodes[view.partitions[
                (TRANSACTION_STATE_TOPIC, partition_for(txn_id, 3))].leader]
            wait_for(f"{txn_id} in {state}", lambda n=node, t=txn_id, s=state:
                     describe_state(n, t) == s, timeout_s=45)
        seen = collections.Counter(read_all(cluster.live()[0].bootstrap, OUT,
                                            "read_committed", 3))
        assert all(n == 1 for n in seen.values()), "a record read twice"
        assert set(seen) == set(committed) | set(opened["kept-"])
        offsets = group.committed([TopicPartition(OUT, 0), TopicPartition(OUT, 1)],
                                  timeout=30)
        assert [o.offset for o in offsets] == [KILLED_OFFSET, OFFSET_INVALID]
    finally:
        group.close()


def test_markers_that_wait_for_followers_in_process_1_are_answered(
        cluster_factory: Any) -> None:
    """num.processes = 2, RF 3: a marker written to a partition of a shard in process 1 waits
    for the followers (acks=-1), and its shard's purgatory answers the ShardRelay of process
    0 that handed it the markers. The relay took only WriteTxnMarkersDone: the answer went
    to dead letters, the coordinator sent the markers again every 5 s, and the commit hung
    (librdkafka's commit_transaction timed out)."""
    cluster = cluster_factory(3, config={**CONFIG, "num.processes": 2})
    create(cluster, "tx-spread", 6, 3, via=1)
    cluster.wait_topic("tx-spread", 6)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "spread-txn",
                  "linger.ms": 5})
    p.init_transactions(60)
    for k in range(3):
        p.begin_transaction()
        for i in range(6):
            p.produce("tx-spread", value=f"{k}:{i}".encode(), partition=i)
        p.commit_transaction(60)  # (a lost answer shows in the logs below, not as time)
    markers_written(cluster, "spread-txn")  # the last commit's, written after its answer
    got = read_all(cluster.nodes[2].bootstrap, "tx-spread", "read_committed", partitions=6)
    assert sorted(got) == sorted(f"{k}:{i}".encode() for k in range(3) for i in range(6))
    for node in cluster.nodes.values():
        assert "has no handler for ProduceReady" not in node.log()
