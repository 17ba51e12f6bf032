"""Injected time: actors read a Clock; tests hand them a ManualClock that jumps.

A Clock gives two readings, and they answer different questions:

- monotonic (``now_ms``, ``monotonic_ns``): how long something took or how
  long until a deadline. It never goes backwards and means nothing across
  processes or restarts.
- wall (``wall_ms``): milliseconds since the Unix epoch, for what is stored
  or compared with other hosts: record timestamps, log retention, segment
  roll times, producer-id bases. It may jump (NTP, an operator).

Only this module reads the system's clocks: a Node takes a Clock (a
SystemClock unless told otherwise) and every actor reads the Node's clock or
the one it was given, so a simulated clock can drive a whole node.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic_ns(self) -> int: ...

    def wall_ms(self) -> int: ...

    def wall_ns(self) -> int: ...


class SystemClock:
    """The host's clocks: monotonic for timers, wall time for what is stored."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    # the builtin itself, not a wrapper: the request path reads it several times a request
    monotonic_ns = staticmethod(time.monotonic_ns)

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    # the builtin itself: every traced message sent carries a wall-clock send time
    wall_ns = staticmethod(time.time_ns)


# 2024-01-01T00:00:00Z: a plausible wall time for a ManualClock, the same in every run.
DEFAULT_WALL_START_MS = 1_704_067_200_000


class ManualClock:
    """A clock that moves only when told to.

    ``advance`` moves both readings together, as real time passing does;
    ``set_wall_ms`` moves the wall reading alone (a step of the host's clock,
    forwards or back) and leaves the monotonic one where it is.
    """

    def __init__(self, start_ms: int = 0, wall_start_ms: int = DEFAULT_WALL_START_MS) -> None:
        self._now_ns = start_ms * 1_000_000
        self._wall_ns = wall_start_ms * 1_000_000

    def now_ms(self) -> int:
        return self._now_ns // 1_000_000

    def monotonic_ns(self) -> int:
        return self._now_ns

    def wall_ms(self) -> int:
        return self._wall_ns // 1_000_000

    def wall_ns(self) -> int:
        return self._wall_ns

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a clock cannot go back ({ms} ms)")
        self._now_ns += ms * 1_000_000
        self._wall_ns += ms * 1_000_000

    def advance_ns(self, ns: int) -> None:
        """Sub-millisecond steps, for durations measured in nanoseconds."""
        if ns < 0:
            raise ValueError(f"a clock cannot go back ({ns} ns)")
        self._now_ns += ns
        self._wall_ns += ns

    def set_wall_ms(self, wall_ms: int) -> None:
        """Step the wall clock to ``wall_ms``; the monotonic reading does not move."""
        self._wall_ns = wall_ms * 1_000_000
