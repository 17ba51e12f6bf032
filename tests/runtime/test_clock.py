"""The Clock's two readings, and a ManualClock that moves them only when told."""

from __future__ import annotations

import time

import pytest

from actors.runtime.clock import DEFAULT_WALL_START_MS, ManualClock, SystemClock


def test_system_clock_wall_reading_is_unix_milliseconds() -> None:
    clock = SystemClock()
    before = time.time_ns() // 1_000_000
    wall = clock.wall_ms()
    after = time.time_ns() // 1_000_000
    assert before <= wall <= after


def test_system_clock_monotonic_readings_agree_and_never_go_back() -> None:
    clock = SystemClock()
    first_ns = clock.monotonic_ns()
    ms = clock.now_ms()
    second_ns = clock.monotonic_ns()
    assert first_ns // 1_000_000 <= ms <= second_ns // 1_000_000
    assert first_ns <= second_ns


def test_manual_clock_starts_where_told_and_advance_moves_both_readings() -> None:
    clock = ManualClock(start_ms=5, wall_start_ms=1_000_000)
    assert (clock.now_ms(), clock.monotonic_ns(), clock.wall_ms()) == (5, 5_000_000, 1_000_000)
    clock.advance(250)
    assert (clock.now_ms(), clock.wall_ms()) == (255, 1_000_250)
    clock.advance_ns(1_500_000)
    assert (clock.monotonic_ns(), clock.now_ms(), clock.wall_ms()) == (256_500_000, 256,
                                                                       1_000_251)


def test_manual_clock_wall_defaults_to_a_fixed_date() -> None:
    assert ManualClock().wall_ms() == DEFAULT_WALL_START_MS == 1_704_067_200_000


def test_manual_clock_wall_steps_alone_either_way() -> None:
    clock = ManualClock(start_ms=100, wall_start_ms=50_000)
    clock.set_wall_ms(10_000)  # the host's clock stepped back
    assert (clock.now_ms(), clock.wall_ms()) == (100, 10_000)
    clock.set_wall_ms(90_000)
    assert (clock.now_ms(), clock.wall_ms()) == (100, 90_000)


@pytest.mark.parametrize(("method", "amount", "message"), [
    ("advance", -1, r"^a clock cannot go back \(-1 ms\)$"),
    ("advance_ns", -7, r"^a clock cannot go back \(-7 ns\)$"),
])
def test_manual_clock_refuses_to_go_back_and_stays_put(method: str, amount: int,
                                                       message: str) -> None:
    clock = ManualClock(start_ms=10, wall_start_ms=20)
    with pytest.raises(ValueError, match=message):
        getattr(clock, method)(amount)
    assert (clock.monotonic_ns(), clock.wall_ms()) == (10_000_000, 20)
