"""A real ZooKeeper server (the Debian ``zookeeper`` package) run as a child process.

Tests start one standalone server, or a three-server ensemble whose members
they stop and start one by one; a user without a ZooKeeper of their own can
run one in the foreground with ``python -m actors.metadata.zk_server``.
Nothing here is simulated: it is the JVM server from /usr/share/java, with a
config file written into the server's own directory.

The server is tuned to start fast and small (serial GC, C1 only, 128 MB heap,
no admin HTTP server, no JMX) and its ticks are short (``tick_time_ms``), so
the smallest session timeout it grants is ``2 * tick_time_ms``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CONF_DIR = Path("/etc/zookeeper/conf")
# The jar's manifest names its own dependencies; slf4j-simple gives the server a log.
LOG_BINDING_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
JVM_FLAGS = (
    "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData", "-Xshare:auto", "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
)


class ZooKeeperNotInstalled(RuntimeError):
    """The Debian zookeeper package (or java) is missing."""


class ZooKeeperStartError(RuntimeError):
    """The server exited or did not serve in time; the message ends with its log tail."""


_PORTS_GIVEN: set[tuple[str, int]] = set()
_PORT_PICKER = random.SystemRandom()  # not the global generator: tests seed that one


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range() -> tuple[int, int]:
    """Where ports are drawn from: ``ACTORLOG_PORT_RANGE`` (``LOW-HIGH``, inclusive; the
    test suite gives each of its parallel workers a block), else from 10000 to below the
    kernel's ephemeral range."""
    text = os.environ.get("ACTORLOG_PORT_RANGE", "")
    low_s, _, high_s = text.partition("-")
    if low_s.isdigit() and high_s.isdigit() and 1024 <= int(low_s) < int(high_s) < 65536:
        return int(low_s), int(high_s) + 1
    return 10000, max(_ephemeral_low(), 12000)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago, for a server started soon after.

    Picked at random below the kernel's ephemeral range, not with ``bind(0)``: a port the
    kernel hands out is also what it hands the next outgoing connection of any process as
    its local port, so a server started a second later could find it taken (seen with tests
    run in parallel). A port is not given twice by one process (until half the range has
    been given)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    low, high = _port_range()
    if len(_PORTS_GIVEN) > (high - low) // 2:  # those given long ago are bound or let go
        _PORTS_GIVEN.clear()
    for _ in range(200):
        port = _PORT_PICKER.randrange(low, high)
        if (host, port) in _PORTS_GIVEN:
            continue
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _PORTS_GIVEN.add((host, port))
        return port
    with socket.socket(family, socket.SOCK_STREAM) as s:  # a crowded range: the kernel's pick
        s.bind((host, 0))
        return int(s.getsockname()[1])


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a four-letter command (ruok, srvr, mntr, ...); '' if the server does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


def check_installed() -> None:
    if not ZOOKEEPER_JAR.exists():
        raise ZooKeeperNotInstalled(
            f"{ZOOKEEPER_JAR} is missing: install the Debian zookeeper package "
            "(bash deploy/install.sh --zookeeper)")
    if not any((Path(d) / "java").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        raise ZooKeeperNotInstalled("java is not on PATH: install a JRE (default-jre-headless)")


@dataclass(frozen=True)
class Peer:
    """One member of an ensemble: its id and the three ports it listens on."""

    server_id: int
    host: str
    client_port: int
    quorum_port: int
    election_port: int


@dataclass
class ZooKeeperServer:
    """One server process. ``peers`` empty: standalone; else this is member ``server_id``."""

    directory: Path
    client_port: int
    host: str = "127.0.0.1"
    server_id: int = 0
    peers: Sequence[Peer] = ()
    tick_time_ms: int = 500
    max_session_timeout_ms: int = 60_000
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            "initLimit=20",
            "syncLimit=10",
            f"dataDir={self.data_dir}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={2 * self.tick_time_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,cons",
            "autopurge.purgeInterval=0",
            "maxClientCnxns=0",
        ]
        if self.peers:
            lines.append("reconfigEnabled=false")
            lines.append("standaloneEnabled=false")
            lines += [f"server.{p.server_id}={p.host}:{p.quorum_port}:{p.election_port}"
                      for p in self.peers]
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        """Start the process (not waiting for it to serve; see :meth:`wait_serving`)."""
        if self.running():
            return
        check_installed()
        self.write_config()
        classpath = [str(CONF_DIR), str(ZOOKEEPER_JAR)]
        if LOG_BINDING_JAR.exists():
            classpath.append(str(LOG_BINDING_JAR))
        cmd = ["java", *JVM_FLAGS, "-cp", ":".join(classpath), MAIN_CLASS, str(self.config_path)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.directory, start_new_session=True)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def mode(self) -> str:
        """'standalone', 'leader', 'follower' or '' (not serving)."""
        for line in four_letter_word(self.host, self.client_port, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def serves_this_data_dir(self) -> bool:
        """Whether the server on our port is ours: its ``conf`` names our dataDir. (A port
        picked free can be taken by another server before ours binds it; ``srvr`` alone
        would then take the other one for ours, and two clusters would share it.)"""
        for line in four_letter_word(self.host, self.client_port, "conf").splitlines():
            if line.startswith("dataDir="):
                return Path(line.split("=", 1)[1]).resolve().parent == self.data_dir.resolve()
        return False

    def wait_serving(self, timeout_s: float = 30.0) -> None:
        """Until the server answers ``srvr`` with a mode (in an ensemble: it joined a quorum)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} exited (code {code})\n{self.log_tail()}")
            if self.mode():
                if self.serves_this_data_dir():
                    return
                raise ZooKeeperStartError(
                    f"port {self.connect_string} is served by another ZooKeeper "
                    f"(its dataDir is not {self.data_dir})\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ZooKeeperStartError(
                    f"ZooKeeper on {self.connect_string} did not serve within {timeout_s} s\n"
                    f"{self.log_tail()}")
            time.sleep(0.02)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; only this server's own pid."""
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: the server dies without a word to its clients or peers."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class ZooKeeperEnsemble:
    """``size`` servers on one host, each with its own directory and ports."""

    def __init__(self, directory: Path, size: int = 3, host: str = "127.0.0.1",
                 tick_time_ms: int = 500) -> None:
        self.directory = directory
        peers = [Peer(i, host, free_port(host), free_port(host), free_port(host))
                 for i in range(1, size + 1)]
        self.servers = [
            ZooKeeperServer(directory / f"zk{p.server_id}", p.client_port, host=host,
                            server_id=p.server_id, peers=peers, tick_time_ms=tick_time_ms)
            for p in peers
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout_s: float = 60.0) -> None:
        for server in self.servers:
            server.start()
        for server in self.servers:
            server.wait_serving(timeout_s)

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.running() and s.mode() == "leader"), None)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def parse_peer(text: str) -> Peer:
    """``ID=HOST:CLIENT_PORT:QUORUM_PORT:ELECTION_PORT``, one member of an ensemble."""
    sid, sep, rest = text.partition("=")
    host, _, ports = rest.rpartition(":")  # the election port
    host, _, quorum = host.rpartition(":")
    host, _, client = host.rpartition(":")
    if not sep or not host or not all(x.isdigit() for x in (sid, client, quorum, ports)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ID=HOST:CLIENT_PORT:QUORUM_PORT:ELECTION_PORT")
    return Peer(int(sid), host, int(client), int(quorum), int(ports))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m actors.metadata.zk_server",
        description="Run one ZooKeeper server (Debian package) in the foreground: standalone, "
                    "or member --server-id of the ensemble the --peer options name.")
    parser.add_argument("--dir", required=True, type=Path, help="config, data and log directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--server-id", type=int, default=0,
                        help="this server's id (myid) in the ensemble")
    parser.add_argument("--peer", type=parse_peer, action="append", default=[],
                        metavar="ID=HOST:CLIENT:QUORUM:ELECTION",
                        help="a member of the ensemble (every member, this one included)")
    parser.add_argument("--serve-timeout", type=float, default=30.0,
                        help="seconds to wait for the server to serve (an ensemble member: "
                             "for a quorum to form)")
    args = parser.parse_args(argv)
    if args.peer and args.server_id not in {p.server_id for p in args.peer}:
        parser.error(f"--server-id {args.server_id} is not one of the --peer ids")
    server = ZooKeeperServer(args.dir.resolve(), args.port, host=args.host, tick_time_ms=2000,
                             server_id=args.server_id, peers=args.peer)
    args.dir.mkdir(parents=True, exist_ok=True)
    # SIGTERM stops the JVM too, also while this still waits for it to serve
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(f"ZooKeeper started (pid {server.pid})", flush=True)
        server.wait_serving(args.serve_timeout)
    except (ZooKeeperNotInstalled, ZooKeeperStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        server.stop()
        return 1
    except KeyboardInterrupt:
        server.stop()
        return 0
    print(f"ZooKeeper serving on {server.connect_string} (pid {server.pid}); log: "
          f"{server.log_path}; Ctrl-C stops it", flush=True)
    try:
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
