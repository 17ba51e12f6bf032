"""What one node of a spec gets: its config file, its directories, its addresses.

A node listens on its host's address, port 9092, unless its config sets
``listeners``; its data dir (``log.dirs``) defaults to ``node-<id>`` under the
host's ``data_dir``; its gateway for the other nodes (``actor.gateway.*``) is
on the host's address, on the (first) listener's port + 1 unless set. `cluster up`
and `status` ask a node through its first listener of the security.protocol of the spec's
``[cluster] client_config``, else its first PLAINTEXT listener, else its first
SASL_PLAINTEXT one, else (with a client_config that has TLS settings) its first SSL or
SASL_SSL one; they do not log in: on a SASL listener `up` gets its ApiVersions, but
`status` no Metadata, so shows the node not answering.
The node's
config file, its log and its pid file live in its data dir, so one directory
per node holds everything `cluster up` made for it. Every node joins the
spec's cluster: its ``zookeeper.connect`` is the spec's ZooKeeper (a spec
always names one). When `actorlog cluster keys` made CURVE keys for the spec
(``with_keys``), a node's key pair and every node's public key go to
``curve/`` in its data dir and its config names them (``actor.curve.*``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

from actors.hosts.spec import DEFAULT_LISTENER_PORT, ClusterSpec, HostSpec
from actors.security.listeners import (
    Listener,
    SecurityProtocol,
    format_host_port,
    is_wildcard,
    parse_listeners,
)

CONFIG_FILE = "node.toml"
LOG_FILE = "serve.log"
PID_FILE = "serve.pid"
VERSION_FILE = "serve.version"
CLUSTER_KEY = "zookeeper.connect"
CURVE_DIR = "curve"  # in the spec's state dir (made by `cluster keys`) and in each data dir


def parse_listener(value: str) -> tuple[str, int]:
    """(host, port) of the first entry of ``listeners``: ``host:port`` or ``NAME://host:port``."""
    first = value.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    if first.startswith("["):
        host, sep, rest = first[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listeners {value!r} is not host:port")
    return host, int(port)


def _probed(listeners: tuple[Listener, ...], client: dict[str, str]) -> Listener:
    """The listener `cluster up` and `status` ask. The probe speaks TLS with the spec's
    client_config but never logs in, so: with security.protocol=SSL an SSL listener first;
    then PLAINTEXT, SASL_PLAINTEXT (ApiVersions is served before a login; Metadata, which
    `status` asks, is not), and with a client_config of SSL or SASL_SSL an SSL, then a
    SASL_SSL one; else the first (a TLS listener: the spec check refused that)."""
    order = [SecurityProtocol.PLAINTEXT, SecurityProtocol.SASL_PLAINTEXT]
    wanted = client.get("security.protocol", "").strip().upper()
    if wanted == SecurityProtocol.SSL.name:
        order.insert(0, SecurityProtocol.SSL)
    if wanted.endswith("SSL"):
        order += [SecurityProtocol.SSL, SecurityProtocol.SASL_SSL]
    for protocol in order:
        for listener in listeners:
            if listener.security_protocol is protocol:
                return listener
    return listeners[0]


def _logged_in(listeners: tuple[Listener, ...], client: dict[str, str],
               probed: Listener) -> Listener:
    """The listener a client with the spec's client_config (status's admin client) uses:
    the first of its security.protocol, else the probed one."""
    wanted = client.get("security.protocol", "").strip().upper()
    return next((listener for listener in listeners
                 if listener.security_protocol.name == wanted), probed)


def curve_key_paths(data_dir: str, node_id: int) -> tuple[str, str]:
    """Where a node's config names its secret key file and public keys dir when the spec's
    config does not: ``curve/`` in its data dir."""
    keys = PurePosixPath(data_dir) / CURVE_DIR
    return str(keys / f"node-{node_id}.key_secret"), str(keys / "public")


@dataclass(frozen=True)
class NodePlan:
    """Everything about one node that follows from the spec (no I/O)."""

    node_id: int
    host: HostSpec
    config: dict[str, Any]
    listen_port: int
    client_address: str
    gateway_port: int
    data_dir: str
    listener_ports: tuple[int, ...] = ()  # every listener's (the first is listen_port)
    client_protocol: str = "PLAINTEXT"  # the security protocol of client_address
    # where a client with the spec's client_config connects (its security.protocol's
    # listener; status's admin client logs in there): client_address if none matches
    login_address: str = ""

    @property
    def client_tls(self) -> bool:
        return self.client_protocol.endswith("SSL")

    @classmethod
    def of(cls, spec: ClusterSpec, node_id: int, with_keys: bool = False) -> NodePlan:
        node = spec.nodes[node_id]
        host = spec.hosts[node.host]
        merged: dict[str, Any] = {**spec.config, **node.config}
        values: dict[str, Any] = {
            "node.id": node_id,
            "node.name": f"node-{node_id}",
        }
        listeners = str(merged.get("listeners", format_host_port(host.address,
                                                                 DEFAULT_LISTENER_PORT)))
        listen_port = parse_listener(listeners)[1]  # the first: the gateway's default is next
        protocols = str(merged.get("listener.security.protocol.map", ""))
        bound = parse_listeners(listeners, protocols)
        advertised = str(merged.get("advertised.listeners", ""))
        if advertised:
            told = parse_listeners(advertised, protocols, "advertised.listeners",
                                   distinct_ports=False)
        else:
            told = tuple(replace(b, host=host.address) if is_wildcard(b.host) else b
                         for b in bound)
            if told != bound:  # clients cannot connect to a wildcard
                values["advertised.listeners"] = (
                    format_host_port(told[0].host, told[0].port) if "://" not in listeners
                    else ",".join(t.connection_string for t in told))
        probed = _probed(told, spec.client_settings)
        login = _logged_in(told, spec.client_settings, probed)
        adv_host, adv_port = probed.host, probed.port
        values["listeners"] = listeners
        gateway_port = int(merged.get("actor.gateway.port",
                                      listen_port + 1 if listen_port else 0))
        values["actor.gateway.host"] = host.address
        values["actor.gateway.port"] = gateway_port
        data_dir = str(merged.get("log.dirs", "")).split(",")[0].strip()
        if not data_dir:
            data_dir = str(PurePosixPath(host.data_dir) / f"node-{node_id}")
            values["log.dirs"] = data_dir
        values[CLUSTER_KEY] = spec.connect_string()
        if with_keys:  # unless the spec's config names key files of its own
            secret, public_dir = curve_key_paths(data_dir, node_id)
            values["actor.curve.secret.key.file"] = secret
            values["actor.curve.public.keys.dir"] = public_dir
        values.update(merged)
        return cls(node_id, host, values, listen_port, format_host_port(adv_host, adv_port),
                   gateway_port, data_dir, tuple(b.port for b in bound),
                   probed.security_protocol.name, format_host_port(login.host, login.port))

    @property
    def config_path(self) -> str:
        return str(PurePosixPath(self.data_dir) / CONFIG_FILE)

    @property
    def log_path(self) -> str:
        return str(PurePosixPath(self.data_dir) / LOG_FILE)

    @property
    def version_path(self) -> str:
        return str(PurePosixPath(self.data_dir) / VERSION_FILE)

    @property
    def pid_path(self) -> str:
        return str(PurePosixPath(self.data_dir) / PID_FILE)

    def config_text(self) -> str:
        header = (f"# node {self.node_id} on host {self.host.name}, written by "
                  f"`actorlog cluster` from the spec; edits are overwritten by `cluster up`.\n")
        return header + render_toml(self.config)


def render_toml(values: dict[str, Any]) -> str:
    """Flat quoted keys, one per line, sorted; tomllib reads it back to the same values."""
    return "".join(f"{_toml_string(k)} = {_toml_value(v)}\n" for k, v in sorted(values.items()))


def _toml_string(text: str) -> str:
    # JSON's escapes are TOML's, except that TOML wants DEL escaped too.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_string(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")
