"""Replica fetchers come and go with the partitions they fetch (issue 15), and a
follower keeps the leader's log start offset (DeleteRecords, retention).

Three real nodes, a real ZooKeeper, kafka-python and confluent-kafka clients;
each node's Prometheus endpoint shows which actors run.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.broker.test_metrics import scrape
from tests.cluster.test_replication import (
    FAST,
    TOPIC,
    create_topic,
    isr_of,
    produce_acks_all,
    same_logs,
)
from tests.fixtures.broker import free_port
from tests.fixtures.cluster import Cluster, ClusterNode, wait_for
from tests.fixtures.replication import (
    DiskRecord,
    disk_records,
    offset_checkpoint,
    partition_dir,
    values_of,
)

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
    again, reached by the senders that knew the old ones; a leader's controlled shutdown
    stops the others' fetchers of it."""
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
    for i in ports:  # (logged once the fetcher stopped: after the metrics can say so)
        wait_for(f"node {i} to log its idle fetchers stopped",
                 lambda n=cluster.nodes[i]: "stopped idle replica fetcher" in n.log(),
                 timeout_s=10)
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
    leaders = create_topic(cluster, partitions=3)
    more, errors = produce_acks_all(cluster, [b"b-%d" % i for i in range(50)])
    assert errors == [] and len(more) == 50
    records = wait_for("identical replicas again", lambda: same_logs(cluster, 0), timeout_s=60)
    assert [r.value for r in records] == more
    wait_for("fetchers running again", lambda: all(fetchers_running(p) for p in ports.values()),
             timeout_s=30)
    # A leader goes (controlled shutdown): the others' fetchers of it stop, whether their
    # partition now leads here (became leader) or follows another node.
    gone = cluster.nodes[leaders[0]]
    gone.stop()
    survivors = {i: p for i, p in ports.items() if i != gone.broker_id}
    wait_for("no fetcher of the stopped leader", lambda: all(
        f"replica-fetcher-{gone.broker_id}-0" not in fetchers_running(p)
        for p in survivors.values()), timeout_s=60)
    last, errors = produce_acks_all(cluster, [b"c-%d" % i for i in range(20)])
    assert errors == [] and len(last) == 20
    records = wait_for("identical survivors", lambda: same_logs(cluster, 0), timeout_s=60)
    assert [r.value for r in records] == more + last


def log_starts(cluster: Cluster, topic: str, partition: int) -> dict[int, int]:
    """Each live node's checkpointed log start of the partition (-1: none yet)."""
    return {n.broker_id: offset_checkpoint(n, "log-start-offset-checkpoint").get(
        (topic, partition), -1) for n in cluster.live()}


def first_offsets(cluster: Cluster, topic: str, partition: int) -> dict[int, int]:
    return {n.broker_id: (disk_records(n, topic, partition) or [DiskRecord(-1, -1, -1, None,
                                                                           None)])[0].offset
            for n in cluster.live()}


def same_logs_from(cluster: Cluster, start: int) -> list[Any] | None:
    """The records from ``start`` on when every live replica holds the same ones (their
    head segments may start at different offsets below the log start)."""
    logs = [[(r.offset, r.leader_epoch, r.value) for r in disk_records(n, TOPIC, 0)
             if r.offset >= start] for n in cluster.live()]
    if logs[0] and all(log == logs[0] for log in logs[1:]):
        return [r for r in disk_records(cluster.live()[0], TOPIC, 0) if r.offset >= start]
    return None


def produce_small_batches(cluster: Cluster, prefix: bytes, count: int) -> list[bytes]:
    """acks=all, ten records (about 1 KB) a flush: batches fit 2 KB segments."""
    acked: list[bytes] = []
    for start in range(0, count, 10):
        got, errors = produce_acks_all(cluster, [prefix + b"-%03d-" % i + b"x" * 80
                                                 for i in range(start, start + 10)])
        assert errors == [] and len(got) == 10
        acked += got
    return acked


@pytest.mark.slow
def test_followers_follow_the_leaders_log_start(cluster_factory: Any) -> None:
    """Slow (about 20 s: a follower restart, twenty acks=all producers). DeleteRecords on
    the leader moves every follower's log start (checkpointed, the segments below it
    deleted); a follower that was down while the leader's log start
    passed its log end gets OFFSET_OUT_OF_RANGE and restarts its log at the leader's
    log start, then rejoins the ISR; retention.bytes on the leader: all log starts agree."""
    cluster = cluster_factory(config={**FAST, "log.retention.check.interval.ms": 300})
    leaders = create_topic(cluster, configs={"segment.bytes": "2048"})
    leader = cluster.nodes[leaders[0]]
    produce_small_batches(cluster, b"a", 100)
    wait_for("identical replicas", lambda: same_logs(cluster, 0), timeout_s=60)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        out = admin.delete_records({KTopicPartition(TOPIC, 0): 40})
        assert out[KTopicPartition(TOPIC, 0)]["low_watermark"] == 40
        wait_for("every log start at 40", lambda: set(log_starts(cluster, TOPIC, 0).values())
                 == {40}, timeout_s=30)
        heads = first_offsets(cluster, TOPIC, 0)
        assert all(0 < head <= 40 for head in heads.values()), heads  # head segments gone
        # A follower down while the leader's log start passes its log end.
        follower = next(n for n in cluster.nodes.values() if n is not leader)
        follower.stop()
        more = produce_small_batches(cluster, b"b", 100)
        admin.delete_records({KTopicPartition(TOPIC, 0): 150})
        follower.start()
        wait_for("the follower back in the ISR", lambda: len(isr_of(cluster, 0, via=leader.
                                                                     broker_id)) == 3,
                 timeout_s=60)
        records = wait_for("identical replicas from 150", lambda: same_logs_from(cluster, 150),
                           timeout_s=60)
        assert [r.offset for r in records] == list(range(150, 200))
        assert values_of(records) == more[50:]
        assert first_offsets(cluster, TOPIC, 0)[follower.broker_id] <= 150
        assert "out of range on leader" in follower.log()
        wait_for("every log start at 150", lambda: set(log_starts(cluster, TOPIC, 0).values())
                 == {150}, timeout_s=30)
        # Retention on the leader: a second topic whose old segments go by size.
        admin.create_topics([NewTopic("kept", 1, 3, topic_configs={
            "segment.bytes": "2048", "retention.bytes": "4096"})])
    finally:
        admin.close()
    cluster.wait_topic("kept", 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "batch.size": 1000, "linger.ms": 0})
    for i in range(100):
        producer.produce("kept", b"k-%03d-" % i + b"z" * 80, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    starts = wait_for("retention moved every log start alike", lambda: (
        lambda s: s if len(set(s.values())) == 1 and min(s.values()) > 0 else None)(
        log_starts(cluster, "kept", 0)), timeout_s=30)
    assert len(starts) == 3


def test_delete_records_answers_once_the_isr_holds_the_new_log_start(
        cluster_factory: Any) -> None:
    """DeleteRecords is answered only when every ISR follower's fetch says its log start
    reached the offset (Kafka's DelayedDeleteRecords): answered at once, a kill -9 of the
    leader before the followers' next fetch let the new leader serve the deleted records
    again (earliest 0, a consumer read them). A paused follower holds the answer until it
    fetches again: it stays in the ISR (replica.lag.time.max.ms 30 s, and its ZooKeeper
    session of 30 s outlives the pause) while the leader's DeleteRecords purgatory holds
    the request. The leader (node 1, the first replica) keeps the short session: its
    kill -9 is noticed soon."""
    metrics_port = free_port()
    pausable = {"zookeeper.session.timeout.ms": 30_000}
    cluster = cluster_factory(config={**FAST, "replica.lag.time.max.ms": 30_000},
                              node_config={1: {"metrics.port": metrics_port}, 2: pausable,
                                           3: pausable})
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        client.create_topics([NewTopic(TOPIC, replica_assignments={0: [1, 2, 3]})])
    finally:
        client.close()
    leaders = cluster.wait_topic(TOPIC, 1).leaders(TOPIC)
    assert leaders[0] == 1
    leader = cluster.nodes[1]
    sent, errors = produce_acks_all(cluster, [b"r-%d" % i for i in range(50)])
    assert errors == [] and len(sent) == 50
    wait_for("identical replicas", lambda: same_logs(cluster, 0), timeout_s=60)
    paused = cluster.nodes[2]
    admin = AdminClient({"bootstrap.servers": leader.bootstrap})
    tp = TopicPartition(TOPIC, 0, 40)
    paused.pause()
    try:
        answer = admin.delete_records([tp], request_timeout=60, operation_timeout=60)[tp]
        wait_for("the DeleteRecords waiting in the leader", lambda: scrape(metrics_port)[
            'actorlog_purgatory_size{kind="delete_records"}'] == 1, timeout_s=30)
        assert not answer.done(), "answered while an ISR follower had not moved its log start"
        assert 2 in isr_of(cluster, via=1)
    finally:
        paused.resume()
    assert answer.result(60).low_watermark == 40
    leader.kill()
    wait_for("another leader", lambda: cluster.view(paused.broker_id).leaders(TOPIC).get(0)
             not in (None, -1, leader.broker_id), timeout_s=60)
    earliest = TopicPartition(TOPIC, 0)
    admin = AdminClient({"bootstrap.servers": paused.bootstrap})
    got = wait_for("the new leader's earliest offset", lambda: _earliest(admin, earliest),
                   timeout_s=30)
    assert got == 40
    consumer = Consumer({"bootstrap.servers": paused.bootstrap, "group.id": "after-delete",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 5)])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None
        assert (message.offset(), message.value()) == (40, b"r-40")
    finally:
        consumer.close()


def test_delete_records_waiting_for_a_follower_that_leaves_the_isr_is_answered(
        cluster_factory: Any) -> None:
    """A paused follower leaves the ISR when its ZooKeeper session expires (4 s; the
    leader's own shrink waits replica.lag.time.max.ms, 60 s here, so the controller's is
    the one): the controller's ISR change bumps the leader epoch of the leader that stays,
    and the DeleteRecords that waited for the follower is answered by the smaller ISR,
    not refused as if the leader had moved."""
    cluster = cluster_factory(config={**FAST, "replica.lag.time.max.ms": 60_000})
    leaders = create_topic(cluster)
    leader = cluster.nodes[leaders[0]]
    sent, errors = produce_acks_all(cluster, [b"s-%d" % i for i in range(20)])
    assert errors == [] and len(sent) == 20
    wait_for("identical replicas", lambda: same_logs(cluster, 0), timeout_s=60)
    paused = next(n for n in cluster.nodes.values() if n is not leader)
    admin = AdminClient({"bootstrap.servers": leader.bootstrap})
    tp = TopicPartition(TOPIC, 0, 10)
    paused.pause()
    try:
        answer = admin.delete_records([tp], request_timeout=60, operation_timeout=60)[tp]
        assert answer.result(60).low_watermark == 10
    finally:
        paused.resume()


def _earliest(admin: AdminClient, tp: TopicPartition) -> int | None:
    try:
        return int(admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(10).offset)
    except KafkaException:
        return None  # the new leader not known everywhere yet


def peak_rss_mb(pid: int | None) -> float:
    """Peak RSS (VmHWM) of the process and its children (num.processes > 1), in MB."""
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        for line in Path(f"/proc/{current}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
        for task in Path(f"/proc/{current}/task").iterdir():
            try:  # a thread that ended since the listing has no file any more
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    if total == 0:
        raise AssertionError(f"no VmHWM for pid {pid}")
    return total


def log_bytes(node: ClusterNode, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in partition_dir(node, topic, partition).glob("*.log"))


CATCH_UP_MB = 256


def log_digest(node: ClusterNode) -> str:
    digest = hashlib.sha256()
    for segment in sorted(partition_dir(node, TOPIC, 0).glob("*.log")):
        with segment.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


@pytest.mark.slow
def test_a_follower_down_while_the_leader_took_256_mb_catches_up_in_bounded_memory(
        cluster_factory: Any) -> None:
    """Slow (about 15 s alone, but 512 MB of disk writes: 256 MB written, then fetched): a
    follower stopped while its leader takes 256 MB comes back, fetches it all in fetches of
    at most
    replica.fetch.response.max.bytes (4 MB here), rejoins the ISR, and its peak RSS stays
    far below the log it fetched. (`actorlog bench replication --catch-up-mb 1024` gives
    the rate on 1 GB.)"""
    cluster, ports = metrics_cluster(cluster_factory, **{
        "replica.fetch.max.bytes": 1 << 20, "replica.fetch.response.max.bytes": 4 << 20})
    leaders = create_topic(cluster)
    leader = cluster.nodes[leaders[0]]
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    follower.stop()
    wait_for("ISR without the follower", lambda: len(isr_of(cluster, 0, via=leader.broker_id))
             == 2, timeout_s=30)
    producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "none",
                         "message.timeout.ms": 120_000})
    payload = b"c" * 16384
    for _ in range(CATCH_UP_MB * 64):  # bounded: 16 KiB records up to CATCH_UP_MB
        while True:
            try:
                producer.produce(TOPIC, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    assert producer.flush(120) == 0
    leader_end = log_bytes(leader, TOPIC, 0)
    assert leader_end >= CATCH_UP_MB << 20
    follower.start()
    wait_for("the follower back in the ISR", lambda: len(isr_of(cluster, 0, via=leader.
                                                                 broker_id)) == 3,
             timeout_s=240)
    assert log_bytes(follower, TOPIC, 0) == leader_end
    m = scrape(ports[follower.broker_id])
    label = f'{{fetcher="replica-fetcher-{leader.broker_id}-0"}}'
    assert m["actorlog_replica_fetcher_bytes_total" + label] >= CATCH_UP_MB << 20
    assert 0 < m["actorlog_replica_fetcher_largest_response_bytes" + label] <= 4 << 20
    peak = peak_rss_mb(follower.pid)
    assert peak < CATCH_UP_MB * 0.75, f"follower peak RSS {peak:.0f} MB"
    assert log_digest(follower) == log_digest(leader)  # byte for byte: offsets, epochs


def test_a_follower_with_more_handlers_than_its_leader_replicates(
        cluster_factory: Any) -> None:
    """Nodes may run different ``num.io.threads``: the leader (node 1) runs one
    RequestHandler, its follower (node 2) four. The follower's fetcher must send its
    ReplicaFetch to a handler the leader has (the leader's registration says how many),
    not pick one by its own count (handler-2 of node 1 does not exist: the fetches went
    to dead letters, the ISR shrank and acks=all failed)."""
    cluster = cluster_factory(size=2, config=FAST, node_config={
        1: {"num.io.threads": 1}, 2: {"num.io.threads": 4}})
    leaders = create_topic(cluster, partitions=2, rf=2)  # one leader on each node
    assert sorted(leaders.values()) == [1, 2]
    values = [b"m-%d" % i for i in range(100)]
    for partition in (0, 1):
        acked, errors = produce_acks_all(cluster, values, partition=partition, timeout_s=15)
        assert errors == [] and acked == values, (partition, leaders[partition])
    for partition in (0, 1):
        records = wait_for(f"both replicas of {partition} alike",
                           lambda p=partition: same_logs(cluster, p), timeout_s=15)
        assert values_of(records) == values
        for via in (1, 2):
            assert isr_of(cluster, partition, via=via) == (1, 2)
