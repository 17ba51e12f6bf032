"""The ZAP decision (ZeroMQ RFC 27) for CURVE between nodes, as a pure core.

ZeroMQ asks the handler bound at ``inproc://zeromq.zap.01`` about every new
peer of a CURVE server socket, with the peer's address and its long-term
public key. :class:`ZapPolicy` admits exactly the keys it was given (the
cluster's nodes) and refuses everything else, including other mechanisms;
the reply's user id is the node name, so the socket knows who sent a frame.
The shell (``actors.security.zap_handler``) moves the frames and logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ZAP_VERSION = b"1.0"


@dataclass(frozen=True, slots=True)
class ZapDecision:
    allowed: bool
    address: str
    mechanism: str
    public_key: bytes | None   # the peer's raw 32-byte CURVE key, when it sent one
    node: str | None           # whose key it is
    reason: str


class ZapPolicy:
    """Admit the CURVE keys of ``known`` (raw 32-byte key -> node name), nothing else."""

    def __init__(self, known: Mapping[bytes, str]) -> None:
        self.known = dict(known)

    def handle(self, frames: list[bytes]) -> tuple[list[bytes], ZapDecision]:
        """The reply frames to one ZAP request, and the decision behind them."""
        if len(frames) < 6:
            decision = ZapDecision(False, "?", "?", None, None,
                                   f"malformed ZAP request ({len(frames)} frames)")
            request_id = frames[1] if len(frames) > 1 else b""
            return [ZAP_VERSION, request_id, b"500", b"malformed request", b"", b""], decision
        version, request_id, _domain, address, _identity, mechanism = frames[:6]
        credentials = frames[6:]
        peer = address.decode("utf-8", "replace")
        kind = mechanism.decode("ascii", "replace")
        if version != ZAP_VERSION:
            decision = ZapDecision(False, peer, kind, None, None,
                                   f"ZAP version {version[:8]!r} is not 1.0")
            return [ZAP_VERSION, request_id, b"500", b"bad version", b"", b""], decision
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            decision = ZapDecision(False, peer, kind, None, None,
                                   f"mechanism {kind} is not CURVE with a key")
            return [ZAP_VERSION, request_id, b"400", b"CURVE only", b"", b""], decision
        key = credentials[0]
        node = self.known.get(key)
        if node is None:
            decision = ZapDecision(False, peer, kind, key, None, "unknown public key")
            return [ZAP_VERSION, request_id, b"400", b"unknown public key", b"", b""], decision
        decision = ZapDecision(True, peer, kind, key, node, f"key of node {node}")
        return [ZAP_VERSION, request_id, b"200", b"OK", node.encode(), b""], decision
