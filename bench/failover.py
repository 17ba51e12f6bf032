"""`actorlog bench failover`: how long a cluster takes to move leaderships away from a node.

Starts a ZooKeeper server (the Debian package) and ``--nodes`` brokers in cluster
mode on 127.0.0.1, then measures, ``--runs`` times each:

- ``controller_kill``: kill -9 of the active controller's node, until every live
  node's Metadata names another controller and no partition led by the dead node;
- ``broker_kill``: kill -9 of a node that leads partitions but is not the
  controller, until every live node's Metadata shows none of its leaderships;
- ``controlled_shutdown``: SIGTERM of such a node, until every live node shows
  none of its leaderships (the node asks the controller to move them first, so
  this does not wait for a ZooKeeper session to expire).

Each run creates a fresh topic (``--partitions``, replication factor = nodes) so
that leaderships are spread over every node, and restarts the stopped node
afterwards. Times are from the signal to the first moment every live node
agrees, polled every 20 ms. A kill can only be noticed when the dead node's
ZooKeeper session expires, so ``ratios`` compare each median with that bound
(``zookeeper.session.timeout.ms`` + 2 s, issue 14's): above 1.0 is within it.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from kafka.admin import KafkaAdminClient, NewTopic

from actors.hosts.probe import MetadataInfo, ProbeError, metadata
from actors.metadata.zk_server import ZooKeeperServer
from actors.metadata.zk_server import free_port as zk_free_port
from bench.contract import min_median_max, write_json
from bench.peers import BrokerProcess, free_port, start_broker

BENCH_NAME = "failover"
SCENARIOS = ("controller_kill", "broker_kill", "controlled_shutdown")
POLL_S = 0.02
WAIT_S = 90.0


class Node:
    """One broker of the cluster, restartable on the same port and data dir."""

    def __init__(self, broker_id: int, base: Path, settings: dict[str, object]) -> None:
        self.broker_id = broker_id
        self.port = free_port()
        self.dir = base / f"node-{broker_id}"
        self.settings = {**settings, "node.id": broker_id, "actor.gateway.port": free_port()}
        self.process: BrokerProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = start_broker("actorlog", port=self.port, data_dir=self.dir,
                                    settings=self.settings, timeout_s=60.0)

    def signal(self, sig: int) -> None:
        assert self.process is not None and self.process.pid is not None
        os.killpg(self.process.pid, sig)

    def reap(self) -> None:
        if self.process is not None:
            self.process.stop(timeout_s=60.0, keep_data_dir=True)
            self.process = None


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> float:
    """Seconds until ``check()`` holds; RuntimeError after ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            if check():
                return time.monotonic() - started
        except ProbeError:
            pass
        time.sleep(POLL_S)
    raise RuntimeError(f"no {what} within {timeout_s:g} s")


def views(nodes: list[Node]) -> list[MetadataInfo]:
    return [metadata(n.address, timeout_s=2.0) for n in nodes]


def leaders(view: MetadataInfo, topic: str) -> dict[int, int]:
    return {p.partition: p.leader for p in view.partitions if p.topic == topic}


class Cluster:
    def __init__(self, base: Path, size: int, session_timeout_ms: int) -> None:
        self.zk = ZooKeeperServer(base / "zookeeper", zk_free_port(), tick_time_ms=500)
        settings: dict[str, object] = {
            "zookeeper.connect": f"127.0.0.1:{self.zk.client_port}/failover",
            "zookeeper.session.timeout.ms": session_timeout_ms,
            "controlled.shutdown.retry.backoff.ms": 500,
            "offsets.topic.num.partitions": 4,
            "trace.sample.ratio": 0.0,
            "actor.gateway.host": "127.0.0.1",
        }
        self.nodes = {i: Node(i, base, settings) for i in range(1, size + 1)}
        self.topics = 0

    def start(self) -> None:
        self.zk.start()
        self.zk.wait_serving()
        for node in self.nodes.values():
            node.start()
        self.wait_formed()

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.process is not None]

    def wait_formed(self) -> None:
        ids = {n.broker_id for n in self.live()}

        def formed() -> bool:
            found = views(self.live())
            return all(set(v.brokers) == ids for v in found) and len(
                {v.controller_id for v in found}) == 1 and found[0].controller_id in ids

        wait_until(f"agreement of nodes {sorted(ids)} on one controller", formed)

    def controller(self) -> int:
        return metadata(self.live()[0].address).controller_id

    def new_topic(self, partitions: int) -> str:
        self.topics += 1
        topic = f"failover-{self.topics}"
        admin = KafkaAdminClient(bootstrap_servers=[n.address for n in self.live()],
                                 request_timeout_ms=60_000)
        try:
            admin.create_topics([NewTopic(topic, partitions, len(self.nodes))])
        finally:
            admin.close()
        wait_until(f"leaders of {topic} on every node", lambda: all(
            len(leaders(v, topic)) == partitions and min(leaders(v, topic).values()) >= 0
            for v in views(self.live())))
        return topic

    def moved_away(self, dead: int, topic: str, old_controller: int | None) -> Callable[[], bool]:
        def check() -> bool:
            live = {n.broker_id for n in self.live()} - {dead}
            for view in views([n for n in self.live() if n.broker_id != dead]):
                led = leaders(view, topic)
                if dead in led.values() or not set(led.values()) <= live:
                    return False
                if view.controller_id not in live or view.controller_id == old_controller:
                    return False
            return True
        return check

    def stop(self) -> None:
        for node in self.nodes.values():
            node.reap()
        self.zk.stop()


def one_run(cluster: Cluster, scenario: str, partitions: int) -> float:
    topic = cluster.new_topic(partitions)
    controller = cluster.controller()
    if scenario == "controller_kill":
        victim = controller
    else:
        view = metadata(cluster.live()[0].address)
        counts = {n.broker_id: list(leaders(view, topic).values()).count(n.broker_id)
                  for n in cluster.live() if n.broker_id != controller}
        victim = max(counts, key=lambda b: counts[b])
    node = cluster.nodes[victim]
    sig = signal.SIGTERM if scenario == "controlled_shutdown" else signal.SIGKILL
    started = time.monotonic()
    node.signal(sig)
    check = cluster.moved_away(victim, topic,
                               controller if scenario == "controller_kill" else None)
    # The node stays in the live list until its process is reaped, so the check asks the
    # others only (moved_away leaves ``victim`` out).
    wait_until(f"{scenario}: leaderships of node {victim} moved", check)
    elapsed = time.monotonic() - started
    node.reap()
    node.start()
    cluster.wait_formed()
    return elapsed * 1000


@click.command(BENCH_NAME)
@click.option("--nodes", type=click.IntRange(3, 5), default=3, show_default=True)
@click.option("--runs", type=click.IntRange(1, 50), default=10, show_default=True,
              help="runs of each scenario")
@click.option("--partitions", type=click.IntRange(1, 64), default=6, show_default=True)
@click.option("--session-timeout-ms", type=click.IntRange(2000, 60000), default=6000,
              show_default=True, help="zookeeper.session.timeout.ms of the nodes")
@click.option("--dir", "base_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="where ZooKeeper's and the nodes' data go (default: temp)")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path))
def command(nodes: int, runs: int, partitions: int, session_timeout_ms: int,
            base_dir: Path | None, json_out: Path | None) -> None:
    """Failover times of a cluster: controller kill -9, broker kill -9, controlled shutdown."""
    base = Path(tempfile.mkdtemp(prefix="actorlog-failover-", dir=base_dir))
    cluster = Cluster(base, nodes, session_timeout_ms)
    times: dict[str, list[float]] = {s: [] for s in SCENARIOS}
    try:
        cluster.start()
        for i in range(runs):
            for scenario in SCENARIOS:
                ms = one_run(cluster, scenario, partitions)
                times[scenario].append(ms)
                click.echo(f"run {i + 1}/{runs} {scenario}: {ms:,.0f} ms")
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    bound_ms = session_timeout_ms + 2000
    results: dict[str, Any] = {s: {"ms": min_median_max(v), "runs": v} for s, v in times.items()}
    results["bound_ms"] = bound_ms
    ratios = {f"{s}_within_bound": bound_ms / max(1.0, results[s]["ms"]["median"])
              for s in SCENARIOS}
    click.echo(f"failover over {runs} runs, {nodes} nodes, session timeout "
               f"{session_timeout_ms} ms (min / median / max):")
    for s in SCENARIOS:
        m = results[s]["ms"]
        click.echo(f"  {s:20s} {m['min']:8,.0f} / {m['median']:8,.0f} / {m['max']:8,.0f} ms")
    if json_out is not None:
        write_json(json_out, BENCH_NAME, {"nodes": nodes, "runs": runs,
                                          "partitions": partitions,
                                          "session_timeout_ms": session_timeout_ms},
                   results, ratios)
