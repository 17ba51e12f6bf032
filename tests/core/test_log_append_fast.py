"""append_as_leader's common case in C (batch_fast.log_append) against its inline Python
twin (partition_log's fast path, run with ``partition_log._log_append`` set to None): the
same appends through each leave the same files, answers, producer state and fields, and
C takes itself exactly the appends the twin's conditions let through."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from actors.core import batch_fast, partition_log
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch
from tests.core.test_segment_core import _state

needs_c = pytest.mark.skipif(batch_fast.log_append is None,
                             reason="the C module is not built here")
NOW = 1_700_000_000_000
Step = tuple[str, Callable[[PartitionLog, bool], Any], bool | None]


def _plain(n: int, records: int = 3, stamp: int = NOW, **kw: Any) -> bytes:
    return build_batch([b"v%d-" % n * 30] * records,
                       timestamps_ms=[stamp + i for i in range(records)], **kw)


def _idem(seq: int, records: int = 2, *, pid: int = 7, epoch: int = 0,
          txn: bool = False) -> bytes:
    return build_batch([b"i%d" % seq * 20] * records, timestamps_ms=[NOW] * records,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=TRANSACTIONAL_BIT if txn else 0)


def _gzip(n: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, NOW + i, None, b"z%d-" % n * 40, [])
    return bytes(builder.build())


def _append(batch: bytes, epoch: int = 1, now: int = NOW,
            coordinator: bool = False) -> Callable[[PartitionLog, bool], Any]:
    return lambda log, defer: log.append_as_leader(batch, epoch, now, coordinator=coordinator,
                                                   defer=defer)


def _follower(batch: bytes) -> Callable[[PartitionLog, bool], Any]:
    return lambda log, defer: log.append_as_follower(batch, NOW)


def _commit(log: PartitionLog, defer: bool) -> Any:
    return log.commit()


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
}


def _snapshot(log: PartitionLog) -> dict[str, Any]:
    state = log.producer_state
    return {
        "producers": {pid: (entry.producer_epoch, list(entry.batches))
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
            outcome.append((name, step(log, defer)))
        except Exception as exc:  # a refusal must match too
            outcome.append((name, type(exc), str(exc)))
        fast.append(len(general) == before)
        outcome.append(_snapshot(log))
    outcome.append(log.commit())
    outcome.append(_snapshot(log))
    log.flush(NOW)
    outcome.append(_snapshot(log))
    log.close()
    return outcome, _files(directory), fast


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
