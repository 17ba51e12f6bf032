"""The per-topic rules of the admin APIs, for any controller to call.

CreatePartitions and AlterConfigs/IncrementalAlterConfigs change a topic's
partition count or its config overrides. The single node's Controller actor
and the cluster controller both decide with these functions, then persist
the result their own way (a local file, ZooKeeper) and have the partitions'
owners apply it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import IntEnum
from typing import NamedTuple

from actors.core.topic_config import (
    TOPIC_CONFIGS,
    InvalidConfigError,
    cleanup_policies,
    list_config,
    validate_topic_configs,
)
from wire.errors import ErrorCode, KafkaError


class AlterConfigOp(IntEnum):
    """Kafka's IncrementalAlterConfigs operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigChange(NamedTuple):
    name: str
    op: int
    value: str | None


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidRequestError(KafkaError):
    code = ErrorCode.INVALID_REQUEST


def check_partition_increase(topic: str, current: int, requested: int,
                             assignments: Sequence[Sequence[int]] | None) -> int:
    """How many partitions a CreatePartitions adds, or Kafka's error.

    The count only grows (INVALID_PARTITIONS for the same or a smaller one);
    an assignment, when given, lists exactly the new partitions
    (INVALID_REPLICA_ASSIGNMENT). Which brokers an assignment may name is the
    caller's to check (``replica_assignment.validate_assignment``).
    """
    if requested < current:
        raise InvalidPartitionsError(
            f"topic {topic!r} has {current} partitions; partitions cannot be removed "
            f"(asked for {requested})")
    if requested == current:
        raise InvalidPartitionsError(
            f"topic {topic!r} already has {current} partitions; ask for more to add some")
    added = requested - current
    if assignments is not None and len(assignments) != added:
        raise InvalidReplicaAssignmentError(
            f"adding {added} partition(s) to {topic!r} needs {added} assignment(s), "
            f"{len(assignments)} given")
    return added


def check_unique_names(names: Iterable[str], what: str) -> None:
    """Kafka refuses a request naming one config (or topic) twice: INVALID_REQUEST."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidRequestError(f"{what} {name!r} is given twice")
        seen.add(name)


def altered_topic_configs(current: Mapping[str, str], changes: Sequence[ConfigChange],
                          incremental: bool,
                          default_of: Callable[[str], str]) -> dict[str, str]:
    """The topic's overrides after an AlterConfigs (``incremental`` False: the changes
    are the new overrides, everything else reverts to its default) or an
    IncrementalAlterConfigs (SET, DELETE, and APPEND/SUBTRACT on list configs,
    which start from the current value: the override, else ``default_of(key)``).

    Raises INVALID_REQUEST for a config named twice or an unknown operation,
    INVALID_CONFIG for an unknown key, a bad value or APPEND/SUBTRACT on a
    config that is not a list.
    """
    check_unique_names((c.name for c in changes), "config")
    for change in changes:
        if change.name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {change.name!r}")
    if not incremental:
        for change in changes:
            if change.op != AlterConfigOp.SET:
                raise InvalidRequestError(f"AlterConfigs only sets configs; {change.name} has "
                                          f"operation {change.op}")
        return validate_topic_configs({c.name: c.value for c in changes})
    out = dict(current)
    for change in changes:
        try:
            op = AlterConfigOp(change.op)
        except ValueError:
            raise InvalidRequestError(
                f"unknown config operation {change.op} for {change.name}") from None
        if op is AlterConfigOp.DELETE:
            out.pop(change.name, None)
            continue
        if change.value is None:
            raise InvalidRequestError(f"{change.name}: a null value cannot be {op.name.lower()}")
        if op is AlterConfigOp.SET:
            out[change.name] = change.value
            continue
        if not list_config(change.name):
            raise InvalidConfigError(
                f"{op.name} applies only to list configs; {change.name} is not one")
        items = cleanup_policies(out.get(change.name, default_of(change.name)))
        given = cleanup_policies(change.value)
        if op is AlterConfigOp.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[change.name] = ",".join(items)
    return validate_topic_configs(out)
