"""DescribeUserScramCredentials / AlterUserScramCredentials on a running broker, driven by
confluent-kafka's AdminClient: users listed and described, a user added through the API
logs in with SCRAM right after and is locked out once deleted, Kafka's errors for an
unknown user and a bad iteration count, and CLUSTER_AUTHORIZATION_FAILED for a user who
may not alter the cluster (ACLs on). One node, SASL_PLAINTEXT, `super.users = User:admin`;
admin and alice made with `actorlog users add` before the node starts. A two-node cluster
shows a user added through one node logging in through the other."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism as KpMechanism
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.errors import ClusterAuthorizationFailedError

from actors.security.local_store import LocalSecurityStore
from tests.fixtures.broker import ROOT, BrokerProcess, free_port
from tests.fixtures.waiting import wait_for

pytestmark = [pytest.mark.clients]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
TIMEOUT = 15


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actors.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def _add_users(base: Path, data_or_config: tuple[str, str]) -> None:
    for user, password in PASSWORDS.items():
        secret = base / f"{user}.password"
        secret.write_text(password + "\n")
        out = _cli("users", "add", user, "--mechanism", "SCRAM-SHA-256", "--password-file",
                   str(secret), *data_or_config)
        assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("scram-api")
    _add_users(base, ("--data-dir", str(base / "data")))
    # an ACL on the cluster resource: only admin may describe or alter it (topics stay open)
    out = _cli("acls", "add", "--allow-principal", "User:admin", "--operation", "All",
               "--cluster", "--data-dir", str(base / "data"))
    assert out.returncode == 0, out.stderr
    port = free_port()
    broker = BrokerProcess(
        base / "data", port=port, listen=f"SASL_PLAINTEXT://127.0.0.1:{port}",
        config={"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "authorizer.class.name": "acl", "super.users": "User:admin",
                "allow.everyone.if.no.acl.found": True}).start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _sasl(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def _admin(bootstrap: str, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **_sasl(user, PASSWORDS[user])})


def _code(future: Any) -> int:
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=TIMEOUT)
    return int(refused.value.args[0].code())


def _produces(bootstrap: str, user: str, password: str, mechanism: str) -> bool | str:
    """True when a producer logging in as ``user`` gets a record acknowledged; else the
    first error librdkafka reported (an authentication failure)."""
    errors: list[KafkaError] = []
    done: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 10000, "error_cb": errors.append,
                         **_sasl(user, password, mechanism)})
    producer.produce("scram-api", b"v", on_delivery=lambda err, _m: done.append(err))
    deadline = time.monotonic() + TIMEOUT
    while not done and not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    if done and done[0] is None:
        return True
    return str(errors[0] if errors else done[0] if done else "no answer")


def _upsert(user: str, password: str, mechanism: ScramMechanism = SHA256,
            iterations: int = 4096) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                        password.encode())


def test_describe_all_one_and_an_unknown_user(node: BrokerProcess) -> None:
    admin = _admin(node.bootstrap)
    everyone = admin.describe_user_scram_credentials(request_timeout=TIMEOUT).result(TIMEOUT)
    assert {"admin", "alice"} <= set(everyone)
    info = everyone["alice"].scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(SHA256, 4096)]
    futures = admin.describe_user_scram_credentials(["alice", "ghost"], request_timeout=TIMEOUT)
    alice = futures["alice"].result(TIMEOUT)
    assert alice.user == "alice"
    assert [(i.mechanism, i.iterations) for i in alice.scram_credential_infos] == [(SHA256, 4096)]
    assert _code(futures["ghost"]) == KafkaError.RESOURCE_NOT_FOUND


def test_an_upserted_user_logs_in_and_a_deleted_one_cannot(node: BrokerProcess) -> None:
    admin = _admin(node.bootstrap)
    futures = admin.alter_user_scram_credentials(
        [_upsert("carol", "carol-secret", SHA512, 8192), _upsert("carol", "carol-secret")],
        request_timeout=TIMEOUT)
    assert futures["carol"].result(TIMEOUT) is None
    # where `actorlog users list` reads it, as stored and server keys
    stored = LocalSecurityStore.in_data_dir(node.data_dir).get_user_configs("carol")[0]
    assert set(stored) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert "iterations=8192" in stored["SCRAM-SHA-512"] and "carol-secret" not in str(stored)
    [described] = admin.describe_user_scram_credentials(
        ["carol"], request_timeout=TIMEOUT).values()
    assert sorted((i.mechanism, i.iterations) for i in
                  described.result(TIMEOUT).scram_credential_infos) == [(SHA256, 4096),
                                                                        (SHA512, 8192)]
    # a SCRAM login right after the change, with either mechanism
    assert _produces(node.bootstrap, "carol", "carol-secret", "SCRAM-SHA-512") is True
    assert _produces(node.bootstrap, "carol", "carol-secret", "SCRAM-SHA-256") is True

    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", SHA512), UserScramCredentialDeletion("carol",
                                                                                 SHA256)],
        request_timeout=TIMEOUT)
    assert futures["carol"].result(TIMEOUT) is None
    refused = _produces(node.bootstrap, "carol", "carol-secret", "SCRAM-SHA-512")
    assert refused is not True and "Authentication failed" in refused, refused
    [gone] = admin.describe_user_scram_credentials(["carol"], request_timeout=TIMEOUT).values()
    assert _code(gone) == KafkaError.RESOURCE_NOT_FOUND
    # deleting what is not there
    [again] = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", SHA256)], request_timeout=TIMEOUT).values()
    assert _code(again) == KafkaError.RESOURCE_NOT_FOUND


def test_bad_iteration_counts_are_refused(node: BrokerProcess) -> None:
    admin = _admin(node.bootstrap)
    futures = admin.alter_user_scram_credentials(
        [_upsert("few", "pw", iterations=1000), _upsert("many", "pw", SHA512, 20000),
         _upsert("fine", "fine-secret")], request_timeout=TIMEOUT)
    assert _code(futures["few"]) == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert _code(futures["many"]) == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert futures["fine"].result(TIMEOUT) is None  # the other users of the request go ahead
    users = LocalSecurityStore.in_data_dir(node.data_dir).get_users()
    assert "few" not in users and "many" not in users and "fine" in users


def test_a_user_without_cluster_alter_is_refused(node: BrokerProcess) -> None:
    alice = _admin(node.bootstrap, "alice")
    [denied] = alice.alter_user_scram_credentials([_upsert("mallory", "pw")],
                                                  request_timeout=TIMEOUT).values()
    assert _code(denied) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    [not_shown] = alice.describe_user_scram_credentials(["admin"],
                                                        request_timeout=TIMEOUT).values()
    assert _code(not_shown) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Every user asked for: Kafka's one top-level error. librdkafka 2.16 aborts the process
    # on a top-level error in this response, so kafka-python asks.
    with _kafka_python_admin(node.bootstrap, "alice") as kp_alice, \
            pytest.raises(ClusterAuthorizationFailedError):
        kp_alice.describe_user_scram_credentials()
    assert "mallory" not in LocalSecurityStore.in_data_dir(node.data_dir).get_users()


def test_kafka_python_admin_and_a_user_named_twice(node: BrokerProcess) -> None:
    """kafka-python's admin client; confluent-kafka refuses duplicates before sending."""
    with _kafka_python_admin(node.bootstrap, "admin") as admin:
        everyone = admin.describe_user_scram_credentials()
        assert everyone["alice"] == {"error": None, "credential_infos": [
            {"mechanism": KpMechanism.SCRAM_SHA_256, "iterations": 4096}]}
        twice = admin.describe_user_scram_credentials(["alice", "alice", "ghost"])
        assert set(twice) == {"alice", "ghost"}
        assert "named 2 times" in twice["alice"]["error"]
        assert twice["ghost"]["error"] == "user 'ghost' has no SCRAM credential"
        changed = admin.alter_user_scram_credentials([
            KpUpsertion("kp-user", KpMechanism.SCRAM_SHA_512, "kp-secret"),
            KpDeletion("nobody", KpMechanism.SCRAM_SHA_256)])
        assert changed == {"kp-user": None,
                           "nobody": "user 'nobody' has no SCRAM-SHA-256 credential to delete"}
    assert _produces(node.bootstrap, "kp-user", "kp-secret", "SCRAM-SHA-512") is True


@contextmanager
def _kafka_python_admin(bootstrap: str, user: str) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                             sasl_plain_password=PASSWORDS[user], request_timeout_ms=15000)
    try:
        yield admin
    finally:
        admin.close()


def test_users_added_while_the_node_runs_log_in(node: BrokerProcess, tmp_path: Path) -> None:
    """`actorlog users add` on the running node's data dir counts at once."""
    secret = tmp_path / "late.password"
    secret.write_text("late-secret\n")
    out = _cli("users", "add", "late", "--mechanism", "SCRAM-SHA-512", "--password-file",
               str(secret), "--data-dir", str(node.data_dir))
    assert out.returncode == 0, out.stderr
    assert _produces(node.bootstrap, "late", "late-secret", "SCRAM-SHA-512") is True


def test_a_user_added_through_one_node_logs_in_through_another(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(size=2, start=False, config={
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512", "trace.sample.ratio": 0.0})
    for member in cluster.nodes.values():
        member.process.listen = f"SASL_PLAINTEXT://127.0.0.1:{member.port}"
    config = tmp_path / "users.toml"
    config.write_text(f'"zookeeper.connect" = "{cluster.zk_connect}"\n')
    for member in cluster.nodes.values():
        member.start()
    # the admin user goes into ZooKeeper while the nodes run (their change notices)
    _add_users(tmp_path, ("--config", str(config)))
    node_a, node_b = cluster.nodes[1], cluster.nodes[2]
    admin = _admin(node_a.bootstrap)
    deadline = time.monotonic() + 30
    while True:
        try:
            if len(admin.list_topics(timeout=5).brokers) == 2:
                break
        except KafkaException:
            pass
        assert time.monotonic() < deadline, "the nodes did not form a cluster"
        time.sleep(0.5)
    [added] = admin.alter_user_scram_credentials(
        [_upsert("zoe", "zoe-secret", SHA512)], request_timeout=TIMEOUT).values()
    assert added.result(TIMEOUT) is None
    # the client picks the node it asks: log in through the one that did not serve it
    if "SCRAM credentials of user zoe changed" in node_b.log():
        node_a, node_b = node_b, node_a
    assert "SCRAM credentials of user zoe changed" in node_a.log()
    only_b = AdminClient({"bootstrap.servers": node_b.bootstrap,
                          **_sasl("zoe", "zoe-secret", "SCRAM-SHA-512")})
    deadline = time.monotonic() + 15
    while True:  # node B takes it from ZooKeeper's /config/changes notice
        try:
            assert only_b.list_topics(timeout=5).brokers
            break
        except KafkaException:
            assert time.monotonic() < deadline, node_b.log()[-3000:]
            time.sleep(0.3)
    # logged right after the credentials are taken, so the login above may come first
    wait_for(lambda: "user zoe: SCRAM credentials refreshed" in node_b.log(),
             "node B to log the refresh", timeout=10)


def test_every_process_of_a_node_takes_a_new_user(tmp_path: Path) -> None:
    """num.processes = 2: connections land on either process (handed in turn); a user added
    through one process's handler logs in through both (each sees the users file change;
    process 1 does not log logins, so the test counts successes)."""
    _add_users(tmp_path, ("--data-dir", str(tmp_path / "data")))
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", port=port,
                           listen=f"SASL_PLAINTEXT://127.0.0.1:{port}",
                           config={"sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
                                   "num.processes": 2}).start(timeout=60)
    try:
        deadline = time.monotonic() + 60
        while "serves connections" not in broker.log():
            assert time.monotonic() < deadline, broker.log()[-3000:]
            time.sleep(0.1)
        admin = _admin(broker.bootstrap)
        [added] = admin.alter_user_scram_credentials(
            [_upsert("pat", "pat-secret", SHA512)], request_timeout=TIMEOUT).values()
        assert added.result(TIMEOUT) is None
        # process 0 hands new connections to both processes in turn (each producer's are
        # closed before the next one's: ties), so the eight logins reach both
        logins = [_produces(broker.bootstrap, "pat", "pat-secret", "SCRAM-SHA-512")
                  for _ in range(8)]
        assert logins == [True] * 8
        # written by another process altogether: neither broker process wrote it
        secret = tmp_path / "quinn.password"
        secret.write_text("quinn-secret\n")
        out = _cli("users", "add", "quinn", "--mechanism", "SCRAM-SHA-256", "--password-file",
                   str(secret), "--data-dir", str(broker.data_dir))
        assert out.returncode == 0, out.stderr
        logins = [_produces(broker.bootstrap, "quinn", "quinn-secret", "SCRAM-SHA-256")
                  for _ in range(8)]
        assert logins == [True] * 8
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]
