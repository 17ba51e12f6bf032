"""The log dir lock: one holder at a time, the holder named, released by the kernel at exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from actors.core.dir_lock import LOCK_FILE, DirLock, DirLockedError, read_holder_pid


def test_second_lock_is_refused_naming_the_holder_until_released(tmp_path: Path) -> None:
    d = tmp_path / "data"
    first = DirLock.acquire(d)
    assert read_holder_pid(d) == os.getpid()
    with pytest.raises(DirLockedError) as info:
        DirLock.acquire(d)  # a second open file description: flock refuses it in-process too
    assert info.value.holder_pid == os.getpid()
    assert f"pid {os.getpid()}" in str(info.value.strerror)
    assert str(d) in str(info.value.strerror)
    first.release()
    assert not first.held
    DirLock.acquire(d).release()


def test_lock_of_a_killed_process_is_free(tmp_path: Path) -> None:
    d = tmp_path / "data"
    code = ("import time; from pathlib import Path; from actors.core.dir_lock import DirLock; "
            f"DirLock.acquire(Path({str(d)!r})); print('locked', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockedError) as info:
            DirLock.acquire(d)
        assert info.value.holder_pid == child.pid
    finally:
        child.kill()
        child.wait()
    lock = DirLock.acquire(d)  # SIGKILL leaves no stale lock
    assert (d / LOCK_FILE).read_text().strip() == str(os.getpid())
    lock.release()
