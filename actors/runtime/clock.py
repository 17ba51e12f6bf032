"""Injected time: actors read a Clock; tests hand them a ManualClock that jumps."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic_ns(self) -> int: ...


class SystemClock:
    """Monotonic milliseconds for timers; never goes backwards."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ns = start_ms * 1_000_000

    def now_ms(self) -> int:
        return self._now_ns // 1_000_000

    def monotonic_ns(self) -> int:
        return self._now_ns

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"a clock cannot go back ({ms} ms)")
        self._now_ns += ms * 1_000_000
