"""SASL: the connection state machine and its mechanisms, against real client implementations.

The clients are kafka-python's own SASL mechanisms (``kafka.net.sasl``: what
its producers and consumers run) and scramp's ScramClient; no broker, no
socket: the tokens go straight between the client objects and the core.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram
from scramp import ScramClient

from actors.security.sasl import (
    API_VERSIONS,
    MAX_RECEIVE_BYTES,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Action,
    SaslConfigError,
    SaslConnection,
    SaslState,
    enabled_mechanisms,
)
from actors.security.scram import (
    AuthenticationFailed,
    CredentialError,
    ScramCredential,
    ScramServerExchange,
    make_credential,
    verify_password,
)
from wire.errors import ErrorCode

METADATA, PRODUCE = 3, 0
ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Users:
    """An in-memory credential table: user -> mechanism -> credential."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, ScramCredential]] = {}

    def add(self, user: str, password: str, *mechanisms: str) -> None:
        for mechanism in mechanisms or ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            self.table.setdefault(user, {})[mechanism] = make_credential(mechanism, password)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.table.get(user, {}).get(mechanism)


@pytest.fixture(scope="module")
def users() -> Users:
    table = Users()
    table.add("alice", "alice-secret")
    table.add("bob", "bob-secret", "SCRAM-SHA-512")
    table.add("weird,name=x", "pw", "SCRAM-SHA-256")
    table.add("carol", "carol-secret")
    return table


def kafka_python_client(mechanism: str, user: str, password: str) -> Any:
    config = {"sasl_mechanism": mechanism, "sasl_plain_username": user,
              "sasl_plain_password": password, "security_protocol": "SASL_SSL"}
    if mechanism == "PLAIN":
        return SaslMechanismPlain(**config)
    return SaslMechanismScram(**config)


def login(conn: SaslConnection, client: Any, mechanism: str, now_ms: int = 0,
          version: int = 2) -> Any:
    """Run kafka-python's client mechanism against the connection; the last result."""
    assert conn.on_request(SASL_HANDSHAKE, now_ms).action is Action.SASL
    handshake = conn.handshake(1, mechanism, now_ms)
    assert handshake.error_code == ErrorCode.NONE
    result = None
    while not client.is_done():
        assert conn.on_request(SASL_AUTHENTICATE, now_ms).action is Action.SASL
        result = conn.authenticate(version, client.auth_bytes(), now_ms)
        if result.error_code:
            return result
        client.receive(result.auth_bytes)
    return result


@pytest.mark.parametrize("mechanism", ALL)
def test_kafka_python_clients_authenticate(users: Users, mechanism: str) -> None:
    conn = SaslConnection(ALL, users.lookup, peer="127.0.0.1:5000")
    assert conn.on_request(API_VERSIONS, 0).action is Action.PASS
    client = kafka_python_client(mechanism, "alice", "alice-secret")
    result = login(conn, client, mechanism)
    assert result.error_code == ErrorCode.NONE and result.session_lifetime_ms == 0
    assert client.is_authenticated()
    assert conn.authenticated and conn.principal == "User:alice"
    assert conn.mechanism == mechanism and conn.client_supports_reauth
    assert conn.on_request(METADATA, 10**12).action is Action.PASS  # no lifetime: never expires
    assert conn.max_receive_bytes is None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scramp_client_authenticates_and_checks_the_server(users: Users, mechanism: str) -> None:
    conn = SaslConnection(ALL, users.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    conn.handshake(1, mechanism, 0)
    client = ScramClient([mechanism], "alice", "alice-secret")
    first = conn.authenticate(1, client.get_client_first().encode(), 0)
    client.set_server_first(first.auth_bytes.decode())
    final = conn.authenticate(1, client.get_client_final().encode(), 0)
    client.set_server_final(final.auth_bytes.decode())  # raises unless the server proved itself
    assert conn.principal == "User:alice"


def test_saslnames_are_decoded(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup)
    client = kafka_python_client("SCRAM-SHA-256", "weird,name=x", "pw")
    client._scram_client.user = b"weird=2Cname=3Dx"  # kafka-python does not escape; RFC 5802 does
    assert login(conn, client, "SCRAM-SHA-256").error_code == ErrorCode.NONE
    assert conn.principal == "User:weird,name=x"


def test_rfc7677_exchange_byte_for_byte() -> None:
    """The SCRAM-SHA-256 example of RFC 7677, replayed against the server exchange."""
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096,
                                 salt=bytes.fromhex("5b6d99689d12358eeca04b1412" "36fa81"))
    exchange = ScramServerExchange("SCRAM-SHA-256",
                                   lambda u, m: credential if u == "user" else None,
                                   server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert exchange.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096")
    assert exchange.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=") == (
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert exchange.complete and exchange.username == "user"


@pytest.mark.parametrize(("mechanism", "user", "password", "message", "reason"), [
    ("SCRAM-SHA-256", "alice", "wrong", "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-256",
     "SCRAM-SHA-256: wrong password for user 'alice' (The client keys don't match.: "
     "invalid-proof)"),
    ("SCRAM-SHA-512", "mallory", "x", "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-512",
     "SCRAM-SHA-512: unknown user 'mallory'"),
    ("SCRAM-SHA-256", "bob", "bob-secret", "Authentication failed during authentication due to "
     "invalid credentials with SASL mechanism SCRAM-SHA-256",
     "SCRAM-SHA-256: unknown user 'bob'"),   # bob has a SHA-512 credential only
    ("PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password",
     "PLAIN: wrong password for user 'alice'"),
    ("PLAIN", "mallory", "x", "Authentication failed: Invalid username or password",
     "PLAIN: unknown user 'mallory'"),
])
def test_bad_credentials_fail_with_a_message_and_close(users: Users, mechanism: str, user: str,
                                                       password: str, message: str,
                                                       reason: str) -> None:
    conn = SaslConnection(ALL, users.lookup, peer="10.0.0.9:4242")
    result = login(conn, kafka_python_client(mechanism, user, password), mechanism)
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
    assert result.error_message == message and result.close
    assert conn.state is SaslState.FAILED and conn.principal is None
    assert conn.failure_reason == f"authentication of 10.0.0.9:4242 failed: {reason}"
    verdict = conn.on_request(METADATA, 0)
    assert verdict.action is Action.REFUSE and verdict.close and not verdict.respond


def test_plain_checks_against_either_scram_credential(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup)
    result = login(conn, kafka_python_client("PLAIN", "bob", "bob-secret"), "PLAIN")
    assert result.error_code == ErrorCode.NONE and conn.principal == "User:bob"


@pytest.mark.parametrize(("token", "message"), [
    (b"\x00alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (b"\x00\x00pw", "Authentication failed: username not specified"),
    (b"\x00alice\x00", "Authentication failed: password not specified"),
    (b"bob\x00alice\x00alice-secret", "Authentication failed: Client requested an authorization "
                                      "id that is different from username"),
    (b"\xff\x00a\x00b", "Invalid SASL/PLAIN response: not UTF-8"),
])
def test_malformed_plain_tokens(users: Users, token: bytes, message: str) -> None:
    conn = SaslConnection(ALL, users.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    conn.handshake(1, "PLAIN", 0)
    result = conn.authenticate(1, token, 0)
    assert (result.error_code, result.error_message, result.close) == (
        ErrorCode.SASL_AUTHENTICATION_FAILED, message, True)


def test_plain_with_authzid_equal_to_username_passes(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    conn.handshake(1, "PLAIN", 0)
    assert conn.authenticate(0, b"alice\x00alice\x00alice-secret", 0).error_code == 0
    assert conn.principal == "User:alice" and not conn.client_supports_reauth


def test_only_api_versions_and_sasl_before_authentication(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup)
    assert conn.max_receive_bytes == MAX_RECEIVE_BYTES
    verdict = conn.on_request(METADATA, 0)
    assert verdict.action is Action.REFUSE and verdict.close and not verdict.respond
    assert verdict.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert verdict.message == "Unexpected Kafka request of type Metadata during SASL handshake."
    assert conn.state is SaslState.FAILED

    twice = SaslConnection(ALL, users.lookup)
    assert twice.on_request(API_VERSIONS, 0).action is Action.PASS
    assert twice.on_request(API_VERSIONS, 0).action is Action.REFUSE  # once only, as Kafka

    mid = SaslConnection(ALL, users.lookup)
    mid.on_request(SASL_HANDSHAKE, 0)
    mid.handshake(1, "SCRAM-SHA-256", 0)
    verdict = mid.on_request(PRODUCE, 0)
    assert (verdict.action, verdict.respond, verdict.close) == (Action.REFUSE, True, True)
    assert verdict.message == "Unexpected Kafka request of type Produce during SASL authentication."


def test_an_unknown_mechanism_gets_the_enabled_list_and_a_close(users: Users) -> None:
    conn = SaslConnection(("SCRAM-SHA-512",), users.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    result = conn.handshake(1, "PLAIN", 0)
    assert (result.error_code, result.mechanisms, result.close) == (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM, ("SCRAM-SHA-512",), True)
    assert conn.failure_reason == ("SASL mechanism 'PLAIN' requested by the client is not "
                                   "enabled (sasl.enabled.mechanisms: SCRAM-SHA-512)")


def test_a_v0_handshake_switches_to_bare_tokens(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup)
    conn.on_request(SASL_HANDSHAKE, 0)
    assert conn.handshake(0, "SCRAM-SHA-256", 0).error_code == 0
    assert conn.expects_raw_tokens
    # A SaslAuthenticate request is not what a v0 client sends now.
    assert conn.on_request(SASL_AUTHENTICATE, 0).action is Action.REFUSE
    conn2 = SaslConnection(ALL, users.lookup)
    conn2.on_request(SASL_HANDSHAKE, 0)
    conn2.handshake(0, "SCRAM-SHA-256", 0)
    client = kafka_python_client("SCRAM-SHA-256", "alice", "alice-secret")
    while not client.is_done():
        client.receive(conn2.raw_token(client.auth_bytes(), 0))
    assert conn2.principal == "User:alice"


def test_reauthentication_renews_the_session(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup, reauth_ms=60_000, peer="p:1")
    result = login(conn, kafka_python_client("SCRAM-SHA-512", "alice", "alice-secret"),
                   "SCRAM-SHA-512", now_ms=1_000)
    assert result.session_lifetime_ms == 60_000 and conn.session_expires_ms == 61_000
    assert conn.on_request(METADATA, 60_999).action is Action.PASS
    # Before expiry the client re-authenticates on the same connection.
    result = login(conn, kafka_python_client("SCRAM-SHA-512", "alice", "alice-secret"),
                   "SCRAM-SHA-512", now_ms=50_000)
    assert result.error_code == 0 and conn.session_expires_ms == 110_000
    assert conn.principal == "User:alice" and conn.authenticated
    # At most once a second: a second handshake at once is answered by the API layer rule.
    verdict = conn.on_request(SASL_HANDSHAKE, 50_500)
    assert (verdict.action, verdict.error_code, verdict.close) == (
        Action.REFUSE, ErrorCode.ILLEGAL_SASL_STATE, False)
    verdict = conn.on_request(SASL_AUTHENTICATE, 50_500)
    assert verdict.message == "SaslAuthenticate request received after successful authentication"
    # Past the expiry, any other request closes the connection without an answer.
    verdict = conn.on_request(METADATA, 110_000)
    assert (verdict.action, verdict.respond, verdict.close) == (Action.REFUSE, False, True)
    assert conn.failure_reason == ("the session of User:alice expired "
                                   "(connections.max.reauth.ms) without re-authentication")


def test_reauthentication_keeps_principal_and_mechanism(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup, reauth_ms=10_000)
    login(conn, kafka_python_client("SCRAM-SHA-256", "alice", "alice-secret"), "SCRAM-SHA-256")
    result = login(conn, kafka_python_client("SCRAM-SHA-256", "carol", "carol-secret"),
                   "SCRAM-SHA-256", now_ms=5_000)
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert result.error_message == ("Cannot change principals during re-authentication from "
                                    "User:alice to User:carol")
    wrong = SaslConnection(ALL, users.lookup, reauth_ms=10_000)
    login(wrong, kafka_python_client("SCRAM-SHA-256", "alice", "alice-secret"), "SCRAM-SHA-256")
    result = login(wrong, kafka_python_client("SCRAM-SHA-256", "alice", "nope"),
                   "SCRAM-SHA-256", now_ms=5_000)
    assert result.error_message == ("Authentication failed during re-authentication due to "
                                    "invalid credentials with SASL mechanism SCRAM-SHA-256")
    assert wrong.failure_reason is not None
    assert wrong.failure_reason.startswith("re-authentication of ? failed: SCRAM-SHA-256: wrong")
    other = SaslConnection(ALL, users.lookup, reauth_ms=10_000)
    login(other, kafka_python_client("SCRAM-SHA-256", "alice", "alice-secret"), "SCRAM-SHA-256")
    other.on_request(SASL_HANDSHAKE, 5_000)
    assert other.handshake(1, "PLAIN", 5_000).error_code == 0  # answered, then failed
    failed = other.authenticate(1, b"\x00alice\x00alice-secret", 5_000)
    assert failed.error_message == ("SASL mechanism 'PLAIN' requested by client is not supported "
                                    "for re-authentication of mechanism 'SCRAM-SHA-256'")
    assert failed.close and other.state is SaslState.FAILED


def test_without_a_session_lifetime_there_is_no_reauthentication(users: Users) -> None:
    conn = SaslConnection(ALL, users.lookup, reauth_ms=0)
    login(conn, kafka_python_client("PLAIN", "alice", "alice-secret"), "PLAIN")
    verdict = conn.on_request(SASL_HANDSHAKE, 5_000)
    assert verdict.action is Action.REFUSE and not verdict.close
    assert verdict.message == "SaslHandshake request received after successful authentication"


def test_enabled_mechanisms() -> None:
    assert enabled_mechanisms("scram-sha-512, PLAIN,,PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(SaslConfigError, match="GSSAPI is not supported; use some of PLAIN, "
                                              "SCRAM-SHA-256, SCRAM-SHA-512"):
        enabled_mechanisms("GSSAPI")
    with pytest.raises(SaslConfigError, match="is empty"):
        enabled_mechanisms(" ")


# ---------------------------------------------------------------- credentials


def test_credentials_in_kafkas_text_form() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", 8192,
                                 salt=b"0123456789abcdef")
    text = credential.to_kafka()
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert text.endswith(",iterations=8192")
    assert ScramCredential.from_kafka(text) == credential
    assert "pencil" not in repr(credential) and "stored" not in repr(credential)
    assert verify_password("SCRAM-SHA-256", credential, "pencil")
    assert not verify_password("SCRAM-SHA-256", credential, "pencil2")
    assert not verify_password("SCRAM-SHA-512", credential, "pencil")


@pytest.mark.parametrize(("text", "message"), [
    ("salt=AA==,stored_key=AA==", "SCRAM credential has no server_key, iterations"),
    ("salt", "SCRAM credential field 'salt' is not key=value"),
    ("salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
     "SCRAM credential has a field that is not base64"),
    ("salt=AA==,stored_key=AA==,server_key=AA==,iterations=lots",
     "SCRAM credential iterations 'lots' is not a number"),
])
def test_bad_credential_text(text: str, message: str) -> None:
    with pytest.raises(CredentialError) as caught:
        ScramCredential.from_kafka(text)
    assert str(caught.value) == message


def test_credential_bounds() -> None:
    with pytest.raises(CredentialError, match="iterations 4095 is out of range; use 4096 to 16384"):
        make_credential("SCRAM-SHA-256", "pw", 4095)
    with pytest.raises(CredentialError, match="iterations 16385 is out of range"):
        make_credential("SCRAM-SHA-256", "pw", 16385)
    with pytest.raises(CredentialError, match="unknown SCRAM mechanism 'SCRAM-SHA-1'"):
        make_credential("SCRAM-SHA-1", "pw")
    with pytest.raises(CredentialError, match="the password is empty"):
        make_credential("SCRAM-SHA-256", "")
    first, second = (make_credential("SCRAM-SHA-512", "pw") for _ in range(2))
    assert first.salt != second.salt and first.stored_key != second.stored_key
    assert len(first.stored_key) == 64 and first.iterations == 4096


def _old_librdkafka_final(password: str, client_first_bare: str, server_first: str,
                          answered_nonce: str) -> bytes:
    """A client-final-message built as librdkafka before 2.6.1 builds it: the nonce it
    answers with is its own in front of the server's whole nonce (librdkafka #4895); the
    proof is made over the messages as sent."""
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    without_proof = f"c=biws,r={answered_nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize(("answer", "password", "accepted"), [
    ("doubled", "alice-secret", True),      # what kcat 1.7 (librdkafka 2.0.2) sends
    ("rfc", "alice-secret", True),          # RFC 5802's form, made the same way
    ("doubled", "wrong", False),
    ("other-prefix", "alice-secret", False),  # only the client's own nonce may lead
    ("client-only", "alice-secret", False),
])
def test_the_nonce_librdkafka_before_2_6_1_answers_with(users: Users, answer: str,
                                                        password: str, accepted: bool) -> None:
    exchange = ScramServerExchange("SCRAM-SHA-256", users.lookup)
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    server_first = exchange.evaluate(f"n,,n=alice,r={client_nonce}".encode()).decode()
    nonce = server_first.split(",")[0][2:]
    answered = {"doubled": client_nonce + nonce, "rfc": nonce,
                "other-prefix": "x" * len(client_nonce) + nonce,
                "client-only": client_nonce}[answer]
    final = _old_librdkafka_final(password, f"n=alice,r={client_nonce}", server_first, answered)
    if accepted:
        assert exchange.evaluate(final).startswith(b"v=")
        assert exchange.complete and exchange.repeated_client_nonce == (answer == "doubled")
        return
    with pytest.raises(AuthenticationFailed) as failed:
        exchange.evaluate(final)
    assert not exchange.complete
    assert failed.value.client_message == exchange.generic_failure
