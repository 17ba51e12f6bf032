"""SaslHandshake and SaslAuthenticate that reach the APIs: on a listener without SASL
(PLAINTEXT, SSL) no SASL layer takes them first (a SASL listener's Processor answers them
before and after the login, actors/processor.py). Kafka's KafkaApis answers both with
ILLEGAL_SASL_STATE and keeps the connection open."""

from __future__ import annotations

from typing import Any

from actors.apis.base import ApiGen, HandlerContext, Respond
from wire.errors import ErrorCode

ILLEGAL_SASL_STATE = int(ErrorCode.ILLEGAL_SASL_STATE)


def handle_sasl_handshake(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """No mechanisms offered: the listener has none."""
    return Respond({"error_code": ILLEGAL_SASL_STATE, "mechanisms": []})
    yield


def handle_sasl_authenticate(ctx: HandlerContext, header: Any, req: Any) -> ApiGen:
    """Kafka's own message (it takes a connection here as one already authenticated)."""
    return Respond({"error_code": ILLEGAL_SASL_STATE,
                    "error_message": "SaslAuthenticate request received after successful "
                                     "authentication",
                    "auth_bytes": b"", "session_lifetime_ms": 0})
    yield
