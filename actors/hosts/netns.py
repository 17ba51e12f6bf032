"""Test hosts: network namespaces on this machine, each a host with its own network stack.

A test host is a namespace with loopback up and one veth pair: ``eth0``
inside holds the host's address in 198.18.0.0/24, the other end
(``alog-<last octet>``) is a port of the bridge ``alog-br0`` in the root
namespace, which holds 198.18.0.1/24. So the hosts reach each other and this
machine reaches them all (clients here use the hosts' addresses), and
nothing is routed anywhere else: the namespaces have no default route and
the bridge does not forward to other interfaces.

Making them needs root and ``ip`` (iproute2). Every function here is a few
``ip`` commands; :func:`create_host` removes what it made if a later step
fails, :func:`remove_host` removes exactly one host, and the bridge is
removed only by whoever made it, once no host is attached to it.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass

from actors.hosts.spec import BRIDGE_ADDRESS, TEST_NETWORK

BRIDGE = "alog-br0"
INNER_IFACE = "eth0"


class NetnsError(RuntimeError):
    """A namespace could not be made, changed or removed; the message says which command."""


def unavailable_reason() -> str | None:
    """Why test hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return f"network namespaces need root (this runs as uid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "`ip` (Debian package iproute2) is not installed"
    return None


def ip(*args: str, namespace: str | None = None, check: bool = True,
       input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["-n", namespace] if namespace else []), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, input=input_text,
                          stdin=None if input_text is not None else subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or proc.stdout}")
    return proc


def veth_name(address: str) -> str:
    """The root-side end of a host's veth pair, named after its address's last octet."""
    return f"alog-{ipaddress.ip_address(address).packed[-1]}"


@dataclass(frozen=True)
class TestHost:
    """A namespace ``netns`` holding ``address`` on its eth0; ``veth`` is the bridge side."""

    __test__ = False  # not a pytest test class, despite the name

    netns: str
    address: str

    @property
    def veth(self) -> str:
        return veth_name(self.address)


# ------------------------------------------------------------------ queries
def namespaces() -> set[str]:
    out = ip("netns", "list").stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def link_exists(name: str, namespace: str | None = None) -> bool:
    return ip("link", "show", "dev", name, namespace=namespace, check=False).returncode == 0


def link_is_up(name: str) -> bool:
    out = ip("-o", "link", "show", "dev", name).stdout
    flags = out.split("<", 1)[1].split(">", 1)[0].split(",") if "<" in out else []
    return "UP" in flags


def bridge_ports() -> list[str]:
    out = ip("-o", "link", "show", "master", BRIDGE, check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def address_holder(address: str) -> str | None:
    """Which namespace ('' for the root one) already has ``address``, if any."""
    def has(out: str) -> bool:
        return any(f" {address}/" in line for line in out.splitlines())

    if has(ip("-o", "-4", "addr", "show").stdout):
        return ""
    for ns in sorted(namespaces()):
        if has(ip("-o", "-4", "addr", "show", namespace=ns, check=False).stdout):
            return ns
    return None


def namespace_pids(netns: str) -> list[int]:
    out = ip("netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


# ------------------------------------------------------------------ changes
def ensure_bridge() -> bool:
    """The bridge with 198.18.0.1/24, up; True if this call made it."""
    gateway = f"{BRIDGE_ADDRESS}/{TEST_NETWORK.prefixlen}"
    if link_exists(BRIDGE):
        if f" {BRIDGE_ADDRESS}/" not in ip("-o", "-4", "addr", "show", "dev", BRIDGE).stdout:
            raise NetnsError(f"bridge {BRIDGE} exists without {gateway}; remove it "
                             f"(ip link del {BRIDGE}) or give it that address")
        return False
    holder = address_holder(str(BRIDGE_ADDRESS))
    if holder is not None:
        raise NetnsError(f"{BRIDGE_ADDRESS} is already in use (namespace "
                         f"{holder or 'root'}); test hosts need it for their bridge")
    ip("link", "add", BRIDGE, "type", "bridge")
    try:
        ip("addr", "add", gateway, "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
    except NetnsError:
        ip("link", "del", BRIDGE, check=False)
        raise
    return True


def remove_bridge_if_unused() -> bool:
    """Remove the bridge when no host is attached; True if it was removed."""
    if not link_exists(BRIDGE) or bridge_ports():
        return False
    ip("link", "del", BRIDGE)
    return True


def create_host(netns: str, address: str) -> TestHost:
    """A new namespace with ``address`` on eth0, attached to the bridge (which must exist)."""
    host = TestHost(netns, address)
    if netns in namespaces():
        raise NetnsError(f"network namespace {netns} already exists")
    holder = address_holder(address)
    if holder is not None:
        raise NetnsError(f"address {address} is already in use (namespace {holder or 'root'})")
    if link_exists(host.veth):
        raise NetnsError(f"interface {host.veth} (for {address}) already exists")
    ip("netns", "add", netns)
    try:
        ip("link", "add", host.veth, "type", "veth", "peer", "name", INNER_IFACE,
           "netns", netns)
        ip("link", "set", host.veth, "master", BRIDGE)
        ip("link", "set", host.veth, "up")
        ip("addr", "add", f"{address}/{TEST_NETWORK.prefixlen}", "dev", INNER_IFACE,
           namespace=netns)
        ip("link", "set", INNER_IFACE, "up", namespace=netns)
        ip("link", "set", "lo", "up", namespace=netns)
    except NetnsError:
        ip("link", "del", host.veth, check=False)
        ip("netns", "del", netns, check=False)
        raise
    return host


def remove_host(host: TestHost) -> None:
    """Remove the veth pair and the namespace (whatever of them still exists)."""
    if link_exists(host.veth):
        ip("link", "del", host.veth)
    if host.netns in namespaces():
        ip("netns", "del", host.netns)


def set_link(host: TestHost, up: bool) -> None:
    """Cut (down) or restore (up) the host's link: its bridge-side veth end."""
    ip("link", "set", host.veth, "up" if up else "down")
