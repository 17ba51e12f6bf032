"""The controller core, driven as the Controller actor will drive it, on the in-memory store."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from actors.core.cluster_model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
)
from actors.core.controller_events import (
    AlterPartitionRequest,
    AlterPartitionResult,
    AutoLeaderRebalance,
    ControlledShutdownRequest,
    ControlledShutdownResult,
    CreatePartitions,
    CreatePartitionsResult,
    CreateTopics,
    CreateTopicsResult,
    CreateTopicZnodes,
    DeleteTopics,
    DeleteTopicsResult,
    ElectionType,
    ElectLeaders,
    ElectLeadersResult,
    IsrProposal,
    MetadataWriteFailed,
    NewPartitions,
    NewTopic,
    ReplicasOffline,
    ReplicasOfflineResult,
    StopReplicaDone,
    TopicConfigsChanged,
    TopicIdsConfirmed,
)
from actors.core.controller_fsm import PartitionState, ReplicaState
from actors.core.topic_id import is_topic_id
from actors.metadata import znodes
from actors.metadata.memory import Op
from wire.cluster_messages import LeaderAndIsr as LeaderAndIsrRequest
from wire.errors import ErrorCode

from .controller_harness import (
    Cluster,
    leader_and_isr_rows,
    sent_of,
    stop_replica_rows,
    update_metadata,
)

TP = TopicPartition


def cluster(brokers: tuple[int, ...] = (1, 2, 3), **config: object) -> Cluster:
    c = Cluster(seed=7, **config)
    for b in brokers:
        c.start_broker(b)
    c.add_candidate(100)
    return c


def create(c: Cluster, name: str, partitions: int = 1, rf: int = 3,
           assignment: dict[int, tuple[int, ...]] | None = None,
           configs: dict[str, str] | None = None) -> CreateTopicsResult:
    topic = (NewTopic(name, assignment=assignment, configs=configs or {}) if assignment
             else NewTopic(name, partitions, rf, configs=configs or {}))
    result = c.request(lambda rid: CreateTopics(rid, (topic,)))
    assert isinstance(result, CreateTopicsResult)
    return result


def codes(result: Any) -> list[int]:
    parts = result.topics if hasattr(result, "topics") else result.partitions
    return [p.error_code for p in parts]


# ------------------------------------------------------------------- standby
def test_a_standby_refuses_requests_with_not_controller() -> None:
    c = Cluster()
    c.start_broker(1)
    c.add_candidate(100)
    standby = c.add_candidate(101)
    assert not standby.driver.active
    standby.driver.feed(CreateTopics("r", (NewTopic("t", 1, 1),)))
    standby.driver.feed(ControlledShutdownRequest("s", 1, c.epoch_of(1)))
    [(_, topics), (_, shutdown)] = standby.replies
    assert isinstance(topics, CreateTopicsResult)
    assert topics.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert topics.topics[0].message == "broker 101 is not the controller"
    assert isinstance(shutdown, ControlledShutdownResult)
    assert shutdown.error_code == ErrorCode.NOT_CONTROLLER
    assert c.reader.get_topics() == set()


# ------------------------------------------------------------------ creation
def test_becoming_controller_tells_every_broker_everything() -> None:
    c = cluster()
    ctl = c.controller
    assert ctl.core.epoch == 1
    first = update_metadata(ctl)
    assert sorted(b for b, _ in first) == [1, 2, 3]
    for _, msg in first:
        assert msg.full and msg.controller_id == 100 and msg.controller_epoch == 1
        assert [row.broker_id for row in msg.brokers] == [1, 2, 3]
        assert msg.brokers[0].gateway == "tcp://127.0.0.1:19001"
    assert {b: m.broker_epoch for b, m in first} == {b: c.epoch_of(b) for b in (1, 2, 3)}


def test_create_topics_spreads_leaders_and_tells_the_replicas() -> None:
    c = cluster()
    ctl = c.controller
    mark = len(ctl.sent)
    result = create(c, "orders", partitions=6, rf=3)
    assert result.topics[0].error_code == 0
    assert (result.topics[0].num_partitions, result.topics[0].replication_factor) == (6, 3)
    states = c.states()
    assert Counter(s.leader for s in states.values()) == {1: 2, 2: 2, 3: 2}
    for tp, state in states.items():
        replicas = c.assignment("orders")[tp.partition]
        assert state == LeaderAndIsr(replicas[0], 0, replicas, 1, 0)
    rows = leader_and_isr_rows(ctl, mark)
    assert sorted(b for b, _ in rows) == [1] * 6 + [2] * 6 + [3] * 6
    assert all(row.is_new and row.controller_epoch == 1 and row.partition_epoch == 0
               for _, row in rows)
    for _, msg in sent_of(ctl, LeaderAndIsrRequest, mark):
        assert msg.controller_epoch == 1
        assert {(lr.broker_id, lr.gateway) for lr in msg.live_leaders} <= {
            (b, f"tcp://127.0.0.1:{19000 + b}") for b in (1, 2, 3)}
    deltas = [m for _, m in update_metadata(ctl, mark)]
    assert deltas and all(not m.full and len(m.partitions) == 6 for m in deltas)
    assert all(ctl.core.partition_fsm.state(tp) is PartitionState.ONLINE for tp in states)
    assert all(ctl.core.replica_fsm.state((tp, r)) is ReplicaState.ONLINE
               for tp in states for r in c.assignment("orders")[tp.partition])


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (NewTopic("big", 1, 4), ErrorCode.INVALID_REPLICATION_FACTOR,
         "replication factor: 4 larger than available brokers: 3"),
        (NewTopic("bad/name", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION,
         "topic name 'bad/name' is illegal: only ASCII letters, digits, '.', '_' and '-'"),
        (NewTopic("zero", 0, 1), ErrorCode.INVALID_PARTITIONS,
         "number of partitions must be larger than 0"),
        (NewTopic("conf", 1, 1, configs={"nope": "1"}), ErrorCode.INVALID_CONFIG,
         "unknown topic config 'nope'"),
        (NewTopic("manual", assignment={0: (1, 7)}), ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "partition 0 is assigned to broker(s) [7], not registered (registered: [1, 2, 3])"),
        (NewTopic("manual", assignment=((0, (1, 2)), (0, (2, 3)))),
         ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partition 0 is assigned more than once"),
        (NewTopic("manual", 1, assignment={0: (1, 2)}), ErrorCode.INVALID_REQUEST,
         "both a replica assignment and a partition count or replication factor were given"),
        (NewTopic("manual", -1, 2, assignment={0: (1, 2)}), ErrorCode.INVALID_REQUEST,
         "both a replica assignment and a partition count or replication factor were given"),
    ],
)
def test_create_topics_refuses_with_kafkas_codes(topic: NewTopic, code: ErrorCode,
                                                 message: str) -> None:
    c = cluster()
    result = c.request(lambda rid: CreateTopics(rid, (topic,)))
    assert isinstance(result, CreateTopicsResult)
    assert (result.topics[0].error_code, result.topics[0].message) == (code, message)
    assert c.reader.get_topics() == set()


def test_existing_topics_validate_only_and_defaults() -> None:
    c = cluster(num_partitions=4, default_replication_factor=2)
    assert codes(create(c, "t", 1, 1)) == [0]
    again = create(c, "t", 1, 1)
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    checked = c.request(lambda rid: CreateTopics(rid, (NewTopic("v", -1, -1),), True))
    assert isinstance(checked, CreateTopicsResult)
    assert (checked.topics[0].num_partitions, checked.topics[0].replication_factor) == (4, 2)
    assert c.reader.get_topics() == {"t"}
    twice = c.request(lambda rid: CreateTopics(rid, (
        NewTopic("w"), NewTopic("u", -1, -1), NewTopic("w"))))
    assert isinstance(twice, CreateTopicsResult)
    assert [(t.name, t.error_code) for t in twice.topics] == [
        ("w", ErrorCode.INVALID_REQUEST), ("u", 0)]
    assert len(c.assignment("u")) == 4 and all(len(r) == 2 for r in c.assignment("u").values())
    assert c.reader.get_topics() == {"t", "u"}


# -------------------------------------------------------------- broker loss
def test_a_dead_brokers_leaderships_move_to_the_first_live_isr_member() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 2, 1)})
    ctl = c.controller
    mark = len(ctl.sent)
    c.stop_broker(1)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    assert c.state("t", 1) == LeaderAndIsr(2, 1, (2, 3), 1, 1)  # a follower died: ISR shrinks
    assert c.state("t", 2) == LeaderAndIsr(3, 1, (3, 2), 1, 1)
    rows = leader_and_isr_rows(ctl, mark)
    assert {(b, r.partition) for b, r in rows} == {(2, 0), (3, 0), (2, 1), (3, 1), (2, 2),
                                                   (3, 2)}
    assert all(r.leader_epoch == 1 and r.partition_epoch == 1 for _, r in rows)
    first = update_metadata(ctl, mark)[0][1]
    assert [b.broker_id for b in first.brokers] == [2, 3]
    last = update_metadata(ctl, mark)[-1][1]
    assert {(p.partition, tuple(p.offline_replicas)) for p in last.partitions} == {
        (0, (1,)), (1, (1,)), (2, (1,))}
    assert ctl.core.replica_fsm.state((TP("t", 0), 1)) is ReplicaState.OFFLINE


def test_no_live_isr_member_leaves_the_partition_offline_until_one_returns() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2)})
    c.stop_broker(2)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(1, 1, (1,), 1, 1)
    c.stop_broker(1)
    c.pump()
    # Broker 2 is back but was not in sync: without unclean election nobody leads.
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(NO_LEADER, 2, (1,), 1, 2)
    assert c.controller.core.partition_fsm.state(TP("t", 0)) is PartitionState.OFFLINE
    c.start_broker(1)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(1, 3, (1,), 1, 3)
    assert c.controller.core.partition_fsm.state(TP("t", 0)) is PartitionState.ONLINE


def test_brokers_dying_together_keep_the_isr() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    c.stop_broker(1)
    c.stop_broker(2)
    c.stop_broker(3)
    c.pump()
    assert c.state("t", 0).leader == NO_LEADER
    assert c.state("t", 0).isr  # never empty
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0).leader == 2  # it was in sync when it died


def test_an_unclean_elect_leaders_picks_a_replica_outside_the_isr() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2)})
    c.stop_broker(2)
    c.pump()
    c.stop_broker(1)
    c.pump()
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0).leader == NO_LEADER
    result = c.request(lambda rid: ElectLeaders(rid, (TP("t", 0),), ElectionType.UNCLEAN))
    assert isinstance(result, ElectLeadersResult)
    assert result.partitions[0].error_code == 0
    assert c.state("t", 0) == LeaderAndIsr(2, 3, (2,), 1, 3)


def test_a_topic_created_elsewhere_with_unclean_election_enabled() -> None:
    """Any node may write a topic to the store (Kafka's admin path); the controller finds it
    through its watch, elects its leaders, and honours its unclean.leader.election.enable."""
    c = cluster()
    c.brokers[3].create_topic("x", TopicAssignment({0: (1, 2)}),
                              {"unclean.leader.election.enable": "true"})
    c.pump()
    assert c.state("x", 0) == LeaderAndIsr(1, 0, (1, 2), 1, 0)
    c.stop_broker(2)
    c.pump()
    c.stop_broker(1)
    c.pump()
    c.start_broker(2)
    c.pump()
    assert c.state("x", 0) == LeaderAndIsr(2, 3, (2,), 1, 3)


def test_unclean_election_enabled_by_config() -> None:
    c = cluster(unclean_leader_election_enable=True)
    create(c, "t", assignment={0: (1, 2)})
    c.stop_broker(2)
    c.pump()
    c.stop_broker(1)
    c.pump()
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(2, 3, (2,), 1, 3)


def test_a_restarted_leader_loses_its_place_and_is_told_its_new_role() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    create(c, "solo", assignment={0: (1,)})
    ctl = c.controller
    old_epoch = c.epoch_of(1)
    mark = len(ctl.sent)
    new_epoch = c.bounce_broker(1)
    c.pump()
    assert new_epoch > old_epoch
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    # Its sole replica: it leads again, at a new leader epoch.
    assert c.state("solo", 0) == LeaderAndIsr(1, 1, (1,), 1, 1)
    to_one = [m for b, m in sent_of(ctl, LeaderAndIsrRequest, mark) if b == 1]
    assert to_one and all(m.broker_epoch == new_epoch for m in to_one)
    rows = {r.topic: r for b, r in leader_and_isr_rows(ctl, mark) if b == 1}
    assert rows["t"].leader == 2 and rows["solo"].leader == 1 and rows["solo"].leader_epoch == 1
    full = [m for b, m in update_metadata(ctl, mark) if b == 1 and m.full]
    assert full, "a restarted broker gets the whole metadata"


# ---------------------------------------------------- returning, preferred
def test_a_returning_broker_follows_and_preferred_election_restores_it() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    ctl = c.controller
    c.stop_broker(1)
    c.pump()
    mark = len(ctl.sent)
    c.start_broker(1)
    c.pump()
    assert c.state("t", 0).leader == 2
    [row] = [r for b, r in leader_and_isr_rows(ctl, mark) if b == 1]
    assert row.leader == 2 and not row.is_new
    # Not in the ISR yet: the preferred replica cannot take over.
    result = c.request(lambda rid: ElectLeaders(rid, (TP("t", 0),)))
    assert isinstance(result, ElectLeadersResult)
    assert result.partitions[0].error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # The leader lets it back in (KIP-497); now it can.
    state = c.state("t", 0)
    alter = c.request(lambda rid: AlterPartitionRequest(rid, 2, c.epoch_of(2), (
        IsrProposal(TP("t", 0), state.leader_epoch, (2, 3, 1), state.version),)))
    assert codes(alter) == [0]
    result = c.request(lambda rid: ElectLeaders(rid, None))
    assert isinstance(result, ElectLeadersResult)
    assert [(p.partition, p.error_code) for p in result.partitions] == [(TP("t", 0), 0)]
    assert c.state("t", 0).leader == 1
    again = c.request(lambda rid: ElectLeaders(rid, (TP("t", 0), TP("nope", 0))))
    assert codes(again) == [ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_auto_rebalance_moves_leaderships_back_past_the_imbalance_limit() -> None:
    c = cluster(leader_imbalance_per_broker_percentage=10)
    create(c, "t", assignment={p: (1, 2) for p in range(4)})
    c.stop_broker(1)
    c.pump()
    c.start_broker(1)
    c.pump()
    for p in range(4):  # the leader takes 1 back into each ISR
        s = c.state("t", p)
        c.request(lambda rid, s=s, p=p: AlterPartitionRequest(
            rid, 2, c.epoch_of(2), (IsrProposal(TP("t", p), s.leader_epoch, (2, 1), s.version),)))
    assert {c.state("t", p).leader for p in range(4)} == {2}
    c.feed(AutoLeaderRebalance())
    assert {c.state("t", p).leader for p in range(4)} == {1}


# ------------------------------------------------------- controlled shutdown
def test_controlled_shutdown_moves_leaderships_and_drops_the_broker_from_isrs() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3), 1: (2, 1, 3)})
    create(c, "solo", assignment={0: (1,)})
    ctl = c.controller
    mark = len(ctl.sent)
    result = c.request(lambda rid: ControlledShutdownRequest(rid, 1, c.epoch_of(1)))
    assert result == ControlledShutdownResult(0, None, ())  # one replica: nothing to move to
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    assert c.state("t", 1) == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    assert c.state("solo", 0) == LeaderAndIsr(1, 0, (1,), 1, 0)
    assert [(b, r.partition, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [(1, 1, False)]
    # The stopping broker is not told to follow again; the others learn the new leaders.
    assert {b for b, _ in leader_and_isr_rows(ctl, mark)} == {2, 3}
    # A manual assignment may name it, not only it (KRaft's rule), and it does not lead
    refused = create(c, "to-stopping", assignment={0: (1,)})
    assert (refused.topics[0].error_code, refused.topics[0].message) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "every broker assigned partition 0 ([1]) is shutting down")
    assert codes(create(c, "with-stopping", assignment={0: (1, 3)})) == [0]
    assert c.state("with-stopping", 0).leader == 3
    assert c.state("with-stopping", 0).isr == (3,)
    # CreatePartitions likewise: a new partition may name it beside an active broker (that
    # one leads, the ISR leaves it out, it is told nothing), not alone
    mark = len(ctl.sent)
    grown = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("with-stopping", 2,
                                                                       ((1, 3),)),)))
    assert codes(grown) == [0]
    assert (c.state("with-stopping", 1).leader, c.state("with-stopping", 1).isr) == (3, (3,))
    assert 1 not in {b for b, _ in leader_and_isr_rows(ctl, mark)}
    assert codes(create(c, "one-replica", assignment={0: (3,)})) == [0]
    alone = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("one-replica", 2,
                                                                       ((1,),)),)))
    assert codes(alone) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert isinstance(alone, CreatePartitionsResult)
    assert "shutting down" in str(alone.topics[0].message)
    # It may not be elected while it shuts down.
    c.stop_broker(2)
    c.pump()
    assert c.state("t", 0).leader == 3


def test_controlled_shutdown_reports_what_it_could_not_move() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2)})
    c.stop_broker(2)
    c.pump()
    result = c.request(lambda rid: ControlledShutdownRequest(rid, 1, c.epoch_of(1)))
    assert result == ControlledShutdownResult(0, None, (TP("t", 0),))
    stale = c.request(lambda rid: ControlledShutdownRequest(rid, 1, c.epoch_of(1) - 1))
    assert isinstance(stale, ControlledShutdownResult)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    gone = c.request(lambda rid: ControlledShutdownRequest(rid, 2, 0))
    assert isinstance(gone, ControlledShutdownResult)
    assert gone.error_code == ErrorCode.BROKER_NOT_AVAILABLE


# ------------------------------------------------------------ offline replicas
def test_a_leader_whose_storage_failed_is_replaced_by_the_next_isr_member() -> None:
    """Kafka's log dir event: a leader's replica goes offline, so the first other ISR
    member leads at leader epoch + 1 (a follower of the old leader epoch never truncates to
    the broken log), the broker leaves the ISR and is told its new role (a follower)."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    ctl = c.controller
    mark = len(ctl.sent)
    result = c.request(lambda rid: ReplicasOffline(rid, 1, c.epoch_of(1), (tp,)))
    assert isinstance(result, ReplicasOfflineResult) and result.error_code == ErrorCode.NONE
    assert codes(result) == [ErrorCode.NONE]
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    assert result.partitions[0].state == LeaderAndIsr(2, 1, (2, 3), 1, 1)
    # every replica learns the new leader, the failed one too (it follows, out of the ISR)
    rows = leader_and_isr_rows(ctl, mark)
    assert {b for b, _ in rows} == {1, 2, 3}
    assert {(r.leader, r.leader_epoch, tuple(r.isr)) for _, r in rows} == {(2, 1, (2, 3))}
    # told its role, the replica is online again (its log reopened: it follows)
    assert ctl.core.replica_fsm.state((tp, 1)) is ReplicaState.ONLINE


def test_a_follower_whose_storage_failed_leaves_the_isr() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3), 1: (2, 3, 1)})
    result = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3),
                                                   (TP("t", 0), TP("t", 1))))
    assert codes(result) == [ErrorCode.NONE, ErrorCode.NONE]
    assert c.state("t", 0) == LeaderAndIsr(1, 1, (1, 2), 1, 1)
    assert c.state("t", 1) == LeaderAndIsr(2, 1, (2, 1), 1, 1)
    # reported again (the first answer lost, or sent again by its node): out of the ISR
    # already, nothing is written (a write each time would bump a healthy leader's epoch
    # and reset its followers, at every report); the replica is sent its current role
    # again, out of the ISR, which its shard takes
    ctl = c.controller
    for _ in range(3):
        mark = len(ctl.sent)
        again = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (TP("t", 0),)))
        assert codes(again) == [ErrorCode.NONE]
        assert c.state("t", 0) == LeaderAndIsr(1, 1, (1, 2), 1, 1)
        assert {(b, r.leader_epoch, tuple(r.isr))
                for b, r in leader_and_isr_rows(ctl, mark)} == {(3, 1, (1, 2))}


def test_a_failed_leader_alone_in_its_isr_leads_on_at_a_new_leader_epoch() -> None:
    """Nobody else has every acknowledged record: it leads on, at a new leader epoch and
    an ISR of itself (the replica it answers for takes that role, and serves again)."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(TP("t", 0), 0, (1,), 0),)))
    assert c.state("t", 0).isr == (1,)
    result = c.request(lambda rid: ReplicasOffline(rid, 1, c.epoch_of(1), (TP("t", 0),),
                                                   frozenset({TP("t", 0)})))
    assert codes(result) == [ErrorCode.NONE]
    assert c.state("t", 0) == LeaderAndIsr(1, 1, (1,), 1, 2)
    assert not c.controller.core.failed_replicas


def test_a_failed_follower_elected_alone_before_its_report_is_never_elected_again() -> None:
    """ISR [1, 3]; 3's storage fails as a follower, and leader 1 goes before 3's report is
    handled: the controller, not knowing, elects 3 with an ISR of itself. The report
    (3 did not lead alone at the failure) takes the partition offline with 3 as the ISR's
    last member, and 3 is never elected while known failed: not when 1 comes back (out
    of the ISR, it waits for an unclean election), not when 3 restarts. Led on (the
    earlier behaviour), 1 would follow 3 and truncate the records only it had."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 3), 0),)))
    c.stop_broker(1)
    c.pump()
    elected = c.state("t", 0)
    assert (elected.leader, elected.isr) == (3, (3,))
    result = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(result) == [ErrorCode.NONE]
    offline = c.state("t", 0)
    assert (offline.leader, offline.leader_epoch, offline.isr) == (
        NO_LEADER, elected.leader_epoch + 1, (3,))
    assert c.controller.core.failed_replicas == {tp: {3: elected.leader_epoch}}
    # reported again: offline already, nothing written
    again = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(again) == [ErrorCode.NONE] and c.state("t", 0) == offline
    c.start_broker(1)
    c.pump()
    assert c.state("t", 0).leader == NO_LEADER
    c.stop_broker(3)
    c.pump()
    c.start_broker(3)
    c.pump()
    assert c.state("t", 0).leader == NO_LEADER


def test_a_failed_follower_given_the_lead_by_a_controlled_shutdown_is_taken_offline() -> None:
    """ISR [1, 3]; 3's storage fails, then leader 1 shuts down before the report is handled:
    the shutdown hands 3 the lead with an ISR of itself. The report takes the partition
    offline (3 did not lead alone at the failure), rather than let 3 lead on."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 3), 0),)))
    shutdown = c.request(lambda rid: ControlledShutdownRequest(rid, 1, c.epoch_of(1)))
    assert isinstance(shutdown, ControlledShutdownResult)
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (3, (3,))
    result = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(result) == [ErrorCode.NONE]
    assert (c.state("t", 0).leader, c.state("t", 0).isr) == (NO_LEADER, (3,))


def test_a_failed_replica_taken_back_into_the_isr_may_be_elected_again() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    state = c.state("t", 0)
    assert (state.leader, state.isr) == (1, (1, 2))
    assert c.controller.core.failed_replicas == {tp: {3: 0}}
    # its leader took it back (it caught up from it): healthy again
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, state.leader_epoch, (1, 2, 3), state.version),)))
    assert c.state("t", 0).isr == (1, 2, 3)
    assert not c.controller.core.failed_replicas


def test_a_failed_replica_out_of_the_isr_fences_its_leaders_pending_proposal() -> None:
    """ISR [1, 2], 3 catching up; 1 proposes [1, 2, 3] (delayed); 3's storage fails and it
    reports. Written at a new leader epoch (same leader and ISR) the first time, so the
    delayed proposal is fenced; nothing is written for a report sent again. 3 rejoins only
    when its leader saw it catch up at the new leader epoch. Left at the old leader epoch,
    the proposal would put 3, with its short log, into the ISR, electable."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), 0),)))
    before = c.state("t", 0)
    ctl = c.controller
    mark = len(ctl.sent)
    result = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(result) == [ErrorCode.NONE]
    bumped = c.state("t", 0)
    assert (bumped.leader, bumped.leader_epoch, bumped.isr) == (1, before.leader_epoch + 1,
                                                                (1, 2))
    assert {b for b, _ in leader_and_isr_rows(ctl, mark)} == {1, 2, 3}
    assert ctl.core.failed_replicas == {tp: {3: before.leader_epoch}}
    stale = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, before.leader_epoch, (1, 2, 3), before.version),)))
    assert codes(stale) == [ErrorCode.FENCED_LEADER_EPOCH]
    assert c.state("t", 0) == bumped
    again = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(again) == [ErrorCode.NONE] and c.state("t", 0) == bumped
    caught_up = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, bumped.leader_epoch, (1, 2, 3), bumped.version),)))
    assert codes(caught_up) == [ErrorCode.NONE]
    assert c.state("t", 0).isr == (1, 2, 3) and not ctl.core.failed_replicas


def test_a_leaders_proposal_at_the_leader_epoch_of_a_failure_cannot_take_it_back() -> None:
    """The guard behind the new leader epoch: a replica known failed since leader epoch E
    (recorded as the report is handled, before its write lands; set here directly, this
    harness's store answering at once) is not taken back by a proposal at E, and is by
    one at a newer leader epoch (its leader saw it catch up after the bump)."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), 0),)))
    state = c.state("t", 0)
    ctl = c.controller
    ctl.core.failed_replicas[tp] = {3: state.leader_epoch}
    refused = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, state.leader_epoch, (1, 2, 3), state.version),)))
    assert codes(refused) == [ErrorCode.INELIGIBLE_REPLICA]
    assert isinstance(refused, AlterPartitionResult)
    assert "failed their storage" in (refused.partitions[0].message or "")
    assert c.state("t", 0).isr == (1, 2)
    # a shrink that leaves it out is made
    shrink = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, state.leader_epoch, (1,), state.version),)))
    assert codes(shrink) == [ErrorCode.NONE]
    ctl.core.failed_replicas[tp] = {3: state.leader_epoch - 1}
    now = c.state("t", 0)
    taken = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, now.leader_epoch, (1, 3), now.version),)))
    assert codes(taken) == [ErrorCode.NONE] and not ctl.core.failed_replicas


def test_a_stale_report_of_a_replica_that_rejoined_since_is_ignored() -> None:
    """3 fails at leader epoch 0 and reports; the controller writes leader epoch 1, but
    its answer is lost (it resigned, say). 3 takes its role, catches up, rejoins the ISR
    and is elected leader; its node's report, sent again, carries leader epoch 0: older
    than the partition's, it is ignored (3's current role sent again), rather than take a
    healthy leader's partition offline."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    first = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,),
                                                  leader_epochs={tp: 0}))
    assert codes(first) == [ErrorCode.NONE]
    out = c.state("t", 0)
    assert (out.leader_epoch, out.isr) == (1, (1, 2))
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, out.leader_epoch, (1, 2, 3), out.version),)))
    c.stop_broker(1)
    c.stop_broker(2)
    c.pump()
    led = c.state("t", 0)
    assert led.leader == 3 and not c.controller.core.failed_replicas
    ctl = c.controller
    mark = len(ctl.sent)
    stale = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,),
                                                  leader_epochs={tp: 0}))
    assert codes(stale) == [ErrorCode.NONE]
    assert c.state("t", 0) == led and not ctl.core.failed_replicas
    assert {(b, r.leader_epoch) for b, r in leader_and_isr_rows(ctl, mark)} == {
        (3, led.leader_epoch)}
    # refused at the current leader epoch: acted on
    now = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,),
                                                leader_epochs={tp: led.leader_epoch}))
    assert codes(now) == [ErrorCode.NONE]
    assert c.state("t", 0).leader == NO_LEADER and ctl.core.failed_replicas == {
        tp: {3: led.leader_epoch}}


def test_a_partition_whose_other_isr_members_are_gone_stays_offline_for_them() -> None:
    """Broker 3's replica failed, out of an ISR whose members are all gone: the partition
    is written at a new leader epoch (the role its replica waits for) and stays offline,
    its ISR kept for the first member back, which may have what the others lack."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), 0),)))
    c.stop_broker(1)
    c.stop_broker(2)
    c.pump()
    offline = c.state("t", 0)
    assert (offline.leader, offline.isr) == (NO_LEADER, (1, 2))
    ctl = c.controller
    mark = len(ctl.sent)
    result = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(result) == [ErrorCode.NONE]
    # out of the ISR already: written at a new leader epoch (same leader and ISR)
    bumped = c.state("t", 0)
    assert (bumped.leader, bumped.leader_epoch, bumped.isr) == (
        NO_LEADER, offline.leader_epoch + 1, (1, 2))
    assert (3, NO_LEADER, bumped.leader_epoch) in {
        (b, r.leader, r.leader_epoch) for b, r in leader_and_isr_rows(ctl, mark)}
    # reported again: nothing written, its current role sent again
    mark = len(ctl.sent)
    again = c.request(lambda rid: ReplicasOffline(rid, 3, c.epoch_of(3), (tp,)))
    assert codes(again) == [ErrorCode.NONE] and c.state("t", 0) == bumped
    assert {(b, r.leader, r.leader_epoch) for b, r in leader_and_isr_rows(ctl, mark)} == {
        (3, NO_LEADER, bumped.leader_epoch)}
    c.start_broker(2)
    c.pump()
    assert c.state("t", 0).leader == 2


def test_a_failed_replica_report_is_fenced_on_the_broker_epoch_and_the_controllership() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    stale = c.request(lambda rid: ReplicasOffline(rid, 1, c.epoch_of(1) - 1, (TP("t", 0),)))
    assert stale == ReplicasOfflineResult(int(ErrorCode.STALE_BROKER_EPOCH))
    unknown = c.request(lambda rid: ReplicasOffline(rid, 1, c.epoch_of(1), (TP("x", 0),)))
    assert codes(unknown) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)  # nothing changed
    standby = c.add_candidate(200, elect=False)
    standby.driver.feed(ReplicasOffline(("x", 1), 1, c.epoch_of(1), (TP("t", 0),)))
    assert standby.replies == [(("x", 1), ReplicasOfflineResult(int(ErrorCode.NOT_CONTROLLER)))]


# ---------------------------------------------------------------- ISR changes
def test_alter_partition_checks_and_writes_a_leaders_isr() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    ctl = c.controller
    mark = len(ctl.sent)
    shrink = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), 0),)))
    assert isinstance(shrink, AlterPartitionResult)
    assert shrink.partitions[0].state == LeaderAndIsr(1, 0, (1, 2), 1, 1)  # same leader epoch
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2), 1, 1)
    assert not leader_and_isr_rows(ctl, mark)  # only metadata changes
    assert {b for b, _ in update_metadata(ctl, mark)} == {1, 2, 3}

    def ask(broker: int, proposal: IsrProposal, broker_epoch: int | None = None) -> object:
        epoch = c.epoch_of(broker) if broker_epoch is None else broker_epoch
        return c.request(lambda rid: AlterPartitionRequest(rid, broker, epoch, (proposal,)))

    assert codes(ask(1, IsrProposal(tp, 0, (1,), 0))) == [ErrorCode.INVALID_UPDATE_VERSION]
    # the shrink again with its stale partition epoch (its answer lost, the leader retries):
    # already made, so answered with the current state, nothing written
    mark = len(ctl.sent)
    again = ask(1, IsrProposal(tp, 0, (1, 2), 0))
    assert isinstance(again, AlterPartitionResult)
    assert codes(again) == [ErrorCode.NONE]
    assert again.partitions[0].state == LeaderAndIsr(1, 0, (1, 2), 1, 1)
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2), 1, 1) and not update_metadata(ctl, mark)
    # a leader or partition epoch ahead of this controller's: another controller wrote it,
    # this one is likely no longer the controller; NOT_CONTROLLER (the leader sends it
    # again) as Kafka, not a refusal that holds the change
    assert codes(ask(1, IsrProposal(tp, 0, (1, 2), 2))) == [ErrorCode.NOT_CONTROLLER]
    assert codes(ask(1, IsrProposal(tp, 5, (1,), 1))) == [ErrorCode.NOT_CONTROLLER]
    assert codes(ask(2, IsrProposal(tp, 5, (2,), 1))) == [ErrorCode.NOT_CONTROLLER]
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2), 1, 1)
    assert codes(ask(2, IsrProposal(tp, 0, (2,), 1))) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert codes(ask(1, IsrProposal(tp, 0, (2,), 1))) == [ErrorCode.INVALID_REQUEST]
    assert codes(ask(1, IsrProposal(TP("x", 0), 0, (1,), 0))) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    stale = ask(1, IsrProposal(tp, 0, (1,), 1), broker_epoch=1)
    assert isinstance(stale, AlterPartitionResult)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    c.stop_broker(3)
    c.pump()
    state = c.state("t", 0)
    assert codes(ask(1, IsrProposal(tp, state.leader_epoch, (1, 2, 3), state.version))) == [
        ErrorCode.INELIGIBLE_REPLICA]


def test_a_leader_another_succeeded_is_told_its_leader_epoch_is_stale() -> None:
    """Kafka's controller checks the leader epoch, not who leads: broker 1, which led at
    leader epoch 0 and was moved away (a controlled shutdown) before its LeaderAndIsr came,
    is answered FENCED_LEADER_EPOCH, which it holds (NOT_LEADER_OR_FOLLOWER it would send
    again, as Kafka retries that)."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    assert c.state("t", 0).leader == 1 and c.state("t", 0).leader_epoch == 0
    c.request(lambda rid: ControlledShutdownRequest(rid, 1, c.epoch_of(1)))
    moved = c.state("t", 0)
    assert moved.leader != 1 and moved.leader_epoch == 1
    answer = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), moved.version),)))
    assert codes(answer) == [ErrorCode.FENCED_LEADER_EPOCH]
    assert c.state("t", 0) == moved


def test_one_isr_change_sent_twice_at_once_is_made_for_both() -> None:
    """Sim seed 329: a leader's expansion timed out while ZooKeeper was down and the leader
    sent it again; both requests were checked before either write came back, the first
    was written and the second's write, conditional on the old version, was refused. It
    asked for the state that the first had just made, so it is answered with that state
    (as a stale partition epoch asking for the current ISR is); refused, the leader took
    itself as fenced and, with no LeaderAndIsr to come, never took the ISR back in."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    tp = TP("t", 0)
    ctl = c.controller
    shrink = c.request(lambda rid: AlterPartitionRequest(rid, 1, c.epoch_of(1), (
        IsrProposal(tp, 0, (1, 2), 0),)))
    assert codes(shrink) == [ErrorCode.NONE] and c.state("t", 0).version == 1
    before = len(ctl.replies)
    epoch = c.epoch_of(1)
    c.zk.available = False  # both writes wait for ZooKeeper, checked against version 1
    for rid in ("first", "again"):
        ctl.driver.feed(AlterPartitionRequest(rid, 1, epoch, (
            IsrProposal(tp, 0, (1, 2, 3), 1),)))
    assert len(ctl.replies) == before
    c.zk.available = True
    ctl.driver.retry_writes()
    c.pump()
    answers = dict(ctl.replies[before:])
    made = LeaderAndIsr(1, 0, (1, 2, 3), 1, 2)
    for rid in ("first", "again"):
        answer = answers[rid]
        assert isinstance(answer, AlterPartitionResult)
        assert codes(answer) == [ErrorCode.NONE], rid
        assert answer.partitions[0].state == made
    assert c.state("t", 0) == made
    # a different change refused by the same race is still refused
    before = len(ctl.replies)
    c.zk.available = False
    for rid, isr in (("shrink", (1, 2)), ("other", (1, 3))):
        ctl.driver.feed(AlterPartitionRequest(rid, 1, epoch, (
            IsrProposal(tp, 0, isr, 2),)))
    c.zk.available = True
    ctl.driver.retry_writes()
    c.pump()
    answers = dict(ctl.replies[before:])
    assert codes(answers["shrink"]) == [ErrorCode.NONE]
    assert codes(answers["other"]) == [ErrorCode.INVALID_UPDATE_VERSION]
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2), 1, 3)


def test_a_leaders_own_isr_write_is_taken_over_when_the_controller_writes_next() -> None:
    """The leader wrote the state behind the controller's back (pre-KIP-497 path, no notice):
    the controller's next write is refused, it reads the state and applies its rule again."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    state = c.state("t", 0)
    leaders_write = LeaderAndIsr(1, 0, (1, 3), state.controller_epoch, state.version)
    assert c.brokers[1].update_partition_states({TP("t", 0): leaders_write}, None)[
        TP("t", 0)].ok
    c.stop_broker(1)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(3, 1, (3,), 1, 2)  # 2 had left the ISR


# ------------------------------------------------------------- deletion, growth
def test_delete_topics_stops_and_deletes_every_replica_then_the_znodes() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2), 1: (2, 3)})
    ctl = c.controller
    c.stop_broker(3)
    c.pump()
    mark = len(ctl.sent)
    result = c.request(lambda rid: DeleteTopics(rid, ("t", "nope")))
    assert isinstance(result, DeleteTopicsResult)
    assert codes(result) == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    umd = update_metadata(ctl, mark)
    assert umd and {p.leader for _, m in umd for p in m.partitions} == {LEADER_DURING_DELETE}
    assert sorted((b, r.partition, r.delete) for b, r in stop_replica_rows(ctl, mark)) == [
        (1, 0, True), (2, 0, True), (2, 1, True)]
    assert c.reader.get_topic_deletions() == {"t"}
    c.feed(StopReplicaDone(1, 0, {TP("t", 0): 0}))
    c.feed(StopReplicaDone(2, 0, {TP("t", 0): 0, TP("t", 1): 0}))
    assert c.reader.get_topics() == {"t"}  # broker 3 still holds a replica
    assert ctl.core.replica_fsm.state((TP("t", 1), 3)) is ReplicaState.DELETION_INELIGIBLE
    again = create(c, "t", 1, 1)
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    mark = len(ctl.sent)
    c.start_broker(3)
    c.pump()
    assert [(b, r.partition, r.delete) for b, r in stop_replica_rows(ctl, mark)] == [
        (3, 1, True)]
    c.feed(StopReplicaDone(3, 0, {TP("t", 1): 0}))
    assert c.reader.get_topics() == set()
    assert c.reader.get_topic_deletions() == set()
    assert "t" not in ctl.core.topics and not ctl.core.replica_fsm.snapshot()
    assert codes(create(c, "t", 1, 1)) == [0]


def test_create_partitions_continues_the_assignment() -> None:
    c = cluster()
    create(c, "t", partitions=3, rf=2)
    before = c.assignment("t")
    result = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("t", 6),)))
    assert isinstance(result, CreatePartitionsResult)
    assert codes(result) == [0]
    after = c.assignment("t")
    assert {p: after[p] for p in before} == before and len(after) == 6
    for p in range(3, 6):
        assert c.state("t", p) == LeaderAndIsr(after[p][0], 0, after[p], 1, 0)
    create(c, "u", partitions=1, rf=2)
    bad = c.request(lambda rid: CreatePartitions(rid, (
        NewPartitions("t", 5), NewPartitions("nope", 2), NewPartitions("u", 3, ((1, 2),)))))
    assert codes(bad) == [ErrorCode.INVALID_PARTITIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    manual = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("t", 7, ((3, 1),)),)))
    assert codes(manual) == [0] and c.assignment("t")[6] == (3, 1)


def test_changed_topic_configs_reach_every_nodes_metadata_and_later_leader_and_isr() -> None:
    c = cluster()
    create(c, "t", partitions=2, rf=2)
    create(c, "u", partitions=1, rf=2)
    controller = c.controller
    since = len(controller.sent)
    c.feed(TopicConfigsChanged({"t": {"retention.ms": "1000"}, "gone": {"retention.ms": "5"}}))
    updates = update_metadata(controller, since)
    assert {b for b, _m in updates} == {1, 2, 3}
    for _b, message in updates:
        assert {(r.topic, r.partition) for r in message.partitions} == {("t", 0), ("t", 1)}
        assert message.topic_configs["t"] == {"retention.ms": "1000"}
    since = len(controller.sent)
    c.feed(TopicConfigsChanged({"t": {"retention.ms": "1000"}}))  # nothing new: nothing sent
    assert update_metadata(controller, since) == []
    c.bounce_broker(c.state("t", 0).leader)
    c.pump()
    assert any(m.topic_configs.get("t") == {"retention.ms": "1000"}
               for _b, m in sent_of(controller, LeaderAndIsrRequest, since))


# ------------------------------------------------------------------- failover
def test_failover_the_new_controller_loads_and_fences_the_old_one() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    old = c.controller
    new = c.add_candidate(101)
    assert not new.driver.active
    # The old controller's session expires; the standby takes over with epoch 2.
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert new.driver.active and new.core.epoch == 2 and not old.driver.active
    full = update_metadata(new)
    assert sorted(b for b, m in full if m.full) == [1, 2, 3]
    assert {r.partition for _, r in leader_and_isr_rows(new)} == {0}
    c.stop_broker(1)
    c.pump()
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 2, 1)
    assert all(m.controller_epoch == 2 for _, m in new.sent)


def test_a_leader_that_restarted_while_no_controller_watched_gets_a_new_leader_epoch() -> None:
    """KIP-380's bounced broker, seen only through its new broker epoch by a controller
    elected after the restart: the state it reads names the broker's previous life (written
    before the broker registered again), so the broker may not lead in that leader epoch
    again; the same broker leads again where it is the only choice, at epoch + 1."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    create(c, "solo", assignment={0: (1,)})
    old = c.controller
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert not old.driver.active
    old_broker_epoch = c.epoch_of(1)
    assert c.bounce_broker(1) > old_broker_epoch
    assert c.state("solo", 0).leader_epoch == 0  # nobody watched it restart
    new = c.add_candidate(101)
    assert new.driver.active and new.core.epoch == 2
    assert c.state("t", 0) == LeaderAndIsr(2, 1, (2, 3), 2, 1)
    assert c.state("solo", 0) == LeaderAndIsr(1, 1, (1,), 2, 1)
    # The restarted broker is never told leader epoch 0 again, only the new epoch.
    rows = [(b, r) for b, r in leader_and_isr_rows(new) if r.topic == "solo"]
    assert rows and all(r.leader_epoch == 1 for _, r in rows)
    assert all(r.leader_epoch == 1 for _, r in leader_and_isr_rows(new) if r.topic == "t")


def test_a_controller_elected_later_keeps_the_epochs_of_brokers_that_did_not_restart() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    old = c.controller
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    new = c.add_candidate(101)
    assert new.driver.active
    assert c.state("t", 0) == LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)
    assert [r.leader_epoch for _, r in leader_and_isr_rows(new)] == [0, 0, 0]


def test_a_deposed_controller_is_fenced_and_answers_pending_requests() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    old = c.controller
    fence = old.driver.fence
    assert fence is not None
    # A new controller is elected while the old one still thinks it leads (a long GC pause):
    # its session survived, but /controller and the epoch moved on.
    c.zk.nodes.pop("/controller")
    new = c.add_candidate(101)
    assert new.driver.active and new.core.epoch == 2
    old.notices.clear()  # the old one has not noticed yet
    old.driver.feed(CreateTopics("late", (NewTopic("u", 1, 1),)))
    assert not old.driver.active
    [result] = [res for r, res in old.replies if r == "late"]
    assert isinstance(result, CreateTopicsResult)
    assert result.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert c.reader.get_topics() == {"t"}


def test_an_unreachable_store_fails_creation_fast_and_retries_internal_writes() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    ctl = c.controller
    c.zk.available = False
    result = c.request(lambda rid: CreateTopics(rid, (NewTopic("u", 1, 1),)))
    assert isinstance(result, CreateTopicsResult)
    assert result.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    assert "metadata store unavailable" in (result.topics[0].message or "")
    c.zk.available = True
    assert c.reader.get_topics() == {"t"}
    # An election whose write cannot get through waits and is retried.
    epoch = c.epoch_of(1)
    c.zk.available = False
    ctl.driver.feed(ControlledShutdownRequest("cs", 1, epoch))
    assert ctl.driver.pending_retries == 1 and not [r for r, _ in ctl.replies if r == "cs"]
    c.zk.available = True
    ctl.driver.retry_writes()
    [(_, done)] = [(r, res) for r, res in ctl.replies if r == "cs"]
    assert done == ControlledShutdownResult(0, None, ())
    assert c.state("t", 0).leader == 2


def test_a_failure_inside_the_core_gives_the_controllership_up_cleanly() -> None:
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    ctl = c.controller
    standby = c.add_candidate(101)

    def broken(_event: object) -> None:
        raise RuntimeError("a bug")

    ctl.core._on_elect_leaders = broken  # type: ignore[method-assign]
    result = c.request(lambda rid: CreateTopics(rid, (NewTopic("u", 1, 1),)))
    assert codes(result) == [0]
    ctl.driver.feed(ElectLeaders("boom", None))
    [answer] = [res for rid, res in ctl.replies if rid == "boom"]
    assert isinstance(answer, ElectLeadersResult)
    assert answer.error_code == ErrorCode.NOT_CONTROLLER
    c.pump()
    # /controller was given up: a controller (whichever node wins) starts again from the store.
    assert standby.driver.active or ctl.driver.active
    assert c.controller.core.epoch == 2 and set(c.controller.core.topics) == {"t", "u"}
    assert c.controller.core.states == c.states()


def test_partitions_past_a_brokers_limits_or_kafkas_per_request_maximum_are_refused() -> None:
    from actors.core.partition_budget import PartitionBudget
    # 1024 descriptors hold 256 partitions a broker; rf 3 on 3 brokers: every broker
    # holds every partition.
    c = cluster(partition_budget=PartitionBudget(1024))
    assert codes(create(c, "ok", partitions=200, rf=3)) == [0]
    big = create(c, "big", partitions=100, rf=3)
    assert codes(big) == [ErrorCode.POLICY_VIOLATION]
    assert big.topics[0].message.startswith(
        "topic 'big': 100 new partition(s) would make 300 on broker 1, over the 256")
    assert "ulimit -n 1024" in big.topics[0].message
    huge = c.request(lambda rid: CreateTopics(rid, (NewTopic("a", 131_073, 1),
                                                    NewTopic("b", 1, 1))))
    assert codes(huge) == [ErrorCode.POLICY_VIOLATION] * 2  # the whole request, as Kafka
    assert "Excessively large number of partitions per request: 131074" in huge.topics[0].message
    grow = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("ok", 300),)))
    assert codes(grow) == [ErrorCode.POLICY_VIOLATION]
    assert "100 new partition(s) would make 300" in grow.topics[0].message
    grow = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("ok", 20_300),)))
    assert codes(grow) == [ErrorCode.POLICY_VIOLATION]
    assert grow.topics[0].message.startswith("Excessively large number")
    assert codes(c.request(lambda rid: CreatePartitions(rid, (NewPartitions("ok", 256),)))) == [0]
    assert c.reader.get_topics() == {"ok"} and len(c.assignment("ok")) == 256


# ----------------------------------------------------------------- topic ids
def test_a_created_topic_gets_an_id_in_its_znode_its_roles_and_its_metadata() -> None:
    c = cluster()
    ctl = c.controller
    mark = len(ctl.sent)
    create(c, "orders", partitions=2, rf=2)
    topic_id = c.reader.get_topic_assignments(["orders"])["orders"].topic_id
    assert is_topic_id(topic_id)
    requests = [m for _, m in sent_of(ctl, LeaderAndIsrRequest, mark)]
    assert requests and all(m.topic_ids == {"orders": topic_id} for m in requests)
    deltas = [m for _, m in update_metadata(ctl, mark)]
    assert deltas and all(m.topic_ids == {"orders": topic_id} for m in deltas)
    # new partitions keep it; a namesake created after a delete gets another
    result = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("orders", 3),)))
    assert codes(result) == [0]
    assert c.reader.get_topic_assignments(["orders"])["orders"].topic_id == topic_id
    assert create(c, "other").topics[0].error_code == 0
    assert c.reader.get_topic_assignments(["other"])["other"].topic_id not in ("", topic_id)


def test_a_topic_an_older_version_made_gets_an_id_before_its_first_roles() -> None:
    c = cluster()
    ctl = c.controller
    mark = len(ctl.sent)
    c.reader.create_topic("old", TopicAssignment({0: (1, 2)}), {})  # no id: as before ids
    c.pump()
    topic_id = c.reader.get_topic_assignments(["old"])["old"].topic_id
    assert is_topic_id(topic_id)
    requests = [m for _, m in sent_of(ctl, LeaderAndIsrRequest, mark)]
    assert requests and all(m.topic_ids == {"old": topic_id} for m in requests)
    # written at the version read, its partitions unchanged
    assert c.assignment("old") == {0: (1, 2)}


def test_an_id_given_late_is_marked_adopted_and_kept_by_every_rewrite() -> None:
    """A topic created by this version is never marked; one that existed without an id
    (an older version's) gets one marked adopted, in its znode and with its roles, and
    CreatePartitions' rewrite keeps the mark."""
    c = cluster()
    ctl = c.controller
    create(c, "fresh", partitions=1, rf=2)
    assert not c.reader.get_topic_assignments(["fresh"])["fresh"].topic_id_adopted
    requests = [m for _, m in sent_of(ctl, LeaderAndIsrRequest)]
    assert requests and all(m.topic_ids_adopted == [] for m in requests)
    mark = len(ctl.sent)
    c.reader.create_topic("old", TopicAssignment({0: (1, 2)}), {})  # no id: as before ids
    c.pump()
    old = c.reader.get_topic_assignments(["old"])["old"]
    assert is_topic_id(old.topic_id) and old.topic_id_adopted
    requests = [m for _, m in sent_of(ctl, LeaderAndIsrRequest, mark)]
    assert requests and all(m.topic_ids_adopted == ["old"] for m in requests)
    result = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("old", 2),)))
    assert codes(result) == [0]
    grown = c.reader.get_topic_assignments(["old"])["old"]
    assert grown.topic_id == old.topic_id and grown.topic_id_adopted
    assert len(grown.partitions) == 2


def test_a_znode_an_older_version_rewrote_without_the_id_gets_an_adopted_one() -> None:
    """An older controller (or admin tool) rewrote a topic's znode without its id: the
    next controller gives it a new id, marked adopted, and its roles say so (the
    replicas' directories hold the first id: rewritten, never deleted)."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2, 3)})
    first = c.reader.get_topic_assignments(["t"])["t"]
    assert is_topic_id(first.topic_id) and not first.topic_id_adopted
    old = c.controller
    assert c.reader.set_topic_assignment(  # as an older version writes it: no id
        "t", TopicAssignment({0: (1, 2, 3)}, first.version), None).ok  # type: ignore[arg-type]
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    new = c.add_candidate(101)
    assert new.driver.active
    again = c.reader.get_topic_assignments(["t"])["t"]
    assert is_topic_id(again.topic_id) and again.topic_id != first.topic_id
    assert again.topic_id_adopted
    mark = len(new.sent)
    c.stop_broker(1)  # the replicas learn the id with their next role
    c.pump()
    rows = [m for _, m in sent_of(new, LeaderAndIsrRequest, mark)
            if any(r.topic == "t" for r in m.partitions) and m.topic_ids.get("t")]
    assert rows and all(m.topic_ids_adopted == ["t"] for m in rows)


def test_create_topics_answers_the_id_it_wrote_and_validate_only_none() -> None:
    c = cluster()
    [made] = create(c, "orders").topics
    assert made.error_code == 0
    assert made.topic_id == c.reader.get_topic_assignments(["orders"])["orders"].topic_id
    [again] = create(c, "orders").topics
    assert (again.error_code, again.topic_id) == (ErrorCode.TOPIC_ALREADY_EXISTS, "")
    checked = c.request(lambda rid: CreateTopics(rid, (NewTopic("dry", 1, 1),), True))
    assert isinstance(checked, CreateTopicsResult)
    assert [(t.error_code, t.topic_id) for t in checked.topics] == [(0, "")]


def test_delete_topics_by_id_deletes_only_while_the_name_still_has_that_id() -> None:
    """The handler resolves an id to a name from its own table; the controller deletes
    the name only if it still has that id (not a namesake made since)."""
    c = cluster()
    [made] = create(c, "t").topics
    [other] = create(c, "u").topics
    stale = c.request(lambda rid: DeleteTopics(rid, ("t", "u"), {"t": other.topic_id}))
    assert isinstance(stale, DeleteTopicsResult)
    assert [(r.name, r.error_code, r.topic_id) for r in stale.topics] == [
        ("t", ErrorCode.UNKNOWN_TOPIC_ID, other.topic_id), ("u", 0, other.topic_id)]
    assert "t" in c.controller.core.topics and c.reader.get_topic_deletions() == {"u"}
    deleted = c.request(lambda rid: DeleteTopics(rid, ("t",), {"t": made.topic_id}))
    assert [(r.error_code, r.topic_id) for r in deleted.topics] == [(0, made.topic_id)]
    assert c.reader.get_topic_deletions() == {"t", "u"}


def test_an_adoption_is_cleared_once_every_replica_read_the_id_back() -> None:
    """Each replica's LeaderAndIsr answer names the partitions of an adopted topic whose
    ``partition.metadata`` it read back holding the id. Until every replica of every
    partition has, the adoption stands; an answer naming another id counts for nothing.
    Then the znode is written unmarked and its /actorlog record dropped, at once."""
    c = cluster()
    c.reader.create_topic("old", TopicAssignment({0: (1, 2), 1: (2, 3)}), {})  # no id
    c.pump()
    adopted = c.reader.get_topic_assignments(["old"])["old"]
    assert adopted.topic_id_adopted
    late = adopted.topic_id
    assert c.zk.get("/actorlog/adopted_topic_ids/old") is not None
    c.feed(TopicIdsConfirmed(1, c.epoch_of(1), {TP("old", 0): late}))
    c.feed(TopicIdsConfirmed(2, c.epoch_of(2), {TP("old", 0): late, TP("old", 1): late}))
    c.feed(TopicIdsConfirmed(3, c.epoch_of(3),  # another id
                             {TP("old", 1): "AAAAAAAAAAAAAAAAAAAAAA"}))
    c.pump()
    assert c.reader.get_topic_assignments(["old"])["old"].topic_id_adopted
    assert c.zk.get("/actorlog/adopted_topic_ids/old") is not None
    c.feed(TopicIdsConfirmed(3, c.epoch_of(3), {TP("old", 1): late}))
    c.pump()
    cleared = c.reader.get_topic_assignments(["old"])["old"]
    assert cleared.topic_id == late and not cleared.topic_id_adopted
    assert cleared.partitions == adopted.partitions
    assert c.zk.get("/actorlog/adopted_topic_ids/old") is None
    mark = len(c.controller.sent)
    c.stop_broker(1)  # the roles after it no longer mark the id adopted
    c.pump()
    requests = [m for _, m in sent_of(c.controller, LeaderAndIsrRequest, mark)
                if m.topic_ids.get("old")]
    assert requests and all(m.topic_ids_adopted == [] for m in requests)


def test_a_deleted_topic_drops_its_adoption_record() -> None:
    c = cluster()
    c.reader.create_topic("old", TopicAssignment({0: (1, 2)}), {})  # no id
    c.pump()
    assert c.zk.get("/actorlog/adopted_topic_ids/old") is not None
    assert codes(c.request(lambda rid: DeleteTopics(rid, ("old",)))) == [0]
    c.feed(StopReplicaDone(1, 0, {TP("old", 0): 0}))
    c.feed(StopReplicaDone(2, 0, {TP("old", 0): 0}))
    c.pump()
    assert c.reader.get_topics() == set()
    assert c.zk.get("/actorlog/adopted_topic_ids/old") is None


def test_a_topic_adopted_before_the_records_gets_one_when_a_controller_loads() -> None:
    """A znode marked adopted by an earlier version has no record: the next controller
    writes it, so a Kafka tool's rewrite can no longer drop the adoption."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2)})
    marked = replace(c.reader.get_topic_assignments(["t"])["t"], topic_id_adopted=True)
    old = c.controller
    session = c.reader.session_id or 0
    c.zk.multi(session, [Op("set", znodes.topic_path("t"),  # as the earlier version wrote it
                            znodes.encode_topic_assignment(marked), marked.version)])
    assert c.zk.get(znodes.adopted_topic_id_path("t")) is None
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert c.add_candidate(101).driver.active
    found = c.zk.get(znodes.adopted_topic_id_path("t"))
    assert found is not None
    assert znodes.decode_adopted_topic_id("t", found.data).topic_id == marked.topic_id


def test_an_unreadable_adoption_record_counts_as_adopted_and_is_rewritten() -> None:
    """A damaged adoption record (or one of a newer format) neither stops a controller's
    load nor a topic change: its topic counts as adopted (the safe direction: a replica
    holding another id rewrites it, never deletes), the next write of the topic replaces
    the record with a readable one, and a newer format with a valid id is read."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2)})
    create(c, "u", assignment={0: (2, 3)})
    first = c.reader.get_topic_assignments(["t", "u"])
    assert not first["t"].topic_id_adopted and not first["u"].topic_id_adopted
    session = c.reader.session_id or 0
    newer = {"version": 2, "topic_id": first["u"].topic_id, "adopted_at": "yesterday"}
    c.zk.multi(session, [Op("create", znodes.adopted_topic_id_path("t"), b"\x00garbage"),
                         Op("create", znodes.adopted_topic_id_path("u"),
                            json.dumps(newer).encode())])
    both = c.reader.get_topic_assignments(["t", "u"])
    assert both["t"].topic_id_adopted and both["u"].topic_id_adopted
    old = c.controller
    c.zk.expire(old.store.session_id or 0)
    c.pump()
    assert c.add_candidate(101).driver.active  # the load did not fail on the record
    found = c.zk.get(znodes.adopted_topic_id_path("t"))
    assert found is not None  # written readable at load, as a record the znode lacked
    assert znodes.decode_adopted_topic_id("t", found.data).topic_id == first["t"].topic_id
    newer_found = c.zk.get(znodes.adopted_topic_id_path("u"))
    assert newer_found is not None and json.loads(newer_found.data) == newer  # kept
    # damaged again, then a topic change: done, and the record rewritten
    found = c.zk.get(znodes.adopted_topic_id_path("t"))
    assert found is not None
    c.zk.multi(session, [Op("set", znodes.adopted_topic_id_path("t"), b'{"version":1}',
                            found.version)])
    result = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("t", 2),)))
    assert codes(result) == [0]
    grown = c.reader.get_topic_assignments(["t"])["t"]
    assert len(grown.partitions) == 2 and grown.topic_id_adopted
    found = c.zk.get(znodes.adopted_topic_id_path("t"))
    assert found is not None
    assert znodes.decode_adopted_topic_id("t", found.data).topic_id == first["t"].topic_id
    # damaged once more: clearing drops it instead of failing on it
    c.zk.multi(session, [Op("set", znodes.adopted_topic_id_path("t"), b"[]", found.version)])
    late = grown.topic_id
    for broker in (1, 2, 3):
        c.feed(TopicIdsConfirmed(broker, c.epoch_of(broker), {
            TP("t", p): late for p, replicas in grown.partitions.items() if broker in replicas}))
    cleared = c.reader.get_topic_assignments(["t"])["t"]
    assert not cleared.topic_id_adopted
    assert c.zk.get(znodes.adopted_topic_id_path("t")) is None


def adopted_topic(c: Cluster, name: str, assignment: dict[int, tuple[int, ...]]) -> str:
    """A topic made as an older version did (no id): its id, given late and adopted."""
    c.reader.create_topic(name, TopicAssignment(assignment), {})
    c.pump()
    found = c.reader.get_topic_assignments([name])[name]
    assert found.topic_id_adopted
    return found.topic_id


def confirm(c: Cluster, broker: int, topic_id: str, *tps: TopicPartition,
            epoch: int | None = None) -> None:
    c.feed(TopicIdsConfirmed(broker, c.epoch_of(broker) if epoch is None else epoch,
                             dict.fromkeys(tps, topic_id)))


def adopted(c: Cluster, name: str) -> bool:
    return c.reader.get_topic_assignments([name])[name].topic_id_adopted


@pytest.mark.parametrize("event", ["bounce", "offline", "storage"])
def test_a_confirmation_is_forgotten_when_its_broker_comes_back_or_its_storage_fails(
        event: str) -> None:
    """A replica that read the id back, then restarted (maybe on another disk, one still
    holding the earlier id), went away, or reported its storage failed, must read it back
    again: its earlier confirmation (or one answering its earlier registration's request)
    no longer counts toward clearing the adoption."""
    c = cluster()
    late = adopted_topic(c, "old", {0: (1, 2)})
    before = c.epoch_of(1)
    confirm(c, 1, late, TP("old", 0))
    if event == "bounce":
        c.bounce_broker(1)
        c.pump()
    elif event == "offline":
        c.stop_broker(1)
        c.pump()
    else:
        result = c.request(lambda rid: ReplicasOffline(rid, 1, before, (TP("old", 0),)))
        assert isinstance(result, ReplicasOfflineResult) and result.error_code == 0
    confirm(c, 2, late, TP("old", 0))
    assert adopted(c, "old")
    if event == "offline":
        c.start_broker(1)
        c.pump()
    if event != "storage":
        confirm(c, 1, late, TP("old", 0), epoch=before)  # its earlier registration's
        assert adopted(c, "old")
    confirm(c, 1, late, TP("old", 0))
    assert not adopted(c, "old")


def test_an_adoption_waits_for_every_replica_it_has_now() -> None:
    """A non-replica's confirmation counts for nothing; a partition added after some
    confirmations must be confirmed too; a replica a Kafka tool's reassignment added
    (read by the next controller, which keeps no earlier confirmation) too."""
    c = cluster((1, 2, 3, 4))
    late = adopted_topic(c, "old", {0: (1, 2)})
    confirm(c, 1, late, TP("old", 0))
    confirm(c, 3, late, TP("old", 0))  # not a replica
    assert adopted(c, "old")
    result = c.request(lambda rid: CreatePartitions(
        rid, (NewPartitions("old", 2, assignment=((3, 4),)),)))
    assert codes(result) == [0]
    confirm(c, 2, late, TP("old", 0))
    assert adopted(c, "old")  # partition 1 not confirmed yet
    # as kafka-reassign-partitions (2.8+) writes it: 3 added to partition 0, mark dropped
    grown = c.reader.get_topic_assignments(["old"])["old"]
    session = c.reader.session_id or 0
    c.zk.multi(session, [Op("set", znodes.topic_path("old"), znodes.encode_topic_assignment(
        replace(grown, partitions={0: (1, 2, 3), 1: (3, 4)}, topic_id_adopted=False)),
        grown.version)])
    c.zk.expire(c.controller.store.session_id or 0)
    c.pump()
    assert c.add_candidate(101).driver.active
    assert adopted(c, "old")  # the record kept it
    confirm(c, 1, late, TP("old", 0))
    confirm(c, 2, late, TP("old", 0))
    confirm(c, 3, late, TP("old", 1))
    confirm(c, 4, late, TP("old", 1))
    assert adopted(c, "old")  # 3's replica of partition 0 not confirmed
    confirm(c, 3, late, TP("old", 0))
    assert not adopted(c, "old")


def test_a_clearing_refused_by_a_kafka_tools_rewrite_is_tried_again_at_its_version() -> None:
    """A Kafka tool rewrote the topic znode since the controller read it (its version
    moved): the clearing is refused, the znode read again and, naming the same id and
    only replicas that confirmed it, cleared at its version; naming a replica that did
    not confirm, the adoption (and its record) stands."""
    for added in (False, True):
        c = cluster()
        late = adopted_topic(c, "old", {0: (1, 2)})
        confirm(c, 1, late, TP("old", 0))
        read = c.reader.get_topic_assignments(["old"])["old"]
        rewrite = replace(read, topic_id_adopted=False,
                          partitions={0: (1, 2, 3) if added else (2, 1)})
        session = c.reader.session_id or 0
        c.zk.multi(session, [Op("set", znodes.topic_path("old"),  # as a 2.8+ tool writes it
                                znodes.encode_topic_assignment(rewrite), read.version)])
        confirm(c, 2, late, TP("old", 0))
        now = c.reader.get_topic_assignments(["old"])["old"]
        assert now.partitions == rewrite.partitions
        if added:
            assert now.topic_id_adopted
            assert c.zk.get(znodes.adopted_topic_id_path("old")) is not None
        else:
            assert now.topic_id == late and not now.topic_id_adopted
            assert c.zk.get(znodes.adopted_topic_id_path("old")) is None


def test_a_completed_deletion_is_named_to_every_live_broker_once_by_its_id() -> None:
    """The UpdateMetadata that follows the znodes' deletion names the topic and its id
    (the nodes' group coordinators take its offsets), before any namesake's metadata."""
    c = cluster()
    create(c, "t", assignment={0: (1, 2), 1: (2, 3)})
    ctl = c.controller
    topic_id = ctl.core.topics["t"].assignment.topic_id
    assert topic_id
    mark = len(ctl.sent)
    c.request(lambda rid: DeleteTopics(rid, ("t",)))
    c.feed(StopReplicaDone(1, 0, {TP("t", 0): 0}))
    c.feed(StopReplicaDone(2, 0, {TP("t", 0): 0, TP("t", 1): 0}))
    assert all(not m.deleted_topics for _, m in update_metadata(ctl, mark))  # not yet
    c.feed(StopReplicaDone(3, 0, {TP("t", 1): 0}))
    assert c.reader.get_topics() == set()
    named = [(b, m.deleted_topics) for b, m in update_metadata(ctl, mark) if m.deleted_topics]
    assert sorted(named) == [(1, {"t": topic_id}), (2, {"t": topic_id}), (3, {"t": topic_id})]
    mark = len(ctl.sent)
    assert codes(create(c, "t", 1, 1)) == [0]
    assert all(not m.deleted_topics for _, m in update_metadata(ctl, mark))


def test_a_new_controller_with_deletion_disabled_removes_the_markers_it_finds() -> None:
    """delete.topic.enable=false: a deletion marker a new controller finds (left from before
    the setting, or written by a tool) is removed, as Kafka's deletion manager does, and
    the topic stays; it used to be deleted at the failover (its offsets with it)."""
    c = cluster(delete_topic_enable=False)
    create(c, "keep", assignment={0: (1, 2, 3)})
    old = c.controller
    new = c.add_candidate(101)
    c.zk.expire(old.store.session_id or 0)
    assert c.reader.mark_topic_for_deletion("keep")  # before the new controller loads
    c.pump()
    assert new.driver.active
    assert c.reader.get_topic_deletions() == set()
    assert c.assignment("keep") == {0: (1, 2, 3)}
    assert not [row for _, row in stop_replica_rows(new) if row.topic == "keep"]


# ------------------------------------------------ topic name and internal topic rules
def _hold_topic_writes(candidate: Any) -> tuple[list[Any], Any]:
    """Keep the candidate's CreateTopicZnodes writes in flight (listed, not executed);
    the function returned executes one of them now and hands the core its outcome."""
    held: list[Any] = []
    execute = candidate.driver._execute

    def hold(write: Any) -> Any:
        if isinstance(write, CreateTopicZnodes):
            held.append(write)
            return None
        return execute(write)

    def run(write: Any) -> None:
        candidate.driver.feed(execute(write))

    candidate.driver._execute = hold
    return held, run


def _index_matches(core: Any) -> bool:
    """The controller's collision index is its topics and in-flight creations, by name."""
    rebuilt: dict[str, set[str]] = {}
    for name in [*core.topics, *core._creating]:
        rebuilt.setdefault(name.replace(".", "_"), set()).add(name)
    return bool(core._by_unified.by_unified == rebuilt)


def _reply(candidate: Any, request_id: Any) -> Any:
    found = [res for rid, res in candidate.replies if rid == request_id]
    return found[0] if found else None


def test_a_name_in_flight_twice_still_collides_once_one_write_ends() -> None:
    """One name can be in two requests' znode writes at once (the second ends NODE_EXISTS):
    the first ending (here failed) must not forget the other, still in flight, or a
    colliding name slips in beside it; all forgotten once written, failed or resigned."""
    c = cluster()
    ctl = c.controller
    held, run = _hold_topic_writes(ctl)
    ctl.driver.feed(CreateTopics("a", (NewTopic("x.y", 1, 1),)))
    ctl.driver.feed(CreateTopics("b", (NewTopic("x.y", 1, 1),)))
    assert len(held) == 2
    ctl.driver.feed(MetadataWriteFailed(held[0].write_id, "unreachable"))
    assert codes(_reply(ctl, "a")) == [ErrorCode.REQUEST_TIMED_OUT]
    ctl.driver.feed(CreateTopics("c", (NewTopic("x_y", 1, 1),)))
    clash = _reply(ctl, "c")
    assert clash is not None and codes(clash) == [ErrorCode.INVALID_TOPIC_EXCEPTION]
    assert "collides with existing topics: x.y" in clash.topics[0].message
    run(held[1])
    c.pump()
    assert codes(_reply(ctl, "b")) == [0]
    assert not ctl.core._creating
    # a write refused (NODE_EXISTS: the other request's wrote it) releases its name too
    ctl.driver.feed(CreateTopics("d", (NewTopic("p.q", 1, 1),)))
    ctl.driver.feed(CreateTopics("e", (NewTopic("p.q", 1, 1),)))
    run(held[2])
    run(held[3])
    c.pump()
    assert codes(_reply(ctl, "d")) == [0]
    assert codes(_reply(ctl, "e")) == [ErrorCode.TOPIC_ALREADY_EXISTS]
    assert not ctl.core._creating and _index_matches(ctl.core)
    # resignation forgets what is in flight
    ctl.driver.feed(CreateTopics("f", (NewTopic("r.s", 1, 1),)))
    assert ctl.core._creating == Counter({"r.s": 1})
    assert _index_matches(ctl.core)
    ctl.driver.resign("test")
    assert not ctl.core._creating and not ctl.core._by_unified.by_unified


def test_the_controller_keeps_the_internal_topics_rules() -> None:
    """The controller, which holds the authoritative topic list (a handler's cache may be
    stale): a client's __consumer_offsets only with the configured count, no growth of
    it; a user's name colliding with an internal topic's is refused before that topic
    exists; the coordinator's own creation is held to neither rule."""
    c = cluster(internal_partitions={"__consumer_offsets": 3, "__transaction_state": 2})
    wrong = create(c, "__consumer_offsets", 2, 1)
    assert codes(wrong) == [ErrorCode.INVALID_PARTITIONS]
    assert "offsets.topic.num.partitions=3" in str(wrong.topics[0].message)
    clash = create(c, "__transaction.state", 1, 1)
    assert codes(clash) == [ErrorCode.INVALID_TOPIC_EXCEPTION]
    mark = len(c.controller.sent)
    assert codes(create(c, "__consumer_offsets", 3, 1)) == [0]
    # the nodes learn how many partitions it is assigned (a partition left NEW is in no
    # row); a user's topic is not counted there
    sent = [m for _, m in update_metadata(c.controller, mark)]
    assert sent and all(m.assigned_partitions == {"__consumer_offsets": 3} for m in sent)
    mark = len(c.controller.sent)
    assert codes(create(c, "user-topic", 2, 1)) == [0]
    assert all(m.assigned_partitions == {} for _, m in update_metadata(c.controller, mark))
    grow = c.request(lambda rid: CreatePartitions(rid, (NewPartitions("__consumer_offsets", 6),)))
    assert codes(grow) == [ErrorCode.INVALID_PARTITIONS]
    assert len(c.assignment("__consumer_offsets")) == 3
    # the coordinator's own creation: its own count (a colliding user topic: the next test)
    own = c.request(lambda rid: CreateTopics(rid, (NewTopic(
        "__transaction_state", 4, 1, internal=True),)))
    assert codes(own) == [0]
    assert c.reader.get_topics() == {"__consumer_offsets", "__transaction_state", "user-topic"}


def test_a_collision_is_checked_after_the_counts_and_against_a_topic_being_deleted() -> None:
    """As Kafka's ZkAdminManager.createTopics: INVALID_REQUEST, INVALID_PARTITIONS and
    INVALID_REPLICATION_FACTOR before the collision; a topic being deleted collides."""
    c = cluster(delete_topic_enable=True)
    assert codes(create(c, "d.e", 1, 3)) == [0]
    assert codes(create(c, "d_e", 0, 1)) == [ErrorCode.INVALID_PARTITIONS]
    assert codes(create(c, "d_e", 1, 9)) == [ErrorCode.INVALID_REPLICATION_FACTOR]
    assert codes(c.request(lambda rid: CreateTopics(rid, (NewTopic(
        "d_e", 1, 1, assignment={0: (1,)}),)))) == [ErrorCode.INVALID_REQUEST]
    assert codes(create(c, "d_e", 1, 1)) == [ErrorCode.INVALID_TOPIC_EXCEPTION]
    # a topic being deleted (its replicas not stopped yet: no StopReplicaDone here)
    assert codes(c.request(lambda rid: DeleteTopics(rid, ("d.e",)))) == [0]
    assert "d.e" in c.controller.core.deleting
    assert codes(create(c, "d_e", 1, 1)) == [ErrorCode.INVALID_TOPIC_EXCEPTION]
    # once deleted (its replicas stopped), the name is free
    ctl = c.controller
    assert _index_matches(ctl.core)
    for broker in c.assignment("d.e")[0]:
        c.feed(StopReplicaDone(broker, 0, {TP("d.e", 0): 0}))
    assert "d.e" not in ctl.core.topics and _index_matches(ctl.core)
    assert codes(create(c, "d_e", 1, 1)) == [0]


def test_the_coordinators_own_creation_passes_a_colliding_user_topic() -> None:
    """A data dir from before the collision rule may hold `__transaction.state`: the
    transaction coordinator's own creation of `__transaction_state` still goes through
    (it would otherwise fail for good), a client's creation of it does not."""
    c = cluster(internal_partitions={"__consumer_offsets": 3, "__transaction_state": 2})
    c.reader.create_topic("__transaction.state", TopicAssignment({0: (1, 2)}), {})
    c.pump()
    assert "__transaction.state" in c.controller.core.topics
    assert codes(create(c, "__transaction_state", 2, 1)) == [
        ErrorCode.INVALID_TOPIC_EXCEPTION]
    own = c.request(lambda rid: CreateTopics(rid, (NewTopic(
        "__transaction_state", 2, 1, internal=True),)))
    assert codes(own) == [0]
