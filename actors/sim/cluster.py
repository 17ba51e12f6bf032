"""A cluster of broker nodes in the simulation, wired as the Broker wires a cluster node.

Each node gets the actors ``Broker._start_locked`` spawns in cluster mode
(LogManager, Timer, PartitionShards, PurgatoryShards, ReplicaManager,
ClusterController, LogCleaner, GroupCoordinators, RequestHandlers), built from the same
Config keys, on a SimNode; a SimProcessor stands where the Acceptor and the
Processors would be. The node's ZooKeeper client is a SimMetadataStore on
the run's SimZooKeeper, and its log dir is a directory of the run on the
SimDisk. Registration in ``/brokers/ids`` and ``StartController`` follow
``Broker._register``; a restarted node whose previous session still holds
its registration tries again until the session expired, as the Broker waits
for a stale registration.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.apis.base import HandlerContext
from actors.broker import read_or_create_meta
from actors.cluster_controller import ClusterController
from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.core.log_dir import LogDir
from actors.core.metadata_cache import MetadataCache
from actors.group_coordinator import spawn_coordinators
from actors.log_cleaner import LogCleaner
from actors.log_manager import LogManager
from actors.metadata.store import BrokerIdInUse, MetadataError
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.replica_manager import ReplicaManager
from actors.request_handler import RequestHandler
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.directory import Directory, NodeEndpoint
from actors.sim.disk import SimDisk
from actors.sim.metadata import SimMetadataStore, SimZooKeeper
from actors.sim.node import SimNode
from actors.sim.processor import NAME as PROCESSOR
from actors.sim.processor import SimProcessor
from actors.sim.world import SimWorld
from actors.timer import Timer
from actors.topology import Topology, broker_node_name
from wire.cluster_messages import StartController

CLUSTER_ID = "c2ltdWxhdGVkLWNsdXN0ZXI"
KAFKA_PORT = 9092
GATEWAY_PORT = 9093
REGISTER_RETRY_MS = 500
START_RETRY_MS = 500

# Small and quick where the defaults are sized for production.
DEFAULT_OVERRIDES: dict[str, Any] = {
    "num.network.threads": 1,
    "num.io.threads": 2,
    "num.partition.shards": 2,
    "num.purgatory.shards": 1,
    "num.group.coordinators": 1,
    "num.partitions": 3,
    "default.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "zookeeper.session.timeout.ms": 6000,
    # Kafka's default before 2.5 (KIP-537 made it 30 s): a run's faults last seconds, so
    # with 30 s a lagging follower would almost never leave the ISR within a run
    "replica.lag.time.max.ms": 10_000,
    "log.segment.bytes": 64 * 1024,
    "log.flush.interval.messages": 20,
    "auto.leader.rebalance.enable": True,
    "leader.imbalance.check.interval.seconds": 5,
    "group.initial.rebalance.delay.ms": 0,
}


@dataclass
class SimBroker:
    broker_id: int
    name: str
    data_dir: Path
    config: Config
    topology: Topology
    node: SimNode | None = None
    store: SimMetadataStore | None = None
    lives: int = 0
    registered_epoch: int = -1
    state: str = "down"   # down, starting, up, crashed

    def shards(self) -> list[Any]:
        if self.node is None:
            return []
        return [self.node.actors[self.topology.shard(i).name]
                for i in range(self.topology.num_shards)
                if self.topology.shard(i).name in self.node.actors]


class SimCluster:
    def __init__(self, world: SimWorld, num_nodes: int, root: Path, disk: SimDisk,
                 overrides: dict[str, Any] | None = None) -> None:
        self.world = world
        self.zk = SimZooKeeper(world)
        self.disk = disk
        self.root = root
        self.brokers: dict[int, SimBroker] = {}
        self.extra_endpoints: dict[str, NodeEndpoint] = {}  # other nodes every broker knows
        settings = dict(DEFAULT_OVERRIDES)
        settings.update(overrides or {})
        for broker_id in range(1, num_nodes + 1):
            name = broker_node_name(broker_id)
            data_dir = root / name
            if data_dir.exists():
                # An earlier run's logs with this run's new (empty) ZooKeeper: its brokers
                # would serve that run's records and committed offsets as this one's (a
                # group "fetched committed offset N, which no member committed").
                raise ValueError(f"{data_dir} exists: a simulated cluster starts from an "
                                 f"empty directory (a run's own, as run_seed makes)")
            cfg = Config(dict(settings, **{
                "node.id": broker_id, "zookeeper.connect": "zk.sim:2181",
                "log.dirs": str(data_dir), "listeners": f"{name}.sim:{KAFKA_PORT}",
                "actor.gateway.host": f"{name}.sim", "actor.gateway.port": GATEWAY_PORT}))
            self.brokers[broker_id] = SimBroker(broker_id, name, data_dir, cfg,
                                                Topology.from_config(name, cfg))

    # ------------------------------------------------------------ lifecycle
    def start(self, broker_id: int) -> None:
        """Start a node (again): its actors, its ZooKeeper session, then registration."""
        broker = self.brokers[broker_id]
        if broker.state in ("starting", "up"):
            return
        broker.state = "starting"
        broker.lives += 1
        self.world.note(f"start {broker.name} (life {broker.lives})")
        self._try_start(broker_id, broker.lives)

    def _try_start(self, broker_id: int, life: int) -> None:
        broker = self.brokers[broker_id]
        if broker.lives != life or broker.state != "starting":
            return
        cfg = broker.config
        world = self.world
        # this start's process: registered (BrokerInfo.incarnation), carried by its frames.
        # Its own directory entry carries it from the start; a real broker's own entry has
        # none and it sets node.frame_incarnation later (nothing reads the own entry's).
        endpoint = NodeEndpoint(f"{broker.name}.sim", GATEWAY_PORT,
                                incarnation=world.next_process_id(broker.name))
        node = world.add_node(broker.name, directory=Directory(
            {broker.name: endpoint, **self.extra_endpoints}), endpoint=endpoint)
        broker.node = node
        store = SimMetadataStore(self.zk, broker.name, node.incarnation,
                                 deliver=lambda notice: self._notice(broker_id, life, notice),
                                 session_timeout_ms=int(cfg["zookeeper.session.timeout.ms"]))
        broker.store = store
        try:
            store.start()
            cluster_id = store.get_or_create_cluster_id(CLUSTER_ID)
        except MetadataError as exc:  # cut off from ZooKeeper: the start fails, try again
            world.note(f"{broker.name} cannot start: {exc}")
            store.crashed()
            node.crash()
            world.kernel.after_ms(START_RETRY_MS, self._try_start, broker_id, life)
            return
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        read_or_create_meta(broker.data_dir, broker_id, cluster_id)
        self._spawn(broker, node, store, cluster_id)
        self._register(broker_id, life)

    def _spawn(self, broker: SimBroker, node: SimNode, store: SimMetadataStore,
               cluster_id: str) -> None:
        """What Broker._start_locked spawns in cluster mode, Acceptor and Processors aside."""
        cfg, topo, clock = broker.config, broker.topology, node.clock
        broker_id = broker.broker_id
        log_dir = LogDir.open(broker.data_dir)
        node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir,
                   num_shards=topo.num_shards, clock=clock)
        node.spawn(Timer, topo.timer.name, clock=clock)
        snapshot = copy.copy(log_dir)
        snapshot.high_watermarks = dict(log_dir.high_watermarks)
        snapshot.recovery_points = dict(log_dir.recovery_points)
        snapshot.log_start_offsets = dict(log_dir.log_start_offsets)
        for i in range(topo.num_shards):
            node.spawn(PartitionShard, topo.shard(i).name, topology=topo, config=cfg,
                       log_dir=snapshot, topics={}, broker_id=broker_id, clock=clock)
        for i in range(topo.num_purgatories):
            node.spawn(PurgatoryShard, topo.purgatory(i).name, topology=topo, clock=clock,
                       purge_interval_requests=int(cfg["purge.interval.requests"]))
        node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo, config=cfg,
                   broker_id=broker_id, clock=clock)
        info = BrokerInfo(broker_id, (Endpoint("PLAINTEXT", f"{broker.name}.sim", KAFKA_PORT),),
                          f"tcp://{broker.name}.sim:{GATEWAY_PORT}", None,
                          num_handlers=topo.num_handlers, num_shards=topo.num_shards,
                          num_coordinators=topo.num_coordinators,
                          incarnation=node.frame_incarnation.hex())  # its frames' too
        node.spawn(ClusterController, topo.controller.name, topology=topo, config=cfg,
                   store=store, broker=info, clock=clock,
                   rng=random.Random(self.world.kernel.rng.getrandbits(64)))
        if cfg["log.cleaner.enable"]:
            node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo, config=cfg,
                       log_dir=broker.data_dir, clock=clock)
        spawn_coordinators(node, topo, cfg, clock, cluster=True)
        for i in range(topo.num_handlers):
            ctx = HandlerContext(topo, cfg, broker_id, f"{broker.name}.sim", KAFKA_PORT,
                                 cluster_id, i, {}, clock=clock, cluster=MetadataCache())
            node.spawn(RequestHandler, topo.handler(i).name, context=ctx)
        node.spawn(SimProcessor, PROCESSOR, topology=topo, config=cfg)

    def _register(self, broker_id: int, life: int) -> None:
        broker = self.brokers[broker_id]
        if broker.lives != life or broker.state != "starting" or broker.store is None:
            return
        node = broker.node
        assert node is not None
        controller = node.actors[broker.topology.controller.name]
        try:
            epoch = broker.store.register_broker(controller.broker)  # type: ignore[attr-defined]
        except (BrokerIdInUse, MetadataError) as exc:
            self.world.note(f"{broker.name} registration waits: {type(exc).__name__}")
            self.world.kernel.after_ms(REGISTER_RETRY_MS, self._register, broker_id, life)
            return
        broker.registered_epoch = epoch
        broker.state = "up"
        self.world.note(f"{broker.name} registered, broker epoch {epoch}")
        node.tell(broker.topology.controller, StartController(epoch))

    def _notice(self, broker_id: int, life: int, notice: Any) -> None:
        """The store's notices to the node's controller, as Broker._notice hands them over."""
        broker = self.brokers[broker_id]
        node = broker.node
        if broker.lives != life or node is None or node.crashed:
            return
        if broker.topology.controller.name not in node.actors:
            return
        node.tell(broker.topology.controller, notice)

    def crash(self, broker_id: int) -> None:
        """kill -9: the node's actors vanish, its disk keeps what was fsynced."""
        broker = self.brokers[broker_id]
        if broker.node is None or broker.state == "crashed":
            return
        shards = broker.shards()
        self.world.crash(broker.name)
        if broker.store is not None:
            broker.store.crashed()
        self.disk.crash(broker.data_dir, shards)
        broker.state = "crashed"

    def up(self, broker_id: int) -> bool:
        return self.brokers[broker_id].state == "up"

    def processor(self, broker_id: int) -> Address:
        return Address(broker_node_name(broker_id), PROCESSOR)

    def controller_actor(self, broker_id: int) -> ClusterController | None:
        broker = self.brokers[broker_id]
        if broker.state != "up" or broker.node is None:
            return None
        found = broker.node.actors.get(broker.topology.controller.name)
        return found if isinstance(found, ClusterController) else None
