"""One seed, one run: a cluster, its clients, a fault schedule, the invariants.

:func:`run_seed` builds a :class:`SimWorld` from the seed, starts the broker
nodes (SimCluster), an admin that creates the topics, idempotent producers, a
consumer and a consumer group (and with ``reassign``, a client moving a partition to
other replica sets: actors/sim/clients.py), then runs ``steps``
rounds: each waits a seeded while and strikes one seeded fault (a node crash
and its restart, a pause, a partition and its heal, a ZooKeeper session
expiry, a step of a node's wall clock, a link reset, a gateway dropping
frames, a slow disk stalling a node's partition shards, ZooKeeper down). Then
every fault is healed, the clients stop, the run settles (``settle_ms``, and
at least until a follower whose fetch was lost just before the heal has
asked again and caught up: replica.socket.timeout.ms after the heal, plus
``caught_up_ms``), and the final invariants are checked
(actors/sim/invariants.py). The control-plane
invariants are checked every ``check_every_ms`` of simulated time on the way.

Everything random comes from the seed, so the same seed gives the same run;
its trace (one line per delivery and per fault) is the proof.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import tempfile
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from actors.core.offsets_codec import OFFSETS_TOPIC, partition_for
from actors.runtime.directory import Directory, NodeEndpoint
from actors.sim.clients import (
    CLIENT_NODE,
    History,
    SimAdmin,
    SimConsumer,
    SimGroupMember,
    SimProducer,
    SimReassigner,
)
from actors.sim.cluster import GATEWAY_PORT, SimCluster
from actors.sim.disk import SimDisk
from actors.sim.invariants import Checker, Violation
from actors.sim.metadata import ZK
from actors.sim.plants import planted
from actors.sim.world import SimWorld
from actors.topology import broker_node_name

FAULTS = ("crash", "pause", "partition", "expire", "clock", "link", "gateway", "disk",
          "zookeeper")
# Struck only when asked for (``SimOptions.faults``): a failing disk, whose next fsync of a
# partition log fails (EIO) and loses what that file had not synced (actors/sim/disk.py)
MORE_FAULTS = ("eio",)
TOPICS = {"events": (3, 3), "audit": (2, 2)}   # name -> (partitions, replication factor)
GROUP = "sim-group"


@dataclass
class SimOptions:
    nodes: int = 3
    steps: int = 12
    faults: tuple[str, ...] = FAULTS
    plant: str | None = None
    keep_trace: bool = False
    warmup_ms: int = 3_000
    step_ms: tuple[int, int] = (500, 3_000)
    settle_ms: int = 20_000
    # A follower whose fetch request or answer was lost (a gateway dropping frames, a
    # partition, a link reset) asks again only after replica.socket.timeout.ms (30 s,
    # Kafka's default, kept): the run settles until that long after the heal plus this,
    # when that ends after settle_ms (so every live replica is back in its ISR at the end);
    # None: settle_ms alone, as runs settled before
    caught_up_ms: int | None = 5_000
    produce_after_heal_ms: int = 5_000
    check_every_ms: int = 200
    producers: int = 2
    # acks=all producers: their appends wait in purgatory for the ISR, and what they were
    # told is kept is what 'acknowledged records are readable' holds the cluster to
    acks_all_producers: int = 1
    group_members: int = 2   # members of one consumer group (besides the plain consumer)
    max_events: int = 2_000_000
    # moves of a partition to another replica set, one after the other, during the faults
    # (at times cancelled): the run ends with the replica set the answers said, every
    # acks=all record kept; the acks=all producers then write 120 batches (not 40), during
    # the moves too. 0: none
    reassign: int = 0
    logs: bool = False   # the actors' own log lines (thousands per run); off unless asked


@dataclass
class SeedResult:
    seed: int
    ok: bool
    invariant: str | None
    detail: str | None
    sim_ms: int
    wall_s: float
    events: int
    digest: str
    acks: int
    consumed: int
    step: int = 0               # faults struck when the run ended
    faults: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    involved: list[str] = field(default_factory=list)  # last trace lines of the nodes named
    stats: dict[str, Any] = field(default_factory=dict)

    def to_json(self, with_tail: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not with_tail:
            out.pop("tail")
        return out


class _Run:
    def __init__(self, seed: int, options: SimOptions, root: Path, disk: SimDisk,
                 trace_dir: Path | None = None) -> None:
        self.seed = seed
        self.options = options
        self.world = world = SimWorld(seed, keep_trace=options.keep_trace, trace_dir=trace_dir,
                                      root=root)
        self.rng = random.Random(world.kernel.rng.getrandbits(64))
        self.cluster = SimCluster(world, options.nodes, root, disk)
        self.history = History()
        self.topic_partitions = {t: n for t, (n, _rf) in TOPICS.items()}
        self.checker = Checker(self.cluster, self.history, self.topic_partitions)
        disk.on_fsync_failed = self._fsync_failed
        world.observers.append(self.checker.observe)
        self.history.ack_listeners.append(self.checker.note_ack)
        self.faults: list[str] = []
        self.crashed: set[int] = set()
        self.paused: set[int] = set()
        self.producers: list[SimProducer] = []
        self.consumer: SimConsumer | None = None
        self.members: list[SimGroupMember] = []

    # --------------------------------------------------------------- set up
    def start(self) -> None:
        world, cluster = self.world, self.cluster
        for broker_id in sorted(cluster.brokers):
            world.kernel.after_ms(self.rng.uniform(0, 40), cluster.start, broker_id)
        endpoints = {broker_node_name(b): NodeEndpoint(f"{broker_node_name(b)}.sim", GATEWAY_PORT)
                     for b in cluster.brokers}
        clients = world.add_node(CLIENT_NODE, directory=Directory(dict(endpoints)),
                                 endpoint=NodeEndpoint(f"{CLIENT_NODE}.sim", GATEWAY_PORT))
        assert clients.endpoint is not None
        cluster.extra_endpoints[CLIENT_NODE] = clients.endpoint  # brokers answer the clients
        brokers = sorted(cluster.brokers)

        def common() -> dict[str, Any]:
            return {"brokers": brokers, "rng": random.Random(self.rng.getrandbits(64)),
                    "history": self.history,
                    "lives": lambda b: cluster.brokers[b].lives}

        topics = {t: (n, min(rf, self.options.nodes)) for t, (n, rf) in TOPICS.items()}
        clients.spawn(SimAdmin, "admin", topics=topics, **common())
        for i in range(self.options.producers):
            actor = clients.spawn(SimProducer, f"producer-{i}", topics=self.topic_partitions,
                                  **common())
            self.producers.append(clients.actors[actor.name])  # type: ignore[arg-type]
        for i in range(self.options.acks_all_producers):
            actor = clients.spawn(SimProducer, f"producer-all-{i}", acks=-1,
                                  max_batches=120 if self.options.reassign else 40,
                                  topics=self.topic_partitions, **common())
            self.producers.append(clients.actors[actor.name])  # type: ignore[arg-type]
        consumer = clients.spawn(SimConsumer, "consumer", topics=self.topic_partitions,
                                 **common())
        self.consumer = clients.actors[consumer.name]  # type: ignore[assignment]
        for i in range(self.options.group_members):
            member = clients.spawn(SimGroupMember, f"member-{i}", group=GROUP,
                                   load_epoch=self._group_load_epoch,
                                   topics=self.topic_partitions, **common())
            self.members.append(clients.actors[member.name])  # type: ignore[arg-type]
        if self.options.reassign:
            # drawn here only: a run without it draws what it drew before
            start_ms = self.rng.uniform(self.options.warmup_ms, self.options.warmup_ms + 6_000)
            cancel = self.rng.uniform(0, 3_000) if self.rng.random() < 0.3 else None
            clients.spawn(SimReassigner, "reassigner", topics=self.topic_partitions,
                          start_ms=start_ms, cancel_after_ms=cancel,
                          moves=self.options.reassign, **common())
        world.kernel.after_ms(self.options.check_every_ms, self._check)

    def _group_load_epoch(self, broker_id: int) -> int:
        """The leader epoch of the group's __consumer_offsets partition that ``broker_id``
        leads now (-1 when it does not lead it)."""
        broker = self.cluster.brokers[broker_id]
        p = partition_for(GROUP, int(broker.config["offsets.topic.num.partitions"]))
        for shard in broker.shards():
            state = shard.partitions.get((OFFSETS_TOPIC, p))
            if state is not None and state.leader_id == broker_id:
                return int(state.leader_epoch)
        return -1

    def _check(self) -> None:
        self.checker.check()
        self.world.kernel.after_ms(self.options.check_every_ms, self._check)

    # ---------------------------------------------------------------- faults
    def strike(self) -> None:
        rng, cluster, world = self.rng, self.cluster, self.world
        kind = rng.choice(self.options.faults)
        up = [b for b in sorted(cluster.brokers)
              if cluster.up(b) and b not in self.paused and b not in self.crashed]
        if not up:
            return
        target = rng.choice(up)
        name = broker_node_name(target)
        if kind == "crash":
            if len(self.crashed) + len(self.paused) >= len(cluster.brokers) - 1:
                return
            self.crashed.add(target)
            self.checker.note_crash(target)
            cluster.crash(target)
            world.kernel.after_ms(rng.uniform(500, 8_000), self._restart, target)
            what = f"crash {name}"
        elif kind == "pause":
            if len(self.crashed) + len(self.paused) >= len(cluster.brokers) - 1:
                return
            self.paused.add(target)
            world.pause(name)
            world.kernel.after_ms(rng.uniform(200, 9_000), self._resume, target)
            what = f"pause {name}"
        elif kind == "partition":
            others = {broker_node_name(b) for b in cluster.brokers} - {name}
            how = rng.choice(["isolate", "brokers", "zookeeper", "clients"])
            if how == "isolate":
                world.net.partition({name}, others | {ZK, CLIENT_NODE})
            elif how == "brokers":
                world.net.partition({name}, others)
            elif how == "zookeeper":
                world.net.partition({name}, {ZK})
            else:
                world.net.partition({name}, {CLIENT_NODE})
            world.kernel.after_ms(rng.uniform(500, 8_000), self._heal)
            what = f"partition {name} ({how})"
        elif kind == "expire":
            session = cluster.zk.session_of(name)
            if session is None:
                return
            cluster.zk.expire(session)
            what = f"expire the session of {name}"
        elif kind == "clock":
            ms = rng.choice([-1, 1]) * rng.randint(1_000, 120_000)
            world.jump_wall_clock(name, ms)
            what = f"step the wall clock of {name} by {ms} ms"
        elif kind == "link":
            peer = rng.choice([broker_node_name(b) for b in cluster.brokers if b != target]
                              + [CLIENT_NODE])
            world.net.reset_link(name, peer)
            world.net.reset_link(peer, name)
            what = f"reset the links {name} <-> {peer}"
        elif kind == "zookeeper":
            if not cluster.zk.available:
                return
            down_ms = rng.uniform(200, 10_000)
            cluster.zk.outage(down_ms)
            what = f"ZooKeeper down for {down_ms:.0f} ms"
        elif kind == "eio":
            cluster.disk.fail_next_fsync(cluster.brokers[target].data_dir)
            what = f"{name}'s disk fails its next fsync of a partition log (EIO)"
        elif kind == "disk":
            stall_ms = rng.uniform(50, 3_000)
            world.stall(name, "shard-", stall_ms)
            what = f"{name}'s disk stalls its partition shards for {stall_ms:.0f} ms"
        else:
            ratio = rng.choice([0.1, 0.3, 0.6])
            world.net.drop_at_gateway(name, ratio)
            world.kernel.after_ms(rng.uniform(200, 3_000), world.net.drop_at_gateway, name, 0.0)
            what = f"{name}'s gateway drops {ratio:.0%} of frames"
        self.faults.append(f"{world.kernel.now_ns // 1_000_000} ms: {what}")
        world.note(f"fault: {what}")

    def _fsync_failed(self, data_dir: str, path: str) -> None:
        topic, _, partition = os.path.basename(os.path.dirname(path)).rpartition("-")
        for broker in self.cluster.brokers.values():
            if str(broker.data_dir.resolve()) == data_dir:
                self.checker.note_storage_failure(broker.broker_id, topic, int(partition))
                self.world.note(f"{broker.name}'s fsync of {topic}-{partition}'s log failed "
                                f"(EIO)")

    def _restart(self, broker_id: int) -> None:
        if broker_id in self.crashed:
            self.crashed.discard(broker_id)
            self.cluster.start(broker_id)

    def _resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            self.paused.discard(broker_id)
            self.world.resume(broker_node_name(broker_id))

    def _heal(self) -> None:
        self.world.net.heal()
        self.world.note("heal the network")

    def heal_all(self) -> None:
        world = self.world
        world.net.heal()
        if not self.cluster.zk.available:
            self.cluster.zk._back()
        for broker_id in sorted(self.cluster.brokers):
            world.net.drop_at_gateway(broker_node_name(broker_id), 0.0)
        for broker_id in sorted(self.paused):
            self._resume(broker_id)
        for broker_id in sorted(self.crashed):
            self._restart(broker_id)
        world.note("heal everything")

    def settle_ms(self) -> int:
        """How long the run settles once the clients stopped (produce_after_heal_ms after
        the heal): settle_ms, or until a fetch lost at the heal has timed out and the
        follower caught up, whichever is longer."""
        options = self.options
        if options.caught_up_ms is None:
            return options.settle_ms
        timeout_ms = max(int(b.config["replica.socket.timeout.ms"])
                         for b in self.cluster.brokers.values())
        return max(options.settle_ms, timeout_ms + options.caught_up_ms
                   - options.produce_after_heal_ms)

    def stop_clients(self) -> None:
        for producer in self.producers:
            producer.stopped = True
        if self.consumer is not None:
            self.consumer.stopped = True
        for member in self.members:
            member.stopped = True

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """Free what the nodes hold (descriptors of the logs, inboxes), as crashes do."""
        self.world.closed = True
        for broker_id in sorted(self.cluster.brokers):
            self.cluster.crash(broker_id)
        for node in list(self.world.nodes.values()):
            node.crash()


def run_seed(seed: int, options: SimOptions | None = None,
             trace_dir: Path | None = None) -> tuple[SeedResult, SimWorld]:
    """Run one seed; the result, and the world (its trace) for a report.

    With ``trace_dir`` every request chain is traced, in the trace format
    (``actorlog trace list/show DIR``); trace and span ids then come from the
    runtime's ``new_id``, whose random source (the process-wide ``random``) is seeded
    here for the run and given back as it was afterwards: the caller's own draws go on
    as if no run had been.
    """
    options = options or SimOptions()
    saved_random = None
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        saved_random = random.getstate()
        random.seed(seed)
    started = time.perf_counter()
    violation: Violation | None = None
    run: _Run | None = None
    root: Path | None = None
    if not options.logs:
        logger.disable("actors")
    try:
        with _signals_held():   # a signal held here arrives inside the try
            root = _run_root(seed)
        with planted(options.plant), seeded_uuid4(seed), \
                SimDisk(root, random.Random(seed ^ 0x5EED)) as disk:
            run = _Run(seed, options, root, disk, trace_dir)
            world = run.world
            try:
                run.start()
                world.run_for_ms(options.warmup_ms, options.max_events)
                for _ in range(options.steps):
                    world.run_for_ms(run.rng.uniform(*options.step_ms), options.max_events)
                    run.strike()
                run.heal_all()
                world.run_for_ms(options.produce_after_heal_ms, options.max_events)
                run.stop_clients()
                world.run_for_ms(run.settle_ms(), options.max_events)
                if world.kernel.steps >= options.max_events:
                    raise Violation("the run ends", f"over {options.max_events} events")
                run.checker.check_final()
                run.checker.check_live()
                run.checker.check_replicas_back()
                run.checker.check_reassignments()
            except Violation as exc:
                violation = exc
            finally:
                run.close()
    finally:
        if root is not None:
            with _signals_held():
                shutil.rmtree(root, ignore_errors=True)
        if not options.logs:
            logger.enable("actors")
        if saved_random is not None:
            random.setstate(saved_random)
    assert run is not None
    world = run.world
    history = run.history
    result = SeedResult(
        seed=seed, ok=violation is None,
        invariant=violation.invariant if violation else None,
        detail=violation.detail if violation else None,
        sim_ms=world.kernel.now_ns // 1_000_000,
        wall_s=round(time.perf_counter() - started, 3),
        events=world.kernel.steps,
        digest=f"{world.digest:08x}",
        acks=sum(len(a.values) for a in history.acks),
        consumed=sum(len(v) for v in history.consumed.values()),
        step=len(run.faults),
        faults=run.faults,
        tail=world.tail(),
        involved=_involved(world, violation.detail) if violation else [],
        stats={"net": asdict(world.net.stats), "disk": asdict(disk.stats),
               "zk_sessions_expired": run.cluster.zk.expired,
               "produce_errors": dict(sorted(history.produce_errors.items())),
               "group_joins": history.group_rebalances,
               "group_commits": sum(len(v) for v in history.committed.values()),
               "checks": run.checker.checks,
               "acks_dated_at_crash": run.checker.acks_dated_at_crash,
               **run.checker.counted,
               "delayed_operations": len(run.checker.parked),
               **({"reassignments": [m.steps for m in history.reassignments]}
                  if history.reassignments else {})},
    )
    return result, world


def _sim_tmp() -> Path:
    """Where runs keep their logs: ``ACTORLOG_SIM_DIR`` when set, else a memory file
    system (``/dev/shm``) when there is one, else the temp dir. Only durability is
    simulated (SimDisk); the bytes still go through real files, and on a disk the
    index flushes (msync) and checkpoint writes wait for it: a seed took twice its CPU
    time in wall time on a busy disk."""
    chosen = os.environ.get("ACTORLOG_SIM_DIR")
    if chosen:
        return Path(chosen)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait until the block ends. A pool worker leaves at SIGTERM by
    raising SystemExit wherever it is (actors/sim/pool.py); raised between the run's
    mkdir and its ``try``, or inside the rmtree, it left the run's directory behind (a
    worker stopped just as its seed ended, 1 run in ~20 of four workers)."""
    held = {signal.SIGTERM, signal.SIGINT}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _run_root(seed: int) -> Path:
    """The run's own directory, at a path that depends on the seed alone (paths travel
    in messages, so a random name would change the trace): the first free
    ``<sim tmp>/actorlog-sim-<uid>/seed-<seed>-<n>``; two runs of one seed at once differ."""
    # resolved: the world takes this path out of the frames it sums, and a relative or
    # symlinked ACTORLOG_SIM_DIR must name it as the data directories in the frames do
    base = _sim_tmp().resolve() / f"actorlog-sim-{os.getuid()}"
    base.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        root = base / f"seed-{seed}-{n}"
        try:
            root.mkdir()
        except FileExistsError:
            n += 1
            continue
        return root


@contextmanager
def seeded_uuid4(seed: int) -> Iterator[None]:
    """uuid.uuid4 drawn from the seed for the run: the entropy the code under test takes
    (a group member's id is its client id and a uuid, as Kafka's) is part of the OS
    boundary the simulation replaces."""
    rng = random.Random(seed ^ 0x0001D)
    real = uuid.uuid4

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    uuid.uuid4 = uuid4
    try:
        yield
    finally:
        uuid.uuid4 = real


def _involved(world: SimWorld, detail: str, lines: int = 40) -> list[str]:
    """The last trace lines about the nodes a violation names (brokers by id or name)."""
    names = set(re.findall(r"node-\d+", detail))
    names |= {broker_node_name(int(b)) for b in re.findall(r"broker (\d+)", detail)}
    for first, second in re.findall(r"brokers (\d+) and (\d+)", detail):
        names |= {broker_node_name(int(first)), broker_node_name(int(second))}
    if not names:
        return []
    found = [line for line in world.tail(len(world.trace))
             if any(f"@{n} " in line or line.endswith(f"@{n}") or f" {n}" in line for n in names)]
    return found[-lines:]


def trace_bytes(world: SimWorld) -> bytes:
    return ("\n".join(world.trace) + "\n").encode()


def crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"
