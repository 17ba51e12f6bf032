"""The simulator's scheduler: one seeded random source, one event queue, one clock.

Everything that happens in a simulation is an event at a simulated time:
a frame delivered to an actor, an actor's timer turn, a fault, a client's
next step. :meth:`Kernel.run` pops the earliest and runs it; the clock jumps
to it, so idle time costs nothing. Events due at the same nanosecond run in
an order drawn from the seed, which is how one seed decides the
interleaving of actors that are ready together.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from actors.runtime.clock import DEFAULT_WALL_START_MS

NS_PER_MS = 1_000_000

_heappush = heapq.heappush
_heappop = heapq.heappop


class Kernel:
    """Seeded event loop of one simulation run."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ns = 0
        self.steps = 0
        self._heap: list[tuple[int, float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._random = self.rng.random

    def at(self, time_ns: int, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` at ``time_ns`` (never before now)."""
        now = self.now_ns
        _heappush(self._heap, (time_ns if time_ns > now else now, self._random(),
                               next(self._seq), fn, args))

    def after_ms(self, ms: float, fn: Callable[..., Any], *args: Any) -> None:
        now = self.now_ns
        time_ns = now + int(ms * NS_PER_MS)
        _heappush(self._heap, (time_ns if time_ns > now else now, self._random(),
                               next(self._seq), fn, args))

    def next_time_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Run the earliest event; False when none is left."""
        if not self._heap:
            return False
        time_ns, _tie, _seq, fn, args = heapq.heappop(self._heap)
        self.now_ns = time_ns
        self.steps += 1
        fn(*args)
        return True

    def run(self, until_ns: int, max_steps: int | None = None) -> None:
        """Run events due up to ``until_ns``; the clock ends there."""
        # step()'s body, inline: this loop runs every event of a run (tens of thousands
        # a seed), and a method call per event is a share of a small one.
        heap = self._heap
        pop = _heappop
        limit = max_steps if max_steps is not None else float("inf")
        while heap and heap[0][0] <= until_ns:
            if self.steps >= limit:
                return
            time_ns, _tie, _seq, fn, args = pop(heap)
            self.now_ns = time_ns
            self.steps += 1
            fn(*args)
        self.now_ns = max(self.now_ns, until_ns)

    @property
    def pending(self) -> int:
        return len(self._heap)


class SimClock:
    """A node's clock: the kernel's time plus this node's own offsets.

    The monotonic reading never goes back; the wall reading can be stepped
    (:meth:`jump_wall_ms`), as NTP or an operator steps a host's clock.
    """

    def __init__(self, kernel: Kernel, wall_start_ms: int = DEFAULT_WALL_START_MS) -> None:
        self.kernel = kernel
        self.wall_offset_ns = wall_start_ms * NS_PER_MS

    def now_ms(self) -> int:
        return self.kernel.now_ns // NS_PER_MS

    def monotonic_ns(self) -> int:
        return self.kernel.now_ns

    def wall_ms(self) -> int:
        return (self.kernel.now_ns + self.wall_offset_ns) // NS_PER_MS

    def wall_ns(self) -> int:
        return self.kernel.now_ns + self.wall_offset_ns

    def jump_wall_ms(self, ms: int) -> None:
        """Step this node's wall clock by ``ms`` (either way); monotonic time is untouched."""
        self.wall_offset_ns += ms * NS_PER_MS
