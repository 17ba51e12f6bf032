"""An exclusive lock on a log dir, held for as long as a broker uses it.

Kafka locks each log dir with a ``.lock`` file at start, so that a second
broker on the same directory fails instead of handing out the same offsets
to different records. This is the same: ``flock(LOCK_EX | LOCK_NB)`` on
``<log dir>/.lock``, which the kernel releases when the process ends (a
crash leaves no stale lock). The holder writes its pid into the file, so
the refusal can name it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DirLockedError(OSError):
    """Another process (or another broker in this one) holds the log dir's lock."""

    def __init__(self, path: Path, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid else "another process"
        super().__init__(
            errno.EWOULDBLOCK,
            f"log dir {path} is in use by another broker ({who} holds {path / LOCK_FILE}); "
            f"stop that broker or give this one another data dir (--data-dir / log.dirs)")
        self.path = path
        self.holder_pid = holder_pid


class DirLock:
    """The lock on one log dir; :meth:`acquire` takes it, :meth:`release` gives it back."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, path: Path) -> DirLock:
        """Lock ``path`` (creating it) or raise DirLockedError naming the holder's pid."""
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder_pid(path)
            os.close(fd)
            raise DirLockedError(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)  # closing the descriptor drops the flock


def read_holder_pid(path: Path) -> int | None:
    """The pid written into ``path/.lock`` by its holder, if there is one."""
    try:
        text = (path / LOCK_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
