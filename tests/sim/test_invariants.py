"""The invariant checker catches what it claims to: each check against a state broken by hand."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kafka.record.memory_records import MemoryRecords

from actors.core.cluster_model import LeaderAndIsr, TopicPartition
from actors.core.partition_log import UnflushedAppendError
from actors.metadata import znodes
from actors.sim.clients import OFFSET_COMMIT, Ack, History, SimGroupMember
from actors.sim.disk import SimDisk
from actors.sim.invariants import EXPIRY_GRACE_MS, Checker, StorageFailure, Violation
from actors.sim.run import SimOptions, _Run


@pytest.fixture
def run(tmp_path: Path) -> Iterator[_Run]:
    with SimDisk(tmp_path, random.Random(1)) as disk:
        sim = _Run(5, SimOptions(), tmp_path, disk)
        sim.start()
        sim.world.run_for_ms(8_000)
        sim.checker.check()  # holds before anything is broken
        yield sim
        sim.close()


def leading_state(run: _Run) -> tuple[int, object]:
    for broker_id, broker in sorted(run.cluster.brokers.items()):
        for shard in broker.shards():
            for (topic, _p), state in sorted(shard.partitions.items()):
                if state.leader_id == broker_id and topic == "events":
                    return broker_id, state
    raise AssertionError("no leader of events")


def test_a_leader_epoch_going_back_is_caught(run: _Run) -> None:
    _broker, state = leading_state(run)
    state.leader_epoch -= 1  # type: ignore[attr-defined]
    with pytest.raises(Violation, match="leader epochs only grow"):
        run.checker.check()


def test_two_leaders_in_one_leader_epoch_are_caught(run: _Run) -> None:
    broker_id, state = leading_state(run)
    for other_id, broker in sorted(run.cluster.brokers.items()):
        if other_id == broker_id:
            continue
        for shard in broker.shards():
            for key, other in shard.partitions.items():
                if key == (state.log.topic, state.log.partition):  # type: ignore[attr-defined]
                    other.leader_id = other_id
                    other.leader_epoch = state.leader_epoch  # type: ignore[attr-defined]
                    with pytest.raises(Violation, match="one leader per leader epoch"):
                        run.checker.check()
                    return
    raise AssertionError("no follower replica found")


def test_a_second_active_controller_in_one_epoch_is_caught(run: _Run) -> None:
    active = [b for b in run.cluster.brokers
              if (c := run.cluster.controller_actor(b)) is not None and c.driver.active]
    assert len(active) == 1
    fence = run.cluster.controller_actor(active[0]).driver.fence  # type: ignore[union-attr]
    other = next(b for b in run.cluster.brokers if b != active[0])
    run.cluster.controller_actor(other).driver.fence = fence  # type: ignore[union-attr]
    with pytest.raises(Violation, match="one active controller per epoch"):
        run.checker.check()


def test_an_acks_all_record_missing_from_its_leader_is_caught(run: _Run) -> None:
    run.checker.check_data()
    ack = next(a for a in run.history.acks if a.acks == -1)
    ack.values[0] = b"never written"
    with pytest.raises(Violation, match="acknowledged records are readable"):
        run.checker.check_data()


def test_an_acks_1_record_missing_is_counted_not_a_violation(run: _Run) -> None:
    ack = next(a for a in run.history.acks if a.acks == 1)
    ack.values[0] = b"never written"
    run.checker.check_data()
    assert run.checker.counted["acks1_lost"] == 1


def test_a_high_watermark_going_back_is_caught_unless_a_crashed_replica_took_over(
        run: _Run) -> None:
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    topic, p = log.topic, log.partition
    assert log.high_watermark > 0
    key = (broker_id, run.cluster.brokers[broker_id].lives, topic, p)
    run.checker.node_high_watermarks[key] = log.high_watermark + 5
    with pytest.raises(Violation, match="the high watermark never goes back"):
        run.checker.check()
    # The same drop after its leader crashed (after the watermark got there) and came back,
    # leading from an offset at or below where the watermark is now: the double failure
    # Kafka does not promise to survive; counted.
    run.checker.node_high_watermarks[key] = log.high_watermark + 5
    run.checker.committed_ms[(topic, p)] = [(log.high_watermark + 5, 0.0, 0.5)]
    run.checker.crash_times_ms[broker_id] = [1.0]
    epoch = state.leader_epoch  # type: ignore[attr-defined]
    run.checker.leaderships[(topic, p, epoch)] = [(broker_id, 2, 0, 2.0)]
    run.checker.check()
    assert run.checker.counted["hw_back_after_crash_election"] == 1


def test_a_crash_before_the_commit_excuses_only_a_log_that_held_the_offset() -> None:
    """Seed 145 (12 steps, every fault): broker 2 led events-1 in epoch 0; broker 1 fetched
    to 56 and crashed at 19030 ms with 49-55 unflushed; broker 2, not knowing, shrank the ISR
    to [1, 2] at 19689 ms and so committed 56 on broker 1's last fetch; its session expired
    and the controller elected broker 1 (still registered), which came back at 49 and led
    epoch 3 from there: broker 2's high watermark went from 56 to 49. The crash came before
    the commit, so 'crashed after it was committed' did not excuse it; the crash lost what
    its log held, which Kafka does not keep either (acks=all is not fsync)."""
    checker = Checker(cast(Any, None), History(), {"events": 3})
    checker.leaderships = {("events", 1, 0): [(2, 1, 0, 2200.0)],
                           ("events", 1, 3): [(1, 2, 49, 35400.0)]}
    checker.committed_ms = {("events", 1): [(40, 17800.0, 18000.0), (56, 19600.0, 19800.0)]}
    checker.written_ms = {("events", 1): [(54, 18000.0, 18200.0), (56, 18400.0, 18600.0)]}
    checker.crash_times_ms = {1: [19030.2]}
    checker.ends_at_crash = {1: [(19030.2, {("events", 1): 56})]}
    assert checker._lost_to_crash_election("events", 1, 49)
    assert checker._lost_to_crash_election("events", 1, 55)
    # the crashed log did not reach the offset: the crash cannot have lost it
    checker.ends_at_crash = {1: [(19030.2, {("events", 1): 49})]}
    assert not checker._lost_to_crash_election("events", 1, 49)
    # a crash before the record was written: it lost nothing of it
    checker.ends_at_crash = {1: [(18100.0, {("events", 1): 56})]}
    checker.crash_times_ms = {1: [18100.0]}
    assert not checker._lost_to_crash_election("events", 1, 55)
    # no crash at all (seed 80's zombie leader truncated by a clean election): a violation
    checker.ends_at_crash, checker.crash_times_ms = {}, {}
    assert not checker._lost_to_crash_election("events", 1, 49)


def test_a_high_watermark_going_back_is_caught_when_the_crashed_leader_never_held_it(
        run: _Run) -> None:
    """The excuse of a crash before the commit needs the crashed log to have held the
    offset; without that, the drop is a real regression."""
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    topic, p = log.topic, log.partition
    hw = log.high_watermark
    key = (broker_id, run.cluster.brokers[broker_id].lives, topic, p)
    epoch = state.leader_epoch  # type: ignore[attr-defined]
    checker = run.checker
    checker.leaderships[(topic, p, epoch)] = [(broker_id, 2, 0, 2.0)]
    checker.committed_ms[(topic, p)] = [(hw + 5, 1.5, 1.6)]
    checker.written_ms[(topic, p)] = [(hw + 5, 0.0, 0.2)]
    checker.crash_times_ms[broker_id] = [1.0]  # before the commit, after the write
    checker.ends_at_crash[broker_id] = [(1.0, {(topic, p): hw})]
    checker.node_high_watermarks[key] = hw + 5
    with pytest.raises(Violation, match="the high watermark never goes back"):
        checker.check()
    checker.ends_at_crash[broker_id] = [(1.0, {(topic, p): hw + 5})]
    checker.node_high_watermarks[key] = hw + 5
    checker.check()
    assert checker.counted["hw_back_after_crash_election"] == 1


def test_replicas_disagreeing_below_the_high_watermark_are_caught(run: _Run) -> None:
    run.checker.check_replicas_agree()
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    logs = run.checker._logs()
    hws = run.checker._high_watermarks()
    follower = next(b for (b, t, q) in logs if (t, q) == (log.topic, log.partition)
                    and b != broker_id and hws[(b, t, q)] > 0)
    real = run.checker._logs

    def forged() -> dict:  # type: ignore[type-arg]
        out = real()
        records = out[(follower, log.topic, log.partition)]
        pid, seq, _value = records[min(records)]
        records[min(records)] = (pid, seq, b"forged")
        return out

    run.checker._logs = forged  # type: ignore[method-assign]
    with pytest.raises(Violation, match="replicas agree below the high watermark"):
        run.checker.check_replicas_agree()


def test_a_live_replica_out_of_the_isr_after_the_run_settled_is_caught(run: _Run) -> None:
    run.checker.check_replicas_back()   # all back, eight seconds in
    broker_id, state = leading_state(run)
    follower = min(set(state.replicas) - {broker_id})  # type: ignore[attr-defined]
    state.isr.discard(follower)  # type: ignore[attr-defined]
    with pytest.raises(Violation, match=rf"live replicas \[{follower}\] out of the ISR"):
        run.checker.check_replicas_back()


def test_the_run_settles_past_a_lost_fetch_s_timeout(run: _Run) -> None:
    # replica.socket.timeout.ms (30 s) after the heal, 5 s to catch up; produce 5 s first
    assert run.settle_ms() == 30_000 - 5_000 + 5_000
    run.options.settle_ms = 40_000
    assert run.settle_ms() == 40_000
    run.options.settle_ms, run.options.caught_up_ms = 20_000, None
    assert run.settle_ms() == 20_000


def test_an_actor_crash_is_caught(run: _Run) -> None:
    node = run.world.nodes["node-1"]
    node.metrics.incr("actor_crashes")
    with pytest.raises(Violation, match="no actor crashes"):
        run.checker.check()


def test_a_parked_operation_is_owed_an_answer_only_once_its_wait_ran_out(run: _Run) -> None:
    # seed 5000's finding: replica fetches long-poll to the very end of a run, so each
    # follower's last fetch is rightly still parked (max_wait_ms 500) when the run stops
    run.checker.check_settled_purgatory()  # the fetches parked right now are not due
    node = run.world.nodes["node-1"]
    now_ms = run.world.kernel.now_ns / 1_000_000
    waiting = (node.name, node.incarnation, "handler-0/fetch", 10**9)
    run.checker.parked[waiting] = 0
    run.checker.deadlines_ms[waiting] = now_ms + 500
    run.checker.check_settled_purgatory()
    run.checker.deadlines_ms[waiting] = now_ms - 500 - EXPIRY_GRACE_MS
    with pytest.raises(Violation, match="never answered"):
        run.checker.check_settled_purgatory()


def test_an_acknowledgement_is_dated_with_the_leader_epoch_its_batch_carries(
        run: _Run) -> None:
    checked = 0
    for ack in run.history.acks:
        broker = run.cluster.brokers[ack.broker_id]
        if broker.lives != ack.broker_life or broker.state != "up":
            continue
        for shard in broker.shards():
            state = shard.partitions.get((ack.topic, ack.partition))
            if state is None or state.log.log_end_offset <= ack.base_offset:
                continue
            records = MemoryRecords(bytes(state.log.read(ack.base_offset, 1 << 20).records))
            while (batch := records.next_batch()) is not None:
                if batch.base_offset == ack.base_offset:
                    assert ack.leader_epoch == batch.leader_epoch >= 0, ack
                    checked += 1
    assert checked > 10


def test_an_answer_whose_leader_crashed_before_it_arrived_is_dated_from_the_crash(
        run: _Run) -> None:
    """The answer left the leader, the leader crashed, then the answer arrived: dated with
    the leader's epoch cache as it was at the crash, not with the checks every 200 ms."""
    ack = next(a for a in reversed(run.history.acks)
               if run.cluster.brokers[a.broker_id].lives == a.broker_life)
    broker = run.cluster.brokers[ack.broker_id]
    state = next(shard.partitions[(ack.topic, ack.partition)] for shard in broker.shards()
                 if (ack.topic, ack.partition) in shard.partitions)
    records = MemoryRecords(bytes(state.log.read(ack.base_offset, 1 << 20).records))
    batch = records.next_batch()
    assert batch is not None and batch.base_offset == ack.base_offset
    run.checker.note_crash(ack.broker_id)
    run.cluster.crash(ack.broker_id)
    late = dataclasses.replace(ack, leader_epoch=-1)
    run.checker.note_ack(late)
    assert late.leader_epoch == batch.leader_epoch >= 0
    run.cluster.start(ack.broker_id)   # its next life
    later = dataclasses.replace(ack, leader_epoch=-1)
    run.checker.note_ack(later)
    assert later.leader_epoch == batch.leader_epoch
    assert run.checker.acks_dated_at_crash == 2
    other_life = dataclasses.replace(ack, leader_epoch=-1, broker_life=ack.broker_life + 1)
    run.checker.note_ack(other_life)   # nothing known of a life that did not crash
    assert other_life.leader_epoch == -1


def test_a_crash_election_is_judged_from_the_epoch_an_ack_was_written_in() -> None:
    """Seed 5 (gateway, crash and expire faults, two acks=all producers): broker 1 moved to
    leader epoch 1 at offset 44 and acknowledged a record there 57 ms before the first check
    that saw epoch 1. Dated by the checks alone, the record was epoch 0's, the first
    leadership after it broker 1's own epoch 1 (no crash: a violation); it was epoch 1's,
    and the first leadership after that, epoch 3, went to broker 3, which had lost the
    record's offset with its unflushed tail at a crash before it led."""
    checker = Checker(cast(Any, None), History(), {"events": 3})
    checker.leaderships = {("events", 1, 0): [(1, 1, 0, 2200.0)],
                           ("events", 1, 1): [(1, 1, 44, 5400.0)],
                           ("events", 1, 3): [(3, 3, 42, 19200.0)]}
    checker.crash_times_ms = {3: [6129.9, 12867.6], 1: [9698.4], 2: [11574.7]}
    ack = Ack("events", 1, 44, [b"v"], 1, 1, 7, 0, 5_343_000_000, acks=-1)

    def excused() -> bool:
        return checker._crash_election("events", 1, 44, 5329.0, after=(
            checker._ack_epoch(ack), ack.broker_id, ack.broker_life))

    assert checker._ack_epoch(ack) == 0 and not excused()  # undated: the checks' guess
    ack.leader_epoch = 1  # as note_ack dates it
    assert checker._ack_epoch(ack) == 1 and excused()
    # the crash must fall between the record's making and the election: without it, no excuse
    checker.crash_times_ms[3] = [20000.0]
    assert not excused()


def test_a_fetched_record_carries_the_leader_epoch_of_its_batch(run: _Run) -> None:
    consumed = [c for seen in run.history.consumed.values() for c in seen]
    assert consumed and all(epoch >= 0 for *_rest, epoch in consumed)


def test_a_crash_election_is_judged_from_the_epoch_a_fetched_record_was_written_in() -> None:
    """Seed 20 (seed 5's options): broker 2 led audit-0 in leader epoch 1 from offset 53 and
    the consumer read a record there from it; broker 1, in the ISR, had lost that offset at a
    crash when the controller moved leadership back to it (epoch 2, then 5 from offset 44).
    Judged from the record's making alone, the first leadership after it was broker 2's own
    epoch 1 (no crash: a violation); the record's batch says epoch 1, the first leadership
    after that is broker 1's crash election."""
    checker = Checker(cast(Any, None), History(), {"audit": 2})
    checker.leaderships = {("audit", 0, 0): [(1, 1, 0, 2200.0)],
                           ("audit", 0, 1): [(2, 1, 53, 11800.0)],
                           ("audit", 0, 5): [(1, 3, 44, 19400.0)]}
    checker.crash_times_ms = {1: [5532.6, 13091.5, 22635.0], 3: [20945.9]}
    assert not checker._crash_election("audit", 0, 53, 5916.0)
    after = checker._written_in("audit", 0, 1, 2, 1)
    assert after == (1, 2, 1)
    assert checker._crash_election("audit", 0, 53, 5916.0, after=after)
    # fetched from another broker than the epoch's leader (a follower, or a later leader
    # that fetched it): the first leader seen in that epoch wrote it
    assert checker._written_in("audit", 0, 1, 1, 3) == (1, 2, 1)
    assert checker._written_in("audit", 0, 4, 1, 3) == (4, -1, -1)  # an epoch never seen
    assert checker._written_in("audit", 0, -1, 2, 1) == (-1, -1, -1)


# ------------------------------------------------------------------ failed storage
def test_a_failed_fsync_excuses_a_loss_only_where_its_replica_then_led_alone() -> None:
    """Broker 1's fsync of events-1 failed at 6000 ms; it led events-1 at epoch 3 from 40
    afterwards. That excuses losing 44 only if it led an ISR of itself alone when it failed
    (nobody else had the record), and only for events-1: not the loss of a record of events-0, where
    broker 1 next led too (a broker-wide excuse, as a crash's, let a healthy ISR member's
    records go unnoticed)."""
    checker = Checker(cast(Any, None), History(), {"events": 3})
    checker.leaderships = {("events", 1, 2): [(2, 1, 0, 2200.0)],
                           ("events", 1, 3): [(1, 1, 40, 9000.0)],
                           ("events", 0, 2): [(2, 1, 0, 2200.0)],
                           ("events", 0, 3): [(1, 1, 40, 9000.0)]}
    checker.storage_failures = {(1, "events", 1): [StorageFailure(6000.0, False)]}
    assert not checker._crash_election("events", 1, 44, 5000.0)  # another ISR member had it
    checker.storage_failures = {(1, "events", 1): [StorageFailure(6000.0, True)]}
    assert checker._crash_election("events", 1, 44, 5000.0)
    assert not checker._crash_election("events", 0, 44, 5000.0)  # not the failed log
    assert not checker._crash_election("events", 1, 44, 6500.0)  # failed before the record


def test_a_failed_fsync_excuses_a_high_watermark_going_back_once_on_its_partition(
        run: _Run) -> None:
    """Only the first check after the shard reopened the failed log excuses its high
    watermark going back, and only on that partition: not a later drop, not another
    partition's on the same shard (a shard-wide, cumulative excuse hid every later one)."""
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    topic, p = log.topic, log.partition
    lives = run.cluster.brokers[broker_id].lives
    key = (broker_id, lives, topic, p)
    checker = run.checker
    checker.note_storage_failure(broker_id, topic, p)
    assert checker.failed_logs[key] is log
    # another partition of the same broker: not excused
    others = [(k, s) for sh in run.cluster.brokers[broker_id].shards()
              for k, s in sh.partitions.items() if k != (topic, p)]
    assert others
    (o_topic, o_p), other = others[0]
    o_key = (broker_id, lives, o_topic, o_p)
    checker.node_high_watermarks[o_key] = other.log.high_watermark + 5
    with pytest.raises(Violation, match="the high watermark never goes back"):
        checker.check()
    checker.node_high_watermarks[o_key] = other.log.high_watermark
    # the failed log, not reopened yet: not excused
    checker.node_high_watermarks[key] = log.high_watermark + 5
    with pytest.raises(Violation, match="the high watermark never goes back"):
        checker.check()
    # reopened (another log object): excused once
    checker.failed_logs[key] = object()
    checker.node_high_watermarks[key] = log.high_watermark + 5
    checker.check()
    assert checker.counted["hw_back_after_storage_failure"] == 1
    checker.node_high_watermarks[key] = log.high_watermark + 5
    with pytest.raises(Violation, match="the high watermark never goes back"):
        checker.check()


def test_a_failed_fsync_excuses_leader_epoch_minus_one_only_until_its_next_role(
        run: _Run) -> None:
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    topic, p = log.topic, log.partition
    epoch = state.leader_epoch  # type: ignore[attr-defined]
    checker = run.checker
    key = (broker_id, run.cluster.brokers[broker_id].lives, topic, p)
    checker.failed_logs[key] = object()  # the shard reopened the failed log
    state.leader_epoch = -1  # type: ignore[attr-defined]
    checker.check()
    checker.check()  # still waiting for its role
    state.leader_epoch = epoch  # type: ignore[attr-defined]
    checker.check()  # its role again
    state.leader_epoch = -1  # type: ignore[attr-defined]
    with pytest.raises(Violation, match="leader epochs only grow"):
        checker.check()


def _set_zk_state(run: _Run, tp: TopicPartition, state: LeaderAndIsr) -> None:
    node = run.cluster.zk.nodes[znodes.partition_state_path(tp)]
    node.data = znodes.encode_partition_state(state)


def test_an_offline_partition_is_excused_only_for_a_replica_still_failed(run: _Run) -> None:
    """Offline with an ISR of a replica known failed: excused (Kafka's outcome), until the
    checker saw that replica healed (back in an ISR led by another broker at a newer
    leader epoch, its shard's mark gone): taken offline after that, it is a healthy
    replica wrongly taken offline (a stale report acted on), a violation."""
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    tp = TopicPartition(log.topic, log.partition)
    epoch = state.leader_epoch  # type: ignore[attr-defined]
    others = [r for r in state.replicas if r != broker_id]  # type: ignore[attr-defined]
    r = others[0]
    checker = run.checker
    key = (r, tp.topic, tp.partition)
    checker.storage_failures[key] = [StorageFailure(1.0, False, epoch, 0)]
    active = [b for b in sorted(run.cluster.brokers)
              if (c := run.cluster.controller_actor(b)) is not None and c.driver.active]
    controller = run.cluster.controller_actor(active[0])
    assert controller is not None
    controller.driver.core.failed_replicas[tp] = {r: epoch}
    # not healed: in an ISR at the failure's leader epoch only
    checker._note_healed(tp, LeaderAndIsr(broker_id, epoch, (broker_id, r), 1))
    assert key not in checker.storage_healed
    _set_zk_state(run, tp, LeaderAndIsr(-1, epoch + 1, (r,), 1))
    checker.zk_leader_epochs[tp] = (epoch + 1, -1)  # as the last check saw it
    checker.check_live()
    assert checker.counted["offline_after_storage_failure"] == 1
    # its shard still marked: not healed
    [shard] = [sh for sh in run.cluster.brokers[r].shards()
               if (tp.topic, tp.partition) in sh.partitions]
    shard.hosted[(tp.topic, tp.partition)].storage_failed = "a flush failed"
    checker._note_healed(tp, LeaderAndIsr(broker_id, epoch + 1, (broker_id, r), 1))
    assert key not in checker.storage_healed
    shard.hosted[(tp.topic, tp.partition)].storage_failed = None
    checker._note_healed(tp, LeaderAndIsr(broker_id, epoch + 1, (broker_id, r), 1))
    assert key in checker.storage_healed
    with pytest.raises(Violation, match="every partition has a live leader"):
        checker.check_live()
    # failing again: excused again
    checker.note_storage_failure(r, tp.topic, tp.partition)
    assert key not in checker.storage_healed


def test_a_fetched_record_lost_to_its_servers_fsync_is_excused_only_above_what_it_synced(
        run: _Run) -> None:
    broker_id, state = leading_state(run)
    log = state.log  # type: ignore[attr-defined]
    tp = TopicPartition(log.topic, log.partition)
    checker = run.checker
    checker.storage_failures[(broker_id, tp.topic, tp.partition)] = [
        StorageFailure(5000.0, False, 0, 30)]
    _set_zk_state(run, tp, LeaderAndIsr(-1, 9, (broker_id,), 1))
    assert checker._lost_to_own_storage_failure(broker_id, tp.topic, tp.partition, 30, 4000.0)
    assert checker._lost_to_own_storage_failure(broker_id, tp.topic, tp.partition, 31, 4000.0)
    # synced before the failure: no fsync failure loses it
    assert not checker._lost_to_own_storage_failure(broker_id, tp.topic, tp.partition, 29,
                                                    4000.0)
    # made after the failure
    assert not checker._lost_to_own_storage_failure(broker_id, tp.topic, tp.partition, 40,
                                                    5500.0)


def test_only_a_restart_for_a_failed_flush_is_an_excused_actor_crash(run: _Run) -> None:
    """A shard's restart for a FlushFailedError is the failed flush's mending; any other
    crash of an actor on that node is still caught (counting flush failures instead, a
    crash of another kind was excused by a failure that restarted nothing)."""
    node = run.world.nodes["node-1"]
    broker = next(b for b in run.cluster.brokers.values() if b.node is node)
    shard = broker.shards()[0]
    node.metrics.incr("actor_crashes")
    shard.restarts_by_cause[UnflushedAppendError] = 1  # a FlushFailedError
    run.checker.check()
    node.metrics.incr("actor_crashes")
    shard.restarts_by_cause[RuntimeError] = 1
    shard.flush_failures += 1  # a failure counted, but its restart was not for it
    with pytest.raises(Violation, match="no actor crashes"):
        run.checker.check()


def _refetch_offsets(run: _Run, member: SimGroupMember, ms: int = 6_000) -> None:
    """Make ``member`` find its coordinator, join and fetch its committed offsets again."""
    member.coordinator, member.phase = None, "find"
    for _ in range(ms // 50):
        run.world.run_for_ms(50)
        if member.phase == "stable":
            return
    raise AssertionError(f"{member.name} did not rejoin: {member.phase}")


def test_an_offset_fetched_as_committed_that_no_member_committed_is_caught(run: _Run) -> None:
    member = run.members[0]
    assert member.phase == "stable" and run.history.committed
    run.history.committed.clear()  # the group's coordinator now holds offsets nobody sent
    with pytest.raises(Violation, match="committed offsets are the group's"):
        _refetch_offsets(run, member)
        run.checker.check()


def test_a_commit_applied_whose_answer_was_lost_is_a_committed_offset(run: _Run) -> None:
    """Kafka may apply an OffsetCommit whose answer never reaches the member (the
    connection broke after the append): the offset is the group's all the same, as the
    checker records a commit when it is sent. Here every commit answer is lost; the member
    takes it as a broken connection, rejoins and fetches what it committed."""
    member = run.members[0]
    before = {tp: set(offsets) for tp, offsets in run.history.committed.items()}
    sent = member.send_request
    lost: list[dict[tuple[str, int], int]] = []

    def answer_lost(broker_id: int, api_key: int, version: int, values: dict[str, Any],
                    callback: Callable[[Any], None]) -> None:
        if api_key == OFFSET_COMMIT:
            lost.append({(t["name"], p["partition_index"]): p["committed_offset"]
                         for t in values["topics"] for p in t["partitions"]})
            sent(broker_id, api_key, version, values, lambda _response: callback(None))
        else:
            sent(broker_id, api_key, version, values, callback)

    def fetched_lost() -> bool:
        """Whether the member's position is an offset only a lost commit sent."""
        return any(member.positions[tp] == offset and offset not in before.get(tp, ())
                   for commit in lost for tp, offset in commit.items())

    member.send_request = answer_lost  # type: ignore[method-assign]
    for _ in range(200):  # 10 simulated s at most
        run.world.run_for_ms(50)
        if lost and member.phase == "stable" and fetched_lost():
            break
    assert lost, "no commit sent"
    assert member.phase == "stable"
    assert fetched_lost(), (before, lost, member.positions)
    run.checker.check()  # no "committed offsets are the group's"


def test_a_cluster_does_not_start_over_an_earlier_run_s_logs(run: _Run) -> None:
    """The brokers of a run over a directory an earlier run wrote in would serve that run's
    logs with a new (empty) ZooKeeper: its group's committed offsets as this run's (a
    group "fetched committed offset 178 of audit-1, which no member committed", seed 1
    run twice in one directory). Refused at once."""
    with pytest.raises(ValueError, match="node-1 exists"):
        _Run(5, SimOptions(), run.cluster.root, run.cluster.disk)
