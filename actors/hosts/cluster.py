"""`actorlog cluster`: bring a spec's ZooKeeper and nodes up on their hosts, and down again.

``up`` checks every host first (root for test hosts, ssh and the same
actorlog version, ZooKeeper installed), makes the netns hosts that do not
exist yet, starts ZooKeeper and waits until it serves, writes each node's
config and starts it, waits until every node answers Kafka requests, is
registered in ZooKeeper and a controller is elected, then prints the
bootstrap servers. A failed step names the host,
the command and the tail of its log, and everything this ``up`` started or
made is stopped and removed again unless ``keep``.

What ``up`` made (namespaces, the bridge) and the network faults applied are
recorded in ``<state dir>/state.json``, so ``down`` removes exactly that;
processes are found through their pid files, whose places follow from the
spec.
"""

from __future__ import annotations

import errno
import json
import os
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.core.cluster_model import TopicPartition
from actors.hosts import netns
from actors.hosts.faults import FaultError, Netem, apply_netem, clear_netem, current_netem
from actors.hosts.launch import (
    ManagedProcess,
    NotExitedError,
    StartError,
    ZooKeeperProcess,
    node_process,
    write_node_config,
    zookeeper_process,
)
from actors.hosts.netns import NetnsError, TestHost
from actors.hosts.node_config import CURVE_DIR, NodePlan, curve_key_paths
from actors.hosts.probe import ProbeError, api_versions, metadata
from actors.hosts.runner import (
    HostError,
    LocalRunner,
    NetnsRunner,
    ProcessInfo,
    Runner,
    SshFailed,
    check_version,
    runner_for,
)
from actors.hosts.spec import ClusterSpec, HostSpec
from actors.metadata.zk_server import ZOOKEEPER_JAR, Peer, four_letter_word
from actors.security.listeners import bind_error, parse_listeners
from wire.fingerprint import wire_fingerprint

STATE_FILE = "state.json"
# how long a local node's port held at its start is tried again before `up` refuses it
PORT_FREE_WAIT_S = 5.0
Say = Callable[[str], None]
# a look at a node's processes that failed is looked at again once, this much later
PS_LOOK_AGAIN_S = 0.2


def processes_looked_at_twice(look: Callable[[], dict[int, ProcessInfo]],
                              pause_s: float = PS_LOOK_AGAIN_S) -> dict[int, ProcessInfo]:
    """``look()`` (a node's processes, by ``ps`` on its host), and once more after
    ``pause_s`` when it found none or ssh failed under it: on this host or in a netns a
    failed ``ps`` reads as no process, over ssh a hiccup of the connection is SshFailed
    (exit 255), and either alone is not a node gone. The second look's answer is the
    caller's, an SshFailed raised; any other HostError (a ``ps`` that timed out, none
    installed) is raised at once, as it is on this host."""
    try:
        found = look()
    except SshFailed:
        found = {}
    if found:
        return found
    time.sleep(pause_s)
    return look()


@contextmanager
def open_store(connect: str) -> Iterator[Any]:
    """A short ZooKeeper session through actors.metadata's store (read what nodes wrote)."""
    from actors.metadata.zk import ZkMetadataStore

    store = ZkMetadataStore(connect, lambda _notice: None, session_timeout_ms=6000,
                            connection_timeout_ms=3000)
    store.start()
    try:
        yield store
    finally:
        store.close()


def zookeeper_mode(zk: ZooKeeperProcess) -> str:
    """'standalone', 'leader', 'follower', or '' when the server does not serve."""
    srvr = four_letter_word(zk.host.address, zk.port, "srvr", timeout_s=1.0)
    return next((line.split(":", 1)[1].strip() for line in srvr.splitlines()
                 if line.startswith("Mode:")), "")


def partition_under_replicated(state: dict[str, Any]) -> bool:
    """Fewer in-sync replicas than replicas (a status partition entry)."""
    return len(set(state["isr"]) & set(state["replicas"])) < len(state["replicas"])


def describe_partition(state: dict[str, Any]) -> str:
    return (f"{state['topic']}-{state['partition']}: leader {state['leader']}, "
            f"isr {state['isr']}, replicas {state['replicas']}")


class ClusterError(RuntimeError):
    """A cluster command failed; the message is for the user (one or a few lines)."""


class SupervisorGaveUp(ClusterError):
    """A node stopped while its supervisor was to restart one of its processes (it could
    not, or the process died too often); ``reason``: the node's own line for it."""

    def __init__(self, node_id: int, index: int, reason: str) -> None:
        super().__init__(f"node {node_id} stopped instead of restarting its process {index}: "
                         f"{reason}")
        self.node_id = node_id
        self.index = index
        self.reason = reason


@dataclass
class ClusterState:
    """What `up` made and which network faults are on, kept across commands."""

    bridge_created: bool = False
    hosts: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> netns, address
    isolated: list[str] = field(default_factory=list)
    netem: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise ClusterError(f"{path} cannot be read ({exc}); remove it once the hosts "
                               "it lists are gone") from None
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    def empty(self) -> bool:
        return not (self.bridge_created or self.hosts or self.isolated or self.netem)


def port_held(host: str, port: int) -> bool:
    """Whether binding ``port`` on ``host`` fails as taken (any other failure is left for
    the node's own start to say)."""
    exc = bind_error(host, port)
    return exc is not None and exc.errno == errno.EADDRINUSE


class Cluster:
    """The commands of `actorlog cluster` on one spec; ``say`` prints a progress line."""

    def __init__(self, spec: ClusterSpec, say: Say = print, probe_timeout_s: float = 2.0,
                 stop_timeout_s: float = 30.0) -> None:
        self.spec = spec
        self.say = say
        self.probe_timeout_s = probe_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.state_path = spec.state_dir / STATE_FILE
        self.runners: dict[str, Runner] = {
            name: runner_for(host, spec.state_dir) for name, host in spec.hosts.items()}
        keys = spec.state_dir / CURVE_DIR
        self.keys_dir = keys if (keys / "public").is_dir() else None  # `cluster keys` made them
        self.plans = {i: NodePlan.of(spec, i, with_keys=self.keys_dir is not None)
                      for i in sorted(spec.nodes)}
        self.versions: dict[str, str] = {}  # host -> the actorlog version it runs
        # kafka-python's arguments for the spec's client_config (TLS and SASL settings)
        from actors.cli.client_config import kafka_python_settings

        self.client_security: dict[str, Any] = (
            kafka_python_settings(spec.client_settings) if spec.client_config else {})

    def probe_tls(self, plan: NodePlan) -> ssl.SSLContext | None:
        """The TLS context the probe of this node's listener uses (None: plain TCP)."""
        context = self.client_security.get("ssl_context")
        return context if plan.client_tls and isinstance(context, ssl.SSLContext) else None

    def close(self) -> None:
        for runner in self.runners.values():
            runner.close()

    # ------------------------------------------------------------ pieces
    def node(self, node_id: int) -> ManagedProcess:
        plan = self.plans[node_id]
        return node_process(self.runners[plan.host.name], plan)

    def zookeepers(self) -> list[ZooKeeperProcess]:
        """The servers `up` starts: one standalone, or the members of an ensemble (ids 1..n)."""
        zk = self.spec.zookeeper
        if not zk.ensemble:
            return [zookeeper_process(self.runners[h], zk.port) for h in zk.hosts]
        peers = [Peer(i, self.spec.hosts[h].address, zk.port, zk.quorum_port, zk.election_port)
                 for i, h in enumerate(zk.hosts, start=1)]
        return [zookeeper_process(self.runners[h], zk.port, i, peers)
                for i, h in enumerate(zk.hosts, start=1)]

    def test_host(self, host: HostSpec) -> TestHost:
        return TestHost(host.netns, host.address)

    def bootstrap_servers(self) -> str:
        return ",".join(self.plans[i].client_address for i in self.plans)

    def netns_host_of(self, node_id: int, action: str) -> HostSpec:
        host = self.spec.host_of(node_id)
        if host.via != "netns":
            raise FaultError(f"{action} works on netns test hosts; node {node_id}'s host "
                             f"{host.name} is via = \"{host.via}\"")
        if host.netns not in netns.namespaces():
            raise FaultError(f"host {host.name} (network namespace {host.netns}) does not "
                             "exist: run `cluster up` first")
        return host

    # ----------------------------------------------------------------- up
    def preflight(self) -> None:
        """Everything that can be checked before anything is made or started."""
        # only of the nodes `up` starts: one that runs is left alone, its key files unread
        problems = [problem for node_id in self.plans
                    if (problem := self.key_problem(node_id)) and not self.runs_already(node_id)]
        wanted = {n.host for n in self.spec.nodes.values()} | set(self.spec.zookeeper.hosts)
        test_hosts = [h for h in self.spec.hosts.values() if h.via == "netns"]
        if test_hosts:
            reason = netns.unavailable_reason()
            if reason:
                raise ClusterError(f"netns hosts ({', '.join(h.name for h in test_hosts)}) "
                                   f"cannot be made: {reason}")
            existing = netns.namespaces()
            for host in test_hosts:
                holder = netns.address_holder(host.address)
                if host.netns in existing and holder != host.netns:
                    problems.append(f"host {host.name}: network namespace {host.netns} exists "
                                    f"but does not hold {host.address}")
                elif host.netns not in existing and holder is not None:
                    problems.append(f"host {host.name}: address {host.address} is already "
                                    f"used (namespace {holder or 'root'})")
        for name in sorted(wanted):
            host = self.spec.hosts[name]
            # netns hosts share this machine's files: check there before they exist
            runner = self.runners[name] if host.via == "ssh" else LocalRunner(host)
            try:
                self.versions[name] = check_version(runner)
                if name in self.spec.zookeeper.hosts:
                    found = runner.run(["test", "-e", str(ZOOKEEPER_JAR)], check=False)
                    if found.returncode != 0:
                        problems.append(f"host {name}: {ZOOKEEPER_JAR} is missing: install the "
                                        "Debian zookeeper package there (deploy/install.sh "
                                        "--zookeeper)")
            except HostError as exc:
                problems.append(str(exc))
        if problems:
            raise ClusterError("\n".join(problems))

    def up(self, keep: bool = False, timeout_s: float = 90.0) -> str:
        """Start everything; the bootstrap servers. See the module docstring."""
        spec = self.spec
        self.say(f"cluster {spec.name}: {len(spec.hosts)} host(s), "
                 f"{len(spec.nodes)} node(s), ZooKeeper "
                 + (f"on {', '.join(spec.zookeeper.hosts)}" if spec.zookeeper.hosts
                    else f"at {spec.zookeeper.connect}"))
        state = ClusterState.load(self.state_path)
        started: list[ManagedProcess] = []
        made: list[str] = []
        try:
            self.preflight()
            self.make_hosts(state, made)
            zookeepers = self.zookeepers()
            for zk in zookeepers:  # all first: a member of an ensemble serves with a quorum
                self.start_zookeeper(zk, started)
            for zk in zookeepers:
                self.wait_zookeeper(zk, timeout_s)
            for node_id in self.plans:
                self.start_node(node_id, started)
            for node_id in self.plans:
                self.wait_answering(node_id, timeout_s)
            self.wait_registered(timeout_s)
            self.wait_metadata(timeout_s)
        except (HostError, NetnsError, StartError, ClusterError, KeyboardInterrupt) as exc:
            if isinstance(exc, KeyboardInterrupt):
                exc = ClusterError("interrupted")
            self.say(f"FAILED: {exc}")
            if keep:
                self.say("--keep: leaving what was started and made for inspection; "
                         "`cluster down` removes it")
            else:
                self.roll_back(state, started, made)
            raise ClusterError(f"cluster up failed: {str(exc).splitlines()[0]}") from None
        servers = self.bootstrap_servers()
        self.say(f"bootstrap servers: {servers}")
        return servers

    def make_hosts(self, state: ClusterState, made: list[str]) -> None:
        for host in self.spec.hosts.values():
            if host.via != "netns" or host.netns in netns.namespaces():
                continue
            if netns.ensure_bridge():
                state.bridge_created = True
                state.save(self.state_path)
                self.say(f"made bridge {netns.BRIDGE} ({netns.BRIDGE_ADDRESS}/24)")
            netns.create_host(host.netns, host.address)
            made.append(host.name)
            state.hosts[host.name] = {"netns": host.netns, "address": host.address}
            state.save(self.state_path)
            self.say(f"host {host.name}: made network namespace {host.netns} "
                     f"({host.address}, link {netns.veth_name(host.address)})")

    def start_zookeeper(self, zk: ZooKeeperProcess, started: list[ManagedProcess]) -> None:
        where = f"{zk.label} on {zk.host.name} ({zk.host.address}:{zk.port})"
        running = zk.info()
        if running is not None:
            self.say(f"{where}: already running, pid {running.pid}")
        else:
            zk.runner.makedirs(zk.directory)
            pid = zk.start()
            started.append(zk)
            self.say(f"{where}: started, pid {pid}")

    def wait_zookeeper(self, zk: ZooKeeperProcess, timeout_s: float) -> None:
        where = f"{zk.label} on {zk.host.name} ({zk.host.address}:{zk.port})"
        deadline = time.monotonic() + timeout_s
        while "Mode:" not in four_letter_word(zk.host.address, zk.port, "srvr"):
            if zk.info() is None:
                raise zk.start_error("exited before it served")
            if time.monotonic() > deadline:
                raise zk.start_error(f"did not serve within {timeout_s:g} s")
            time.sleep(0.2)
        mode = zookeeper_mode(zk)
        self.say(f"{where}: serving" + (f" ({mode})" if self.spec.zookeeper.ensemble else ""))

    def make_keys(self, force: bool = False) -> None:
        """`cluster keys`: a CURVE key pair per node in the state dir; `up` hands them out."""
        from actors.security.curve import CurveError, make_node_keys

        out = self.spec.state_dir / CURVE_DIR
        for node_id in sorted(self.spec.nodes):
            try:
                public, _secret = make_node_keys(out, f"node-{node_id}", overwrite=force)
            except CurveError as exc:
                raise ClusterError(str(exc)) from None
            self.say(f"node {node_id}: key {public}")
        self.say(f"keys in {out}; `cluster up` gives each node its key pair and every node's "
                 f"public key (restart running nodes to use them)")

    def missing_keys(self, ids: list[int]) -> list[str]:
        """One line per node whose key pair `cluster keys` made is no longer whole: its
        config names the key files, so it would start only to exit on the missing one (the
        hint in its log, `actorlog keys new`, is not the way for a spec's nodes)."""
        return [problem for problem in map(self.key_problem, ids) if problem]

    def key_problem(self, node_id: int) -> str | None:
        """``missing_keys`` of one node."""
        if self.keys_dir is None:
            return None
        plan = self.plans[node_id]
        secret, _public_dir = curve_key_paths(plan.data_dir, node_id)
        if plan.config.get("actor.curve.secret.key.file") != secret:
            return None  # the spec's config names a key file of its own: the node reads that
        from actors.security.curve import node_key_files

        lost = [str(path) for path in node_key_files(self.keys_dir, f"node-{node_id}")
                if not path.is_file()]
        if not lost:
            return None
        return (f"node {node_id}: its CURVE key pair is not whole ({', '.join(lost)} "
                f"missing): restore it, or make new keys for every node (`actorlog "
                f"cluster keys --spec {self.spec.path} --force`) and restart them all")

    def runs_already(self, node_id: int) -> bool:
        """Whether the node's process runs (`up` leaves it alone); False where that cannot
        be asked (its host's own problem is found by the checks)."""
        plan = self.plans[node_id]
        if self.missing_host(plan.host):
            return False
        try:
            return self.node(node_id).info() is not None
        except HostError:
            return False

    def hand_keys(self, runner: Runner, plan: NodePlan) -> None:
        """The node's CURVE key pair and every node's public key, where its config says."""
        if self.keys_dir is None:
            return
        secret = str(plan.config.get("actor.curve.secret.key.file", ""))
        public_dir = str(plan.config.get("actor.curve.public.keys.dir", ""))
        from actors.security.curve import node_key_files

        mine = node_key_files(self.keys_dir, f"node-{plan.node_id}")[0]
        if not (secret and public_dir and mine.is_file()):
            return
        runner.makedirs(public_dir)
        runner.write_file(secret, mine.read_text(), mode=0o600)
        for key in sorted((self.keys_dir / "public").glob("*.key")):
            runner.write_file(f"{public_dir}/{key.name}", key.read_text())

    def start_node(self, node_id: int, started: list[ManagedProcess]) -> None:
        plan = self.plans[node_id]
        proc = self.node(node_id)
        where = f"node {node_id} on {plan.host.name}"
        running = proc.info()
        if running is not None:
            self.say(f"{where}: already running, pid {running.pid}")
            return
        try:  # another broker there would answer for it: `up` would wait on the wrong one
            api_versions(plan.client_address, self.probe_timeout_s, self.probe_tls(plan))
        except ProbeError:
            pass
        else:
            raise ClusterError(f"{where}: something not started by this spec already answers "
                               f"Kafka requests on {plan.client_address} (another broker?); "
                               "stop it, or give the node another listener in the spec")
        if plan.host.via == "local":
            self.check_ports_free(node_id)
        write_node_config(proc.runner, plan)
        self.hand_keys(proc.runner, plan)
        version = self.versions.get(plan.host.name)
        if version is None:
            version = self.versions[plan.host.name] = check_version(proc.runner)
        proc.runner.write_file(plan.version_path, version + "\n")
        pid = proc.start()
        started.append(proc)
        self.say(f"{where}: started, pid {pid} (config {plan.config_path})")

    def check_ports_free(self, node_id: int) -> None:
        """A node on this machine: each port it would listen on is bound and let go first,
        so that a port another process holds is said at once, by the spec's key (the node
        itself would exit, and `up` would say so only then, by its log's tail).

        A held port is tried again for up to ``PORT_FREE_WAIT_S``: after a stop that ended
        in SIGKILL only the node's main process was waited for, and a child of it may still
        hold its listener (the SO_REUSEPORT socket they share) for a moment."""
        plan = self.plans[node_id]
        protocols = str(plan.config.get("listener.security.protocol.map", ""))
        wanted = [(listener.host, listener.port, "listeners")
                  for listener in parse_listeners(str(plan.config["listeners"]), protocols)]
        # the gateway binds the spec's actor.gateway.host when it names one, else the host's
        gateway_host = str(plan.config.get("actor.gateway.host", plan.host.address))
        wanted.append((gateway_host, plan.gateway_port, "actor.gateway.port"))
        for host, port, key in wanted:
            if not port:
                continue
            deadline = time.monotonic() + PORT_FREE_WAIT_S
            while port_held(host, port):
                if time.monotonic() >= deadline:
                    raise ClusterError(
                        f"node {node_id} on {plan.host.name}: port {port} ({host or '0.0.0.0'}) "
                        f"is still in use after {PORT_FREE_WAIT_S:g} s (another process, or "
                        f"one of an earlier run still exiting); stop it, or give the node "
                        f"another port in the spec: {key} in [nodes.{node_id}.config] "
                        "(or [config])")
                time.sleep(0.2)

    def wait_answering(self, node_id: int, timeout_s: float) -> None:
        plan = self.plans[node_id]
        proc = self.node(node_id)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                api_versions(plan.client_address, self.probe_timeout_s, self.probe_tls(plan))
                break
            except ProbeError as exc:
                last = str(exc)
            if proc.info() is None:
                raise proc.start_error("exited before it answered")
            if time.monotonic() > deadline:
                raise proc.start_error(f"does not answer on {plan.client_address} within "
                                       f"{timeout_s:g} s ({last})")
            time.sleep(0.2)
        self.say(f"node {node_id} on {plan.host.name}: answering on {plan.client_address}")

    def wait_registered(self, timeout_s: float) -> None:
        """Until every node is under /brokers/ids and a controller is elected."""
        want = set(self.plans)
        deadline = time.monotonic() + timeout_s
        with self.store() as store:
            while True:
                registered = set(store.get_brokers())
                controller = store.get_controller()
                if want <= registered and controller is not None:
                    self.say(f"registered in ZooKeeper: {sorted(registered)}; controller: "
                             f"node {controller}")
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"within {timeout_s:g} s not every node registered in ZooKeeper "
                        f"(missing: {sorted(want - registered)}, controller: {controller})")
                time.sleep(0.2)

    def wait_metadata(self, timeout_s: float) -> None:
        """Until every node's Metadata names every node and a controller. A node answers
        with itself alone and no controller until the controller's first UpdateMetadata
        reaches it (seconds after it registered): a client that asked it then found no
        controller (librdkafka's CreateTopics waited for one, and timed out after 30 s).
        A node whose listener closes an unauthenticated Metadata (SASL wants a login
        first) is not waited for; other probe errors (a timeout, a reset) are tried again."""
        want = set(self.plans)
        deadline = time.monotonic() + timeout_s
        for node_id, plan in self.plans.items():
            proc = self.node(node_id)
            while True:
                try:
                    found = metadata(plan.client_address, self.probe_timeout_s, topics=[],
                                     tls=self.probe_tls(plan))
                except ProbeError as exc:
                    if "closed the connection" in str(exc):
                        break  # it answered ApiVersions: a listener that wants a login
                    said = f"its Metadata failed: {exc}"
                else:
                    if want <= set(found.brokers) and found.controller_id >= 0:
                        break
                    said = (f"its Metadata named nodes {sorted(found.brokers)}, controller "
                            f"{found.controller_id}")
                if proc.info() is None:
                    raise proc.start_error("exited before its Metadata named the cluster")
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"within {timeout_s:g} s node {node_id}'s Metadata did not name every "
                        f"node and a controller ({said}); the nodes are registered: "
                        f"`cluster up --keep` leaves them running to look")
                time.sleep(0.1)

    def roll_back(self, state: ClusterState, started: list[ManagedProcess],
                  made: list[str]) -> None:
        for proc in reversed(started):
            try:
                outcome = proc.stop(self.stop_timeout_s)
                self.say(f"rolled back: {proc.label} on {proc.host.name} {outcome}")
            except HostError as exc:
                self.say(f"rolling back: {exc}")
        for name in reversed(made):
            entry = state.hosts.pop(name)
            netns.remove_host(TestHost(entry["netns"], entry["address"]))
            state.save(self.state_path)
            self.say(f"rolled back: removed host {name} ({entry['netns']})")
        if state.bridge_created and not state.hosts and netns.remove_bridge_if_unused():
            state.bridge_created = False
            self.say(f"rolled back: removed bridge {netns.BRIDGE}")
        self.finish_state(state)

    def finish_state(self, state: ClusterState) -> None:
        if state.empty():
            self.state_path.unlink(missing_ok=True)
        else:
            state.save(self.state_path)

    # --------------------------------------------------------------- down
    def down(self) -> None:
        """Stop every node, then ZooKeeper; remove what `up` made; undo network faults."""
        problems: list[str] = []
        host_failed = False
        for proc in [self.node(node_id) for node_id in self.plans] + list(self.zookeepers()):
            try:
                self.say(f"{proc.label} on {proc.host.name}: {proc.stop(self.stop_timeout_s)}")
            except HostError as exc:
                # which process may still run, not only which host failed
                host_failed = host_failed or not isinstance(exc, NotExitedError)
                problems.append(f"{proc.label} on {proc.host.name}: NOT stopped, it may still "
                                f"run: {exc}")
        state = ClusterState.load(self.state_path)
        for name in list(state.isolated) + list(state.netem):
            host = self.spec.hosts.get(name)
            if host is not None and name not in state.hosts and \
                    host.netns in netns.namespaces():
                self.heal_host(host, state)  # a namespace `up` did not make: leave it healed
        state.isolated.clear()
        state.netem.clear()
        for name, entry in list(state.hosts.items()):
            leftovers = netns.namespace_pids(entry["netns"]) \
                if entry["netns"] in netns.namespaces() else []
            if leftovers:
                problems.append(f"host {name}: processes {leftovers} still run in "
                                f"{entry['netns']}; left in place")
                continue
            netns.remove_host(TestHost(entry["netns"], entry["address"]))
            del state.hosts[name]
            state.save(self.state_path)
            self.say(f"host {name}: removed network namespace {entry['netns']}")
        if state.bridge_created and not state.hosts:
            if netns.remove_bridge_if_unused():
                self.say(f"removed bridge {netns.BRIDGE}")
            state.bridge_created = False
        self.finish_state(state)
        if problems:
            if host_failed:
                problems.append("`cluster down` again stops what is left, once its host answers")
            raise ClusterError("\n".join(problems))

    # ------------------------------------------------------------- status
    def store(self) -> AbstractContextManager[Any]:
        return open_store(self.spec.connect_string())

    def status(self, topics: bool = False, groups: bool = True) -> dict[str, Any]:
        """The cluster as far as it can be reached from here (see `cluster status --json`).

        Registration, the controller, its epoch and every partition's leader and
        ISR come from ZooKeeper (what the controller wrote); when ZooKeeper cannot
        be read, partitions come from the nodes' Metadata answers instead.
        """
        nodes = []
        partitions: dict[tuple[str, int], Any] = {}
        answering: dict[int, str] = {}
        for node_id, plan in self.plans.items():
            entry: dict[str, Any] = {"id": node_id, "host": plan.host.name,
                                     "listener": plan.client_address, "alive": False,
                                     "pid": None, "paused": False, "uptime_s": None,
                                     "version": None, "answers": False, "registered": False,
                                     "wire": None, "leaderships": 0, "error": None,
                                     "host_error": None}
            missing = self.missing_host(plan.host)
            if missing:  # nothing to ask, and its address leads nowhere it should
                entry["error"] = missing
                nodes.append(entry)
                continue
            proc = self.node(node_id)
            try:
                info = proc.info()
            except HostError as exc:
                # the host did not answer: whether the process runs is not known
                info = None
                entry["host_error"] = str(exc)
            if info is not None:
                entry.update(alive=True, pid=info.pid, paused=info.paused,
                             uptime_s=info.elapsed_s, version=self.started_version(node_id))
            try:
                found = metadata(plan.client_address, self.probe_timeout_s,
                                 tls=self.probe_tls(plan))
                entry["answers"] = True
                answering[node_id] = plan.login_address or plan.client_address
                for p in found.partitions:
                    # a partition as its leader reports it
                    if p.leader == node_id or (p.topic, p.partition) not in partitions:
                        partitions[(p.topic, p.partition)] = p
            except ProbeError as exc:  # (the host's, if any, is host_error)
                entry["error"] = str(exc)
            nodes.append(entry)
        zk = self.zookeeper_status()
        states = zk.pop("partition_states")
        if states is not None:
            source = "zookeeper"
        else:
            source = "metadata"
            states = [{"topic": p.topic, "partition": p.partition, "leader": p.leader,
                       "leader_epoch": None, "isr": list(p.isr), "replicas": list(p.replicas)}
                      for p in sorted(partitions.values(),
                                      key=lambda p: (p.topic, p.partition))]
        registered = set(zk.get("registered") or [])
        leads: dict[int, int] = {}
        for st in states:
            leads[st["leader"]] = leads.get(st["leader"], 0) + 1
        wires: dict[str, str] = zk.get("wires") or {}
        for entry in nodes:
            entry["registered"] = entry["id"] in registered
            entry["wire"] = wires.get(str(entry["id"]))
            entry["leaderships"] = leads.get(entry["id"], 0)
        under = sum(1 for st in states if partition_under_replicated(st))
        offline = sum(1 for st in states if st["leader"] < 0)
        state = ClusterState.load(self.state_path)
        out: dict[str, Any] = {
            "cluster": self.spec.name,
            "controller": zk.get("controller"),
            "controller_epoch": zk.get("controller_epoch"),
            "live_nodes": sorted(registered),
            "nodes": nodes,
            "under_replicated_partitions": under,
            "offline_partitions": offline,
            "partitions": len(states),
            "partitions_source": source,
            "zookeeper": zk,
            "faults": {"isolated": sorted(state.isolated), "netem": state.netem},
            "bootstrap_servers": self.bootstrap_servers(),
            # the registered nodes' inter-node wires: more than one, and they cannot all
            # talk (a node refuses to start beside another wire; see README, upgrades)
            "wires": sorted(set(wires.values())),
            "wire_of_this_build": wire_fingerprint(),
        }
        out["healthy"] = (
            all(n["alive"] and not n["paused"] and n["answers"] for n in nodes)
            and under == 0 and offline == 0 and zk["error"] is None
            and out["controller"] is not None and registered >= set(self.plans)
            and len(out["wires"]) <= 1)
        if topics:
            out["topics"] = states
        if groups:
            out["groups"], out["groups_error"] = self.groups_status(answering)
            # a node that does not answer (killed, still registered until its session
            # ends) is not asked: the others' groups are listed all the same
            out["groups_unlisted_nodes"] = sorted(set(self.plans) - set(answering))
        return out

    def groups_status(self, answering: dict[int, str]
                      ) -> tuple[list[dict[str, Any]], str | None]:
        """Consumer groups with their state, members and total lag, through the Kafka API,
        as the nodes of ``answering`` (id: the address of the client_config's listener)
        coordinate them."""
        if not answering:
            return [], "no node answers"
        from kafka import KafkaAdminClient

        from actors.cli.groups import describe_group

        timeout_ms = max(1000, int(self.probe_timeout_s * 2500))
        try:
            admin = KafkaAdminClient(bootstrap_servers=",".join(answering.values()),
                                     client_id="actorlog-cluster-status",
                                     request_timeout_ms=timeout_ms,
                                     bootstrap_timeout_ms=timeout_ms,
                                     **self.client_security)
        except Exception as exc:  # the status reports it, whatever the client raised
            return [], f"{type(exc).__name__}: {exc}"
        try:
            found = []
            listed_groups = admin.list_groups(broker_ids=sorted(answering))
            for listed in sorted(listed_groups, key=lambda g: g["group_id"]):
                group = describe_group(admin, listed["group_id"])
                lags = [o["lag"] for o in group["offsets"] if o["lag"] is not None]
                found.append({"group": group["group"], "state": group["state"],
                              "members": len(group["members"]),
                              "lag": sum(lags) if lags else None,
                              "partitions": len(group["offsets"])})
            return found, None
        except Exception as exc:  # the status reports it, whatever the client raised
            return [], f"{type(exc).__name__}: {exc}"
        finally:
            admin.close()

    def started_version(self, node_id: int) -> str | None:
        """The actorlog version `cluster up` found on the node's host when it started it."""
        plan = self.plans[node_id]
        try:
            text = self.runners[plan.host.name].read_tail(plan.version_path, 1).strip()
        except HostError:
            return None
        return text or None

    def missing_host(self, host: HostSpec) -> str | None:
        """Why a netns host cannot be asked anything (its namespace does not exist), or None."""
        if host.via == "netns" and host.netns not in self.namespaces():
            return f"host {host.name} (network namespace {host.netns}) does not exist"
        return None

    def namespaces(self) -> set[str]:
        return netns.namespaces() if netns.unavailable_reason() is None else set()

    def zookeeper_status(self) -> dict[str, Any]:
        servers = []
        missing = [m for m in (self.missing_host(self.spec.hosts[h])
                               for h in self.spec.zookeeper.hosts) if m]
        for zk in self.zookeepers():
            mode = "" if missing else zookeeper_mode(zk)
            servers.append({"host": zk.host.name, "address": f"{zk.host.address}:{zk.port}",
                            "serving": bool(mode), "mode": mode or None})
        out: dict[str, Any] = {"connect": self.spec.connect_string(), "servers": servers,
                               "registered": None, "wires": {}, "controller": None,
                               "controller_epoch": None, "error": None,
                               "partition_states": None}
        if missing:
            out["error"] = "; ".join(missing)
            return out
        try:
            with self.store() as store:
                brokers = store.get_brokers()
                out["registered"] = sorted(brokers)
                # each registered node's inter-node wire fingerprint ("" : a build before them)
                out["wires"] = {str(b): info.wire for b, info in sorted(brokers.items())}
                out["controller"] = store.get_controller()
                out["controller_epoch"] = store.get_controller_epoch()
                states: list[dict[str, Any]] = []
                topics = store.get_topics()
                if topics:
                    assignments = store.get_topic_assignments(topics)
                    tps = [TopicPartition(t, p) for t, a in assignments.items()
                           for p in a.partitions]
                    found = store.get_partition_states(tps)
                    for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition)):
                        st = found.get(tp)
                        states.append({
                            "topic": tp.topic, "partition": tp.partition,
                            "leader": st.leader if st is not None else -1,
                            "leader_epoch": st.leader_epoch if st is not None else None,
                            "isr": list(st.isr) if st is not None else [],
                            "replicas": list(assignments[tp.topic].partitions[tp.partition]),
                        })
                out["partition_states"] = states
        except Exception as exc:  # any failure of the store is reported, not raised
            out["error"] = f"{type(exc).__name__}: {exc}"
        return out

    # ------------------------------------------------------------ restart
    def restart(self, node_ids: list[int], rolling: bool, timeout_s: float = 90.0) -> None:
        """Stop and start nodes.

        Rolling: one at a time; before a node stops, every partition must have
        its full ISR (so stopping it takes no partition's last in-sync copy), and
        the node must answer and be registered again before the next one goes.
        """
        ids = self.spec.node_ids(node_ids)
        missing = self.missing_keys(ids)
        if missing:
            raise ClusterError("\n".join([*missing, "nothing was restarted"]))
        self.hosts_answer(ids, rolling)
        if rolling:
            for node_id in ids:
                self.wait_in_sync(timeout_s)
                self.stop_node(node_id)
                self.start_node(node_id, [])
                self.wait_answering(node_id, timeout_s)
                self.wait_rejoined(node_id, timeout_s)
            self.wait_in_sync(timeout_s)
        else:
            for node_id in ids:
                self.stop_node(node_id)
            for node_id in ids:
                self.start_node(node_id, [])
            for node_id in ids:
                self.wait_answering(node_id, timeout_s)
            for node_id in ids:
                self.wait_rejoined(node_id, timeout_s)

    def hosts_answer(self, ids: list[int], rolling: bool) -> None:
        """The host of every node to restart answers before any node stops: a host that did
        not answer was found only at its node's turn, after the nodes before it were stopped
        (a plain restart left them down, a rolling one had restarted them for nothing)."""
        problems = []
        others = []
        for node_id in ids:
            proc = self.node(node_id)
            try:
                proc.info()
            except HostError as exc:
                problems.append(f"node {node_id} on {proc.host.name}: {exc}")
            else:
                others.append(node_id)
        if problems:
            problems.append("nothing was restarted")
            if others:  # the way forward: without the nodes whose host did not answer
                problems.append(
                    f"name the nodes to restart the others: `actorlog cluster restart --spec "
                    f"{self.spec.path}{' --rolling' if rolling else ''} "
                    f"{' '.join(map(str, others))}`")
            raise ClusterError("\n".join(problems))

    def stop_node(self, node_id: int) -> None:
        proc = self.node(node_id)
        self.say(f"node {node_id} on {proc.host.name}: {proc.stop(self.stop_timeout_s)}")

    def wait_rejoined(self, node_id: int, timeout_s: float) -> None:
        """Until the node is registered in ZooKeeper again and a controller is elected."""
        deadline = time.monotonic() + timeout_s
        with self.store() as store:
            while True:
                registered = node_id in store.get_brokers()
                controller = store.get_controller()
                if registered and controller is not None:
                    self.say(f"node {node_id}: registered again; controller: node {controller}")
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(f"node {node_id} did not register in ZooKeeper again "
                                       f"within {timeout_s:g} s (controller: {controller})")
                time.sleep(0.2)

    def wait_in_sync(self, timeout_s: float) -> None:
        """Until no partition is offline or under-replicated (ZooKeeper's states)."""
        deadline = time.monotonic() + timeout_s
        while True:
            zk = self.zookeeper_status()
            states = zk["partition_states"]
            if states is not None:
                under = [st for st in states if partition_under_replicated(st)]
                offline = [st for st in states if st["leader"] < 0]
                if not offline and not under:
                    self.say(f"all {len(states)} partition(s) have a leader and a full ISR")
                    return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"within {timeout_s:g} s the partitions did not all get a full ISR"
                    + (f" (ZooKeeper: {zk['error']})" if states is None else
                       f" ({len(under)} under-replicated, {len(offline)} offline, e.g. "
                       f"{describe_partition((under + offline)[0])})"))
            time.sleep(0.5)

    # -------------------------------------------------------------- faults
    def signal_node(self, node_id: int, signame: str, what: str) -> None:
        self.spec.node_ids([node_id])
        proc = self.node(node_id)
        pid = proc.send(signame)
        self.say(f"node {node_id} on {proc.host.name}: {what} (SIG{signame} to pid {pid})")

    def kill(self, node_id: int) -> None:
        self.signal_node(node_id, "KILL", "killed")

    def pause(self, node_id: int) -> None:
        self.signal_node(node_id, "STOP", "paused")

    def resume(self, node_id: int) -> None:
        self.signal_node(node_id, "CONT", "resumed")

    def node_processes(self, node_id: int) -> dict[int, ProcessInfo]:
        """The node's live OS processes by index: 0, the one its pid file names, and each
        process 1.. of num.processes its supervisor started (its process group, which the
        node leads: started detached); empty when the node does not run."""
        from actors.processes import process_index_of

        proc = self.node(node_id)
        main = proc.info()
        if main is None:
            return {}
        found = {0: main}
        for info in proc.runner.group(main.pid):
            index = process_index_of(info.args)
            if index is not None and info.pid != main.pid:
                found[index] = info
        return found

    def process_serves(self, node_id: int, index: int, pid: int) -> bool:
        """Whether the node's log says its process ``index`` of ``pid`` serves connections
        (its supervisor found it ready: at the node's start, or after a restart)."""
        from actors.processes import SERVES_LINE

        plan = self.plans[node_id]
        found = self.node(node_id).runner.run(
            ["grep", "-aFc", SERVES_LINE.format(index, pid), plan.log_path], check=False)
        return found.stdout.strip() not in ("", "0")

    def wait_processes_serving(self, node_id: int, timeout_s: float) -> dict[int, int]:
        """Until every process 1.. of the node (num.processes of its config, or as many as
        run when that is 0, one per CPU) runs and serves: the node finished its start, and
        its supervisor watches them. Index -> pid; ClusterError after ``timeout_s``. A look
        over ssh that fails (SshFailed: a hiccup of the connection) is made again till then."""
        plan = self.plans[node_id]
        wanted = int(plan.config.get("num.processes", 0))
        deadline = time.monotonic() + timeout_s
        while True:
            failed: SshFailed | None = None
            try:
                found = self.node_processes(node_id)
                others = {k: info.pid for k, info in found.items() if k > 0}
                if (found and others and (wanted == 0 or len(others) == wanted - 1)
                        and all(self.process_serves(node_id, k, pid)
                                for k, pid in others.items())):
                    return others
            except SshFailed as exc:  # an ssh hiccup says nothing of the node: looked again
                found, failed = {}, exc
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"node {node_id} on {plan.host.name}: not every process serves within "
                    f"{timeout_s:g} s (" + (f"running: {sorted(found)}" if found else
                                            f"its last look failed: {failed}" if failed else
                                            "the node does not run") + ")")
            time.sleep(0.1)

    def kill_process(self, node_id: int, index: int) -> int:
        """SIGKILL process ``index`` (1..) of the node alone; its pid. The node's supervisor
        (process 0) restarts it: :meth:`wait_process_restarted`."""
        self.spec.node_ids([node_id])
        proc = self.node(node_id)
        target = self.node_processes(node_id).get(index)
        if index < 1 or target is None or not proc.runner.signal(target.pid, "KILL"):
            raise ClusterError(f"node {node_id} on {proc.host.name} has no running process "
                               f"{index} (num.processes)")
        self.say(f"node {node_id} on {proc.host.name}: process {index} killed (SIGKILL to "
                 f"pid {target.pid})")
        return target.pid

    def wait_process_restarted(self, node_id: int, index: int, old_pid: int,
                               timeout_s: float) -> int:
        """Until process ``index`` of the node runs again as another pid than ``old_pid``,
        the node's log says it serves connections (its supervisor found it ready) and the
        node answers; the new pid. SupervisorGaveUp when the node stopped meanwhile (its
        supervisor could not restart the process, or it died too often), with the node's
        own words; ClusterError when none of that happened within ``timeout_s``."""
        plan = self.plans[node_id]
        where = f"node {node_id} on {plan.host.name}"
        deadline = time.monotonic() + timeout_s
        new_pid = None
        since = f"broker process {index} (pid {old_pid}) exited"  # the supervisor's line
        while True:
            # one failed ps (an ssh hiccup: exit 255) is looked at again, not a node gone
            found = processes_looked_at_twice(lambda: self.node_processes(node_id))
            if not found:
                raise SupervisorGaveUp(node_id, index, self.stop_reason(node_id, since))
            fresh = found.get(index)
            if fresh is not None and fresh.pid != old_pid:
                new_pid = fresh.pid
                try:
                    serves = self.process_serves(node_id, index, new_pid)
                except SshFailed:  # an ssh hiccup: not yet, looked at again in 0.1 s
                    serves = False
                if serves:
                    break
            if time.monotonic() > deadline:
                if (gave_up := self.gave_up_line(node_id, since)) is not None:  # stopping
                    raise SupervisorGaveUp(node_id, index, gave_up)
                raise ClusterError(
                    f"{where}: process {index} (pid {old_pid} killed) "
                    + (f"runs again as pid {new_pid} but did not serve" if new_pid else
                       "was not restarted") + f" within {timeout_s:g} s")
            time.sleep(0.1)
        self.wait_answering(node_id, max(1.0, deadline - time.monotonic()))
        self.say(f"{where}: process {index} restarted by its supervisor as pid {new_pid}, "
                 f"serving")
        return new_pid

    def wait_stopped(self, node_id: int, timeout_s: float) -> bool:
        """Until none of the node's processes runs (a node whose supervisor gave up may
        still be shutting down: started again then, it would be found running and left
        alone, to exit just after); False if some still ran after ``timeout_s``. A look that
        finds none is made twice, and one over ssh that fails is made again, till then."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:  # none is looked for twice: a failed ps on the host reads as none
                if not processes_looked_at_twice(lambda: self.node_processes(node_id)):
                    return True
            except SshFailed:  # an ssh hiccup (the second look's too): not known yet
                pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def gave_up_line(self, node_id: int, since: str = "") -> str | None:
        """The line of the node's log that says its supervisor gave up on a process (the
        broker's "broker stopped", else the supervisor's own), or None; with ``since``,
        only after the last line holding it (not an earlier life's of the node)."""
        lines = self.node(node_id).log_tail(400).splitlines()
        if since:
            marks = [at for at, line in enumerate(lines) if since in line]
            lines = lines[marks[-1]:] if marks else lines
        for marker in ("actorlog: broker stopped:", "cannot restart:", "times within"):
            said = [line for line in lines if marker in line]
            if said:
                return said[-1].strip()
        return None

    def stop_reason(self, node_id: int, since: str = "") -> str:
        """Why the node stopped: :meth:`gave_up_line`, else its log's last line."""
        said = self.gave_up_line(node_id, since)
        if said is not None:
            return said
        lines = self.node(node_id).log_tail(1).splitlines()
        return f"it exited; its log's last line: {lines[-1].strip() if lines else '(none)'}"

    def others_on(self, host: HostSpec, node_id: int) -> str:
        others = [i for i, n in self.spec.nodes.items() if n.host == host.name and i != node_id]
        return f" (also nodes {others} on it)" if others else ""

    def isolate(self, node_id: int) -> None:
        self.spec.node_ids([node_id])
        host = self.netns_host_of(node_id, "isolate")
        netns.set_link(self.test_host(host), up=False)
        state = ClusterState.load(self.state_path)
        if host.name not in state.isolated:
            state.isolated.append(host.name)
        state.save(self.state_path)
        self.say(f"host {host.name} of node {node_id} isolated: link "
                 f"{netns.veth_name(host.address)} down{self.others_on(host, node_id)}")

    def heal(self, node_id: int) -> None:
        self.spec.node_ids([node_id])
        host = self.netns_host_of(node_id, "heal")
        state = ClusterState.load(self.state_path)
        self.heal_host(host, state)
        self.finish_state(state)
        self.say(f"host {host.name} of node {node_id} healed: link up, no netem"
                 f"{self.others_on(host, node_id)}")

    def heal_host(self, host: HostSpec, state: ClusterState) -> None:
        netns.set_link(self.test_host(host), up=True)
        clear_netem(NetnsRunner(host))
        if host.name in state.isolated:
            state.isolated.remove(host.name)
        state.netem.pop(host.name, None)

    def netem(self, node_id: int, shape: Netem) -> None:
        self.spec.node_ids([node_id])
        host = self.netns_host_of(node_id, "netem")
        runner = NetnsRunner(host)
        method = apply_netem(runner, shape)
        state = ClusterState.load(self.state_path)
        if method == "none":
            state.netem.pop(host.name, None)
        else:
            state.netem[host.name] = {"delay_ms": shape.delay_ms, "loss_pct": shape.loss_pct,
                                      "method": method}
        self.finish_state(state)
        shown = current_netem(runner) or "nothing"
        self.say(f"host {host.name} of node {node_id}: netem {shape.describe()} on what it "
                 f"sends ({method}: {shown}){self.others_on(host, node_id)}")
