"""`actorlog bench replication`: what replication costs, on three nodes of one host.

It starts a ZooKeeper server (the Debian package) and three `actorlog serve`
nodes in one cluster, then measures, over ``--rounds`` alternating rounds:

* produce throughput (records/s, confluent-kafka) with acks=all to an RF=3
  topic against acks=1 to an RF=1 topic, both of ``--partitions`` partitions
  on the same cluster: the ratio is Kafka's 2014 comparison (421,823 / 821,557
  = 0.51 on three machines);
* p99 produce latency of acks=all RF=3 at a fixed rate (``--rate``), and the
  same at acks=1 RF=1 as its baseline;
* the time from a leader's kill -9 to the first acks=all produce acknowledged
  after it (``--kills`` times: the killed node is restarted and back in the
  ISR before the next), which the ZooKeeper session timeout dominates;
* the replica fetch rate of a follower catching up from an empty log on a
  log of ``--catch-up-mb`` (its data dir wiped; from its restart until it is
  back in the ISR), ``--catch-up-runs`` times (the followers in turn), with
  the follower's peak RSS (VmHWM) in each: bounded by replica.fetch.max.bytes
  and replica.fetch.response.max.bytes, not by the log size.

Summary on stdout; ``--json FILE`` writes DESIGN.md's contract:
``{"bench", "config", "results", "ratios"}``, every figure as min/median/max.
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click

from actors.metadata.zk_server import ZooKeeperServer
from actors.metadata.zk_server import free_port as zk_free_port
from bench.peers import ACTORLOG_TEMPLATE, BrokerProcess, free_port, start_broker

BENCH_NAME = "replication"
KAFKA_2014_RATIO = 421_823 / 821_557


def min_median_max(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class Node:
    """One cluster node: its broker process and the settings it restarts with."""

    def __init__(self, broker_id: int, base: Path, template: str,
                 settings: dict[str, object]) -> None:
        self.broker_id = broker_id
        self.dir = base / f"node-{broker_id}"
        self.template = template
        self.port = free_port()
        self.settings = {**settings, "node.id": broker_id, "actor.gateway.host": "127.0.0.1",
                         "actor.gateway.port": free_port()}
        self.broker: BrokerProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.broker = start_broker(self.template, port=self.port, data_dir=self.dir,
                                   settings=self.settings, timeout_s=60)

    def kill(self) -> None:
        broker = self.broker
        if broker is not None and broker.proc is not None:
            broker.proc.kill()
            broker.proc.wait()

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop(timeout_s=30, keep_data_dir=True)
            self.broker = None


class BenchCluster:
    """A ZooKeeper server and three nodes in a temporary directory."""

    def __init__(self, base: Path, template: str, session_timeout_ms: int) -> None:
        self.base = base
        self.zk = ZooKeeperServer(base / "zookeeper", zk_free_port())
        common: dict[str, object] = {
            "zookeeper.connect": f"127.0.0.1:{self.zk.client_port}",
            "zookeeper.session.timeout.ms": session_timeout_ms,
            "min.insync.replicas": 2,
            "offsets.topic.num.partitions": 3,
            "auto.leader.rebalance.enable": False,
            "replica.fetch.backoff.ms": 100,
            "replica.socket.timeout.ms": 5000,
            "trace.sample.ratio": 0.0,
        }
        self.nodes = [Node(i, base, template, common) for i in (1, 2, 3)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def start(self) -> None:
        self.zk.start()
        self.zk.wait_serving(timeout_s=30)
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        for node in self.nodes:
            try:
                node.stop()
            except Exception:
                node.kill()
        self.zk.stop()


def _admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def create_topic(bootstrap: str, name: str, partitions: int, rf: int,
                 timeout_s: float = 60.0) -> None:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = _admin(bootstrap)
            try:
                admin.create_topics([NewTopic(name, partitions, rf)])
            finally:
                admin.close()
            break
        except TopicAlreadyExistsError:
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    wait_isr(bootstrap, name, partitions, rf, timeout_s)


def partition_state(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, ISR) as a Metadata answer gives them."""
    from confluent_kafka.admin import AdminClient
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return {p: (pm.leader, tuple(sorted(pm.isrs))) for p, pm in found.partitions.items()}


def wait_isr(bootstrap: str, topic: str, partitions: int, size: int,
             timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = partition_state(bootstrap, topic)
            if len(state) == partitions and all(len(isr) == size and leader >= 0
                                                for leader, isr in state.values()):
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise click.ClickException(f"{topic}: the ISR of every partition did not reach {size} "
                               f"within {timeout_s} s")


def _producer(bootstrap: str, acks: str) -> Any:
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "enable.idempotence": acks == "all", "compression.type": "none",
                     "queue.buffering.max.messages": 200_000,
                     "message.timeout.ms": 120_000})


def throughput(bootstrap: str, topic: str, acks: str, records: int, size: int) -> float:
    """Records per second for ``records`` records of ``size`` bytes (send to last ack)."""
    producer = _producer(bootstrap, acks)
    payload = b"x" * size
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer.produce(topic, payload, on_delivery=on_delivery)  # connect and learn leaders
    producer.flush(60)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - start
    if left or failed:
        raise click.ClickException(f"{topic}: {left} unacknowledged, errors {failed[:3]}")
    return records / elapsed


def latency_p99_ms(bootstrap: str, topic: str, acks: str, rate: int, seconds: float,
                   size: int) -> float:
    """p99 of send-to-ack times at ``rate`` records/s for ``seconds``."""
    producer = _producer(bootstrap, acks)
    payload = b"y" * size
    latencies: list[float] = []

    sent_at: dict[int, float] = {}

    def on_ack(err: Any, msg: Any) -> None:
        if err is None:
            key = int(msg.key())
            latencies.append((time.perf_counter() - sent_at.pop(key)) * 1000)

    producer.produce(topic, payload)  # connect and learn the leaders first
    producer.flush(60)
    interval = 1.0 / rate
    start = time.perf_counter()
    count = int(rate * seconds)
    for i in range(count):
        due = start + i * interval
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.005))
        sent_at[i] = time.perf_counter()
        producer.produce(topic, payload, key=str(i).encode(), on_delivery=on_ack)
    producer.flush(120)
    if len(latencies) < count * 0.99:
        raise click.ClickException(f"{topic}: only {len(latencies)} of {count} acknowledged")
    latencies.sort()
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


def kill_to_first_ack_s(cluster: BenchCluster, topic: str) -> float:
    """kill -9 the leader of partition 0 under a steady acks=all stream; seconds from the
    kill to the first acknowledgement of a record sent after it. The node is restarted and
    back in the ISR before this returns."""
    from confluent_kafka import Producer
    state = partition_state(cluster.bootstrap, topic)
    leader = state[0][0]
    victim = next(n for n in cluster.nodes if n.broker_id == leader)
    others = ",".join(n.bootstrap for n in cluster.nodes if n is not victim)
    producer = Producer({"bootstrap.servers": others, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0,
                         "message.timeout.ms": 120_000, "retry.backoff.ms": 20,
                         "topic.metadata.refresh.interval.ms": 200})
    acks: list[tuple[float, float]] = []  # (sent, acknowledged) of each record
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acks.append((float(msg.value()), time.perf_counter()))

    def stream() -> None:
        while not stop.is_set():
            try:
                producer.produce(topic, repr(time.perf_counter()).encode(), partition=0,
                                 on_delivery=on_delivery)
            except BufferError:
                pass
            producer.poll(0.005)
        producer.flush(60)

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not acks and time.monotonic() < deadline:
            time.sleep(0.01)
        killed_at = time.perf_counter()
        victim.kill()

        def after_kill() -> list[float]:
            """Acknowledgements of records sent after the kill (not answers in flight)."""
            return [acked for sent, acked in list(acks) if sent > killed_at]

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not after_kill():
            time.sleep(0.005)
        after = after_kill()
        if not after:
            raise click.ClickException("no acknowledgement within 120 s of the leader's kill")
        elapsed = min(after) - killed_at
    finally:
        stop.set()
        thread.join(90)
    victim.start()
    wait_isr(cluster.bootstrap, topic, 1, 3)
    return elapsed


def peak_rss_mb(pid: int | None) -> float:
    """Peak resident set (VmHWM) of the process and its children (num.processes > 1), in
    MB; 0 when it cannot be read."""
    total = 0.0
    todo = [pid]
    try:
        while todo:
            current = todo.pop()
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    except (OSError, ValueError):
        pass
    return total


def fill_catch_up_log(cluster: BenchCluster, topic: str, megabytes: int) -> None:
    """Write ``megabytes`` of 16 KiB records to partition 0 (acks=1), all replicas in sync."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1",
                         "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none", "message.timeout.ms": 300_000})
    payload = b"c" * 16384
    for _ in range(megabytes * 64):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(300):
        raise click.ClickException("the catch-up log was not written")
    wait_isr(cluster.bootstrap, topic, 1, 3, timeout_s=600)


def catch_up_once(cluster: BenchCluster, topic: str, megabytes: int,
                  run: int) -> tuple[float, float]:
    """Wipe a follower's data dir (the followers in turn), restart it and time it from its
    start to its return to the ISR: (MB/s, the follower's peak RSS in MB)."""
    leader = partition_state(cluster.bootstrap, topic)[0][0]
    followers = [n for n in cluster.nodes if n.broker_id != leader]
    follower = followers[run % len(followers)]
    follower.stop()
    shutil.rmtree(follower.dir / "data", ignore_errors=True)
    started = time.perf_counter()
    follower.start()
    wait_isr(cluster.bootstrap, topic, 1, 3, timeout_s=3600)
    elapsed = time.perf_counter() - started
    assert follower.broker is not None
    return megabytes / elapsed, peak_rss_mb(follower.broker.pid)


def run_bench(template: str, rounds: int, records: int, size: int, partitions: int,
              rate: int, seconds: float, kills: int, session_timeout_ms: int,
              directory: str | None, catch_up_mb: int = 0,
              catch_up_runs: int = 1) -> dict[str, Any]:
    base = Path(directory or tempfile.mkdtemp(prefix="actorlog-bench-repl-"))
    base.mkdir(parents=True, exist_ok=True)
    cluster = BenchCluster(base, template, session_timeout_ms)
    results: dict[str, list[float]] = {"acks_all_rf3_records_per_s": [],
                                       "acks_1_rf1_records_per_s": [],
                                       "acks_all_rf3_p99_ms": [], "acks_1_rf1_p99_ms": [],
                                       "leader_kill_to_first_ack_s": [],
                                       "catch_up_mb_per_s": [],
                                       "catch_up_follower_peak_rss_mb": []}
    try:
        cluster.start()
        create_topic(cluster.bootstrap, "bench-rf3", partitions, 3)
        create_topic(cluster.bootstrap, "bench-rf1", partitions, 1)
        create_topic(cluster.bootstrap, "bench-failover", 1, 3)
        for _ in range(rounds):
            results["acks_1_rf1_records_per_s"].append(
                throughput(cluster.bootstrap, "bench-rf1", "1", records, size))
            results["acks_all_rf3_records_per_s"].append(
                throughput(cluster.bootstrap, "bench-rf3", "all", records, size))
            results["acks_1_rf1_p99_ms"].append(
                latency_p99_ms(cluster.bootstrap, "bench-rf1", "1", rate, seconds, size))
            results["acks_all_rf3_p99_ms"].append(
                latency_p99_ms(cluster.bootstrap, "bench-rf3", "all", rate, seconds, size))
        for _ in range(kills):
            results["leader_kill_to_first_ack_s"].append(
                kill_to_first_ack_s(cluster, "bench-failover"))
        if catch_up_mb:
            create_topic(cluster.bootstrap, "bench-catch-up", 1, 3)
            fill_catch_up_log(cluster, "bench-catch-up", catch_up_mb)
            for run in range(catch_up_runs):
                rate_mb_s, rss_mb = catch_up_once(cluster, "bench-catch-up", catch_up_mb, run)
                results["catch_up_mb_per_s"].append(rate_mb_s)
                results["catch_up_follower_peak_rss_mb"].append(rss_mb)
    finally:
        cluster.stop()
        if directory is None:
            shutil.rmtree(base, ignore_errors=True)
    summary = {name: min_median_max(values) for name, values in results.items() if values}
    ratios = {}
    if results["acks_all_rf3_records_per_s"]:
        ratios["acks_all_rf3_over_acks_1_rf1_throughput"] = (
            statistics.median(results["acks_all_rf3_records_per_s"])
            / statistics.median(results["acks_1_rf1_records_per_s"]))
        ratios["acks_all_rf3_over_acks_1_rf1_throughput_vs_kafka_2014"] = (
            ratios["acks_all_rf3_over_acks_1_rf1_throughput"] / KAFKA_2014_RATIO)
        ratios["acks_1_rf1_over_acks_all_rf3_p99"] = (
            statistics.median(results["acks_1_rf1_p99_ms"])
            / statistics.median(results["acks_all_rf3_p99_ms"]))
    return {
        "bench": BENCH_NAME,
        "config": {"rounds": rounds, "records": records, "record_bytes": size,
                   "partitions": partitions, "rate": rate, "seconds": seconds, "kills": kills,
                   "catch_up_mb": catch_up_mb, "catch_up_runs": catch_up_runs,
                   "zookeeper.session.timeout.ms": session_timeout_ms, "nodes": 3,
                   "host": socket.gethostname(), "kafka_2014_ratio": KAFKA_2014_RATIO},
        "results": summary,
        "raw": results,
        "ratios": ratios,
    }


def print_summary(report: dict[str, Any]) -> None:
    def fmt(spread: dict[str, float]) -> str:
        return f"{spread['min']:.1f} / {spread['median']:.1f} / {spread['max']:.1f}"

    click.echo("replication, three nodes on one host (min / median / max)")
    for name, spread in report["results"].items():
        click.echo(f"  {name:32} {fmt(spread)}")
    for name, value in report["ratios"].items():
        click.echo(f"  ratio {name:45} {value:.3f}")
    click.echo(f"  (Kafka 2014, three machines: acks=all RF=3 / acks=1 RF=1 = "
               f"{KAFKA_2014_RATIO:.2f})")


@click.command(name=BENCH_NAME)
@click.option("--broker-cmd", "template", default=ACTORLOG_TEMPLATE, show_default=True,
              help="command template of a node ({port}, {data_dir}, {config})")
@click.option("--rounds", type=click.IntRange(min=0, max=20), default=3, show_default=True,
              help="throughput and latency rounds (0: skip them)")
@click.option("--records", type=click.IntRange(min=100), default=50_000, show_default=True,
              help="records per throughput round")
@click.option("--record-bytes", "size", type=click.IntRange(min=1), default=100,
              show_default=True)
@click.option("--partitions", type=click.IntRange(min=1, max=64), default=6, show_default=True)
@click.option("--rate", type=click.IntRange(min=1), default=2000, show_default=True,
              help="records/s of the latency rounds")
@click.option("--seconds", type=click.FloatRange(min=0.5, max=600), default=10.0,
              show_default=True, help="length of a latency round")
@click.option("--kills", type=click.IntRange(min=0, max=50), default=10, show_default=True)
@click.option("--session-timeout-ms", type=click.IntRange(min=1000), default=6000,
              show_default=True, help="the nodes' zookeeper.session.timeout.ms")
@click.option("--catch-up-mb", type=click.IntRange(min=0), default=1024, show_default=True,
              help="log size a follower catches up from empty (0: skip)")
@click.option("--catch-up-runs", type=click.IntRange(min=1, max=20), default=3,
              show_default=True, help="catch-ups from empty on that log (followers in turn)")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="keep the cluster's files here (default: a temporary directory)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def command(template: str, rounds: int, records: int, size: int, partitions: int, rate: int,
            seconds: float, kills: int, session_timeout_ms: int, catch_up_mb: int,
            catch_up_runs: int, directory: str | None, json_path: str | None) -> None:
    """Replication cost: acks=all RF=3 over acks=1 RF=1, p99 at a fixed rate, failover."""
    report = run_bench(template, rounds, records, size, partitions, rate, seconds, kills,
                       session_timeout_ms, directory, catch_up_mb, catch_up_runs)
    print_summary(report)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
