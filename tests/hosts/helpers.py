"""Small helpers for the host tests: a host spec for a test host, waiting for a port."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path

from actors.hosts.netns import TestHost
from actors.hosts.spec import HostSpec
from tests.fixtures.waiting import wait_for

ACTORLOG = str(Path(sys.executable).parent / "actorlog")


def netns_host_spec(host: TestHost, data_dir: Path, name: str = "h") -> HostSpec:
    return HostSpec(name=name, via="netns", address=host.address, data_dir=str(data_dir),
                    actorlog="", python="", netns=host.netns)


def answers(address: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if a TCP connection to address:port is accepted within timeout_s."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until(predicate: Callable[[], object], timeout_s: float = 30.0,
               what: str = "condition") -> None:
    """tests.fixtures.waiting.wait_for, with the host tests' argument names."""
    wait_for(predicate, what, timeout_s, interval=0.05)


def http_get(address: str, port: int, timeout_s: float = 5.0) -> bytes:
    with socket.create_connection((address, port), timeout=timeout_s) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)
