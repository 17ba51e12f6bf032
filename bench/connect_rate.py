"""`actorlog bench connect-rate`: new connections per second at num.processes = 2, per
num.processes.connection.distribution.

The small-request load (`bench scale`) keeps its connections; this measures what a
new connection costs: one client opens a connection, sends an ApiVersions v0
request, reads the answer and closes, ``--connections`` times in a row, against a
2-process broker per distribution (reuseport: the kernel gives the socket to a
process; handoff: process 0 accepts it and passes it over a Unix socket). The
order of the brokers alternates every round; min/median/max over the rounds.
Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import click

from bench.contract import min_median_max, write_json
from bench.peers import ACTORLOG_TEMPLATE, start_broker

BENCH_NAME = "connect-rate"
DISTRIBUTIONS = ("reuseport", "handoff")
_CLIENT_ID = b"connect-rate"
_REQUEST = struct.pack(">hhih", 18, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID  # ApiVersions v0
_FRAME = struct.pack(">i", len(_REQUEST)) + _REQUEST


def _read_exactly(sock: socket.socket, size: int) -> None:
    while size > 0:
        chunk = sock.recv(min(size, 65536))
        if not chunk:
            raise ConnectionError("the broker closed the connection before answering")
        size -= len(chunk)


def connect_once(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_FRAME)
        head = b""
        while len(head) < 4:
            more = sock.recv(4 - len(head))
            if not more:
                raise ConnectionError("the broker closed the connection before answering")
            head += more
        _read_exactly(sock, struct.unpack(">i", head)[0])


def run_connect_rate(connections: int, rounds: int, template: str) -> dict[str, Any]:
    load_start = os.getloadavg()
    rates: dict[str, list[float]] = {d: [] for d in DISTRIBUTIONS}
    with contextlib.ExitStack() as stack:
        brokers = {}
        for distribution in DISTRIBUTIONS:
            broker = start_broker(template, timeout_s=60, settings={
                "num.processes": 2, "num.processes.connection.distribution": distribution})
            stack.callback(broker.stop)
            brokers[distribution] = broker
        time.sleep(2.0)  # process 1 of each is up (it says hello after the port is bound)
        for rnd in range(rounds):
            order = DISTRIBUTIONS if rnd % 2 == 0 else DISTRIBUTIONS[::-1]
            for distribution in order:
                port = brokers[distribution].port
                start = time.perf_counter()
                for _ in range(connections):
                    connect_once(port)
                rates[distribution].append(connections / (time.perf_counter() - start))
    ratios = [h / r for h, r in zip(rates["handoff"], rates["reuseport"], strict=True)]
    return {
        "config": {"connections": connections, "rounds": rounds, "template": template,
                   "cpus": len(os.sched_getaffinity(0))},
        "results": {"connections_per_s": {d: min_median_max(v) for d, v in rates.items()},
                    "connections_per_s_by_round": rates,
                    "handoff_vs_reuseport": min_median_max(ratios),
                    "load_average_start": list(load_start),
                    "load_average_end": list(os.getloadavg())},
        "ratios": {"handoff_vs_reuseport": min_median_max(ratios)["median"]},
    }


@click.command(name=BENCH_NAME)
@click.option("--connections", type=click.IntRange(min=1, max=100_000), default=400,
              show_default=True, help="connections opened one after another per round")
@click.option("--rounds", type=click.IntRange(min=1, max=100), default=6, show_default=True)
@click.option("--cmd", "template", default=ACTORLOG_TEMPLATE, show_default=True,
              help="actorlog command template ({port}, {data_dir}, {config})")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def command(connections: int, rounds: int, template: str, json_path: str | None) -> None:
    """New connections per second at num.processes = 2: reuseport against handoff."""
    report = run_connect_rate(connections, rounds, template)
    r = report["results"]
    for distribution in DISTRIBUTIONS:
        rate = r["connections_per_s"][distribution]
        click.echo(f"{distribution}: {rate['min']:,.0f} / {rate['median']:,.0f} / "
                   f"{rate['max']:,.0f} connections/s (min / median / max)")
    ratio = r["handoff_vs_reuseport"]
    click.echo(f"handoff vs reuseport: {ratio['min']:.2f} / {ratio['median']:.2f} / "
               f"{ratio['max']:.2f}")
    click.echo("load average at start {:.2f} {:.2f} {:.2f}, at end {:.2f} {:.2f} {:.2f}".format(
        *r["load_average_start"], *r["load_average_end"]))
    if json_path:
        write_json(Path(json_path), BENCH_NAME, report["config"], r, report["ratios"])
