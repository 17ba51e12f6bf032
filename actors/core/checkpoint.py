"""Checkpoint files in Kafka's text format, written so they are never torn.

Format: a version line (``0``), a count line, then one entry per line with
fields separated by single spaces. Offset checkpoints (replication, recovery
point, log start) hold ``topic partition offset``; the leader epoch
checkpoint holds ``epoch start_offset``.

A write goes to ``<file>.tmp``, is fsynced, renamed over the file, and the
directory is fsynced, so after a crash the file is either the old or the new
version. A file that does not parse raises :class:`CheckpointError` naming
the file and line: silently reading it as empty would lose offsets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from wire.errors import StorageError

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


class CheckpointError(StorageError):
    """A checkpoint file exists but does not parse."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}: line {line}: {reason}")
        self.path = path
        self.line = line


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: tmp file, fsync, rename, fsync the dir."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _render(lines: list[str]) -> bytes:
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def _parse_lines(path: Path, text: str, fields: int) -> list[list[str]]:
    """Split a checkpoint into entries of ``fields`` fields, checking every line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    else:
        # A file not ending in a newline was cut short: name the last line.
        raise CheckpointError(path, max(len(lines), 1), "file does not end with a newline")
    if not lines:
        raise CheckpointError(path, 1, "missing version line")
    if lines[0] != str(CHECKPOINT_VERSION):
        raise CheckpointError(path, 1, f"unsupported version {lines[0]!r}, expected "
                                       f"{CHECKPOINT_VERSION}")
    if len(lines) < 2:
        raise CheckpointError(path, 2, "missing count line")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(path, 2, f"count {lines[1]!r} is not an integer") from None
    if count < 0:
        raise CheckpointError(path, 2, f"negative count {count}")
    entries = lines[2:]
    if len(entries) != count:
        # Name the first line that is missing or extra.
        raise CheckpointError(path, 3 + min(len(entries), count),
                              f"count line says {count} entries, found {len(entries)}")
    out: list[list[str]] = []
    for index, line in enumerate(entries):
        parts = line.split(" ")
        if len(parts) != fields or any(p == "" for p in parts):
            raise CheckpointError(path, index + 3,
                                  f"expected {fields} space-separated fields, got {line!r}")
        out.append(parts)
    return out


def _to_int(path: Path, line: int, text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CheckpointError(path, line, f"{what} {text!r} is not an integer") from None


def _read_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise CheckpointError(path, 1, "file is not UTF-8 text") from None


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}``; a missing file is empty (a new log dir)."""
    text = _read_text(path)
    if text is None:
        return {}
    result: dict[tuple[str, int], int] = {}
    for index, (topic, partition, offset) in enumerate(_parse_lines(path, text, 3)):
        line = index + 3
        key = (topic, _to_int(path, line, partition, "partition"))
        result[key] = _to_int(path, line, offset, "offset")
    return result


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Atomically write ``topic partition offset`` lines."""
    lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in
             sorted(offsets.items())]
    write_atomically(path, _render(lines))


def read_epoch_checkpoint(path: Path) -> list[tuple[int, int]]:
    """``[(epoch, start_offset)]`` in file order; a missing file is empty."""
    text = _read_text(path)
    if text is None:
        return []
    result: list[tuple[int, int]] = []
    for index, (epoch, offset) in enumerate(_parse_lines(path, text, 2)):
        line = index + 3
        result.append((_to_int(path, line, epoch, "epoch"), _to_int(path, line, offset, "offset")))
    return result


def write_epoch_checkpoint(path: Path, entries: Iterable[tuple[int, int]]) -> None:
    """Atomically write ``epoch start_offset`` lines."""
    write_atomically(path, _render([f"{epoch} {offset}" for epoch, offset in entries]))
