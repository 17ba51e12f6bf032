"""A GroupCoordinator loads ``__consumer_offsets`` from a real PartitionShard.

A load's Read asks LOAD_READ_MAX_BYTES over all its partitions, which the shard keeps
as a budget: only the first partition with data gets a whole batch past it, the others
what is left, or nothing, and are read again, those left out first. Commits with long
metadata (a batch over half the budget) on partitions that are not first in the Read,
behind a partition holding more than a Read, must all come back after a restart.

The end of a load sorts the latest records by group, then restores the groups, about
LOAD_SLICE_RECORDS records a poll of the loop (it may be process 0's worker loop, shared
with the shards and handlers): a request meanwhile is answered
COORDINATOR_LOAD_IN_PROGRESS, and every group is served after.
Real actors on a manual clock, as test_group_coordinator_lost_appends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors import group_coordinator
from actors.coordinator_reads import CREATE_WAIT_MS, LOAD_READ_MAX_BYTES
from actors.core.offsets_codec import OFFSETS_TOPIC, partition_for
from actors.group_coordinator import GroupCoordinator
from actors.partition_shard import PartitionShard
from actors.runtime.actor import handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_group_coordinator_lost_appends import Probe, RecreatingController
from tests.fixtures.coordinator_node import (
    ExistingTopicController,
    LoadedCoordinator,
    spawn_log_side,
)
from tests.fixtures.waiting import wait_for
from wire.admin_messages import DeleteGroups, DeleteGroupsDone
from wire.broker_messages import (
    CreateTopics,
    DropPartitions,
    GetStats,
    Read,
    ReadDone,
    ReadDoneRow,
    TopicDeletions,
    TopicPartition,
    TopicsDeleted,
)
from wire.cluster_messages import CoordinatorPartitionRow, CoordinatorPartitions
from wire.errors import ErrorCode
from wire.group_messages import (
    DescribeGroups,
    DescribeGroupsDone,
    ListGroups,
    ListGroupsDone,
    OffsetCommit,
    OffsetCommitRow,
    OffsetFetch,
)
from wire.transaction_messages import CompleteTxnOffsets, TxnOffsetCommit

PARTITIONS = 8
META = "m" * 4000  # offset.metadata.max.bytes' default allows 4096
BIG = 175  # partitions of a commit with META each: a batch past half the Read's budget


class RecordingShard(PartitionShard):
    """The real shard; keeps the partitions of each Read of ``__consumer_offsets``."""

    def setup(self) -> None:
        super().setup()
        self.read_orders: list[list[int]] = []

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        if msg.rows and msg.rows[0].topic == OFFSETS_TOPIC:
            self.read_orders.append([r.partition for r in msg.rows])
        super().on_read(msg)


class HeldCoordinator(GroupCoordinator):
    """The real coordinator; its restore stops after ``hold_after`` slices until the
    test sets it None (a request is then sure to come mid-restore)."""

    def __init__(self, *args: Any, hold_after: int | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.hold_after = hold_after  # set before the load can start

    def setup(self) -> None:
        super().setup()
        self.slices_done = 0
        self.slice_polls: list[int] = []  # the loop's poll count at each slice
        self.read_polls: list[int] = []  # ... at each ReadDone

    @handles(ReadDone)
    def on_read(self, msg: ReadDone) -> None:
        self.read_polls.append(self._owner.loop_polls)
        super().on_read(msg)

    def _restore_slice(self) -> None:
        if self.hold_after is not None and self.slices_done >= self.hold_after:
            return
        self.slices_done += 1
        self.slice_polls.append(self._owner.loop_polls)
        super()._restore_slice()


class WideProbe(Probe):
    """The Probe, keeping the answers to DescribeGroups, ListGroups and DeleteGroups too."""

    @handles(DescribeGroupsDone, ListGroupsDone, DeleteGroupsDone)
    def on_more(self, msg: Any) -> None:
        self.answers.append(msg)


class Loaded(LoadedCoordinator):
    """The coordinator on a real shard, to restart and load again."""

    def __init__(self, node: Node, tmp_path: Path,
                 controller: type[ExistingTopicController] = ExistingTopicController,
                 shard: type[RecordingShard] | None = None) -> None:
        self.node = node
        self.config = config = Config({
            "offsets.topic.num.partitions": PARTITIONS, "num.group.coordinators": 1,
            "num.partition.shards": 1, "num.io.threads": 1})
        self.topo = topo = Topology.from_config(node.name, config)
        spawn_log_side(node, topo, config, tmp_path, OFFSETS_TOPIC, PARTITIONS,
                       shard or RecordingShard)
        node.spawn(controller, topo.controller.name)
        node.spawn(WideProbe, "probe")
        self.name = topo.coordinator(0).name
        self.coordinator = self.spawn_coordinator()
        self.req = 0

    def spawn_coordinator(self, hold_after: int | None = None, wait: bool = True) -> Address:
        address = self.node.spawn(HeldCoordinator, self.name, topology=self.topo,
                                  config=self.config, clock=self.node.clock,
                                  wait_for_handlers=False, hold_after=hold_after)
        if hold_after is None and wait:
            wait_for(lambda: self.stats()["loaded"], "the load", timeout=30)
        return address

    def actor(self) -> HeldCoordinator:
        found = self.node.actors[self.name]
        assert isinstance(found, HeldCoordinator)
        return found

    def restart(self, hold_after: int | None = None, wait: bool = True) -> None:
        self.node.stop_actor(self.name)
        self.shard().read_orders.clear()
        self.coordinator = self.spawn_coordinator(hold_after, wait)

    def shard(self) -> RecordingShard:
        found = self.node.actors[self.topo.shard(0).name]
        assert isinstance(found, RecordingShard)
        return found

    def commit(self, group: str, offsets: dict[int, int], metadata: str = "") -> None:
        rows = [OffsetCommitRow("t", p, o, -1, metadata) for p, o in offsets.items()]
        answer = self.ask(lambda rid: OffsetCommit(rid, group, -1, "", None, rows))
        assert all(row[2] == 0 for row in answer[1]), answer

    def fetch(self, group: str) -> tuple[int, dict[int, tuple[int, int]]]:
        """(error, {partition: (offset, metadata length)})"""
        answer = self.ask(lambda rid: OffsetFetch(rid, group, None))
        return answer[1], {row[1]: (row[2], len(row[4])) for row in answer[2]}


def group_on(p: int, tag: str) -> str:
    return next(f"{tag}-{i}" for i in range(10_000) if partition_for(f"{tag}-{i}", PARTITIONS) == p)


def test_batches_over_the_reads_budget_come_back_left_out_partitions_first(
        manual_node: Node, tmp_path: Path) -> None:
    loaded = Loaded(manual_node, tmp_path)
    # partition 0: more than a Read in batches of 400 KB; 3 and 7: a batch of 700 KB first
    first = group_on(0, "first")
    for i in range(4):
        loaded.commit(first, {100 * i + j: 10 + i for j in range(100)}, META)
    bigs = {p: group_on(p, "big") for p in (3, 7)}
    for p, g in bigs.items():
        loaded.commit(g, {j: 100 + p for j in range(BIG)}, META)
    small = {p: group_on(p, "small") for p in range(PARTITIONS)}
    for p, g in small.items():
        loaded.commit(g, {0: p, 1: p + 1})
    for p in (0, 3, 7):
        size = sum(f.stat().st_size for f in (tmp_path / f"{OFFSETS_TOPIC}-{p}").glob("*.log"))
        assert size > LOAD_READ_MAX_BYTES // 2, (p, size)

    loaded.restart()
    # the first Read carries partition 0's first batches and leaves 3 and 7 out (their
    # batch is past what is left of the budget); the next Read starts with 3
    orders = loaded.shard().read_orders
    assert orders[0] == list(range(PARTITIONS)), orders
    assert orders[1][0] == 3, orders
    assert len(orders) <= 5, orders
    for p, g in small.items():
        assert loaded.fetch(g) == (0, {0: (p, 0), 1: (p + 1, 0)})
    assert loaded.fetch(first) == (0, {100 * i + j: (10 + i, len(META))
                                       for i in range(4) for j in range(100)})
    for p, g in bigs.items():
        assert loaded.fetch(g) == (0, {j: (100 + p, len(META)) for j in range(BIG)})


def test_the_groups_are_restored_a_partition_at_a_time_a_slice_a_turn(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 records a turn, a partition at a time (single node): a partition's latest records
    (two a group) have their keys sorted by group, ceil(2n/3) turns, then two groups are
    restored a turn (a group stays in one slice). Partition 0's groups are served once all
    are restored; those of partition 1, being restored, are refused
    COORDINATOR_LOAD_IN_PROGRESS, a group restored already as one not yet, as are those of
    the partitions after it."""
    monkeypatch.setattr(group_coordinator, "LOAD_SLICE_RECORDS", 3)
    loaded = Loaded(manual_node, tmp_path)
    groups = [f"g-{i}" for i in range(40)]
    for i, g in enumerate(groups):
        loaded.commit(g, {0: i, 1: 1000 + i})
    on = {p: [g for g in groups if partition_for(g, PARTITIONS) == p] for p in range(PARTITIONS)}
    assert len(on[0]) == len(on[1]) == 4  # a partition's groups take two restore slices

    def turns(p: int) -> tuple[int, int]:  # (sort turns, restore turns)
        return -(-2 * len(on[p]) // 3), -(-len(on[p]) // 2)
    held = sum(turns(0)) + turns(1)[0] + 1  # partition 0 done, two groups of partition 1
    loaded.restart(hold_after=held)
    wait_for(lambda: loaded.actor().slices_done == held
             and loaded.stats()["phase"] == "restoring", "the slices till the hold")
    stats = loaded.stats()
    assert stats["loaded_partitions"] == [0] and not stats["loaded"]
    assert sorted(stats["groups"]) == sorted(on[0] + on[1][:2])  # restored so far
    loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    for g in on[0]:
        i = groups.index(g)
        assert loaded.fetch(g) == (0, {0: (i, 0), 1: (1000 + i, 0)})
    assert loaded.fetch(on[1][0])[0] == loading  # restored, its partition not yet
    assert loaded.fetch(on[1][-1])[0] == loading
    assert loaded.fetch(on[7][0])[0] == loading
    loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["loaded"], "the rest of the restore")
    assert loaded.stats()["restore_slices"] == sum(sum(turns(p)) for p in range(PARTITIONS))
    assert loaded.stats()["loaded_partitions"] == list(range(PARTITIONS))
    for i, g in enumerate(groups):
        assert loaded.fetch(g) == (0, {0: (i, 0), 1: (1000 + i, 0)})


def test_a_partition_resigned_mid_restore_is_dropped_and_the_rest_restored(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster: a partition this node stops leading while its groups are being restored
    takes them away (those restored already unloaded, the rest skipped); the others'
    groups all come back and are served."""
    monkeypatch.setattr(group_coordinator, "LOAD_SLICE_RECORDS", 3)
    loaded = Loaded(manual_node, tmp_path)  # writes the records, as a single node
    groups = [f"g-{i}" for i in range(40)]
    for i, g in enumerate(groups):
        loaded.commit(g, {0: i})
    manual_node.stop_actor(loaded.name)
    manual_node.spawn(HeldCoordinator, loaded.name, topology=loaded.topo, config=loaded.config,
                      clock=manual_node.clock, wait_for_handlers=False, cluster=True)
    sort_turns = -(-len(groups) // 3)
    loaded.actor().hold_after = sort_turns + 1
    manual_node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 1) for p in range(PARTITIONS)], [], PARTITIONS))
    wait_for(lambda: loaded.actor().slices_done == sort_turns + 1
             and loaded.stats()["phase"] == "restoring", "a slice restored")
    restored = sorted(loaded.stats()["groups"])
    gone = partition_for(restored[0], PARTITIONS)  # some of its groups restored, not all
    assert 0 < len([g for g in restored if partition_for(g, PARTITIONS) == gone]) < len(
        [g for g in groups if partition_for(g, PARTITIONS) == gone])
    manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [gone], PARTITIONS))
    loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["phase"] == "cluster", "the rest of the restore")
    stats = loaded.stats()
    assert stats["loaded_partitions"] == [p for p in range(PARTITIONS) if p != gone]
    kept = [g for g in groups if partition_for(g, PARTITIONS) != gone]
    assert sorted(stats["groups"]) == sorted(kept)
    for i, g in enumerate(groups):
        if g in kept:
            assert loaded.fetch(g) == (0, {0: (i, 0)})
        else:
            assert loaded.fetch(g)[0] == int(ErrorCode.NOT_COORDINATOR)


def restore_in_cluster(loaded: Loaded, node: Node, groups: list[str]) -> int:
    """The coordinator again in cluster mode, every partition elected at epoch 1, held
    after the keys' sort and one slice of groups; the partition of the first group
    restored, some of its groups restored and some not."""
    node.stop_actor(loaded.name)
    node.spawn(HeldCoordinator, loaded.name, topology=loaded.topo, config=loaded.config,
               clock=node.clock, wait_for_handlers=False, cluster=True)
    sort_turns = -(-len(groups) // 3)  # one latest record a group
    loaded.actor().hold_after = sort_turns + 1
    loaded.shard().read_orders.clear()
    node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 1) for p in range(PARTITIONS)], [], PARTITIONS))
    wait_for(lambda: loaded.actor().slices_done == sort_turns + 1
             and loaded.stats()["phase"] == "restoring", "a slice restored")
    restored = sorted(loaded.stats()["groups"])
    partly = partition_for(restored[0], PARTITIONS)
    assert 0 < len([g for g in restored if partition_for(g, PARTITIONS) == partly]) < len(
        [g for g in groups if partition_for(g, PARTITIONS) == partly])
    return partly


def committed(loaded: Loaded, node: Node, groups: list[str]) -> Loaded:
    for i, g in enumerate(groups):
        loaded.commit(g, {0: i})
    return loaded


def all_served(loaded: Loaded, groups: list[str]) -> None:
    stats = loaded.stats()
    assert stats["phase"] == "cluster" and stats["loaded_partitions"] == list(range(PARTITIONS))
    assert sorted(g for g in stats["groups"] if g in groups) == sorted(groups)
    for i, g in enumerate(groups):
        assert loaded.fetch(g) == (0, {0: (i, 0)})


def read_anew_whole(loaded: Loaded, partly: int) -> None:
    """The groups of ``partly`` restored already are gone at once; let go, the
    coordinator reads that partition again (last) and serves every group of GROUPS."""
    assert not [g for g in loaded.stats()["groups"] if partition_for(g, PARTITIONS) == partly]
    loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["phase"] == "cluster"
             and loaded.stats()["loaded_partitions"] == list(range(PARTITIONS)), "the reload")
    assert loaded.shard().read_orders[-1] == [partly]
    all_served(loaded, GROUPS)


@pytest.fixture
def sliced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_coordinator, "LOAD_SLICE_RECORDS", 3)


GROUPS = [f"g-{i}" for i in range(40)]


@pytest.mark.usefixtures("sliced")
def test_a_resign_then_election_at_the_same_epoch_mid_restore_loads_it_anew_whole(
        manual_node: Node, tmp_path: Path) -> None:
    """The ReplicaManager's _no_role then _roles_applied at the same epoch while a
    partition's groups are being restored: the groups restored already go, it is not
    marked loaded with the rest missing, and it is read and restored anew, whole."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    partly = restore_in_cluster(loaded, manual_node, GROUPS)
    manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [partly], PARTITIONS))
    manual_node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(partly, 1)], [], PARTITIONS))
    read_anew_whole(loaded, partly)


@pytest.mark.usefixtures("sliced")
def test_a_new_epoch_mid_restore_unloads_what_was_restored_and_loads_it_anew(
        manual_node: Node, tmp_path: Path) -> None:
    """A new leader epoch for a partition whose groups are being restored: those restored
    go at once, the rest is skipped, and it is read and restored anew at the new epoch
    (fails without: the restore went on and the partition was not read again)."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    partly = restore_in_cluster(loaded, manual_node, GROUPS)
    manual_node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(partly, 2)], [], PARTITIONS))
    read_anew_whole(loaded, partly)


@pytest.mark.usefixtures("sliced")
@pytest.mark.parametrize("count", [0, 4])
def test_a_partition_count_change_mid_restore_unloads_every_partition_held(
        manual_node: Node, tmp_path: Path, count: int) -> None:
    """A count of 0 (unknown) or another count while groups are being restored: every
    group held (of partitions restored and partly restored) goes and the restore ends;
    with the real count back every partition is read and restored anew."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    restore_in_cluster(loaded, manual_node, GROUPS)
    manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [], count))
    stats = loaded.stats()
    # 4: read anew, and the read under count 4 may have ended and its restore begun
    # ("restoring"): that restore runs no slice (slices_done is at hold_after already),
    # so no group is back and no partition served, which is what this asserts
    assert not stats["groups"] and stats["phase"] in ("cluster", "loading", "restoring")
    assert stats["loaded_partitions"] == []
    loaded.actor().hold_after = None
    loaded.shard().read_orders.clear()
    manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [], PARTITIONS))
    wait_for(lambda: loaded.stats()["loaded_partitions"] == list(range(PARTITIONS)),
             "the reload")
    assert {p for ps in loaded.shard().read_orders for p in ps} == set(range(PARTITIONS))
    all_served(loaded, GROUPS)


@pytest.mark.usefixtures("sliced")
def test_at_most_one_slice_a_poll_of_the_loop(manual_node: Node, tmp_path: Path) -> None:
    """No slice in the ReadDone handler nor twice between two polls of the loop (its
    rounds over local messages run on_turn again): each slice at a poll count of its
    own, the first after the poll that decoded the last answer (fails without: the
    first slice ran in the ReadDone handler, then on_turn in the same poll)."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    loaded.restart()
    polls = loaded.actor().slice_polls
    assert len(polls) == loaded.stats()["restore_slices"] > 20
    assert len(set(polls)) == len(polls), polls
    # the first slice not in the poll whose ReadDone decoded the last answer
    assert polls[0] > loaded.actor().read_polls[-1], (polls, loaded.actor().read_polls)


@pytest.mark.usefixtures("sliced")
@pytest.mark.parametrize("change", ["count", "epoch"])
def test_a_marker_held_mid_restore_is_dropped_with_its_partition(
        manual_node: Node, tmp_path: Path, change: str) -> None:
    """A CompleteTxnOffsets met mid-restore is held till the end of the restore; a count
    change, or a new epoch of its partition, drops it with the partition's restore: the
    load anew reads every marker written from the log, and this one's marker is not
    there (sent alone), so the transaction's offset stays pending (fails without: the
    held marker was settled on the load anew, committing the offset)."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    pid = 7000
    first = {}  # partition -> its first group, with an open transaction's offset
    for g in GROUPS:
        first.setdefault(partition_for(g, PARTITIONS), g)
    for g in first.values():
        answer = loaded.ask(lambda rid, g=g: TxnOffsetCommit(
            rid, "tx", g, pid, 0, -1, "", None, [OffsetCommitRow("t", 5, 77, -1, "")]))
        assert all(row[2] == 0 for row in answer[1]), answer
    p = restore_in_cluster(loaded, manual_node, GROUPS)
    manual_node.tell(loaded.coordinator, CompleteTxnOffsets(pid, p, True))
    if change == "count":
        manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [], 0))
        loaded.actor().hold_after = None
        manual_node.tell(loaded.coordinator, CoordinatorPartitions([], [], PARTITIONS))
    else:
        manual_node.tell(loaded.coordinator, CoordinatorPartitions(
            [CoordinatorPartitionRow(p, 2)], [], PARTITIONS))
        loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["phase"] == "cluster"
             and loaded.stats()["loaded_partitions"] == list(range(PARTITIONS)), "the reload")
    assert loaded.fetch(first[p]) == (0, {0: (GROUPS.index(first[p]), 0)})


class ResignedAtRead(HeldCoordinator):
    """Cluster: handles ``resign`` (a CoordinatorPartitions) just before its first ReadDone,
    while the load reads (phase "loading")."""

    resign: list[CoordinatorPartitions] = []

    @handles(ReadDone)
    def on_read(self, msg: ReadDone) -> None:
        cls = type(self)
        if cls.resign and self.phase == "loading":
            resign, cls.resign = cls.resign, []
            for m in resign:
                self.on_coordinator_partitions(m)
        super().on_read(msg)


def test_a_partition_resigned_while_loading_is_no_longer_read(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster: a partition resigned while the load reads is dropped from what is read:
    its answer is not taken, it holds no open transactions' records after the load
    (fails without: it stayed in read_offsets, its records were read on and
    txn_pending kept an entry for it, never freed), and the others are served."""
    loaded = committed(Loaded(manual_node, tmp_path), manual_node, GROUPS)
    gone = partition_for(GROUPS[0], PARTITIONS)
    monkeypatch.setattr(ResignedAtRead, "resign",
                        [CoordinatorPartitions([], [gone], PARTITIONS)])
    manual_node.stop_actor(loaded.name)
    manual_node.spawn(ResignedAtRead, loaded.name, topology=loaded.topo, config=loaded.config,
                      clock=manual_node.clock, wait_for_handlers=False, cluster=True)
    manual_node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 1) for p in range(PARTITIONS)], [], PARTITIONS))
    kept = [p for p in range(PARTITIONS) if p != gone]
    wait_for(lambda: loaded.stats()["phase"] == "cluster"
             and loaded.stats()["loaded_partitions"] == kept, "the load")
    assert not ResignedAtRead.resign
    actor = loaded.actor()
    assert gone not in actor.txn_pending and gone not in actor.read_offsets
    kept_groups = [g for g in GROUPS if partition_for(g, PARTITIONS) != gone]
    assert sorted(loaded.stats()["groups"]) == sorted(kept_groups)
    for i, g in enumerate(GROUPS):
        if g in kept_groups:
            assert loaded.fetch(g) == (0, {0: (i, 0)})


class RemakingController(RecreatingController):
    """Says the topic exists; once ``deleted`` is set, drops the first CreateTopics (lost:
    the coordinator asks again after CREATE_WAIT_MS) and has the shard make the partitions
    again on the next, answered created."""

    partitions = PARTITIONS

    def setup(self) -> None:
        super().setup()
        self.creates_dropped = 0

    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        if self.deleted and not self.creates_dropped:
            self.creates_dropped += 1
            return
        super().on_create(msg)


@pytest.mark.usefixtures("sliced")
def test_the_offsets_topic_deleted_mid_restore_starts_over_and_serves(
        manual_node: Node, tmp_path: Path) -> None:
    """Single node: TopicsDeleted(__consumer_offsets) while groups are being restored (the
    partitions dropped through the shard, as the Controller has it done): the restore
    stops (no slice more), the coordinator makes the topic again, no group of the log
    deleted comes back, and the load of the topic made anew serves."""
    node = manual_node
    loaded = committed(Loaded(node, tmp_path, RemakingController), node, GROUPS)
    sort_turns = -(-len(GROUPS) // 3)
    loaded.restart(hold_after=sort_turns + 1)
    wait_for(lambda: loaded.actor().slices_done == sort_turns + 1
             and loaded.stats()["phase"] == "restoring", "a slice restored")
    assert loaded.stats()["groups"]  # some restored
    node.tell(loaded.topo.shard(0), DropPartitions(-7, [
        TopicPartition(OFFSETS_TOPIC, p) for p in range(PARTITIONS)]), sender="probe")
    wait_for(lambda: [a for a in node.ask(Address(node.name, "probe"), GetStats())
                      if a[0] == -7], "the partitions dropped")
    controller = node.actors[loaded.topo.controller.name]
    assert isinstance(controller, RemakingController)
    controller.deleted = True
    loaded.actor().hold_after = None  # slices would run again, were the restore on
    node.tell(loaded.coordinator, TopicsDeleted([OFFSETS_TOPIC]))
    wait_for(lambda: controller.creates_dropped == 1, "the topic asked for again")
    stats = loaded.stats()
    assert stats["phase"] in ("waiting", "creating") and not stats["loaded"], stats["phase"]
    assert stats["groups"] == {}, stats["groups"]
    slices = stats["restore_slices"]
    node.run_turns()
    assert loaded.stats()["restore_slices"] == slices  # the restore does not go on
    node.clock.advance(CREATE_WAIT_MS)  # type: ignore[attr-defined]
    node.run_turns()  # the CreateTopics asked again, answered created
    wait_for(lambda: loaded.stats()["loaded"], "the load of the topic made anew")
    assert not [g for g in loaded.stats()["groups"] if g in GROUPS]
    assert loaded.fetch(GROUPS[0]) == (0, {})
    loaded.commit(GROUPS[0], {0: 99})
    assert loaded.fetch(GROUPS[0]) == (0, {0: (99, 0)})


def committed_t_and_u(loaded: Loaded, node: Node) -> Loaded:
    """Each group of GROUPS (the i-th) committed t-0 at i and u-0 at 500 + i."""
    committed(loaded, node, GROUPS)
    for i, g in enumerate(GROUPS):
        answer = loaded.ask(lambda rid, g=g, i=i: OffsetCommit(
            rid, g, -1, "", None, [OffsetCommitRow("u", 0, 500 + i, -1, "")]))
        assert all(row[2] == 0 for row in answer[1]), answer
    return loaded


@pytest.mark.usefixtures("sliced")
def test_a_topic_deleted_mid_restore_loses_its_offsets_in_the_groups_restored_after(
        manual_node: Node, tmp_path: Path) -> None:
    """TopicsDeleted(["t"]) while groups are being restored: the groups restored already
    lose t's offsets at once, those restored after at the restore's end (fails without:
    they had them back), each with tombstones, so a restart finds none; "u" stays."""
    node = manual_node
    loaded = committed_t_and_u(Loaded(node, tmp_path), node)
    sort_turns = -(-2 * len(GROUPS) // 3)  # two latest records a group
    loaded.restart(hold_after=sort_turns + 1)
    wait_for(lambda: loaded.actor().slices_done == sort_turns + 1
             and loaded.stats()["phase"] == "restoring", "a slice restored")
    assert 0 < len(loaded.stats()["groups"]) < len(GROUPS)
    node.tell(loaded.coordinator, TopicsDeleted(["t"]))
    loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["loaded"], "the rest of the restore")

    def offsets(g: str) -> tuple[int, dict[tuple[str, int], int]]:
        answer = loaded.ask(lambda rid: OffsetFetch(rid, g, None))
        return answer[1], {(row[0], row[1]): row[2] for row in answer[2]}
    for i, g in enumerate(GROUPS):
        assert offsets(g) == (0, {("u", 0): 500 + i}), g
    loaded.restart()
    for i, g in enumerate(GROUPS):
        assert offsets(g) == (0, {("u", 0): 500 + i}), g


@pytest.mark.usefixtures("sliced")
def test_every_partition_resigned_mid_restore_ends_it_at_once(
        manual_node: Node, tmp_path: Path) -> None:
    """Cluster: every partition being restored resigned: the restore ends at once, no
    slice more run for groups none of which would be kept (fails without: it stayed
    "restoring" until its slices were done), and an election loads anew."""
    node = manual_node
    loaded = committed(Loaded(node, tmp_path), node, GROUPS)
    restore_in_cluster(loaded, node, GROUPS)
    slices = loaded.actor().slices_done
    node.tell(loaded.coordinator, CoordinatorPartitions([], list(range(PARTITIONS)),
                                                        PARTITIONS))
    stats = loaded.stats()
    assert (stats["phase"], stats["groups"], stats["loaded_partitions"]) == ("cluster", {}, [])
    loaded.actor().hold_after = None
    node.run_turns()
    assert loaded.actor().slices_done == slices
    node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 2) for p in range(PARTITIONS)], [], PARTITIONS))
    wait_for(lambda: loaded.stats()["phase"] == "cluster"
             and loaded.stats()["loaded_partitions"] == list(range(PARTITIONS)), "the reload")
    all_served(loaded, GROUPS)


@pytest.mark.usefixtures("sliced")
def test_a_deletion_completed_mid_restore_in_a_cluster_reaches_the_groups_restored_after(
        manual_node: Node, tmp_path: Path) -> None:
    """Cluster: a TopicDeletions completion (from the ReplicaManager) while groups are being
    restored: every group restored, before or after it, loses the topic's offsets (fails
    without: those restored after had them back, the completion marked applied)."""
    node = manual_node
    loaded = committed_t_and_u(Loaded(node, tmp_path), node)
    node.stop_actor(loaded.name)
    node.spawn(HeldCoordinator, loaded.name, topology=loaded.topo, config=loaded.config,
               clock=node.clock, wait_for_handlers=False, cluster=True)
    sort_turns = -(-2 * len(GROUPS) // 3)  # two latest records a group
    loaded.actor().hold_after = sort_turns + 1
    node.tell(loaded.coordinator, CoordinatorPartitions(
        [CoordinatorPartitionRow(p, 1) for p in range(PARTITIONS)], [], PARTITIONS))
    wait_for(lambda: loaded.actor().slices_done == sort_turns + 1
             and loaded.stats()["phase"] == "restoring", "a slice restored")
    assert 0 < len(loaded.stats()["groups"]) < len(GROUPS)
    node.tell(loaded.coordinator, TopicDeletions({}, {"t": "id-of-t"}))
    loaded.actor().hold_after = None
    wait_for(lambda: loaded.stats()["phase"] == "cluster"
             and loaded.stats()["loaded_partitions"] == list(range(PARTITIONS)), "the restore")
    for i, g in enumerate(GROUPS):
        answer = loaded.ask(lambda rid, g=g: OffsetFetch(rid, g, None))
        assert (answer[1], {(row[0], row[1]): row[2] for row in answer[2]}) == (
            0, {("u", 0): 500 + i}), g


class RefusingShard(RecordingShard):
    """The real shard; answers its first ``refusals`` load Reads of ``__consumer_offsets``
    partition ``refused`` UNKNOWN_TOPIC_OR_PARTITION for every partition they ask (as a
    single node's shard does for a partition whose old directory is not yet deleted), the
    rest as asked."""

    refused = 1
    refusals = 0

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        rows = [r for r in msg.rows if r.topic == OFFSETS_TOPIC and r.partition == self.refused]
        if not rows or not self.refusals:
            super().on_read(msg)
            return
        type(self).refusals -= 1
        self.reply(ReadDone(msg.req_id, [ReadDoneRow(
            OFFSETS_TOPIC, r.partition, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1, -1,
            b"", -1, -1, -1) for r in msg.rows]))


def test_a_partition_whose_load_read_fails_again_and_again_is_logged_once(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load Read of a partition answered an error is read again every RETRY_MS; the
    warning comes once for the partition, its repeats at debug (a line every retry, for
    as long as the partition answers so, flooded the log), and
    the load ends once it reads."""
    from loguru import logger

    monkeypatch.setattr(RefusingShard, "refusals", 0)
    config = Config({"offsets.topic.num.partitions": PARTITIONS, "num.group.coordinators": 1,
                     "num.partition.shards": 1, "num.io.threads": 1})
    topo = Topology.from_config(manual_node.name, config)
    spawn_log_side(manual_node, topo, config, tmp_path, OFFSETS_TOPIC, PARTITIONS,
                   RefusingShard)
    manual_node.spawn(ExistingTopicController, topo.controller.name)
    monkeypatch.setattr(RefusingShard, "refusals", 4)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    try:
        coordinator = manual_node.spawn(GroupCoordinator, topo.coordinator(0).name,
                                        topology=topo, config=config, clock=manual_node.clock,
                                        wait_for_handlers=False)

        def loaded() -> bool:
            stats: dict[str, Any] = manual_node.ask(coordinator, GetStats())
            return bool(stats["loaded"])

        def refused_all() -> bool:
            if loaded():
                return not RefusingShard.refusals
            manual_node.advance_clock(group_coordinator.RETRY_MS)
            return False

        wait_for(refused_all, "four refused reads, then the load", timeout=60)
    finally:
        logger.remove(sink)
    failed = [line for line in lines if f"reading {OFFSETS_TOPIC}-1 failed" in line]
    assert len(failed) == 4, failed
    assert sum(" WARNING " in line or "| WARNING" in line for line in failed) == 1, failed


class HoldingShard(RecordingShard):
    """The real shard; while ``held`` names a partition of ``__consumer_offsets`` (or a
    tuple of them), answers the Reads of it as a shard not hosting it yet (the real code's
    answer: the partition is out of its table for that Read), the other partitions of the
    Read as asked. Its load waits; the coordinator reads it again every RETRY_MS."""

    held: int | tuple[int, ...] | None = None

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        held = () if self.held is None else (
            (self.held,) if isinstance(self.held, int) else self.held)
        states = {p: self.partitions.pop((OFFSETS_TOPIC, p), None) for p in held}
        try:
            super().on_read(msg)
        finally:
            for p, state in states.items():
                if state is not None:
                    self.partitions[(OFFSETS_TOPIC, p)] = state


def held_load(node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[Loaded, str, str]:
    """A single node with group A on partition 2 and group B on partition 5 (t-0
    committed at 11 and 22), restarted with partition 5's load held; returns once A is
    served (at most 10 s: without per-partition serving it never is)."""
    monkeypatch.setattr(HoldingShard, "held", None)
    loaded = Loaded(node, tmp_path, shard=HoldingShard)
    a, b = group_on(2, "a"), group_on(5, "b")
    loaded.commit(a, {0: 11})
    loaded.commit(b, {0: 22})
    monkeypatch.setattr(HoldingShard, "held", 5)
    loaded.restart(wait=False)
    wait_for(lambda: loaded.fetch(a)[0] == 0, "group A served while partition 5 loads",
             timeout=10)
    return loaded, a, b


def release(loaded: Loaded, node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HoldingShard, "held", None)

    def done() -> bool:
        if loaded.stats()["loaded"]:
            return True
        node.advance_clock(group_coordinator.RETRY_MS)  # the Read of partition 5 again
        return False
    wait_for(done, "the load of partition 5", timeout=30)


def test_a_single_node_serves_a_partition_restored_while_another_still_loads(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Single node, partition 5's load held (its Reads fail): the groups of the partitions
    restored are served (OffsetFetch, OffsetCommit, DescribeGroups), as Kafka serves a
    group once its own partition is loaded, while B's (partition 5) are refused
    COORDINATOR_LOAD_IN_PROGRESS; ListGroups lists the groups loaded with that error, as
    Kafka's handleListGroups while any partition loads. Once partition 5 reads, B is
    served too. (Fails without: every group was refused until every partition had
    loaded, so A was never served while 5 was held.)"""
    node = manual_node
    loaded, a, b = held_load(node, tmp_path, monkeypatch)
    loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    stats = loaded.stats()
    assert not stats["loaded"] and stats["phase"] in ("loading", "read-retry")
    assert stats["loaded_partitions"] == [p for p in range(PARTITIONS) if p != 5]
    assert loaded.fetch(a) == (0, {0: (11, 0)})
    assert loaded.fetch(b)[0] == loading
    loaded.commit(a, {0: 12})
    assert loaded.fetch(a) == (0, {0: (12, 0)})
    described = loaded.ask(lambda rid: DescribeGroups(rid, [a, b]))[1]
    assert [(row[0], row[1], row[2]) for row in described] == [
        (0, a, "Empty"), (loading, b, "")]
    listed = loaded.ask(lambda rid: ListGroups(rid, None))
    assert (listed[1], [row[0] for row in listed[2]]) == (loading, [a])
    deleted = loaded.ask(lambda rid: DeleteGroups(rid, [b]))[1]
    assert [(row[0], row[1]) for row in deleted] == [(b, loading)]

    release(loaded, node, monkeypatch)
    assert loaded.stats()["loaded_partitions"] == list(range(PARTITIONS))
    assert loaded.fetch(b) == (0, {0: (22, 0)})
    assert loaded.fetch(a) == (0, {0: (12, 0)})
    listed = loaded.ask(lambda rid: ListGroups(rid, None))
    assert (listed[1], sorted(row[0] for row in listed[2])) == (0, sorted([a, b]))


def test_markers_of_a_partition_served_settle_at_once_those_of_one_loading_at_its_end(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Single node, partitions 5 and 6's loads held: a transaction's offset committed for
    A (partition 2, served) settles at its marker at once, not at the end of the whole
    load; B's offset of a transaction left open before the restart (read from the log,
    pending) settles at a marker met while partition 5 loads, held till 5's own restore,
    not settled by partition 6's restore before it (fails without: A's TxnOffsetCommit
    was refused COORDINATOR_LOAD_IN_PROGRESS; and, every held marker settled at 6's
    restore, B's found nothing to settle there and its offset stayed pending after 5's)."""
    node = manual_node
    pid = 7000
    monkeypatch.setattr(HoldingShard, "held", None)
    loaded = Loaded(node, tmp_path, shard=HoldingShard)
    a, b, c = group_on(2, "a"), group_on(5, "b"), group_on(6, "c")
    loaded.commit(a, {0: 11})
    loaded.commit(b, {0: 22})
    loaded.commit(c, {0: 33})
    answer = loaded.ask(lambda rid: TxnOffsetCommit(
        rid, "tx", b, pid, 0, -1, "", None, [OffsetCommitRow("t", 0, 23, -1, "")]))
    assert all(row[2] == 0 for row in answer[1]), answer  # open: its marker not written
    monkeypatch.setattr(HoldingShard, "held", (5, 6))
    loaded.restart(wait=False)
    wait_for(lambda: loaded.fetch(a)[0] == 0, "group A served while partitions 5, 6 load",
             timeout=10)
    answer = loaded.ask(lambda rid: TxnOffsetCommit(
        rid, "tx", a, pid, 0, -1, "", None, [OffsetCommitRow("t", 0, 13, -1, "")]))
    assert all(row[2] == 0 for row in answer[1]), answer
    assert loaded.fetch(a) == (0, {0: (11, 0)})  # pending
    node.tell(loaded.coordinator, CompleteTxnOffsets(pid, 2, True))
    assert loaded.fetch(a) == (0, {0: (13, 0)})  # at once: partition 2 is served
    node.tell(loaded.coordinator, CompleteTxnOffsets(pid, 5, True))  # held: 5 loads
    loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert loaded.fetch(b)[0] == loading
    monkeypatch.setattr(HoldingShard, "held", 5)  # 6 is read and restored first

    def six_served() -> bool:
        if 6 in loaded.stats()["loaded_partitions"]:
            return True
        node.advance_clock(group_coordinator.RETRY_MS)  # the Read of partition 6 again
        return False
    wait_for(six_served, "the load of partition 6", timeout=30)
    assert loaded.fetch(c) == (0, {0: (33, 0)})
    assert loaded.fetch(b)[0] == loading
    release(loaded, node, monkeypatch)
    assert loaded.fetch(b) == (0, {0: (23, 0)})
    assert loaded.fetch(a) == (0, {0: (13, 0)})


def test_a_start_over_mid_load_forgets_the_partitions_served(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Single node, A's partition served and partition 5's load held: TopicsDeleted
    (__consumer_offsets) starts over; A's partition is no longer served (its groups were
    dropped: served, A would answer no offsets) until the load anew restores it (held
    here: no slice runs), then A and B are served from the log."""
    node = manual_node
    loaded, a, b = held_load(node, tmp_path, monkeypatch)
    loaded.actor().hold_after = 0  # the load anew restores no partition with records
    node.tell(loaded.coordinator, TopicsDeleted([OFFSETS_TOPIC]))
    wait_for(lambda: loaded.stats()["phase"] in ("loading", "read-retry"), "the load anew")
    loading = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert 2 not in loaded.stats()["loaded_partitions"]
    assert loaded.fetch(a)[0] == loading
    assert loaded.fetch(b)[0] == loading
    loaded.actor().hold_after = None
    release(loaded, node, monkeypatch)
    assert loaded.fetch(a) == (0, {0: (11, 0)})
    assert loaded.fetch(b) == (0, {0: (22, 0)})
