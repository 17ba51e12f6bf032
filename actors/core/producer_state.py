"""Idempotent producer state: per producer id, its epoch and last five batches.

This is what lets a retried Produce be answered with the offsets of the
original append instead of writing the records twice. The rules follow
Kafka's ProducerAppendInfo (2.x and later):

* an epoch lower than the known one is refused (INVALID_PRODUCER_EPOCH);
* a batch whose first and last sequence equal one of the last five batches of
  the same epoch is a duplicate: it is not written again, and the append
  answers with the original offsets;
* a new epoch of a known producer must start at sequence 0, and so must the first
  batch of an epoch a marker brought (the coordinator fencing the producer: the
  entry has that epoch and no sequence yet);
* within an epoch, a batch must start right after the last sequence
  (sequences wrap from 2**31-1 to 0), otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer with no state at all (new, or whose batches were all deleted by
  retention) is accepted at any sequence, as Kafka has done since 2.x rather
  than answering UNKNOWN_PRODUCER_ID;
* an entry whose last write (batch or marker) is producer.id.expiration.ms older
  than the clock, with no open transaction, expires (Kafka's
  removeExpiredProducers): the producer is then unknown again.

The state is rebuilt from the log on load; a snapshot written on clean close
spares the full scan.
"""

from __future__ import annotations

import json
import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from actors.core.checkpoint import write_atomically
from actors.core.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from wire.errors import ErrorCode, KafkaError

MAX_CACHED_BATCHES = 5
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_MAX_SEQUENCE = 0x7FFFFFFF
_ANY_SEQUENCE = -2  # check_batches: the entry's sequence is lost, any goes on from it


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where one producer batch landed, enough to answer its retry."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    # Offset of the producer's last commit/abort marker of this epoch (-1: none). A
    # marker that bumped the epoch (the coordinator fencing the producer) leaves an
    # entry with no batch: this offset keeps it until retention passes the marker.
    marker_offset: int = -1
    # That marker's timestamp (its batch's max timestamp, as written): with the last
    # batch's, what producer.id.expiration.ms measures from. An entry whose batches a
    # failed group commit took back (sequence_lost) has the lost batches' latest here.
    marker_timestamp: int = -1
    # A failed group commit took back every batch the entry held (partition_log's
    # _staged_written): its last sequence is lost, so any goes on from it, as for a
    # producer with no state. An entry with no batch otherwise has an epoch a marker
    # brought, whose first batch must be 0. The next batch recorded clears it.
    # Only ever True with no batches, so the C fast path (it needs batches) never takes it.
    sequence_lost: bool = False
    # The coordinator epoch of the producer's last commit/abort marker here (-1: none yet):
    # Kafka's ProducerStateEntry.coordinatorEpoch, kept across the producer's epochs as
    # Kafka keeps it; DescribeProducers answers it.
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        """The timestamp of the producer's last write here, batch or marker (Kafka's
        lastTimestamp: the batch's max timestamp as appended, or the marker's)."""
        if self.marker_offset > self.last_offset or not self.batches:
            return self.marker_timestamp
        return self.batches[-1].timestamp_ms

    @property
    def last_write_offset(self) -> int:
        """The offset of the producer's last batch or marker in the log (-1: none)."""
        return max(self.last_offset, self.marker_offset)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


# The fast path's "a known producer's next batch" (partition_log's inline twin, and
# _batch_fast.c log_append, which leave the wrap to 0 to the general path) mirrors this;
# tests/core/test_log_append_fast.py compares the two.
def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _MAX_SEQUENCE)


class ProducerStateManager:
    """Producer entries of one partition; owned by its PartitionLog."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction (the partition's
        # TransactionIndex shares this dict; snapshots carry it)
        self.ongoing_txns: dict[int, int] = {}

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(header.producer_epoch, header.base_sequence,
                                    header.last_sequence)

    def check_batches(self, headers: list[BatchHeader]) -> None:
        """Check epochs and sequences of a request's batches, in order, before any write.

        Several batches of one producer in one request are checked against each
        other through a pending (epoch, last sequence) per producer.
        """
        pending: dict[int, tuple[int, int]] = {}
        for header in headers:
            if not header.has_producer_id:
                continue
            pid = header.producer_id
            entry = self.producers.get(pid)
            if pid in pending:
                known_epoch, last_seq = pending[pid]
            elif entry is not None:
                known_epoch, last_seq = entry.producer_epoch, entry.last_seq
                if entry.sequence_lost:
                    last_seq = _ANY_SEQUENCE
            else:
                known_epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
            epoch, first_seq = header.producer_epoch, header.base_sequence
            if known_epoch != NO_PRODUCER_EPOCH and epoch < known_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} has epoch {epoch}, older than the current epoch "
                    f"{known_epoch}")
            if epoch != known_epoch:
                if first_seq != 0 and known_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} starts epoch {epoch} at sequence {first_seq}, "
                        f"a new epoch must start at 0")
            elif (known_epoch != NO_PRODUCER_EPOCH and last_seq != _ANY_SEQUENCE
                  and not _in_sequence(last_seq, first_seq)):
                # As Kafka's checkSequence: an epoch a marker brought has no sequence
                # yet (NO_SEQUENCE, -1), so only 0 is next.
                raise OutOfOrderSequenceError(
                    f"producer {pid} sent sequence {first_seq}, expected "
                    f"{0 if last_seq == _MAX_SEQUENCE else last_seq + 1}")
            pending[pid] = (epoch, header.last_sequence)

    def update(self, producer_id: int, producer_epoch: int, meta: BatchMetadata) -> None:
        """Record an appended batch (leader, follower, or a rebuild from the log)."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            # A new epoch forgets the old epoch's batches: they can no longer be retried.
            entry = ProducerStateEntry(producer_id, producer_epoch, coordinator_epoch=(
                -1 if entry is None else entry.coordinator_epoch))
            self.producers[producer_id] = entry
        entry.batches.append(meta)
        entry.sequence_lost = False

    def update_marker(self, producer_id: int, producer_epoch: int, offset: int,
                      timestamp: int) -> None:
        """A commit/abort marker at ``offset`` stamped ``timestamp``: it may carry a
        newer epoch (a fenced producer), never a sequence, so the cached batches stay for
        retries of the same epoch."""
        entry = self.producers.get(producer_id)
        if entry is None or entry.producer_epoch < producer_epoch:
            entry = ProducerStateEntry(producer_id, producer_epoch, coordinator_epoch=(
                -1 if entry is None else entry.coordinator_epoch))
            self.producers[producer_id] = entry
        if entry.producer_epoch == producer_epoch and offset >= entry.marker_offset:
            entry.marker_offset = offset
            entry.marker_timestamp = timestamp

    def set_coordinator_epoch(self, producer_id: int, producer_epoch: int,
                              coordinator_epoch: int) -> None:
        """The coordinator epoch a marker of ``producer_epoch`` carried (its control
        record's value), once the marker is recorded (``update_marker``)."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.producer_epoch == producer_epoch:
            entry.coordinator_epoch = coordinator_epoch

    def check_marker_epoch(self, producer_id: int, producer_epoch: int) -> None:
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than the "
                f"current epoch {entry.producer_epoch}")

    def update_from_header(self, header: BatchHeader, first_offset: int) -> None:
        if header.has_producer_id and header.is_control:
            self.update_marker(header.producer_id, header.producer_epoch, first_offset,
                               header.max_timestamp)
        elif header.has_producer_id:
            self.update(header.producer_id, header.producer_epoch, BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset,
                first_offset + header.last_offset_delta, header.max_timestamp))

    def remove_before(self, log_start_offset: int) -> None:
        """Forget producers whose last batch and marker are gone (retention moved the log
        start). A producer known only by a marker that bumped its epoch stays while the
        marker does (it is what fences the older epoch), or until it expires
        (``remove_expired``)."""
        for pid in [p for p, e in self.producers.items()
                    if e.last_write_offset < log_start_offset]:
            del self.producers[pid]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle ``expiration_ms`` (producer.id.expiration.ms) or more:
        their last write's timestamp that far before ``now_ms`` and no open transaction
        here, as Kafka's isProducerExpired. Returns the ids that went."""
        ongoing = self.ongoing_txns
        gone = [pid for pid, e in self.producers.items()
                if pid not in ongoing and now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()

    # -- snapshots --------------------------------------------------------

    def to_json(self) -> bytes:
        data: dict[str, dict[str, object]] = {}
        for pid, e in self.producers.items():
            value: dict[str, object] = {
                "epoch": e.producer_epoch,
                "batches": [[m.first_seq, m.last_seq, m.first_offset, m.last_offset,
                             m.timestamp_ms] for m in e.batches],
                "marker": e.marker_offset,
                "marker_ts": e.marker_timestamp,
            }
            if e.sequence_lost:
                value["lost"] = True
            if e.coordinator_epoch >= 0:
                value["coord"] = e.coordinator_epoch
            data[str(pid)] = value
        for pid, first in self.ongoing_txns.items():
            data.setdefault(str(pid), {"epoch": -1, "batches": []})["txn"] = first
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes, snapshot_offset: int = 0,
                  written_ms: int = -1) -> ProducerStateManager:
        """The state a snapshot taken at ``snapshot_offset`` (written at ``written_ms``)
        holds. A snapshot written before markers' offsets were kept places a marker-only
        entry's marker just below the snapshot (where it was at the latest); one written
        before their timestamps were kept dates a marker at the snapshot's writing (the
        latest it can be). One written before a lost sequence was kept ("lost") has the
        lost entry as one with neither a batch nor a marker; a lost entry undated (written
        before it was dated by its lost batches) is dated at the snapshot's writing. One
        written before the coordinator epoch was kept ("coord") has -1 (not known) until
        the producer's next marker (the markers below it are not scanned again)."""
        manager = cls()
        for pid_text, value in json.loads(raw).items():
            pid = int(pid_text)
            if "txn" in value:
                manager.ongoing_txns[pid] = int(value["txn"])
            epoch = int(value["epoch"])
            marker = int(value.get("marker", -1 if value["batches"] else snapshot_offset - 1))
            marker_ts = int(value.get("marker_ts", written_ms))
            lost = bool(value.get("lost", not value["batches"] and marker < 0))
            if lost and marker_ts < 0:
                # written before a lost entry was dated by its lost batches: dated at the
                # snapshot's writing, or it would expire at the first check
                marker_ts = written_ms
            for first_seq, last_seq, first_offset, last_offset, ts in value["batches"]:
                manager.update(pid, epoch,
                               BatchMetadata(first_seq, last_seq, first_offset, last_offset, ts))
            if epoch >= 0 and (marker >= 0 or not value["batches"]):
                manager.update_marker(pid, epoch, marker, marker_ts)
            if epoch >= 0 and lost:
                manager.producers[pid].sequence_lost = True
            if epoch >= 0 and "coord" in value:
                manager.producers[pid].coordinator_epoch = int(value["coord"])
        return manager


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for name in os.listdir(directory):
        match = _SNAPSHOT_RE.match(name)
        if match:
            offsets.append(int(match.group(1)))
    return sorted(offsets)


def write_snapshot(directory: Path, offset: int, state: ProducerStateManager) -> None:
    """Snapshot the state of the log prefix below ``offset``; older snapshots go."""
    write_atomically(snapshot_path(directory, offset), state.to_json())
    for old in list_snapshots(directory):
        if old != offset:
            snapshot_path(directory, old).unlink(missing_ok=True)


def delete_snapshots_after(directory: Path, offset: int) -> None:
    for snap in list_snapshots(directory):
        if snap > offset:
            snapshot_path(directory, snap).unlink(missing_ok=True)


def load_latest_snapshot(directory: Path, max_offset: int) -> tuple[int, ProducerStateManager]:
    """The newest usable snapshot at or below ``max_offset`` as (offset, state).

    A snapshot that does not parse is deleted: it is only a shortcut, the log
    itself is the truth, so the caller scans from the returned offset (0 and
    an empty state when there is none).
    """
    for snap in reversed(list_snapshots(directory)):
        path = snapshot_path(directory, snap)
        if snap > max_offset:
            path.unlink(missing_ok=True)
            continue
        try:
            return snap, ProducerStateManager.from_json(path.read_bytes(), snap,
                                                        path.stat().st_mtime_ns // 1_000_000)
        except (ValueError, KeyError, TypeError, OSError):
            path.unlink(missing_ok=True)
    return 0, ProducerStateManager()
