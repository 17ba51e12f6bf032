"""Pure cores: the state machines the actor shells wrap.

Nothing here imports pykka, zmq, threading or time, or reads a clock: the
shells pass ``now_ms`` in and perform the effects that come back. Each module
is one concept; the names below are each module's entry points.

- Logs: ``record_batch`` (Kafka v2 batches), ``log_segment``, ``partition_log``,
  ``log_dir``, ``log_epoch_cache``, ``producer_state``, ``checkpoint``.
- Partitions and topics: ``partition_state`` (roles, ISR and high watermark),
  ``topic_config``, ``topic_store``, ``partition_budget`` (what one request and one
  node may create).
- Replication: ``fetcher_state`` (a ReplicaFetcher's partitions and fetches),
  ``follower_truncation`` (where a diverged follower cuts its log).
- Waiting: ``timing_wheel`` (Kafka's hierarchical timer), ``delayed_operation``
  (the operation base and the purgatory), ``delayed_produce_fetch``.
- Consumer groups: ``group_state`` (the coordinator core, built from
  ``group_types``, ``group_base``, ``group_membership``, ``group_offsets`` and
  ``group_load``), ``group_metadata``, ``offsets_codec`` (``__consumer_offsets``).
"""

from __future__ import annotations

from actors.core.checkpoint import (
    CheckpointError,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    write_epoch_checkpoint,
    write_offset_checkpoint,
)
from actors.core.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from actors.core.delayed_produce_fetch import DelayedFetch, DelayedProduce
from actors.core.fetcher_state import FetcherConfig, FetcherCore
from actors.core.follower_truncation import reset_offset, truncation_offset
from actors.core.group_metadata import GroupMetadata, GroupState, MemberMetadata
from actors.core.group_state import GroupConfig, GroupCoordinatorCore
from actors.core.log_dir import LogDir
from actors.core.log_epoch_cache import LeaderEpochCache
from actors.core.log_segment import LogSegment
from actors.core.offsets_codec import OFFSETS_TOPIC, Record, decode_record
from actors.core.partition_budget import PartitionBudget, PolicyViolationError
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.partition_state import PartitionState
from actors.core.producer_state import ProducerStateManager
from actors.core.record_batch import (
    BatchHeader,
    BatchRecord,
    build_batch,
    check_batch,
    check_batches,
    read_records,
)
from actors.core.timing_wheel import TimerTask, TimingWheel
from actors.core.topic_config import validate_topic_configs, validate_topic_name
from actors.core.topic_store import TopicStore

__all__ = [
    "OFFSETS_TOPIC",
    "BatchHeader",
    "BatchRecord",
    "CheckpointError",
    "DelayedFetch",
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "DelayedProduce",
    "FetcherConfig",
    "FetcherCore",
    "GroupConfig",
    "GroupCoordinatorCore",
    "GroupMetadata",
    "GroupState",
    "LeaderEpochCache",
    "LogConfig",
    "LogDir",
    "LogSegment",
    "MemberMetadata",
    "PartitionBudget",
    "PartitionLog",
    "PartitionState",
    "PolicyViolationError",
    "ProducerStateManager",
    "Record",
    "TimerTask",
    "TimingWheel",
    "TopicStore",
    "build_batch",
    "check_batch",
    "check_batches",
    "decode_record",
    "read_epoch_checkpoint",
    "read_offset_checkpoint",
    "read_records",
    "reset_offset",
    "truncation_offset",
    "validate_topic_configs",
    "validate_topic_name",
    "write_epoch_checkpoint",
    "write_offset_checkpoint",
]
