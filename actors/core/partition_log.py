"""The log of one partition: segments, offsets, high watermark, recovery.

A pure core: no threads, no clock (time comes in as ``now_ms``), no logging.
The PartitionShard actor owns one PartitionLog per partition and calls it
from a single thread, so nothing here locks.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``; the
recovery point is the offset below which everything has been fsynced (a
restart after a crash scans only what lies above it). The last stable offset
is the high watermark, or the first offset of the oldest open transaction
below it (actors/core/txn_index.py).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from bisect import bisect_right
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn, cast

from actors.core.batch_fast import COMPILED_MODULE, log_append, single_batch, timestamps_within
from actors.core.checkpoint import TMP_SUFFIX, fsync_dir
from actors.core.log_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from actors.core.log_index import DEFAULT_MAX_INDEX_BYTES, TIME_INDEX_SUFFIX
from actors.core.log_segment import INDEX_SUFFIX, LOG_SUFFIX, LogSegment
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    delete_snapshots_after,
    list_snapshots,
    load_latest_snapshot,
    snapshot_path,
    write_snapshot,
)
from actors.core.recompress import COMPRESSION_TYPES, PRODUCER, recompress
from actors.core.record_batch import (
    COMPRESSION_MASK,
    INFLATE_CHECK_MAX_BYTES,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    check_batches,
    check_client_batch,
    iter_record_timestamps,
    leader_header,
    read_records,
    record_timestamps,
    records_without_key,
)
from actors.core.segment_swap import (
    SwapManifest,
    commit_swap,
    missing_staging_files,
    recover_swaps,
    stage_txn_indexes,
)
from actors.core.transaction_log import (
    CONTROL_COMMIT,
    TRANSACTION_STATE_TOPIC,
    control_batch,
    control_coordinator_epoch,
    control_type,
)
from actors.core.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from wire.errors import (
    CorruptMessageError,
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)
from wire.file_region import FileRegion

NO_LIMIT = 2**63 - 1
# the group and transaction coordinators' logs
COORDINATOR_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
DAY_MS = 24 * 60 * 60 * 1000
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_MAX_RELATIVE_OFFSET = 2**31 - 1
_MAX_SEGMENT_BYTES = 2**31 - 1  # positions in the offset index are int32, as Kafka's
_new_tuple = tuple.__new__
# Finished segments whose indexes stay open (mapped, or small ones read into
# memory) after use, per partition, least recently used first out: readers of
# old data keep theirs, and an idle log holds its active segment's only.
OPEN_INDEXES_PER_LOG = 16


class RecordListTooLargeError(KafkaError):
    """A request's records for one partition exceed the segment size."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append that does not continue the log exactly (gap or overlap)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-topic log settings, Kafka's names in snake_case, Kafka's defaults."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    retention_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    segment_index_bytes: int = DEFAULT_MAX_INDEX_BYTES
    flush_messages: int = NO_LIMIT
    flush_ms: int = NO_LIMIT
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    # A CreateTime record's timestamp must lie within [now - before, now + after] of the
    # leader's clock (Kafka's message.timestamp.before/after.max.ms, KIP-937; the topic
    # config's message.timestamp.difference.max.ms already resolved into both)
    message_timestamp_before_max_ms: int = NO_LIMIT
    message_timestamp_after_max_ms: int = NO_LIMIT
    # Kafka's log cleaner settings: "delete" drops old segments (retention),
    # "compact" keeps each key's latest record (actors/core/log_cleaner.py).
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    # Kafka's compression.type: "producer" keeps each batch as sent; a codec (or
    # "uncompressed") has the leader re-encode a client's batch of another codec
    compression_type: str = PRODUCER

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def __post_init__(self) -> None:
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"message_timestamp_type must be {CREATE_TIME!r} or "
                             f"{LOG_APPEND_TIME!r}, got {self.message_timestamp_type!r}")
        if not 1 <= self.segment_bytes <= _MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be within [1, {_MAX_SEGMENT_BYTES}], got "
                             f"{self.segment_bytes}")
        if self.segment_index_bytes < 4:
            raise ValueError(f"segment_index_bytes must be >= 4, got {self.segment_index_bytes}")
        if self.message_timestamp_before_max_ms < 0 or self.message_timestamp_after_max_ms < 0:
            raise ValueError(f"message_timestamp_before_max_ms and _after_max_ms must be "
                             f">= 0, got {self.message_timestamp_before_max_ms} and "
                             f"{self.message_timestamp_after_max_ms}")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression_type must be one of {', '.join(COMPRESSION_TYPES)}, "
                             f"got {self.compression_type!r}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got "
                             f"{self.index_interval_bytes}")


def record_errors_text(errors: list[tuple[int, str]]) -> str:
    """The error_message of a Produce whose records were refused one by one (not for
    timestamps), in the words of Kafka's RecordValidationException, which clients and
    their users match: the count and the first three as Java prints them."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]")


def check_timestamps(records: bytes | bytearray | memoryview, headers: list[BatchHeader],
                     now_ms: int, before_max_ms: int, after_max_ms: int) -> None:
    """InvalidTimestampError unless every record's timestamp lies in
    [now_ms - before_max_ms, now_ms + after_max_ms] (a record without one, -1, passes),
    as Kafka's LogValidator checks a CreateTime topic's client appends, record by record.

    Its ``record_errors`` name every refused record by its index in ``records``. A
    compressed batch of any codec is decompressed to read them; one inflating past
    INFLATE_CHECK_MAX_BYTES is judged by its header's first and max timestamps, named
    by its first record's index.
    """
    low, high = now_ms - before_max_ms, now_ms + after_max_ms
    before_text = "(none)" if before_max_ms == NO_LIMIT else str(before_max_ms)
    after_text = "(none)" if after_max_ms == NO_LIMIT else str(after_max_ms)
    bounds = (f"[{'-' if before_max_ms == NO_LIMIT else low}, "
              f"{'+' if after_max_ms == NO_LIMIT else high}]")
    errors: dict[int, str] = {}
    index = 0
    for header in headers:
        # A batch the client stamped LogAppendTime reads every record at its max
        # timestamp (a -1 there is refused before, by refuse_client_append_time).
        stamps = ([header.max_timestamp] * header.records_count if header.is_log_append_time
                  else record_timestamps(records, header))
        judged = (enumerate(stamps, index) if stamps is not None else
                  ((index, header.base_timestamp), (index, header.max_timestamp)))
        for at, stamp in judged:
            if stamp != -1 and not low <= stamp <= high and at not in errors:
                errors[at] = (f"timestamp {stamp} of the record at index {at} is out of "
                              f"range: it must be within {bounds} (the broker's time "
                              f"{now_ms} - message.timestamp.before.max.ms {before_text}, "
                              f"+ message.timestamp.after.max.ms {after_text})")
        index += header.records_count
    if errors:
        first = min(errors)
        raise InvalidTimestampError(
            f"{len(errors)} of {index} records refused for their timestamps; the first: "
            f"{errors[first]}", tuple(sorted(errors.items())))


def refuse_client_append_time(headers: list[BatchHeader], log_append_time_topic: bool) -> None:
    """InvalidTimestampError for the records of batches a client stamped LogAppendTime
    where Kafka's LogValidator refuses them: on a LogAppendTime topic always (the broker
    stamps the time), on a CreateTime topic when the batch has no max timestamp (-1, the
    time such a batch's records are read with). Others are kept, as CreateTime.
    """
    errors: list[tuple[int, str]] = []
    index = 0
    for header in headers:
        if header.is_log_append_time and (log_append_time_topic
                                          or header.max_timestamp == -1):
            errors.extend((at, "the producer must not set the timestamp type to "
                               "LogAppendTime" + ("" if log_append_time_topic else
                                                  " on a record without a timestamp"))
                          for at in range(index, index + header.records_count))
        index += header.records_count
    if errors:
        raise InvalidTimestampError(
            f"{len(errors)} of {index} records refused: {errors[0][1]} (the record at "
            f"index {errors[0][0]})", tuple(errors))


def _continues(previous_next_offset: int, base: int, recovery_point: int) -> bool:
    """May a segment at ``base`` follow one that ends at ``previous_next_offset``?

    Appends leave no gap; the log cleaner does (it drops records, not offsets), but
    only below the checkpointed recovery point (it cleans no further). A gap above
    it is data a crash lost: nothing after it belongs to the log.
    """
    if previous_next_offset == base:
        return True
    return previous_next_offset < base <= recovery_point


class FlushFailedError(StorageError):
    """A flush of the log failed (an fsync), now or before (``PartitionLog.flush_failed``):
    what follows the recovery point is not known to be on disk, and the log flushes no
    more (an fsync tried again would say it succeeded). Only a reopen from the recovery
    point mends it: the shard answers what it must, then restarts (as Kafka takes the
    log dir offline). ``segment`` is the file whose flush failed first, ``errno`` its
    error's (None if not an OSError's)."""

    def __init__(self, message: str, segment: str, errno: int | None) -> None:
        super().__init__(message)
        self.segment = segment
        self.errno = errno


class UnflushedAppendError(FlushFailedError):
    """An append's batches are in the log, but the flush that ``flush.messages`` asked
    for right after them failed (the fsync): ``info`` is the append's. It is answered
    KAFKA_STORAGE_ERROR, as Kafka does, though its records may remain in the log (as in
    Kafka once the failed log dir is back); the failure itself is the log's, as any
    failed flush."""

    def __init__(self, message: str, info: AppendInfo, failed: FlushFailedError) -> None:
        super().__init__(message, failed.segment, failed.errno)
        self.info = info


class DeletedNotClosedError(StorageError):
    """A delete renamed the partition's directory aside (the delete is done: no log
    opens a ``-delete`` directory), then closing the log's files failed. ``left`` is the
    set-aside directory if its removal failed too (to try again), else None."""

    def __init__(self, message: str, left: Path | None) -> None:
        super().__init__(message)
        self.left = left


class SwapRefusedError(Exception):
    """A cleaning no longer fits the log (segments went or changed meanwhile)."""


class LogOffsetMetadata(NamedTuple):
    """An offset plus where it sits on disk, so a delayed fetch can count bytes
    available without reading: the position difference within one segment.

    This and the two result types below are NamedTuples, not dataclasses: one
    is built per append or read, and a frozen dataclass costs ~3 µs to build.
    """

    message_offset: int
    segment_base_offset: int
    relative_position_in_segment: int

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset == other.segment_base_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes from ``other`` up to this; only meaningful on the same segment."""
        return self.relative_position_in_segment - other.relative_position_in_segment


class AppendInfo(NamedTuple):
    """What a Produce response needs about one partition's append."""

    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    num_records: int
    size_in_bytes: int
    duplicate: bool = False  # a retried idempotent batch: offsets are the original ones


# append_as_leader's common case in C (batch_fast.log_append), None to run its inline
# Python twin (where the C module is not built; tests set it to None to compare the two).
_log_append = cast("Callable[..., AppendInfo | None] | None", log_append)
if COMPILED_MODULE is not None and log_append is not None:
    COMPILED_MODULE.log_append_types(AppendInfo, BatchMetadata)
    if hasattr(COMPILED_MODULE, "log_core_register"):
        # LogCore.append_as_leader reads _log_append here (tests set it to None)
        COMPILED_MODULE.log_core_register(globals())


class ReadInfo(NamedTuple):
    """Whole batches from one segment (read, or as a file region), and where the fetch
    started."""

    records: bytes | memoryview
    fetch_offset_metadata: LogOffsetMetadata
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    region: FileRegion | None = None  # the batches in their file; ``records`` is empty


# PartitionLog's base: where log_append is built, the C type whose append_as_leader is
# _append_as_leader_py's entry (no Python frame for the common case); else object, and
# append_as_leader is the twin itself.
if TYPE_CHECKING:
    _LogBase = object
else:
    _LogBase = (COMPILED_MODULE.LogCore
                if _log_append is not None and hasattr(COMPILED_MODULE, "LogCore") else object)


class PartitionLog(_LogBase):
    """One partition's segments and offsets; see the module docstring."""

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 now_ms: int) -> None:
        # Use PartitionLog.open(); this only sets fields.
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self._single_batch_max_bytes = -1
        self.config = config  # sets _single_batch_max_bytes
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        # Finished segments with open indexes, least recently used first.
        self._open_indexes: dict[LogSegment, None] = {}
        self._log_start_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._hw_metadata: LogOffsetMetadata | None = None
        self.epoch_cache = LeaderEpochCache(directory)
        self.producer_state = ProducerStateManager()
        # producer.id.expiration.ms (the broker's; None: entries never expire by time)
        self.producer_id_expiration_ms: int | None = None
        self.txn_index = TransactionIndex(directory)
        self.txn_index.ongoing = self.producer_state.ongoing_txns
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self.closed = False
        # Group commit: producer entries that got a batch appended with defer=True
        # (taken back if the staged write fails), and that failure, for commit().
        self._staged_entries: list[ProducerStateEntry] = []
        self._commit_error: StorageError | None = None
        self._lost_from = 0  # the log end that failed write left: its batches were past it
        # A failed fsync (flush): from then on every flush fails and close does not
        # flush, so the recovery point stays where the last good flush left it and the
        # reopen scans from there. An fsync tried again after a failed one returns 0 once
        # the error was reported, though the pages whose writeback failed may be lost.
        self.flush_failed: FlushFailedError | None = None
        # Bumped whenever segments are cut or replaced other than by appends and
        # retention: a cleaning planned before such a change is refused.
        self.generation = 0
        # Bytes the load's recovery cut (a torn or damaged tail, and the segments after
        # it), for the owner to report: the cut is data the log no longer holds.
        self.recovery_cut_bytes = 0

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, dir: Path, topic: str, partition: int, config: LogConfig, now_ms: int,
             *, recovery_point: int = 0, log_start_offset: int = 0,
             high_watermark: int = 0, clean_shutdown: bool = False,
             producer_id_expiration_ms: int | None = None) -> PartitionLog:
        """Open (creating if needed) the log in the partition directory ``dir``.

        ``recovery_point``, ``log_start_offset`` and ``high_watermark`` come from
        the log dir's checkpoints. Without ``clean_shutdown``, every segment that
        is not wholly below the recovery point is scanned, its index rebuilt, and
        the log cut at the first batch whose length, magic, CRC or offset is wrong.
        """
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, topic, partition, config, now_ms)
        log.producer_id_expiration_ms = producer_id_expiration_ms
        log._load(now_ms, recovery_point, log_start_offset, high_watermark, clean_shutdown)
        return log

    def _load(self, now_ms: int, recovery_point: int, log_start_offset: int,
              high_watermark: int, clean_shutdown: bool) -> None:
        bases = self._clean_directory()
        recovered = False
        scanned: list[LogSegment] = []
        for i, base in enumerate(bases):
            segment = self._segment_object(base, now_ms)
            size = segment.size
            trusted = clean_shutdown or (i + 1 < len(bases) and bases[i + 1] <= recovery_point)
            if trusted and not recovered:
                recovered = segment.load_clean(recovery_point)
            else:
                segment.recover(recovery_point)
                recovered = True
            self.recovery_cut_bytes += size - segment.size
            if recovered:
                scanned.append(segment)
            if self.segments and not _continues(self.segments[-1].next_offset, base,
                                                recovery_point):
                # A cut (or a hole) before this segment: nothing after it is a prefix.
                for later in [segment] + [self._segment_object(b, now_ms)
                                          for b in bases[i + 1:]]:
                    self.recovery_cut_bytes += later.size
                    later.delete()
                break
            if self.segments:
                # Not the last: indexes rebuilt by recovery are trimmed and closed now,
                # so recovering many segments never holds many mappings.
                self.segments[-1].seal()
            self.segments.append(segment)
        for segment in scanned:
            if not segment.closed:
                segment.flush()  # the recovery point moves to the LEO below
        if not self.segments:
            self.segments.append(self._segment_object(log_start_offset, now_ms))
        self.segments[-1].activate()
        self._bases = [s.base_offset for s in self.segments]
        leo = self.log_end_offset
        if log_start_offset > leo:
            # The checkpoint says data up to there was deleted: start there.
            self._replace_all_segments(log_start_offset, now_ms)
            leo = log_start_offset
        self._log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self._recovery_point = leo if (clean_shutdown or recovered) else min(recovery_point, leo)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._high_watermark = min(max(high_watermark, self._log_start_offset), leo)
        self.epoch_cache.truncate_from_end(leo)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self._rebuild_producer_state(now_ms)
        for snap in list_snapshots(self.dir):
            snapshot_path(self.dir, snap).unlink(missing_ok=True)

    def _segment_object(self, base_offset: int, now_ms: int) -> LogSegment:
        config = self.config
        return LogSegment(self.dir, base_offset, config.index_interval_bytes, now_ms,
                          config.segment_index_bytes)

    def _clean_directory(self) -> list[int]:
        """Remove leftovers of interrupted operations (finishing a committed cleaner swap);
        return segment bases, sorted."""
        recover_swaps(self.dir)
        bases: list[int] = []
        names = os.listdir(self.dir)
        logs = {n[: -len(LOG_SUFFIX)] for n in names if n.endswith(LOG_SUFFIX)}
        for name in names:
            path = self.dir / name
            stem, dot, suffix = name.rpartition(".")
            orphan_index = (dot + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
                            and stem not in logs)
            if name.endswith((TMP_SUFFIX, ".deleted")) or orphan_index:
                path.unlink(missing_ok=True)
            else:
                match = _SEGMENT_RE.match(name)
                if match:
                    bases.append(int(match.group(1)))
        return sorted(bases)

    def _rebuild_producer_state(self, now_ms: int) -> None:
        """Producer state from the newest snapshot at or below the LEO, then the log,
        less the entries expired at ``now_ms`` (producer.id.expiration.ms).

        Kafka drops the expired entries of the snapshot it loads, but the ones it
        rebuilds from the log after the snapshot (all of them after a crash) stay until
        its first check, an interval later; here both go at once, so a restart, clean
        or not, answers as the check after it would.

        As Kafka's truncateAndReload: a snapshot taken inside a transaction whose marker
        the cleaner has since dropped (past its horizon), then a truncation between that
        marker and the next snapshot, reloads that snapshot's open transaction with no
        marker above it left to end it: the transaction stays open (the LSO held there)
        until the producer's next marker or its coordinator's timeout abort.
        """
        leo = self.log_end_offset
        snap_offset, state = load_latest_snapshot(self.dir, leo)
        start = max(snap_offset, self._log_start_offset)
        first = max(bisect_right(self._bases, start) - 1, 0)
        txns = self.txn_index
        txns.ongoing = state.ongoing_txns
        txns.load(self._bases, start)
        for segment in self.segments[first:]:
            if segment.next_offset <= start:
                continue
            for header in segment.iter_headers(0, segment.size):
                if header.base_offset >= start:
                    state.update_from_header(header, header.base_offset)
                    if header.is_transactional:
                        self._track_transaction(segment.read(header.position, header.size)
                                                if header.is_control else b"",
                                                header, 0, header.base_offset,
                                                segment.base_offset, state)
        state.remove_before(self._log_start_offset)
        if self.producer_id_expiration_ms is not None:
            state.remove_expired(now_ms, self.producer_id_expiration_ms)
        self.producer_state = state

    def _track_transaction(self, buf: bytes | bytearray | memoryview, header: BatchHeader,
                           position: int, base_offset: int, segment_base: int,
                           state: ProducerStateManager | None = None) -> None:
        """A transactional batch opens its producer's transaction; a marker ends it and
        gives its producer's entry (in ``state``, the log's own unless a rebuild's) the
        coordinator epoch it carries."""
        if not header.is_control:
            self.txn_index.on_transactional_batch(header.producer_id, base_offset)
            return
        commit = False
        for record in read_records(buf, header, position):
            commit = control_type(record.key) == CONTROL_COMMIT
            coordinator_epoch = control_coordinator_epoch(record.value)
            if coordinator_epoch is not None:
                (state or self.producer_state).set_coordinator_epoch(
                    header.producer_id, header.producer_epoch, coordinator_epoch)
            break
        self.txn_index.on_marker(header.producer_id, commit, base_offset, segment_base)

    # ------------------------------------------------------------ properties

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._config = config
        # The bounds on a client's CreateTime record timestamps (before, after), None
        # when there are none (the defaults: the check costs nothing then).
        create_time = config.message_timestamp_type == CREATE_TIME
        # The coordinators' own logs are stamped by the broker itself (with its clock
        # since start, not re-read wall time): a broker-wide bound must never refuse them.
        self._timestamp_bounds = (
            (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms)
            if create_time and self.topic not in COORDINATOR_TOPICS
            and (config.message_timestamp_before_max_ms != NO_LIMIT
                                or config.message_timestamp_after_max_ms != NO_LIMIT)
            else None)
        # The codec a client's batches are re-encoded to, None to keep them as sent (the
        # default; always for the coordinators' logs, which the broker reads uncompressed).
        self._target_codec = (None if self.topic in COORDINATOR_TOPICS
                              else COMPRESSION_TYPES[config.compression_type])
        # A client's records on a compacted topic must each have a key (the general
        # path reads them; the broker's own topics are written with keys).
        self._keys_required = config.compact and self.topic not in COORDINATOR_TOPICS
        # Largest append the single-batch fast path takes: within max.message.bytes and
        # segment.bytes, CreateTime only (LogAppendTime rewrites the header), not on a
        # topic whose keys are checked. With a target codec it takes only a batch of that
        # codec (the general path re-encodes the others).
        self._single_batch_max_bytes = (
            min(config.max_message_bytes, config.segment_bytes)
            if create_time and not self._keys_required else -1)

    def _check_keys(self, records: bytes | bytearray | memoryview,
                    headers: list[BatchHeader]) -> None:
        """InvalidRecordError naming each record without a key, as Kafka's LogValidator
        refuses them on a compacted topic. A compressed batch inflating past
        INFLATE_CHECK_MAX_BYTES is not read and passes unchecked, where Kafka checks every
        record (a bound on the memory one append may take)."""
        errors: list[tuple[int, str]] = []
        index = 0
        for header in headers:
            for at in records_without_key(records, header) or ():
                errors.append((index + at, "Compacted topic cannot accept message without key "
                                           f"in topic partition {self.topic}-{self.partition}"))
            index += header.records_count
        if errors:
            raise InvalidRecordError(record_errors_text(errors), tuple(errors))

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The HW, or the first offset of the oldest transaction still open below it."""
        return self.txn_index.last_stable_offset(self._high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_offset) (read_committed)."""
        return self.txn_index.collect_aborted(fetch_offset, upper_offset)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def active_segment_base_offset(self) -> int:
        return self.segments[-1].base_offset

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; (-1, -1) if unknown."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        """A new leader epoch starts at ``offset`` (the LEO when this node becomes leader)."""
        self.epoch_cache.assign(epoch, offset)

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self.segments[-1]
        return LogOffsetMetadata(active.next_offset, active.base_offset, active.size)

    @property
    def high_watermark_metadata(self) -> LogOffsetMetadata:
        if self._high_watermark == self.log_end_offset:
            return self.log_end_offset_metadata
        if self._hw_metadata is None or self._hw_metadata.message_offset != self._high_watermark:
            self._hw_metadata = self._offset_metadata(self._high_watermark)
        return self._hw_metadata

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log_start_offset, log_end_offset]; returns it."""
        # log_end_offset, inline: this runs for every produce
        offset = min(max(offset, self._log_start_offset), self.segments[-1].next_offset)
        if offset != self._high_watermark:
            self._high_watermark = offset
            self._hw_metadata = None
        return offset

    def _segment_for(self, offset: int) -> LogSegment:
        slot = bisect_right(self._bases, offset) - 1
        return self.segments[max(slot, 0)]

    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        segment = self._segment_for(offset)
        position, _ = segment.find_position(offset)
        if segment is not self.segments[-1]:
            self._used_indexes(segment)
        return LogOffsetMetadata(offset, segment.base_offset, position)

    def _used_indexes(self, segment: LogSegment) -> None:
        """A finished segment's indexes were used (which opened them): count them among
        the open ones, closing the least recently used past OPEN_INDEXES_PER_LOG."""
        if not segment.indexes_open:
            return
        recent = self._open_indexes
        if recent.pop(segment, 0) is None:
            recent[segment] = None
            return
        recent[segment] = None
        if len(recent) > OPEN_INDEXES_PER_LOG:
            oldest = next(iter(recent))
            del recent[oldest]
            oldest.release_indexes()

    def _forget_indexes(self, segment: LogSegment) -> None:
        """The segment goes (deleted) or becomes the active one: not counted any more."""
        self._open_indexes.pop(segment, None)

    # ---------------------------------------------------------------- append

    def _append_as_leader_py(self, records: bytes | bytearray | memoryview,
                             leader_epoch: int, now_ms: int, coordinator: bool = False,
                             defer: bool = False) -> AppendInfo:
        """Validate every batch, assign offsets by patching headers, write once.

        Nothing is written unless every batch passes. A retried idempotent batch
        is answered with its original offsets and not written again. A
        ``coordinator`` append (a transactional offset commit the group
        coordinator writes with the producer's id) has its epoch checked, not
        its sequence, as Kafka's coordinator-origin appends.

        ``defer`` (group commit): a single batch on the common path is only
        staged, and written with the others by ``commit()``, which must run
        before the append is acknowledged. Anything that reads the log writes
        staged batches first, so the log reads the same either way.

        Refused (StorageError) while a failed write of staged batches is not told
        yet (``commit()``): see ``_refuse_while_lost``.

        This is ``append_as_leader`` where the C module is not built; where it is,
        ``append_as_leader`` is LogCore's (_batch_fast.c), which does this entry's
        common case in C and calls this for anything else.
        """
        if self._commit_error is not None:
            self._refuse_while_lost()
        if _log_append is not None:
            # The common case below in one C call (batch_fast.log_append): None means the
            # general path, nothing changed.
            if not coordinator:
                done = _log_append(self, records, leader_epoch, now_ms, defer)
                if done is not None:
                    return done
        elif not coordinator and len(records) <= self._single_batch_max_bytes:
            # Mirrored in _batch_fast.c log_append (with _maybe_roll's rule and
            # producer_state's sequence rule); tests/core/test_log_append_fast.py compares
            # the two: change both.
            fields = single_batch(records)
            if fields is not None:
                # The common case, inline (a Python frame less per Produce): one valid
                # CreateTime batch (the size was checked against _single_batch_max_bytes,
                # -1 for LogAppendTime topics) that needs no roll, no new epoch entry
                # and, if idempotent, is simply the next in sequence. Anything else
                # takes the general path below, before any change.
                (_, batch_length, _, _, _, attributes, last_offset_delta, _, max_timestamp,
                 producer_id, producer_epoch, base_sequence, records_count) = fields
                epochs = self.epoch_cache.entries
                config = self._config
                bounds = self._timestamp_bounds
                active = self.segments[-1]
                size = len(records)
                first_offset = active.next_offset
                next_offset = first_offset + last_offset_delta + 1
                entry = None
                target_codec = self._target_codec
                if ((target_codec is None or attributes & COMPRESSION_MASK == target_codec)
                        and leader_epoch == (epochs[-1][0] if epochs else UNDEFINED_EPOCH)
                        # not a transaction's first batch here (the general path opens it)
                        and not (attributes & TRANSACTIONAL_BIT
                                 and producer_id not in self.txn_index.ongoing)
                        # no roll due (the general path decides)
                        and not (active.size and (
                            active.size + size > config.segment_bytes
                            or not active.rolls_on_batch_time
                            or max_timestamp - active.rolling_timestamp_ms > config.segment_ms
                            or active.index_full))
                        and next_offset - 1 - active.base_offset <= _MAX_RELATIVE_OFFSET
                        # no producer, or a known one's next batch (not a new producer, a
                        # new epoch, a duplicate or a gap)
                        and (producer_id < 0 or (
                            (entry := self.producer_state.producers.get(producer_id))
                            is not None and entry.producer_epoch == producer_epoch
                            and entry.batches
                            and base_sequence == entry.batches[-1].last_seq + 1))
                        # last (the one walk of the records): every record's timestamp
                        # within the topic's bounds, if it has any (uncompressed only: a
                        # compressed batch, or one refused, takes the general path, which
                        # reads and names them)
                        and (bounds is None
                             or timestamps_within(records, now_ms, bounds[0], bounds[1]))):
                    if defer and active.on_staged_written is None:
                        active.on_staged_written = self._staged_written
                    active.append_one(records, batch_length, leader_epoch, size, first_offset,
                                      next_offset, max_timestamp, defer)
                    if entry is not None:
                        entry.batches.append(BatchMetadata(
                            base_sequence, (base_sequence + last_offset_delta) & 0x7FFFFFFF,
                            first_offset, next_offset - 1, max_timestamp))
                        if defer:
                            self._staged_entries.append(entry)
                    self._unflushed_messages += records_count
                    # tuple.__new__ skips the NamedTuple's Python-level __new__ (a frame).
                    info = _new_tuple(AppendInfo, (first_offset, next_offset - 1, max_timestamp,
                                                   -1, self._log_start_offset, records_count,
                                                   size, False))
                    if self._unflushed_messages >= config.flush_messages:
                        self._flush_appended(now_ms, info)
                    return info
        return self._append_general(records, leader_epoch, now_ms, coordinator)

    if TYPE_CHECKING or _LogBase is object:
        append_as_leader = _append_as_leader_py

    def _append_general(self, records: bytes | bytearray | memoryview, leader_epoch: int,
                        now_ms: int, coordinator: bool) -> AppendInfo:
        """append_as_leader past its common case: every batch checked and placed, and
        written at once (after any staged ones), deferred or not."""
        headers = check_batches(records)
        if not headers:
            return self._empty_append_info()
        max_bytes = self.config.max_message_bytes
        num_records = 0
        stamped = False
        for header in headers:
            check_client_batch(header)
            stamped = stamped or bool(header.attributes & TIMESTAMP_TYPE_BIT)
            if header.size > max_bytes:
                raise MessageTooLargeError(
                    f"record batch at byte {header.position} is {header.size} bytes, "
                    f"larger than max.message.bytes {max_bytes}")
            num_records += header.records_count
        total = len(records)
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of records exceed segment.bytes {self.config.segment_bytes}")
        if stamped and not coordinator:
            refuse_client_append_time(
                headers, self.config.message_timestamp_type == LOG_APPEND_TIME)
        if self._timestamp_bounds is not None and not coordinator:
            check_timestamps(records, headers, now_ms, *self._timestamp_bounds)
        if self._keys_required and not coordinator:
            self._check_keys(records, headers)
        state = self.producer_state
        if coordinator:
            for header in headers:
                state.check_marker_epoch(header.producer_id, header.producer_epoch)
        elif state.producers or any(h.producer_id >= 0 for h in headers):
            for header in headers:
                if header.producer_id >= 0:
                    duplicate = state.find_duplicate(header)
                    if duplicate is not None:
                        return self._duplicate_append_info(duplicate)
            state.check_batches(headers)
        if self._target_codec is not None and not coordinator:
            converted = recompress(
                records, headers, self._target_codec, max(max_bytes, INFLATE_CHECK_MAX_BYTES),
                self.config.message_timestamp_type == LOG_APPEND_TIME)
            if converted is not None:
                records, headers, total = self._recompressed(converted)

        view = memoryview(records)
        append_time = now_ms if self.config.message_timestamp_type == LOG_APPEND_TIME else None
        first_offset = offset = self.log_end_offset
        pieces: list[bytes | bytearray | memoryview] = []
        placed: list[tuple[int, int, int, int, int]] = []
        max_timestamp = -1
        for header in headers:
            head, rest = leader_header(view, header, offset, leader_epoch, append_time)
            pieces.append(head)
            pieces.append(rest)
            batch_max_ts = header.max_timestamp if append_time is None else append_time
            max_timestamp = max(max_timestamp, batch_max_ts)
            next_offset = offset + header.last_offset_delta + 1
            placed.append((offset, next_offset, header.position, header.size, batch_max_ts))
            offset = next_offset
        self._write(pieces, total, placed, headers, first_offset, offset - 1, max_timestamp,
                    num_records, now_ms, (leader_epoch,))
        for header, (base, *_rest) in zip(headers, placed, strict=True):
            if header.is_transactional:
                self._track_transaction(records, header, header.position, base,
                                        self.segments[-1].base_offset)
        # Positional: keyword construction of a NamedTuple costs twice as much.
        info = AppendInfo(first_offset, offset - 1, max_timestamp,
                          -1 if append_time is None else now_ms, self._log_start_offset,
                          num_records, total)
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_appended(now_ms, info)
        return info

    def _recompressed(self, records: bytes) -> tuple[bytes, list[BatchHeader], int]:
        """The re-encoded ``records`` with their headers and size, checked again against
        max.message.bytes and segment.bytes (a weaker codec makes them larger), as Kafka
        checks a batch whose size validation may have changed."""
        headers = check_batches(records)
        max_bytes = self.config.max_message_bytes
        codec = self.config.compression_type
        for header in headers:
            if header.size > max_bytes:
                raise MessageTooLargeError(
                    f"record batch at byte {header.position} is {header.size} bytes once "
                    f"re-encoded for compression.type {codec}, larger than "
                    f"max.message.bytes {max_bytes}")
        if len(records) > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(records)} bytes of records, re-encoded for compression.type {codec}, "
                f"exceed segment.bytes {self.config.segment_bytes}")
        return records, headers, len(records)

    def _flush_appended(self, now_ms: int, info: AppendInfo) -> None:
        """The flush ``flush.messages`` asks for after an append (``info``), once the
        append is complete (its transaction tracked). A failed write of the staged
        batches (this append's among them) put the log back: its StorageError goes as it
        is. A failure with the batches in the log (the fsync) is UnflushedAppendError:
        the caller learns they are there (and that the append is complete: its
        transaction tracked, its producer's sequence recorded)."""
        try:
            self.flush(now_ms)
        except FlushFailedError as exc:
            if self.log_end_offset <= info.last_offset:
                raise
            raise UnflushedAppendError(str(exc), info, exc) from exc

    def _refuse_while_lost(self) -> NoReturn:
        """A failed write put the log back as it was before the staged batches, and its
        error waits for ``commit()``, whose caller fails the appends at or past the log
        end it left. An append now would take those offsets again, and the lost appends'
        answers would then point at its records: every append is refused until then."""
        raise StorageError(
            f"{self.topic}-{self.partition}: not appended: a failed write took back staged "
            f"batches, whose loss is not told yet ({self._commit_error})")

    def commit(self) -> StorageError | None:
        """Write the batches staged by ``append_as_leader(defer=True)`` (one writev).

        Returns the StorageError that lost them, here or in an earlier implicit
        write (a read, a roll, a flush), after the log was put back as it was
        before them: those appends must be answered as failed.
        """
        lost = self.commit_lost()
        return None if lost is None else lost[0]

    def commit_lost(self) -> tuple[StorageError, int] | None:
        """``commit()``, with the log end the failed write left when it failed: the
        appends it lost were at or past it (the log end now may differ: a truncation,
        a follower's reset since)."""
        active = self.segments[-1] if self.segments else None
        if active is not None and active.staged_bytes:
            try:
                active.write_staged()
            except StorageError:
                pass  # recorded by _staged_written
        error = self._commit_error
        if error is None:
            return None
        self._commit_error = None
        return error, self._lost_from

    @property
    def staged_bytes(self) -> int:
        return self.segments[-1].staged_bytes if self.segments else 0

    def _staged_written(self, error: StorageError | None) -> None:
        entries, self._staged_entries = self._staged_entries, []
        if error is None:
            return
        lost_ms: dict[int, int] = {}  # producer id -> its lost batches' latest timestamp
        for entry in reversed(entries):  # the staged batches' sequences were never written
            if entry.batches:
                lost = entry.batches.pop()
                pid = entry.producer_id
                lost_ms[pid] = max(lost_ms.get(pid, -1), lost.timestamp_ms)
                # the written batches it held before them were pushed out of its five:
                # its last sequence is unknown now (not an epoch a marker brought)
                entry.sequence_lost = not entry.batches
                if entry.sequence_lost:
                    # dated by its lost batches, or it would expire at the next check
                    # and with it the epoch fence it holds against an older-epoch zombie
                    entry.marker_timestamp = max(entry.marker_timestamp, lost_ms[pid])
        if self._high_watermark > self.log_end_offset:
            self._high_watermark = self.log_end_offset
        self._hw_metadata = None
        self._commit_error = error
        self._lost_from = self.log_end_offset

    def append_as_follower(self, records: bytes | bytearray | memoryview,
                           now_ms: int) -> AppendInfo:
        """Append batches that already carry the leader's offsets, unchanged.

        They must continue the log exactly: a gap or an overlap is refused, as is
        any batch that fails the checks of a leader append's first stage.
        """
        if self._commit_error is not None:
            self._refuse_while_lost()
        headers = check_batches(records)
        if not headers:
            return self._empty_append_info()
        expected = self.log_end_offset
        placed: list[tuple[int, int, int, int, int]] = []
        num_records = 0
        max_timestamp = -1
        max_bytes = self.config.max_message_bytes
        epochs: list[int] = []
        for header in headers:
            if header.base_offset < expected:  # a compacted leader's log skips offsets
                raise UnexpectedAppendOffsetError(
                    f"follower append at offset {header.base_offset} for "
                    f"{self.topic}-{self.partition}, expected {expected} or later")
            if header.last_offset_delta < 0:
                raise InvalidRecordError(f"record batch at byte {header.position} has "
                                         f"lastOffsetDelta {header.last_offset_delta}")
            if header.size > max_bytes:
                raise MessageTooLargeError(
                    f"record batch at byte {header.position} is {header.size} bytes, "
                    f"larger than max.message.bytes {max_bytes}")
            next_offset = header.next_offset
            placed.append((header.base_offset, next_offset, header.position, header.size,
                           header.max_timestamp))
            num_records += header.records_count
            max_timestamp = max(max_timestamp, header.max_timestamp)
            epochs.append(header.partition_leader_epoch)
            expected = next_offset
        total = len(records)
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of records exceed segment.bytes {self.config.segment_bytes}")
        first_offset = headers[0].base_offset
        self._write([records], total, placed, headers, first_offset, expected - 1,
                    max_timestamp, num_records, now_ms, epochs)
        for header in headers:
            if header.is_transactional:
                self._track_transaction(records, header, header.position, header.base_offset,
                                        self.segments[-1].base_offset)
        info = AppendInfo(first_offset, expected - 1, max_timestamp, -1,
                          self._log_start_offset, num_records, total)
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_appended(now_ms, info)
        return info

    def _write(self, pieces: list[bytes | bytearray | memoryview], length: int,
               placed: list[tuple[int, int, int, int, int]], headers: list[BatchHeader],
               first_offset: int, last_offset: int, max_timestamp: int, num_records: int,
               now_ms: int, epochs: tuple[int, ...] | list[int]) -> None:
        self._maybe_roll(length, first_offset, last_offset, max_timestamp, now_ms)
        cache = self.epoch_cache
        if len(epochs) == 1:
            if epochs[0] != cache.latest_epoch:
                cache.assign(epochs[0], first_offset)
        else:
            for (base, *_rest), epoch in zip(placed, epochs, strict=True):
                if epoch != cache.latest_epoch:
                    cache.assign(epoch, base)
        self.segments[-1].append(pieces, length, placed)
        for header, (base, _next, _pos, _size, max_ts) in zip(headers, placed, strict=True):
            if header.producer_id >= 0 and header.is_control:
                self.producer_state.update_marker(header.producer_id, header.producer_epoch,
                                                  base, max_ts)
            elif header.producer_id >= 0:
                self.producer_state.update(header.producer_id, header.producer_epoch,
                                           BatchMetadata(header.base_sequence,
                                                         header.last_sequence, base,
                                                         base + header.last_offset_delta,
                                                         max_ts))
        self._unflushed_messages += num_records

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool,
                       coordinator_epoch: int, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Write a commit or abort marker (WriteTxnMarkers) for one producer.

        A marker older than the producer's epoch is refused (INVALID_PRODUCER_EPOCH);
        a marker for a producer with no open transaction here is written all the
        same (a retried marker) and changes nothing. On a LogAppendTime topic the
        marker is stamped with the append time like any batch the leader appends, as
        Kafka's LogValidator does (it kept CreateTime).
        """
        if self._commit_error is not None:
            self._refuse_while_lost()
        self.producer_state.check_marker_epoch(producer_id, producer_epoch)
        offset = self.log_end_offset
        batch = bytearray(control_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                        now_ms))
        [header] = check_batches(batch)
        append_time = now_ms if self.config.message_timestamp_type == LOG_APPEND_TIME else None
        head, rest = leader_header(memoryview(batch), header, offset, leader_epoch, append_time)
        size = len(batch)
        max_ts = header.max_timestamp if append_time is None else append_time
        placed = [(offset, offset + 1, 0, size, max_ts)]
        self._write([head, rest], size, placed, [header], offset, offset, max_ts,
                    1, now_ms, (leader_epoch,))
        self._track_transaction(batch, header, 0, offset, self.segments[-1].base_offset)
        info = AppendInfo(offset, offset, max_ts, -1 if append_time is None else append_time,
                          self._log_start_offset, 1, size)
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush_appended(now_ms, info)
        return info

    def _empty_append_info(self) -> AppendInfo:
        leo = self.log_end_offset
        return AppendInfo(-1, leo - 1, -1, -1, self._log_start_offset, 0, 0)

    def _duplicate_append_info(self, meta: BatchMetadata) -> AppendInfo:
        log_append = self.config.message_timestamp_type == LOG_APPEND_TIME
        return AppendInfo(
            first_offset=meta.first_offset,
            last_offset=meta.last_offset,
            max_timestamp_ms=meta.timestamp_ms,
            log_append_time_ms=meta.timestamp_ms if log_append else -1,
            log_start_offset=self._log_start_offset,
            num_records=meta.last_offset - meta.first_offset + 1,
            size_in_bytes=0,
            duplicate=True,
        )

    # ------------------------------------------------------------------ roll

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int,
                    now_ms: int) -> None:
        # The fast path's "no roll due" (append_as_leader's inline twin, and
        # _batch_fast.c log_append) mirrors this rule; tests/core/test_log_append_fast.py
        # compares C and the twin: change all three together.
        active = self.segments[-1]
        if active.size == 0:
            return
        config = self.config
        if active.rolls_on_batch_time:
            waited_ms = max_timestamp - active.rolling_timestamp_ms
        else:
            waited_ms = now_ms - active.rolling_timestamp_ms
        if (active.size + size > config.segment_bytes
                or waited_ms > config.segment_ms
                or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
                or active.index_full):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> int:
        """Start a new active segment at the LEO (unless the active one is empty).

        The finished segment is fsynced and its indexes trimmed, so the recovery
        point reaches the roll point and a crash never rescans it. Returns the
        active segment's base.
        """
        active = self.segments[-1]
        if active.size == 0:
            return active.base_offset
        self.flush(now_ms)
        active.seal()
        segment = self._segment_object(active.next_offset, now_ms)
        segment.activate()
        self.segments.append(segment)
        self._bases.append(segment.base_offset)
        self._hw_metadata = None
        return segment.base_offset

    # ------------------------------------------------------------------ read

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_batch: bool = True, *, region_min_bytes: int | None = None) -> ReadInfo:
        """Whole batches from the one segment holding ``fetch_offset``.

        Up to ``max_bytes``, but at least one whole batch when ``min_one_batch``
        (as Kafka does since KIP-74). Batches ending at or after ``max_offset``
        (the HW, for consumers) are left out. Raises OffsetOutOfRangeError for
        an offset outside [log_start_offset, log_end_offset].

        With ``region_min_bytes`` set, a range of at least that many bytes comes
        back as ``ReadInfo.region`` (a descriptor the caller owns; the records
        are not read) and ``records`` is empty; smaller ranges are read. Where
        the batches end is found from the index and batch headers alone.
        """
        leo = self.log_end_offset
        if fetch_offset < self._log_start_offset or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is out of range for {self.topic}-{self.partition}: "
                f"log start {self._log_start_offset}, log end {leo}")
        slot = bisect_right(self._bases, fetch_offset) - 1
        segment = self.segments[slot]
        while ((fetch_offset >= segment.next_offset or not segment.size)  # gaps: cleaning
               and slot + 1 < len(self.segments)):
            slot += 1
            segment = self.segments[slot]
        start, _ = segment.find_position(fetch_offset)
        if slot + 1 < len(self.segments):
            self._used_indexes(segment)
        metadata = LogOffsetMetadata(fetch_offset, segment.base_offset, start)
        limit = segment.size
        if max_offset is not None and max_offset < segment.next_offset:
            if max_offset == self._high_watermark:
                hw = self.high_watermark_metadata
                if hw.segment_base_offset == segment.base_offset:
                    limit = hw.relative_position_in_segment
                else:
                    limit = segment.find_position(max_offset)[0]
            else:
                limit = segment.find_position(max_offset)[0]
        available = limit - start
        if available <= 0 or max_bytes < 0:
            return ReadInfo(b"", metadata, self._high_watermark, self._log_start_offset, leo)
        if region_min_bytes is not None:
            return self._read_region(segment, start, available, max_bytes, min_one_batch,
                                     region_min_bytes, metadata, leo)
        if available <= max_bytes:
            # The range ends on a batch boundary (segment end or a batch start).
            data: bytes | memoryview = segment.read(start, available)
        else:
            # At least the 12-byte log overhead, so the first batch's size is known.
            chunk = segment.read(start, max(max_bytes, 12))
            whole = segment.whole_batches_length(chunk, start) if max_bytes >= 12 else 0
            if 0 < whole == len(chunk):
                data = chunk
            elif whole > 0:
                data = memoryview(chunk)[:whole]
            elif min_one_batch:
                size = int.from_bytes(chunk[8:12], "big", signed=True) + 12
                data = segment.read(start, min(size, available))
            else:
                data = b""
        return ReadInfo(data, metadata, self._high_watermark, self._log_start_offset, leo)

    def offset_after(self, start: LogOffsetMetadata, length: int) -> int:
        """The offset that follows ``length`` bytes of whole batches read at ``start``: the
        next batch's base offset, or the segment's next offset at its end (for counting
        the records a read handed out without reading them)."""
        slot = bisect_right(self._bases, start.segment_base_offset) - 1
        if slot < 0 or self.segments[slot].base_offset != start.segment_base_offset:
            return start.message_offset
        segment = self.segments[slot]
        end = start.relative_position_in_segment + length
        if end >= segment.size:
            return segment.next_offset
        head = segment.read(end, 8)
        return int.from_bytes(head[:8], "big") if len(head) == 8 else segment.next_offset

    def _read_region(self, segment: LogSegment, start: int, available: int, max_bytes: int,
                     min_one_batch: bool, region_min_bytes: int, metadata: LogOffsetMetadata,
                     leo: int) -> ReadInfo:
        if available <= max_bytes:
            length = available  # ends on a batch boundary (segment end or a batch start)
        else:
            length = segment.whole_batches_end(start, start + max_bytes) - start
            if length == 0 and min_one_batch:
                length = min(segment.batch_size_at(start), available)
        if length <= 0:
            return ReadInfo(b"", metadata, self._high_watermark, self._log_start_offset, leo)
        if length >= region_min_bytes:
            try:
                region = segment.region(start, length)
            except OSError:
                pass  # no descriptor left: the bytes themselves, below
            else:
                return ReadInfo(b"", metadata, self._high_watermark, self._log_start_offset,
                                leo, region)
        return ReadInfo(segment.read(start, length), metadata, self._high_watermark,
                        self._log_start_offset, leo)

    # -------------------------------------------------------------- timestamps

    def offset_for_timestamp(self, timestamp_ms: int,
                             below_log_start: bool = False) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms``.

        At or above the log start, unless ``below_log_start``: the records of the segments
        still held below it count too (ListOffsets' max timestamp, as Kafka's
        UnifiedLog.fetchOffsetByTimestamp reads every segment for it).

        The time index leads to the batch where the search starts; the first
        batch whose max timestamp reaches the target is found from headers
        alone, then its records are read (decompressed, as Kafka does: a topic
        with compression.type compresses every batch), up to the first that
        qualifies; a batch none of whose records does is passed, as Kafka's
        FileRecords.searchForTimestamp. A batch that inflates too far or does not
        decode answers its base offset and max timestamp. Returns None if no
        record is that recent.
        """
        passed: tuple[int, int] | None = None
        floor = -1 if below_log_start else self._log_start_offset
        for segment in self.segments:
            if segment.max_timestamp_ms < timestamp_ms:
                continue
            start = segment.position_for_timestamp(timestamp_ms)
            if segment is not self.segments[-1]:
                self._used_indexes(segment)
            for header in segment.iter_headers(start, segment.size):
                if header.max_timestamp < timestamp_ms:
                    continue
                if header.next_offset <= floor:
                    continue
                if header.is_log_append_time:  # there every record has the max
                    return max(header.base_offset, floor), header.max_timestamp
                found = self._first_record_at(segment, header, timestamp_ms, floor)
                if found is not None:
                    return found
                # none of its records qualifies (the client's header max is above them,
                # or they lie below the log start): on to the next batch, as Kafka
                if passed is None:
                    passed = max(header.base_offset, floor), header.max_timestamp
        # Only batches whose header claims the time and none of whose records has it: the
        # first of them answers by its header (ListOffsets' max timestamp, -3, asks for
        # a header's max; a non-empty log answers it)
        return passed

    def _first_record_at(self, segment: LogSegment, header: BatchHeader,
                         timestamp_ms: int, floor: int) -> tuple[int, int] | None:
        """The first record of this batch at or after ``timestamp_ms`` and ``floor`` (the
        log start, or -1), as (offset, timestamp); a batch that cannot be read answers its
        base offset and max timestamp (a damaged batch, which an append without a codec or
        bounds never walks, must not make the shard fail the request)."""
        raw = segment.read(header.position, header.size)
        try:
            for record_offset, record_ts in iter_record_timestamps(raw, header, 0):
                if not header.base_offset <= record_offset <= header.last_offset:
                    # a client's offset delta outside its batch (kept as sent): not a
                    # record this batch's offsets name
                    raise CorruptMessageError(f"a record's offset {record_offset} lies "
                                              f"outside its batch")
                if record_ts >= timestamp_ms and record_offset >= floor:
                    return record_offset, record_ts
        except CorruptMessageError:
            return max(header.base_offset, floor), header.max_timestamp
        return None

    # -------------------------------------------------------------- truncation

    def truncate_to(self, offset: int, now_ms: int = 0) -> bool:
        """Remove every batch holding an offset >= ``offset`` (follower truncation).

        A batch straddling ``offset`` goes entirely. Returns True if anything was
        removed. Below the log start this becomes truncate_fully_and_start_at.
        """
        if offset >= self.log_end_offset:
            # As Kafka: an epoch this node started as leader without appending to it
            # (entry at the log end) would make it look diverged forever; drop it.
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            gone = self.segments.pop()
            self._forget_indexes(gone)
            gone.delete()
            self.txn_index.drop_segment(gone.base_offset)
            self._bases.pop()
        self._forget_indexes(self.segments[-1])
        self.segments[-1].truncate_to(offset)  # the active segment from now on
        leo = self.log_end_offset
        if leo < self._log_start_offset:
            # The batch holding ``offset`` also held the log start: nothing valid is left.
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        self._high_watermark = min(self._high_watermark, leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._hw_metadata = None
        self.generation += 1
        self.epoch_cache.truncate_from_end(leo)
        delete_snapshots_after(self.dir, leo)
        self._rebuild_producer_state(now_ms)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int = 0) -> None:
        """Drop everything; the log restarts empty at ``offset`` (a follower far behind)."""
        self._replace_all_segments(offset, now_ms)
        self._log_start_offset = offset
        self._high_watermark = offset
        self._recovery_point = offset
        self._hw_metadata = None
        self.epoch_cache.clear()
        self.producer_state.clear()
        self.txn_index.clear()
        delete_snapshots_after(self.dir, -1)

    def _replace_all_segments(self, offset: int, now_ms: int) -> None:
        self.generation += 1
        for segment in self.segments:
            segment.delete()
        self._open_indexes.clear()
        segment = self._segment_object(offset, now_ms)
        segment.activate()
        self.segments = [segment]
        self._bases = [offset]

    # --------------------------------------------------------------- retention

    def delete_old_segments(self, now_ms: int, retention: bool = True) -> int:
        """Delete whole old segments past retention.ms / retention.bytes or below the
        log start; returns how many went.

        Only segments wholly below the high watermark go. If every segment
        qualifies, the log rolls first so an empty active segment remains.
        Retention applies only with cleanup.policy "delete" (and ``retention``);
        segments below the log start always go.
        """
        config = self.config
        retention = retention and config.delete
        size_excess = (self.size_in_bytes - config.retention_bytes
                       if retention and config.retention_bytes >= 0 else -1)
        deletable = 0
        for i, segment in enumerate(self.segments):
            is_last = i + 1 == len(self.segments)
            upper = self.log_end_offset if is_last else self.segments[i + 1].base_offset
            if is_last and segment.size == 0:
                break
            if self._high_watermark < upper:
                break
            below_start = not is_last and upper <= self._log_start_offset
            expired = (retention and config.retention_ms >= 0
                       and now_ms - segment.max_timestamp_ms > config.retention_ms)
            too_big = size_excess >= 0 and size_excess - segment.size >= 0
            if not (below_start or expired or too_big):
                break
            if too_big:
                size_excess -= segment.size
            deletable += 1
        if not deletable:
            return 0
        if deletable == len(self.segments):
            self.roll(now_ms)
        for segment in self.segments[:deletable]:
            self._forget_indexes(segment)
            segment.delete()
            self.txn_index.drop_segment(segment.base_offset)
        del self.segments[:deletable]
        del self._bases[:deletable]
        self._log_start_offset = max(self._log_start_offset, self.segments[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        self._hw_metadata = None
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state.remove_before(self._log_start_offset)
        return deletable

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """producer.id.expiration.ms's periodic check (Kafka's removeExpiredProducers):
        forget producers idle that long with no open transaction; the ids that went."""
        if self.producer_id_expiration_ms is None:
            return []
        return self.producer_state.remove_expired(now_ms, self.producer_id_expiration_ms)

    def increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: records below ``offset`` are gone for readers (the segments
        wholly below it are deleted by the caller's next delete_old_segments).

        Raises OffsetOutOfRangeError past the high watermark, as Kafka; an offset at
        or below the current log start changes nothing (returns False).
        """
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic}-{self.partition} to {offset}: "
                f"the high watermark is {self._high_watermark}")
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._recovery_point = max(self._recovery_point, offset)
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.remove_before(offset)
        return True

    # ---------------------------------------------------------------- cleaning

    def cleanable_segments(self) -> list[tuple[int, int, int, int]]:
        """(base offset, size, next offset, max timestamp) of every segment but the
        active one: what the log cleaner may read (they no longer change)."""
        return [(s.base_offset, s.size, s.next_offset, s.max_timestamp_ms)
                for s in self.segments[:-1]]

    def replace_cleaned_segments(self, staging: str, old: list[tuple[int, int]],
                                 new_bases: list[int], generation: int, now_ms: int,
                                 after_step: Callable[[str], None] | None = None,
                                 dropped_aborts: Collection[int] = ()) -> None:
        """Swap the segments ``old`` ((base, size), consecutive, not the active one) for
        the cleaned ones in the staging directory (see segment_swap).

        ``dropped_aborts``: the offsets of the ABORT markers the pass dropped (past their
        delete horizon, no record of theirs left); their aborted entries go with them.

        Raises SwapRefusedError, changing nothing, if the log moved on meanwhile
        (a truncation, retention or DeleteRecords took or changed a segment).
        Runs in the owner's thread: a few renames and fsyncs, then the new
        segments are opened (their indexes checked, not rebuilt).
        """
        if generation != self.generation:
            raise SwapRefusedError("the log was truncated since the cleaning started")
        bases = [b for b, _size in old]
        first = bisect_right(self._bases, bases[0]) - 1 if bases else -1
        current = self.segments[first:first + len(old)] if first >= 0 else []
        if (len(current) != len(old) or first + len(old) >= len(self.segments)
                or [(s.base_offset, s.size) for s in current] != list(old)):
            raise SwapRefusedError("the cleaned segments changed or went meanwhile")
        manifest = SwapManifest(staging, tuple(bases), tuple(new_bases))
        missing = missing_staging_files(self.dir, manifest, txn_index=False)
        if missing:
            raise SwapRefusedError(f"cleaned file {missing[0]} is missing")
        # Each new segment's .txnindex comes from this log's own index, written here
        # (the cleaner is told only the aborted ranges it needs; its report stays small)
        stage_txn_indexes(self.dir, staging,
                          self.txn_index.cleaned_entries(bases, list(new_bases),
                                                         dropped_aborts))
        for segment in current:
            self._forget_indexes(segment)
            segment.close(trim=False)
        commit_swap(self.dir, manifest, after_step)
        self.txn_index.replace_segments(bases, list(new_bases), dropped_aborts)
        fresh = []
        for base in new_bases:
            segment = self._segment_object(base, now_ms)
            segment.load_clean(self._recovery_point)
            segment.seal()  # indexes rebuilt by a failed check are trimmed, as on load
            fresh.append(segment)
        self.segments[first:first + len(old)] = fresh
        self._bases = [s.base_offset for s in self.segments]
        self._hw_metadata = None

    def update_config(self, config: LogConfig) -> None:
        """New topic settings take effect at once: the next append checks the new
        segment size, the next retention pass the new limits and policy."""
        self.config = config

    # ------------------------------------------------------------------ flush

    def flush(self, now_ms: int) -> None:
        """fsync every segment holding offsets at or above the recovery point.

        Raises FlushFailedError if the fsync fails, and from then on (``flush_failed``
        set) every call raises it without trying: the recovery point no longer moves. A
        failed write of the staged batches (before the fsync) is a plain StorageError,
        not a failed flush: the log was put back, and flushes go on."""
        failed = self.flush_failed
        if failed is not None:
            raise FlushFailedError(
                f"{self.topic}-{self.partition}: not flushed: an earlier flush failed "
                f"({failed}); what follows offset {self._recovery_point} is not "
                "known to be on disk", failed.segment, failed.errno)
        leo = self.log_end_offset
        if self._recovery_point < leo:
            first = max(bisect_right(self._bases, self._recovery_point) - 1, 0)
            active = self.segments[-1]
            if active.staged_bytes:
                active.write_staged()  # fails as a write (the log put back), not a flush
            for segment in self.segments[first:]:
                try:
                    segment.flush()
                except StorageError as exc:
                    cause = exc.__cause__
                    self.flush_failed = FlushFailedError(
                        f"{self.topic}-{self.partition}: {exc}", segment.log_path.name,
                        cause.errno if isinstance(cause, OSError) else None)
                    raise self.flush_failed from exc
        self._recovery_point = leo
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.ms has passed since the last flush and data is waiting."""
        # log_end_offset and config, inline: this runs for every produce
        if (self._recovery_point < self.segments[-1].next_offset
                and now_ms - self._last_flush_ms >= self._config.flush_ms):
            self.flush(now_ms)
            return True
        return False

    # ------------------------------------------------------------- lifecycle

    def close(self, now_ms: int = 0) -> None:
        """Flush, snapshot the producer state (spares a scan on open), close files
        (the active segment's indexes trimmed, as Kafka's).

        A log whose flush failed (now or before) is closed as a crash leaves it
        (``close_without_flush``): its recovery point stays where the last good flush
        left it, and the reopen scans from there. The failure of a flush now is raised
        after that."""
        if self.closed:
            return
        if self.flush_failed is not None:
            self.close_without_flush()
            return
        try:
            self.flush(now_ms)
        except StorageError:
            if self.flush_failed is not None:
                self.close_without_flush()
            raise
        # Even an empty state (every producer expired): the open then starts from it
        # instead of replaying the whole log, as Kafka's takeSnapshot. The open deletes
        # every snapshot, so none is at this log end yet.
        if self.producer_state.producers or self.log_end_offset > self._log_start_offset:
            write_snapshot(self.dir, self.log_end_offset, self.producer_state)
        for segment in self.segments:
            segment.close()
        self.closed = True

    def close_without_flush(self) -> None:
        """Close the files as a crash would leave them (tests and error paths): the
        active segment's indexes stay preallocated."""
        for segment in self.segments:
            segment.close(trim=False)
        self.closed = True

    def delete(self) -> Path | None:
        """Close and remove the partition's directory (DeleteTopics).

        The directory is first set aside (``set_aside``), so a crash mid-delete leaves a
        ``-delete`` directory that the log dir removes instead of a half log. A failed
        rename raises with the log as it was (open, in its directory); a failed close
        after it raises DeletedNotClosedError. Returns the ``-delete`` directory if its
        removal failed (to try again), else None.
        """
        aside = set_aside(self.dir) if self.dir.exists() else None
        try:
            self.close_without_flush()
        except Exception as exc:
            if aside is None:
                raise
            left = None if remove_set_aside(aside) else aside
            raise DeletedNotClosedError(
                f"{self.topic}-{self.partition} was set aside as {aside.name}, but closing "
                f"its files failed: {exc!r}", left) from exc
        return None if aside is None or remove_set_aside(aside) else aside

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, log_start={self._log_start_offset}, "
                f"hw={self._high_watermark}, leo={self.log_end_offset}, "
                f"segments={len(self.segments)})")


DELETE_SUFFIX = "-delete"


# The longest file name (NAME_MAX on Linux): a set-aside name must fit in it.
MAX_NAME_BYTES = 255


def set_aside_name(partition_dir_name: str) -> str:
    """``<topic>-<partition>.<uuid>-delete`` for a partition directory ``<topic>-<partition>``,
    with the topic cut short as needed to fit in MAX_NAME_BYTES (a topic name may be 249
    characters long, and the suffix takes 41 and more; Kafka cuts it the same way). The
    name ends in ``-delete``, which the log dir removes at start and never opens as a
    partition (the part after its last dash is not a number)."""
    topic, _, partition = partition_dir_name.rpartition("-")
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}".encode()
    room = MAX_NAME_BYTES - len(suffix)
    # a multi-byte character cut in two is dropped whole
    prefix = os.fsencode(topic)[:room].decode(errors="ignore")
    return prefix + suffix.decode()


def set_aside(directory: Path) -> Path:
    """Rename a deleted partition's directory to a name of its own ending in ``-delete``
    (``set_aside_name``), which no log opens and the log dir removes at start, and make
    the rename durable. Raises OSError if it cannot be renamed (the directory is left as
    it was)."""
    aside = directory.with_name(set_aside_name(directory.name))
    os.rename(directory, aside)
    try:
        fsync_dir(directory.parent)
    except OSError:
        pass  # renamed all the same: a crash may bring the name back, deleted again then
    return aside


def remove_set_aside(aside: Path) -> bool:
    """Remove a directory ``set_aside`` renamed; False if some of it is still there."""
    try:
        shutil.rmtree(aside)
    except FileNotFoundError:
        pass
    except OSError:
        return not aside.exists()
    return True
