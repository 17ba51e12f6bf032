"""The cluster spec: a TOML file naming hosts, ZooKeeper, nodes and their shared Kafka config.

::

    [cluster]                 # optional: name, state_dir, data_dir, client_config
    name = "demo"
    client_config = "client.properties"  # how `up` and `status` reach a TLS-only node
    [hosts.h1]
    via = "netns"             # "local", "netns" (a test host made here) or "ssh"
    address = "198.18.0.11"
    [hosts.h2]
    via = "ssh"
    address = "10.0.0.12"
    user = "root"             # ssh: user, port, identity_file, known_hosts, control_master
    [zookeeper]
    hosts = ["h1"]            # servers `cluster up` starts (several: an ensemble, ids 1..n
                              # in this order); or connect = "host:port,..." of a running one
    [nodes.1]
    host = "h1"
    [nodes.1.config]          # Kafka keys for this node
    "num.io.threads" = 4
    [config]                  # Kafka keys for every node
    "num.partitions" = 3

Everything is checked before anything starts: :func:`parse_spec` returns a
:class:`ClusterSpec` or raises :class:`SpecError` carrying one line per
mistake (an unknown key with the nearest known one, an unknown host, a node
id declared twice, a netns address outside 198.18.0.0/24, two listeners on
one host and port, ...). Nothing here touches the network or the hosts.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.runtime.config import SPEC as CONFIG_SPEC
from actors.runtime.config import Config, ConfigError

VIAS = ("local", "netns", "ssh")
TEST_NETWORK = ipaddress.ip_network("198.18.0.0/24")
BRIDGE_ADDRESS = ipaddress.ip_address("198.18.0.1")
DEFAULT_LISTENER_PORT = 9092
DEFAULT_ZOOKEEPER_PORT = 2181
DEFAULT_QUORUM_PORT = 2888
DEFAULT_ELECTION_PORT = 3888
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
NETNS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# Keys of each table, with what they mean (for the suggestion and for --help texts).
TOP_KEYS = ("cluster", "hosts", "zookeeper", "nodes", "config")
CLUSTER_KEYS = ("name", "state_dir", "data_dir", "client_config")
HOST_KEYS = ("via", "address", "user", "port", "identity_file", "known_hosts",
             "control_master", "netns", "data_dir", "actorlog", "python")
SSH_ONLY_KEYS = ("user", "port", "identity_file", "known_hosts", "control_master")
ZOOKEEPER_KEYS = ("hosts", "connect", "port", "quorum_port", "election_port")
NODE_KEYS = ("host", "config")
# Keys a node's config gets from the spec itself, never from [config].
SPEC_OWNED_KEYS = {
    "node.id": "it comes from the table name [nodes.N]",
    "zookeeper.connect": "it comes from [zookeeper]",
}


class SpecError(ValueError):
    """The spec is wrong; ``problems`` holds one line per mistake."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def suggest(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest known word, or ''."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class HostSpec:
    """One machine (or test host) and how commands reach it."""

    name: str
    via: str
    address: str
    data_dir: str
    actorlog: str
    python: str
    netns: str = ""
    user: str | None = None
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    control_master: bool = False

    @property
    def ssh_target(self) -> str:
        return f"{self.user}@{self.address}" if self.user else self.address


@dataclass(frozen=True)
class ZooKeeperSpec:
    """Either servers `cluster up` starts (``hosts``, on ``port``) or an ensemble to use.

    More than one host makes an ensemble: server ids 1..n in the order of
    ``hosts``, talking to each other on ``quorum_port`` and ``election_port``.
    """

    hosts: tuple[str, ...] = ()
    port: int = DEFAULT_ZOOKEEPER_PORT
    connect: str | None = None
    quorum_port: int = DEFAULT_QUORUM_PORT
    election_port: int = DEFAULT_ELECTION_PORT

    @property
    def ensemble(self) -> bool:
        return len(self.hosts) > 1


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    host: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSpec:
    path: Path
    name: str
    state_dir: Path
    hosts: dict[str, HostSpec]
    zookeeper: ZooKeeperSpec
    nodes: dict[int, NodeSpec]
    config: dict[str, Any]
    # [cluster] client_config: Kafka client properties (as `topics --command-config` takes)
    # with which `up` and `status` ask the nodes: its security.protocol picks the listener
    client_config: Path | None = None
    client_settings: dict[str, str] = field(default_factory=dict, repr=False)  # a password

    @property
    def client_unknown_keys(self) -> list[str]:
        """The client_config's keys that `up` and `status` do not use (named in a warning)."""
        from actors.cli.client_config import KNOWN

        return sorted(set(self.client_settings) - KNOWN)

    def connect_string(self) -> str:
        """``zookeeper.connect`` for the nodes: the servers `up` starts, or the given one."""
        if self.zookeeper.connect:
            return self.zookeeper.connect
        return ",".join(f"{self.hosts[h].address}:{self.zookeeper.port}"
                        for h in self.zookeeper.hosts)

    def host_of(self, node_id: int) -> HostSpec:
        return self.hosts[self.nodes[node_id].host]

    def node_ids(self, given: Iterable[int] = ()) -> list[int]:
        """The given node ids (checked), or every node in id order."""
        ids = list(given)
        unknown = [i for i in ids if i not in self.nodes]
        if unknown:
            raise SpecError([f"{self.path}: no node {i} in this spec (nodes: "
                             f"{', '.join(str(n) for n in sorted(self.nodes))})"
                             for i in unknown])
        return ids or sorted(self.nodes)


def load_spec(path: Path | str) -> ClusterSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([f"spec file {p} does not exist"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([f"spec file {p} cannot be read: {exc}"]) from None
    return parse_spec(text, p)


_TWICE = re.compile(r"Cannot (?:declare|overwrite a value|mutate)[^(]*\('nodes', '([^']+)'\)")


def parse_spec(text: str, path: Path) -> ClusterSpec:
    """The spec in ``text`` (``path`` names it in errors and anchors relative paths)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        twice = _TWICE.search(str(exc))
        if twice:
            raise SpecError([f"{path}: node id {twice.group(1)} is declared twice "
                             f"({exc})"]) from None
        raise SpecError([f"{path}: not valid TOML: {exc}"]) from None
    return _Checker(path).check(data)


class _Checker:
    """Collects every problem of one spec, then builds it or raises them all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.resolve().parent
        self.problems: list[str] = []

    def problem(self, where: str, text: str) -> None:
        self.problems.append(f"{self.path}: {where} {text}" if where else f"{self.path}: {text}")

    def unknown_keys(self, where: str, table: dict[str, Any], known: tuple[str, ...]) -> None:
        for key in table:
            if key not in known:
                self.problem(where, f"unknown key {key!r}{suggest(key, known)}")

    def table(self, where: str, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(where, f"must be a table, got {value!r}")
            return {}
        return value

    def string(self, where: str, table: dict[str, Any], key: str,
               default: str | None = None) -> str | None:
        value = table.get(key, default)
        if value is not None and not isinstance(value, str):
            self.problem(where, f"{key} must be a string, got {value!r}")
            return default
        return value

    def port(self, where: str, table: dict[str, Any], key: str, default: int) -> int:
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            self.problem(where, f"{key} must be a port number 1-65535, got {value!r}")
            return default
        return value

    def local_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base / p

    # ------------------------------------------------------------------ spec
    def check(self, data: dict[str, Any]) -> ClusterSpec:
        self.unknown_keys("", data, TOP_KEYS)
        cluster = self.table("[cluster]", data.get("cluster"))
        self.unknown_keys("[cluster]", cluster, CLUSTER_KEYS)
        name = self.string("[cluster]", cluster, "name", self.path.stem) or self.path.stem
        if not NAME_RE.match(name):
            self.problem("[cluster]", f"name {name!r} must be 1-32 letters, digits, '_' or '-' "
                         "(it names network namespaces and directories)")
        state_dir = self.local_path(
            self.string("[cluster]", cluster, "state_dir") or f"{self.path.stem}.cluster")
        data_dir = self.string("[cluster]", cluster, "data_dir")
        local_data = str(self.local_path(data_dir) if data_dir else state_dir / "data")
        client_config, client_settings = self.client_config(cluster)

        host_table = self.table("[hosts]", data.get("hosts"))
        hosts = self.hosts(host_table, name, local_data)
        declared = list(host_table)  # a host with mistakes of its own is still a host
        zookeeper = self.zookeeper(self.table("[zookeeper]", data.get("zookeeper")), declared)
        shared = self.kafka_config("[config]", self.table("[config]", data.get("config")))
        nodes = self.nodes(self.table("[nodes]", data.get("nodes")), declared)
        if not self.problems:
            spec = ClusterSpec(self.path, name, state_dir, hosts, zookeeper, nodes, shared,
                               client_config, client_settings)
            self.cross_checks(spec)
            if not self.problems:
                return spec
        raise SpecError(self.problems)

    def client_config(self, cluster: dict[str, Any]) -> tuple[Path | None, dict[str, str]]:
        from actors.cli.client_config import (
            ClientConfigError,
            kafka_python_settings,
            read_properties,
        )

        given = self.string("[cluster]", cluster, "client_config")
        if not given:
            return None, {}
        path = self.local_path(given)
        try:
            settings = read_properties(path.read_text(encoding="utf-8"))
            kafka_python_settings(settings)  # the files it names exist and load
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            self.problem("[cluster]", f"client_config {path}: {reason or exc}")
            return None, {}
        except ClientConfigError as exc:
            self.problem("[cluster]", f"client_config {path}: {exc}")
            return None, {}
        return path, settings

    def hosts(self, table: dict[str, Any], cluster: str,
              local_data: str) -> dict[str, HostSpec]:
        if not table:
            self.problem("", "has no [hosts.NAME] table: name at least one host")
        hosts: dict[str, HostSpec] = {}
        netns_addresses: dict[str, str] = {}
        for name, raw in table.items():
            where = f"[hosts.{name}]"
            entry = self.table(where, raw)
            if not NAME_RE.match(name):
                self.problem(where, "host names are 1-32 letters, digits, '_' or '-'")
            self.unknown_keys(where, entry, HOST_KEYS)
            via = entry.get("via")
            if via not in VIAS:
                got = "is missing" if via is None else f"is {via!r}"
                self.problem(where, f"via {got}; it must be one of {', '.join(map(repr, VIAS))}"
                             + (suggest(via, VIAS) if isinstance(via, str) else ""))
                continue
            for key in SSH_ONLY_KEYS:
                if key in entry and via != "ssh":
                    self.problem(where, f"{key} applies to via = \"ssh\" hosts only")
            if "netns" in entry and via != "netns":
                self.problem(where, "netns applies to via = \"netns\" hosts only")
            address = self.string(where, entry, "address",
                                  "127.0.0.1" if via == "local" else None)
            if not address:
                self.problem(where, f"address is missing (a via = \"{via}\" host needs one)")
                continue
            if via == "netns":
                self.netns_address(where, address, name, netns_addresses)
            actorlog = self.string(where, entry, "actorlog") or ""
            python = self.string(where, entry, "python") or ""
            data_dir = self.string(where, entry, "data_dir")
            if via == "ssh":
                data_dir = data_dir or f"/var/lib/actorlog/{cluster}"
                if not data_dir.startswith("/"):
                    self.problem(where, f"data_dir {data_dir!r} must be an absolute path on "
                                 "the remote host")
                if not actorlog:
                    actorlog = "actorlog"
            else:
                data_dir = str(self.local_path(data_dir)) if data_dir else local_data
            identity = self.string(where, entry, "identity_file")
            known = self.string(where, entry, "known_hosts")
            control = entry.get("control_master", False)
            if not isinstance(control, bool):
                self.problem(where, f"control_master must be true or false, got {control!r}")
                control = False
            netns = self.string(where, entry, "netns") or f"alog-{cluster}-{name}"
            if via == "netns" and not NETNS_RE.match(netns):
                self.problem(where, f"netns {netns!r} is not a usable namespace name (1-64 "
                             "letters, digits, '.', '_' or '-')")
            hosts[name] = HostSpec(
                name=name, via=via, address=address, data_dir=data_dir,
                actorlog=actorlog, python=python, netns=netns if via == "netns" else "",
                user=self.string(where, entry, "user"),
                port=self.port(where, entry, "port", 22),
                identity_file=str(self.local_path(identity)) if identity else None,
                known_hosts=str(self.local_path(known)) if known else None,
                control_master=control,
            )
        return hosts

    def netns_address(self, where: str, address: str, name: str,
                      seen: dict[str, str]) -> None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            self.problem(where, f"address {address!r} is not an IP address (a netns host "
                         f"needs one in {TEST_NETWORK})")
            return
        if ip not in TEST_NETWORK:
            self.problem(where, f"address {address} is not in {TEST_NETWORK}, the range "
                         "test hosts live in")
        elif ip in (TEST_NETWORK.network_address, TEST_NETWORK.broadcast_address,
                    BRIDGE_ADDRESS):
            self.problem(where, f"address {address} is reserved ({BRIDGE_ADDRESS} is the "
                         "bridge; .0 and .255 are the network and broadcast addresses)")
        elif address in seen:
            self.problem(where, f"address {address} is also the address of "
                         f"[hosts.{seen[address]}]")
        else:
            seen[address] = name

    def zookeeper(self, table: dict[str, Any], hosts: list[str]) -> ZooKeeperSpec:
        where = "[zookeeper]"
        self.unknown_keys(where, table, ZOOKEEPER_KEYS)
        connect = self.string(where, table, "connect")
        names = table.get("hosts", [])
        port = self.port(where, table, "port", DEFAULT_ZOOKEEPER_PORT)
        if not isinstance(names, list) or not all(isinstance(h, str) for h in names):
            self.problem(where, f"hosts must be a list of host names, got {names!r}")
            names = []
        if connect and names:
            self.problem(where, "give hosts (servers `cluster up` starts) or connect (an "
                         "ensemble already running), not both")
        elif not connect and not names:
            self.problem(where, "needs hosts = [\"HOST\"] (a server `cluster up` starts) or "
                         "connect = \"host:port[,host:port...][/chroot]\"")
        if connect:
            self.connect_string(where, connect)
        twice = sorted({h for h in names if names.count(h) > 1})
        if twice:
            self.problem(where, f"hosts names {', '.join(twice)} more than once (one server "
                         "per host)")
        quorum = self.port(where, table, "quorum_port", DEFAULT_QUORUM_PORT)
        election = self.port(where, table, "election_port", DEFAULT_ELECTION_PORT)
        for key in ("quorum_port", "election_port"):
            if key in table and len(names) < 2:
                self.problem(where, f"{key} applies to an ensemble (two or more hosts) that "
                             "`cluster up` starts")
        if len({port, quorum, election}) < 3:
            self.problem(where, f"port {port}, quorum_port {quorum} and election_port "
                         f"{election} must differ")
        for h in names:
            if h not in hosts:
                self.problem(where, f"host {h!r} is not a host of this spec"
                             f"{suggest(h, hosts)} (hosts: {', '.join(hosts) or 'none'})")
        if "port" in table and connect:
            self.problem(where, "port applies to the server `cluster up` starts (hosts), "
                         "not to connect")
        return ZooKeeperSpec(tuple(names), port, connect, quorum, election)

    def connect_string(self, where: str, connect: str) -> None:
        servers, _, chroot = connect.partition("/")
        for server in servers.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                self.problem(where, f"connect {connect!r}: {server.strip()!r} is not "
                             "host:port")
        if chroot and chroot.endswith("/"):
            self.problem(where, f"connect {connect!r}: the chroot must not end with '/'")

    def kafka_config(self, where: str, table: dict[str, Any]) -> dict[str, Any]:
        """The Kafka keys of a [config] table, flattened and type-checked like `serve` would."""
        flat: dict[str, Any] = {}
        for key, value in _flatten(table).items():
            if key in SPEC_OWNED_KEYS:
                self.problem(where, f"{key!r} cannot be set here: {SPEC_OWNED_KEYS[key]}")
            elif key not in CONFIG_SPEC:
                self.problem(where, f"unknown config key {key!r}{suggest(key, CONFIG_SPEC)}")
            else:
                try:
                    Config().update({key: value}, where)
                except ConfigError as exc:
                    self.problems.append(f"{self.path}: {exc}")
                else:
                    flat[key] = value
        return flat

    def nodes(self, table: dict[str, Any], hosts: list[str]) -> dict[int, NodeSpec]:
        if not table:
            self.problem("", "has no [nodes.N] table: name at least one node")
        nodes: dict[int, NodeSpec] = {}
        for key, raw in table.items():
            where = f"[nodes.{key}]"
            entry = self.table(where, raw)
            if not key.isdigit() or int(key) > 2**31 - 1:
                self.problem(where, "node ids are integers from 0 to 2147483647 (Kafka's "
                             "broker.id)")
                continue
            node_id = int(key)
            if node_id in nodes:
                self.problem(where, f"node id {node_id} is declared twice")
                continue
            self.unknown_keys(where, entry, NODE_KEYS)
            host = entry.get("host")
            if not isinstance(host, str):
                self.problem(where, "host is missing: name the host this node runs on")
                continue
            if host not in hosts:
                self.problem(where, f"host {host!r} is not a host of this spec"
                             f"{suggest(host, hosts)} (hosts: {', '.join(hosts) or 'none'})")
                continue
            config = self.kafka_config(f"[nodes.{key}.config]",
                                       self.table(f"[nodes.{key}.config]", entry.get("config")))
            nodes[node_id] = NodeSpec(node_id, host, config)
        return nodes

    # --------------------------------------------------- across the tables
    def cross_checks(self, spec: ClusterSpec) -> None:
        from actors.hosts.node_config import NodePlan  # here: node_config imports this module

        taken: dict[tuple[str, int], str] = {}
        dirs: dict[tuple[str, str], int] = {}
        zk = spec.zookeeper
        addresses = [spec.hosts[h].address for h in zk.hosts]
        for address in sorted({a for a in addresses if addresses.count(a) > 1}):
            sharing = ", ".join(h for h in zk.hosts if spec.hosts[h].address == address)
            self.problem("[zookeeper]", f"hosts {sharing} share the address {address}: each "
                         "server of an ensemble needs its own")
        for h in zk.hosts:
            taken[(h, zk.port)] = "ZooKeeper"
            if zk.ensemble:
                taken[(h, zk.quorum_port)] = "ZooKeeper's quorum port"
                taken[(h, zk.election_port)] = "ZooKeeper's election port"
        for node_id in sorted(spec.nodes):
            try:
                plan = NodePlan.of(spec, node_id)
            except ValueError as exc:
                self.problem(f"[nodes.{node_id}]", str(exc))
                continue
            protocol = spec.client_settings.get("security.protocol", "").strip()
            if plan.client_tls and not protocol.upper().endswith("SSL"):
                if spec.client_config is not None:
                    given = (f"[cluster] client_config {spec.client_config} has "
                             f"security.protocol={protocol or 'PLAINTEXT (the default)'}, "
                             f"which does not reach it: give security.protocol=SSL")
                else:
                    given = ("`cluster up` and `status` reach it with [cluster] client_config, "
                             "a Kafka client properties file (security.protocol=SSL, "
                             "ssl.ca.location=<the CA in PEM>)")
                self.problem(f"[nodes.{node_id}]", f"every listener is TLS (SSL or SASL_SSL): "
                             f"{given}, or give it a PLAINTEXT listener")
            host = plan.host.name
            ports = [("listener", port) for port in plan.listener_ports]
            for what, port in (*ports, ("actor gateway", plan.gateway_port)):
                if port == 0:
                    continue
                other = taken.get((host, port))
                if other is not None:
                    self.problem(f"[nodes.{node_id}]", f"{what} port {port} on host {host} is "
                                 f"also used by {other}; set listeners / actor.gateway.port "
                                 f"in [nodes.{node_id}.config]")
                else:
                    taken[(host, port)] = f"node {node_id}'s {what}"
            key = (host, plan.data_dir)
            if key in dirs:
                self.problem(f"[nodes.{node_id}]", f"log.dirs {plan.data_dir} on host {host} "
                             f"is also node {dirs[key]}'s")
            else:
                dirs[key] = node_id
        self.reachability(spec)

    def reachability(self, spec: ClusterSpec) -> None:
        """A ZooKeeper on a loopback address cannot serve nodes on other hosts."""
        for h in spec.zookeeper.hosts:
            zk = spec.hosts[h]
            if not _is_loopback(zk.address):
                continue
            far = sorted({n.host for n in spec.nodes.values()
                          if n.host != h and spec.hosts[n.host].via != "local"})
            if far:
                self.problem("[zookeeper]", f"the server on {h} ({zk.address}, a loopback "
                             f"address) cannot be reached from host(s) {', '.join(far)}")


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables to dotted keys, as actors.runtime.config reads them."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in CONFIG_SPEC:
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out
