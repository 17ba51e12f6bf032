"""Kafka's ``listeners`` / ``advertised.listeners`` / ``listener.security.protocol.map``.

A listener is ``NAME://host:port``: the name is either a security protocol
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or, when
``listener.security.protocol.map`` is given, any name the map gives a
protocol (``INTERNAL:SSL,EXTERNAL:SASL_SSL``). actorlog also takes a bare
``host:port`` (its form before listeners had names), which is PLAINTEXT.
IPv6 hosts go in brackets (``SSL://[::1]:9093``); an empty host binds every
interface, as in Kafka.

Every mistake is a :class:`ListenerError` whose message is one line naming
the key and the offending entry, meant to be shown to the user as it is.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class SecurityProtocol(StrEnum):
    """Kafka's security protocols: transport (plain or TLS) times authentication (none or SASL)."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


PROTOCOL_NAMES = tuple(p.value for p in SecurityProtocol)
DEFAULT_PROTOCOL_MAP: dict[str, SecurityProtocol] = {p.value: p for p in SecurityProtocol}
"""Kafka's default ``listener.security.protocol.map``: each protocol names itself."""


class ListenerError(ValueError):
    """A ``listeners``-family value that cannot be used; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: its name, the protocol it speaks, and where it binds (or is reached)."""

    name: str
    security_protocol: SecurityProtocol
    host: str  # "" binds every interface
    port: int

    @property
    def connection_string(self) -> str:
        """``NAME://host:port`` with an IPv6 host in brackets, as Kafka writes endpoints."""
        return f"{self.name}://{format_host_port(self.host, self.port)}"

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host


def format_host_port(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (the one definition; the broker imports it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_error(host: str, port: int) -> OSError | None:
    """Why binding ``host:port`` fails (its errno; None: it can be bound). SO_REUSEADDR,
    as ZeroMQ's tcp listener and the broker's listeners set it: a port in TIME_WAIT is
    free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc
    return None


def parse_protocol_map(text: str, what: str = "listener.security.protocol.map"
                       ) -> dict[str, SecurityProtocol]:
    """``NAME:PROTOCOL,...`` into a map; empty text is Kafka's default map."""
    if not text.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, SecurityProtocol] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ListenerError(f"{what}: {entry!r} is not NAME:PROTOCOL "
                                f"(e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL)")
        if protocol not in PROTOCOL_NAMES:
            raise ListenerError(f"{what}: {entry!r}: unknown security protocol {protocol!r}; "
                                f"use one of {', '.join(PROTOCOL_NAMES)}")
        if name in out:
            raise ListenerError(f"{what}: listener name {name} is mapped twice")
        out[name] = SecurityProtocol(protocol)
    return out


def _split_host_port(entry: str, rest: str, what: str) -> tuple[str, int]:
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0 or rest[close + 1:close + 2] != ":":
            raise ListenerError(f"{what}: {entry!r}: an IPv6 address goes in brackets "
                                f"followed by :PORT, as [::1]:9092")
        host, port_text = rest[1:close], rest[close + 2:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ListenerError(f"{what}: {entry!r}: {host!r} is not an IPv6 address") from None
    else:
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise ListenerError(f"{what}: {entry!r} has no port; write HOST:PORT "
                                f"(e.g. PLAINTEXT://127.0.0.1:9092)")
        if ":" in host:
            raise ListenerError(f"{what}: {entry!r}: put an IPv6 address in brackets, "
                                f"as [{host}]:{port_text}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ListenerError(f"{what}: {entry!r}: port {port_text!r} must be a number "
                            f"from 0 to 65535")
    if any(c.isspace() or c in "/@?#" for c in host):
        raise ListenerError(f"{what}: {entry!r}: {host!r} is not a host name or address")
    return host, int(port_text)


def parse_listeners(text: str, protocol_map: str | dict[str, SecurityProtocol] = "",
                    what: str = "listeners", distinct_ports: bool = True
                    ) -> tuple[Listener, ...]:
    """Parse a comma-separated listener list (Kafka's rules, plus the bare ``host:port``).

    Names must be distinct; so must ports when ``distinct_ports`` (``listeners``;
    Kafka lets advertised listeners share a port).
    """
    protocols = (parse_protocol_map(protocol_map) if isinstance(protocol_map, str)
                 else protocol_map)
    out: list[Listener] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, rest = entry.partition("://")
        if not sep:
            name, rest = SecurityProtocol.PLAINTEXT.value, entry
        name = name.strip().upper()
        if not name:
            raise ListenerError(f"{what}: {entry!r} has no listener name before '://'")
        protocol = protocols.get(name)
        if protocol is None:
            known = ", ".join(sorted(protocols))
            raise ListenerError(
                f"{what}: {entry!r}: no security protocol for listener name {name}; use one "
                f"of {known} or map it in listener.security.protocol.map")
        host, port = _split_host_port(entry, rest.strip(), what)
        out.append(Listener(name, protocol, host, port))
    if not out:
        raise ListenerError(f"{what} is empty; give at least one listener, "
                            f"e.g. PLAINTEXT://127.0.0.1:9092")
    _check_distinct(out, what, distinct_ports)
    return tuple(out)


def _check_distinct(listeners: Iterable[Listener], what: str, distinct_ports: bool) -> None:
    names: set[str] = set()
    ports: dict[int, str] = {}
    for listener in listeners:
        if listener.name in names:
            raise ListenerError(f"{what}: listener name {listener.name} appears twice; "
                                f"each listener needs its own name")
        names.add(listener.name)
        if distinct_ports and listener.port != 0:
            if listener.port in ports:
                raise ListenerError(f"{what}: {ports[listener.port]} and {listener.name} "
                                    f"both use port {listener.port}")
            ports[listener.port] = listener.name


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def advertised_listeners(listeners: tuple[Listener, ...], text: str,
                         protocol_map: str | dict[str, SecurityProtocol] = "",
                         what: str = "advertised.listeners") -> tuple[Listener, ...]:
    """What clients are told: ``advertised.listeners``, or the listeners themselves.

    As Kafka: advertised names must be names of ``listeners`` with the same
    protocol, and no advertised address may be a wildcard (clients cannot
    connect to 0.0.0.0).
    """
    if not text.strip():
        advertised = listeners
        what = f"listeners (advertised, as {what} is not set)"
    else:
        advertised = parse_listeners(text, protocol_map, what, distinct_ports=False)
        bound = {listener.name: listener for listener in listeners}
        for listener in advertised:
            if listener.name not in bound:
                raise ListenerError(
                    f"{what}: {listener.connection_string}: listener name {listener.name} "
                    f"is not among listeners ({', '.join(bound)})")
    for listener in advertised:
        if is_wildcard(listener.host):
            raise ListenerError(
                f"{what}: {listener.connection_string} binds every address, which clients "
                f"cannot connect to; set advertised.listeners to an address clients can "
                f"reach, e.g. {listener.name}://127.0.0.1:{listener.port}")
    return advertised
