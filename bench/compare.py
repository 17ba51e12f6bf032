"""`actorlog bench compare`: the same loads against two brokers, alternating, several rounds.

A is actorlog (or whatever `--a`/`--a-cmd` names), B the peer (`--b` or
`--peer-cmd`, e.g. tansu). Within a round both brokers run every scenario
back to back, and the order flips every round, so slow drift of the machine
(other tenants, thermal limits) hits both sides alike. Every run writes to a
fresh topic: some brokers slow down as a topic grows, which would otherwise
penalise whichever side ran later.

Ratios are A over B for throughputs and B over A for the p99, so higher is
always better for A and 1.0 is parity.

``--tls`` measures what TLS costs: the bench starts two actorlog nodes, A with
an SSL listener (a PEM keystore from the TLS tests' certificate helper) and B
with a PLAINTEXT one, and A's loads connect with ``security.protocol=SSL``;
every ratio is then TLS over plaintext (the p99's plaintext over TLS).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.contract import min_median_max, write_json
from bench.load import make_console, run_produce
from bench.load_produce import ProduceConfig
from bench.peers import (
    ACTORLOG_TEMPLATE,
    BootstrapRefusedError,
    BrokerProcess,
    TlsFailedError,
    check_bootstrap,
    start_broker,
)

TLS_TEMPLATE = ACTORLOG_TEMPLATE.replace("--listen 127.0.0.1", "--listen SSL://127.0.0.1")


@dataclass(frozen=True)
class Scenario:
    """One named load of the issue's Targets section and how to read its figure."""

    name: str
    figure: str  # the key read from the produce results
    unit: str
    a_over_b: bool  # True: ratio = A/B (throughput); False: B/A (latency)
    describe: str

    def figure_of(self, results: dict[str, Any]) -> float:
        if self.figure == "p99_ms":
            return float(results["latency"]["p99_ms"])
        return float(results[self.figure])

    def ratio(self, a: float, b: float) -> float:
        num, den = (a, b) if self.a_over_b else (b, a)
        return num / den if den > 0 else 0.0


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("throughput_acks1", "records_per_s", "records/s", True, "acks=1, closed loop"),
        Scenario("throughput_acksall", "records_per_s", "records/s", True, "acks=all, closed loop"),
        Scenario(
            "p99_fixed_rate", "p99_ms", "ms", False, "p99 at a fixed rate, open loop, acks=all"
        ),
        Scenario(
            "small_requests",
            "requests_per_s",
            "requests/s",
            True,
            "linger 0, one record per request, 8 connections, acks=1",
        ),
    )
}


@dataclass
class CompareSettings:
    duration_s: float = 10.0
    processes: int = 2
    record_size: int = 100
    partitions: int = 3
    linger_ms: float = 5.0
    batch_size: int = 65536
    fixed_rate: float = 5000.0
    small_connections: int = 8
    time_limit_s: float = 120.0


def scenario_config(name: str, bootstrap: str, topic: str, s: CompareSettings,
                    client_config: Mapping[str, str] | None = None) -> ProduceConfig:
    """The produce load of one scenario; both sides get exactly the same one (but for
    `client_config`, how a client reaches that side: security.protocol, ...)."""
    base = ProduceConfig(
        bootstrap=bootstrap,
        topic=topic,
        num_records=None,
        duration_s=s.duration_s,
        record_size=s.record_size,
        partitions=s.partitions,
        linger_ms=s.linger_ms,
        batch_size=s.batch_size,
        processes=s.processes,
        time_limit_s=max(s.time_limit_s, s.duration_s + 5),
        client_config=dict(client_config or {}),
    )
    if name == "throughput_acks1":
        base.acks = "1"
    elif name == "throughput_acksall":
        base.acks = "all"
    elif name == "p99_fixed_rate":
        base.acks = "all"
        base.processes = 1
        base.target_rate = s.fixed_rate
    elif name == "small_requests":
        base.acks = "1"
        base.linger_ms = 0.0
        base.records_per_request = 1
        base.max_in_flight = 5
        processes = max(1, min(s.processes, s.small_connections))
        while s.small_connections % processes:
            processes -= 1
        base.processes = processes
        base.connections = s.small_connections // processes
    else:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return base


def run_compare(
    bootstrap_a: str,
    bootstrap_b: str,
    scenarios: list[str],
    rounds: int,
    settings: CompareSettings,
    *,
    show_progress: bool = False,
    allow_hosts: tuple[str, ...] = (),
    on_run: Callable[[str, int, str, dict[str, Any]], None] | None = None,
    client_configs: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run every scenario on both brokers for `rounds` rounds; return (results, ratios).

    `client_configs`: per side ("a", "b"), librdkafka settings its clients need."""
    client_configs = client_configs or {}
    check_bootstrap(bootstrap_a, allow_hosts)
    check_bootstrap(bootstrap_b, allow_hosts)
    tag = os.urandom(3).hex()
    per: dict[str, list[dict[str, Any]]] = {name: [] for name in scenarios}
    for rnd in range(rounds):
        sides = [("a", bootstrap_a), ("b", bootstrap_b)]
        if rnd % 2:
            sides.reverse()
        for name in scenarios:
            entry: dict[str, Any] = {"round": rnd, "order": [side for side, _ in sides]}
            for side, bootstrap in sides:
                topic = f"bench-{name.replace('_', '-')}-{tag}-r{rnd}-{side}"
                config = scenario_config(name, bootstrap, topic, settings,
                                         client_configs.get(side))
                run = run_produce(config, allow_hosts=allow_hosts, show_progress=show_progress)
                entry[side] = run
                if on_run is not None:
                    on_run(name, rnd, side, run)
            scen = SCENARIOS[name]
            entry["figure_a"] = scen.figure_of(entry["a"])
            entry["figure_b"] = scen.figure_of(entry["b"])
            entry["ratio"] = scen.ratio(entry["figure_a"], entry["figure_b"])
            per[name].append(entry)
    results: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    for name, entries in per.items():
        scen = SCENARIOS[name]
        results[name] = {
            "figure": scen.figure,
            "unit": scen.unit,
            "describe": scen.describe,
            "load": scenario_config(name, "A", "topic", settings).to_json(),
            "a": min_median_max([e["figure_a"] for e in entries]),
            "b": min_median_max([e["figure_b"] for e in entries]),
            "ratio": min_median_max([e["ratio"] for e in entries]),
            "errors_a": sum(sum(x["count"] for x in e["a"]["errors"].values()) for e in entries),
            "errors_b": sum(sum(x["count"] for x in e["b"]["errors"].values()) for e in entries),
            "rounds": entries,
        }
        ratios[name] = statistics.median([e["ratio"] for e in entries])
    return results, ratios


@contextlib.contextmanager
def tls_pair() -> Iterator[tuple[str, str, dict[str, str]]]:
    """Two actorlog nodes: (TLS bootstrap, plaintext bootstrap, the TLS side's client
    settings). The certificates come from bench/certs.py, which the TLS tests use too
    (a CA and a server keystore, PEM)."""
    from bench.certs import make_pki

    pki_dir = Path(tempfile.mkdtemp(prefix="actorlog-bench-tls-"))
    try:
        pki = make_pki(pki_dir)
        keystore = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server)}
        with (
            start_broker(TLS_TEMPLATE, settings=keystore) as tls,
            start_broker(ACTORLOG_TEMPLATE) as plain,
        ):
            client = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
            yield tls.bootstrap, plain.bootstrap, client
    finally:
        shutil.rmtree(pki_dir, ignore_errors=True)


@contextlib.contextmanager
def _broker(
    address: str | None, template: str | None, which: str,
    settings: Mapping[str, object] | None = None,
) -> Iterator[tuple[str, BrokerProcess | None]]:
    if (address is None) == (template is None):
        raise click.UsageError(
            f"give exactly one of --{which} HOST:PORT or the matching command template"
        )
    if address is not None:
        if settings:
            raise click.UsageError(f"--{which} names a running broker: its settings are its own")
        yield address, None
        return
    assert template is not None
    broker = start_broker(template, settings=settings, timeout_s=60)
    try:
        yield broker.bootstrap, broker
    finally:
        broker.stop()


def print_compare(console: Console, results: dict[str, Any], name_a: str, name_b: str) -> None:
    table = Table(title=f"compare: {name_a} (A) vs {name_b} (B) over the rounds")
    for col in ("scenario", "unit", "over rounds", f"A {name_a}", f"B {name_b}", "ratio"):
        table.add_column(col, justify="right", no_wrap=True)

    def fmt(x: float) -> str:
        return f"{x:,.3f}" if x < 100 else f"{x:,.0f}"

    for name, block in results.items():
        for i, stat in enumerate(("min", "median", "max")):
            table.add_row(
                name if i == 0 else "",
                block["unit"] if i == 0 else "",
                stat,
                fmt(block["a"][stat]),
                fmt(block["b"][stat]),
                fmt(block["ratio"][stat]),
                end_section=(i == 2),
            )
    console.print(table)
    console.print("ratio: A/B for throughputs, B/A for p99; higher is better for A, 1.0 is parity")
    for name, block in results.items():
        if block["errors_a"] or block["errors_b"]:
            console.print(
                f"[yellow]{name}: delivery errors A={block['errors_a']} B={block['errors_b']}"
            )


def parse_settings(pairs: tuple[str, ...]) -> dict[str, object]:
    """KEY=VALUE pairs as broker settings; a value that reads as an integer is one."""
    settings: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--a-setting")
        text = value.strip()
        settings[key.strip()] = int(text) if text.lstrip("-").isdigit() else text
    return settings


@click.command("compare")
@click.option("--a", "address_a", default=None, help="HOST:PORT of A (actorlog).")
@click.option(
    "--a-cmd",
    default=None,
    help="Start A from this template ({port}, {data_dir}, {config}, {tansu}; or 'tansu').",
)
@click.option(
    "--a-setting",
    "a_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker setting for the A that --a-cmd starts (its {config} file), e.g. "
    "num.processes=2; repeatable.",
)
@click.option(
    "--num-processes",
    type=click.IntRange(min=1, max=64),
    default=None,
    help="Shorthand for --a-setting num.processes=N.",
)
@click.option("--b", "address_b", default=None, help="HOST:PORT of the peer B.")
@click.option(
    "--peer-cmd",
    default=None,
    help="Start the peer B from this template, e.g. 'tansu' or "
    "'{tansu} broker --listener-url tcp://127.0.0.1:{port} ...'.",
)
@click.option("--a-name", default="actorlog", show_default=True)
@click.option("--b-name", default="peer", show_default=True)
@click.option(
    "--scenarios",
    default=",".join(SCENARIOS),
    show_default=True,
    help="Comma-separated subset of the scenarios.",
)
@click.option("--rounds", type=click.IntRange(min=1, max=100), default=3, show_default=True)
@click.option(
    "--duration",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="Seconds per scenario per broker per round.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1, max=64),
    default=2,
    show_default=True,
    help="Producer processes of the throughput scenarios.",
)
@click.option("--record-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--linger-ms", type=click.FloatRange(min=0), default=5.0, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=65536, show_default=True)
@click.option(
    "--fixed-rate",
    type=click.FloatRange(min=1),
    default=5000.0,
    show_default=True,
    help="Records/s of the p99_fixed_rate scenario.",
)
@click.option(
    "--small-connections", type=click.IntRange(min=1, max=64), default=8, show_default=True
)
@click.option("--allow-host", "allow_hosts", multiple=True)
@click.option(
    "--tls",
    is_flag=True,
    help="A = actorlog with an SSL listener, B = actorlog with a PLAINTEXT one, both started "
    "here: the ratios are TLS over plaintext.",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
@click.option("--no-progress", is_flag=True)
def command(**kw: Any) -> None:
    """Run the Targets scenarios against A and B, alternating, and print the ratios."""
    names = [n.strip() for n in kw["scenarios"].split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}",
            param_hint="--scenarios",
        )
    settings = CompareSettings(
        duration_s=kw["duration"],
        processes=kw["processes"],
        record_size=kw["record_size"],
        partitions=kw["partitions"],
        linger_ms=kw["linger_ms"],
        batch_size=kw["batch_size"],
        fixed_rate=kw["fixed_rate"],
        small_connections=kw["small_connections"],
    )
    a_settings = parse_settings(kw["a_settings"])
    if kw["num_processes"] is not None:
        a_settings["num.processes"] = kw["num_processes"]
    console = make_console()
    if kw["tls"]:
        if kw["address_a"] or kw["a_cmd"] or kw["address_b"] or kw["peer_cmd"]:
            raise click.UsageError("--tls starts both sides itself; leave out --a, --a-cmd, "
                                   "--b and --peer-cmd")
        if a_settings:
            raise click.UsageError("--tls starts both sides with the bench's settings; leave out "
                                   "--a-setting and --num-processes")
        if kw["a_name"] == "actorlog" and kw["b_name"] == "peer":
            kw["a_name"], kw["b_name"] = "tls", "plaintext"

    def on_run(name: str, rnd: int, side: str, results: dict[str, Any]) -> None:
        figure = SCENARIOS[name].figure_of(results)
        label = kw["a_name"] if side == "a" else kw["b_name"]
        console.print(f"round {rnd} {name} {label}: {figure:,.3f} {SCENARIOS[name].unit}")

    def run(boot_a: str, boot_b: str,
            client_configs: Mapping[str, Mapping[str, str]] | None = None
            ) -> tuple[dict[str, Any], dict[str, float]]:
        return run_compare(
            boot_a,
            boot_b,
            names,
            kw["rounds"],
            settings,
            show_progress=not kw["no_progress"],
            allow_hosts=kw["allow_hosts"],
            on_run=on_run,
            client_configs=client_configs,
        )

    try:
        if kw["tls"]:
            with tls_pair() as (boot_a, boot_b, tls_client):
                results, ratios = run(boot_a, boot_b, {"a": tls_client})
        else:
            with (
                _broker(kw["address_a"], kw["a_cmd"], "a", a_settings) as (boot_a, _proc_a),
                _broker(kw["address_b"], kw["peer_cmd"], "b") as (boot_b, _proc_b),
            ):
                results, ratios = run(boot_a, boot_b)
    except BootstrapRefusedError as exc:
        raise click.UsageError(str(exc)) from exc
    except TlsFailedError as exc:  # the bench's own TLS pair: one line, not a traceback
        raise click.ClickException(f"TLS handshake failed: {exc}") from None
    print_compare(console, results, kw["a_name"], kw["b_name"])
    if kw["json_path"]:
        config = {
            "a": TLS_TEMPLATE if kw["tls"] else kw["address_a"] or kw["a_cmd"],
            "b": ACTORLOG_TEMPLATE if kw["tls"] else kw["address_b"] or kw["peer_cmd"],
            "tls": kw["tls"],
            "a_settings": a_settings,
            "a_name": kw["a_name"],
            "b_name": kw["b_name"],
            "scenarios": names,
            "rounds": kw["rounds"],
            **settings.__dict__,
        }
        write_json(kw["json_path"], "compare", config, results, ratios)
