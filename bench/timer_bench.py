"""`actorlog bench timer`: the timing wheel against a lazy-deletion heap.

Both timers run in the same process on the same simulated clock (no
sleeping; time is a counter handed to ``advance_clock``). The baseline is
what a DelayQueue-style timer gives: ``heapq`` entries ``(deadline, seq,
task)``, cancel marks the task, expiry pops and skips marked tasks.

Workload 1, per number N of outstanding operations: N background tasks whose
deadlines fall after the measured window stay scheduled throughout, then
``--ops`` add + complete (cancel a few ms later) and ``--ops`` add + expire
(deadline 1..200 ms ahead, the clock advanced until all expired) are timed,
at ``--arrivals-per-ms`` operations per simulated millisecond. Memory per
outstanding operation is the tracemalloc growth while the N background
tasks are added (task objects included), divided by N.

Workload 2, steady state: ``--steady-ops`` operations arrive at
``--arrivals-per-ms`` per simulated millisecond with a ``--timeout-ms``
deadline, all but one in ``--expire-every`` are completed 1..5 ms after
arrival, the clock is advanced every simulated millisecond. The rate is
taken over the arrival phase (the ratio uses it); the lifecycle rate also
counts the drain (advancing the clock until every deadline passed). Peak
memory is tracemalloc's peak over the arrival phase, measured in a separate
pass from the timing, minus the memory in use when the pass started.

Rates are operations per second of this process's CPU time. Repetitions are
interleaved (order alternating), and each rate ratio is the median over
repetitions of the ratio between two runs made close together, which keeps
a burst of load from other processes on a shared machine out of the ratios.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from heapq import heappop, heappush
from itertools import count
from typing import Any, Protocol

import click

from actors.core.timing_wheel import TimerTask, TimingWheel

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


def run_outstanding(impl: str, n: int, ops: int, per_ms: int) -> dict[str, float]:
    make_timer, task_cls = IMPLS[impl]
    timer = make_timer()
    window_ms = 2 * (ops // per_ms + 1) + 400
    _fill(timer, task_cls, n, window_ms + 16_000)
    gc.collect()
    t0 = time.process_time()
    now = _add_complete(timer, task_cls, ops, per_ms, 1)
    t1 = time.process_time()
    _, expired = _add_expire(timer, task_cls, ops, per_ms, now)
    t2 = time.process_time()
    if expired != ops:
        raise RuntimeError(f"{impl}: {expired} of {ops} tasks expired")
    return {
        "add_complete_per_s": ops / (t1 - t0),
        "add_expire_per_s": ops / (t2 - t1),
        "rate_per_s": 2 * ops / (t2 - t0),
    }


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


def _steady_arrivals(
    timer: _Timer,
    task_cls: Callable[[int], Any],
    ops: int,
    per_ms: int,
    timeout_ms: int,
    expire_every: int,
    pending: dict[int, list[Any]],
) -> int:
    add = timer.add
    cancel = timer.cancel
    advance = timer.advance_clock
    i = 0
    now = 0
    while i < ops:
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
    return now


def _steady_drain(timer: _Timer, now: int, timeout_ms: int, pending: dict[int, list[Any]]) -> int:
    cancel = timer.cancel
    advance = timer.advance_clock
    expired = 0
    end = now + timeout_ms
    while now <= end:
        expired += len(advance(now))
        due = pending.pop(now, None)
        if due:
            for task in due:
                cancel(task)
        now += 1
    return expired


def run_steady(
    impl: str, ops: int, per_ms: int, timeout_ms: int, expire_every: int
) -> dict[str, float]:
    make_timer, task_cls = IMPLS[impl]
    timer = make_timer()
    pending: dict[int, list[Any]] = {}
    gc.collect()
    t0 = time.process_time()
    now = _steady_arrivals(timer, task_cls, ops, per_ms, timeout_ms, expire_every, pending)
    t1 = time.process_time()
    expired = _steady_drain(timer, now, timeout_ms, pending)
    t2 = time.process_time()
    expected = len(range(0, ops, expire_every))
    if expired != expected:
        raise RuntimeError(f"{impl}: {expired} expired, expected {expected}")
    return {"rate_per_s": ops / (t1 - t0), "lifecycle_rate_per_s": ops / (t2 - t0)}


def memory_steady(impl: str, ops: int, per_ms: int, timeout_ms: int, expire_every: int) -> int:
    """Peak tracemalloc bytes over the arrival phase, above the memory in use at its start."""
    make_timer, task_cls = IMPLS[impl]
    gc.collect()
    tracemalloc.start()
    try:
        timer = make_timer()
        pending: dict[int, list[Any]] = {}
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        _steady_arrivals(timer, task_cls, ops, per_ms, timeout_ms, expire_every, pending)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del timer, pending
    return peak - base


# -- driver ---------------------------------------------------------------------


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _paired(numerators: list[dict[str, float]], denominators: list[dict[str, float]]) -> float:
    return statistics.median(
        n["rate_per_s"] / d["rate_per_s"] for n, d in zip(numerators, denominators, strict=True)
    )


def run_bench(
    outstanding: list[int],
    ops: int,
    steady_ops: int,
    per_ms: int,
    timeout_ms: int,
    expire_every: int,
    repeat: int,
) -> dict[str, Any]:
    """Timed runs interleaved (repetition outermost) so bursts of load elsewhere
    on a shared machine spread over every configuration; then the memory passes."""
    for impl in IMPLS:  # warm-up: allocator, caches and specialised bytecode
        run_outstanding(impl, 1000, min(ops, 20_000), per_ms)
    w1_runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    steady_runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(repeat):
        # Alternate the order so neither side always runs first.
        sizes = outstanding if rep % 2 == 0 else outstanding[::-1]
        impls = list(IMPLS) if rep % 2 == 0 else list(IMPLS)[::-1]
        for n in sizes:
            for impl in impls:
                w1_runs.setdefault((n, impl), []).append(run_outstanding(impl, n, ops, per_ms))
        for impl in impls:
            steady_runs.setdefault(impl, []).append(
                run_steady(impl, steady_ops, per_ms, timeout_ms, expire_every)
            )

    results: dict[str, Any] = {"outstanding": {}, "steady": {}}
    for n in outstanding:
        row: dict[str, Any] = {}
        for impl in IMPLS:
            runs = w1_runs[(n, impl)]
            row[impl] = {key: _spread([r[key] for r in runs]) for key in runs[0]}
            row[impl]["bytes_per_op"] = memory_outstanding(impl, n)
        results["outstanding"][str(n)] = row
    for impl in IMPLS:
        runs = steady_runs[impl]
        entry: dict[str, Any] = {key: _spread([r[key] for r in runs]) for key in runs[0]}
        entry["peak_bytes"] = memory_steady(impl, steady_ops, per_ms, timeout_ms, expire_every)
        results["steady"][impl] = entry

    # Each rate ratio is the median over repetitions of the ratio of two runs
    # made close together in time, so a burst of load elsewhere on a shared
    # machine hits both sides of a ratio rather than one.
    small, large = min(outstanding), max(outstanding)
    steady = results["steady"]
    ratios = {
        "wheel_1m_vs_1k": _paired(w1_runs[(large, "wheel")], w1_runs[(small, "wheel")]),
        "memory_vs_heap_steady": steady["heap"]["peak_bytes"]
        / max(1, steady["wheel"]["peak_bytes"]),
        "rate_vs_heap_steady": _paired(steady_runs["wheel"], steady_runs["heap"]),
    }
    return {"results": results, "ratios": ratios}


def _print_summary(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=110)
    results = report["results"]
    table = Table(title="workload 1: add+complete / add+expire with N outstanding (median run)")
    for column in (
        "N",
        "timer",
        "add+complete/s",
        "add+expire/s",
        "both/s",
        "min..max",
        "bytes/op",
    ):
        table.add_column(column, justify="right")
    for n, row in results["outstanding"].items():
        for impl, entry in row.items():
            table.add_row(
                f"{int(n):,}",
                impl,
                f"{entry['add_complete_per_s']['median']:,.0f}",
                f"{entry['add_expire_per_s']['median']:,.0f}",
                f"{entry['rate_per_s']['median']:,.0f}",
                f"{entry['rate_per_s']['min']:,.0f}..{entry['rate_per_s']['max']:,.0f}",
                f"{entry['bytes_per_op']:.0f}",
            )
    console.print(table)
    table = Table(title="workload 2: steady state (ops/s of CPU time; tracemalloc peak)")
    for column in ("timer", "arrival ops/s", "min..max", "with drain ops/s", "peak MB"):
        table.add_column(column, justify="right")
    for impl, entry in results["steady"].items():
        rate = entry["rate_per_s"]
        table.add_row(
            impl,
            f"{rate['median']:,.0f}",
            f"{rate['min']:,.0f}..{rate['max']:,.0f}",
            f"{entry['lifecycle_rate_per_s']['median']:,.0f}",
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
    "--ops", default=200_000, show_default=True, help="measured operations per phase in workload 1"
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
@click.option("--repeat", default=3, show_default=True, help="timed repetitions (interleaved)")
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
    repeat: int,
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
        "repeat": repeat,
        "memory": "tracemalloc (separate pass from the timed runs)",
        "rate": "operations per second of process CPU time",
        "rate_ratios": "median over repetitions of per-repetition ratios",
        "tick_ms": 1,
        "wheel_size": 20,
    }
    report = run_bench(sizes, ops, steady_ops, arrivals_per_ms, timeout_ms, expire_every, repeat)
    _print_summary(report)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as out:
            json.dump({"bench": BENCH_NAME, "config": config, **report}, out, indent=2)
