"""The single-batch hot path of a leader append: check one batch, write it patched.

Two functions, each in C (actors/core/_batch_fast.c, built by ``pip install``
where a compiler is found) and in pure Python here, of identical behaviour
(tests/core/test_batch_fast.py runs both on the same inputs). The C module is
used when it was built; ``COMPILED`` says which one this process runs.

``single_batch(records)``: the 13 header fields if ``records`` is exactly one
valid client batch stamped CreateTime, else None. None means "take the general
path", which finds and raises the exact refusal (or, for a client batch with the
LogAppendTime bit, rewrites it to the topic's type as Kafka's LogValidator does);
it never means the batch is bad.

``write_batch(fd, records, base_offset, batch_length, leader_epoch)``: one writev
of the batch with its first 17 bytes (base offset, batch length, leader epoch,
magic) replaced, the client's bytes after them untouched (not copied); returns
the bytes written, which may be fewer than all on a regular file. With four
more arguments, ``index, slot, relative_offset, position``, it also puts the
offset index entry (relative offset, position; OffsetIndex.entry) at byte
``slot`` of ``index`` (the active segment's writable mapping) once the whole
batch is written, not after a short write: one call instead of a second one
for the entry (``Struct.pack_into`` on the mapping, ~0.25 µs a call).

``timestamps_within(records, now_ms, before_max_ms, after_max_ms)``: True if
``records`` is one uncompressed batch (its length matching) whose every
record's timestamp (-1 aside) lies in [now_ms - before_max_ms, now_ms +
after_max_ms], clamped to the int64 range; False for anything else (compressed,
malformed, out of bounds, a varint or a sum past 64 bits), which the general
path then judges exactly. It keeps a topic with timestamp bounds on the fast
path: one C call walking the records' varints, no Python frame.

``log_append(log, records, leader_epoch, now_ms, defer)`` (C only): the whole
common case of ``PartitionLog.append_as_leader`` (its inline fast path is the
Python twin, used where this is None), see _batch_fast.c; None means "take the
general path", with nothing changed. Its caller there is C too: PartitionLog's base
class ``LogCore`` has the entry of ``append_as_leader`` (the twin's first lines), so a
common append runs no Python frame; anything else it hands to the twin.

The module also defines the base classes of LogSegment and the mapped indexes
(``SegmentCore``, ``IndexCore``; their Python twins are in log_segment.py and
log_index.py), whose ``append_one`` does a segment's whole single-batch append.

Why C: per 16 KiB append in ``bench log`` (cache-cold, as there), the raw
``os.write`` takes ~12.2 µs; check + CRC + patched writev add ~1.7 µs in C, and
the Python twins ~1.8 µs more (a struct unpack into a 13-tuple, a memoryview
and its slices, the 17-byte head packed, a tuple of pieces for os.writev, the
buffer lookups of two calls). The CRC is in C so the check needs no Python
call; where the CPU has AVX-512 carry-less multiplication (``CRC_FOLD``) it
folds 64 bytes a multiply pair, ~0.22 µs for 16 KiB against ~0.69 µs for the
crc32 instruction's three streams (which bound it at 8 bytes a cycle) and the
crc32c package. Build in a work tree with
``python -c 'import setuptools; setuptools.setup()' build_ext --inplace``.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from types import ModuleType

import crc32c

from actors.core.record_batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    CURRENT_MAGIC,
    HEAD_TO_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    _read_varint,
)
from wire.errors import CorruptMessageError

_unpack_header = HEADER.unpack_from
_pack_head = HEAD_TO_MAGIC.pack
_pack_index_entry = struct.Struct(">ii").pack_into  # OffsetIndex.entry
# A control batch, or a client's LogAppendTime stamp (rewritten on the general path)
_NOT_FAST_BITS = CONTROL_BIT | TIMESTAMP_TYPE_BIT
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_crc32c = crc32c.crc32c
_writev = os.writev


def single_batch_py(records: bytes | bytearray | memoryview) -> tuple[int, ...] | None:
    """single_batch in Python (see the module docstring)."""
    if len(records) < HEADER_SIZE:
        return None
    fields = _unpack_header(records, 0)
    # (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
    #  base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count)
    if (fields[1] + LOG_OVERHEAD == len(records) and fields[3] == CURRENT_MAGIC
            and fields[12] == fields[6] + 1 > 0
            and not fields[5] & _NOT_FAST_BITS
            and (fields[9] < 0 or fields[11] >= 0)
            and (fields[9] >= 0 or not fields[5] & TRANSACTIONAL_BIT)
            and _crc32c(memoryview(records)[CRC_START:]) == fields[4]):
        return fields
    return None


def timestamps_within_py(records: bytes | bytearray | memoryview, now_ms: int,
                         before_max_ms: int, after_max_ms: int) -> bool:
    """timestamps_within in Python (see the module docstring)."""
    if not (_INT64_MIN <= now_ms <= _INT64_MAX and 0 <= before_max_ms <= _INT64_MAX
            and 0 <= after_max_ms <= _INT64_MAX):
        if before_max_ms < 0 or after_max_ms < 0:
            raise ValueError("before_max_ms and after_max_ms must be >= 0")
        raise OverflowError("now_ms, before_max_ms or after_max_ms out of int64 range")
    if len(records) < HEADER_SIZE:
        return False
    fields = _unpack_header(records, 0)
    if fields[1] + LOG_OVERHEAD != len(records) or fields[5] & COMPRESSION_MASK:
        return False
    low = max(now_ms - before_max_ms, _INT64_MIN)
    high = min(now_ms + after_max_ms, _INT64_MAX)
    base = fields[7]
    view = memoryview(records)
    end = len(view)
    pos = HEADER_SIZE
    try:
        for _ in range(fields[12]):
            length, pos = _read_varint(view, pos, end)
            record_end = pos + length
            if length < 1 or record_end > end:  # at least the attributes byte
                return False
            delta, _ = _read_varint(view, pos + 1, record_end)  # after the attributes
            stamp = base + delta
            if not (_INT64_MIN <= length <= _INT64_MAX and _INT64_MIN <= delta <= _INT64_MAX
                    and _INT64_MIN <= stamp <= _INT64_MAX):
                return False  # past 64 bits: the C twin cannot hold it
            if stamp != -1 and not low <= stamp <= high:
                return False
            pos = record_end
    except CorruptMessageError:
        return False
    return True


def write_batch_py(fd: int, records: bytes | bytearray | memoryview, base_offset: int,
                   batch_length: int, leader_epoch: int,
                   index: bytearray | memoryview | mmap.mmap | None = None, slot: int = 0,
                   relative_offset: int = 0, position: int = 0) -> int:
    """write_batch in Python (see the module docstring)."""
    if index is not None:  # checked before anything is written, as the C twin does
        if not (_INT32_MIN <= relative_offset <= _INT32_MAX
                and _INT32_MIN <= position <= _INT32_MAX):
            raise OverflowError("relative_offset or position out of int32 range")
        with memoryview(index) as target:
            if target.readonly:
                raise BufferError("Object is not writable.")
            if not 0 <= slot <= target.nbytes - 8:
                raise ValueError("index slot outside the index buffer")
    if len(records) < 17:
        raise ValueError("not a record batch: shorter than 17 bytes")
    written = _writev(fd, (_pack_head(base_offset, batch_length, leader_epoch, CURRENT_MAGIC),
                           memoryview(records)[17:]))
    if index is not None and written == len(records):
        _pack_index_entry(index, slot, relative_offset, position)
    return written


_compiled: ModuleType | None
try:
    from actors.core import _batch_fast as _compiled
except ImportError:  # not built (no compiler where it was installed): the Python twins
    _compiled = None
# What log_append does and reads: bumped together with LOG_APPEND_VERSION in
# _batch_fast.c, so a module built from other code is not used.
LOG_APPEND_VERSION = 2
if _compiled is not None and not (
        all(hasattr(_compiled, name)
            for name in ("SegmentCore", "IndexCore", "timestamps_within"))
        and getattr(_compiled, "LOG_APPEND_VERSION", None) == LOG_APPEND_VERSION):
    # built from other code (an editable install's .so stays in the tree until it is
    # built again): all of it or none, so the twins never mix with a stale half
    from loguru import logger

    logger.warning("the C part {} was built from other code (LOG_APPEND_VERSION {}, this "
                   "code's {}): running the Python twins; build it again with "
                   "`pip install -e .`", _compiled.__file__,
                   getattr(_compiled, "LOG_APPEND_VERSION", None), LOG_APPEND_VERSION)
    _compiled = None

COMPILED: bool = _compiled is not None
# The C module itself, for the classes built on its types (log_index.IndexCore,
# log_segment.SegmentCore): None where it was not built.
COMPILED_MODULE: ModuleType | None = _compiled
single_batch: Callable[[bytes | bytearray | memoryview], tuple[int, ...] | None]
write_batch: Callable[..., int]  # (fd, records, base_offset, batch_length, leader_epoch
#                                    [, index, slot, relative_offset, position])
timestamps_within: Callable[[bytes | bytearray | memoryview, int, int, int], bool]
# PartitionLog.append_as_leader's common case in one call (its AppendInfo, or None for
# the general path, nothing changed); None where the C module is not built: the log runs
# its inline Python twin then. The log registers its types (log_append_types) on import.
log_append: Callable[..., object] | None = None
if _compiled is not None:
    # built only for the CPython versions its tuple handling was checked on (both names
    # or neither): elsewhere the log runs the twin
    if hasattr(_compiled, "log_append") and hasattr(_compiled, "log_append_types"):
        log_append = _compiled.log_append
    single_batch = _compiled.single_batch
    write_batch = _compiled.write_batch
    timestamps_within = _compiled.timestamps_within
else:
    single_batch = single_batch_py
    write_batch = write_batch_py
    timestamps_within = timestamps_within_py
