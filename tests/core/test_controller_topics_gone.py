"""A topic whose znodes an operator removes under the controller (``deleteall
/brokers/topics/<name>`` in a ZooKeeper shell, not DeleteTopics), in the controller core on
the in-memory store.

As Kafka's processTopicChange, the controller forgets it (TopicsGone). What it still had in
flight for the topic is given up, whatever it was waiting for: a write the store could not
take and the driver was retrying, a deletion's last write, a reassignment's step. The
controller must not resign over it (a KeyError in the core would make it) nor write
anything of the removed topic again.
"""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.cluster_model import TopicPartition
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
    ElectLeaders,
    ElectLeadersResult,
    IsrProposal,
    NewPartitions,
    NewTopic,
    RetryReassignments,
    StopReplicaDone,
)
from actors.metadata import znodes
from actors.metadata.memory import Op
from actors.metadata.store import MetadataError, MetadataUnavailable
from wire.errors import ErrorCode

from .controller_harness import (
    Cluster,
    leader_and_isr_rows,
    stop_replica_rows,
    update_metadata,
)

TP = TopicPartition


def cluster() -> Cluster:
    c = Cluster(seed=7)
    for b in (1, 2, 3):
        c.start_broker(b)
    c.add_candidate(100)
    return c


def create(c: Cluster, name: str, assignment: dict[int, tuple[int, ...]]) -> None:
    result = c.request(lambda rid: CreateTopics(rid, (NewTopic(name, assignment=assignment),)))
    assert isinstance(result, CreateTopicsResult)
    assert [t.error_code for t in result.topics] == [0]


def remove_by_hand(c: Cluster, topic: str) -> None:
    """``deleteall /brokers/topics/<topic>`` from another session (its config znode and a
    deletion marker are not touched)."""
    prefix = znodes.topic_path(topic)
    paths = sorted((p for p in c.zk.nodes if p == prefix or p.startswith(prefix + "/")),
                   key=lambda p: -p.count("/"))
    c.zk.multi(c.reader.session_id or 0, [Op("delete", p) for p in paths])
    c.pump()


def written_for(c: Cluster, topic: str) -> list[str]:
    prefix = znodes.topic_path(topic)
    return [p for p in c.zk.nodes if p == prefix or p.startswith(prefix + "/")]


def forgotten(c: Cluster, topic: str) -> None:
    ctl = c.controller
    core = ctl.core
    assert core.epoch == 1  # it never resigned (and was elected again)
    assert topic not in core.topics and topic not in core.deleting
    assert [tp for tp in core.states if tp.topic == topic] == []
    assert [k for k in core.replica_fsm.snapshot() if k[0].topic == topic] == []
    assert ctl.driver.pending_retries == 0
    assert written_for(c, topic) == []


def test_a_deletion_whose_last_write_is_retried_when_the_znodes_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    create(c, "kept", {0: (1, 3)})
    ctl = c.controller
    deleted = c.request(lambda rid: DeleteTopics(rid, ("gone",)))
    assert isinstance(deleted, DeleteTopicsResult)
    assert [t.error_code for t in deleted.topics] == [0]
    c.feed(StopReplicaDone(1, 0, {TP("gone", 0): 0}))
    real = ctl.store.delete_topic

    def unreachable(*_args: Any) -> None:
        raise MetadataUnavailable("injected")

    monkeypatch.setattr(ctl.store, "delete_topic", unreachable)
    c.feed(StopReplicaDone(2, 0, {TP("gone", 0): 0}))  # the last: its znodes' deletion
    assert ctl.driver.pending_retries == 1 and "gone" in ctl.core.deleting
    monkeypatch.setattr(ctl.store, "delete_topic", real)

    gone_id = ctl.core.topics["gone"].assignment.topic_id
    assert gone_id
    mark = len(ctl.sent)
    remove_by_hand(c, "gone")
    assert c.reader.get_topic_deletions() == set()  # a namesake's would be deleted by it
    # the deletion had finished (every replica deleted): it ends as a DeleteTopics does,
    # the nodes' group coordinators told to drop its offsets, by name and id
    told = [m.deleted_topics for _, m in update_metadata(ctl, mark) if m.deleted_topics]
    assert told and all(d == {"gone": gone_id} for d in told)
    assert znodes.topic_config_path("gone") in c.zk.nodes  # the operator left it
    ctl.driver.retry_writes()  # the znodes' deletion, kept: it removes the config
    c.pump()
    forgotten(c, "gone")
    assert c.reader.get_topics() == {"kept"}
    assert znodes.topic_config_path("gone") not in c.zk.nodes
    # the controller goes on: "kept" is still elected for
    mark = len(ctl.sent)
    c.stop_broker(1)
    c.pump()
    assert c.state("kept", 0).leader == 3
    assert {row.topic for _, row in leader_and_isr_rows(ctl, mark)} == {"kept"}
    create(c, "gone", {0: (2, 3)})  # not refused: its replicas were deleted


def test_a_reassignment_step_in_flight_when_the_znodes_go() -> None:
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    ctl = c.controller
    c.zk.available = False
    ctl.driver.feed(AlterPartitionReassignments("r", ((TP("gone", 0), (2, 3)),)))
    assert ctl.driver.pending_retries == 1  # its first step: the znode's replica set
    assert [r for r, _ in ctl.replies if r == "r"] == []
    c.zk.available = True

    mark = len(ctl.sent)
    remove_by_hand(c, "gone")
    [(_, answer)] = [(r, res) for r, res in ctl.replies if r == "r"]
    assert isinstance(answer, AlterReassignmentsResult)
    [part] = answer.partitions
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "znodes were removed" in (part.message or "")
    ctl.driver.retry_writes()
    c.feed(RetryReassignments())
    c.pump()
    forgotten(c, "gone")
    assert ctl.core.snapshot()["reassigning"] == []
    assert [row for _, row in stop_replica_rows(ctl, mark)] == []  # the nodes told nothing
    assert [row for _, row in leader_and_isr_rows(ctl, mark)] == []


def test_a_state_write_pending_retry_keeps_only_the_other_topics_part(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    create(c, "kept", {0: (1, 3)})
    ctl = c.controller
    epoch = c.epoch_of(1)
    c.zk.available = False
    ctl.driver.feed(ControlledShutdownRequest("cs", 1, epoch))
    assert ctl.driver.pending_retries == 1  # both partitions' new leaders, in one write
    c.zk.available = True

    real = ctl.store.update_partition_states
    written: list[set[TopicPartition]] = []

    def spy(states: Any, *args: Any, **kwargs: Any) -> Any:
        written.append(set(states))
        return real(states, *args, **kwargs)

    monkeypatch.setattr(ctl.store, "update_partition_states", spy)
    remove_by_hand(c, "gone")
    ctl.driver.retry_writes()
    c.pump()
    forgotten(c, "gone")
    # the retried write named only the other topic's partition
    assert written and written[0] == {TP("kept", 0)}
    assert all(TP("gone", 0) not in tps for tps in written)
    assert c.state("kept", 0).leader == 3
    [(_, done)] = [(r, res) for r, res in ctl.replies if r == "cs"]
    assert isinstance(done, ControlledShutdownResult) and done.error_code == 0
    assert TP("kept", 0) not in done.remaining
    assert [t for t in ctl.core.topics] == ["kept"]


def test_new_partitions_pending_retry_when_the_znodes_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    ctl = c.controller
    real = ctl.store.create_partition_states

    def unreachable(*_args: Any) -> None:
        raise MetadataUnavailable("injected")

    monkeypatch.setattr(ctl.store, "create_partition_states", unreachable)
    ctl.driver.feed(CreatePartitions("cp", (NewPartitions("gone", 2),)))
    assert ctl.driver.pending_retries == 1  # the new partition's first state
    monkeypatch.setattr(ctl.store, "create_partition_states", real)

    remove_by_hand(c, "gone")
    [(_, answer)] = [(r, res) for r, res in ctl.replies if r == "cp"]
    assert isinstance(answer, CreatePartitionsResult)
    assert answer.topics[0].error_code == 0  # its assignment was written
    ctl.driver.retry_writes()  # (would create /brokers/topics/gone/partitions/1 again)
    c.pump()
    forgotten(c, "gone")


def test_the_removed_name_is_refused_to_create_topics_with_why() -> None:
    """Kafka's controller leaves a namesake's partitions without a leader (refused the move
    to NewPartition; the brokers answer INCONSISTENT_TOPIC_ID): here it is refused."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    remove_by_hand(c, "gone")
    result = c.request(lambda rid: CreateTopics(rid, (NewTopic("gone", 1, 2),)))
    assert isinstance(result, CreateTopicsResult)
    [refused] = result.topics
    assert refused.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "removed from ZooKeeper by hand" in (refused.message or "")
    assert c.reader.get_topics() == set()
    create(c, "other", {0: (1, 2)})


def test_the_removed_topic_written_back_lifts_the_refusal() -> None:
    """The operator writes the removed topic's znodes back (the same topic id): it is the
    same topic, its replicas its own; once deleted by DeleteTopics, its name is free."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    prefix = znodes.topic_path("gone")
    saved = sorted(((p, n.data) for p, n in c.zk.nodes.items()
                    if p == prefix or p.startswith(prefix + "/")), key=lambda e: e[0].count("/"))
    remove_by_hand(c, "gone")
    c.zk.multi(c.reader.session_id or 0, [Op("create", p, data) for p, data in saved])
    c.pump()
    assert "gone" in c.controller.core.topics
    deleted = c.request(lambda rid: DeleteTopics(rid, ("gone",)))
    assert isinstance(deleted, DeleteTopicsResult)
    assert [t.error_code for t in deleted.topics] == [0]
    c.feed(StopReplicaDone(1, 0, {TP("gone", 0): 0}))
    c.feed(StopReplicaDone(2, 0, {TP("gone", 0): 0}))
    assert c.reader.get_topics() == set()
    create(c, "gone", {0: (2, 3)})


def test_a_shutdown_whose_only_change_was_the_removed_topics_leaves_it_out() -> None:
    """The broker's controlled shutdown moved only the removed topic's leadership: it is
    answered as the topic goes, without that partition in ``remaining`` (the broker would
    ask again for a partition no longer known)."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    ctl = c.controller
    epoch = c.epoch_of(1)
    c.zk.available = False
    ctl.driver.feed(ControlledShutdownRequest("cs", 1, epoch))
    assert ctl.driver.pending_retries == 1
    c.zk.available = True
    remove_by_hand(c, "gone")
    [(_, done)] = [(r, res) for r, res in ctl.replies if r == "cs"]
    assert isinstance(done, ControlledShutdownResult) and done.error_code == 0
    assert done.remaining == ()
    ctl.driver.retry_writes()
    c.pump()
    forgotten(c, "gone")


def answered_past_the_removal(c: Cluster, event: Any, req_id: str) -> Any:
    """``event`` fed while the store takes no write (its write pending retry), then the
    store back, "gone" removed by hand and the write retried: "gone" is forgotten; the
    one answer to ``event``."""
    ctl = c.controller
    c.zk.available = False
    ctl.driver.feed(event)
    assert ctl.driver.pending_retries == 1
    c.zk.available = True
    remove_by_hand(c, "gone")
    ctl.driver.retry_writes()
    c.pump()
    forgotten(c, "gone")
    [(_, answer)] = [(r, res) for r, res in ctl.replies if r == req_id]
    return answer


def test_an_isr_change_of_two_topics_pending_retry_answers_the_gone_one_unknown() -> None:
    """One AlterPartition for a partition of each topic, one write pending retry: the
    other topic's partition is answered when the retry lands, after the removed topic was
    forgotten; the removed topic's as Kafka answers a topic it does not know."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    create(c, "kept", {0: (1, 3)})
    epoch = c.epoch_of(1)
    answer = answered_past_the_removal(c, AlterPartitionRequest("ap", 1, epoch, (
        IsrProposal(TP("gone", 0), 0, (1,), 0), IsrProposal(TP("kept", 0), 0, (1,), 0))), "ap")
    assert isinstance(answer, AlterPartitionResult) and answer.error_code == 0
    codes = {p.partition: p.error_code for p in answer.partitions}
    assert codes == {TP("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     TP("kept", 0): ErrorCode.NONE}
    assert c.state("kept", 0).isr == (1,)


def test_an_election_of_every_partition_pending_retry_answers_the_gone_one_unknown() -> None:
    """ElectLeaders(None) moving both topics' leaders back to the preferred replica in
    one write, pending retry when one topic's znodes go."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    create(c, "kept", {0: (1, 3)})
    c.stop_broker(1)
    c.pump()
    c.start_broker(1)
    c.pump()
    for topic, leader in (("gone", 2), ("kept", 3)):  # the leader takes 1 back into the ISR
        s = c.state(topic, 0)
        assert s.leader == leader
        c.request(lambda rid, s=s, topic=topic, leader=leader: AlterPartitionRequest(
            rid, leader, c.epoch_of(leader),
            (IsrProposal(TP(topic, 0), s.leader_epoch, (leader, 1), s.version),)))
    answer = answered_past_the_removal(c, ElectLeaders("el", None), "el")
    assert isinstance(answer, ElectLeadersResult) and answer.error_code == 0
    codes = {p.partition: p.error_code for p in answer.partitions}
    assert codes == {TP("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     TP("kept", 0): ErrorCode.NONE}
    assert c.state("kept", 0).leader == 1


def test_a_finished_deletions_last_write_that_fails_frees_the_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the kept DeleteTopicZnodes lands, the name is refused as marked for deletion;
    if that write fails for good (WriteCode.ERROR), the name is free all the same: the
    deletion had finished, only the config znode is left (a create overwrites it)."""
    c = cluster()
    create(c, "gone", {0: (1, 2)})
    ctl = c.controller
    deleted = c.request(lambda rid: DeleteTopics(rid, ("gone",)))
    assert isinstance(deleted, DeleteTopicsResult)
    assert [t.error_code for t in deleted.topics] == [0]
    c.feed(StopReplicaDone(1, 0, {TP("gone", 0): 0}))

    def unreachable(*_args: Any) -> None:
        raise MetadataUnavailable("injected")

    monkeypatch.setattr(ctl.store, "delete_topic", unreachable)
    c.feed(StopReplicaDone(2, 0, {TP("gone", 0): 0}))
    assert ctl.driver.pending_retries == 1
    remove_by_hand(c, "gone")
    refused = c.request(lambda rid: CreateTopics(rid, (NewTopic("gone", 1, 2),)))
    assert isinstance(refused, CreateTopicsResult)
    assert [(t.error_code, t.message) for t in refused.topics] == [
        (ErrorCode.TOPIC_ALREADY_EXISTS, "topic 'gone' is marked for deletion")]

    def fails(topic: str, *_args: Any) -> None:
        raise MetadataError(f"deleting topic {topic!r} failed: injected")

    monkeypatch.setattr(ctl.store, "delete_topic", fails)
    ctl.driver.retry_writes()
    c.pump()
    assert ctl.driver.pending_retries == 0
    assert znodes.topic_config_path("gone") in c.zk.nodes
    create(c, "gone", {0: (2, 3)})
    assert c.reader.get_topics() == {"gone"}
