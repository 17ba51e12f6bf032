"""Delayed operation model and purgatory core, on a manual clock."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from actors.core.delayed_operation import (
    DelayedOperation,
    DelayedOperationPurgatory,
    EmptyWatchKeysError,
    OperationCompletedError,
    OperationWatchedError,
)
from actors.core.timing_wheel import TimingWheel


class WaitFor(DelayedOperation):
    """Completes once any watched key reports a value >= ``target``."""

    __slots__ = ("completions", "expirations", "seen", "target")

    def __init__(self, deadline_ms: int, target: int = 1) -> None:
        super().__init__(deadline_ms)
        self.target = target
        self.seen = -1
        self.completions = 0
        self.expirations = 0

    def observe(self, key: Hashable, status: Any) -> None:
        self.seen = max(self.seen, status)

    def try_complete(self) -> bool:
        return self.seen >= self.target and self.force_complete()

    def on_complete(self) -> None:
        self.completions += 1
        self.outcome = ("timed_out" if self.timed_out else "done", self.seen)

    def on_expiration(self) -> None:
        self.expirations += 1


class Shell:
    """What the actor shells do, in one thread: purgatory plus the Timer's wheel."""

    def __init__(self, purge_interval_requests: int = 1000) -> None:
        self.purgatory = DelayedOperationPurgatory("test", purge_interval_requests)
        self.wheel: TimingWheel[DelayedOperation] = TimingWheel(start_ms=0)
        self.now = 0

    def watch(self, op: DelayedOperation, keys: tuple[Hashable, ...], **statuses: Any) -> bool:
        done = self.purgatory.try_complete_else_watch(op, keys, statuses or None)
        if not done and not self.wheel.add(op):
            self.purgatory.expire(op)
        return done

    def status(self, key: Hashable, value: Any) -> list[DelayedOperation]:
        completed = self.purgatory.check_and_complete(key, value)
        for op in completed:
            self.wheel.cancel(op)  # the shell's Cancel(op) to the Timer
        return completed

    def tick(self, now: int) -> list[DelayedOperation]:
        self.now = now
        return [op for op in self.wheel.advance_clock(now) if self.purgatory.expire(op)]


def test_completes_when_a_status_satisfies_it() -> None:
    shell = Shell()
    op = WaitFor(deadline_ms=100, target=5)
    assert shell.watch(op, ("a",)) is False
    assert shell.purgatory.num_delayed == 1 and shell.purgatory.watched("a") == 1
    assert shell.status("a", 4) == []
    assert not op.is_completed and op.outcome is None
    assert shell.status("a", 5) == [op]
    assert op.is_completed and not op.timed_out
    assert op.outcome == ("done", 5)
    assert shell.purgatory.num_delayed == 0
    assert shell.purgatory.watched("a") == 0 and shell.purgatory.watched_keys == 0
    assert shell.wheel.size == 0


def test_completes_at_once_without_being_watched() -> None:
    shell = Shell()
    op = WaitFor(deadline_ms=100, target=5)
    assert shell.watch(op, ("a",), a=7) is True
    assert op.outcome == ("done", 7)
    assert shell.purgatory.num_delayed == 0 and shell.purgatory.watched_keys == 0
    assert shell.wheel.size == 0
    assert shell.purgatory.metrics().completions == 1


def test_expires_at_its_deadline_with_the_timed_out_outcome() -> None:
    shell = Shell()
    op = WaitFor(deadline_ms=30, target=5)
    shell.watch(op, ("a",))
    shell.status("a", 3)
    assert shell.tick(29) == []
    assert shell.tick(30) == [op]
    assert op.timed_out and op.outcome == ("timed_out", 3)
    assert (op.completions, op.expirations) == (1, 1)
    metrics = shell.purgatory.metrics()
    assert metrics.expirations == 1 and metrics.delayed_operations == 0


def test_completion_then_expiry_delivers_only_the_completion() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    purgatory.try_complete_else_watch(op, ["a"])
    assert purgatory.check_and_complete("a", 1) == [op]
    # The Timer's Expired(op) was already in the mailbox: ignored.
    assert purgatory.expire(op) is False
    assert op.outcome == ("done", 1)
    assert (op.completions, op.expirations) == (1, 0)
    assert purgatory.metrics().expirations == 0


def test_expiry_then_completion_delivers_only_the_expiry() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    purgatory.try_complete_else_watch(op, ["a"])
    assert purgatory.expire(op) is True
    # A status that would have completed it arrives after the expiry.
    assert purgatory.check_and_complete("a", 1) == []
    assert op.outcome == ("timed_out", -1)
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.watched("a") == 0  # the expired entry was dropped on the way


def test_force_complete_runs_on_complete_exactly_once() -> None:
    op = WaitFor(deadline_ms=30)
    assert op.force_complete() is True
    assert op.force_complete() is False
    assert op.expire() is False
    assert op.completions == 1 and op.expirations == 0 and not op.timed_out


def test_watched_under_several_keys_completes_through_any_one() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    purgatory.try_complete_else_watch(op, ["a", "b", "c"])
    assert purgatory.watched_keys == 3
    assert purgatory.check_and_complete("b", 1) == [op]
    assert purgatory.num_delayed == 0
    # The other lists still hold it until checked or purged, and never complete it twice.
    assert purgatory.watched("a") == 1 and purgatory.watched("c") == 1
    assert purgatory.check_and_complete("a", 9) == []
    assert purgatory.watched("a") == 0
    assert purgatory.purge_completed() == 1
    assert purgatory.watched_keys == 0
    assert op.completions == 1 and op.outcome == ("done", 1)


def test_check_of_an_unwatched_key_is_a_no_op() -> None:
    purgatory = DelayedOperationPurgatory()
    assert purgatory.check_and_complete("nobody", 1) == []
    assert purgatory.watched_keys == 0


def test_check_completes_every_satisfied_operation_and_keeps_the_rest() -> None:
    purgatory = DelayedOperationPurgatory()
    ops = [WaitFor(deadline_ms=30, target=t) for t in (1, 5, 2, 9)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["p"])
    assert purgatory.check_and_complete("p", 4) == [ops[0], ops[2]]
    assert purgatory.watched("p") == 2
    assert purgatory.check_and_complete("p", 9) == [ops[1], ops[3]]
    assert purgatory.watched_keys == 0


def test_no_watch_keys_is_refused_and_nothing_changes() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    with pytest.raises(EmptyWatchKeysError) as info:
        purgatory.try_complete_else_watch(op, [])
    assert str(info.value) == "an operation needs at least one watch key"
    assert purgatory.num_delayed == 0 and not op.is_completed


def test_a_completed_operation_is_refused() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    op.force_complete()
    with pytest.raises(OperationCompletedError) as info:
        purgatory.try_complete_else_watch(op, ["a"])
    assert str(info.value) == "operation is already completed"
    assert purgatory.watched_keys == 0


def test_watching_twice_is_refused() -> None:
    purgatory = DelayedOperationPurgatory()
    other = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    purgatory.try_complete_else_watch(op, ["a"])
    with pytest.raises(OperationWatchedError) as info:
        other.try_complete_else_watch(op, ["b"])
    assert str(info.value) == "operation is already watched by a purgatory"
    assert other.watched_keys == 0 and purgatory.num_delayed == 1


def test_a_force_completed_operation_stops_counting_as_delayed() -> None:
    purgatory = DelayedOperationPurgatory()
    op = WaitFor(deadline_ms=30)
    purgatory.try_complete_else_watch(op, ["a"])
    op.force_complete()  # e.g. the shell answers it on shutdown
    assert purgatory.num_delayed == 0
    assert purgatory.check_and_complete("a", 5) == []


def test_purge_fires_on_kafkas_trigger() -> None:
    purgatory = DelayedOperationPurgatory(purge_interval_requests=10)
    live = WaitFor(deadline_ms=10**6, target=10**9)
    purgatory.try_complete_else_watch(live, ["x", "y"])
    # Each op completes through "a" and lingers under "b": 1 lingering entry each.
    for _ in range(10):
        op = WaitFor(deadline_ms=100)
        purgatory.try_complete_else_watch(op, ["a", "b"])
        assert purgatory.check_and_complete("a", 1) == [op]
    metrics = purgatory.metrics()
    # Estimate 11 watched - 1 delayed = 10: not over the interval yet.
    assert metrics.purges == 0 and purgatory.watched("b") == 10
    assert metrics.estimated_total_operations == 11
    op = WaitFor(deadline_ms=100)
    purgatory.try_complete_else_watch(op, ["a", "b"])  # estimate 12 - delayed 2 = 10
    assert purgatory.metrics().purges == 0
    purgatory.check_and_complete("a", 1)  # estimate 12 - delayed 1 = 11 > 10: purge
    metrics = purgatory.metrics()
    assert metrics.purges == 1 and metrics.purged_entries == 11
    assert purgatory.watched("b") == 0
    assert metrics.estimated_total_operations == 1 == metrics.delayed_operations
    assert purgatory.watched("x") == 1 and purgatory.watched("y") == 1
    assert metrics.watched_keys == 2 and metrics.watcher_entries == 2


def test_expired_operations_are_purged_too() -> None:
    shell = Shell(purge_interval_requests=5)
    ops = [WaitFor(deadline_ms=10) for _ in range(6)]
    for i, op in enumerate(ops):
        shell.watch(op, (f"k{i}",))
    assert shell.purgatory.watcher_entries() == 6
    assert len(shell.tick(10)) == 6  # the sixth expiry makes 6 - 0 > 5
    metrics = shell.purgatory.metrics()
    assert metrics.purges == 1 and metrics.watcher_entries == 0 and metrics.watched_keys == 0
    assert metrics.expirations == 6


def test_an_already_due_operation_is_expired_by_the_shell() -> None:
    shell = Shell()
    shell.tick(50)
    op = WaitFor(deadline_ms=50)
    assert shell.watch(op, ("a",)) is False
    assert op.timed_out and shell.purgatory.num_delayed == 0


@pytest.mark.parametrize("total", [50_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_purge_keeps_memory_bounded_while_operations_pass_through(total: int) -> None:
    """Two keys per op; most complete through one key within ms, 1 in 50 expires.

    The completed-but-watched operations never exceed the purge interval, so
    the watcher entries stay below keys x (live + interval), however many
    operations went through.
    """
    interval = 500
    shell = Shell(purge_interval_requests=interval)
    purgatory = shell.purgatory
    keys = 200
    max_entries = 0
    completed = expired = 0
    now = 0
    for i in range(total):
        if i % 100 == 0:
            now += 1
            expired += len(shell.tick(now))
            # The keys touched a few ms ago get a status that completes their ops.
            for k in range(now % 5, keys, 5):
                completed += len(shell.status(("a", k), 1))
        op = WaitFor(deadline_ms=now + 30, target=1 if i % 50 else 2)
        # Op i is watched under ("a", i % keys) and ("b", i % 7): the "b" keys are never checked.
        shell.watch(op, (("a", i % keys), ("b", i % 7)))
        if i % 10_000 == 0:
            entries = purgatory.watcher_entries()
            max_entries = max(max_entries, entries)
            assert entries <= 2 * (purgatory.num_delayed + interval)
            assert shell.wheel.size == purgatory.num_delayed
    for k in range(keys):  # the last arrivals' keys get their status too
        completed += len(shell.status(("a", k), 1))
    expired += len(shell.tick(now + 31))
    assert completed + expired == total
    assert expired == total // 50
    assert purgatory.num_delayed == 0
    metrics = purgatory.metrics()
    assert metrics.purges >= total // (2 * interval)
    assert metrics.watcher_entries <= 2 * interval
    # Bounded by the live operations (a few thousand), not by the number that passed.
    assert max_entries < 20_000


class PurgatoryRaces(RuleBasedStateMachine):
    """Random watches, statuses and expiries: every operation gets exactly one outcome."""

    def __init__(self) -> None:
        super().__init__()
        self.purgatory = DelayedOperationPurgatory(purge_interval_requests=3)
        self.ops: list[WaitFor] = []
        self.delivered: dict[int, str] = {}  # id(op) -> how its one outcome was delivered

    @rule(
        keys=st.lists(st.sampled_from("abcde"), min_size=1, max_size=3, unique=True),
        target_value=st.integers(min_value=0, max_value=3),
        seen=st.none() | st.integers(min_value=0, max_value=3),
    )
    def watch(self, keys: list[str], target_value: int, seen: int | None) -> None:
        op = WaitFor(deadline_ms=100, target=target_value)
        statuses = None if seen is None else {keys[0]: seen}
        done = self.purgatory.try_complete_else_watch(op, keys, statuses)
        self.ops.append(op)
        assert done == op.is_completed
        if done:
            self.delivered[id(op)] = "at once"

    @rule(key=st.sampled_from("abcde"), value=st.integers(min_value=0, max_value=3))
    def status(self, key: str, value: int) -> None:
        for op in self.purgatory.check_and_complete(key, value):
            assert isinstance(op, WaitFor) and id(op) not in self.delivered
            assert op.seen >= op.target and not op.timed_out
            self.delivered[id(op)] = "completed"

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        if not self.ops:
            return
        op = data.draw(st.sampled_from(self.ops))
        was_done = op.is_completed
        assert self.purgatory.expire(op) == (not was_done)
        if not was_done:
            assert id(op) not in self.delivered
            self.delivered[id(op)] = "expired"

    @invariant()
    def exactly_one_outcome(self) -> None:
        for op in self.ops:
            assert op.completions == (1 if op.is_completed else 0)
            assert op.is_completed == (id(op) in self.delivered)
            assert op.timed_out == (self.delivered.get(id(op)) == "expired")
            assert op.expirations == (1 if op.timed_out else 0)

    @invariant()
    def counts_follow_live_operations(self) -> None:
        live = sum(not op.is_completed for op in self.ops)
        assert self.purgatory.num_delayed == live
        # Lingering completed operations never exceed the purge interval.
        metrics = self.purgatory.metrics()
        assert metrics.estimated_total_operations - live <= 3
        assert metrics.watcher_entries <= 3 * (live + 3)


PurgatoryRaces.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestPurgatoryRaces = PurgatoryRaces.TestCase
