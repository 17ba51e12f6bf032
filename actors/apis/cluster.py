"""What the APIs answer from the cluster's metadata: brokers, partitions, coordinators.

In cluster mode every handler keeps a MetadataCache (``ctx.cluster``) fed by
the controller's UpdateMetadata requests. The functions here turn it into
the parts of Metadata, DescribeCluster and FindCoordinator responses; on a
single node (``ctx.cluster`` None) they describe the node itself, as before.
DescribeCluster itself is here too.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from actors.apis.authorize import cluster_authorized_operations
from actors.apis.base import TOPIC_CHANGE_WAIT_CAP_MS, ApiGen, Call, HandlerContext, Respond
from actors.core.cluster_model import NO_LEADER
from actors.core.metadata_cache import NO_TIMEOUT_WAIT_MS
from actors.core.offsets_codec import OFFSETS_TOPIC, partition_for
from actors.group_coordinator import OFFSETS_TOPIC_CONFIGS
from wire.broker_messages import CreateTopicRow, CreateTopics, CreateTopicsDone
from wire.cluster_messages import AwaitTopics, TopicsAwaited
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)
METADATA_WAIT_MS = 5000  # how long a Metadata request waits for a topic it auto-created
# __consumer_offsets as the group coordinators make it (the single node's coordinator
# creates it itself at start; in a cluster the first FindCoordinator does, as in Kafka):
# one definition, compacted by the LogCleaner.

Waiting = Generator[list[Call], list[Any], list[str]]


def broker_rows(ctx: HandlerContext) -> list[dict[str, Any]]:
    """Every live broker with an endpoint on the request's listener (Metadata's
    ``brokers``, as Kafka's getAliveBrokerNodes(listenerName)); this node alone before
    the first update."""
    cache = ctx.cluster
    if cache is not None and cache.brokers:
        listener = ctx.listener_name()
        rows = []
        for broker_id in cache.broker_ids():
            found = cache.endpoint(broker_id, listener)
            if found is None:  # not on this listener: a client here cannot reach it
                continue
            rows.append({"node_id": broker_id, "host": found[0], "port": found[1],
                         "rack": cache.brokers[broker_id].rack})
        return rows
    own = ctx.own_endpoint()
    if own is None:
        return []
    rack = str(ctx.config["broker.rack"]) or None
    return [{"node_id": ctx.broker_id, "host": own[0], "port": own[1], "rack": rack}]


def controller_id(ctx: HandlerContext) -> int:
    return ctx.broker_id if ctx.cluster is None else ctx.cluster.controller_id


def partition_rows(ctx: HandlerContext, name: str, version: int = 6) -> list[dict[str, Any]]:
    """Metadata's partitions of ``name``: leader, epoch, replicas, ISR, offline replicas.

    A live leader without an endpoint on the request's listener is no leader to this
    client: LISTENER_NOT_FOUND from Metadata v6 (LEADER_NOT_AVAILABLE before), as Kafka's
    getPartitionMetadata answers it. In v0 (Kafka's errorUnavailableEndpoints) the
    replicas and ISR hold only live brokers with an endpoint on the listener, and a
    partition with a leader that lost some that way is REPLICA_NOT_AVAILABLE."""
    cache = ctx.cluster
    if cache is None:
        count = ctx.partition_count(name) or 0
        if ctx.own_endpoint() is None:
            me = [] if version == 0 else [ctx.broker_id]  # v0: no endpoint, not listed
            return [_no_listener(p, 0, list(me), list(me), [], version) for p in range(count)]
        return [{"error_code": 0, "partition_index": p, "leader_id": ctx.broker_id,
                 "leader_epoch": 0, "replica_nodes": [ctx.broker_id],
                 "isr_nodes": [ctx.broker_id], "offline_replicas": []}
                for p in range(count)]
    listener = ctx.listener_name()

    def reachable(broker: int) -> bool:
        return broker in cache.brokers and (
            listener is None or cache.endpoint(broker, listener) is not None)

    rows = []
    for index, p in sorted(cache.partitions.get(name, {}).items()):
        led = p.leader != NO_LEADER and p.leader in cache.brokers
        replicas, isr = list(p.replicas), list(p.isr)
        if version == 0:
            replicas = [r for r in replicas if reachable(r)]
            isr = [r for r in isr if reachable(r)]
        if led and listener is not None and cache.endpoint(p.leader, listener) is None:
            rows.append(_no_listener(index, p.leader_epoch, replicas, isr,
                                     list(p.offline_replicas), version))
            continue
        error = NONE if led else int(ErrorCode.LEADER_NOT_AVAILABLE)
        if led and (len(replicas) < len(p.replicas) or len(isr) < len(p.isr)):
            error = int(ErrorCode.REPLICA_NOT_AVAILABLE)  # v0 alone filters
        rows.append({
            "error_code": error,
            "partition_index": index,
            "leader_id": p.leader if led else NO_LEADER,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": replicas,
            "isr_nodes": isr,
            "offline_replicas": list(p.offline_replicas),
        })
    return rows


def _no_listener(index: int, epoch: int, replicas: list[int], isr: list[int],
                 offline: list[int], version: int) -> dict[str, Any]:
    error = ErrorCode.LISTENER_NOT_FOUND if version >= 6 else ErrorCode.LEADER_NOT_AVAILABLE
    return {"error_code": int(error), "partition_index": index, "leader_id": NO_LEADER,
            "leader_epoch": epoch, "replica_nodes": replicas, "isr_nodes": isr,
            "offline_replicas": offline}


def await_topics(ctx: HandlerContext, names: list[str], present: bool,
                 timeout_ms: int, at_least: dict[str, int] | None = None) -> Waiting:
    """Wait (cluster mode) until the metadata of every handler of this node, in every
    process, shows ``names`` with leaders (``present``; with ``at_least[name]`` partitions
    at least, when named) or without them; returns those still not so after
    ``timeout_ms``.

    ``timeout_ms`` <= 0 (confluent-kafka's admin sends 0 by default) waits all the same,
    bounded by the ReplicaManager's give-ups (NO_TIMEOUT_WAIT_MS), and returns [] whatever it
    found: Kafka does not wait then, but the spread to this node's own processes takes
    milliseconds, and an answer before it would let the client's next request, on another
    connection, miss the topic it was told exists (or still find the one deleted)."""
    if ctx.cluster is None or not names:
        return []
    timeout_ms = min(timeout_ms, TOPIC_CHANGE_WAIT_CAP_MS)  # a huge one pins nothing for days
    done: TopicsAwaited
    [done] = yield [Call(ctx.topology.replica_manager,
                         lambda rid: AwaitTopics(rid, list(names), present, timeout_ms,
                                                 dict(at_least or {})),
                         max_wait_ms=timeout_ms if timeout_ms > 0 else NO_TIMEOUT_WAIT_MS)]
    return list(done.missing) if timeout_ms > 0 else []


def ensure_offsets_topic(ctx: HandlerContext) -> Waiting:
    """Create ``__consumer_offsets`` if the cluster has none; returns [] once it has leaders.

    Its replication factor is ``offsets.topic.replication.factor``, at most the
    live brokers (Kafka's rule for the automatic creation).
    """
    cache = ctx.cluster
    assert cache is not None
    if cache.has_leaders(OFFSETS_TOPIC):
        return []
    if not cache.has_topic(OFFSETS_TOPIC):
        live = max(1, len(cache.brokers))
        rf = min(int(ctx.config["offsets.topic.replication.factor"]), live)
        row = CreateTopicRow(OFFSETS_TOPIC, int(ctx.config["offsets.topic.num.partitions"]), rf,
                             dict(OFFSETS_TOPIC_CONFIGS), internal=True)
        created: CreateTopicsDone
        [created] = yield [Call(ctx.topology.controller,
                                lambda rid: CreateTopics(rid, False, [row]))]
        code = created.rows[0].error_code if created.rows else NONE
        if code not in (NONE, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
            return [OFFSETS_TOPIC]
    return (yield from await_topics(ctx, [OFFSETS_TOPIC], True, METADATA_WAIT_MS))


def group_coordinator(ctx: HandlerContext, group_id: str) -> tuple[int, int, str, int]:
    """(error, node id, host, port) of the group's coordinator: the leader of its
    ``__consumer_offsets`` partition (Kafka's partitionFor), on the request's listener."""
    cache = ctx.cluster
    assert cache is not None
    partition = partition_for(group_id, ctx.internal_partitions(OFFSETS_TOPIC))
    leader = cache.leader(OFFSETS_TOPIC, partition)
    found = cache.endpoint(leader, ctx.listener_name()) if leader != NO_LEADER else None
    if found is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1
    return NONE, leader, found[0], found[1]


def handle_describe_cluster(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    endpoint_type = getattr(req, "endpoint_type", 1)
    if endpoint_type not in (None, 1):
        return Respond({"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                        "error_message": f"endpoint type {endpoint_type} is not served "
                                         f"(brokers only, 1)",
                        "cluster_id": ctx.cluster_id, "controller_id": -1, "brokers": []})
    return Respond({
        "throttle_time_ms": 0,
        "error_code": NONE,
        "error_message": None,
        "cluster_id": ctx.cluster_id,
        "controller_id": controller_id(ctx),
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                     "rack": b["rack"]} for b in broker_rows(ctx)],
        **({"authorized_operations": cluster_authorized_operations(ctx)}
           if getattr(req, "include_cluster_authorized_operations", False) else {}),
    })
    yield  # a generator like every API function
