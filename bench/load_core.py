"""Shared machinery of the load commands: worker processes, latency histograms, summaries.

One Python process cannot saturate a broker, so every load runs in spawned
worker processes (never forked: librdkafka's threads do not survive a fork).
Each worker counts latencies in a plain dict on the hot path (an HDR
histogram insert costs microseconds in pure Python), turns it into an HDR
histogram at the end, and sends it back encoded; the parent merges them.
Every worker is started, stopped and reaped by the parent, also on Ctrl-C.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.context
import os
import queue
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from hdrh.histogram import HdrHistogram

# Latencies are recorded in microseconds, up to one hour.
HIST_LOWEST_US = 1
HIST_HIGHEST_US = 3_600_000_000
HIST_DIGITS = 3
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p999", 99.9),
)
# How long the parent waits past a run's hard time cap before it terminates workers.
REAP_GRACE_S = 20.0


def new_histogram() -> HdrHistogram:
    return HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)


class LatencyCounts:
    """Latency counts keyed by microsecond; about 60 ns per record instead of 4 us for HDR.

    Values above 100 ms are rounded to 100 us, so the dict stays bounded while
    keeping more precision than the 3 significant digits of the histogram.
    """

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def record_us(self, value_us: int) -> None:
        if value_us >= 100_000:
            value_us -= value_us % 100
        elif value_us < HIST_LOWEST_US:
            value_us = HIST_LOWEST_US
        counts = self.counts
        counts[value_us] = counts.get(value_us, 0) + 1

    def merge(self, other: LatencyCounts) -> None:
        for value, count in other.counts.items():
            self.counts[value] = self.counts.get(value, 0) + count

    def to_histogram(self) -> HdrHistogram:
        hist = new_histogram()
        for value, count in self.counts.items():
            hist.record_value(min(value, HIST_HIGHEST_US), count)
        return hist

    def encode(self) -> str:
        return encode_histogram(self.to_histogram())


def encode_histogram(hist: HdrHistogram) -> str:
    return bytes(hist.encode()).decode("ascii")


def merge_encoded(encoded: Iterable[str]) -> HdrHistogram:
    """Merge the workers' encoded histograms into one."""
    merged = new_histogram()
    for item in encoded:
        merged.add(HdrHistogram.decode(item.encode("ascii")))
    return merged


def latency_summary_ms(hist: HdrHistogram) -> dict[str, float | int]:
    """count, p50..p999, max and mean in milliseconds (the JSON shape of every latency block)."""
    count = int(hist.get_total_count())
    out: dict[str, float | int] = {"count": count}
    for name, pct in PERCENTILES:
        out[f"{name}_ms"] = hist.get_value_at_percentile(pct) / 1000.0 if count else 0.0
    out["max_ms"] = hist.get_max_value() / 1000.0 if count else 0.0
    out["mean_ms"] = hist.get_mean_value() / 1000.0 if count else 0.0
    return out


def merge_errors(
    per_worker: Iterable[Mapping[str, Mapping[str, int]]],
) -> dict[str, dict[str, int]]:
    """Errors are `{NAME: {"code": c, "count": n}}`; sum the counts across workers."""
    merged: dict[str, dict[str, int]] = {}
    for errors in per_worker:
        for name, entry in errors.items():
            slot = merged.setdefault(name, {"code": int(entry["code"]), "count": 0})
            slot["count"] += int(entry["count"])
    return merged


def hide_secrets(client_config: Mapping[str, str]) -> dict[str, str]:
    """A load's client settings for its JSON and tables: the value of a password, a secret,
    a PEM key or a login config hidden."""
    return {k: ("[hidden]" if _SECRET.search(k) else v) for k, v in client_config.items()}


# password, secret (sasl.oauthbearer.client.secret), a key in PEM (ssl.key.pem), a login
# (sasl.jaas.config, sasl.oauthbearer.config), a private key's passphrase
_SECRET = re.compile(r"password|secret|passphrase|key\.pem|jaas\.config|oauthbearer\.config",
                     re.IGNORECASE)


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# --------------------------------------------------------------------------- workers


@dataclass
class WorkerSlot:
    """What a worker process sees of the parent: its progress counter and the shared signals."""

    index: int
    progress: Any  # multiprocessing Array('q'), one counter per worker of the group
    ready: Any  # multiprocessing Array('b')
    go: Any  # multiprocessing Event: start the measured phase
    stop: Any  # multiprocessing Event: stop early (Ctrl-C, time cap)
    expected: Any  # multiprocessing Value('q'): a count the parent learns late (e2e), -1 unknown
    parent_pid: int = 0  # a worker whose parent died stops by itself

    def report(self, done: int) -> None:
        self.progress[self.index] = done

    def mark_ready(self) -> None:
        self.ready[self.index] = 1

    def wait_go(self, timeout_s: float) -> bool:
        return bool(self.go.wait(timeout_s))

    def stop_requested(self) -> bool:
        return bool(self.stop.is_set()) or (
            self.parent_pid != 0 and os.getppid() != self.parent_pid
        )

    def group_done(self) -> int:
        return int(sum(self.progress[:]))

    def expected_total(self) -> int:
        return int(self.expected.value)


WorkerTarget = Callable[[Any, WorkerSlot], dict[str, Any]]


def _worker_main(target: WorkerTarget, payload: Any, slot: WorkerSlot, results: Any) -> None:
    # The parent owns Ctrl-C: it sets `stop`, waits, then terminates us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = target(payload, slot)
    except Exception as exc:  # reported to the parent, which fails the run loudly
        result = {
            "worker_error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    results.put((slot.index, result))


class WorkerGroup:
    """N spawned processes running `target(payload_i, slot_i)`, each returning one dict."""

    def __init__(
        self,
        ctx: multiprocessing.context.SpawnContext,
        target: WorkerTarget,
        payloads: Sequence[Any],
        label: str,
    ) -> None:
        self.label = label
        n = len(payloads)
        self.progress = ctx.Array("q", n, lock=False)
        self.ready = ctx.Array("b", n, lock=False)
        self.go = ctx.Event()
        self.stop = ctx.Event()
        self.expected = ctx.Value("q", -1, lock=False)
        self.results_queue = ctx.Queue()
        self.results: dict[int, dict[str, Any]] = {}
        self.procs = [
            ctx.Process(
                target=_worker_main,
                args=(
                    target,
                    payload,
                    WorkerSlot(
                        i,
                        self.progress,
                        self.ready,
                        self.go,
                        self.stop,
                        self.expected,
                        parent_pid=os.getpid(),
                    ),
                    self.results_queue,
                ),
                name=f"{label}-{i}",
                daemon=True,
            )
            for i, payload in enumerate(payloads)
        ]

    def start(self) -> None:
        for proc in self.procs:
            proc.start()

    def all_ready(self) -> bool:
        return all(self.ready[:]) or self.finished()

    def done(self) -> int:
        return int(sum(self.progress[:]))

    def collect(self) -> None:
        """Take whatever results arrived, without blocking."""
        while True:
            try:
                index, result = self.results_queue.get_nowait()
            except queue.Empty:
                return
            self.results[index] = result

    def finished(self) -> bool:
        self.collect()
        if len(self.results) == len(self.procs):
            return True
        return all(not p.is_alive() for p in self.procs) and self._drain_after_exit()

    def _drain_after_exit(self) -> bool:
        deadline = time.monotonic() + 1.0
        while len(self.results) < len(self.procs) and time.monotonic() < deadline:
            self.collect()
            time.sleep(0.02)
        return True

    def reap(self, timeout_s: float = 5.0) -> None:
        """Stop and reap every worker: ask, then SIGTERM, then SIGKILL."""
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        started = [p for p in self.procs if p.pid is not None]
        # Keep reading results while waiting: a worker cannot exit before its result
        # has left through the queue's pipe.
        alive = [p for p in started if p.is_alive()]
        while alive and time.monotonic() < deadline:
            self.collect()
            alive[0].join(0.05)
            alive = [p for p in alive if p.is_alive()]
        self.collect()
        for proc in self.procs:
            if proc.pid is not None and proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.pid is not None and proc.is_alive():
                proc.kill()
                proc.join(2.0)
        self.collect()
        self.results_queue.close()
        self.results_queue.join_thread()

    def failures(self) -> list[str]:
        out = [
            r["worker_error"] + "\n" + r.get("traceback", "")
            for r in self.results.values()
            if "worker_error" in r
        ]
        missing = len(self.procs) - len(self.results)
        if missing:
            codes = [p.exitcode for p in self.procs]
            out.append(f"{missing} {self.label} worker(s) returned nothing (exit codes {codes})")
        return out

    def ordered_results(self) -> list[dict[str, Any]]:
        return [self.results[i] for i in sorted(self.results)]


class LoadRunError(RuntimeError):
    """A worker failed or never answered; the message carries its traceback, ``summary``
    the first line of each failure (the command line's one-line error)."""

    def __init__(self, message: str, summary: str | None = None) -> None:
        super().__init__(message)
        self.summary = message if summary is None else summary


def spawn_context() -> multiprocessing.context.SpawnContext:
    return mp.get_context("spawn")


class ProgressView:
    """A rich progress bar showing done/total and the rate over the last second."""

    def __init__(self, enabled: bool, description: str, total: float | None, unit: str) -> None:
        self.enabled = enabled
        self.unit = unit
        self._samples: list[tuple[float, int]] = []
        self._progress: Any = None
        self._task: Any = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._task = self._progress.add_task(description, total=total, rate="")

    def __enter__(self) -> Self:
        if self._progress is not None:
            self._progress.start()
        return self

    def update(self, done: int) -> None:
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > 1.0:
            self._samples.pop(0)
        if self._progress is None:
            return
        rate = 0.0
        t0, d0 = self._samples[0]
        if now > t0:
            rate = (done - d0) / (now - t0)
        self._progress.update(self._task, completed=done, rate=f"{rate:,.0f} {self.unit}/s")

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _raise_on_sigterm() -> Any:
    """Turn SIGTERM into KeyboardInterrupt so the workers are reaped; returns the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGTERM, handler)


def run_groups(
    groups: Sequence[WorkerGroup],
    *,
    hard_cap_s: float,
    progress: ProgressView,
    progress_group: int = -1,
    ready_timeout_s: float = 60.0,
    on_tick: Callable[[], None] | None = None,
) -> None:
    """Start `groups` in order (each waits for the previous one to be ready), release them
    together, follow progress, and reap everything however the run ends.

    `hard_cap_s` bounds the whole measured phase; past it (plus a grace for draining)
    workers are terminated, so a stuck broker cannot hang the tool.
    """
    started: list[WorkerGroup] = []
    previous_term = _raise_on_sigterm()
    try:
        for group in groups:
            group.start()
            started.append(group)
            deadline = time.monotonic() + ready_timeout_s
            while not group.all_ready():
                if time.monotonic() > deadline:
                    raise LoadRunError(
                        f"{group.label} workers not ready after {ready_timeout_s:.0f} s"
                    )
                time.sleep(0.02)
        for group in groups:
            group.go.set()
        deadline = time.monotonic() + hard_cap_s + REAP_GRACE_S
        with progress:
            while True:
                progress.update(groups[progress_group].done())
                if on_tick is not None:
                    on_tick()
                if all(g.finished() for g in groups):
                    break
                if time.monotonic() > deadline:
                    for g in groups:
                        g.stop.set()
                    break
                time.sleep(0.1)
            progress.update(groups[progress_group].done())
    except KeyboardInterrupt:
        for g in started:
            g.stop.set()
        raise
    finally:
        for g in started:
            g.reap()
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    problems = [p for g in groups for p in g.failures()]
    if problems:
        raise LoadRunError("\n".join(problems),
                           "; ".join(dict.fromkeys(p.splitlines()[0] for p in problems)))
