"""`actorlog bench txn`: a transactional producer against the idempotent one, same broker.

Each round sends ``--records`` records of ``--record-size`` bytes with
confluent-kafka, once with an idempotent producer (the baseline) and once
per transaction size (``--txn-sizes``, records per transaction: begin,
produce them, commit), in an order that rotates every round so machine load
falls on every scenario alike. Each producer first sends one record (one
transaction) untimed, so connections, metadata and producer ids are set up
before the clock starts; a scenario's time then runs from its first
produce() to the last acknowledgement (idempotent) or the last commit
(transactional); its figure is records per second. Figures are
min/median/max over ``--rounds``; each ratio is the transactional median over
the idempotent median of the same broker (higher is better, 1.0 is parity).

The broker is actorlog started here (``--broker-cmd``, a template as for
`bench compare`) or one already running (``--bootstrap``). With ``--peer-cmd``
(e.g. ``tansu``) the same scenarios also run on that broker, in the same
rounds, and ``*_vs_peer`` ratios compare the two brokers' transactional
rates.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from bench.contract import min_median_max, write_json
from bench.peers import TEMPLATE_ALIASES, BrokerProcess, ensure_topic, start_broker

BENCH_NAME = "txn"
DEFAULT_SIZES = (100, 1000, 10000)


def ratio_keys(sizes: tuple[int, ...], peer: bool) -> list[str]:
    keys = [f"txn_{n}_vs_idempotent" for n in sizes]
    if peer:
        keys += [f"txn_{n}_vs_peer" for n in sizes]
    return keys


def run_idempotent(bootstrap: str, topic: str, records: int, payload: bytes) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1 << 20})
    failed: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    producer.produce(topic, payload)  # warm-up: metadata, producer id, connections
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise click.ClickException(f"idempotent run: {left} unsent, errors {failed[:3]}")
    return records / elapsed


def run_transactional(bootstrap: str, topic: str, records: int, txn_size: int,
                      payload: bytes, txn_id: str) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5, "batch.size": 1 << 20})
    producer.init_transactions(60)
    producer.begin_transaction()  # warm-up, as the idempotent run's
    producer.produce(topic, payload)
    producer.commit_transaction(60)
    sent = 0
    start = time.perf_counter()
    while sent < records:
        producer.begin_transaction()
        n = min(txn_size, records - sent)
        for _ in range(n):
            while True:
                try:
                    producer.produce(topic, payload)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.commit_transaction(120)
        sent += n
    elapsed = time.perf_counter() - start
    return records / elapsed


def measure(bootstrap: str, label: str, records: int, sizes: tuple[int, ...],
            record_size: int, rounds: int, log: Any) -> dict[str, dict[str, float]]:
    ensure_topic(bootstrap, f"bench-txn-{label}", 1, timeout_s=30)
    topic = f"bench-txn-{label}"
    payload = bytes(record_size)
    scenarios = ["idempotent", *[f"txn_{n}" for n in sizes]]
    rates: dict[str, list[float]] = {s: [] for s in scenarios}
    for r in range(rounds):
        order = scenarios[r % len(scenarios):] + scenarios[:r % len(scenarios)]
        for name in order:
            if name == "idempotent":
                rate = run_idempotent(bootstrap, topic, records, payload)
            else:
                n = int(name.split("_")[1])
                rate = run_transactional(bootstrap, topic, records, n, payload,
                                         f"bench-{label}-{n}-{r}")
            rates[name].append(rate)
            log(f"{label} round {r + 1}: {name} {rate:,.0f} records/s")
    return {name: min_median_max(values) for name, values in rates.items()}


def _start(template: str, base: Path, label: str) -> BrokerProcess:
    return start_broker(TEMPLATE_ALIASES.get(template, template), data_dir=base / label,
                        settings={"trace.sample.ratio": 0.0} if "actorlog" in template else {},
                        timeout_s=60)


@click.command("txn")
@click.option("--bootstrap", default=None, help="A running broker instead of starting one.")
@click.option("--broker-cmd", default="actorlog", show_default=True,
              help="Start the broker from this template ({port}, {data_dir}, {config}).")
@click.option("--peer-cmd", default=None,
              help="Also run on this broker (e.g. 'tansu'), for *_vs_peer ratios.")
@click.option("--records", default=20000, show_default=True, help="Records per scenario.")
@click.option("--record-size", default=100, show_default=True)
@click.option("--txn-sizes", default=",".join(map(str, DEFAULT_SIZES)), show_default=True,
              help="Records per transaction, comma separated.")
@click.option("--rounds", default=3, show_default=True)
@click.option("--dir", "directory", default=None, help="Where started brokers keep data.")
@click.option("--json", "json_path", default=None, help="Write the benchmark JSON here.")
def command(bootstrap: str | None, broker_cmd: str, peer_cmd: str | None, records: int,
            record_size: int, txn_sizes: str, rounds: int, directory: str | None,
            json_path: str | None) -> None:
    """Transactional producer throughput as a ratio to the idempotent producer."""
    sizes = tuple(int(s) for s in txn_sizes.split(",") if s.strip())
    if not sizes or min(sizes) < 1 or records < 1 or rounds < 1:
        raise click.BadParameter("records, rounds and every transaction size must be >= 1")
    base = Path(tempfile.mkdtemp(prefix="actorlog-bench-txn-", dir=directory))
    started: list[BrokerProcess] = []
    results: dict[str, Any] = {}
    try:
        if bootstrap is None:
            broker = _start(broker_cmd, base, "actorlog")
            started.append(broker)
            bootstrap = broker.bootstrap
        results["actorlog"] = measure(bootstrap, "actorlog", records, sizes, record_size,
                                      rounds, click.echo)
        if peer_cmd:
            peer = _start(peer_cmd, base, "peer")
            started.append(peer)
            results["peer"] = measure(peer.bootstrap, "peer", records, sizes, record_size,
                                      rounds, click.echo)
    finally:
        for b in started:
            b.stop(timeout_s=30)
        shutil.rmtree(base, ignore_errors=True)
    mine = results["actorlog"]
    ratios = {f"txn_{n}_vs_idempotent": mine[f"txn_{n}"]["median"]
              / mine["idempotent"]["median"] for n in sizes}
    if "peer" in results:
        for n in sizes:
            ratios[f"txn_{n}_vs_peer"] = (mine[f"txn_{n}"]["median"]
                                          / results["peer"][f"txn_{n}"]["median"])
    config = {"records": records, "record_size": record_size, "txn_sizes": list(sizes),
              "rounds": rounds, "broker_cmd": broker_cmd if started else None,
              "bootstrap": bootstrap if not started else None, "peer_cmd": peer_cmd}
    click.echo("")
    for side, figures in results.items():
        for name, s in figures.items():
            click.echo(f"{side:9} {name:12} records/s min {s['min']:>10,.0f} "
                       f"median {s['median']:>10,.0f} max {s['max']:>10,.0f}")
    for name, value in ratios.items():
        click.echo(f"{name}: {value:.3f}")
    if json_path:
        write_json(json_path, BENCH_NAME, config, results, ratios)
