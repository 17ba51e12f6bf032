"""Idempotent producer rules, through the partition log and on their own."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from actors.core.partition_log import LOG_APPEND_TIME, LogConfig, PartitionLog
from actors.core.producer_state import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    list_snapshots,
    load_latest_snapshot,
)
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch, check_batches
from wire.errors import ErrorCode


def batch(seq: int, n: int = 1, pid: int = 7, epoch: int = 0, value: bytes = b"v") -> bytes:
    return build_batch([value] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)


def test_in_sequence_batches_append(log: PartitionLog) -> None:
    assert log.append_as_leader(batch(0, 2), 0, 1).first_offset == 0
    assert log.append_as_leader(batch(2, 3), 0, 1).last_offset == 4


def test_retry_of_recent_batch_returns_original_offsets(log: PartitionLog) -> None:
    infos = [log.append_as_leader(batch(seq * 2, 2), 0, 1) for seq in range(6)]
    leo = log.log_end_offset
    retry = log.append_as_leader(batch(4, 2), 0, 1)  # the third batch, still cached
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (infos[2].first_offset,
                                                       infos[2].last_offset)
    assert log.log_end_offset == leo


def test_retry_older_than_five_batches_is_out_of_order(log: PartitionLog) -> None:
    for seq in range(6):
        log.append_as_leader(batch(seq), 0, 1)
    with pytest.raises(OutOfOrderSequenceError) as info:
        log.append_as_leader(batch(0), 0, 1)  # evicted from the 5-batch window
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_gap_is_refused_and_nothing_written(log: PartitionLog) -> None:
    log.append_as_leader(batch(0), 0, 1)
    with pytest.raises(OutOfOrderSequenceError, match="sent sequence 2, expected 1"):
        log.append_as_leader(batch(2), 0, 1)
    assert log.log_end_offset == 1


def test_lower_epoch_is_invalid_producer_epoch(log: PartitionLog) -> None:
    log.append_as_leader(batch(0, epoch=3), 0, 1)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2, older than the current "
                                                        "epoch 3") as info:
        log.append_as_leader(batch(1, epoch=2), 0, 1)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_new_epoch_must_start_at_zero(log: PartitionLog) -> None:
    log.append_as_leader(batch(0, epoch=0), 0, 1)
    with pytest.raises(OutOfOrderSequenceError, match="a new epoch must start at 0"):
        log.append_as_leader(batch(5, epoch=1), 0, 1)
    assert log.append_as_leader(batch(0, epoch=1), 0, 1).first_offset == 1


def test_unknown_producer_is_accepted_at_any_sequence(log: PartitionLog) -> None:
    assert log.append_as_leader(batch(42), 0, 1).first_offset == 0
    assert log.append_as_leader(batch(43), 0, 1).first_offset == 1


def test_batches_in_one_request_are_checked_against_each_other(log: PartitionLog) -> None:
    log.append_as_leader(batch(0), 0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(1) + batch(3), 0, 1)
    assert log.log_end_offset == 1
    info = log.append_as_leader(batch(1) + batch(2), 0, 1)
    assert (info.first_offset, info.last_offset) == (1, 2)


def test_sequence_wraps_around(log: PartitionLog) -> None:
    log.append_as_leader(batch(2**31 - 2, 2), 0, 1)
    assert log.append_as_leader(batch(0), 0, 1).first_offset == 2


def test_non_idempotent_batches_skip_the_checks(log: PartitionLog) -> None:
    plain = build_batch([b"x"])
    assert log.append_as_leader(plain, 0, 1).first_offset == 0
    assert log.append_as_leader(plain, 0, 1).first_offset == 1


def test_state_survives_clean_restart_via_snapshot(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    log.append_as_leader(batch(0, 2), 0, 1)
    log.close()
    assert list_snapshots(tmp_path / "t-0") == [2]
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0, clean_shutdown=True)
    assert log.append_as_leader(batch(0, 2), 0, 1).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(5), 0, 1)


def test_state_survives_crash_by_rebuilding_from_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=200), 0)
    for seq in range(5):
        log.append_as_leader(batch(seq), 0, 1)
    log.close_without_flush()
    assert list_snapshots(tmp_path / "t-0") == []
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=200), 0)
    dup = log.append_as_leader(batch(3), 0, 1)
    assert dup.duplicate and dup.first_offset == 3
    assert log.append_as_leader(batch(5), 0, 1).first_offset == 5


def test_truncation_rolls_producer_state_back(log: PartitionLog) -> None:
    for seq in range(4):
        log.append_as_leader(batch(seq), 0, 1)
    log.truncate_to(2)
    assert log.append_as_leader(batch(2), 0, 1).first_offset == 2  # not a duplicate now


def test_retention_forgets_producers_whose_batches_are_gone(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=100, retention_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    log.append_as_leader(batch(0, pid=1), 0, 1)
    log.append_as_leader(build_batch([b"x"]), 0, 1)
    log.update_high_watermark(2)
    assert log.delete_old_segments(10) == 2
    assert log.log_start_offset == 2
    assert 1 not in log.producer_state.producers
    assert log.append_as_leader(batch(7, pid=1), 0, 1).first_offset == 2  # any sequence


def test_snapshot_json_round_trip() -> None:
    state = ProducerStateManager()
    for header in check_batches(batch(0, 2) + batch(2, 1)):
        state.update_from_header(header, header.position)
    copy = ProducerStateManager.from_json(state.to_json())
    assert copy.producers == state.producers


@pytest.mark.parametrize("clean", [True, False])
def test_an_epoch_a_marker_bumped_survives_a_reopen_until_retention_passes_it(
        tmp_path: Path, clean: bool) -> None:
    """The coordinator's abort marker with epoch 1 leaves producer 7 with no batch of
    that epoch: epoch 0 stays fenced after a reopen (snapshot on a clean close, the log
    replayed after a crash), and goes only with the marker itself."""
    config = LogConfig(segment_bytes=100, retention_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    log.append_as_leader(batch(0), 0, 1)
    log.append_control(7, 1, False, 0, 0, 1)
    if clean:
        log.close(1)
    else:
        log.flush(1)
        log.close_without_flush()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    assert log.producer_state.producers[7].producer_epoch == 1
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(1), 0, 1)
    log.append_as_leader(build_batch([b"x"]), 0, 1)
    log.update_high_watermark(3)
    log.delete_old_segments(10)
    assert log.log_start_offset > 1
    assert 7 not in log.producer_state.producers


def test_a_snapshot_of_a_marker_only_entry_without_its_offset_keeps_it() -> None:
    """Snapshots written before markers' offsets were kept: the entry stays."""
    copy = ProducerStateManager.from_json(b'{"7":{"epoch":3,"batches":[]}}', 5)
    copy.remove_before(4)
    assert copy.producers[7].producer_epoch == 3


def test_sequence_wraps_inside_a_batch_on_the_single_batch_path(log: PartitionLog) -> None:
    log.append_as_leader(batch(2**31 - 3), 0, 1)  # new producer: general path
    log.append_as_leader(batch(2**31 - 2, 3), 0, 1)  # next in sequence: single-batch path
    assert log.producer_state.producers[7].last_seq == 0
    assert log.append_as_leader(batch(1), 0, 1).first_offset == 4
    assert log.append_as_leader(batch(2**31 - 2, 3), 0, 1).duplicate


def test_single_and_multi_batch_requests_store_the_same_bytes(tmp_path: Path) -> None:
    batches = [batch(seq * 2, 2, value=bytes([seq])) for seq in range(8)]
    one = PartitionLog.open(tmp_path / "a-0", "a", 0, LogConfig(), 0)
    for raw in batches:
        one.append_as_leader(raw, 3, 1)
    two = PartitionLog.open(tmp_path / "b-0", "b", 0, LogConfig(), 0)
    for i in range(0, 8, 2):
        two.append_as_leader(batches[i] + batches[i + 1], 3, 1)
    assert bytes(one.read(0, 1 << 20).records) == bytes(two.read(0, 1 << 20).records)
    assert one.producer_state.producers == two.producer_state.producers
    assert one.segments[0].index_entries() == two.segments[0].index_entries()


# -- producer.id.expiration.ms and the first sequence of a marker's epoch ------------

T = 1_700_000_000_000
EXPIRATION_MS = 1_000


def stamped(seq: int, ts: int, pid: int = 7, epoch: int = 0, txn: bool = False) -> bytes:
    return build_batch([b"s"], timestamps_ms=[ts], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=TRANSACTIONAL_BIT if txn else 0)


def expiring(path: Path, now: int) -> PartitionLog:
    return PartitionLog.open(path, "t", 0, LogConfig(), now,
                             producer_id_expiration_ms=EXPIRATION_MS)


@pytest.mark.parametrize("reopen", [None, "clean", "crash"])
def test_an_epoch_a_marker_bumped_starts_at_sequence_zero(tmp_path: Path,
                                                          reopen: str | None) -> None:
    """Kafka's checkSequence: the epoch an abort marker brought has no sequence yet
    (NO_SEQUENCE), so its first batch must be sequence 0, as any new epoch's."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    log.append_as_leader(batch(0, 3), 0, 1)
    log.append_control(7, 1, False, 0, 0, 1)
    if reopen == "clean":
        log.close(1)
    elif reopen == "crash":
        log.flush(1)
        log.close_without_flush()
    if reopen is not None:
        log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(3, epoch=1), 0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(1, epoch=1), 0, 1)
    assert log.log_end_offset == 4
    assert log.append_as_leader(batch(0, epoch=1), 0, 1).first_offset == 4
    assert log.append_as_leader(batch(1, epoch=1), 0, 1).first_offset == 5


def test_a_marker_of_the_current_epoch_keeps_the_sequence(log: PartitionLog) -> None:
    log.append_as_leader(batch(0, 3), 0, 1)
    log.append_control(7, 0, True, 0, 0, 1)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(0), 0, 1)
    assert log.append_as_leader(batch(3), 0, 1).first_offset == 4


def test_an_idle_producer_expires_unless_its_transaction_is_open(tmp_path: Path) -> None:
    log = expiring(tmp_path / "t-0", T)
    log.append_as_leader(stamped(0, T), 0, T)             # idempotent
    log.append_as_leader(stamped(0, T, pid=8, txn=True), 0, T)  # transaction left open
    assert log.remove_expired_producers(T + EXPIRATION_MS - 1) == []
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(stamped(5, T), 0, T)
    assert log.remove_expired_producers(T + EXPIRATION_MS) == [7]
    assert set(log.producer_state.producers) == {8}
    # producer 7 is unknown now: any sequence (as Kafka since KIP-360), then in order
    assert log.append_as_leader(stamped(5, T), 0, T).first_offset == 2
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(stamped(9, T), 0, T)
    # 8's entry is the one of its open transaction: its sequence still holds
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(stamped(5, T, pid=8, txn=True), 0, T)
    # the commit marker, written at T + 5000, is 8's last write: expiry counts from it
    log.append_control(8, 0, True, 0, 0, T + 5_000)
    assert log.producer_state.producers[8].last_timestamp == T + 5_000
    assert log.remove_expired_producers(T + 5_000 + EXPIRATION_MS - 1) == [7]  # 7 again
    assert set(log.producer_state.producers) == {8}
    assert log.remove_expired_producers(T + 5_000 + EXPIRATION_MS) == [8]
    assert log.producer_state.producers == {}


def test_a_log_without_the_setting_keeps_its_producers(log: PartitionLog) -> None:
    log.append_as_leader(stamped(0, T), 0, T)
    assert log.remove_expired_producers(T + 10 * 86_400_000) == []
    assert 7 in log.producer_state.producers


@pytest.mark.parametrize("clean", [True, False])
def test_an_expired_producer_stays_expired_across_a_reopen(tmp_path: Path,
                                                          clean: bool) -> None:
    """Expiry depends on the entry's last timestamp (kept in the log and the snapshot)
    and the clock only: the reopen expires what the last check did, whether its state
    comes from a snapshot or from replaying the log (Kafka replays without expiring
    until its next check)."""
    log = expiring(tmp_path / "t-0", T)
    log.append_as_leader(stamped(0, T), 0, T)
    log.append_as_leader(stamped(0, T + 3_000, pid=8), 0, T + 3_000)
    log.append_as_leader(stamped(0, T, pid=9, txn=True), 0, T)
    log.append_as_leader(stamped(0, T, pid=10), 0, T)
    log.append_control(10, 1, False, 0, 0, T + 3_000)  # 10: only the marker's epoch
    assert log.remove_expired_producers(T + 3_500) == [7]
    assert set(log.producer_state.producers) == {8, 9, 10}
    if clean:
        log.close(T + 3_500)
    else:
        log.flush(T + 3_500)
        log.close_without_flush()
    log = expiring(tmp_path / "t-0", T + 3_600)
    assert set(log.producer_state.producers) == {8, 9, 10}
    assert log.producer_state.producers[10].last_timestamp == T + 3_000
    assert log.append_as_leader(stamped(4, T + 3_600), 0, T + 3_600).first_offset == 5
    log.close(T + 3_600)
    log = expiring(tmp_path / "t-0", T + 4_000)  # 8's and 10's last writes expired
    assert set(log.producer_state.producers) == {7, 9}
    assert log.append_as_leader(stamped(3, T + 4_000, pid=10), 0, T + 4_000).first_offset == 6


def test_a_snapshot_without_marker_timestamps_dates_them_at_its_writing() -> None:
    copy = ProducerStateManager.from_json(b'{"7":{"epoch":3,"batches":[],"marker":4}}', 5,
                                          T)
    assert copy.producers[7].last_timestamp == T
    assert copy.remove_expired(T + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    assert copy.remove_expired(T + EXPIRATION_MS, EXPIRATION_MS) == [7]


def test_a_snapshot_keeps_the_coordinator_epoch_and_one_from_before_has_none() -> None:
    """The coordinator epoch ("coord") survives a snapshot's round trip; a snapshot written
    before it was kept has -1 (not known) until the producer's next marker: the markers
    below a snapshot are not scanned again."""
    state = ProducerStateManager()
    state.update_marker(7, 3, 4, T)
    state.producers[7].coordinator_epoch = 9
    assert ProducerStateManager.from_json(state.to_json(), 5, T).producers[7] \
        .coordinator_epoch == 9
    older = ProducerStateManager.from_json(b'{"7":{"epoch":3,"batches":[],"marker":4}}', 5, T)
    assert older.producers[7].coordinator_epoch == -1


def test_a_snapshot_from_before_lost_sequences_dates_the_lost_entry_at_its_writing(
) -> None:
    """A snapshot written before "lost" was kept holds a lost entry as one with neither
    batch nor marker (marker -1, its timestamp -1): read as lost, it is dated at the
    snapshot's writing, as an undated marker is, and does not expire at the first check
    (and with it the epoch fence it holds)."""
    copy = ProducerStateManager.from_json(
        b'{"8":{"epoch":2,"batches":[],"marker":-1,"marker_ts":-1}}', 5, T)
    entry = copy.producers[8]
    assert entry.sequence_lost and entry.last_timestamp == T
    assert copy.remove_expired(T + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    with pytest.raises(InvalidProducerEpochError):
        copy.check_batches(check_batches(batch(0, pid=8, epoch=1)))
    assert copy.remove_expired(T + EXPIRATION_MS, EXPIRATION_MS) == [8]


def test_a_lost_sequence_is_kept_in_the_snapshot() -> None:
    """An entry whose batches a failed group commit took back (sequence_lost) goes on
    from any sequence, a marker of its epoch or not, through a snapshot; an entry with
    no batch and the marker that brought its epoch still starts at 0. A snapshot from
    before "lost" was kept has the lost entry as one with neither batch nor marker."""
    state = ProducerStateManager.from_json(
        b'{"7":{"epoch":0,"batches":[],"marker":4,"marker_ts":1,"lost":true},'
        b'"8":{"epoch":0,"batches":[],"marker":-1,"marker_ts":-1},'
        b'"9":{"epoch":1,"batches":[],"marker":4,"marker_ts":1}}', 5)
    copy = ProducerStateManager.from_json(state.to_json(), 5)
    for manager in (state, copy):
        assert [manager.producers[pid].sequence_lost for pid in (7, 8, 9)] == [
            True, True, False]
        manager.check_batches(check_batches(batch(6, pid=7) + batch(3, pid=8)))
        with pytest.raises(OutOfOrderSequenceError):
            manager.check_batches(check_batches(batch(6, pid=9, epoch=1)))
        manager.check_batches(check_batches(batch(0, pid=9, epoch=1)))


def test_a_lost_sequence_expires_from_its_lost_batches_not_at_the_next_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed group commit takes back the five batches producer 7 (epoch 3) had
    staged, which had pushed its written one out of its entry: the entry keeps the
    epoch, fencing an older one, until a full expiration after the latest lost batch,
    in memory and through a snapshot; not at the next check as an undated entry would."""
    log = expiring(tmp_path / "t-0", T - 100)
    log.append_as_leader(stamped(0, T - 100, epoch=3), 0, T - 100)
    for seq in range(1, 6):
        log.append_as_leader(stamped(seq, T - 50 + 10 * seq, epoch=3), 0, T, defer=True)
    real = os.writev

    def full(fd: int, pieces: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "writev", full)
    assert log.commit() is not None
    monkeypatch.setattr(os, "writev", real)
    entry = log.producer_state.producers[7]
    assert entry.sequence_lost and not entry.batches and entry.last_timestamp == T
    copy = ProducerStateManager.from_json(log.producer_state.to_json(), 0, T)
    assert copy.producers[7].last_timestamp == T
    assert log.remove_expired_producers(T + EXPIRATION_MS - 1) == []
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(stamped(0, T, epoch=2), 0, T)
    assert log.remove_expired_producers(T + EXPIRATION_MS) == [7]
    assert copy.remove_expired(T + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    log.close(T)


def test_a_clean_close_with_every_producer_expired_writes_an_empty_snapshot(
        tmp_path: Path) -> None:
    """The reopen starts from the empty snapshot, not from a replay of the log: a log
    opened without the setting (nothing expires at open) does not know producer 7."""
    log = expiring(tmp_path / "t-0", T)
    log.append_as_leader(stamped(0, T), 0, T)
    assert log.remove_expired_producers(T + EXPIRATION_MS) == [7]
    log.close(T + EXPIRATION_MS)
    assert list_snapshots(tmp_path / "t-0") == [1]
    assert (tmp_path / "t-0" / f"{1:020d}.snapshot").read_bytes() == b"{}"
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(), T, clean_shutdown=True)
    assert log.producer_state.producers == {}
    assert log.append_as_leader(stamped(5, T), 0, T).first_offset == 1  # any sequence
    log.close(T)


def test_a_snapshot_without_marker_timestamps_is_dated_by_its_file(tmp_path: Path) -> None:
    """load_latest_snapshot passes the file's mtime as the snapshot's writing."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    path = directory / f"{5:020d}.snapshot"
    path.write_bytes(b'{"7":{"epoch":3,"batches":[],"marker":4}}')
    os.utime(path, ns=(T * 1_000_000, T * 1_000_000))
    offset, state = load_latest_snapshot(directory, 10)
    assert offset == 5 and state.producers[7].last_timestamp == T
    assert state.remove_expired(T + EXPIRATION_MS - 1, EXPIRATION_MS) == []
    assert state.remove_expired(T + EXPIRATION_MS, EXPIRATION_MS) == [7]


def test_on_a_log_append_time_topic_expiry_counts_from_the_append(tmp_path: Path) -> None:
    """The batch's CreateTime is an hour old; the broker stamps it at T, which is its
    last timestamp (Kafka's lastTimestamp is the batch's max timestamp as appended)."""
    log = PartitionLog.open(tmp_path / "t-0", "t", 0,
                            LogConfig(message_timestamp_type=LOG_APPEND_TIME), T,
                            producer_id_expiration_ms=EXPIRATION_MS)
    log.append_as_leader(stamped(0, T - 3_600_000), 0, T)
    assert log.producer_state.producers[7].last_timestamp == T
    assert log.remove_expired_producers(T + EXPIRATION_MS - 1) == []
    assert log.remove_expired_producers(T + EXPIRATION_MS) == [7]
    log.close(T + EXPIRATION_MS)


def test_a_follower_expires_its_producers_but_not_an_open_transaction(
        tmp_path: Path) -> None:
    """The leader's batches as a follower appends them: producer 7's idempotent batch
    expires, producer 8's open transaction keeps it; its commit marker, stamped later,
    ends the transaction and starts its expiry."""
    leader = expiring(tmp_path / "leader" / "t-0", T)
    leader.append_as_leader(stamped(0, T), 0, T)
    leader.append_as_leader(stamped(0, T, pid=8, txn=True), 0, T)
    log = expiring(tmp_path / "t-0", T)
    log.append_as_follower(bytes(leader.read(0, 10_000).records), T)
    assert log.producer_state.ongoing_txns == {8: 1}
    assert log.remove_expired_producers(T + EXPIRATION_MS) == [7]
    assert set(log.producer_state.producers) == {8}
    leader.append_control(8, 0, True, 0, 0, T + 5_000)
    log.append_as_follower(bytes(leader.read(2, 10_000).records), T + 5_000)
    assert 8 not in log.producer_state.ongoing_txns
    assert log.remove_expired_producers(T + 5_000 + EXPIRATION_MS - 1) == []
    assert log.remove_expired_producers(T + 5_000 + EXPIRATION_MS) == [8]
    log.close(T + 5_000 + EXPIRATION_MS)
    leader.close(T + 5_000)
