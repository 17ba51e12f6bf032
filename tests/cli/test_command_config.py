"""`actorlog topics` and `groups` with `--command-config FILE` against brokers that have no
PLAINTEXT listener: SASL_SSL and SASL_PLAINTEXT (SCRAM, PLAIN), and SSL requiring a client
certificate; the file in the Java clients' form (sasl.jaas.config) and librdkafka's
(sasl.username, ssl.ca.location). A wrong login, a bad file or value: one line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from bench.certs import Pki, make_pki
from tests.cli.test_topics_groups import one_line_error
from tests.fixtures.broker import ROOT, BrokerProcess, free_port

pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]

PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SASL_SSL first, then SASL_PLAINTEXT; no PLAINTEXT listener."""
    base = tmp_path_factory.mktemp("sasl")
    secret = base / "alice.password"
    secret.write_text(PASSWORD + "\n")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        out = subprocess.run(
            [sys.executable, "-m", "actors.cli", "users", "add", "alice", "--mechanism",
             mechanism, "--password-file", str(secret), "--data-dir", str(base / "data")],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
    out = subprocess.run(  # bob: a SCRAM-SHA-256 credential only
        [sys.executable, "-m", "actors.cli", "users", "add", "bob", "--mechanism",
         "SCRAM-SHA-256", "--password-file", str(secret), "--data-dir", str(base / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    port, plain_port = free_port(), free_port()
    broker = BrokerProcess(
        base / "data", port=port,
        listen=f"SASL_SSL://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{plain_port}",
        config={"ssl.keystore.location": str(pki.server),
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "group.initial.rebalance.delay.ms": 0}).start()
    broker.plain_port = plain_port  # type: ignore[attr-defined]
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("mtls") / "data", port=port,
                           listen=f"SSL://127.0.0.1:{port}",
                           config={"ssl.keystore.location": str(pki.server),
                                   "ssl.truststore.type": "PEM",
                                   "ssl.truststore.location": str(pki.ca),
                                   "ssl.client.auth": "required"}).start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _file(tmp_path: Path, text: str, name: str = "client.properties") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _jaas(pki: Pki, mechanism: str, password: str, protocol: str = "SASL_SSL") -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    return (f"# as kafka-topics.sh --command-config takes it\n"
            f"security.protocol={protocol}\n"
            f"sasl.mechanism={mechanism}\n"
            f"sasl.jaas.config={module} required \\\n"
            f'    username="alice" password="{password}";\n'
            f"ssl.ca.location={pki.ca}\n")


def actorlog(bootstrap: str, config: str | None, *args: str,
             timeout_ms: int = 10_000) -> subprocess.CompletedProcess[str]:
    extra = ["--command-config", config] if config is not None else []
    return subprocess.run([sys.executable, "-m", "actors.cli", *args, "--bootstrap", bootstrap,
                           "--timeout-ms", str(timeout_ms), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def as_json(bootstrap: str, config: str, *args: str) -> Any:
    proc = actorlog(bootstrap, config, *args, "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def _commit_as_a_group(bootstrap: str, conf: dict[str, Any], topic: str, group: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for i in range(4):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(25) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 30
    try:
        while got < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 3
        consumer.commit(asynchronous=False)  # offset 3 of the 4
    finally:
        consumer.close()


def test_topics_and_groups_over_sasl_ssl_with_a_java_client_file(
        sasl: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    config = _file(tmp_path, _jaas(pki, "SCRAM-SHA-512", PASSWORD))
    bootstrap = sasl.bootstrap
    made = as_json(bootstrap, config, "topics", "create", "secured", "--partitions", "2")
    assert [(t["name"], t["created"]) for t in made["topics"]] == [("secured", True)]
    listed = as_json(bootstrap, config, "topics", "list")["topics"]
    assert {"name": "secured", "partitions": 2, "internal": False} in listed
    [described] = as_json(bootstrap, config, "topics", "describe", "secured")["topics"]
    assert [p["leader"] for p in described["partitions"]] == [1, 1]

    _commit_as_a_group(bootstrap, {"security.protocol": "SASL_SSL",
                                   "sasl.mechanism": "SCRAM-SHA-256",
                                   "sasl.username": "alice", "sasl.password": PASSWORD,
                                   "ssl.ca.location": str(pki.ca)}, "secured", "auditors")
    groups = as_json(bootstrap, config, "groups", "list")["groups"]
    assert [g["group"] for g in groups] == ["auditors"]
    [group] = as_json(bootstrap, config, "groups", "describe", "auditors")["groups"]
    assert [(o["partition"], o["committed"], o["log_end"], o["lag"])
            for o in group["offsets"]] == [(0, 3, 4, 1)]

    deleted = as_json(bootstrap, config, "topics", "delete", "secured")
    assert deleted["topics"] == [{"name": "secured", "deleted": True, "error": None}]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_sasl_plaintext_with_librdkafka_names(sasl: BrokerProcess, tmp_path: Path,
                                              mechanism: str) -> None:
    config = _file(tmp_path, f"security.protocol=sasl_plaintext\nsasl.mechanism={mechanism}\n"
                             f"sasl.username=alice\nsasl.password={PASSWORD}\n")
    bootstrap = f"127.0.0.1:{sasl.plain_port}"  # type: ignore[attr-defined]
    topic = f"plain-{mechanism.lower()}"
    assert as_json(bootstrap, config, "topics", "create", topic)["topics"][0]["created"]
    assert topic in {t["name"] for t in as_json(bootstrap, config, "topics", "list")["topics"]}


def test_mutual_tls_with_a_client_certificate(mtls: BrokerProcess, pki: Pki,
                                              tmp_path: Path) -> None:
    config = _file(tmp_path, f"security.protocol=SSL\nssl.ca.location={pki.ca}\n"
                             f"ssl.certificate.location={pki.client}\n"
                             f"ssl.key.location={pki.client}\n"
                             "ssl.endpoint.identification.algorithm=https\n"
                             "request.timeout.ms=5000\n")
    proc = actorlog(mtls.bootstrap, config, "topics", "create", "certified", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["topics"][0]["created"]
    # a key Kafka's clients know but this command does not use: named once, not fatal
    assert proc.stderr.strip() == (f"Warning: --command-config {config}: ignoring unknown key "
                                   "request.timeout.ms")
    assert as_json(mtls.bootstrap, _file(tmp_path, f"security.protocol=SSL\n"
                                                  f"ssl.keystore.location={pki.client}\n"
                                                  f"ssl.truststore.location={pki.ca}\n",
                                         "pem-stores.properties"),
                   "groups", "list") == {"groups": []}


def test_a_wrong_password_is_one_line(sasl: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    """The one line carries the broker's SaslAuthenticate error_message (which mechanism
    failed and why), not kafka-python's generic 'SASL Authentication failed.'; never the
    password."""
    config = _file(tmp_path, _jaas(pki, "SCRAM-SHA-256", "not-the-password"))
    for args in (("topics", "list"), ("groups", "list")):
        proc = actorlog(sasl.bootstrap, config, *args, timeout_ms=5000)
        one_line_error(proc, 1, "SaslAuthenticationFailed",
                       "invalid credentials with SASL mechanism SCRAM-SHA-256")
        assert "SASL Authentication failed." not in proc.stderr
        assert "not-the-password" not in proc.stdout + proc.stderr
    plain = _file(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                            "sasl.username=alice\nsasl.password=wrong-plain-secret\n",
                  "plain.properties")
    proc = actorlog(f"127.0.0.1:{sasl.plain_port}", plain,  # type: ignore[attr-defined]
                    "topics", "list", timeout_ms=5000)
    one_line_error(proc, 1, "SaslAuthenticationFailed", "Invalid username or password")
    assert "wrong-plain-secret" not in proc.stdout + proc.stderr


def test_a_mechanism_the_user_has_no_credential_of_fails_as_a_login(
        sasl: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    """bob has a SCRAM-SHA-256 credential only: a SCRAM-SHA-512 login is refused as Kafka's
    ScramSaslServer refuses it (SASL_AUTHENTICATION_FAILED, invalid credentials with that
    mechanism), on every attempt, not UNSUPPORTED_SASL_MECHANISM; SCRAM-SHA-256 logs in.
    (librdkafka here: kafka-python 3.0.12 drops an answer that arrives with the close in
    one read, and then reports only 'socket disconnected'.)"""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": sasl.bootstrap, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
                         "sasl.password": PASSWORD, "ssl.ca.location": str(pki.ca),
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                         "error_cb": lambda err: errors.append(err.str())})
    logins = [e for e in errors if "SASL" in e]  # (not librdkafka's "brokers are down")
    deadline = time.monotonic() + 30
    while len(logins) < 3 and time.monotonic() < deadline:
        producer.poll(0.2)
        logins = [e for e in errors if "SASL" in e]
    assert len(logins) >= 3, errors
    assert all("invalid credentials with SASL mechanism SCRAM-SHA-512" in e
               for e in logins), errors
    config = _file(tmp_path, _jaas(pki, "SCRAM-SHA-256", PASSWORD).replace(
        'username="alice"', 'username="bob"'))
    assert "topics" in as_json(sasl.bootstrap, config, "topics", "list")


def test_without_the_config_a_plain_client_is_refused_by_the_tls_listener(
        mtls: BrokerProcess) -> None:
    """Without --command-config the command speaks plain Kafka to the TLS listener: the
    broker refuses it as no TLS handshake, and the one line points to --command-config."""
    proc = actorlog(mtls.bootstrap, None, "topics", "list", timeout_ms=2000)
    one_line_error(proc, 1, "a TLS or SASL listener needs --command-config FILE")
    assert "did not start a TLS handshake" in mtls.log()


@pytest.mark.parametrize(("text", "words"), [
    ("security.protocol=TLS\n", ["security.protocol=TLS", "SASL_SSL"]),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\nsasl.username=a\nsasl.password=b\n",
     ["sasl.mechanism=GSSAPI", "SCRAM-SHA-512"]),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", ["needs a login"]),
    ("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n",
     ["ssl.ca.location=/nonexistent/ca.pem", "No such file"]),
    ("security.protocol=SSL\nssl.truststore.location=TRUSTSTORE\n",
     ["ssl.truststore.location", "not a PEM file"]),
    ("security.protocol=SSL\nssl.endpoint.identification.algorithm=ldap\n",
     ["ssl.endpoint.identification.algorithm=ldap"]),
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, text: str, words: list[str]) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")  # a JKS's magic
    config = _file(tmp_path, text.replace("TRUSTSTORE", str(jks)))
    # no broker listens there: the file is refused before any connection
    one_line_error(actorlog(f"127.0.0.1:{free_port()}", config, "topics", "list"), 2,
                   "--command-config", *words)
    missing = str(tmp_path / "missing.properties")
    one_line_error(actorlog("127.0.0.1:1", missing, "groups", "list"), 2, missing)


def test_endpoint_identification_checks_the_brokers_name(pki: Pki, tmp_path: Path) -> None:
    """The test certificate names localhost, 127.0.0.1 and ::1, not 127.0.0.2: reached at
    127.0.0.2, `https` (the default) refuses the broker and names the mismatch, empty
    accepts it; the cluster probe with the same settings says the same."""
    from actors.cli.client_config import kafka_python_settings
    from actors.hosts.probe import ProbeError, api_versions

    port = free_port()
    broker = BrokerProcess(tmp_path / "data", port=port, host="127.0.0.2",
                           listen=f"SSL://127.0.0.2:{port}",
                           config={"ssl.keystore.location": str(pki.server)}).start()
    try:
        address = f"127.0.0.2:{port}"
        base = f"security.protocol=SSL\nssl.ca.location={pki.ca}\n"
        checked = _file(tmp_path, base, "checked.properties")
        refused = actorlog(address, checked, "topics", "list", timeout_ms=3000)
        one_line_error(refused, 1, "--command-config", "not valid for '127.0.0.2'")
        unchecked = _file(tmp_path, base + "ssl.endpoint.identification.algorithm=\n",
                          "unchecked.properties")
        assert "topics" in as_json(address, unchecked, "topics", "list")
        context = kafka_python_settings({"security.protocol": "SSL",
                                         "ssl.ca.location": str(pki.ca)})["ssl_context"]
        with pytest.raises(ProbeError,
                           match=r"IP address mismatch, .* not valid for '127\.0\.0\.2'"):
            api_versions(address, 5, context)
        context = kafka_python_settings({"security.protocol": "SSL",
                                         "ssl.ca.location": str(pki.ca),
                                         "ssl.endpoint.identification.algorithm": ""}
                                        )["ssl_context"]
        assert api_versions(address, 5, context) > 0
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


# ------------------------------------------------------------------ bench --command-config


def bench(kind: str, bootstrap: str, config: str | None, *args: str
          ) -> subprocess.CompletedProcess[str]:
    extra = ["--command-config", config] if config is not None else []
    return subprocess.run([sys.executable, "-m", "actors.cli", "bench", kind, "--bootstrap",
                           bootstrap, "--no-progress", "--time-limit", "60", *extra, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_bench_produce_consume_e2e_over_sasl(sasl: BrokerProcess, pki: Pki,
                                             tmp_path: Path) -> None:
    """`actorlog bench produce|consume|e2e --command-config FILE` load a broker that has SASL
    listeners only: the file as topics/groups take it (a Java client's sasl.jaas.config over
    SASL_SSL, librdkafka's names over SASL_PLAINTEXT); the JSON shows no password."""
    config = _file(tmp_path, _jaas(pki, "SCRAM-SHA-512", PASSWORD))
    out = tmp_path / "produce.json"
    proc = bench("produce", sasl.bootstrap, config, "--topic", "bench-sasl",
                 "--num-records", "500", "--acks", "all", "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    doc = json.loads(out.read_text())
    assert doc["results"]["acked"] == 500 and doc["results"]["errors"] == {}
    assert doc["config"]["client_config"]["sasl.mechanism"] == "SCRAM-SHA-512"
    assert doc["config"]["client_config"]["sasl.password"] == "[hidden]"
    assert PASSWORD not in out.read_text() + proc.stdout + proc.stderr

    out = tmp_path / "consume.json"
    proc = bench("consume", sasl.bootstrap, config, "--topic", "bench-sasl", "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(out.read_text())["results"]["consumed"] == 500

    plain = _file(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                            f"sasl.username=alice\nsasl.password={PASSWORD}\n", "plain.properties")
    out = tmp_path / "e2e.json"
    proc = bench("e2e", f"127.0.0.1:{sasl.plain_port}", plain,  # type: ignore[attr-defined]
                 "--topic", "bench-e2e-sasl", "--num-records", "200", "--target-rate", "0",
                 "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    results = json.loads(out.read_text())["results"]
    assert (results["produced"], results["consumed"]) == (200, 200)


@pytest.mark.parametrize("kind", ["produce", "consume", "e2e"])
def test_bench_with_a_bad_command_config_is_one_line_and_exit_2(tmp_path: Path,
                                                                kind: str) -> None:
    config = _file(tmp_path, "security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    # no broker listens there: the file is refused before any connection
    one_line_error(bench(kind, f"127.0.0.1:{free_port()}", config), 2, "--command-config",
                   "sasl.mechanism=GSSAPI")
    missing = str(tmp_path / "missing.properties")
    one_line_error(bench(kind, "127.0.0.1:1", missing), 2, missing)


def test_bench_with_a_wrong_password_is_one_line(sasl: BrokerProcess, tmp_path: Path) -> None:
    config = _file(tmp_path, "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                             "sasl.username=alice\nsasl.password=not-the-password\n")
    proc = bench("produce", f"127.0.0.1:{sasl.plain_port}", config,  # type: ignore[attr-defined]
                 "--topic", "bench-refused", "--num-records", "10")
    one_line_error(proc, 1, "SCRAM-SHA-256")
    assert "not-the-password" not in proc.stdout + proc.stderr


def test_bench_e2e_consumers_get_every_connection_setting(sasl: BrokerProcess, pki: Pki,
                                                          tmp_path: Path) -> None:
    """e2e's consumers get the producers' settings but the producer-only ones: here the
    file names no CA and `-X enable.ssl.certificate.verification=false` is what lets a
    client in (a consumer given only security./sasl./ssl. keys fails verification)."""
    config = _file(tmp_path, _jaas(pki, "SCRAM-SHA-512", PASSWORD).replace(
        f"ssl.ca.location={pki.ca}\n", ""), "no-ca.properties")
    out = tmp_path / "e2e.json"
    proc = bench("e2e", sasl.bootstrap, config, "-X", "enable.ssl.certificate.verification=false",
                 "-X", "linger.ms=5", "--topic", "bench-e2e-no-ca", "--num-records", "100",
                 "--target-rate", "0", "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    results = json.loads(out.read_text())["results"]
    assert (results["produced"], results["consumed"]) == (100, 100)
    # the producer's tuning stays the producer's: a consumer would warn it ignores it
    assert "linger.ms" not in proc.stderr, proc.stderr


def test_bench_hides_secrets_and_keeps_connection_settings_for_consumers() -> None:
    from bench.load import consumer_settings
    from bench.load_core import hide_secrets

    settings = {"security.protocol": "SASL_SSL", "sasl.password": "p1",
                "ssl.key.password": "p2", "ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
                "sasl.oauthbearer.client.secret": "s1", "sasl.oauthbearer.config": "t=s2",
                "sasl.jaas.config": 'x required password="p3";', "ssl.certificate.pem": "cert",
                "enable.ssl.certificate.verification": "false", "linger.ms": "5",
                "acks": "all", "socket.timeout.ms": "9000"}
    shown = hide_secrets(settings)
    assert not {"p1", "p2", "s1", "t=s2", 'x required password="p3";',
                "-----BEGIN PRIVATE KEY-----"} & set(shown.values()), shown
    assert shown["ssl.certificate.pem"] == "cert" and shown["security.protocol"] == "SASL_SSL"
    kept = consumer_settings(settings)
    assert kept["enable.ssl.certificate.verification"] == "false"
    assert kept["socket.timeout.ms"] == "9000" and kept["sasl.password"] == "p1"
    assert "linger.ms" not in kept and "acks" not in kept


# ------------------------------------------------------------------ bench over TLS


def _mtls_file(tmp_path: Path, pki: Pki, *, ca: Path | None = None, cert: bool = True,
               name: str = "mtls.properties") -> str:
    text = f"security.protocol=SSL\nssl.ca.location={ca or pki.ca}\n"
    if cert:
        text += f"ssl.certificate.location={pki.client}\nssl.key.location={pki.client}\n"
    return _file(tmp_path, text, name)


def test_bench_produce_and_consume_over_mutual_tls(mtls: BrokerProcess, pki: Pki,
                                                   tmp_path: Path) -> None:
    """A listener with ssl.client.auth=required: bench given the client's certificate and key
    (librdkafka's names, then a Java client's PEM keystore) produces and consumes."""
    out = tmp_path / "produce.json"
    proc = bench("produce", mtls.bootstrap, _mtls_file(tmp_path, pki), "--topic", "bench-mtls",
                 "--num-records", "300", "--acks", "all", "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(out.read_text())["results"]["acked"] == 300
    stores = _file(tmp_path, f"security.protocol=SSL\nssl.keystore.location={pki.client}\n"
                             f"ssl.truststore.location={pki.ca}\n", "stores.properties")
    out = tmp_path / "consume.json"
    proc = bench("consume", mtls.bootstrap, stores, "--topic", "bench-mtls", "--json", str(out))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert json.loads(out.read_text())["results"]["consumed"] == 300


@pytest.mark.parametrize("kind", ["produce", "consume", "e2e"])
def test_bench_without_a_client_certificate_is_one_line(mtls: BrokerProcess, pki: Pki,
                                                        tmp_path: Path, kind: str) -> None:
    proc = bench(kind, mtls.bootstrap, _mtls_file(tmp_path, pki, cert=False),
                 "--topic", "bench-no-cert", "--num-records", "10")
    one_line_error(proc, 1, "TLS handshake failed", "client certificate")


def test_bench_with_a_wrong_ca_is_one_line(mtls: BrokerProcess, pki: Pki,
                                           tmp_path: Path) -> None:
    proc = bench("produce", mtls.bootstrap, _mtls_file(tmp_path, pki, ca=pki.foreign_ca),
                 "--topic", "bench-wrong-ca", "--num-records", "10")
    # the branch's own cause, not librdkafka's appended hint (which names ssl.ca.location too)
    one_line_error(proc, 1, "TLS handshake failed", "not signed by the CA")


def test_bench_ssl_to_a_plaintext_listener_is_one_line(sasl: BrokerProcess, pki: Pki,
                                                       tmp_path: Path) -> None:
    """SSL given for a port that does not speak TLS (here SASL_PLAINTEXT)."""
    proc = bench("produce", f"127.0.0.1:{sasl.plain_port}",  # type: ignore[attr-defined]
                 _mtls_file(tmp_path, pki), "--topic", "bench-not-tls", "--num-records", "10")
    one_line_error(proc, 1, "TLS handshake failed", "not a TLS listener")


def _sasl_ssl_file(tmp_path: Path, pki: Pki, *, password: str = PASSWORD,
                   ca: Path | None = None) -> str:
    return _file(tmp_path, f"security.protocol=SASL_SSL\nssl.ca.location={ca or pki.ca}\n"
                           f"sasl.mechanism=SCRAM-SHA-256\nsasl.username=alice\n"
                           f"sasl.password={password}\n", "sasl-ssl.properties")


def test_bench_over_sasl_ssl_with_a_wrong_password_is_one_line(
        sasl: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    proc = bench("produce", sasl.bootstrap, _sasl_ssl_file(tmp_path, pki, password="wrong-one"),
                 "--topic", "bench-sasl-ssl-refused", "--num-records", "10")
    one_line_error(proc, 1, "login refused", "SCRAM-SHA-256")
    assert "wrong-one" not in proc.stdout + proc.stderr


def test_bench_over_sasl_ssl_with_a_wrong_ca_is_one_line(
        sasl: BrokerProcess, pki: Pki, tmp_path: Path) -> None:
    proc = bench("produce", sasl.bootstrap, _sasl_ssl_file(tmp_path, pki, ca=pki.foreign_ca),
                 "--topic", "bench-sasl-ssl-wrong-ca", "--num-records", "10")
    one_line_error(proc, 1, "TLS handshake failed", "not signed by the CA")


class _DropsFirstConnection:
    """A TCP relay to ``port`` that closes its first connection at once, as a restarting
    broker or a connection limit would: librdkafka reports that close as a failed TLS
    handshake ('connecting to a PLAINTEXT broker listener?')."""

    def __init__(self, port: int) -> None:
        import socket
        import threading

        self.target = port
        self.accepted = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[Any] = []
        self.threads = [threading.Thread(target=self._serve, daemon=True)]
        self.threads[0].start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted == 1:  # after reading its hello, as a closing broker does
                conn.settimeout(10)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                conn.close()
                continue
            self.sockets.append(conn)
            self.threads.append(threading.Thread(target=self._relay, args=(conn,),
                                                 daemon=True))
            self.threads[-1].start()

    def _relay(self, conn: Any) -> None:
        import socket
        import threading
        import time

        # held a moment: the client's first metadata call fails on the close, and the
        # check reads librdkafka's error before a later try gets through
        time.sleep(1.0)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        self.sockets.append(upstream)
        other = threading.Thread(target=self._pipe, args=(upstream, conn), daemon=True)
        self.threads.append(other)
        other.start()
        self._pipe(conn, upstream)

    @staticmethod
    def _pipe(a: Any, b: Any) -> None:
        import socket

        try:
            while data := a.recv(65536):
                b.sendall(data)
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        import socket

        self.server.shutdown(socket.SHUT_RDWR)  # (wakes the accept)
        self.server.close()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in list(self.threads):
            thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


def test_one_closed_connection_in_the_handshake_is_not_a_tls_failure(
        mtls: BrokerProcess, pki: Pki) -> None:
    """librdkafka reports any connection closed in the handshake as a failed one: the port
    answers a probe's handshake, so bench waits for librdkafka's next try (which connects)
    instead of stopping at once with 'not a TLS listener'."""
    from bench.peers import check_login

    relay = _DropsFirstConnection(mtls.port)
    try:
        check_login(f"127.0.0.1:{relay.port}", {
            "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client), "ssl.key.location": str(pki.client)})
        assert relay.accepted >= 2  # the close was seen, and a later try got through
    finally:
        relay.close()
