"""Partition reassignment (KIP-455) in the controller core, on the in-memory store: the
steps of Kafka's onPartitionReassignment, checked in the znodes and the messages sent."""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.cluster_model import ReplicaAssignment, TopicPartition, WriteCode, WriteResult
from actors.core.controller_events import (
    AlterPartitionReassignments,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterReassignmentsResult,
    ControlledShutdownRequest,
    ControlledShutdownResult,
    CreatePartitions,
    CreatePartitionsResult,
    CreateTopics,
    CreateTopicsResult,
    DeleteTopics,
    DeleteTopicsResult,
    IsrProposal,
    ListPartitionReassignments,
    ListReassignmentsResult,
    NewPartitions,
    NewTopic,
    OngoingReassignment,
    ReplicasOffline,
    ReplicasOfflineResult,
    RetryReassignments,
    StopReplicaDone,
)
from actors.metadata import znodes
from actors.metadata.memory import Op
from actors.metadata.store import MetadataUnavailable
from wire.errors import ErrorCode

from .controller_harness import Cluster, leader_and_isr_rows, stop_replica_rows

TP = TopicPartition


def cluster(brokers: tuple[int, ...] = (1, 2, 3)) -> Cluster:
    c = Cluster(seed=7)
    for b in brokers:
        c.start_broker(b)
    c.add_candidate(100)
    return c


def create(c: Cluster, name: str, assignment: dict[int, tuple[int, ...]]) -> None:
    result = c.request(lambda rid: CreateTopics(rid, (NewTopic(name, assignment=assignment),)))
    assert isinstance(result, CreateTopicsResult)
    assert [t.error_code for t in result.topics] == [0]


def reassign(c: Cluster, *moves: tuple[TopicPartition, tuple[int, ...] | None],
             allow_rf_change: bool = True) -> list[int]:
    result = c.request(lambda rid: AlterPartitionReassignments(rid, moves, allow_rf_change))
    assert isinstance(result, AlterReassignmentsResult)
    assert result.error_code == 0
    return [p.error_code for p in result.partitions]


def ongoing(c: Cluster, partitions: tuple[TopicPartition, ...] | None = None
            ) -> tuple[OngoingReassignment, ...]:
    result = c.request(lambda rid: ListPartitionReassignments(rid, partitions))
    assert isinstance(result, ListReassignmentsResult)
    return result.reassignments


def catch_up(c: Cluster, tp: TopicPartition, isr: tuple[int, ...]) -> None:
    """The leader takes the caught-up replicas into the ISR (its AlterPartition). As a
    real leader does, it takes only replicas the last LeaderAndIsr it was sent names (it
    ignores fetches from others, actors/core/partition_state.py)."""
    state = c.state(tp.topic, tp.partition)
    told = [row for candidate in c.candidates.values()
            for b, row in leader_and_isr_rows(candidate)
            if b == state.leader and (row.topic, row.partition) == (tp.topic, tp.partition)]
    assert told, f"leader {state.leader} of {tp} was never sent a LeaderAndIsr"
    unknown = [r for r in isr if r not in told[-1].replicas]
    assert not unknown, (f"leader {state.leader} of {tp} knows replicas {told[-1].replicas}, "
                         f"not {unknown}: it never takes them into the ISR")
    result = c.request(lambda rid: AlterPartitionRequest(rid, state.leader, c.epoch_of(
        state.leader), (IsrProposal(tp, state.leader_epoch, isr, state.version),)))
    assert isinstance(result, AlterPartitionResult)
    assert [p.error_code for p in result.partitions] == [0]



def fail_assignment_writes(monkeypatch: pytest.MonkeyPatch, store: Any, topic: str) -> Any:
    """Every write of ``topic``'s znode fails (an error answer) until the returned real
    method is put back."""
    real = store.set_topic_assignment

    def failing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == topic:
            return WriteResult(WriteCode.ERROR, -1, "injected")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(store, "set_topic_assignment", failing)
    return real

def test_reassign_to_adds_then_completes_once_the_target_is_in_the_isr() -> None:
    """RF 1 on broker 1 -> broker 3: the znode names both with adding/removing, the leader
    epoch goes up and broker 3 is told its role; once it is in the ISR it leads, broker 1
    is deleted and the znode names broker 3 alone."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    before = c.state("t", 0)
    mark = len(c.controller.sent)
    assert reassign(c, (tp, (3,))) == [0]
    znode = c.reader.get_topic_assignments(["t"])["t"]
    assert znode.replica_assignment(0) == ReplicaAssignment((3, 1), (3,), (1,))
    state = c.state("t", 0)
    assert (state.leader, state.isr, state.leader_epoch) == (1, (1,), before.leader_epoch + 1)
    told = {b for b, row in leader_and_isr_rows(c.controller, mark)}
    assert told == {1, 3}
    assert ongoing(c) == (OngoingReassignment(tp, (3, 1), (3,), (1,)),)
    assert stop_replica_rows(c.controller, mark) == []

    mark = len(c.controller.sent)
    catch_up(c, tp, (1, 3))
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (3, (3,))
    assert c.assignment("t") == {0: (3,)}
    znode = c.reader.get_topic_assignments(["t"])["t"]
    assert znode.adding == {} and znode.removing == {}
    assert [(b, r.delete, r.leader_epoch) for b, r in stop_replica_rows(c.controller, mark)] \
        == [(1, True, state.leader_epoch)]  # the partition's epoch: fenced if re-added later
    assert ongoing(c) == ()


def test_raise_replication_factor_keeps_the_leader() -> None:
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (1, 2, 3))) == [0]
    assert ongoing(c)[0].adding == (2, 3)
    catch_up(c, tp, (1, 2))
    assert ongoing(c)[0].adding == (2, 3)  # 3 not caught up yet
    catch_up(c, tp, (1, 2, 3))
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1, 2, 3))
    assert c.assignment("t") == {0: (1, 2, 3)}
    assert ongoing(c) == ()


def test_cancel_reverts_to_the_original_set_and_deletes_the_added_replica() -> None:
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    mark = len(c.controller.sent)
    assert reassign(c, (tp, None)) == [0]
    assert c.assignment("t") == {0: (1,)}
    assert ongoing(c) == ()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1,))
    assert [(b, r.delete) for b, r in stop_replica_rows(c.controller, mark)] == [(3, True)]
    # nothing left to cancel
    assert reassign(c, (tp, None)) == [int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)]


def test_bad_sets_are_refused() -> None:
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    bad = int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    assert reassign(c, (tp, ())) == [bad]
    assert reassign(c, (tp, (2, 2))) == [bad]
    assert reassign(c, (tp, (-1,))) == [bad]
    assert reassign(c, (tp, (9,))) == [bad]  # not a live broker
    shutdown = c.request(lambda rid: ControlledShutdownRequest(rid, 3, c.epoch_of(3)))
    assert isinstance(shutdown, ControlledShutdownResult) and shutdown.error_code == 0
    assert reassign(c, (tp, (3,))) == [bad]  # shutting down: not live (Kafka's liveBrokerIds)
    assert reassign(c, (tp, (2, 3)), allow_rf_change=False) == [
        int(ErrorCode.INVALID_REPLICATION_FACTOR)]  # KIP-860
    assert reassign(c, (TP("t", 5), (2,)), (TP("nope", 0), (2,))) == [
        int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)] * 2
    assert c.assignment("t") == {0: (1,)}
    assert ongoing(c) == ()


def test_a_new_controller_resumes_the_reassignment_from_the_znode() -> None:
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    old = c.controller
    epoch = c.state("t", 0).leader_epoch
    new = c.add_candidate(101)
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert new.driver.active and not old.driver.active
    assert ongoing(c) == (OngoingReassignment(tp, (3, 1), (3,), (1,)),)
    assert c.state("t", 0).leader_epoch > epoch  # A1 again: the leader learns RS anew
    assert 3 in {b for b, _ in leader_and_isr_rows(new)}
    catch_up(c, tp, (1, 3))
    assert c.assignment("t") == {0: (3,)}
    assert c.state("t", 0).leader == 3


def test_a_new_target_replaces_the_move_and_stops_the_replica_no_longer_wanted() -> None:
    """U3: [1] -> [3, 2] replaced by [1] -> [1, 2] while 2 catches up: the original set
    stays [1]; broker 3, added by the first move and in the ISR already, leaves the ISR and
    is deleted; broker 2 is added still."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3, 2))) == [0]
    catch_up(c, tp, (1, 3))  # 2 not yet: still moving
    assert ongoing(c) == (OngoingReassignment(tp, (3, 2, 1), (3, 2), (1,)),)
    mark = len(c.controller.sent)
    assert reassign(c, (tp, (1, 2))) == [0]
    assert ongoing(c) == (OngoingReassignment(tp, (1, 2), (2,), ()),)
    assert [(b, r.delete) for b, r in stop_replica_rows(c.controller, mark)] == [(3, True)]
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1,))
    catch_up(c, tp, (1, 2))
    assert c.assignment("t") == {0: (1, 2)} and ongoing(c) == ()
    assert c.state("t", 0).isr == (1, 2)


def _moved_then_origin_died(c: Cluster) -> TopicPartition:
    """[1] -> [2, 3]; 2 catches up; broker 1 dies: 2 leads an ISR of itself alone, the only
    in-sync copy."""
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (2, 3))) == [0]
    catch_up(c, tp, (1, 2))
    c.stop_broker(1)
    c.pump()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2,))
    return tp


def test_a_cancel_or_new_target_never_deletes_the_only_in_sync_replica() -> None:
    """Cancelling (back to [1], dead) or replacing the target by [4, 5] would drop broker 2,
    the leader and only ISR member, with no replica of the new set live and in the ISR to
    lead: refused (Kafka deletes it); the partition stays led by 2; a target keeping 2 is
    taken, and completes."""
    c = cluster((1, 2, 3, 4, 5))
    tp = _moved_then_origin_died(c)
    mark = len(c.controller.sent)
    busy = int(ErrorCode.REASSIGNMENT_IN_PROGRESS)
    assert reassign(c, (tp, None)) == [busy]
    assert reassign(c, (tp, (4, 5))) == [busy]
    assert stop_replica_rows(c.controller, mark) == []
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2,))
    assert ongoing(c) == (OngoingReassignment(tp, (2, 3, 1), (2, 3), (1,)),)
    assert reassign(c, (tp, (2, 4))) == [0]
    assert [(b, r.delete) for b, r in stop_replica_rows(c.controller, mark)] == [(3, True)]
    catch_up(c, tp, (2, 4))
    assert c.assignment("t") == {0: (2, 4)} and ongoing(c) == ()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2, 4))


def test_a_new_controller_completes_a_move_whose_leader_left_the_replica_set() -> None:
    """A controller wrote U1 of a new target [4, 5] (RS [4, 5, 1]) and died before the ISR
    was cut: broker 2 leads, in the ISR alone, outside RS. The next controller writes 2
    back into RS (adding and removing: in neither the original set nor the target) and
    tells it the set, so 2 can take 4 and 5 into its ISR; then the leadership moves to 4
    and only then is 2 deleted. Until then 2 may be elected again."""
    c = cluster((1, 2, 3, 4, 5))
    tp = _moved_then_origin_died(c)
    old = c.controller
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    path = znodes.topic_path("t")
    node = c.zk.get(path)
    assert node is not None
    before = c.reader.get_topic_assignments(["t"])["t"]
    u1 = before.with_replica_assignment(0, ReplicaAssignment((4, 5, 1), (4, 5), (1,)))
    c.zk.multi(c.reader.session_id or 0, [
        Op("set", path, znodes.encode_topic_assignment(u1), node.version)])
    new = c.add_candidate(101)
    assert new.driver.active
    assert ongoing(c) == (OngoingReassignment(tp, (4, 5, 1, 2), (4, 5, 2), (1, 2)),)
    assert all(b != 2 for b, _ in stop_replica_rows(new))
    assert c.state("t", 0).leader == 2
    c.stop_broker(2)  # the only in-sync copy goes offline, and comes back: 2 leads again
    c.pump()
    assert c.state("t", 0).leader == -1
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0).leader == 2
    mark = len(new.sent)
    catch_up(c, tp, (2, 4))
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2, 4))
    assert stop_replica_rows(new, mark) == []
    c.stop_broker(2)  # 4, in the ISR, takes over
    c.pump()
    assert c.state("t", 0).leader == 4
    c.start_broker(2)
    c.pump()
    catch_up(c, tp, (4, 2))
    catch_up(c, tp, (4, 2, 5))
    assert [(b, r.delete) for b, r in stop_replica_rows(new, mark)] == [(2, True)]
    assert c.assignment("t") == {0: (4, 5)} and ongoing(c) == ()
    assert c.state("t", 0).isr == (4, 5)


def test_the_only_in_sync_replica_of_the_new_set_dying_while_u1_is_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """[1] -> [2, 3] with 2 in the ISR, replaced by [1, 4]: the check passes (1 leads);
    1 dies while U1 is written and 2, outside the new set, is elected. 2 is written back
    into the set (adding and removing), told it, takes 4 into its ISR, and is deleted only
    once the move completes with 1 back."""
    c = cluster((1, 2, 3, 4))
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (2, 3))) == [0]
    catch_up(c, tp, (1, 2))
    ctl = c.controller
    real = ctl.store.set_topic_assignment

    def held_back(*args: Any, **kwargs: Any) -> Any:
        raise MetadataUnavailable("held back by the test")

    monkeypatch.setattr(ctl.store, "set_topic_assignment", held_back)
    before = len(ctl.replies)
    c.feed(AlterPartitionReassignments(999, ((tp, (1, 4)),), True))
    c.stop_broker(1)
    c.pump()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2,))
    monkeypatch.setattr(ctl.store, "set_topic_assignment", real)
    ctl.driver.retry_writes()
    c.pump()
    [(_, result)] = ctl.replies[before:]
    assert isinstance(result, AlterReassignmentsResult)
    assert [p.error_code for p in result.partitions] == [0]
    assert ongoing(c) == (OngoingReassignment(tp, (1, 4, 2), (4, 2), (2,)),)
    mark = len(ctl.sent)
    catch_up(c, tp, (2, 4))
    assert stop_replica_rows(ctl, mark) == []
    c.start_broker(1)
    c.pump()
    catch_up(c, tp, (2, 4, 1))
    assert c.assignment("t") == {0: (1, 4)} and ongoing(c) == ()
    state = c.state("t", 0)
    assert state.leader in (1, 4) and set(state.isr) == {1, 4}
    assert [(b, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(2, True)]


@pytest.mark.parametrize("held", ["state", "znode"])
def test_deleting_the_topic_while_a_move_completes_deletes_every_replica(
        held: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic is deleted while phase B's state write (or its last znode write) waits for
    the store: the deletion stops the removed replica (broker 1) too, and ends once every
    replica has answered."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    ctl = c.controller
    store = ctl.store
    method = "update_partition_states" if held == "state" else "set_topic_assignment"
    real = getattr(store, method)

    def held_back(*args: Any, **kwargs: Any) -> Any:
        if (held == "state" and args[0].get(tp) is not None and args[0][tp].leader == 3) \
                or (held == "znode" and args[0] == "t"):
            raise MetadataUnavailable("held back by the test")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, method, held_back)
    catch_up(c, tp, (1, 3))
    assert ctl.driver.pending_retries == 1
    mark = len(ctl.sent)
    result = c.request(lambda rid: DeleteTopics(rid, ("t",)))
    assert isinstance(result, DeleteTopicsResult)
    monkeypatch.setattr(store, method, real)
    ctl.driver.retry_writes()
    c.pump()
    stopped = sorted({b for b, r in stop_replica_rows(ctl, mark) if r.delete})
    assert stopped == [1, 3]
    for broker in stopped:
        c.feed(StopReplicaDone(broker, 0, {tp: 0}))
    assert c.reader.get_topics() == set()
    assert "t" not in ctl.core.topics


def test_adding_partitions_is_refused_while_a_partition_of_the_topic_moves() -> None:
    """Kafka's ZkAdminManager: REASSIGNMENT_IN_PROGRESS; taken once the move completed."""
    c = cluster()
    create(c, "t", {0: (1,), 1: (2,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]

    def grow() -> int:
        result = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("t", 3),)))
        assert isinstance(result, CreatePartitionsResult)
        return result.topics[0].error_code

    assert grow() == int(ErrorCode.REASSIGNMENT_IN_PROGRESS)
    assert len(c.assignment("t")) == 2
    catch_up(c, tp, (1, 3))
    assert grow() == 0
    assert len(c.assignment("t")) == 3 and c.assignment("t")[0] == (3,)


def test_a_failing_completing_state_write_is_not_tried_again_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase B's state write keeps failing (an error answer, not an unreachable store): it
    is tried again on the RetryReassignments tick only, not after the outcome of each try
    (a loop of writes and logs) nor on other events; the move completes once the write
    goes through."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    store = c.controller.store
    real = store.update_partition_states
    tries: list[int] = []

    def failing(states: dict[TopicPartition, Any], fence: Any) -> Any:
        if tp in states and states[tp].leader == 3:
            tries.append(1)
            assert len(tries) < 10, "the failed write is tried again in a loop"
            return {tp: WriteResult(WriteCode.ERROR, -1, "injected")}
        return real(states, fence)

    monkeypatch.setattr(store, "update_partition_states", failing)
    catch_up(c, tp, (1, 3))
    assert len(tries) == 1
    assert ongoing(c) == (OngoingReassignment(tp, (3, 1), (3,), (1,)),)
    assert len(tries) == 1  # not on a request
    assert c.controller.core.reassign_retry_pending
    c.feed(RetryReassignments())
    assert len(tries) == 2  # tried again on the tick, once
    monkeypatch.setattr(store, "update_partition_states", real)
    c.feed(RetryReassignments())
    assert c.assignment("t") == {0: (3,)} and c.state("t", 0).leader == 3
    assert ongoing(c) == () and not c.controller.core.reassign_retry_pending


def test_a_failing_last_znode_write_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """B6 (the znode's final write) fails: the move stays listed and completes on the
    RetryReassignments tick, with the znode write alone: the answer to B5's StopReplica,
    or a request, starts no new pass, and no pass writes a new leader epoch or sends
    LeaderAndIsr or StopReplica again (it did once, before)."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    store = c.controller.store
    real = store.set_topic_assignment
    tries: list[int] = []

    def failing(topic: str, *args: Any, **kwargs: Any) -> Any:
        if topic == "t":
            tries.append(1)
            assert len(tries) < 10, "the failed write is tried again in a loop"
            return WriteResult(WriteCode.ERROR, -1, "injected")
        return real(topic, *args, **kwargs)

    monkeypatch.setattr(store, "set_topic_assignment", failing)
    catch_up(c, tp, (1, 3))
    assert len(tries) == 1
    state = c.state("t", 0)
    assert state.leader == 3
    ctl = c.controller
    mark = len(ctl.sent)
    c.feed(StopReplicaDone(1, 0, {tp: 0}))  # broker 1 deleted its replica (B5)
    assert ongoing(c) == (OngoingReassignment(tp, (3, 1), (3,), (1,)),)
    assert len(tries) == 1
    c.feed(RetryReassignments())
    assert len(tries) == 2
    monkeypatch.setattr(store, "set_topic_assignment", real)
    c.feed(RetryReassignments())
    assert c.assignment("t") == {0: (3,)} and ongoing(c) == ()
    assert c.state("t", 0) == state  # no new leader epoch
    assert leader_and_isr_rows(ctl, mark) == [] and stop_replica_rows(ctl, mark) == []


def test_a_failing_phase_a_write_is_tried_again_on_the_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase A's new leader epoch fails to be written after U1: tried again on the
    RetryReassignments tick (else the leader, never told the added replica at a new epoch,
    would not take it into the ISR and the move would stall)."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    store = c.controller.store
    real = store.update_partition_states
    tries: list[int] = []

    def failing(states: dict[TopicPartition, Any], fence: Any) -> Any:
        if tp in states:
            tries.append(1)
            return {tp: WriteResult(WriteCode.ERROR, -1, "injected")}
        return real(states, fence)

    monkeypatch.setattr(store, "update_partition_states", failing)
    epoch = c.state("t", 0).leader_epoch
    assert reassign(c, (tp, (1, 3))) == [0]
    assert len(tries) == 1 and c.state("t", 0).leader_epoch == epoch
    assert ongoing(c) == (OngoingReassignment(tp, (1, 3), (3,), ()),)
    assert len(tries) == 1
    monkeypatch.setattr(store, "update_partition_states", real)
    ctl, term = c.controller, c.controller.core.epoch
    c.feed(RetryReassignments())
    assert c.state("t", 0).leader_epoch == epoch + 1
    assert c.controller is ctl and ctl.core.epoch == term  # not a new controller's resume
    catch_up(c, tp, (1, 3))
    assert c.assignment("t") == {0: (1, 3)} and ongoing(c) == ()


def test_a_removed_replica_on_a_dead_broker_is_deleted_when_it_registers_again() -> None:
    """[2, 1] -> [2, 3] while broker 1 (its storage failed first) is down: the move
    completes without it; once broker 1 registers again it is told StopReplica(delete) for
    the partition, and its failure is forgotten with the replica."""
    c = cluster()
    create(c, "t", {0: (2, 1)})
    tp = TP("t", 0)
    result = c.request(lambda rid: ReplicasOffline(rid, 1, c.epoch_of(1), (tp,)))
    assert isinstance(result, ReplicasOfflineResult)
    ctl = c.controller
    assert 1 in ctl.core.failed_replicas.get(tp, {})
    c.stop_broker(1)
    c.pump()
    assert reassign(c, (tp, (2, 3))) == [0]
    mark = len(ctl.sent)
    catch_up(c, tp, (2, 3))
    assert c.assignment("t") == {0: (2, 3)} and ongoing(c) == ()
    assert stop_replica_rows(ctl, mark) == []
    mark = len(ctl.sent)
    c.start_broker(1)
    c.pump()
    assert [(b, r.topic, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(1, "t", True)]
    assert tp not in ctl.core.failed_replicas
    assert (tp, 1) not in ctl.core.replica_fsm.snapshot()
    mark = len(ctl.sent)
    c.bounce_broker(1)
    c.pump()
    assert stop_replica_rows(ctl, mark) == []  # said once


def test_deleting_the_topic_deletes_a_removed_replica_waiting_on_a_dead_broker() -> None:
    """[2, 1] -> [2, 3] completes while broker 1 is down (its replica waits to be deleted);
    the topic is deleted meanwhile: broker 1, registering again, is still told
    StopReplica(delete) (the topic's deletion names only the znode's set)."""
    c = cluster()
    create(c, "t", {0: (2, 1)})
    tp = TP("t", 0)
    c.stop_broker(1)
    c.pump()
    assert reassign(c, (tp, (2, 3))) == [0]
    catch_up(c, tp, (2, 3))
    assert c.assignment("t") == {0: (2, 3)} and ongoing(c) == ()
    ctl = c.controller
    result = c.request(lambda rid: DeleteTopics(rid, ("t",)))
    assert isinstance(result, DeleteTopicsResult)
    for broker in (2, 3):
        c.feed(StopReplicaDone(broker, 0, {tp: 0}))
    assert c.reader.get_topics() == set()
    mark = len(ctl.sent)
    c.start_broker(1)
    c.pump()
    assert [(b, r.topic, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(1, "t", True)]


def test_deleting_the_topic_deletes_a_removed_replica_still_in_the_isr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """[1] -> [3, 2] with 3 in the ISR, replaced by [1, 2] whose new leader epoch fails to
    be written: 3, out of the set, stays in the ISR (waiting to be taken out, not deleted).
    The topic is deleted: 3 is deleted too, not only the znode's set."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3, 2))) == [0]
    catch_up(c, tp, (1, 3))
    store = c.controller.store
    real = store.update_partition_states

    def failing(states: dict[TopicPartition, Any], fence: Any) -> Any:
        if tp in states:
            return {tp: WriteResult(WriteCode.ERROR, -1, "injected")}
        return real(states, fence)

    monkeypatch.setattr(store, "update_partition_states", failing)
    assert reassign(c, (tp, (1, 2))) == [0]
    assert c.state("t", 0).isr == (1, 3) and c.assignment("t") == {0: (1, 2)}
    monkeypatch.setattr(store, "update_partition_states", real)
    ctl = c.controller
    mark = len(ctl.sent)
    result = c.request(lambda rid: DeleteTopics(rid, ("t",)))
    assert isinstance(result, DeleteTopicsResult)
    assert sorted(b for b, r in stop_replica_rows(ctl, mark) if r.delete) == [1, 2, 3]


def test_a_replica_waiting_for_deletion_and_assigned_again_is_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader a failed-over move left outside the replica set (waiting to be deleted
    once out of the ISR) is named again by a new target: it is no longer waited on (no
    state written again and again to take it out), never deleted, and the move completes."""
    c = cluster((1, 2, 3, 4, 5))
    tp = _moved_then_origin_died(c)
    c.zk.expire(c.controller.store.session_id or 0)
    c.pump()
    path = znodes.topic_path("t")
    node = c.zk.get(path)
    assert node is not None
    u1 = c.reader.get_topic_assignments(["t"])["t"].with_replica_assignment(
        0, ReplicaAssignment((4, 5, 1), (4, 5), (1,)))
    c.zk.multi(c.reader.session_id or 0, [
        Op("set", path, znodes.encode_topic_assignment(u1), node.version)])
    new = c.add_candidate(101)
    writes: list[int] = []
    real = new.store.update_partition_states

    def counted(states: dict[TopicPartition, Any], fence: Any) -> Any:
        writes.append(1)
        assert len(writes) < 20, "state written again and again"
        return real(states, fence)

    monkeypatch.setattr(new.store, "update_partition_states", counted)
    assert reassign(c, (tp, (2, 4))) == [0]
    catch_up(c, tp, (2, 4))
    assert c.assignment("t") == {0: (2, 4)} and ongoing(c) == ()
    assert all(b != 2 for b, _ in stop_replica_rows(new))
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2, 4))


def _cancel_with_a_failing_phase_b(c: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """[1, 2] -> [3, 4]; 3 catches up (ISR [1, 2, 3]); the move is cancelled and phase B's
    state write (the ISR cut back to [1, 2]) fails."""
    create(c, "t", {0: (1, 2)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3, 4))) == [0]
    catch_up(c, tp, (1, 2, 3))
    store = c.controller.store
    real = store.update_partition_states
    tries: list[int] = []

    def failing(states: dict[TopicPartition, Any], fence: Any) -> Any:
        if tp in states and 3 not in states[tp].isr:
            tries.append(1)
            return {tp: WriteResult(WriteCode.ERROR, -1, "injected")}
        return real(states, fence)

    monkeypatch.setattr(store, "update_partition_states", failing)
    assert reassign(c, (tp, None)) == [0]
    assert tries == [1]
    monkeypatch.setattr(store, "update_partition_states", real)
    assert c.state("t", 0).isr == (1, 2, 3)
    # the znode still shows 3 leaving: a cancel keeps the in-sync replica it drops
    assert ongoing(c) == (OngoingReassignment(tp, (1, 2, 3), (3,), (3,)),)


def test_a_cancel_dropping_an_in_sync_replica_completes_after_a_failover(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cancel's phase B never wrote the ISR cut, and the controller fails over: the
    next one finds the move in the znode, cuts 3 out of the ISR and deletes it (before,
    the znode named no move: 3 stayed in the ISR for good, outside the replica set)."""
    c = cluster((1, 2, 3, 4))
    _cancel_with_a_failing_phase_b(c, monkeypatch)
    old = c.controller
    new = c.add_candidate(101)
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert new.driver.active
    assert c.assignment("t") == {0: (1, 2)} and ongoing(c) == ()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1, 2))
    assert (3, True) in [(b, r.delete) for b, r in stop_replica_rows(new)]


def test_a_cancel_whose_phase_b_write_failed_is_tried_again_on_the_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cancel's failed phase-B state write is tried again on the RetryReassignments
    tick: 3 leaves the ISR and is deleted; 4 (never in the ISR) was deleted at once."""
    c = cluster((1, 2, 3, 4))
    ctl = c.controller
    mark = len(ctl.sent)
    _cancel_with_a_failing_phase_b(c, monkeypatch)
    assert [(b, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(4, True)]
    assert ctl.core.reassign_retry_pending
    c.feed(RetryReassignments())
    assert c.assignment("t") == {0: (1, 2)} and ongoing(c) == ()
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1, 2))
    assert [(b, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(4, True), (3, True)]


def test_a_removed_replica_on_a_dead_broker_is_deleted_after_a_failed_last_znode_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """[2, 1] -> [2, 3] while broker 1 is down: B5 leaves 1 waiting for its broker; B6
    fails, so the znode names 1 again. Broker 1 registering meanwhile is told to follow;
    once B6 succeeds on the tick (the znode write alone) 1 is deleted still (before, the
    wait was dropped as if a later move had assigned 1 again: never deleted)."""
    c = cluster()
    create(c, "t", {0: (2, 1)})
    tp = TP("t", 0)
    ctl = c.controller
    c.stop_broker(1)
    c.pump()
    assert reassign(c, (tp, (2, 3))) == [0]
    store = ctl.store
    real = fail_assignment_writes(monkeypatch, store, "t")
    catch_up(c, tp, (2, 3))
    assert ongoing(c) == (OngoingReassignment(tp, (2, 3, 1), (3,), (1,)),)
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (2, (2, 3))
    c.start_broker(1)
    c.pump()
    mark = len(ctl.sent)
    monkeypatch.setattr(store, "set_topic_assignment", real)
    c.feed(RetryReassignments())
    assert c.assignment("t") == {0: (2, 3)} and ongoing(c) == ()
    assert c.state("t", 0) == state
    assert [(b, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(1, True)]
    assert tp not in ctl.core._removed_pending


def test_a_znode_written_by_another_is_taken_and_the_step_tried_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """B6 conflicts with a znode another writer changed (partition 1's replicas): the
    cache takes the znode as it is, so the retry on the tick writes at its version and
    the move completes (before, every retry conflicted again, for ever)."""
    c = cluster()
    create(c, "t", {0: (1,), 1: (2,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    store = c.controller.store
    real = store.set_topic_assignment
    path = znodes.topic_path("t")

    def other_writer_first(topic: str, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, "set_topic_assignment", real)
        node = c.zk.get(path)
        assert node is not None
        now = c.reader.get_topic_assignments(["t"])["t"]
        c.zk.multi(c.reader.session_id or 0, [Op("set", path, znodes.encode_topic_assignment(
            now.with_replica_assignment(1, ReplicaAssignment((2, 1)))), node.version)])
        return real(topic, *args, **kwargs)

    monkeypatch.setattr(store, "set_topic_assignment", other_writer_first)
    catch_up(c, tp, (1, 3))
    assert ongoing(c) == (OngoingReassignment(tp, (3, 1), (3,), (1,)),)
    assert c.controller.core.reassign_retry_pending
    c.feed(RetryReassignments())
    assert c.assignment("t") == {0: (3,), 1: (2, 1)} and ongoing(c) == ()
    c.feed(RetryReassignments())
    assert not c.controller.core.reassign_retry_pending


def test_a_deleted_partition_leaves_no_reassignment_memory_for_a_namesake(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A move whose last znode write failed (its completed state remembered for the retry)
    and whose topic is then deleted: the deletion takes that memory too, so a namesake's
    move does not find a step of the old one written (it would skip its own ISR cut)."""
    c = cluster()
    create(c, "t", {0: (1,)})
    tp = TP("t", 0)
    assert reassign(c, (tp, (3,))) == [0]
    store = c.controller.store
    real = fail_assignment_writes(monkeypatch, store, "t")
    catch_up(c, tp, (1, 3))
    core = c.controller.core
    assert tp in core._reassign_state_written and tp in core._reassign_failed
    monkeypatch.setattr(store, "set_topic_assignment", real)
    result = c.request(lambda rid: DeleteTopics(rid, ("t",)))
    assert isinstance(result, DeleteTopicsResult)
    for broker in (1, 3):
        c.feed(StopReplicaDone(broker, 0, {tp: 0}))
    assert "t" not in core.topics
    assert tp not in core._reassign_state_written and tp not in core._reassign_failed
    assert tp not in core._reassign_parked and tp not in core._completing
