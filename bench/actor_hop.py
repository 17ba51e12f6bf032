"""`actorlog bench actor-hop`: one hop between two actors against bare pyzmq.

For each placement (same process, two processes on one host, two loopback
hosts) it measures, in the same run:
  * actor rate: a source actor tells N messages to a sink actor;
  * raw rate: a thread PUSHes N msgpack-packed messages to a PULL socket;
  * one-way latency (p50, p99) at half the actor's maximum rate.
The ratio actor/raw says what the runtime costs on top of ZeroMQ + msgpack.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import click
import msgpack
import zmq

from actors.metadata.zk_server import free_port
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import Directory, Node, NodeEndpoint
from bench.contract import min_median_max as _summary
from wire.registry import message


@message(100)
class Hop(NamedTuple):
    seq: int
    sent_ns: int


@message(101)
class HopGo(NamedTuple):
    """Send ``hops`` Hops to ``node``/``name``; ``rate`` 0 means as fast as possible."""

    hops: int
    rate: int
    node: str
    name: str


@message(102)
class HopReset(NamedTuple):
    expect: int


@message(103)
class HopStats(NamedTuple):
    pass


class HopSource(Actor):
    def setup(self) -> None:
        self.plan: tuple[int, int, Address, int, int] | None = None

    @handles(HopGo)
    def on_go(self, msg: HopGo) -> None:
        target = Address(msg.node, msg.name)
        if msg.rate <= 0:
            tell = self.tell
            mono = time.monotonic_ns
            for i in range(msg.hops):
                tell(target, Hop(i, mono()))
            return
        self.plan = (msg.hops, msg.rate, target, time.monotonic_ns(), 0)

    def poll_timeout_ms(self) -> int | None:
        if self.plan is None:
            return None
        _count, rate, _target, start, sent = self.plan
        next_due_ns = start + sent * 1_000_000_000 // rate
        # Wake in 1 ms ticks and send what fell due (one frame), rather than spinning
        # and sending frames of one message; latency still counts from each tell.
        return max(1, -(-(next_due_ns - time.monotonic_ns()) // 1_000_000))

    def on_turn(self) -> None:
        if self.plan is None:
            return
        count, rate, target, start, sent = self.plan
        now = time.monotonic_ns()
        due = min(count, (now - start) * rate // 1_000_000_000 + 1)
        mono = time.monotonic_ns
        for i in range(sent, due):
            self.tell(target, Hop(i, mono()))  # flushed at the end of this turn
        if due >= count:
            self.plan = None
        else:
            self.plan = (count, rate, target, start, due)


class HopSink(Actor):
    mailbox_size = 10_000

    def setup(self) -> None:
        self.reset(0)

    def reset(self, expect: int) -> None:
        self.expect = expect
        self.count = 0
        self.first_ns = 0
        self.last_ns = 0
        self.lat: list[int] = []

    @handles(HopReset)
    def on_reset(self, msg: HopReset) -> bool:
        self.reset(msg.expect)
        return True

    @handles(Hop)
    def on_hop(self, msg: Hop) -> None:
        now = time.monotonic_ns()
        if not self.count:
            self.first_ns = now
        self.count += 1
        self.last_ns = now
        self.lat.append(now - msg.sent_ns)

    @handles(HopStats)
    def on_stats(self, _msg: HopStats) -> list[Any]:
        done = self.count >= self.expect  # sorting is costly: only once the run is over
        return [self.count, self.first_ns, self.last_ns,
                _percentiles(self.lat) if done else [0.0, 0.0]]


def _percentiles(lat: list[int]) -> list[float]:
    if not lat:
        return [0.0, 0.0]
    s = sorted(lat)
    return [s[len(s) // 2] / 1000, s[min(len(s) - 1, int(len(s) * 0.99))] / 1000]


# ----------------------------------------------------------------- placements
PLACEMENTS = {
    "same_process": None,
    "two_process": ("127.0.0.1", "127.0.0.1"),
    "two_host": ("127.0.0.2", "127.0.0.3"),
}


def _child_main(argv: list[str]) -> None:
    """Runs in the second process: a node with a sink actor, or a raw PULL socket."""
    mode, host, port, ipc_dir, other_host, other_port = argv[:6]
    if mode == "actor":
        directory = Directory(
            {
                "a": NodeEndpoint(other_host, int(other_port), ipc_dir),
                "b": NodeEndpoint(host, int(port), ipc_dir),
            }
        )
        node = Node("b", directory=directory).start()
        node.spawn(HopSink, "sink")
        print("READY", flush=True)
        sys.stdin.read()
        node.shutdown()
        return
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 10_000)
    url = f"tcp://{host}:{port}" if mode == "raw-tcp" else f"ipc://{ipc_dir}/raw.sock"
    sock.bind(url)
    out = sys.stdout
    print("READY", flush=True)
    for line in sys.stdin:
        n = int(line)
        lat, first, last = _raw_receive(sock, n)
        out.write(json.dumps([n, first, last, _percentiles(lat)]) + "\n")
        out.flush()
    sock.close(0)
    ctx.term()


def _raw_receive(sock: Any, n: int) -> tuple[list[int], int, int]:
    unpackb = msgpack.unpackb
    mono = time.monotonic_ns
    lat = []
    first = 0
    recv = sock.recv
    for i in range(n):
        data = recv()
        now = mono()
        if i == 0:
            first = now
        _seq, sent = unpackb(data)
        lat.append(now - sent)
    return lat, first, mono()


def _raw_send(sock: Any, n: int, rate: int) -> None:
    packb = msgpack.packb
    mono = time.monotonic_ns
    send = sock.send
    if rate <= 0:
        for i in range(n):
            send(packb([i, mono()]))
        return
    start = mono()
    sent = 0
    while sent < n:
        due = min(n, (mono() - start) * rate // 1_000_000_000 + 1)
        for i in range(sent, due):
            send(packb([i, mono()]))
        sent = due
        time.sleep(0.00005)


class _Placement:
    """Both setups of one placement: the actor pair and the raw socket pair."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.workdir = workdir
        self.children: list[subprocess.Popen[str]] = []

    def _spawn_child(self, args: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.actor_hop", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            stderr=subprocess.DEVNULL,
        )
        self.children.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"bench child did not start ({line!r})")
        return proc

    def close(self) -> None:
        for proc in self.children:
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=15)
            except Exception:
                proc.kill()
                proc.wait()

    # ---- actor side
    def actor_setup(self) -> tuple[Node, Address, Address]:
        ipc_dir = str(self.workdir / "ipc")
        if self.name == "same_process":
            node = Node("a").start()
            node.spawn(HopSink, "sink")
            node.spawn(HopSource, "src")
            return node, Address("a", "src"), Address("a", "sink")
        host_a, host_b = PLACEMENTS[self.name]  # type: ignore[misc]
        port_a, port_b = free_port(host_a), free_port(host_b)
        directory = Directory(
            {"a": NodeEndpoint(host_a, port_a, ipc_dir), "b": NodeEndpoint(host_b, port_b, ipc_dir)}
        )
        node = Node("a", directory=directory).start()
        node.spawn(HopSource, "src")
        self._spawn_child(["actor", host_b, str(port_b), ipc_dir, host_a, str(port_a)])
        return node, Address("a", "src"), Address("b", "sink")

    # ---- raw side
    def raw_run(self, n: int, rate: int) -> list[Any]:
        if self.name == "same_process":
            ctx = zmq.Context()
            pull = ctx.socket(zmq.PULL)
            pull.setsockopt(zmq.RCVHWM, 10_000)
            pull.bind("inproc://raw")
            push = ctx.socket(zmq.PUSH)
            push.connect("inproc://raw")
            result: list[Any] = []

            def receive() -> None:
                lat, first, last = _raw_receive(pull, n)
                result.extend([n, first, last, _percentiles(lat)])

            t = threading.Thread(target=receive)
            t.start()
            start = time.monotonic_ns()
            _raw_send(push, n, rate)
            t.join()
            push.close(0)
            pull.close(0)
            ctx.term()
            return [start, *result]
        if not hasattr(self, "_raw_child"):
            host_a, host_b = PLACEMENTS[self.name]  # type: ignore[misc]
            port = free_port(host_b)
            mode = "raw-ipc" if self.name == "two_process" else "raw-tcp"
            ipc_dir = str(self.workdir / "ipc")
            Path(ipc_dir).mkdir(parents=True, exist_ok=True)
            self._raw_child = self._spawn_child([mode, host_b, str(port), ipc_dir, host_a, "0"])
            self._raw_ctx = zmq.Context()
            self._raw_push = self._raw_ctx.socket(zmq.PUSH)
            url = (
                f"tcp://{host_a}:0;{host_b}:{port}" if mode == "raw-tcp"
                else f"ipc://{ipc_dir}/raw.sock"
            )
            self._raw_push.connect(url)
            time.sleep(0.2)
        child = self._raw_child
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(f"{n}\n")
        child.stdin.flush()
        start = time.monotonic_ns()
        _raw_send(self._raw_push, n, rate)
        got = json.loads(child.stdout.readline())
        return [start, *got]

    def raw_close(self) -> None:
        if hasattr(self, "_raw_push"):
            self._raw_push.close(linger=1000)
            self._raw_ctx.term()


def _actor_run(node: Node, src: Address, sink: Address, n: int, rate: int) -> list[Any]:
    node.ask(sink, HopReset(n), timeout=10)
    start = time.monotonic_ns()
    node.tell(src, HopGo(n, rate, sink.node, sink.name), trace_id=0)
    deadline = time.monotonic() + 120
    while True:
        count, first, last, pct = node.ask(sink, HopStats(), timeout=10)
        if count >= n or time.monotonic() > deadline:
            return [start, count, first, last, pct]
        time.sleep(0.02)


def _rate(run: list[Any]) -> float:
    start, count, _first, last, _pct = run
    return count / max(1e-9, (last - start) / 1e9)


def measure(placements: list[str], count: int, repeats: int, latency_s: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="actorlog-hop-") as tmp:
        for name in placements:
            place = _Placement(name, Path(tmp))
            node, src, sink = place.actor_setup()
            try:
                _actor_run(node, src, sink, min(count, 20_000), 0)  # warm up
                place.raw_run(min(count, 20_000), 0)
                actor_rates, raw_rates = [], []
                for _ in range(repeats):  # alternate, so drift hits both alike
                    actor_rates.append(_rate(_actor_run(node, src, sink, count, 0)))
                    raw_rates.append(_rate(place.raw_run(count, 0)))
                half = int(statistics.median(actor_rates) / 2)
                n_lat = max(1000, int(half * latency_s))
                lat_actor = _actor_run(node, src, sink, n_lat, half)[4]
                lat_raw = place.raw_run(n_lat, half)[4]
            finally:
                place.raw_close()
                node.shutdown()
                place.close()
            results[name] = {
                "actor_rate": _summary(actor_rates),
                "raw_rate": _summary(raw_rates),
                "ratio_per_round": [a / r for a, r in zip(actor_rates, raw_rates, strict=True)],
                "latency_rate": half,
                "actor_p50_us": lat_actor[0],
                "actor_p99_us": lat_actor[1],
                "raw_p50_us": lat_raw[0],
                "raw_p99_us": lat_raw[1],
            }
            ratios[f"{name}_rate"] = statistics.median(actor_rates) / statistics.median(raw_rates)
            results[f"{name}_p99_us"] = lat_actor[1]
    return {"results": results, "ratios": ratios}




@click.command("actor-hop")
@click.option("--count", default=200_000, show_default=True, help="messages per rate run")
@click.option("--repeats", default=5, show_default=True, help="alternating actor/raw rounds")
@click.option("--latency-seconds", default=2.0, show_default=True, help="length of the latency run")
@click.option(
    "--placement", "placements", multiple=True, type=click.Choice(list(PLACEMENTS)),
    help="limit to these placements (default: all three)",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results here")
def command(count: int, repeats: int, latency_seconds: float, placements: tuple[str, ...],
            json_path: str | None) -> None:
    """Message rate and one-way latency of one actor hop, beside bare pyzmq."""
    from loguru import logger
    from rich.console import Console
    from rich.table import Table

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    chosen = list(placements) or list(PLACEMENTS)
    out = measure(chosen, count, repeats, latency_seconds)
    table = Table(title=f"actor hop: {count} messages x {repeats} rounds (min/median/max msg/s)")
    for col in ("placement", "actor rate", "raw rate", "actor/raw", "p50 us", "p99 us",
                "raw p99 us", "at rate"):
        table.add_column(col)

    def fmt(s: dict[str, float]) -> str:
        return f"{s['min']:,.0f} / {s['median']:,.0f} / {s['max']:,.0f}"

    for name in chosen:
        r = out["results"][name]
        table.add_row(
            name, fmt(r["actor_rate"]), fmt(r["raw_rate"]), f"{out['ratios'][name + '_rate']:.2f}",
            f"{r['actor_p50_us']:.0f}", f"{r['actor_p99_us']:.0f}", f"{r['raw_p99_us']:.0f}",
            f"{r['latency_rate']:,}/s",
        )
    Console(width=150).print(table)
    doc = {
        "bench": "actor-hop",
        "config": {"count": count, "repeats": repeats, "latency_seconds": latency_seconds,
                   "placements": chosen, "cpus": os.cpu_count()},
        "results": out["results"],
        "ratios": out["ratios"],
    }
    if "same_process" in chosen:
        doc["results"]["same_process_p99_us"] = out["results"]["same_process"]["actor_p99_us"]
    if json_path:
        Path(json_path).write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    _child_main(sys.argv[1:])
