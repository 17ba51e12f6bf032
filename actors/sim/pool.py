"""Seeds in worker processes: ``actorlog sim --jobs N``.

A seed's run depends on the seed alone (and PYTHONHASHSEED, which the
command fixes and the workers inherit), not on the process or on the seeds
run before it in that process, so seeds can run anywhere. :func:`results`
hands them to N workers, lowest seed first, and yields the results in seed
order; it ends after the first failing seed by seed number, as a run in
one process does: seeds below it still finish, seeds above it are not
started and the workers running them are stopped.

Each worker holds one seed at a time, over a pipe of its own, so the parent
knows which seed a worker that died was running (:class:`WorkerDied`) and
never waits on a lost task. Workers ignore SIGINT (Ctrl-C at a terminal
reaches the whole process group; the parent decides) and leave at SIGTERM
through their ``finally`` blocks, which remove the run's directory; the
parent sends SIGTERM to every worker still running when it stops, for any
reason, and SIGKILL to one that has not left a few seconds later. A worker
whose parent dies gets SIGTERM from the kernel (PR_SET_PDEATHSIG).

Workers are forked from the command, which has imported the simulator (an
interpreter of its own would import it again, 1.5 s of CPU a worker); a
process with other threads (a test runner's) spawns them instead, as forking
it could copy a lock another thread holds.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

PR_SET_PDEATHSIG = 1
HASH_SEED = "0"   # as actors/cli/sim.py runs itself
STOP_GRACE_S = 5.0


class SeedError(Exception):
    """A seed's run raised (not a violation: the simulator itself broke), or its worker died."""

    def __init__(self, seed: int, detail: str) -> None:
        super().__init__(f"seed {seed}: {detail}")
        self.seed = seed
        self.detail = detail


class WorkerDied(SeedError):
    pass


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def results(seeds: range, options: Any, jobs: int,
            log_file: str | None = None) -> Iterator[Any]:
    """The SeedResult of each seed in order, up to and including the first failure."""
    if jobs <= 1 or len(seeds) <= 1:
        yield from _in_process(seeds, options)
        return
    yield from _Pool(seeds, options, min(jobs, len(seeds)), log_file).run()


def _in_process(seeds: range, options: Any) -> Iterator[Any]:
    from actors.sim.run import run_seed

    for seed in seeds:
        result, _world = run_seed(seed, options)
        yield result
        if not result.ok:
            return


class _Pool:
    def __init__(self, seeds: range, options: Any, jobs: int, log_file: str | None) -> None:
        self.seeds = seeds
        self.options = options
        self.jobs = jobs
        self.log_file = log_file
        import actors.sim.run  # noqa: F401  (once, before the workers fork)

        forking = (threading.active_count() == 1
                   and "fork" in multiprocessing.get_all_start_methods())
        self.context: Any = multiprocessing.get_context("fork" if forking else "spawn")
        self.workers: list[tuple[BaseProcess, Connection]] = []
        self.running: dict[int, int] = {}     # worker index -> its seed
        self.done: dict[int, Any] = {}        # seed -> result, not yet yielded
        self.next_seed = seeds.start          # the next seed to hand out
        self.first_failure: int | None = None
        self.stopped: set[int] = set()       # workers sent SIGTERM

    def run(self) -> Iterator[Any]:
        try:
            for index in range(self.jobs):
                self._start_worker()
                self._hand_out(index)
            want = self.seeds.start
            while want < self.seeds.stop:
                assert self.running or want in self.done, (want, self.next_seed)
                while want in self.done:
                    result = self.done.pop(want)
                    yield result
                    if not result.ok:
                        return
                    want += self.seeds.step
                if want >= self.seeds.stop:
                    return
                self._collect()
        finally:
            self._stop()

    def _start_worker(self) -> None:
        sys.stdout.flush()   # a forked worker must not write the parent's buffer again
        sys.stderr.flush()
        parent, child = self.context.Pipe()
        process = self.context.Process(
            target=_worker, args=(child, self.options, self.log_file, os.getpid()),
            name=f"sim-worker-{len(self.workers)}", daemon=True)
        if self.context.get_start_method() == "spawn":
            # a fresh interpreter hashes strings with PYTHONHASHSEED: the command's 0 (runs
            # replay only with it), not a random one when the caller runs without it
            given = os.environ.get("PYTHONHASHSEED")
            os.environ["PYTHONHASHSEED"] = given if given and given.isdigit() else HASH_SEED
            try:
                process.start()
            finally:
                if given is None:
                    del os.environ["PYTHONHASHSEED"]
                else:
                    os.environ["PYTHONHASHSEED"] = given
        else:
            process.start()
        child.close()
        self.workers.append((process, parent))

    def _hand_out(self, index: int) -> None:
        """Give worker ``index`` the next seed, unless none is left below the first failure."""
        seed = self.next_seed
        if seed >= self.seeds.stop or (self.first_failure is not None
                                       and seed > self.first_failure):
            return
        self.next_seed += self.seeds.step
        self.running[index] = seed
        self.workers[index][1].send(seed)

    def _collect(self) -> None:
        """Wait for a worker to answer (or die); record its result and hand it the next seed."""
        busy = sorted(self.running)
        conns: dict[Any, int] = {self.workers[i][1]: i for i in busy}
        sentinels: dict[Any, int] = {self.workers[i][0].sentinel: i for i in busy}
        ready = wait([*conns, *sentinels])
        for ready_one in ready:
            index = conns.get(ready_one)
            if index is None or index not in self.running:
                continue   # (not running: stopped above a failure an earlier answer told)
            conn = self.workers[index][1]
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                continue   # it died: seen through its sentinel below
            seed = self.running.pop(index)
            if kind == "error":
                raise SeedError(seed, payload)
            self.done[seed] = payload
            if not payload.ok and (self.first_failure is None or seed < self.first_failure):
                self.first_failure = seed
                self._stop_above(seed)
            self._hand_out(index)
        for ready_one in ready:
            index = sentinels.get(ready_one)
            if index is not None and index in self.running:
                process = self.workers[index][0]
                process.join()
                raise WorkerDied(self.running[index],
                                 f"its worker (pid {process.pid}) died with exit code "
                                 f"{process.exitcode}")

    def _stop_above(self, seed: int) -> None:
        """Seeds above a failure cannot change the answer: stop the workers running them."""
        for index, running in list(self.running.items()):
            if running > seed:
                del self.running[index]
                self._terminate(index)

    def _terminate(self, index: int) -> None:
        if index not in self.stopped:
            self.stopped.add(index)
            self.workers[index][0].terminate()

    def _stop(self) -> None:
        for index, (process, _conn) in enumerate(self.workers):
            if process.is_alive():
                self._terminate(index)
        for process, conn in self.workers:
            process.join(STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
            conn.close()


def _worker(conn: Connection, options: Any, log_file: str | None, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _leave)
    _die_with_parent(parent_pid)
    from actors.cli.sim import _quiet_logs
    from actors.sim.run import run_seed

    _quiet_logs(log_file)
    while True:
        try:
            seed = conn.recv()
        except EOFError:
            return
        try:
            result, _world = run_seed(seed, options)
        except Exception:
            conn.send(("error", traceback.format_exc()))
            return
        conn.send(("result", result))


def _leave(signum: int, _frame: Any) -> None:
    """Leave through the run's ``finally`` blocks; a second SIGTERM must not cut them short
    (the run's directory would stay)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(128 + signum)


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:   # the parent died before prctl took effect
        sys.exit(0)
