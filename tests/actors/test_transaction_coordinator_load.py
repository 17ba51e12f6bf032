"""A TransactionCoordinator loads ``__transaction_state`` from a real PartitionShard
whose partitions hold records bigger than their share of a Read's answer.

A load's Read asks LOAD_READ_MAX_BYTES over all its partitions, which the shard keeps
as a budget: only the first partition with data gets a whole batch past it, the others
get what is left, or nothing, and are read again. Two Ongoing transactions over
thousands of partitions each (about 650 KB a record, together past the budget), on
partitions that are not the first of the Read, must still be loaded, with every other
partition's ids. Real actors on a manual clock, as test_transaction_coordinator_lost_appends.

The end of a load restores the ids a slice a poll of the loop; a resign and election at
the same epoch, or a changed partition count, between two slices must not leave a
partition served with an earlier slice's ids gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors import transaction_coordinator
from actors.coordinator_reads import LOAD_READ_MAX_BYTES
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from actors.transaction_coordinator import (
    TransactionCoordinator,
    txn_coordinator_name,
)
from tests.actors.test_transaction_coordinator_shell import Probe
from tests.fixtures.coordinator_node import (
    ExistingTopicController,
    LoadedCoordinator,
    spawn_log_side,
)
from tests.fixtures.waiting import wait_for
from wire.transaction_messages import (
    AddPartitionsToTxn,
    InitTxnProducer,
    TxnCoordinatorPartitions,
    TxnPartitionRow,
    TxnTopicPartition,
)

PARTITIONS = 8
TOPICS = 14_000  # one partition each: an Ongoing record of about 650 KB


class Loaded(LoadedCoordinator):
    """The coordinator on a real shard, to restart and load again."""

    def __init__(self, node: Node, tmp_path: Path,
                 cls: type[TransactionCoordinator] = TransactionCoordinator,
                 cluster: bool = False) -> None:
        self.node = node
        self.cls = cls
        self.cluster = cluster
        self.config = config = Config({
            "transaction.state.log.num.partitions": PARTITIONS, "num.group.coordinators": 1,
            "num.partition.shards": 1, "num.io.threads": 1})
        self.topo = topo = Topology.from_config(node.name, config)
        spawn_log_side(node, topo, config, tmp_path, TRANSACTION_STATE_TOPIC, PARTITIONS)
        node.spawn(ExistingTopicController, topo.controller.name)
        node.spawn(Probe, "probe")
        self.name = txn_coordinator_name(0)
        self.coordinator = self.spawn_coordinator()
        self.req = 0

    def spawn_coordinator(self, wait: bool = True) -> Address:
        if self.cluster:  # told what it leads, as the ReplicaManager does
            address = self.node.spawn(self.cls, self.name, topology=self.topo,
                                      config=self.config, index=0, clock=self.node.clock,
                                      cluster=True)
            self.node.tell(address, TxnCoordinatorPartitions(
                [TxnPartitionRow(p, 0) for p in range(PARTITIONS)], [], PARTITIONS))
        else:
            address = self.node.spawn(self.cls, self.name, topology=self.topo,
                                      config=self.config, index=0, clock=self.node.clock,
                                      topic_exists=True)
        if wait:
            self.wait_loaded()
        return address

    def wait_loaded(self) -> None:
        wait_for(lambda: self.stats()["loaded_partitions"] == list(range(PARTITIONS))
                 and self.stats()["phase"] in ("ready", "cluster"), "the load", timeout=30)

    def restart(self, wait: bool = True) -> None:
        """A new coordinator reads it all again."""
        self.node.stop_actor(self.name)
        self.coordinator = self.spawn_coordinator(wait)

    def init(self, txn_id: str) -> tuple[int, int]:
        _req, error, producer_id, epoch = self.ask(
            lambda rid: InitTxnProducer(rid, txn_id, 60_000, -1, -1))
        assert error == 0
        return producer_id, epoch


def test_a_record_over_a_reads_share_is_loaded_from_a_real_shard(
        manual_node: Node, tmp_path: Path) -> None:
    loaded = Loaded(manual_node, tmp_path)
    # an id on every partition; the big ones on partitions 3 and 7, never first in the Read
    ids = {partition_for(f"small-{i}", PARTITIONS): f"small-{i}" for i in range(200)}
    assert sorted(ids) == list(range(PARTITIONS))
    bigs = [next(f"big-{i}" for i in range(1000) if partition_for(f"big-{i}", PARTITIONS) == p)
            for p in (3, PARTITIONS - 1)]
    producers = {txn_id: loaded.init(txn_id) for txn_id in [*ids.values(), *bigs]}
    for big in bigs:
        producer_id, epoch = producers[big]
        many = [TxnTopicPartition(f"{big}-a-topic-with-a-long-enough-name-{i:05d}", 0)
                for i in range(TOPICS)]
        answer = loaded.ask(lambda rid, b=big, pid=producer_id, e=epoch, m=many:
                            AddPartitionsToTxn(rid, b, pid, e, m))
        assert answer[1] == 0, answer
    # each big record is past half the budget: one Read cannot carry both
    for p in (3, PARTITIONS - 1):
        size = sum(f.stat().st_size
                   for f in (tmp_path / f"{TRANSACTION_STATE_TOPIC}-{p}").glob("*.log"))
        assert size > LOAD_READ_MAX_BYTES // 2, (p, size)

    loaded.restart()
    transactions = loaded.stats()["transactions"]
    assert all(transactions[t] == "Empty" for t in ids.values()), transactions
    for big in bigs:
        assert transactions[big] == "Ongoing"
        assert len(manual_node.actors[loaded.name].core.txns[big].partitions) == TOPICS


def test_the_ids_are_restored_a_slice_a_turn(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of a load restores LOAD_SLICE_IDS ids a poll of the loop (it may be
    the worker loop of the shards and handlers): every id comes back, over polls."""
    monkeypatch.setattr(transaction_coordinator, "LOAD_SLICE_IDS", 3)
    loaded = Loaded(manual_node, tmp_path)
    ids = [f"id-{i}" for i in range(40)]
    producers = {txn_id: loaded.init(txn_id) for txn_id in ids}
    ongoing = ids[::3]
    for txn_id in ongoing:
        producer_id, epoch = producers[txn_id]
        answer = loaded.ask(lambda rid, t=txn_id, pid=producer_id, e=epoch: AddPartitionsToTxn(
            rid, t, pid, e, [TxnTopicPartition("t", 0)]))
        assert answer[1] == 0, answer
    loaded.restart()
    stats = loaded.stats()
    assert stats["transactions"] == {
        t: "Ongoing" if t in ongoing else "Empty" for t in ids}
    assert stats["restore_slices"] >= len(ids) // 3
    assert stats["phase"] == "ready"
    # every id is served again as before the restart
    producer_id, epoch = loaded.init(ids[1])
    assert (producer_id, epoch) == (producers[ids[1]][0], producers[ids[1]][1] + 1)


class Interrupted(TransactionCoordinator):
    """Handles ``between`` right after its first slice of a restore, and checks after every
    slice that each partition it serves holds every id of ``expected`` it maps to (under
    the topic's real count)."""

    between: list[TxnCoordinatorPartitions] = []
    expected: dict[str, int] = {}
    violations: list[tuple[int, list[str]]] = []
    after_between: list[Any] = []
    slice_polls: list[int] = []

    def _restore_slice(self) -> None:
        super()._restore_slice()
        cls = type(self)
        cls.slice_polls.append(self._owner.loop_polls)
        if cls.between:
            between, cls.between = cls.between, []
            for msg in between:
                self.on_partitions(msg)
            cls.after_between.append((dict(self.core.coordinator_epochs), sorted(self.core.txns),
                                      [p for p, _e, _i in self.restore], len(self.marker_jobs)))
        if self.num_partitions != PARTITIONS:
            return  # the test's other count: the ids were written under PARTITIONS
        for p in self.loaded:
            missing = sorted(t for t, q in cls.expected.items()
                             if q == p and t not in self.core.txns)
            if missing:
                cls.violations.append((p, missing))


def _interrupted_restart(node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         between: list[TxnCoordinatorPartitions]
                         ) -> tuple[Loaded, dict[str, tuple[int, int]], list[str]]:
    """40 ids (partition 0 holds more than a slice of 2), then a restart whose restore
    handles ``between`` after its first slice (partition 0's first two ids)."""
    monkeypatch.setattr(transaction_coordinator, "LOAD_SLICE_IDS", 2)
    monkeypatch.setattr(Interrupted, "between", [])
    monkeypatch.setattr(Interrupted, "expected", {})
    monkeypatch.setattr(Interrupted, "violations", [])
    monkeypatch.setattr(Interrupted, "after_between", [])
    monkeypatch.setattr(Interrupted, "slice_polls", [])
    loaded = Loaded(node, tmp_path, Interrupted, cluster=True)
    ids = [f"id-{i}" for i in range(40)]
    first = [t for t in ids if partition_for(t, PARTITIONS) == 0]
    assert len(first) > 2
    producers = {txn_id: loaded.init(txn_id) for txn_id in ids}
    Interrupted.expected = {t: partition_for(t, PARTITIONS) for t in ids}
    Interrupted.slice_polls.clear()
    Interrupted.between = between
    loaded.restart(wait=False)
    wait_for(lambda: Interrupted.after_between, "the first slice")
    return loaded, producers, first


def _served_again(loaded: Loaded, producers: dict[str, tuple[int, int]],
                  first: list[str]) -> None:
    assert Interrupted.violations == [], Interrupted.violations[:3]
    stats = loaded.stats()
    assert stats["transactions"] == dict.fromkeys(producers, "Empty")
    for txn_id in first[:2]:  # the first slice's ids keep their producer ids
        producer_id, epoch = producers[txn_id]
        assert loaded.init(txn_id) == (producer_id, epoch + 1)
    # one slice a poll of the loop, never two in one
    polls = Interrupted.slice_polls
    assert len(polls) == len(set(polls)), polls


def test_a_resign_and_election_at_the_same_epoch_mid_restore_reloads_the_partition(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ReplicaManager resigns and elects a partition again at the same leader epoch
    (_no_role, then _roles_applied): the resign unloads what the first slice restored,
    so the partition is loaded anew, whole, never served with those ids missing (an
    InitProducerId would hand a missing id a new producer id at epoch 0)."""
    loaded, producers, first = _interrupted_restart(
        manual_node, tmp_path, monkeypatch,
        [TxnCoordinatorPartitions([], [0], PARTITIONS),
         TxnCoordinatorPartitions([TxnPartitionRow(0, 0)], [], PARTITIONS)])
    loaded.wait_loaded()
    _served_again(loaded, producers, first)
    # partition 0 left the restore (it is loaded anew once the restore ends)
    assert Interrupted.after_between[0][2] == list(range(PARTITIONS - 1, 0, -1))


def test_a_new_epoch_mid_restore_unloads_the_partly_restored_partition(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition 0 elected again at a new epoch between two slices: as on a resign, the
    first slice's ids and epoch go at once (Kafka's onElection drops what it held), and
    it is loaded anew, whole, at the new epoch."""
    loaded, producers, first = _interrupted_restart(
        manual_node, tmp_path, monkeypatch,
        [TxnCoordinatorPartitions([TxnPartitionRow(0, 1)], [], PARTITIONS)])
    epochs, held, restore, marker_jobs = Interrupted.after_between[0]
    assert (0 in epochs, [t for t in held if t in first], restore, marker_jobs) == (
        False, [], list(range(PARTITIONS - 1, 0, -1)), 0)
    loaded.wait_loaded()
    _served_again(loaded, producers, first)
    assert manual_node.actors[loaded.name].core.coordinator_epochs[0] == 1


@pytest.mark.parametrize("count", [0, 4])
def test_a_count_change_mid_restore_unloads_the_partly_restored_partition(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        count: int) -> None:
    """A changed (or unknown) partition count between two slices: the ids the first
    slice restored are unloaded with the rest (under the new count they map to other
    partitions), the restore ends, and the count's return loads every partition anew."""
    loaded, producers, first = _interrupted_restart(
        manual_node, tmp_path, monkeypatch,
        [TxnCoordinatorPartitions([], [], count)])
    epochs, held, _restore, marker_jobs = Interrupted.after_between[0]
    if count == 0:
        assert (epochs, held, _restore, marker_jobs) == ({}, [], [], 0)
    else:  # nothing of the old mapping kept; the partitions are loaded again under 4
        assert (epochs, held, marker_jobs) == ({}, [], 0)
    manual_node.tell(loaded.coordinator, TxnCoordinatorPartitions([], [], PARTITIONS))
    loaded.wait_loaded()
    _served_again(loaded, producers, first)


class Counted(TransactionCoordinator):
    """Counts the expiry scans over the marker requests made while restoring, and puts
    a marker request (of an id with no job) in flight at its first slice."""

    scans_restoring: list[int] = []
    slice_polls: list[int] = []
    planted: list[int] = []

    def _expire_marker_requests(self, now: int) -> None:
        if self.phase == "restoring":
            type(self).scans_restoring.append(now)
        super()._expire_marker_requests(now)

    def _restore_slice(self) -> None:
        super()._restore_slice()
        cls = type(self)
        cls.slice_polls.append(self._owner.loop_polls)
        if not cls.planted:
            cls.planted.append(self.clock.now_ms() + 1000)
            self.marker_reqs[-7] = ("no-such-job", [("t", 0)], cls.planted[0])


def test_a_restore_runs_no_expiry_scan_and_a_marker_request_still_expires(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore's next slice is no deadline: the turns of a restore (slicing once a
    poll) do not scan the marker requests for expiry, O(transactions in flight) each,
    while no real deadline has passed; a marker request still expires at its time."""
    monkeypatch.setattr(transaction_coordinator, "LOAD_SLICE_IDS", 2)
    monkeypatch.setattr(Counted, "scans_restoring", [])
    monkeypatch.setattr(Counted, "slice_polls", [])
    monkeypatch.setattr(Counted, "planted", [])
    loaded = Loaded(manual_node, tmp_path, Counted)
    ids = [f"id-{i}" for i in range(40)]
    for txn_id in ids:
        loaded.init(txn_id)
    Counted.slice_polls.clear()
    Counted.planted.clear()
    loaded.restart()
    polls = Counted.slice_polls
    assert len(polls) >= len(ids) // 2 and len(polls) == len(set(polls)), polls
    assert Counted.scans_restoring == []
    coordinator = manual_node.actors[loaded.name]
    assert -7 in coordinator.marker_reqs
    manual_node.advance_clock(Counted.planted[0] - manual_node.clock.now_ms() - 1)
    assert -7 in coordinator.marker_reqs
    manual_node.advance_clock(1)
    assert -7 not in coordinator.marker_reqs
