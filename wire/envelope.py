"""The envelope: how messages travel between mailboxes.

A frame is one msgpack array carrying one or more envelopes that share a
sender and a receiver (an actor flushes what it sent to one receiver during a
turn as one frame; the frame, not the message, pays ZeroMQ's per-send cost):

    [FORMAT_VERSION, sender_node, sender_name, receiver_name, entries]

and each entry is one message's envelope:

    [type_id, trace_id, span_id, parent_span_id, send_time_ns, ask_id, body]

``trace_id`` 0 means "not sampled". ``ask_id`` 0 means no reply is expected;
otherwise the receiver answers the sender with a ``Reply`` carrying that id.
``send_time_ns`` is wall-clock time (``time.time_ns``) so it compares across
hosts once the clock offset is known. The receiver node is implied by the
socket the frame arrived on.
"""

from __future__ import annotations

from typing import Any

import msgpack

FORMAT_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


class BadFrame(ValueError):
    """A frame that cannot be decoded; the message is the reason the runtime records
    as a dead letter (its text before " (" is the kind it counts)."""


_packb = msgpack.packb
_unpackb = msgpack.unpackb


def encode_frame(
    sender_node: str, sender_name: str, receiver_name: str, entries: list[Any]
) -> bytes:
    """One frame carrying ``entries`` (each built by :func:`new_entry`)."""
    return _packb([FORMAT_VERSION, sender_node, sender_name, receiver_name, entries])


def new_entry(type_id: int, trace_id: int, span_id: int, parent_span_id: int,
              send_time_ns: int, ask_id: int, body: Any) -> list[Any]:
    """One message's envelope. (Actor.tell, the hot path, builds the same list inline.)"""
    return [type_id, trace_id, span_id, parent_span_id, send_time_ns, ask_id, body]


def decode_frame(
    data: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> tuple[str, str, str, list[Any]]:
    """(sender node, sender name, receiver name, entries) of a frame, or :class:`BadFrame`.

    Entries are not checked here: the receiver checks each one and drops only
    the bad ones. A plain tuple, not a NamedTuple: this runs for every frame.
    """
    if len(data) > max_frame_bytes:
        raise BadFrame(f"frame of {len(data)} bytes is over the {max_frame_bytes} byte limit")
    try:
        obj = _unpackb(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise BadFrame(f"undecodable frame ({type(exc).__name__}: {exc})") from None
    if type(obj) is not list or len(obj) != 5:
        raise BadFrame("undecodable frame (not a 5-element array)")
    version, s_node, s_name, r_name, entries = obj
    if version != FORMAT_VERSION:
        raise BadFrame(f"undecodable frame (unsupported envelope format version {version!r})")
    if type(s_node) is not str or type(s_name) is not str or type(r_name) is not str:
        raise BadFrame("undecodable frame (addresses must be strings)")
    if type(entries) is not list:
        raise BadFrame("frame entries are not an array")
    return s_node, s_name, r_name, entries
