"""The GroupCoordinator shell on real actors: loading ``__consumer_offsets``,
sharding groups over coordinators, the refusal while loading, appends as real
record batches answered only after the shard's AppendDone.

A fake Controller and a fake PartitionShard stand in for the broker's, so
the test decides exactly what the log holds and when each answer arrives.
The batch codec (``decode_batches``/``encode_records``) is tested on bytes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from actors.core.offsets_codec import (
    OFFSETS_TOPIC,
    OffsetCommitValue,
    decode_record,
    group_tombstone,
    offset_commit_record,
    offset_tombstone,
    partition_for,
)
from actors.core.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT, build_batch
from actors.group_coordinator import (
    GroupCoordinator,
    decode_batches,
    encode_records,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendDoneRow,
    CreateTopicDoneRow,
    CreateTopics,
    CreateTopicsDone,
    GetStats,
    Read,
    ReadDone,
    ReadDoneRow,
    TopicPartition,
)
from wire.errors import CorruptMessageError, ErrorCode
from wire.group_messages import (
    OffsetCommit,
    OffsetCommitDone,
    OffsetCommitRow,
    OffsetFetch,
    OffsetFetchDone,
)
from wire.registry import message
from wire.transaction_messages import CompleteTxnOffsets

NUM_PARTITIONS = 4


@message(9301)
class Release(NamedTuple):
    """Fake shard: answer the held reads/appends; ``append_error`` for the next appends."""

    reads: bool
    appends: bool
    append_error: int


class FakeController(Actor):
    def setup(self) -> None:
        self.requests: list[Any] = []

    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        self.requests.append(list(msg.rows))
        self.reply(CreateTopicsDone(msg.req_id, [
            CreateTopicDoneRow(r.name, int(ErrorCode.TOPIC_ALREADY_EXISTS), "exists", -1, -1)
            for r in msg.rows]))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return self.requests


class FakeShard(Actor):
    """Every __consumer_offsets partition: a list of batches, read whole from an offset."""

    def __init__(self, node: Any, name: str, *, logs: dict[int, list[bytes]], **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.initial = logs

    def setup(self) -> None:
        self.logs = {p: list(bs) for p, bs in self.initial.items()}
        self.hold_reads = True
        self.hold_appends = False
        self.append_error = 0
        self.held: list[tuple[Address, Any]] = []
        self.appended: list[tuple[int, bytes]] = []

    def _end(self, p: int) -> int:
        return sum(len(decode_batches(b)[0]) for b in self.logs.get(p, []))

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        assert self.current_sender is not None
        if self.hold_reads:
            self.held.append((self.current_sender, msg))
            return
        self.tell(self.current_sender, self._read(msg))

    def _read(self, msg: Read) -> ReadDone:
        rows: list[ReadDoneRow] = []
        for r in msg.rows:
            p = r.partition
            data = b"".join(b for b in self.logs.get(p, [])
                            if (decode_batches(b)[1] or 0) > r.fetch_offset)
            rows.append(ReadDoneRow(r.topic, p, 0, self._end(p), 0, data, 0, 0, self._end(p)))
        return ReadDone(msg.req_id, rows)

    @handles(Append)
    def on_append(self, msg: Append) -> None:
        assert self.current_sender is not None and msg.acks == -1
        if self.hold_appends:
            self.held.append((self.current_sender, msg))
            return
        self.tell(self.current_sender, self._append(msg))

    def _append(self, msg: Append) -> AppendDone:
        rows: list[AppendDoneRow] = []
        for r in msg.rows:
            topic, p = r.topic, r.partition
            assert topic == OFFSETS_TOPIC
            if self.append_error:
                rows.append(AppendDoneRow(topic, p, self.append_error, -1, -1, -1, "refused"))
                continue
            base = self._end(p)
            stored = base.to_bytes(8, "big") + bytes(r.records)[8:]
            self.logs.setdefault(p, []).append(stored)
            self.appended.append((p, stored))
            rows.append(AppendDoneRow(topic, p, 0, base, -1, 0, None))
        return AppendDone(msg.req_id, rows)

    @handles(Release)
    def on_release(self, msg: Release) -> None:
        self.hold_reads = not msg.reads and self.hold_reads
        self.hold_appends = not msg.appends
        self.append_error = msg.append_error
        held, self.held = self.held, []
        for sender, m in held:
            if isinstance(m, Read) and not self.hold_reads:
                self.tell(sender, self._read(m))
            elif isinstance(m, Append) and not self.hold_appends:
                self.tell(sender, self._append(m))
            else:
                self.held.append((sender, m))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [[p, b] for p, b in self.appended]


class Probe(Actor):
    """Stands in for a request handler: keeps every answer it gets."""

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(OffsetFetchDone, OffsetCommitDone)
    def on_answer(self, msg: Any) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [[type(a).__name__, *a] for a in self.answers]


def commit_batch(records: list[Any]) -> bytes:
    return encode_records(records, 1_000)


class Cluster:
    """Two coordinators over fake Controller and shard on one node, plus a probe."""

    def __init__(self, node: Node, logs: dict[int, list[bytes]]) -> None:
        self.node = node
        config = Config({"offsets.topic.num.partitions": NUM_PARTITIONS,
                         "num.group.coordinators": 2, "num.partition.shards": 1,
                         "num.io.threads": 1})
        self.topo = Topology.from_config(node.name, config)
        node.spawn(FakeController, self.topo.controller.name)
        node.spawn(FakeShard, self.topo.shard(0).name, logs=logs)
        node.spawn(Probe, "probe")
        for i in range(2):
            node.spawn(GroupCoordinator, self.topo.coordinator(i).name, topology=self.topo,
                       config=config, wait_for_handlers=False)
        self.next_id = 0

    def send(self, group: str, make: Any, coordinator: Address | None = None) -> int:
        self.next_id += 1
        target = coordinator or self.topo.coordinator_for(group)
        self.node.tell(target, make(self.next_id), sender="probe")
        return self.next_id

    def answer(self, req_id: int, wait: bool = True) -> list[Any] | None:
        def find() -> list[Any] | None:
            for a in self.node.ask(Address(self.node.name, "probe"), GetStats()):
                if a[1] == req_id:
                    return list(a)
            return None

        return wait_for(find) if wait else find()

    def release(self, reads: bool = False, appends: bool = False, error: int = 0) -> None:
        self.node.tell(self.topo.shard(0), Release(reads, appends, error))

    def loaded(self) -> bool:
        return all(self.node.ask(self.topo.coordinator(i), GetStats())["loaded"]
                   for i in range(2))


def groups_on_both_coordinators(topo: Topology) -> tuple[str, str]:
    """Two group ids owned by different coordinators (crc32 sharding)."""
    names = [f"group-{i}" for i in range(50)]
    first = names[0]
    other = next(n for n in names if topo.coordinator_for(n) != topo.coordinator_for(first))
    return first, other


def test_load_rebuilds_each_coordinators_groups_and_refuses_until_done(manual_node: Node) -> None:
    node = manual_node
    topo = Topology(node.name, 1, 1, 1, 1, 2)
    ga, gb = groups_on_both_coordinators(topo)
    logs: dict[int, list[bytes]] = {}
    for g, offsets in ((ga, (5, 9)), (gb, (3,))):
        p = partition_for(g, NUM_PARTITIONS)
        for off in offsets:
            logs.setdefault(p, []).append(commit_batch([
                offset_commit_record(g, "t", 0, OffsetCommitValue(off, -1, f"m{off}", 1)),
                offset_commit_record(g, "t", 1, OffsetCommitValue(off + 100, -1, "", 1)),
            ]))
    pb = partition_for(gb, NUM_PARTITIONS)
    logs[pb].append(commit_batch([offset_tombstone(gb, "t", 1)]))
    # A deleted group loses what was committed before its tombstone, not after.
    gone = "group-deleted"
    pg = partition_for(gone, NUM_PARTITIONS)
    logs.setdefault(pg, []).extend([
        commit_batch([offset_commit_record(gone, "t", 0, OffsetCommitValue(1, -1, "", 1)),
                      offset_commit_record(gone, "t", 1, OffsetCommitValue(2, -1, "", 1))]),
        commit_batch([group_tombstone(gone)]),
        commit_batch([offset_commit_record(gone, "t", 1, OffsetCommitValue(3, -1, "", 1))]),
    ])
    # Give every batch its real base offset, as the log would.
    for batches in logs.values():
        base = 0
        for i, b in enumerate(batches):
            batches[i] = base.to_bytes(8, "big") + b[8:]
            base = decode_batches(batches[i])[1]  # type: ignore[assignment]

    cluster = Cluster(node, logs)
    assert wait_for(lambda: node.ask(topo.controller, GetStats()))[0][0][:3] == [
        OFFSETS_TOPIC, NUM_PARTITIONS, 1]
    early = cluster.send(ga, lambda rid: OffsetFetch(rid, ga, None))
    assert cluster.answer(early)[2] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # type: ignore[index]

    cluster.release(reads=True)
    wait_for(cluster.loaded)
    fa = cluster.answer(cluster.send(ga, lambda rid: OffsetFetch(rid, ga, None)))
    assert fa[2:] == [0, [["t", 0, 9, -1, "m9", 0], ["t", 1, 109, -1, "", 0]]]  # type: ignore[index]
    fb = cluster.answer(cluster.send(gb, lambda rid: OffsetFetch(rid, gb, None)))
    assert fb[2:] == [0, [["t", 0, 3, -1, "m3", 0]]]  # type: ignore[index]
    fg = cluster.answer(cluster.send(gone, lambda rid: OffsetFetch(rid, gone, None)))
    assert fg[2:] == [0, [["t", 1, 3, -1, "", 0]]]  # type: ignore[index]
    # The other coordinator never loaded ga: its records belong to its owner only.
    wrong = topo.coordinator(1 - int(topo.coordinator_for(ga).name.rsplit("-", 1)[1]))
    fw = cluster.answer(cluster.send(ga, lambda rid: OffsetFetch(rid, ga, None), wrong))
    assert fw[2:] == [0, []]  # type: ignore[index]


def test_commit_is_a_real_batch_answered_after_the_append(manual_node: Node) -> None:
    node = manual_node
    cluster = Cluster(node, {})
    cluster.release(reads=True)
    wait_for(cluster.loaded)
    cluster.release(appends=False)  # hold the appends
    rows = [OffsetCommitRow("t", 0, 17, 3, "meta"), OffsetCommitRow("t", 2, 4, -1, None)]
    rid = cluster.send("g", lambda r: OffsetCommit(r, "g", -1, "", None, rows))
    node.quiesce()  # the coordinator has appended and the shard holds the append
    assert node.ask(cluster.topo.shard(0), GetStats()) == []  # nothing appended yet
    assert cluster.answer(rid, wait=False) is None
    cluster.release(appends=True)
    assert cluster.answer(rid)[2] == [["t", 0, 0], ["t", 2, 0]]  # type: ignore[index]
    [[p, batch]] = node.ask(cluster.topo.shard(0), GetStats())
    assert p == partition_for("g", NUM_PARTITIONS)
    records, next_offset = decode_batches(batch)
    assert next_offset == 2
    decoded = [decode_record(k, v) for _o, k, v in records]  # type: ignore[arg-type]
    assert [(k.topic, k.partition, v.offset, v.leader_epoch, v.metadata)  # type: ignore[union-attr]
            for k, v in decoded] == [("t", 0, 17, 3, "meta"), ("t", 2, 4, -1, "")]

    # A refused append refuses the commit with the coordinator's code for it.
    cluster.release(appends=True, error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    refused = cluster.send(
        "g", lambda r: OffsetCommit(r, "g", -1, "", None, [OffsetCommitRow("t", 0, 99, -1, "")]))
    assert cluster.answer(refused)[2] == [["t", 0, int(ErrorCode.NOT_COORDINATOR)]]  # type: ignore[index]
    fetched = cluster.answer(
        cluster.send("g", lambda r: OffsetFetch(r, "g", [TopicPartition("t", 0)])))
    assert fetched[3] == [["t", 0, 17, 3, "meta", 0]]  # type: ignore[index]


# ------------------------------------------------------------- batch codec


def test_decode_batches_reads_keys_values_and_tombstones() -> None:
    batch = encode_records([offset_commit_record("g", "t", 0, OffsetCommitValue(5)),
                            offset_tombstone("g", "t", 1)], 123)
    records, next_offset = decode_batches(batch)
    assert next_offset == 2
    assert [o for o, _k, _v in records] == [0, 1]
    assert records[1][2] is None
    assert decode_record(records[0][1], records[0][2])[1].offset == 5  # type: ignore[arg-type, union-attr]


def test_decode_batches_stops_before_a_partial_batch_and_skips_control_batches() -> None:
    first = build_batch([b"v0", b"v1"], keys=[b"k0", b"k1"])
    control = build_batch([b"c"], base_offset=2, attributes=CONTROL_BIT)
    third = build_batch([b"v3"], base_offset=3, keys=[b"k3"])
    records, next_offset = decode_batches(first + control + third[:-1])
    assert [(o, k, v) for o, k, v in records] == [(0, b"k0", b"v0"), (1, b"k1", b"v1")]
    assert next_offset == 3
    assert decode_batches(third[:30]) == ([], None)


def test_decode_batches_refuses_compressed_batches() -> None:
    gzip_batch = build_batch([b"x"], attributes=1)
    with pytest.raises(CorruptMessageError, match="compressed batch at offset 0"):
        decode_batches(gzip_batch)


# ------------------------------------------------- a marker met while loading

PRODUCER_ID = 4242


class SplitReadShard(FakeShard):
    """Reads answered at once, except that the first read of ``slow`` claims more to
    come (log end 1, no data) and the read after it is held until a Release: the
    other partitions are read to their end while the load is not finished."""

    slow = -1

    def setup(self) -> None:
        super().setup()
        self.hold_reads = False
        self.slow_reads = 0

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        assert self.current_sender is not None
        if any(r.partition == self.slow for r in msg.rows):
            self.slow_reads += 1
            if self.slow_reads == 2:
                self.hold_reads = True
                self.held.append((self.current_sender, msg))
                return
        self.tell(self.current_sender, self._read(msg))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return len(self.held)

    def _read(self, msg: Read) -> ReadDone:
        done = super()._read(msg)
        if self.slow_reads != 1:
            return done
        return done._replace(rows=[
            r._replace(log_end_offset=1) if r.partition == self.slow else r
            for r in done.rows])


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_met_while_loading_settles_the_offsets_read_before_it(
        manual_node: Node, commit: bool) -> None:
    """The group's partition holds a transaction's offsets (no marker yet) and is read to
    its end while another partition's read is still out; the marker is written then
    (CompleteTxnOffsets arrives mid-load). Once the load ends the offsets are committed
    (or dropped), not left pending for good (UNSTABLE_OFFSET_COMMIT forever)."""
    node = manual_node
    group = "txn-group"
    p = partition_for(group, NUM_PARTITIONS)
    SplitReadShard.slow = (p + 1) % NUM_PARTITIONS
    record = offset_commit_record(group, "t", 0, OffsetCommitValue(77, -1, "", 1))
    batch = build_batch([record.value], keys=[record.key], producer_id=PRODUCER_ID,
                        producer_epoch=0, attributes=TRANSACTIONAL_BIT)
    config = Config({"offsets.topic.num.partitions": NUM_PARTITIONS,
                     "num.group.coordinators": 1, "num.partition.shards": 1,
                     "num.io.threads": 1})
    topo = Topology.from_config(node.name, config)
    node.spawn(FakeController, topo.controller.name)
    node.spawn(SplitReadShard, topo.shard(0).name, logs={p: [batch]})
    node.spawn(Probe, "probe")
    coordinator = topo.coordinator(0)
    node.spawn(GroupCoordinator, coordinator.name, topology=topo, config=config,
               wait_for_handlers=False)
    wait_for(lambda: node.ask(topo.shard(0), GetStats()) == 1)  # the second read, held
    assert node.ask(coordinator, GetStats())["phase"] == "loading"
    node.tell(coordinator, CompleteTxnOffsets(PRODUCER_ID, p, commit))
    node.quiesce()
    assert not node.ask(coordinator, GetStats())["loaded"]
    node.tell(topo.shard(0), Release(True, True, 0))
    wait_for(lambda: node.ask(coordinator, GetStats())["loaded"])
    node.tell(coordinator, OffsetFetch(1, group, [TopicPartition("t", 0)], True),
              sender="probe")
    node.quiesce()
    [answer] = node.ask(Address(node.name, "probe"), GetStats())
    assert answer[3] == [["t", 0, 77 if commit else -1, -1, "", 0]]
