"""SASL listeners of a running broker with real clients: SASL_SSL and SASL_PLAINTEXT with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; users made with `actorlog users add` before the
node starts; wrong passwords, unknown users, requests before authentication, mechanisms
not enabled, and re-authentication (connections.max.reauth.ms)."""

from __future__ import annotations

import re
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaConsumer, KafkaProducer

from bench.certs import Pki, make_pki
from tests.fixtures.broker import ROOT, BrokerProcess, free_port
from tests.fixtures.consuming import consume_values
from tests.fixtures.waiting import wait_for

pytestmark = [pytest.mark.clients]

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}


def _add_users(data_dir: Path, mechanisms: tuple[str, ...]) -> None:
    """`actorlog users add`, as a user would before the node starts."""
    for user, password in PASSWORDS.items():
        secret = data_dir.parent / f"{user}.password"
        secret.write_text(password + "\n")
        for mechanism in mechanisms:
            out = subprocess.run(
                [sys.executable, "-m", "actors.cli", "users", "add", user, "--mechanism",
                 mechanism, "--password-file", str(secret), "--data-dir", str(data_dir)],
                cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
            assert out.returncode == 0, out.stderr
            assert f"user {user}: {mechanism} credential" in out.stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_ssl(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("sasl-ssl")
    _add_users(base / "data", ("SCRAM-SHA-256", "SCRAM-SHA-512"))
    port = free_port()
    broker = BrokerProcess(base / "data", port=port, listen=f"SASL_SSL://127.0.0.1:{port}",
                           config={"ssl.keystore.location": str(pki.server),
                                   "sasl.enabled.mechanisms":
                                       "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                   "connections.max.reauth.ms": 3000}).start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


@pytest.fixture(scope="module")
def sasl_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("sasl-plain")
    _add_users(base / "data", ("SCRAM-SHA-256",))
    port = free_port()
    broker = BrokerProcess(base / "data", port=port,
                           listen=f"SASL_PLAINTEXT://127.0.0.1:{port}",
                           config={"sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN"}).start()
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _conf(protocol: str, mechanism: str, user: str, password: str,
          pki: Pki | None = None) -> dict[str, Any]:
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    if pki is not None:
        conf["ssl.ca.location"] = str(pki.ca)
    return conf


def _round_trip(bootstrap: str, topic: str, extra: dict[str, Any]) -> list[bytes]:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 20000, **extra})
    producer.produce(topic, b"v-" + topic.encode(),
                     on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    if producer.flush(25) or errors:
        raise KafkaException(f"not acknowledged: {errors[:3]}")
    return consume_values({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time_ns()}",
                           "auto.offset.reset": "earliest", **extra}, topic, 1, 30)


def _auth_errors(bootstrap: str, extra: dict[str, Any]) -> list[KafkaError]:
    """Connect a producer that should not get in; the errors librdkafka reports."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append,
                         "message.timeout.ms": 5000, **extra})
    producer.produce("nope", b"x")
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    return errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_sasl_ssl_serves_confluent_kafka(sasl_ssl: BrokerProcess, pki: Pki,
                                         mechanism: str) -> None:
    topic = f"s-{mechanism.lower()}"
    conf = _conf("SASL_SSL", mechanism, "alice", PASSWORDS["alice"], pki)
    assert _round_trip(sasl_ssl.bootstrap, topic, conf) == [b"v-" + topic.encode()]
    assert wait_for(lambda: f"authenticated as User:alice ({mechanism})" in sasl_ssl.log(), 10)


def test_sasl_ssl_serves_kafka_python_scram_512(sasl_ssl: BrokerProcess, pki: Pki) -> None:
    common: dict[str, Any] = {
        "bootstrap_servers": sasl_ssl.bootstrap, "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca), "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "bob", "sasl_plain_password": PASSWORDS["bob"]}
    producer = KafkaProducer(acks="all", **common)
    try:
        producer.send("kp-512", b"from-bob").get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer("kp-512", auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **common)
    try:
        assert [m.value for _, m in zip(range(1), consumer, strict=False)] == [b"from-bob"]
    finally:
        consumer.close()


def test_sasl_plaintext_with_scram_and_plain(sasl_plain: BrokerProcess) -> None:
    conf = _conf("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", PASSWORDS["bob"])
    assert _round_trip(sasl_plain.bootstrap, "p-scram", conf) == [b"v-p-scram"]
    producer = KafkaProducer(bootstrap_servers=sasl_plain.bootstrap, acks="all",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice",
                             sasl_plain_password=PASSWORDS["alice"])
    try:
        producer.send("p-plain", b"plain").get(timeout=20)
    finally:
        producer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_logs_in_with_scram(sasl_ssl: BrokerProcess, pki: Pki, mechanism: str) -> None:
    """kcat 1.7 (librdkafka 2.0.2) repeats its client nonce in the client-final-message
    (librdkafka before 2.6.1); the broker accepts that form as Kafka does."""
    topic = f"kcat-{mechanism.lower()}"
    common = ["kcat", "-b", sasl_ssl.bootstrap, "-X", "security.protocol=SASL_SSL",
              "-X", f"ssl.ca.location={pki.ca}", "-X", f"sasl.mechanisms={mechanism}",
              "-X", "sasl.username=alice", "-X", f"sasl.password={PASSWORDS['alice']}"]
    out = subprocess.run([*common, "-P", "-t", topic], input="one\ntwo\n", capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e", "-q"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "two"]
    assert f"authenticated as User:alice ({mechanism})" in sasl_ssl.log()
    assert "nonce doesn't match" not in sasl_ssl.log()


@pytest.mark.parametrize("user, password, reason", [
    ("alice", "wrong", "SCRAM-SHA-256: wrong password for user 'alice'"),
    ("mallory", "whatever", "SCRAM-SHA-256: unknown user 'mallory'"),
])
def test_wrong_password_and_unknown_user_fail_with_one_log_line(
        sasl_plain: BrokerProcess, user: str, password: str, reason: str) -> None:
    errors = _auth_errors(sasl_plain.bootstrap,
                          _conf("SASL_PLAINTEXT", "SCRAM-SHA-256", user, password))
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()
    assert wait_for(lambda: reason in sasl_plain.log(), 10)
    line = next(ln for ln in sasl_plain.log().splitlines() if reason in ln)
    conn = re.search(r"connection (\d+)", line)
    assert conn is not None
    # one warning per failed connection: the failure, nothing more about it
    same = [ln for ln in sasl_plain.log().splitlines()
            if f"connection {conn.group(1)} " in ln and "WARNING" in ln]
    assert len(same) == 1, same


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"closed after {len(data)} of {size} bytes"
        data += chunk
    return data


def _request(sock: socket.socket, api_key: int, version: int, correlation_id: int,
             body: bytes) -> bytes:
    """A non-flexible request (header v1, client id "t"); the response body after its
    correlation id."""
    frame = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t" + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    size, = struct.unpack(">i", _recv_exact(sock, 4))
    response = _recv_exact(sock, size)
    assert struct.unpack(">i", response[:4])[0] == correlation_id
    return response[4:]


def test_a_failed_authentication_is_closed_after_the_configured_delay(
        tmp_path: Path) -> None:
    """connection.failed.authentication.delay.ms (Kafka's, here 2000): the refusal of a wrong
    password is written at once and the connection closed only after the delay, so a client
    reads the refusal before the close. Closed at once, the refusal and the FIN came together
    and kafka-python 3.0.12, which drops what it read when it meets EOF, saw only a
    disconnect."""
    _add_users(tmp_path / "data", ("SCRAM-SHA-256",))
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", port=port,
                           listen=f"SASL_PLAINTEXT://127.0.0.1:{port}",
                           config={"sasl.enabled.mechanisms": "PLAIN",
                                   "connection.failed.authentication.delay.ms": 2000}).start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            shake = _request(sock, 17, 1, 1, struct.pack(">h", 5) + b"PLAIN")  # SaslHandshake
            assert struct.unpack(">h", shake[:2])[0] == 0
            token = b"\0alice\0wrong"
            answer = _request(sock, 36, 1, 2,  # SaslAuthenticate v1
                              struct.pack(">i", len(token)) + token)
            error, length = struct.unpack(">hh", answer[:4])
            assert error == 58, answer  # SASL_AUTHENTICATION_FAILED
            assert answer[4:4 + length] == b"Authentication failed: Invalid username or password"
            # the refusal is all there is, and the connection stays open for now
            readable, _, _ = select.select([sock], [], [], 0.5)
            assert not readable, sock.recv(100)
            sock.settimeout(20)
            assert sock.recv(100) == b""  # then the broker closes it
        assert wait_for(lambda: "(connection.failed.authentication.delay.ms)" in broker.log(),
                        10)
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_a_mechanism_not_enabled_is_refused(sasl_plain: BrokerProcess) -> None:
    errors = _auth_errors(sasl_plain.bootstrap,
                          _conf("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice",
                                PASSWORDS["alice"]))
    assert errors, "SCRAM-SHA-512 was accepted though sasl.enabled.mechanisms lacks it"
    assert wait_for(lambda: "'SCRAM-SHA-512' requested by the client is not enabled"
                    in sasl_plain.log(), 10)


def test_only_api_versions_and_sasl_before_authentication(sasl_plain: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", sasl_plain.port), timeout=10) as sock:
        body = struct.pack(">hhih", 3, 1, 5, 1) + b"t" + struct.pack(">i", -1)  # Metadata v1
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(100) == b""  # closed without an answer
    assert wait_for(lambda: "Unexpected Kafka request of type Metadata during SASL handshake"
                    in sasl_plain.log(), 10)


def test_clients_reauthenticate_before_their_session_ends(sasl_ssl: BrokerProcess,
                                                          pki: Pki) -> None:
    """connections.max.reauth.ms = 3000: librdkafka re-authenticates on the same connection."""
    producer = Producer({"bootstrap.servers": sasl_ssl.bootstrap, "acks": "all",
                         **_conf("SASL_SSL", "SCRAM-SHA-256", "bob", PASSWORDS["bob"], pki)})
    errors: list[str] = []
    try:
        deadline = time.monotonic() + 9
        while time.monotonic() < deadline:
            producer.produce("reauth", b"r", on_delivery=lambda err, _m: errors.append(
                str(err)) if err else None)
            producer.flush(10)
            time.sleep(0.5)
    finally:
        producer.flush(10)
    assert not errors, errors
    counts: dict[str, int] = {}
    for conn in re.findall(r"connection (\d+) from \S+ authenticated as User:bob",
                           sasl_ssl.log()):
        counts[conn] = counts.get(conn, 0) + 1
    assert counts and max(counts.values()) >= 2, counts  # the same connection, again


def test_frames_before_authentication_are_held_to_the_sasl_limit(
        sasl_plain: BrokerProcess) -> None:
    """Kafka's sasl.server.max.receive.size (524288) until the client has authenticated."""
    with socket.create_connection(("127.0.0.1", sasl_plain.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 600_000) + b"\0" * 64)
        assert sock.recv(100) == b""
    assert wait_for(lambda: "request size 600000 outside [8, 524288]" in sasl_plain.log(), 10)


@pytest.fixture(scope="module")
def long_delay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """connection.failed.authentication.delay.ms = 60 s: a connection closed in this test's
    bounded waits was closed by its peer's close, not by the delay's end."""
    from tests.broker.test_metrics import scrape

    base = tmp_path_factory.mktemp("long-delay")
    _add_users(base / "data", ("SCRAM-SHA-256",))
    port, metrics_port = free_port(), free_port()
    broker = BrokerProcess(base / "data", port=port,
                           listen=f"SASL_PLAINTEXT://127.0.0.1:{port}",
                           config={"sasl.enabled.mechanisms": "PLAIN",
                                   "metrics.port": metrics_port,
                                   "connection.failed.authentication.delay.ms": 60_000}).start()
    broker.metrics = lambda: scrape(metrics_port)  # type: ignore[attr-defined]
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _delay_counts(broker: BrokerProcess) -> tuple[float, float]:
    m = broker.metrics()  # type: ignore[attr-defined]
    return (m.get("actorlog_auth_delay_closed_by_peer_total", 0.0),
            m.get("actorlog_auth_delay_wakeups_total", 0.0))


def _fail_plain_login(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    shake = _request(sock, 17, 1, 1, struct.pack(">h", 5) + b"PLAIN")
    assert struct.unpack(">h", shake[:2])[0] == 0
    token = b"\0alice\0wrong"
    answer = _request(sock, 36, 1, 2, struct.pack(">i", len(token)) + token)
    assert struct.unpack(">h", answer[:2])[0] == 58  # SASL_AUTHENTICATION_FAILED
    return sock


def test_a_peer_that_resets_or_closes_during_the_auth_delay_is_closed_at_once(
        long_delay: BrokerProcess) -> None:
    """During connection.failed.authentication.delay.ms the connection is watched for its
    peer: a reset (SO_LINGER 0) or a close ends the wait at once, each with a wakeup or two
    of the Processor's poll (counted, not timed: a socket that woke the poll without being
    read would count thousands), and bytes sent meanwhile are dropped, not served."""
    closed0, wakeups0 = _delay_counts(long_delay)
    list_offsets = 'actorlog_requests_total{api="ListOffsets"}'
    served0 = long_delay.metrics().get(list_offsets, 0.0)  # type: ignore[attr-defined]
    resets = 20
    for _ in range(resets):
        sock = _fail_plain_login(long_delay.port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST
    with _fail_plain_login(long_delay.port) as sock:  # a retry on the refused connection
        body = struct.pack(">hhih", 2, 1, 9, 1) + b"t" + b"\0" * 12  # a ListOffsets
        sock.sendall(struct.pack(">i", len(body)) + body)
        sock.shutdown(socket.SHUT_WR)  # FIN
        assert sock.recv(100) == b""  # no answer to it: closed
    # dropped, never seen as a request: one taken (even to be refused by the SASL gate,
    # which then closes the connection) would be counted
    assert long_delay.metrics().get(list_offsets, 0.0) == served0  # type: ignore[attr-defined]
    assert wait_for(lambda: _delay_counts(long_delay)[0] - closed0 >= resets + 1, 30), \
        _delay_counts(long_delay)
    closed, wakeups = _delay_counts(long_delay)
    assert closed - closed0 == resets + 1
    assert wakeups - wakeups0 <= 3 * (resets + 1), (wakeups, wakeups0)
    assert "closed after 60000 ms" not in long_delay.log()
    assert long_delay.metrics().get(list_offsets, 0.0) == served0  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", ["unsupported mechanism", "request during the handshake",
                                  "request during authentication"])
def test_kafka_delays_the_close_after_any_failed_authentication(long_delay: BrokerProcess,
                                                                case: str) -> None:
    """Kafka's SaslServerAuthenticator fails authentication (an AuthenticationException,
    closed after the delay) for an unsupported mechanism and for a request out of turn, not
    only for a wrong password: here too. Seen by the peer's close ending the delay (the
    counter), where a connection closed at once would not have waited."""
    closed0, _ = _delay_counts(long_delay)
    metadata = struct.pack(">i", -1)  # Metadata v1: all topics
    with socket.create_connection(("127.0.0.1", long_delay.port), timeout=10) as sock:
        if case == "unsupported mechanism":
            shake = _request(sock, 17, 1, 1, struct.pack(">h", 13) + b"SCRAM-SHA-512")
            assert struct.unpack(">h", shake[:2])[0] == 33  # UNSUPPORTED_SASL_MECHANISM
            marker = "'SCRAM-SHA-512' requested by the client is not enabled"
        elif case == "request during the handshake":
            body = struct.pack(">hhih", 3, 1, 5, 1) + b"t" + metadata
            sock.sendall(struct.pack(">i", len(body)) + body)
            marker = "Unexpected Kafka request of type Metadata during SASL handshake"
        else:
            shake = _request(sock, 17, 1, 1, struct.pack(">h", 5) + b"PLAIN")
            assert struct.unpack(">h", shake[:2])[0] == 0
            body = struct.pack(">hhih", 3, 1, 6, 1) + b"t" + metadata
            sock.sendall(struct.pack(">i", len(body)) + body)
            marker = "Unexpected Kafka request of type Metadata during SASL authentication"
        assert wait_for(lambda: marker in long_delay.log(), 10), long_delay.log()[-2000:]
    assert wait_for(lambda: _delay_counts(long_delay)[0] - closed0 >= 1, 30), \
        long_delay.log()[-2000:]
    assert _delay_counts(long_delay)[0] - closed0 == 1
