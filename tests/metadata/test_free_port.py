"""The port picker that tests, benchmarks and `actorlog zk` use for servers they start."""

from __future__ import annotations

import socket
from pathlib import Path

from actors.metadata.zk_server import free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)  # one process never gets a port twice
    assert all(10000 <= port < low for port in ports)  # never one an outgoing socket may take
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
