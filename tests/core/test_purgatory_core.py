"""The purgatory shard's core as a state machine: events in, effects out, no actor, no thread.

The model around it plays the Timer (fires only what is scheduled, and may
deliver an expiry that crossed its cancel) and the partition shard (answers
every watch with a fresh status, then reports changes of watched partitions,
in one ordered stream). Whatever the interleaving: every request is answered
exactly once, a partition is watched exactly while a waiting operation needs
it, and completed operations linger in watcher lists for at most
``purge_interval_requests`` operations.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from actors.core.delayed_produce_fetch import (
    FetchOutcome,
    FetchPartitionStatus,
    PartitionStatus,
    ProduceOutcome,
    ProducePartitionResponse,
    ProducePartitionStatus,
    SegmentPosition,
    TopicPartition,
)
from actors.core.purgatory_core import (
    AnswerFetch,
    AnswerProduce,
    CancelExpiry,
    Effect,
    ExpiryDue,
    FetchWaits,
    PartitionUpdated,
    ProduceWaits,
    PurgatoryCore,
    PurgatoryStats,
    ScheduleExpiry,
    UnknownPurgatoryEvent,
    UnwatchStatus,
    WatchStatus,
)
from wire.errors import ErrorCode

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
C = TopicPartition("u", 0)
PARTITIONS = (A, B, C)
BYTES_PER_RECORD = 10


def status(tp: TopicPartition, hw: int, leo: int | None = None, *, leader: bool = True,
           epoch: int = 0, isr: int = 1, min_isr: int = 1, segment: int = 0) -> PartitionStatus:
    leo = hw if leo is None else leo
    return PartitionStatus(tp.topic, tp.partition, hw, leo, leader, epoch, isr, min_isr,
                           SegmentPosition(segment, hw * BYTES_PER_RECORD),
                           SegmentPosition(segment, leo * BYTES_PER_RECORD))


def fetching(*tps: TopicPartition, offset: int = 0, max_bytes: int = 1000
             ) -> dict[TopicPartition, FetchPartitionStatus]:
    return {tp: FetchPartitionStatus(offset, SegmentPosition(0, offset * BYTES_PER_RECORD),
                                     max_bytes) for tp in tps}


def producing(*tps: TopicPartition, required: int = 5, epoch: int | None = 0
              ) -> dict[TopicPartition, ProducePartitionStatus]:
    return {tp: ProducePartitionStatus(required, required - 1, -1, 0, ErrorCode.NONE, epoch)
            for tp in tps}


# ------------------------------------------------------------------- examples
def test_a_fetch_waits_then_completes_when_enough_bytes_arrive() -> None:
    core = PurgatoryCore("p", 1000)
    effects = core.handle(FetchWaits("h", 7, 25, 500, False, fetching(A, B)), now_ms=100)
    assert effects == [ScheduleExpiry(1, 600), WatchStatus(A, 0), WatchStatus(B, 0)]
    assert core.stats() == PurgatoryStats(1, 2, 2, 0)
    assert core.handle(PartitionUpdated(status(A, 2)), now_ms=110) == []  # 20 bytes < 25
    effects = core.handle(PartitionUpdated(status(B, 1)), now_ms=120)  # 20 + 10 bytes
    assert effects == [CancelExpiry(1), UnwatchStatus(A), UnwatchStatus(B),
                       AnswerFetch("h", 7, FetchOutcome((A, B), {}, "min_bytes", False))]
    assert core.stats() == PurgatoryStats(0, 0, 1, 0)  # B's list emptied; A's entry lingers
    assert core.handle(ExpiryDue(1), now_ms=600) == []  # crossed the cancel: ignored


def test_a_fetch_expires_once_and_later_news_change_nothing() -> None:
    core = PurgatoryCore()
    core.handle(FetchWaits("h", 1, 100, 50, False, fetching(A)), now_ms=0)
    effects = core.handle(ExpiryDue(1), now_ms=50)
    assert effects == [UnwatchStatus(A),
                       AnswerFetch("h", 1, FetchOutcome((A,), {}, "timed_out", True))]
    assert core.handle(ExpiryDue(1), now_ms=51) == []
    assert core.handle(PartitionUpdated(status(A, 99)), now_ms=52) == []
    assert core.stats() == PurgatoryStats(0, 0, 0, 1)


def test_a_partition_stays_watched_until_its_last_waiting_operation_is_answered() -> None:
    core = PurgatoryCore()
    core.handle(FetchWaits("h", 1, 10, 100, False, fetching(A)), now_ms=0)
    assert core.handle(FetchWaits("h", 2, 10, 200, False, fetching(A, C, offset=3)),
                       now_ms=0) == [ScheduleExpiry(2, 200), WatchStatus(A, 3), WatchStatus(C, 3)]
    assert core.watch_counts() == {A: 2, C: 1}
    assert core.handle(ExpiryDue(1), now_ms=100) == [
        AnswerFetch("h", 1, FetchOutcome((A,), {}, "timed_out", True))]  # A still needed by 2
    assert core.handle(ExpiryDue(2), now_ms=200) == [
        UnwatchStatus(A), UnwatchStatus(C),
        AnswerFetch("h", 2, FetchOutcome((A, C), {}, "timed_out", True))]
    assert core.watch_counts() == {}


def test_a_fetch_with_min_bytes_zero_or_no_partition_is_answered_at_once() -> None:
    core = PurgatoryCore()
    assert core.handle(FetchWaits("h", 1, 0, 500, False, fetching(A)), now_ms=0) == [
        AnswerFetch("h", 1, FetchOutcome((A,), {}, "min_bytes", False))]
    assert core.handle(FetchWaits("h", 2, 1, 500, False, {}), now_ms=0) == [
        AnswerFetch("h", 2, FetchOutcome((), {}, "min_bytes", False))]
    assert core.stats() == PurgatoryStats(0, 0, 0, 0)


def test_a_produce_whose_rows_all_settled_at_append_is_answered_at_once() -> None:
    core = PurgatoryCore()
    settled = {A: ProducePartitionStatus(-1, -1, -1, -1, ErrorCode.NOT_LEADER_OR_FOLLOWER, None)}
    assert core.handle(ProduceWaits("h", 3, 1000, settled), now_ms=0) == [
        AnswerProduce("h", 3, ProduceOutcome(
            {A: ProducePartitionResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1)}, False))]
    assert core.stats() == PurgatoryStats(0, 0, 0, 0)


def test_a_produce_waits_for_the_high_watermark_and_settles_each_partition() -> None:
    core = PurgatoryCore()
    effects = core.handle(ProduceWaits("h", 4, 30_000, producing(A, B, required=5)), now_ms=0)
    assert effects == [ScheduleExpiry(1, 30_000), WatchStatus(A, -1), WatchStatus(B, -1)]
    assert core.handle(PartitionUpdated(status(A, 5)), now_ms=1) == []
    assert core.handle(PartitionUpdated(status(B, 2, leader=False)), now_ms=2) == [
        CancelExpiry(1), UnwatchStatus(A), UnwatchStatus(B),
        AnswerProduce("h", 4, ProduceOutcome({
            A: ProducePartitionResponse(ErrorCode.NONE, 4, -1, 0),
            B: ProducePartitionResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, 4, -1, 0)}, False))]


def test_a_negative_wait_counts_as_zero() -> None:
    core = PurgatoryCore()
    effects = core.handle(ProduceWaits("h", 5, -7, producing(A)), now_ms=40)
    assert effects[0] == ScheduleExpiry(1, 40)


def test_an_unknown_event_raises_and_changes_nothing() -> None:
    core = PurgatoryCore()
    core.handle(FetchWaits("h", 1, 10, 100, False, fetching(A)), now_ms=0)
    before = (core.stats(), core.watch_counts())
    with pytest.raises(UnknownPurgatoryEvent, match=r"^not a purgatory event: tuple$"):
        core.handle(("ExpiryDue", 1), now_ms=1)  # type: ignore[arg-type]
    assert (core.stats(), core.watch_counts()) == before
    # and the machine goes on as if the call had not been made
    assert core.handle(ExpiryDue(1), now_ms=100)[-1].req_id == 1  # type: ignore[union-attr]


# ------------------------------------------------------------ state machine
class PurgatoryMachine(RuleBasedStateMachine):
    """Random waits, partition changes, removals and expiries against a model of the world."""

    @initialize(purge_interval=st.integers(0, 4))
    def start(self, purge_interval: int) -> None:
        self.purge_interval = purge_interval
        self.core = PurgatoryCore("m", purge_interval)
        self.now = 0
        self.next_req = 1
        # the partitions as their shard sees them: [hw, leo, leader, epoch, isr, segment]
        self.world: dict[TopicPartition, list[int]] = {tp: [0, 0, 1, 0, 1, 0] for tp in PARTITIONS}
        self.subscribed: set[TopicPartition] = set()  # the shard's watcher set for us
        self.to_deliver: deque[PartitionStatus] = deque()  # the shard -> purgatory stream
        self.timer: dict[int, int] = {}  # op id -> deadline, scheduled and not cancelled
        self.crossed: list[int] = []  # op ids whose expiry may still cross a cancel
        self.kind: dict[int, str] = {}  # req id -> "fetch" / "produce"
        self.partitions_of: dict[int, tuple[TopicPartition, ...]] = {}
        self.keys_of: dict[int, tuple[TopicPartition, ...]] = {}  # req id -> watched keys
        self.op_of: dict[int, int] = {}  # op id -> req id
        self.answers: dict[int, list[Any]] = {}

    # -- the world around the core ---------------------------------------------
    def _status(self, tp: TopicPartition) -> PartitionStatus:
        hw, leo, leader, epoch, isr, segment = self.world[tp]
        return status(tp, hw, leo, leader=bool(leader), epoch=epoch, isr=isr, segment=segment)

    def _run(self, event: Any) -> list[Effect]:
        effects = self.core.handle(event, self.now)
        req = event.req_id if isinstance(event, (FetchWaits, ProduceWaits)) else None
        for fx in effects:
            if isinstance(fx, ScheduleExpiry):
                assert req is not None and fx.op_id not in self.op_of
                assert fx.deadline_ms >= self.now
                self.timer[fx.op_id] = fx.deadline_ms
                self.op_of[fx.op_id] = req
            elif isinstance(fx, CancelExpiry):
                assert self.timer.pop(fx.op_id, None) is not None, "cancel of no timer"
                self.crossed.append(fx.op_id)
            elif isinstance(fx, WatchStatus):
                self.subscribed.add(fx.partition)
                self.to_deliver.append(self._status(fx.partition))  # answered at once
            elif isinstance(fx, UnwatchStatus):
                assert fx.partition in self.subscribed, "unwatch of an unwatched partition"
                self.subscribed.discard(fx.partition)
            else:
                assert isinstance(fx, (AnswerFetch, AnswerProduce))
                assert fx.requester == "h"
                assert isinstance(fx, AnswerFetch) == (self.kind[fx.req_id] == "fetch")
                # the deadline answers with timed_out, anything else without
                assert fx.outcome.timed_out == isinstance(event, ExpiryDue)
                if isinstance(fx, AnswerProduce):
                    assert set(fx.outcome.responses) == set(self.partitions_of[fx.req_id])
                self.answers.setdefault(fx.req_id, []).append(fx)
        return effects

    # -- rules --------------------------------------------------------------------
    @rule(parts=st.lists(st.sampled_from(PARTITIONS), unique=True, max_size=3),
          behind=st.integers(0, 3), min_bytes=st.integers(0, 60), wait=st.integers(-5, 300),
          follower=st.booleans())
    def fetch(self, parts: list[TopicPartition], behind: int, min_bytes: int, wait: int,
              follower: bool) -> None:
        req = self.next_req
        self.next_req += 1
        rows = {}
        for tp in parts:
            hw, leo, _leader, _epoch, _isr, segment = self.world[tp]
            offset = max(0, (leo if follower else hw) - behind)
            rows[tp] = FetchPartitionStatus(offset, SegmentPosition(segment,
                                                                    offset * BYTES_PER_RECORD), 40)
        self.kind[req], self.partitions_of[req] = "fetch", tuple(parts)
        self.keys_of[req] = tuple(parts)
        self._run(FetchWaits("h", req, min_bytes, wait, follower, rows))

    @rule(parts=st.lists(st.tuples(st.sampled_from(PARTITIONS), st.integers(0, 4), st.booleans()),
                         unique_by=lambda r: r[0], max_size=3),
          timeout=st.integers(-5, 300))
    def produce(self, parts: list[tuple[TopicPartition, int, bool]], timeout: int) -> None:
        req = self.next_req
        self.next_req += 1
        rows = {}
        for tp, ahead, failed in parts:
            if failed:
                rows[tp] = ProducePartitionStatus(-1, -1, -1, -1, ErrorCode.KAFKA_STORAGE_ERROR)
            else:
                required = self.world[tp][1] + ahead
                rows[tp] = ProducePartitionStatus(required, required - 1, -1, 0, ErrorCode.NONE,
                                                  self.world[tp][3])
        self.kind[req], self.partitions_of[req] = "produce", tuple(rows)
        self.keys_of[req] = tuple(tp for tp, _ahead, failed in parts if not failed)
        self._run(ProduceWaits("h", req, timeout, rows))

    @rule(tp=st.sampled_from(PARTITIONS), appended=st.integers(0, 3), committed=st.integers(0, 3))
    def append(self, tp: TopicPartition, appended: int, committed: int) -> None:
        w = self.world[tp]
        w[1] += appended
        w[0] = min(w[1], w[0] + committed)
        if tp in self.subscribed:
            self.to_deliver.append(self._status(tp))

    @rule(tp=st.sampled_from(PARTITIONS),
          change=st.sampled_from(["removed", "back", "new_epoch", "isr_shrinks", "roll"]))
    def partition_changes(self, tp: TopicPartition, change: str) -> None:
        w = self.world[tp]
        if change == "removed":
            w[2] = 0
        elif change == "back":
            w[2], w[4] = 1, 1
        elif change == "new_epoch":
            w[3] += 1
        elif change == "isr_shrinks":
            w[4] = 0
        else:
            w[5] += 1
        if tp in self.subscribed:
            self.to_deliver.append(self._status(tp))

    @rule(count=st.integers(1, 4))
    def shard_reports(self, count: int) -> None:
        for _ in range(min(count, len(self.to_deliver))):
            self._run(PartitionUpdated(self.to_deliver.popleft()))

    @rule(tp=st.sampled_from(PARTITIONS))
    def stale_report_of_any_partition(self, tp: TopicPartition) -> None:
        """A report sent before our unwatch arrived at the shard, or of an old state."""
        self._run(PartitionUpdated(self._status(tp)))

    @rule(ms=st.integers(0, 150))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self._fire_due()

    @rule(data=st.data())
    def an_expiry_crosses_its_cancel(self, data: st.DataObject) -> None:
        if self.crossed:
            op_id = data.draw(st.sampled_from(self.crossed))
            assert self._run(ExpiryDue(op_id)) == []

    @rule(op_id=st.integers(1_000_000, 1_000_010))
    def an_expiry_of_an_unknown_operation(self, op_id: int) -> None:
        assert self._run(ExpiryDue(op_id)) == []

    def _fire_due(self) -> None:
        for op_id, deadline in sorted(self.timer.items(), key=lambda kv: kv[1]):
            if deadline <= self.now and op_id in self.timer:
                del self.timer[op_id]
                self._run(ExpiryDue(op_id))

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def answered_at_most_once_and_the_rest_waits(self) -> None:
        if not hasattr(self, "core"):
            return
        assert all(len(a) == 1 for a in self.answers.values())
        waiting = [r for r in range(1, self.next_req) if r not in self.answers]
        assert self.core.waiting == len(waiting)
        assert len(self.core._id_of) == len(waiting)  # nothing kept of an answered operation
        # every waiting request has exactly one live timer
        assert sorted(self.op_of[op] for op in self.timer) == waiting

    @invariant()
    def watched_exactly_while_needed(self) -> None:
        if not hasattr(self, "core"):
            return
        need: dict[TopicPartition, int] = {}
        for req in range(1, self.next_req):
            if req not in self.answers:
                for tp in self.keys_of[req]:
                    need[tp] = need.get(tp, 0) + 1
        assert self.core.watch_counts() == need
        assert self.subscribed == set(need)

    @invariant()
    def completed_operations_linger_within_the_purge_interval(self) -> None:
        if not hasattr(self, "core"):
            return
        assert self.core.purgatory.lingering() <= self.purge_interval

    def teardown(self) -> None:
        if not hasattr(self, "core"):
            return
        # Let the world run out: every report delivered, every deadline passed.
        while self.to_deliver:
            self._run(PartitionUpdated(self.to_deliver.popleft()))
        self.now += 10_000
        self._fire_due()
        assert sorted(self.answers) == list(range(1, self.next_req))
        assert all(len(a) == 1 for a in self.answers.values())
        assert self.core.waiting == 0 and self.core.watch_counts() == {}
        assert self.subscribed == set() and self.timer == {}


PurgatoryMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60,
                                              deadline=None)
test_purgatory_state_machine = PurgatoryMachine.TestCase
