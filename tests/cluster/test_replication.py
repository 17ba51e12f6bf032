"""Replication on three real nodes and a real ZooKeeper (issue 15).

Followers fetch from their leader and hold its log record by record; the
ISR shrinks when a follower stops (SIGSTOP) past replica.lag.time.max.ms and
grows again when it catches up; acks=all needs min.insync.replicas; a
leader that appended past the high watermark and died truncates to the new
leader's epoch boundary when it comes back; acknowledged records survive
leaders killed with kill -9.
"""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.core.cluster_model import TopicPartition as Tp
from actors.metadata import znodes
from actors.topology import stable_hash
from tests.broker.rawclient import build, read_records, record_batch
from tests.broker.test_groups import call
from tests.fixtures.cluster import Cluster, kafka_call, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, fetch_from, produce_to
from tests.fixtures.replication import (
    disk_records,
    epoch_checkpoint,
    offset_checkpoint,
    partition_dir,
    values_of,
)
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

TOPIC = "replicated"
FAST = {
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 5000,
    "replica.high.watermark.checkpoint.interval.ms": 500,
    "min.insync.replicas": 2,
    "auto.leader.rebalance.enable": False,
}


def create_topic(cluster: Cluster, partitions: int = 1, rf: int = 3,
                 configs: dict[str, str] | None = None) -> dict[int, int]:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic(TOPIC, partitions, rf, topic_configs=configs or {})])
    finally:
        client.close()
    return cluster.wait_topic(TOPIC, partitions).leaders(TOPIC)


def isr_of(cluster: Cluster, partition: int = 0, via: int | None = None) -> tuple[int, ...]:
    """The ISR a node serves (empty while it does not know the partition yet)."""
    found = cluster.view(via).partitions.get((TOPIC, partition))
    return tuple(sorted(found.isr)) if found is not None else ()


def partition_story(cluster: Cluster, partition: int, lines: int = 60) -> str:
    """What every node logged about ``partition`` (roles, ISR proposals and answers,
    refusals), the last ``lines`` of each: a failed assertion on a rare timing says why."""
    name = f"{TOPIC}-{partition}"
    parts = []
    for node in cluster.nodes.values():
        told = [line for line in node.log().splitlines()
                if name in line or "ISR" in line or "WARNING" in line or "ERROR" in line]
        parts.append(f"--- node {node.broker_id}\n" + "\n".join(told[-lines:]))
    return "\n".join(parts)


def produce_acks_all(cluster: Cluster, values: list[bytes], partition: int = 0,
                     timeout_s: float = 30.0) -> tuple[list[bytes], list[str]]:
    """confluent-kafka, acks=all and idempotent: (the values acknowledged, the errors)."""
    acked: list[bytes] = []
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "compression.type": "none",
                         "message.timeout.ms": int(timeout_s * 1000)})

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err.name())

    for value in values:
        producer.produce(TOPIC, value, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(timeout_s)
    return acked, errors


def consume_all(bootstrap: str, partition: int = 0, timeout_s: float = 30.0,
                expect: int | None = None) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if expect is None and time.monotonic() - idle_since > 2.0:
                    break
                if expect is not None and len(out) >= expect:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                continue
            idle_since = time.monotonic()
            out.append(msg.value())
    finally:
        consumer.close()
    return out


def same_logs(cluster: Cluster, partition: int = 0) -> list[Any] | None:
    """The records when every live replica holds the same ones on disk."""
    logs = [disk_records(n, TOPIC, partition) for n in cluster.live()]
    first = [(r.offset, r.leader_epoch, r.value) for r in logs[0]]
    if all([(r.offset, r.leader_epoch, r.value) for r in log] == first for log in logs[1:]):
        return logs[0] or None
    return None


def test_followers_hold_the_leaders_log_and_acks_all_is_acknowledged(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster)
    values = [f"v{i}".encode() for i in range(300)]
    acked, errors = produce_acks_all(cluster, values)
    assert errors == [] and acked == values
    records = wait_for("three identical replicas", lambda: same_logs(cluster), timeout_s=30)
    assert values_of(records) == values
    assert [r.offset for r in records] == list(range(300))
    assert isr_of(cluster) == (1, 2, 3)
    assert consume_all(cluster.bootstrap, expect=300) == values
    # Every replica checkpoints its high watermark (replication-offset-checkpoint).
    wait_for("the high watermark checkpointed on every node", lambda: all(
        offset_checkpoint(n, "replication-offset-checkpoint").get((TOPIC, 0)) == 300
        for n in cluster.live()), timeout_s=30)
    for node in cluster.live():
        assert epoch_checkpoint(node, TOPIC, 0)[0][1] == 0


def test_a_paused_follower_leaves_the_isr_and_rejoins(cluster_factory: Any) -> None:
    """SIGSTOP past replica.lag.time.max.ms (but within the ZooKeeper session): the leader
    shrinks the ISR through the controller (AlterPartition: same leader epoch), acks=all goes
    on with two; with the second follower paused too, acks=all is refused with
    NOT_ENOUGH_REPLICAS (NOT_ENOUGH_REPLICAS_AFTER_APPEND for a produce waiting when the ISR
    shrank); SIGCONT: both rejoin and every acknowledged record is there."""
    cluster = cluster_factory(config={**FAST, "zookeeper.session.timeout.ms": 15000})
    leaders = create_topic(cluster, partitions=3)
    # The partition the controller leads: ISR changes go through the controller, and a
    # paused controller makes none.
    p = next(q for q, b in leaders.items() if b == cluster.controller())
    leader = leaders[p]
    epoch = cluster.view().partitions[(TOPIC, p)].leader_epoch
    first, second = [n for n in cluster.nodes.values() if n.broker_id != leader]
    acked, errors = produce_acks_all(cluster, [b"before-%d" % i for i in range(50)], p)
    assert errors == [] and len(acked) == 50

    first.pause()
    try:
        isr = wait_for("the paused follower out of the ISR",
                       lambda: (lambda isr: isr if first.broker_id not in isr else None)(
                           isr_of(cluster, p, via=leader)), timeout_s=30)
        assert isr == tuple(sorted({leader, second.broker_id}))
        assert cluster.view(leader).partitions[(TOPIC, p)].leader_epoch == epoch
        more, errors = produce_acks_all(cluster, [b"isr2-%d" % i for i in range(50)], p)
        assert errors == [] and len(more) == 50
        acked += more

        second.pause()
        try:
            # Appended while the ISR still counts the paused follower, then the ISR shrinks
            # under it: the wait ends NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's answer). A
            # step during which a paused node was continued from outside (KeepStopped: a
            # SIGCONT the test did not send) proves nothing: it is repeated
            for _attempt in range(3):
                before = first.continued_while_paused + second.continued_while_paused
                waited = produce_raw(cluster.nodes[leader], p, [b"after-append"],
                                     timeout_ms=30000)
                if first.continued_while_paused + second.continued_while_paused == before:
                    break
            if waited.error_code != int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
                # in full (an assertion's message would be cut short)
                pytest.fail(f"{waited}; paused nodes continued from outside: "
                            f"{first.continued_while_paused}, "
                            f"{second.continued_while_paused}\n{partition_story(cluster, p)}")
            wait_for("the leader alone in the ISR",
                     lambda: isr_of(cluster, p, via=leader) == (leader,), timeout_s=30)
            refused = produce_to(cluster.nodes[leader], TOPIC, p, [b"refused"])
            assert refused.error_code == int(ErrorCode.NOT_ENOUGH_REPLICAS)
            one = produce_to(cluster.nodes[leader], TOPIC, p, [b"acks1"], acks=1)
            assert one.error_code == 0
        finally:
            second.resume()
    finally:
        first.resume()
    wait_for("both followers back in the ISR",
             lambda: isr_of(cluster, p, via=leader) == (1, 2, 3), timeout_s=60)
    last, errors = produce_acks_all(cluster, [b"after-%d" % i for i in range(20)], p)
    assert errors == [] and len(last) == 20
    acked += last
    records = wait_for("three identical replicas", lambda: same_logs(cluster, p), timeout_s=30)
    values = values_of(records)
    assert b"refused" not in values
    assert [v for v in values if v not in (b"acks1", b"after-append")] == acked
    assert consume_all(cluster.bootstrap, p, expect=len(values)) == values
    log = cluster.nodes[leader].log()
    assert "proposing ISR" in log and "ISR is now" in log


def test_a_leader_that_appended_past_the_high_watermark_truncates_when_back(
        cluster_factory: Any) -> None:
    """Divergent logs: the leader appends with acks=1 while its followers are stopped, dies
    (kill -9); a follower leads at a new epoch and takes new records; the old leader comes
    back as a follower and cuts its log at the new epoch's start (record by record equal)."""
    cluster = cluster_factory(config={**FAST, "replica.lag.time.max.ms": 30000})
    leaders = create_topic(cluster, partitions=3)
    # A partition a non-controller leads: the controller elects its next leader.
    p = next(q for q, b in leaders.items() if b != cluster.controller())
    old = cluster.nodes[leaders[p]]
    followers = [n for n in cluster.nodes.values() if n is not old]
    acked, errors = produce_acks_all(cluster, [b"common-%d" % i for i in range(30)], p)
    assert errors == [] and len(acked) == 30
    wait_for("the followers caught up", lambda: same_logs(cluster, p), timeout_s=30)

    for node in followers:
        node.pause()
    try:
        # Fetches the followers sent before they stopped wait on the leader at most
        # replica.fetch.wait.max.ms (500): let them be answered (empty) first, so nothing
        # appended from now on reaches a follower.
        time.sleep(1.5)
        for i in range(5):
            answer = produce_to(old, TOPIC, p, [b"lost-%d-%d" % (i, j) for j in range(3)],
                                acks=1)
            assert answer.error_code == 0
        assert len(disk_records(old, TOPIC, p)) == 45
        # Consumers read up to the high watermark only: nothing of what no follower has.
        seen = fetch_from(old, TOPIC, p, 0)
        assert seen.high_watermark == 30
        assert len(read_records(bytes(seen.records or b""))) == 30
        old.kill()
    finally:
        for node in followers:
            node.resume()

    def new_leader() -> int | None:
        leader = cluster.view(followers[0].broker_id).partitions[(TOPIC, p)].leader
        return leader if leader in {n.broker_id for n in followers} else None

    wait_for("a new leader", new_leader, timeout_s=60)
    new_epoch = cluster.view(followers[0].broker_id).partitions[(TOPIC, p)].leader_epoch
    more, errors = produce_acks_all(cluster, [b"new-%d" % i for i in range(20)], p)
    assert errors == [] and len(more) == 20

    old.start()
    records = wait_for("the old leader holding the new leader's log",
                       lambda: same_logs(cluster, p), timeout_s=60)
    assert values_of(records) == acked + more
    assert not any((r.value or b"").startswith(b"lost-") for r in disk_records(old, TOPIC, p))
    assert {r.leader_epoch for r in records[30:]} == {new_epoch}
    assert (new_epoch, 30) in epoch_checkpoint(old, TOPIC, p)
    assert "truncating from 45 to 30" in old.log()


class KeyedProducer:
    """An acks=all idempotent confluent-kafka producer sending keyed sequence numbers to
    ``partitions`` from a thread, bounded in count; what was reported delivered, in order."""

    def __init__(self, bootstrap: str, partitions: int, limit: int = 400_000) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "compression.type": "none", "message.timeout.ms": 180_000})
        self.partitions = partitions
        self.limit = limit
        self.sent = 0
        self.delivered: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered[msg.partition()].append(int(msg.value()))
        else:
            self.failed.append(err.name())

    def _run(self) -> None:
        while not self.stop.is_set() and self.sent < self.limit:
            p = self.sent % self.partitions
            try:
                self.producer.produce(TOPIC, str(self.sent).encode(), key=b"k%d" % p,
                                      partition=p, on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
            if self.sent % 10 == 0:
                time.sleep(0.02)  # a steady stream (some 500 a second), not a flood
        self.producer.flush(180)

    def start(self) -> KeyedProducer:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(200)
        assert not self.thread.is_alive(), "the producer did not flush in time"

    def count(self) -> int:
        return sum(len(v) for v in self.delivered.values())


def kill_leader_once(cluster: Cluster, producer: KeyedProducer, partitions: int) -> None:
    leader = cluster.view().partitions[(TOPIC, 0)].leader
    victim = cluster.nodes[leader]
    before = producer.count()
    victim.kill()
    survivors = cluster.live()

    def moved() -> bool:
        return all(n.metadata().partitions[(TOPIC, 0)].leader not in (-1, leader)
                   for n in survivors)

    wait_for(f"partition 0's leadership to leave broker {leader}", moved, timeout_s=60)
    victim.start()
    wait_for(f"broker {leader} back in every ISR", lambda: all(
        len(isr_of(cluster, q, via=n.broker_id)) == 3
        for q in range(partitions) for n in survivors), timeout_s=120)
    wait_for("acknowledgements after the failover",
             lambda: producer.count() > before + 50, timeout_s=120)


def kill_leader_loop(cluster: Cluster, kills: int, partitions: int) -> None:
    """Kill -9 the leader of partition 0 ``kills`` times under load, each restarted and
    back in the ISR before the next; then every delivered record is read back exactly once,
    in send order per partition, and every replica holds the same log."""
    producer = KeyedProducer(cluster.bootstrap, partitions).start()
    try:
        wait_for("records flowing", lambda: producer.count() > 100, timeout_s=60)
        for _ in range(kills):
            kill_leader_once(cluster, producer, partitions)
    finally:
        producer.finish()
    assert producer.failed == []
    for q in range(partitions):
        records = wait_for(f"identical replicas of partition {q}",
                           lambda q=q: same_logs(cluster, q), timeout_s=60)
        values = [int(v) for v in values_of(records)]
        assert len(values) == len(set(values)), "a record was written twice"
        assert values == sorted(values), "records out of send order"
        delivered = producer.delivered[q]
        assert set(delivered) <= set(values), "an acknowledged record is missing"
        consumed = [int(v) for v in consume_all(cluster.bootstrap, q, expect=len(values))]
        assert consumed == values


def test_a_leader_killed_twice_under_acks_all_loses_nothing(cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster, partitions=2)
    kill_leader_loop(cluster, kills=2, partitions=2)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_leader_killed_twenty_times_under_acks_all_loses_nothing(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(config=FAST)
    create_topic(cluster, partitions=2)
    kill_leader_loop(cluster, kills=20, partitions=2)


def produce_raw(node: Any, partition: int, values: list[bytes], acks: int = -1,
                timeout_ms: int = 10_000) -> Any:
    """One Produce v9 of one batch to ``node``, waiting as long as the request may take."""
    request = build(0, 9, {
        "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
        "topic_data": [{"name": TOPIC, "partition_data": [
            {"index": partition, "records": record_batch([(None, v) for v in values])}]}]})
    response = kafka_call(node.host, node.port, request, timeout_s=timeout_ms / 1000 + 10)
    return response.responses[0].partition_responses[0]


def test_a_zombie_leader_acknowledges_nothing_the_new_leader_lacks(
        cluster_factory: Any) -> None:
    """A leader paused longer than its ZooKeeper session: another is elected; resumed, the
    old one must not acknowledge an acks=all produce and it truncates to the new leader's
    log. What stops the produce: its followers fetch from the new leader, and its ISR
    shrink stays pending, so the high watermark stays over the followers that no longer
    fetch from it. Resumed with its old broker epoch, the shrink is answered
    STALE_BROKER_EPOCH (sent again); once it registered again, FENCED_LEADER_EPOCH (held);
    or it goes unanswered; until the controller makes it a follower."""
    cluster = cluster_factory(config=FAST)
    leaders = create_topic(cluster, partitions=3)
    p = next(q for q, b in leaders.items() if b != cluster.controller())
    old = cluster.nodes[leaders[p]]
    others = [n for n in cluster.nodes.values() if n is not old]
    acked, errors = produce_acks_all(cluster, [b"first-%d" % i for i in range(30)], p)
    assert errors == [] and len(acked) == 30

    old.pause()
    try:
        def elected() -> int | None:
            leader = others[0].metadata().partitions[(TOPIC, p)].leader
            return leader if leader in {n.broker_id for n in others} else None

        new = cluster.nodes[wait_for("a new leader while the old one sleeps", elected,
                                     timeout_s=60)]
        for i in range(3):
            # The controller tells the new leader (LeaderAndIsr) and the others (UpdateMetadata)
            # separately: until the new leader has its news it answers NOT_LEADER_OR_FOLLOWER,
            # which a client retries (nothing was appended).
            def produced(value: bytes = b"new-%d" % i) -> Any:
                answer = produce_raw(new, p, [value])
                return None if answer.error_code == 6 else answer

            assert wait_for("the new leader to take a produce", produced,
                            timeout_s=30).error_code == 0
    finally:
        old.resume()
    zombie = produce_raw(old, p, [b"zombie"])
    assert zombie.error_code != 0, "the old leader acknowledged what the new one lacks"
    records = wait_for("the old leader holding the new leader's log",
                       lambda: same_logs(cluster, p), timeout_s=60)
    values = values_of(records)
    assert b"zombie" not in values
    assert values == [*acked, b"new-0", b"new-1", b"new-2"]


class GroupMember:
    """One member of a consumer group, in a thread: consumes, commits synchronously after
    every batch; what it read (partition, offset, after the kill?) and its commits."""

    def __init__(self, bootstrap: str, group: str, shared: dict[str, Any]) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "session.timeout.ms": 10000,
                                  "heartbeat.interval.ms": 1000})
        self.shared = shared
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.consumer.subscribe([TOPIC])
        shared = self.shared
        deadline = time.monotonic() + 240
        try:
            while not shared["done"].is_set() and time.monotonic() < deadline:
                batch = self.consumer.consume(num_messages=20, timeout=0.5)
                got = [m for m in batch if m.error() is None]
                if not got:
                    continue
                killed = shared["killed"].is_set()
                with shared["lock"]:
                    shared["read"].extend((m.partition(), m.offset(), killed) for m in got)
                try:
                    committed = self.consumer.commit(asynchronous=False)
                except Exception:  # the coordinator moved: the next batch commits again
                    continue
                with shared["lock"]:
                    if not shared["killed"].is_set():
                        for tp in committed or []:
                            if tp.error is None and tp.offset >= 0:
                                shared["acked"][tp.partition] = max(
                                    shared["acked"].get(tp.partition, 0), tp.offset)
                time.sleep(0.05)  # a consumer that takes its time, so the kill lands mid-way
        finally:
            self.consumer.close()


def test_a_consumer_group_keeps_its_offsets_through_its_coordinators_kill(
        cluster_factory: Any) -> None:
    """Three members consume and commit; the coordinator's node is killed (kill -9): the
    group carries on with the coordinator moved to another node (``__consumer_offsets`` has
    RF 3), and no member reads again below an offset committed before the kill."""
    cluster = cluster_factory(config=FAST)
    create_topic(cluster, partitions=3)
    total = 0
    for p in range(3):
        acked, errors = produce_acks_all(cluster, [b"%d" % i for i in range(1500)], p)
        assert errors == [] and len(acked) == 1500
        total += 1500
    group = "ledger-readers"
    shared: dict[str, Any] = {"lock": threading.Lock(), "read": [], "acked": {},
                              "killed": threading.Event(), "done": threading.Event()}
    members = [GroupMember(cluster.bootstrap, group, shared) for _ in range(3)]
    for member in members:
        member.thread.start()
    try:
        wait_for("a third of the records read", lambda: len(shared["read"]) > total // 3,
                 timeout_s=120)
        found = call(cluster.nodes[1].bootstrap, FindCoordinatorRequest(key=group,
                                                                         key_type=0), 1)
        assert found.error_code == 0
        with shared["lock"]:
            shared["killed"].set()
            committed_before = dict(shared["acked"])
        cluster.nodes[found.node_id].kill()
        assert committed_before, "nothing was committed before the kill"

        def everything_read() -> bool:
            with shared["lock"]:
                return len({(p, o) for p, o, _k in shared["read"]}) == total

        wait_for("every record read by the group", everything_read, timeout_s=180)
    finally:
        shared["done"].set()
        for member in members:
            member.thread.join(60)
    # The coordinator moves when the killed node's session expires and the controller's
    # UpdateMetadata reaches the node asked; the members may have read everything before
    # (a partition the killed node did not lead needs no new leader).
    moved = wait_for("FindCoordinator to name a live node", lambda: (
        lambda a: a if a.error_code == 0 and a.node_id != found.node_id else None)(
            call(cluster.live()[0].bootstrap, FindCoordinatorRequest(key=group, key_type=0),
                 1)), timeout_s=60)
    assert moved.error_code == 0 and moved.node_id != found.node_id
    again = [(p, o) for p, o, after in shared["read"]
             if after and o < committed_before.get(p, 0)]
    assert again == [], f"read again below offsets committed before the kill: {again[:5]}"


def test_partitions_spread_over_the_fetchers_and_small_fetches_replicate_everything(
        cluster_factory: Any) -> None:
    """num.replica.fetchers=2: each follower runs the fetchers hash(topic, partition) % 2
    names for each leader; fetches bounded by replica.fetch.max.bytes (a batch at least)
    and replica.fetch.response.max.bytes, waiting replica.fetch.wait.max.ms for
    replica.fetch.min.bytes, still bring every record."""
    cluster = cluster_factory(config={**FAST, "num.replica.fetchers": 2,
                                      "replica.fetch.max.bytes": 1024,
                                      "replica.fetch.response.max.bytes": 4096,
                                      "replica.fetch.min.bytes": 1,
                                      "replica.fetch.wait.max.ms": 100})
    leaders = create_topic(cluster, partitions=6)
    for p in range(6):
        acked, errors = produce_acks_all(cluster, [b"%d-%d" % (p, i) * 40 for i in range(100)],
                                         p)
        assert errors == [] and len(acked) == 100
    for p in range(6):
        records = wait_for(f"identical replicas of {p}", lambda p=p: same_logs(cluster, p),
                           timeout_s=60)
        assert len(records) == 100
    for node in cluster.live():
        expected = {f"replica-fetcher-{leader}-{stable_hash(f'{TOPIC}-{p}') % 2}"
                    for p, leader in leaders.items() if leader != node.broker_id}
        started = {line.split("started replica fetcher ")[1].split()[0]
                   for line in node.log().splitlines() if "started replica fetcher" in line}
        assert expected <= started


def test_a_follower_with_an_empty_log_catches_up(cluster_factory: Any) -> None:
    """A follower's data dir wiped: it comes back empty, fetches the whole log (several
    segments) and rejoins the ISR; its replica is the leader's, record by record."""
    cluster = cluster_factory(config={**FAST, "log.segment.bytes": 1 << 20})
    leaders = create_topic(cluster, partitions=3)
    p = next(q for q, b in leaders.items() if b == cluster.controller())
    follower = next(n for n in cluster.nodes.values() if n.broker_id != leaders[p])
    payload = bytes(range(256)) * 16  # 4 KiB
    for round_ in range(4):
        acked, errors = produce_acks_all(cluster, [b"%d-%d-" % (round_, i) + payload
                                                   for i in range(1000)], p, timeout_s=120)
        assert errors == [] and len(acked) == 1000
    follower.stop()
    shutil.rmtree(follower.data_dir)
    follower.data_dir.mkdir()
    follower.start()
    wait_for("the emptied follower back in the ISR",
             lambda: len(isr_of(cluster, p, via=leaders[p])) == 3, timeout_s=180)
    records = wait_for("identical replicas", lambda: same_logs(cluster, p), timeout_s=120)
    assert len(records) == 4000
    assert len(list(partition_dir(follower, TOPIC, p).glob("*.log"))) > 4


def test_a_preferred_leader_back_in_the_isr_leads_again(cluster_factory: Any) -> None:
    """auto.leader.rebalance.enable: a leader killed and restarted rejoins the ISR (it fetched
    up to the high watermark), then the controller's check every
    leader.imbalance.check.interval.seconds, past leader.imbalance.per.broker.percentage,
    gives it its preferred leadership back (a new leader epoch)."""
    cluster = cluster_factory(config={**FAST, "auto.leader.rebalance.enable": True,
                                      "leader.imbalance.check.interval.seconds": 1,
                                      "leader.imbalance.per.broker.percentage": 0})
    leaders = create_topic(cluster, partitions=3)
    p = next(q for q, b in leaders.items() if b != cluster.controller())
    preferred = cluster.nodes[leaders[p]]
    acked, errors = produce_acks_all(cluster, [b"a-%d" % i for i in range(20)], p)
    assert errors == [] and len(acked) == 20
    epoch = cluster.view().partitions[(TOPIC, p)].leader_epoch
    preferred.kill()
    others = [n for n in cluster.nodes.values() if n is not preferred]
    wait_for("another leader", lambda: others[0].metadata().partitions[(TOPIC, p)].leader
             in {n.broker_id for n in others}, timeout_s=60)
    more, errors = produce_acks_all(cluster, [b"b-%d" % i for i in range(20)], p)
    assert errors == [] and len(more) == 20
    preferred.start()
    view = wait_for("the preferred replica leading again", lambda: (lambda v: v if v.partitions[
        (TOPIC, p)].leader == preferred.broker_id else None)(others[0].metadata()),
        timeout_s=90)
    assert view.partitions[(TOPIC, p)].leader_epoch >= epoch + 2
    assert len(view.partitions[(TOPIC, p)].isr) == 3
    last, errors = produce_acks_all(cluster, [b"c-%d" % i for i in range(20)], p)
    assert errors == [] and len(last) == 20
    records = wait_for("identical replicas", lambda: same_logs(cluster, p), timeout_s=60)
    assert values_of(records) == acked + more + last


def test_a_leader_whose_isr_change_is_refused_for_its_version_goes_on_leading(
        cluster_factory: Any, zk_connect: str) -> None:
    """Kafka's Partition.handleAlterPartitionError: an ISR change refused as
    INVALID_UPDATE_VERSION (or FENCED_LEADER_EPOCH) leaves the leader leading, the change
    pending, until a LeaderAndIsr at a higher leader epoch (no controller sends one for the
    refusal; here the follower's return lets the held shrink go unneeded). The partition's
    state znode is
    written underneath the controller (the same content, a new version): the leader's
    shrink (a follower paused past replica.lag.time.max.ms) is refused for its version, and
    the leader goes on serving produces and fetches."""
    # the paused follower's session must outlive the waits below (30 s for the refusal,
    # then a produce and a fetch): expired, the controller takes it out of the ISR at a new
    # leader epoch, which ends the held shrink and the test with it (60 s: the test
    # ZooKeeper's maxSessionTimeout)
    cluster = cluster_factory(config={**FAST, "zookeeper.session.timeout.ms": 60000})
    leaders = create_topic(cluster, partitions=3)
    # the controller's own partition: the paused follower is not the controller
    p = next(q for q, b in leaders.items() if b == cluster.controller())
    leader = cluster.nodes[leaders[p]]
    first = next(n for n in cluster.nodes.values() if n is not leader)
    acked, errors = produce_acks_all(cluster, [b"before-%d" % i for i in range(10)], p)
    assert errors == [] and len(acked) == 10
    zk = ZooKeeperReader(zk_connect)
    try:
        path = znodes.partition_state_path(Tp(TOPIC, p))
        data, stat = zk.client.get(path)
        zk.client.set(path, data, version=stat.version)  # the version moves, nothing else
    finally:
        zk.close()
    refused = "the controller refused the ISR change (INVALID_UPDATE_VERSION)"
    first.pause()
    try:
        wait_for("the leader's shrink refused for its version",
                 lambda: refused in leader.log(), timeout_s=30)
        one = produce_to(leader, TOPIC, p, [b"acks1"], acks=1)
        assert one.error_code == 0, one  # still the leader
        fetched = fetch_from(leader, TOPIC, p, 0)
        assert fetched.error_code == 0, fetched
        # the high watermark waits for the paused follower: the ISR is still three
        assert [r[2] for r in read_records(fetched.records)] == acked
    finally:
        first.resume()

    def served() -> list[Any] | None:
        answer = fetch_from(leader, TOPIC, p, 0)
        assert answer.error_code == 0, answer
        values = [r[2] for r in read_records(answer.records)]
        return values if b"acks1" in values else None

    assert wait_for("the follower back and the high watermark past the acks=1 record",
                    served, timeout_s=30) == [*acked, b"acks1"]
