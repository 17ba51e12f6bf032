"""One segment of a partition log: ``<base>.log``, its ``.index`` and ``.timeindex``.

The ``.log`` file holds v2 batches back to back, exactly as appended. The
indexes (see log_index.py) are Kafka's files, searched through memory maps:
an offset index entry every ``index.interval.bytes`` of log, so finding an
offset reads at most one interval of headers instead of the segment, and a
time index beside it. Only the active segment writes its indexes; a finished
segment's are trimmed, and mapped read-only when first needed.

Reads use ``os.pread`` of the exact byte range, never the whole segment;
a fetch that is sent from the file instead takes a :class:`FileRegion` of it
(a descriptor of its own, valid after the segment is deleted).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from actors.core.batch_fast import COMPILED_MODULE, write_batch
from actors.core.log_index import (
    DEFAULT_MAX_INDEX_BYTES,
    NO_TIMESTAMP,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    OffsetIndex,
    TimeIndex,
)
from actors.core.record_batch import (
    HEAD_TO_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    parse_header,
)
from wire.errors import KafkaError, StorageError
from wire.file_region import FileRegion

LOG_SUFFIX = ".log"
INDEX_SUFFIX = OFFSET_INDEX_SUFFIX
SCAN_CHUNK = 64 * 1024
RECOVERY_CHUNK = 1024 * 1024
_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
# base offset, batch length, (leader epoch, magic, CRC, attributes), last offset delta
_SPAN = struct.Struct(">qi11xi")
_HEAD_TO_MAGIC = HEAD_TO_MAGIC
_OFFSET_ENTRY = OffsetIndex.entry  # (relative offset, position)
# Pieces per writev (Linux's IOV_MAX).
_IOV_MAX = 1024


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{OFFSET_INDEX_SUFFIX}"


def time_index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TIME_INDEX_SUFFIX}"


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until everything is written (regular files may write short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# The fields a leader append reads and writes, held as slots of a base class: the C
# one (_batch_fast.SegmentCore) where the module is built, whose append_one does the
# whole single-batch append in one call, reaching these and the indexes' hot fields
# (log_index.INDEX_FIELDS) without a Python frame or a dictionary lookup; else this
# twin, whose append_one is LogSegment._append_one_py. The C append_one writes or
# stages (defer) the batch; what it does not do itself (a write after staged
# batches, a disk reservation for the indexes, a value out of C's range) it hands
# to _append_one_py before changing anything. Names and order match the C ones
# (tests/core/test_segment_core.py checks it, and compares the two appends).
SEGMENT_FIELDS = ("_fd", "base_offset", "size", "next_offset", "index_interval_bytes",
                  "_bytes_since_index_entry", "_max_timestamp_ms", "_offset_of_max_timestamp",
                  "_first_batch_seen", "rolling_timestamp_ms", "rolls_on_batch_time",
                  "index_full", "offset_index", "time_index", "_staged", "staged_bytes",
                  "_undo")


class SegmentCorePy:
    """SegmentCore's Python twin: a segment's hot fields, as slots."""

    __slots__ = SEGMENT_FIELDS
    _fd: int
    base_offset: int
    size: int
    next_offset: int
    index_interval_bytes: int
    _bytes_since_index_entry: int
    _max_timestamp_ms: int
    _offset_of_max_timestamp: int
    _first_batch_seen: bool
    rolling_timestamp_ms: int
    rolls_on_batch_time: bool
    index_full: bool
    offset_index: OffsetIndex
    time_index: TimeIndex
    _staged: list[bytes | bytearray | memoryview]
    staged_bytes: int  # bytes appended with defer=True and not written yet
    _undo: tuple[int, ...] | None


if TYPE_CHECKING:
    SegmentCore = SegmentCorePy
else:
    SegmentCore = COMPILED_MODULE.SegmentCore if COMPILED_MODULE is not None else SegmentCorePy
SEGMENT_CORE_COMPILED = SegmentCore is not SegmentCorePy


class LogSegment(SegmentCore):
    """A segment's files, size, next offset and indexes."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 created_ms: int, max_index_bytes: int = DEFAULT_MAX_INDEX_BYTES) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / log_file_name(base_offset)
        self.index_path = directory / index_file_name(base_offset)
        self.time_index_path = directory / time_index_file_name(base_offset)
        try:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open segment {self.log_path}: {exc}") from exc
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        # Whether both index files were there before this object existed: an index
        # created now says nothing about the log (loading rebuilds it).
        self.had_index_files = self.index_path.exists() and self.time_index_path.exists()
        try:
            # The files exist from the start, as in Kafka.
            self.index_path.touch(exist_ok=True)
            self.time_index_path.touch(exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create index {self.index_path}: {exc}") from exc
        # Both hold at least what one roll needs: an entry, and the time index's
        # entry plus the one reserved for the roll.
        self.offset_index = OffsetIndex(self.index_path, base_offset, max(max_index_bytes, 8))
        self.time_index = TimeIndex(self.time_index_path, base_offset, max(max_index_bytes, 24))
        self._bytes_since_index_entry = 0
        self.index_full = False  # either index is full: roll before the next append
        # Largest batch max timestamp, and the last offset of the first batch holding it.
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        # segment.ms counts from the first batch's max timestamp when it has one
        # (rolls_on_batch_time), else from when the segment was created, as Kafka does.
        self.created_ms = created_ms
        self.rolling_timestamp_ms = created_ms
        self.rolls_on_batch_time = False
        self._first_batch_seen = False
        self.closed = False
        # Group commit: batches appended with defer=True wait here (patched head,
        # client bytes, ...) until write_staged() writes them with one writev. The
        # segment's size, offsets and index entries already count them, so every
        # method that reads the file writes them first. _undo holds the state from
        # before the first of them, for a write that fails.
        self._staged = []
        self.staged_bytes = 0
        self._undo = None
        # Called after write_staged: with None once the staged batches are written,
        # with the StorageError after a failed write rolled the segment back (the
        # owner then rolls back what it counted for those batches).
        self.on_staged_written: Callable[[StorageError | None], None] | None = None

    # -- index lifecycle ------------------------------------------------------

    def activate(self) -> None:
        """Become the active segment: indexes preallocated and mapped read-write."""
        self.offset_index.open_writable()
        self.time_index.open_writable()

    def seal(self) -> None:
        """Stop being the active segment (roll, clean close): the time index gets
        the segment's largest timestamp (Kafka's last entry, in the slot kept for
        it), and both indexes are flushed and trimmed to their entries."""
        if self.time_index.writable:
            try:
                self.time_index.maybe_append(self._max_timestamp_ms,
                                             self._offset_of_max_timestamp, roll=True)
            except StorageError:
                # No disk block for it (a full disk): the index is right without it,
                # loading reads the batches after the last offset entry anyway.
                pass
        self.offset_index.seal()
        self.time_index.seal()

    def release_indexes(self) -> None:
        """Unmap a finished segment's indexes; the next lookup maps them again."""
        self.offset_index.release()
        self.time_index.release()

    @property
    def indexes_open(self) -> bool:
        return self.offset_index.is_open or self.time_index.is_open

    def _check_full(self) -> None:
        """index_full, after entries came or went: the segment must roll before the next
        append once either index is full, as Kafka's."""
        index, times = self.offset_index, self.time_index
        self.index_full = (index.entries >= index.max_entries
                           or times.entries >= times.max_entries - 1)

    def index_entries(self) -> list[tuple[int, int]]:
        """(offset, position) of every offset index entry (tests, tools)."""
        return self.offset_index.all_entries()

    def time_index_entries(self) -> list[tuple[int, int]]:
        """(timestamp, offset) of every time index entry (tests, tools)."""
        return self.time_index.all_entries()

    # -- loading ------------------------------------------------------------

    def load_clean(self, gaps_up_to: int = -1) -> bool:
        """Open a segment known to be flushed: trust its indexes if they are sane.

        Returns True if the segment had to be recovered after all (missing or
        bad index, torn tail); ``gaps_up_to`` is then passed to ``recover``.
        """
        if not self._load_indexes():
            self.recover(gaps_up_to)
            return True
        return False

    def _load_indexes(self) -> bool:
        """Check both index files against the log with a few reads, not a scan.

        Each file must be whole increasing entries (log_index checks that); the
        first offset entry names the first batch, the last one a batch start
        inside the log, with whole batches from there to the end; the time
        index stays below the next offset and starts with the first batch's
        timestamp if it has one. The segment's state is then taken from the
        last entries plus the batches after the last offset entry.
        """
        index, times = self.offset_index, self.time_index
        if not (self.had_index_files and index.load() and times.load()):
            return False
        if self.size == 0:
            return index.entries == 0 and times.entries == 0
        if index.entries == 0 or index.last_position >= self.size:
            return False
        head = os.pread(self._fd, LOG_OVERHEAD, index.last_position)
        if len(head) < LOG_OVERHEAD or _Q.unpack_from(head)[0] != index.last_offset:
            return False
        end, next_offset, tail_max_ts, tail_max_offset = self._scan_to_end(
            index.last_position, index.last_offset)
        if end != self.size:
            return False  # a clean segment with a torn tail is not clean
        first = parse_header(os.pread(self._fd, HEADER_SIZE, 0))
        if times.entries and times.last_offset >= next_offset:
            return False
        # The first batch was indexed: the time index starts with its timestamp, or,
        # if it has none, with a later batch (this also tells a preallocated file's
        # zeros, read as the entry (0, base offset), from a real entry).
        if first.max_timestamp > NO_TIMESTAMP:
            if times.first_entry != (first.max_timestamp, first.last_offset):
                return False
        elif times.first_entry is not None and times.first_entry[1] <= first.last_offset:
            return False
        self.next_offset = next_offset
        self._bytes_since_index_entry = self.size - index.last_position
        self._max_timestamp_ms = times.last_timestamp
        self._offset_of_max_timestamp = times.last_offset
        if tail_max_ts > self._max_timestamp_ms:
            self._max_timestamp_ms, self._offset_of_max_timestamp = tail_max_ts, tail_max_offset
        self._note_first_batch(first.max_timestamp)
        self._check_full()
        return True

    def _scan_to_end(self, position: int, expected_offset: int) -> tuple[int, int, int, int]:
        """Walk headers from a known batch start: (end position, next offset, largest
        max timestamp, last offset of the first batch holding it)."""
        next_offset = expected_offset
        max_ts, max_ts_offset = NO_TIMESTAMP, self.base_offset
        for header in self.iter_headers(position, self.size):
            if header.base_offset < next_offset:  # offsets rise; cleaning leaves gaps
                break
            next_offset = header.next_offset
            position = header.position + header.size
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, next_offset - 1
        return position, next_offset, max_ts, max_ts_offset

    def recover(self, gaps_up_to: int = -1) -> int:
        """Check every batch (length, magic, CRC, offsets), rebuild both indexes, cut
        the file at the first bad batch. Returns the number of bytes cut.

        Offsets must follow on from batch to batch, except that a batch starting
        at or below ``gaps_up_to`` (the checkpointed recovery point) may leave a
        gap before it: the log cleaner drops batches there, and cleans no further.
        Above it a gap is a damaged base offset (the CRC does not cover it).

        The indexes are rebuilt writable; the partition log seals those of
        segments that are not the last.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_index_entry = 0
        self._max_timestamp_ms = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._forget_first_batch()
        interval = self.index_interval_bytes
        position = 0
        expected = self.base_offset
        buf = b""
        buf_start = 0
        while position < self.size:
            offset_in_buf = position - buf_start
            if offset_in_buf + LOG_OVERHEAD > len(buf):
                buf = os.pread(self._fd, RECOVERY_CHUNK, position)
                buf_start, offset_in_buf = position, 0
            if offset_in_buf + LOG_OVERHEAD > len(buf):
                break
            (_, length) = _QI.unpack_from(buf, offset_in_buf)
            need = length + LOG_OVERHEAD
            if length > 0 and offset_in_buf + need > len(buf) and position + need <= self.size:
                buf = os.pread(self._fd, max(RECOVERY_CHUNK, need), position)
                buf_start, offset_in_buf = position, 0
            try:
                header = check_batch(buf, offset_in_buf, len(buf))
            except KafkaError:
                break
            if header.last_offset_delta < 0 or not (
                    header.base_offset == expected
                    or expected < header.base_offset <= gaps_up_to):
                break
            next_offset = header.next_offset
            if not self._first_batch_seen:
                self._note_first_batch(header.max_timestamp)
            if header.max_timestamp > self._max_timestamp_ms:
                self._max_timestamp_ms = header.max_timestamp
                self._offset_of_max_timestamp = next_offset - 1
            if self._bytes_since_index_entry >= interval or position == 0:
                self.offset_index.append(header.base_offset, position)
                self.time_index.maybe_append(self._max_timestamp_ms,
                                             self._offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            self._bytes_since_index_entry += header.size
            expected = next_offset
            position += header.size
        cut = self.size - position
        if cut:
            os.ftruncate(self._fd, position)
            self.size = position
        self.next_offset = expected
        self._check_full()
        return cut

    # -- appending ----------------------------------------------------------

    def _note_first_batch(self, max_timestamp: int) -> None:
        self._first_batch_seen = True
        if max_timestamp >= 0:
            self.rolling_timestamp_ms = max_timestamp
            self.rolls_on_batch_time = True

    def _forget_first_batch(self) -> None:
        self._first_batch_seen = False
        self.rolling_timestamp_ms = self.created_ms
        self.rolls_on_batch_time = False

    def append(self, pieces: list[bytes | bytearray | memoryview], length: int,
               batches: list[tuple[int, int, int, int, int]]) -> None:
        """Write ``pieces`` (``length`` bytes of whole batches) with one system call.

        ``batches`` holds, per batch, (base offset, next offset, position in
        the appended bytes, size, max timestamp), so the indexes are maintained
        without parsing again. Index entries go straight into the mapped files:
        a crash loses only entries of data past the recovery point, whose
        indexes recovery rebuilds anyway.
        """
        if self._staged:
            self.write_staged()
        start = self.size
        # Disk room for the index entries first: a full disk then fails here,
        # before the log is written.
        index, times = self.offset_index, self.time_index
        if index.entries + len(batches) > index.reserved_entries:
            index.reserve(len(batches))
        if times.entries + len(batches) > times.reserved_entries:
            times.reserve(len(batches))
        try:
            if len(pieces) == 1:
                write_all(self._fd, pieces[0])
            else:
                written = os.writev(self._fd, pieces)
                if written < length:
                    write_all(self._fd, memoryview(b"".join(pieces))[written:])
        except OSError as exc:
            self._undo_append(start)
            raise StorageError(f"cannot append to {self.log_path}: {exc}") from exc
        interval = self.index_interval_bytes
        since = self._bytes_since_index_entry
        for base_offset, next_offset, position, size, max_ts in batches:
            if not self._first_batch_seen:
                self._note_first_batch(max_ts)
            if max_ts > self._max_timestamp_ms:
                self._max_timestamp_ms = max_ts
                self._offset_of_max_timestamp = next_offset - 1
            if since >= interval or start + position == 0:
                index.append(base_offset, start + position)
                times.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp)
                since = 0
            since += size
            self.next_offset = next_offset
        self._bytes_since_index_entry = since
        self.size = start + length
        self._check_full()

    def _append_one_py(self, records: bytes | bytearray | memoryview, batch_length: int,
                       leader_epoch: int, size: int, base_offset: int, next_offset: int,
                       max_timestamp: int, defer: bool = False) -> None:
        """append() for a single checked batch of ``size`` bytes: the hot path, as
        ``append_one`` (SegmentCore's C append_one does the same in one call).

        The batch is written with its base offset, length, leader epoch and
        magic replaced (batch_fast.write_batch: the client's bytes are not
        copied). With ``defer`` it is only staged: write_staged() writes every
        staged batch with one writev (group commit). The offset index entry is
        written by write_batch right after the batch (staged: here) rather than
        through OffsetIndex.append (the same bytes and checks), and fields are
        read into locals once: this runs once per Produce.
        """
        start = self.size
        since = self._bytes_since_index_entry
        indexed = since >= self.index_interval_bytes or start == 0
        # The offset index entry goes at this byte of the mapping (None: not written,
        # the index is full or not mapped). Without defer write_batch puts it there
        # once the batch is written, saving a call per append.
        mapped = None
        entry_at = 0
        if indexed:
            index = self.offset_index
            times = self.time_index
            entries = index.entries
            if entries >= index.reserved_entries:
                index.reserve(1)
            if times.entries >= times.reserved_entries:
                times.reserve(1)
            if entries < index.max_entries:
                mapped = index._map
                entry_at = entries * 8
        if defer:
            if self._undo is None:
                self._undo = self._state()
            staged = self._staged
            staged.append(_HEAD_TO_MAGIC.pack(base_offset, batch_length, leader_epoch, 2))
            staged.append(memoryview(records)[17:])
            self.staged_bytes += size
            if mapped is not None:
                _OFFSET_ENTRY.pack_into(mapped, entry_at, base_offset - self.base_offset, start)
        else:
            if self._staged:
                self.write_staged()
            try:
                if mapped is None:
                    written = write_batch(self._fd, records, base_offset, batch_length,
                                          leader_epoch)
                else:
                    written = write_batch(self._fd, records, base_offset, batch_length,
                                          leader_epoch, mapped, entry_at,
                                          base_offset - self.base_offset, start)
                if written < size:
                    head = _HEAD_TO_MAGIC.pack(base_offset, batch_length, leader_epoch, 2)
                    write_all(self._fd, memoryview(head + bytes(records[17:]))[written:])
                    if mapped is not None:  # write_batch left the entry to a whole write
                        _OFFSET_ENTRY.pack_into(mapped, entry_at, base_offset - self.base_offset,
                                                start)
            except OSError as exc:
                self._append_failed(start, exc)
        if not self._first_batch_seen:
            self._note_first_batch(max_timestamp)
        if max_timestamp > self._max_timestamp_ms:
            self._max_timestamp_ms = max_timestamp
            self._offset_of_max_timestamp = next_offset - 1
        self.next_offset = next_offset
        self.size = start + size
        if not indexed:
            self._bytes_since_index_entry = since + size
            return
        self._bytes_since_index_entry = size
        if mapped is not None:  # the entry is in the mapping: count it
            index.entries = entries = entries + 1
            index.last_offset = base_offset
            index.last_position = start
        if self._max_timestamp_ms > times.last_timestamp:
            times.maybe_append(self._max_timestamp_ms, self._offset_of_max_timestamp)
        self.index_full = (entries >= index.max_entries
                           or times.entries >= times.max_entries - 1)

    if not SEGMENT_CORE_COMPILED:
        append_one = _append_one_py

    def _append_failed(self, start: int, exc: OSError) -> NoReturn:
        """A single append's write failed: cut the file back to ``start`` and raise."""
        self._undo_append(start)
        raise StorageError(f"cannot append to {self.log_path}: {exc}") from exc

    def _state(self) -> tuple[int, ...]:
        return (self.size, self.next_offset, self._bytes_since_index_entry,
                self._max_timestamp_ms, self._offset_of_max_timestamp,
                int(self._first_batch_seen), self.rolling_timestamp_ms,
                int(self.rolls_on_batch_time), self.offset_index.entries,
                self.time_index.entries, int(self.index_full))

    def write_staged(self) -> None:
        """Write the staged batches, in order, with one writev (IOV_MAX pieces at a time).

        On failure the segment is put back as it was before the first staged
        batch (file, offsets, indexes), ``on_staged_lost`` is told, and
        StorageError is raised.
        """
        pieces = self._staged
        if not pieces:
            return
        total = self.staged_bytes
        self._staged = []
        self.staged_bytes = 0
        undo = self._undo
        self._undo = None
        try:
            if len(pieces) <= _IOV_MAX:
                written = os.writev(self._fd, pieces)
                if written < total:
                    write_all(self._fd, memoryview(b"".join(pieces))[written:])
            else:
                for at in range(0, len(pieces), _IOV_MAX):
                    chunk = pieces[at:at + _IOV_MAX]
                    written = os.writev(self._fd, chunk)
                    expected = sum(len(p) for p in chunk)
                    if written < expected:
                        write_all(self._fd, memoryview(b"".join(chunk))[written:])
        except OSError as exc:
            assert undo is not None
            self._roll_back(undo)
            error = StorageError(f"cannot append to {self.log_path}: {exc}")
            if self.on_staged_written is not None:
                self.on_staged_written(error)
            raise error from exc
        if self.on_staged_written is not None:
            self.on_staged_written(None)

    def _roll_back(self, undo: tuple[int, ...]) -> None:
        (size, self.next_offset, self._bytes_since_index_entry, self._max_timestamp_ms,
         self._offset_of_max_timestamp, first_seen, self.rolling_timestamp_ms, on_batch_time,
         index_entries, time_entries, index_full) = undo
        self._undo_append(size)
        self.size = size
        self._first_batch_seen = bool(first_seen)
        self.rolls_on_batch_time = bool(on_batch_time)
        self.offset_index.truncate_to_entries(index_entries)
        self.time_index.truncate_to_entries(time_entries)
        self.index_full = bool(index_full)

    def _undo_append(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            pass

    # -- reading ------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        if self._staged:
            self.write_staged()
        return os.pread(self._fd, length, position)

    def region(self, position: int, length: int) -> FileRegion:
        """``length`` bytes at ``position`` as a region with a descriptor of its own.

        The caller owns the descriptor. Deleting the segment leaves it valid (an
        unlinked file lives while it is open); truncating it does not, and a
        sender finds the region shorter than it says. Raises OSError when no
        descriptor is left (EMFILE): the caller reads the bytes instead.
        """
        if self._staged:
            self.write_staged()
        return FileRegion(os.dup(self._fd), position, length)

    def batch_size_at(self, position: int) -> int:
        """Size of the whole batch starting at ``position`` (its 12-byte log overhead read)."""
        if self._staged:
            self.write_staged()
        head = os.pread(self._fd, LOG_OVERHEAD, position)
        if len(head) < LOG_OVERHEAD:
            return 0
        return _QI.unpack(head)[1] + LOG_OVERHEAD

    def whole_batches_end(self, start: int, end: int) -> int:
        """The last batch boundary in [start, end]: ``start`` if the batch there passes ``end``.

        Reads no record: jumps to the last index entry at or below ``end`` and
        walks the batch headers from there (about one index interval).
        """
        position = max(start, self.offset_index.position_at_most(end))
        for header in self.iter_headers(position, end, self.index_interval_bytes):
            position = header.position + header.size
        return position

    def iter_headers(self, position: int, end: int,
                     expected_span: int = SCAN_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the whole batches in [position, end).

        Small batches are read a chunk at a time; once batches are seen to be
        large, only their 61-byte headers are read, so a scan does not pull
        the whole segment in. Stops at a batch that runs past ``end``.
        """
        if self._staged:
            self.write_staged()
        buf = b""
        buf_start = position
        # The first read covers what the caller expects to walk (an index
        # interval for a lookup), not a whole chunk.
        read_size = min(SCAN_CHUNK, expected_span + HEADER_SIZE)
        while position + HEADER_SIZE <= end:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, min(read_size, end - position), position)
                buf_start, rel = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            fields = HEADER.unpack_from(buf, rel)
            size = fields[1] + LOG_OVERHEAD
            if size < HEADER_SIZE or position + size > end:
                return
            yield BatchHeader(position, *fields)
            read_size = HEADER_SIZE if size > SCAN_CHUNK // 8 else SCAN_CHUNK
            position += size

    def find_position(self, offset: int) -> tuple[int, int]:
        """(position, base offset) of the batch holding ``offset``, or (size, next_offset)."""
        if offset >= self.next_offset:
            return self.size, self.next_offset
        entry_offset, position = self.offset_index.lookup(offset)
        if entry_offset == offset:
            return position, offset  # entries name batch starts (base offsets)
        # Walk the batches after the entry: base offset, length and last offset
        # delta of each, from one read of about an index interval.
        if self._staged:
            self.write_staged()
        size = self.size
        buf = os.pread(self._fd, min(SCAN_CHUNK, self.index_interval_bytes + HEADER_SIZE,
                                     size - position), position)
        rel = 0
        end = len(buf)
        while rel + _SPAN.size <= end:
            base, length, delta = _SPAN.unpack_from(buf, rel)
            if base + delta >= offset:
                return position + rel, base
            rel += length + LOG_OVERHEAD
        for header in self.iter_headers(position + rel, size, self.index_interval_bytes):
            if header.next_offset > offset:
                return header.position, header.base_offset
        return size, self.next_offset

    def position_for_timestamp(self, timestamp_ms: int) -> int:
        """A batch start at or before the first batch whose max timestamp reaches
        ``timestamp_ms`` (the time index names an offset, the offset index its place)."""
        return self.offset_index.lookup(self.time_index.lookup(timestamp_ms))[1]

    def whole_batches_length(self, data: bytes, start: int) -> int:
        """Length of the longest prefix of ``data`` (read at ``start``) made of whole batches.

        Jumps to the last index entry inside the data, so at most one index
        interval of headers is walked, in memory.
        """
        position = self.offset_index.position_at_most(start + len(data))
        rel = position - start if position > start else 0
        end = len(data)
        while rel + LOG_OVERHEAD <= end:
            size = _QI.unpack_from(data, rel)[1] + LOG_OVERHEAD
            if rel + size > end:
                break
            rel += size
        return rel

    @property
    def max_timestamp_ms(self) -> int:
        """Largest batch max timestamp in the segment (-1 if none has one)."""
        return self._max_timestamp_ms

    # -- truncation, flush, close --------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch holding an offset >= ``offset``; returns bytes dropped.

        Only the active segment is cut, so this one becomes it if it was not.
        """
        if self._staged:
            self.write_staged()
        self.activate()
        position, base = self.find_position(offset)
        if position >= self.size:
            return 0
        dropped = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        # the first batch dropped starts at ``offset`` or below (it holds it), or, in a
        # cleaned segment, maybe far above (the cleaner left a gap): the log then ends at
        # ``offset``, as Kafka's truncateTo sets it, not past what the caller truncated to.
        # A truncation into a gap between segments (the next segment, based above
        # ``offset``, deleted whole; nothing here at or above it) leaves the log ending at
        # this segment's last batch, below ``offset``; so does a restart after any
        # truncation into a gap (the reload ends a segment at its last batch). Safe: the
        # follower fetches those offsets again, as Kafka's does after a restart.
        self.next_offset = min(base, offset)
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(base)
        last = self.offset_index.last_position if self.offset_index.entries else 0
        self._bytes_since_index_entry = position - last
        # The time index's last entry covers every batch up to the last offset
        # entry; the batches after it are read.
        self._max_timestamp_ms = self.time_index.last_timestamp
        self._offset_of_max_timestamp = self.time_index.last_offset
        for header in self.iter_headers(last, position):
            if header.max_timestamp > self._max_timestamp_ms:
                self._max_timestamp_ms = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
        if position == 0:
            self._forget_first_batch()
        self._check_full()
        return dropped

    def flush(self) -> None:
        if self._staged:
            self.write_staged()
        self.offset_index.flush()
        self.time_index.flush()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageError(f"cannot fsync {self.log_path}: {exc}") from exc

    def close(self, trim: bool = True) -> None:
        """Close the files; ``trim`` (a clean close) seals the indexes first, without
        it they are left as a crash leaves them."""
        if not self.closed:
            self.closed = True
            try:
                if self._staged:
                    self.write_staged()
                if trim:
                    self.seal()
            finally:
                os.close(self._fd)
                self.offset_index.close(trim=False)
                self.time_index.close(trim=False)

    def delete(self) -> None:
        """Close and remove the files; the .log goes first so a crash leaves no log
        without its predecessor's data."""
        self._staged = []  # never written: the files go
        self.staged_bytes = 0
        self._undo = None
        self.close(trim=False)
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)
        self.time_index_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (f"LogSegment(base_offset={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset})")
