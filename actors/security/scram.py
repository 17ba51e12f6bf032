"""SCRAM credentials in Kafka's form, and the server side of one SCRAM exchange (RFC 5802/7677).

The cryptography is ``scramp``'s: credentials are made by its
``make_auth_info`` (SASLprep, PBKDF2, the two HMACs) and the exchange runs
its ``ScramServer``. What is here is Kafka's framing around it:

* A credential is the salt, the iteration count, the stored key and the
  server key; never the password. Kafka writes it as
  ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``
  (:meth:`ScramCredential.to_kafka`), the value of a mechanism's key in the
  user's entity config (``/config/users/<name>``).
* Iterations from 4096 to 16384, Kafka's bounds for SCRAM-SHA-256/512.
* A failed exchange answers the client with Kafka's generic message (it
  never tells whether the user exists) and gives the log the real reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's ScramMechanism type codes on the wire (0 is UNKNOWN)
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISMS_BY_TYPE = {code: name for name, code in MECHANISM_TYPES.items()}
_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class CredentialError(ValueError):
    """A credential (or a request to make one) that is not acceptable; one-line message."""


class AuthenticationFailed(Exception):
    """An exchange failed: ``client_message`` goes to the client, ``reason`` to the log."""

    def __init__(self, client_message: str, reason: str) -> None:
        super().__init__(reason)
        self.client_message = client_message
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of a SCRAM password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise CredentialError(f"SCRAM credential field {part[:40]!r} is not key=value")
            fields[key.strip()] = value.strip()
        missing = [k for k in ("salt", "stored_key", "server_key", "iterations")
                   if k not in fields]
        if missing:
            raise CredentialError(f"SCRAM credential has no {', '.join(missing)}")
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True)
                                    for k in ("salt", "stored_key", "server_key"))
        except (binascii.Error, ValueError):
            raise CredentialError("SCRAM credential has a field that is not base64") from None
        if not fields["iterations"].isdigit():
            raise CredentialError(f"SCRAM credential iterations {fields['iterations'][:20]!r} "
                                  f"is not a number")
        return cls(salt, stored, server, int(fields["iterations"]))

    def __repr__(self) -> str:  # keys stay out of logs
        return f"ScramCredential(iterations={self.iterations}, salt={len(self.salt)} bytes)"


def _mechanism(name: str) -> ScramMechanism:
    if name not in SCRAM_MECHANISMS:
        raise CredentialError(f"unknown SCRAM mechanism {name!r}; use "
                              f"{' or '.join(SCRAM_MECHANISMS)}")
    return ScramMechanism(name)


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(f"iterations {iterations} is out of range; use "
                              f"{MIN_ITERATIONS} to {MAX_ITERATIONS}")


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (a fresh random salt unless one is given)."""
    check_iterations(iterations)
    if not password:
        raise CredentialError("the password is empty")
    try:
        salt_out, stored, server, count = _mechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt)
    except ScramException as exc:
        raise CredentialError(f"cannot make a {mechanism} credential: {exc}") from None
    return ScramCredential(bytes(salt_out), bytes(stored), bytes(server), int(count))


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential for a SaltedPassword the client computed (AlterUserScramCredentials).

    RFC 5802's StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
    HMAC(SaltedPassword, "Server Key"); the salted password itself is not kept.
    """
    check_iterations(iterations)
    digest = _DIGESTS.get(mechanism)
    if digest is None:
        raise CredentialError(f"unknown SCRAM mechanism {mechanism!r}; use "
                              f"{' or '.join(SCRAM_MECHANISMS)}")
    if not salt:
        raise CredentialError("the salt is empty")
    if not salted_password:
        raise CredentialError("the salted password is empty")
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", digest)
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (PLAIN's check)."""
    try:
        again = make_credential(mechanism, password, credential.iterations, credential.salt)
    except CredentialError:
        return False
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _attribute(message: str, key: str) -> str | None:
    """The value of ``key=`` in a SCRAM message's comma-separated attributes."""
    for part in message.split(","):
        if part.startswith(key + "="):
            return part[len(key) + 1:]
    return None


CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(user, mechanism) -> that user's credential for the mechanism, None when there is none."""


class ScramServerExchange:
    """The server's half of one SCRAM authentication: two tokens in, two tokens out."""

    def __init__(self, mechanism: str, lookup: CredentialLookup,
                 server_nonce: str | None = None, phase: str = "authentication") -> None:
        self.mechanism = mechanism
        self.phase = phase  # "re-authentication" changes the client's message, as in Kafka
        self._lookup = lookup
        self._server = _mechanism(mechanism).make_server(self._auth_info, s_nonce=server_nonce)
        self._step = 0
        self.username: str | None = None
        self.complete = False
        self._unknown_user = False
        self._client_nonce: str | None = None
        self.repeated_client_nonce = False  # the exchange came from an old librdkafka

    @property
    def generic_failure(self) -> str:
        return (f"Authentication failed during {self.phase} due to invalid credentials with "
                f"SASL mechanism {self.mechanism}")

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        self.username = username
        credential = self._lookup(username, self.mechanism)
        if credential is None:
            self._unknown_user = True
            raise ScramException(f"unknown user {username!r}")
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def _accept_repeated_client_nonce(self, client_final: str) -> None:
        """Let librdkafka before 2.6.1 (kcat 1.7 among them) log in.

        RFC 5802's client-final-message repeats the nonce of the server-first-message,
        which already begins with the client's own nonce. Those librdkafka versions put
        their client nonce in front once more (``r=<c-nonce><c-nonce><s-nonce>``;
        librdkafka #4895), and Kafka brokers accept that (since 3.8.1 they check that
        the answer ends with the nonce they sent). This accepts exactly that one form:
        the server's fresh nonce is still in it, and the client's proof still covers the
        messages as they were sent, so nothing an attacker could replay gets in.
        """
        nonce = str(self._server.nonce)
        answered = _attribute(client_final, "r")
        if (answered is not None and self._client_nonce is not None and answered != nonce
                and answered == self._client_nonce + nonce):
            self._server.nonce = type(self._server.nonce)(answered)  # scramp's Nonce
            self.repeated_client_nonce = True

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises :class:`AuthenticationFailed`."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.generic_failure,
                                       f"{self.mechanism}: the client's message is not "
                                       f"UTF-8") from None
        try:
            if self._step == 0:
                self._step = 1
                self._server.set_client_first(text)
                self._client_nonce = _attribute(text.split(",", 2)[-1], "r")
                return self._server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._accept_repeated_client_nonce(text)
                self._server.set_client_final(text)
                answer = self._server.get_server_final().encode()
                self.complete = True
                return answer
        except ScramException as exc:
            who = f"user {self.username!r}" if self.username is not None else "a client"
            if self._unknown_user:
                reason = f"{self.mechanism}: unknown user {self.username!r}"
            elif self._step == 2:
                reason = f"{self.mechanism}: wrong password for {who} ({exc})"
            else:
                reason = f"{self.mechanism}: bad message from {who}: {exc}"
            raise AuthenticationFailed(self.generic_failure, reason) from None
        raise AuthenticationFailed(self.generic_failure,
                                   f"{self.mechanism}: a token after the exchange ended")
