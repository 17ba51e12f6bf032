"""One broker node: opens the log dir, binds the listener, spawns every actor.

Placement (``actor.threads``): "shared" (the default) runs worker thread i
as one poll loop for shard-i, purgatory-i, handler-i and processor-i, and
connection c goes to processor and handler ``c % N``, so a request crosses
threads only when its partition lives on another worker; "dedicated" gives
every actor a thread of its own.

Spawn order is the reverse of stop order: the Acceptor is spawned last, so
at shutdown it stops first (no new connections), then the Processors (no
new requests; answers still go out), the handlers, the controller, the
partition shards (logs closed, final offsets reported), the purgatories and
the timer, and last the LogManager, which writes the checkpoints and the
clean-shutdown marker.
"""

from __future__ import annotations

import base64
import copy
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from loguru import logger

from actors.acceptor import Acceptor
from actors.apis.base import HandlerContext
from actors.controller import Controller
from actors.core.log_dir import LogDir
from actors.core.topic_store import TopicStore
from actors.group_coordinator import spawn_coordinators
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.processor import Processor
from actors.purgatory import PurgatoryShard
from actors.request_handler import RequestHandler
from actors.runtime.clock import SystemClock
from actors.runtime.config import Config
from actors.runtime.node import Directory, Node, NodeEndpoint, default_ipc_dir
from actors.timer import Timer
from actors.topology import Topology
from wire import kafka_codec


class BrokerError(RuntimeError):
    pass


def parse_host_port(text: str, what: str = "listener") -> tuple[str, int]:
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise BrokerError(f"{what} must be HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def read_or_create_meta(data_dir: Path, broker_id: int) -> str:
    """Kafka's meta.properties: the cluster id this log dir belongs to."""
    path = data_dir / "meta.properties"
    if path.exists():
        props = dict(
            line.split("=", 1) for line in path.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        stored = int(props.get("broker.id", broker_id))
        if stored != broker_id:
            raise BrokerError(f"{path} belongs to broker {stored}, this is broker {broker_id}")
        return props["cluster.id"]
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version=0\nbroker.id={broker_id}\ncluster.id={cluster_id}\n")
    os.replace(tmp, path)
    return cluster_id


class Broker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node: Node | None = None
        self.port = 0
        self.host = ""
        self.topology: Topology | None = None

    def start(self) -> Broker:
        cfg = self.config
        data_dir = Path(str(cfg["log.dirs"]).split(",")[0]).resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        broker_id = int(cfg["node.id"])
        node_name = str(cfg["node.name"])
        cluster_id = read_or_create_meta(data_dir, broker_id)
        log_dir = LogDir.open(data_dir)
        if not log_dir.had_clean_shutdown and log_dir.partitions():
            logger.warning("no clean-shutdown marker in {}: logs past their recovery point "
                           "will be scanned", data_dir)
        store = TopicStore.load(data_dir)

        host, port = parse_host_port(str(cfg["listeners"]))
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as exc:
            listener.close()
            raise BrokerError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        listener.listen(1024)
        self.host, self.port = listener.getsockname()[:2]
        adv = str(cfg["advertised.listeners"]) or f"{host}:{self.port}"
        adv_host, adv_port = parse_host_port(adv, "advertised.listeners")
        if adv_host in ("0.0.0.0", "::"):
            adv_host = "127.0.0.1"
        if adv_port == 0:
            adv_port = self.port

        ipc_dir = str(cfg["actor.ipc.dir"]) or default_ipc_dir()
        endpoint = NodeEndpoint(str(cfg["actor.gateway.host"]), int(cfg["actor.gateway.port"]),
                                ipc_dir)
        node = Node(
            node_name,
            directory=Directory({node_name: endpoint}),
            endpoint=endpoint,
            data_dir=data_dir,
            trace_sample_ratio=float(cfg["trace.sample.ratio"]),
            max_frame_bytes=max(int(cfg["actor.max.frame.bytes"]),
                                int(cfg["socket.request.max.bytes"]) + 1024 * 1024),
            batch_max_messages=int(cfg["actor.batch.max.messages"]),
        )
        self.node = node
        topo = Topology.from_config(node_name, cfg)
        self.topology = topo
        kafka_codec.warm_up()
        clock = SystemClock()
        topics = store.table()
        try:
            node.start()
            node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir,
                       num_shards=topo.num_shards, clock=clock)
            node.spawn(Timer, topo.timer.name, clock=clock)
            if cfg["actor.threads"] not in ("shared", "dedicated"):
                raise BrokerError(f"actor.threads must be 'shared' or 'dedicated', "
                                  f"got {cfg['actor.threads']!r}")
            shared = cfg["actor.threads"] == "shared"

            def place(i: int) -> dict[str, Any]:
                """Worker thread i (the loop of shard-i) also runs the i-th of the others."""
                if shared and i < topo.num_shards:
                    return {"host": topo.shard(i).name}
                return {}

            # The LogManager owns log_dir and updates its maps; shards get a snapshot
            # of what was checkpointed at start (no state shared between threads).
            snapshot = copy.copy(log_dir)
            snapshot.high_watermarks = dict(log_dir.high_watermarks)
            snapshot.recovery_points = dict(log_dir.recovery_points)
            snapshot.log_start_offsets = dict(log_dir.log_start_offsets)
            for i in range(topo.num_shards):
                node.spawn(PartitionShard, topo.shard(i).name, topology=topo, config=cfg,
                           log_dir=snapshot, topics=topics, broker_id=broker_id, clock=clock)
            for i in range(topo.num_purgatories):
                node.spawn(PurgatoryShard, topo.purgatory(i).name, topology=topo, clock=clock,
                           purge_interval_requests=int(cfg["purge.interval.requests"]),
                           **place(i))
            node.spawn(Controller, topo.controller.name, topology=topo, config=cfg, store=store)
            self._spawn_extra(node, topo, cfg, clock)
            for i in range(topo.num_handlers):
                ctx = HandlerContext(topo, cfg, broker_id, adv_host, adv_port, cluster_id, i,
                                     dict(topics), clock=clock)
                node.spawn(RequestHandler, topo.handler(i).name, context=ctx, **place(i))
            for i in range(topo.num_processors):
                node.spawn(Processor, topo.processor(i).name, topology=topo, config=cfg,
                           clock=clock, **place(i))
            node.spawn(Acceptor, topo.acceptor.name, topology=topo, config=cfg,
                       listen_socket=listener, clock=clock, **place(0))
        except Exception:
            listener.close()
            node.shutdown(timeout=5)
            raise
        logger.bind(node=node_name).info(
            "actorlog broker {} listening on {}:{} (advertised {}:{}), data in {}, "
            "{} processors, {} handlers, {} shards, actor threads {}",
            broker_id, self.host, self.port, adv_host, adv_port, data_dir,
            topo.num_processors, topo.num_handlers, topo.num_shards, cfg["actor.threads"])
        return self

    def _spawn_extra(self, node: Node, topo: Topology, cfg: Config, clock: Any) -> None:
        """The consumer-group coordinators."""
        spawn_coordinators(node, topo, cfg, clock)

    def stop(self) -> None:
        if self.node is not None:
            self.node.shutdown(timeout=float(self.config["request.timeout.ms"]) / 1000)
            self.node = None
