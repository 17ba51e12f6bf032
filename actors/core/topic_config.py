"""Topic-level configs: Kafka's names, types, ranges and sources, mapped onto the log's settings.

A topic config's value comes, in order, from the topic's own override
(DYNAMIC_TOPIC_CONFIG), the broker key the config file or a flag set
(STATIC_BROKER_CONFIG), or the broker key's default (DEFAULT_CONFIG);
DescribeConfigs reports which, with the others as synonyms.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from enum import IntEnum
from typing import Any, NamedTuple

from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.partition_log import LogConfig
from actors.core.recompress import COMPRESSION_TYPES
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.runtime.config import DERIVED_MS
from wire.errors import ErrorCode, KafkaError


class ConfigType(IntEnum):
    """Kafka's ConfigType (DescribeConfigs v3+ ``config_type``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Kafka's ConfigSource (DescribeConfigs v1+ ``config_source``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# topic config -> (broker default key, type)
TOPIC_CONFIGS: dict[str, tuple[str, type]] = {
    "segment.bytes": ("log.segment.bytes", int),
    "segment.ms": ("log.roll.ms", int),
    "retention.bytes": ("log.retention.bytes", int),
    "retention.ms": ("log.retention.ms", int),
    "index.interval.bytes": ("log.index.interval.bytes", int),
    "segment.index.bytes": ("log.index.size.max.bytes", int),
    "flush.messages": ("log.flush.interval.messages", int),
    "flush.ms": ("log.flush.interval.ms", int),
    "max.message.bytes": ("message.max.bytes", int),
    "message.timestamp.type": ("log.message.timestamp.type", str),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms", int),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms", int),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms", int),
    "min.insync.replicas": ("min.insync.replicas", int),
    "cleanup.policy": ("log.cleanup.policy", list),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", int),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", int),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", float),
    "compression.type": ("compression.type", str),
    # read by the controller when a partition has no live ISR member
    "unclean.leader.election.enable": ("unclean.leader.election.enable", bool),
}
_INT32 = 2**31 - 1
_INT64 = 2**63 - 1
# Kafka's type and allowed range of each topic config.
TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "retention.bytes": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "segment.index.bytes": ConfigType.INT,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "max.message.bytes": ConfigType.INT,
    "message.timestamp.type": ConfigType.STRING,
    "message.timestamp.before.max.ms": ConfigType.LONG,
    "message.timestamp.after.max.ms": ConfigType.LONG,
    "message.timestamp.difference.max.ms": ConfigType.LONG,
    "min.insync.replicas": ConfigType.INT,
    "cleanup.policy": ConfigType.LIST,
    "delete.retention.ms": ConfigType.LONG,
    "min.compaction.lag.ms": ConfigType.LONG,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "compression.type": ConfigType.STRING,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
}
TOPIC_CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "segment.bytes": (14, _INT32),
    "segment.ms": (1, _INT64),
    "retention.bytes": (-1, _INT64),
    "retention.ms": (-1, _INT64),
    "index.interval.bytes": (0, _INT32),
    "segment.index.bytes": (4, _INT32),
    "flush.messages": (1, _INT64),
    "flush.ms": (0, _INT64),
    "max.message.bytes": (0, _INT32),
    "message.timestamp.before.max.ms": (0, _INT64),
    "message.timestamp.after.max.ms": (0, _INT64),
    "message.timestamp.difference.max.ms": (0, _INT64),
    "min.insync.replicas": (1, _INT32),
    "delete.retention.ms": (0, _INT64),
    "min.compaction.lag.ms": (0, _INT64),
    "min.cleanable.dirty.ratio": (0.0, 1.0),
}
CLEANUP_POLICIES = ("delete", "compact")
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


# Kafka's Topic.isInternal, less its __share_group_state (we have no share groups): the
# coordinators' own topics, which a client's Produce may not write (only Kafka's own tools,
# by this client id, AdminUtils.ADMIN_CLIENT_ID) and `actorlog topics delete` refuses
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# The config that sets each internal topic's partition count: its coordinator maps a
# group or transactional id over that many partitions
INTERNAL_PARTITIONS_CONFIG = {OFFSETS_TOPIC: "offsets.topic.num.partitions",
                              TRANSACTION_STATE_TOPIC: "transaction.state.log.num.partitions"}


def internal_partition_counts(config: Any) -> dict[str, int]:
    """Each internal topic's configured partition count (``config``: the broker's)."""
    return {topic: int(config[key]) for topic, key in INTERNAL_PARTITIONS_CONFIG.items()}


def internal_partition_count(topic: str, found: int | None, config: Any) -> int:
    """How many partitions ``topic``'s ids are mapped over (Kafka's partitionFor count, its
    getGroupMetadataTopicPartitionCount): the partitions the topic has (``found``) once it
    exists, the configured count only while it does not. A config changed between restarts
    so never moves a group's offsets or a transactional id's state to another partition."""
    return found if found else int(config[INTERNAL_PARTITIONS_CONFIG[topic]])


def check_internal_partition_count(name: str, count: int, wanted: Mapping[str, int]) -> None:
    """A client's CreateTopics of an internal topic must give it the partition count its
    coordinator maps ids over (``wanted``: internal_partition_counts). Kafka (ZooKeeper
    mode) makes it with any count, and its coordinator takes the count it finds at
    start-up: one made later with fewer partitions sends some groups to a partition that
    does not exist; here refused instead. Checked by the controllers, which hold the
    authoritative topic list (a handler's cache may be stale)."""
    if name not in wanted:
        return
    key = INTERNAL_PARTITIONS_CONFIG[name]
    if count != wanted[name]:
        raise KafkaError(f"topic {name!r} is internal: its coordinator maps ids over "
                         f"{key}={wanted[name]} partitions, not {count}",
                         ErrorCode.INVALID_PARTITIONS)


def check_internal_growth(name: str) -> None:
    """No CreatePartitions of an internal topic (its coordinator maps ids over the
    count it started with; Kafka lets it grow)."""
    if name in INTERNAL_TOPICS:
        raise KafkaError(f"topic {name!r} is internal: its coordinator maps ids over "
                         f"{INTERNAL_PARTITIONS_CONFIG[name]} partitions, it cannot grow",
                         ErrorCode.INVALID_PARTITIONS)


ADMIN_CLIENT_ID = "__admin_client"


class InvalidConfigError(KafkaError):
    code = ErrorCode.INVALID_CONFIG


class InvalidTopicError(KafkaError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


def unified_name(name: str) -> str:
    """The name a topic's metrics go by: '.' and '_' are one."""
    return name.replace(".", "_")


def check_no_collision(name: str, existing: Iterable[str] | Mapping[str, Collection[str]],
                       internal: bool = False) -> None:
    """Kafka's AdminZkClient.validateTopicCreate: a new name that differs from an existing
    topic only by '.' against '_' is refused (their metric names would be one). Called
    once the name is known not to exist itself. ``existing``: the topic names, or an
    index unified name -> names (as KRaft's topicsWithCollisionChars). A user's name
    colliding with an internal topic's is refused even before that topic exists (its
    coordinator's creation would fail); the coordinators' own creation (``internal``) is
    not checked: the name is theirs, whatever a user made earlier."""
    if internal or ("." not in name and "_" not in name):
        return
    unified = unified_name(name)
    if isinstance(existing, Mapping):
        others: Iterable[str] = existing.get(unified, ())
    else:
        others = (t for t in existing if unified_name(t) == unified)
    colliding = sorted({t for t in [*others, *INTERNAL_TOPICS]
                        if t != name and unified_name(t) == unified})
    if colliding:
        raise InvalidTopicError(
            f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")


class UnifiedNameIndex:
    """Topic names by unified name ('.' as '_'), as KRaft's topicsWithCollisionChars: a
    creation looks its collisions up here instead of scanning every topic. The single
    node's controller and the cluster's keep one each; what a name in it means (a topic,
    one being created) is theirs to say."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.by_unified: dict[str, set[str]] = {}
        for name in names:
            self.add(name)

    def add(self, name: str) -> None:
        self.by_unified.setdefault(unified_name(name), set()).add(name)

    def discard(self, name: str) -> None:
        unified = unified_name(name)
        names = self.by_unified.get(unified)
        if names is not None:
            names.discard(name)
            if not names:
                del self.by_unified[unified]

    def check(self, name: str, internal: bool = False) -> None:
        """check_no_collision against the names indexed."""
        check_no_collision(name, self.by_unified, internal)


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal")
    if len(name) > 249:
        raise InvalidTopicError(f"topic name is {len(name)} characters long, the limit is 249")
    if not _TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'"
        )


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, str]:
    """Configs as strings (Kafka's wire form), or InvalidConfigError naming the key.

    Each value must have its config's type and lie in its range; a None value
    is left out (not set).
    """
    out: dict[str, str] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        if value is None:
            continue
        out[key] = _checked(key, str(value).strip())
    return out


def validate_new_topic_configs(configs: Mapping[str, Any]) -> dict[str, str]:
    """A new topic's configs (CreateTopics), as validate_topic_configs; but a None value
    is refused, not left out: Kafka answers INVALID_CONFIG for it (ZkAdminManager.
    createTopics), where AlterConfigs leaves a None value out."""
    nulls = [key for key, value in configs.items() if value is None]
    if nulls:
        raise InvalidConfigError(
            f"a null value is not supported for topic configs: {', '.join(nulls)}")
    return validate_topic_configs(configs)


def _checked(key: str, text: str) -> str:
    kind = TOPIC_CONFIGS[key][1]
    number: float | None = None
    if kind is int:
        try:
            number = int(text)
        except ValueError:
            raise InvalidConfigError(f"{key} must be an integer, got {text!r}") from None
    elif kind is float:
        try:
            number = float(text)
        except ValueError:
            raise InvalidConfigError(f"{key} must be a number, got {text!r}") from None
    elif kind is bool:
        if text.strip().lower() not in ("true", "false"):
            raise InvalidConfigError(f"{key} must be true or false, got {text!r}")
        return text.strip().lower()
    bounds = TOPIC_CONFIG_RANGES.get(key)
    if number is not None and bounds is not None and not bounds[0] <= number <= bounds[1]:
        raise InvalidConfigError(f"{key} = {text} is out of range: it must be from "
                                 f"{bounds[0]} to {bounds[1]}")
    if key == "message.timestamp.type" and text not in ("CreateTime", "LogAppendTime"):
        raise InvalidConfigError(f"{key} must be CreateTime or LogAppendTime, got {text!r}")
    if key == "compression.type" and text not in COMPRESSION_TYPES:
        raise InvalidConfigError(f"{key} must be one of {', '.join(COMPRESSION_TYPES)}, "
                                 f"got {text!r}")
    if key == "cleanup.policy":
        # An empty list is valid, as Kafka's ValidList takes it: the log is neither
        # deleted by retention nor compacted (SUBTRACT of the last policy gives it).
        policies = cleanup_policies(text)
        unknown = [p for p in policies if p not in CLEANUP_POLICIES]
        if unknown:
            raise InvalidConfigError(
                f"cleanup.policy {text!r} is not a list of {' and '.join(CLEANUP_POLICIES)} "
                f"(e.g. 'compact' or 'compact,delete')")
        return ",".join(policies)
    return text


def cleanup_policies(text: str) -> list[str]:
    """``compact, delete`` -> ['compact', 'delete'] (a LIST config, comma separated)."""
    return [p.strip() for p in text.split(",") if p.strip()]


def list_config(key: str) -> bool:
    return TOPIC_CONFIG_TYPES.get(key) is ConfigType.LIST


class DescribedConfig(NamedTuple):
    """One config as DescribeConfigs reports it; ``synonyms`` are (name, value, source) in
    order of precedence, the first being where ``value`` comes from."""

    name: str
    value: str | None
    source: ConfigSource
    config_type: ConfigType
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]


def broker_value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Broker keys that stand for one setting, in Kafka's order of precedence
# (DynamicBrokerConfig.brokerConfigSynonyms): each key's synonyms are these; the groups are
# the keys the config derives one from another (log.retention.*, log.roll.*, log.flush.*
# interval: for log.flush.scheduler.interval.ms, last of its group, Kafka's list is itself
# alone, which gives the same synonyms once those before its name are dropped).
BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    key: group
    for group in ((target, *(k for k, _f in stand_ins))
                  for target, stand_ins in DERIVED_MS.items())
    for key in group}
# Broker keys with no default in Kafka (null): no DEFAULT_CONFIG synonym, and a null value
# while not set. The working value of the first three is what their stand-ins give
# (DERIVED_MS: log.retention.hours, log.roll.hours, log.flush.scheduler.interval.ms);
# the strings' is "" (none).
NULL_DEFAULT_KEYS = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms",
                               "log.flush.interval.ms", "advertised.listeners",
                               "zookeeper.connect", "broker.rack", "ssl.key.password",
                               "ssl.keystore.location", "ssl.truststore.location"})


def broker_synonyms(name: str, broker: Mapping[str, Any], broker_set: Collection[str],
                    defaults: Mapping[str, Any]) -> list[tuple[str, str, ConfigSource]]:
    """Kafka's ConfigHelper.configSynonyms of broker key ``name``: each synonym the config
    file or a flag set (STATIC_BROKER_CONFIG), then each one's default where it has one
    (DEFAULT_CONFIG), in precedence order within each source; then everything before the
    first entry named ``name`` is dropped, as Kafka does (so log.retention.ms has no
    synonyms unless it has a value itself: only log.retention.hours has a default)."""
    names = BROKER_SYNONYMS.get(name, (name,))
    out = [(n, broker_value_text(broker[n]), ConfigSource.STATIC_BROKER_CONFIG)
           for n in names if n in broker_set]
    out += [(n, broker_value_text(defaults[n]), ConfigSource.DEFAULT_CONFIG)
            for n in names if n not in NULL_DEFAULT_KEYS and defaults[n] is not None]
    while out and out[0][0] != name:
        out.pop(0)
    return out


def describe_topic_configs(broker: Mapping[str, Any], broker_set: Collection[str],
                           topic_configs: Mapping[str, str],
                           defaults: Mapping[str, Any],
                           given: Mapping[str, Any] | None = None) -> list[DescribedConfig]:
    """Every topic config with its value, true source and synonyms.

    ``broker`` holds the broker keys' values, ``broker_set`` the keys the
    config file or command line set (the rest are defaults), ``defaults`` each broker
    key's own default (the DEFAULT_CONFIG synonym's value). The value is the topic's
    override, else what the broker keys give it (log.retention.ms derived from the
    minutes or hours when not set); the source is the first synonym's, DEFAULT_CONFIG
    when there is none (Kafka's createTopicConfigEntry). ``given``: the set keys' values as
    set (Config.given; default ``broker``), which the synonyms show, as Kafka's do (a
    log.retention.ms of -5 is -5 there, -1 the value).
    """
    out = []
    shown = broker if given is None else given
    for key, (broker_key, _kind) in TOPIC_CONFIGS.items():
        synonyms = broker_synonyms(broker_key, shown, broker_set, defaults)
        value: str | None
        if key in topic_configs:
            synonyms.insert(0, (key, topic_configs[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            value = topic_configs[key]
        else:
            value = broker_value_text(broker[broker_key])
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(DescribedConfig(key, value, source, TOPIC_CONFIG_TYPES[key], tuple(synonyms)))
    return out


def effective(broker: Any, topic_configs: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_default) from the topic or the broker default."""
    out: dict[str, tuple[str, bool]] = {}
    for key, (broker_key, _kind) in TOPIC_CONFIGS.items():
        if key in topic_configs:
            out[key] = (topic_configs[key], False)
        else:
            out[key] = (broker_value_text(broker[broker_key]), True)
    return out


def log_config_for(broker: Any, topic_configs: dict[str, str]) -> LogConfig:
    values = {k: v for k, (v, _d) in effective(broker, topic_configs).items()}
    return LogConfig(
        segment_bytes=int(values["segment.bytes"]),
        segment_ms=int(values["segment.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        retention_ms=int(values["retention.ms"]),
        index_interval_bytes=int(values["index.interval.bytes"]),
        segment_index_bytes=int(values["segment.index.bytes"]),
        flush_messages=int(values["flush.messages"]),
        flush_ms=int(values["flush.ms"]),
        max_message_bytes=int(values["max.message.bytes"]),
        message_timestamp_type=values["message.timestamp.type"],
        message_timestamp_before_max_ms=timestamp_bound(broker, topic_configs, "before"),
        message_timestamp_after_max_ms=timestamp_bound(broker, topic_configs, "after"),
        cleanup_policy=tuple(cleanup_policies(values["cleanup.policy"])),
        delete_retention_ms=int(values["delete.retention.ms"]),
        min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
        min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
        compression_type=values["compression.type"],
    )


def timestamp_bound(broker: Any, topic_configs: Mapping[str, str], side: str) -> int:
    """message.timestamp.``side``.max.ms as Kafka 3.6+ (KIP-937) resolves it.

    At each level a bound left at Long.MAX_VALUE gives way to the deprecated
    difference.max.ms of its level: the broker's default for the topic is
    log.message.timestamp.``side``.max.ms, else log.message.timestamp.difference.max.ms;
    the topic's bound is its override, else that default, and if that is Long.MAX_VALUE,
    the topic's difference.max.ms (override, else the broker's).
    """
    key = f"message.timestamp.{side}.max.ms"
    broker_difference = int(broker["log.message.timestamp.difference.max.ms"])
    if key in topic_configs:
        bound = int(topic_configs[key])
    else:
        bound = int(broker[f"log.{key}"])
        if bound == _INT64:
            bound = broker_difference
    if bound != _INT64:
        return bound
    return int(topic_configs.get("message.timestamp.difference.max.ms", broker_difference))
