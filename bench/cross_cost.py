"""`actorlog bench cross-cost`: broker CPU per small Produce, crossed vs local (num.processes=2).

A broker of ``--processes`` processes (one per tree given with ``--tree``, the
trees' brokers alternating round by round) gets, per run, a new topic of one
partition and one producer connection sending one 100-byte record per request
(linger 0, acks=1, five in flight) for ``--requests`` requests. From /proc it
reads which process holds the connection and which the partition's segment: a
run whose two differ is *crossed* (every request goes handler -> the other
process's shard -> back), else *local*. Where the connection lands is the
broker's choice, so runs go on until each tree has ``--runs`` of each kind or
``--max-runs`` are spent. Per run: the CPU (user + system) of all the broker's
processes, from /proc, over the load, per request. CPU, not wall time: the host
is shared. Reported as min / median / max per tree and kind, beside the load average.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

import click

from bench.load import run_produce
from bench.load_produce import ProduceConfig
from bench.peers import start_broker
from bench.scale import SplitSampler, cpu_seconds, partition_split

BENCH_NAME = "cross-cost"
# a tree's broker: its code on the path first, the current directory not (-P)
TREE_TEMPLATE = ("env PYTHONPATH={tree} {{python}} -P -m actors.cli serve --listen "
                 "127.0.0.1:{{port}} --data-dir {{data_dir}} --config {{config}}")


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def run_cross_cost(trees: list[str], runs: int, max_runs: int, requests: int,
                   processes: int = 2) -> dict[str, Any]:
    load_start = os.getloadavg()
    cpu_us: dict[str, dict[str, list[float]]] = {t: {"crossed": [], "local": []} for t in trees}
    tag = os.urandom(3).hex()
    with contextlib.ExitStack() as stack:
        brokers = {}
        for tree in trees:
            broker = start_broker(TREE_TEMPLATE.format(tree=tree), timeout_s=60,
                                  settings={"num.processes": processes})
            stack.callback(broker.stop)
            brokers[tree] = broker
        for rnd in range(max_runs):
            if all(len(v) >= runs for t in trees for v in cpu_us[t].values()):
                break
            for i, tree in enumerate(trees[rnd % len(trees):] + trees[:rnd % len(trees)]):
                broker = brokers[tree]
                topic = f"cross-{tag}-r{rnd}-{i}"
                load = ProduceConfig(bootstrap=broker.bootstrap, topic=topic,
                                     num_records=requests, partitions=1, acks="1",
                                     linger_ms=0.0, records_per_request=1, max_in_flight=5,
                                     time_limit_s=120)
                cpu_before = cpu_seconds(broker.pid)
                with SplitSampler(broker.pid, broker.port, interval_s=0.2) as sampler:
                    run = run_produce(load)
                cpu = cpu_seconds(broker.pid) - cpu_before
                held = partition_split(broker.pid, topic)
                sent = float(run["requests_per_s"]) * float(run.get("elapsed_s") or 0)
                conns = sampler.best
                if not sent or sum(held) != 1 or sum(conns) != 1:
                    continue  # not one partition and one connection: neither kind
                kind = "local" if held.index(1) == conns.index(1) else "crossed"
                cpu_us[tree][kind].append(cpu * 1e6 / sent)
    load_end = os.getloadavg()
    return {
        "bench": BENCH_NAME,
        "config": {"trees": trees, "runs": runs, "requests": requests,
                   "processes": processes},
        "results": {
            "broker_cpu_us_per_request": {
                t: {k: _spread(v) for k, v in kinds.items()} for t, kinds in cpu_us.items()},
            "by_run": cpu_us,
            "load_average_start": list(load_start),
            "load_average_end": list(load_end),
        },
        "ratios": {},
    }


@click.command(name=BENCH_NAME)
@click.option("--tree", "trees", multiple=True, required=True,
              help="a source tree whose broker to measure (repeat: they alternate)")
@click.option("--runs", type=click.IntRange(min=1, max=50), default=5, show_default=True,
              help="runs of each kind (crossed, local) per tree")
@click.option("--max-runs", type=click.IntRange(min=1, max=200), default=30,
              show_default=True, help="rounds at most")
@click.option("--requests", type=click.IntRange(min=100), default=20000, show_default=True)
@click.option("--processes", type=click.IntRange(min=2, max=16), default=2, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def command(trees: tuple[str, ...], runs: int, max_runs: int, requests: int, processes: int,
            json_path: str | None) -> None:
    """Broker CPU per one-record Produce whose partition is in another process vs its own."""
    report = run_cross_cost([str(Path(t).resolve()) for t in trees], runs, max_runs,
                            requests, processes)
    r = report["results"]
    for tree, kinds in r["broker_cpu_us_per_request"].items():
        for kind, s in kinds.items():
            text = ("no run" if s is None else
                    f"{s['min']:.0f} / {s['median']:.0f} / {s['max']:.0f} us (n={s['n']})")
            click.echo(f"{tree} {kind}: broker CPU per request {text}")
    click.echo("load average at start {:.2f} {:.2f} {:.2f}, at end {:.2f} {:.2f} {:.2f}".format(
        *r["load_average_start"], *r["load_average_end"]))
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
