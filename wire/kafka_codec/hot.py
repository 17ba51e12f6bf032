"""The hot path: Produce and Fetch requests and responses read and written field by field.

Every other API goes through kafka.protocol (requests.py, responses.py); these
two carry nearly all of a broker's requests, and building a kafka.protocol
object per field costs more than the rest of a one-record produce. Here a
request body is read with ``struct`` straight into small slotted objects that
have the same attribute names (snake_case, as kafka.protocol's) and the same
defaults for fields a version lacks, and a response dict (the shape
``encode_response`` takes) is written straight into one buffer.

Versions covered: the advertised ones (wire/api_versions.py), Produce 3-12
and Fetch 4-12; tests/wire/test_kafka_codec_hot.py checks each of them
against kafka.protocol both ways. Whatever this module does not know (an
unknown key in a response dict, a response object instead of a dict, a
version outside its table) goes to the kafka.protocol path, which gives the
answer or the error it always gave.
"""

from __future__ import annotations

import struct
from typing import Any

from wire.api_versions import api_name
from wire.file_region import FileRegion, RegionAt
from wire.kafka_codec.messages import InvalidRequestError, RequestHeader

PRODUCE = 0
FETCH = 1
PRODUCE_VERSIONS = range(3, 13)
FETCH_VERSIONS = range(4, 13)
_PRODUCE_FLEXIBLE = 9
_FETCH_FLEXIBLE = 12

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16_I32 = struct.Struct(">hi")
_I32_I16_I64 = struct.Struct(">ihq")
_I64_I64 = struct.Struct(">qq")
_I32_I32 = struct.Struct(">ii")
_I32_I64 = struct.Struct(">iq")
_I64_I32 = struct.Struct(">qi")
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")  # index, error, HW, LSO, log start
_PRODUCE_PARTITION_V5 = struct.Struct(">ihqqq")  # index, error, base offset, append time, start
_FRAME_PREFIX = struct.Struct(">ii")

_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError)


class _Truncated(Exception):
    """A length runs past the end of the frame."""


class _Fallback(Exception):
    """A response this module does not write: the kafka.protocol path takes it."""


# -- request objects ----------------------------------------------------------------------------


class _Record:
    """Attribute access, equality and repr for the request objects below."""

    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"{type(self).__name__}({fields})"


class PartitionProduceData(_Record):
    __slots__ = ("index", "records")

    def __init__(self, index: int, records: bytes | None) -> None:
        self.index = index
        self.records = records


class TopicProduceData(_Record):
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: list[PartitionProduceData]) -> None:
        self.name = name
        self.partition_data = partition_data


class ProduceRequestData(_Record):
    """A Produce request body, as kafka.protocol's ProduceRequest names its fields."""

    __slots__ = ("acks", "timeout_ms", "topic_data", "transactional_id", "version")

    def __init__(self, version: int, transactional_id: str | None, acks: int, timeout_ms: int,
                 topic_data: list[TopicProduceData]) -> None:
        self.version = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data


class FetchPartition(_Record):
    __slots__ = ("current_leader_epoch", "fetch_offset", "last_fetched_epoch", "log_start_offset",
                 "partition", "partition_max_bytes")

    def __init__(self, partition: int, current_leader_epoch: int, fetch_offset: int,
                 last_fetched_epoch: int, log_start_offset: int,
                 partition_max_bytes: int) -> None:
        self.partition = partition
        self.current_leader_epoch = current_leader_epoch
        self.fetch_offset = fetch_offset
        self.last_fetched_epoch = last_fetched_epoch
        self.log_start_offset = log_start_offset
        self.partition_max_bytes = partition_max_bytes


class FetchTopic(_Record):
    __slots__ = ("partitions", "topic")

    def __init__(self, topic: str, partitions: list[FetchPartition]) -> None:
        self.topic = topic
        self.partitions = partitions


class ForgottenTopic(_Record):
    __slots__ = ("partitions", "topic")

    def __init__(self, topic: str, partitions: list[int]) -> None:
        self.topic = topic
        self.partitions = partitions


class FetchRequestData(_Record):
    """A Fetch request body, as kafka.protocol's FetchRequest names its fields."""

    __slots__ = ("cluster_id", "forgotten_topics_data", "isolation_level", "max_bytes",
                 "max_wait_ms", "min_bytes", "rack_id", "replica_id", "session_epoch",
                 "session_id", "topics", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        self.cluster_id: str | None = None
        self.replica_id = -1
        self.max_wait_ms = 0
        self.min_bytes = 0
        self.max_bytes = 0x7FFFFFFF
        self.isolation_level = 0
        self.session_id = 0
        self.session_epoch = -1
        self.topics: list[FetchTopic] = []
        self.forgotten_topics_data: list[ForgottenTopic] = []
        self.rack_id = ""


# -- reading ------------------------------------------------------------------------------------


def _uvarint(data: Any, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def _skip_tags(data: Any, pos: int, size: int) -> int:
    if data[pos] == 0:  # nearly always: no tagged fields
        return pos + 1
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        length, pos = _uvarint(data, pos)
        pos += length
        if pos > size:
            raise _Truncated
    return pos


def _string(data: Any, pos: int, size: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n = data[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(data, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(data, pos)
        pos += 2
    if n < 0:
        raise ValueError("null where a string is required")
    end = pos + n
    if end > size:
        raise _Truncated
    return str(data[pos:end], "utf-8"), end


def _nullable_string(data: Any, pos: int, size: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n = data[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _uvarint(data, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(data, pos)
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > size:
        raise _Truncated
    return str(data[pos:end], "utf-8"), end


def _count(data: Any, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n = data[pos]
        if n < 0x80:
            return n - 1, pos + 1
        n, pos = _uvarint(data, pos)
        return n - 1, pos
    (n,) = _I32.unpack_from(data, pos)
    return n, pos + 4


def _decode_produce(data: Any, pos: int, size: int, version: int) -> ProduceRequestData:
    flexible = version >= _PRODUCE_FLEXIBLE
    if flexible and data[pos] == 0:  # _nullable_string's common case inline: no id
        transactional_id: str | None = None
        pos += 1
    else:
        transactional_id, pos = _nullable_string(data, pos, size, flexible)
    acks, timeout_ms = _I16_I32.unpack_from(data, pos)
    pos += 6
    # _count, its common case inline (here and below): a one-byte compact count
    if flexible and data[pos] < 0x80:
        topic_count = data[pos] - 1
        pos += 1
    else:
        topic_count, pos = _count(data, pos, flexible)
    topics = []
    for _ in range(max(topic_count, 0)):
        name, pos = _string(data, pos, size, flexible)
        if flexible and data[pos] < 0x80:
            count = data[pos] - 1
            pos += 1
        else:
            count, pos = _count(data, pos, flexible)
        partitions = []
        for _ in range(max(count, 0)):
            (index,) = _I32.unpack_from(data, pos)
            pos += 4
            if flexible:
                # _uvarint, its common cases inline: a batch under 16 KiB has a length of
                # one or two bytes
                n = data[pos]
                if n < 0x80:
                    pos += 1
                elif data[pos + 1] < 0x80:
                    n = (n & 0x7F) | (data[pos + 1] << 7)
                    pos += 2
                else:
                    n, pos = _uvarint(data, pos)
                n -= 1
            else:
                (n,) = _I32.unpack_from(data, pos)
                pos += 4
            records: bytes | None = None
            if n >= 0:
                end = pos + n
                if end > size:
                    raise _Truncated
                records = bytes(data[pos:end])
                pos = end
            if flexible:  # _skip_tags, its common case inline: no tagged fields
                pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos, size)
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos, size)
        topics.append(TopicProduceData(name, partitions))
    if flexible:
        pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos, size)
    if pos > size:
        raise _Truncated
    return ProduceRequestData(version, transactional_id, acks, timeout_ms, topics)


def _decode_fetch(data: Any, pos: int, size: int, version: int) -> FetchRequestData:
    flexible = version >= _FETCH_FLEXIBLE
    req = FetchRequestData(version)
    (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes,
     req.isolation_level) = struct.unpack_from(">iiiib", data, pos)
    pos += 17
    if version >= 7:
        req.session_id, req.session_epoch = _I32_I32.unpack_from(data, pos)
        pos += 8
    # _count, its common case inline (here and below): a one-byte compact count
    if flexible and data[pos] < 0x80:
        topic_count = data[pos] - 1
        pos += 1
    else:
        topic_count, pos = _count(data, pos, flexible)
    topics = req.topics
    with_leader_epoch = version >= 9
    for _ in range(max(topic_count, 0)):
        name, pos = _string(data, pos, size, flexible)
        if flexible and data[pos] < 0x80:
            count = data[pos] - 1
            pos += 1
        else:
            count, pos = _count(data, pos, flexible)
        partitions = []
        for _ in range(max(count, 0)):
            current_leader_epoch = last_fetched_epoch = -1
            if with_leader_epoch:
                partition, current_leader_epoch, fetch_offset = struct.unpack_from(
                    ">iiq", data, pos)
                pos += 16
            else:
                partition, fetch_offset = _I32_I64.unpack_from(data, pos)
                pos += 12
            if flexible:
                (last_fetched_epoch,) = _I32.unpack_from(data, pos)
                pos += 4
            if version >= 5:
                log_start_offset, partition_max_bytes = _I64_I32.unpack_from(data, pos)
                pos += 12
            else:
                log_start_offset = -1
                (partition_max_bytes,) = _I32.unpack_from(data, pos)
                pos += 4
            if flexible:  # _skip_tags, its common case inline: no tagged fields
                pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos, size)
            partitions.append(FetchPartition(partition, current_leader_epoch, fetch_offset,
                                             last_fetched_epoch, log_start_offset,
                                             partition_max_bytes))
        if flexible:
            pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos, size)
        topics.append(FetchTopic(name, partitions))
    if version >= 7:
        if flexible and data[pos] < 0x80:  # _count's common case, inline
            count = data[pos] - 1
            pos += 1
        else:
            count, pos = _count(data, pos, flexible)
        forgotten = req.forgotten_topics_data
        for _ in range(max(count, 0)):
            name, pos = _string(data, pos, size, flexible)
            n, pos = _count(data, pos, flexible)
            n = max(n, 0)
            indexes = list(struct.unpack_from(f">{n}i", data, pos))
            pos += 4 * n
            if flexible:
                pos = _skip_tags(data, pos, size)
            forgotten.append(ForgottenTopic(name, indexes))
    if version >= 11:
        if flexible and data[pos] == 1:  # _string's common case inline: no rack id
            req.rack_id = ""
            pos += 1
        else:
            req.rack_id, pos = _string(data, pos, size, flexible)
    if flexible:
        if data[pos] == 0:  # _uvarint's common case inline: no tagged fields
            tag_count = 0
            pos += 1
        else:
            tag_count, pos = _uvarint(data, pos)
        for _ in range(tag_count):
            tag, pos = _uvarint(data, pos)
            length, pos = _uvarint(data, pos)
            if tag == 0:  # ClusterId
                req.cluster_id, _end = _nullable_string(data, pos, size, True)
            pos += length
    if pos > size:
        raise _Truncated
    return req


def decode_hot_request(header: RequestHeader, frame: bytes | bytearray | memoryview) -> Any:
    """The body of a Produce or Fetch request at an advertised version, else None.

    Raises InvalidRequestError on a truncated or malformed body, with the
    messages of the kafka.protocol path.
    """
    api_key, version = header.api_key, header.api_version
    if api_key == PRODUCE and version in PRODUCE_VERSIONS:
        decode = _decode_produce
    elif api_key == FETCH and version in FETCH_VERSIONS:
        decode = _decode_fetch  # type: ignore[assignment]
    else:
        return None
    data = frame if isinstance(frame, bytes) else memoryview(frame)
    size = len(data) if isinstance(data, bytes) else data.nbytes
    try:
        return decode(data, header.header_size, size, version)
    except _Truncated:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{version} request body is truncated "
            f"(correlation id {header.correlation_id})") from None
    except _DECODE_ERRORS as exc:
        raise InvalidRequestError(
            f"{api_name(api_key)} v{version} request body is malformed "
            f"or truncated (correlation id {header.correlation_id}): {exc!r}") from exc


# -- writing ------------------------------------------------------------------------------------


def _put_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, value: str, flexible: bool) -> None:
    raw = value.encode()
    if flexible:
        if len(raw) < 0x7F:  # one byte, nearly always
            out.append(len(raw) + 1)
        else:
            _put_uvarint(out, len(raw) + 1)
    else:
        out += _I16.pack(len(raw))
    out += raw


def _put_nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += b"\xff\xff"
    else:
        _put_string(out, value, flexible)


def _put_count(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        if 0 <= n < 0x7F:  # one byte, nearly always
            out.append(n + 1)
            return
        _put_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def _check_keys(values: dict[str, Any], known: frozenset[str]) -> None:
    if not known.issuperset(values):
        raise _Fallback


def _put_tags(out: bytearray, tags: list[tuple[int, bytes]]) -> None:
    _put_uvarint(out, len(tags))
    for tag, body in tags:
        _put_uvarint(out, tag)
        _put_uvarint(out, len(body))
        out += body


def _leader_tag(value: Any) -> bytes | None:
    """A LeaderIdAndEpoch tagged struct, None when it holds its defaults."""
    if value is None:
        return None
    if not isinstance(value, dict) or not frozenset(("leader_id", "leader_epoch")).issuperset(
            value):
        raise _Fallback
    leader_id = value.get("leader_id", -1)
    leader_epoch = value.get("leader_epoch", -1)
    if leader_id == -1 and leader_epoch == -1:
        return None
    return _I32_I32.pack(leader_id, leader_epoch) + b"\x00"


def _node_endpoints_tag(value: Any) -> bytes | None:
    if not value:
        return None
    out = bytearray()
    _put_uvarint(out, len(value) + 1)
    for node in value:
        if not isinstance(node, dict) or not frozenset(("node_id", "host", "port",
                                                        "rack")).issuperset(node):
            raise _Fallback
        out += _I32.pack(node["node_id"])
        _put_string(out, node["host"], True)
        out += _I32.pack(node["port"])
        _put_nullable_string(out, node.get("rack"), True)
        out.append(0)
    return bytes(out)


_PRODUCE_KEYS = frozenset(("responses", "throttle_time_ms", "node_endpoints"))
_PRODUCE_TOPIC_KEYS = frozenset(("name", "partition_responses"))
_PRODUCE_PARTITION_KEYS = frozenset(("index", "error_code", "base_offset", "log_append_time_ms",
                                     "log_start_offset", "record_errors", "error_message",
                                     "current_leader"))


def _encode_produce(out: bytearray, values: dict[str, Any], version: int) -> None:
    if not _PRODUCE_KEYS.issuperset(values):  # _check_keys, inline
        raise _Fallback
    flexible = version >= _PRODUCE_FLEXIBLE
    responses = values.get("responses") or ()
    # _put_count, its common case inline (here and below): a one-byte compact count
    if flexible and len(responses) < 0x7F:
        out.append(len(responses) + 1)
    else:
        _put_count(out, len(responses), flexible)
    for topic in responses:
        if not _PRODUCE_TOPIC_KEYS.issuperset(topic):
            raise _Fallback
        if flexible:  # _put_string, its common case inline: a length of one byte
            raw = topic["name"].encode()
            if len(raw) < 0x7F:
                out.append(len(raw) + 1)
                out += raw
            else:
                _put_uvarint(out, len(raw) + 1)
                out += raw
        else:
            _put_string(out, topic["name"], flexible)
        partitions = topic.get("partition_responses") or ()
        if flexible and len(partitions) < 0x7F:
            out.append(len(partitions) + 1)
        else:
            _put_count(out, len(partitions), flexible)
        for p in partitions:
            if not _PRODUCE_PARTITION_KEYS.issuperset(p):
                raise _Fallback
            get = p.get
            if version >= 5:  # the fixed fields in one pack
                out += _PRODUCE_PARTITION_V5.pack(p["index"], get("error_code", 0),
                                                  get("base_offset", 0),
                                                  get("log_append_time_ms", -1),
                                                  get("log_start_offset", -1))
            else:
                out += _I32_I16_I64.pack(p["index"], get("error_code", 0),
                                         get("base_offset", 0))
                out += _I64.pack(get("log_append_time_ms", -1))
            if version >= 8:
                record_errors = p.get("record_errors") or ()
                if flexible and len(record_errors) < 0x7F:
                    out.append(len(record_errors) + 1)
                else:
                    _put_count(out, len(record_errors), flexible)
                for e in record_errors:
                    if not isinstance(e, dict) or not frozenset(
                            ("batch_index", "batch_index_error_message")).issuperset(e):
                        raise _Fallback
                    out += _I32.pack(e["batch_index"])
                    _put_nullable_string(out, e.get("batch_index_error_message"), flexible)
                    if flexible:
                        out.append(0)
                message = p.get("error_message")
                if message is None and flexible:  # _put_nullable_string's, inline
                    out.append(0)
                else:
                    _put_nullable_string(out, message, flexible)
            if flexible:
                leader = _leader_tag(p.get("current_leader")) if version >= 10 else None
                if leader is None:
                    out.append(0)
                else:
                    _put_tags(out, [(0, leader)])
        if flexible:
            out.append(0)
    out += _I32.pack(values.get("throttle_time_ms", 0))
    if flexible:
        endpoints = _node_endpoints_tag(values.get("node_endpoints")) if version >= 10 else None
        if endpoints is None:
            out.append(0)
        else:
            _put_tags(out, [(0, endpoints)])


_FETCH_KEYS = frozenset(("throttle_time_ms", "error_code", "session_id", "responses"))
_FETCH_TOPIC_KEYS = frozenset(("topic", "partitions"))
_FETCH_PARTITION_KEYS = frozenset((
    "partition_index", "error_code", "high_watermark", "last_stable_offset", "log_start_offset",
    "diverging_epoch", "current_leader", "snapshot_id", "aborted_transactions",
    "preferred_read_replica", "records"))


def _pair_tag(value: Any, names: tuple[str, str], pack: struct.Struct) -> bytes | None:
    """A tagged struct of two numbers (defaults -1, -1); None when it holds its defaults."""
    if value is None:
        return None
    if not isinstance(value, dict) or not frozenset(names).issuperset(value):
        raise _Fallback
    first = value.get(names[0], -1)
    second = value.get(names[1], -1)
    if first == -1 and second == -1:
        return None
    return pack.pack(first, second) + b"\x00"


def _encode_fetch(out: bytearray, values: dict[str, Any], version: int,
                  regions: list[RegionAt], prefix_size: int) -> None:
    if not _FETCH_KEYS.issuperset(values):  # _check_keys, inline (here and below)
        raise _Fallback
    flexible = version >= _FETCH_FLEXIBLE
    out += _I32.pack(values.get("throttle_time_ms", 0))
    if version >= 7:
        out += _I16_I32.pack(values.get("error_code", 0), values.get("session_id", 0))
    responses = values.get("responses") or ()
    # _put_count, its common case inline (here and below): a one-byte compact count
    if flexible and len(responses) < 0x7F:
        out.append(len(responses) + 1)
    else:
        _put_count(out, len(responses), flexible)
    for topic in responses:
        if not _FETCH_TOPIC_KEYS.issuperset(topic):
            raise _Fallback
        if flexible:  # _put_string, its common case inline: a length of one byte
            raw = topic["topic"].encode()
            if len(raw) < 0x7F:
                out.append(len(raw) + 1)
                out += raw
            else:
                _put_uvarint(out, len(raw) + 1)
                out += raw
        else:
            _put_string(out, topic["topic"], flexible)
        partitions = topic.get("partitions") or ()
        if flexible and len(partitions) < 0x7F:
            out.append(len(partitions) + 1)
        else:
            _put_count(out, len(partitions), flexible)
        for p in partitions:
            if not _FETCH_PARTITION_KEYS.issuperset(p):
                raise _Fallback
            get = p.get
            if version >= 5:  # the fixed fields in one pack
                out += _FETCH_PARTITION_V5.pack(p["partition_index"], get("error_code", 0),
                                                get("high_watermark", 0),
                                                get("last_stable_offset", -1),
                                                get("log_start_offset", -1))
            else:
                out += _I32_I16_I64.pack(p["partition_index"], get("error_code", 0),
                                         get("high_watermark", 0))
                out += _I64.pack(get("last_stable_offset", -1))
            aborted = p.get("aborted_transactions", ())  # absent: empty; None: null
            if aborted is None:
                if flexible:
                    out.append(0)
                else:
                    out += b"\xff\xff\xff\xff"
            else:
                if flexible and len(aborted) < 0x7F:
                    out.append(len(aborted) + 1)  # _put_count's common case, inline
                else:
                    _put_count(out, len(aborted), flexible)
                for a in aborted:
                    if not isinstance(a, dict) or not frozenset(
                            ("producer_id", "first_offset")).issuperset(a):
                        raise _Fallback
                    out += _I64_I64.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        out.append(0)
            if version >= 11:
                out += _I32.pack(p.get("preferred_read_replica", -1))
            records = p.get("records", b"")  # absent: empty; None: null
            if records is None:
                if flexible:
                    out.append(0)
                else:
                    out += b"\xff\xff\xff\xff"
            elif type(records) is FileRegion:
                n = records.length
                if flexible and 0 <= n < 0x3FFF:  # _put_count's, inline: one or two bytes
                    n += 1
                    if n < 0x80:
                        out.append(n)
                    else:
                        out.append((n & 0x7F) | 0x80)
                        out.append(n >> 7)
                else:
                    _put_count(out, n, flexible)
                regions.append(RegionAt(len(out) - prefix_size, records.fd, records.position,
                                        records.length))
            else:
                n = records.nbytes if isinstance(records, memoryview) else len(records)
                _put_count(out, n, flexible)
                out += records
            if flexible:
                tags = []
                for tag, name, names, pack in _FETCH_PARTITION_TAGS:
                    value = get(name)
                    if value is None:  # the handlers leave them out: no call
                        continue
                    body = _pair_tag(value, names, pack)
                    if body is not None:
                        tags.append((tag, body))
                if tags:
                    _put_tags(out, tags)
                else:
                    out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)


_FETCH_PARTITION_TAGS = (
    (0, "diverging_epoch", ("epoch", "end_offset"), _I32_I64),
    (1, "current_leader", ("leader_id", "leader_epoch"), _I32_I32),
    (2, "snapshot_id", ("end_offset", "epoch"), _I64_I32),
)


def encode_hot_response(header: RequestHeader,
                        values: Any) -> tuple[bytes, list[RegionAt]] | None:
    """A Produce or Fetch response dict as (frame with size prefix, file regions), else None.

    None means this module does not write it (another API or version, an
    object instead of a dict, a key it does not know): use the kafka.protocol
    path. The frame's bytes leave a gap where each region's bytes go
    (``RegionAt.at`` counts from the start of the frame without them, as
    ``join_parts`` does); records given as bytes are copied in once.
    """
    if type(values) is not dict:
        return None
    api_key, version = header.api_key, header.api_version
    out = bytearray(_FRAME_PREFIX.pack(0, header.correlation_id))
    regions: list[RegionAt] = []
    try:
        if api_key == PRODUCE and version in PRODUCE_VERSIONS:
            if version >= _PRODUCE_FLEXIBLE:
                out.append(0)  # response header v1: no tagged fields
            _encode_produce(out, values, version)
        elif api_key == FETCH and version in FETCH_VERSIONS:
            if version >= _FETCH_FLEXIBLE:
                out.append(0)
            _encode_fetch(out, values, version, regions, 0)
        else:
            return None
    except (_Fallback, KeyError, TypeError, AttributeError, struct.error):
        return None
    total = len(out)
    for r in regions:  # not sum() over a generator: a call per response, regions or not
        total += r.length
    _I32.pack_into(out, 0, total - 4)
    return bytes(out), regions
