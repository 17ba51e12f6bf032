"""Kafka's log cleaner (compaction), as a core the LogCleaner actor drives step by step.

For a log with ``cleanup.policy`` compact, the cleaner keeps the latest record
of each key and drops the older ones, as Kafka's does:

* **Which log.** Every segment but the active one is cleanable up to the
  *first uncleanable offset*: the active segment's base, the last stable offset,
  the checkpointed recovery point (so every gap the cleaner leaves between
  segments lies below it: on load, a gap above it means lost data), and the
  first segment holding records younger than ``min.compaction.lag.ms``. The
  part above the last cleaning (``cleaner-offset-checkpoint``, Kafka's file)
  is *dirty*; the log whose dirty share of bytes is highest, and at least
  ``min.cleanable.dirty.ratio``, is cleaned next. The last stable offset
  (LSO) bounds it, not the high watermark: nothing from the first open
  transaction on is cleaned (its outcome is unknown, as Kafka's
  ``firstUnstableOffset``).
* **The key map.** The dirty segments are read, segment by segment, into a
  map from key (a 16-byte hash, as Kafka's MD5) to its latest offset, up to
  ``log.cleaner.dedupe.buffer.size`` / 24 keys; a segment that would not fit
  ends the pass there (the rest stays dirty for the next one).
* **The copy.** Every segment from the log start to the end of the map is
  rewritten, in groups no larger than a segment, into a staging directory:
  a record stays if it has a key, no later offset of its key is in the map,
  and, for a tombstone (null value), its batch's delete horizon has not passed.
  Batches keep their base offset, last offset
  delta and producer fields (offsets are never reused, a producer's sequence
  numbers stay right); a batch whose records all stay is copied unchanged,
  one that loses some is rebuilt from the kept records' bytes (recompressed
  with its codec), one that loses all is dropped. The last batch of every
  producer id the log knows stays whole, so its idempotent state comes back
  from the log after a restart. The records of an
  aborted transaction (its producer id and an offset in a range of the log's
  in-memory transaction index, which the owner reports: never the directory's
  ``.txnindex`` files, where a file no segment owns may linger) are no key's
  latest and are dropped, as Kafka's cleaner does: read_uncommitted, they
  would otherwise shadow the committed records of their keys, which
  read_committed consumers then lose. Each cleaned segment gets the
  ``.txnindex`` of the abort markers it holds (Kafka's ``cleanedIndex``),
  which the owner writes from its index at the swap and swaps in with it;
  the old segments' files go with them.
* **Delete horizons** (Kafka's KIP-534). A pass that keeps a tombstone in a
  batch without a horizon rewrites the batch with one: the attribute bit
  DELETE_HORIZON_BIT set and its base timestamp the pass's time plus
  ``delete.retention.ms`` (the records' deltas re-encoded, so their own times
  stay). A later pass past the horizon drops the tombstones. So a consumer
  that reads the log within ``delete.retention.ms`` of the cleaning that
  first kept a tombstone sees it, and the horizon, in the batch, survives a
  restart and is the same on every replica that copies the batch. A
  transaction marker (COMMIT or ABORT) is stamped the same way once no record
  of its transaction is left (the pass met none since the producer's previous
  marker): a marker whose records remain stays, or a read_committed reader
  would take aborted records as committed and a reload of the producer state
  would see the transaction still open. Past its horizon it goes, and an
  ABORT's ``.txnindex`` entry with it (the owner drops it at the swap,
  ``SwapPlan.dropped_aborts``). A producer's last batch stays, so does the
  marker after it (its transaction has a batch left); a marker stays for good
  when the producer has no batch since that marker's epoch began (an
  epoch-bumping abort: it holds the epoch a restart must fence with), as
  Kafka's ``isBatchLastRecordOfProducer``. Two harmless divergences from
  Kafka: an ABORT's ``.txnindex`` entry stays until its marker goes (Kafka
  drops it once the transaction has no batch left; the entry over offsets
  with no records changes no read), and an empty control batch (no record)
  is kept whole (Kafka discards it; this cleaner never makes one, it drops a
  marker whole).
* **The swap** is the owner's (actors/core/segment_swap.py,
  ``PartitionLog.replace_cleaned_segments``): the cleaner never touches the
  live segments, it only reads closed ones, which no longer change.

Nothing here reads a clock or takes a lock: ``now_ms`` comes in, and each
``CleaningPass.step`` does a bounded amount of work (``log.cleaner.io.buffer.size``
bytes read), so the actor can answer messages between steps.
"""

from __future__ import annotations

import hashlib
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import crc32c

from actors.core.checkpoint import fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from actors.core.log_segment import LogSegment, log_file_name
from actors.core.partition_log import PartitionLog
from actors.core.record_batch import (
    COMPRESSION_MASK,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    INFLATE_CHECK_MAX_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    decompress_bounded,
    record_codecs,
    record_spans,
    restamp_record,
)
from actors.core.segment_swap import discard_staging, staging_name
from actors.core.transaction_log import CONTROL_ABORT, TransactionLogError, control_type
from actors.core.txn_index import AbortedTxn

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# The most one batch's records inflate to for cleaning (4x the bound of the append's
# checks, INFLATE_CHECK_MAX_BYTES: stored batches passed max.message.bytes compressed)
CLEANER_INFLATE_MAX_BYTES = 4 * INFLATE_CHECK_MAX_BYTES
DEDUPE_ENTRY_BYTES = 24  # Kafka's accounting: a 16-byte hash and an 8-byte offset
_MAX_RELATIVE_OFFSET = 2**31 - 1
_AFTER_CRC = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")


class SegmentInfo(NamedTuple):
    """A closed segment as its owner reports it."""

    base_offset: int
    size: int
    next_offset: int
    max_timestamp_ms: int


@dataclass(frozen=True)
class CleanableLog:
    """What the cleaner needs of one compacted log, reported by the log's owner."""

    topic: str
    partition: int
    directory: Path
    segments: tuple[SegmentInfo, ...]  # every segment but the active one, in order
    active_base_offset: int
    log_start_offset: int
    last_stable_offset: int  # below the high watermark while a transaction is open
    generation: int  # PartitionLog.generation: a truncation since then refuses the swap
    min_cleanable_dirty_ratio: float
    delete_retention_ms: int
    min_compaction_lag_ms: int
    segment_bytes: int
    index_interval_bytes: int
    segment_index_bytes: int
    # per producer id its last batch's last offset (-1: none since its epoch began)
    producer_last_offsets: Mapping[int, int] = field(default_factory=dict)
    # the log's aborted transactions a pass may drop records of (its in-memory index, never
    # the directory's files; see describe_cleanable)
    aborted: tuple[AbortedTxn, ...] = ()
    producer_epochs: Mapping[int, int] = field(default_factory=dict)  # per producer id

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class CleanRange(NamedTuple):
    """A planned cleaning: the map covers [first_dirty, end); segments below ``end`` are
    rewritten."""

    log: CleanableLog
    first_dirty: int
    end: int
    dirty_ratio: float


class CleanerError(Exception):
    """A log cannot be cleaned (its key map would not hold one segment)."""


def first_dirty_offset(log_start_offset: int, active_base_offset: int,
                       checkpointed_dirty: int | None) -> int:
    """Where the dirty part begins: the cleaner's checkpoint, unless the log moved past
    it (then the log start)."""
    if checkpointed_dirty is not None and log_start_offset <= checkpointed_dirty \
            <= active_base_offset:
        return checkpointed_dirty
    return log_start_offset


def describe_cleanable(log: PartitionLog, checkpointed_dirty: int | None = None) -> CleanableLog:
    """The report a compacted log's owner gives the cleaner; ``checkpointed_dirty`` is the
    cleaner's checkpoint of the log.

    Its aborted transactions are those a pass may drop records of: their marker at or
    above the first dirty offset (a transaction ended below it was wholly in a range this
    cleaner already cleaned, its records dropped then), their first offset below the
    active segment and the LSO (nothing is cleaned from there on). So a scan carries the
    aborts since the last cleaning, not every abort the log ever had (markers stay, so
    their entries do): it crosses to the cleaner's thread in one frame."""
    cfg = log.config
    active = log.active_segment_base_offset
    first_dirty = first_dirty_offset(log.log_start_offset, active, checkpointed_dirty)
    return CleanableLog(
        log.topic, log.partition, log.dir,
        tuple(SegmentInfo(*s) for s in log.cleanable_segments()),
        log.active_segment_base_offset, log.log_start_offset, log.last_stable_offset,
        log.generation, cfg.min_cleanable_dirty_ratio, cfg.delete_retention_ms,
        cfg.min_compaction_lag_ms, cfg.segment_bytes, cfg.index_interval_bytes,
        cfg.segment_index_bytes,
        {pid: e.last_offset for pid, e in log.producer_state.producers.items()},
        tuple(log.txn_index.aborted_between(first_dirty,
                                            min(active, log.last_stable_offset))),
        {pid: e.producer_epoch for pid, e in log.producer_state.producers.items()})


# ------------------------------------------------------------------- choosing


def _next_bases(log: CleanableLog) -> list[int]:
    """Where each closed segment's range ends: the next segment's base."""
    if not log.segments:
        return []
    return [*(s.base_offset for s in log.segments[1:]), log.active_base_offset]


def plan(log: CleanableLog, checkpointed_dirty: int | None, recovery_point: int,
         now_ms: int) -> CleanRange | None:
    """The range to clean in ``log`` now, or None when nothing is dirty."""
    first_dirty = first_dirty_offset(log.log_start_offset, log.active_base_offset,
                                     checkpointed_dirty)
    uncleanable = min(log.active_base_offset, log.last_stable_offset, recovery_point)
    lag_horizon = now_ms - log.min_compaction_lag_ms
    end = log.segments[0].base_offset if log.segments else log.active_base_offset
    clean_bytes = dirty_bytes = 0
    for segment, upper in zip(log.segments, _next_bases(log), strict=True):
        if upper > uncleanable or (log.min_compaction_lag_ms > 0
                                   and segment.max_timestamp_ms > lag_horizon):
            break
        end = upper
        if upper <= first_dirty:
            clean_bytes += segment.size
        else:
            dirty_bytes += segment.size
    if end <= first_dirty or dirty_bytes == 0:
        return None
    return CleanRange(log, first_dirty, end, dirty_bytes / (clean_bytes + dirty_bytes))


def choose_filthiest(logs: Iterable[CleanableLog], checkpoints: Mapping[tuple[str, int], int],
                     recovery_points: Mapping[tuple[str, int], int], now_ms: int,
                     skip: Iterable[tuple[str, int]] = ()) -> CleanRange | None:
    """The dirtiest log at or over its ``min.cleanable.dirty.ratio`` (Kafka's choice)."""
    best: CleanRange | None = None
    skipped = set(skip)
    for log in logs:
        if log.key in skipped:
            continue
        found = plan(log, checkpoints.get(log.key), recovery_points.get(log.key, 0), now_ms)
        if found is None or found.dirty_ratio < log.min_cleanable_dirty_ratio:
            continue
        if best is None or found.dirty_ratio > best.dirty_ratio:
            best = found
    return best


# --------------------------------------------------------------- checkpoint


def read_cleaner_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    return read_offset_checkpoint(log_dir / CLEANER_CHECKPOINT)


def write_cleaner_checkpoint(log_dir: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_offset_checkpoint(log_dir / CLEANER_CHECKPOINT, offsets)


# --------------------------------------------------------------- records


def key_hash(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (ms), None if no cleaning set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def rebuilt_batch(header: BatchHeader, raw: bytes, kept: list[Any],
                  encode: Callable[[bytes], bytes] | None, horizon: int | None = None) -> bytes:
    """The batch with only the ``kept`` records (spans into ``raw``, the decompressed
    records section): same base offset, last offset delta, base timestamp, producer
    fields and attributes; new count, max timestamp and CRC.

    With a ``horizon``, the batch gets it (DELETE_HORIZON_BIT, base timestamp) and each
    record's timestamp delta is re-encoded against it, so its own time stays (a
    LogAppendTime batch's records read the max timestamp: theirs stay as they are)."""
    attributes = header.attributes
    if horizon is not None and not header.is_log_append_time:
        base = header.base_timestamp
        records = b"".join(restamp_record(raw, span, base + span.timestamp_delta - horizon)
                           for span in kept)
    else:
        records = b"".join(raw[span.start:span.end] for span in kept)
    base_ts = header.base_timestamp if horizon is None else horizon
    if horizon is not None:
        attributes |= DELETE_HORIZON_BIT
    if not kept:  # an empty batch, as Kafka writes one: no records, so no codec
        attributes &= ~COMPRESSION_MASK
    elif encode is not None:
        records = encode(records)
    if header.is_log_append_time or not kept:
        max_ts = header.max_timestamp
    else:
        max_ts = max(header.base_timestamp + span.timestamp_delta for span in kept)
    after_crc = _AFTER_CRC.pack(attributes, header.last_offset_delta,
                                base_ts, max_ts, header.producer_id,
                                header.producer_epoch, header.base_sequence, len(kept)) + records
    return _HEAD.pack(header.base_offset, 9 + len(after_crc), header.partition_leader_epoch,
                      header.magic, crc32c.crc32c(after_crc)) + after_crc


class _SegmentReader:
    """Whole batches of one closed segment, read with pread a chunk at a time."""

    def __init__(self, path: Path, size: int, chunk: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.size = size
        self.chunk = chunk
        self.position = 0

    def next_batches(self, budget: int) -> list[tuple[BatchHeader, bytes]]:
        out: list[tuple[BatchHeader, bytes]] = []
        taken = 0
        while self.position < self.size and taken < budget:
            want = min(max(self.chunk, HEADER_SIZE), self.size - self.position)
            buf = os.pread(self.fd, want, self.position)
            if len(buf) < HEADER_SIZE:
                raise CleanerError(f"segment ends inside a batch at {self.position}")
            length = HEADER.unpack_from(buf, 0)[1] + LOG_OVERHEAD
            if length > len(buf):
                buf = os.pread(self.fd, length, self.position)
            rel = 0
            while rel + HEADER_SIZE <= len(buf):
                size = HEADER.unpack_from(buf, rel)[1] + LOG_OVERHEAD
                if rel + size > len(buf):
                    break
                header = check_batch(buf, rel, rel + size)
                out.append((header._replace(position=self.position + rel),
                            buf[rel:rel + size]))
                rel += size
            if rel == 0:
                raise CleanerError(f"no whole batch at {self.position}")
            self.position += rel
            taken += rel
        return out

    @property
    def done(self) -> bool:
        return self.position >= self.size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ------------------------------------------------------------------- a pass


@dataclass
class PassStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    markers_dropped: int = 0
    horizons_stamped: int = 0
    keyless_dropped: int = 0
    batches_kept_whole: int = 0


class SwapPlan(NamedTuple):
    """What the owner swaps once a pass is done."""

    staging: str
    old_segments: list[tuple[int, int]]  # (base, size), consecutive
    new_bases: list[int]
    end_offset: int  # the cleaned range's end: the next first dirty offset
    dropped_aborts: tuple[int, ...] = ()  # offsets of the ABORT markers dropped: entries go


class CleaningPass:
    """One cleaning of one log, done in steps of about ``io_bytes`` read each.

    ``step()`` returns True once the cleaned segments are complete (fsynced)
    in the staging directory; ``plan`` then says what to swap. ``abort()``
    removes the staging directory.
    """

    def __init__(self, rng: CleanRange, now_ms: int, map_capacity: int, io_bytes: int,
                 pass_id: int) -> None:
        self.log = rng.log
        self.first_dirty = rng.first_dirty
        self.end = rng.end
        self.now_ms = now_ms
        self.map_capacity = map_capacity
        self.io_bytes = io_bytes
        self.staging = staging_name(pass_id)
        self.stats = PassStats()
        self.offset_map: dict[bytes, int] = {}
        self._segment_map: dict[bytes, int] = {}
        self._codecs = record_codecs()
        self._aborted = aborted_ranges(self.log.aborted)
        infos = self.log.segments
        self._upper = dict(zip([s.base_offset for s in infos], _next_bases(self.log),
                               strict=True))
        self._dirty = [s for s in infos if self._upper[s.base_offset] > self.first_dirty
                       and self._upper[s.base_offset] <= self.end]
        self._phase = "map"
        self._index = 0
        self._reader: _SegmentReader | None = None
        self._to_clean: list[SegmentInfo] = []
        self._out: LogSegment | None = None
        self._new_bases: list[int] = []
        # producers whose transactional records this pass met since their last marker:
        # their next marker ends a transaction with records in the log
        self._txn_records: set[int] = set()
        self._dropped_aborts: list[int] = []
        self.plan: SwapPlan | None = None

    # -- the steps ---------------------------------------------------------------

    def step(self) -> bool:
        if self._phase == "map":
            self._map_step()
            return False
        if self._phase == "write":
            self._write_step()
            return self._phase == "done"
        return True

    def _open(self, segment: SegmentInfo) -> _SegmentReader:
        return _SegmentReader(self.log.directory / log_file_name(segment.base_offset),
                              segment.size, self.io_bytes)

    def _records(self, header: BatchHeader, raw: bytes) -> tuple[bytes, list[Any]] | None:
        """The decompressed records section and its record spans; None if it inflates
        past CLEANER_INFLATE_MAX_BYTES (a small batch may inflate to gigabytes; such a
        batch is kept whole, its keys not cleaned)."""
        body = raw[HEADER_SIZE:]
        codec = header.compression
        if codec:
            inflated = decompress_bounded(codec, body, CLEANER_INFLATE_MAX_BYTES,
                                          header.position)
            if inflated is None:
                return None
            body = inflated
        return body, record_spans(body, header.records_count)

    def _map_step(self) -> None:
        if self._index >= len(self._dirty):
            self._start_writing()
            return
        segment = self._dirty[self._index]
        if self._reader is None:
            self._reader = self._open(segment)
            self._segment_map = {}
        for header, raw in self._reader.next_batches(self.io_bytes):
            self.stats.bytes_read += len(raw)
            if header.is_control or self._is_aborted(header):
                continue
            decoded = self._records(header, raw)
            if decoded is None:
                continue
            for span in decoded[1]:
                offset = header.base_offset + span.offset_delta
                # only the dirty part's records (Kafka's buildOffsetMapForSegment): the
                # first dirty offset may fall inside this segment, and below it the
                # report names no aborts, so an aborted record there would pass for
                # its key's latest and shadow the committed one
                if span.key is not None and offset >= self.first_dirty:
                    self._segment_map[key_hash(span.key)] = offset
        if not self._reader.done:
            return
        self._reader.close()
        self._reader = None
        new_keys = sum(1 for k in self._segment_map if k not in self.offset_map)
        if len(self.offset_map) + new_keys > self.map_capacity:
            if self._index == 0:
                raise CleanerError(
                    f"{self.log.topic}-{self.log.partition}: the segment at "
                    f"{segment.base_offset} has more keys than log.cleaner.dedupe.buffer.size "
                    f"holds ({self.map_capacity} keys at {DEDUPE_ENTRY_BYTES} bytes each)")
            self.end = segment.base_offset  # the rest stays dirty for the next pass
            self._start_writing()
            return
        self.offset_map.update(self._segment_map)
        self._segment_map = {}
        self._index += 1

    def _start_writing(self) -> None:
        self._segment_map = {}
        self._to_clean = [s for s in self.log.segments if self._upper[s.base_offset] <= self.end]
        self.old_segments = [(s.base_offset, s.size) for s in self._to_clean]
        staging = self.log.directory / self.staging
        discard_staging(self.log.directory, self.staging)
        staging.mkdir()
        self._phase = "write"
        self._index = 0
        if self._to_clean:
            self._out = self._new_output(self._to_clean[0].base_offset)

    def _new_output(self, base: int) -> LogSegment:
        out = LogSegment(self.log.directory / self.staging, base, self.log.index_interval_bytes,
                         self.now_ms, self.log.segment_index_bytes)
        out.activate()
        self._new_bases.append(base)
        return out

    def _finish_output(self) -> None:
        if self._out is not None:
            self._out.seal()
            self._out.flush()
            self._out.close(trim=False)
            self.stats.bytes_written += self._out.size
            self._out = None

    def _write_step(self) -> None:
        """Copy the next stretch of the segments to clean into the output segments: one
        after another, a new one started only when the next batch would not fit."""
        if self._index >= len(self._to_clean):
            self._finish_output()
            fsync_dir(self.log.directory / self.staging)
            self.plan = SwapPlan(self.staging, self.old_segments, self._new_bases, self.end,
                                 tuple(self._dropped_aborts))
            self._phase = "done"
            self._release()
            return
        segment = self._to_clean[self._index]
        if self._reader is None:
            self._reader = self._open(segment)
        for header, raw in self._reader.next_batches(self.io_bytes):
            self.stats.bytes_read += len(raw)
            kept = self._filter(header, raw)
            if kept is not None:
                self._write(header, kept)
        if self._reader.done:
            self._reader.close()
            self._reader = None
            self._index += 1

    def _filter(self, header: BatchHeader, raw: bytes) -> bytes | None:
        """The batch to write in place of ``raw``: itself, a rebuilt one, or None.

        A producer's last batch is never dropped: emptied, it stays as a header
        (as Kafka's), so the producer's sequence state comes back from the log.
        """
        if header.is_control:
            return self._filter_marker(header, raw)
        if header.is_transactional:
            self._txn_records.add(header.producer_id)
        last = self.log.producer_last_offsets.get(header.producer_id)
        producers_last = header.producer_id >= 0 and last == header.last_offset
        if self._is_aborted(header):
            self.stats.records_read += header.records_count
            if not producers_last:
                return None
            return rebuilt_batch(header, b"", [], None)
        decoded = self._records(header, raw)
        if decoded is None:
            self.stats.batches_kept_whole += 1
            return raw
        body, spans = decoded
        self.stats.records_read += len(spans)
        horizon = delete_horizon(header)
        expired = horizon is not None and self.now_ms >= horizon
        kept = []
        tombstones = False
        for span in spans:
            offset = header.base_offset + span.offset_delta
            if span.key is None:
                self.stats.keyless_dropped += 1
                continue
            latest = self.offset_map.get(key_hash(span.key))
            if latest is not None and latest > offset:
                continue
            if span.value_is_null:
                if expired:
                    self.stats.tombstones_dropped += 1
                    continue
                tombstones = True
            kept.append(span)
        self.stats.records_kept += len(kept)
        stamp = tombstones and horizon is None  # the first pass that keeps a tombstone
        if len(kept) == len(spans) and not stamp:
            return raw
        if not kept and not producers_last:
            return None
        encode = self._codecs[header.compression][1] if header.compression else None
        if stamp:
            self.stats.horizons_stamped += 1
        return rebuilt_batch(header, body, kept, encode,
                             self.now_ms + self.log.delete_retention_ms if stamp else None)

    def _filter_marker(self, header: BatchHeader, raw: bytes) -> bytes | None:
        """A COMMIT or ABORT marker: kept while records of its transaction are in the log
        (this pass met some since the producer's previous marker: dropped now, they are
        gone from the next pass on, unless one is the producer's last batch, which stays)
        or when it holds its producer's epoch and the producer has no batch since that
        epoch began (an epoch-bumping marker: Kafka's isBatchLastRecordOfProducer); else
        stamped with a delete horizon, and dropped once that has passed (Kafka's
        CleanedTransactionMetadata and the horizon of KIP-534)."""
        pid = header.producer_id
        had_records = pid in self._txn_records
        self._txn_records.discard(pid)
        producers_last = self.log.producer_last_offsets.get(pid) == -1 \
            and self.log.producer_epochs.get(pid) == header.producer_epoch
        horizon = delete_horizon(header)
        if had_records or producers_last or (horizon is not None and self.now_ms < horizon):
            self.stats.batches_kept_whole += 1
            return raw
        body = raw[HEADER_SIZE:]  # control batches are never compressed
        spans = record_spans(body, header.records_count)
        try:
            kind = control_type(spans[0].key) if len(spans) == 1 else None
        except TransactionLogError:
            kind = None
        if kind is None:  # not a transaction marker this cleaner knows: left alone
            self.stats.batches_kept_whole += 1
            return raw
        if horizon is None:
            self.stats.horizons_stamped += 1
            return rebuilt_batch(header, body, spans, None,
                                 self.now_ms + self.log.delete_retention_ms)
        self.stats.markers_dropped += 1
        if kind == CONTROL_ABORT:
            self._dropped_aborts.append(header.base_offset)
        return None

    def _is_aborted(self, header: BatchHeader) -> bool:
        """Whether the batch lies in an aborted transaction of its producer: the last of
        the producer's ranges starting at or below it (they never overlap: a producer
        has one transaction open at a time) must reach it."""
        if not header.is_transactional:
            return False
        ranges = self._aborted.get(header.producer_id)
        if ranges is None:
            return False
        firsts, lasts = ranges
        i = bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= lasts[i]

    def _write(self, header: BatchHeader, batch: bytes) -> None:
        out = self._out
        assert out is not None
        if out.size and (out.index_full or out.size + len(batch) > self.log.segment_bytes
                         or header.last_offset - out.base_offset > _MAX_RELATIVE_OFFSET):
            self._finish_output()
            out = self._out = self._new_output(header.base_offset)
        max_ts = HEADER.unpack_from(batch, 0)[8]  # a rebuilt batch has its own
        out.append([batch], len(batch), [(header.base_offset, header.next_offset, 0,
                                          len(batch), max_ts)])

    def _release(self) -> None:
        """Let go of the key map (up to ``log.cleaner.dedupe.buffer.size``) and the other
        per-pass tables: a pass done or aborted may still be referenced a while."""
        self.offset_map = {}
        self._segment_map = {}
        self._aborted = {}
        self._txn_records = set()

    def abort(self) -> None:
        self._release()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._out is not None:
            self._out.close(trim=False)
            self._out = None
        discard_staging(self.log.directory, self.staging)


def aborted_ranges(aborted: Iterable[AbortedTxn]) -> dict[int, tuple[list[int], list[int]]]:
    """Per producer id, the first offsets and marker offsets of its aborted transactions
    the log's index holds, ordered by first offset (an entry is added with each abort
    marker, so every transaction below the reported LSO is there)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for entry in aborted:
        spans.setdefault(entry.producer_id, []).append(
            (entry.first_offset, entry.last_offset))
    return {pid: ([first for first, _ in ordered], [last for _, last in ordered])
            for pid, ordered in ((pid, sorted(found)) for pid, found in spans.items())}


def map_capacity(dedupe_buffer_bytes: int) -> int:
    """Keys one pass may map: Kafka's 24 bytes per entry."""
    return max(1, dedupe_buffer_bytes // DEDUPE_ENTRY_BYTES)

