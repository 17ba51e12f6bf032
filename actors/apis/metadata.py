"""Metadata, CreateTopics, DeleteTopics, InitProducerId (DescribeConfigs: ``configs``)."""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from typing import Any

from actors.apis import cluster
from actors.apis.authorize import authorized_operations, cluster_authorized_operations
from actors.apis.base import ApiGen, Call, HandlerContext, Respond, topic_change_wait_ms
from actors.apis.configs import handle_describe_configs  # re-exported: it used to live here
from actors.apis.transactions import handle_init_transactional_producer
from actors.core.topic_config import INTERNAL_TOPICS, validate_topic_name
from actors.core.topic_id import decode_topic_id, encode_topic_id
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
    ReplicaAssignmentRow,
)
from wire.errors import ErrorCode, KafkaError

__all__ = [
    "handle_create_topics",
    "handle_delete_topics",
    "handle_describe_configs",
    "handle_init_producer_id",
    "handle_metadata",
]

def _partition_rows(ctx: HandlerContext, name: str, version: int = 6) -> list[dict[str, Any]]:
    return cluster.partition_rows(ctx, name, version)


@functools.lru_cache(maxsize=4096)  # a topic's id is asked on every Metadata request
def _uuid(topic_id: str) -> uuid.UUID | None:
    """A topic id as the codec writes it (None: the zero id, "no id known")."""
    return uuid.UUID(bytes=decode_topic_id(topic_id)) if topic_id else None


def _id_text(value: uuid.UUID | None) -> str:
    """A topic id as the codec decodes it (None: the zero id) as our text ("": none)."""
    return encode_topic_id(value.bytes) if value is not None and value.int else ""


TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)
TOPIC_DELETION_DISABLED = int(ErrorCode.TOPIC_DELETION_DISABLED)
# Metadata v12 (KIP-516) is the first that may name topics by id
METADATA_BY_ID_VERSION = 12
METADATA_TOPIC_ID_VERSION = 10  # the first with a topic_id field (answered from v10)
DELETE_TOPICS_BY_ID_VERSION = 6


def _may_create(ctx: HandlerContext, name: str) -> bool:
    """Kafka: Create on the cluster, or Create on the topic."""
    return (ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log=False)
            or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, name))


def _metadata_refused(req: Any) -> dict[str, Any]:
    """Kafka's answer to a Metadata request it refuses (its getErrorResponse): every topic
    asked, by its name ("" when none) and id, with INVALID_REQUEST; no brokers."""
    return {"throttle_time_ms": 0, "brokers": [], "cluster_id": None, "controller_id": -1,
            "topics": [{"error_code": INVALID_REQUEST, "name": t.name or "",
                        "topic_id": getattr(t, "topic_id", None), "is_internal": False,
                        "partitions": []} for t in req.topics or []]}


def _metadata_wanted(version: int, req: Any) -> list[tuple[str | None, str]] | None:
    """The topics a Metadata request names, each as (name, "") or (None, id text); None
    when it is refused: before v12 a topic needs its name and may not carry an id (Kafka
    answers INVALID_REQUEST), and from v12 on it needs one of the two. A topic with an id
    is asked by its id (its name, if any, is not looked at). Kafka looks up by id alone
    as soon as one topic has one, dropping the topics asked by name; kafka-python's
    describe_topics mixes the two, so here each topic is answered its own way."""
    topics = req.topics
    if version < METADATA_TOPIC_ID_VERSION or (
            not any(t.topic_id for t in topics) and all(t.name is not None for t in topics)):
        return [(t.name, "") for t in topics]  # by name: every client but a few admin calls
    wanted: list[tuple[str | None, str]] = []
    for t in topics:
        topic_id = _id_text(t.topic_id)
        if version < METADATA_BY_ID_VERSION and (t.name is None or topic_id):
            return None
        if t.name is None and not topic_id:
            return None
        wanted.append((None, topic_id) if topic_id else (t.name, ""))
    return wanted


def handle_metadata(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    version = header.api_version
    listed = req.topics is None or (version == 0 and not req.topics)
    wanted: list[tuple[str | None, str]] = []
    if not listed:
        found = _metadata_wanted(header.api_version, req)
        if found is None:
            return Respond(_metadata_refused(req))
        # a name (or id) asked twice is one topic, answered and auto-created once, as
        # Kafka's KafkaApis (its topics .toSet): CreateTopics refuses a name given twice
        wanted = list(dict.fromkeys(found))
    names = sorted(ctx.topics) if listed else [n for n, _ in wanted if n is not None]
    allow_auto = getattr(req, "allow_auto_topic_creation", True)
    if allow_auto is None:
        allow_auto = True
    errors: dict[str, int] = {}
    to_create: list[CreateTopicRow] = []
    if ctx.authorizer is not None:  # Kafka: every topic hides, a named one is flagged
        allowed = {n for n in names if ctx.allowed(
            Operation.DESCRIBE, ResourceType.TOPIC, n, log=not listed)}
        if listed:
            names = [n for n in names if n in allowed]
        else:
            for n in names:
                if n not in allowed:
                    errors[n] = TOPIC_DENIED
    for name in names:
        if name in ctx.topics or name in errors:
            continue
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            errors[name] = int(exc.code)
            continue
        # Kafka's Topic.isInternal names the internal topics; a user's "__t" is auto-created
        # like any other name. Divergence: Kafka's Metadata auto-create also makes
        # __consumer_offsets/__transaction_state (with the coordinators' partition count,
        # replication factor and configs); here their coordinators create them themselves,
        # so a Metadata request for one before that answers UNKNOWN_TOPIC_OR_PARTITION
        if allow_auto and ctx.config["auto.create.topics.enable"] and name not in INTERNAL_TOPICS:
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
    if listed:
        topics = [_metadata_topic(ctx, name, errors, version) for name in names]
    else:
        topics = [_metadata_topic(ctx, name, errors, version) if name is not None
                  else _metadata_topic_by_id(ctx, topic_id, version)
                  for name, topic_id in wanted]
    if getattr(req, "include_topic_authorized_operations", False):
        ctx.refresh_acls()
        for topic in topics:
            # Kafka: every row of a topic the principal may describe, an unknown or not
            # yet led one too; not a refused one, nor an unknown id's
            if topic["error_code"] not in (TOPIC_DENIED, UNKNOWN_TOPIC_ID) and topic.get("name"):
                topic["authorized_operations"] = authorized_operations(
                    ctx, ResourceType.TOPIC, topic["name"], refresh=False)
    answer = {
        "throttle_time_ms": 0,
        "brokers": cluster.broker_rows(ctx),
        "cluster_id": ctx.cluster_id,
        "controller_id": cluster.controller_id(ctx),
        "topics": topics,
    }
    if getattr(req, "include_cluster_authorized_operations", False):  # v8-v10
        answer["authorized_operations"] = cluster_authorized_operations(ctx)
    return Respond(answer)


def _metadata_topic(ctx: HandlerContext, name: str, errors: dict[str, int],
                    version: int) -> dict[str, Any]:
    unknown = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    error = errors.get(name, 0 if name in ctx.topics else unknown)
    entry = ctx.topics.get(name) if error == 0 else None
    return {
        "error_code": error,
        "name": name,
        # v10+: the topic's id (the zero id when not known), as Kafka answers it
        "topic_id": _uuid(entry.topic_id) if entry is not None else None,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": _partition_rows(ctx, name, version) if error == 0 else [],
    }


def _metadata_topic_by_id(ctx: HandlerContext, topic_id: str, version: int) -> dict[str, Any]:
    """A topic asked by its id (v12+). Kafka: an id no topic has is UNKNOWN_TOPIC_ID, and a
    topic the principal may not describe is TOPIC_AUTHORIZATION_FAILED; both with the id
    and a null name (an id is not secret, a name is). Never created: ids are not chosen."""
    name = ctx.topic_name_of(topic_id)
    if name is None or not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return {"error_code": UNKNOWN_TOPIC_ID if name is None else TOPIC_DENIED,
                "name": None, "topic_id": _uuid(topic_id), "is_internal": False,
                "partitions": []}
    return _metadata_topic(ctx, name, {}, version)


def handle_create_topics(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """A name given twice is refused INVALID_REQUEST, answered once, and none of its
    entries made; the others go on (as Kafka's ControllerApis.createTopics, before the
    ACLs; decided here, in the API, so that the single node and the cluster answer it
    alike: their controllers are sent unique names, as by Metadata's auto-creation)."""
    rows: list[CreateTopicRow] = []
    done_rows: dict[str, CreateTopicDoneRow] = {}
    counts = Counter(t.name for t in req.topics)
    for t in req.topics:
        if counts[t.name] > 1:
            done_rows[t.name] = CreateTopicDoneRow(t.name, INVALID_REQUEST,
                                                   "Duplicate topic name.", -1, -1)
            continue
        if not _may_create(ctx, t.name):
            done_rows[t.name] = CreateTopicDoneRow(t.name, TOPIC_DENIED, None, -1, -1)
            continue
        configs = {c.name: c.value for c in (t.configs or [])}
        # Kafka: an empty list is no assignment; checked by the controller, which knows
        # the brokers (and answers TOPIC_ALREADY_EXISTS before any assignment error)
        assignments = [ReplicaAssignmentRow(a.partition_index, list(a.broker_ids or []))
                       for a in t.assignments] if t.assignments else None
        # an internal topic's partition count and name collisions: the controller's to
        # check (topic_config), which holds the authoritative topic list
        rows.append(CreateTopicRow(t.name, t.num_partitions, t.replication_factor, configs,
                                   assignments))
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
                    error_code=int(ErrorCode.REQUEST_TIMED_OUT), topic_id="",
                    error_message=f"topic {name!r} was created but its partitions have no "
                                  f"leader after {topic_change_wait_ms(req.timeout_ms)} ms")
    out = []
    # once per name, in the request's order (Kafka appends the duplicates' answers after
    # the others; a client matches them by name)
    for t_name in counts:
        r = done_rows[t_name]
        out.append({"name": r.name, "error_code": r.error_code, "error_message": r.error_message,
                    # v7+: the created topic's id; the zero id on an error, as Kafka
                    "topic_id": _uuid(r.topic_id) if r.error_code == 0 else None,
                    "num_partitions": r.num_partitions,
                    "replication_factor": r.replication_factor, "configs": None})
    return Respond({"throttle_time_ms": 0, "topics": out})


def _deleted_row(name: str | None, topic_id: str, error: int,
                 message: str | None) -> dict[str, Any]:
    return {"name": name, "topic_id": _uuid(topic_id), "error_code": error,
            "error_message": message}


def handle_delete_topics(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    # every topic asked, as (name, id text): v6 (KIP-516) names each by its name or its id
    if header.api_version >= DELETE_TOPICS_BY_ID_VERSION:
        asked = [(t.name, _id_text(t.topic_id)) for t in req.topics or []]
    else:
        asked = [(name, "") for name in req.topic_names or []]
    if not ctx.config["delete.topic.enable"]:
        # Kafka answers this first, every topic as asked, before looking at any of them
        # (KafkaApis.handleDeleteTopicsRequest): an unknown name or id, or both given, is
        # TOPIC_DELETION_DISABLED too (v0-2 have no such code: INVALID_REQUEST). This
        # node's setting decides (in Kafka's ZooKeeper mode, the controller's); the
        # controller refuses the topics that reach it when its own setting differs.
        code = TOPIC_DELETION_DISABLED if header.api_version >= 3 else INVALID_REQUEST
        return Respond({"throttle_time_ms": 0, "responses": [
            _deleted_row(name, topic_id, code,
                         "topic deletion is disabled (delete.topic.enable=false)")
            for name, topic_id in asked]})
    if any(name is not None and topic_id for name, topic_id in asked):
        # Kafka refuses the whole request (its getErrorResponse: each topic as asked)
        text = "a topic name and a topic id can not both be given"
        return Respond({"throttle_time_ms": 0, "responses": [
            _deleted_row(name, topic_id, INVALID_REQUEST, text) for name, topic_id in asked]})
    out: list[dict[str, Any] | None] = []
    targets: dict[int, str] = {}  # position in ``asked`` -> the name the controller deletes
    for i, (name, topic_id) in enumerate(asked):
        if topic_id:
            name = ctx.topic_name_of(topic_id)
            if name is None:
                out.append(_deleted_row(None, topic_id, UNKNOWN_TOPIC_ID,
                                        f"no topic has id {topic_id}"))
                continue
            if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
                # Kafka: the id is not secret, the name is
                out.append(_deleted_row(None, topic_id, TOPIC_DENIED, None))
                continue
        elif name is None:
            out.append(_deleted_row(None, "", INVALID_REQUEST,
                                    "neither a topic name nor a topic id was given"))
            continue
        if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name):
            out.append(_deleted_row(name, topic_id, TOPIC_DENIED, None))
            continue
        out.append(None)
        targets[i] = name
    # A topic asked more than once (by name or id) is deleted once and every entry gets
    # its answer, as Kafka in ZooKeeper mode (KRaft refuses such a request instead). Its
    # id goes with it only if every entry asked by that one id: by name means any id.
    ids_asked: dict[str, set[str]] = {}
    for i, name in targets.items():
        ids_asked.setdefault(name, set()).add(asked[i][1])
    done_rows: dict[str, DeleteTopicDoneRow] = {}
    if targets:
        rows = [DeleteTopicRow(name, ids.pop() if len(ids) == 1 else "")
                for name, ids in ids_asked.items()]
        done: DeleteTopicsDone
        [done] = yield [Call(ctx.topology.controller,
                             lambda rid: DeleteTopics(rid, rows, int(req.timeout_ms)),
                             max_wait_ms=topic_change_wait_ms(req.timeout_ms))]
        done_rows.update({r.name: r for r in done.rows})
        gone = [r.name for r in done.rows if r.error_code == 0]
        # Kafka's DelayedDeleteTopics: a topic still in the metadata when timeout_ms is up
        # is answered REQUEST_TIMED_OUT (its deletion goes on). Here "gone" is gone from
        # the metadata of every handler of this node, in every process, as a creation's
        # wait has it shown there.
        late = yield from cluster.await_topics(ctx, gone, False, int(req.timeout_ms))
        for name in late:
            done_rows[name] = done_rows[name]._replace(
                error_code=int(ErrorCode.REQUEST_TIMED_OUT),
                error_message=f"topic {name!r} is being deleted but is not gone from broker "
                              f"{ctx.broker_id}'s metadata after "
                              f"{topic_change_wait_ms(req.timeout_ms)} ms")
    for i, name in targets.items():
        row = done_rows[name]
        # v6: the topic's id with its name (as Kafka answers since KIP-516), when known
        out[i] = _deleted_row(None if row.error_code == UNKNOWN_TOPIC_ID else name,
                              row.topic_id or asked[i][1], row.error_code, row.error_message)
    return Respond({"throttle_time_ms": 0, "responses": out})


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
