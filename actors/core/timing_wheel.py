"""A hierarchical timing wheel: the pure core of the Timer actor.

Kafka's SystemTimer idea, laid out for CPython speed. Level ``i`` has
``wheel_size`` buckets of ``tick_ms * wheel_size**i`` milliseconds each; a
task goes to the lowest level whose span still covers its expiration, and
higher levels are created on demand. Only *buckets* enter the priority queue
(one entry per bucket per expiration), never tasks, so adding costs
O(levels), cancelling O(1), and a cancelled task leaves no trace behind: the
memory follows the live tasks, not every task ever added.

Layout choices, each for speed or memory: buckets are plain ``dict``\\ s used as
insertion-ordered sets (C-level insert and delete, deterministic expiry
order), every level's buckets sit in one flat list indexed by
``level * wheel_size + slot`` with their expirations in a parallel list, and
a task carries a reference to the dict it sits in (``_bucket``), which is
what makes ``cancel`` a single ``del``. Requests that arrive in the same
millisecond with the same timeout share a deadline, so ``add`` remembers the
bucket of the previous deadline and skips the arithmetic for the next one.

The wheel never reads a clock: time only moves through
:meth:`TimingWheel.advance_clock`, so the Timer actor reads the clock once per
message and sleeps until :meth:`TimingWheel.next_expiration_ms`.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heappop, heappush
from typing import Any, Generic, TypeVar

__all__ = ["TimerTask", "TimingWheel"]


class TimerTask:
    """Something with a deadline that can sit in at most one bucket of a wheel.

    Subclass it (adding ``__slots__``) to carry a payload: a delayed
    operation is one, and the Timer actor can wrap an operation id in one.
    ``expiration_ms`` must not change while the task is scheduled; re-``add``
    the task to move it.
    """

    __slots__ = ("_bucket", "expiration_ms")

    def __init__(self, expiration_ms: int) -> None:
        self.expiration_ms = expiration_ms
        # The bucket dict this task sits in, or None when not scheduled.
        self._bucket: dict[TimerTask, None] | None = None

    @property
    def scheduled(self) -> bool:
        """True while the task waits in a wheel (not expired, not cancelled)."""
        return self._bucket is not None

    def cancel(self) -> bool:
        """Leave the wheel in O(1) without a reference to it (Kafka's ``TimerTask.cancel``).

        Only from the thread that owns the wheel: the bucket is that wheel's state.
        """
        bucket = self._bucket
        if bucket is None:
            return False
        del bucket[self]
        self._bucket = None
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(expiration_ms={self.expiration_ms})"


T = TypeVar("T", bound=TimerTask)


class TimingWheel(Generic[T]):
    """Hierarchical timing wheel driven by handed-in time (see module docstring).

    Single-threaded by design: the owning actor calls every method from its
    own thread, one message at a time. Generic in the task type, so
    ``TimingWheel[DelayedOperation]`` hands back operations from ``advance_clock``.
    """

    __slots__ = (
        "_bucket_exp",
        "_buckets",
        "_current",
        "_expired_before",
        "_hit_bucket",
        "_hit_exp",
        "_intervals",
        "_limits",
        "_queue",
        "_ticks",
        "tick_ms",
        "wheel_size",
    )

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        # Per level: tick, span (tick * wheel_size), current time rounded down
        # to the tick, and the first expiration the level can no longer hold.
        self._ticks: list[int] = []
        self._intervals: list[int] = []
        self._current: list[int] = []
        self._limits: list[int] = []
        self._buckets: list[dict[Any, None]] = []
        self._bucket_exp: list[int] = []  # -1: the bucket is not in the queue
        # (bucket expiration, flat bucket index): unique, so buckets are never compared.
        self._queue: list[tuple[int, int]] = []
        # The bucket the last add chose and its task expiration: requests
        # arriving in the same millisecond with the same timeout share a
        # deadline, so most adds skip the bucket arithmetic. Forgotten
        # whenever time moves or a bucket leaves the queue.
        self._hit_exp = -1
        self._hit_bucket: dict[Any, None] | None = None
        self._add_level(start_ms - start_ms % tick_ms, tick_ms)
        self._expired_before = self._current[0] + tick_ms

    # -- queries -------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of scheduled tasks (added, neither expired nor cancelled).

        Summed over the buckets (at most ``wheel_size`` per level) rather than
        counted per operation, so that :meth:`TimerTask.cancel` needs no
        reference to the wheel and add/cancel stay minimal.
        """
        return sum(map(len, self._buckets))

    def __len__(self) -> int:
        return self.size

    @property
    def current_time_ms(self) -> int:
        """The time of the lowest wheel, rounded down to ``tick_ms``."""
        return self._current[0]

    @property
    def levels(self) -> int:
        """Number of wheels created so far (1 + overflow wheels)."""
        return len(self._ticks)

    def next_expiration_ms(self) -> int | None:
        """When the next non-empty bucket is due, or None if nothing is scheduled.

        The Timer actor sleeps until this time (or a message). Buckets that
        cancellations emptied are dropped here so they cause no wake-up.
        """
        queue = self._queue
        bucket_exp = self._bucket_exp
        buckets = self._buckets
        while queue:
            exp, idx = queue[0]
            if bucket_exp[idx] == exp and buckets[idx]:
                return exp
            heappop(queue)
            if bucket_exp[idx] == exp:
                bucket_exp[idx] = -1
                self._hit_exp = -1
        return None

    # -- mutations -----------------------------------------------------------

    def add(self, task: T) -> bool:
        """Schedule ``task`` at ``task.expiration_ms``.

        Returns False, without scheduling, when the task is already due
        (its expiration falls before the end of the current tick): the caller
        then expires it at once, as Kafka's timer runs such a task directly.
        Adding a task that is already scheduled moves it.
        """
        old = task._bucket
        if old is not None:
            del old[task]
            task._bucket = None
        expiration_ms = task.expiration_ms
        if expiration_ms == self._hit_exp:
            bucket = self._hit_bucket
            bucket[task] = None  # type: ignore[index]
            task._bucket = bucket
            return True
        if expiration_ms < self._expired_before:
            return False
        limits = self._limits
        if expiration_ms < limits[0]:
            level = 0
        else:
            # The levels' limits increase, so the level is a bisection (in C).
            level = bisect_right(limits, expiration_ms)
            if level == len(limits):
                self._grow(expiration_ms)
                level = bisect_right(self._limits, expiration_ms)
        tick = self._ticks[level]
        virtual_id = expiration_ms // tick
        wheel_size = self.wheel_size
        idx = level * wheel_size + virtual_id % wheel_size
        bucket = self._buckets[idx]
        bucket[task] = None
        task._bucket = bucket
        bucket_exp = virtual_id * tick
        exps = self._bucket_exp
        if exps[idx] != bucket_exp:
            exps[idx] = bucket_exp
            heappush(self._queue, (bucket_exp, idx))
        self._hit_exp = expiration_ms
        self._hit_bucket = bucket
        return True

    def cancel(self, task: T) -> bool:
        """Remove a scheduled task in O(1); False if it was not scheduled."""
        bucket = task._bucket
        if bucket is None:
            return False
        del bucket[task]
        task._bucket = None
        return True

    def advance_clock(self, now_ms: int) -> list[T]:
        """Move time to ``now_ms`` and return the tasks now due, earliest bucket first.

        Every due bucket is flushed in expiration order: the wheel's time is
        set to the bucket's expiration and each task in it either expires or
        is re-inserted into a finer wheel (a task in a 400 ms bucket moves to
        the 20 ms wheel and then to the 1 ms wheel). With ``tick_ms=1`` no
        task is returned before its expiration and none after the first call
        with ``now_ms >= expiration_ms``; a coarser tick rounds expirations
        down to the tick, as Kafka's timer does. Time never moves back: an
        older ``now_ms`` changes nothing.
        """
        queue = self._queue
        if not queue or queue[0][0] > now_ms:
            if now_ms >= self._expired_before:
                self._set_time(now_ms)
            return []
        expired: list[T] = []
        self._hit_exp = -1
        buckets = self._buckets
        bucket_exp = self._bucket_exp
        limits = self._limits
        ticks = self._ticks
        wheel_size = self.wheel_size
        while queue and queue[0][0] <= now_ms:
            exp, idx = heappop(queue)
            if bucket_exp[idx] != exp:
                continue
            bucket_exp[idx] = -1
            bucket = buckets[idx]
            if not bucket:
                continue
            # A fresh dict frees the flushed one's table; re-inserted tasks
            # always land in a finer level, never back in this slot.
            buckets[idx] = {}
            if exp >= self._expired_before:
                self._set_time(exp)
            if idx < wheel_size:
                # The finest wheel's bucket spans one tick: all of it is due.
                for task in bucket:
                    task._bucket = None
                expired.extend(bucket)
                continue
            # A coarser bucket: expire what is due, move the rest down (add(), inlined).
            expired_before = self._expired_before
            for task in bucket:
                expiration_ms = task.expiration_ms
                if expiration_ms < expired_before:
                    task._bucket = None
                    expired.append(task)
                    continue
                level = bisect_right(limits, expiration_ms)
                tick = ticks[level]
                virtual_id = expiration_ms // tick
                slot = level * wheel_size + virtual_id % wheel_size
                lower = buckets[slot]
                lower[task] = None
                task._bucket = lower
                lower_exp = virtual_id * tick
                if bucket_exp[slot] != lower_exp:
                    bucket_exp[slot] = lower_exp
                    heappush(queue, (lower_exp, slot))
        if now_ms >= self._expired_before:
            self._set_time(now_ms)
        return expired

    # -- internals -----------------------------------------------------------

    def _add_level(self, current_ms: int, tick_ms: int) -> None:
        self._ticks.append(tick_ms)
        self._intervals.append(tick_ms * self.wheel_size)
        current = current_ms - current_ms % tick_ms
        self._current.append(current)
        self._limits.append(current + tick_ms * self.wheel_size)
        self._buckets.extend({} for _ in range(self.wheel_size))
        self._bucket_exp.extend(-1 for _ in range(self.wheel_size))

    def _grow(self, expiration_ms: int) -> None:
        """Create overflow wheels until the top one covers ``expiration_ms``."""
        while expiration_ms >= self._limits[-1]:
            self._add_level(self._current[-1], self._intervals[-1])

    def _set_time(self, time_ms: int) -> None:
        """Round every level's time down to its tick; stop at the first level that stays."""
        self._hit_exp = -1
        current = self._current
        ticks = self._ticks
        limits = self._limits
        intervals = self._intervals
        for level in range(len(ticks)):
            tick = ticks[level]
            if time_ms < current[level] + tick:
                break
            now = time_ms - time_ms % tick
            current[level] = now
            limits[level] = now + intervals[level]
        self._expired_before = current[0] + ticks[0]
