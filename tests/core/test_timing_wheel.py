"""Timing wheel on a manual clock: the classic cases."""

from __future__ import annotations

import pytest

from actors.core.timing_wheel import TimerTask, TimingWheel


def drive(wheel: TimingWheel, until_ms: int, start_ms: int | None = None) -> dict[int, list[int]]:
    """Advance 1 ms at a time; map each time to the deadlines that expired then."""
    fired: dict[int, list[int]] = {}
    now = wheel.current_time_ms if start_ms is None else start_ms
    while now <= until_ms:
        expired = wheel.advance_clock(now)
        if expired:
            fired[now] = [task.expiration_ms for task in expired]
        now += 1
    return fired


def test_task_due_within_the_current_tick_is_refused() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=100)
    late = TimerTask(99)
    now = TimerTask(100)
    assert wheel.add(late) is False
    assert wheel.add(now) is False
    assert not late.scheduled and not now.scheduled
    assert wheel.size == 0
    assert wheel.next_expiration_ms() is None


def test_task_in_first_wheel_expires_exactly_at_its_deadline() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    task = TimerTask(7)
    assert wheel.add(task) is True
    assert wheel.next_expiration_ms() == 7
    assert wheel.advance_clock(6) == []
    assert task.scheduled
    assert wheel.advance_clock(7) == [task]
    assert not task.scheduled
    assert wheel.size == 0
    assert wheel.advance_clock(8) == []


def test_advance_within_a_tick_changes_nothing() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=10, wheel_size=20, start_ms=0)
    task = TimerTask(25)
    assert wheel.add(task)
    assert wheel.advance_clock(5) == []
    assert wheel.current_time_ms == 0
    assert wheel.advance_clock(19) == []
    assert wheel.current_time_ms == 10
    # A coarse tick rounds the expiration down to its bucket, as Kafka's does.
    assert wheel.advance_clock(20) == [task]


def test_tasks_across_wheels_expire_exactly_on_time() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=0)
    deadlines = [1, 2, 19, 20, 21, 39, 40, 41, 399, 400, 401, 799, 8000, 8001, 9000, 20_000]
    for deadline in deadlines:
        assert wheel.add(TimerTask(deadline))
    assert wheel.levels == 4  # spans of 20, 400, 8000 and 160000 ms
    fired = drive(wheel, 20_001)
    assert fired == {deadline: [deadline] for deadline in deadlines}
    assert wheel.size == 0


def test_overflow_wheels_are_created_on_demand() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=0)
    assert wheel.levels == 1
    wheel.add(TimerTask(19))
    assert wheel.levels == 1
    wheel.add(TimerTask(20))
    assert wheel.levels == 2
    wheel.add(TimerTask(399))
    assert wheel.levels == 2
    wheel.add(TimerTask(400))
    assert wheel.levels == 3
    wheel.add(TimerTask(10**9))  # several levels at once
    assert wheel.levels == 7  # 20 * 20**6 = 1.28e9 > 1e9 >= 20 * 20**5
    assert wheel.size == 5


def test_reinsert_into_a_finer_wheel_when_the_bucket_is_due() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=1, wheel_size=20, start_ms=0)
    task = TimerTask(425)
    wheel.add(task)
    # Level 2 (20 ms x 20 = 400 ms buckets): the bucket [400, 800) is due at 400.
    assert wheel.next_expiration_ms() == 400
    assert wheel.advance_clock(400) == []
    # Moved to level 1: the bucket [420, 440) is due at 420.
    assert task.scheduled
    assert wheel.next_expiration_ms() == 420
    assert wheel.advance_clock(420) == []
    # Then to level 0, where the bucket is exactly its deadline.
    assert wheel.next_expiration_ms() == 425
    assert wheel.advance_clock(424) == []
    assert wheel.advance_clock(425) == [task]
    assert wheel.next_expiration_ms() is None


def test_a_jump_expires_everything_due_in_deadline_order() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    deadlines = [9000, 3, 450, 21, 8001, 19, 20, 400, 777]
    tasks = [TimerTask(deadline) for deadline in deadlines]
    for task in tasks:
        wheel.add(task)
    far = TimerTask(9001)
    wheel.add(far)
    expired = wheel.advance_clock(9000)
    assert [task.expiration_ms for task in expired] == sorted(deadlines)
    assert wheel.size == 1 and far.scheduled
    assert wheel.advance_clock(9001) == [far]


def test_cancelled_task_never_expires_and_cancel_is_idempotent() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    keep, drop, drop_far = TimerTask(5), TimerTask(5), TimerTask(5000)
    for task in (keep, drop, drop_far):
        wheel.add(task)
    assert wheel.cancel(drop) is True
    assert wheel.cancel(drop) is False
    assert drop_far.cancel() is True  # a task can leave without a reference to its wheel
    assert drop_far.cancel() is False
    assert wheel.size == 1
    assert drive(wheel, 6000) == {5: [5]}


def test_next_expiration_skips_buckets_emptied_by_cancel() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    early, late = TimerTask(3), TimerTask(9)
    wheel.add(early)
    wheel.add(late)
    assert wheel.next_expiration_ms() == 3
    wheel.cancel(early)
    assert wheel.next_expiration_ms() == 9
    # The bucket can take a task at the same expiration again.
    again = TimerTask(3)
    assert wheel.add(again)
    assert wheel.next_expiration_ms() == 3
    assert wheel.advance_clock(3) == [again]


def test_same_deadline_after_its_bucket_was_dropped_still_expires() -> None:
    # Adds with the deadline of the previous add reuse its bucket; that must
    # stop once next_expiration_ms dropped the bucket emptied by a cancel.
    wheel = TimingWheel[TimerTask](start_ms=0)
    first = TimerTask(3)
    wheel.add(first)
    wheel.cancel(first)
    assert wheel.next_expiration_ms() is None
    second = TimerTask(3)
    assert wheel.add(second)
    assert wheel.next_expiration_ms() == 3
    assert wheel.advance_clock(3) == [second]


def test_same_deadline_across_a_tick_lands_in_the_right_bucket() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    tasks = [TimerTask(25) for _ in range(3)]
    wheel.add(tasks[0])  # level 1 at time 0: the [20, 40) bucket
    wheel.advance_clock(10)
    wheel.add(tasks[1])  # level 0 at time 10
    wheel.advance_clock(20)  # flushes [20, 40): tasks[0] moves to level 0
    wheel.add(tasks[2])
    assert drive(wheel, 30, start_ms=21) == {25: [25, 25, 25]}


def test_adding_a_scheduled_task_moves_it() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    task = TimerTask(50)
    wheel.add(task)
    task.expiration_ms = 10
    assert wheel.add(task)
    assert wheel.size == 1
    assert drive(wheel, 60) == {10: [10]}


def test_re_adding_a_task_that_is_now_due_unschedules_it() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    task = TimerTask(50)
    wheel.add(task)
    wheel.advance_clock(30)
    task.expiration_ms = 30
    assert wheel.add(task) is False
    assert not task.scheduled and wheel.size == 0


def test_time_never_moves_back() -> None:
    wheel = TimingWheel[TimerTask](start_ms=1000)
    task = TimerTask(1010)
    wheel.add(task)
    assert wheel.advance_clock(500) == []
    assert wheel.current_time_ms == 1000
    assert wheel.add(TimerTask(1000)) is False
    assert wheel.advance_clock(1010) == [task]


def test_start_is_rounded_down_to_the_tick() -> None:
    wheel = TimingWheel[TimerTask](tick_ms=10, wheel_size=20, start_ms=1234)
    assert wheel.current_time_ms == 1230
    assert wheel.add(TimerTask(1239)) is False
    assert wheel.add(TimerTask(1240)) is True


def test_size_follows_live_tasks_only() -> None:
    wheel = TimingWheel[TimerTask](start_ms=0)
    tasks = [TimerTask(1 + i % 30_000) for i in range(10_000)]
    for task in tasks:
        wheel.add(task)
    assert len(wheel) == 10_000
    for task in tasks[::2]:
        task.cancel()
    assert wheel.size == 5_000
    expired = wheel.advance_clock(30_000)
    assert len(expired) == 5_000
    assert wheel.size == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tick_ms": 0}, "tick_ms must be >= 1, got 0"),
        ({"wheel_size": 1}, "wheel_size must be >= 2, got 1"),
    ],
)
def test_invalid_configuration_is_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError) as info:
        TimingWheel(**kwargs)
    assert str(info.value) == message
