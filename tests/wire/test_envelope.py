"""The actor frame format (wire/envelope.py): what the runtime sends and what it refuses."""

from __future__ import annotations

import msgpack
import pytest

from wire.envelope import FORMAT_VERSION, BadFrame, decode_frame, encode_frame, new_entry


def test_a_frame_round_trips_with_its_addresses_and_entries() -> None:
    entries = [new_entry(9001, 5, 6, 7, 123, 0, ["x", 1]), new_entry(9002, 0, 0, 0, 124, 3, [])]
    data = encode_frame("node-a", "sender", "receiver", entries)
    assert decode_frame(data) == ("node-a", "sender", "receiver", entries)
    assert msgpack.unpackb(data)[0] == FORMAT_VERSION


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
