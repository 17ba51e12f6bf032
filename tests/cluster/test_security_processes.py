"""SCRAM users and ACLs on cluster nodes of two processes each (num.processes = 2, issue 18).

Two real nodes on a real ZooKeeper, SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256,
`authorizer.class.name = acl`, `super.users = User:admin`. Each node's ZooKeeper
session lives in its process 0, which relays users and ACLs to its process 1 and
serves the admin requests process 1's handlers forward. Every check runs over raw
connections whose serving process is read from /proc (the process holding the
socket's inode), so "on process 1 of node 2" is certain, not likely:

* a user added by AlterUserScramCredentials through process 1 of node 1 logs in
  at once on that process, and on both processes of node 2 (SCRAM and PLAIN);
  its deletion through process 1 of node 2 locks it out everywhere;
* CreateAcls through process 1 of node 1 lets alice produce through every process
  of both nodes; DeleteAcls through process 1 of node 2 refuses her everywhere
  (TOPIC_AUTHORIZATION_FAILED);
* kill -9 of process 1: restarted, it has the ACLs and users made before and
  while it was down;
* num.processes unset (one per CPU; ACTORLOG_NUM_PROCESSES = 2 here) gives such
  a node two processes.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest
from scramp import ScramClient

from actors.topology import broker_node_name
from bench.scale import tcp_inodes
from tests.broker.rawclient import API_VERSIONS, CREATE_TOPICS, METADATA, RawClient, record_batch
from tests.broker.test_processes import connections_of
from tests.fixtures.cluster import Cluster, ClusterNode, add_user_with_cli, wait_for
from tests.fixtures.process_lock import hold_restart as hold_process_1
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
TOPIC = "secured"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS = 30, 31, 29
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
TOPIC_TYPE, LITERAL, WRITE, ALLOW = 2, 3, 4, 3
SHA256, ITERATIONS = 1, 4096
PROCESSES = 2
CONFIG = {"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "authorizer.class.name": "acl",
          "super.users": "User:admin", "allow.everyone.if.no.acl.found": False,
          "num.partition.shards": 2}
# a change must reach every process of every node well within this (a watch and a relay:
# tens of ms; the slow re-read behind them comes after a minute)
PROPAGATION_S = 5.0
DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


# ------------------------------------------------------------ connections on a chosen process


def serving_process(node: ClusterNode, client: RawClient) -> int | None:
    """Which process of ``node`` (0, 1, ...) holds the broker's end of ``client``'s
    connection; None while none or two do (a handoff under way)."""
    assert node.pid is not None and client.sock is not None
    inodes = tcp_inodes(node.port, remote_port=client.sock.getsockname()[1])
    holders = [k for k, pid in enumerate([node.pid, *node.worker_pids()])
               if connections_of(pid, inodes)]
    return holders[0] if len(holders) == 1 else None


def connection_on(node: ClusterNode, process: int, attempts: int = 12) -> RawClient:
    """A fresh connection that process ``process`` of ``node`` serves (ApiVersions sent:
    handed over and answered), SASL not begun. The others opened on the way are closed."""
    extra = []
    try:
        for i in range(attempts):
            client = RawClient(node.port, client_id=f"p{process}-{i}")
            assert client.call(API_VERSIONS, 3, {"client_software_name": "test",
                                                 "client_software_version": "1"}
                               ).error_code == 0
            where = wait_for("the connection to sit in one process",
                             lambda c=client: (k := serving_process(node, c)) is not None
                             and (k,), 5)[0]
            if where == process:
                return client
            extra.append(client)
        raise AssertionError(f"no connection of {attempts} landed on process {process} of "
                             f"node {node.broker_id}")
    finally:
        for client in extra:
            client.close()


def authenticate(client: RawClient, user: str, password: str, mechanism: str) -> bool:
    """SASL over ``client``: True when logged in; False when the broker refused (it closes
    the connection)."""
    shake = client.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert shake.error_code == 0, shake
    if mechanism == "PLAIN":
        done = client.call(SASL_AUTHENTICATE, 2,
                           {"auth_bytes": f"\0{user}\0{password}".encode()})
        return int(done.error_code) == 0
    scram = ScramClient([mechanism], user, password)
    first = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_first().encode()})
    if first.error_code != 0:
        return False
    scram.set_server_first(first.auth_bytes.decode())
    final = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_final().encode()})
    if final.error_code != 0:
        return False
    scram.set_server_final(final.auth_bytes.decode())
    return True


def logs_in(node: ClusterNode, process: int, user: str, password: str,
            mechanism: str = "SCRAM-SHA-256") -> bool:
    client = connection_on(node, process)
    try:
        return authenticate(client, user, password, mechanism)
    finally:
        client.close()


def login_on(node: ClusterNode, process: int, user: str) -> RawClient:
    client = connection_on(node, process)
    assert authenticate(client, user, PASSWORDS[user], "SCRAM-SHA-256"), (node.broker_id,
                                                                           process, user)
    return client


# ------------------------------------------------------------ the cluster


def start_secured(cluster_factory: Any, tmp_path: Path, size: int = 2,
                  config: dict[str, Any] | None = None,
                  env: dict[str, str | None] | None = None) -> Cluster:
    cluster: Cluster = cluster_factory(size=size, start=False,
                                       config=config or {**CONFIG, "num.processes": PROCESSES})
    for member in cluster.nodes.values():
        member.process.listen = f"SASL_PLAINTEXT://127.0.0.1:{member.port}"
        member.process.env = dict(env or {})
    for user, password in PASSWORDS.items():
        add_user_with_cli(cluster, tmp_path, user, password)
    for member in cluster.nodes.values():
        member.start()
    for member in cluster.nodes.values():
        wait_for(f"process 1 of node {member.broker_id}", lambda m=member: m.worker_pids(), 60)
        with login_on(member, 0, "admin") as admin:
            wait_for(f"node {member.broker_id} to list every node",
                     lambda a=admin: len(metadata(a).brokers) == size, 30)
    return cluster


def metadata(client: RawClient, topics: list[str] | None = None) -> Any:
    return client.call(METADATA, 8, {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})


def create_spread_topic(cluster: Cluster) -> dict[int, int]:
    """TOPIC with 4 partitions of one replica each: node -> a partition it leads."""
    node_1 = cluster.nodes[1]
    with login_on(node_1, 0, "admin") as admin:
        created = admin.call(CREATE_TOPICS, 7, {
            "topics": [{"name": TOPIC, "num_partitions": 4, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 30_000, "validate_only": False})
        assert created.topics[0].error_code == 0, created

    def leaders(node: ClusterNode) -> dict[int, int] | None:
        found = {}
        for process in range(PROCESSES):  # each process's handlers keep their own metadata
            with login_on(node, process, "admin") as admin:
                found[process] = {p.partition_index: p.leader_id
                                  for t in metadata(admin, [TOPIC]).topics if t.error_code == 0
                                  for p in t.partitions}
        views = list(found.values())
        good = all(len(v) == 4 and min(v.values()) > 0 for v in views)
        return views[0] if good and all(v == views[0] for v in views) else None

    known = [wait_for(f"node {n.broker_id} to know {TOPIC}", lambda n=n: leaders(n), 30)
             for n in cluster.nodes.values()]
    assert known[0] == known[1] and set(known[0].values()) == {1, 2}, known
    return {node: min(p for p, leader in known[0].items() if leader == node) for node in (1, 2)}


def produce_code(client: RawClient, partition: int) -> int:
    part = client.produce(TOPIC, partition, record_batch([(None, b"from alice")]), acks=1)
    return int(part.error_code)


def write_acl_values() -> dict[str, Any]:
    return {"creations": [{
        "resource_type": TOPIC_TYPE, "resource_name": TOPIC, "resource_pattern_type": LITERAL,
        "principal": "User:alice", "host": "*", "operation": WRITE, "permission_type": ALLOW}]}


def write_acl_filter() -> dict[str, Any]:
    return {"filters": [{
        "resource_type_filter": TOPIC_TYPE, "resource_name_filter": TOPIC,
        "pattern_type_filter": LITERAL, "principal_filter": "User:alice", "host_filter": None,
        "operation": WRITE, "permission_type": ALLOW}]}


def upsertion(user: str, password: str) -> dict[str, Any]:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ITERATIONS)
    return {"deletions": [], "upsertions": [{"name": user, "mechanism": SHA256,
                                             "iterations": ITERATIONS, "salt": salt,
                                             "salted_password": salted}]}


def everywhere(cluster: Cluster) -> list[tuple[ClusterNode, int]]:
    return [(node, k) for node in cluster.nodes.values() for k in range(PROCESSES)]


# ------------------------------------------------------------ the tests


def test_a_scram_user_altered_through_process_1_logs_in_on_every_process_of_both_nodes(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = start_secured(cluster_factory, tmp_path)
    node_1, node_2 = cluster.nodes[1], cluster.nodes[2]
    assert not logs_in(node_2, 1, "bob", "bob-secret")

    with login_on(node_1, 1, "admin") as admin:
        altered = admin.call(ALTER_SCRAM, 0, upsertion("bob", "bob-secret"))
    assert [(r.user, r.error_code) for r in altered.results] == [("bob", 0)], altered
    # the process that served the change lets bob in at once (its copy took the answer)
    assert logs_in(node_1, 1, "bob", "bob-secret")
    for node, process in everywhere(cluster):
        for mechanism in ("SCRAM-SHA-256", "PLAIN"):
            wait_for(f"bob's {mechanism} login on process {process} of node {node.broker_id}",
                     lambda n=node, k=process, m=mechanism: logs_in(n, k, "bob", "bob-secret",
                                                                   m), PROPAGATION_S)
    assert not logs_in(node_2, 1, "bob", "wrong-secret")

    # DescribeUserScramCredentials through process 1 of node 2: read by its process 0
    with login_on(node_2, 1, "admin") as admin:
        described = admin.call(DESCRIBE_SCRAM, 0, {"users": [{"name": "bob"}, {"name": "eve"}]})
        assert described.error_code == 0, described
        rows = {r.user: (r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
                for r in described.results}
        assert rows == {"bob": (0, [(SHA256, ITERATIONS)]),
                        "eve": (int(ErrorCode.RESOURCE_NOT_FOUND), [])}, described
        # and deleted through it: bob is locked out on every process of both nodes
        deleted = admin.call(ALTER_SCRAM, 0, {
            "deletions": [{"name": "bob", "mechanism": SHA256}], "upsertions": []})
        assert [(r.user, r.error_code) for r in deleted.results] == [("bob", 0)], deleted
    assert not logs_in(node_2, 1, "bob", "bob-secret")
    for node, process in everywhere(cluster):
        wait_for(f"bob locked out of process {process} of node {node.broker_id}",
                 lambda n=node, k=process: not logs_in(n, k, "bob", "bob-secret"),
                 PROPAGATION_S)
    for node in cluster.nodes.values():
        assert "Traceback" not in node.log(), node.log()[-3000:]


def test_acls_made_and_deleted_through_process_1_apply_on_every_process_of_both_nodes(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = start_secured(cluster_factory, tmp_path)
    node_1, node_2 = cluster.nodes[1], cluster.nodes[2]
    led = create_spread_topic(cluster)
    alice = {(node.broker_id, k): login_on(node, k, "alice") for node, k in everywhere(cluster)}
    try:
        for (broker, _k), client in alice.items():
            assert produce_code(client, led[broker]) == DENIED

        with login_on(node_1, 1, "admin") as admin:
            made = admin.call(CREATE_ACLS, 2, write_acl_values())
            assert [r.error_code for r in made.results] == [0], made
        # the process that served CreateAcls decides on it at once
        assert produce_code(alice[(1, 1)], led[1]) == 0
        start = time.monotonic()
        for (broker, k), client in alice.items():
            wait_for(f"alice's produce through process {k} of node {broker} to be allowed",
                     lambda c=client, b=broker: produce_code(c, led[b]) == 0, PROPAGATION_S,
                     every_s=0.02)
        allowed_after = time.monotonic() - start

        with login_on(node_2, 1, "admin") as admin:
            # DescribeAcls on process 1 answers from its copy
            described = admin.call(DESCRIBE_ACLS, 2, {
                "resource_type_filter": TOPIC_TYPE, "resource_name_filter": TOPIC,
                "pattern_type_filter": LITERAL, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1})
            assert described.error_code == 0, described
            assert [(r.resource_name, [(a.principal, a.operation) for a in r.acls])
                    for r in described.resources] == [(TOPIC, [("User:alice", WRITE)])]
            deleted = admin.call(DELETE_ACLS, 2, write_acl_filter())
            result = deleted.filter_results[0]
            assert result.error_code == 0 and len(result.matching_acls) == 1, deleted
        assert produce_code(alice[(2, 1)], led[2]) == DENIED
        start = time.monotonic()
        for (broker, k), client in alice.items():
            wait_for(f"alice's produce through process {k} of node {broker} to be refused",
                     lambda c=client, b=broker: produce_code(c, led[b]) == DENIED,
                     PROPAGATION_S, every_s=0.02)
        refused_after = time.monotonic() - start
        print(f"allowed everywhere after {allowed_after * 1000:.0f} ms, refused everywhere "
              f"after {refused_after * 1000:.0f} ms")
    finally:
        for client in alice.values():
            client.close()
    for node in cluster.nodes.values():
        assert "Traceback" not in node.log(), node.log()[-3000:]


def hold_restart(node: ClusterNode, deadline_s: float = 5.0) -> int:
    """``node``'s process 1 held back (tests/fixtures/process_lock.py)."""
    return hold_process_1(node.data_dir, broker_node_name(node.broker_id), deadline_s)


def test_process_1_killed_comes_back_with_the_acls_and_users_made_before_and_meanwhile(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = start_secured(cluster_factory, tmp_path)
    node_1, node_2 = cluster.nodes[1], cluster.nodes[2]
    led = create_spread_topic(cluster)
    with login_on(node_1, 1, "admin") as admin:
        assert admin.call(CREATE_ACLS, 2, write_acl_values()).results[0].error_code == 0
    with login_on(node_2, 1, "alice") as alice:
        wait_for("alice allowed on process 1 of node 2",
                 lambda: produce_code(alice, led[2]) == 0, PROPAGATION_S)

    [worker] = node_2.worker_pids()
    with node_2.process.hold_worker(worker) as process_1:  # (its pid may be another's)
        assert process_1.kill()
        # the restarted process 1 waits for this lock: node 2's process 0 learns what node 1
        # makes below from ZooKeeper's notices, in its own time, and must hold it first
        lock = hold_restart(node_2)
        wait_for("process 1 to die", lambda: process_1.exited() or None, 10)
    try:
        # until process 0 sees process 1's handoff link close it may hand it a connection
        wait_for("process 0 to drop process 1's handoff link",
                 lambda: "process 1's handoff link of listener" in node_2.log(), 10)
        # while it is down: a new user, and a new ACL for it, through the other node
        with login_on(node_1, 0, "admin") as admin:
            altered = admin.call(ALTER_SCRAM, 0, upsertion("carol", "carol-secret"))
            assert altered.results[0].error_code == 0, altered
            made = admin.call(CREATE_ACLS, 2, {"creations": [{
                **write_acl_values()["creations"][0], "principal": "User:carol"}]})
            assert made.results[0].error_code == 0, made

        def carol_known_on_process_0() -> bool:
            # process 1 is down: process 0 serves these connections (a Produce could reach
            # a shard of process 1, which waits for the lock with it)
            with RawClient(node_2.port) as client:
                if not authenticate(client, "carol", "carol-secret", "SCRAM-SHA-256"):
                    return False
            with RawClient(node_2.port) as admin:
                assert authenticate(admin, "admin", PASSWORDS["admin"], "SCRAM-SHA-256")
                found = admin.call(DESCRIBE_ACLS, 2, {
                    "resource_type_filter": TOPIC_TYPE, "resource_name_filter": TOPIC,
                    "pattern_type_filter": LITERAL, "principal_filter": "User:carol",
                    "host_filter": None, "operation": 1, "permission_type": 1})
            return found.error_code == 0 and [
                (r.resource_name, [(a.principal, a.operation) for a in r.acls])
                for r in found.resources] == [(TOPIC, [("User:carol", WRITE)])]

        wait_for("carol and her ACL on process 0 of node 2", carol_known_on_process_0,
                 PROPAGATION_S)
    finally:
        os.close(lock)
    wait_for("process 1 of node 2 restarted",
             lambda: node_2.worker_pids() and node_2.worker_pids()[0] != worker, 60)

    # at once, no waiting: the restarted process took every user and ACL, and its shards
    # their partitions' roles, before it serves
    with login_on(node_2, 1, "alice") as alice:
        assert produce_code(alice, led[2]) == 0
    client = connection_on(node_2, 1)
    try:
        assert authenticate(client, "carol", "carol-secret", "SCRAM-SHA-256")
        assert produce_code(client, led[2]) == 0
    finally:
        client.close()
    assert "SCRAM users and ACLs of process 0 taken" in node_2.log()
    assert node_2.running


def test_num_processes_unset_gives_such_a_node_one_process_per_cpu(
        cluster_factory: Any, tmp_path: Path) -> None:
    config = {k: v for k, v in CONFIG.items() if k != "num.processes"}
    cluster = start_secured(cluster_factory, tmp_path, size=1, config=config,
                            env={"ACTORLOG_NUM_PROCESSES": str(PROCESSES)})
    node = cluster.nodes[1]
    assert len(node.worker_pids()) == PROCESSES - 1
    assert f"{PROCESSES} process(es) (num.processes = 0: one per CPU)" in node.log()
    # and process 1 knows the users ZooKeeper holds
    assert logs_in(node, 1, "alice", PASSWORDS["alice"])
    assert logs_in(node, 1, "alice", PASSWORDS["alice"], "PLAIN")
    assert not logs_in(node, 1, "alice", "wrong")


def test_scram_admin_on_process_1_of_a_node_without_sasl_listeners_reaches_zookeeper(
        cluster_factory: Any) -> None:
    """No SASL listener, no authorizer: nothing to relay, yet the users live in ZooKeeper and
    AlterUserScramCredentials / Describe through process 1 are served by process 0."""
    cluster = cluster_factory(size=1, config={"num.processes": PROCESSES})
    node = cluster.nodes[1]
    wait_for("process 1", node.worker_pids, 60)
    with connection_on(node, 1) as client:
        altered = client.call(ALTER_SCRAM, 0, upsertion("dave", "dave-secret"))
        assert [(r.user, r.error_code) for r in altered.results] == [("dave", 0)], altered
        described = client.call(DESCRIBE_SCRAM, 0, {"users": None})
        assert described.error_code == 0, described
        assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos])
                for r in described.results] == [("dave", [(SHA256, ITERATIONS)])]
    assert "SCRAM credentials of user dave changed by User:ANONYMOUS (through process 1)" \
        in node.log()
