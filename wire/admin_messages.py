"""Messages of the admin APIs and the log cleaner (type ids 900-999).

Topic admin goes to the controller (single node: the local Controller actor;
a cluster: the elected controller), which changes the topic table and has the
partition shards apply the change; records and log dirs go to the shards that
own the logs; group deletion to the group coordinators; cleaning is between
the LogCleaner of a log dir and the shards.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.broker_messages import OpenPartitionRow, TopicPartition
from wire.registry import message

# ------------------------------------------------------------ topic admin


class CreatePartitionsRow(NamedTuple):
    """Grow topic ``name`` to ``count`` partitions; ``assignments`` (optional) lists the
    broker ids of each new partition, in order."""

    name: str
    new_total: int
    assignments: list[list[int]] | None


@message(900)
class CreatePartitions(NamedTuple):
    """Handler -> Controller. ``validate_only`` checks without adding."""

    req_id: int
    validate_only: bool
    rows: list[CreatePartitionsRow]
    timeout_ms: int | None = None  # as CreateTopics.timeout_ms


class TopicResultRow(NamedTuple):
    """One topic's answer to a topic admin request (error code 0: done)."""

    name: str
    error_code: int
    error_message: str | None


@message(901)
class CreatePartitionsDone(NamedTuple):
    """Controller -> Handler: one row per row of the request, in its order."""

    req_id: int
    rows: list[TopicResultRow]


class ConfigOpRow(NamedTuple):
    """One config change: ``op`` is Kafka's AlterConfigOp (0 SET, 1 DELETE, 2 APPEND,
    3 SUBTRACT); AlterConfigs (not incremental) sends only SETs."""

    name: str
    op: int
    value: str | None


class AlterTopicConfigsRow(NamedTuple):
    name: str
    ops: list[ConfigOpRow]


@message(902)
class AlterTopicConfigs(NamedTuple):
    """Handler -> Controller: AlterConfigs (``incremental`` False: the ops replace every
    override of the topic) or IncrementalAlterConfigs for topics."""

    req_id: int
    validate_only: bool
    incremental: bool
    rows: list[AlterTopicConfigsRow]


@message(903)
class AlterTopicConfigsDone(NamedTuple):
    req_id: int
    rows: list[TopicResultRow]


@message(904)
class UpdatePartitionConfigs(NamedTuple):
    """Controller -> PartitionShard: these partitions' topic overrides are now ``configs``
    (the log takes the new settings at once); answered with ShardDone."""

    req_id: int
    rows: list[OpenPartitionRow]


# ------------------------------------------------------------ records, log dirs


class DeleteRecordsRow(NamedTuple):
    """Move the partition's log start to ``offset`` (-1: the high watermark)."""

    topic: str
    partition: int
    offset: int


@message(910)
class DeleteRecords(NamedTuple):
    """Handler -> PartitionShard."""

    req_id: int
    rows: list[DeleteRecordsRow]
    # how long the answer may wait for the in-sync followers' log starts (the request's
    # timeout_ms; the shard caps it): past it, REQUEST_TIMED_OUT
    timeout_ms: int = 30_000


class DeleteRecordsDoneRow(NamedTuple):
    topic: str
    partition: int
    low_watermark: int  # the log start offset after the request; -1 on error
    error_code: int
    error_message: str | None


@message(911)
class DeleteRecordsDone(NamedTuple):
    req_id: int
    rows: list[DeleteRecordsDoneRow]


@message(912)
class DescribeLogDir(NamedTuple):
    """Handler -> every PartitionShard: sizes of the partitions it hosts (``rows`` None:
    all of them, else only these)."""

    req_id: int
    rows: list[TopicPartition] | None


class LogDirPartitionRow(NamedTuple):
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int  # Kafka's: max(0, HW - LEO) for a current log, so 0 here


@message(913)
class DescribeLogDirDone(NamedTuple):
    req_id: int
    log_dir: str
    total_bytes: int  # of the file system holding the log dir
    usable_bytes: int
    rows: list[LogDirPartitionRow]


# ------------------------------------------------------------ groups


@message(920)
class DeleteGroups(NamedTuple):
    """Handler -> GroupCoordinator: delete these groups (only Empty ones go)."""

    req_id: int
    group_ids: list[str]


class GroupResultRow(NamedTuple):
    group_id: str
    error_code: int


@message(921)
class DeleteGroupsDone(NamedTuple):
    req_id: int
    rows: list[GroupResultRow]


@message(922)
class OffsetDelete(NamedTuple):
    """Handler -> GroupCoordinator: delete the group's committed offsets of these partitions."""

    req_id: int
    group_id: str
    rows: list[TopicPartition]


class OffsetDeleteDoneRow(NamedTuple):
    topic: str
    partition: int
    error_code: int


@message(923)
class OffsetDeleteDone(NamedTuple):
    """``error_code`` is the group's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...); with one,
    ``rows`` is empty."""

    req_id: int
    error_code: int
    rows: list[OffsetDeleteDoneRow]


# ------------------------------------------------------------ the log cleaner


class SegmentRow(NamedTuple):
    """A closed segment: what the cleaner may read."""

    base_offset: int
    size_bytes: int
    next_offset: int
    max_timestamp_ms: int


class CleanableLogRow(NamedTuple):
    """A compacted log as its shard reports it to the LogCleaner of its log dir."""

    topic: str
    partition: int
    directory: str
    segments: list[SegmentRow]  # every segment but the active one, in order
    active_base_offset: int
    log_start_offset: int
    last_stable_offset: int  # the LSO: nothing from an open transaction on is cleaned
    generation: int
    min_cleanable_dirty_ratio: float
    delete_retention_ms: int
    min_compaction_lag_ms: int
    segment_bytes: int
    index_interval_bytes: int
    segment_index_bytes: int
    # [producer id, last offset of its last batch (-1: none in its epoch), its epoch]
    producer_last_offsets: list[list[int]]
    # the aborted transactions of the log's in-memory index whose marker is at or above the
    # first dirty offset and whose first offset is below min(active base, LSO) (the ones a
    # pass may drop records of): [producer id, first offset, marker offset, LSO]
    aborted_txns: list[list[int]]


class CleanerCheckpointRow(NamedTuple):
    """The LogCleaner's checkpoint of one log: it cleaned below ``offset`` (its next first
    dirty offset)."""

    topic: str
    partition: int
    offset: int


@message(930)
class CleanableLogs(NamedTuple):
    """LogCleaner -> PartitionShard: report your compacted logs. ``checkpoints`` are the
    cleaner's for this shard's logs: a report names only the aborted transactions the
    cleaner may meet in the dirty part (at or above the first dirty offset)."""

    req_id: int
    checkpoints: list[CleanerCheckpointRow]


@message(931)
class CleanableLogsDone(NamedTuple):
    req_id: int
    rows: list[CleanableLogRow]


@message(932)
class SwapCleanedSegments(NamedTuple):
    """LogCleaner -> PartitionShard: the cleaned copies of ``old_segments`` are ready in
    ``staging`` (inside the partition directory); swap them in, unless the log changed."""

    req_id: int
    topic: str
    partition: int
    generation: int
    staging: str
    old_segments: list[SegmentRow]
    new_bases: list[int]
    # the ABORT markers the pass dropped (past their delete horizon): their aborted
    # entries go at the swap
    dropped_aborts: list[int]


@message(933)
class SwapCleanedSegmentsDone(NamedTuple):
    """``swapped`` False: refused (``reason`` says why; the staging was discarded)."""

    req_id: int
    topic: str
    partition: int
    swapped: bool
    reason: str


@message(934)
class CleanerLogTruncated(NamedTuple):
    """PartitionShard -> LogCleaner: a log was truncated (a follower's, to its leader); its
    active segment now starts at ``offset``. A cleaner checkpoint above it is lowered to
    it (Kafka's maybeTruncateCheckpoint): the records written there again are dirty."""

    topic: str
    partition: int
    offset: int


# ------------------------------------------------------------ leader elections (admin 950-979)


class ElectLeadersRow(NamedTuple):
    """One partition's election outcome (error code 0: elected)."""

    topic: str
    partition: int
    error_code: int
    error_message: str | None


@message(950)
class ElectLeadersAsk(NamedTuple):
    """Handler -> cluster Controller: ElectLeaders (``election`` 0 preferred, 1 unclean)
    for ``partitions`` (None: every partition)."""

    req_id: int
    election: int
    partitions: list[TopicPartition] | None


@message(951)
class ElectLeadersDone(NamedTuple):
    """Controller -> handler: a top-level error (NOT_CONTROLLER, REQUEST_TIMED_OUT) or one
    row per partition asked for."""

    req_id: int
    error_code: int
    rows: list[ElectLeadersRow]


# ------------------------------------------- partition reassignments (550-569, KIP-455)


class ReassignRow(NamedTuple):
    """Move ``partition`` of ``topic`` to ``replicas`` (None: cancel its reassignment)."""

    topic: str
    partition: int
    replicas: list[int] | None


@message(550)
class AlterReassignmentsAsk(NamedTuple):
    """Handler -> cluster Controller: AlterPartitionReassignments. ``allow_rf_change``
    False (v1): a move that changes a partition's replication factor is refused."""

    req_id: int
    rows: list[ReassignRow]
    allow_rf_change: bool = True


class ReassignDoneRow(NamedTuple):
    """One partition's answer (error code 0: its reassignment was written and started)."""

    topic: str
    partition: int
    error_code: int
    error_message: str | None


@message(551)
class AlterReassignmentsDone(NamedTuple):
    """Controller -> handler: a top-level error (NOT_CONTROLLER, REQUEST_TIMED_OUT) or one
    row per partition asked for."""

    req_id: int
    error_code: int
    rows: list[ReassignDoneRow]


@message(552)
class ListReassignmentsAsk(NamedTuple):
    """Handler -> cluster Controller: ListPartitionReassignments of ``partitions`` (None:
    every partition being reassigned)."""

    req_id: int
    partitions: list[TopicPartition] | None


class OngoingReassignmentRow(NamedTuple):
    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]


@message(553)
class ListReassignmentsDone(NamedTuple):
    """Controller -> handler: a top-level error, or the reassignments in progress."""

    req_id: int
    error_code: int
    rows: list[OngoingReassignmentRow]
