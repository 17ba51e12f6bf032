"""One log dir: its partition directories, checkpoints and clean-shutdown marker.

Layout (as Kafka's): ``<log dir>/<topic>-<partition>/`` per partition, and in
the log dir itself ``replication-offset-checkpoint`` (high watermarks),
``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``,
plus ``.kafka_cleanshutdown`` while the broker is stopped cleanly.

The marker is removed as soon as the dir is opened, so a crash at any later
point is seen as unclean by the next start and the logs past their recovery
points are scanned. One LogDir serves all partitions of the dir; it keeps
the merged checkpoint entries so that writing the checkpoints for some logs
keeps the entries of the others.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from actors.core.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    read_offset_checkpoint,
    write_atomically,
    write_offset_checkpoint,
)
from actors.core.partition_log import DELETE_SUFFIX, LogConfig, PartitionLog

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

TopicPartition = tuple[str, int]


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` (topics may contain dashes) or None for other names."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


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
        log_dir.high_watermarks = read_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT)
        log_dir.recovery_points = read_offset_checkpoint(
            path / RECOVERY_POINT_OFFSET_CHECKPOINT)
        log_dir.log_start_offsets = read_offset_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
        marker = path / CLEAN_SHUTDOWN_FILE
        log_dir.had_clean_shutdown = marker.exists()
        if log_dir.had_clean_shutdown:
            marker.unlink()
            fsync_dir(path)
        return log_dir

    @classmethod
    def read_only(cls, path: Path, had_clean_shutdown: bool) -> LogDir:
        """The checkpoints as they are on disk, for a process that does not own the dir.

        num.processes > 1: processes 1.. open their shards' logs from this. Nothing is
        written, created or removed (process 0 opened the dir, holds its lock and
        removed the marker already), so ``had_clean_shutdown`` comes from process 0
        (False for a process restarted after it died: its logs are recovered).
        """
        log_dir = cls(path)
        log_dir.high_watermarks = read_offset_checkpoint(path / REPLICATION_OFFSET_CHECKPOINT)
        log_dir.recovery_points = read_offset_checkpoint(
            path / RECOVERY_POINT_OFFSET_CHECKPOINT)
        log_dir.log_start_offsets = read_offset_checkpoint(path / LOG_START_OFFSET_CHECKPOINT)
        log_dir.had_clean_shutdown = had_clean_shutdown
        return log_dir

    def partitions(self) -> list[TopicPartition]:
        """The partitions that have a directory here, sorted."""
        found = []
        for name in os.listdir(self.path):
            if not (self.path / name).is_dir():
                continue
            parsed = parse_partition_dir_name(name)
            if parsed is not None:
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
