"""What travels: actor messages, their envelope, the Kafka protocol, error codes.

- ``registry``: the ``@message(type_id)`` registry that turns NamedTuples into
  msgpack arrays and back, with shape checks; ``runtime_messages``,
  ``broker_messages``, ``group_messages``, ``cluster_messages``,
  ``replication_messages``: the messages themselves (type id ranges: runtime
  1-99, broker 200-299, groups 300-399, cluster 400-499, replication 500-599, ...).
- ``fingerprint``: the inter-node wire fingerprint, a hash of every message's id and
  shape; nodes of different fingerprints refuse to run together.
- ``envelope``: the actor frame format (the only writer and reader of it).
- ``kafka_codec``: Kafka request frames in, response frames out;
  ``api_versions``: the advertised API versions, the API names, the request stages.
- ``errors``: Kafka's error codes and the exceptions that carry them.
- ``trace_format``: the trace file format; ``trace_parquet``: its codec (the small part
  of Parquet trace files use, in pure Python).

Data only: no sockets, no threads. The names below are imported on first use
(``kafka_codec`` loads kafka-python's protocol classes).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wire.api_versions import ADVERTISED as ADVERTISED
    from wire.api_versions import STAGES as STAGES
    from wire.api_versions import ApiVersionRange as ApiVersionRange
    from wire.api_versions import api_name as api_name
    from wire.api_versions import api_snake_name as api_snake_name
    from wire.api_versions import is_advertised as is_advertised
    from wire.envelope import BadFrame as BadFrame
    from wire.envelope import decode_frame as decode_frame
    from wire.envelope import encode_frame as encode_frame
    from wire.envelope import new_entry as new_entry
    from wire.errors import CorruptMessageError as CorruptMessageError
    from wire.errors import ErrorCode as ErrorCode
    from wire.errors import InvalidRecordError as InvalidRecordError
    from wire.errors import InvalidTimestampError as InvalidTimestampError
    from wire.errors import KafkaError as KafkaError
    from wire.errors import MessageTooLargeError as MessageTooLargeError
    from wire.errors import OffsetOutOfRangeError as OffsetOutOfRangeError
    from wire.errors import StorageError as StorageError
    from wire.registry import UnknownType as UnknownType
    from wire.registry import WrongShape as WrongShape
    from wire.registry import build as build
    from wire.registry import message as message
    from wire.registry import type_id_of as type_id_of
    from wire.registry import type_of as type_of

_EXPORTS: dict[str, str] = {
    "ADVERTISED": "wire.api_versions",
    "STAGES": "wire.api_versions",
    "ApiVersionRange": "wire.api_versions",
    "api_name": "wire.api_versions",
    "api_snake_name": "wire.api_versions",
    "is_advertised": "wire.api_versions",
    "BadFrame": "wire.envelope",
    "decode_frame": "wire.envelope",
    "encode_frame": "wire.envelope",
    "new_entry": "wire.envelope",
    "CorruptMessageError": "wire.errors",
    "ErrorCode": "wire.errors",
    "InvalidRecordError": "wire.errors",
    "InvalidTimestampError": "wire.errors",
    "KafkaError": "wire.errors",
    "MessageTooLargeError": "wire.errors",
    "OffsetOutOfRangeError": "wire.errors",
    "StorageError": "wire.errors",
    "UnknownType": "wire.registry",
    "WrongShape": "wire.registry",
    "build": "wire.registry",
    "message": "wire.registry",
    "type_id_of": "wire.registry",
    "type_of": "wire.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
