"""LogDir.read_only: what processes 1.. of a broker (num.processes > 1) open their
shards' logs from, while process 0 holds the dir: the checkpoints, nothing written."""

from __future__ import annotations

from pathlib import Path

from actors.core.checkpoint import write_offset_checkpoint
from actors.core.log_dir import CLEAN_SHUTDOWN_FILE, LogDir


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in path.rglob("*")}


def test_read_only_reads_the_checkpoints_and_writes_nothing(tmp_path: Path) -> None:
    write_offset_checkpoint(tmp_path / "replication-offset-checkpoint", {("t", 1): 7})
    write_offset_checkpoint(tmp_path / "recovery-point-offset-checkpoint", {("t", 1): 9})
    write_offset_checkpoint(tmp_path / "log-start-offset-checkpoint", {("t", 1): 2})
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    (tmp_path / "t-0.abc-delete").mkdir()  # LogDir.open would remove it
    before = snapshot(tmp_path)
    for clean in (True, False):
        log_dir = LogDir.read_only(tmp_path, clean)
        assert log_dir.had_clean_shutdown is clean
        assert log_dir.high_watermarks == {("t", 1): 7}
        assert log_dir.recovery_points == {("t", 1): 9}
        assert log_dir.log_start_offsets == {("t", 1): 2}
    assert snapshot(tmp_path) == before  # the marker and the -delete dir are still there


def test_read_only_of_a_new_dir_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "not-yet"
    log_dir = LogDir.read_only(path, False)
    assert (log_dir.high_watermarks, log_dir.recovery_points, log_dir.log_start_offsets) == (
        {}, {}, {})
    assert not path.exists()
