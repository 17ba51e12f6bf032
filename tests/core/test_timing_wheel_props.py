"""The timing wheel against a lazy-deletion heap model, under random add/cancel/advance."""

from __future__ import annotations

import heapq
from itertools import count

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from actors.core.timing_wheel import TimerTask, TimingWheel

# Delays that straddle every level boundary of a 1 ms x 20 wheel, plus plain random ones.
BOUNDARY_DELAYS = [0, 1, 2, 19, 20, 21, 399, 400, 401, 7999, 8000, 8001, 159_999, 160_000]
DELAYS = st.one_of(
    st.sampled_from(BOUNDARY_DELAYS),
    st.integers(min_value=0, max_value=500),
    st.integers(min_value=0, max_value=400_000),
)
STEPS = st.one_of(
    st.sampled_from([0, 1, 19, 20, 400, 8000]),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=200_000),
)


class WheelVersusHeap(RuleBasedStateMachine):
    """Every task expires at the first advance at or after its deadline; cancelled never."""

    scheduled = Bundle("scheduled")

    def __init__(self) -> None:
        super().__init__()
        self.wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=0)
        self.now = 0
        self.heap: list[tuple[int, int, TimerTask]] = []
        self.seq = count()
        self.live: set[int] = set()  # ids of tasks the model expects to expire
        self.tasks: dict[int, TimerTask] = {}

    @initialize(start=st.integers(min_value=0, max_value=10**9))
    def start(self, start: int) -> None:
        self.wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=start)
        self.now = start

    @rule(target=scheduled, delay=DELAYS)
    def add(self, delay: int) -> TimerTask:
        task = TimerTask(self.now + delay)
        added = self.wheel.add(task)
        # Due within the current 1 ms tick means due now: refused, to be run at once.
        assert added == (delay >= 1)
        if added:
            heapq.heappush(self.heap, (task.expiration_ms, next(self.seq), task))
            self.live.add(id(task))
            self.tasks[id(task)] = task
        return task

    @rule(delay=DELAYS)
    def add_and_cancel(self, delay: int) -> None:
        """Completion right after scheduling: the bucket may empty at once."""
        task = TimerTask(self.now + delay)
        if self.wheel.add(task):
            assert self.wheel.cancel(task)
        assert not task.scheduled

    @rule(task=consumes(scheduled))
    def cancel(self, task: TimerTask) -> None:
        was_live = id(task) in self.live
        assert self.wheel.cancel(task) == was_live
        self.live.discard(id(task))  # the heap entry stays: lazy deletion

    @rule(step=STEPS)
    def advance(self, step: int) -> None:
        self.now += step
        expired = self.wheel.advance_clock(self.now)
        due: list[TimerTask] = []
        while self.heap and self.heap[0][0] <= self.now:
            task = heapq.heappop(self.heap)[2]
            if id(task) in self.live:
                due.append(task)
        # Never early, never a cancelled one, none left behind: the same set as the model.
        assert {id(t) for t in expired} == {id(t) for t in due}
        assert len(expired) == len(due)
        assert all(t.expiration_ms <= self.now for t in expired)
        deadlines = [t.expiration_ms for t in expired]
        assert deadlines == sorted(deadlines)
        for task in expired:
            assert not task.scheduled
            self.live.discard(id(task))

    @invariant()
    def sizes_match(self) -> None:
        assert self.wheel.size == len(self.live)

    @invariant()
    def next_expiration_is_not_after_the_earliest_deadline(self) -> None:
        next_ms = self.wheel.next_expiration_ms()
        if not self.live:
            assert next_ms is None
            return
        earliest = min(self.tasks[i].expiration_ms for i in self.live)
        assert next_ms is not None
        assert self.now < next_ms <= earliest

    @invariant()
    def nothing_due_is_still_scheduled(self) -> None:
        for i in self.live:
            assert self.tasks[i].expiration_ms > self.now
            assert self.tasks[i].scheduled


WheelVersusHeap.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
TestWheelVersusHeap = WheelVersusHeap.TestCase
