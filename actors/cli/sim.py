"""`actorlog sim`: run seeds of the deterministic simulation, or replay one.

    actorlog sim --seeds N [--start S] [--nodes 3] [--steps K] [--faults a,b] [--json OUT]
                 [--jobs N|auto]
    actorlog sim --seed S [--trace DIR]
    actorlog sim --plant NAME --seeds N [--faults a,b] [--acks-all-producers N]

Seeds run one after another, or in ``--jobs`` worker processes
(actors/sim/pool.py) with the same result for each seed; either way a line
per seed in seed order, and the first violation by seed number prints its
seed, the invariant, what broke and the last lines of the run's trace, and
exits 1. Ctrl-C or SIGTERM stops the run and its workers (exit 130 or 143).
With ``--plant`` a known bug is switched on and the run must find it: exit 0
with the number of seeds it took, 1 when no seed of the budget found it.

A run is the same for the same seed, byte for byte, in any process: the
command sets PYTHONHASHSEED=0 (re-executing itself once when it is not), so
the iteration order of sets of strings does not vary between processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click
from loguru import logger

from actors.cli import UserError

HASH_SEED = "0"


def _same_hashing() -> None:
    """Re-run this command with PYTHONHASHSEED=0 unless it already runs with it."""
    if os.environ.get("PYTHONHASHSEED") == HASH_SEED or os.environ.get("ACTORLOG_SIM_NO_EXEC"):
        return
    env = dict(os.environ, PYTHONHASHSEED=HASH_SEED)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "actors.cli", *sys.argv[1:]], env)


def _quiet_logs(log_file: str | None) -> None:
    """The actors' logs are the run's business: errors only on stderr, all of it to a file."""
    logger.remove()
    logger.add(sys.stderr, level="CRITICAL")
    if log_file:
        logger.add(log_file, level="INFO", enqueue=False)


@click.command("sim")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="run this many seeds (from --start)")
@click.option("--start", type=click.IntRange(min=0), default=1, show_default=True,
              help="first seed of --seeds")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="run this one seed")
@click.option("--nodes", type=click.IntRange(min=1, max=9), default=3, show_default=True)
@click.option("--steps", type=click.IntRange(min=0), default=12, show_default=True,
              help="faults struck per run, a seeded 0.5-3 s apart")
@click.option("--faults", default=None,
              help="comma-separated subset of crash,pause,partition,expire,clock,link,gateway,"
                   "disk,zookeeper (the default: all of them), and eio (a failing fsync: only "
                   "when named)")
@click.option("--plant", default=None, help="switch a known bug on; the run must find it")
@click.option("--acks-all-producers", type=click.IntRange(min=0), default=1, show_default=True,
              help="idempotent producers with acks=all (besides two with acks=1)")
@click.option("--reassign", type=click.IntRange(min=0), default=0, show_default=True,
              help="move a partition to another replica set this many times, one move after "
                   "the other, during the faults (at times cancelled); the run must end with "
                   "the set asked for")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="write every seed's result and a summary here")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False), default=None,
              help="with --seed: write the run's trace (text, and trace files for "
                   "`actorlog trace`) here")
@click.option("--jobs", default="1", show_default=True,
              help="worker processes running seeds at once; 0 or 'auto': the CPUs this "
                   "process may use")
@click.option("--log", "log_file", type=click.Path(dir_okay=False), default=None,
              help="write the actors' logs (INFO and up) to this file")
def command(seeds: int | None, start: int, seed: int | None, nodes: int, steps: int,
            faults: str | None, plant: str | None, acks_all_producers: int, reassign: int,
            json_out: str | None, trace_dir: str | None, jobs: str, log_file: str | None
            ) -> None:
    """Deterministic simulation of a cluster under faults, one seed at a time."""
    from actors.sim.plants import PLANTS
    from actors.sim.run import FAULTS, MORE_FAULTS, SimOptions

    if seed is not None and seeds is not None:
        raise UserError("give either --seed S (one run) or --seeds N (many), not both")
    if trace_dir is not None and seed is None:
        raise UserError("--trace needs --seed S: it records one run")
    chosen: tuple[str, ...] = FAULTS
    if faults is not None:
        chosen = tuple(f.strip() for f in faults.split(",") if f.strip())
        unknown = sorted(set(chosen) - set(FAULTS) - set(MORE_FAULTS))
        if unknown or not chosen:
            raise UserError(f"--faults: unknown {', '.join(unknown) or 'empty list'}; choose "
                            f"from {','.join(FAULTS + MORE_FAULTS)}")
    if plant is not None:
        found = PLANTS.get(plant)
        if found is None:
            raise UserError(f"--plant: no plant named {plant!r}; known: "
                            f"{', '.join(sorted(PLANTS))}")
        if found.swaps is None:
            raise click.ClickException(f"plant {plant!r} needs {found.needs}, which this "
                                       f"build does not have yet")
    workers = _jobs(jobs)
    _same_hashing()
    _quiet_logs(log_file)
    options = SimOptions(nodes=nodes, steps=steps, faults=chosen, plant=plant,
                         acks_all_producers=acks_all_producers, reassign=reassign,
                         keep_trace=trace_dir is not None, logs=log_file is not None)
    if seed is not None:
        code = _one(seed, options, trace_dir, json_out)
    else:
        code = _many(seeds or 1, start, options, json_out, workers, log_file)
    sys.exit(code)


def _jobs(value: str) -> int:
    """--jobs: a count of processes, or 0/'auto' for the CPUs this process may use."""
    from actors.sim.pool import usable_cpus

    text = value.strip().lower()
    if text == "auto":
        return usable_cpus()
    try:
        count = int(text)
    except ValueError:
        raise UserError(f"--jobs: expected a number of processes or 'auto', not {value!r}"
                        ) from None
    if count < 0:
        raise UserError(f"--jobs: expected 0 or more processes ('auto' or 0: the usable "
                        f"CPUs), not {count}")
    return count or usable_cpus()


class _Stopped(BaseException):
    """SIGTERM, raised like KeyboardInterrupt: nothing in the run may catch it as an error."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise _Stopped(signum)


def _one(seed: int, options: Any, trace_dir: str | None, json_out: str | None) -> int:
    from actors.sim.run import run_seed, trace_bytes

    out = Path(trace_dir) if trace_dir else None
    result, world = run_seed(seed, options, trace_dir=out / "nodes" if out else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"sim-{seed}.trace").write_bytes(trace_bytes(world))
        (out / f"sim-{seed}.json").write_text(json.dumps(result.to_json(True), indent=1) + "\n")
    _print_result(result)
    if json_out:
        Path(json_out).write_text(json.dumps({"results": [result.to_json()],
                                              "summary": _summary([result], 0.0)}, indent=1)
                                  + "\n")
    if out is not None:
        click.echo(f"trace: {out / f'sim-{seed}.trace'} ({len(world.trace)} lines); trace "
                   f"files for `actorlog trace list {out / 'nodes'}`")
    if options.plant:
        return 0 if not result.ok else 1
    return 0 if result.ok else 1


def _many(count: int, start: int, options: Any, json_out: str | None, jobs: int = 1,
          log_file: str | None = None) -> int:
    from actors.sim import pool

    results = []
    began = time.perf_counter()
    failed = None
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        for result in pool.results(range(start, start + count), options, jobs, log_file):
            results.append(result)
            if result.ok:
                _print_result(result)
            else:
                failed = result
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = exc.signum if isinstance(exc, _Stopped) else signal.SIGINT
        click.echo(f"stopped by {signal.Signals(signum).name} after {len(results)} seed(s) "
                   f"from {start} passed", err=True)
        return 128 + signum
    except pool.SeedError as exc:
        click.echo(f"seed {exc.seed} did not finish (the simulator broke, not an invariant):"
                   f"\n{exc.detail.rstrip()}", err=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    wall = time.perf_counter() - began
    summary = _summary(results, wall)
    if json_out:
        Path(json_out).write_text(json.dumps(
            {"config": {"start": start, "seeds": count, "nodes": options.nodes,
                        "steps": options.steps, "faults": list(options.faults),
                        "plant": options.plant},
             "results": [r.to_json() for r in results], "summary": summary}, indent=1) + "\n")
    if options.plant:
        if failed is not None:
            click.echo(f"plant {options.plant} found at seed {failed.seed}, after "
                       f"{len(results)} seed(s): {failed.invariant}: {failed.detail}")
            return 0
        click.echo(f"plant {options.plant} NOT found in {count} seed(s) from {start}")
        return 1
    if failed is not None:
        _print_result(failed)
        click.echo(f"seed {failed.seed} failed after {len(results) - 1} passing seed(s); "
                   f"replay: actorlog sim --seed {failed.seed} --steps {options.steps} "
                   f"--nodes {options.nodes} --trace DIR", err=True)
        return 1
    click.echo(f"{len(results)} seed(s) from {start} passed: {summary['sim_s']:.0f} simulated s "
               f"in {wall:.1f} wall s ({summary['sim_s_per_wall_s']:.1f} simulated s per wall "
               f"s, {summary['seeds_per_minute']:.1f} seeds per minute), "
               f"{summary['acks']} records acknowledged, {summary['faults']} faults")
    return 0


def _summary(results: list[Any], wall: float) -> dict[str, Any]:
    sim_s = sum(r.sim_ms for r in results) / 1000
    wall = wall or sum(r.wall_s for r in results)
    return {"seeds": len(results), "passed": sum(r.ok for r in results),
            "sim_s": sim_s, "wall_s": round(wall, 3),
            "sim_s_per_wall_s": round(sim_s / wall, 2) if wall else 0.0,
            "seeds_per_minute": round(len(results) * 60 / wall, 2) if wall else 0.0,
            "acks": sum(r.acks for r in results),
            "faults": sum(len(r.faults) for r in results)}


def _print_result(result: Any) -> None:
    if result.ok:
        click.echo(f"seed {result.seed}: ok ({result.sim_ms / 1000:.1f} simulated s, "
                   f"{result.events} events, {result.acks} records acknowledged, "
                   f"{len(result.faults)} faults, trace digest {result.digest})")
        return
    click.echo(f"seed {result.seed}: VIOLATION of '{result.invariant}' at "
               f"{result.sim_ms} simulated ms, after fault {result.step}: {result.detail}",
               err=True)
    click.echo("faults: " + ("; ".join(result.faults) or "none"), err=True)
    if result.involved:
        click.echo("last messages of the nodes involved:", err=True)
        for line in result.involved[-30:]:
            click.echo(f"  {line}", err=True)
    click.echo("last lines of the trace:", err=True)
    for line in result.tail[-20:]:
        click.echo(f"  {line}", err=True)
