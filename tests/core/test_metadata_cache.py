"""MetadataCache.snapshot: what a cache holds, as one full UpdateMetadata (a broker's process
restarted with num.processes > 1 gets it for its handlers) that rebuilds the same cache."""

from __future__ import annotations

from actors.core.metadata_cache import MetadataCache
from wire.cluster_messages import BrokerRow, EndpointRow, UpdateMetadata, UpdateMetadataPartition


def broker(i: int) -> BrokerRow:
    return BrokerRow(i, 10 + i, f"tcp://127.0.0.1:{7000 + i}", None,
                     [EndpointRow("PLAINTEXT", "127.0.0.1", 9000 + i, "PLAINTEXT")], 2, 2, 1)


def part(topic: str, p: int, leader: int, isr: list[int]) -> UpdateMetadataPartition:
    return UpdateMetadataPartition(topic, p, 3, leader, 4, isr, 6, [1, 2, 3], [])


def test_a_snapshot_rebuilds_the_cache_it_was_taken_from() -> None:
    cache = MetadataCache()
    cache.apply(UpdateMetadata(1, 3, 11, True, [broker(1), broker(2), broker(3)],
                               [part("a", 0, 1, [1, 2, 3]), part("a", 1, 2, [2, 3]),
                                part("gone", 0, 3, [3])],
                               {"a": {"retention.ms": "1000"}, "gone": {}}))
    cache.apply(UpdateMetadata(1, 3, 11, False, [broker(1), broker(2)],
                               [part("a", 1, 3, [3]), part("gone", 0, -2, [])], {}))
    snapshot = cache.snapshot(11)
    assert snapshot.full and snapshot.broker_epoch == 11
    fresh = MetadataCache()
    fresh.apply(snapshot)
    assert fresh.brokers == cache.brokers and sorted(fresh.brokers) == [1, 2]
    assert fresh.partitions == cache.partitions and fresh.topics() == ["a"]
    assert fresh.leader("a", 1) == 3 and fresh.configs("a") == {"retention.ms": "1000"}
    assert (fresh.controller_id, fresh.controller_epoch) == (1, 3)
    # a full update also drops what the late cache held and the snapshot does not
    stale = MetadataCache()
    stale.apply(UpdateMetadata(1, 2, 11, True, [broker(1)], [part("old", 0, 1, [1])], {}))
    stale.apply(snapshot)
    assert stale.topics() == ["a"]


def test_a_topic_missing_a_partition_below_its_highest_has_no_whole_count() -> None:
    """A partition left NEW is never in an UpdateMetadata: the count of the partitions
    below the gap is not the topic's (the internal topics' ids map over it)."""
    cache = MetadataCache()
    cache.apply(UpdateMetadata(1, 3, 11, True, [broker(1)],
                               [part("a", 0, 1, [1]), part("a", 2, 1, [1]),
                                part("b", 0, 1, [1]), part("b", 1, 1, [1])], {}))
    assert cache.whole_partition_count("a") == 0
    assert cache.whole_partition_count("b") == 2
    assert cache.whole_partition_count("none") is None
    cache.apply(UpdateMetadata(1, 3, 11, False, [broker(1)], [part("a", 1, 1, [1])], {}))
    assert cache.whole_partition_count("a") == 3


def test_an_internal_topic_s_count_is_the_one_it_is_assigned() -> None:
    """The controller says how many partitions an internal topic is assigned: that is its
    count, also while its last partition, left NEW, is in no UpdateMetadata (which the
    partitions held alone cannot show), as Kafka's partitionFor counts the assignment."""
    cache = MetadataCache()
    cache.apply(UpdateMetadata(1, 3, 11, True, [broker(1)],
                               [part("__consumer_offsets", 0, 1, [1]),
                                part("__consumer_offsets", 1, 1, [1])], {},
                               assigned_partitions={"__consumer_offsets": 3}))
    assert cache.whole_partition_count("__consumer_offsets") == 3
    assert cache.snapshot(11).assigned_partitions == {"__consumer_offsets": 3}
    cache.apply(UpdateMetadata(1, 3, 11, False, [broker(1)],
                               [part("__consumer_offsets", 2, 1, [1])], {},
                               assigned_partitions={"__consumer_offsets": 3}))
    assert cache.whole_partition_count("__consumer_offsets") == 3
