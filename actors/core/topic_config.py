"""Topic-level configs: Kafka's names, validated, mapped onto the log's settings."""

from __future__ import annotations

import re
from typing import Any

from actors.core.partition_log import LogConfig
from wire.errors import ErrorCode, KafkaError

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
    "min.insync.replicas": ("min.insync.replicas", int),
    "cleanup.policy": ("", str),
}
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidConfigError(KafkaError):
    code = ErrorCode.INVALID_CONFIG


class InvalidTopicError(KafkaError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is illegal")
    if len(name) > 249:
        raise InvalidTopicError(f"topic name is {len(name)} characters long, the limit is 249")
    if not _TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'"
        )


def validate_topic_configs(configs: dict[str, Any]) -> dict[str, str]:
    """Configs as strings (Kafka's wire form), or InvalidConfigError naming the key."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {key!r}")
        if value is None:
            continue
        kind = TOPIC_CONFIGS[key][1]
        text = str(value)
        if kind is int:
            try:
                int(text)
            except ValueError:
                raise InvalidConfigError(f"{key} must be an integer, got {text!r}") from None
        if key == "message.timestamp.type" and text not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigError(f"{key} must be CreateTime or LogAppendTime, got {text!r}")
        if key == "cleanup.policy" and text != "delete":
            raise InvalidConfigError(f"cleanup.policy {text!r} is not supported (only 'delete')")
        out[key] = text
    return out


def effective(broker: Any, topic_configs: dict[str, str]) -> dict[str, tuple[str, bool]]:
    """Every topic config: (value, is_default) from the topic or the broker default."""
    out: dict[str, tuple[str, bool]] = {}
    for key, (broker_key, _kind) in TOPIC_CONFIGS.items():
        if key in topic_configs:
            out[key] = (topic_configs[key], False)
        elif broker_key:
            out[key] = (str(broker[broker_key]), True)
        else:
            out[key] = ("delete", True)
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
    )
