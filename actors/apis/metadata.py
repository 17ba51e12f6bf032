"""Metadata, CreateTopics, DeleteTopics, InitProducerId (DescribeConfigs: ``configs``)."""

from __future__ import annotations

import functools
import uuid
from typing import Any

from actors.apis import cluster
from actors.apis.base import ApiGen, Call, HandlerContext, Respond, topic_change_wait_ms
from actors.apis.configs import handle_describe_configs  # re-exported: it used to live here
from actors.apis.transactions import handle_init_transactional_producer
from actors.core.topic_config import validate_topic_name
from actors.core.topic_id import decode_topic_id
from actors.security.acl import CLUSTER_NAME, Operation, ResourceType
from wire.broker_messages import (
    CreateTopicDoneRow,
    CreateTopicRow,
    CreateTopics,
    CreateTopicsDone,
    DeleteTopicDoneRow,
    DeleteTopicRow,
    DeleteTopics,
    DeleteTopicsDone,
)
from wire.errors import ErrorCode, KafkaError

__all__ = [
    "handle_create_topics",
    "handle_delete_topics",
    "handle_describe_configs",
    "handle_init_producer_id",
    "handle_metadata",
]

def _partition_rows(ctx: HandlerContext, name: str) -> list[dict[str, Any]]:
    return cluster.partition_rows(ctx, name)


@functools.lru_cache(maxsize=4096)  # a topic's id is asked on every Metadata request
def _uuid(topic_id: str) -> uuid.UUID | None:
    """A topic id as the codec writes it (None: the zero id, "no id known")."""
    return uuid.UUID(bytes=decode_topic_id(topic_id)) if topic_id else None


TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _may_create(ctx: HandlerContext, name: str) -> bool:
    """Kafka: Create on the cluster, or Create on the topic."""
    return (ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
            or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, name))


def handle_metadata(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    if req.topics is None or (header.api_version == 0 and not req.topics):
        names = sorted(ctx.topics)
    else:
        names = [t.name for t in req.topics]
    allow_auto = getattr(req, "allow_auto_topic_creation", True)
    if allow_auto is None:
        allow_auto = True
    errors: dict[str, int] = {}
    to_create: list[CreateTopicRow] = []
    if ctx.authorizer is not None:  # Kafka: every topic hides, a named one is flagged
        listed = req.topics is None or (header.api_version == 0 and not req.topics)
        allowed = {n for n in names if n is not None and ctx.allowed(
            Operation.DESCRIBE, ResourceType.TOPIC, n, log=not listed)}
        if listed:
            names = [n for n in names if n in allowed]
        else:
            for n in names:
                if n is not None and n not in allowed:
                    errors[n] = TOPIC_DENIED
    for name in names:
        if name is None or name in ctx.topics or name in errors:
            continue
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            errors[name] = int(exc.code)
            continue
        if allow_auto and ctx.config["auto.create.topics.enable"] and not name.startswith("__"):
            if not _may_create(ctx, name):
                errors[name] = TOPIC_DENIED
                continue
            to_create.append(CreateTopicRow(name, -1, -1, {}))
        else:
            errors[name] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    if to_create:
        done: CreateTopicsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: CreateTopics(rid, False, to_create))]
        made = [r.name for r in done.rows
                if r.error_code in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS))]
        yield from cluster.await_topics(ctx, made, True, cluster.METADATA_WAIT_MS)
        for row in done.rows:
            name, error = row.name, row.error_code
            if error == int(ErrorCode.TOPIC_ALREADY_EXISTS) and name not in ctx.topics:
                # Another request is creating it and this handler has not had
                # the new table yet: Kafka's retriable "being created" answer.
                errors[name] = int(ErrorCode.LEADER_NOT_AVAILABLE)
            elif error not in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
                errors[name] = error
    topics = []
    for name in names:
        if name is None:
            continue
        unknown = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        error = errors.get(name, 0 if name in ctx.topics else unknown)
        entry = ctx.topics.get(name) if error == 0 else None
        topics.append({
            "error_code": error,
            "name": name,
            # v10+: the topic's id (the zero id when not known), as Kafka answers it
            "topic_id": _uuid(entry.topic_id) if entry is not None else None,
            "is_internal": name.startswith("__"),
            "partitions": _partition_rows(ctx, name) if error == 0 else [],
        })
    return Respond({
        "throttle_time_ms": 0,
        "brokers": cluster.broker_rows(ctx),
        "cluster_id": ctx.cluster_id,
        "controller_id": cluster.controller_id(ctx),
        "topics": topics,
    })


def handle_create_topics(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    rows: list[CreateTopicRow] = []
    done_rows: dict[str, CreateTopicDoneRow] = {}
    for t in req.topics:
        if not _may_create(ctx, t.name):
            done_rows[t.name] = CreateTopicDoneRow(t.name, TOPIC_DENIED, None, -1, -1)
            continue
        if t.assignments:
            done_rows[t.name] = CreateTopicDoneRow(
                t.name, int(ErrorCode.INVALID_REQUEST),
                "manual replica assignment is not supported", -1, -1)
            continue
        configs = {c.name: c.value for c in (t.configs or [])}
        rows.append(CreateTopicRow(t.name, t.num_partitions, t.replication_factor, configs))
    if rows:
        done: CreateTopicsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: CreateTopics(rid, bool(req.validate_only), rows,
                                                      int(req.timeout_ms)),
                             max_wait_ms=topic_change_wait_ms(req.timeout_ms))]
        for row in done.rows:
            done_rows[row.name] = row
        made = [r.name for r in done.rows if r.error_code == 0]
        if made and not req.validate_only:
            late = yield from cluster.await_topics(ctx, made, True, int(req.timeout_ms))
            for name in late:  # Kafka's answer when the leaders are not elected in time
                done_rows[name] = done_rows[name]._replace(
                    error_code=int(ErrorCode.REQUEST_TIMED_OUT),
                    error_message=f"topic {name!r} was created but its partitions have no "
                                  f"leader after {topic_change_wait_ms(req.timeout_ms)} ms")
    out = []
    for t in req.topics:
        r = done_rows[t.name]
        out.append({"name": r.name, "error_code": r.error_code, "error_message": r.error_message,
                    "num_partitions": r.num_partitions,
                    "replication_factor": r.replication_factor, "configs": None})
    return Respond({"throttle_time_ms": 0, "topics": out})


def handle_delete_topics(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    names = list(req.topic_names or [])
    rows_out: dict[str, DeleteTopicDoneRow] = {
        n: DeleteTopicDoneRow(n, TOPIC_DENIED, None) for n in names
        if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, n)}
    names_in = names
    names = [n for n in names_in if n not in rows_out]
    if names:
        done: DeleteTopicsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: DeleteTopics(rid, [DeleteTopicRow(n) for n in names],
                                                      int(req.timeout_ms)),
                             max_wait_ms=topic_change_wait_ms(req.timeout_ms))]
        rows_out.update({r.name: r for r in done.rows})
        gone = [r.name for r in done.rows if r.error_code == 0]
        # Kafka's DelayedDeleteTopics: a topic still in the metadata when timeout_ms is up
        # is answered REQUEST_TIMED_OUT (its deletion goes on). Here "gone" is gone from
        # the metadata of every handler of this node, in every process, as a creation's
        # wait has it shown there.
        late = yield from cluster.await_topics(ctx, gone, False, int(req.timeout_ms))
        for name in late:
            rows_out[name] = rows_out[name]._replace(
                error_code=int(ErrorCode.REQUEST_TIMED_OUT),
                error_message=f"topic {name!r} is being deleted but is not gone from broker "
                              f"{ctx.broker_id}'s metadata after "
                              f"{topic_change_wait_ms(req.timeout_ms)} ms")
    return Respond({
        "throttle_time_ms": 0,
        "responses": [
            {"name": n, "error_code": rows_out[n].error_code,
             "error_message": rows_out[n].error_message}
            for n in names_in
        ],
    })


def handle_init_producer_id(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    if req.transactional_id is not None:
        return (yield from handle_init_transactional_producer(ctx, header, req))
    producer_id = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if producer_id is not None and producer_id >= 0:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        new_epoch = (epoch or 0) + 1
        if new_epoch > 32767:
            producer_id, new_epoch = ctx.next_producer_id(), 0
        return Respond({"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id,
                        "producer_epoch": new_epoch})
    return Respond({"throttle_time_ms": 0, "error_code": 0,
                    "producer_id": ctx.next_producer_id(), "producer_epoch": 0})
