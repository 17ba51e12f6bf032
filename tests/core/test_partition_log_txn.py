"""Transactions in a partition log: LSO, markers, the aborted index, its files, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.producer_state import InvalidProducerEpochError
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch, check_batches
from actors.core.txn_index import AbortedTxn, read_txn_index, txn_index_path


def open_log(path: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(path / "t-0", "t", 0, LogConfig(**config), 0)


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch([b"v%d" % i for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=TRANSACTIONAL_BIT)


def plain(n: int = 1) -> bytes:
    return build_batch([b"x"] * n)


def settle(log: PartitionLog) -> None:
    log.update_high_watermark(log.log_end_offset)


def test_lso_stops_at_the_first_open_transaction_and_moves_at_its_marker(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain(3), 0, 0)                 # 0-2
    log.append_as_leader(txn_batch(7, 0), 0, 0)          # 3-4, pid 7 opens at 3
    log.append_as_leader(txn_batch(8, 0), 0, 0)          # 5-6, pid 8 opens at 5
    settle(log)
    assert log.high_watermark == 7 and log.last_stable_offset == 3
    log.append_control(7, 0, True, 0, 0, 0)              # 7: commit pid 7
    settle(log)
    assert log.last_stable_offset == 5
    log.append_control(8, 0, False, 0, 0, 0)             # 8: abort pid 8
    settle(log)
    assert log.last_stable_offset == 9
    assert log.aborted_transactions(0, 9) == [AbortedTxn(8, 5, 8, 9)]
    assert log.aborted_transactions(9, 20) == []
    # a read_committed read stops at the LSO
    log.append_as_leader(txn_batch(7, 2), 0, 0)          # 9-10 opens again
    settle(log)
    assert log.last_stable_offset == 9
    data = log.read(0, 1 << 20, log.last_stable_offset).records
    assert [h.base_offset for h in check_batches(data)] == [0, 3, 5, 7, 8]


def test_markers_do_not_disturb_sequences_and_stale_epochs_are_refused(
        tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(7, 0), 0, 0)
    log.append_control(7, 0, True, 0, 0, 0)
    log.append_as_leader(txn_batch(7, 2), 0, 0)  # the sequence goes on across transactions
    log.append_control(7, 1, False, 0, 0, 0)     # a fencing abort with a bumped epoch
    with pytest.raises(InvalidProducerEpochError):
        log.append_control(7, 0, True, 0, 0, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn_batch(7, 4, epoch=0), 0, 0)
    info = log.append_as_leader(txn_batch(7, 0, epoch=1), 0, 0)  # the new epoch from 0
    assert info.first_offset == 6


def test_coordinator_appends_check_the_epoch_not_the_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(7, 0, epoch=3), 0, 0, coordinator=True)
    log.append_as_leader(txn_batch(7, 0, epoch=3), 0, 0, coordinator=True)
    assert log.log_end_offset == 4 and log.last_stable_offset == 0
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn_batch(7, 0, epoch=2), 0, 0, coordinator=True)


def test_the_aborted_index_is_kept_per_segment_and_survives_restarts(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for pid in (1, 2, 3):
        log.append_as_leader(txn_batch(pid, 0), 0, 0)
        log.append_control(pid, 0, pid == 2, 0, 0, 0)
        log.roll(0)
    settle(log)
    expected = log.aborted_transactions(0, 100)
    assert expected == [AbortedTxn(1, 0, 2, 3), AbortedTxn(3, 6, 8, 9)]
    base = log.segment_base_offsets
    assert read_txn_index(txn_index_path(log.dir, base[0])) == [expected[0]]
    log.append_as_leader(txn_batch(4, 0), 0, 0)  # open at the close
    log.close(0)
    again = open_log(tmp_path, segment_bytes=300)
    assert again.aborted_transactions(0, 100) == expected
    assert again.txn_index.ongoing == {4: 9}
    again.close_without_flush()  # a crash: no snapshot, the log is scanned
    (again.dir / ".." / "t-0").resolve()
    third = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=300), 0)
    assert third.aborted_transactions(0, 100) == expected
    assert third.txn_index.ongoing == {4: 9}
    third.update_high_watermark(third.log_end_offset)
    assert third.last_stable_offset == 9


def test_truncation_drops_index_entries_and_reopens_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0, 0)   # 0-1
    log.append_control(1, 0, False, 0, 0, 0)     # 2
    log.append_as_leader(txn_batch(2, 0), 0, 0)   # 3-4
    log.append_control(2, 0, False, 0, 0, 0)     # 5
    log.truncate_to(5)
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 2, 3)]
    assert log.txn_index.ongoing == {2: 3}
    assert read_txn_index(txn_index_path(log.dir, 0)) == [AbortedTxn(1, 0, 2, 3)]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["data", "commit", "abort", "plain", "roll"]),
                          st.integers(1, 3)), max_size=30))
def test_lso_and_index_match_a_model(tmp_path: Path, ops: list[tuple[str, int]]) -> None:
    """Random producers: the LSO is the first open transaction's first offset, the index
    holds exactly the aborted ones, before and after a reopen."""
    path = tmp_path / str(abs(hash(tuple(ops))))
    log = PartitionLog.open(path, "t", 0, LogConfig(segment_bytes=400), 0)
    seqs: dict[int, int] = {}
    ongoing: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []
    for op, pid in ops:
        if op == "data":
            seq = seqs.get(pid, 0)
            info = log.append_as_leader(txn_batch(pid, seq), 0, 0)
            seqs[pid] = seq + 2
            ongoing.setdefault(pid, info.first_offset)
        elif op in ("commit", "abort"):
            info = log.append_control(pid, 0, op == "commit", 0, 0, 0)
            first = ongoing.pop(pid, None)
            if op == "abort" and first is not None:
                aborted.append((pid, first, info.first_offset))
        elif op == "plain":
            log.append_as_leader(plain(), 0, 0)
        else:
            log.roll(0)
    for current in (log, None):
        if current is None:
            log.close(0)
            current = PartitionLog.open(path, "t", 0, LogConfig(segment_bytes=400), 0)
        current.update_high_watermark(current.log_end_offset)
        want_lso = min(ongoing.values(), default=current.log_end_offset)
        assert current.last_stable_offset == want_lso
        got = [(a.producer_id, a.first_offset, a.last_offset)
               for a in current.aborted_transactions(0, 1 << 40)]
        assert got == aborted
    current.close(0)


def test_a_producers_coordinator_epoch_is_its_last_markers_and_survives_restarts(
        tmp_path: Path) -> None:
    """Kafka's ProducerStateEntry.coordinatorEpoch (DescribeProducers answers it): -1
    before any marker, the epoch the last marker's control record carries, kept when the
    producer's epoch moves on; read back from the snapshot of a clean close and, without
    one, from the markers in the log."""
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(5, 0), 0, 0)
    assert log.producer_state.producers[5].coordinator_epoch == -1
    log.append_control(5, 0, True, 7, 0, 0)
    assert log.producer_state.producers[5].coordinator_epoch == 7
    log.append_as_leader(txn_batch(5, 0, epoch=1), 0, 0)   # a new epoch keeps it
    assert log.producer_state.producers[5].coordinator_epoch == 7
    log.append_control(5, 1, False, 9, 0, 0)
    log.append_as_leader(txn_batch(6, 0), 0, 0)            # another producer, no marker
    assert {pid: e.coordinator_epoch for pid, e in log.producer_state.producers.items()} == {
        5: 9, 6: -1}
    log.close(0)
    again = open_log(tmp_path)                              # from the snapshot
    assert {pid: e.coordinator_epoch for pid, e in again.producer_state.producers.items()} == {
        5: 9, 6: -1}
    again.close_without_flush()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    scanned = open_log(tmp_path)                            # from the log's markers
    assert {pid: e.coordinator_epoch for pid, e in scanned.producer_state.producers.items()} == {
        5: 9, 6: -1}
