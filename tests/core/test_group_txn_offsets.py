"""Transactional offsets in the group core, and their load from ``__consumer_offsets``."""

from __future__ import annotations

import dataclasses
import itertools

from actors.core.group_offsets import TOMBSTONE_BYTES_PER_APPEND, TOMBSTONES_PER_APPEND
from actors.core.group_state import (
    AppendRecords,
    GroupConfig,
    GroupCoordinatorCore,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetFetchResponse,
    Respond,
)
from actors.core.offsets_codec import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    offset_commit_record,
    partition_for,
)
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


def test_an_unload_drops_the_groups_pending_transactional_offsets() -> None:
    """Kafka's removeGroupsForPartition drops a group with its pending transactional
    offsets. The next leader settles them at the marker, which this node never sees:
    kept here, a load anew of the partition (the transaction aborted meanwhile) would
    answer UNSTABLE_OFFSET_COMMIT for ever, and a commit marker of the same producer
    met later would make the aborted offset the group's. Another partition's group
    keeps its own."""
    core = GroupCoordinatorCore(GroupConfig())
    other = next(g for g in (f"o{i}" for i in range(100))
                 if core.partition_for(g) != core.partition_for("g"))
    core.on_append_complete(_commit(core, 1, 77, 5).append_id, E.NONE, 0)
    core.on_append_complete(_commit(core, 2, 77, 6, other).append_id, E.NONE, 0)
    assert _fetch(core, True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    core.unload({core.partition_for("g")})
    # loaded anew from a log that has the commit 3 and the abort of pid 77 since
    committed = offset_commit_record("g", "t", 0, OffsetCommitValue(3, -1, "", 0))
    core.load([(committed.key, committed.value)], 0)
    assert _fetch(core, True) == (3, E.NONE)
    core.complete_txn(77, core.partition_for("g"), True)  # a later transaction's marker
    assert _fetch(core, True) == (3, E.NONE)
    assert _fetch(core, True, other) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    core.complete_txn(77, core.partition_for(other), True)
    assert _fetch(core, True, other) == (6, E.NONE)


def test_a_transactional_commit_answered_after_its_unload_is_not_held() -> None:
    """A TxnOffsetCommit's append in flight when its group's partition is unloaded, its
    success answered after: the offsets are not held as pending (Kafka records them on
    the group object its cache no longer has)."""
    core = GroupCoordinatorCore(GroupConfig())
    append = _commit(core, 1, 77, 5)
    core.unload({core.partition_for("g")})
    [done] = core.on_append_complete(append.append_id, E.NONE, 0)
    assert isinstance(done, Respond) and done.response == OffsetCommitResponse(
        (("t", 0, E.NONE),))
    core.load([], 0)
    assert _fetch(core, True) == (-1, E.NONE)
    core.complete_txn(77, core.partition_for("g"), True)
    assert _fetch(core, True) == (-1, E.NONE)


def test_an_unload_takes_its_partitions_groups_from_the_index_under_any_count() -> None:
    """The groups are indexed by partition (an unload of one partition hashed every group
    id held): held by a load, a commit, a transactional commit; gone by an unload,
    DeleteGroups, a load's tombstone; mapped anew when the partition count
    changes (the shell replaces the config). Each unload takes exactly the groups
    Kafka's partitionFor puts on its partitions."""
    core = GroupCoordinatorCore(GroupConfig(offsets_topic_num_partitions=50))
    ids = [f"group-{i}" for i in range(3000)]
    records = [offset_commit_record(g, "t", 0, OffsetCommitValue(1, -1, "", 0))
               for g in ids[:2000]]
    core.load([(r.key, r.value) for r in records], 0)
    for i, g in enumerate(ids[2000:2500]):
        core.on_append_complete(core.offset_commit(i, g, -1, "", None, [
            OffsetCommitPartition("t", 0, 2, -1, "")], 0)[0].append_id, E.NONE, 0)  # type: ignore[union-attr]
    for i, g in enumerate(ids[2500:]):
        core.on_append_complete(_commit(core, i, 77, 3, g).append_id, E.NONE, 0)
    gone = next(g for g in ids if partition_for(g, 50) == 7)
    core.load([(offset_commit_record(gone, "t", 0, OffsetCommitValue(1, -1, "", 0)).key,
                None)], 0)  # its only offset's tombstone: the group goes
    assert gone not in core.group_ids()
    deleted = next(g for g in ids[:2000] if partition_for(g, 50) == 0)
    core.delete_groups(1, [deleted], 0)  # an Empty group: DeleteGroups takes it
    assert deleted not in core.group_ids()
    held = set(ids) - {gone, deleted}
    for p in (7, 0, 49):
        assert set(core.groups_in({p})) == {g for g in held if partition_for(g, 50) == p}
        core.unload({p})
        held = {g for g in held if partition_for(g, 50) != p}
        assert set(core.group_ids()) == held
    core.config = dataclasses.replace(core.config, offsets_topic_num_partitions=3)
    assert set(core.groups_in({1})) == {g for g in held if partition_for(g, 3) == 1}
    core.unload({1})
    assert set(core.group_ids()) == {g for g in held if partition_for(g, 3) != 1}
    assert all(core.partition_for(g) == partition_for(g, 3) for g in ids)


def test_a_topic_deletion_writes_its_tombstones_an_append_per_partition() -> None:
    """3,000 groups with offsets of "t" and "u": deleting "t" writes every group's
    tombstones of "t", each on its group's partition, in batches shared by the groups
    of a partition (one append a group before: 3,000), of at most
    TOMBSTONES_PER_APPEND records and about TOMBSTONE_BYTES_PER_APPEND bytes of keys;
    "u" stays."""
    core = GroupCoordinatorCore(GroupConfig(offsets_topic_num_partitions=5))
    # long ids on partition 0 (its keys pass the byte bound before the count bound)
    long = (f"group-{i}-" + "x" * 2000 for i in itertools.count())
    ids = list(itertools.islice((g for g in long if partition_for(g, 5) == 0), 600))
    ids += list(itertools.islice((g for g in (f"group-{i}" for i in itertools.count())
                                  if partition_for(g, 5) != 0), 2400))
    core.load([(r.key, r.value) for g in ids for r in (
        offset_commit_record(g, "t", 0, OffsetCommitValue(1, -1, "", 0)),
        offset_commit_record(g, "t", 1, OffsetCommitValue(1, -1, "", 0)),
        offset_commit_record(g, "u", 0, OffsetCommitValue(2, -1, "", 0)))], 0)
    appends = core.topics_deleted(["t"])
    written = []
    for a in appends:
        assert isinstance(a, AppendRecords)
        assert len(a.records) <= TOMBSTONES_PER_APPEND
        if len(a.records) > 1:  # a key alone past the bound goes in a batch of its own
            assert sum(len(r.key) for r in a.records) <= TOMBSTONE_BYTES_PER_APPEND
        for r in a.records:
            assert r.value is None
            key, _value = decode_record(r.key, None)
            assert isinstance(key, OffsetCommitKey) and key.topic == "t"
            assert partition_for(key.group, 5) == a.partition
            written.append((key.group, key.partition))
    assert sorted(written) == sorted((g, p) for g in ids for p in (0, 1))
    for p in range(1, 5):  # short keys: the count bound cuts them
        held = sum(partition_for(g, 5) == p for g in ids)
        assert len([a for a in appends if a.partition == p]) == (  # type: ignore[union-attr]
            -(-2 * held // TOMBSTONES_PER_APPEND))
    # the byte bound cut partition 0's more often than the count bound alone would
    assert len([a for a in appends if a.partition == 0]) > (  # type: ignore[union-attr]
        -(-2 * 600 // TOMBSTONES_PER_APPEND))
    for g in ids[:50] + ids[-50:]:
        assert _fetch(core, False, g) == (-1, E.NONE)
        [answer] = core.offset_fetch(9, g, [("u", 0)], False)
        assert answer.response.partitions[0].offset == 2  # type: ignore[union-attr]
