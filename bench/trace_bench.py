"""`actorlog bench trace-cost` and `actorlog bench trace-analyze`.

trace-cost: produce throughput against three brokers started side by side
with ``--trace-sample`` 0, 0.01 and 1.0. Each round runs every setting once,
in an order that rotates from round to round, so a burst of load from
elsewhere on a shared machine hits every setting alike. Ratios: the median
over rounds of (traced throughput / untraced throughput of the same round);
the per-round ratios' min/median/max and the medians of the raw throughputs
are in the results too.

trace-analyze: `trace analyze` (a fresh Python process each run, so Spark's
start is included) on synthetic traces of each size from
``bench/trace_gen.py``, read where they lie (no conversion). The first run of a
size is "cold" (page cache and nothing else warm), the later ones "warm".
Both print the machine's load average: the machine is shared.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from actors.metadata.zk_server import free_port
from bench.contract import write_json

SETTINGS = (("off", 0.0), ("1pct", 0.01), ("full", 1.0))
ROOT = Path(__file__).resolve().parents[1]


class _Broker:
    def __init__(self, base: Path, ratio: float) -> None:
        self.port = free_port()
        self.data = base / f"data-{ratio}"
        self.log = open(base / f"broker-{ratio}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.cli",
                "serve",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--data-dir",
                str(self.data),
                "--trace-sample",
                str(ratio),
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise click.ClickException(f"broker exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        raise click.ClickException("broker did not start listening")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def cpu_s(self) -> float:
        """The broker process's CPU time so far, user + system (all its threads, the trace
        writer's included), from /proc: a cost that the machine's other load disturbs far
        less than throughput does."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # fields 3.. of proc(5)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def trace_bytes(self) -> int:
        return (
            sum(p.stat().st_size for p in (self.data / "traces").glob("*") if p.is_file())
            if (self.data / "traces").is_dir()
            else 0
        )


def _mmm(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


@click.command("trace-cost")
@click.option("--num-records", type=click.IntRange(min=1), default=20_000, show_default=True)
@click.option("--record-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option(
    "--linger-ms",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="0 sends many small requests: the worst case for per-request tracing",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=16384, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def cost_command(
    num_records: int,
    record_size: int,
    linger_ms: float,
    batch_size: int,
    repeat: int,
    json_path: str | None,
) -> None:
    """Produce throughput with tracing off, at 1% and at 100% sampling."""
    from bench.load import run_produce
    from bench.load_produce import ProduceConfig

    base = Path(tempfile.mkdtemp(prefix="actorlog-trace-cost-"))
    brokers = {name: _Broker(base, ratio) for name, ratio in SETTINGS}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in SETTINGS}
    load: list[float] = []
    try:
        for b in brokers.values():
            b.wait()
        names = [name for name, _ in SETTINGS]
        for i in range(repeat):
            load.append(os.getloadavg()[0])
            for name in names[i % 3:] + names[:i % 3]:  # the order rotates each round
                cfg = ProduceConfig(
                    bootstrap=brokers[name].bootstrap,
                    topic=f"trace-cost-{i}",
                    num_records=num_records,
                    record_size=record_size,
                    partitions=3,
                    linger_ms=linger_ms,
                    batch_size=batch_size,
                )
                cpu0 = brokers[name].cpu_s()
                res = run_produce(cfg)
                cpu = brokers[name].cpu_s() - cpu0
                runs[name].append(
                    {
                        "records_per_s": res["records_per_s"],
                        "broker_cpu_s": cpu,
                        "broker_cpu_us_per_record": 1e6 * cpu / max(1, res["acked"]),
                        "acked": res["acked"],
                        "failed": res["failed"],
                        "p99_ms": res["latency"].get("p99")
                        if isinstance(res.get("latency"), dict)
                        else None,
                    }
                )
        load.append(os.getloadavg()[0])
        trace_bytes = {name: b.trace_bytes() for name, b in brokers.items()}
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(base, ignore_errors=True)
    rates = {name: [r["records_per_s"] for r in rs] for name, rs in runs.items()}
    paired = {
        name: [t / o for t, o in zip(rates[name], rates["off"], strict=True)]
        for name in ("full", "1pct")
    }
    results: dict[str, Any] = {
        name: {
            "records_per_s": _mmm(rates[name]),
            "runs": runs[name],
            "trace_bytes": trace_bytes[name],
        }
        for name in rates
    }
    off = statistics.median(rates["off"])
    results["paired_ratios"] = {name: {**_mmm(v), "rounds": v} for name, v in paired.items()}
    results["median_throughput_ratios"] = {
        "full": statistics.median(rates["full"]) / off,
        "1pct": statistics.median(rates["1pct"]) / off,
    }
    # broker CPU per acknowledged record, traced vs off, per round (rounds whose off run
    # took under a clock tick of CPU are left out)
    per_record = {name: [r["broker_cpu_us_per_record"] for r in rs] for name, rs in runs.items()}
    cpu_paired = {
        name: [t / o for t, o in zip(per_record[name], per_record["off"], strict=True) if o > 0]
        for name in ("full", "1pct")
    }
    results["broker_cpu_us_per_record"] = {name: _mmm(v) for name, v in per_record.items()}
    results["broker_cpu_ratios"] = {name: {**_mmm(v), "rounds": v}
                                    for name, v in cpu_paired.items() if v}
    results["load_average"] = _mmm(load)
    ratios = {
        "traced_full_vs_off": statistics.median(paired["full"]),
        "traced_1pct_vs_off": statistics.median(paired["1pct"]),
    }
    table = Table(title=f"produce throughput vs trace sampling ({repeat} rounds, records/s)")
    for col in ("setting", "min", "median", "max", "vs off, per round: min / median / max",
                "trace bytes"):
        table.add_column(col, justify="right")
    for name, _ in SETTINGS:
        m = results[name]["records_per_s"]
        p = results["paired_ratios"].get(name)
        table.add_row(
            name,
            f"{m['min']:.0f}",
            f"{m['median']:.0f}",
            f"{m['max']:.0f}",
            f"{p['min']:.3f} / {p['median']:.3f} / {p['max']:.3f}" if p else "1",
            str(trace_bytes[name]),
        )
    console = Console(width=120)
    console.print(table)
    for name, c in results["broker_cpu_ratios"].items():
        us = results["broker_cpu_us_per_record"]
        console.print(f"broker CPU per record, {name} vs off, per round: {c['min']:.3f} / "
                      f"{c['median']:.3f} / {c['max']:.3f} (median {us[name]['median']:.1f} us "
                      f"vs {us['off']['median']:.1f} us)")
    la = results["load_average"]
    console.print(f"load average (1 min) during the run: min {la['min']:.2f} median "
                  f"{la['median']:.2f} max {la['max']:.2f} on {os.cpu_count()} cores")
    if json_path:
        write_json(
            json_path,
            "trace-cost",
            {
                "num_records": num_records,
                "record_size": record_size,
                "linger_ms": linger_ms,
                "batch_size": batch_size,
                "repeat": repeat,
            },
            results,
            ratios,
        )


def _generated(work: Path, events: int) -> Path:
    from bench.trace_gen import generate

    d = work / f"gen-v2-{events}"
    marker = d / "DONE"
    if not marker.exists():
        shutil.rmtree(d, ignore_errors=True)
        n = generate(d / "nodes", events)
        marker.write_text(str(n))
    return d


def _subreaper(on: bool) -> bool:
    """Adopt (or stop adopting) orphaned descendants: Linux prctl PR_SET_CHILD_SUBREAPER.
    Spark's JVM outlives the analyze process that started it, and its CPU time is
    only counted (RUSAGE_CHILDREN) once someone reaps it."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """The pids whose parent is this process (from /proc)."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                out.add(int(entry))
    return out


def _reap(others: set[int], timeout_s: float = 60.0) -> None:
    """Wait for the children that are not ``others`` (the run's leftovers, adopted) to
    exit, for at most ``timeout_s``; children this process had before are left alone."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        mine = _children() - others
        if not mine:
            return
        for pid in mine:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.1)


def _children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _analyze_once(src: Path, out: Path, master: str) -> dict[str, Any]:
    before = _children()
    adopting = _subreaper(True)
    cpu0 = _children_cpu_s()
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "actors.cli",
            "trace",
            "analyze",
            str(src / "nodes"),
            "--out",
            str(out),
            "--master",
            master,
        ],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    if adopting:
        _reap(before)
        _subreaper(False)
    cpu = _children_cpu_s() - cpu0
    summary = json.loads((out / "summary.json").read_text())
    return {
        "wall_s": wall,
        "cpu_counts_spark_jvm": adopting,
        # CPU seconds of the whole job (Python, Spark's JVM, its workers): on a shared
        # machine, cpu_s / cores is what the wall time would be at best on an idle one
        "cpu_s": cpu,
        "cpu_s_per_core": cpu / (os.cpu_count() or 1),
        **summary["timings"],
        "records": summary["records"],
        "requests": summary["requests"],
        "violations": summary["violation_count"],
        "load_average": os.getloadavg()[0],
    }


@click.command("trace-analyze")
@click.option(
    "--sizes", default="1000000,10000000", show_default=True,
    help="comma-separated record counts (one record per hop)"
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="runs per size; the first is cold, the others warm",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="keep generated traces here between invocations",
)
@click.option("--master", default="local[*]", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def analyze_command(
    sizes: str, repeat: int, work_dir: str | None, master: str, json_path: str | None
) -> None:
    """`trace analyze` wall time on synthetic traces of each size, and its growth."""
    counts = sorted(int(s) for s in sizes.split(","))
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="actorlog-trace-analyze-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    try:
        for n in counts:
            src = _generated(work, n)
            out = work / f"report-{n}"
            shutil.rmtree(out, ignore_errors=True)
            runs = [_analyze_once(src, out, master) for _ in range(repeat)]
            warm = runs[1:] or runs
            results[str(n)] = {
                "cold": runs[0],
                "warm_wall_s": _mmm([r["wall_s"] for r in warm]),
                "warm_job_s": _mmm([r["job_s"] for r in warm]),
                "runs": runs,
            }
    finally:
        if work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    small, large = str(counts[0]), str(counts[-1])
    t_small = results[small]["warm_wall_s"]["median"]
    t_large = results[large]["warm_wall_s"]["median"]
    ratios = {
        "scaling_vs_linear": (t_small * counts[-1] / counts[0]) / t_large
        if len(counts) > 1
        else 1.0,
        "largest_vs_60s_target": 60.0 / t_large,
        # the same against the job's CPU seconds per core: what an idle machine would allow
        "largest_cpu_per_core_vs_60s_target": 60.0 / statistics.median(
            r["cpu_s_per_core"] for r in results[large]["runs"]),
    }
    table = Table(title="trace analyze wall time (s), Spark start included")
    for col in ("records", "cold", "warm min", "warm median", "warm max", "job median",
                "CPU s / core (median)", "load avg"):
        table.add_column(col, justify="right")
    for n in counts:
        r = results[str(n)]
        loads = [x["load_average"] for x in r["runs"]]
        table.add_row(
            f"{n:,}",
            f"{r['cold']['wall_s']:.1f}",
            *(f"{r['warm_wall_s'][k]:.1f}" for k in ("min", "median", "max")),
            f"{r['warm_job_s']['median']:.1f}",
            f"{statistics.median(x['cpu_s_per_core'] for x in r['runs']):.1f}",
            f"{min(loads):.1f}-{max(loads):.1f}",
        )
    console = Console(width=120)
    console.print(table)
    console.print(
        f"growth {counts[0]:,} -> {counts[-1]:,}: x{t_large / t_small:.2f} time for "
        f"x{counts[-1] / counts[0]:.0f} records"
    )
    if json_path:
        write_json(
            json_path,
            "trace-analyze",
            {"sizes": counts, "repeat": repeat, "master": master},
            results,
            ratios,
        )


command = cost_command  # the module's default command, by the team's convention
