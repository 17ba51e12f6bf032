"""The C single-batch path (actors/core/_batch_fast.c) against its Python twin.

Both run on the same randomised inputs: valid batches of every shape a client
sends, and the same batches corrupted (a flipped byte anywhere, a wrong CRC,
truncated or extended, header fields set to what the log must refuse), with
timestamps anywhere in the int64 range. They must agree on every one: the same
fields or the same None, the same bytes in the file. Then whole logs appended
through either must be byte-identical.

On CI the C module must have been built (deploy/install.sh installs a compiler
and the Python headers): test_compiled_where_required fails if it was not, so
the fast path really runs there.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.core import batch_fast, log_segment, partition_log
from actors.core.log_index import OffsetIndex
from actors.core.log_segment import LogSegment
from actors.core.partition_log import LogConfig, PartitionLog, check_timestamps
from actors.core.record_batch import build_batch, check_batches

compiled = batch_fast._compiled
needs_c = pytest.mark.skipif(compiled is None, reason="the C module is not built here")

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def client_batches(draw: st.DrawFn) -> bytes:
    """A batch as a producer builds it: plain, idempotent or transactional."""
    count = draw(st.integers(1, 20))
    values = [draw(st.binary(max_size=300)) for _ in range(count)]
    timestamps = draw(st.lists(st.integers(-(2**40), 2**62), min_size=count, max_size=count))
    kind = draw(st.sampled_from(["plain", "idempotent", "transactional"]))
    producer = {}
    attributes = draw(st.sampled_from([0, 1, 2, 3, 4]))  # compression codec bits
    if kind != "plain":
        producer = {"producer_id": draw(st.integers(0, 2**63 - 1)),
                    "producer_epoch": draw(st.integers(0, 2**15 - 1)),
                    "base_sequence": draw(st.integers(0, 2**31 - 1))}
        if kind == "transactional":
            attributes |= 0x10
    return build_batch(values, timestamps_ms=timestamps, attributes=attributes,
                       base_offset=draw(INT64), partition_leader_epoch=draw(INT32), **producer)


def _with_crc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return batch


@st.composite
def mangled(draw: st.DrawFn) -> bytes:
    """A client batch, often broken in one of the ways the checks must catch."""
    batch = bytearray(draw(client_batches()))
    how = draw(st.sampled_from(["none", "flip", "crc", "truncate", "extend", "field",
                                "field_recrc", "short"]))
    if how == "flip":
        at = draw(st.integers(0, len(batch) - 1))
        batch[at] ^= draw(st.integers(1, 255))
    elif how == "crc":
        struct.pack_into(">I", batch, 17, draw(st.integers(0, 2**32 - 1)))
    elif how == "truncate":
        del batch[draw(st.integers(0, len(batch) - 1)):]
    elif how == "extend":
        batch += draw(st.binary(min_size=1, max_size=80))
    elif how in ("field", "field_recrc"):
        # (offset, format) of batch length, magic, attributes, lastOffsetDelta,
        # timestamps, producer id, epoch, sequence, records count
        at, fmt, values = draw(st.sampled_from([
            (8, ">i", INT32), (16, ">b", st.integers(-128, 127)), (21, ">h", INT16),
            (23, ">i", INT32), (27, ">q", INT64), (35, ">q", INT64), (43, ">q", INT64),
            (51, ">h", INT16), (53, ">i", INT32), (57, ">i", INT32)]))
        struct.pack_into(fmt, batch, at, draw(values))
        if how == "field_recrc":
            _with_crc(batch)
    elif how == "short":
        batch = batch[:draw(st.integers(0, 61))]
    return bytes(batch)


@needs_c
@SETTINGS
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_crc32c_matches_the_crc32c_package(data: bytes, start: int) -> None:
    assert compiled.crc32c(data, start) == crc32c.crc32c(data, start)
    assert compiled.crc32c(data) == crc32c.crc32c(data)
    assert compiled.crc32c_table(data) == crc32c.crc32c(data)


@needs_c
def test_crc32c_lengths_around_the_stream_blocks() -> None:
    data = os.urandom(20_000)
    for size in [*range(0, 70), *range(1500, 1560), *range(3060, 3090), 16_384, 20_000]:
        assert compiled.crc32c(data[:size]) == crc32c.crc32c(data[:size]), size


@needs_c
def _cpu_folds() -> bool:
    """The CPU flags the fold needs, as the kernel lists them."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    return {"avx512f", "avx512bw", "vpclmulqdq", "pclmulqdq", "sse4_2"} <= set(flags)


def test_crc32c_folding_agrees_with_the_streams_and_the_table() -> None:
    """Where the CPU folds by carry-less multiplication (CRC_FOLD), every length from
    the fold's threshold (256 bytes) through its 256- and 64-byte rounds and tails, at
    every alignment of an 8-byte word, and a batch's size, give the crc32 streams' and
    the table's value, from a zero and from a running register."""
    if not compiled.CRC_FOLD:
        # a CPU with the instructions under a build that has the fold: the import's check
        # against the table refused it, which is a wrong constant or fold, not a skip
        assert not (compiled.CRC_FOLD_BUILT and _cpu_folds()), "the fold failed its check"
        pytest.skip("no AVX-512 VPCLMULQDQ here or in the build: crc32c is the streams' path")
    data = os.urandom(40_000)
    sizes = [*range(250, 1100), 16_384 - 21, 16_384, 20_000, 39_990]
    for start in range(8):
        for size in sizes:
            piece = memoryview(data)[start:start + size]
            expected = crc32c.crc32c(piece)
            assert compiled.crc32c(piece) == expected, (start, size)
            assert compiled.crc32c_streams(piece) == expected, (start, size)
            assert compiled.crc32c(piece, 0x12345678) == crc32c.crc32c(piece, 0x12345678)
    for size in (256, 300, 16_384):
        assert compiled.crc32c_table(data[:size]) == crc32c.crc32c(data[:size])


def test_single_batch_leaves_a_client_log_append_time_stamp_to_the_general_path() -> None:
    """The LogAppendTime bit is the topic's to set: the fast path, which writes the
    client's header as is, must not take such a batch (the general path rewrites or
    refuses it). The Python twin always, the C part where it is built."""
    plain = build_batch([b"a"], timestamps_ms=[7])
    stamped = build_batch([b"a"], timestamps_ms=[7], attributes=0x08)
    twins = [batch_fast.single_batch_py] + ([compiled.single_batch] if compiled else [])
    for single_batch in twins:
        assert single_batch(plain) is not None
        assert single_batch(stamped) is None


@needs_c
@SETTINGS
@given(mangled(), st.sampled_from([bytes, bytearray, memoryview]))
def test_single_batch_agrees(batch: bytes, kind: type) -> None:
    records = kind(batch)
    expected = batch_fast.single_batch_py(records)
    assert compiled.single_batch(records) == expected
    if expected is not None:  # whatever passes is one valid batch, as the general path says
        assert len(expected) == 13 and expected[1] + 12 == len(batch)


INT64_MIN = -(2**63)
NOW = st.one_of(st.integers(-(2**41), 2**62), st.sampled_from([INT64_MIN, 2**63 - 1]))
BOUND = st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 2**40, 2**61, 2**63 - 1]))


@needs_c
@SETTINGS
@given(mangled(), NOW, BOUND, BOUND, st.sampled_from([bytes, bytearray, memoryview]))
def test_timestamps_within_agrees(batch: bytes, now: int, before: int, after: int,
                                  kind: type) -> None:
    expected = batch_fast.timestamps_within_py(kind(batch), now, before, after)
    assert compiled.timestamps_within(kind(batch), now, before, after) is expected
    if expected and batch_fast.single_batch_py(batch) is not None:
        # what passes the fast check passes the general path's exact one
        check_timestamps(batch, check_batches(batch), now, before, after)


def _record(timestamp_delta_varint: bytes) -> bytes:
    """A record with a hand-written timestamp delta varint, null key, empty value."""
    body = b"\x00" + timestamp_delta_varint + b"\x00\x01\x00\x00"
    return bytes([len(body) << 1]) + body


def _with_records(batch: bytes, records: bytes, count: int) -> bytes:
    out = bytearray(batch[:61]) + records
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 57, count)
    return bytes(_with_crc(out))


TWINS = [pytest.param(batch_fast.timestamps_within_py, id="py"),
         pytest.param(getattr(compiled, "timestamps_within", None), id="c", marks=needs_c)]


@pytest.mark.parametrize("within", TWINS)
def test_timestamps_within_examples(within: Callable[..., bool]) -> None:
    now = 10**12
    plain = build_batch([b"a", b"b", b"c"], timestamps_ms=[now, now - 50, now + 20])
    assert within(plain, now, 50, 20) is True
    assert within(plain, now, 49, 20) is False  # the middle record, older than the first
    assert within(plain, now, 50, 19) is False
    assert within(build_batch([b"a"], timestamps_ms=[now], attributes=1), now, 5, 5) is False
    assert within(plain[:-1], now, 50, 20) is False  # shorter than its length says
    assert within(build_batch([b"a"], timestamps_ms=[-1]), now, 0, 0) is True  # no timestamp
    # an upper bound past int64 is INT64_MAX; a lower one below it, INT64_MIN
    top = build_batch([b"a"], timestamps_ms=[2**63 - 1])
    assert within(top, now, 0, 2**63 - 1) is True
    assert within(build_batch([b"a"], timestamps_ms=[INT64_MIN]), -5, 2**63 - 1, 0) is True
    assert within(build_batch([b"a"], timestamps_ms=[INT64_MIN]), 0, 2**63 - 1, 0) is False
    # a delta varint of 10 bytes is the most that fits 64 bits; base + delta must fit too
    base = build_batch([b"a"], timestamps_ms=[0])
    ten = b"\xff" * 9 + b"\x01"  # zigzag of 2**64 - 1: INT64_MIN
    assert within(_with_records(base, _record(ten), 1), -1, 2**63 - 1, 0) is True
    assert within(_with_records(base, _record(b"\xff" * 9 + b"\x02"), 1), 0,
                  2**63 - 1, 2**63 - 1) is False
    assert within(_with_records(base, _record(b"\xff" * 10 + b"\x00"), 1), 0,
                  2**63 - 1, 2**63 - 1) is False
    late = bytearray(_with_records(base, _record(ten), 1))
    struct.pack_into(">q", late, 27, -1)  # base -1 + INT64_MIN overflows
    assert within(bytes(_with_crc(late)), 0, 2**63 - 1, 2**63 - 1) is False
    assert within(_with_records(base, b"\x00", 1), 0, 5, 5) is False  # an empty record
    with pytest.raises(ValueError, match="must be >= 0"):
        within(plain, now, -1, 0)


@needs_c
@SETTINGS
@given(client_batches())
def test_valid_batches_pass_both(batch: bytes) -> None:
    fields = compiled.single_batch(batch)
    assert fields is not None
    assert fields == batch_fast.single_batch_py(batch)


@needs_c
@SETTINGS
@given(client_batches(), INT64, INT32)
def test_write_batch_agrees(tmp_path: Path, batch: bytes, base_offset: int,
                            leader_epoch: int) -> None:
    files = []
    for name, write in (("c", compiled.write_batch), ("py", batch_fast.write_batch_py)):
        path = tmp_path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            length = len(batch) - 12
            assert write(fd, batch, base_offset, length, leader_epoch) == len(batch)
            assert write(fd, memoryview(batch), base_offset, length, leader_epoch) == len(batch)
        finally:
            os.close(fd)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    head = struct.pack(">qiib", base_offset, len(batch) - 12, leader_epoch, 2)
    assert files[0] == (head + batch[17:]) * 2


@needs_c
@SETTINGS
@given(client_batches(), INT64, INT32, st.integers(0, 15), INT32, INT32,
       st.sampled_from(["bytearray", "mmap"]))
def test_write_batch_with_index_entry_agrees(tmp_path: Path, batch: bytes, base_offset: int,
                                             leader_epoch: int, slot: int, relative: int,
                                             position: int, kind: str) -> None:
    """With an index, the same file bytes and the entry at the slot, as OffsetIndex packs it."""
    files = []
    indexes = []
    for name, write in (("c", compiled.write_batch), ("py", batch_fast.write_batch_py)):
        path = tmp_path / name
        index: bytearray | mmap.mmap = bytearray(b"\xaa" * 128) if kind == "bytearray" \
            else mmap.mmap(-1, 128)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            length = len(batch) - 12
            assert write(fd, batch, base_offset, length, leader_epoch, index, slot * 8,
                         relative, position) == len(batch)
            assert write(fd, batch, base_offset, length, leader_epoch, None, 0, 0, 0) \
                == len(batch)
        finally:
            os.close(fd)
        files.append(path.read_bytes())
        indexes.append(bytes(index))
    assert files[0] == files[1]
    assert indexes[0] == indexes[1]
    assert indexes[0][slot * 8:slot * 8 + 8] == OffsetIndex.entry.pack(relative, position)
    untouched = 0xAA if kind == "bytearray" else 0
    assert set(indexes[0][:slot * 8] + indexes[0][slot * 8 + 8:]) <= {untouched}


@needs_c
@pytest.mark.parametrize("bad", ["slot_negative", "slot_past_end", "relative", "position",
                                 "read_only", "short_batch"])
def test_write_batch_refuses_a_bad_index_entry_before_writing(tmp_path: Path, bad: str) -> None:
    """A bad entry argument is refused with nothing written, by both, the same way."""
    batch = build_batch([b"v"], timestamps_ms=[1])
    args: dict[str, object] = {"index": bytearray(64), "slot": 8, "relative": 1, "position": 2}
    records: bytes = batch
    if bad == "slot_negative":
        args["slot"] = -8
    elif bad == "slot_past_end":
        args["slot"] = 57
    elif bad == "relative":
        args["relative"] = 2**31
    elif bad == "position":
        args["position"] = -(2**31) - 1
    elif bad == "read_only":
        args["index"] = bytes(64)
    else:
        records = batch[:16]
    outcomes = []
    for name, write in (("c", compiled.write_batch), ("py", batch_fast.write_batch_py)):
        fd = os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with pytest.raises((OverflowError, ValueError, BufferError)) as raised:
                write(fd, records, 0, len(batch) - 12, 0, args["index"], args["slot"],
                      args["relative"], args["position"])
        finally:
            os.close(fd)
        outcomes.append(raised.type)
        assert os.path.getsize(tmp_path / name) == 0
        assert args["index"] in (bytes(64), bytearray(64))  # no entry either
    assert outcomes[0] is outcomes[1]


@needs_c
@pytest.mark.parametrize("args", [
    (10, 2**63, 100, 0), (10, 0, 2**31, 0), (10, 0, 100, 2**31), (10, 0, 100, -(2**31) - 1)])
def test_write_batch_refuses_out_of_range_fields(tmp_path: Path,
                                                 args: tuple[int, int, int, int]) -> None:
    size, base_offset, length, epoch = args
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for write in (compiled.write_batch, batch_fast.write_batch_py):
            with pytest.raises((OverflowError, struct.error)):
                write(fd, bytes(size + 17), base_offset, length, epoch)
            with pytest.raises(ValueError):
                write(fd, bytes(16), 0, 0, 0)
            for bad_fd in (-1, 1_000_000):
                with pytest.raises(OSError):
                    write(bad_fd, bytes(100), 0, 83, 0)
    finally:
        os.close(fd)
    assert os.path.getsize(tmp_path / "f") == 0


@needs_c
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(mangled(), min_size=1, max_size=30), st.booleans(), st.booleans())
def test_logs_appended_through_either_are_identical(tmp_path_factory: pytest.TempPathFactory,
                                                    batches: list[bytes],
                                                    defer: bool, bounded: bool) -> None:
    """The whole append (checks, offsets, indexes, refusals) through C and through Python,
    ``bounded`` with timestamp bounds that refuse some of the batches' records
    (timestamps from -2**40 to 2**62 against [0, 3 * 2**60])."""
    root = tmp_path_factory.mktemp("logs")
    config = (LogConfig(segment_bytes=20_000, message_timestamp_before_max_ms=2**60,
                        message_timestamp_after_max_ms=2**61) if bounded
              else LogConfig(segment_bytes=20_000))
    now_ms = 2**60 if bounded else 0
    results = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, impl in (("c", (compiled.single_batch, compiled.write_batch,
                                  compiled.timestamps_within)),
                           ("py", (batch_fast.single_batch_py, batch_fast.write_batch_py,
                                   batch_fast.timestamps_within_py))):
            monkeypatch.setattr(partition_log, "single_batch", impl[0])
            monkeypatch.setattr(partition_log, "timestamps_within", impl[2])
            monkeypatch.setattr(log_segment, "write_batch", impl[1])
            if name == "py":  # the segment's append too: SegmentCore's, or its Python twin
                monkeypatch.setattr(LogSegment, "append_one", LogSegment._append_one_py)
            log = PartitionLog.open(root / name / "t-0", "t", 0, config, 0)
            log.assign_epoch_start_offset(3, 0)
            outcome = []
            for batch in batches:
                try:
                    outcome.append(log.append_as_leader(batch, 3, now_ms, defer=defer))
                except Exception as exc:  # the refusal itself must match
                    outcome.append((type(exc), str(exc)))
                if defer:
                    outcome.append(log.commit())
            log.flush(0)
            files = {p.name: p.read_bytes() for p in sorted((root / name / "t-0").iterdir())
                     if p.suffix in (".log", ".index", ".timeindex")}
            log.close()
            results.append((outcome, files))
    assert results[0] == results[1]


def test_compiled_where_required() -> None:
    """On CI (CI=true) or with ACTORLOG_REQUIRE_C=1 the C module must be there."""
    required = (os.environ.get("CI", "").lower() in ("1", "true", "yes")
                or os.environ.get("ACTORLOG_REQUIRE_C") == "1")
    if not required:
        pytest.skip("neither CI nor ACTORLOG_REQUIRE_C=1 is set")
    assert batch_fast.COMPILED, (
        "actors/core/_batch_fast.c was not built: install gcc and the Python headers "
        "(deploy/install.sh does), then pip install -e .")
    assert batch_fast.single_batch is compiled.single_batch
    assert batch_fast.write_batch is compiled.write_batch
    assert log_segment.SEGMENT_CORE_COMPILED
    assert LogSegment.append_one is compiled.SegmentCore.append_one


@pytest.mark.parametrize("impl", ["c", "py"])
def test_a_short_write_still_gets_its_index_entry(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  impl: str) -> None:
    """write_batch leaves the index entry to a whole write: after a short one (a regular
    file may take fewer bytes) the segment writes the rest and the entry itself, so the
    files are those of appends that wrote at once. This is the Python twin of the
    segment's append, which calls write_batch; the C one (SegmentCore.append_one) is
    tested for the same in tests/core/test_segment_core.py."""
    if impl == "c" and compiled is None:
        pytest.skip("the C module is not built here")
    write = compiled.write_batch if impl == "c" else batch_fast.write_batch_py
    monkeypatch.setattr(LogSegment, "append_one", LogSegment._append_one_py)
    batches = [build_batch([os.urandom(3000) for _ in range(3)], timestamps_ms=[5, 6, 7])
               for _ in range(4)]

    def short(fd: int, records: bytes, base_offset: int, batch_length: int, leader_epoch: int,
              *entry: object) -> int:
        head = struct.pack(">qiib", base_offset, batch_length, leader_epoch, 2)
        return os.write(fd, (head + bytes(records[17:]))[:len(records) // 2])

    files = []
    for name, writer in (("whole", write), ("short", short)):
        monkeypatch.setattr(log_segment, "write_batch", writer)
        log = PartitionLog.open(tmp_path / name / "t-0", "t", 0,
                                LogConfig(index_interval_bytes=1), 0)
        log.assign_epoch_start_offset(0, 0)
        for batch in batches:
            log.append_as_leader(batch, 0, 0)
        assert log.segments[-1].offset_index.entries == len(batches)
        assert [log.read(offset, 1).records[:8] for offset in (0, 3, 6, 9)] == [
            struct.pack(">q", offset) for offset in (0, 3, 6, 9)]
        log.flush(0)
        files.append({p.name: p.read_bytes() for p in sorted((tmp_path / name / "t-0").iterdir())
                      if p.suffix in (".log", ".index", ".timeindex")})
        log.close()
    assert files[0] == files[1]
