"""One segment of a partition log: ``<base>.log`` and its sparse ``.index``.

The ``.log`` file holds v2 batches back to back, exactly as appended. The
``.index`` file holds 8-byte entries (offset relative to the base, int32;
byte position, int32), one every ``index.interval.bytes`` of log, so finding
an offset reads at most one interval of headers instead of the segment. The
index is kept in memory as two lists searched with ``bisect``; the file only
spares the scan when the segment is opened again.

Reads use ``os.pread`` of the exact byte range, never the whole segment.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from actors.core.record_batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    parse_header,
)
from wire.errors import KafkaError, StorageError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
INDEX_ENTRY = struct.Struct(">ii")
SCAN_CHUNK = 64 * 1024
RECOVERY_CHUNK = 1024 * 1024
_QI = struct.Struct(">qi")


def log_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


def index_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write until everything is written (regular files may write short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LogSegment:
    """A segment's files, size, next offset and in-memory sparse index."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int,
                 created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / log_file_name(base_offset)
        self.index_path = directory / index_file_name(base_offset)
        try:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open segment {self.log_path}: {exc}") from exc
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self._index_file: int | None = None  # opened when needed, see _index_fd
        try:
            self.index_path.touch(exist_ok=True)  # the pair exists from the start, as in Kafka
        except OSError as exc:
            raise StorageError(f"cannot create index {self.index_path}: {exc}") from exc
        # Sparse index: absolute offsets (base offset of a batch) and positions.
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        # Memory only: the next offset after each indexed batch (-1 if not known,
        # after a load), so a lookup inside an indexed batch reads nothing.
        self.index_next_offsets: list[int] = []
        self._bytes_since_index_entry = 0
        self._pending_index = bytearray()
        self._max_timestamp_ms: int | None = -1 if self.size == 0 else None
        # segment.ms counts from the first batch's max timestamp when it has one
        # (rolls_on_batch_time), else from when the segment was created, as Kafka does.
        self.created_ms = created_ms
        self.rolling_timestamp_ms = created_ms
        self.rolls_on_batch_time = False
        self._first_batch_seen = False
        self.closed = False

    @property
    def _index_fd(self) -> int:
        """The .index file, opened on demand: lookups use the in-memory lists, so a
        finished segment only holds its .log open (one fd per segment, not two)."""
        if self._index_file is None:
            try:
                self._index_file = os.open(self.index_path,
                                           os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as exc:
                raise StorageError(f"cannot open index {self.index_path}: {exc}") from exc
        return self._index_file

    def release_index_fd(self) -> None:
        """Write pending entries and close the .index (a finished, flushed segment)."""
        self._write_pending_index()
        if self._index_file is not None:
            os.close(self._index_file)
            self._index_file = None

    # -- loading ------------------------------------------------------------

    def load_clean(self) -> bool:
        """Open a segment known to be flushed: trust the index if it is sane.

        Returns True if the segment had to be recovered after all (bad index or
        torn tail).
        """
        if not self._load_index_file():
            self.recover()
            return True
        start = self.index_positions[-1] if self.index_positions else 0
        start_offset = self.index_offsets[-1] if self.index_offsets else self.base_offset
        position, next_offset = self._scan_to_end(start, start_offset)
        if position != self.size:
            # A clean segment with a torn tail is not clean: treat it as unclean.
            self.recover()
            return True
        self.next_offset = next_offset
        self._bytes_since_index_entry = self.size - start
        self._read_rolling_timestamp()
        return False

    def _load_index_file(self) -> bool:
        try:
            raw = os.pread(self._index_fd, os.fstat(self._index_fd).st_size, 0)
        except OSError as exc:
            raise StorageError(f"cannot read index {self.index_path}: {exc}") from exc
        if len(raw) % INDEX_ENTRY.size:
            return False
        offsets: list[int] = []
        positions: list[int] = []
        last_offset, last_position = -1, -1
        for relative, position in INDEX_ENTRY.iter_unpack(raw):
            offset = self.base_offset + relative
            if offset <= last_offset or position <= last_position or position >= self.size:
                return False
            offsets.append(offset)
            positions.append(position)
            last_offset, last_position = offset, position
        # The last entry must point at the start of a batch with that base offset
        # (checking each would read the whole segment's headers on every open).
        if offsets:
            head = os.pread(self._fd, LOG_OVERHEAD, positions[-1])
            if len(head) < LOG_OVERHEAD or _QI.unpack(head)[0] != offsets[-1]:
                return False
        self.index_offsets, self.index_positions = offsets, positions
        self.index_next_offsets = [-1] * len(offsets)
        return True

    def _scan_to_end(self, position: int, expected_offset: int) -> tuple[int, int]:
        """Walk headers from a known batch start; return (end position, next offset)."""
        next_offset = expected_offset
        for header in self.iter_headers(position, self.size):
            if header.base_offset != next_offset:
                break
            next_offset = header.next_offset
            position = header.position + header.size
        return position, next_offset

    def _read_rolling_timestamp(self) -> None:
        if self.size >= HEADER_SIZE:
            head = os.pread(self._fd, HEADER_SIZE, 0)
            if len(head) == HEADER_SIZE:
                self._note_first_batch(parse_header(head).max_timestamp)

    def recover(self) -> int:
        """Check every batch (length, magic, CRC, offsets), rebuild the index, cut
        the file at the first bad batch. Returns the number of bytes cut.
        """
        self.index_offsets, self.index_positions, self.index_next_offsets = [], [], []
        self._pending_index = bytearray()
        os.ftruncate(self._index_fd, 0)
        self._bytes_since_index_entry = 0
        self._max_timestamp_ms = -1
        self._forget_first_batch()
        position = 0
        expected = self.base_offset
        entries = bytearray()
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
            if header.base_offset != expected or header.last_offset_delta < 0:
                break
            if self._bytes_since_index_entry >= self.index_interval_bytes or position == 0:
                entries += INDEX_ENTRY.pack(header.base_offset - self.base_offset, position)
                self.index_offsets.append(header.base_offset)
                self.index_positions.append(position)
                self.index_next_offsets.append(header.next_offset)
                self._bytes_since_index_entry = 0
            self._bytes_since_index_entry += header.size
            self._note_batch(header.max_timestamp)
            expected = header.next_offset
            position += header.size
        cut = self.size - position
        if cut:
            os.ftruncate(self._fd, position)
            self.size = position
        write_all(self._index_fd, entries)
        self.next_offset = expected
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

    def _note_batch(self, max_timestamp: int) -> None:
        if not self._first_batch_seen:
            self._note_first_batch(max_timestamp)
        if self._max_timestamp_ms is not None and max_timestamp > self._max_timestamp_ms:
            self._max_timestamp_ms = max_timestamp

    def append(self, pieces: list[bytes | bytearray | memoryview], length: int,
               batches: list[tuple[int, int, int, int, int]]) -> None:
        """Write ``pieces`` (``length`` bytes of whole batches) with one system call.

        ``batches`` holds, per batch, (base offset, next offset, position in
        the appended bytes, size, max timestamp), so the index is maintained
        without parsing again. Index entries are buffered and written at the
        next flush, roll or close: a crash loses only entries of data past the
        recovery point, whose index recovery rebuilds anyway.
        """
        start = self.size
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
            if since >= interval or start + position == 0:
                self._pending_index += INDEX_ENTRY.pack(base_offset - self.base_offset,
                                                        start + position)
                self.index_offsets.append(base_offset)
                self.index_positions.append(start + position)
                self.index_next_offsets.append(next_offset)
                since = 0
            since += size
            if not self._first_batch_seen:
                self._note_first_batch(max_ts)
            if self._max_timestamp_ms is not None and max_ts > self._max_timestamp_ms:
                self._max_timestamp_ms = max_ts
            self.next_offset = next_offset
        self._bytes_since_index_entry = since
        self.size = start + length
        if len(self._pending_index) >= 4096:
            self._write_pending_index()

    def append_one(self, head: bytes, rest: memoryview, size: int, base_offset: int,
                   next_offset: int, max_timestamp: int) -> None:
        """append() for a single batch given as (patched head, client bytes): the hot path."""
        start = self.size
        try:
            written = os.writev(self._fd, (head, rest))
            if written < size:
                write_all(self._fd, memoryview(head + bytes(rest))[written:])
        except OSError as exc:
            self._undo_append(start)
            raise StorageError(f"cannot append to {self.log_path}: {exc}") from exc
        if self._bytes_since_index_entry >= self.index_interval_bytes or start == 0:
            self._pending_index += INDEX_ENTRY.pack(base_offset - self.base_offset, start)
            self.index_offsets.append(base_offset)
            self.index_positions.append(start)
            self.index_next_offsets.append(next_offset)
            self._bytes_since_index_entry = size
            if len(self._pending_index) >= 4096:
                self._write_pending_index()
        else:
            self._bytes_since_index_entry += size
        if not self._first_batch_seen:
            self._note_first_batch(max_timestamp)
        if self._max_timestamp_ms is not None and max_timestamp > self._max_timestamp_ms:
            self._max_timestamp_ms = max_timestamp
        self.next_offset = next_offset
        self.size = start + size

    def _write_pending_index(self) -> None:
        if self._pending_index:
            try:
                write_all(self._index_fd, self._pending_index)
            except OSError as exc:
                raise StorageError(f"cannot write index {self.index_path}: {exc}") from exc
            self._pending_index = bytearray()

    def _undo_append(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError:
            pass

    # -- reading ------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def iter_headers(self, position: int, end: int,
                     expected_span: int = SCAN_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the whole batches in [position, end).

        Small batches are read a chunk at a time; once batches are seen to be
        large, only their 61-byte headers are read, so a scan does not pull
        the whole segment in. Stops at a batch that runs past ``end``.
        """
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
        slot = bisect_right(self.index_offsets, offset) - 1
        if slot >= 0:
            position = self.index_positions[slot]
            if offset < self.index_next_offsets[slot]:
                return position, self.index_offsets[slot]  # inside an indexed batch
        else:
            position = 0
        for header in self.iter_headers(position, self.size, self.index_interval_bytes):
            if header.next_offset > offset:
                return header.position, header.base_offset
        return self.size, self.next_offset

    def whole_batches_length(self, data: bytes, start: int) -> int:
        """Length of the longest prefix of ``data`` (read at ``start``) made of whole batches.

        Jumps to the last index entry inside the data, so at most one index
        interval of headers is walked, in memory.
        """
        limit = start + len(data)
        slot = bisect_right(self.index_positions, limit) - 1
        position = start
        if slot >= 0 and self.index_positions[slot] > start:
            position = self.index_positions[slot]
        rel = position - start
        end = len(data)
        while rel + LOG_OVERHEAD <= end:
            size = _QI.unpack_from(data, rel)[1] + LOG_OVERHEAD
            if rel + size > end:
                break
            rel += size
        return rel

    @property
    def max_timestamp_ms(self) -> int:
        """Largest batch max timestamp in the segment (-1 if empty); scanned once if unknown."""
        if self._max_timestamp_ms is None:
            best = -1
            for header in self.iter_headers(0, self.size):
                best = max(best, header.max_timestamp)
            self._max_timestamp_ms = best
        return self._max_timestamp_ms

    # -- truncation, flush, close --------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch holding an offset >= ``offset``; returns bytes dropped."""
        position, base = self.find_position(offset)
        if position >= self.size:
            return 0
        dropped = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.next_offset = base
        self._write_pending_index()
        keep = bisect_right(self.index_positions, position - 1)
        del self.index_offsets[keep:]
        del self.index_positions[keep:]
        del self.index_next_offsets[keep:]
        os.ftruncate(self._index_fd, keep * INDEX_ENTRY.size)
        last = self.index_positions[-1] if self.index_positions else 0
        self._bytes_since_index_entry = position - last
        self._max_timestamp_ms = None if position else -1
        if position == 0:
            self._forget_first_batch()
        return dropped

    def flush(self) -> None:
        self._write_pending_index()
        try:
            os.fsync(self._fd)
            if self._index_file is not None:
                os.fsync(self._index_file)
        except OSError as exc:
            raise StorageError(f"cannot fsync {self.log_path}: {exc}") from exc

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._write_pending_index()
            finally:
                os.close(self._fd)
                if self._index_file is not None:
                    os.close(self._index_file)
                    self._index_file = None

    def delete(self) -> None:
        """Close and remove both files; the .log goes first so a crash leaves no log
        without its predecessor's data."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.index_path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (f"LogSegment(base_offset={self.base_offset}, size={self.size}, "
                f"next_offset={self.next_offset})")
