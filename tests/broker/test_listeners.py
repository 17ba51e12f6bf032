"""Listeners: IPv6 addresses and the address advertised to clients."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from tests.broker.simple_clients import consume_all, produce
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients]


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
def test_an_ipv6_listener_serves_real_clients(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", host="::1").start()
    try:
        assert broker.bootstrap.startswith("[::1]:")
        produce(broker.bootstrap, "six", [b"one", b"two"])
        assert consume_all(broker.bootstrap, "six", 2) == [b"one", b"two"]
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            [node] = admin.describe_cluster()["brokers"]
            assert (node["host"], node["port"]) == ("::1", broker.port)
        finally:
            admin.close()
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_advertised_listeners_is_what_metadata_tells_clients(tmp_path: Path) -> None:
    """--advertised-listeners sets advertised.listeners: the address in Metadata."""
    broker = BrokerProcess(tmp_path / "data")
    broker.extra_args = ("--advertised-listeners", f"localhost:{broker.port}")
    broker.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            [node] = admin.describe_cluster()["brokers"]
            assert (node["host"], node["port"]) == ("localhost", broker.port)
        finally:
            admin.close()
        produce(broker.bootstrap, "adv", [b"x"])  # the client follows the advertised name
        assert consume_all(broker.bootstrap, "adv", 1) == [b"x"]
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
