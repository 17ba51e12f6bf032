"""The simulated disk of the partition logs: what a crash keeps is what was fsynced.

The logs run on real files, in a directory of the run's own; only the
durability of their bytes is simulated, at the one call the log code makes
to make them durable, ``os.fsync``. While a :class:`SimDisk` is active,
``os.fsync`` of a file under its root records the file's size as durable
(by inode, so a checkpoint's temp file keeps its record when renamed) and
returns without a real flush; every other fsync is the real one. A file's
record goes when the file does: ``os.unlink``/``os.remove`` of its last name,
or ``os.rename``/``os.replace`` onto it (which ``Path.unlink``,
``Path.replace`` and ``shutil.rmtree`` call) drop it while the disk is active.
Some file systems (ext4) hand a deleted file's inode number to the next file
at once: kept, the record gave that new file the dead one's durable size, and
which files shared a number hung on what else used the file system, not on
the seed.

At a node's crash the node's partition files keep their durable bytes and
lose the rest, except that some keep a torn tail: a seeded prefix of the
bytes written after the last fsync (a write the disk had partly done),
possibly cut in the middle of a record batch. The logs' open files are
closed as a dying process's would be, without a flush.

A failing disk (``fail_next_fsync``): the next fsync of a partition's log file
under a node's data directory fails with EIO, and the bytes written to that file
since its last good fsync are gone (a failed writeback whose pages the kernel
dropped: what a reopen reads ends where the disk has it).
"""

from __future__ import annotations

import errno
import os
import random
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

PARTITION_DIR = re.compile(r".+-\d+$")


@dataclass
class DiskStats:
    fsyncs: int = 0
    crashes: int = 0
    bytes_lost: int = 0
    torn_tails: int = 0
    fsyncs_failed: int = 0


class SimDisk:
    def __init__(self, root: Path, rng: random.Random, torn_ratio: float = 0.5) -> None:
        self.root = str(root.resolve())
        self.rng = rng
        self.torn_ratio = torn_ratio
        self.durable: dict[tuple[int, int], int] = {}  # (device, inode) -> durable size
        self.stats = DiskStats()
        self._real_fsync: Any = None
        self._real: dict[str, Any] = {}   # os.unlink/remove/rename/replace while active
        self.failing: list[str] = []  # data directories whose next log fsync fails
        # told the data directory and the file of each fsync made to fail, when it fails
        self.on_fsync_failed: Callable[[str, str], None] | None = None

    # ---------------------------------------------------------------- fsync
    def __enter__(self) -> SimDisk:
        self._real_fsync = os.fsync
        os.fsync = self._fsync
        self._real = {"unlink": os.unlink, "remove": os.remove, "rename": os.rename,
                      "replace": os.replace}
        os.unlink = self._unlink
        os.remove = self._remove
        os.rename = self._rename
        os.replace = self._replace
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        os.fsync = self._real_fsync
        os.unlink = self._real["unlink"]
        os.remove = self._real["remove"]
        os.rename = self._real["rename"]
        os.replace = self._real["replace"]

    # ------------------------------------------------------ files that go
    def _forget(self, path: Any, dir_fd: int | None) -> None:
        """The file at ``path`` loses its last name: its inode is free for the next file."""
        if not self.durable:
            return
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except (OSError, TypeError, ValueError):
            return   # gone already, or not a path: the real call says what is wrong
        if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1:
            self.durable.pop((st.st_dev, st.st_ino), None)

    def _unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._forget(path, dir_fd)
        self._real["unlink"](path, dir_fd=dir_fd)

    def _remove(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._forget(path, dir_fd)
        self._real["remove"](path, dir_fd=dir_fd)

    def _renamed_over(self, src: Any, dst: Any, src_dir_fd: int | None,
                      dst_dir_fd: int | None) -> None:
        # the file renamed keeps its record (a checkpoint's temp file); the one it
        # replaces goes, unless it is the same file
        try:
            same = os.stat(src, dir_fd=src_dir_fd, follow_symlinks=False)
            there = os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
        except (OSError, TypeError, ValueError):
            return
        if (same.st_dev, same.st_ino) != (there.st_dev, there.st_ino):
            self._forget(dst, dst_dir_fd)

    def _rename(self, src: Any, dst: Any, *, src_dir_fd: int | None = None,
                dst_dir_fd: int | None = None) -> None:
        self._renamed_over(src, dst, src_dir_fd, dst_dir_fd)
        self._real["rename"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def _replace(self, src: Any, dst: Any, *, src_dir_fd: int | None = None,
                 dst_dir_fd: int | None = None) -> None:
        self._renamed_over(src, dst, src_dir_fd, dst_dir_fd)
        self._real["replace"](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def _fsync(self, fd: Any) -> None:
        fileno = fd if isinstance(fd, int) else fd.fileno()
        try:
            path = os.readlink(f"/proc/self/fd/{fileno}")
        except OSError:
            path = ""
        if not path.startswith(self.root):
            self._real_fsync(fd)
            return
        st = os.fstat(fileno)
        failing = next((d for d in self.failing if path.startswith(d + os.sep)), None)
        if failing is not None and path.endswith(".log") and stat.S_ISREG(st.st_mode) \
                and PARTITION_DIR.match(os.path.basename(os.path.dirname(path))):
            self.failing.remove(failing)
            self.stats.fsyncs_failed += 1
            durable = min(self.durable.get((st.st_dev, st.st_ino), 0), st.st_size)
            self.stats.bytes_lost += st.st_size - durable
            os.truncate(fileno, durable)
            if self.on_fsync_failed is not None:
                self.on_fsync_failed(failing, path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if stat.S_ISREG(st.st_mode):
            self.stats.fsyncs += 1
            self.durable[(st.st_dev, st.st_ino)] = st.st_size

    def fail_next_fsync(self, data_dir: Path) -> None:
        """The next fsync of a partition log file under ``data_dir`` fails (EIO) and loses
        that file's bytes written since its last good fsync."""
        self.failing.append(str(Path(data_dir).resolve()))

    # ---------------------------------------------------------------- crash
    def crash(self, data_dir: Path, shards: list[Any]) -> None:
        """The node owning ``data_dir`` died: close its logs unflushed, then lose what
        was not durable in its partition directories."""
        self.stats.crashes += 1
        for shard in shards:
            for state in getattr(shard, "partitions", {}).values():
                try:
                    state.log.close_without_flush()
                except Exception:
                    pass
        for part_dir in sorted(Path(data_dir).iterdir()):
            if not part_dir.is_dir() or not PARTITION_DIR.match(part_dir.name):
                continue
            for path in sorted(part_dir.iterdir()):
                if path.is_file():
                    self._lose(path)

    def _lose(self, path: Path) -> None:
        st = path.stat()
        durable = min(self.durable.get((st.st_dev, st.st_ino), 0), st.st_size)
        unsynced = st.st_size - durable
        if unsynced <= 0:
            return
        keep = durable
        if self.rng.random() < self.torn_ratio:
            keep += self.rng.randint(0, unsynced)
            self.stats.torn_tails += 1
        self.stats.bytes_lost += st.st_size - keep
        os.truncate(path, keep)
