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
import errno
import hashlib
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

from loguru import logger

from actors.acceptor import Acceptor
from actors.apis.base import HandlerContext
from actors.controller import Controller
from actors.core.dir_lock import DirLock, DirLockedError
from actors.core.log_dir import LogDir
from actors.core.topic_store import TopicStore
from actors.group_coordinator import spawn_coordinators
from actors.log_cleaner import LogCleaner
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.processor import Processor
from actors.purgatory import PurgatoryShard
from actors.request_handler import RequestHandler
from actors.runtime.clock import SystemClock
from actors.runtime.config import Config
from actors.runtime.node import Directory, Node, NodeEndpoint, NodeError, default_ipc_dir
from actors.timer import Timer
from actors.topology import Topology
from wire import kafka_codec


class BrokerError(RuntimeError):
    """The broker cannot start for a reason found at run time (a port in use, a locked dir)."""


class BrokerConfigError(BrokerError):
    """The settings themselves are wrong; the message names the key and the fix."""


NON_ROUTABLE_HOSTS = ("0.0.0.0", "::", "")
UNIX_SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL


def parse_host_port(text: str, what: str = "listeners") -> tuple[str, int]:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``PLAINTEXT://HOST:PORT`` into (host, port)."""
    text = text.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise BrokerConfigError(
            f"{what} must be HOST:PORT (IPv6: [::1]:9092), got {text!r}; "
            f"for example 127.0.0.1:9092")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise BrokerConfigError(
            f"{what}: put an IPv6 address in brackets, as [{host}]:{port}, got {text!r}")
    number = int(port)
    if number > 65535:
        raise BrokerConfigError(
            f"{what}: port {number} in {text!r} is out of range; use a port from 0 to 65535, "
            f"for example {host or '127.0.0.1'}:9092")
    return host, number


def format_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def log_dirs_of(cfg: Config) -> list[Path]:
    """The log dirs of ``log.dirs`` (comma separated), resolved; each must not be a file."""
    dirs = [Path(d.strip()).resolve() for d in str(cfg["log.dirs"]).split(",") if d.strip()]
    if not dirs:
        raise BrokerConfigError("log.dirs is empty; give a data directory with --data-dir DIR")
    for d in dirs:
        if d.exists() and not d.is_dir():
            raise BrokerConfigError(
                f"data dir {d} is a file, not a directory; point --data-dir (log.dirs) at a "
                f"directory (it is created if missing)")
    return dirs


def gateway_ipc_dir(base: str, data_dir: Path, node_name: str) -> str:
    """The ipc directory of this broker's gateway: unique per data dir.

    Every broker on a host used to bind ``<actor.ipc.dir>/<node.name>.gw``, and
    ``node.name`` defaults to node-1 for all of them, so a second broker (or a
    test's node) took over the first one's gateway. The data dir is locked by
    one broker at a time, so a directory named after it is this broker's alone.
    """
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    ipc_dir = f"{base.rstrip('/')}/{digest}"
    path = f"{ipc_dir}/{node_name}.gw"
    if len(path.encode()) > UNIX_SOCKET_PATH_MAX:
        raise BrokerConfigError(
            f"the gateway socket path {path} is {len(path.encode())} bytes, over the "
            f"{UNIX_SOCKET_PATH_MAX}-byte limit of Unix sockets; set actor.ipc.dir (or "
            f"ACTORLOG_IPC_DIR) to a shorter directory")
    return ipc_dir


def bind_listener(host: str, port: int) -> socket.socket:
    """The Kafka listener's socket, bound and listening (IPv4 or IPv6 by the host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    where = format_host_port(host or "0.0.0.0", port)
    try:
        listener.bind((host, port))
        listener.listen(1024)
    except socket.gaierror as exc:
        listener.close()
        raise BrokerConfigError(f"cannot listen on {where}: {exc.strerror}; give an IP address "
                                f"or a name this host resolves") from None
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise BrokerError(f"cannot listen on {where}: the port is in use by another "
                              f"process; stop it or choose another port (--listen)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise BrokerConfigError(f"cannot listen on {where}: no interface of this host "
                                    f"has that address; use one it has, e.g. 127.0.0.1:{port}"
                                    ) from None
        if exc.errno == errno.EACCES:
            raise BrokerError(f"cannot listen on {where}: permission denied (ports below 1024 "
                              f"need privileges); choose a port from 1024 up") from None
        raise BrokerError(f"cannot listen on {where}: {exc.strerror}") from None
    return listener


def lock_log_dir(path: Path) -> DirLock:
    try:
        return DirLock.acquire(path)
    except DirLockedError as exc:
        raise BrokerError(exc.strerror) from None
    except OSError as exc:
        raise BrokerError(f"cannot use data dir {path}: {exc.strerror}; give a directory this "
                          f"user may write (--data-dir / log.dirs)") from None


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
        self.locks: list[DirLock] = []

    def start(self) -> Broker:
        """Check the settings, bind the listener, lock the log dirs, then spawn the actors.

        Nothing is created on disk before the listener is bound; a start that
        fails removes the log dirs it created itself, so a mistake leaves no
        empty data dir behind.
        """
        cfg = self.config
        dirs = log_dirs_of(cfg)
        data_dir = dirs[0]
        host, port = parse_host_port(str(cfg["listeners"]))
        adv_host, adv_port = self._advertised(host, port)
        ipc_dir = gateway_ipc_dir(str(cfg["actor.ipc.dir"]) or default_ipc_dir(), data_dir,
                                  str(cfg["node.name"]))
        listener = bind_listener(host, port)
        self.host, self.port = listener.getsockname()[:2]
        if adv_port == 0:
            adv_port = self.port
        created = [d for d in dirs if not d.exists()]
        try:
            for d in dirs:
                self.locks.append(lock_log_dir(d))
            self._start_locked(cfg, data_dir, listener, adv_host, adv_port, ipc_dir)
        except BaseException:
            listener.close()
            for d in created:
                if any(lock.path == d for lock in self.locks):  # never another broker's dir
                    shutil.rmtree(d, ignore_errors=True)
            self._release_locks()
            raise
        return self

    def _advertised(self, host: str, port: int) -> tuple[str, int]:
        """The address told to clients; never a wildcard address, as in Kafka."""
        text = str(self.config["advertised.listeners"])
        if not text:
            if host in NON_ROUTABLE_HOSTS:
                raise BrokerConfigError(
                    f"listeners {format_host_port(host or '0.0.0.0', port)} binds every "
                    f"address, which clients cannot connect to; also set advertised.listeners "
                    f"to the address clients should use (--advertised-listeners HOST:{port})")
            return host, port
        adv_host, adv_port = parse_host_port(text, "advertised.listeners")
        if adv_host in NON_ROUTABLE_HOSTS:
            raise BrokerConfigError(
                f"advertised.listeners {text} is not an address clients can connect to; "
                f"give this host's name or IP address, e.g. --advertised-listeners "
                f"myhost.example.com:{adv_port or port}")
        return adv_host, adv_port

    def _start_locked(self, cfg: Config, data_dir: Path, listener: socket.socket,
                      adv_host: str, adv_port: int, ipc_dir: str) -> None:
        broker_id = int(cfg["node.id"])
        node_name = str(cfg["node.name"])
        cluster_id = read_or_create_meta(data_dir, broker_id)
        log_dir = LogDir.open(data_dir)
        if not log_dir.had_clean_shutdown and log_dir.partitions():
            logger.warning("no clean-shutdown marker in {}: logs past their recovery point "
                           "will be scanned", data_dir)
        store = TopicStore.load(data_dir)

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
        node.tracer.file_max_bytes = int(cfg["trace.file.max.bytes"])
        node.tracer.files_max = int(cfg["trace.files.max"])
        self.node = node
        topo = Topology.from_config(node_name, cfg)
        self.topology = topo
        kafka_codec.warm_up()
        clock = SystemClock()
        topics = store.table()
        try:
            try:
                node.start()
            except NodeError as exc:
                raise BrokerError(str(exc)) from None
            node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir,
                       num_shards=topo.num_shards, clock=clock)
            node.spawn(Timer, topo.timer.name, clock=clock)
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
            if cfg["log.cleaner.enable"]:  # its own thread: a pass must not slow a worker
                node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo, config=cfg,
                           log_dir=data_dir, clock=clock)
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
        except BaseException:
            node.shutdown(timeout=5)
            if "_gateway" in node.actors:  # ours; never a socket another process serves
                self._remove_gateway_socket(node)
            self.node = None
            raise
        logger.bind(node=node_name).info(
            "actorlog broker {} listening on {} (advertised {}), data in {}, "
            "{} processors, {} handlers, {} shards, actor threads {}",
            broker_id, format_host_port(self.host, self.port),
            format_host_port(adv_host, adv_port), data_dir,
            topo.num_processors, topo.num_handlers, topo.num_shards, cfg["actor.threads"])

    def _spawn_extra(self, node: Node, topo: Topology, cfg: Config, clock: Any) -> None:
        """The consumer-group coordinators."""
        spawn_coordinators(node, topo, cfg, clock)

    def stop(self) -> None:
        if self.node is not None:
            node, self.node = self.node, None
            node.shutdown(timeout=float(self.config["request.timeout.ms"]) / 1000)
            self._remove_gateway_socket(node)
        self._release_locks()

    @staticmethod
    def _remove_gateway_socket(node: Node) -> None:
        """The gateway's socket file and its directory (this data dir's alone)."""
        if node.endpoint is None or not node.endpoint.ipc_dir:
            return
        ipc_dir = Path(node.endpoint.ipc_dir)
        try:
            (ipc_dir / f"{node.name}.gw").unlink(missing_ok=True)
            ipc_dir.rmdir()
        except OSError:
            pass

    def _release_locks(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []
