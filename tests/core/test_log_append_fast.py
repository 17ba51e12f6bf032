"""append_as_leader's common case in C (batch_fast.log_append) against its inline Python
twin (partition_log's fast path, run with ``partition_log._log_append`` set to None): the
same appends through each leave the same files, answers, producer state and fields, and
C takes itself exactly the appends the twin's conditions let through."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from actors.core import batch_fast, partition_log
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch
from tests.core.test_segment_core import _state
from wire.errors import StorageError

needs_c = pytest.mark.skipif(batch_fast.log_append is None,
                             reason="the C module is not built here")
NOW = 1_700_000_000_000
Step = tuple[str, Callable[[PartitionLog, bool], Any], bool | None]


def _plain(n: int, records: int = 3, stamp: int = NOW, **kw: Any) -> bytes:
    return build_batch([b"v%d-" % n * 30] * records,
                       timestamps_ms=[stamp + i for i in range(records)], **kw)


def _idem(seq: int, records: int = 2, *, pid: int = 7, epoch: int = 0,
          txn: bool = False, stamp: int = NOW) -> bytes:
    return build_batch([b"i%d" % seq * 20] * records, timestamps_ms=[stamp] * records,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=TRANSACTIONAL_BIT if txn else 0)


def _gzip(n: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, NOW + i, None, b"z%d-" % n * 40, [])
    return bytes(builder.build())


def _append(batch: bytes | bytearray | memoryview, epoch: int = 1, now: int = NOW,
            coordinator: bool = False) -> Callable[[PartitionLog, bool], Any]:
    return lambda log, defer: log.append_as_leader(batch, epoch, now, coordinator=coordinator,
                                                   defer=defer)


def _follower(batch: bytes) -> Callable[[PartitionLog, bool], Any]:
    return lambda log, defer: log.append_as_follower(batch, NOW)


def _commit(log: PartitionLog, defer: bool) -> Any:
    return log.commit()


def _limited(step: Callable[[PartitionLog, bool], Any]) -> Callable[[PartitionLog, bool], Any]:
    """The step with the process's file size limit a few bytes past the active segment's
    end: its write fails (EFBIG, SIGXFSZ ignored by the test) with StorageError."""
    def run(log: PartitionLog, defer: bool) -> Any:
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (log.segments[-1].size + 10, hard))
        try:
            return step(log, defer)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    return run


def _commit_limited(log: PartitionLog, defer: bool) -> Any:
    """commit() with the file size limit a few bytes past what the active segment's
    file holds (its size less what is staged): the staged batches' write fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    active = log.segments[-1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (active.size - active.staged_bytes + 10, hard))
    try:
        return log.commit()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _sized(size: int) -> bytes:
    """A one-record batch of exactly ``size`` bytes."""
    batch = build_batch([b"s" * (size - 70)], timestamps_ms=[NOW])
    assert len(batch) == size
    return batch


MAX_SEQ = 2**31 - 1


# (name, step, the fast path takes it: True / False, None for a step that is not a
# leader append); each scenario on a fresh log with its config
SCENARIOS: dict[str, tuple[LogConfig, list[Step]]] = {
    "plain": (LogConfig(), [
        ("first", _append(_plain(0)), True),
        ("second", _append(_plain(1, 5)), True),
        ("no timestamps", _append(build_batch([b"x"] * 2, timestamps_ms=[-1, -1])), True),
        ("coordinator", _append(_plain(2), coordinator=True), False),
        ("commit", _commit, None),
        ("bad crc", _append(_plain(3)[:-1] + bytes([_plain(3)[-1] ^ 1])), False),
    ]),
    "idempotent": (LogConfig(), [
        ("new producer", _append(_idem(0)), False),
        ("in sequence", _append(_idem(2)), True),
        ("in sequence again", _append(_idem(4, 3)), True),
        ("duplicate", _append(_idem(2)), False),
        ("gap", _append(_idem(9)), False),
        ("new producer epoch", _append(_idem(0, epoch=1)), False),
        ("next in the new epoch", _append(_idem(2, epoch=1)), True),
        ("commit", _commit, None),
        ("other producer", _append(_idem(0, pid=8)), False),
        ("old producer again", _append(_idem(4, epoch=1)), True),
        ("a new epoch continuing the sequence", _append(_idem(6, epoch=2)), False),
    ]),
    "transaction": (LogConfig(), [
        ("first of a transaction", _append(_idem(0, txn=True)), False),
        ("later in it", _append(_idem(2, txn=True)), True),
        ("gap in it", _append(_idem(7, txn=True)), False),
        ("commit", _commit, None),
        ("end it", lambda log, defer: log.append_control(7, 0, True, 0, 1, NOW), None),
        ("after the marker: a new transaction", _append(_idem(4, txn=True)), False),
        ("and on", _append(_idem(6, txn=True)), True),
    ]),
    # an abort marker that bumps the epoch (the coordinator fencing a producer): the
    # entry holds only the marker, so the zombie and the new epoch's first batch take
    # the general path, the one after it the fast one
    "epoch-bumping marker": (LogConfig(), [
        ("first of a transaction", _append(_idem(0, txn=True)), False),
        ("later in it", _append(_idem(2, txn=True)), True),
        ("abort, epoch bumped", lambda log, defer: log.append_control(7, 1, False, 0, 1, NOW),
         None),
        ("the zombie at the old epoch", _append(_idem(4, txn=True)), False),
        ("the new epoch's first past 0", _append(_idem(2, epoch=1, txn=True)), False),
        ("the new epoch's first", _append(_idem(0, epoch=1, txn=True)), False),
        ("and on", _append(_idem(2, epoch=1, txn=True)), True),
    ]),
    # a lost group commit (deferred only) takes back the five batches that pushed the
    # committed ones out: the entry has no batch and a commit marker of its epoch, its
    # sequence lost, and the retry of the first lost one takes the general path
    "lost sequence after a commit marker": (LogConfig(), [
        ("first of a transaction", _append(_idem(0, txn=True)), False),
        ("later in it", _append(_idem(2, txn=True)), True),
        ("commit it", lambda log, defer: log.append_control(7, 0, True, 0, 1, NOW), None),
        ("the next transaction's first", _append(_idem(4, txn=True)), False),
        *((f"staged {seq}", _append(_idem(seq, txn=True)), True) for seq in range(6, 16, 2)),
        ("the write fails", _commit_limited, None),
        ("the first lost one again", _append(_idem(6, txn=True)), False),
    ]),
    # the same without a transaction: the new epoch's first batch must be sequence 0
    # (refused on the general path otherwise), the one after it takes the fast path
    "epoch-bumping marker, idempotent": (LogConfig(), [
        ("first", _append(_idem(0)), False),
        ("next", _append(_idem(2)), True),
        ("marker, epoch bumped", lambda log, defer: log.append_control(7, 1, False, 0, 1, NOW),
         None),
        ("the new epoch's first past 0", _append(_idem(2, epoch=1)), False),
        ("the old epoch's next", _append(_idem(4)), False),
        ("the new epoch's first", _append(_idem(0, epoch=1)), False),
        ("and on", _append(_idem(2, epoch=1)), True),
    ]),
    # producer.id.expiration.ms: an expired producer is unknown again (the general path
    # takes its next batch, at any sequence), then in sequence on the fast path
    "expired producer": (LogConfig(), [
        ("first", _append(_idem(0)), False),
        ("next", _append(_idem(2)), True),
        ("other producer, later", _append(_idem(0, pid=8, stamp=NOW + 500)), False),
        ("commit", _commit, None),
        ("expiry", lambda log, defer: _expire(log, NOW + 1_000), None),
        ("after a gap", _append(_idem(9)), False),
        ("and on", _append(_idem(11)), True),
        ("the other's next", _append(_idem(2, pid=8)), True),
    ]),
    "leader epoch": (LogConfig(), [
        ("epoch 1", _append(_plain(0)), True),
        ("new epoch 2", _append(_plain(1), epoch=2), False),
        ("epoch 2 again", _append(_plain(2), epoch=2), True),
        ("an older epoch", _append(_plain(3), epoch=1), False),
    ]),
    # 358 bytes a batch: two fit in a segment
    "roll by size": (LogConfig(segment_bytes=800), [
        (f"batch {i}", _append(_plain(i)), i == 0 or i % 2 == 1) for i in range(5)
    ]),
    "roll by time": (LogConfig(segment_ms=5_000), [
        ("t0", _append(_plain(0, stamp=NOW)), True),
        ("t+1s", _append(_plain(1, stamp=NOW + 1_000)), True),
        ("t+6s: roll", _append(_plain(2, stamp=NOW + 6_000)), False),
        ("t+7s", _append(_plain(3, stamp=NOW + 7_000)), True),
        ("no timestamps", _append(build_batch([b"x"], timestamps_ms=[-1])), True),
    ]),
    # an offset index entry a batch, 6 to an index (the time index takes one: the same
    # timestamps)
    "roll by full index": (LogConfig(index_interval_bytes=1, segment_index_bytes=48), [
        (f"batch {i}", _append(_plain(i)), i != 6) for i in range(8)
    ]),
    "relative offset": (LogConfig(), [
        ("follower far ahead", _follower(
            build_batch([b"f"] * 2, base_offset=2**31 - 10, timestamps_ms=[NOW, NOW],
                        partition_leader_epoch=1)), None),
        ("within int32", _append(_plain(0, 2)), True),
        ("past int32", _append(_plain(1, 8)), False),
        ("in the new segment", _append(_plain(2, 8)), True),
    ]),
    "timestamp bounds": (LogConfig(message_timestamp_before_max_ms=1_000,
                                   message_timestamp_after_max_ms=500), [
        ("within", _append(_plain(0, stamp=NOW - 900)), True),
        ("too old", _append(_plain(1, stamp=NOW - 5_000)), False),
        ("too new", _append(_plain(2, stamp=NOW + 499)), False),
        ("no timestamps", _append(build_batch([b"x"], timestamps_ms=[-1])), True),
        ("compressed", _append(_gzip(3)), False),
    ]),
    "target codec": (LogConfig(compression_type="gzip"), [
        ("gzip", _append(_gzip(0)), True),
        ("uncompressed, re-encoded", _append(_plain(1)), False),
        ("gzip again", _append(_gzip(2)), True),
    ]),
    "producer codec": (LogConfig(), [
        ("gzip kept", _append(_gzip(0)), True),
        ("plain", _append(_plain(1)), True),
    ]),
    "flush.messages": (LogConfig(flush_messages=7), [
        (f"batch {i}", _append(_plain(i)), True) for i in range(5)
    ]),
    "log append time": (LogConfig(message_timestamp_type="LogAppendTime"), [
        ("stamped by the log", _append(_plain(0)), False),
    ]),
    # the segment rolls by the clock (rolls_on_batch_time False): the general path decides
    # (the clock 1 s past the log's opening: no roll)
    "first batch without timestamps": (LogConfig(), [
        ("no timestamps first",
         _append(build_batch([b"x"] * 2, timestamps_ms=[-1, -1]), now=1_000), True),
        ("stamped", _append(_plain(1, stamp=500), now=1_000), False),
        ("stamped again", _append(_plain(2, stamp=600), now=1_000), False),
    ]),
    # _single_batch_max_bytes is min(max.message.bytes, segment.bytes)
    "size at the limit": (LogConfig(max_message_bytes=200), [
        ("exactly max.message.bytes", _append(_sized(200)), True),
        ("one byte over", _append(_sized(201)), False),
        ("under", _append(_sized(199)), True),
    ]),
    "size at segment.bytes": (LogConfig(segment_bytes=250), [
        ("exactly segment.bytes", _append(_sized(250)), True),
        ("one byte over", _append(_sized(251)), False),
        ("into a new segment", _append(_sized(250)), False),
    ]),
    "sequence near its wrap": (LogConfig(), [
        ("new producer near the top", _append(_idem(MAX_SEQ - 3)), False),
        ("its last sequence is the top", _append(_idem(MAX_SEQ - 1)), True),
        ("wrapped to 0 (the general path)", _append(_idem(0)), False),
        ("after the wrap", _append(_idem(2)), True),
        ("other producer near the top", _append(_idem(MAX_SEQ - 5, pid=8)), False),
        ("a batch across the wrap", _append(_idem(MAX_SEQ - 3, 6, pid=8)), True),
        ("next after it", _append(_idem(2, pid=8)), True),
        ("a gap past the top", _append(_idem(MAX_SEQ, pid=7)), False),
    ]),
    "buffer types": (LogConfig(), [
        ("bytearray", _append(bytearray(_plain(0))), True),
        ("memoryview", _append(memoryview(_plain(1))), True),
        ("new producer", _append(_idem(0)), False),
        ("idempotent bytearray", _append(bytearray(_idem(2))), True),
        ("idempotent memoryview", _append(memoryview(_idem(4))), True),
        ("a memoryview slice", _append(memoryview(b"--" + _plain(2))[2:]), True),
    ]),
    # a failed write on the fast path: not deferred, the segment's write; deferred, the
    # flush flush.messages asks for (_flush_appended) writes the staged batch
    "failed write": (LogConfig(flush_messages=1), [
        ("new producer", _append(_idem(0)), False),
        ("in sequence", _append(_idem(2)), True),
        ("file size limit", _limited(_append(_idem(4))), True),
        # deferred: refused before either path (the loss is not told yet)
        ("a plain batch", _append(_plain(9)), True),
        ("commit", _commit, None),
        ("again", _append(_idem(4)), True),
        ("plain, limited", _limited(_append(_plain(5))), True),
        ("commit", _commit, None),
        ("plain again", _append(_plain(5)), True),
    ]),
}


def _expire(log: PartitionLog, now: int) -> list[int]:
    log.producer_id_expiration_ms = 1_000
    return log.remove_expired_producers(now)


def _plain_value(value: Any, directory: Path) -> Any:
    """An error as its type and message (the log's own directory named alike)."""
    if isinstance(value, BaseException):
        return type(value), str(value).replace(str(directory), "<dir>")
    return value


def _snapshot(log: PartitionLog) -> dict[str, Any]:
    state = log.producer_state
    return {
        "commit error": _plain_value(log._commit_error, log.dir),
        "producers": {pid: (entry.producer_epoch, list(entry.batches), entry.marker_offset,
                            entry.marker_timestamp, entry.last_timestamp,
                            entry.sequence_lost)
                      for pid, entry in state.producers.items()},
        "ongoing": dict(state.ongoing_txns),
        "unflushed": log.unflushed_messages,
        "staged entries": [entry.producer_id for entry in log._staged_entries],
        "log start": log.log_start_offset,
        "end": log.log_end_offset,
        "recovery point": log.recovery_point,
        "bases": log.segment_base_offsets,
        "epochs": list(log.epoch_cache.entries),
        "segments": _state(log),
    }


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.is_file() and not p.name.endswith(".lock")}


def _run(directory: Path, config: LogConfig, steps: list[Step], defer: bool,
         general: list[int]) -> tuple[list[Any], dict[str, bytes], list[bool]]:
    """The steps' answers and the log's state after each, its files at the end, and which
    leader appends took the fast path (``general`` counts the general path's runs)."""
    log = PartitionLog.open(directory, "t", 0, config, 0)
    log.assign_epoch_start_offset(1, 0)
    outcome: list[Any] = []
    fast: list[bool] = []
    for name, step, _ in steps:
        before = len(general)
        try:
            outcome.append((name, _plain_value(step(log, defer), directory)))
        except Exception as exc:  # a refusal must match too
            outcome.append((name, _plain_value(exc, directory)))
        fast.append(len(general) == before)
        outcome.append(_snapshot(log))
    outcome.append(_plain_value(log.commit(), directory))
    outcome.append(_snapshot(log))
    log.flush(NOW)
    outcome.append(_snapshot(log))
    log.close()
    return outcome, _files(directory), fast


@pytest.fixture(autouse=True)
def _no_sigxfsz() -> Iterator[None]:
    """A write past RLIMIT_FSIZE fails with EFBIG instead of killing the process."""
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGXFSZ, previous)


@needs_c
@pytest.mark.parametrize("defer", [False, True])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_c_and_python_fast_paths_leave_the_same_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str, defer: bool) -> None:
    config, steps = SCENARIOS[scenario]
    general: list[int] = []
    check = partition_log.check_batches

    def counted(records: Any) -> Any:  # the general path's first step
        general.append(1)
        return check(records)

    monkeypatch.setattr(partition_log, "check_batches", counted)
    through_c = _run(tmp_path / "c" / "t-0", config, steps, defer, general)
    monkeypatch.setattr(partition_log, "_log_append", None)
    through_py = _run(tmp_path / "py" / "t-0", config, steps, defer, general)
    assert through_c[0] == through_py[0]
    assert through_c[1] == through_py[1]
    # C took (and left to the general path) the same appends as the twin, and those meant
    asked = [i for i, (_, _, fast) in enumerate(steps) if fast is not None]
    assert [through_c[2][i] for i in asked] == [through_py[2][i] for i in asked] == [
        steps[i][2] for i in asked]


@needs_c
def test_the_c_append_answers_with_an_append_info(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    log.assign_epoch_start_offset(1, 0)
    info = log.append_as_leader(_plain(0, 4), 1, NOW)
    assert type(info) is partition_log.AppendInfo
    assert info == partition_log.AppendInfo(0, 3, NOW + 3, -1, 0, 4, len(_plain(0, 4)), False)
    log.close()


def _import_after(change: str) -> str:
    """What batch_fast and partition_log make of the C module after ``change`` to it (a
    fresh interpreter: the module is read once, on import), and an append's answer."""
    script = (
        # the extension loaded alone (importing actors.core would import batch_fast)
        "import glob, importlib.util, sys\n"
        "path, = glob.glob('actors/core/_batch_fast*.so')\n"
        "spec = importlib.util.spec_from_file_location('actors.core._batch_fast', path)\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "sys.modules['actors.core._batch_fast'] = m\n"
        f"{change}\n"
        "from actors.core import batch_fast, partition_log\n"
        "import tempfile, pathlib\n"
        "from actors.core.record_batch import build_batch\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    log = partition_log.PartitionLog.open(pathlib.Path(d) / 't-0', 't', 0,\n"
        "                                          partition_log.LogConfig(), 0)\n"
        "    log.assign_epoch_start_offset(1, 0)\n"
        "    info = log.append_as_leader(build_batch([b'x'], timestamps_ms=[5]), 1, 5)\n"
        "    log.close()\n"
        "print(batch_fast.COMPILED, batch_fast.log_append is not None, info.last_offset)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True, cwd=Path(__file__).parents[2])
    return done.stdout.strip()


@needs_c
def test_a_c_module_of_another_log_append_version_is_not_used() -> None:
    assert _import_after("") == "True True 0"
    # a build from other code (a stale .so): the Python twins, all of them
    assert _import_after("m.LOG_APPEND_VERSION += 1") == "False False 0"
    assert _import_after("del m.LOG_APPEND_VERSION") == "False False 0"
    # built without log_append (a CPython it is not built for): the rest of the C module,
    # and the log's inline twin
    assert _import_after("del m.log_append, m.log_append_types") == "True False 0"


@needs_c
def test_a_common_append_runs_no_python_frame(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """append_as_leader is LogCore's C entry: a common-case append (written or staged)
    calls no Python function at all; the twin (``_log_append`` None) still runs."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    log.assign_epoch_start_offset(1, 0)
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    batches = [_plain(i) for i in range(4)]
    # the segment's first append reserves its index slots (in Python, _append_one_py)
    log.append_as_leader(_plain(9), 1, NOW)
    sys.setprofile(profile)
    try:
        first = log.append_as_leader(batches[0], 1, NOW)
    finally:
        sys.setprofile(None)
    # the turn's first staged batch keeps the segment's state for an undo (_state)
    log.append_as_leader(batches[1], 1, NOW, defer=True)
    sys.setprofile(profile)
    try:
        second = log.append_as_leader(batches[3], 1, NOW, defer=True)
    finally:
        sys.setprofile(None)
    assert calls == []
    assert (first.first_offset, second.first_offset) == (3, 9)
    assert log.commit() is None
    monkeypatch.setattr(partition_log, "_log_append", None)
    sys.setprofile(profile)
    try:
        third = log.append_as_leader(batches[2], 1, NOW)
    finally:
        sys.setprofile(None)
    assert calls[0] == "_append_as_leader_py"
    assert third.first_offset == 12
    log.close()


@needs_c
def test_the_c_entry_takes_the_twins_arguments(tmp_path: Path) -> None:
    """Positional or by name, the C entry appends as the twin; anything it does not take
    itself (an unknown or repeated argument, a coordinator append, a failed write not
    told yet) goes to the twin, which answers or refuses it as before."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    log.assign_epoch_start_offset(1, 0)
    assert log.append_as_leader(_plain(0), 1, NOW, False, False).first_offset == 0
    first_size = log.segments[-1].log_path.stat().st_size
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_name)

    sys.setprofile(profile)  # by name, the C entry takes them itself: not the twin
    try:
        by_name = log.append_as_leader(_plain(1), 1, NOW, coordinator=False, defer=True)
        mixed = log.append_as_leader(_plain(2), 1, NOW, False, defer=True)
    finally:
        sys.setprofile(None)
    assert "_append_as_leader_py" not in calls and "_append_general" not in calls, calls
    assert (by_name.first_offset, mixed.first_offset) == (3, 6)
    assert log.segments[-1].log_path.stat().st_size == first_size  # staged, not written
    assert log.commit() is None
    assert log.segments[-1].log_path.stat().st_size > first_size
    # a coordinator append takes the general path (its epoch checked, not its sequence)
    assert log.append_as_leader(_idem(0), 1, NOW, coordinator=True).first_offset == 9
    # a new producer's first batch: log_append says None, the general part appends it
    assert log.append_as_leader(_idem(0, pid=8), 1, NOW).first_offset == 11
    # and its next one is the common case again; a duplicate answers the first offsets
    assert log.append_as_leader(_idem(2, pid=8), 1, NOW).first_offset == 13
    duplicate = log.append_as_leader(_idem(0, pid=8), 1, NOW)
    assert (duplicate.first_offset, duplicate.duplicate) == (11, True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'deferred'"):
        log.append_as_leader(_plain(3), 1, NOW, deferred=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'defer'"):
        log.append_as_leader(_plain(3), 1, NOW, False, True, defer=True)  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        log.append_as_leader(_plain(3), 1)  # type: ignore[call-arg]
    log._commit_error = StorageError("lost")
    with pytest.raises(StorageError, match="not appended"):
        log.append_as_leader(_plain(3), 1, NOW)
    log._commit_error = None
    assert log.log_end_offset == 15
    log.close()
