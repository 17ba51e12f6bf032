"""`actorlog bench timer`: the timing wheel against a lazy-deletion heap.

Both timers run in the same process on the same simulated clock (no
sleeping; time is a counter handed to ``advance_clock``). The baseline is
what a DelayQueue-style timer gives: ``heapq`` entries ``(deadline, seq,
task)``, cancel marks the task, expiry pops and skips marked tasks.

Workload 1, per number N of outstanding operations: a timer holds N
background tasks whose deadlines fall after the whole run (spread over 30 s,
overlapping the measured deadlines). Each timed phase is ``--ops`` add +
complete (30 s deadline, cancelled 1..5 ms later) then ``--ops`` add +
expire (deadline 1..200 ms ahead, the clock advanced until all expired), at
``--arrivals-per-ms`` per simulated millisecond. Every (N, timer) pair is
built first and then timed in turn, ``--rounds`` times, in alternating
order. Memory per outstanding operation is the tracemalloc growth while the
N background tasks are added (task objects included), divided by N.

Workload 2, steady state: ``--steady-ops`` operations arrive at
``--arrivals-per-ms`` per simulated millisecond with a ``--timeout-ms``
deadline; all but one in ``--expire-every`` are completed 1..5 ms after
arrival; the clock is advanced every simulated millisecond. Both timers run
the same arrivals in alternating slices of ``--slice-ms``. The rate is over
the arrivals; the lifecycle rate also counts the drain (advancing the clock
until every deadline passed). Peak memory is tracemalloc's peak over the
arrivals, in a separate pass from the timing, minus the memory in use
before the timer was built.

Rates are operations per second of this process's CPU time, with the cyclic
garbage collector on (``--gc paused`` times the data structures alone; see
``_collector``). Each rate ratio
is the median of per-round (workload 1) or per-slice (workload 2) ratios of
runs made back to back, which keeps bursts of load from other processes on a
shared machine out of the ratios.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from heapq import heappop, heappush
from itertools import count
from typing import Any, Protocol

import click

from actors.core.timing_wheel import TimerTask, TimingWheel
from bench.contract import min_median_max as _spread

BENCH_NAME = "timer"
RATIO_KEYS = ("wheel_1m_vs_1k", "memory_vs_heap_steady", "rate_vs_heap_steady")


class HeapTask:
    """The baseline's task: a deadline and a cancelled mark, like the wheel's task."""

    __slots__ = ("cancelled", "expiration_ms")

    def __init__(self, expiration_ms: int) -> None:
        self.expiration_ms = expiration_ms
        self.cancelled = False


class HeapTimer:
    """Lazy-deletion heap timer: cancel marks, expiry pops (the baseline)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, HeapTask]] = []
        self._seq = count()

    def add(self, task: HeapTask) -> bool:
        heappush(self._heap, (task.expiration_ms, next(self._seq), task))
        return True

    def cancel(self, task: HeapTask) -> bool:
        task.cancelled = True
        return True

    def advance_clock(self, now_ms: int) -> list[HeapTask]:
        heap = self._heap
        expired: list[HeapTask] = []
        while heap and heap[0][0] <= now_ms:
            task = heappop(heap)[2]
            if not task.cancelled:
                expired.append(task)
        return expired


class _Timer(Protocol):
    def add(self, task: Any) -> bool: ...
    def cancel(self, task: Any) -> bool: ...
    def advance_clock(self, now_ms: int) -> list[Any]: ...


IMPLS: dict[str, tuple[Callable[[], _Timer], Callable[[int], Any]]] = {
    "wheel": (TimingWheel, TimerTask),
    "heap": (HeapTimer, HeapTask),
}


# -- workload 1 -----------------------------------------------------------------


def _fill(timer: _Timer, task_cls: Callable[[int], Any], n: int, base_ms: int) -> None:
    add = timer.add
    for i in range(n):
        add(task_cls(base_ms + (i * 7919) % 30_000))


def _add_complete(
    timer: _Timer, task_cls: Callable[[int], Any], ops: int, per_ms: int, now: int
) -> int:
    """Adds ``ops`` tasks with a 30 s deadline and cancels each 1..5 ms later."""
    add = timer.add
    cancel = timer.cancel
    advance = timer.advance_clock
    pending: dict[int, list[Any]] = {}
    i = 0
    while i < ops or pending:
        advance(now)
        due = pending.pop(now, None)
        if due:
            for task in due:
                cancel(task)
        for _ in range(min(per_ms, ops - i)):
            task = task_cls(now + 30_000)
            add(task)
            pending.setdefault(now + 1 + i % 5, []).append(task)
            i += 1
        now += 1
    return now


def _add_expire(
    timer: _Timer, task_cls: Callable[[int], Any], ops: int, per_ms: int, now: int
) -> tuple[int, int]:
    """Adds ``ops`` tasks due 1..200 ms ahead and advances until all expired."""
    add = timer.add
    advance = timer.advance_clock
    expired = 0
    i = 0
    while i < ops:
        expired += len(advance(now))
        for _ in range(min(per_ms, ops - i)):
            add(task_cls(now + 1 + i % 200))
            i += 1
        now += 1
    last = now + 200  # no deadline is later
    while now <= last:
        expired += len(advance(now))
        now += 1
    return now, expired


class Outstanding:
    """One timer holding ``n`` background tasks, timed in short phases.

    The background deadlines fall after every phase (so the timer holds
    ``n`` outstanding operations throughout) and overlap the 30 s deadlines
    of the measured add + complete operations, as in a busy broker.
    """

    def __init__(self, impl: str, n: int, window_ms: int) -> None:
        make_timer, self.task_cls = IMPLS[impl]
        self.impl = impl
        self.timer = make_timer()
        _fill(self.timer, self.task_cls, n, window_ms + 16_000)
        self.now = 1

    def phase(self, ops: int, per_ms: int) -> tuple[float, float]:
        """CPU seconds of ``ops`` add + complete, then of ``ops`` add + expire."""
        t0 = time.process_time()
        now = _add_complete(self.timer, self.task_cls, ops, per_ms, self.now)
        t1 = time.process_time()
        self.now, expired = _add_expire(self.timer, self.task_cls, ops, per_ms, now)
        t2 = time.process_time()
        if expired != ops:
            raise RuntimeError(f"{self.impl}: {expired} of {ops} tasks expired")
        return t1 - t0, t2 - t1


def memory_outstanding(impl: str, n: int) -> float:
    """Bytes per outstanding operation (tracemalloc growth while adding n tasks)."""
    make_timer, task_cls = IMPLS[impl]
    gc.collect()
    tracemalloc.start()
    try:
        timer = make_timer()
        before = tracemalloc.get_traced_memory()[0]
        _fill(timer, task_cls, n, 100_000)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del timer
    return (after - before) / n


# -- workload 2 -----------------------------------------------------------------


class Steady:
    """The steady-state arrivals, run a slice of simulated time at a time."""

    def __init__(
        self, impl: str, ops: int, per_ms: int, timeout_ms: int, expire_every: int
    ) -> None:
        make_timer, self.task_cls = IMPLS[impl]
        self.impl = impl
        self.timer = make_timer()
        self.ops = ops
        self.per_ms = per_ms
        self.timeout_ms = timeout_ms
        self.expire_every = expire_every
        self.pending: dict[int, list[Any]] = {}  # completion time -> tasks
        self.added = 0
        self.now = 0

    @property
    def done(self) -> bool:
        return self.added >= self.ops

    def arrivals(self, slice_ms: int) -> int:
        """Runs ``slice_ms`` simulated milliseconds of arrivals; returns how many arrived."""
        task_cls = self.task_cls
        add = self.timer.add
        cancel = self.timer.cancel
        advance = self.timer.advance_clock
        pending = self.pending
        per_ms, timeout_ms, expire_every = self.per_ms, self.timeout_ms, self.expire_every
        i, now, ops = self.added, self.now, self.ops
        first = i
        end = now + slice_ms
        while i < ops and now < end:
            advance(now)
            due = pending.pop(now, None)
            if due:
                for task in due:
                    cancel(task)
            for _ in range(min(per_ms, ops - i)):
                task = task_cls(now + timeout_ms)
                add(task)
                if i % expire_every:
                    done = now + 1 + i % 5
                    waiting = pending.get(done)
                    if waiting is None:
                        pending[done] = [task]
                    else:
                        waiting.append(task)
                i += 1
            now += 1
        self.added, self.now = i, now
        return i - first

    def drain(self) -> int:
        """Advances the clock past every deadline; returns how many expired."""
        cancel = self.timer.cancel
        advance = self.timer.advance_clock
        pending = self.pending
        expired = 0
        now = self.now
        end = now + self.timeout_ms
        while now <= end:
            expired += len(advance(now))
            due = pending.pop(now, None)
            if due:
                for task in due:
                    cancel(task)
            now += 1
        self.now = now
        expected = len(range(0, self.ops, self.expire_every))
        if expired != expected:
            raise RuntimeError(f"{self.impl}: {expired} expired, expected {expected}")
        return expired


def memory_steady(impl: str, ops: int, per_ms: int, timeout_ms: int, expire_every: int) -> int:
    """Peak tracemalloc bytes over the arrival phase, above the memory in use at its start."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run = Steady(impl, ops, per_ms, timeout_ms, expire_every)
        run.arrivals(ops // per_ms + 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del run
    return peak - base


# -- driver ---------------------------------------------------------------------


@contextmanager
def _collector(gc_mode: str, freeze: bool) -> Iterator[None]:
    """The cyclic garbage collector while timing.

    ``on``: running, as in a broker; with ``freeze`` the objects built before
    timing (workload 1's background tasks, alike for both timers) are moved
    out of its sight, so a full collection started by one timer does not walk
    the other timers' millions of tasks on its clock. ``paused``: no
    collection at all (neither timer makes cyclic garbage while timed), which
    leaves out the cost of walking the heap's dead entries.
    """
    gc.collect()
    if gc_mode == "paused":
        gc.disable()
    elif freeze:
        gc.freeze()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()




def _rates(ops: float, seconds: list[float]) -> dict[str, float]:
    return _spread([ops / s for s in seconds]) | {"overall": ops * len(seconds) / sum(seconds)}


def run_outstanding(
    outstanding: list[int], ops: int, per_ms: int, rounds: int, gc_mode: str = "on"
) -> tuple[dict[str, Any], float]:
    """Workload 1: every (N, timer) pair timed in turn, ``rounds`` times over."""
    window_ms = rounds * (2 * (ops // per_ms + 1) + 210)
    timers = {(n, impl): Outstanding(impl, n, window_ms) for n in outstanding for impl in IMPLS}
    times: dict[tuple[int, str], list[tuple[float, float]]] = {key: [] for key in timers}
    with _collector(gc_mode, freeze=True):
        for timer in timers.values():  # warm-up on every timer
            timer.phase(min(ops, 2_000), per_ms)
        for r in range(rounds):
            keys = list(timers) if r % 2 == 0 else list(timers)[::-1]  # neither always first
            for key in keys:
                times[key].append(timers[key].phase(ops, per_ms))
    del timers
    results: dict[str, Any] = {}
    for n in outstanding:
        row: dict[str, Any] = {}
        for impl in IMPLS:
            phases = times[(n, impl)]
            row[impl] = {
                "add_complete_per_s": _rates(ops, [a for a, _ in phases]),
                "add_expire_per_s": _rates(ops, [b for _, b in phases]),
                "rate_per_s": _rates(2 * ops, [a + b for a, b in phases]),
                "bytes_per_op": memory_outstanding(impl, n),
            }
        results[str(n)] = row
    small, large = min(outstanding), max(outstanding)
    pairs = zip(times[(large, "wheel")], times[(small, "wheel")], strict=True)
    ratio = statistics.median((s[0] + s[1]) / (b[0] + b[1]) for b, s in pairs)
    return results, ratio


def run_steady(
    ops: int, per_ms: int, timeout_ms: int, expire_every: int, slice_ms: int, gc_mode: str = "on"
) -> tuple[dict[str, Any], float]:
    """Workload 2: both timers advance through the same arrivals in alternating slices."""
    runs = {impl: Steady(impl, ops, per_ms, timeout_ms, expire_every) for impl in IMPLS}
    seconds: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    slices = 0
    drain_seconds = {}
    with _collector(gc_mode, freeze=False):
        while not all(run.done for run in runs.values()):
            order = list(runs) if slices % 2 == 0 else list(runs)[::-1]
            for impl in order:
                t0 = time.process_time()
                runs[impl].arrivals(slice_ms)
                seconds[impl].append(time.process_time() - t0)
            slices += 1
        for impl, run in runs.items():
            t0 = time.process_time()
            run.drain()
            drain_seconds[impl] = time.process_time() - t0
    del runs
    results: dict[str, Any] = {}
    for impl in IMPLS:
        total = sum(seconds[impl])
        results[impl] = {
            "rate_per_s": ops / total,
            "slice_rate_per_s": _spread(
                [per_ms * slice_ms / s for s in seconds[impl][:-1]] or [ops / total]
            ),
            "lifecycle_rate_per_s": ops / (total + drain_seconds[impl]),
            "peak_bytes": memory_steady(impl, ops, per_ms, timeout_ms, expire_every),
        }
    # Per slice, the heap's time over the wheel's: both ran the same arrivals back to back.
    ratio = statistics.median(h / w for w, h in zip(seconds["wheel"], seconds["heap"], strict=True))
    return results, ratio


def run_bench(
    outstanding: list[int],
    ops: int,
    steady_ops: int,
    per_ms: int,
    timeout_ms: int,
    expire_every: int,
    rounds: int,
    slice_ms: int,
    gc_mode: str = "on",
) -> dict[str, Any]:
    w1, wheel_1m_vs_1k = run_outstanding(outstanding, ops, per_ms, rounds, gc_mode)
    steady, rate_vs_heap = run_steady(
        steady_ops, per_ms, timeout_ms, expire_every, slice_ms, gc_mode
    )
    ratios = {
        "wheel_1m_vs_1k": wheel_1m_vs_1k,
        "memory_vs_heap_steady": steady["heap"]["peak_bytes"]
        / max(1, steady["wheel"]["peak_bytes"]),
        "rate_vs_heap_steady": rate_vs_heap,
    }
    return {"results": {"outstanding": w1, "steady": steady}, "ratios": ratios}


def _print_summary(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    results = report["results"]
    table = Table(title="workload 1: add+complete / add+expire with N outstanding (ops/s of CPU)")
    for column in ("N", "timer", "add+complete/s", "add+expire/s", "both/s", "rounds min..max"):
        table.add_column(column, justify="right")
    table.add_column("bytes/op", justify="right")
    for n, row in results["outstanding"].items():
        for impl, entry in row.items():
            both = entry["rate_per_s"]
            table.add_row(
                f"{int(n):,}",
                impl,
                f"{entry['add_complete_per_s']['overall']:,.0f}",
                f"{entry['add_expire_per_s']['overall']:,.0f}",
                f"{both['overall']:,.0f}",
                f"{both['min']:,.0f}..{both['max']:,.0f}",
                f"{entry['bytes_per_op']:.0f}",
            )
    console.print(table)
    table = Table(title="workload 2: steady state (ops/s of CPU; tracemalloc peak)")
    for column in ("timer", "arrival ops/s", "slices min..max", "with drain ops/s", "peak MB"):
        table.add_column(column, justify="right")
    for impl, entry in results["steady"].items():
        slices = entry["slice_rate_per_s"]
        table.add_row(
            impl,
            f"{entry['rate_per_s']:,.0f}",
            f"{slices['min']:,.0f}..{slices['max']:,.0f}",
            f"{entry['lifecycle_rate_per_s']:,.0f}",
            f"{entry['peak_bytes'] / 1e6:.2f}",
        )
    console.print(table)
    for key, value in report["ratios"].items():
        console.print(f"{key} = {value:.2f}")


@click.command(name="timer")
@click.option(
    "--outstanding",
    default="1000,100000,1000000",
    show_default=True,
    help="comma-separated numbers of outstanding operations (workload 1)",
)
@click.option(
    "--ops", default=20_000, show_default=True, help="operations per timed phase in workload 1"
)
@click.option(
    "--steady-ops",
    default=1_000_000,
    show_default=True,
    help="operations in the steady-state workload",
)
@click.option("--arrivals-per-ms", default=100, show_default=True)
@click.option("--timeout-ms", default=30_000, show_default=True)
@click.option(
    "--expire-every",
    default=100,
    show_default=True,
    help="one operation in this many is left to expire in the steady state",
)
@click.option(
    "--rounds",
    default=10,
    show_default=True,
    help="workload 1: timed phases per (N, timer), interleaved",
)
@click.option(
    "--slice-ms",
    default=500,
    show_default=True,
    help="workload 2: simulated ms each timer runs before the other takes a turn",
)
@click.option(
    "--gc",
    "gc_mode",
    type=click.Choice(["on", "paused"]),
    default="on",
    show_default=True,
    help="cyclic garbage collector while timing (paused: data structures alone)",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="write the report as JSON here",
)
def command(
    outstanding: str,
    ops: int,
    steady_ops: int,
    arrivals_per_ms: int,
    timeout_ms: int,
    expire_every: int,
    rounds: int,
    slice_ms: int,
    gc_mode: str,
    json_path: str | None,
) -> None:
    """Hierarchical timing wheel vs a lazy-deletion heapq timer."""
    sizes = [int(part) for part in outstanding.split(",") if part.strip()]
    if not sizes:
        raise click.BadParameter("needs at least one size", param_hint="--outstanding")
    config = {
        "outstanding": sizes,
        "ops": ops,
        "steady_ops": steady_ops,
        "arrivals_per_ms": arrivals_per_ms,
        "timeout_ms": timeout_ms,
        "expire_every": expire_every,
        "rounds": rounds,
        "slice_ms": slice_ms,
        "memory": "tracemalloc (separate pass from the timed runs)",
        "rate": "operations per second of process CPU time",
        "gc": gc_mode,
        "rate_ratios": "median of per-round (workload 1) or per-slice (workload 2) ratios",
        "tick_ms": 1,
        "wheel_size": 20,
    }
    report = run_bench(
        sizes, ops, steady_ops, arrivals_per_ms, timeout_ms, expire_every, rounds, slice_ms, gc_mode
    )
    _print_summary(report)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump({"bench": BENCH_NAME, "config": config, **report}, out, indent=2)
