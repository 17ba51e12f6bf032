"""Messages the runtime itself exchanges (type ids 1-99)."""

from __future__ import annotations

from typing import Any, NamedTuple

from wire.registry import message


@message(1)
class Reply(NamedTuple):
    """The answer to an ask: ``ok`` False means ``value`` is the error text."""

    ask_id: int
    ok: bool
    value: Any


@message(2)
class Ping(NamedTuple):
    """Liveness and clock probe; ``sent_wall_ns`` lets the receiver estimate offset."""

    seq: int
    sent_wall_ns: int


@message(3)
class Pong(NamedTuple):
    seq: int
    ping_wall_ns: int
    pong_wall_ns: int


@message(4)
class Text(NamedTuple):
    """A free-form note, used by the demo and by tests."""

    text: str


@message(5)
class GetClockOffsets(NamedTuple):
    """Ask a node's gateway for its clock offset estimates: {node: [rtt_ns, offset_ns]}."""
