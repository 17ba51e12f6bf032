"""`actorlog bench scale`: small-request throughput at num.processes = 1, 2, ... as ratios.

One actorlog broker per process count, all started by this command from the
same template, each loaded in turn with `bench compare`'s small_requests
scenario (one record per request, linger 0, acks=1, --connections
connections); the order of the brokers rotates every round. The ratio of
each count is its throughput over the 1-process broker's in the same round,
reported as min/median/max over the rounds, beside the load average of the
host at the start and the end (the figures mean little on a busy host).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

import click

from bench.compare import CompareSettings, scenario_config
from bench.contract import min_median_max as _spread
from bench.load import run_produce
from bench.peers import ACTORLOG_TEMPLATE, start_broker

BENCH_NAME = "scale"


def run_scale(counts: list[int], rounds: int, settings: CompareSettings, template: str,
              show_progress: bool = False) -> dict[str, Any]:
    load_start = os.getloadavg()
    per: dict[int, list[float]] = {n: [] for n in counts}
    ratios: dict[int, list[float]] = {n: [] for n in counts}
    tag = os.urandom(3).hex()
    with contextlib.ExitStack() as stack:
        brokers = {}
        for n in counts:
            broker = start_broker(template, settings={"num.processes": n}, timeout_s=60)
            stack.callback(broker.stop)
            brokers[n] = broker
        for rnd in range(rounds):
            order = counts[rnd % len(counts):] + counts[:rnd % len(counts)]
            figures = {}
            for n in order:
                config = scenario_config("small_requests", brokers[n].bootstrap,
                                         f"scale-{tag}-r{rnd}-p{n}", settings)
                run = run_produce(config, show_progress=show_progress)
                figures[n] = float(run["requests_per_s"])
                per[n].append(figures[n])
            for n in counts:
                ratios[n].append(figures[n] / figures[counts[0]] if figures[counts[0]] else 0.0)
    load_end = os.getloadavg()
    return {
        "bench": BENCH_NAME,
        "config": {"process_counts": counts, "rounds": rounds,
                   "connections": settings.small_connections,
                   "duration_s": settings.duration_s, "template": template,
                   "cpus": len(os.sched_getaffinity(0))},
        "results": {
            "requests_per_s": {str(n): _spread(v) for n, v in per.items()},
            "ratio_to_1": {str(n): _spread(v) for n, v in ratios.items()},
            "load_average_start": list(load_start),
            "load_average_end": list(load_end),
        },
        "ratios": {f"processes_{n}_vs_1": statistics.median(v) for n, v in ratios.items()
                   if n != counts[0]},
    }


@click.command(name=BENCH_NAME)
@click.option("--max-processes", type=click.IntRange(min=2), default=None,
              help="highest num.processes (default: the CPUs this process may use, "
                   "at least 2)")
@click.option("--rounds", type=click.IntRange(min=1, max=100), default=3, show_default=True)
@click.option("--duration", type=click.FloatRange(min=0.5), default=10.0, show_default=True,
              help="seconds of load per broker per round")
@click.option("--connections", type=click.IntRange(min=1, max=64), default=8,
              show_default=True)
@click.option("--producers", type=click.IntRange(min=1, max=64), default=2, show_default=True,
              help="client processes the connections are spread over")
@click.option("--cmd", "template", default=ACTORLOG_TEMPLATE, show_default=True,
              help="actorlog command template ({port}, {data_dir}, {config})")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--no-progress", is_flag=True)
def command(max_processes: int | None, rounds: int, duration: float, connections: int,
            producers: int, template: str, json_path: str | None, no_progress: bool) -> None:
    """Small-request throughput at num.processes = 1, 2, 4, ... up to the CPUs."""
    top = max_processes or max(2, len(os.sched_getaffinity(0)))
    counts = [1]
    while counts[-1] * 2 <= top:
        counts.append(counts[-1] * 2)
    if counts[-1] != top:
        counts.append(top)
    settings = CompareSettings(duration_s=duration, processes=producers,
                               small_connections=connections)
    report = run_scale(counts, rounds, settings, template, show_progress=not no_progress)
    r = report["results"]
    for n in counts:
        rate, ratio = r["requests_per_s"][str(n)], r["ratio_to_1"][str(n)]
        click.echo(f"num.processes={n}: {rate['min']:,.0f} / {rate['median']:,.0f} / "
                   f"{rate['max']:,.0f} requests/s; vs 1: {ratio['min']:.2f} / "
                   f"{ratio['median']:.2f} / {ratio['max']:.2f} (min / median / max)")
    click.echo("load average at start {:.2f} {:.2f} {:.2f}, at end {:.2f} {:.2f} {:.2f}".format(
        *r["load_average_start"], *r["load_average_end"]))
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
