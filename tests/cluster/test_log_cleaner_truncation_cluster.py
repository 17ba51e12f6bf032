"""A follower's truncation reaches the log cleaner across processes: two real nodes with
num.processes 2, a real ZooKeeper, confluent-kafka. The compacted partition lives on
shard 1, in process 1 of each node; the node's only LogCleaner runs in process 0.

The leader L, alone in the ISR, takes records its follower F lacks and cleans them
(its cleaner checkpoint past F's log end); L dies, F leads uncleanly and takes other
records; L comes back and truncates to F's log end. The shard of process 1 tells the
cleaner of process 0, which lowers its checkpoint to the log's new active segment
(Kafka's maybeTruncateCheckpoint). Before, the shard addressed a cleaner in its own
process, where there is none: the checkpoint stayed above records written again."""

from __future__ import annotations

import re
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from actors.topology import Topology
from tests.fixtures.cluster import Cluster, ClusterNode, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

CONFIG = {
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 5000,
    "replica.high.watermark.checkpoint.interval.ms": 500,
    "auto.leader.rebalance.enable": False,
    "num.processes": 2,
    "num.partition.shards": 2,
    "log.cleaner.backoff.ms": 100,
    "log.flush.offset.checkpoint.interval.ms": 100,  # the recovery point bounds a cleaning
}
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "1024",
                 "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                 "min.insync.replicas": "1", "unclean.leader.election.enable": "true"}


def topic_on_process_1() -> str:
    """A topic whose partition 0 lives on shard 1 (process 1 of 2)."""
    topo = Topology("x", 1, 1, 2, 2, 1)
    return next(name for name in (f"trunc-{i}" for i in range(1000))
                if topo.shard_for(name, 0).name == "shard-1")


def produce(cluster: Cluster, topic: str, prefix: bytes, count: int) -> int:
    """``count`` keyed records (4 keys, about 100 bytes each), one batch each; how many
    were acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": False, "linger.ms": 0,
                         "batch.num.messages": 1, "message.timeout.ms": 20_000})
    acked: list[int] = []

    def done(err: Any, _msg: Any) -> None:
        if err is None:
            acked.append(1)

    for i in range(count):
        producer.produce(topic, prefix + b"-%d-" % i + b"v" * 90, key=b"k%d" % (i % 4),
                         partition=0, on_delivery=done)
        producer.flush(25)
    return len(acked)


def leader_isr(cluster: Cluster, topic: str, via: int) -> tuple[int, tuple[int, ...]]:
    found = cluster.nodes[via].metadata().partitions.get((topic, 0))
    return (found.leader, tuple(sorted(found.isr))) if found is not None else (-2, ())


def cleaned_ends(node: ClusterNode, topic: str) -> list[int]:
    return [int(m) for m in re.findall(rf"cleaned {re.escape(topic)}-0 up to offset (\d+)",
                                       node.log())]


@pytest.mark.slow
def test_a_truncation_in_process_1_lowers_the_checkpoint_of_the_cleaner_in_process_0(
        cluster_factory: Any) -> None:
    topic = topic_on_process_1()
    cluster = cluster_factory(2, config=CONFIG)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, 1, 2, topic_configs=TOPIC_CONFIGS)])
    finally:
        admin.close()
    lead_id = cluster.wait_topic(topic, 1).leaders(topic)[0]
    lead = cluster.nodes[lead_id]
    [follower] = [n for n in cluster.nodes.values() if n is not lead]
    fid = follower.broker_id
    assert produce(cluster, topic, b"a", 20) == 20  # offsets 0-19, on both
    wait_for("the follower in the ISR", lambda: leader_isr(cluster, topic, lead_id) == (
        lead_id, tuple(sorted((lead_id, fid)))), timeout_s=30)
    follower.stop()
    wait_for("ISR of the leader alone", lambda: leader_isr(cluster, topic, lead_id) == (
        lead_id, (lead_id,)), timeout_s=30)
    assert produce(cluster, topic, b"b", 60) == 60  # offsets 20-79, on the leader only
    wait_for("a cleaning of the leader's log past offset 20",
             lambda: any(end > 20 for end in cleaned_ends(lead, topic)), timeout_s=60)
    lead.kill()
    follower.start()
    wait_for("the follower leading (unclean)",
             lambda: leader_isr(cluster, topic, fid)[0] == fid, timeout_s=60)
    assert produce(cluster, topic, b"c", 5) == 5  # offsets 20-24, on the new leader
    lead.start()
    # the old leader truncates to 20 (the new leader's epoch history), in process 1, and
    # the cleaner of process 0 lowers its checkpoint there
    line = wait_for("the cleaner checkpoint lowered", lambda: re.search(
        rf"{re.escape(topic)}-0 truncated: its cleaner checkpoint goes from (\d+) to (\d+)",
        lead.log()), timeout_s=60)
    before, after = int(line.group(1)), int(line.group(2))
    assert before > 20 >= after, line.group(0)
