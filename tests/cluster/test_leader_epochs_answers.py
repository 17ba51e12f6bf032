"""Which leader epoch a cluster answers, and where it checks a client's (KIP-320), on
three real nodes with a partition of two replicas whose leader was killed.

* A node that holds no replica of the partition answers Fetch v9+, ListOffsets v4+ and
  OffsetForLeaderEpoch NOT_LEADER_OR_FOLLOWER whatever current_leader_epoch the client
  sends: Kafka's ReplicaManager finds no Partition there (getPartitionOrError) before any
  epoch is checked, so neither FENCED_LEADER_EPOCH nor UNKNOWN_LEADER_EPOCH.
* ListOffsets v4+ answers the leader epoch of the offset it answers (Kafka's
  fetchOffsetByTimestamp): the epoch of the record found by timestamp and of the one with
  the largest timestamp, the earliest epoch for the log start, the current leader epoch
  for the latest, and -1 when no record is found; not the current leader epoch for all.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.broker.rawclient import LIST_OFFSETS, RawClient, build, record_batch
from tests.cluster.test_leader_epochs_cluster import (
    FENCED,
    NOT_LEADER,
    UNKNOWN_EPOCH,
    end_offset,
    fetch_code,
    kill_leader,
    list_offsets_code,
    metadata_epoch,
)
from tests.cluster.test_replication import FAST, TOPIC, create_topic, isr_of
from tests.fixtures.cluster import ClusterNode, kafka_call, wait_for

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def list_offsets(node: ClusterNode, timestamp: int, current_epoch: int) -> tuple[int, ...]:
    """(error, timestamp, offset, leader epoch) of one ListOffsets v7 for partition 0."""
    request = build(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0,
                                        "current_leader_epoch": current_epoch,
                                        "timestamp": timestamp}]}]})
    [p] = kafka_call(node.host, node.port, request).topics[0].partitions
    return int(p.error_code), int(p.timestamp), int(p.offset), int(p.leader_epoch)


def produce(node: ClusterNode, timestamp_ms: int, acks: int) -> int:
    with RawClient(node.port) as client:
        return int(client.produce(TOPIC, 0, record_batch([(None, b"v")],
                                                         timestamp_ms=timestamp_ms),
                                  acks=acks).error_code)


def after_a_leader_change(
        cluster_factory: Any) -> tuple[ClusterNode, ClusterNode, int, int, int]:
    """Partition 0 of two replicas on three nodes: at the first leader's epoch offset 0 at
    ``base`` and offset 1 at ``base`` + 100 s (the largest timestamp); its leader killed;
    at the new leader's epoch offset 2 at ``base`` + 50 s. (the new leader, the node with
    no replica, base, the first leader's epoch, the new one's: as the metadata says)"""
    cluster = cluster_factory(config=FAST)
    create_topic(cluster, partitions=1, rf=2)
    replicas = cluster.view().partitions[(TOPIC, 0)].replicas
    [outsider] = [n for n in cluster.nodes.values() if n.broker_id not in replicas]
    wait_for("both replicas in the ISR", lambda: len(isr_of(cluster)) == 2, 30)
    leader = cluster.nodes[cluster.view().partitions[(TOPIC, 0)].leader]
    _id, first = metadata_epoch(leader)
    base = int(time.time() * 1000) - 3_600_000
    for ts in (base, base + 100_000):
        assert wait_for("a record at epoch 0", lambda t=ts: produce(leader, t, -1) == 0 or None,
                        30)
    new, _old = kill_leader(cluster)
    wait_for("a record at the new epoch", lambda: produce(new, base + 50_000, 1) == 0 or None,
             60)
    _id, epoch = metadata_epoch(new)
    assert epoch > first
    return new, outsider, base, first, epoch


def test_list_offsets_answers_the_epoch_of_the_offset_it_answers(
        cluster_factory: Any) -> None:
    new, _outsider, base, first, epoch = after_a_leader_change(cluster_factory)
    assert list_offsets(new, base, epoch) == (0, base, 0, first)
    assert list_offsets(new, base + 1, epoch) == (0, base + 100_000, 1, first)
    assert list_offsets(new, -3, epoch) == (0, base + 100_000, 1, first)
    assert list_offsets(new, -2, epoch) == (0, -1, 0, first)
    assert list_offsets(new, -1, epoch) == (0, -1, 3, epoch)
    assert list_offsets(new, base + 200_000, epoch) == (0, -1, -1, -1)  # no such record


def test_a_node_without_a_replica_checks_no_client_epoch(cluster_factory: Any) -> None:
    new, outsider, _base, _first, epoch = after_a_leader_change(cluster_factory)
    for client_epoch in (epoch - 1, epoch, epoch + 1):  # older, current, newer than metadata's
        assert end_offset(outsider, client_epoch, 0) == (NOT_LEADER, -1, -1)
        assert fetch_code(outsider, client_epoch) == NOT_LEADER
        assert list_offsets_code(outsider, client_epoch) == NOT_LEADER
    # the leader still checks it
    assert (fetch_code(new, epoch - 1), fetch_code(new, epoch + 1)) == (FENCED, UNKNOWN_EPOCH)
