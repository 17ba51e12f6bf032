"""Named counters written from many actor threads without a shared lock.

Each thread counts into a Counter of its own (a thread-local), so ``incr``
never waits; readers add the per-thread Counters up. A node keeps two: its
metrics, and its dead letters (undeliverable messages, counted by kind and
logged).
"""

from __future__ import annotations

import threading
from collections import Counter

from loguru import logger

from actors.runtime.clock import Clock, SystemClock


class Counters:
    """Named counters, one Counter per writing thread."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._counters: list[Counter[str]] = []

    def incr(self, name: str, by: int = 1) -> None:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = Counter()
            self._counters.append(c)
        c[name] += by

    def mine(self) -> Counter[str]:
        """The calling thread's Counter: a hot path of one thread adds to it directly
        (``c[name] += by``), without a call per count."""
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = Counter()
            self._counters.append(c)
        return c

    def get(self, name: str) -> int:
        return sum(c.get(name, 0) for c in list(self._counters))

    def snapshot(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for c in list(self._counters):
            out.update(c)
        return dict(out)

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in list(self._counters))


class DeadLetters:
    """Undeliverable messages: counted per kind of reason and logged (rate limited).

    The kind counted is the reason up to its first " (" or ":" (details such
    as an exception's text stay in the log line).
    """

    LOG_PER_SECOND = 20

    def __init__(self, node: str, clock: Clock | None = None) -> None:
        self.node = node
        self.clock = clock or SystemClock()
        self.counts = Counters()
        self.last: list[tuple[str, str, str]] = []
        """The latest 100 (reason, sender, receiver), oldest first, for tests and debugging."""
        self._logged_second = 0
        self._logged_count = 0

    def record(self, reason: str, count: int = 1, *, sender: str = "", receiver: str = "",
               log: bool = True) -> None:
        """Count (and log, unless ``log`` is False: the caller logged it once already)."""
        kind = reason.split(" (")[0].split(":")[0]
        self.counts.incr(kind, count)
        self.last.append((reason, sender, receiver))
        del self.last[:-100]
        if not log:
            return
        now = self.clock.now_ms() // 1000
        if now != self._logged_second:
            self._logged_second, self._logged_count = now, 0
        self._logged_count += 1
        if self._logged_count <= self.LOG_PER_SECOND:
            logger.bind(node=self.node).warning(
                "dead letter x{} on {}: {} (sender={}, receiver={})",
                count, self.node, reason, sender or "?", receiver or "?",
            )

    @property
    def total(self) -> int:
        return self.counts.total

    def by_reason(self) -> dict[str, int]:
        return self.counts.snapshot()
