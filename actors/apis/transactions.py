"""The transaction APIs: FindCoordinator key type 1, InitProducerId with a transactional
id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions.

Each request goes to the TransactionCoordinator owning the transactional id's
``__transaction_state`` partition (actors/transaction_coordinator.py);
TxnOffsetCommit goes to the group's GroupCoordinator. A single node
coordinates every transactional id; in a cluster the leader of the id's
partition does, and FindCoordinator names it (creating the topic first, as
Kafka does on the first lookup).
"""

from __future__ import annotations

from typing import Any

from actors.apis import cluster
from actors.apis.base import ApiGen, Call, HandlerContext, Respond
from actors.core.cluster_model import NO_LEADER
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.offsets_codec import partition_for as offsets_partition_for
from actors.core.topic_config import INTERNAL_TOPICS
from actors.core.transaction_log import STATUS_BY_NAME, TRANSACTION_STATE_TOPIC, partition_for
from actors.security.acl import Operation, ResourceType
from actors.transaction_coordinator import (
    TRANSACTION_STATE_CONFIGS,
    all_txn_coordinators,
    txn_coordinator_for,
)
from wire.broker_messages import CreateTopicRow, CreateTopics, CreateTopicsDone
from wire.errors import ErrorCode
from wire.group_messages import OffsetCommitDone, OffsetCommitRow
from wire.transaction_messages import (
    AddPartitionsRefused,
    AddPartitionsToTxn,
    DescribeTxns,
    DescribeTxnsDone,
    EndTxn,
    InitTxnProducer,
    InitTxnProducerDone,
    ListTxns,
    ListTxnsDone,
    TxnDone,
    TxnOffsetCommit,
    TxnTopicPartition,
)

NONE = int(ErrorCode.NONE)


def _coordinator(ctx: HandlerContext, transactional_id: str) -> Any:
    return txn_coordinator_for(ctx.topology, ctx.internal_partitions(TRANSACTION_STATE_TOPIC),
                               transactional_id)


# --------------------------------------------------------------- FindCoordinator


def ensure_transaction_topic(ctx: HandlerContext) -> cluster.Waiting:
    """Cluster mode: create ``__transaction_state`` if missing; [] once it has leaders.

    Replication factor ``transaction.state.log.replication.factor``, at most the
    live brokers (as ``__consumer_offsets``).
    """
    cache = ctx.cluster
    assert cache is not None
    if cache.has_leaders(TRANSACTION_STATE_TOPIC):
        return []
    if not cache.has_topic(TRANSACTION_STATE_TOPIC):
        live = max(1, len(cache.brokers))
        rf = min(int(ctx.config["transaction.state.log.replication.factor"]), live)
        configs: dict[str, str | None] = dict(TRANSACTION_STATE_CONFIGS)
        configs["min.insync.replicas"] = str(min(
            int(ctx.config["transaction.state.log.min.isr"]), rf))
        row = CreateTopicRow(TRANSACTION_STATE_TOPIC,
                             int(ctx.config["transaction.state.log.num.partitions"]), rf,
                             configs, internal=True)
        created: CreateTopicsDone
        [created] = yield [Call(ctx.topology.controller,
                                lambda rid: CreateTopics(rid, False, [row]))]
        code = created.rows[0].error_code if created.rows else NONE
        if code not in (NONE, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
            return [TRANSACTION_STATE_TOPIC]
    return (yield from cluster.await_topics(ctx, [TRANSACTION_STATE_TOPIC], True,
                                            cluster.METADATA_WAIT_MS))


def transaction_coordinator(ctx: HandlerContext, transactional_id: str
                            ) -> tuple[int, int, str, int]:
    """(error, node id, host, port) of the transactional id's coordinator, on the
    request's listener."""
    cache = ctx.cluster
    if cache is None:
        own = ctx.own_endpoint()
        if own is None:
            return int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1
        return NONE, ctx.broker_id, own[0], own[1]
    p = partition_for(transactional_id, ctx.internal_partitions(TRANSACTION_STATE_TOPIC))
    leader = cache.leader(TRANSACTION_STATE_TOPIC, p)
    found = cache.endpoint(leader, ctx.listener_name()) if leader != NO_LEADER else None
    if found is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1
    return NONE, leader, found[0], found[1]


# ---------------------------------------------------------------- InitProducerId


def handle_init_transactional_producer(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    done: InitTxnProducerDone
    producer_id = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    producer_id = -1 if producer_id is None else producer_id
    epoch = -1 if epoch is None else epoch
    [done] = yield [Call(_coordinator(ctx, req.transactional_id), lambda rid: InitTxnProducer(
        rid, req.transactional_id, req.transaction_timeout_ms, producer_id, epoch))]
    error = done.error_code
    if error == int(ErrorCode.PRODUCER_FENCED) and header.api_version < 4:
        error = int(ErrorCode.INVALID_PRODUCER_EPOCH)  # PRODUCER_FENCED is v4+ (KIP-588)
    return Respond({"throttle_time_ms": 0, "error_code": error,
                    "producer_id": done.producer_id, "producer_epoch": done.producer_epoch})


def _fenced(code: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED is answered from ``fenced_since``; older versions get
    INVALID_PRODUCER_EPOCH (KIP-588)."""
    if code == int(ErrorCode.PRODUCER_FENCED) and version < fenced_since:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return code


# ----------------------------------------------------------- AddPartitionsToTxn


def handle_add_partitions_to_txn(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    txn_id = req.v3_and_below_transactional_id
    wanted: list[tuple[str, int]] = []
    unknown: set[tuple[str, int]] = set()
    denied: dict[tuple[str, int], int] = {}  # ACLs: Write on the id, then on each topic
    txn_denied = not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)
    for t in req.v3_and_below_topics:
        count = ctx.partition_count(t.name)
        # Kafka authorizes no internal topic here (AddOffsetsToTxn adds __consumer_offsets)
        topic_denied = not txn_denied and (
            t.name in INTERNAL_TOPICS
            or not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, t.name))
        for p in t.partitions:
            wanted.append((t.name, p))
            if txn_denied:
                denied[(t.name, p)] = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif topic_denied:
                denied[(t.name, p)] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif count is None or not 0 <= p < count:
                unknown.add((t.name, p))
    if txn_denied:  # Kafka: every partition says so
        codes = denied
    elif denied or unknown:
        # Kafka: nothing is added; the denied and the unknown partitions say why, the
        # others were not tried
        codes = {tp: denied.get(tp, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) if tp in unknown
                                else int(ErrorCode.OPERATION_NOT_ATTEMPTED)) for tp in wanted}
    else:
        done: TxnDone | AddPartitionsRefused
        [done] = yield [Call(_coordinator(ctx, txn_id), lambda rid: AddPartitionsToTxn(
            rid, txn_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
            [TxnTopicPartition(t, p) for t, p in wanted]))]
        if isinstance(done, AddPartitionsRefused):
            # partitions the coordinator's metadata lacks yet: as the handler's own check
            refused = {(tp.topic, tp.partition) for tp in done.partitions}
            codes = {tp: done.error_code if tp in refused
                     else int(ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
        else:
            codes = dict.fromkeys(wanted, _fenced(done.error_code, header.api_version, 2))
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": p,
                                               "partition_error_code": code})
    return Respond({"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": topic, "results_by_partition": rows} for topic, rows in by_topic.items()]})


def handle_add_offsets_to_txn(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    partition = offsets_partition_for(req.group_id, ctx.internal_partitions(OFFSETS_TOPIC))
    done: TxnDone
    [done] = yield [Call(_coordinator(ctx, req.transactional_id), lambda rid: AddPartitionsToTxn(
        rid, req.transactional_id, req.producer_id, req.producer_epoch,
        [TxnTopicPartition(OFFSETS_TOPIC, partition)]))]
    return Respond({"throttle_time_ms": 0,
                    "error_code": _fenced(done.error_code, header.api_version, 2)})


# ------------------------------------------------------------------------ EndTxn


def handle_end_txn(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    done: TxnDone
    [done] = yield [Call(_coordinator(ctx, req.transactional_id), lambda rid: EndTxn(
        rid, req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed)))]
    return Respond({"throttle_time_ms": 0,
                    "error_code": _fenced(done.error_code, header.api_version, 2)})


# --------------------------------------------------------------- TxnOffsetCommit


def handle_txn_offset_commit(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    rows = [OffsetCommitRow(t.name, p.partition_index, p.committed_offset,
                            getattr(p, "committed_leader_epoch", -1) if version >= 2 else -1,
                            p.committed_metadata)
            for t in req.topics for p in t.partitions]
    generation = req.generation_id if version >= 3 else -1
    member_id = (req.member_id or "") if version >= 3 else ""
    instance = req.group_instance_id if version >= 3 else None
    done: OffsetCommitDone
    [done] = yield [Call(ctx.topology.coordinator_for(req.group_id), lambda rid: TxnOffsetCommit(
        rid, req.transactional_id, req.group_id, req.producer_id, req.producer_epoch,
        generation, member_id, instance, rows))]
    by_topic: dict[str, list[dict[str, int]]] = {}
    for r in done.rows:
        by_topic.setdefault(r.topic, []).append({
            "partition_index": r.partition,
            "error_code": _fenced(r.error_code, version, 2)})
    return Respond({"throttle_time_ms": 0, "topics": [
        {"name": topic, "partitions": parts} for topic, parts in by_topic.items()]})


# ----------------------------------------------------- Describe/ListTransactions


def _describe(ids: list[str]) -> Any:
    return lambda rid: DescribeTxns(rid, ids)


def handle_describe_transactions(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    by_coordinator: dict[Any, list[str]] = {}
    for txn_id in req.transactional_ids:
        by_coordinator.setdefault(_coordinator(ctx, txn_id), []).append(txn_id)
    described: dict[str, Any] = {}
    if by_coordinator:
        replies: list[DescribeTxnsDone] = yield [
            Call(address, _describe(ids)) for address, ids in by_coordinator.items()]
        for reply in replies:
            for row in reply.rows:
                described[row.transactional_id] = row
    states = []
    for txn_id in req.transactional_ids:
        row = described[txn_id]
        by_topic: dict[str, list[int]] = {}
        for tp in row.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        states.append({
            "error_code": row.error_code, "transactional_id": txn_id,
            "transaction_state": row.state, "transaction_timeout_ms": row.timeout_ms,
            "transaction_start_time_ms": row.start_ms, "producer_id": row.producer_id,
            "producer_epoch": row.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
    return Respond({"throttle_time_ms": 0, "transaction_states": states})


def handle_list_transactions(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    filters = list(req.state_filters or [])
    unknown = [s for s in filters if s not in STATUS_BY_NAME]
    states = [s for s in filters if s in STATUS_BY_NAME]
    producer_ids = list(req.producer_id_filters or [])
    duration_ms = int(req.duration_filter) if header.api_version >= 1 else -1
    replies: list[ListTxnsDone] = yield [
        Call(address, lambda rid: ListTxns(rid, states, producer_ids, duration_ms))
        for address in all_txn_coordinators(ctx.topology)]
    # any of this broker's coordinators still loading: the whole list is refused, as the
    # others' rows alone would miss its transactions
    error = next((r.error_code for r in replies if r.error_code != NONE), NONE)
    if error != NONE:
        return Respond({"throttle_time_ms": 0, "error_code": error,
                        "unknown_state_filters": [], "transaction_states": []})
    rows = [r for reply in replies for r in reply.rows]
    if filters and not states:
        rows = []  # only unknown states asked for: none match
    return Respond({"throttle_time_ms": 0, "error_code": NONE, "unknown_state_filters": unknown,
                    "transaction_states": [
                        {"transactional_id": r.transactional_id, "producer_id": r.producer_id,
                         "transaction_state": r.state} for r in rows]})
