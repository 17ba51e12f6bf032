"""Kafka's ZooKeeper layout: znode paths and their JSON, encoded and decoded.

The formats are Kafka's own (``kafka.zk.ZkData`` of the 2.x line), so Kafka's
tools can read an actorlog cluster's ZooKeeper and the other way round. The
additions are in a broker's registration, fields Kafka brokers do not write:
``actorlog_gateway``, the address of the node's actor gateway, and
``actorlog_actors``, how many of its sharded actors the node runs (keyed by
the config keys that set them), so the other nodes address actors that exist
there. A registration without it (an older node) decodes with counts 0.
``actorlog_curve_key`` is the node's CURVE public key, written only when its
sockets between nodes use CURVE. ``actorlog_wire`` is the node's inter-node
wire fingerprint (``wire.fingerprint``): nodes of builds whose messages differ
must not run together. ``actorlog_incarnation`` is made new at each start of the
node, so a node restarted on the same gateway is told from its previous process.

One subtree is ours alone, ``/actorlog``, which Kafka's tools never write:
``/actorlog/adopted_topic_ids/<topic>`` records an id the controller gave late to a
topic that existed without one (see :func:`encode_adopted_topic_id`).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, replace
from typing import Any

from loguru import logger

from actors.core.cluster_model import (
    BrokerInfo,
    Endpoint,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
)
from actors.core.topic_id import is_topic_id
from actors.security.acl import (
    STORED_RESOURCE_TYPES,
    AclEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
ACTORLOG = "/actorlog"  # ours: no Kafka tool writes under it
ADOPTED_TOPIC_IDS = "/actorlog/adopted_topic_ids"

CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ACL_ROOTS = {PatternType.LITERAL: "/kafka-acl",
             PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
CHANGE_ROOTS = (CONFIG_CHANGES, ACL_CHANGES, ACL_EXTENDED_CHANGES)
SECURITY_PATHS = (CONFIG_USERS, *ACL_ROOTS.values(), *CHANGE_ROOTS)

PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, DELETE_TOPICS, ISR_CHANGE_NOTIFICATION,
                    CLUSTER, *SECURITY_PATHS, ADOPTED_TOPIC_IDS)
"""Created at start by every node (Kafka's top-level paths), so watches have something to watch."""

BROKER_REGISTRATION_VERSION = 5
# the keys of ``actorlog_actors`` in a broker's registration
IO_THREADS = "num.io.threads"
PARTITION_SHARDS = "num.partition.shards"
GROUP_COORDINATORS = "num.group.coordinators"
TOPIC_ASSIGNMENT_VERSION = 2
TOPIC_ID_ASSIGNMENT_VERSION = 3  # Kafka's, once it carries "topic_id"


class BadZnode(ValueError):
    """A znode whose content is not the JSON Kafka writes there."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def adopted_topic_id_path(topic: str) -> str:
    return f"{ADOPTED_TOPIC_IDS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{TOPICS}/{tp.topic}/partitions/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{partition_path(tp)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _load(path: str, data: bytes | None) -> Any:
    try:
        return json.loads(data or b"")
    except ValueError:
        raise BadZnode(f"{path}: not JSON: {(data or b'')[:80]!r}") from None


def _field(path: str, doc: Any, key: str, kind: type) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise BadZnode(f"{path}: no {key!r} in {doc!r:.120}")
    value = doc[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise BadZnode(f"{path}: {key!r} must be an integer, got {value!r:.40}")
    if kind is not int and not isinstance(value, kind):
        raise BadZnode(f"{path}: {key!r} must be {kind.__name__}, got {value!r:.40}")
    return value


# ------------------------------------------------------------------- brokers
def encode_broker(broker: BrokerInfo, timestamp_ms: int) -> bytes:
    plaintext = next((e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    doc: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol
                                           for e in broker.endpoints},
        "endpoints": [e.connection_string for e in broker.endpoints],
        "jmx_port": -1,
        "host": plaintext.host if plaintext else None,
        "timestamp": str(timestamp_ms),
        "port": plaintext.port if plaintext else -1,
        "version": BROKER_REGISTRATION_VERSION,
        "actorlog_gateway": broker.gateway,
        "actorlog_actors": {IO_THREADS: broker.num_handlers, PARTITION_SHARDS: broker.num_shards,
                            GROUP_COORDINATORS: broker.num_coordinators},
    }
    if broker.rack is not None:
        doc["rack"] = broker.rack
    if broker.curve_key:
        doc["actorlog_curve_key"] = broker.curve_key
    if broker.wire:
        doc["actorlog_wire"] = broker.wire
    if broker.incarnation:
        doc["actorlog_incarnation"] = broker.incarnation
    return _dump(doc)


def _parse_endpoint(path: str, text: str, protocols: dict[str, str]) -> Endpoint:
    listener, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise BadZnode(f"{path}: bad endpoint {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return Endpoint(listener, host, int(port), protocols.get(listener, listener))


def decode_broker(broker_id: int, data: bytes | None, epoch: int = -1) -> BrokerInfo:
    path = broker_path(broker_id)
    doc = _load(path, data)
    listed = _field(path, doc, "endpoints", list)
    protocols = doc.get("listener_security_protocol_map") or {}
    endpoints = tuple(_parse_endpoint(path, str(e), protocols) for e in listed)
    rack = doc.get("rack")
    actors = doc.get("actorlog_actors")
    counts = actors if isinstance(actors, dict) else {}

    def count(key: str) -> int:
        value = counts.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    return BrokerInfo(broker_id, endpoints, str(doc.get("actorlog_gateway") or ""),
                      None if rack is None else str(rack), epoch, count(IO_THREADS),
                      count(PARTITION_SHARDS), count(GROUP_COORDINATORS),
                      str(doc.get("actorlog_curve_key") or ""),
                      str(doc.get("actorlog_wire") or ""),
                      str(doc.get("actorlog_incarnation") or ""))


# ---------------------------------------------------------------- controller
def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes | None) -> int:
    return int(_field(CONTROLLER, _load(CONTROLLER, data), "brokerid", int))


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").decode("ascii", "replace").strip()
    if not text.lstrip("-").isdigit():
        raise BadZnode(f"{CONTROLLER_EPOCH}: not an integer: {text[:40]!r}")
    return int(text)


# -------------------------------------------------------------------- topics
def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    doc: dict[str, object] = {
        "version": TOPIC_ASSIGNMENT_VERSION,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding.items()) if r},
        "removing_replicas": {str(p): list(r)
                              for p, r in sorted(assignment.removing.items()) if r},
    }
    if assignment.topic_id:  # as Kafka (2.8+) keeps it; absent for an older version's topic
        doc["version"] = TOPIC_ID_ASSIGNMENT_VERSION
        doc["topic_id"] = assignment.topic_id
        if assignment.topic_id_adopted:  # ours (Kafka ignores a field it does not know)
            doc["topic_id_adopted"] = True
    return _dump(doc)


def decode_topic_assignment(topic: str, data: bytes | None, version: int = -1) -> TopicAssignment:
    path = topic_path(topic)
    doc = _load(path, data)
    out = _replica_lists(path, "partition", _field(path, doc, "partitions", dict))
    reassigning: list[dict[int, tuple[int, ...]]] = []
    for name in ("adding_replicas", "removing_replicas"):
        entries = doc.get(name) or {}
        if not isinstance(entries, dict):
            raise BadZnode(f"{path}: bad {name} {entries!r:.60}")
        reassigning.append({p: r for p, r in _replica_lists(path, name, entries).items() if r})
    # A partition whose adding or removing replicas are not all among its replicas (a znode
    # written by hand, or by a tool that got it wrong): its reassignment fields are dropped,
    # said in the log; its replicas stand (a BadZnode would stop the controller's load)
    for p in sorted({*reassigning[0], *reassigning[1]}):
        named = {*reassigning[0].get(p, ()), *reassigning[1].get(p, ())}
        if p not in out or named - set(out[p]):
            logger.warning("{}: the adding/removing replicas of partition {} ({}, {}) are not "
                           "all among its replicas {}: ignored", path, p,
                           list(reassigning[0].get(p, ())), list(reassigning[1].get(p, ())),
                           list(out.get(p, ())))
            reassigning[0].pop(p, None)
            reassigning[1].pop(p, None)
    topic_id = doc.get("topic_id", "")
    if topic_id != "" and not is_topic_id(topic_id):
        raise BadZnode(f"{path}: bad topic_id {topic_id!r:.60}")
    adopted = doc.get("topic_id_adopted", False)
    if not isinstance(adopted, bool) or (adopted and not topic_id):
        raise BadZnode(f"{path}: bad topic_id_adopted {adopted!r:.60}")
    return TopicAssignment(out, version, topic_id, adopted, reassigning[0], reassigning[1])


def _replica_lists(path: str, name: str, entries: dict[object, object]
                   ) -> dict[int, tuple[int, ...]]:
    out: dict[int, tuple[int, ...]] = {}
    for key, replicas in entries.items():
        if not str(key).isdigit() or not isinstance(replicas, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise BadZnode(f"{path}: bad {name} entry {key!r}: {replicas!r:.60}")
        out[int(str(key))] = tuple(replicas)
    return out


ADOPTED_TOPIC_ID_VERSION = 1


@dataclass(frozen=True, slots=True)
class AdoptedTopicId:
    """``/actorlog/adopted_topic_ids/<topic>``: the id the controller gave late to a topic
    that existed without one, and when (wall ms).

    The topic znode's own mark (``topic_id_adopted``) is not enough: Kafka 2.8+'s tools
    rewrite that znode (reassignment, more partitions) keeping ``topic_id`` and dropping
    fields they do not know. A topic znode whose id equals the one recorded here is
    adopted whatever its own fields say, so a replica whose directory still holds the
    topic's earlier id rewrites it instead of deleting acknowledged records.
    """

    topic_id: str
    adopted_ms: int


def encode_adopted_topic_id(record: AdoptedTopicId) -> bytes:
    if not is_topic_id(record.topic_id):
        raise ValueError(f"not a topic id: {record.topic_id!r:.60}")
    return _dump({"version": ADOPTED_TOPIC_ID_VERSION, "topic_id": record.topic_id,
                  "adopted_ms": record.adopted_ms})


def decode_adopted_topic_id(topic: str, data: bytes | None) -> AdoptedTopicId:
    """The record, of this version or a newer one (whose fields beyond ``topic_id`` this
    version does not need: a record is only ever read for its id)."""
    path = adopted_topic_id_path(topic)
    doc = _load(path, data)
    version = _field(path, doc, "version", int)
    if version < ADOPTED_TOPIC_ID_VERSION:
        raise BadZnode(f"{path}: unknown version {version!r:.20}")
    topic_id = _field(path, doc, "topic_id", str)
    if not is_topic_id(topic_id):
        raise BadZnode(f"{path}: bad topic_id {topic_id!r:.60}")
    if version == ADOPTED_TOPIC_ID_VERSION:
        adopted_ms = _field(path, doc, "adopted_ms", int)
    else:
        adopted_ms = doc.get("adopted_ms", 0)
        if isinstance(adopted_ms, bool) or not isinstance(adopted_ms, int):
            adopted_ms = 0
    return AdoptedTopicId(topic_id, adopted_ms)


@dataclass(frozen=True, slots=True)
class UnreadableAdoption:
    """An adoption record that cannot be read (damaged, or a format this version does not
    know). Its topic counts as adopted, whatever its id: the safe direction, as a replica
    holding another id then rewrites it instead of deleting acknowledged records. The
    controller's next write of the record (or its clearing) replaces it."""

    reason: str


_unreadable_logged: set[str] = set()


def read_adopted_topic_id(topic: str, data: bytes | None
                          ) -> AdoptedTopicId | UnreadableAdoption:
    """``decode_adopted_topic_id`` that does not raise: a record it cannot read is an
    ``UnreadableAdoption`` (logged once per content), never a reason for the controller
    to fail its load or a topic change."""
    try:
        return decode_adopted_topic_id(topic, data)
    except BadZnode as exc:
        reason = str(exc)
        if reason not in _unreadable_logged:
            if len(_unreadable_logged) >= 1024:
                _unreadable_logged.clear()
            _unreadable_logged.add(reason)
            logger.bind(node="-", actor="metadata").warning(
                "{}; its topic counts as adopted until the record is rewritten", reason)
        return UnreadableAdoption(reason)


def adoption_recorded(record: AdoptedTopicId | UnreadableAdoption | None,
                      topic_id: str) -> bool:
    """Whether ``record`` is a readable record of ``topic_id`` (nothing to write)."""
    return isinstance(record, AdoptedTopicId) and record.topic_id == topic_id


def adoption_to_clear(record: AdoptedTopicId | UnreadableAdoption | None,
                      topic_id: str) -> bool:
    """Whether clearing the adoption of ``topic_id`` drops ``record``: one of that id, or
    one that cannot be read (it marked the topic adopted, and that is now over)."""
    return isinstance(record, UnreadableAdoption) or adoption_recorded(record, topic_id)


def with_adoption(assignment: TopicAssignment,
                  record: AdoptedTopicId | UnreadableAdoption | None) -> TopicAssignment:
    """``assignment`` marked adopted when its id is the one ``record`` holds (a Kafka
    tool's rewrite may have dropped the znode's own mark), or when ``record`` cannot be
    read; as it is otherwise (a record of another id is an earlier adoption's, now void:
    the topic's id changed since)."""
    if record is None or assignment.topic_id_adopted or not assignment.topic_id:
        return assignment
    if isinstance(record, AdoptedTopicId) and assignment.topic_id != record.topic_id:
        return assignment
    return replace(assignment, topic_id_adopted=True)


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": {k: str(v) for k, v in sorted(configs.items())}})


def decode_topic_config(topic: str, data: bytes | None) -> dict[str, str]:
    path = topic_config_path(topic)
    config = _field(path, _load(path, data), "config", dict)
    return {str(k): str(v) for k, v in config.items()}


# ---------------------------------------------------------- partition states
def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _dump({
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    })


def decode_partition_state(tp: TopicPartition, data: bytes | None, version: int,
                           zxid: int = -1) -> LeaderAndIsr:
    """The state znode's JSON; ``version`` and ``zxid`` (its mzxid) come from its stat."""
    path = partition_state_path(tp)
    doc = _load(path, data)
    isr = _field(path, doc, "isr", list)
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in isr):
        raise BadZnode(f"{path}: 'isr' must be a list of integers, got {isr!r:.60}")
    return LeaderAndIsr(
        leader=_field(path, doc, "leader", int),
        leader_epoch=_field(path, doc, "leader_epoch", int),
        isr=tuple(isr),
        controller_epoch=_field(path, doc, "controller_epoch", int),
        version=version,
        zxid=zxid,
    )


# --------------------------------------------------------------- cluster id
def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    return str(_field(CLUSTER_ID, _load(CLUSTER_ID, data), "id", str))


# ------------------------------------------------------ ISR change notices
def encode_isr_change(partitions: list[TopicPartition]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition}
                                               for tp in partitions]})


def decode_isr_change(name: str, data: bytes | None) -> tuple[TopicPartition, ...]:
    path = f"{ISR_CHANGE_NOTIFICATION}/{name}"
    entries = _field(path, _load(path, data), "partitions", list)
    return tuple(TopicPartition(str(_field(path, e, "topic", str)),
                                int(_field(path, e, "partition", int))) for e in entries)


# --------------------------------------------------------- users (SCRAM)
def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer``: a user name as a znode name (URL-encoding; '*' too)."""
    return urllib.parse.quote(name, safe="")


def desanitize(text: str) -> str:
    return urllib.parse.unquote(text)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"


def encode_user_config(configs: dict[str, str]) -> bytes:
    return encode_topic_config(configs)


def decode_user_config(user: str, data: bytes | None) -> dict[str, str]:
    path = user_config_path(user)
    config = _field(path, _load(path, data), "config", dict)
    return {str(k): str(v) for k, v in config.items()}


def encode_user_change(user: str) -> bytes:
    """A ``/config/changes/config_change_<seq>`` body telling nodes a user's config changed."""
    return _dump({"version": 2, "entity_path": f"users/{sanitize(user)}"})


def encode_topic_change(topic: str) -> bytes:
    """A ``/config/changes/config_change_<seq>`` body telling nodes a topic's config changed."""
    return _dump({"version": 2, "entity_path": f"topics/{topic}"})


def decode_config_change(data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name): ("users", "alice")."""
    path = CONFIG_CHANGES
    entity = str(_field(path, _load(path, data), "entity_path", str))
    kind, sep, name = entity.partition("/")
    if not sep:
        raise BadZnode(f"{path}: bad entity_path {entity!r}")
    return kind, desanitize(name)


# ----------------------------------------------------------------- ACLs
def acl_type_path(resource_type: ResourceType, pattern_type: PatternType) -> str:
    return f"{ACL_ROOTS[pattern_type]}/{resource_type.zk_name}"


def acl_path(pattern: ResourcePattern) -> str:
    if pattern.pattern_type not in ACL_ROOTS:
        raise AclError(f"pattern type {pattern.pattern_type.name} cannot be stored")
    if pattern.resource_type not in STORED_RESOURCE_TYPES:
        raise AclError(f"resource type {pattern.resource_type.name} cannot have ACLs here")
    if "/" in pattern.name or pattern.name in ("", ".", ".."):
        raise AclError(f"resource name {pattern.name!r} cannot be a znode name")
    return f"{acl_type_path(pattern.resource_type, pattern.pattern_type)}/{pattern.name}"


def encode_acls(entries: frozenset[AclEntry]) -> bytes:
    return _dump({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": e.permission.acl_name,
         "operation": e.operation.acl_name, "host": e.host} for e in sorted(entries)]})


def decode_acls(path: str, data: bytes | None) -> frozenset[AclEntry]:
    out = set()
    for item in _field(path, _load(path, data), "acls", list):
        try:
            out.add(AclEntry(str(_field(path, item, "principal", str)),
                             str(_field(path, item, "host", str)),
                             Operation.parse(str(_field(path, item, "operation", str))),
                             Permission.parse(str(_field(path, item, "permissionType", str)))))
        except AclError as exc:
            raise BadZnode(f"{path}: {exc}") from None
    return frozenset(out)


def acl_change_root(pattern: ResourcePattern) -> str:
    return ACL_CHANGES if pattern.pattern_type is PatternType.LITERAL else ACL_EXTENDED_CHANGES


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """Kafka's change events: ``TOPIC:name`` (literal) or JSON (extended)."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _dump({"version": 1, "resourceType": pattern.resource_type.name,
                  "name": pattern.name, "patternType": pattern.pattern_type.name})


def decode_acl_change(root: str, data: bytes | None) -> ResourcePattern:
    raw = data or b""
    try:
        if root == ACL_CHANGES:
            kind, sep, name = raw.decode().partition(":")
            if not sep:
                raise BadZnode(f"{root}: bad change event {raw[:80]!r}")
            return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
        doc = _load(root, raw)
        return ResourcePattern(ResourceType.parse(str(_field(root, doc, "resourceType", str))),
                               str(_field(root, doc, "name", str)),
                               PatternType.parse(str(_field(root, doc, "patternType", str))))
    except (AclError, UnicodeDecodeError) as exc:
        raise BadZnode(f"{root}: bad change event {raw[:80]!r}: {exc}") from None
