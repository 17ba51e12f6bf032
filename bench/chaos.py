"""`actorlog bench chaos`: faults at seeded random times while clients produce and consume.

The cluster of a spec (brought up here unless it already runs) gets a topic
with replicas on up to three nodes; idempotent ``acks=all`` producers
(confluent-kafka) send numbered records at a bounded rate, a consumer group
reads and commits as it goes, and a seeded schedule injects one fault at a
time on a random node (SIGKILL then a restart, SIGSTOP then SIGCONT, a cut
link then healed, netem loss/delay then cleared, or ``killproc``: SIGKILL to one
process 1.. of a node of num.processes >= 2, healed by the node's own supervisor,
which restarts it: the bench waits until it serves again, and reports a supervisor
that gave up instead, then starts the node again). At the end every fault is
undone, the producers flush, the group catches up, a fresh consumer reads
every partition from its start, and :mod:`bench.chaos_check` checks every
acknowledged record. Every loop here is bounded in time, and the producers
in count too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.chaos_check import CheckResult, Fault, Sent, Stored, check

BENCH_NAME = "chaos"
FAULT_KINDS = ("kill", "pause", "isolate", "netem", "killproc")
NETWORK_FAULTS = ("isolate", "netem")
# killproc: from the kill until the node's supervisor has the process serving again (its
# readiness deadline is 60 s, actors.processes.READY_TIMEOUT_S) and the node answers
PROCESS_RESTART_TIMEOUT_S = 120.0
# a node whose supervisor gave up stops on its own: so long for it to be gone
NODE_STOP_TIMEOUT_S = 60.0


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule: ``kind`` on ``node`` at ``at_s`` after the start, for
    ``hold_s`` seconds. ``pick`` (killproc): which process 1.. of the node, as ``pick``
    modulo their count."""

    kind: str
    node: int
    at_s: float
    hold_s: float
    pick: int = 0


def plan_faults(seed: int, kinds: list[str], nodes: dict[str, list[int]], duration_s: float,
                hold_s: tuple[float, float] = (3.0, 8.0),
                gap_s: tuple[float, float] = (4.0, 10.0)) -> list[Planned]:
    """A seeded schedule of faults, one at a time, all healed before ``duration_s``.

    ``nodes`` maps a fault kind to the nodes it may hit (network faults only
    hit nodes on netns hosts). The first fault comes after one gap, so the
    clients run fault-free first; the count is bounded by the duration.
    """
    rng = random.Random(seed)
    plan: list[Planned] = []
    t = rng.uniform(*gap_s)
    usable = [k for k in kinds if nodes.get(k)]
    while usable and len(plan) < 10_000:
        hold = rng.uniform(*hold_s)
        if t + hold > duration_s - 1.0:
            break
        kind = rng.choice(usable)
        node = rng.choice(nodes[kind])
        # drawn for killproc alone: the other kinds' schedules of a seed stay as they were
        pick = rng.randrange(1 << 16) if kind == "killproc" else 0
        plan.append(Planned(kind, node, round(t, 3), round(hold, 3), pick))
        t += hold + rng.uniform(*gap_s)
    return plan


# ------------------------------------------------------------------ clients
@dataclass
class _Record:
    producer: int
    seq: int
    partition: int
    send_ms: int
    ack_ms: int | None = None
    offset: int | None = None
    error: str | None = None


class ProducerLoop(threading.Thread):
    """Numbered records round robin over the partitions, at most ``rate`` a second.

    A producer instance whose idempotence broke (a fatal error) is replaced by a
    new one with the next instance number: each instance's sequence numbers are
    a stream of their own for the order check.
    """

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, rate: float,
                 duration_s: float, max_records: int) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.index = index
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.duration_s = duration_s
        self.max_records = max_records
        self.records: list[_Record] = []
        self.instances = 0
        self.fatal: list[str] = []
        self.stop_event = threading.Event()

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        self.instances += 1
        return Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": 20000, "request.timeout.ms": 5000, "linger.ms": 5,
            "socket.timeout.ms": 5000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 1000,
            "client.id": f"chaos-{self.index}", "log_level": 2})

    def _callback(self, record: _Record) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            record.ack_ms = now_ms()
            if err is not None:
                record.error = str(err)
                if err.fatal():
                    self.fatal.append(str(err))
            else:
                record.offset = msg.offset()
                record.partition = msg.partition()
        return delivered

    def run(self) -> None:
        producer = self._producer()
        instance = self.index * 1000 + self.instances
        start = time.monotonic()
        seqs: dict[int, int] = {}
        sent = 0
        try:
            while sent < self.max_records and not self.stop_event.is_set():
                elapsed = time.monotonic() - start
                if elapsed >= self.duration_s:
                    break
                if self.fatal:  # this instance's idempotent session is broken: a new one
                    producer.flush(10)
                    self.fatal.clear()
                    producer = self._producer()
                    instance = self.index * 1000 + self.instances
                seq = seqs.get(instance, 0)
                seqs[instance] = seq + 1
                partition = sent % self.partitions
                record = _Record(instance, seq, partition, now_ms())
                self._send(producer, record)
                sent += 1
                producer.poll(0)
                # pace to the rate: poll() returns early once it served a callback
                while (pause := sent / self.rate - (time.monotonic() - start)) > 0:
                    producer.poll(min(pause, 0.1))
        finally:
            producer.flush(30)

    def _send(self, producer: Any, record: _Record) -> None:
        for _ in range(100):  # a full local queue: serve callbacks, then try again (bounded)
            try:
                producer.produce(self.topic, value=f"{record.producer}:{record.seq}".encode(),
                                 partition=record.partition,
                                 on_delivery=self._callback(record))
                self.records.append(record)
                return
            except BufferError:
                producer.poll(0.1)
        record.error = "local queue full"
        self.records.append(record)


class GroupConsumer(threading.Thread):
    """One member of a consumer group: reads, records what it got, commits every 200 ms."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(name="chaos-consumer", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.delivered: list[Stored] = []
        self.commit_errors = 0
        self.committed: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.ends: dict[int, int] | None = None  # set: stop once the group has read to these
        self.positions: dict[int, int] = {}

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 10000, "socket.timeout.ms": 5000,
                             "topic.metadata.refresh.interval.ms": 1000, "log_level": 2})
        consumer.subscribe([self.topic])
        last_commit = time.monotonic()
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
                    stored = parse_value(partition, offset, msg.value())
                    if stored is not None:
                        self.delivered.append(stored)
                    self.positions[partition] = offset + 1
                if time.monotonic() - last_commit > 0.2 and self.positions:
                    try:
                        consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                                 for p, o in self.positions.items()],
                                        asynchronous=False)
                    except KafkaException:
                        self.commit_errors += 1
                    last_commit = time.monotonic()
                ends = self.ends
                if ends is not None and all(self.positions.get(p, 0) >= e
                                            for p, e in ends.items()):
                    break
            try:
                if self.positions:
                    consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                             for p, o in self.positions.items()],
                                    asynchronous=False)
            except KafkaException:
                self.commit_errors += 1
            try:
                found = consumer.committed([TopicPartition(self.topic, p)
                                            for p in sorted(self.positions)], timeout=10)
                self.committed = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
            except KafkaException:
                self.committed = {}
        finally:
            consumer.close()


def parse_value(partition: int, offset: int, value: bytes | None) -> Stored | None:
    try:
        producer, seq = (value or b"").decode().split(":")
        return Stored(partition, offset, int(producer), int(seq))
    except ValueError:
        return None


def log_ends(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> dict[int, int]:
    """Each partition's high watermark (retried until every partition answers, bounded)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-ends-{uuid.uuid4()}",
                         "enable.auto.commit": False, "log_level": 2})
    ends: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(ends) < partitions and time.monotonic() < deadline:
            for p in range(partitions):
                if p in ends:
                    continue
                try:
                    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                                timeout=5)
                    ends[p] = high
                except KafkaException:
                    time.sleep(0.5)
    finally:
        consumer.close()
    if len(ends) < partitions:
        raise click.ClickException(f"partitions {sorted(set(range(partitions)) - set(ends))} "
                                   f"of {topic} gave no log end within {timeout_s:g} s")
    return ends


def read_all(bootstrap: str, topic: str, ends: dict[int, int], timeout_s: float) -> list[Stored]:
    """Every record of every partition from its start to ``ends`` (a fresh, group-less read)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "log_level": 2})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    found: list[Stored] = []
    done = {p for p, e in ends.items() if e == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                continue  # end of partition or a transient error: its offsets say more
            p, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            stored = parse_value(p, offset, msg.value())
            if stored is not None:
                found.append(stored)
            if offset + 1 >= ends[p]:
                done.add(p)
    finally:
        consumer.close()
    if len(done) < len(ends):
        raise click.ClickException(f"the final read did not reach the end of partitions "
                                   f"{sorted(set(ends) - done)} within {timeout_s:g} s")
    return found


# ------------------------------------------------------------------- faults
@dataclass
class Injected:
    kind: str
    node: int
    at_ms: int
    healed_ms: int | None = None
    led: tuple[int, ...] = ()
    detail: str = ""
    # killproc: the process of the node killed (1..), its pid, and how it ended: restarted
    # (the new pid, ms from the kill until it served) or the supervisor gave up (its line)
    process: int = 0
    pid: int = 0
    restarted_pid: int | None = None
    restart_ms: int | None = None
    gave_up: str = ""


@dataclass
class Settings:
    spec_path: str
    duration_s: float
    faults: list[str]
    seed: int
    partitions: int = 3
    replication: int = 3
    producers: int = 2
    rate: float = 200.0
    topic: str = ""
    keep_up: bool = False
    settle_s: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)


class ChaosRun:
    """One run against one spec's cluster (see the module docstring)."""

    def __init__(self, s: Settings, say: Any = print) -> None:
        from actors.hosts.cluster import Cluster
        from actors.hosts.spec import load_spec

        self.s = s
        self.say = say
        self.spec = load_spec(s.spec_path)
        self.cluster = Cluster(self.spec, say=lambda line: say(f"  {line}"), probe_timeout_s=2.0,
                               stop_timeout_s=30.0)
        self.injected: list[Injected] = []
        self.brought_up = False
        self.netem_shape: Any = None
        self.topologies: dict[tuple[int, int], Any] = {}  # (node, processes) -> Topology

    def close(self) -> None:
        self.cluster.close()

    def targets(self) -> dict[str, list[int]]:
        netns_nodes = [i for i in self.cluster.plans if self.spec.host_of(i).via == "netns"]
        # killproc: nodes of more than one process (0 is one per CPU: counted once up)
        multi = [i for i, plan in sorted(self.cluster.plans.items())
                 if int(plan.config.get("num.processes", 0)) != 1]
        return {k: (netns_nodes if k in NETWORK_FAULTS else multi if k == "killproc"
                    else sorted(self.cluster.plans)) for k in self.s.faults}

    def check_processes(self, nodes: list[int]) -> None:
        """killproc's nodes each run a process 1.. (num.processes >= 2) once up."""
        from actors.hosts.cluster import ClusterError

        for i in nodes:
            try:
                self.cluster.wait_processes_serving(i, 60)
            except ClusterError as exc:
                raise click.ClickException(f"killproc needs nodes of num.processes >= 2, "
                                           f"each process serving: {exc}") from None

    def process_of(self, node: int, partition: int, processes: int) -> int:
        """Which of the node's ``processes`` runs the bench topic's ``partition``'s shard."""
        from actors.topology import spread_index

        topo = self.topology(node, processes)
        return topo.process_index(spread_index(self.s.topic, partition, topo.num_shards))

    def topology(self, node: int, processes: int) -> Any:
        """The Topology of ``node``'s plan, as if it ran ``processes`` processes (built once
        for each: a killproc fault asks for every partition)."""
        from actors.runtime.config import Config
        from actors.topology import Topology

        topo = self.topologies.get((node, processes))
        if topo is None:
            topo = Topology.from_config("chaos", Config(dict(self.cluster.plans[node].config)))
            topo = dataclasses.replace(
                topo, process_nodes=tuple(f"p{k}" for k in range(processes)))
            self.topologies[(node, processes)] = topo
        return topo

    def ensure_up(self) -> None:
        found = self.cluster.status(groups=False)
        if all(n["alive"] and n["answers"] and not n["paused"] for n in found["nodes"]):
            self.say(f"using the running cluster {self.spec.name} "
                     f"({found['bootstrap_servers']})")
            return
        self.say(f"bringing cluster {self.spec.name} up")
        self.cluster.up()
        self.brought_up = True

    def create_topic(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError, TopicAlreadyExistsError

        rf = min(self.s.replication, len(self.cluster.plans))
        deadline = time.monotonic() + 60
        while True:  # a node that just started may not know every broker yet: try again
            try:
                admin = KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers(),
                                         client_id="actorlog-chaos", request_timeout_ms=15000)
                try:
                    admin.create_topics([NewTopic(self.s.topic, self.s.partitions, rf)])
                finally:
                    admin.close()
                break
            except TopicAlreadyExistsError:
                break
            except KafkaError as exc:
                if time.monotonic() > deadline:
                    raise click.ClickException(f"topic {self.s.topic} could not be created "
                                               f"within 60 s: {exc!r}") from None
                time.sleep(1.0)
        while True:
            led = self.leaders()
            if len(led) == self.s.partitions and min(led.values()) >= 0:
                break
            if time.monotonic() > deadline:
                raise click.ClickException(f"topic {self.s.topic} got no leader for every "
                                           f"partition within 60 s: {led}")
            time.sleep(0.5)
        self.say(f"topic {self.s.topic}: {self.s.partitions} partitions, replication factor "
                 f"{rf}, leaders {dict(sorted(led.items()))}")

    def leaders(self, exclude: int | None = None) -> dict[int, int]:
        """partition -> leader of the bench topic, from the first node that answers."""
        from actors.hosts.probe import ProbeError, metadata

        for node_id, plan in self.cluster.plans.items():
            if node_id == exclude:
                continue
            try:
                found = metadata(plan.client_address, 2.0)
            except ProbeError:
                continue
            if found.controller_id < 0:
                # not updated by the controller yet: it names itself alone, no controller,
                # and the topic unknown (a node just restarted)
                continue
            return {p.partition: p.leader for p in found.partitions if p.topic == self.s.topic}
        return {}

    def led_by(self, node: int) -> tuple[int, ...]:
        """The bench topic's partitions ``node`` leads, as the other nodes see it."""
        return tuple(sorted(p for p, leader in self.leaders(exclude=node).items()
                            if leader == node))

    def inject(self, planned: Planned) -> Injected:
        from actors.hosts.faults import FaultError, Netem

        fault = Injected(planned.kind, planned.node, now_ms())
        if planned.kind == "killproc":
            # a node that a kill's heal saw answer may still be starting (process 0 answers
            # before its processes 1.. are ready): the process killed is one that serves,
            # watched by the supervisor (the restart measured is not part of a start)
            serving = self.cluster.wait_processes_serving(planned.node,
                                                          PROCESS_RESTART_TIMEOUT_S)
            others = sorted(serving)
            fault.process = others[planned.pick % len(others)]
            # the partitions it leads now (that wait may have taken long enough for the
            # leaders to move), those whose shard runs in that process (the others it serves)
            fault.led = tuple(p for p in self.led_by(planned.node)
                              if self.process_of(planned.node, p, len(others) + 1)
                              == fault.process)
            fault.detail = f"process {fault.process}"
            fault.at_ms = now_ms()
            fault.pid = self.cluster.kill_process(planned.node, fault.process)
        else:
            fault.led = self.led_by(planned.node)
        if planned.kind == "kill":
            self.cluster.kill(planned.node)
        elif planned.kind == "pause":
            self.cluster.pause(planned.node)
        elif planned.kind == "isolate":
            self.cluster.isolate(planned.node)
        elif planned.kind == "netem":
            shape = self.netem_shape or Netem(delay_ms=200, loss_pct=30.0)
            try:
                self.cluster.netem(planned.node, shape)
            except FaultError:  # no netem qdisc here: loss alone, through nftables
                shape = Netem(loss_pct=30.0)
                self.cluster.netem(planned.node, shape)
            self.netem_shape = shape
            fault.detail = shape.describe()
        # from when the fault is in effect: a record sent while the command still ran may
        # have been acknowledged by the node before it went
        fault.at_ms = now_ms()
        self.injected.append(fault)
        return fault

    def heal(self, fault: Injected) -> None:
        from actors.hosts.cluster import ClusterError, SupervisorGaveUp
        from actors.hosts.faults import Netem
        from actors.hosts.runner import HostError

        if fault.kind == "killproc":
            try:
                fault.restarted_pid = self.cluster.wait_process_restarted(
                    fault.node, fault.process, fault.pid, PROCESS_RESTART_TIMEOUT_S)
                fault.restart_ms = now_ms() - fault.at_ms
            except SupervisorGaveUp as exc:
                fault.gave_up = exc.reason
                self.say(f"SUPERVISOR GAVE UP: {exc}; starting node {fault.node} again")
                # seen at the deadline, the node may still be shutting down: once it is
                # gone (killed if its stop outlasts the bound), else start_node leaves it
                if not self.cluster.wait_stopped(fault.node, NODE_STOP_TIMEOUT_S):
                    with contextlib.suppress(HostError):  # (it may have gone just now)
                        self.cluster.kill(fault.node)
                    if not self.cluster.wait_stopped(fault.node, 10.0):
                        raise ClusterError(f"node {fault.node} still runs "
                                           f"{NODE_STOP_TIMEOUT_S:g} s after its supervisor "
                                           "gave up, and 10 s after a SIGKILL") from None
                self.cluster.start_node(fault.node, [])
                self.cluster.wait_answering(fault.node, 90)
        elif fault.kind == "kill":
            self.cluster.start_node(fault.node, [])
            self.cluster.wait_answering(fault.node, 90)
        elif fault.kind == "pause":
            self.cluster.resume(fault.node)
        elif fault.kind == "isolate":
            self.cluster.heal(fault.node)
        elif fault.kind == "netem":
            self.cluster.netem(fault.node, Netem())
        fault.healed_ms = now_ms()

    def run(self) -> tuple[CheckResult, dict[str, Any]]:
        s = self.s
        targets = self.targets()
        plan = plan_faults(s.seed, s.faults, targets, s.duration_s)
        missing = [k for k in s.faults if not targets[k]]
        if missing:
            raise click.ClickException(
                f"faults {', '.join(missing)} need "
                + ("nodes of num.processes >= 2" if missing == ["killproc"] else
                   "nodes on netns test hosts (killproc: of num.processes >= 2)")
                + f"; {s.spec_path} has none")
        self.ensure_up()
        if "killproc" in targets:
            self.check_processes(targets["killproc"])
        self.create_topic()
        bootstrap = self.cluster.bootstrap_servers()
        group = f"chaos-{s.seed}-{uuid.uuid4().hex[:6]}"
        consumer = GroupConsumer(bootstrap, s.topic, group)
        producers = [ProducerLoop(i + 1, bootstrap, s.topic, s.partitions, s.rate,
                                  s.duration_s, int(s.rate * s.duration_s) + 1)
                     for i in range(s.producers)]
        self.say(f"{len(plan)} fault(s) planned over {s.duration_s:g} s (seed {s.seed}): "
                 + ", ".join(f"{p.kind} {p.node}@{p.at_s:g}s" for p in plan))
        start_ms = now_ms()
        start = time.monotonic()
        consumer.start()
        for p in producers:
            p.start()

        def stop_clients() -> None:  # interrupted or a fault failed: at once
            for p in producers:
                p.stop_event.set()
            consumer.stop_event.set()

        self.run_schedule(plan, start, stop_clients)
        try:
            self._sleep_until(start + s.duration_s)
        except BaseException:
            stop_clients()
            raise
        for p in producers:
            p.join(s.duration_s + 60)
        end_ms = now_ms()
        self.say("producers done; waiting for every partition to have a leader")
        self._wait_leaders(s.settle_s)
        ends = log_ends(bootstrap, s.topic, s.partitions, s.settle_s)
        consumer.ends = ends
        consumer.join(s.settle_s)
        if consumer.is_alive():
            consumer.stop_event.set()
            consumer.join(30)
        final = read_all(bootstrap, s.topic, ends, s.settle_s)
        sent = [Sent(r.producer, r.seq, r.partition, r.send_ms, r.ack_ms, r.offset, r.error)
                for p in producers for r in p.records]
        faults = [Fault(f.kind, f.node, f.at_ms, f.healed_ms, f.led) for f in self.injected]
        killed = [f for f in self.injected if f.kind == "killproc"]
        # sent, then neither acknowledged nor failed: no delivery report by the producer's end
        unanswered = [r for p in producers for r in p.records
                      if r.ack_ms is None and r.error is None]
        result = check(sent, final, consumer.delivered, consumer.committed, faults,
                       start_ms, end_ms)
        extra = {"faults_injected": [{**asdict(f), "at_ms": f.at_ms - start_ms,
                                      "healed_ms": None if f.healed_ms is None
                                      else f.healed_ms - start_ms} for f in self.injected],
                 "producer_instances": sum(p.instances for p in producers),
                 "commit_errors": consumer.commit_errors,
                 "delivered_to_group": len(consumer.delivered),
                 "log_end_offsets": ends,
                 "unanswered": len(unanswered),
                 # acknowledged, the delivery report without an offset (see Sent): checked
                 # for loss, not for a move
                 "acked_without_offset": sum(1 for x in sent if x.acked and x.offset is None),
                 "unanswered_examples": [asdict(r) for r in unanswered[:5]],
                 "killproc": {"restarted": sum(1 for f in killed if f.restarted_pid),
                              "gave_up": [f"node {f.node}: {f.gave_up}" for f in killed
                                          if f.gave_up],
                              "restart_ms": [f.restart_ms for f in killed
                                             if f.restart_ms is not None]}}
        return result, extra

    def run_schedule(self, plan: list[Planned], start: float,
                     stop_clients: Callable[[], None]) -> None:
        """Each planned fault at its time from ``start`` (monotonic), healed after its hold.
        On an error or an interrupt: ``stop_clients``, then the fault in effect healed, but
        not a killproc whose heal failed: its heal is a wait for the supervisor's restart
        (up to PROCESS_RESTART_TIMEOUT_S), and another would wait as long again."""
        active: Injected | None = None
        try:
            for planned in plan:
                self._sleep_until(start + planned.at_s)
                fault = self.inject(planned)
                active = fault if fault.kind != "killproc" else None
                self.say(f"{time.monotonic() - start:7.1f}s {planned.kind} node {planned.node}"
                         + (f" ({fault.detail})" if fault.detail else "")
                         + f"; it led partitions {list(fault.led)}")
                if planned.kind != "killproc":
                    self._sleep_until(start + planned.at_s + planned.hold_s)
                # killproc: its supervisor heals it, watched at once (its hold is a quiet gap)
                self.heal(fault)
                active = None
                self.say(f"{time.monotonic() - start:7.1f}s healed node {planned.node}"
                         + (f" (process {fault.process}: {describe_restart(fault)})"
                            if fault.kind == "killproc" else ""))
                self._sleep_until(start + planned.at_s + planned.hold_s)
        except BaseException:
            stop_clients()
            if active is not None:
                self.heal(active)
            raise

    def _wait_leaders(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            led = self.leaders()
            if len(led) == self.s.partitions and min(led.values()) >= 0:
                return
            time.sleep(0.5)

    @staticmethod
    def _sleep_until(t: float) -> None:
        while True:
            left = t - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.5))

    def finish(self) -> None:
        if self.brought_up and not self.s.keep_up:
            self.say(f"taking cluster {self.spec.name} down")
            self.cluster.down()


def describe_restart(fault: Injected) -> str:
    if fault.gave_up:
        return f"its supervisor GAVE UP: {fault.gave_up}"
    return f"restarted by its supervisor as pid {fault.restarted_pid}, serving " \
           f"{fault.restart_ms} ms after the kill"


def killproc_line(extra: dict[str, Any]) -> list[str]:
    """The summary's line for killproc faults (none when there were none)."""
    k = extra.get("killproc") or {}
    if not (k.get("restarted") or k.get("gave_up")):
        return []
    ms = sorted(k["restart_ms"])
    line = (f"killproc: {k['restarted']} process(es) restarted by their supervisor and "
            f"serving again" + (f" (ms from the kill: min {ms[0]}, median "
                                f"{ms[len(ms) // 2]}, max {ms[-1]})" if ms else ""))
    if k["gave_up"]:
        line += f"; SUPERVISOR GAVE UP {len(k['gave_up'])} time(s): {k['gave_up'][0]}"
    return [line]


def summary_lines(result: CheckResult, seed: int,
                  extra: dict[str, Any] | None = None) -> list[str]:
    fo = result.failover_summary()
    return [*killproc_line(extra or {}),
        f"sent {result.sent}, acked {result.acked}, failed {result.failed}, read back "
        f"{result.read}",
        f"lost {result.lost}, duplicated {result.duplicated}, reordered {result.reordered}, "
        f"moved {result.moved}, skipped by commits {result.skipped}",
        f"availability {result.availability:.1%} of seconds with an acknowledged produce",
        f"failover ms: min {fo['min']}, median {fo['median']}, max {fo['max']} over "
        f"{fo['count']} kill/pause/isolate/killproc fault(s) of a leader; "
        f"{result.unrecovered_faults} unrecovered",
        ("OK: every acknowledged record is there once, in order" if result.ok else
         "NOT OK: " + "; ".join(f"{k}: {v[0]}" for k, v in result.examples.items()
                                if k != "unrecovered")),
        f"seed {seed}",
    ]


@click.command(name=BENCH_NAME)
@click.option("--spec", "spec_path", required=True, metavar="FILE", help="the cluster spec")
@click.option("--duration", "duration_s", type=click.FloatRange(min=5, max=24 * 3600),
              default=600, show_default=True, help="seconds of load and faults")
@click.option("--faults", default="kill,pause,isolate,netem", show_default=True,
              help="comma-separated: kill, pause, isolate, netem, killproc (one process 1.. "
                   "of a node of num.processes >= 2)")
@click.option("--seed", type=int, default=None, help="the fault schedule's seed (default: random)")
@click.option("--partitions", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option("--replication-factor", "replication", type=click.IntRange(1, 3), default=3,
              show_default=True)
@click.option("--producers", type=click.IntRange(1, 8), default=2, show_default=True)
@click.option("--rate", type=click.FloatRange(min=1, max=5000), default=200, show_default=True,
              help="records a second per producer (bounded)")
@click.option("--keep-up", is_flag=True, help="leave a cluster this command brought up running")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def command(spec_path: str, duration_s: float, faults: str, seed: int | None, partitions: int,
            replication: int, producers: int, rate: float, keep_up: bool,
            json_path: str | None) -> None:
    """Faults at seeded random times under acks=all load; check every acknowledged record."""
    import logging

    from actors.hosts.spec import SpecError

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    kinds = [k.strip() for k in faults.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown or not kinds:
        raise click.BadParameter(f"{', '.join(unknown) or 'nothing'}: the faults are "
                                 f"{', '.join(FAULT_KINDS)}", param_hint="--faults")
    seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
    s = Settings(spec_path, duration_s, kinds, seed, partitions, replication, producers, rate,
                 topic=f"chaos-{seed}-{uuid.uuid4().hex[:6]}", keep_up=keep_up)
    try:
        run = ChaosRun(s, say=lambda line: click.echo(line))
    except SpecError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        try:
            result, extra = run.run()
        finally:
            run.finish()
    except click.ClickException:
        raise
    except Exception as exc:  # a failed step of a cluster command: one line
        raise click.ClickException(f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    finally:
        run.close()
    for line in summary_lines(result, seed, extra):
        click.echo(line)
    if json_path:
        config = {"spec": spec_path, "duration_s": duration_s, "faults": kinds, "seed": seed,
                  "partitions": partitions, "replication_factor": replication,
                  "producers": producers, "rate_per_producer": rate, "topic": s.topic}
        results = {**result.to_json(seed), **extra}
        doc = {"bench": BENCH_NAME, "config": config, "results": results, "ratios": {}}
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
