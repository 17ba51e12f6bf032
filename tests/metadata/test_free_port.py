"""The port picker that tests, benchmarks and `actorlog zk` use for servers they start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from actors.metadata.zk_server import ZooKeeperServer, ZooKeeperStartError, free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACTORLOG_PORT_RANGE", raising=False)
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)  # one process never gets a port twice
    assert all(10000 <= port < low for port in ports)  # never one an outgoing socket may take
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_range_in_the_environment_bounds_the_picks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite gives each xdist worker a block of its own (tests/conftest.py)."""
    monkeypatch.setenv("ACTORLOG_PORT_RANGE", "20000-20049")
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20 and all(20000 <= port <= 20049 for port in ports)


def test_a_zookeeper_whose_port_another_one_serves_fails_to_start(tmp_path: Path) -> None:
    """Two servers given one port: the second must not take the first's answers for its
    own (two test clusters would share one ZooKeeper, their node ids colliding)."""
    first = ZooKeeperServer(tmp_path / "first", free_port())
    first.start()
    try:
        first.wait_serving()
        second = ZooKeeperServer(tmp_path / "second", first.client_port)
        second.start()
        try:
            with pytest.raises(ZooKeeperStartError, match=r"served by another ZooKeeper|exited"):
                second.wait_serving()
        finally:
            second.stop()
    finally:
        first.stop()
