"""Transactional offsets in the group core, and their load from ``__consumer_offsets``."""

from __future__ import annotations

from actors.core.group_state import (
    AppendRecords,
    GroupConfig,
    GroupCoordinatorCore,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetFetchResponse,
    Respond,
)
from actors.core.offsets_codec import OffsetCommitValue, offset_commit_record
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch, check_batches
from actors.core.transaction_log import control_batch
from actors.group_coordinator import decode_batches, encode_records
from wire.errors import ErrorCode

E = ErrorCode


def _commit(core: GroupCoordinatorCore, rid: int, pid: int, offset: int,
            group: str = "g") -> AppendRecords:
    effects = core.txn_offset_commit(rid, group, pid, 0, -1, "", None,
                                     [OffsetCommitPartition("t", 0, offset, -1, "")], 0)
    [append] = effects
    assert isinstance(append, AppendRecords) and append.producer_id == pid
    return append


def _fetch(core: GroupCoordinatorCore, stable: bool, group: str = "g") -> tuple[int, ErrorCode]:
    [answer] = core.offset_fetch(9, group, [("t", 0)], stable)
    assert isinstance(answer, Respond) and isinstance(answer.response, OffsetFetchResponse)
    part = answer.response.partitions[0]
    return part.offset, part.error_code


def test_offsets_of_a_transaction_show_at_its_commit_and_vanish_at_its_abort() -> None:
    core = GroupCoordinatorCore(GroupConfig())
    append = _commit(core, 1, 77, 5)
    [done] = core.on_append_complete(append.append_id, E.NONE, 0)
    assert isinstance(done, Respond) and done.response == OffsetCommitResponse(
        (("t", 0, E.NONE),))
    assert _fetch(core, False) == (-1, E.NONE)
    assert _fetch(core, True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    core.complete_txn(77, core.partition_for("other-partition-group") + 1000, True)
    assert _fetch(core, True)[1] == E.UNSTABLE_OFFSET_COMMIT  # another partition's marker
    core.complete_txn(77, core.partition_for("g"), True)
    assert _fetch(core, True) == (5, E.NONE)
    core.on_append_complete(_commit(core, 2, 77, 9).append_id, E.NONE, 0)
    core.complete_txn(77, core.partition_for("g"), False)
    assert _fetch(core, True) == (5, E.NONE)


def test_a_fenced_producer_gets_producer_fenced_and_nothing_pending() -> None:
    core = GroupCoordinatorCore(GroupConfig())
    append = _commit(core, 1, 77, 5)
    [done] = core.on_append_complete(append.append_id, E.INVALID_PRODUCER_EPOCH, 0)
    assert done.response == OffsetCommitResponse((("t", 0, E.PRODUCER_FENCED),))
    assert _fetch(core, True) == (-1, E.NONE)


def test_the_shell_writes_the_producers_transactional_batch() -> None:
    record = offset_commit_record("g", "t", 0, OffsetCommitValue(5, -1, "", 0))
    batch = encode_records([record], 0, producer_id=77, producer_epoch=3)
    [header] = check_batches(batch)
    assert header.is_transactional and (header.producer_id, header.producer_epoch) == (77, 3)
    pending: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    assert decode_batches(batch, pending) == ([], 1)
    assert pending == {77: [(0, record.key, record.value)]}


def _offsets_log() -> tuple[bytes, bytes]:
    """Two reads of one partition: txn 1 (pid 5) committed, txn 2 (pid 6) aborted,
    txn 3 (pid 7) left open; the commit marker of pid 5 arrives in the second read."""
    def rec(offset: int) -> tuple[bytes, bytes]:
        r = offset_commit_record("g", "t", 0, OffsetCommitValue(offset, -1, "", 0))
        return r.key, r.value

    def txn(pid: int, offset: int, at: int) -> bytes:
        k, v = rec(offset)
        return build_batch([v], keys=[k], base_offset=at, producer_id=pid, producer_epoch=0,
                           base_sequence=0, attributes=TRANSACTIONAL_BIT)

    def marker(pid: int, commit: bool, at: int) -> bytes:
        raw = bytearray(control_batch(pid, 0, commit, 0, 0))
        raw[0:8] = at.to_bytes(8, "big")
        return bytes(raw)

    first = txn(5, 10, 0) + txn(6, 20, 1)
    second = marker(6, False, 2) + marker(5, True, 3) + txn(7, 30, 4)
    return first, second


def test_loading_releases_committed_transactional_offsets_at_their_marker() -> None:
    first, second = _offsets_log()
    pending: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    records, next_offset = decode_batches(first, pending)
    assert records == [] and next_offset == 2 and set(pending) == {5, 6}
    records, next_offset = decode_batches(second, pending)
    assert next_offset == 5
    assert [offset for offset, _k, _v in records] == [3]  # pid 5's record, at its marker
    assert set(pending) == {7}  # still open
    core = GroupCoordinatorCore(GroupConfig())
    core.load([(k, v) for _o, k, v in records], 0)
    core.load_txn_offsets(7, [(k, v) for _o, k, v in pending[7]])
    assert _fetch(core, False) == (10, E.NONE)
    assert _fetch(core, True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    core.complete_txn(7, core.partition_for("g"), True)
    assert _fetch(core, True) == (30, E.NONE)


def test_a_deleted_topic_takes_the_transactions_pending_offsets_too() -> None:
    """Kafka's removeOffsets: a transaction's offsets of a topic deleted before its commit
    marker never become the group's (a namesake made later would resume there)."""
    core = GroupCoordinatorCore(GroupConfig())
    core.on_append_complete(_commit(core, 1, 77, 5).append_id, E.NONE, 0)
    core.topics_deleted(["t"])
    core.complete_txn(77, core.partition_for("g"), True)
    assert _fetch(core, True) == (-1, E.NONE)


def test_a_deleted_topic_takes_a_commit_still_being_written_too() -> None:
    core = GroupCoordinatorCore(GroupConfig())
    [append] = core.offset_commit(1, "g", -1, "", None,
                                  [OffsetCommitPartition("t", 0, 5, -1, "")], 0)
    assert isinstance(append, AppendRecords)
    core.topics_deleted(["t"])
    [done] = core.on_append_complete(append.append_id, E.NONE, 0)
    assert isinstance(done, Respond) and done.response == OffsetCommitResponse(
        (("t", 0, E.NONE),))
    assert _fetch(core, False) == (-1, E.NONE)
