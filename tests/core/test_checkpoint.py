"""Checkpoint files: Kafka's text format, atomic writes, errors naming file and line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.core.checkpoint import (
    CheckpointError,
    read_epoch_checkpoint,
    read_offset_checkpoint,
    write_epoch_checkpoint,
    write_offset_checkpoint,
)
from actors.core.log_epoch_cache import LeaderEpochCache
from wire.errors import ErrorCode


def test_offset_checkpoint_text_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    write_offset_checkpoint(path, {("b-topic", 1): 7, ("a", 0): 42})
    assert path.read_text() == "0\n2\na 0 42\nb-topic 1 7\n"
    assert read_offset_checkpoint(path) == {("a", 0): 42, ("b-topic", 1): 7}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()


def test_empty_and_missing_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epoch_checkpoint(path, [(0, 0), (3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert read_epoch_checkpoint(path) == [(0, 0), (3, 120)]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("", 1, "missing version line"),
        ("0\n1\nt 0 5", 3, "file does not end with a newline"),
        ("1\n0\n", 1, "unsupported version '1'"),
        ("0\n", 2, "missing count line"),
        ("0\nx\n", 2, "count 'x' is not an integer"),
        ("0\n-1\n", 2, "negative count"),
        ("0\n2\nt 0 5\n", 4, "count line says 2 entries, found 1"),
        ("0\n1\nt 0 5\nt 1 6\n", 4, "count line says 1 entries, found 2"),
        ("0\n2\nt 0 5\nt 1\n", 4, "expected 3 space-separated fields"),
        ("0\n1\nt zero 5\n", 3, "partition 'zero' is not an integer"),
        ("0\n1\nt 0 5x\n", 3, "offset '5x' is not an integer"),
        ("0\n1\nt  0 5\n", 3, "expected 3 space-separated fields"),
    ],
)
def test_bad_checkpoint_names_file_and_line(tmp_path: Path, text: str, line: int,
                                            reason: str) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    assert str(info.value).startswith(f"{path}: line {line}: {reason}")
    assert info.value.line == line and info.value.path == path
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR


def test_non_utf8_checkpoint_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CheckpointError, match="line 1: file is not UTF-8"):
        read_offset_checkpoint(path)


def test_bad_epoch_checkpoint_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n3\n")
    with pytest.raises(CheckpointError, match="line 3: expected 2 space-separated fields"):
        read_epoch_checkpoint(path)


def test_write_replaces_stale_tmp(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    (tmp_path / "cp.tmp").write_text("garbage from a crash")
    write_offset_checkpoint(path, {("t", 0): 1})
    assert read_offset_checkpoint(path) == {("t", 0): 1}
    assert os.listdir(tmp_path) == ["cp"]


# -- leader epoch cache ------------------------------------------------------


def test_epoch_cache_assign_and_end_offsets(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later offset: nothing new
    assert cache.assign(3, 10)
    assert cache.assign(5, 20)
    assert cache.latest_epoch == 5
    assert cache.end_offset_for(5, 33) == (5, 33)
    assert cache.end_offset_for(3, 33) == (3, 20)
    assert cache.end_offset_for(4, 33) == (3, 20)  # unknown epoch between: floor's epoch
    assert cache.end_offset_for(0, 33) == (0, 0)  # below every epoch
    assert cache.end_offset_for(6, 33) == (-1, -1)  # above every epoch
    assert cache.end_offset_for(-1, 33) == (-1, -1)
    assert LeaderEpochCache(tmp_path).entries == [(1, 0), (3, 10), (5, 20)]


def test_epoch_cache_epoch_for_offset(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.epoch_for_offset(0) == -1  # empty
    cache.assign(1, 4)
    cache.assign(3, 10)
    cache.assign(5, 20)
    assert cache.epoch_for_offset(3) == -1  # below every epoch
    assert [cache.epoch_for_offset(o) for o in (4, 9, 10, 19, 20, 99)] == [1, 1, 3, 3, 5, 5]
    cache.truncate_from_end(20)
    assert cache.epoch_for_offset(20) == 3


def test_epoch_cache_assign_removes_non_monotonic_entries(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(4, 10)
    cache.assign(3, 8)  # an older epoch at a smaller offset replaces the newer entry
    assert cache.entries == [(1, 0), (3, 8)]
    cache.assign(3, 5)  # same epoch, earlier start: moved back
    assert cache.entries == [(1, 0), (3, 5)]


def test_epoch_cache_truncation(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(15)
    assert cache.entries == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    assert LeaderEpochCache(tmp_path).entries == [(2, 12)]
    cache.clear()
    assert LeaderEpochCache(tmp_path).entries == []
