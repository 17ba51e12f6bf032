"""TLS listeners of a running broker, with real clients (confluent-kafka, kafka-python, kcat).

Certificates are made per module with ``cryptography`` (tests/security/certs.py).
Two brokers: ``tls`` has an SSL listener (client certificates requested) and
a PLAINTEXT one; ``strict`` has a named listener mapped to SSL
(listener.security.protocol.map) that requires client certificates and
speaks only TLS 1.2 with one cipher suite.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from actors.runtime.config import Config, ConfigError
from bench.certs import KEY_PASSWORD, Pki, make_pki
from tests.fixtures.broker import BrokerProcess, free_port
from tests.fixtures.consuming import consume_values
from tests.fixtures.waiting import wait_for

pytestmark = [pytest.mark.clients]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _start(base: Path, listen: str, port: int, config: dict[str, Any]) -> BrokerProcess:
    broker = BrokerProcess(base / "data", port=port, listen=listen, config=config)
    return broker.start()


@pytest.fixture(scope="module")
def tls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SSL first, then PLAINTEXT (each client is told its own listener's port)."""
    ssl_port, plain_port = free_port(), free_port()
    broker = _start(tmp_path_factory.mktemp("tls"),
                    f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{plain_port}", ssl_port,
                    {"ssl.keystore.type": "PEM",
                     "ssl.keystore.location": str(pki.server_encrypted),
                     "ssl.key.password": KEY_PASSWORD,
                     "ssl.truststore.location": str(pki.ca),
                     "ssl.client.auth": "requested"})
    broker.plain_port = plain_port  # type: ignore[attr-defined]
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


@pytest.fixture(scope="module")
def strict(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    port = free_port()
    broker = _start(tmp_path_factory.mktemp("strict"), f"INTERNAL://127.0.0.1:{port}", port,
                    {"listener.security.protocol.map": "INTERNAL:SSL",
                     "ssl.keystore.location": str(pki.server),
                     "ssl.truststore.type": "PEM",
                     "ssl.truststore.location": str(pki.ca),
                     "ssl.client.auth": "required",
                     "ssl.enabled.protocols": "TLSv1.2",
                     "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


# ------------------------------------------------------------------ helpers

def _confluent_ssl(pki: Pki, client: Path | None) -> dict[str, Any]:
    conf: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if client is not None:
        conf |= {"ssl.certificate.location": str(client), "ssl.key.location": str(client)}
    return conf


def _produce(bootstrap: str, topic: str, values: list[bytes], extra: dict[str, Any]) -> None:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 20000, **extra})
    for value in values:
        producer.produce(topic, value,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    left = producer.flush(25)
    if left or errors:
        raise KafkaException(f"{left} unacknowledged, errors: {errors[:3]}")


def _consume(bootstrap: str, topic: str, count: int, extra: dict[str, Any]) -> list[bytes]:
    return consume_values({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time_ns()}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           **extra}, topic, count, 30)


def _tls_client(pki: Pki, cert: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(str(cert))
    return context


def _api_versions(sock: socket.socket | ssl.SSLSocket) -> int:
    """Send ApiVersions v0 and read the answer; its error code."""
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    sock.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    answer = _read_exactly(sock, size)
    assert struct.unpack(">i", answer[:4])[0] == 7  # the correlation id
    return int(struct.unpack(">h", answer[4:6])[0])


def _read_exactly(sock: socket.socket | ssl.SSLSocket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _log_has(broker: BrokerProcess, text: str) -> bool:
    return text in broker.log()


# -------------------------------------------------------------------- tests

def test_ssl_listener_serves_confluent_kafka_kafka_python_and_kcat(tls: BrokerProcess,
                                                                   pki: Pki) -> None:
    bootstrap = tls.bootstrap
    _produce(bootstrap, "tls-a", [b"one", b"two"], _confluent_ssl(pki, None))
    assert _consume(bootstrap, "tls-a", 2, _confluent_ssl(pki, None)) == [b"one", b"two"]

    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_cafile=str(pki.ca), acks="all")
    try:
        producer.send("tls-a", b"three").get(timeout=20)
    finally:
        producer.close()
    consumer = KafkaConsumer("tls-a", bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_cafile=str(pki.ca), auto_offset_reset="earliest",
                             consumer_timeout_ms=15000)
    try:
        values = [m.value for _, m in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [b"one", b"two", b"three"]

    out = subprocess.run(["kcat", "-b", bootstrap, "-X", "security.protocol=ssl",
                          "-X", f"ssl.ca.location={pki.ca}", "-C", "-t", "tls-a", "-o",
                          "beginning", "-c", "3", "-e", "-q"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "two", "three"]
    # every fetch went out through the encryption (no sendfile on a TLS connection)
    assert not _log_has(tls, "Traceback")


def test_each_listener_has_its_acceptor_and_protocol(tls: BrokerProcess, pki: Pki) -> None:
    plain = f"127.0.0.1:{tls.plain_port}"  # type: ignore[attr-defined]
    with socket.create_connection(("127.0.0.1", tls.plain_port), timeout=10) as sock:  # type: ignore[attr-defined]
        assert _api_versions(sock) == 0
    with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw, \
            _tls_client(pki).wrap_socket(raw, server_hostname="localhost") as sock:
        assert _api_versions(sock) == 0
    assert f"listening on SSL://127.0.0.1:{tls.port},PLAINTEXT://{plain}" in tls.log()


def test_mutual_tls_gives_the_certificate_subject_as_principal(tls: BrokerProcess,
                                                               pki: Pki) -> None:
    _produce(tls.bootstrap, "tls-m", [b"m"], _confluent_ssl(pki, pki.client))
    assert wait_for(lambda: _log_has(tls, f"principal User:{pki.client_subject}"), 10)


def test_expired_or_foreign_certificates_are_refused_and_logged(tls: BrokerProcess,
                                                               pki: Pki) -> None:
    for cert, reason in ((pki.client_expired, "certificate has expired"),
                         (pki.client_foreign, "certificate verify failed")):
        with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw:
            context = _tls_client(pki, cert)
            try:
                with context.wrap_socket(raw, server_hostname="localhost") as sock:
                    _api_versions(sock)  # TLS 1.3: the refusal comes after the client's Finished
            except (ssl.SSLError, ConnectionError, OSError):
                pass
            else:
                pytest.fail(f"{cert.name} was accepted")
        assert wait_for(lambda r=reason: _log_has(tls, r), 10), tls.log()[-2000:]


def test_plaintext_client_on_a_tls_port_fails_cleanly(tls: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as sock, \
            pytest.raises((ConnectionError, OSError)):
        _api_versions(sock)
    assert wait_for(lambda: _log_has(tls, "did not start a TLS handshake"), 10)
    admin = None
    with pytest.raises(Exception):  # noqa: B017 - kafka-python's error class varies
        admin = KafkaAdminClient(bootstrap_servers=tls.bootstrap, request_timeout_ms=3000,
                                 api_version_auto_timeout_ms=3000)
    if admin is not None:
        admin.close()


def test_tls_client_on_a_plaintext_port_fails_cleanly(tls: BrokerProcess, pki: Pki) -> None:
    port = tls.plain_port  # type: ignore[attr-defined]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _tls_client(pki).wrap_socket(raw, server_hostname="localhost")
    assert wait_for(lambda: _log_has(tls, "bad request size") or
                    _log_has(tls, "socket.request.max.bytes"), 10)
    # the broker still serves both listeners
    _produce(tls.bootstrap, "tls-after", [b"ok"], _confluent_ssl(pki, None))


def test_required_client_auth_protocols_and_suites(strict: BrokerProcess, pki: Pki) -> None:
    """ssl.client.auth = required, ssl.enabled.protocols, ssl.cipher.suites on a listener
    named through listener.security.protocol.map."""
    with socket.create_connection(("127.0.0.1", strict.port), timeout=10) as raw, \
            _tls_client(pki, pki.client).wrap_socket(raw, server_hostname="localhost") as sock:
        assert sock.version() == "TLSv1.2"
        cipher = sock.cipher()
        assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        assert _api_versions(sock) == 0
    with socket.create_connection(("127.0.0.1", strict.port), timeout=10) as raw, \
            pytest.raises((ssl.SSLError, ConnectionError, OSError)), \
            _tls_client(pki).wrap_socket(raw, server_hostname="localhost") as sock:
        _api_versions(sock)  # no certificate: refused
    assert wait_for(lambda: _log_has(strict, "TLS handshake with"), 10)
    _produce(strict.bootstrap, "strict", [b"s"], _confluent_ssl(pki, pki.client))
    assert _consume(strict.bootstrap, "strict", 1, _confluent_ssl(pki, pki.client)) == [b"s"]


@pytest.mark.parametrize("key, value, says", [
    ("ssl.keystore.type", "JKS", "ssl.keystore.type = 'JKS' is not one of"),
    ("ssl.truststore.type", "PKCS12", "ssl.truststore.type = 'PKCS12' is not one of"),
    ("ssl.client.auth", "always", "ssl.client.auth = 'always' is not one of"),
])
def test_tls_keys_refuse_values_they_cannot_use(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Config({key: value})


def test_a_tls_listener_without_a_keystore_does_not_start(tmp_path: Path, pki: Pki) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", port=port, listen=f"SSL://127.0.0.1:{port}")
    with pytest.raises(RuntimeError, match=r"ssl\.keystore\.location is not set"):
        broker.start(timeout=20)
    wrong = BrokerProcess(tmp_path / "data2", port=port, listen=f"SSL://127.0.0.1:{port}",
                          config={"ssl.keystore.location": str(pki.server_encrypted),
                                  "ssl.key.password": "wrong"}, log_name="wrong.log")
    with pytest.raises(RuntimeError, match=r"check ssl\.key\.password"):
        wrong.start(timeout=20)
