"""The actor frame format (wire/envelope.py): what the runtime sends and what it refuses."""

from __future__ import annotations

import msgpack
import pytest

from wire.envelope import (
    FORMAT_VERSION,
    BadFrame,
    decode_frame,
    decode_frame_full,
    encode_frame,
    encode_frames,
    incarnation_bytes,
    new_entry,
    sender_prefixes,
)


def test_a_frame_round_trips_with_its_addresses_and_entries() -> None:
    entries = [new_entry(9001, 5, 6, 7, 123, 0, ["x", 1]), new_entry(9002, 0, 0, 0, 124, 3, [])]
    data = encode_frame("node-a", "sender", "receiver", entries)
    assert decode_frame(data) == ("node-a", "sender", "receiver", entries)
    assert msgpack.unpackb(data)[0] == FORMAT_VERSION


def test_a_frame_names_its_sender_s_process_in_16_bytes_or_not_at_all() -> None:
    """The sender's incarnation (a uuid's hex) rides as 16 bytes of bin; a frame without
    one is the 5-element frame of before, still read."""
    entries = [new_entry(9001, 0, 0, 0, 123, 0, ["x"])]
    inc = incarnation_bytes("0123456789abcdef0123456789abcdef")
    assert inc == bytes.fromhex("0123456789abcdef0123456789abcdef")
    bare = encode_frame("node-a", "s", "r", entries)
    named = encode_frame("node-a", "s", "r", entries, inc)
    assert len(msgpack.unpackb(bare)) == 5
    assert len(named) - len(bare) == 2 + 16  # bin8 header and 16 bytes
    assert decode_frame_full(bare) == ("node-a", "s", "r", entries, b"")
    assert decode_frame_full(named) == ("node-a", "s", "r", entries, inc)
    assert decode_frame(named) == ("node-a", "s", "r", entries)
    assert named.startswith(sender_prefixes("node-a")) and bare.startswith(
        sender_prefixes("node-a"))
    # cut into several frames, each names the sender's process
    many = [new_entry(9001, 0, 0, 0, 123, 0, ["x" * 100]) for _ in range(20)]
    frames, refused = encode_frames("node-a", "s", "r", many, 600, inc)
    assert len(frames) > 1 and not refused
    assert [e for f in frames for e in decode_frame_full(f)[3]] == many
    assert all(decode_frame_full(f)[4] == inc and len(f) <= 600 for f in frames)
    with pytest.raises(BadFrame, match="incarnation must be bytes"):
        decode_frame_full(msgpack.packb([FORMAT_VERSION, "a", "b", "c", [], "x" * 32]))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1 not msgpack", "undecodable frame (FormatError: "),
        (msgpack.packb([1, "a", "b"]), "undecodable frame (not a 5- or 6-element array)"),
        (msgpack.packb({"a": 1}), "undecodable frame (not a 5- or 6-element array)"),
        (msgpack.packb([FORMAT_VERSION + 1, "a", "b", "c", []]),
         f"undecodable frame (unsupported envelope format version {FORMAT_VERSION + 1})"),
        (msgpack.packb([FORMAT_VERSION, 1, "b", "c", []]),
         "undecodable frame (addresses must be strings)"),
        (msgpack.packb([FORMAT_VERSION, "a", "b", "c", {"x": 1}]),
         "frame entries are not an array"),
    ],
)
def test_a_bad_frame_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(BadFrame) as info:
        decode_frame(data)
    assert str(info.value).startswith(reason)


def test_the_size_limit_is_checked_before_decoding() -> None:
    data = encode_frame("a", "b", "c", [new_entry(1, 0, 0, 0, 0, 0, ["x" * 100])])
    with pytest.raises(BadFrame, match=rf"^frame of {len(data)} bytes is over the 64 byte limit$"):
        decode_frame(data, max_frame_bytes=64)
    assert decode_frame(data, max_frame_bytes=len(data))[0] == "a"
