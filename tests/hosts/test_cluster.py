"""`actorlog cluster` end to end: test hosts, a real ZooKeeper, nodes over netns and ssh.

The commands run as a user runs them (a separate process, `python -m
actors.cluster_cli`, the module `actorlog cluster` is); clients in the root
namespace produce and consume through each node's advertised address.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic

from actors.core.cluster_model import BrokerInfo, Endpoint, LeaderAndIsr, TopicAssignment
from actors.core.cluster_model import TopicPartition as TP
from actors.hosts import netns
from actors.hosts.cluster import Cluster, ClusterError, SupervisorGaveUp, open_store
from actors.hosts.faults import FaultError, Netem
from actors.hosts.probe import metadata
from actors.hosts.runner import Result as HostResult
from actors.hosts.runner import SshFailed, local_version
from actors.hosts.spec import load_spec
from actors.metadata.zk_server import free_port
from actors.processes import RESTART_WINDOW_S, RESTARTS_MAX
from bench.certs import make_pki
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.netns import free_test_address, skip_unless_namespaces
from tests.fixtures.pids import HeldProcess, KeepStopped, running
from tests.fixtures.sshd import SshServer
from tests.hosts.helpers import ACTORLOG, two_local_nodes_spec, wait_until
from wire.fingerprint import wire_fingerprint

pytestmark = pytest.mark.multiprocess
# Specs are named after this process: their namespaces (alog-<name>-<host>) must not meet
# those of a test run in another checkout at the same time.
NAME = f"t{os.getpid()}"
ROOT = Path(__file__).parents[2]


def cli(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actors.cluster_cli", *args],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def status_json(spec: Path) -> dict[str, Any]:
    result = cli("status", "--spec", str(spec), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def node_status(spec: Path, node_id: int) -> dict[str, Any]:
    return next(n for n in status_json(spec)["nodes"] if n["id"] == node_id)


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def node_mark(data_dir: str | Path, node_id: int) -> str:
    """In the command line of node ``node_id`` of the host with ``data_dir``, and of no other
    test's node: its own config file, as the last word (``running``: each word ends in a
    space)."""
    return f"serve --config {Path(data_dir) / f'node-{node_id}' / 'node.toml'} "


def zookeeper_mark(directory: str | Path) -> str:
    """In the command line of the ZooKeeper wrapper of ``directory``, and of no other's (the
    word after it: not ``<directory>-1``'s either)."""
    return f"-m actors.metadata.zk_server --dir {directory} "


def hold(pid: int, what: str, mark: str) -> HeldProcess:
    """A node's or ZooKeeper's process, held while it runs (tests/fixtures/pids.py): that it
    is gone later is read from its pidfd, not from a pid another process may have by then."""
    return HeldProcess.take(pid, what, running(mark))


def runs(pid: int, mark: str) -> bool:
    """Whether ``pid`` is a living process whose command line holds ``mark``."""
    held = HeldProcess.take_if(pid, running(mark))
    if held is not None:
        held.close()
    return held is not None


@pytest.fixture
def spec_file(tmp_path: Path) -> Iterator[Path]:
    """Where a test writes its spec; `cluster down` runs after the test if it left a state."""
    path = tmp_path / "spec" / f"{NAME}.toml"
    path.parent.mkdir()
    yield path
    if (path.parent / f"{NAME}.cluster" / "state.json").exists() or path.exists():
        cli("down", "--spec", str(path))


# ------------------------------------------------------- refused at once
@pytest.mark.parametrize(("mistake", "line"), [
    (("via = \"netns\"\naddress", "via = \"netns\"\nadres = 1\naddress"),
     "[hosts.h1] unknown key 'adres' (did you mean 'address'?)"),
    (('[nodes.2]\nhost = "h1"', '[nodes.2]\nhost = "h7"'),
     "[nodes.2] host 'h7' is not a host of this spec"),
    (('[nodes.2]\nhost = "h1"', '[nodes.1]\nhost = "h1"'),
     "node id 1 is declared twice"),
])
def test_a_spec_error_is_refused_before_anything_starts(
        spec_file: Path, mistake: tuple[str, str], line: str) -> None:
    good = ('[hosts.h1]\nvia = "netns"\naddress = "198.18.0.251"\n[zookeeper]\nhosts = ["h1"]\n'
            '[nodes.1]\nhost = "h1"\n[nodes.2]\nhost = "h1"\n'
            '[nodes.2.config]\n"listeners" = "198.18.0.251:9192"\n')
    spec_file.write_text(good)
    load_spec(spec_file)  # the spec without the mistake is accepted
    spec_file.write_text(good.replace(*mistake))
    result = cli("up", "--spec", str(spec_file))
    assert result.returncode == 2
    assert line in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (spec_file.parent / f"{NAME}.cluster").exists()
    assert f"alog-{NAME}-h1" not in (netns.namespaces() if os.geteuid() == 0 else set())


def test_every_host_is_checked_before_anything_is_made(spec_file: Path) -> None:
    skip_unless_namespaces()
    a1, nobody = free_test_address(), free_test_address()
    spec_file.write_text(f"""
[hosts.h1]
via = "netns"
address = "{a1}"
[hosts.h2]
via = "ssh"
address = "{nobody}"
user = "root"
actorlog = "{ACTORLOG}"
[zookeeper]
hosts = ["h1"]
[nodes.1]
host = "h1"
[nodes.2]
host = "h2"
""")
    result = cli("up", "--spec", str(spec_file), timeout_s=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"host h2 (root@{nobody}, port 22): ssh failed:" in result.stderr
    assert "Traceback" not in result.stderr
    assert f"alog-{NAME}-h1" not in netns.namespaces()
    assert netns.address_holder(a1) is None
    assert not (spec_file.parent / f"{NAME}.cluster" / "state.json").exists()


# ------------------------------------------------- ZooKeeper's view (real)
@pytest.mark.local_hosts
def test_registration_controller_and_partition_health_come_from_zookeeper(
        spec_file: Path, zk_connect: str) -> None:
    ports = [free_port() for _ in range(4)]
    spec_file.write_text(f"""
[hosts.h1]
via = "local"
[zookeeper]
connect = "{zk_connect}"
[nodes.1]
host = "h1"
config = {{"listeners" = "127.0.0.1:{ports[0]}", "actor.gateway.port" = {ports[1]}}}
[nodes.2]
host = "h1"
config = {{"listeners" = "127.0.0.1:{ports[2]}", "actor.gateway.port" = {ports[3]}}}
""")
    said: list[str] = []
    cluster = Cluster(load_spec(spec_file), say=said.append, probe_timeout_s=0.5)
    with open_store(zk_connect) as store:
        for node_id in (1, 2):
            store.register_broker(BrokerInfo(node_id, (Endpoint("PLAINTEXT", "127.0.0.1",
                                                                ports[2 * node_id - 2]),),
                                             f"tcp://127.0.0.1:{ports[2 * node_id - 1]}"))
        with pytest.raises(ClusterError, match=r"not every node registered in ZooKeeper "
                                               r"\(missing: \[\], controller: None\)"):
            cluster.wait_registered(timeout_s=0.5)
        fence = store.try_elect(1)
        assert fence is not None
        cluster.wait_registered(timeout_s=10)
        assert said[-1] == "registered in ZooKeeper: [1, 2]; controller: node 1"
        store.create_topic("t", TopicAssignment({0: (1, 2), 1: (1, 2), 2: (2, 1)}), {}, fence)
        store.create_partition_states({
            TP("t", 0): LeaderAndIsr(1, 0, (1, 2), fence.epoch),
            TP("t", 1): LeaderAndIsr(1, 0, (1,), fence.epoch),     # under-replicated
            TP("t", 2): LeaderAndIsr(-1, 1, (2,), fence.epoch),    # offline, under-replicated
        }, fence)
        found = cluster.status(topics=True)
        assert found["controller_epoch"] == fence.epoch
        assert found["topics"][1] == {"topic": "t", "partition": 1, "leader": 1,
                                      "leader_epoch": 0, "isr": [1], "replicas": [1, 2]}
        assert [n["leaderships"] for n in found["nodes"]] == [2, 0]
        assert found["healthy"] is False

        # a rolling restart waits until every partition has a leader and a full ISR:
        # an offline partition holds it up ...
        with pytest.raises(ClusterError, match=re.escape(
                "within 0.5 s the partitions did not all get a full ISR (2 under-replicated, "
                "1 offline, e.g. t-1: leader 1, isr [1], replicas [1, 2])")):
            cluster.wait_in_sync(timeout_s=0.5)
        # ... and so do under-replicated ones that all have a leader
        states = store.get_partition_states([TP("t", 1), TP("t", 2)])
        store.update_partition_states(
            {TP("t", 2): states[TP("t", 2)].new_leader_and_isr(2, (2,), fence.epoch)}, fence)
        with pytest.raises(ClusterError, match=re.escape(
                "(2 under-replicated, 0 offline, e.g. t-1: leader 1, isr [1], "
                "replicas [1, 2])")):
            cluster.wait_in_sync(timeout_s=0.5)
        states = store.get_partition_states([TP("t", 1), TP("t", 2)])
        store.update_partition_states({
            TP("t", 1): states[TP("t", 1)].new_leader_and_isr(1, (1, 2), fence.epoch),
            TP("t", 2): states[TP("t", 2)].new_leader_and_isr(2, (2, 1), fence.epoch)}, fence)
        cluster.wait_in_sync(timeout_s=10)
        assert said[-1] == "all 3 partition(s) have a leader and a full ISR"
        # the state written before the two updates: what the status below checks
        store.update_partition_states({
            TP("t", 1): store.get_partition_states([TP("t", 1)])[TP("t", 1)]
            .new_leader_and_isr(1, (1,), fence.epoch),
            TP("t", 2): store.get_partition_states([TP("t", 2)])[TP("t", 2)]
            .new_leader_and_isr(-1, (2,), fence.epoch)}, fence)
        found = cluster.status()
    assert found["controller"] == 1
    assert found["zookeeper"]["registered"] == [1, 2]
    assert (found["partitions"], found["partitions_source"]) == (3, "zookeeper")
    assert found["under_replicated_partitions"] == 2 and found["offline_partitions"] == 1
    # nothing runs on the nodes' ports: the status says so rather than failing
    assert [(n["alive"], n["answers"]) for n in found["nodes"]] == [(False, False)] * 2
    with pytest.raises(ClusterError, match=r"missing: \[1, 2\]"):
        cluster.wait_registered(timeout_s=0.5)  # the registrations went with their session


@pytest.mark.local_hosts
def test_up_status_down_on_this_machine(spec_file: Path, zk_connect: str,
                                        holds: ExitStack) -> None:
    """via = "local": no root needed; nodes are processes here, on loopback ports."""
    spec, ports = two_local_nodes_spec(zk_connect)
    spec_file.write_text(spec)
    up = cli("up", "--spec", str(spec_file))
    assert up.returncode == 0, up.stdout + up.stderr
    assert "made network namespace" not in up.stdout and "ZooKeeper on" not in up.stdout
    servers = f"127.0.0.1:{ports[0]},127.0.0.1:{ports[2]}"
    assert up.stdout.rstrip().endswith(f"bootstrap servers: {servers}")
    assert "registered in ZooKeeper: [1, 2]; controller: node " in up.stdout
    found = status_json(spec_file)
    assert [(n["alive"], n["answers"], n["paused"], n["registered"]) for n in found["nodes"]] \
        == [(True, True, False, True)] * 2
    assert found["zookeeper"]["error"] is None  # read through the metadata store
    assert found["controller"] in (1, 2) and found["controller_epoch"] >= 1
    assert found["live_nodes"] == [1, 2] and found["healthy"] is True
    assert found["nodes"][0]["version"] == local_version()
    # each node's inter-node wire as registered: this build's (computed alike in any process)
    assert [n["wire"] for n in found["nodes"]] == [wire_fingerprint()] * 2
    assert found["wires"] == [wire_fingerprint()] == [found["wire_of_this_build"]]
    assert found["groups"] == [] and found["groups_error"] is None
    text = cli("status", "--spec", str(spec_file))
    assert text.returncode == 0
    assert "MIXED" not in text.stdout and f" {wire_fingerprint()} " in text.stdout
    assert f"1     here      127.0.0.1:{ports[0]}" in text.stdout
    assert text.stdout.rstrip().endswith("healthy")
    data = spec_file.parent / f"{NAME}.cluster" / "data"
    node_2 = holds.enter_context(hold(int((data / "node-2" / "serve.pid").read_text()),
                                      "node 2", node_mark(data, 2)))
    assert (data / "node-2" / "node.toml").exists() and (data / "node-2" / "serve.log").exists()
    got = produce_and_consume(f"127.0.0.1:{ports[2]}", "local-topic", count=10)
    assert len(got) == 10
    # a group that committed 4 of the 10 records: status shows it with lag 6
    consumer = KafkaConsumer("local-topic", bootstrap_servers=f"127.0.0.1:{ports[0]}",
                             group_id="status-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000,
                             max_poll_records=4)
    try:
        batch = consumer.poll(timeout_ms=15000, max_records=4)
        assert sum(len(b) for b in batch.values()) == 4
        consumer.commit()
    finally:
        consumer.close()
    found = status_json(spec_file)
    assert [(g["group"], g["lag"]) for g in found["groups"]] == [("status-group", 6)]
    topics = cli("status", "--spec", str(spec_file), "--topics", "--json")
    assert topics.returncode == 0, topics.stderr
    parts = [p for p in json.loads(topics.stdout)["topics"] if p["topic"] == "local-topic"]
    assert len(parts) == 1 and parts[0]["leader"] in (1, 2)
    assert parts[0]["isr"] == parts[0]["replicas"]
    text = cli("status", "--spec", str(spec_file), "--topics")
    assert f"local-topic-0: leader {parts[0]['leader']}, isr" in text.stdout
    assert "group status-group: Empty, 0 member(s), lag 6 over 1 partition(s)" in text.stdout
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=60_000)
    try:  # partitions for the controller to take over at the next `up` (below)
        admin.create_topics([NewTopic("many", 200, 2)])
    finally:
        admin.close()
    down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stderr
    assert "node 1 on here: stopped" in down.stdout and "node 2 on here: stopped" in down.stdout
    assert node_2.exited()  # (down waited for it)
    assert (data / "node-2" / ".kafka_cleanshutdown").exists()  # it stopped cleanly
    again = cli("down", "--spec", str(spec_file))
    assert again.returncode == 0 and "node 1 on here: not running" in again.stdout
    # Up again (the controller has 251 partitions to take over now): every node serves the
    # whole cluster once `up` returned. Until the controller's first UpdateMetadata reaches
    # it a node names itself alone and no controller, and librdkafka's admin client, asked
    # then, waited for a controller and timed out.
    up = cli("up", "--spec", str(spec_file))
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        for port in (ports[0], ports[2]):
            served = metadata(f"127.0.0.1:{port}")
            assert set(served.brokers) == {1, 2} and served.controller_id in (1, 2), served
    finally:
        down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stderr


@pytest.mark.local_hosts
def test_up_and_status_of_nodes_whose_first_listener_is_tls(spec_file: Path, zk_connect: str,
                                                             tmp_path: Path) -> None:
    """`up` and `status` ask each node over plain TCP: with SASL_SSL first and PLAINTEXT
    second they ask the PLAINTEXT one (asking the TLS one, `up` waited out its timeout on
    closed connections and stopped everything), and a client logs in on the SASL_SSL one."""
    pki = make_pki(tmp_path / "pki")
    tls, plain, gateway = ([free_port() for _ in range(2)] for _ in range(3))
    nodes = "".join(
        f'[nodes.{i}]\nhost = "here"\nconfig = {{"listeners" = "SASL_SSL://127.0.0.1:'
        f'{tls[i - 1]},PLAINTEXT://127.0.0.1:{plain[i - 1]}", "actor.gateway.port" = '
        f'{gateway[i - 1]}}}\n' for i in (1, 2))
    spec_file.write_text(
        f'[hosts.here]\nvia = "local"\n[zookeeper]\nconnect = "{zk_connect}"\n[config]\n'
        f'"ssl.keystore.location" = "{pki.server}"\n'
        f'"sasl.enabled.mechanisms" = "SCRAM-SHA-256"\n{nodes}')
    up = cli("up", "--spec", str(spec_file), "--timeout", "30")
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.rstrip().endswith(
        f"bootstrap servers: 127.0.0.1:{plain[0]},127.0.0.1:{plain[1]}")
    found = status_json(spec_file)
    assert [(n["answers"], n["registered"]) for n in found["nodes"]] == [(True, True)] * 2
    assert found["healthy"] is True
    config = spec_file.parent / f"{NAME}.cluster" / "data" / "node-1" / "node.toml"
    password = tmp_path / "password"
    password.write_text("secret\n")
    added = subprocess.run([sys.executable, "-m", "actors.cli", "users", "add", "alice",
                            "--mechanism", "SCRAM-SHA-256", "--password-file", str(password),
                            "--config", str(config)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert added.returncode == 0, added.stderr
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{tls[1]}",
                         "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": "alice", "sasl.password": "secret",
                         "ssl.ca.location": str(pki.ca), "acks": "all",
                         "message.timeout.ms": 30000})
    acked: list[object] = []
    producer.produce("over-tls", b"v", on_delivery=lambda err, msg: acked.append(err))
    assert producer.flush(60) == 0 and acked == [None]


@pytest.mark.local_hosts
def test_up_and_status_of_tls_only_nodes_with_the_specs_client_config(
        spec_file: Path, zk_connect: str, tmp_path: Path) -> None:
    """Nodes with one SSL listener each: without [cluster] client_config the spec is refused
    before anything starts (the probe would not reach them); with one naming the CA, `up`
    and `status` ask them over TLS, and the bootstrap servers are the TLS ports."""
    pki = make_pki(tmp_path / "pki")
    tls, gateway = [free_port() for _ in range(2)], [free_port() for _ in range(2)]
    nodes = "".join(
        f'[nodes.{i}]\nhost = "here"\nconfig = {{"listeners" = "SSL://127.0.0.1:{tls[i - 1]}", '
        f'"actor.gateway.port" = {gateway[i - 1]}}}\n' for i in (1, 2))
    body = (f'[hosts.here]\nvia = "local"\n[zookeeper]\nconnect = "{zk_connect}"\n[config]\n'
            f'"ssl.keystore.location" = "{pki.server}"\n{nodes}')
    spec_file.write_text(body)
    refused = cli("check", "--spec", str(spec_file))
    assert refused.returncode != 0 and "every listener is TLS" in refused.stderr, (
        refused.stdout + refused.stderr)
    (spec_file.parent / "client.properties").write_text(
        f"security.protocol=SSL\nssl.ca.location={pki.ca}\n")
    spec_file.write_text(f'[cluster]\nclient_config = "client.properties"\n{body}')
    up = cli("up", "--spec", str(spec_file), "--timeout", "30")
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.rstrip().endswith(
        f"bootstrap servers: 127.0.0.1:{tls[0]},127.0.0.1:{tls[1]}")
    found = status_json(spec_file)
    assert [(n["answers"], n["registered"]) for n in found["nodes"]] == [(True, True)] * 2
    assert found["healthy"] is True


@pytest.mark.local_hosts
def test_status_lists_the_groups_of_the_nodes_that_answer(spec_file: Path, zk_connect: str
                                                          ) -> None:
    """A node killed a moment ago is still registered (its ZooKeeper session outlives it, a
    long one here) and named in Metadata; `status` lists the groups the other node
    coordinates (asking the killed one, the client's ListGroups failed whole: no group was
    shown) and names the node it could not ask. Each node has a SASL_PLAINTEXT listener
    beside its PLAINTEXT one and the spec's client_config logs in there: the probe (no
    login) asks the PLAINTEXT one, and the groups are listed through the SASL one."""
    spec, ports = two_local_nodes_spec(zk_connect, '"zookeeper.session.timeout.ms" = 60000\n'
                                                   '"default.replication.factor" = 2\n'
                                                   '"sasl.enabled.mechanisms" = "SCRAM-SHA-256"')
    sasl_ports = [free_port() for _ in range(2)]
    for i, port in enumerate((ports[0], ports[2])):
        spec = spec.replace(f'"listeners" = "127.0.0.1:{port}"',
                            f'"listeners" = "PLAINTEXT://127.0.0.1:{port},'
                            f'SASL_PLAINTEXT://127.0.0.1:{sasl_ports[i]}"')
    (spec_file.parent / "client.properties").write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        "username=operator password=\"operator secret\";\n")
    spec_file.write_text('[cluster]\nclient_config = "client.properties"\n' + spec)
    up = cli("up", "--spec", str(spec_file))
    assert up.returncode == 0, up.stdout + up.stderr
    servers = f"127.0.0.1:{ports[0]},127.0.0.1:{ports[2]}"
    users = AdminClient({"bootstrap.servers": servers})  # held while its future runs
    added = users.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("operator", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 4096), b"operator secret")])
    assert added["operator"].result(30) is None
    produce_acked(servers, "grouped", [b"a", b"b", b"c"])
    consumer = KafkaConsumer("grouped", bootstrap_servers=servers, group_id="kept",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=15000)
    try:
        assert sum(len(b) for b in consumer.poll(timeout_ms=15000).values()) >= 1
        consumer.commit()
    finally:
        consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=30_000)
    try:
        coordinator = next(n for n in (1, 2)
                           if admin.list_groups(broker_ids=[n]))  # the one that has it
    finally:
        admin.close()
    other = 3 - coordinator
    killed = cli("kill", "--spec", str(spec_file), str(other))
    assert killed.returncode == 0, killed.stderr
    found = status_json(spec_file)
    assert other in found["live_nodes"]  # registered still: clients are sent to it
    assert found["groups_error"] is None, found["groups_error"]
    assert [g["group"] for g in found["groups"]] == ["kept"]
    assert found["groups_unlisted_nodes"] == [other]
    text = cli("status", "--spec", str(spec_file))
    assert "group kept: Empty, 0 member(s)" in text.stdout, text.stdout
    assert f"groups coordinated by node(s) [{other}] are not listed" in text.stdout


@pytest.mark.local_hosts
def test_cluster_keys_then_up_gives_each_node_curve_keys(spec_file: Path, zk_connect: str
                                                         ) -> None:
    """`cluster keys` makes a pair per node; `up` puts them in each data dir, the config
    names them, and the nodes talk over CURVE."""
    spec, ports = two_local_nodes_spec(zk_connect, '"default.replication.factor" = 2')
    spec_file.write_text(spec)
    made = cli("keys", "--spec", str(spec_file))
    assert made.returncode == 0, made.stdout + made.stderr
    state = spec_file.parent / f"{NAME}.cluster"
    assert sorted(p.name for p in (state / "curve" / "public").iterdir()) == [
        "node-1.key", "node-2.key"]
    again = cli("keys", "--spec", str(spec_file))
    assert again.returncode == 1 and "exists already" in again.stderr
    up = cli("up", "--spec", str(spec_file))
    assert up.returncode == 0, up.stdout + up.stderr
    data = state / "data"
    for i in (1, 2):
        node = data / f"node-{i}"
        config = (node / "node.toml").read_text()
        secret = node / "curve" / f"node-{i}.key_secret"
        assert f'"actor.curve.secret.key.file" = "{secret}"' in config
        assert f'"actor.curve.public.keys.dir" = "{node / "curve" / "public"}"' in config
        assert secret.stat().st_mode & 0o777 == 0o600
        assert sorted(p.name for p in (node / "curve" / "public").iterdir()) == [
            "node-1.key", "node-2.key"]
    got = produce_and_consume(f"127.0.0.1:{ports[0]}", "curve-topic", count=10)
    assert len(got) == 10
    for i in (1, 2):
        log = (data / f"node-{i}" / "serve.log").read_text()
        assert "CURVE between nodes: key" in log and "refused" not in log
    down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stderr


@pytest.mark.local_hosts
def test_a_lost_key_of_cluster_keys_is_refused_before_anything_starts(
        spec_file: Path, zk_connect: str) -> None:
    """The node's config names its key file: `up` started nodes and that one exited with
    its log's hint (`actorlog keys new`); `restart` stopped it first."""
    spec, _ports = two_local_nodes_spec(zk_connect)
    spec_file.write_text(spec)
    assert cli("keys", "--spec", str(spec_file)).returncode == 0
    state = spec_file.parent / f"{NAME}.cluster"
    lost = state / "curve" / "node-2.key_secret"
    lost.unlink()
    line = (f"node 2: its CURVE key pair is not whole ({lost} missing): restore it, or make "
            f"new keys for every node (`actorlog cluster keys --spec {spec_file} --force`) "
            f"and restart them all")
    up = cli("up", "--spec", str(spec_file), timeout_s=150)
    assert up.returncode == 1, up.stdout + up.stderr
    assert up.stderr == f"Error: cluster up failed: {line}\n", up.stderr
    assert "started" not in up.stdout and not (state / "data" / "node-1").exists()
    restart = cli("restart", "--spec", str(spec_file), "2")
    assert restart.returncode == 1, restart.stdout + restart.stderr
    assert restart.stderr == f"Error: {line}\nnothing was restarted\n", restart.stderr


@pytest.mark.local_hosts
def test_a_node_naming_a_key_file_of_its_own_is_not_refused_for_a_lost_one(
        spec_file: Path, tmp_path: Path) -> None:
    """Node 2's config names a secret key file of its own, which it reads instead of the one
    `cluster keys` made: every node was taken as naming the made one, and node 2 was refused
    when that one was missing."""
    own = tmp_path / "own"
    spec_file.write_text(f"""
[hosts.here]
via = "local"
[zookeeper]
connect = "127.0.0.1:1"
[nodes.1]
host = "here"
[nodes.2]
host = "here"
[nodes.2.config]
"listeners" = "127.0.0.1:9192"
"actor.curve.secret.key.file" = "{own / 'node-2.key_secret'}"
"actor.curve.public.keys.dir" = "{own / 'public'}"
""")
    assert cli("keys", "--spec", str(spec_file)).returncode == 0
    made = spec_file.parent / f"{NAME}.cluster" / "curve"
    for node_id in (1, 2):
        (made / f"node-{node_id}.key_secret").unlink()
    cluster = Cluster(load_spec(spec_file), say=lambda line: None)
    try:
        assert cluster.missing_keys([1, 2]) == [
            f"node 1: its CURVE key pair is not whole ({made / 'node-1.key_secret'} missing): "
            f"restore it, or make new keys for every node (`actorlog cluster keys --spec "
            f"{spec_file} --force`) and restart them all"]
    finally:
        cluster.close()


@pytest.mark.local_hosts
def test_up_leaves_a_running_node_alone_whose_made_key_is_lost(
        spec_file: Path, zk_connect: str) -> None:
    """`up` on a running cluster starts nothing there, and so reads no node's key files: a
    lost key of a node that runs refused the whole `up`."""
    spec, _ports = two_local_nodes_spec(zk_connect)
    spec_file.write_text(spec)
    assert cli("keys", "--spec", str(spec_file)).returncode == 0
    try:
        up = cli("up", "--spec", str(spec_file), timeout_s=150)
        assert up.returncode == 0, up.stdout + up.stderr
        (spec_file.parent / f"{NAME}.cluster" / "curve" / "node-2.key_secret").unlink()
        again = cli("up", "--spec", str(spec_file), timeout_s=150)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "node 2 on here: already running" in again.stdout, again.stdout
    finally:
        down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stdout + down.stderr


@pytest.mark.local_hosts
def test_network_faults_need_a_netns_host(spec_file: Path) -> None:
    spec_file.write_text('[hosts.h1]\nvia = "local"\n[zookeeper]\nconnect = "127.0.0.1:1"\n'
                         '[nodes.1]\nhost = "h1"\n')
    result = cli("isolate", "--spec", str(spec_file), "1")
    assert result.returncode == 1
    assert result.stderr.strip() == ('Error: isolate works on netns test hosts; node 1\'s host '
                                     'h1 is via = "local"')
    result = cli("kill", "--spec", str(spec_file), "1")
    assert result.returncode == 1 and result.stderr.strip() == \
        "Error: node 1 on host h1 is not running"
    result = cli("pause", "--spec", str(spec_file), "9")
    assert result.returncode == 2 and "no node 9 in this spec (nodes: 1)" in result.stderr
    with pytest.raises(FaultError, match="netem works on netns test hosts"):
        Cluster(load_spec(spec_file)).netem(1, Netem(loss_pct=5))


# ----------------------------------------------------------- end to end
def produce_and_consume(address: str, topic: str, count: int = 50) -> list[bytes]:
    """Acked records through confluent-kafka, read back with kafka-python; their values."""
    produce_acked(address, topic, [f"{topic}-{i}".encode() for i in range(count)])
    return consume(address, topic, count)


def produce_acked(address: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": address, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30000})
    failed: list[Any] = []
    for value in values:
        producer.produce(topic, value,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(40) == 0 and not failed, failed


def consume(address: str, topic: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=address, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000,
                             group_id=None)
    try:
        got = [m.value for m in consumer][:count]
    finally:
        consumer.close()
    return got


def wait_status(spec: Path, node_id: int, timeout_s: float = 60, **want: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        entry = node_status(spec, node_id)
        if all(entry[k] == v for k, v in want.items()):
            return entry
        if time.monotonic() > deadline:
            raise AssertionError(f"node {node_id} never reached {want}: {entry}")
        time.sleep(0.5)


def wait_json(spec: Path, what: str, check: Any, timeout_s: float = 90) -> dict[str, Any]:
    """Poll `status --json --no-groups` until ``check(status)`` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = cli("status", "--spec", str(spec), "--json", "--no-groups")
        assert result.returncode == 0, result.stderr
        found = json.loads(result.stdout)
        if check(found):
            return found  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"status never showed {what}: {json.dumps(found)[:3000]}")
        time.sleep(1.0)


def by_id(found: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {n["id"]: n for n in found["nodes"]}


def moved_off(node_id: int) -> Any:
    """The node is out of the cluster: unregistered, leading nothing, every partition led."""
    def check(found: dict[str, Any]) -> bool:
        node = by_id(found)[node_id]
        return (not node["registered"] and node["leaderships"] == 0
                and found["offline_partitions"] == 0 and found["controller"] not in
                (None, node_id) and found["under_replicated_partitions"] > 0
                and not found["healthy"])
    return check


def back_in(node_id: int) -> Any:
    """The node is back: registered, answering, every partition led and its ISR full again."""
    def check(found: dict[str, Any]) -> bool:
        node = by_id(found)[node_id]
        return bool(node["registered"] and node["answers"] and not node["paused"]
                    and found["offline_partitions"] == 0
                    and found["under_replicated_partitions"] == 0)
    return check


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~250 s in a full 4-worker run here; 300 s was passed once at load 13
def test_up_three_nodes_one_over_ssh_clients_faults_and_down(
        ssh_host: SshServer, spec_file: Path, tmp_path: Path, holds: ExitStack) -> None:
    a1, a3 = free_test_address(), free_test_address()
    a2 = ssh_host.host.address
    spec_file.write_text(f"""
[cluster]
name = "e2e{NAME}"
[hosts.h1]
via = "netns"
address = "{a1}"
[hosts.h2]
via = "ssh"
address = "{a2}"
user = "root"
identity_file = "{ssh_host.identity_file}"
actorlog = "{ACTORLOG}"
data_dir = "{tmp_path / 'remote'}"
[hosts.h3]
via = "netns"
address = "{a3}"
[zookeeper]
hosts = ["h1"]
[nodes.1]
host = "h1"
[nodes.2]
host = "h2"
[nodes.2.config]
"trace.sample.ratio" = 1.0
[nodes.3]
host = "h3"
[config]
"num.partitions" = 3
"default.replication.factor" = 3
"offsets.topic.num.partitions" = 3
"zookeeper.session.timeout.ms" = 4000
"controlled.shutdown.retry.backoff.ms" = 500
"trace.sample.ratio" = 0.0
""")
    spec = str(spec_file)
    up = cli("up", "--spec", spec)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"host h1: made network namespace alog-e2e{NAME}-h1 ({a1}" in up.stdout
    assert f"ZooKeeper on h1 ({a1}:2181): serving" in up.stdout
    assert f"node 2 on h2: answering on {a2}:9092" in up.stdout
    assert "registered in ZooKeeper: [1, 2, 3]; controller: node " in up.stdout
    assert up.stdout.rstrip().endswith(f"bootstrap servers: {a1}:9092,{a2}:9092,{a3}:9092")

    found = status_json(spec_file)
    assert [(n["id"], n["host"], n["listener"], n["alive"], n["answers"], n["registered"])
            for n in found["nodes"]] == [(1, "h1", f"{a1}:9092", True, True, True),
                                         (2, "h2", f"{a2}:9092", True, True, True),
                                         (3, "h3", f"{a3}:9092", True, True, True)]
    assert found["zookeeper"]["servers"][0]["serving"] is True
    assert found["controller"] in (1, 2, 3) and found["live_nodes"] == [1, 2, 3]
    assert found["under_replicated_partitions"] == 0 and found["offline_partitions"] == 0
    assert found["healthy"] is True
    pids = {n["id"]: n["pid"] for n in found["nodes"]}
    zk_pid = int((Path(load_spec(spec_file).hosts["h1"].data_dir) / "zookeeper" /
                  "zk_server.pid").read_text())
    # every process of the cluster, held from when it is seen running to the end's check
    data_dirs = {i: load_spec(spec_file).hosts[f"h{i}"].data_dir for i in (1, 2, 3)}
    seen = [holds.enter_context(hold(pid, f"node {i}", node_mark(data_dirs[i], i)))
            for i, pid in pids.items()]
    seen.append(holds.enter_context(hold(
        zk_pid, "ZooKeeper", zookeeper_mark(Path(data_dirs[1]) / "zookeeper"))))
    # each node runs in its own host's network stack; node 2 was started over ssh
    for node_id, ns in ((1, f"alog-e2e{NAME}-h1"), (2, ssh_host.host.netns),
                        (3, f"alog-e2e{NAME}-h3")):
        assert subprocess.run(["ip", "netns", "identify", str(pids[node_id])],
                              capture_output=True, text=True).stdout.strip() == ns
    assert "Accepted publickey for root" in ssh_host.log_path.read_text()
    again = cli("up", "--spec", spec)  # up again: what runs is left running
    assert again.returncode == 0, again.stderr
    for node_id, host in ((1, "h1"), (2, "h2"), (3, "h3")):
        assert f"node {node_id} on {host}: already running, pid {pids[node_id]}" in again.stdout
    assert "made network namespace" not in again.stdout

    # clients in the root namespace, through the advertised addresses of the cluster
    bootstrap = f"{a1}:9092,{a2}:9092,{a3}:9092"
    topic = f"e2e-{uuid.uuid4().hex[:6]}"
    acked = produce_and_consume(bootstrap, topic)
    assert sorted(acked) == sorted(f"{topic}-{i}".encode() for i in range(50))
    found = wait_json(spec_file, "the topic's 3 partitions led, with full ISRs", lambda f: any(
        p["topic"] == topic for p in cli_topics(spec_file)) and f["healthy"])
    total = found["partitions"]
    assert sum(n["leaderships"] for n in found["nodes"]) == total

    def produce_more(label: str) -> None:
        """20 more acked records to the topic (a new topic could not get 3 live replicas)."""
        values = [f"{label}-{i}".encode() for i in range(20)]
        produce_acked(bootstrap, topic, values)
        acked.extend(values)

    # kill: its leaderships move to the others, status shows the under-replicated partitions
    victim = max(by_id(found), key=lambda i: by_id(found)[i]["leaderships"])
    assert cli("kill", "--spec", spec, str(victim)).returncode == 0
    found = wait_json(spec_file, f"node {victim}'s leaderships moved", moved_off(victim))
    assert by_id(found)[victim]["alive"] is False
    assert sum(n["leaderships"] for n in found["nodes"]) == total
    text = cli("status", "--spec", spec, "--topics", "--no-groups").stdout
    assert "UNDER-REPLICATED" in text and "NOT healthy" in text
    produce_more("while-killed")
    restarted = cli("restart", "--spec", spec, str(victim))
    assert restarted.returncode == 0, restarted.stderr
    assert f"node {victim}: registered again; controller: node " in restarted.stdout
    wait_json(spec_file, f"node {victim} back", back_in(victim))

    # pause the node on the ssh host longer than its session: out, then back on resume
    # held stopped (KeepStopped): a SIGCONT from another test (a stale pid of its) would
    # end the pause before the status below sees it
    node_2 = holds.enter_context(hold(node_status(spec_file, 2)["pid"], "node 2",
                                      node_mark(data_dirs[2], 2)))
    assert cli("pause", "--spec", spec, "2").returncode == 0
    keeper = KeepStopped(node_2, "node 2")
    try:
        found = wait_json(spec_file, "node 2's leaderships moved", moved_off(2))
        assert by_id(found)[2]["paused"] is True and by_id(found)[2]["answers"] is False, \
            f"continued from outside {keeper.continued} time(s)"
        produce_more("while-paused")
    finally:
        keeper.end()
        node_2.close()
    assert cli("resume", "--spec", spec, "2").returncode == 0
    wait_json(spec_file, "node 2 back", back_in(2))

    # isolate a netns host (not ZooKeeper's): its session expires, leaderships move
    isolated = cli("isolate", "--spec", spec, "3")
    assert isolated.returncode == 0 and "host h3 of node 3 isolated" in isolated.stdout
    found = wait_json(spec_file, "node 3's leaderships moved", moved_off(3))
    assert by_id(found)[3]["alive"] is True and "did not answer" in by_id(found)[3]["error"]
    assert found["faults"]["isolated"] == ["h3"]
    produce_more("while-isolated")
    assert cli("heal", "--spec", spec, "3").returncode == 0
    wait_json(spec_file, "node 3 back", back_in(3))

    # netem: everything the host sends lost, then cleared
    shaped = cli("netem", "--spec", spec, "3", "--loss", "100%")
    assert shaped.returncode == 0, shaped.stderr
    wait_status(spec_file, 3, answers=False)
    assert status_json(spec_file)["faults"]["netem"]["h3"]["loss_pct"] == 100.0
    assert cli("netem", "--spec", spec, "3", "--clear").returncode == 0
    wait_json(spec_file, "node 3 back after netem", back_in(3))
    delayed = cli("netem", "--spec", spec, "3", "--delay", "20ms")
    if delayed.returncode != 0:  # a kernel without the netem qdisc: one line saying so
        assert delayed.stderr.count("\n") == 1 and "has no netem qdisc" in delayed.stderr
    assert cli("netem", "--spec", spec, "3", "--clear").returncode == 0

    # rolling restart: every node a new process, each back before the next stops
    before = {n["id"]: n["pid"] for n in status_json(spec_file)["nodes"]}
    seen += [holds.enter_context(hold(pid, f"node {i}", node_mark(data_dirs[i], i)))
             for i, pid in before.items()]
    rolled = cli("restart", "--spec", spec, "--rolling")
    assert rolled.returncode == 0, rolled.stderr
    lines = rolled.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if "answering" in line or "stopped" in line
            or "registered again" in line] == [
        "node 1 on h1", "node 1 on h1", "node 1", "node 2 on h2", "node 2 on h2", "node 2",
        "node 3 on h3", "node 3 on h3", "node 3"]
    in_sync = [line for line in lines if "have a leader and a full ISR" in line]
    assert len(in_sync) == 4, rolled.stdout  # before each node stops, and at the end
    after = {n["id"]: n["pid"] for n in status_json(spec_file)["nodes"]}
    assert all(after[i] != before[i] and after[i] is not None for i in before)
    seen += [holds.enter_context(hold(pid, f"node {i}", node_mark(data_dirs[i], i)))
             for i, pid in after.items()]
    wait_json(spec_file, "every node back", lambda f: all(back_in(i)(f) for i in (1, 2, 3)))
    after_faults = consume(bootstrap, topic, len(acked) + 1)
    assert sorted(after_faults) == sorted(acked)  # every acknowledged record, exactly once

    # node 2's traces (it alone is traced) copied from the ssh host and read by `trace`
    out = tmp_path / "traces"
    copied = cli("traces", "--spec", spec, "--out", str(out), "--node", "2")
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert f"from h2:{tmp_path / 'remote'}" in copied.stdout and f"to {out}/node-2" in copied.stdout
    assert any((out / "node-2" / "traces").rglob("*.parquet"))
    listed = subprocess.run([sys.executable, "-m", "actors.cli", "trace", "list", "--limit",
                             "100000", "--dir", str(out / "node-2")], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert listed.returncode == 0 and "@node-2\n" in listed.stdout, listed.stderr

    down = cli("down", "--spec", spec)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not [held for held in seen if not held.exited()]  # (down waited for each)
    assert not {f"alog-e2e{NAME}-h1", f"alog-e2e{NAME}-h3"} & netns.namespaces()
    assert not netns.link_exists(netns.veth_name(a1)) and not netns.link_exists(
        netns.veth_name(a3))
    assert not (spec_file.parent / f"{NAME}.cluster" / "state.json").exists()
    assert not processes_with(str(spec_file.parent / f"{NAME}.cluster"))
    assert not processes_with(str(tmp_path / "remote"))
    assert ssh_host.host.netns in netns.namespaces()  # the fixture's host stays for it to remove


def cli_topics(spec: Path) -> list[dict[str, Any]]:
    result = cli("status", "--spec", str(spec), "--json", "--topics", "--no-groups")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["topics"]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_failed_start_names_host_command_and_log_then_rolls_back(spec_file: Path) -> None:
    skip_unless_namespaces()
    address = free_test_address()
    spec_file.write_text(f"""
[hosts.h1]
via = "netns"
address = "{address}"
[zookeeper]
hosts = ["h1"]
[nodes.1]
host = "h1"
[nodes.2]
host = "h1"
config = {{"listeners" = "198.18.0.254:9192"}}
""")
    bridge_before = netns.link_exists(netns.BRIDGE)
    failed = cli("up", "--spec", str(spec_file), "--timeout", "60")
    assert failed.returncode == 1
    out = failed.stdout
    assert "FAILED: node 2 on host h1: exited before it answered" in out, out
    assert f"command: ip netns exec alog-{NAME}-h1 {ACTORLOG} serve --config " in out
    assert "cannot listen on 198.18.0.254:9192" in out  # from the tail of its log
    assert "rolled back: node 1 on h1 stopped" in out
    assert "rolled back: ZooKeeper on h1 stopped" in out
    assert f"rolled back: removed host h1 (alog-{NAME}-h1)" in out
    assert failed.stderr.strip() == ("Error: cluster up failed: node 2 on host h1: exited "
                                     "before it answered")
    assert f"alog-{NAME}-h1" not in netns.namespaces()
    assert netns.link_exists(netns.BRIDGE) == bridge_before
    assert not (spec_file.parent / f"{NAME}.cluster" / "state.json").exists()
    data = spec_file.parent / f"{NAME}.cluster" / "data"
    assert not runs(int((data / "node-1" / "serve.pid").read_text()), node_mark(data, 1))
    assert not runs(int((data / "zookeeper" / "zk_server.pid").read_text()),
                    zookeeper_mark(data / "zookeeper"))

    kept = cli("up", "--spec", str(spec_file), "--timeout", "60", "--keep")
    assert kept.returncode == 1 and "--keep: leaving what was started" in kept.stdout
    assert f"alog-{NAME}-h1" in netns.namespaces()
    node1 = int((data / "node-1" / "serve.pid").read_text())
    with hold(node1, "node 1", node_mark(data, 1)) as node1_process:
        down = cli("down", "--spec", str(spec_file))
        assert down.returncode == 0, down.stderr
        assert node1_process.exited()  # (down waited for it)
    assert f"alog-{NAME}-h1" not in netns.namespaces()


# ------------------------------------------------------ ZooKeeper ensemble
@pytest.mark.local_hosts
@pytest.mark.slow
def test_an_ensemble_the_command_starts_and_one_given_by_connect(
        spec_file: Path, tmp_path: Path, holds: ExitStack) -> None:
    """Three ZooKeeper servers on three loopback addresses (no root needed), ids 1..3 in
    the order of [zookeeper] hosts; a second spec's node joins that ensemble by connect."""
    zk_ports = [free_port() for _ in range(3)]
    ports = [free_port() for _ in range(4)]
    hosts = "".join(f'[hosts.z{i}]\nvia = "local"\naddress = "127.0.0.{i}"\n' for i in (1, 2, 3))
    spec_file.write_text(f"""{hosts}
[zookeeper]
hosts = ["z1", "z2", "z3"]
port = {zk_ports[0]}
quorum_port = {zk_ports[1]}
election_port = {zk_ports[2]}
[nodes.1]
host = "z1"
config = {{"listeners" = "127.0.0.1:{ports[0]}", "actor.gateway.port" = {ports[1]}}}
""")
    spec = str(spec_file)
    up = cli("up", "--spec", spec)
    assert up.returncode == 0, up.stdout + up.stderr
    for i in (1, 2, 3):
        assert re.search(rf"ZooKeeper {i} on z{i} \(127\.0\.0\.{i}:{zk_ports[0]}\): serving "
                         r"\((leader|follower)\)", up.stdout), up.stdout
    data = spec_file.parent / f"{NAME}.cluster" / "data"
    assert (data / "zookeeper-2" / "data" / "myid").read_text().strip() == "2"
    cfg = (data / "zookeeper-3" / "zoo.cfg").read_text()
    for i in (1, 2, 3):
        assert f"server.{i}=127.0.0.{i}:{zk_ports[1]}:{zk_ports[2]}" in cfg
    connect = ",".join(f"127.0.0.{i}:{zk_ports[0]}" for i in (1, 2, 3))
    assert f"zookeeper.connect\" = \"{connect}\"" in (data / "node-1" / "node.toml").read_text()
    found = status_json(spec_file)
    modes = sorted(s["mode"] for s in found["zookeeper"]["servers"])
    assert modes == ["follower", "follower", "leader"]
    assert found["controller"] == 1 and found["healthy"] is True
    zk_servers = [holds.enter_context(hold(
        int((data / f"zookeeper-{i}" / "zk_server.pid").read_text()), f"ZooKeeper {i}",
        zookeeper_mark(data / f"zookeeper-{i}"))) for i in (1, 2, 3)]

    other = tmp_path / "other" / "other.toml"
    other.parent.mkdir()
    other.write_text(f"""
[hosts.here]
via = "local"
[zookeeper]
connect = "{connect}/other"
[nodes.7]
host = "here"
config = {{"listeners" = "127.0.0.1:{ports[2]}", "actor.gateway.port" = {ports[3]}}}
""")
    try:
        joined = cli("up", "--spec", str(other))
        assert joined.returncode == 0, joined.stdout + joined.stderr
        assert "registered in ZooKeeper: [7]; controller: node 7" in joined.stdout
        assert "ZooKeeper on" not in joined.stdout and "ZooKeeper 1 on" not in joined.stdout
        assert len(produce_and_consume(f"127.0.0.1:{ports[2]}", "via-connect", 5)) == 5
    finally:
        down_other = cli("down", "--spec", str(other))
    assert down_other.returncode == 0, down_other.stderr
    assert not any(z.exited() for z in zk_servers)  # a given ensemble is not ours to stop

    down = cli("down", "--spec", spec)
    assert down.returncode == 0, down.stdout + down.stderr
    for i in (1, 2, 3):
        assert f"ZooKeeper {i} on z{i}: stopped" in down.stdout
    assert all(z.exited() for z in zk_servers)  # (down waited for each)
    assert not processes_with(str(data / "zookeeper-"))  # the JVMs went with their wrappers


def processes_with(text: str) -> list[int]:
    """Pids whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in args and pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_status_asks_nothing_of_netns_hosts_that_do_not_exist(spec_file: Path) -> None:
    """Their addresses lead nowhere they should: status says the host is missing instead."""
    spec_file.write_text('[hosts.h1]\nvia = "netns"\naddress = "198.18.0.252"\n'
                         '[zookeeper]\nhosts = ["h1"]\n[nodes.1]\nhost = "h1"\n')
    found = status_json(spec_file)
    missing = f"host h1 (network namespace alog-{NAME}-h1) does not exist"
    assert found["nodes"][0]["error"] == missing and found["nodes"][0]["answers"] is False
    assert found["zookeeper"]["error"] == missing
    assert found["zookeeper"]["servers"][0]["serving"] is False
    assert found["healthy"] is False and found["groups_error"] == "no node answers"


@pytest.mark.local_hosts
def test_a_listener_that_is_not_kafka_is_one_probe_error() -> None:
    """Something else on the port (an HTTP server's answer): a ProbeError, not a traceback."""
    import socket
    import threading

    from actors.hosts.probe import ProbeError, api_versions

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_http() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=answer_http, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ProbeError, match=re.escape(
                f"{address} does not speak the Kafka protocol (")):
            api_versions(address, timeout_s=5)
    finally:
        thread.join(5)
        listener.close()


@pytest.mark.local_hosts
def test_up_refuses_a_node_whose_listener_another_broker_answers_on(
        spec_file: Path, zk_connect: str, tmp_path: Path) -> None:
    """The port of node 2's listener is another broker's: node 2 could not listen and would
    exit, but that broker answered the probe, and `up` waited 90 s for a registration that
    never came. Now it says so at once, and rolls back what it started."""
    spec, ports = two_local_nodes_spec(zk_connect)
    other = BrokerProcess(tmp_path / "other", port=ports[2]).start()
    try:
        spec_file.write_text(spec)
        up = cli("up", "--spec", str(spec_file), timeout_s=120)
        assert up.returncode == 1, up.stdout + up.stderr
        assert (f"node 2 on here: something not started by this spec already answers Kafka "
                f"requests on 127.0.0.1:{ports[2]}") in up.stderr + up.stdout
        assert "rolled back: node 1 on here" in up.stdout
        assert other.proc is not None and other.proc.poll() is None  # left alone
    finally:
        assert other.stop() == 0


@pytest.mark.local_hosts
def test_up_names_the_specs_key_for_a_port_another_process_holds(
        spec_file: Path, zk_connect: str) -> None:
    """A port of a local node held by a process that is no broker: `up` said so only once
    the node had exited, by its log's tail naming `--listen`, a flag no spec has. Now the
    port is tried before the node starts, and the line names the spec's key."""
    import socket

    spec, ports = two_local_nodes_spec(zk_connect)
    spec_file.write_text(spec)
    # node 1's gateway port first, before any node ran: once node 1 had run and been rolled
    # back, its port could be in TIME_WAIT (and the holder's bind refused)
    for port, node_id, key in ((ports[1], 1, "actor.gateway.port"), (ports[2], 2, "listeners")):
        holder = socket.socket()
        try:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", port))
            holder.listen(1)
            up = cli("up", "--spec", str(spec_file), timeout_s=120)
        finally:
            holder.close()
        said = up.stderr + up.stdout
        assert up.returncode == 1, said
        line = (f"cluster up failed: node {node_id} on here: port {port} (127.0.0.1) is still "
                f"in use after 5 s (another process, or one of an earlier run still exiting); "
                f"stop it, or give the node another port in the spec: "
                f"{key} in [nodes.{node_id}.config] (or [config])")
        assert line in said, said
        assert f"node {node_id} on here: started" not in up.stdout, up.stdout
        assert "--listen" not in said, said


@pytest.mark.local_hosts
def test_a_port_let_go_soon_after_is_no_conflict(spec_file: Path, zk_connect: str) -> None:
    """After a stop that ended in SIGKILL only the node's main process was waited for: a
    child of it could still hold its listener for a moment, and the next start was refused
    as another process's port. A port let go within the wait is taken."""
    import socket
    import threading

    spec, ports = two_local_nodes_spec(zk_connect)
    spec_file.write_text(spec)
    cluster = Cluster(load_spec(spec_file), say=lambda line: None)
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", ports[0]))
    holder.listen(1)
    let_go = threading.Timer(1.0, holder.close)
    let_go.start()
    try:
        cluster.check_ports_free(1)  # raised at once while the holder was still there
    finally:
        let_go.cancel()
        holder.close()


@pytest.mark.local_hosts
def test_the_gateway_port_is_tried_on_the_specs_gateway_host(spec_file: Path,
                                                              zk_connect: str) -> None:
    """A spec naming actor.gateway.host: the node binds its gateway there, so the port check
    tries that address (it tried the host's, and missed a port taken on the other)."""
    import socket

    spec, ports = two_local_nodes_spec(zk_connect, '"actor.gateway.host" = "127.0.0.2"')
    spec_file.write_text(spec)
    cluster = Cluster(load_spec(spec_file), say=lambda line: None)
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.2", ports[1]))
        holder.listen(1)
        with pytest.raises(ClusterError) as refused:
            cluster.check_ports_free(1)
        assert f"port {ports[1]} (127.0.0.2)" in str(refused.value)
        assert "actor.gateway.port in [nodes.1.config]" in str(refused.value)
    finally:
        holder.close()


def unreachable_ssh_host_spec(ssh_host: SshServer, spec_file: Path, tmp_path: Path,
                              more: str = "") -> None:
    """A spec whose node and ZooKeeper are on an ssh host whose sshd is then stopped: the
    host cannot be asked anything, as when its link or its sshd is down. ``more``: more of
    the spec."""
    spec_file.write_text(f"""
[hosts.h2]
via = "ssh"
address = "{ssh_host.host.address}"
user = "root"
identity_file = "{ssh_host.identity_file}"
actorlog = "{ACTORLOG}"
data_dir = "{tmp_path / 'remote'}"
[zookeeper]
hosts = ["h2"]
[nodes.1]
host = "h2"
{more}""")
    ssh_host.stop()


def test_status_says_a_process_on_a_host_that_does_not_answer_is_unknown(
        ssh_host: SshServer, spec_file: Path, tmp_path: Path) -> None:
    """It said "down", and when the node still answered Kafka requests the reason was shown
    nowhere."""
    port = free_port()  # node 2's listener: a broker answers there (as a node still serving)
    answering = BrokerProcess(tmp_path / "answering", port=port).start()
    try:
        unreachable_ssh_host_spec(ssh_host, spec_file, tmp_path,
                                  f'[nodes.2]\nhost = "h2"\n'
                                  f'config = {{"listeners" = "127.0.0.1:{port}"}}\n')
        result = cli("status", "--spec", str(spec_file), timeout_s=120)
        serving = node_status(spec_file, 2)
    finally:
        assert answering.stop() == 0
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("1 "))
    assert row.split()[4] == "unknown", result.stdout  # node, host, listener, pid, process
    ssh_error = (f"host h2 (root@{ssh_host.host.address}, port 22): ssh failed: "
                 f"ssh: connect to host {ssh_host.host.address} port 22: Connection refused")
    assert f"node 1: process unknown, its host did not answer: {ssh_error}" in result.stdout
    node = node_status(spec_file, 1)
    assert node["host_error"] == ssh_error and node["alive"] is False
    # the Kafka probe's own error, not the ssh one again
    assert node["error"] == f"{ssh_host.host.address}:9092: Connection refused"
    # a node that answers has no error: the ssh one is its host's (it was its error too)
    assert serving["answers"] is True and serving["error"] is None, serving
    assert serving["host_error"] == ssh_error and serving["alive"] is False


def test_down_names_what_it_could_not_stop_on_a_host_that_does_not_answer(
        ssh_host: SshServer, spec_file: Path, tmp_path: Path) -> None:
    """It printed the ssh error once per process, without saying which processes may be
    left running there."""
    unreachable_ssh_host_spec(ssh_host, spec_file, tmp_path)
    result = cli("down", "--spec", str(spec_file), timeout_s=120)
    assert result.returncode == 1, result.stdout + result.stderr
    ssh_error = (f"host h2 (root@{ssh_host.host.address}, port 22): ssh failed: "
                 f"ssh: connect to host {ssh_host.host.address} port 22: Connection refused")
    assert result.stderr.splitlines() == [
        f"Error: node 1 on h2: NOT stopped, it may still run: {ssh_error}",
        f"ZooKeeper on h2: NOT stopped, it may still run: {ssh_error}",
        "`cluster down` again stops what is left, once its host answers"], result.stderr


def test_restart_stops_nothing_while_a_nodes_host_does_not_answer(
        ssh_host: SshServer, spec_file: Path, tmp_path: Path, zk_connect: str,
        holds: ExitStack) -> None:
    """Node 2's host was found not to answer only at node 2's turn: a plain restart had
    stopped node 1 by then and left it down."""
    listener, gateway = free_port(), free_port()
    spec_file.write_text(f"""
[hosts.here]
via = "local"
[hosts.h2]
via = "ssh"
address = "{ssh_host.host.address}"
user = "root"
identity_file = "{ssh_host.identity_file}"
actorlog = "{ACTORLOG}"
data_dir = "{tmp_path / 'remote'}"
[zookeeper]
connect = "{zk_connect}"
[nodes.1]
host = "here"
config = {{"listeners" = "127.0.0.1:{listener}", "actor.gateway.port" = {gateway}}}
[nodes.2]
host = "h2"
""")
    ssh_host.stop()
    cluster = Cluster(load_spec(spec_file), say=lambda line: None)
    data = spec_file.parent / f"{NAME}.cluster" / "data"
    try:
        cluster.start_node(1, [])
        node_1 = holds.enter_context(hold(int((data / "node-1" / "serve.pid").read_text()),
                                          "node 1", node_mark(data, 1)))
        cluster.wait_answering(1, 90)
        for rolling in ([], ["--rolling"]):
            result = cli("restart", "--spec", str(spec_file), *rolling, timeout_s=120)
            assert result.returncode == 1, result.stdout + result.stderr
            assert not node_1.exited(), result.stdout  # the same process serves on
            assert result.stderr.splitlines() == [
                f"Error: node 2 on h2: host h2 (root@{ssh_host.host.address}, port 22): ssh "
                f"failed: ssh: connect to host {ssh_host.host.address} port 22: Connection "
                f"refused", "nothing was restarted",
                f"name the nodes to restart the others: `actorlog cluster restart --spec "
                f"{spec_file}{' --rolling' if rolling else ''} 1`"], result.stderr
            assert "node 1 on here: stopped" not in result.stdout
        # the way the hint names
        result = cli("restart", "--spec", str(spec_file), "1", timeout_s=150)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "node 1 on here: stopped" in result.stdout and node_1.exited()
    finally:
        assert cluster.node(1).stop(30) in ("stopped", "killed", "not running")
        cluster.close()


def _up_one_node_of_two_processes(spec_file: Path, zk_connect: str) -> Path:
    """`cluster up` of one local node with num.processes = 2; the cluster's data dir."""
    listener, gateway = free_port(), free_port()
    spec_file.write_text(f"""
[hosts.here]
via = "local"
[zookeeper]
connect = "{zk_connect}"
[nodes.1]
host = "here"
[nodes.1.config]
"listeners" = "127.0.0.1:{listener}"
"actor.gateway.port" = {gateway}
"num.processes" = 2
""")
    up = cli("up", "--spec", str(spec_file), timeout_s=150)
    assert up.returncode == 0, up.stdout + up.stderr
    return spec_file.parent / f"{NAME}.cluster" / "data"


def _hold_both_processes(data: Path, holds: ExitStack) -> tuple[HeldProcess, HeldProcess]:
    """Node 1's process 0 and its process 1, each held (a reused pid is never signalled)."""
    pid = int((data / "node-1" / "serve.pid").read_text())
    node = holds.enter_context(hold(pid, "node 1", node_mark(data, 1)))
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children  # process 1 of the node
    return node, holds.enter_context(hold(int(children[0]), "node 1's process 1",
                                          "-m actors.processes "))


@pytest.mark.local_hosts
def test_pause_and_resume_take_every_process_of_a_node(
        spec_file: Path, zk_connect: str, holds: ExitStack) -> None:
    """A node of two processes: SIGSTOP went to the first alone and the other served on."""
    data = _up_one_node_of_two_processes(spec_file, zk_connect)
    try:
        node, second = _hold_both_processes(data, holds)
        assert cli("pause", "--spec", str(spec_file), "1").returncode == 0
        # each held stopped (another test's SIGCONT to a reused pid would end a pause)
        keepers = [KeepStopped(node, "node 1"), KeepStopped(second, "node 1's process 1")]
        try:
            # stopped with the first (a SIGSTOP takes effect when its process next runs)
            wait_until(lambda: second.state() == "T", timeout_s=10,
                       what="node 1's process 1 to be stopped")
        finally:
            for keeper in keepers:
                keeper.end()
        assert cli("resume", "--spec", str(spec_file), "1").returncode == 0
        wait_until(lambda: second.state() not in ("T", None) and
                   node.state() not in ("T", None), timeout_s=10,
                   what="node 1's processes to continue")
        # paused, then down: every process continued, so each can act on its SIGTERM
        assert cli("pause", "--spec", str(spec_file), "1").returncode == 0
    finally:
        down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stdout + down.stderr
    assert "node 1 on here: stopped" in down.stdout
    assert node.exited()
    wait_until(second.exited, timeout_s=30, what="node 1's process 1 to exit")


@pytest.mark.local_hosts
def test_a_killed_process_of_a_node_is_restarted_and_a_supervisor_that_gives_up_is_said(
        spec_file: Path, zk_connect: str, holds: ExitStack,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster.kill_process: SIGKILL to process 1 of a node alone; its supervisor restarts it
    (wait_process_restarted: another pid, serving; one failed ps meanwhile, as an ssh hiccup
    gives, is not a node gone; nor is an ssh failure, SshFailed, under
    wait_processes_serving or wait_stopped: they raised it, ending a chaos run). Killed
    past RESTARTS_MAX times within RESTART_WINDOW_S, the supervisor stops the broker:
    SupervisorGaveUp, in its words."""
    data = _up_one_node_of_two_processes(spec_file, zk_connect)
    cluster = Cluster(load_spec(spec_file), say=lambda line: None)
    runner = cluster.runners["here"]
    real_run = runner.run
    hiccups = {"due": 1, "seen": 0}

    def ssh_hiccup_at_next_ps(command: list[str], **kwargs: Any) -> HostResult:
        """The next ``ps`` fails as ssh does when its connection drops (exit 255)."""
        if command[:1] == ["ps"] and hiccups["due"]:
            hiccups["due"] -= 1
            hiccups["seen"] += 1
            raise SshFailed("host here: ssh failed: Connection reset by peer (a test's)")
        return real_run(command, **kwargs)

    try:
        node, second = _hold_both_processes(data, holds)
        # an ssh hiccup under the waits is looked at again, not the wait's end
        with monkeypatch.context() as patch:
            patch.setattr(runner, "run", ssh_hiccup_at_next_ps)
            assert cluster.wait_processes_serving(1, 60) == {1: second.pid}
            assert hiccups == {"due": 0, "seen": 1}
        assert {k: p.pid for k, p in cluster.node_processes(1).items()} == {
            0: node.pid, 1: second.pid}
        kills = [time.monotonic()]
        assert cluster.kill_process(1, 1) == second.pid
        assert second.exited(timeout_s=10)
        # the next look at the node's process fails (its ps, as over ssh that hiccups)
        failed: list[list[str]] = []

        def run_failing_once(command: list[str], **kwargs: Any) -> HostResult:
            if not failed and command[:1] == ["ps"] and "-p" in command:
                failed.append(command)
                return HostResult(1, "", "ps: the look failed")
            return real_run(command, **kwargs)

        monkeypatch.setattr(runner, "run", run_failing_once)
        restarted = cluster.wait_process_restarted(1, 1, second.pid, 90)
        assert failed and restarted != second.pid and not node.exited()
        assert cluster.node_processes(1)[1].pid == restarted
        with pytest.raises(ClusterError, match="no running process 2"):
            cluster.kill_process(1, 2)
        # the first restart counts in the window: RESTARTS_MAX - 1 more are restarted, and
        # the next death stops the broker; bounded: a host whose restarts are too slow to
        # die RESTARTS_MAX + 1 times within the window is skipped, not failed
        gave_up: SupervisorGaveUp | None = None
        while gave_up is None and len(kills) < 3 * RESTARTS_MAX \
                and time.monotonic() - kills[0] < 3 * RESTART_WINDOW_S:
            kills.append(time.monotonic())
            killed = cluster.kill_process(1, 1)
            try:
                cluster.wait_process_restarted(1, 1, killed, 90)
            except SupervisorGaveUp as exc:
                gave_up = exc
        if gave_up is None:
            # deaths the supervisor must have counted in one window (5 s for its own clock)
            dense = any(kills[k + RESTARTS_MAX] - kills[k] < RESTART_WINDOW_S - 5
                        for k in range(len(kills) - RESTARTS_MAX))
            assert not dense, f"killed {len(kills)} times, {RESTARTS_MAX + 1} of them " \
                f"within {RESTART_WINDOW_S - 5:g} s, and the supervisor did not give up"
            pytest.skip(f"this host restarts a process too slowly for the give-up: "
                        f"{len(kills)} kills over {time.monotonic() - kills[0]:.0f} s, never "
                        f"{RESTARTS_MAX + 1} within {RESTART_WINDOW_S:g} s")
        assert f"died {RESTARTS_MAX + 1} times within {RESTART_WINDOW_S:.0f} s; stopping " \
            "the broker" in gave_up.reason, gave_up.reason
        assert str(gave_up).startswith("node 1 stopped instead of restarting its process 1: ")
        hiccups["due"] = 1
        with monkeypatch.context() as patch:
            patch.setattr(runner, "run", ssh_hiccup_at_next_ps)
            assert cluster.wait_stopped(1, 30) and node.exited(timeout_s=5)
            assert hiccups == {"due": 0, "seen": 2}
    finally:
        cluster.close()
        down = cli("down", "--spec", str(spec_file))
    assert down.returncode == 0, down.stdout + down.stderr


@pytest.mark.local_hosts
def test_a_node_that_outlives_its_stop_timeout_is_killed_with_every_process(
        spec_file: Path, zk_connect: str, holds: ExitStack) -> None:
    """Process 1 of the node is stuck (stopped here), so process 0 waits on it past the stop
    timeout: SIGKILL went to process 0 alone and left process 1 behind, holding its share of
    the node's listener."""
    data = _up_one_node_of_two_processes(spec_file, zk_connect)
    second: HeldProcess | None = None
    try:
        node, second = _hold_both_processes(data, holds)
        # once every process is ready: a SIGTERM before stops the start itself, which
        # waits on process 1 as the stop does
        log = data / "node-1" / "serve.log"
        wait_until(lambda: "actorlog broker 1 listening on" in log.read_text(), timeout_s=60,
                   what="node 1 to have started every process")
        assert second.send_signal(signal.SIGSTOP)
        keeper = KeepStopped(second, "node 1's process 1")
        try:
            down = cli("down", "--spec", str(spec_file), "--stop-timeout", "3")
        finally:
            keeper.end()
        assert down.returncode == 0, down.stdout + down.stderr
        assert "node 1 on here: killed" in down.stdout, down.stdout
        assert node.exited()
        wait_until(second.exited, timeout_s=30, what="node 1's process 1 to be killed too")
    finally:
        if second is not None and not second.exited():
            second.kill()  # (left behind: it would hold the listener's port)
