"""One broker node: opens the log dir, binds the listener, spawns every actor.

Placement (``actor.threads``): "shared" runs worker thread i as one poll
loop for shard-i, purgatory-i, handler-i and processor-i, and connection c
goes to processor and handler ``c % N``, so a request crosses threads only
when its partition lives on another worker; "single" (the default) runs all
of them, every shard included, in one loop per process, and the group and
transaction coordinators in process 0's (with ``num.processes`` > 1 only process 0
hosts the coordinators), so a request crosses no thread inside a process (no GIL
handoff, no ZeroMQ poll between its hops). When each coordinator had a thread of its
own, a request that only reads or changes the coordinator's memory crossed two
(handler -> coordinator and back: a Heartbeat, an OffsetFetch, a LeaveGroup), and one
that writes its log crossed four (handler -> coordinator -> shard and back: a
transaction's AddPartitionsToTxn and EndTxn, an OffsetCommit or TxnOffsetCommit, the
leader's SyncGroup). A coordinator's work in one call holds up that whole loop: the end of a
load restores a slice a poll of the loop, but some calls still look at everything a coordinator
holds at once (a transaction coordinator's timeout tick, a group coordinator's unload
or topic deletion; see actors/transaction_coordinator.py and
actors/group_coordinator.py). "dedicated" gives every actor a thread of its own.

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
import dataclasses
import errno
import hashlib
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from actors.acceptor import Acceptor
from actors.apis.base import HandlerContext
from actors.cluster_controller import ClusterController
from actors.controller import Controller
from actors.core.checkpoint import TMP_SUFFIX, write_atomically
from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.core.dir_lock import DirLock, DirLockedError
from actors.core.log_dir import LogDir
from actors.core.metadata_cache import MetadataCache
from actors.core.topic_store import TopicStore
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.group_coordinator import spawn_coordinators
from actors.handoff import bind_handoff, handoff_path
from actors.log_cleaner import LogCleaner
from actors.log_manager import LogManager
from actors.metadata.store import BrokerIdInUse, MetadataError
from actors.metadata.zk import ZkMetadataStore
from actors.partition_shard import PartitionShard
from actors.processes import (
    ProcessSupervisor,
    generations_path,
    process_node_name,
    raise_or_defer,
    remove_process_locks,
    wait_for_earlier_processes,
)
from actors.processor import Processor
from actors.purgatory import PurgatoryShard
from actors.replica_manager import ReplicaManager
from actors.request_handler import RequestHandler
from actors.runtime.clock import Clock, SystemClock
from actors.runtime.config import SPEC, Config, ConfigError, auto_processes
from actors.runtime.node import (
    AskFailed,
    AskTimeout,
    Directory,
    Node,
    NodeEndpoint,
    NodeError,
    default_ipc_dir,
)
from actors.runtime.properties import PropertiesError, read_properties, write_properties
from actors.security.acl import Authorizer
from actors.security.config import SecurityConfigError, SecuritySettings
from actors.security.credentials import CredentialCache
from actors.security.curve import CurveError, CurveIdentity, cluster_mismatch
from actors.security.listeners import bind_error, format_host_port, is_wildcard
from actors.security.local_store import LocalSecurityStore, LocalStoreError
from actors.security.tls import TlsConfigError, server_context
from actors.shard_relay import ShardRelay
from actors.timer import Timer
from actors.topology import Topology, broker_node_name
from actors.transaction_coordinator import spawn_txn_coordinators
from wire import kafka_codec
from wire.cluster_messages import ControlledShutdownStep, StartController
from wire.envelope import incarnation_bytes
from wire.fingerprint import first_mismatch, wire_fingerprint


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """A listener as bound (or advertised): its name, protocol, host and real port."""

    name: str
    security_protocol: str
    host: str
    port: int

    @property
    def connection_string(self) -> str:
        return f"{self.name}://{format_host_port(self.host, self.port)}"


class BrokerError(RuntimeError):
    """The broker cannot start for a reason found at run time (a port in use, a locked dir)."""


class BrokerConfigError(BrokerError):
    """The settings themselves are wrong; the message names the key and the fix."""


class StartInterrupted(BaseException):
    """SIGTERM or SIGINT while the broker starts (`actorlog serve`): the start stops what
    it started. A BaseException, as KeyboardInterrupt: no ``except Exception`` of a start
    step takes it for that step's own failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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


def bind_listener(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """The Kafka listener's socket, bound and listening (IPv4 or IPv6 by the host).

    ``reuse_port`` (num.processes > 1): every process of the broker binds the
    port, and the kernel spreads new connections over them.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
                              f"process; stop it or choose another port (--listen, or "
                              f"listeners in the config file or cluster spec)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise BrokerConfigError(f"cannot listen on {where}: no interface of this host "
                                    f"has that address; use one it has, e.g. 127.0.0.1:{port}"
                                    ) from None
        if exc.errno == errno.EACCES:
            raise BrokerError(f"cannot listen on {where}: permission denied (ports below 1024 "
                              f"need privileges); choose a port from 1024 up") from None
        raise BrokerError(f"cannot listen on {where}: {exc.strerror}") from None
    return listener


def stale_registration_wait_ms(cfg: Config) -> int:
    """How long a starting node waits for a registration its previous life left (killed,
    its session not expired yet) to go: twice the session timeout. ZooKeeper expires a
    session up to a tick after its timeout (a tick is at most half of it), and one it
    restored when the server restarted a timeout after that restart: a node started
    right after ZooKeeper came back found its previous life registered for longer than
    one timeout, and refused to start as if another node held its node.id."""
    return 2 * int(cfg["zookeeper.session.timeout.ms"])


def cluster_node_name(cfg: Config) -> str:
    """A cluster node is named after its broker id, so every node can address every other."""
    broker_id = int(cfg["node.id"])
    name = broker_node_name(broker_id)
    given = str(cfg["node.name"])
    if given not in (name, SPEC["node.name"][0]):
        raise BrokerConfigError(
            f"node.name = {given!r}: in a cluster (zookeeper.connect) a node is named after its "
            f"node.id, here {name!r}; remove node.name or set it to {name!r}")
    host = str(cfg["actor.gateway.host"])
    if host in NON_ROUTABLE_HOSTS:
        raise BrokerConfigError(
            f"actor.gateway.host = {host!r}: the other nodes of the cluster connect to this "
            f"address; give this host's name or IP address")
    return name


def free_tcp_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        try:
            probe.bind((host, 0))
        except OSError as exc:
            raise BrokerConfigError(f"actor.gateway.host {host!r}: cannot bind there "
                                    f"({exc.strerror}); give an address of this host") from None
        return int(probe.getsockname()[1])


def lock_log_dir(path: Path) -> DirLock:
    try:
        return DirLock.acquire(path)
    except DirLockedError as exc:
        raise BrokerError(exc.strerror) from None
    except OSError as exc:
        raise BrokerError(f"cannot use data dir {path}: {exc.strerror}; give a directory this "
                          f"user may write (--data-dir / log.dirs)") from None


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; the new soft limit.

    Every Fetch response in flight holds a descriptor per partition it sends from
    a segment file (until sent), on top of the segments' own: Kafka's operators
    raise the limit for the same reason. Reads fall back to bytes if it runs out.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
        return hard
    return soft


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _log_deletes_at_open(log_dir: LogDir, data_dir: Path) -> None:
    """Say what the log dir did at start with the deletes an earlier run left pending."""
    found = log_dir.deletes_at_open
    if found.completed:
        logger.info("completed the delete of {} partition(s) left pending in {}: {}",
                    len(found.completed), data_dir,
                    ", ".join(f"{t}-{p}" for t, p in found.completed))
    for (topic, partition), why in sorted(found.pending.items()):
        logger.warning("{}-{} was deleted and its directory still cannot be set aside ({}): "
                       "it is not opened, and its shard tries again", topic, partition, why)
    for name in found.damaged:
        logger.error("{} in {} is not a pending delete this broker recorded (damaged, or "
                     "not under its own name): left as it is", name, data_dir)
    if found.checkpoint_error is not None:
        logger.error("the checkpoints of {} could not be written without the partitions "
                     "deleted at start ({}); their offsets are not used", data_dir,
                     found.checkpoint_error)


@dataclass(frozen=True)
class _MetaFile:
    """A log dir's meta.properties as read: its cluster id as Java reads it (None when Java
    refuses it, a malformed \\u escape), the id the file's own form gives (``chosen``), and
    every reading of it an older writer may have meant (``readings``, Java's first)."""

    path: Path
    java: str | None
    chosen: str
    readings: tuple[str, ...]


def read_meta(data_dir: Path, broker_id: int) -> str | None:
    """The cluster id in the log dir's meta.properties (None when there is none yet); a
    file in an older form is rewritten in Java's (a single node: nothing else to ask)."""
    found = _read_meta_file(data_dir, broker_id)
    if found is None:
        return None
    if found.chosen != found.java:
        _rewrite_older_meta(found, broker_id, found.chosen)
    return found.chosen


def _read_meta_file(data_dir: Path, broker_id: int) -> _MetaFile | None:
    path = data_dir / "meta.properties"
    try:
        _remove_meta_temp(path)
    except OSError as exc:
        raise BrokerError(f"{path} cannot be read: a temp file of its rewrite cannot be "
                          f"removed ({exc.strerror or exc})") from None
    if not path.exists():
        return None
    try:  # Java's properties form, as Kafka writes the file (ISO-8859-1)
        raw = path.read_bytes()
        props, java, refused = _java_reading(raw.decode("latin-1"))
        readings = _older_readings(raw)
        chosen = _chosen_reading(raw, java, readings)
        if chosen is None:
            if refused is not None:
                raise refused
            raise KeyError("cluster.id")
        given = props.get("broker.id", str(broker_id))
        if not given.strip().lstrip("-").isdigit():
            raise ValueError(f"broker.id={given!r} is not an integer")
        stored = int(given)
        if not chosen.strip():  # as written: ZooKeeper's may have any blanks
            raise KeyError("cluster.id")
    except OSError as exc:
        raise BrokerError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except KeyError:
        raise BrokerError(f"{path} is malformed: it has no cluster.id; restore it, or remove "
                          f"it when this data dir belongs to no cluster yet") from None
    except (PropertiesError, ValueError) as exc:
        raise BrokerError(f"{path} is malformed ({exc}); it needs broker.id=<integer> and "
                          f"cluster.id=<id>") from None
    if stored != broker_id:
        raise BrokerError(f"{path} belongs to broker {stored}, this is broker {broker_id}")
    ordered = [java] if java is not None else []
    ordered += [r for r in (chosen, *readings) if r not in ordered and r.strip()]
    return _MetaFile(path, java, chosen, tuple(ordered))


def _rewrite_older_meta(found: _MetaFile, broker_id: int, cluster_id: str) -> None:
    logger.warning("{} is in the form an older writer used (an older actorlog's id raw in "
                   "UTF-8, or Kafka 3.7's UTF-8), which Java reads as another id: cluster id "
                   "{!r} kept, the file rewritten in Java's form", found.path, cluster_id)
    try:
        _write_meta(found.path, str(broker_id), cluster_id)
    except OSError as exc:
        raise BrokerError(f"{found.path} cannot be rewritten: {exc.strerror or exc}") from None


def _java_reading(text: str) -> tuple[dict[str, str], str | None, PropertiesError | None]:
    """Java's reading: the properties, the cluster id (None when absent or refused) and,
    when Java refuses the cluster id's value alone (an older raw id such as ``C:\\users``,
    a ``\\u`` without hex digits), why: an older reading may still give it."""
    try:
        props = read_properties(text)
        return props, props.get("cluster.id"), None
    except PropertiesError as exc:
        if "'cluster.id'" not in str(exc):
            raise
        refused = exc
    rest = "\n".join(line for line in re.split(r"\r\n|\r|\n", text)
                     if not line.lstrip(" \t\f").startswith("cluster.id"))
    return read_properties(rest), None, refused


# the escapes a Java writer makes (Properties.store, in any case for \uXXXX): a backslash
# before anything else is no writer's, so it marks an older actorlog's raw id
_WRITER_FORM = re.compile(r"(?:[^\\]|\\(?:u[0-9A-Fa-f]{4}|[\\=:#! tnrf]))*", re.DOTALL)


def _older_value(raw: bytes) -> str | None:
    """cluster.id as an older actorlog read it: key=value lines in UTF-8, the value as
    written (None when the file is not UTF-8: ISO-8859-1, as a Java tool may write it)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    props = dict(line.split("=", 1) for line in text.splitlines()
                 if "=" in line and not line.startswith("#"))
    return props.get("cluster.id")


def _older_readings(raw: bytes) -> list[str]:
    """The other readings an earlier writer may have meant: the value raw in UTF-8 (an
    older actorlog) and UTF-8 with Java's escapes (Kafka 3.7 and later write the file with
    Properties.store(Writer) in UTF-8, escaping only what is not a character of its own)."""
    out = []
    older = _older_value(raw)
    if older is not None:
        out.append(older)
        try:
            unescaped = read_properties(raw.decode("utf-8")).get("cluster.id")
        except PropertiesError:
            unescaped = None
        if unescaped is not None:
            out.append(unescaped)
    return out


def _chosen_reading(raw: bytes, java: str | None, readings: list[str]) -> str | None:
    """Which reading the file's own form says, judged on the cluster id's value alone: a
    backslash no Java writer makes (or Java refusing the value) marks an older actorlog's
    raw id; otherwise the escapes are Java's, read from UTF-8 when the value has non-ASCII
    bytes (Java's ISO-8859-1 reading of UTF-8 makes another id). A value whose every
    backslash is a writer's escape reads as Java's form: an older raw id such as ``a\\\\b``
    cannot be told from an escape, read as Java reads it only in an ASCII value, from UTF-8
    in another (in a cluster ZooKeeper's id decides among the readings)."""
    older = _older_value(raw)
    if older is None or not older.strip():
        return java
    if not _WRITER_FORM.fullmatch(older):
        return older
    if older.isascii():
        return java
    unescaped = readings[1] if len(readings) > 1 else None
    return unescaped if unescaped is not None else older


def read_or_create_meta(data_dir: Path, broker_id: int, cluster_id: str | None = None) -> str:
    """Kafka's meta.properties: the cluster id this log dir belongs to."""
    found = read_meta(data_dir, broker_id)
    if found is not None:
        return found
    cluster_id = cluster_id or new_cluster_id()
    _write_meta(data_dir / "meta.properties", str(broker_id), cluster_id)
    return cluster_id


def _write_meta(path: Path, broker_id: str, cluster_id: str) -> None:
    # as Java's Properties.store (read_meta's reader): a cluster id from ZooKeeper may be
    # any string, and must read back the same; synced before and after the rename, or a
    # power loss may leave an empty file, and the cluster id is lost
    write_atomically(path, write_properties({"version": "0", "broker.id": broker_id,
                                             "cluster.id": cluster_id}).encode("ascii"))


def _remove_meta_temp(path: Path) -> None:
    """A rewrite's temp file a crash left (as Kafka's read removes it): never read, and
    the next rewrite starts clean. (``meta.tmp``: the name an older actorlog used.)"""
    for tmp in (path.with_name(path.name + TMP_SUFFIX), path.with_name("meta.tmp")):
        tmp.unlink(missing_ok=True)


class Broker:
    def __init__(self, config: Config, clock: Clock | None = None,
                 catch_signals: bool = False, early_signals: list[int] | None = None,
                 handlers_before: dict[int, Any] | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()  # the node's, read by every actor
        self.node: Node | None = None
        self.port = 0
        self.host = ""
        self.topology: Topology | None = None
        self.locks: list[DirLock] = []
        self.cluster = False
        self.node_name = str(config["node.name"])
        self.metadata: ZkMetadataStore | None = None
        self.broker_info: BrokerInfo | None = None
        self.security: SecuritySettings | None = None
        self.bound: tuple[ListenerEndpoint, ...] = ()  # the listeners, with their real ports
        self.advertised: tuple[ListenerEndpoint, ...] = ()
        self.supervisor: ProcessSupervisor | None = None  # num.processes > 1
        # why the supervisor stopped the broker (a process that cannot restart): `serve`
        # then exits 1, so a service manager's Restart=on-failure starts it again
        self.gave_up: str | None = None
        self.processes_by_default = False  # num.processes = 0: resolved at start
        # `actorlog serve`: SIGTERM/SIGINT noted from before the broker says it listens
        self.catch_signals = catch_signals
        # (`serve` passes those its own handler noted before the broker existed)
        self.early_signals: list[int] = [] if early_signals is None else early_signals
        # (and the handlers in force before its own: what a failed start puts back)
        self.handlers_before: dict[int, Any] = dict(handlers_before or {})

    def start(self) -> Broker:
        """Check the settings, bind the listener, lock the log dirs, then spawn the actors.

        Nothing is created on disk before the listener is bound; a start that
        fails removes the log dirs it created itself, so a mistake leaves no
        empty data dir behind.
        """
        restore = self._interrupt_start()
        try:
            if self.catch_signals and self.early_signals:  # came before: stop before making
                raise StartInterrupted(self.early_signals[0])
            return self._start()
        except BaseException:
            restore()  # a failed start: a later signal stops `serve` as it would have (the
            # handlers before `serve` noted them early)
            raise

    def _start(self) -> Broker:
        cfg = self.config
        dirs = log_dirs_of(cfg)
        data_dir = dirs[0]
        try:
            self.security = SecuritySettings.from_config(cfg.values)
        except SecurityConfigError as exc:
            raise BrokerConfigError(str(exc)) from None
        idle_ms = int(cfg["connections.max.idle.ms"])
        auth_delay_ms = int(cfg["connection.failed.authentication.delay.ms"])
        if auth_delay_ms and 0 <= idle_ms <= auth_delay_ms:  # as Kafka's KafkaConfig requires
            raise BrokerConfigError(
                f"connection.failed.authentication.delay.ms = {auth_delay_ms} must be less than "
                f"connections.max.idle.ms = {idle_ms}, or the idle check closes the connection "
                f"first; lower the delay (0: close at once) or raise the idle time")
        listeners = self.security.listeners
        tls_context = None
        if self.security.tls is not None:
            try:
                tls_context = server_context(self.security.tls)
            except TlsConfigError as exc:
                raise BrokerConfigError(str(exc)) from None
        self.cluster = bool(str(cfg["zookeeper.connect"]).strip())
        self.node_name = cluster_node_name(cfg) if self.cluster else str(cfg["node.name"])
        ipc_dir = gateway_ipc_dir(str(cfg["actor.ipc.dir"]) or default_ipc_dir(), data_dir,
                                  self.node_name)
        processes = int(cfg["num.processes"])
        if processes == 0:  # the default: one process per CPU
            try:
                processes = auto_processes()
            except ConfigError as exc:
                raise BrokerConfigError(str(exc)) from None
            cfg = self.config = cfg.update({"num.processes": processes}, "num.processes = 0")
            self.processes_by_default = True
        sockets: list[socket.socket] = []
        # num.processes > 1 with reuseport: every process binds each port (handoff: only
        # this one, which passes connections to the others)
        reuse_port = processes > 1 and cfg["num.processes.connection.distribution"] == "reuseport"
        try:
            for listener in listeners:
                sockets.append(bind_listener(listener.host, listener.port,
                                             reuse_port=reuse_port))
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        self.bound = tuple(
            ListenerEndpoint(listener.name, listener.security_protocol.value,
                             *sock.getsockname()[:2])
            for listener, sock in zip(listeners, sockets, strict=True))
        self.host, self.port = self.bound[0].host, self.bound[0].port
        by_name = {b.name: b for b in self.bound}
        # What clients are told: advertised.listeners (port 0 there: the bound port)
        self.advertised = tuple(
            ListenerEndpoint(a.name, a.security_protocol.value, a.host,
                             a.port or by_name[a.name].port)
            for a in self.security.advertised)
        adv_host, adv_port = self.advertised[0].host, self.advertised[0].port
        created = [d for d in dirs if not d.exists()]
        raise_open_files_limit()
        try:
            for d in dirs:
                self.locks.append(lock_log_dir(d))
            self._start_locked(cfg, data_dir, sockets, tls_context, adv_host, adv_port,
                               ipc_dir)
        except BaseException:
            for sock in sockets:
                sock.close()
            for d in created:
                if any(lock.path == d for lock in self.locks):  # never another broker's dir
                    shutil.rmtree(d, ignore_errors=True)
            self._release_locks()
            raise
        return self

    def _start_locked(self, cfg: Config, data_dir: Path, sockets: list[socket.socket],
                      tls_context: ssl.SSLContext | None, adv_host: str, adv_port: int,
                      ipc_dir: str) -> None:
        broker_id = int(cfg["node.id"])
        node_name = self.node_name
        gateway_port = int(cfg["actor.gateway.port"])
        processes = int(cfg["num.processes"])
        process_nodes = tuple(process_node_name(node_name, k) for k in range(processes))
        curve = self._curve_identity(node_name, process_nodes[1:])
        if self.cluster:
            if gateway_port == 0:  # the other nodes need a tcp gateway: any free port
                gateway_port = free_tcp_port(str(cfg["actor.gateway.host"]))
            else:  # before registering: a gateway that cannot bind leaves the node deaf
                self._check_gateway_port(str(cfg["actor.gateway.host"]), gateway_port)
            cluster_id = self._join(cfg, data_dir, broker_id)
            self._check_cluster_curve(curve, broker_id)
            self._check_cluster_wire(broker_id,
                                     wait_for_stale_ms=stale_registration_wait_ms(cfg))
        else:
            cluster_id = read_or_create_meta(data_dir, broker_id)
        try:  # processes 1.. of an earlier run (process 0 killed) close their logs first
            wait_for_earlier_processes(ipc_dir)
        except RuntimeError as exc:
            raise BrokerError(str(exc)) from None
        log_dir = LogDir.open(data_dir)
        _log_deletes_at_open(log_dir, data_dir)
        if not log_dir.had_clean_shutdown and log_dir.partitions():
            logger.warning("no clean-shutdown marker in {}: logs past their recovery point "
                           "will be scanned", data_dir)
        # A cluster's topics are in ZooKeeper: the controller tells this node its partitions.
        store = None if self.cluster else TopicStore.load(data_dir)
        given = store.assign_missing_ids(data_dir) if store is not None else []
        if store is not None and given:
            # an older version's table: the ids are on disk before any shard writes one
            store.save()
            logger.info("gave topic ids to {} topic(s) made by an older version: {}",
                        len(given), ", ".join(given))

        endpoint = NodeEndpoint(str(cfg["actor.gateway.host"]), gateway_port, ipc_dir)
        node = Node(
            node_name,
            directory=Directory({name: endpoint for name in process_nodes}),
            endpoint=endpoint,
            data_dir=data_dir,
            trace_sample_ratio=float(cfg["trace.sample.ratio"]),
            max_frame_bytes=max(int(cfg["actor.max.frame.bytes"]),
                                int(cfg["socket.request.max.bytes"]) + 1024 * 1024),
            batch_max_messages=int(cfg["actor.batch.max.messages"]),
            clock=self.clock,
            curve=curve,
            direct_peers=process_nodes,  # the worker loops' Unix stream links (no CURVE)
        )
        node.tracer.file_max_bytes = int(cfg["trace.file.max.bytes"])
        node.tracer.files_max = int(cfg["trace.files.max"])
        self.node = node
        topo = Topology.from_config(node_name, cfg)
        if processes > 1:
            topo = dataclasses.replace(topo, home=node_name, process_nodes=process_nodes)
        self.topology = topo
        kafka_codec.warm_up()
        clock = node.clock
        topics = store.table() if store is not None else {}
        # actor.threads = single: the gateway runs in the worker loop (the first local
        # shard's), so a frame from another process reaches its actor in memory
        local = topo.local_shards()
        gateway_host = (topo.shard(local[0]).name
                        if cfg["actor.threads"] == "single" and local else None)
        try:
            node.start(gateway=gateway_host is None)
            credentials = self._credentials(data_dir)
            authorizer, acl_store = self._authorizer(data_dir)
            user_store: Any = (self.metadata if self.cluster
                               else LocalSecurityStore.in_data_dir(data_dir))
            node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir,
                       num_shards=topo.num_shards, clock=clock)
            node.spawn(Timer, topo.timer.name, clock=clock)
            shared = cfg["actor.threads"] in ("shared", "single")
            single = cfg["actor.threads"] == "single"

            def place(i: int) -> dict[str, Any]:
                """Worker thread i (the loop of shard-i) also runs the i-th of the others;
                with num.processes > 1, a local shard's loop (never another process's);
                'single': the loop of this process's first shard runs them all."""
                if not shared:
                    return {}
                if single and local:
                    return {"host": topo.shard(local[0]).name}
                if i < topo.num_shards and i in local:
                    return {"host": topo.shard(i).name}
                if processes > 1 and local:
                    return {"host": topo.shard(local[i % len(local)]).name}
                return {}

            # The LogManager owns log_dir and updates its maps; shards get a snapshot
            # of what was checkpointed at start (no state shared between threads).
            snapshot = copy.copy(log_dir)
            snapshot.high_watermarks = dict(log_dir.high_watermarks)
            snapshot.recovery_points = dict(log_dir.recovery_points)
            snapshot.log_start_offsets = dict(log_dir.log_start_offsets)
            for i in local:  # num.processes > 1: the others run in processes 1..
                node.spawn(PartitionShard, topo.shard(i).name, topology=topo, config=cfg,
                           log_dir=snapshot, topics=topics, broker_id=broker_id, clock=clock,
                           **(place(i) if single and i != local[0] else {}))
            if gateway_host is not None:
                node.start_gateway(gateway_host)
            for i in topo.local_purgatories():
                node.spawn(PurgatoryShard, topo.purgatory(i).name, topology=topo, clock=clock,
                           purge_interval_requests=int(cfg["purge.interval.requests"]),
                           **place(i))
            if store is not None:
                node.spawn(Controller, topo.controller.name, topology=topo, config=cfg,
                           store=store)
            else:
                self._spawn_cluster_actors(node, topo, cfg, clock, broker_id, adv_host,
                                           adv_port, endpoint, credentials, authorizer)
            if self.cluster and processes > 1:
                # Other brokers name this node's shards as <node>/shard-i (they reach process
                # 0 alone): markers for a shard of processes 1.. come through a relay
                for i in range(topo.num_shards):
                    if i not in local:
                        node.spawn(ShardRelay, topo.shard(i).name, topology=topo, index=i,
                                   **place(i))
            if cfg["log.cleaner.enable"]:  # its own thread: a pass must not slow a worker
                node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo, config=cfg,
                           log_dir=data_dir, clock=clock)
            self._spawn_extra(node, topo, cfg, clock, topics,
                              **(place(0) if single else {}))
            for i in range(topo.num_handlers):
                ctx = HandlerContext(topo, cfg, broker_id, adv_host, adv_port, cluster_id, i,
                                     dict(topics), clock=clock,
                                     cluster=MetadataCache() if self.cluster else None,
                                     authorizer=authorizer, acl_store=acl_store,
                                     user_store=user_store, credentials=credentials,
                                     listener_names=tuple(b.name for b in self.bound),
                                     advertised=self._advertised_by_name())
                node.spawn(RequestHandler, topo.handler(i).name, context=ctx, **place(i))
            protocols = tuple(b.security_protocol for b in self.bound)
            assert self.security is not None
            for i in range(topo.num_processors):
                node.spawn(Processor, topo.processor(i).name, topology=topo, config=cfg,
                           clock=clock, listener_protocols=protocols,
                           tls_context=tls_context,
                           sasl_mechanisms=self.security.sasl_mechanisms,
                           credentials=credentials.lookup if credentials else None,
                           **place(i))
            if self.cluster:
                # Registered before any Acceptor runs, as Kafka processes no request until
                # its start ends: a client connecting meanwhile waits in the listen backlog
                # for the node's answer, instead of a Metadata naming this node alone with
                # no controller (its cache is empty until the controller's first update),
                # for as long as a previous life's registration is waited out (up to twice
                # the session timeout)
                self._register(cfg, node, topo, broker_id)
            handoff = processes > 1 and cfg["num.processes.connection.distribution"] == "handoff"
            for index, sock in enumerate(sockets):  # one Acceptor per listener
                node.spawn(Acceptor, topo.listener_acceptor(index).name, topology=topo,
                           config=cfg, listen_socket=sock, clock=clock, listener_index=index,
                           listener_name=self.bound[index].name, processes=processes,
                           handoff_socket=(self._bind_handoff(ipc_dir, node_name, index)
                                           if handoff else None), **place(0))
            if processes > 1:
                self._start_processes(cfg, data_dir, ipc_dir, node_name, broker_id, adv_host,
                                      adv_port, cluster_id, processes,
                                      log_dir.had_clean_shutdown)
            # last in the try: a signal up to here interrupts the start, which the
            # cleanup below undoes; from here on it is noted (run_until_signal stops)
            self._catch_signals()
        except BaseException as exc:
            supervisor, self.supervisor = self.supervisor, None
            try:
                if supervisor is not None:
                    supervisor.stop()
            finally:  # the node's threads would keep the process alive; an interrupted
                # start is `serve`'s one line ("got SIGTERM while starting; stopped")
                node.shutdown(timeout=5, quiet=isinstance(exc, StartInterrupted))
            if "_gateway" in node.actors:  # ours; never a socket another process serves
                self._remove_gateway_socket(node)
            self.node = None
            self._close_metadata()
            if isinstance(exc, NodeError):  # an actor whose setup failed: one line, its cause
                raise BrokerError(str(exc)) from exc
            raise
        logger.bind(node=node_name).info(
            "actorlog broker {} listening on {} (advertised {}), data in {}, "
            "{} process(es){}, {} processors, {} handlers, {} shards, {} purgatories, "
            "actor threads {}, inter-node wire {}",
            broker_id, ",".join(b.connection_string for b in self.bound),
            ",".join(a.connection_string for a in self.advertised), data_dir,
            cfg["num.processes"], " (num.processes = 0: one per CPU)"
            if self.processes_by_default else "", topo.num_processors, topo.num_handlers,
            topo.num_shards, topo.num_purgatories, cfg["actor.threads"], wire_fingerprint())

    def _curve_identity(self, node_name: str, aliases: tuple[str, ...]) -> CurveIdentity | None:
        """actor.curve.*: this node's key pair and the cluster's public keys, or None."""
        assert self.security is not None
        if not self.security.curve.enabled:
            return None
        try:
            curve = self.security.curve.identity(node_name, aliases)
        except CurveError as exc:
            raise BrokerConfigError(str(exc)) from None
        logger.bind(node=node_name).info(
            "CURVE between nodes: key {}, {} node keys admitted ({})", curve.keys.public.decode(),
            len(curve.admitted()), ", ".join(sorted(set(curve.peers) - set(aliases))))
        return curve

    def _check_cluster_curve(self, curve: CurveIdentity | None, broker_id: int) -> None:
        """Refuse to join nodes that cannot reach this one (CURVE on one side only)."""
        assert self.metadata is not None
        try:
            brokers = self.metadata.get_brokers()
        except MetadataError as exc:
            raise BrokerError(f"reading the registered brokers failed: {exc}") from None
        registered = {broker_node_name(b): info.curve_key for b, info in brokers.items()
                      if b != broker_id}
        refusal, warnings = cluster_mismatch(curve, registered)
        if refusal is not None:
            raise BrokerConfigError(refusal)
        for warning in warnings:
            logger.bind(node=self.node_name).warning("{}", warning)

    def _check_cluster_wire(self, broker_id: int, registered_epoch: int | None = None,
                            wait_for_stale_ms: int = 0) -> None:
        """Refuse to join nodes whose inter-node messages this build cannot read.

        Before registering: any live node with another wire fingerprint, once it has
        stayed ``wait_for_stale_ms`` (a node killed a moment ago, say to upgrade, stays
        registered until its session expires). After (``registered_epoch``): one
        registered earlier than this node, at once, so of two nodes of different builds
        that start together the later one goes and the earlier stays (its controller
        leaves the later one out meanwhile).
        """
        assert self.metadata is not None
        deadline = time.monotonic() + wait_for_stale_ms / 1000
        said = False
        while True:
            try:
                brokers = self.metadata.get_brokers()
            except MetadataError as exc:
                raise BrokerError(f"reading the registered brokers failed: {exc}") from None
            refusal = first_mismatch(wire_fingerprint(), {
                b: info.wire for b, info in brokers.items() if b != broker_id
                and (registered_epoch is None or 0 <= info.epoch < registered_epoch)})
            if refusal is None:
                return
            if time.monotonic() >= deadline:
                raise BrokerConfigError(refusal)
            if not said:
                said = True
                logger.bind(node=self.node_name).warning(
                    "a node of another inter-node wire is registered; waiting up to {} ms in "
                    "case it was stopped a moment ago (its session not yet expired)",
                    wait_for_stale_ms)
            time.sleep(0.2)

    def _authorizer(self, data_dir: Path) -> tuple[Authorizer | None, Any]:
        """authorizer.class.name = acl: the ACLs (ZooKeeper's /kafka-acl or the data dir).

        One Authorizer shared by the handlers of this process; CreateAcls/DeleteAcls
        and DescribeAcls refresh it from the store, and in a cluster the ClusterController
        applies each change ZooKeeper notifies under /kafka-acl-changes (and relays it to
        processes 1.., num.processes > 1, which keep copies).
        """
        assert self.security is not None
        if not self.security.acl_enabled:
            return None, None
        store: Any = self.metadata if self.cluster else LocalSecurityStore.in_data_dir(data_dir)
        authorizer = Authorizer(self.security.super_users,
                                self.security.allow_everyone_if_no_acl_found)
        try:
            authorizer.load(store.get_all_acls())
        except (MetadataError, LocalStoreError, OSError) as exc:
            raise BrokerError(f"reading the ACLs failed: {exc}") from None
        logger.bind(node=self.node_name).info(
            "ACL authorizer on: {} ACLs, super users {}", len(authorizer.bindings()),
            ",".join(sorted(self.security.super_users)) or "none")
        return authorizer, store

    def _credentials(self, data_dir: Path) -> CredentialCache | None:
        """SASL listeners: the SCRAM credentials, from ZooKeeper (cluster) or the data dir.

        Read at start, then kept fresh: by the handler that serves an
        AlterUserScramCredentials, by ZooKeeper's change notifications (the
        ClusterController) in a cluster, and on a single node by noticing that the
        data dir's users file changed (``actorlog users add`` while the node runs).
        """
        assert self.security is not None
        if not self.security.sasl_mechanisms:
            return None
        if self.cluster:
            cache = CredentialCache(self.metadata)
        else:
            local = LocalSecurityStore.in_data_dir(data_dir)
            cache = CredentialCache(local, stamp=local.users_stamp)
        try:
            problems = cache.load()
        except (MetadataError, LocalStoreError, OSError) as exc:
            raise BrokerError(f"reading the SCRAM credentials failed: {exc}") from None
        for problem in problems:
            logger.bind(node=self.node_name).warning("SCRAM credentials skipped: {}", problem)
        logger.bind(node=self.node_name).info(
            "SASL mechanisms {} with {} users", ",".join(self.security.sasl_mechanisms),
            len(cache.users()))
        return cache

    @staticmethod
    def _bind_handoff(ipc_dir: str, node_name: str, index: int) -> socket.socket:
        """num.processes.connection.distribution = handoff: where processes 1.. take the
        connections of listener ``index`` from (the Acceptor owns it once spawned)."""
        path = handoff_path(ipc_dir, node_name, index)
        if len(path.encode()) > UNIX_SOCKET_PATH_MAX:
            raise BrokerConfigError(
                f"the handoff socket path {path} is {len(path.encode())} bytes, over the "
                f"{UNIX_SOCKET_PATH_MAX}-byte limit of Unix sockets; set actor.ipc.dir (or "
                f"ACTORLOG_IPC_DIR) to a shorter directory")
        try:
            return bind_handoff(path)
        except OSError as exc:
            raise BrokerError(f"cannot listen on the handoff socket {path}: {exc}") from None

    def _start_processes(self, cfg: Config, data_dir: Path, ipc_dir: str, node_name: str,
                         broker_id: int, adv_host: str, adv_port: int, cluster_id: str,
                         processes: int, clean_shutdown: bool) -> None:
        """num.processes > 1: processes 1..N-1 serve connections on the same port and run
        their share of the shards; ``clean_shutdown``: whether the dir had the marker
        (process 0 removed it; a process restarted later recovers its logs regardless)."""
        spec = {"config": dict(cfg.given), "main": node_name, "host": self.host,
                "port": self.port, "adv_host": adv_host, "adv_port": adv_port,
                "cluster_id": cluster_id, "broker_id": broker_id, "ipc_dir": ipc_dir,
                "gateway_host": str(cfg["actor.gateway.host"]), "data_dir": str(data_dir),
                # every listener, bound to the ports process 0 got (port 0 in the config)
                "listeners": [[b.host, b.port] for b in self.bound],
                # what each listener advertises (its handlers answer a connection's own)
                "advertised": [[a.name, a.host, a.port] for a in self.advertised],
                "clean_shutdown": clean_shutdown, "cluster": self.cluster}

        def give_up(reason: str) -> None:
            logger.bind(node=node_name).error(reason)
            self.gave_up = reason
            os.kill(os.getpid(), signal.SIGTERM)  # run_until_signal stops the broker

        # known before it starts them: a failed or interrupted start stops those it started
        self.supervisor = ProcessSupervisor(spec, processes, give_up)
        try:
            self.supervisor.start()
        except (OSError, RuntimeError) as exc:
            raise BrokerError(str(exc)) from None

    def _advertised_by_name(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the (host, port) it advertises (the first of a name counts)."""
        found: dict[str, tuple[str, int]] = {}
        for a in self.advertised:
            found.setdefault(a.name, (a.host, a.port))
        return found

    def _spawn_extra(self, node: Node, topo: Topology, cfg: Config, clock: Any,
                     topics: dict[str, Any] | None = None, host: str | None = None) -> None:
        """The consumer-group and transaction coordinators."""
        spawn_coordinators(node, topo, cfg, clock, cluster=self.cluster, host=host)
        spawn_txn_coordinators(node, topo, cfg, clock, cluster=self.cluster,
                               topic_exists=TRANSACTION_STATE_TOPIC in (topics or {}),
                               host=host)

    # ------------------------------------------------------------------ cluster mode
    def _check_gateway_port(self, host: str, port: int) -> None:
        """One line, before the node registers, for a gateway port it cannot bind: its
        gateway failed to start and the node ran on, registered with a gateway address
        where the other nodes' links met one of its listeners (a TLS one logged each)."""
        exc = bind_error(host, port)
        if exc is None:
            return
        where = format_host_port(host, port)
        why = exc.strerror or str(exc)
        if isinstance(exc, socket.gaierror):
            raise BrokerConfigError(f"actor.gateway.host = {host}: {why}; give an IP address "
                                    f"or a name this host resolves")
        if exc.errno == errno.EADDRNOTAVAIL:
            raise BrokerConfigError(f"actor.gateway.host = {host}: no interface of this host "
                                    f"has that address ({why}); use one it has")
        if exc.errno == errno.EACCES:
            raise BrokerConfigError(f"actor.gateway.port = {port}: permission denied on "
                                    f"{where} (ports below 1024 need privileges); choose a "
                                    f"port from 1024 up")
        if exc.errno != errno.EADDRINUSE:
            raise BrokerConfigError(f"actor.gateway.host/actor.gateway.port: cannot listen "
                                    f"on {where} ({why})")
        for listener in self.bound:  # its own, when both bind the same address
            if listener.port == port and (is_wildcard(listener.host) or is_wildcard(host)
                                          or listener.host == host):
                raise BrokerConfigError(
                    f"actor.gateway.port = {port}: this node's listener {listener.name} "
                    f"listens there ({why}); give the gateway a port of its own")
        raise BrokerError(f"actor.gateway.port: cannot listen on {where} ({why}); "
                          f"is another broker using it? choose another actor.gateway.port")

    def _join(self, cfg: Config, data_dir: Path, broker_id: int) -> str:
        """Connect to ZooKeeper; the cluster id, agreed between ZooKeeper and the data dir."""
        session_ms = int(cfg["zookeeper.session.timeout.ms"])
        connection_ms = int(cfg["zookeeper.connection.timeout.ms"]) or session_ms
        connect = str(cfg["zookeeper.connect"]).strip()
        metadata = ZkMetadataStore(connect, self._notice, session_timeout_ms=session_ms,
                                   connection_timeout_ms=connection_ms)
        try:
            metadata.start()
        except MetadataError as exc:
            raise BrokerError(f"{exc}; start ZooKeeper or fix zookeeper.connect") from None
        except Exception as exc:  # kazoo refuses a malformed connect string
            raise BrokerConfigError(
                f"zookeeper.connect {connect!r} is not usable ({exc}); give "
                f"host:port[,host:port...][/chroot]") from None
        self.metadata = metadata
        try:
            # nothing rewritten before ZooKeeper's id is read: a file an earlier writer
            # wrote in its own form keeps the reading ZooKeeper holds, whichever it is
            found = _read_meta_file(data_dir, broker_id)
            proposed = found.chosen if found is not None else new_cluster_id()
            cluster_id = metadata.get_or_create_cluster_id(proposed)
        except MetadataError as exc:
            raise BrokerError(f"reading the cluster id from ZooKeeper failed: {exc}") from None
        if found is None:
            read_or_create_meta(data_dir, broker_id, cluster_id)
        elif cluster_id not in found.readings:
            raise BrokerConfigError(
                f"data dir {data_dir} belongs to cluster {found.chosen}, but ZooKeeper at "
                f"{connect} holds cluster {cluster_id}; use this node's own ZooKeeper "
                f"(chroot) or an empty data dir")
        elif cluster_id != found.java:
            _rewrite_older_meta(found, broker_id, cluster_id)
        logger.bind(node=self.node_name).info("joined cluster {} through ZooKeeper at {}",
                                              cluster_id, connect)
        return cluster_id

    def _notice(self, notice: Any) -> None:
        """The metadata store's sink (its own threads): hand the notice to the controller."""
        node, topo = self.node, self.topology
        if node is None or topo is None or topo.controller.name not in node.actors:
            return  # before the controller exists: it reads everything when it starts
        try:
            node.tell(topo.controller, notice)
        except Exception as exc:  # the node is shutting down
            logger.debug("store notice {} dropped: {}", type(notice).__name__, exc)

    def _spawn_cluster_actors(self, node: Node, topo: Topology, cfg: Config, clock: Any,
                              broker_id: int, adv_host: str, adv_port: int,
                              endpoint: NodeEndpoint,
                              credentials: CredentialCache | None = None,
                              authorizer: Authorizer | None = None) -> None:
        node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo, config=cfg,
                   broker_id=broker_id, clock=clock)
        self.broker_info = BrokerInfo(
            broker_id, tuple(Endpoint(a.name, a.host, a.port, a.security_protocol)
                             for a in self.advertised),
            f"tcp://{format_host_port(endpoint.host, endpoint.port)}",
            str(cfg["broker.rack"]) or None, num_handlers=topo.num_handlers,
            num_shards=topo.num_shards, num_coordinators=topo.num_coordinators,
            curve_key=node.curve.keys.public.decode() if node.curve is not None else "",
            wire=wire_fingerprint(), incarnation=uuid.uuid4().hex)  # this start's own
        node.frame_incarnation = incarnation_bytes(self.broker_info.incarnation)  # frames carry it
        node.spawn(ClusterController, topo.controller.name, topology=topo, config=cfg,
                   store=self.metadata, broker=self.broker_info, clock=clock,
                   credentials=credentials, authorizer=authorizer)

    def _register(self, cfg: Config, node: Node, topo: Topology, broker_id: int) -> None:
        """Register in ``/brokers/ids`` once every actor runs, then let the controller start.

        A registration left by this node's previous life (killed, its session not
        yet expired) is waited out (``stale_registration_wait_ms``); a live node
        holding the same node.id is refused.
        """
        assert self.metadata is not None and self.broker_info is not None
        try:
            epoch = self.metadata.register_broker(
                self.broker_info, wait_for_stale_ms=stale_registration_wait_ms(cfg))
        except BrokerIdInUse as exc:
            raise BrokerConfigError(str(exc)) from None
        except MetadataError as exc:
            raise BrokerError(f"registering broker {broker_id} in ZooKeeper failed: {exc}"
                              ) from None
        self._check_cluster_wire(broker_id, registered_epoch=epoch)
        node.tell(topo.controller, StartController(epoch))
        logger.bind(node=node.name).info("registered broker {} (epoch {}), gateway {}",
                                         broker_id, epoch, self.broker_info.gateway)

    def controlled_shutdown(self) -> None:
        """SIGTERM in a cluster: have the controller move this node's leaderships first.

        Waits while the controller actor tries, at most
        ``controlled.shutdown.max.retries`` attempts in all (Kafka's count; 0 makes
        none; a pass that finds no controller to ask is one) of ``request.timeout.ms``
        each with ``controlled.shutdown.retry.backoff.ms`` after each that failed but the
        last (the actor logs each attempt's outcome); then the node stops whatever the
        outcome.
        """
        node, topo = self.node, self.topology
        if not self.cluster or node is None or topo is None:
            return
        cfg = self.config
        log = logger.bind(node=node.name)
        attempts = int(cfg["controlled.shutdown.max.retries"])
        bound_s = attempts * (int(cfg["request.timeout.ms"])
                              + int(cfg["controlled.shutdown.retry.backoff.ms"])) / 1000
        deadline = time.monotonic() + bound_s
        try:
            status = node.ask(topo.controller, ControlledShutdownStep(True), timeout=10)
            while status.get("state") == "running" and time.monotonic() < deadline:
                time.sleep(0.05)
                status = node.ask(topo.controller, ControlledShutdownStep(False), timeout=10)
        except (AskFailed, AskTimeout) as exc:
            log.warning("controlled shutdown not done: {}", exc)
            return
        state = status.get("state")
        if state == "skipped":
            log.info("controlled shutdown is off (controlled.shutdown.enable=false)")
        elif state != "done":
            log.warning("controlled shutdown {} after {} attempt(s): {}; stopping anyway",
                        "gave up" if state == "failed" else "timed out",
                        status.get("attempts"), status.get("message") or "no answer")

    def _interrupt_start(self) -> Callable[[], None]:
        """Until the broker listens, SIGTERM/SIGINT interrupt its start (StartInterrupted,
        raised in the main thread as Ctrl-C's KeyboardInterrupt is): the start's cleanup
        stops the processes it started and releases the dirs, and `serve` exits as after
        a stop. The default action would kill process 0 with its processes 1.. still
        starting. Only the first signal raises: one more is noted, never interrupts that
        cleanup. Returns what puts the earlier handlers back."""
        if not self.catch_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        caught = self.early_signals

        def interrupt(signum: int, _frame: Any) -> None:
            caught.append(signum)
            if len(caught) == 1:
                raise_or_defer(StartInterrupted(signum))  # (not inside a process's making)

        old: dict[int, Any] = {s: signal.signal(s, interrupt)
                               for s in (signal.SIGTERM, signal.SIGINT)}
        # not `serve`'s early handler (it only notes): the default actions before it
        old.update((s, h) for s, h in self.handlers_before.items() if h is not None)

        def restore() -> None:
            for s, h in old.items():
                signal.signal(s, h)

        return restore

    def _catch_signals(self) -> None:
        """From before the broker says it listens, SIGTERM/SIGINT are noted, not fatal.

        Whoever starts a broker may stop it as soon as it says it listens; the
        signal must then stop it cleanly (run_until_signal sees it), not kill it.
        """
        if not self.catch_signals or threading.current_thread() is not threading.main_thread():
            return
        caught = self.early_signals

        def note(signum: int, _frame: Any) -> None:
            caught.append(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, note)

    def run_until_signal(self) -> int:
        """Serve until SIGTERM/SIGINT; in a cluster, a controlled shutdown comes first."""
        assert self.node is not None

        def before_shutdown() -> None:
            # In a cluster the controller moves the leaderships first, while every process
            # still serves its partitions; then processes 1.. stop (their requests finish
            # while this process still runs)
            self.controlled_shutdown()
            self._stop_processes()

        return self.node.run_until_signal(before_shutdown=before_shutdown,
                                          received=self.early_signals)

    def _stop_processes(self) -> None:
        supervisor, self.supervisor = self.supervisor, None
        if supervisor is None:
            return
        timeout = float(self.config["request.timeout.ms"]) / 1000
        node = self.node
        if node is None:
            supervisor.stop(timeout=timeout)
            return
        # While processes 1.. stop, this process takes no new requests either: those would
        # keep reaching their shards, which then never quiesce (each waited out its
        # timeout under load). The requests it took still finish, as theirs do here.
        supervisor.stop(timeout=timeout, while_stopping=lambda: node.stop_intake(timeout))
        # They have exited: a message to them now is a dead letter, and a link to them
        # closes without lingering on what nobody will read (1 s per link at shutdown)
        for k in range(1, supervisor.processes):
            node.directory.forget(process_node_name(node.name, k))

    def _close_metadata(self) -> None:
        metadata, self.metadata = self.metadata, None
        if metadata is not None:
            try:
                metadata.close()
            except Exception:
                pass

    def stop(self) -> None:
        self._stop_processes()
        if self.node is not None:
            node, self.node = self.node, None
            node.shutdown(timeout=float(self.config["request.timeout.ms"]) / 1000)
            self._remove_gateway_socket(node)
        self._close_metadata()  # the controller actor closed it already; a failed start not
        self._release_locks()

    @staticmethod
    def _remove_gateway_socket(node: Node) -> None:
        """The gateway's socket file and its directory (this data dir's alone)."""
        if node.endpoint is None or not node.endpoint.ipc_dir:
            return
        ipc_dir = Path(node.endpoint.ipc_dir)
        try:
            remove_process_locks(str(ipc_dir), node.name)
            # ZeroMQ's socket, the direct links', and the supervisor's generations
            # (num.processes > 1) with the new file of a write cut short
            generations = generations_path(str(ipc_dir), node.name)
            for path in (ipc_dir / f"{node.name}.gw", ipc_dir / f"{node.name}.ux",
                         generations, generations.with_name(generations.name + ".new")):
                path.unlink(missing_ok=True)
            ipc_dir.rmdir()
        except OSError:
            pass

    def _release_locks(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []
