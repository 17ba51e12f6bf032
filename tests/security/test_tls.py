"""TLS: contexts from Kafka's PEM keys, and the socket-free connection core.

Real certificates (made by tests/security/certs.py), real Python ssl clients
over real TCP connections on 127.0.0.1; the server side is the core driven
by a small poll loop like the Processor's.
"""

from __future__ import annotations

import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from actors.security.tls import (
    ANONYMOUS,
    IANA_TO_OPENSSL,
    TlsConfigError,
    TlsSettings,
    distinguished_name,
    principal_of_certificate,
    server_context,
)
from actors.security.tls_connection import TlsConnection, TlsError, TlsState
from bench.certs import KEY_PASSWORD, Pki, make_pki

API_VERSIONS_V3 = bytes.fromhex("00000018" "0012" "0003" "00000001" "0004" "6b636174"
                                "00" "05" "6b636174" "04" "312e30" "00")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def settings(pki: Pki, **kw: Any) -> TlsSettings:
    values = {"ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca)}
    values.update({k.replace("_", "."): v for k, v in kw.items()})
    return TlsSettings.from_config(values)


def client_context(pki: Pki, keystore: Path | None = None,
                   maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if keystore is not None:
        context.load_cert_chain(str(keystore))
    if maximum is not None:
        context.maximum_version = maximum
    return context


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


class Exchange:
    """A real ssl client (thread) against the core (this thread), over one TCP connection."""

    def __init__(self, listener: socket.socket, context: ssl.SSLContext | None,
                 client_bytes: bytes = b"") -> None:
        self.result: dict[str, Any] = {}
        port = listener.getsockname()[1]
        self.thread = threading.Thread(target=self._client, args=(port, context, client_bytes),
                                       daemon=True)
        self.thread.start()
        self.server, _ = listener.accept()
        self.server.setblocking(False)

    def _client(self, port: int, context: ssl.SSLContext | None, raw: bytes) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                if context is None:
                    sock.sendall(raw)
                    self.result["reply"] = sock.recv(100)
                    return
                with context.wrap_socket(sock, server_hostname="localhost") as tls:
                    self.result["version"] = tls.version()
                    tls.sendall(b"ping")
                    self.result["reply"] = tls.recv(4)
        except (OSError, ssl.SSLError) as exc:
            self.result["error"] = exc

    def run(self, core: TlsConnection) -> TlsError | None:
        """Serve until the client is done: answer b"ping" with b"pong"; the core's error, if any."""
        deadline = time.monotonic() + 15
        error = None
        try:
            while time.monotonic() < deadline and self.thread.is_alive():
                readable, _, _ = select.select([self.server], [], [], 0.05)
                if readable:
                    data = self.server.recv(65536)
                    core.receive_data(data)
                    if core.handshake_complete and core.read_into(memoryview(bytearray(4))):
                        core.send(b"pong")
                    if not data:
                        break
                out = core.data_to_send()
                if out:
                    self.server.sendall(out)
        except TlsError as exc:
            error = exc
            out = core.data_to_send()  # the alert that tells the client why
            if out:
                try:
                    self.server.sendall(out)
                except OSError:
                    pass
        finally:
            self.server.close()
            self.thread.join(10)
        return error


def test_a_real_client_handshakes_through_the_core(pki: Pki, listener: socket.socket) -> None:
    core = TlsConnection(server_context(settings(pki)), peer="127.0.0.1:1")
    exchange = Exchange(listener, client_context(pki))
    assert exchange.run(core) is None
    assert exchange.result == {"version": "TLSv1.3", "reply": b"pong"}
    assert core.principal == ANONYMOUS
    assert core.version == "TLSv1.3"


def test_mutual_tls_gives_the_certificate_subject_as_principal(pki: Pki,
                                                                 listener: socket.socket) -> None:
    core = TlsConnection(server_context(settings(pki, ssl_client_auth="required")))
    exchange = Exchange(listener, client_context(pki, pki.client))
    assert exchange.run(core) is None
    assert exchange.result["reply"] == b"pong"
    assert core.principal == f"User:{pki.client_subject}"
    assert pki.client_subject == "CN=alice,OU=eng,O=Acme\\, Inc,C=US"


def test_subjects_print_as_java_prints_them() -> None:
    """RFC 2253 as X500Principal.getName(): keywords Java knows, OID=#DER-hex for the rest."""
    name = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "a+b"),
                                        x509.NameAttribute(NameOID.USER_ID, "u1")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c")]),
    ])
    assert distinguished_name(name) == (
        "1.2.840.113549.1.9.1=#16056140622e63,CN=a\\+b+UID=u1,DC=org")
    assert principal_of_certificate(None) == ANONYMOUS == "User:ANONYMOUS"


def test_required_client_auth_refuses_a_client_without_certificate(
        pki: Pki, listener: socket.socket) -> None:
    core = TlsConnection(server_context(settings(pki, ssl_client_auth="required")), "10.1.2.3:4")
    exchange = Exchange(listener, client_context(pki))
    error = exchange.run(core)
    assert error is not None
    assert str(error) == ("TLS handshake with 10.1.2.3:4 failed: peer did not return a "
                          "certificate")
    assert core.state is TlsState.FAILED
    assert "reply" not in exchange.result  # the client got the alert, not data
    assert "certificate required" in str(exchange.result["error"]).lower().replace("_", " ")


def test_requested_client_auth_takes_both(pki: Pki, listener: socket.socket) -> None:
    anonymous = TlsConnection(server_context(settings(pki, ssl_client_auth="requested")))
    assert Exchange(listener, client_context(pki)).run(anonymous) is None
    assert anonymous.principal == ANONYMOUS
    known = TlsConnection(server_context(settings(pki, ssl_client_auth="requested")))
    assert Exchange(listener, client_context(pki, pki.client)).run(known) is None
    assert known.principal == f"User:{pki.client_subject}"


@pytest.mark.parametrize(("which", "reason"), [
    ("client_expired", "certificate verify failed: certificate has expired"),
    ("client_foreign", "certificate verify failed: unable to get local issuer certificate"),
])
def test_bad_client_certificates_are_refused(pki: Pki, listener: socket.socket, which: str,
                                             reason: str) -> None:
    core = TlsConnection(server_context(settings(pki, ssl_client_auth="required")), "p:1")
    exchange = Exchange(listener, client_context(pki, getattr(pki, which)))
    error = exchange.run(core)
    assert str(error) == f"TLS handshake with p:1 failed: {reason}"
    assert "reply" not in exchange.result and "error" in exchange.result


def test_a_plaintext_client_on_a_tls_listener_is_refused(pki: Pki,
                                                         listener: socket.socket) -> None:
    core = TlsConnection(server_context(settings(pki)), "127.0.0.1:5")
    exchange = Exchange(listener, None, API_VERSIONS_V3)
    error = exchange.run(core)
    assert str(error) == ("TLS handshake with 127.0.0.1:5 failed: the client did not start a "
                          "TLS handshake (first byte 0x00; a plaintext client on a TLS "
                          "listener?)")
    assert exchange.result.get("reply", b"") == b""  # closed without an answer


def test_tls12_and_a_chosen_suite(pki: Pki, listener: socket.socket) -> None:
    suite = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    core = TlsConnection(server_context(settings(pki, ssl_cipher_suites=suite)))
    exchange = Exchange(listener, client_context(pki))
    assert exchange.run(core) is None
    assert exchange.result["version"] == "TLSv1.2"  # no TLS 1.3 suite listed: TLS 1.3 off
    assert core.cipher == IANA_TO_OPENSSL[suite]


def test_an_encrypted_key_opens_with_ssl_key_password(pki: Pki, listener: socket.socket) -> None:
    context = server_context(settings(pki, ssl_keystore_location=str(pki.server_encrypted),
                                      ssl_key_password=KEY_PASSWORD))
    core = TlsConnection(context)
    exchange = Exchange(listener, client_context(pki))
    assert exchange.run(core) is None
    assert exchange.result["reply"] == b"pong" and core.version == "TLSv1.3"


def _memory_client(pki: Pki, keystore: Path | None = None
                   ) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_context(pki, keystore).wrap_bio(incoming, outgoing, server_hostname="localhost")
    return obj, incoming, outgoing


def _drive(client: ssl.SSLObject, c_in: ssl.MemoryBIO, c_out: ssl.MemoryBIO,
           core: TlsConnection, chunk: int, until: Callable[[], bool]) -> int:
    """Move bytes between a memory client and the core ``chunk`` bytes at a time."""
    steps = 0
    for steps in range(1, 100_000):  # noqa: B007 - bounded
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        data = c_out.read(chunk)
        if data:
            core.receive_data(data)
        back = core.data_to_send()
        if back:
            c_in.write(back)
        if until():
            break
    return steps


def test_the_handshake_advances_one_byte_at_a_time(pki: Pki) -> None:
    """A trickling client never blocks the core: each byte is taken, nothing waits."""
    core = TlsConnection(server_context(settings(pki, ssl_client_auth="required")))
    client, c_in, c_out = _memory_client(pki, pki.client)
    steps = _drive(client, c_in, c_out, core, 1, lambda: core.handshake_complete)
    assert core.handshake_complete and steps > 100
    assert core.principal == f"User:{pki.client_subject}"
    assert core.read() == b""  # nothing sent yet: no data, no blocking
    client.write(b"x" * 70_000)
    core.receive_data(c_out.read())
    got = b""
    while len(got) < 70_000:
        piece = core.read(8192)
        assert piece
        got += piece
    assert got == b"x" * 70_000
    core.send(memoryview(b"y" * 100_000))
    c_in.write(core.data_to_send())
    received = b""
    while len(received) < 100_000:
        received += client.read(100_000)
    assert received == b"y" * 100_000


def test_close_notify_and_eof(pki: Pki) -> None:
    core = TlsConnection(server_context(settings(pki)))
    client, c_in, c_out = _memory_client(pki)
    _drive(client, c_in, c_out, core, 4096, lambda: core.handshake_complete)
    try:
        client.unwrap()
    except ssl.SSLWantReadError:
        pass
    core.receive_data(c_out.read())
    assert core.read() == b"" and core.state is TlsState.CLOSED
    core.close()
    assert core.state is TlsState.CLOSED
    with pytest.raises(TlsError, match="is closed: cannot send"):
        core.send(b"late")

    silent = TlsConnection(server_context(settings(pki)), "q:1")
    client2, _c_in2, c_out2 = _memory_client(pki)
    with pytest.raises(ssl.SSLWantReadError):
        client2.do_handshake()
    silent.receive_data(c_out2.read())
    with pytest.raises(TlsError, match="the client closed the connection during the handshake"):
        silent.receive_data(b"")


# ------------------------------------------------------------------ settings


def test_settings_from_kafka_keys() -> None:
    got = TlsSettings.from_config({
        "ssl.keystore.type": "pem", "ssl.keystore.location": "/k.pem", "ssl.key.password": "pw",
        "ssl.truststore.location": "/t.pem", "ssl.client.auth": "Required",
        "ssl.enabled.protocols": "TLSv1.3", "ssl.cipher.suites": " TLS_AES_128_GCM_SHA256 ,",
    })
    assert got == TlsSettings("/k.pem", "pw", "/t.pem", "required", ("TLSv1.3",),
                              ("TLS_AES_128_GCM_SHA256",), "PEM", "PEM")
    assert TlsSettings.from_config({"ssl.keystore.location": "/k"}) == TlsSettings("/k")


def _refusal(pki: Pki, **kw: Any) -> str:
    with pytest.raises(TlsConfigError) as caught:
        server_context(settings(pki, **kw))
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_bad_settings_get_one_line(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    assert _refusal(pki, ssl_keystore_location=str(missing)) == (
        f"ssl.keystore.location {missing} does not exist; give a PEM file")
    assert _refusal(pki, ssl_keystore_location=str(tmp_path)) == (
        f"ssl.keystore.location {tmp_path} is a directory; give a PEM file")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    assert _refusal(pki, ssl_keystore_location=str(garbage)) == (
        f"ssl.keystore.location {garbage} is not a PEM file (no '-----BEGIN' line)")
    assert _refusal(pki, ssl_keystore_location="") == (
        "ssl.keystore.location is not set; a TLS listener needs a PEM file with its "
        "certificate chain and private key")
    assert _refusal(pki, ssl_keystore_type="JKS").startswith(
        "ssl.keystore.type JKS is not supported; convert the keystore to PEM")
    message = _refusal(pki, ssl_keystore_location=str(pki.server_encrypted),
                       ssl_key_password="wrong")
    assert message.startswith(f"ssl.keystore.location {pki.server_encrypted}: cannot load the "
                              f"certificate chain and private key (")
    assert message.endswith("); check ssl.key.password")
    only_cert = tmp_path / "only-cert.pem"
    only_cert.write_bytes(pki.ca.read_bytes())
    assert _refusal(pki, ssl_keystore_location=str(only_cert)).endswith(
        "it needs the certificate chain and the private key, and ssl.key.password if the key "
        "is encrypted")
    assert _refusal(pki, ssl_client_auth="maybe") == (
        "ssl.client.auth = 'maybe' is not one of none, requested, required")
    assert _refusal(pki, ssl_client_auth="required", ssl_truststore_location="") == (
        "ssl.client.auth = required needs ssl.truststore.location (the CA certificates of "
        "clients)")
    assert _refusal(pki, ssl_enabled_protocols="TLSv1.1,TLSv1.2") == (
        "ssl.enabled.protocols: TLSv1.1 is not supported; use TLSv1.2, TLSv1.3")
    assert _refusal(pki, ssl_cipher_suites="TLS_FAKE") == (
        "ssl.cipher.suites: TLS_FAKE is not a cipher suite this broker knows; use names such "
        "as TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 or TLS_AES_256_GCM_SHA384")
    assert _refusal(pki, ssl_cipher_suites="TLS_AES_128_GCM_SHA256").startswith(
        "ssl.cipher.suites: Python's ssl cannot limit the TLS 1.3 suites")
    assert _refusal(pki, ssl_cipher_suites="TLS_RSA_WITH_AES_128_CBC_SHA",
                    ssl_enabled_protocols="TLSv1.3") == (
        "ssl.cipher.suites has no suite for ssl.enabled.protocols TLSv1.3")
    assert _refusal(pki, ssl_truststore_location=str(tmp_path / "t.pem")) == (
        f"ssl.truststore.location {tmp_path / 't.pem'} does not exist; give a PEM file")


def test_cipher_table_agrees_with_openssl() -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl command here to cross-check the suite names against")
    out = subprocess.run([openssl, "ciphers", "-stdname", "ALL"], capture_output=True,
                         text=True, check=True).stdout
    names = dict(line.split()[:3:2] for line in out.splitlines() if " - " in line)
    for iana, name in IANA_TO_OPENSSL.items():
        assert names.get(iana) == name, iana
