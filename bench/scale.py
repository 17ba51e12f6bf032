"""`actorlog bench scale`: small-request throughput at num.processes = 1, 2, ... as ratios.

One actorlog broker per process count, all started by this command from the
same template, each loaded in turn with `bench compare`'s small_requests
scenario (one record per request, linger 0, acks=1, --connections
connections); the order of the brokers rotates every round. The ratio of
each count is its throughput over the 1-process broker's in the same round,
reported as min/median/max over the rounds, beside the load average of the
host at the start and the end (the figures mean little on a busy host).

``--distribution`` (repeatable) runs a broker per num.processes.connection.distribution
at each count above 1, in the same rotation, so reuseport and handoff are measured
side by side; each run also samples (from /proc, every half second) how many of the
load's connections each process of the broker holds, and reports the busiest sample.
``--placement`` (repeatable) does the same for num.processes.shard.placement, and
``--scenario`` runs another of `bench compare`'s loads (throughput_acks1: batched, three
partitions) instead of small_requests. Beside the figure it reports the broker's CPU
(user + system of all its processes, from /proc) per request and per acknowledged MB:
steadier than throughput on a host the load generator and others share, and after
each run the load's partitions each process holds open (where the placement put them).
The JSON names the figure (``results.figure``: requests_per_s or records_per_s) and
gives it as ``results.figure_per_s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
from pathlib import Path
from typing import Any

import click

from bench.compare import SCENARIOS, CompareSettings, scenario_config
from bench.contract import min_median_max as _spread
from bench.load import run_produce
from bench.peers import ACTORLOG_TEMPLATE, start_broker

BENCH_NAME = "scale"
# bench compare's loads whose figure is a rate (p99_fixed_rate's is a latency)
SCALE_SCENARIOS = [name for name in SCENARIOS if name != "p99_fixed_rate"]


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (a broker's processes 1..), in their start order."""
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as children:
                kids += [int(k) for k in children.read().split()]
    except OSError:
        pass
    return sorted(kids)


ESTABLISHED, LISTEN = "01", "0A"  # TCP states as /proc/net/tcp writes them


def tcp_inodes(port: int, state: str = ESTABLISHED, remote_port: int | None = None) -> set[str]:
    """Socket inodes of this host's TCP sockets with local ``port`` in ``state`` (and
    ``remote_port``, when given), from /proc/net/tcp and tcp6."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as table:
            next(table)
            for line in table:
                fields = line.split()
                if (int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state
                        and (remote_port is None
                             or int(fields[2].rsplit(":", 1)[1], 16) == remote_port)):
                    inodes.add(fields[9])
    return inodes


def connection_split(pid: int, port: int) -> list[int]:
    """The established TCP connections on ``port`` each process of the broker holds
    (process 0 first), from /proc."""
    inodes = tcp_inodes(port)
    split = []
    for proc in [pid, *_children(pid)]:
        held = 0
        try:
            for fd in os.listdir(f"/proc/{proc}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{proc}/fd/{fd}")
                    held += target.startswith("socket:[") and target[8:-1] in inodes
        except OSError:
            pass
        split.append(held)
    return split


def partition_split(pid: int | None, topic: str) -> list[int]:
    """The partitions of ``topic`` whose segment each process of the broker holds open
    (process 0 first), from /proc: where num.processes.shard.placement put them."""
    split = []
    for proc in [pid, *_children(pid)] if pid is not None else []:
        held = set()
        try:
            for fd in os.listdir(f"/proc/{proc}/fd"):
                with contextlib.suppress(OSError):
                    target = Path(os.readlink(f"/proc/{proc}/fd/{fd}"))
                    name, _, partition = target.parent.name.rpartition("-")
                    if target.suffix == ".log" and name == topic and partition.isdigit():
                        held.add(int(partition))
        except OSError:
            pass
        split.append(len(held))
    return split


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) the broker ``pid`` and its processes have used so far,
    from /proc/PID/stat; a process gone meanwhile counts nothing."""
    if pid is None:
        return 0.0
    ticks = 0
    for proc in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{proc}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


class SplitSampler:
    """Samples a broker's connection split every ``interval_s`` while a load runs; keeps
    the sample with the most connections (the load's, not its set-up's)."""

    def __init__(self, pid: int | None, port: int, interval_s: float = 0.5) -> None:
        self.pid, self.port, self.interval_s = pid, port, interval_s
        self.best: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="split-sampler", daemon=True)

    def _run(self) -> None:
        while self.pid is not None and not self.stop.wait(self.interval_s):
            sample = connection_split(self.pid, self.port)
            if sum(sample) > sum(self.best):
                self.best = sample

    def __enter__(self) -> SplitSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def _variants(values: tuple[str, ...]) -> list[str | None]:
    """One broker per value at each count above 1 (none given: the broker's default)."""
    return list(values) if values else [None]


def run_scale(counts: list[int], rounds: int, settings: CompareSettings, template: str,
              show_progress: bool = False,
              distributions: tuple[str, ...] = (), placements: tuple[str, ...] = (),
              scenario: str = "small_requests") -> dict[str, Any]:
    """Keys: the count (``"2"``), or with several distributions or placements
    ``"2-handoff"``, ``"2-first"``, ``"2-handoff-first"`` etc. (none given: the broker's
    default)."""
    load_start = os.getloadavg()
    keys: list[tuple[str, int, dict[str, Any]]] = []
    for n in counts:
        if n == 1:
            keys.append(("1", 1, {}))
            continue
        for d in _variants(distributions):
            for placement in _variants(placements):
                config: dict[str, Any] = {}
                if d is not None:
                    config["num.processes.connection.distribution"] = d
                if placement is not None:
                    config["num.processes.shard.placement"] = placement
                tags = ([d] if len(distributions) > 1 else []) + \
                    ([placement] if len(placements) > 1 else [])
                keys.append(("-".join([str(n), *map(str, tags)]), n, config))
    names = [k for k, _n, _c in keys]
    per: dict[str, list[float]] = {k: [] for k in names}
    ratios: dict[str, list[float]] = {k: [] for k in names}
    splits: dict[str, list[list[int]]] = {k: [] for k in names}
    partitions: dict[str, list[list[int]]] = {k: [] for k in names}
    cpu_us: dict[str, list[float]] = {k: [] for k in names}
    cpu_ms_mb: dict[str, list[float]] = {k: [] for k in names}
    figure = SCENARIOS[scenario].figure
    tag = os.urandom(3).hex()
    with contextlib.ExitStack() as stack:
        brokers = {}
        for key, n, variant in keys:
            config = {"num.processes": n, **variant}
            broker = start_broker(template, settings=config, timeout_s=60)
            stack.callback(broker.stop)
            brokers[key] = broker
        for rnd in range(rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            figures = {}
            for key in order:
                broker = brokers[key]
                topic = f"scale-{tag}-r{rnd}-p{key}"
                load = scenario_config(scenario, broker.bootstrap, topic, settings)
                cpu_before = cpu_seconds(broker.pid)
                with SplitSampler(broker.pid, broker.port) as sampler:
                    run = run_produce(load, show_progress=show_progress)
                cpu = cpu_seconds(broker.pid) - cpu_before
                figures[key] = float(run[figure])
                requests = float(run["requests_per_s"]) * float(run.get("elapsed_s") or 0)
                cpu_us[key].append(cpu * 1e6 / requests if requests else 0.0)
                acked_mb = float(run.get("acked_bytes") or 0) / 1e6
                cpu_ms_mb[key].append(cpu * 1e3 / acked_mb if acked_mb else 0.0)
                per[key].append(figures[key])
                splits[key].append(sampler.best)
                partitions[key].append(partition_split(broker.pid, topic))
            for key in names:
                ratios[key].append(figures[key] / figures[names[0]] if figures[names[0]]
                                   else 0.0)
    load_end = os.getloadavg()
    return {
        "bench": BENCH_NAME,
        "config": {"process_counts": counts, "rounds": rounds, "scenario": scenario,
                   "connections": settings.small_connections,
                   "duration_s": settings.duration_s, "template": template,
                   "distributions": list(distributions), "placements": list(placements),
                   "cpus": len(os.sched_getaffinity(0))},
        "results": {
            # the scenario's figure, named: requests_per_s (small_requests) or
            # records_per_s (throughput_*)
            "figure": figure,
            "figure_per_s": {k: _spread(v) for k, v in per.items()},
            "figure_per_s_by_round": per,
            "ratio_to_1": {k: _spread(v) for k, v in ratios.items()},
            # broker CPU (all its processes, the load's set-up included) per request
            "broker_cpu_us_per_request": {k: _spread(v) for k, v in cpu_us.items()},
            # the same per acknowledged MB (records' values as the client counts them)
            "broker_cpu_ms_per_mb": {k: _spread(v) for k, v in cpu_ms_mb.items()},
            "broker_cpu_ms_per_mb_by_round": cpu_ms_mb,
            "connections_by_process": splits,
            # the load's partitions each process held open after its run (placement)
            "partitions_by_process": partitions,
            "load_average_start": list(load_start),
            "load_average_end": list(load_end),
        },
        "ratios": {f"processes_{k}_vs_1": statistics.median(v) for k, v in ratios.items()
                   if k != names[0]},
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
@click.option("--distribution", "distributions", multiple=True,
              type=click.Choice(["reuseport", "handoff"]),
              help="num.processes.connection.distribution of the brokers above 1 process; "
                   "repeat it to measure several side by side (default: the broker's)")
@click.option("--placement", "placements", multiple=True,
              type=click.Choice(["spread", "first"]),
              help="num.processes.shard.placement of the brokers above 1 process; "
                   "repeat it to measure several side by side (default: the broker's)")
@click.option("--scenario", type=click.Choice(SCALE_SCENARIOS),
              default="small_requests", show_default=True,
              help="bench compare's load to run (its figure: requests/s or records/s)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--no-progress", is_flag=True)
def command(max_processes: int | None, rounds: int, duration: float, connections: int,
            producers: int, template: str, distributions: tuple[str, ...],
            placements: tuple[str, ...], scenario: str,
            json_path: str | None, no_progress: bool) -> None:
    """Small-request (or a batched scenario's) throughput at num.processes = 1, 2, 4, ...
    up to the CPUs."""
    top = max_processes or max(2, len(os.sched_getaffinity(0)))
    counts = [1]
    while counts[-1] * 2 <= top:
        counts.append(counts[-1] * 2)
    if counts[-1] != top:
        counts.append(top)
    settings = CompareSettings(duration_s=duration, processes=producers,
                               small_connections=connections)
    report = run_scale(counts, rounds, settings, template, show_progress=not no_progress,
                       distributions=distributions, placements=placements, scenario=scenario)
    r = report["results"]
    unit = SCENARIOS[scenario].unit
    for key in r["figure_per_s"]:
        rate, ratio = r["figure_per_s"][key], r["ratio_to_1"][key]
        cpu, per_mb = r["broker_cpu_us_per_request"][key], r["broker_cpu_ms_per_mb"][key]
        split = " ".join("/".join(map(str, s)) for s in r["connections_by_process"][key])
        click.echo(f"num.processes={key}: {rate['min']:,.0f} / {rate['median']:,.0f} / "
                   f"{rate['max']:,.0f} {unit}; vs 1: {ratio['min']:.2f} / "
                   f"{ratio['median']:.2f} / {ratio['max']:.2f} (min / median / max); "
                   f"broker CPU per request {cpu['min']:.0f} / {cpu['median']:.0f} / "
                   f"{cpu['max']:.0f} us, per MB {per_mb['min']:.2f} / "
                   f"{per_mb['median']:.2f} / {per_mb['max']:.2f} ms; "
                   f"connections by process per round: {split}")
    click.echo("load average at start {:.2f} {:.2f} {:.2f}, at end {:.2f} {:.2f} {:.2f}".format(
        *r["load_average_start"], *r["load_average_end"]))
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
