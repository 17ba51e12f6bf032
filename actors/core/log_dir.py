"""One log dir: its partition directories, checkpoints and clean-shutdown marker.

Layout (as Kafka's): ``<log dir>/<topic>-<partition>/`` per partition, and in
the log dir itself ``replication-offset-checkpoint`` (high watermarks),
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``,
plus ``.kafka_cleanshutdown`` while the broker is stopped cleanly. Each partition
directory also holds its topic's id (``partition.metadata``, actors/core/topic_id.py):
the shard that opens it deletes a directory of another id (a dead namesake's).

A deleted partition's directory is marked before it is renamed aside
(``delete-pending`` inside it, or, if that cannot be written, a
``delete-pending.<hash>`` record in the log dir naming it): a directory whose
rename failed then stays deleted across a restart. ``open`` completes such
deletes; those it cannot are ``pending_deletes``, never opened as partitions,
and the shards try them again.

The marker is removed as soon as the dir is opened, so a crash at any later
point is seen as unclean by the next start and the logs past their recovery
points are scanned. One LogDir serves all partitions of the dir; it keeps
the merged checkpoint entries so that writing the checkpoints for some logs
keeps the entries of the others.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from actors.core.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TMP_SUFFIX,
    fsync_dir,
    read_offset_checkpoint,
    write_atomically,
    write_offset_checkpoint,
)
from actors.core.partition_log import (
    DELETE_SUFFIX,
    LogConfig,
    PartitionLog,
    remove_set_aside,
    set_aside,
)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
# in a partition directory: it was deleted (its rename aside may have failed)
DELETE_PENDING_MARKER = "delete-pending"
# in the log dir, when the marker could not be written in the partition directory:
# ``delete-pending.<sha1 of the directory's name>``, holding the name (a topic's name may
# be 249 characters long: the name itself could be too long with the prefix)
DELETE_RECORD_PREFIX = "delete-pending."

TopicPartition = tuple[str, int]


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` (topics may contain dashes) or None for other names."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def delete_record_name(topic: str, partition: int) -> str:
    digest = hashlib.sha1(partition_dir_name(topic, partition).encode()).hexdigest()
    return DELETE_RECORD_PREFIX + digest


class DeletesAtOpen:
    """What ``LogDir.open`` found of deletes an earlier process left pending (for the
    caller to log: the core does not)."""

    def __init__(self) -> None:
        self.completed: list[TopicPartition] = []
        # still pending: why, per partition
        self.pending: dict[TopicPartition, str] = {}
        # records that name no partition (``delete-pending.*`` files damaged): kept
        self.damaged: list[str] = []
        # the checkpoints could not be written without the completed deletes (their
        # offsets are skipped all the same: the shards' ``dropped``), or None
        self.checkpoint_error: str | None = None


def _scan_pending_deletes(path: Path, found: DeletesAtOpen) -> set[TopicPartition]:
    """The partitions marked deleted in ``path`` (a marker in their directory, or a
    record in the log dir), whether their directory is still there or not."""
    pending: set[TopicPartition] = set()
    try:
        # sorted: the damaged records are reported in name order, not the filesystem's
        names = sorted(os.listdir(path))
    except FileNotFoundError:  # read_only of a dir not made yet
        return pending
    for name in names:
        full = path / name
        if name.startswith(DELETE_RECORD_PREFIX) and not name.endswith(TMP_SUFFIX) \
                and not full.is_dir():
            try:
                text = full.read_bytes().decode().strip()
            except (OSError, UnicodeDecodeError):
                text = ""
            named = None if "/" in text else parse_partition_dir_name(text)
            # A record is taken only under its own name: one whose content another name
            # hashes to (damaged, or copied by hand) could name a live partition.
            if named is None or delete_record_name(*named) != name:
                found.damaged.append(name)
            else:
                pending.add(named)
            continue
        parsed = parse_partition_dir_name(name)
        if parsed is not None and os.path.lexists(full / DELETE_PENDING_MARKER):
            pending.add(parsed)
    return pending


class LogDir:
    """Checkpoints and discovery for one log dir; see the module docstring."""

    def __init__(self, path: Path) -> None:
        # Use LogDir.open().
        self.path = path
        self.had_clean_shutdown = False
        self.high_watermarks: dict[TopicPartition, int] = {}
        self.recovery_points: dict[TopicPartition, int] = {}
        self.log_start_offsets: dict[TopicPartition, int] = {}
        self._opened: set[TopicPartition] = set()
        # deleted partitions whose directory (or record) is still there: no log opens them
        self.pending_deletes: set[TopicPartition] = set()
        self.deletes_at_open = DeletesAtOpen()
        # records unlinked whose directory fsync has not succeeded yet
        self._unsynced_records: set[TopicPartition] = set()

    @classmethod
    def open(cls, path: Path) -> LogDir:
        """Read the checkpoints and the marker, then remove the marker.

        A checkpoint that does not parse raises CheckpointError (naming file and
        line): starting with lost offsets would be worse than not starting.
        """
        path.mkdir(parents=True, exist_ok=True)
        log_dir = cls(path)
        for name in os.listdir(path):
            if name.endswith(DELETE_SUFFIX) and (path / name).is_dir():
                shutil.rmtree(path / name, ignore_errors=True)
            elif name.startswith(DELETE_RECORD_PREFIX) and name.endswith(TMP_SUFFIX):
                (path / name).unlink(missing_ok=True)  # a record whose write failed
        log_dir.high_watermarks = read_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT)
        log_dir.recovery_points = read_offset_checkpoint(
            path / RECOVERY_POINT_OFFSET_CHECKPOINT)
        log_dir.log_start_offsets = read_offset_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
        log_dir._complete_pending_deletes()
        marker = path / CLEAN_SHUTDOWN_FILE
        log_dir.had_clean_shutdown = marker.exists()
        if log_dir.had_clean_shutdown:
            marker.unlink()
            fsync_dir(path)
        return log_dir

    @classmethod
    def read_only(cls, path: Path, had_clean_shutdown: bool) -> LogDir:
        """The checkpoints as they are on disk, for a process that does not own the dir.

        num.processes > 1: processes 1.. open their shards' logs from this. Opening it
        writes, creates or removes nothing (process 0 opened the dir, holds its lock and
        removed the marker already; a shard of this process writes only its own
        partitions' delete markers through it), so ``had_clean_shutdown`` comes from process 0
        (False for a process restarted after it died: its logs are recovered).
        """
        log_dir = cls(path)
        log_dir.high_watermarks = read_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT)
        log_dir.recovery_points = read_offset_checkpoint(
            path / RECOVERY_POINT_OFFSET_CHECKPOINT)
        log_dir.log_start_offsets = read_offset_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
        log_dir.had_clean_shutdown = had_clean_shutdown
        log_dir.pending_deletes = _scan_pending_deletes(path, log_dir.deletes_at_open)
        return log_dir

    def _complete_pending_deletes(self) -> None:
        """Remove the directories an earlier process marked deleted and could not set
        aside; those that still cannot be are ``pending_deletes``. The checkpoints are
        written without the removed ones at once (a namesake created next must not take
        their offsets)."""
        found = self.deletes_at_open
        for topic, partition in sorted(_scan_pending_deletes(self.path, found)):
            try:
                self.complete_delete(topic, partition)
            except OSError as exc:
                self.pending_deletes.add((topic, partition))
                found.pending[(topic, partition)] = str(exc)
                continue
            self.forget(topic, partition)
            found.completed.append((topic, partition))
        if found.completed:
            try:
                self.checkpoint([])
            except OSError as exc:  # the disk that failed the deletes: start all the same
                found.checkpoint_error = str(exc)

    def mark_delete_pending(self, topic: str, partition: int) -> bool:
        """Make a partition's delete durable before its directory is renamed aside: the
        marker in its directory, or if that fails a record in the log dir. True if it was
        the record (``complete_delete`` removes it); raises OSError if neither could be
        written. Nothing is written for a directory that is not there."""
        directory = self.partition_path(topic, partition)
        if not directory.is_dir():
            return False
        try:
            write_atomically(directory / DELETE_PENDING_MARKER, b"")
            return False
        except OSError:
            write_atomically(self.path / delete_record_name(topic, partition),
                             partition_dir_name(topic, partition).encode() + b"\n")
            return True

    def complete_delete(self, topic: str, partition: int) -> Path | None:
        """Set aside and remove the partition's directory, then its record if any (the
        delete is done only once both are gone). Raises OSError if the directory cannot
        be set aside or the record removed; returns the set-aside directory if its
        removal failed (nothing opens it; ``open`` removes it)."""
        directory = self.partition_path(topic, partition)
        left = None
        if directory.exists():
            aside = set_aside(directory)
            left = None if remove_set_aside(aside) else aside
        self.clear_delete_record(topic, partition)
        return left

    def clear_delete_record(self, topic: str, partition: int) -> None:
        """Remove the partition's record, if there is one; raises OSError if it stays."""
        record = self.path / delete_record_name(topic, partition)
        key = (topic, partition)
        if os.path.lexists(record):
            self._unsynced_records.add(key)
            record.unlink(missing_ok=True)
        if key in self._unsynced_records:  # gone, but perhaps not durably yet: a
            fsync_dir(self.path)  # power loss must not bring it back over a namesake
            self._unsynced_records.discard(key)

    def partitions(self) -> list[TopicPartition]:
        """The partitions that have a directory here, sorted (not those deleted, still
        pending)."""
        found = []
        for name in os.listdir(self.path):
            if not (self.path / name).is_dir():
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is not None and parsed not in self.pending_deletes:
                found.append(parsed)
        return sorted(found)

    def partition_path(self, topic: str, partition: int) -> Path:
        return self.path / partition_dir_name(topic, partition)

    def open_partition(self, topic: str, partition: int, config: LogConfig,
                       now_ms: int) -> PartitionLog:
        """Open (or create) a partition's log with its checkpointed offsets."""
        key = (topic, partition)
        self._opened.add(key)
        return PartitionLog.open(
            self.partition_path(topic, partition), topic, partition, config, now_ms,
            recovery_point=self.recovery_points.get(key, 0),
            log_start_offset=self.log_start_offsets.get(key, 0),
            high_watermark=self.high_watermarks.get(key, 0),
            clean_shutdown=self.had_clean_shutdown,
        )

    def checkpoint(self, logs: Iterable[PartitionLog]) -> None:
        """Write the three checkpoint files with these logs' current offsets."""
        for log in logs:
            key = (log.topic, log.partition)
            self.high_watermarks[key] = log.high_watermark
            self.recovery_points[key] = log.recovery_point
            self.log_start_offsets[key] = log.log_start_offset
        write_offset_checkpoint(self.path / REPLICATION_OFFSET_CHECKPOINT, self.high_watermarks)
        write_offset_checkpoint(self.path / RECOVERY_POINT_OFFSET_CHECKPOINT,
                                self.recovery_points)
        write_offset_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, self.log_start_offsets)

    def forget(self, topic: str, partition: int) -> None:
        """Drop a deleted partition from the checkpoints (written at the next checkpoint)."""
        key = (topic, partition)
        self.high_watermarks.pop(key, None)
        self.recovery_points.pop(key, None)
        self.log_start_offsets.pop(key, None)

    def delete_partition(self, log: PartitionLog) -> None:
        """DeleteTopics for one partition: remove its directory and checkpoint entries."""
        log.delete()
        self.forget(log.topic, log.partition)
        self.checkpoint([])

    def close(self, logs: Iterable[PartitionLog], now_ms: int = 0) -> None:
        """Clean shutdown: flush and close every log, write checkpoints, then the marker.

        After an unclean start the marker is written only if every partition
        of the dir was opened (so recovered) in this run; otherwise a partition
        never opened would later be trusted without its recovery scan. Nor is it
        written if a log's flush had failed (it is closed unflushed: scanned next time),
        nor if a log's close failed: the others still close and the checkpoint is written,
        then the first failure is raised.
        """
        logs = list(logs)
        failed: Exception | None = None
        for log in logs:
            try:
                log.close(now_ms)
            except Exception as exc:  # the others still close, the checkpoint is written
                failed = failed or exc
        self.checkpoint(logs)
        if failed is not None:
            raise failed  # not clean: no marker (the failed log is scanned next time)
        if any(log.flush_failed is not None for log in logs):
            return
        if self.had_clean_shutdown or set(self.partitions()) <= self._opened:
            write_atomically(self.path / CLEAN_SHUTDOWN_FILE, b"")
