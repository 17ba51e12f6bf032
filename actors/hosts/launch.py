"""Launchers: nodes and ZooKeeper as detached processes on a host, known by their pid files.

A node is ``actorlog serve --config <data dir>/node.toml`` with its output in
``<data dir>/serve.log`` and its pid in ``<data dir>/serve.pid``; a ZooKeeper
server is ``python -m actors.metadata.zk_server`` in ``<host data dir>/zookeeper``
(the wrapper runs the JVM server and stops it on SIGTERM). A pid file is
trusted only while ``ps`` shows that pid running a command line that holds the
process's own marker (the node's config path, the ZooKeeper directory), so a
pid reused by something else is never signalled.

Stopping is SIGTERM, then SIGKILL after a bound; a paused process is
continued first, so it can act on the SIGTERM.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from actors.hosts.node_config import NodePlan
from actors.hosts.runner import HostError, ProcessInfo, Runner, actorlog_command, python_command
from actors.hosts.spec import HostSpec
from actors.metadata.zk_server import Peer

STOP_TIMEOUT_S = 30.0
ZOOKEEPER_DIR = "zookeeper"


class NotExitedError(HostError):
    """A process outlived its SIGKILL: its host answered (the kernel holds it, a D state)."""


class StartError(RuntimeError):
    """A process did not start or did not become ready; says where, what and its log's tail."""

    def __init__(self, label: str, host: str, command: str, reason: str, log_tail: str) -> None:
        super().__init__(f"{label} on host {host}: {reason}\n  command: {command}\n"
                         f"  last lines of its log:\n" +
                         "\n".join(f"    {line}" for line in log_tail.splitlines()))
        self.label = label
        self.host = host
        self.command = command
        self.reason = reason
        self.log_tail = log_tail


@dataclass
class ManagedProcess:
    """One detached process on a host (see the module docstring)."""

    runner: Runner
    label: str
    command: list[str]
    cwd: str
    log_path: str
    pid_path: str
    marker: str

    @property
    def host(self) -> HostSpec:
        return self.runner.host

    def start(self) -> int:
        return self.runner.start_detached(self.command, cwd=self.cwd, log_path=self.log_path,
                                          pid_path=self.pid_path)

    def pid(self) -> int | None:
        return self.runner.read_pid(self.pid_path)

    def info(self) -> ProcessInfo | None:
        """The process if its pid file names a live process of ours, else None."""
        pid = self.pid()
        if pid is None:
            return None
        info = self.runner.process(pid)
        if info is None or not info.alive or self.marker not in info.args:
            return None
        return info

    def send(self, signame: str) -> int:
        """Signal the running process and the processes it started (its process group,
        which it leads: started detached); its pid. HostError if it is not running.

        A node of several processes (num.processes) is one node: SIGSTOP to the first
        alone left the others serving, a pause of half a node."""
        info = self.info()
        if info is None or not self.runner.signal(info.pid, signame, group=True):
            raise HostError(f"{self.label} on host {self.host.name} is not running")
        return info.pid

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> str:
        """'not running', 'stopped' (exited on SIGTERM) or 'killed' (SIGKILL after the bound)."""
        info = self.info()
        if info is None:
            return "not running"
        if info.paused:  # (its group: `send` paused all of it)
            self.runner.signal(info.pid, "CONT", group=True)
        self.runner.signal(info.pid, "TERM")
        if self.wait_exit(info.pid, timeout_s):
            return "stopped"
        # its group: a process of the node stuck in its shutdown keeps its listener (the
        # SO_REUSEPORT socket it shares) and would answer for the next start
        self.runner.signal(info.pid, "KILL", group=True)
        if not self.wait_exit(info.pid, 10.0):
            raise NotExitedError(f"{self.label} on host {self.host.name} (pid {info.pid}) did "
                                 "not exit after SIGKILL")
        return "killed"

    def wait_exit(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.runner.process(pid)
            if info is None or not info.alive or self.marker not in info.args:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        return self.runner.read_tail(self.log_path, lines)

    def start_error(self, reason: str) -> StartError:
        return StartError(self.label, self.host.name, self.runner.describe(self.command),
                          reason, self.log_tail())


def node_process(runner: Runner, plan: NodePlan) -> ManagedProcess:
    command = [actorlog_command(runner.host), "serve", "--config", plan.config_path]
    return ManagedProcess(runner, f"node {plan.node_id}", command, plan.data_dir,
                          plan.log_path, plan.pid_path, plan.config_path)


def write_node_config(runner: Runner, plan: NodePlan) -> None:
    runner.makedirs(plan.data_dir)
    runner.write_file(plan.config_path, plan.config_text())


@dataclass
class ZooKeeperProcess(ManagedProcess):
    """The zk_server wrapper; stopping it also makes sure its JVM is gone."""

    port: int = 0

    @property
    def directory(self) -> str:
        return self.cwd

    def server_pid(self) -> int | None:
        """The JVM's pid, as the wrapper logged it ("ZooKeeper started (pid N)")."""
        found = re.findall(r"ZooKeeper (?:started|serving on \S+) \(pid (\d+)\)",
                           self.log_tail(200))
        return int(found[-1]) if found else None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> str:
        java = self.server_pid()
        outcome = super().stop(timeout_s)
        if java is not None:
            info = self.runner.process(java)
            zoo_cfg = str(PurePosixPath(self.directory) / "zoo.cfg")
            if info is not None and info.alive and zoo_cfg in info.args:
                self.runner.signal(java, "KILL")  # the wrapper was killed before it could
                outcome = "killed"
        return outcome


def zookeeper_process(runner: Runner, port: int, server_id: int = 0,
                      peers: Sequence[Peer] = (), serve_timeout_s: float = 120.0
                      ) -> ZooKeeperProcess:
    """The wrapper for a standalone server, or for member ``server_id`` of ``peers``."""
    host = runner.host
    name = f"{ZOOKEEPER_DIR}-{server_id}" if peers else ZOOKEEPER_DIR
    directory = str(PurePosixPath(host.data_dir) / name)
    command = [python_command(host), "-m", "actors.metadata.zk_server", "--dir", directory,
               "--host", host.address, "--port", str(port)]
    if peers:
        command += ["--server-id", str(server_id), "--serve-timeout", f"{serve_timeout_s:g}"]
        for p in peers:
            command += ["--peer", f"{p.server_id}={p.host}:{p.client_port}:{p.quorum_port}:"
                                  f"{p.election_port}"]
    label = f"ZooKeeper {server_id}" if peers else "ZooKeeper"
    return ZooKeeperProcess(runner, label, command, directory,
                            str(PurePosixPath(directory) / "zk_server.out"),
                            str(PurePosixPath(directory) / "zk_server.pid"),
                            f"--dir {directory}", port)
