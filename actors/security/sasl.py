"""Kafka's SASL exchange on one connection, as a pure state machine (no I/O, clock handed in).

The Processor owns one :class:`SaslConnection` per connection of a
SASL_PLAINTEXT or SASL_SSL listener and asks it about every request before
the request goes on (:meth:`SaslConnection.on_request`): before
authentication only ApiVersions and the SASL APIs are served; a request of
another API is refused and the connection closed, as Kafka's
``SaslServerAuthenticator`` does.

The exchange, as Kafka clients speak it:

1. ``ApiVersions`` (optional, once) then ``SaslHandshake`` naming a
   mechanism of ``sasl.enabled.mechanisms``; an unknown one is answered
   UNSUPPORTED_SASL_MECHANISM with the enabled list, then closed.
2. ``SaslAuthenticate`` requests carrying the mechanism's tokens (after a
   v1 handshake), or, after a v0 handshake, bare size-prefixed tokens that
   are not Kafka requests at all (:attr:`SaslConnection.expects_raw_tokens`).
3. A wrong password or an unknown user is answered SASL_AUTHENTICATION_FAILED
   with a message and the connection is closed; :attr:`failure_reason` holds
   the reason for the one log line (the client is never told which it was).
4. Once authenticated, every API passes. With ``connections.max.reauth.ms``
   the session lasts that long (told to the client in SaslAuthenticate v1+);
   a client re-authenticates (KIP-368) by sending SaslHandshake and
   SaslAuthenticate again on the same connection, at most once a second,
   with the same mechanism and as the same principal. A request other than
   that handshake after the session expired closes the connection.

Mechanisms: PLAIN (checked against the stored SCRAM credentials, so one
``users add`` serves both) and SCRAM-SHA-256/512 (``actors.security.scram``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from actors.security.scram import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    CredentialLookup,
    ScramServerExchange,
    verify_password,
)
from wire.api_versions import api_name
from wire.errors import ErrorCode

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
MAX_RECEIVE_BYTES = 524288
"""Kafka's ``sasl.server.max.receive.size``: the largest frame a connection may send before it
has authenticated."""
MIN_REAUTH_INTERVAL_MS = 1000


class SaslState(Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"   # nothing yet
    HANDSHAKE = "handshake"                           # after ApiVersions
    AUTHENTICATE = "authenticate"                     # mechanism chosen, tokens flowing
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Action(Enum):
    PASS = "pass"        # hand the request on as usual
    SASL = "sasl"        # answer it with handshake() / authenticate()
    REFUSE = "refuse"    # answer with the error (if respond), close if close


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    error_code: int = 0
    message: str = ""
    respond: bool = True
    close: bool = False


PASS = Verdict(Action.PASS)
SASL = Verdict(Action.SASL)


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    """SaslHandshake response fields, and whether to close once it is sent."""

    error_code: int
    mechanisms: tuple[str, ...]
    close: bool = False


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    """SaslAuthenticate response fields (``session_lifetime_ms`` is v1+), and whether to close."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0
    close: bool = False


class _Exchange(Protocol):
    username: str | None
    complete: bool

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServerExchange:
    """SASL/PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one message",
                                       "PLAIN: a token after the exchange ended")
        try:
            parts = token.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8",
                                       "PLAIN: the client's message is not UTF-8") from None
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}",
                f"PLAIN: malformed message ({len(parts)} fields)")
        authzid, username, password = parts
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified",
                                       "PLAIN: no username")
        self.username = username
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified",
                                       f"PLAIN: no password for user {username!r}")
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                f"PLAIN: user {username!r} asked to act as {authzid!r}")
        found = [(m, c) for m in reversed(SCRAM_MECHANISMS)
                 if (c := self._lookup(username, m)) is not None]
        if not found:
            raise AuthenticationFailed("Authentication failed: Invalid username or password",
                                       f"PLAIN: unknown user {username!r}")
        mechanism, credential = found[0]
        if not verify_password(mechanism, credential, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password",
                                       f"PLAIN: wrong password for user {username!r}")
        self.complete = True
        return b""


class SaslConfigError(ValueError):
    """``sasl.enabled.mechanisms`` that cannot be served; one-line message."""


def enabled_mechanisms(text: str | Sequence[str]) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms`` (Kafka's default is GSSAPI, which actorlog does not have)."""
    names = [n.strip().upper() for n in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    if not names:
        raise SaslConfigError(f"sasl.enabled.mechanisms is empty; use some of "
                              f"{', '.join(MECHANISMS)}")
    for name in names:
        if name not in MECHANISMS:
            raise SaslConfigError(f"sasl.enabled.mechanisms: {name} is not supported; use "
                                  f"some of {', '.join(MECHANISMS)}")
    return tuple(dict.fromkeys(names))


class SaslConnection:
    """The SASL state of one connection (Kafka's ``SaslServerAuthenticator`` and its re-auth)."""

    def __init__(self, mechanisms: Sequence[str], lookup: CredentialLookup,
                 reauth_ms: int = 0, peer: str = "?") -> None:
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self.reauth_ms = reauth_ms
        self.peer = peer
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.principal: str | None = None
        self.expects_raw_tokens = False   # after a v0 handshake: bare tokens, not requests
        self.client_supports_reauth = False
        self.session_expires_ms: int | None = None
        self.failure_reason: str | None = None   # for the log line when it failed
        self._exchange: _Exchange | None = None
        self._reauthenticating = False
        self._bad_reauth_mechanism: str | None = None
        self._last_reauth_start_ms: int | None = None

    # ---------------------------------------------------------------- gate
    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    @property
    def max_receive_bytes(self) -> int | None:
        """The frame size limit now: Kafka's SASL limit until authenticated, then none."""
        return None if self.state is SaslState.AUTHENTICATED else MAX_RECEIVE_BYTES

    def session_expired(self, now_ms: int) -> bool:
        return self.session_expires_ms is not None and now_ms >= self.session_expires_ms

    def on_request(self, api_key: int, now_ms: int) -> Verdict:
        """What to do with a request of ``api_key`` arriving now."""
        name = api_name(api_key)
        state = self.state
        if state is SaslState.FAILED:
            return Verdict(Action.REFUSE, ErrorCode.ILLEGAL_SASL_STATE,
                           "the connection failed authentication", respond=False, close=True)
        if state is SaslState.AUTHENTICATED:
            if api_key == SASL_HANDSHAKE and self._may_reauthenticate(now_ms):
                self._last_reauth_start_ms = now_ms
                self._reauthenticating = True
                self.state = SaslState.HANDSHAKE
                return SASL
            if self.session_expired(now_ms):
                self.failure_reason = (f"the session of {self.principal} expired "
                                       f"(connections.max.reauth.ms) without re-authentication")
                return Verdict(Action.REFUSE, ErrorCode.SASL_AUTHENTICATION_FAILED,
                               self.failure_reason, respond=False, close=True)
            if api_key == SASL_HANDSHAKE:
                return Verdict(Action.REFUSE, ErrorCode.ILLEGAL_SASL_STATE,
                               "SaslHandshake request received after successful "
                               "authentication")
            if api_key == SASL_AUTHENTICATE:
                return Verdict(Action.REFUSE, ErrorCode.ILLEGAL_SASL_STATE,
                               "SaslAuthenticate request received after successful "
                               "authentication")
            return PASS
        if state is SaslState.HANDSHAKE_OR_VERSIONS and api_key == API_VERSIONS:
            self.state = SaslState.HANDSHAKE
            return PASS
        if state in (SaslState.HANDSHAKE_OR_VERSIONS, SaslState.HANDSHAKE):
            if api_key == SASL_HANDSHAKE:
                return SASL
            return self._fail(f"Unexpected Kafka request of type {name} during SASL handshake.",
                              ErrorCode.ILLEGAL_SASL_STATE, respond=False)
        # AUTHENTICATE
        if api_key == SASL_AUTHENTICATE and not self.expects_raw_tokens:
            return SASL
        return self._fail(f"Unexpected Kafka request of type {name} during SASL "
                          f"authentication.", ErrorCode.ILLEGAL_SASL_STATE)

    def _may_reauthenticate(self, now_ms: int) -> bool:
        if self.session_expires_ms is None:
            return False  # no session lifetime: nothing to renew (KafkaChannel's rule)
        last = self._last_reauth_start_ms
        return last is None or now_ms - last >= MIN_REAUTH_INTERVAL_MS

    def _fail(self, message: str, code: int, respond: bool = True) -> Verdict:
        self.state = SaslState.FAILED
        self.failure_reason = message
        return Verdict(Action.REFUSE, code, message, respond=respond, close=True)

    # ----------------------------------------------------------- handshake
    def handshake(self, version: int, mechanism: str, now_ms: int) -> HandshakeResult:
        """Answer a SaslHandshake that :meth:`on_request` routed here."""
        if self.state is not SaslState.HANDSHAKE_OR_VERSIONS and \
                self.state is not SaslState.HANDSHAKE:
            raise RuntimeError(f"SaslHandshake in state {self.state.value}")
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            self.failure_reason = (f"SASL mechanism {mechanism!r} requested by the client is "
                                   f"not enabled (sasl.enabled.mechanisms: "
                                   f"{', '.join(self.mechanisms)})")
            return HandshakeResult(ErrorCode.UNSUPPORTED_SASL_MECHANISM, self.mechanisms, True)
        if self._reauthenticating and mechanism != self.mechanism:
            # Kafka answers the handshake and fails the authentication that follows.
            self._bad_reauth_mechanism = mechanism
        else:
            self.mechanism = mechanism
            phase = "re-authentication" if self._reauthenticating else "authentication"
            self._exchange = (PlainServerExchange(self._lookup) if mechanism == PLAIN
                              else ScramServerExchange(mechanism, self._lookup, phase=phase))
        self.expects_raw_tokens = version == 0
        self.state = SaslState.AUTHENTICATE
        return HandshakeResult(ErrorCode.NONE, self.mechanisms)

    # ------------------------------------------------------- authenticate
    def authenticate(self, version: int, auth_bytes: bytes, now_ms: int) -> AuthenticateResult:
        """Answer a SaslAuthenticate request that :meth:`on_request` routed here."""
        if version > 0:
            self.client_supports_reauth = True
        try:
            answer, lifetime_ms = self._evaluate(auth_bytes, now_ms)
        except AuthenticationFailed as exc:
            return AuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED, exc.client_message,
                                      b"", close=True)
        return AuthenticateResult(ErrorCode.NONE, None, answer, lifetime_ms)

    def raw_token(self, token: bytes, now_ms: int) -> bytes:
        """After a v0 handshake: the answer to a bare token (sent back size-prefixed).

        Raises :class:`AuthenticationFailed` (close without an answer, as Kafka).
        """
        if not self.expects_raw_tokens or self.state is not SaslState.AUTHENTICATE:
            raise RuntimeError(f"a bare SASL token in state {self.state.value}")
        return self._evaluate(token, now_ms)[0]

    def _evaluate(self, token: bytes, now_ms: int) -> tuple[bytes, int]:
        if self.state is not SaslState.AUTHENTICATE:
            raise RuntimeError(f"SASL token in state {self.state.value}")
        try:
            if self._bad_reauth_mechanism is not None or self._exchange is None:
                message = (f"SASL mechanism '{self._bad_reauth_mechanism}' requested by client "
                           f"is not supported for re-authentication of mechanism "
                           f"'{self.mechanism}'")
                raise AuthenticationFailed(message, message)
            answer = self._exchange.evaluate(token)
            if not self._exchange.complete:
                return answer, 0
            principal = f"User:{self._exchange.username}"
            if self._reauthenticating and principal != self.principal:
                message = (f"Cannot change principals during re-authentication from "
                           f"{self.principal} to {principal}")
                raise AuthenticationFailed(message, message)
        except AuthenticationFailed as exc:
            self.state = SaslState.FAILED
            prefix = "re-authentication" if self._reauthenticating else "authentication"
            self.failure_reason = f"{prefix} of {self.peer} failed: {exc.reason}"
            raise
        self.principal = principal
        self.state = SaslState.AUTHENTICATED
        self._reauthenticating = False
        self._exchange = None
        if self.reauth_ms > 0:
            self.session_expires_ms = now_ms + self.reauth_ms
            return answer, self.reauth_ms
        self.session_expires_ms = None
        return answer, 0
