"""The active segment's append in C (_batch_fast.SegmentCore.append_one) against its
Python twin (LogSegment._append_one_py).

Both run the same appends through a whole partition log (rolls on size, on a full
index, on time; index entries at every interval; time index entries; group commits;
index disk reservations) and must leave the same files, the same answers and the
same segment and index fields. Then the failures: a write refused half way (the
file size limit: the first writev is short, the next fails) and a write that is
short and then goes on (a pipe, interrupted by a signal), each through both.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.core import batch_fast, log_index
from actors.core.log_index import INDEX_FIELDS, IndexCorePy, OffsetIndex
from actors.core.log_segment import SEGMENT_FIELDS, LogSegment, SegmentCorePy
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from wire.errors import StorageError

compiled = batch_fast.COMPILED_MODULE
needs_c = pytest.mark.skipif(compiled is None, reason="the C module is not built here")
IMPLS = ("c", "py")


def _use(monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    """Appends through the C append_one (the class's own) or the Python twin."""
    monkeypatch.undo()
    if impl == "py":
        monkeypatch.setattr(LogSegment, "append_one", LogSegment._append_one_py)


def _members(cls: type) -> tuple[str, ...]:
    return tuple(name for name, value in vars(cls).items()
                 if isinstance(value, types.MemberDescriptorType))


@needs_c
def test_the_twins_have_the_same_fields() -> None:
    assert compiled is not None
    assert _members(compiled.SegmentCore) == SEGMENT_FIELDS
    assert _members(compiled.IndexCore) == INDEX_FIELDS
    # Python lays __slots__ out sorted
    assert _members(SegmentCorePy) == tuple(sorted(SEGMENT_FIELDS))
    assert _members(IndexCorePy) == tuple(sorted(INDEX_FIELDS))
    assert LogSegment.append_one is compiled.SegmentCore.append_one
    assert issubclass(OffsetIndex, compiled.IndexCore)


def _state(log: PartitionLog) -> list[dict[str, Any]]:
    """Every field the append touches, of every segment and its indexes."""
    out = []
    for segment in log.segments:
        fields: dict[str, Any] = {name: getattr(segment, name) for name in SEGMENT_FIELDS
                                  if name not in ("_fd", "offset_index", "time_index")}
        fields["_staged"] = [bytes(piece) for piece in segment._staged]
        for name in ("offset_index", "time_index"):
            index = getattr(segment, name)
            fields[name] = {field: getattr(index, field, "unset") for field in INDEX_FIELDS
                            if field != "_map"}
        out.append(fields)
    return out


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex")}


APPENDS = st.lists(st.tuples(st.integers(1, 6),  # records
                             st.integers(0, 700),  # value bytes
                             st.sampled_from(["up", "same", "down", "none"]),  # timestamps
                             st.booleans(),  # deferred (group commit)
                             st.booleans()),  # commit after it
                   min_size=1, max_size=40)


@needs_c
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(APPENDS, st.integers(600, 12_000), st.integers(0, 3000), st.integers(24, 160),
       st.sampled_from([8, 24, 4096]))
def test_appends_through_either_leave_the_same_log(
        tmp_path_factory: pytest.TempPathFactory, appends: list[tuple[int, int, str, bool, bool]],
        segment_bytes: int, interval: int, index_bytes: int, chunk: int) -> None:
    """Rolls (size, full index, time), index and time index entries, reservations of index
    disk (small chunks), staged appends: the same files, answers and fields."""
    root = tmp_path_factory.mktemp("twins")
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval,
                       segment_index_bytes=index_bytes, segment_ms=5_000)
    results = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for impl in IMPLS:
            _use(monkeypatch, impl)
            monkeypatch.setattr(log_index, "ALLOCATE_CHUNK", chunk)
            log = PartitionLog.open(root / impl / "t-0", "t", 0, config, 0)
            log.assign_epoch_start_offset(1, 0)
            clock = 1_000
            outcome: list[Any] = []
            for n, (records, value_size, how, defer, commit) in enumerate(appends):
                clock += {"up": 700, "same": 0, "down": -300, "none": 0}[how]
                stamps = [-1] * records if how == "none" else [clock - records + i
                                                               for i in range(records)]
                batch = build_batch([bytes([n % 251]) * value_size] * records,
                                    timestamps_ms=stamps)
                try:
                    outcome.append(log.append_as_leader(batch, 1, clock, defer=defer))
                except Exception as exc:  # a refusal (too large) must match too
                    outcome.append((type(exc), str(exc)))
                if commit:
                    outcome.append(log.commit())
                outcome.append(_state(log))
            outcome.append(log.commit())
            outcome.append(_state(log))
            log.flush(0)
            results.append((outcome, _files(root / impl / "t-0")))
            log.close()
    assert results[0] == results[1]


@needs_c
@pytest.mark.parametrize("defer", [False, True])
def test_the_c_append_does_the_appends_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             defer: bool) -> None:
    """The twin comparison above passes as well if C hands every append to the Python
    twin: here C must write (or stage) the batches itself, the twin taking only the
    appends that reserve index disk (one per 4 KiB chunk of index)."""
    handed: list[int] = []
    twin = LogSegment._append_one_py

    def counted(self: LogSegment, *args: Any) -> Any:
        handed.append(1)
        return twin(self, *args)

    monkeypatch.setattr(LogSegment, "_append_one_py", counted)
    config = LogConfig(index_interval_bytes=1)  # an index entry at every batch
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    log.assign_epoch_start_offset(1, 0)
    for n in range(200):
        log.append_as_leader(build_batch([b"v" * 100], timestamps_ms=[1_000 + n]), 1,
                             2_000, defer=defer)
        if defer and n % 10 == 9:
            log.commit()
    log.commit()
    assert log.log_end_offset == 200
    assert 0 < len(handed) <= 4, len(handed)   # 200 entries of 8 bytes: one chunk or two
    log.close()


def _indexed_log(monkeypatch: pytest.MonkeyPatch, impl: str, directory: Path) -> PartitionLog:
    """A log with an index entry at every batch, appending through ``impl``."""
    _use(monkeypatch, impl)
    log = PartitionLog.open(directory, "t", 0, LogConfig(index_interval_bytes=1), 0)
    log.assign_epoch_start_offset(0, 0)
    return log


def _big_batches(count: int) -> list[bytes]:
    return [build_batch([os.urandom(3000) for _ in range(3)], timestamps_ms=[5 + i, 6 + i, 7])
            for i in range(count)]


@needs_c
def test_a_write_refused_half_way_is_undone_by_both(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The file size limit falls inside the third batch: its first writev is short, the
    next fails (EFBIG). Both cut the file back to the batch's start, raise StorageError,
    and leave the segment and its indexes as after the second batch; the log then takes
    the batch once the limit is lifted."""
    batches = _big_batches(4)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    results = []
    try:
        for impl in IMPLS:
            log = _indexed_log(monkeypatch, impl, tmp_path / impl / "t-0")
            for batch in batches[:2]:
                log.append_as_leader(batch, 0, 0)
            before = _state(log)
            limit = log.segments[-1].size + len(batches[2]) // 2
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
            try:
                with pytest.raises(StorageError, match=r"cannot append to .*File too large"):
                    log.append_as_leader(batches[2], 0, 0)
            finally:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            assert _state(log) == before
            assert os.path.getsize(log.segments[-1].log_path) == before[-1]["size"]
            for batch in batches[2:]:
                log.append_as_leader(batch, 0, 0)
            log.flush(0)
            results.append((_state(log), _files(tmp_path / impl / "t-0")))
            log.close()
    finally:
        signal.signal(signal.SIGXFSZ, previous)
    assert results[0] == results[1]


@needs_c
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_a_short_write_is_finished_by_both(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment's descriptor swapped for a full pipe: the writev is interrupted by a
    signal after some bytes and returns short, the append writes the rest once a reader
    drains the pipe. Both send the same bytes and end in the same state, the index
    entry written only once the batch is whole."""
    batches = _big_batches(2)
    results = []
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        for impl in IMPLS:
            log = _indexed_log(monkeypatch, impl, tmp_path / impl / "t-0")
            log.append_as_leader(batches[0], 0, 0)
            segment = log.segments[-1]
            read_end, write_end = os.pipe()
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # less than the batch
            received: list[bytes] = []

            def drain(fd: int = read_end, received: list[bytes] = received) -> None:
                time.sleep(0.3)  # after the alarm: the writev is blocked on a full pipe
                while chunk := os.read(fd, 65536):
                    received.append(chunk)

            reader = threading.Thread(target=drain)
            file_fd = segment._fd
            segment._fd = write_end
            reader.start()
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            try:
                log.append_as_leader(batches[1], 0, 0)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                segment._fd = file_fd
                os.close(write_end)
                reader.join(10)
                os.close(read_end)
            assert not reader.is_alive()
            sent = b"".join(received)
            assert len(sent) == len(batches[1])
            results.append((sent, _state(log), segment.index_entries()))
            log.close_without_flush()
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert results[0] == results[1]
    assert results[0][2] == [(0, 0), (3, len(batches[0]))]


@needs_c
def test_fields_out_of_c_range_go_to_the_python_twin(tmp_path: Path) -> None:
    """A field C cannot hold (an index interval past int64) is left to _append_one_py:
    the append still happens, as the twin does it."""
    segment = LogSegment(tmp_path, 0, 2**70, 0)
    segment.activate()
    batch = build_batch([b"x"], timestamps_ms=[9])
    for base in (0, 1):
        segment.append_one(batch, len(batch) - 12, 0, len(batch), base, base + 1, 9)
    assert segment.size == 2 * len(batch)
    assert segment.index_entries() == [(0, 0)]  # the interval is never reached again
    assert segment.next_offset == 2
    with pytest.raises(TypeError):
        segment.append_one(batch, 1, 2)  # type: ignore[call-arg]
    segment.close()


_WITHOUT_C = """
import hashlib, sys
sys.modules["actors.core._batch_fast"] = None  # as if it was never built
from pathlib import Path
from actors.core import batch_fast, log_index, log_segment
from tests.core.test_segment_core import run_small_log
assert not batch_fast.COMPILED and not log_segment.SEGMENT_CORE_COMPILED
assert log_segment.LogSegment.__mro__[1] is log_segment.SegmentCorePy
assert log_index.OffsetIndex.__mro__[2] is log_index.IndexCorePy
print(run_small_log(Path(sys.argv[1])))
"""


def run_small_log(directory: Path) -> str:
    """A log through rolls, index entries and a group commit; a digest of its files."""
    log = PartitionLog.open(directory / "t-0", "t", 0,
                            LogConfig(segment_bytes=5_000, index_interval_bytes=700), 0)
    log.assign_epoch_start_offset(0, 0)
    for n in range(40):
        batch = build_batch([bytes([n]) * (50 * (n % 7))] * 3, timestamps_ms=[n * 10] * 3)
        log.append_as_leader(batch, 0, n, defer=n % 5 == 0)
        if n % 10 == 0:
            log.commit()
    log.commit()
    log.flush(0)
    digest = hashlib.sha256()
    for name, data in _files(directory / "t-0").items():
        digest.update(name.encode() + data)
    log.close()
    return digest.hexdigest()


def test_the_python_twins_alone_write_the_same_log(tmp_path: Path) -> None:
    """Where the C module is not built, LogSegment and the indexes stand on the Python
    twins (run in a process that cannot import it): the same log as here."""
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _WITHOUT_C, str(tmp_path / "py")], cwd=root,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == run_small_log(tmp_path / "here")
