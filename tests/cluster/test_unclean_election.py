"""Unclean leader election on the data plane (issue 15), three real nodes, a real
ZooKeeper, confluent-kafka and kafka-python.

Two topics, RF 3 and min.insync.replicas=1: ``loose`` with
unclean.leader.election.enable=true, ``strict`` with false; one partition of each
led by the same broker L. The two others stop, L alone takes more acknowledged
records, then dies; a follower F (out of the ISR, behind) comes back. ``loose``: F
leads and the records it lacks are lost (Kafka's documented tradeoff), yet when L
returns it truncates to F's epoch history and follows: every replica holds the same
log. ``strict``: no leader (produce fails) until L returns; nothing acknowledged is
lost.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.replication import disk_records, epoch_checkpoint, values_of

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

CONFIG = {
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "replica.socket.timeout.ms": 5000,
    "replica.high.watermark.checkpoint.interval.ms": 500,
    "auto.leader.rebalance.enable": False,
}


def produce(cluster: Cluster, tp: tuple[str, int], values: list[bytes],
            timeout_s: float = 20.0) -> tuple[list[bytes], list[str]]:
    acked: list[bytes] = []
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": int(timeout_s * 1000)})

    def on_delivery(err: Any, msg: Any) -> None:
        (errors.append(err.name()) if err is not None else acked.append(msg.value()))

    for value in values:
        producer.produce(tp[0], value, partition=tp[1], on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(timeout_s + 5)
    return acked, errors


def same_logs(cluster: Cluster, tp: tuple[str, int]) -> list[Any] | None:
    logs = [[(r.offset, r.leader_epoch, r.value) for r in disk_records(n, *tp)]
            for n in cluster.live()]
    if logs[0] and all(log == logs[0] for log in logs[1:]):
        return disk_records(cluster.live()[0], *tp)
    return None


def state(cluster: Cluster, tp: tuple[str, int], via: int) -> tuple[int, tuple[int, ...]]:
    found = cluster.nodes[via].metadata().partitions.get(tp)
    return (found.leader, tuple(sorted(found.isr))) if found is not None else (-2, ())


@pytest.mark.slow
def test_unclean_election_loses_only_what_the_new_leader_lacks_and_logs_converge(
        cluster_factory: Any) -> None:
    """Slow (about 25 s): three broker restarts and two leader elections by session
    expiry; both flag values share one cluster to pay for it once."""
    cluster = cluster_factory(config=CONFIG)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([
            NewTopic(topic, 3, 3, topic_configs={
                "min.insync.replicas": "1", "unclean.leader.election.enable": flag})
            for topic, flag in (("loose", "true"), ("strict", "false"))])
    finally:
        admin.close()
    loose_leaders = cluster.wait_topic("loose", 3).leaders("loose")
    strict_leaders = cluster.wait_topic("strict", 3).leaders("strict")
    lead_id, loose = next((b, ("loose", p)) for p, b in sorted(loose_leaders.items())
                          if b in strict_leaders.values())
    strict = next(("strict", p) for p, b in sorted(strict_leaders.items()) if b == lead_id)
    lead = cluster.nodes[lead_id]
    follower, other = [n for n in cluster.nodes.values() if n is not lead]
    fid = follower.broker_id
    first = {}
    for tp in (loose, strict):
        acked, errors = produce(cluster, tp, [b"a-%d" % i for i in range(20)])
        assert errors == [] and len(acked) == 20
        first[tp] = acked
        wait_for(f"{tp} on every replica", lambda tp=tp: same_logs(cluster, tp), timeout_s=30)
    follower.stop()
    other.stop()
    for tp in (loose, strict):
        wait_for(f"{tp}: ISR [{lead_id}]", lambda tp=tp: state(cluster, tp, lead_id) == (
            lead_id, (lead_id,)), timeout_s=30)
    second = {}
    for tp in (loose, strict):
        acked, errors = produce(cluster, tp, [b"b-%d" % i for i in range(20)])
        assert errors == [] and len(acked) == 20
        second[tp] = acked
    lead.kill()
    follower.start()
    # loose: the follower, out of the ISR and 20 records behind, leads.
    wait_for("loose led by the follower", lambda: state(cluster, loose, fid)[0] == fid,
             timeout_s=60)
    third, errors = produce(cluster, loose, [b"c-%d" % i for i in range(20)])
    assert errors == [] and len(third) == 20
    # strict: offline while its only ISR member is down.
    assert state(cluster, strict, fid)[0] == -1
    refused, errors = produce(cluster, strict, [b"x-%d" % i for i in range(5)], timeout_s=5)
    assert refused == [] and len(errors) == 5
    lead.start()
    other.start()
    # strict: the old leader leads again, with all it acknowledged, on every replica.
    wait_for("strict led by the old leader with ISR 3", lambda: state(cluster, strict, fid) == (
        lead_id, (1, 2, 3)), timeout_s=60)
    records = wait_for("strict identical", lambda: same_logs(cluster, strict), timeout_s=60)
    assert values_of(records) == first[strict] + second[strict]
    # loose: the old leader truncated to the new leader's epoch history and follows it.
    wait_for("loose: ISR 3 under the new leader", lambda: state(cluster, loose, fid) == (
        fid, (1, 2, 3)), timeout_s=60)
    records = wait_for("loose identical", lambda: same_logs(cluster, loose), timeout_s=60)
    assert values_of(records) == first[loose] + third  # the b- records are the price
    assert [r.offset for r in records] == list(range(40))
    assert f"{loose[0]}-{loose[1]}: diverges from leader {fid}" in lead.log()
    epochs = {n.broker_id: epoch_checkpoint(n, *loose) for n in cluster.live()}
    assert epochs[1] == epochs[2] == epochs[3], epochs
