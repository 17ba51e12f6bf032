"""Random histories of a cluster's control plane, with the controller's invariants after each step.

Brokers start, die, restart and shut down in a controlled way; topics are created
and deleted; leaders change their ISR through the controller or behind its back;
the controller itself fails over. After every step (and every notice delivered):

* a partition's leader is -1 or a registered broker in its ISR, and then its ISR
  holds registered brokers only; the ISR is never empty and lists assigned
  replicas only;
* a partition's leader epoch and state version never go back, a new leader
  comes with a new leader epoch, and was in the ISR before (unclean election
  is off);
* the active controller's cache is what the store holds;
* a partition is Online in the controller's state machine exactly when its leader
  is registered;
* each node gets a partition's leader epochs in order, and every request is
  answered once (the harness checks that).
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.core.cluster_model import NO_LEADER, LeaderAndIsr, TopicPartition
from actors.core.controller_events import (
    AlterPartitionRequest,
    ControlledShutdownRequest,
    CreateTopics,
    DeleteTopics,
    ElectLeaders,
    IsrProposal,
    NewTopic,
    StopReplicaDone,
)
from actors.core.controller_fsm import PartitionState
from wire.cluster_messages import LeaderAndIsr as LeaderAndIsrRequest
from wire.cluster_messages import StopReplica

from .controller_harness import Candidate, Cluster

BROKERS = range(1, 6)


class ControlPlane(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster(seed=0)
        for b in (1, 2, 3):
            self.cluster.start_broker(b)
        self.candidate_ids = itertools.count(100)
        self.cluster.add_candidate(next(self.candidate_ids))
        self.cluster.add_candidate(next(self.candidate_ids))
        self.topic_names = (f"t{i}" for i in itertools.count())
        self.seen: dict[TopicPartition, LeaderAndIsr] = {}
        self.sent_upto: dict[int, int] = {}
        self.last_epoch: dict[tuple[int, TopicPartition], int] = {}
        self.answered_stops: set[tuple[int, int, TopicPartition]] = set()
        # Written by a leader behind the controller's back, not yet rewritten by the controller.
        self.stale: set[TopicPartition] = set()

    # ---------------------------------------------------------------- helpers
    def running(self) -> list[int]:
        return sorted(self.cluster.brokers)

    def stopped(self) -> list[int]:
        return [b for b in BROKERS if b not in self.cluster.brokers]

    @property
    def controller(self) -> Candidate:
        return self.cluster.controller

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: self.stopped())
    @rule(data=st.data())
    def start_broker(self, data: st.DataObject) -> None:
        self.cluster.start_broker(data.draw(st.sampled_from(self.stopped())))
        self.cluster.pump()

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def stop_broker(self, data: st.DataObject) -> None:
        self.cluster.stop_broker(data.draw(st.sampled_from(self.running())))
        self.cluster.pump()

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def restart_broker(self, data: st.DataObject) -> None:
        self.cluster.bounce_broker(data.draw(st.sampled_from(self.running())))
        self.cluster.pump()

    @rule(partitions=st.integers(1, 3), rf=st.integers(1, 3))
    def create_topic(self, partitions: int, rf: int) -> None:
        name = next(self.topic_names)
        self.cluster.request(lambda rid: CreateTopics(rid, (NewTopic(name, partitions, rf),)))

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def controlled_shutdown(self, data: st.DataObject) -> None:
        broker = data.draw(st.sampled_from(self.running()))
        epoch = self.cluster.epoch_of(broker)
        self.cluster.request(lambda rid: ControlledShutdownRequest(rid, broker, epoch))

    @rule()
    def preferred_election(self) -> None:
        self.cluster.request(lambda rid: ElectLeaders(rid, None))

    @rule(data=st.data())
    def leader_changes_isr(self, data: st.DataObject) -> None:
        """A leader asks the controller to shrink or grow its ISR (KIP-497)."""
        led = [(tp, s) for tp, s in sorted(self.cluster.states().items())
               if s.leader in self.cluster.brokers]
        if not led:
            return
        tp, state = data.draw(st.sampled_from(led))
        replicas = self.cluster.assignment(tp.topic)[tp.partition]
        others = [r for r in replicas if r != state.leader and r in self.cluster.brokers]
        chosen = data.draw(st.lists(st.sampled_from(others), unique=True) if others
                           else st.just([]))
        epoch = self.cluster.epoch_of(state.leader)
        self.cluster.request(lambda rid: AlterPartitionRequest(rid, state.leader, epoch, (
            IsrProposal(tp, state.leader_epoch, (state.leader, *chosen), state.version),)))

    @rule(data=st.data())
    def leader_shrinks_isr_behind_the_controllers_back(self, data: st.DataObject) -> None:
        """The pre-KIP-497 path without its notice: the controller's cache goes stale."""
        shrinkable = [(tp, s) for tp, s in sorted(self.cluster.states().items())
                      if s.leader in self.cluster.brokers and len(s.isr) > 1]
        if not shrinkable:
            return
        tp, state = data.draw(st.sampled_from(shrinkable))
        dropped = data.draw(st.sampled_from([r for r in state.isr if r != state.leader]))
        isr = tuple(r for r in state.isr if r != dropped)
        store = self.cluster.brokers[state.leader]
        store.update_partition_states({tp: LeaderAndIsr(
            state.leader, state.leader_epoch, isr, state.controller_epoch, state.version)}, None)
        self.stale.add(tp)

    @rule(data=st.data())
    def delete_topic(self, data: st.DataObject) -> None:
        topics = sorted(self.cluster.reader.get_topics())
        if topics:
            name = data.draw(st.sampled_from(topics))
            self.cluster.request(lambda rid: DeleteTopics(rid, (name,)))

    @rule()
    def nodes_answer_stop_replica(self) -> None:
        controller = self.controller
        for broker, message in controller.sent:
            if not isinstance(message, StopReplica) or broker not in self.cluster.brokers:
                continue
            deleted = {TopicPartition(r.topic, r.partition): 0
                       for r in message.partitions if r.delete
                       and (broker, message.controller_epoch,
                            TopicPartition(r.topic, r.partition)) not in self.answered_stops}
            if deleted:
                self.answered_stops |= {(broker, message.controller_epoch, tp) for tp in deleted}
                self.cluster.feed(StopReplicaDone(broker, 0, deleted))

    @rule()
    def controller_session_expires(self) -> None:
        old = self.controller
        self.cluster.zk.expire(old.store.session_id or 0)
        self.cluster.candidates.pop(old.broker_id)
        self.cluster.pump()
        self.cluster.add_candidate(next(self.candidate_ids))

    # ------------------------------------------------------------- invariants
    @invariant()
    def partition_states_are_sound(self) -> None:
        registered = set(self.cluster.reader.get_brokers())
        deleting = self.cluster.reader.get_topic_deletions()
        states = {tp: s for tp, s in self.cluster.states().items() if tp.topic not in deleting}
        for tp, state in states.items():
            replicas = self.cluster.assignment(tp.topic)[tp.partition]
            assert state.isr, (tp, state)
            assert len(set(state.isr)) == len(state.isr) and set(state.isr) <= set(replicas)
            if state.leader != NO_LEADER:
                assert state.leader in state.isr, (tp, state)
                assert state.leader in registered, (tp, state, registered)
                # Dead brokers leave the ISR of a led partition.
                assert set(state.isr) <= registered, (tp, state, registered)
            before = self.seen.get(tp)
            if before is not None:
                assert state.leader_epoch >= before.leader_epoch, (tp, before, state)
                assert state.version >= before.version, (tp, before, state)
                if state != before:
                    assert state.version > before.version, (tp, before, state)
                if state.leader != before.leader:
                    assert state.leader_epoch > before.leader_epoch, (tp, before, state)
                if state.leader != before.leader and state.leader != NO_LEADER:
                    assert state.leader in before.isr, f"unclean: {tp} {before} -> {state}"
        self.seen = states

    @invariant()
    def the_controller_knows_what_the_store_holds(self) -> None:
        controller = self.controller
        assert controller.driver.pending_retries == 0
        core = controller.core
        stored = self.cluster.states()
        assert set(core.states) == set(stored)
        for tp, state in stored.items():
            if core.states[tp] == state:
                self.stale.discard(tp)
            else:
                assert tp in self.stale or tp.topic in core.deleting, (tp, core.states[tp], state)
        for tp, state in core.states.items():
            if tp.topic in core.deleting:
                continue
            online = core.partition_fsm.state(tp) is PartitionState.ONLINE
            assert online == (state.leader in core.brokers), (tp, state)

    @invariant()
    def nodes_get_leader_epochs_in_order(self) -> None:
        for candidate in self.cluster.candidates.values():
            start = self.sent_upto.get(candidate.broker_id, 0)
            active = candidate.driver.active
            for broker, message in candidate.sent[start:]:
                assert message.controller_epoch == candidate.core.epoch or not active
                if not isinstance(message, LeaderAndIsrRequest):
                    continue
                for row in message.partitions:
                    key = (broker, TopicPartition(row.topic, row.partition))
                    assert row.leader_epoch >= self.last_epoch.get(key, -1), (key, row)
                    self.last_epoch[key] = row.leader_epoch
            self.sent_upto[candidate.broker_id] = len(candidate.sent)


ControlPlane.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_control_plane = ControlPlane.TestCase
