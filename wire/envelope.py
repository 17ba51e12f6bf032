"""The envelope: how messages travel between mailboxes.

A frame is one msgpack array carrying one or more envelopes that share a
sender and a receiver (an actor flushes what it sent to one receiver during a
turn as one frame; the frame, not the message, pays ZeroMQ's per-send cost):

    [FORMAT_VERSION, sender_node, sender_name, receiver_name, entries]
    [FORMAT_VERSION, sender_node, sender_name, receiver_name, entries, sender_incarnation]

(``sender_incarnation``: the sending process's incarnation as msgpack ``bin``, 16 bytes for
a cluster node's uuid, :func:`incarnation_bytes`; left out by a node outside a cluster and
between the processes of one broker) and each entry is one message's envelope:

    [type_id, trace_id, span_id, parent_span_id, send_time_ns, ask_id, body]

``trace_id`` 0 means "not sampled". ``ask_id`` 0 means no reply is expected;
otherwise the receiver answers the sender with a ``Reply`` carrying that id.
``send_time_ns`` is wall-clock time (``time.time_ns``) so it compares across
hosts once the clock offset is known; it is read for a traced entry only (the hop
and network-leg records are all that use it) and is 0 in an untraced one. The
receiver node is implied by the socket the frame arrived on.

A receiver refuses a frame over its byte limit (``actor.max.frame.bytes``)
unread, so a sender never builds one: :func:`encode_frames` cuts what one
turn sent to one receiver into as many frames as the limit needs, in order,
and names the messages that could not fit even alone.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack

FORMAT_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


class BadFrame(ValueError):
    """A frame that cannot be decoded; the message is the reason the runtime records
    as a dead letter (its text before " (" is the kind it counts)."""


_packb = msgpack.packb
_unpackb = msgpack.unpackb


def incarnation_bytes(incarnation: str) -> bytes:
    """An incarnation (``NodeEndpoint.incarnation``) as a frame carries it: a uuid's 32 hex
    digits as its 16 bytes, anything else as its UTF-8 (b"" for none)."""
    found = _INCARNATIONS.get(incarnation)
    if found is None:
        try:
            found = bytes.fromhex(incarnation) if len(incarnation) == 32 else b""
        except ValueError:
            found = b""
        found = found or incarnation.encode()
        if len(_INCARNATIONS) >= 4096:
            _INCARNATIONS.clear()
        _INCARNATIONS[incarnation] = found
    return found


_INCARNATIONS: dict[str, bytes] = {}


def _fields(sender_node: str, sender_name: str, receiver_name: str, entries: list[Any],
            sender_incarnation: bytes) -> list[Any]:
    if sender_incarnation:
        return [FORMAT_VERSION, sender_node, sender_name, receiver_name, entries,
                sender_incarnation]
    return [FORMAT_VERSION, sender_node, sender_name, receiver_name, entries]


def encode_frame(
    sender_node: str, sender_name: str, receiver_name: str, entries: list[Any],
    sender_incarnation: bytes = b"",
) -> bytes:
    """One frame carrying ``entries`` (each built by :func:`new_entry`)."""
    return _packb(_fields(sender_node, sender_name, receiver_name, entries,
                          sender_incarnation))


class Oversized(NamedTuple):
    """An entry whose frame alone would pass the limit: the sender must refuse it."""

    entry: int  # its place in the entries given
    frame_bytes: int  # the size of a frame carrying it alone


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes((0x90 | count,))
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def encode_frames(
    sender_node: str, sender_name: str, receiver_name: str, entries: list[Any],
    max_frame_bytes: int, sender_incarnation: bytes = b"",
) -> tuple[list[bytes], list[Oversized]]:
    """Frames carrying ``entries`` in order, none over ``max_frame_bytes``.

    The usual case is one frame, encoded once. Only when that frame would pass
    the limit are the entries encoded one by one and packed greedily into
    frames (each a valid frame of :func:`encode_frame`'s format: the entries'
    bytes are put together, not encoded again). An entry that passes the limit
    even alone is left out and returned as :class:`Oversized`; the others keep
    their order.
    """
    frame = _packb(_fields(sender_node, sender_name, receiver_name, entries,
                           sender_incarnation))
    if len(frame) <= max_frame_bytes:
        return [frame], []
    del frame
    head = (bytes((0x96 if sender_incarnation else 0x95,)) + _packb(FORMAT_VERSION)
            + _packb(sender_node) + _packb(sender_name) + _packb(receiver_name))
    tail = _packb(sender_incarnation) if sender_incarnation else b""
    frames: list[bytes] = []
    refused: list[Oversized] = []
    batch: list[bytes] = []
    batch_bytes = 0

    def close_batch() -> None:
        nonlocal batch, batch_bytes
        if batch:
            frames.append(b"".join([head, _array_header(len(batch)), *batch, tail]))
            batch, batch_bytes = [], 0

    for index, entry in enumerate(entries):
        packed = _packb(entry)
        alone = len(head) + len(_array_header(1)) + len(packed) + len(tail)
        if alone > max_frame_bytes:
            refused.append(Oversized(index, alone))
            continue
        # the array header grows from 1 to 5 bytes with the count: count it at its largest
        if len(head) + 5 + batch_bytes + len(packed) + len(tail) > max_frame_bytes:
            close_batch()
        batch.append(packed)
        batch_bytes += len(packed)
    close_batch()
    return frames, refused


def sender_prefixes(sender_node: str) -> tuple[bytes, bytes]:
    """The bytes every frame from ``sender_node`` starts with (the array header of either
    length, the version, the node name as msgpack writes it): a receiver that knows who
    sent a frame (CURVE) checks the claim with one ``startswith``, without decoding it."""
    rest = _packb(FORMAT_VERSION) + _packb(sender_node)
    return bytes((0x95,)) + rest, bytes((0x96,)) + rest


def claimed_sender(data: bytes) -> str:
    """The sender node a frame claims, read from its first bytes only ('?' if unreadable)."""
    unpacker = msgpack.Unpacker(max_buffer_size=1024)
    unpacker.feed(data[:512])
    try:
        if unpacker.read_array_header() < 2:
            return "?"
        unpacker.skip()
        node = unpacker.unpack()
    except Exception:  # msgpack raises several unrelated types
        return "?"
    return node[:100] if type(node) is str else "?"


def frame_head(data: bytes) -> tuple[str, str, int] | None:
    """(sender node, sender name, how many messages) of a frame, read from its first
    bytes only; None if they are not a frame's. For a sender that drops a frame unread
    (a direct link over its backlog cap) and records what it was."""
    unpacker = msgpack.Unpacker(max_buffer_size=1024)
    unpacker.feed(data[:1024])
    try:
        if unpacker.read_array_header() not in (5, 6):
            return None
        unpacker.skip()  # the format version
        node = unpacker.unpack()
        name = unpacker.unpack()
        unpacker.skip()  # the receiver's name
        count = unpacker.read_array_header()
    except Exception:  # msgpack raises several unrelated types
        return None
    if type(node) is not str or type(name) is not str:
        return None
    return node[:100], name[:100], count


def new_entry(type_id: int, trace_id: int, span_id: int, parent_span_id: int,
              send_time_ns: int, ask_id: int, body: Any) -> list[Any]:
    """One message's envelope (``send_time_ns`` 0 when ``trace_id`` is 0). (Actor.tell,
    the hot path, builds the same list inline.)"""
    return [type_id, trace_id, span_id, parent_span_id, send_time_ns, ask_id, body]


def decode_frame(
    data: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> tuple[str, str, str, list[Any]]:
    """(sender node, sender name, receiver name, entries) of a frame, or :class:`BadFrame`."""
    s_node, s_name, r_name, entries, _s_inc = decode_frame_full(data, max_frame_bytes)
    return s_node, s_name, r_name, entries


def decode_frame_full(
    data: bytes | memoryview, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> tuple[str, str, str, list[Any], bytes]:
    """(sender node, sender name, receiver name, entries, sender incarnation: b"" when the
    frame has none) of a frame, or :class:`BadFrame`.

    Entries are not checked here: the receiver checks each one and drops only
    the bad ones. A plain tuple, not a NamedTuple: this runs for every frame.
    """
    if len(data) > max_frame_bytes:
        raise BadFrame(f"frame of {len(data)} bytes is over the {max_frame_bytes} byte limit")
    try:
        obj = _unpackb(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise BadFrame(f"undecodable frame ({type(exc).__name__}: {exc})") from None
    if type(obj) is not list or not 5 <= len(obj) <= 6:
        raise BadFrame("undecodable frame (not a 5- or 6-element array)")
    if len(obj) == 6:
        version, s_node, s_name, r_name, entries, s_inc = obj
        if type(s_inc) is not bytes or len(s_inc) > 64:
            raise BadFrame("undecodable frame (the sender's incarnation must be bytes)")
    else:
        version, s_node, s_name, r_name, entries = obj
        s_inc = b""
    if version != FORMAT_VERSION:
        raise BadFrame(f"undecodable frame (unsupported envelope format version {version!r})")
    if type(s_node) is not str or type(s_name) is not str or type(r_name) is not str:
        raise BadFrame("undecodable frame (addresses must be strings)")
    if type(entries) is not list:
        raise BadFrame("frame entries are not an array")
    return s_node, s_name, r_name, entries, s_inc
