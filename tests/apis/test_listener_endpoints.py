"""Endpoints by the request's listener (Kafka's request.context.listenerName), without a
broker: the handler's context and metadata cache alone.

Kafka's ZkMetadataCache: a broker without the listener is left out of the brokers
(getAliveBrokerNodes), a live leader without it is LISTENER_NOT_FOUND from Metadata v6
and LEADER_NOT_AVAILABLE before (getPartitionMetadata), a coordinator without it
COORDINATOR_NOT_AVAILABLE (getAliveBrokerNode in handleFindCoordinatorRequest).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from actors.apis import admin, cluster, groups
from actors.apis.base import ANONYMOUS_PRINCIPAL, Access, HandlerContext
from actors.core.metadata_cache import MetadataCache
from actors.core.offsets_codec import OFFSETS_TOPIC, partition_for
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import LISTENER_SHIFT, Topology
from wire.broker_messages import TopicEntry
from wire.cluster_messages import BrokerRow, EndpointRow, UpdateMetadata, UpdateMetadataPartition
from wire.errors import ErrorCode

TOPOLOGY = Topology("n", 1, 1, 1, 1, 3)
NAMES = ("INTERNAL", "EXTERNAL")


def _broker(i: int, *listeners: str) -> BrokerRow:
    """Broker ``i``'s endpoints in the order given (each node lists its own listeners in
    its own order); a listener's port says which it is: 9000 + 100 x its index in NAMES."""
    return BrokerRow(i, 10 + i, f"tcp://127.0.0.1:{7000 + i}", None,
                     [EndpointRow(name, f"h{i}", 9000 + 100 * NAMES.index(name) + i,
                                  "PLAINTEXT") for name in listeners], 1, 1, 1)


def _part(topic: str, p: int, leader: int) -> UpdateMetadataPartition:
    return UpdateMetadataPartition(topic, p, 0, leader, 1, [1, 2], 1, [1, 2], [])


def _on(ctx: HandlerContext, listener: int) -> HandlerContext:
    ctx.access = Access(ANONYMOUS_PRINCIPAL, "127.0.0.1", "Metadata",
                        (listener << LISTENER_SHIFT) + 7)
    return ctx


def _cluster_context() -> HandlerContext:
    """Broker 1 on both listeners, broker 2 on INTERNAL alone; t-0 led by 1, t-1 by 2."""
    config = Config()
    cache = MetadataCache()
    groups_partitions = int(config["offsets.topic.num.partitions"])
    cache.apply(UpdateMetadata(1, 1, 11, True, [_broker(1, *NAMES), _broker(2, "INTERNAL")],
                               [_part("t", 0, 1), _part("t", 1, 2)]
                               + [_part(OFFSETS_TOPIC, p, 1 + p % 2)
                                  for p in range(groups_partitions)], {}))
    return HandlerContext(TOPOLOGY, config, 1, "h1", 9001, "c", 0, {"t": TopicEntry(2, {})},
                          clock=ManualClock(), cluster=cache, listener_names=NAMES)


def _group_led_by(ctx: HandlerContext, leader: int) -> str:
    count = int(ctx.config["offsets.topic.num.partitions"])
    return next(g for g in (f"g{i}" for i in range(1000))
                if 1 + partition_for(g, count) % 2 == leader)


def test_a_cluster_answers_each_listener_its_own_endpoints() -> None:
    ctx = _cluster_context()
    assert [(r["node_id"], r["port"]) for r in cluster.broker_rows(_on(ctx, 0))] == [
        (1, 9001), (2, 9002)]
    assert [(r["node_id"], r["port"]) for r in cluster.broker_rows(_on(ctx, 1))] == [(1, 9101)]
    on_internal = cluster.partition_rows(_on(ctx, 0), "t", 9)
    assert [(r["error_code"], r["leader_id"]) for r in on_internal] == [(0, 1), (0, 2)]
    on_external = cluster.partition_rows(_on(ctx, 1), "t", 9)
    assert [(r["error_code"], r["leader_id"]) for r in on_external] == [
        (0, 1), (int(ErrorCode.LISTENER_NOT_FOUND), -1)]
    assert on_external[1]["replica_nodes"] == [1, 2] and on_external[1]["leader_epoch"] == 1
    old = cluster.partition_rows(_on(ctx, 1), "t", 5)
    assert old[1]["error_code"] == int(ErrorCode.LEADER_NOT_AVAILABLE)

    g1, g2 = _group_led_by(ctx, 1), _group_led_by(ctx, 2)
    assert cluster.group_coordinator(_on(ctx, 1), g1) == (0, 1, "h1", 9101)
    assert cluster.group_coordinator(_on(ctx, 0), g2) == (0, 2, "h2", 9002)
    assert cluster.group_coordinator(_on(ctx, 1), g2)[0] == int(
        ErrorCode.COORDINATOR_NOT_AVAILABLE)


def test_metadata_v0_lists_only_replicas_reachable_on_the_listener() -> None:
    """Kafka's ZkMetadataCache.getPartitionMetadata with errorUnavailableEndpoints (v0
    alone): replicas and ISR keep only live brokers with an endpoint on the request's
    listener; a led partition that lost some is REPLICA_NOT_AVAILABLE, one whose leader
    has no endpoint there LEADER_NOT_AVAILABLE with the filtered lists."""
    ctx = _cluster_context()  # broker 2 has no EXTERNAL endpoint
    rows = cluster.partition_rows(_on(ctx, 1), "t", 0)
    assert [(r["error_code"], r["leader_id"], r["replica_nodes"], r["isr_nodes"])
            for r in rows] == [
        (int(ErrorCode.REPLICA_NOT_AVAILABLE), 1, [1], [1]),
        (int(ErrorCode.LEADER_NOT_AVAILABLE), -1, [1], [1])]
    # v1 lists every replica; on INTERNAL every replica is reachable, v0 too
    assert [r["replica_nodes"] for r in cluster.partition_rows(_on(ctx, 1), "t", 1)] == [
        [1, 2], [1, 2]]
    assert [(r["error_code"], r["replica_nodes"])
            for r in cluster.partition_rows(_on(ctx, 0), "t", 0)] == [(0, [1, 2]), (0, [1, 2])]
    # a broker gone from the cache (dead) is left out of v0's lists as well
    ctx.cluster.brokers.pop(2)  # type: ignore[union-attr]
    [led, _] = cluster.partition_rows(_on(ctx, 0), "t", 0)
    assert (led["error_code"], led["replica_nodes"], led["isr_nodes"]) == (
        int(ErrorCode.REPLICA_NOT_AVAILABLE), [1], [1])


def _answer(ctx: HandlerContext, version: int, req: Any) -> dict[str, Any]:
    gen = groups.handle_find_coordinator(ctx, SimpleNamespace(api_version=version), req)
    try:
        next(gen)
    except StopIteration as stop:
        return dict(stop.value.data)
    raise AssertionError("a single node's FindCoordinator waits for nothing")


def test_a_single_node_answers_the_listener_asked_and_none_unadvertised() -> None:
    ctx = HandlerContext(TOPOLOGY, Config(), 1, "a", 1, "c", 0, {"t": TopicEntry(1, {})},
                         clock=ManualClock(), listener_names=NAMES,
                         advertised={"INTERNAL": ("a", 1)})
    assert [(r["host"], r["port"]) for r in cluster.broker_rows(_on(ctx, 0))] == [("a", 1)]
    assert cluster.partition_rows(ctx, "t", 9)[0]["leader_id"] == 1
    found = _answer(ctx, 4, SimpleNamespace(key_type=0, coordinator_keys=["g"]))
    assert [(c["error_code"], c["port"]) for c in found["coordinators"]] == [(0, 1)]

    # EXTERNAL is bound but not advertised: a client there is told of no broker (Kafka)
    assert cluster.broker_rows(_on(ctx, 1)) == []
    [row] = cluster.partition_rows(ctx, "t", 9)
    assert (row["error_code"], row["leader_id"]) == (int(ErrorCode.LISTENER_NOT_FOUND), -1)
    [row] = cluster.partition_rows(ctx, "t", 0)  # v0: no endpoint there, so not listed
    assert (row["error_code"], row["replica_nodes"], row["isr_nodes"]) == (
        int(ErrorCode.LEADER_NOT_AVAILABLE), [], [])
    found = _answer(ctx, 2, SimpleNamespace(key_type=0, key="g"))
    assert (found["error_code"], found["node_id"], found["port"]) == (
        int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, -1)
    # a context made without listener names (tests, tools): the one advertised endpoint
    bare = HandlerContext(TOPOLOGY, Config(), 1, "b", 2, "c", 0, clock=ManualClock())
    assert [(r["host"], r["port"]) for r in cluster.broker_rows(_on(bare, 1))] == [("b", 2)]


def test_other_brokers_are_found_by_the_listeners_name_not_its_place() -> None:
    """Broker 3 lists EXTERNAL first: a client on this node's EXTERNAL (index 1 here) is
    told broker 3's EXTERNAL port, not the endpoint in broker 3's second place."""
    cache = MetadataCache()
    cache.apply(UpdateMetadata(1, 1, 11, True, [_broker(1, *NAMES),
                                                _broker(3, "EXTERNAL", "INTERNAL")],
                               [_part("t", 0, 3)], {}))
    ctx = HandlerContext(TOPOLOGY, Config(), 1, "h1", 9001, "c", 0, {"t": TopicEntry(1, {})},
                         clock=ManualClock(), cluster=cache, listener_names=NAMES)
    assert [(r["node_id"], r["port"]) for r in cluster.broker_rows(_on(ctx, 1))] == [
        (1, 9101), (3, 9103)]
    assert [(r["node_id"], r["port"]) for r in cluster.broker_rows(_on(ctx, 0))] == [
        (1, 9001), (3, 9003)]


def test_describe_topic_partitions_tells_a_missing_leader_by_leader_minus_one_alone() -> None:
    """Kafka's DescribeTopicPartitions sets no partition error: a leader without the
    request's listener is leader -1 with error 0 (Metadata v6+ says LISTENER_NOT_FOUND)."""
    ctx = _on(_cluster_context(), 1)
    req = SimpleNamespace(topics=[SimpleNamespace(name="t")], response_partition_limit=10,
                          cursor=None)
    gen = admin.handle_describe_topic_partitions(ctx, SimpleNamespace(api_version=0), req)
    try:
        next(gen)
    except StopIteration as stop:
        [topic] = stop.value.data["topics"]
    else:
        raise AssertionError("DescribeTopicPartitions waits for nothing")
    assert [(p["error_code"], p["leader_id"], p["replica_nodes"])
            for p in topic["partitions"]] == [(0, 1, [1, 2]), (0, -1, [1, 2])]
