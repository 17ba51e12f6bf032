"""Small helpers for the host tests: a host spec for a test host, waiting for a port, a
server on a test host."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from pathlib import Path

from actors.hosts.netns import TestHost
from actors.hosts.runner import Runner
from actors.hosts.spec import HostSpec
from actors.metadata.zk_server import free_port
from tests.fixtures.pids import HeldProcess, in_netns, running
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


def two_local_nodes_spec(zk_connect: str, config: str = "") -> tuple[str, list[int]]:
    """A spec of two nodes on this machine (via = "local") on free loopback ports, with
    ``config`` as the body of its [config] table; the ports are listener 1, gateway 1,
    listener 2, gateway 2."""
    ports = [free_port() for _ in range(4)]
    table = f"[config]\n{config}\n" if config else ""
    nodes = "".join(
        f'[nodes.{i}]\nhost = "here"\nconfig = {{"listeners" = "127.0.0.1:{ports[2 * i - 2]}", '
        f'"actor.gateway.port" = {ports[2 * i - 1]}}}\n' for i in (1, 2))
    return (f'\n[hosts.here]\nvia = "local"\n[zookeeper]\nconnect = "{zk_connect}"\n'
            f"{table}{nodes}"), ports


def serve_http(runner: Runner, host: TestHost, directory: Path, port: int = 8000) -> HeldProcess:
    """A real server (Python's http.server) on a test host, held (tests/fixtures/pids.py:
    it is not this process's child, and once it exited its pid may be another's)."""
    command = [sys.executable, "-m", "http.server", "--bind", host.address, str(port)]
    pid = runner.start_detached(command, cwd=str(directory),
                                log_path=str(directory / "http.log"),
                                pid_path=str(directory / "http.pid"))
    return HeldProcess.take(pid, "the http server", in_netns(host.netns),
                            running(" ".join(command)))
