"""Zero-copy Fetch responses: the frame as parts, the records being the handler's own.

The response is encoded with a placeholder where each partition's records
go; the frame is then cut at the placeholders and the records put between
the pieces, with their length prefixes rewritten. A partition's records may
be bytes or a :class:`~wire.file_region.FileRegion` (the batches in their
segment file): the part list then mixes header bytes and regions, and
:func:`join_parts` turns it into what a KafkaResponse carries, the bytes in
one piece and each region with the offset it goes at.
"""

from __future__ import annotations

import os
from typing import Any

from kafka.protocol.schemas.fields.codecs import UnsignedVarInt32

from wire.file_region import FileRegion, RegionAt
from wire.kafka_codec.encoding import _encode_frame
from wire.kafka_codec.messages import _INT32, _MESSAGE_CLASSES, RequestHeader

Part = bytes | bytearray | memoryview | FileRegion

_NO_RECORDS: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())
_records_plans: dict[tuple[int, int], tuple[tuple[Any, ...], tuple[Any, ...]]] = {}
# A placeholder put where record bytes go while the rest is encoded; random
# per process, so no topic name or error message can be mistaken for it.
_MARKER = os.urandom(12)
_MARKER_SIZE = len(_MARKER) + 4


def _records_plan(field_struct: Any, version: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(`records` fields, child structs that hold `records` fields) at a version."""
    key = (id(field_struct), version)
    plan = _records_plans.get(key)
    if plan is None:
        here = []
        children = []
        for field in field_struct.untagged_fields(version):
            if field.type_str == "records":
                here.append(field)
            elif field.is_struct_array() or field.is_struct():
                inner = field.array_of if field.is_struct_array() else field
                if _records_plan(inner, version) != _NO_RECORDS:
                    children.append(field)
        plan = (tuple(here), tuple(children))
        _records_plans[key] = plan
    return plan


def _swap_records(item: Any, field_struct: Any, version: int, saved: list[Any]) -> None:
    here, children = _records_plan(field_struct, version)
    for field in here:
        value = getattr(item, field.name)
        if isinstance(value, (bytes, bytearray, memoryview)) or type(value) is FileRegion:
            saved.append((item, field.name, value))
            setattr(item, field.name, _MARKER + _INT32.pack(len(saved) - 1))
    for field in children:
        value = getattr(item, field.name)
        if value is None:
            continue
        inner = field.array_of if field.is_struct_array() else field
        for element in value if field.is_struct_array() else (value,):
            if not isinstance(element, tuple):  # tuples keep their records inline
                _swap_records(element, inner, version, saved)


def _encode_parts(header: RequestHeader, response: Any) -> list[Part]:
    api_key, api_version = header.api_key, header.api_version
    saved: list[Any] = []
    try:
        _swap_records(response, response._struct, api_version, saved)
        frame = _encode_frame(api_key, api_version, header.correlation_id, response)
    finally:
        for item, name, value in saved:
            setattr(item, name, value)
    if not saved:
        return [frame]
    compact = _MESSAGE_CLASSES[api_key][1].flexible_version_q(api_version)
    # The placeholder's length prefix as the encoder wrote it.
    old_prefix = UnsignedVarInt32.encode(_MARKER_SIZE + 1) if compact else _INT32.pack(_MARKER_SIZE)
    parts: list[Part] = []
    start = 0
    size = len(frame)
    for index, (_, _, value) in enumerate(saved):
        marker = _MARKER + _INT32.pack(index)
        pos = frame.find(marker, start)
        while pos >= 0 and frame[pos - len(old_prefix) : pos] != old_prefix:
            pos = frame.find(marker, pos + 1)
        if pos < 0:
            raise AssertionError("record placeholder not found in the encoded response")
        if type(value) is FileRegion:
            length = value.length
        else:
            length = value.nbytes if isinstance(value, memoryview) else len(value)
        prefix = UnsignedVarInt32.encode(length + 1) if compact else _INT32.pack(length)
        parts.append(frame[start : pos - len(old_prefix)])
        parts.append(prefix)
        parts.append(value)
        size += length + len(prefix) - _MARKER_SIZE - len(old_prefix)
        start = pos + _MARKER_SIZE
    parts.append(frame[start:])
    parts[0] = _INT32.pack(size - 4) + bytes(parts[0][4:])
    return parts


def has_regions(parts: list[Part]) -> bool:
    return any(type(part) is FileRegion for part in parts)


def join_parts(parts: list[Part]) -> tuple[bytes, list[RegionAt]]:
    """The parts' bytes in one piece, and each region with the offset it goes at.

    Sending the bytes with every region put in at its offset, in order, is
    sending the frame. Only the bytes are copied (once); regions are not read.
    """
    pieces: list[bytes | bytearray | memoryview] = []
    regions: list[RegionAt] = []
    at = 0
    for part in parts:
        if type(part) is FileRegion:
            regions.append(RegionAt(at, part.fd, part.position, part.length))
        else:
            pieces.append(part)  # type: ignore[arg-type]
            at += part.nbytes if isinstance(part, memoryview) else len(part)  # type: ignore[arg-type]
    return b"".join(pieces), regions
