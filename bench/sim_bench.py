"""`actorlog bench sim`: how fast the deterministic simulation runs.

Runs ``--seeds`` seeds of ``actorlog sim`` (a 3-node cluster with two
idempotent producers and a consumer under faults), ``--rounds`` times, in
this process, and reports per round: simulated seconds per wall second and
seeds per minute, with min/median/max over the rounds. The baseline is real
time: ``sim_vs_real_time`` is simulated seconds per wall second (1.0 would
be a simulation no faster than the cluster it simulates). Every seed must
pass; a violation ends the benchmark with its seed.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import click
from loguru import logger

from bench.contract import min_median_max, write_json

BENCH_NAME = "sim"
RATIO_KEYS = ("sim_vs_real_time",)


def _spread(values: list[float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in min_median_max(values).items()}


@click.command(name="sim")
@click.option("--seeds", default=20, show_default=True, type=click.IntRange(min=1),
              help="seeds per round")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--start", default=1, show_default=True, type=click.IntRange(min=0))
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(min=1, max=9))
@click.option("--steps", default=12, show_default=True, type=click.IntRange(min=0))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None)
def command(seeds: int, rounds: int, start: int, nodes: int, steps: int,
            json_out: str | None) -> None:
    """Simulated seconds per wall second and seeds per minute of `actorlog sim`."""
    from actors.sim.run import SimOptions, run_seed

    logger.remove()
    logger.add(sys.stderr, level="CRITICAL")
    options = SimOptions(nodes=nodes, steps=steps)
    speed, per_minute, events_per_s = [], [], []
    acks = 0
    for _round in range(rounds):
        sim_ms = events = 0
        began = time.perf_counter()
        for seed in range(start, start + seeds):
            result, _world = run_seed(seed, options)
            if not result.ok:
                raise click.ClickException(
                    f"seed {seed} violated '{result.invariant}': {result.detail}")
            sim_ms += result.sim_ms
            events += result.events
            acks += result.acks
        wall = time.perf_counter() - began
        speed.append(sim_ms / 1000 / wall)
        per_minute.append(seeds * 60 / wall)
        events_per_s.append(events / wall)
    results: dict[str, Any] = {
        "sim_s_per_wall_s": _spread(speed), "seeds_per_minute": _spread(per_minute),
        "events_per_wall_s": _spread(events_per_s), "records_acknowledged": acks}
    ratios = {"sim_vs_real_time": round(statistics.median(speed), 3)}
    config = {"seeds": seeds, "rounds": rounds, "start": start, "nodes": nodes, "steps": steps}
    res = results
    click.echo(f"simulated s per wall s: min {res['sim_s_per_wall_s']['min']} median "
               f"{res['sim_s_per_wall_s']['median']} max {res['sim_s_per_wall_s']['max']}")
    click.echo(f"seeds per minute: min {res['seeds_per_minute']['min']} median "
               f"{res['seeds_per_minute']['median']} max {res['seeds_per_minute']['max']} "
               f"({nodes} nodes, {steps} faults per seed, {seeds} seeds x {rounds} rounds)")
    click.echo(f"sim_vs_real_time: {ratios['sim_vs_real_time']}")
    if json_out:
        write_json(json_out, BENCH_NAME, config, results, ratios)
