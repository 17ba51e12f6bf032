"""`actorlog bench sweep`: a grid of loads against a broker the sweep starts itself.

Client axes (record size, partitions, acks, producer processes) change only
the load; broker axes (`num.io.threads`, purgatory shards, any `--setting`)
are written to the TOML file substituted for `{config}` in the broker command
template, and the broker is restarted whenever they change. A template
without `{config}` (tansu, for instance) takes no settings: broker axes are
then dropped with a warning rather than silently producing a fake axis.

Writes `sweep.csv`, one PNG per swept axis (throughput and p99 against the
value) and, with --json, the team's JSON contract.
"""

from __future__ import annotations

import csv
import itertools
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.contract import write_json
from bench.load import make_console, run_produce
from bench.load_produce import ProduceConfig
from bench.peers import ACTORLOG_TEMPLATE, BrokerProcess, start_broker, template_uses

CLIENT_AXES = ("record_size", "partitions", "acks", "processes")
METRICS = (
    "records_per_s",
    "mb_per_s",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "acked",
    "errors",
)


def _int_list(value: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from exc


def _settings_value(text: str) -> int | float | str:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def grid(
    client_axes: dict[str, list[Any]], broker_axes: dict[str, list[Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (broker settings, client point), broker settings outermost so restarts are few."""
    points = []
    broker_names = list(broker_axes)
    client_names = list(client_axes)
    for broker_values in itertools.product(*(broker_axes[n] for n in broker_names)):
        settings = dict(zip(broker_names, broker_values, strict=True))
        for client_values in itertools.product(*(client_axes[n] for n in client_names)):
            points.append((settings, dict(zip(client_names, client_values, strict=True))))
    return points


def run_sweep(
    broker_cmd: str,
    client_axes: dict[str, list[Any]],
    broker_axes: dict[str, list[Any]],
    out_dir: Path,
    *,
    duration_s: float,
    linger_ms: float = 5.0,
    batch_size: int = 65536,
    target_rate: float | None = None,
    fresh_broker: bool = False,
    show_progress: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    """Run the grid and write the CSV and plots; returns the `results` block."""
    console = console or make_console()
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    broker: BrokerProcess | None = None
    current: dict[str, Any] | None = None
    starts = 0
    try:
        for index, (settings, point) in enumerate(grid(client_axes, broker_axes)):
            if broker is None or settings != current or fresh_broker:
                if broker is not None:
                    broker.stop()
                    shutil.rmtree(broker.data_dir, ignore_errors=True)
                broker = start_broker(
                    broker_cmd, data_dir=out_dir / f"broker-{starts}", settings=settings
                )
                current = settings
                starts += 1
            config = ProduceConfig(
                bootstrap=broker.bootstrap,
                topic=f"sweep-{index}-{os.urandom(3).hex()}",
                num_records=None,
                duration_s=duration_s,
                record_size=int(point["record_size"]),
                partitions=int(point["partitions"]),
                acks=str(point["acks"]),
                linger_ms=linger_ms,
                batch_size=batch_size,
                target_rate=target_rate,
                processes=int(point["processes"]),
                time_limit_s=duration_s + 30,
            )
            results = run_produce(config, show_progress=show_progress)
            lat = results["latency"]
            row = {
                **point,
                **settings,
                "records_per_s": round(results["records_per_s"], 1),
                "mb_per_s": round(results["mb_per_s"], 3),
                **{k: lat[k] for k in ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")},
                "acked": results["acked"],
                "errors": sum(e["count"] for e in results["errors"].values()),
            }
            rows.append(row)
            console.print(
                f"point {index}: {point} {settings} -> {row['records_per_s']:,.0f} rec/s, "
                f"p99 {row['p99_ms']:.3f} ms"
            )
    finally:
        if broker is not None:
            broker.stop()
            shutil.rmtree(broker.data_dir, ignore_errors=True)
    columns = list(client_axes) + list(broker_axes) + list(METRICS)
    csv_path = out_dir / "sweep.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    axes = {**client_axes, **broker_axes}
    plots = [str(p) for p in plot_sweep(rows, axes, out_dir)]
    return {
        "points": rows,
        "columns": columns,
        "csv": str(csv_path),
        "plots": plots,
        "broker_starts": starts,
    }


def plot_sweep(
    rows: Sequence[dict[str, Any]], axes: dict[str, list[Any]], out_dir: Path
) -> list[Path]:
    """One PNG per axis with more than one value: throughput and p99 against it.

    Each line is one combination of the other swept axes; categorical values
    (acks) are placed at even positions with their labels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = [name for name, values in axes.items() if len(values) > 1]
    if not swept and rows:
        swept = [next(iter(axes))]  # a single point still gets its picture
    paths = []
    for axis in swept:
        values = list(dict.fromkeys(axes[axis]))
        numeric = all(isinstance(v, (int, float)) for v in values)
        others = [n for n in axes if n != axis and len(axes[n]) > 1]
        fig, (ax_tp, ax_p99) = plt.subplots(1, 2, figsize=(11, 4.2))
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in rows:
            groups.setdefault(tuple(row[n] for n in others), []).append(row)
        for key, group in groups.items():
            group = sorted(group, key=lambda r: values.index(r[axis]))
            xs = [r[axis] if numeric else values.index(r[axis]) for r in group]
            label = ", ".join(f"{n}={v}" for n, v in zip(others, key, strict=True)) or None
            ax_tp.plot(xs, [r["records_per_s"] for r in group], marker="o", label=label)
            ax_p99.plot(xs, [r["p99_ms"] for r in group], marker="o", label=label)
        for ax, ylabel in ((ax_tp, "records/s"), (ax_p99, "p99 latency (ms)")):
            ax.set_xlabel(axis)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if not numeric:
                ax.set_xticks(range(len(values)), [str(v) for v in values])
            ax.set_ylim(bottom=0)
        if others:
            ax_tp.legend(fontsize="small")
        fig.suptitle(f"sweep over {axis}")
        fig.tight_layout()
        path = out_dir / f"sweep_{axis.replace('.', '_')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def print_sweep(console: Console, results: dict[str, Any]) -> None:
    table = Table(title="sweep")
    for col in results["columns"]:
        table.add_column(col, justify="right")
    for row in results["points"]:
        table.add_row(
            *(
                f"{row[c]:,.3f}" if isinstance(row[c], float) else str(row[c])
                for c in results["columns"]
            )
        )
    console.print(table)
    console.print(f"table: {results['csv']}")
    for plot in results["plots"]:
        console.print(f"plot: {plot}")


@click.command("sweep")
@click.option(
    "--broker-cmd",
    default=ACTORLOG_TEMPLATE,
    show_default=True,
    help="Broker command template: {port}, {data_dir}, {config} (TOML of the broker "
    "axes), {tansu}; or the alias 'tansu'.",
)
@click.option("--record-sizes", default="100", show_default=True)
@click.option("--partitions", default="3", show_default=True)
@click.option("--acks", default="1", show_default=True, help="Comma list of 0, 1, all.")
@click.option("--processes", default="1", show_default=True, help="Producer processes, comma list.")
@click.option("--io-threads", default="", help="num.io.threads values (broker axis).")
@click.option("--purgatory-shards", default="", help="Purgatory shard counts (broker axis).")
@click.option(
    "--purgatory-key",
    default="num.purgatory.shards",
    show_default=True,
    help="Config key the purgatory shard count is written under.",
)
@click.option(
    "--setting", "settings", multiple=True, help="Any broker axis KEY=V1,V2 (repeatable)."
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    help="Seconds per grid point.",
)
@click.option("--linger-ms", type=click.FloatRange(min=0), default=5.0, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=65536, show_default=True)
@click.option(
    "--target-rate",
    type=click.FloatRange(min=1),
    default=None,
    help="Open loop at this rate (p99 at fixed load) instead of closed loop.",
)
@click.option("--fresh-broker", is_flag=True, help="Restart the broker for every point.")
@click.option("--out-dir", type=click.Path(file_okay=False), default="sweep-out", show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--no-progress", is_flag=True)
def command(**kw: Any) -> None:
    """Run a grid of produce loads against a broker started from --broker-cmd."""
    console = make_console()
    acks = [a.strip() for a in kw["acks"].split(",") if a.strip()]
    bad = [a for a in acks if a not in ("0", "1", "all", "-1")]
    if bad or not acks:
        raise click.BadParameter(f"acks must be 0, 1 or all, got {bad}", param_hint="--acks")
    client_axes: dict[str, list[Any]] = {
        "record_size": _int_list(kw["record_sizes"]),
        "partitions": _int_list(kw["partitions"]),
        "acks": ["all" if a == "-1" else a for a in acks],
        "processes": _int_list(kw["processes"]),
    }
    for name, values in client_axes.items():
        if not values:
            raise click.BadParameter(f"{name} needs at least one value")
    broker_axes: dict[str, list[Any]] = {}
    if kw["io_threads"]:
        broker_axes["num.io.threads"] = _int_list(kw["io_threads"])
    if kw["purgatory_shards"]:
        broker_axes[kw["purgatory_key"]] = _int_list(kw["purgatory_shards"])
    for item in kw["settings"]:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise click.BadParameter(f"expected KEY=V1,V2, got {item!r}", param_hint="--setting")
        broker_axes[key.strip()] = [
            _settings_value(v.strip()) for v in values.split(",") if v.strip()
        ]
    dropped: list[str] = []
    if broker_axes and not template_uses(kw["broker_cmd"], "config"):
        dropped = list(broker_axes)
        console.print(
            f"[yellow]the broker command has no {{config}}: broker settings "
            f"{', '.join(dropped)} do not apply and are dropped from the grid"
        )
        broker_axes = {}
    results = run_sweep(
        kw["broker_cmd"],
        client_axes,
        broker_axes,
        Path(kw["out_dir"]),
        duration_s=kw["duration"],
        linger_ms=kw["linger_ms"],
        batch_size=kw["batch_size"],
        target_rate=kw["target_rate"],
        fresh_broker=kw["fresh_broker"],
        show_progress=not kw["no_progress"],
        console=console,
    )
    results["dropped_broker_axes"] = dropped
    print_sweep(console, results)
    if kw["json_path"]:
        config = {k: v for k, v in kw.items() if k not in ("json_path", "no_progress")}
        config["settings"] = list(kw["settings"])
        config["client_axes"] = client_axes
        config["broker_axes"] = broker_axes
        write_json(kw["json_path"], "sweep", config, results)
