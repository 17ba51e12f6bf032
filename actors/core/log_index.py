"""A segment's offset and time indexes: Kafka's ``.index`` and ``.timeindex`` files.

Both are arrays of fixed-size big-endian entries, searched in place through a
memory map, so a retained gigabyte costs page cache (file pages the kernel can
drop), not heap:

* ``.index``: 8-byte entries (offset relative to the segment's base, int32;
  byte position in the ``.log``, int32), one every ``index.interval.bytes``
  of log. actorlog names the *base* offset of the batch at that position
  (Kafka names its last offset): the largest-lower-bound search reads both
  correctly, and a fetch at a batch start then needs no scan at all.
* ``.timeindex``: 12-byte entries (timestamp, int64; relative offset,
  int32), written next to each ``.index`` entry when the segment's largest
  timestamp has grown: (largest timestamp so far, last offset of the batch
  that carries it). Timestamps strictly increase, so every batch before the
  one named by an entry has a smaller max timestamp.

Lifecycle, as Kafka's AbstractIndex: the active segment's files are
preallocated to ``log.index.size.max.bytes`` (sparse) and mapped read-write;
disk blocks are reserved with ``posix_fallocate`` before entries are written
into them, so a full disk is an error on the append instead of a SIGBUS (and
read, so the map's first write into them finds the pages cached: see
``reserve``). On
roll or close the files are trimmed to their entries. A finished segment's
index is mapped read-only on first use only (one of up to a kilobyte is
read into memory instead), and unmapped when the partition log says so (it
keeps a few open), so an idle broker with thousands of segments holds no
mappings for them.

Searches start next to the previous hit (consumers and followers read
forward, so the next lookup lands one or two entries later) and fall back to
halving; Kafka gets the same locality from its "warm section".
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from collections.abc import Callable
from itertools import compress, count, islice
from operator import ge, gt
from pathlib import Path
from typing import TYPE_CHECKING

from actors.core.batch_fast import COMPILED_MODULE
from wire.errors import StorageError

OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DEFAULT_MAX_INDEX_BYTES = 10 * 1024 * 1024  # log.index.size.max.bytes, Kafka's default
NO_TIMESTAMP = -1
ALLOCATE_CHUNK = 64 * 1024  # disk reserved ahead of the entries being written
SMALL_INDEX_BYTES = 1024  # a finished index this small is read and kept, not mapped

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_LITTLE_ENDIAN = sys.byteorder == "little"

Unpack = Callable[[mmap.mmap | bytes, int], tuple[int, ...]]


def _column(raw: bytes, stride: int, field: int, width: int, typecode: str) -> array[int]:
    """One big-endian field of every entry as a native array, without a Python loop."""
    n = len(raw) // stride
    packed = bytearray(n * width)
    for byte in range(width):
        packed[byte::width] = raw[field + byte::stride]
    column = array(typecode)
    column.frombytes(bytes(packed))
    if _LITTLE_ENDIAN:
        column.byteswap()
    return column


def _increasing_prefix(values: array[int], strict: bool) -> int:
    """Length of the longest prefix of ``values`` that increases (strictly or not)."""
    breaks = map(ge if strict else gt, values, islice(values, 1, None))
    return next(compress(count(1), breaks), len(values))


def _last_at_most(buf: mmap.mmap | bytes, entries: int, stride: int, field: int, unpack: Unpack,
                  target: int, start: int) -> int:
    """Slot of the last entry whose key is <= ``target`` (keys increase), or -1.

    Gallops from the slot ``start`` (a guess) towards the answer, doubling the
    step, then halves the range left: O(1) probes for a good guess, O(log n)
    for any.
    """
    start = min(max(start, 0), entries - 1)
    lo_checked = True
    if unpack(buf, start * stride + field)[0] <= target:
        lo, hi = start, entries - 1
        step = 1
        while start + step <= hi:
            probe = start + step
            if unpack(buf, probe * stride + field)[0] > target:
                hi = probe - 1
                break
            lo = probe
            step <<= 1
    else:
        lo, hi = 0, start - 1
        lo_checked = False
        step = 1
        while start - step >= 0:
            probe = start - step
            if unpack(buf, probe * stride + field)[0] <= target:
                lo, lo_checked = probe, True
                break
            hi = probe - 1
            step <<= 1
        if not lo_checked and (hi < 0 or unpack(buf, field)[0] > target):
            return -1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if unpack(buf, mid * stride + field)[0] <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _interpolate(target: int, slot_a: int, key_a: int, slot_b: int, key_b: int) -> int:
    """Where ``target`` falls between two entries if keys grow evenly (they nearly do:
    entries are an index interval apart, batches alike)."""
    if key_b <= key_a:
        return slot_a
    return slot_a + (target - key_a) * (slot_b - slot_a) // (key_b - key_a)


def _read_through(fd: int, position: int, length: int) -> None:
    """Read ``length`` bytes at ``position`` of ``fd`` into the page cache, and drop them."""
    while length > 0:
        got = len(os.pread(fd, min(length, ALLOCATE_CHUNK), position))
        if not got:
            return  # past the end: nothing there to cache
        position += got
        length -= got


# The fields an active segment's append reads and writes (LogSegment.append_one),
# held as slots of a base class: the C one (_batch_fast.IndexCore) where the module
# is built, so the append reaches them without a dictionary lookup, else this twin.
# Both are plain attribute slots; the names and their order match the C ones
# (tests/core/test_segment_core.py checks it).
INDEX_FIELDS = ("base_offset", "entries", "max_entries", "reserved_entries", "_map",
                "last_offset", "last_position", "last_timestamp", "first_entry")


class IndexCorePy:
    """IndexCore's Python twin: the hot fields of a mapped index, as slots."""

    __slots__ = INDEX_FIELDS
    base_offset: int
    entries: int
    max_entries: int
    reserved_entries: int  # entries whose bytes have disk blocks (writable)
    _map: mmap.mmap | None
    last_offset: int
    last_position: int  # offset index only
    last_timestamp: int  # time index only
    first_entry: tuple[int, int] | None  # time index only


if TYPE_CHECKING:
    IndexCore = IndexCorePy
else:
    IndexCore = COMPILED_MODULE.IndexCore if COMPILED_MODULE is not None else IndexCorePy


class _MappedIndex(IndexCore):
    """Fixed-size entries in a file, mapped read-write (active) or read-only (finished)."""

    entry: struct.Struct
    kind: str
    read_whole_up_to = SMALL_INDEX_BYTES

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self.entry.size
        self.entries = 0
        self.writable = False
        self._map = None
        self._copy: bytes | None = None  # a small finished index, read whole
        self._length = 0  # bytes mapped (writable: the preallocated size)
        # Entries whose bytes are known to have disk blocks (writable): appends up to
        # here need no reservation.
        self.reserved_entries = 0
        self._hint = 0

    # -- files and mappings --------------------------------------------------

    def _open(self, flags: int) -> int:
        try:
            return os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.kind} {self.path}: {exc}") from exc

    def _mapped(self) -> mmap.mmap:
        """The mapping, made on first use for a finished segment's index."""
        buf = self._map
        if buf is None:
            fd = self._open(os.O_RDONLY)
            try:
                buf = mmap.mmap(fd, self.entries * self.entry.size, prot=mmap.PROT_READ)
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot map {self.kind} {self.path}: {exc}") from exc
            finally:
                os.close(fd)
            self._map = buf
        return buf

    def _buffer(self) -> mmap.mmap | bytes:
        """The entries of an index that is not mapped: a small one is read whole and
        kept (one ``pread`` costs less than mapping and unmapping it), a larger one
        mapped. Either is held until release()."""
        if self._copy is not None:
            return self._copy
        size = self.entries * self.entry.size
        if size > self.read_whole_up_to:
            return self._mapped()
        fd = self._open(os.O_RDONLY)
        try:
            raw = os.pread(fd, size, 0)
        except OSError as exc:
            raise StorageError(f"cannot read {self.kind} {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        if len(raw) < size:
            raise StorageError(f"{self.kind} {self.path} is shorter than its "
                               f"{self.entries} entries")
        self._copy = raw
        return raw

    @property
    def is_open(self) -> bool:
        """Mapped, or (a small finished one) held in memory."""
        return self._map is not None or self._copy is not None

    def open_writable(self) -> None:
        """Become the active segment's index: preallocate and map read-write.

        Bytes past the entries are zeroed (cut, then extended as a hole), so a
        crash leaves entries followed by zeros, which loading recognizes.
        """
        if self.writable:
            return
        self.release()
        used = self.entries * self.entry.size
        length = max(self.max_entries, self.entries) * self.entry.size
        fd = self._open(os.O_RDWR | os.O_CREAT)
        try:
            os.ftruncate(fd, used)
            os.ftruncate(fd, length)
            self._map = mmap.mmap(fd, length) if length else None
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot map {self.kind} {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self.writable = True
        self._length = length
        self.reserved_entries = self.entries

    def reset(self) -> None:
        """Drop every entry and become writable (the segment is being rebuilt)."""
        if self.writable:
            self.truncate_to_entries(0)
        else:
            self.entries = 0
            self._after_truncate()
            self.open_writable()

    def reserve(self, count: int) -> None:
        """Make sure disk blocks exist for ``count`` more entries (or up to the end).

        Writing into a hole of a mapped file on a full disk kills the process
        with SIGBUS; reserving first turns that into a StorageError before the
        log itself is written.
        """
        size = self.entry.size
        need = (self.entries + count) * size
        done = self.reserved_entries * size
        if need > done and done < self._length:
            end = min(self._length, max(need, done + ALLOCATE_CHUNK))
            fd = self._open(os.O_RDWR)
            try:
                os.posix_fallocate(fd, done, end - done)
                # The same range read (zeros), so its pages are in the page cache when
                # entries go in through the map. Left to the map, the first write fault
                # into a new file took 2-6 ms on ext4 (20-80 ms while the disk was busy):
                # a new segment's first append, on the request path. After this read
                # (~85 us for a chunk, nothing written) that fault takes ~35 us.
                _read_through(fd, done, end - done)
            except OSError as exc:
                raise StorageError(f"cannot grow {self.kind} {self.path}: {exc}") from exc
            finally:
                os.close(fd)
            self.reserved_entries = end // size

    def flush(self) -> None:
        if self.writable and self._map is not None:
            try:
                self._map.flush()
            except OSError as exc:
                raise StorageError(f"cannot flush {self.kind} {self.path}: {exc}") from exc

    def seal(self) -> None:
        """Stop being written: flush, unmap, trim the file to its entries and fsync it."""
        if not self.writable:
            return
        self.flush()
        self._close_map()
        self.writable = False
        self._trim_file()

    def _trim_file(self) -> None:
        used = self.entries * self.entry.size
        fd = self._open(os.O_RDWR)
        try:
            if os.fstat(fd).st_size != used:
                os.ftruncate(fd, used)
            os.fsync(fd)
        except OSError as exc:
            raise StorageError(f"cannot trim {self.kind} {self.path}: {exc}") from exc
        finally:
            os.close(fd)
        self._length = used
        self.reserved_entries = self.entries

    def release(self) -> None:
        """Unmap (or drop the copy of) a finished segment's index, until its next use."""
        if not self.writable:
            self._close_map()

    def _close_map(self) -> None:
        self._copy = None
        if self._map is not None:
            self._map.close()
            self._map = None

    def close(self, trim: bool = True) -> None:
        """Trim (a clean close, as Kafka's) or just unmap (as a crash would leave it)."""
        if self.writable and trim:
            self.seal()
        else:
            self._close_map()
            self.writable = False

    # -- entries -----------------------------------------------------------

    def truncate_to_entries(self, entries: int) -> None:
        """Keep the first ``entries`` entries; the bytes after them are zeroed."""
        if entries >= self.entries:
            return
        size = self.entry.size
        if self.writable and self._map is not None:
            self._map[entries * size:self.entries * size] = bytes((self.entries - entries) * size)
        self.entries = entries
        self._after_truncate()

    def _after_truncate(self) -> None:
        self._hint = 0
        self._load_last()

    def _load_last(self) -> None:
        raise NotImplementedError

    def _read_file(self) -> bytes | None:
        """The whole file, or None if it does not exist."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot open {self.kind} {self.path}: {exc}") from exc
        try:
            size = os.fstat(fd).st_size
            chunks = []
            done = 0
            while done < size:
                chunk = os.pread(fd, size - done, done)
                if not chunk:
                    break
                chunks.append(chunk)
                done += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise StorageError(f"cannot read {self.kind} {self.path}: {exc}") from exc
        finally:
            os.close(fd)

    def _valid_entries(self, raw: bytes) -> int:
        raise NotImplementedError

    def load(self) -> bool:
        """Read a finished file and check it on its own terms; trim trailing zeros.

        False (rebuild from the log) if it is missing, not whole entries, not
        increasing, or anything but zeros follows the increasing entries (an
        index preallocated by a process that crashed). The file is trimmed to
        the entries found, as Kafka trims on close. A file of zeros reads as
        one entry of zeros: only the log can tell whether that entry is real,
        so the segment checks the first entries against its first batch.
        """
        raw = self._read_file()
        if raw is None or len(raw) % self.entry.size:
            return False
        valid = self._valid_entries(raw)
        if valid < 0:
            return False
        used = valid * self.entry.size
        if raw.count(0, used) != len(raw) - used:
            return False
        self.entries = valid
        self._after_truncate_raw(raw)
        if used != len(raw):
            self._trim_file()
        else:
            self._length = used
        return True

    def _after_truncate_raw(self, raw: bytes) -> None:
        raise NotImplementedError


class OffsetIndex(_MappedIndex):
    """``.index``: (relative offset, position) of every ``index.interval.bytes``-th batch."""

    entry = struct.Struct(">ii")
    kind = "offset index"

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self.last_offset = base_offset
        self.last_position = 0
        # The entry found last, as (slot, offset, position): the next lookup is
        # usually just after it, and guessed from it.
        self._near = (0, base_offset, 0)

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def append(self, offset: int, position: int) -> None:
        """Add an entry (offsets and positions increase); a full index skips it."""
        n = self.entries
        buf = self._map
        if n >= self.max_entries or buf is None:
            return
        if n >= self.reserved_entries:
            self.reserve(1)
        self.entry.pack_into(buf, n * 8, offset - self.base_offset, position)
        self.entries = n + 1
        self.last_offset = offset
        self.last_position = position

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base offset, 0)
        if there is none, as Kafka's OffsetIndex.lookup."""
        n = self.entries
        if n == 0:
            return self.base_offset, 0
        buf = self._map if self._map is not None else self._buffer()
        near, near_offset, _ = self._near
        if near >= n:
            near, near_offset = 0, self.base_offset
        if offset >= near_offset:
            guess = _interpolate(offset, near, near_offset, n - 1, self.last_offset)
        else:
            guess = _interpolate(offset, 0, self.base_offset, near, near_offset)
        slot = _last_at_most(buf, n, 8, 0, _I32.unpack_from, offset - self.base_offset, guess)
        if slot < 0:
            return self.base_offset, 0
        relative, position = self.entry.unpack_from(buf, slot * 8)
        found = self.base_offset + relative
        self._near = (slot, found, position)
        return found, position

    def position_at_most(self, position: int) -> int:
        """The last indexed position at or below ``position`` (0 if none)."""
        n = self.entries
        if n == 0:
            return 0
        buf = self._map if self._map is not None else self._buffer()
        near, _, near_position = self._near
        if near >= n:
            near, near_position = 0, 0
        if position >= near_position:
            guess = _interpolate(position, near, near_position, n - 1, self.last_position)
        else:
            guess = _interpolate(position, 0, 0, near, near_position)
        slot = _last_at_most(buf, n, 8, 4, _I32.unpack_from, position, guess)
        if slot < 0:
            return 0
        relative, found = self.entry.unpack_from(buf, slot * 8)
        self._near = (slot, self.base_offset + relative, found)
        return found

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries at or past ``position`` (a cut of the log there)."""
        n = self.entries
        if n == 0 or self.last_position < position:
            return
        buf = self._map if self._map is not None else self._buffer()
        self.truncate_to_entries(_last_at_most(buf, n, 8, 4, _I32.unpack_from, position - 1,
                                               n - 1) + 1)

    def all_entries(self) -> list[tuple[int, int]]:
        """Every entry as (offset, position): for tests and tools, not the hot path."""
        if self.entries == 0:
            return []
        buf = self._map if self._map is not None else self._buffer()
        return [(self.base_offset + rel, pos)
                for rel, pos in self.entry.iter_unpack(buf[:self.entries * 8])]

    def _valid_entries(self, raw: bytes) -> int:
        relative = _column(raw, 8, 0, 4, "i")
        positions = _column(raw, 8, 4, 4, "i")
        if relative and (relative[0], positions[0]) != (0, 0):
            return -1  # the batch at position 0 (the segment's base offset) is always indexed
        return min(_increasing_prefix(relative, True), _increasing_prefix(positions, True))

    def _after_truncate_raw(self, raw: bytes) -> None:
        self._hint = 0
        self._near = (0, self.base_offset, 0)
        if self.entries:
            relative, self.last_position = self.entry.unpack_from(raw, (self.entries - 1) * 8)
            self.last_offset = self.base_offset + relative
        else:
            self.last_offset, self.last_position = self.base_offset, 0

    def _load_last(self) -> None:
        self._near = (0, self.base_offset, 0)
        if self.entries:
            buf = self._map if self._map is not None else self._buffer()
            relative, self.last_position = self.entry.unpack_from(buf, (self.entries - 1) * 8)
            self.last_offset = self.base_offset + relative
        else:
            self.last_offset, self.last_position = self.base_offset, 0


class TimeIndex(_MappedIndex):
    """``.timeindex``: (largest timestamp so far, offset of the batch holding it)."""

    entry = struct.Struct(">qi")
    kind = "time index"

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self.last_timestamp = NO_TIMESTAMP
        self.last_offset = base_offset
        self.first_entry = None

    @property
    def is_full(self) -> bool:
        """Full one entry early: the last slot is kept for the entry written on roll."""
        return self.entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, roll: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp grew; skipped when full, except
        for the entry written when the segment rolls or closes (Kafka's rule)."""
        if timestamp <= self.last_timestamp:
            return
        n = self.entries
        buf = self._map
        if n >= self.max_entries - (0 if roll else 1) or buf is None:
            return
        if n >= self.reserved_entries:
            self.reserve(1)
        self.entry.pack_into(buf, n * 12, timestamp, offset - self.base_offset)
        if n == 0:
            self.first_entry = (timestamp, offset)
        self.entries = n + 1
        self.last_timestamp = timestamp
        self.last_offset = offset

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is at or below ``timestamp``
        (the base offset if none): every batch before it is older than the target."""
        n = self.entries
        if n == 0:
            return self.base_offset
        buf = self._map if self._map is not None else self._buffer()
        slot = _last_at_most(buf, n, 12, 0, _I64.unpack_from, timestamp, self._hint)
        if slot < 0:
            return self.base_offset
        self._hint = slot
        return self.base_offset + _I32.unpack_from(buf, slot * 12 + 8)[0]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop the entries naming an offset at or past ``offset``."""
        n = self.entries
        if n == 0 or self.last_offset < offset:
            return
        buf = self._map if self._map is not None else self._buffer()
        self.truncate_to_entries(_last_at_most(buf, n, 12, 8, _I32.unpack_from,
                                               offset - 1 - self.base_offset, n - 1) + 1)

    def all_entries(self) -> list[tuple[int, int]]:
        """Every entry as (timestamp, offset): for tests and tools."""
        if self.entries == 0:
            return []
        buf = self._map if self._map is not None else self._buffer()
        return [(ts, self.base_offset + rel)
                for ts, rel in self.entry.iter_unpack(buf[:self.entries * 12])]

    def _valid_entries(self, raw: bytes) -> int:
        timestamps = _column(raw, 12, 0, 8, "q")
        relative = _column(raw, 12, 8, 4, "i")
        if relative and (relative[0] < 0 or timestamps[0] < 0):
            return -1
        return min(_increasing_prefix(timestamps, True), _increasing_prefix(relative, False))

    def _set_last(self, buf: bytes | mmap.mmap) -> None:
        if self.entries:
            self.last_timestamp, relative = self.entry.unpack_from(buf, (self.entries - 1) * 12)
            self.last_offset = self.base_offset + relative
            first_ts, first_rel = self.entry.unpack_from(buf, 0)
            self.first_entry = (first_ts, self.base_offset + first_rel)
        else:
            self.last_timestamp, self.last_offset = NO_TIMESTAMP, self.base_offset
            self.first_entry = None

    def _after_truncate_raw(self, raw: bytes) -> None:
        self._hint = 0
        self._set_last(raw)

    def _load_last(self) -> None:
        if self.entries:
            self._set_last(self._map if self._map is not None else self._buffer())
        else:
            self._set_last(b"")
