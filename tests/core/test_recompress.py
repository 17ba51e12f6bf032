"""compression.type: the leader re-encodes a client's batch whose codec differs from the
topic's (Kafka's LogValidator), the bounded decompression of every codec, the config."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from actors.core import partition_log
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.recompress import COMPRESSION_TYPES, recompress
from actors.core.record_batch import (
    INFLATE_CHECK_MAX_BYTES,
    MAX_COMPRESSED_STREAMS,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    build_batch,
    check_batches,
    compress,
    decompress_bounded,
    read_records,
    record_timestamps,
)
from actors.core.topic_config import (
    InvalidConfigError,
    describe_topic_configs,
    log_config_for,
    validate_topic_configs,
)
from actors.runtime.config import Config, ConfigError
from wire.errors import CorruptMessageError, InvalidRecordError, MessageTooLargeError

NOW = 1_700_000_000_000
# The broker's values as a loaded Config holds them (log.retention.ms derived from
# log.retention.hours: the key has no default of its own).
BROKER = dict(Config().values)
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def produced(codec: int, count: int = 3, *, producer_id: int = -1, epoch: int = -1,
             sequence: int = -1, transactional: bool = False) -> bytes:
    """A batch as a producer builds it: keys, values, headers, spread timestamps."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, epoch,
                                        sequence, 1 << 20)
    for i in range(count):
        builder.append(i, NOW + (7 * i if i != 1 else -5), b"k%d" % i,
                       b"value-%d " % i * 50, [("h", b"x%d" % i)])
    return bytes(builder.build())


def records_of(raw: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[object]]]:
    batch = DefaultRecordBatch(bytearray(raw))
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def codec_of(raw: bytes) -> int:
    return DefaultRecordBatch(bytearray(raw)).compression_type


@pytest.mark.parametrize("source", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("target", [0, 1, 2, 3, 4])
def test_every_codec_to_every_other_keeps_the_records(source: int, target: int) -> None:
    raw = produced(source, producer_id=7, epoch=2, sequence=40, transactional=True)
    headers = check_batches(raw)
    out = recompress(raw, headers, target, INFLATE_CHECK_MAX_BYTES, False)
    if source == target:
        assert out is None  # nothing to do: the batch is kept as sent
        return
    assert out is not None
    (new,) = check_batches(out)  # whole, CRC right
    (old,) = headers
    assert codec_of(out) == target and new.compression == target
    assert records_of(out) == records_of(raw)
    assert (new.producer_id, new.producer_epoch, new.base_sequence, new.is_transactional,
            new.records_count, new.last_offset_delta, new.base_timestamp) == (
        7, 2, 40, True, old.records_count, old.last_offset_delta, old.base_timestamp)
    assert new.max_timestamp == NOW + 14


def with_header(raw: bytes, *, max_timestamp: int, log_append_time: bool = False) -> bytes:
    """``raw`` (one batch) with its header's max timestamp and timestamp-type bit set
    as a client might (not matching its records), its CRC made right."""
    batch = bytearray(raw)
    if log_append_time:
        batch[22] |= TIMESTAMP_TYPE_BIT
    batch[35:43] = max_timestamp.to_bytes(8, "big", signed=True)
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    check_batches(bytes(batch))
    return bytes(batch)


def test_the_rebuilt_batch_has_the_records_max_and_the_topics_timestamp_type() -> None:
    """Whatever the client's header claims as its max (past its records), the rebuilt
    batch has the records' max and the topic's timestamp type."""
    raw = with_header(produced(1), max_timestamp=NOW + 999_999)
    for topic_log_append_time in (False, True):
        out = recompress(raw, check_batches(raw), 3, INFLATE_CHECK_MAX_BYTES,
                         topic_log_append_time)
        assert out is not None
        (new,) = check_batches(out)
        assert new.max_timestamp == NOW + 14
        assert new.is_log_append_time == topic_log_append_time


def test_a_client_log_append_time_batch_rebuilt_gives_every_record_its_max() -> None:
    """On a CreateTime topic a batch the client stamped LogAppendTime is read at its max
    timestamp (the time the bounds judged), so, rebuilt as CreateTime (Kafka's
    buildRecordsAndAssignOffsets with each record's read time), every record has it."""
    raw = with_header(produced(1), max_timestamp=NOW + 500, log_append_time=True)
    out = recompress(raw, check_batches(raw), 0, INFLATE_CHECK_MAX_BYTES, False)
    assert out is not None
    (new,) = check_batches(out)
    assert not new.is_log_append_time
    assert (new.base_timestamp, new.max_timestamp) == (NOW + 500, NOW + 500)
    assert {r.timestamp_ms for r in read_records(out, new, 0)} == {NOW + 500}


def test_the_offset_deltas_are_renumbered_as_kafka_rebuilds_them() -> None:
    """A client's batch with offset deltas 0, 0, 2 (its last delta matching its count):
    re-encoded, its records have deltas 0, 1, 2 (buildRecordsAndAssignOffsets), not a
    repeated offset a consumer would see twice; the other record bytes stay."""
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)
    for delta, key in ((0, b"a"), (0, b"b" * 200), (2, b"c")):
        builder.append(delta, NOW + delta, key, b"v" * 300, [("h", b"x")])
    raw = bytes(builder.build())
    assert [r[0] for r in records_of(raw)] == [0, 0, 2]
    for target in (0, 4):
        out = recompress(raw, check_batches(raw), target, INFLATE_CHECK_MAX_BYTES, False)
        assert out is not None
        assert records_of(out) == [(i, t, k, v, h) for i, (_, t, k, v, h)
                                   in enumerate(records_of(raw))]
    right = produced(1)  # deltas 0, 1, 2 already: the same records re-encoded
    out = recompress(right, check_batches(right), 0, INFLATE_CHECK_MAX_BYTES, False)
    assert out is not None and records_of(out) == records_of(right)


def test_a_batch_of_the_target_codec_is_kept_among_others() -> None:
    gz, lz = produced(1), produced(3)
    out = recompress(gz + lz, check_batches(gz + lz), 3, INFLATE_CHECK_MAX_BYTES, False)
    assert out is not None
    first, second = check_batches(out)
    assert out[second.position:] == lz  # untouched
    assert first.compression == 3 and records_of(out[:first.size]) == records_of(gz)


def test_a_batch_whose_records_do_not_match_its_count_is_refused() -> None:
    raw = produced(0, count=2)
    (two,) = check_batches(raw)
    # a header that counts three over two records' bytes: the third runs past the end,
    # INVALID_RECORD as Kafka's premature EOF (not CORRUPT_MESSAGE: the codec decoded it)
    with pytest.raises(InvalidRecordError, match="does not hold the 3 records it counts: "
                                                 "its record 2 is cut short"):
        recompress(raw, [two._replace(records_count=3)], 1, 1 << 20, False)
    # a header that counts one over two records' bytes: bytes left after it
    with pytest.raises(InvalidRecordError, match="after its 1 records"):
        recompress(raw, [two._replace(records_count=1)], 1, 1 << 20, False)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_bomb_is_refused_before_it_is_inflated_whole(codec: int) -> None:
    """A small batch whose one value inflates past the limit: every codec stops at the
    limit (not the gigabytes), and the recompression refuses it as too large."""
    limit = 1 << 20
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 64 << 20)
    builder.append(0, NOW, None, bytes(4 * limit), [])
    raw = bytes(builder.build())
    assert len(raw) < limit
    (header,) = check_batches(raw)
    assert decompress_bounded(codec, memoryview(raw)[61:], limit, 0) is None
    assert decompress_bounded(codec, memoryview(raw)[61:], 8 * limit, 0) is not None
    with pytest.raises(MessageTooLargeError, match="decompresses to more than 1048576"):
        recompress(raw, [header], 0 if codec != 1 else 2, limit, False)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_does_not_decompress(codec: int) -> None:
    with pytest.raises(CorruptMessageError, match="does not decompress"):
        decompress_bounded(codec, b"\x01\x02\x03 not a compressed stream at all", 1 << 20, 9)
    with pytest.raises(CorruptMessageError, match="codec 6"):
        decompress_bounded(6, b"x", 10, 9)


@pytest.mark.parametrize("codec", [1, 3])
def test_a_few_concatenated_streams_decode_and_many_are_refused(codec: int) -> None:
    """gzip members and lz4 frames concatenated: up to MAX_COMPRESSED_STREAMS decode
    (as Java's readers take them), more are refused as corrupt at the first one past
    it. 1 MB of 11-byte lz4 frames (20-byte gzip members) took over a second when
    each one was decoded from a copy of the rest; the refusal reads 17 of them."""
    parts = [b"part-%d;" % i for i in range(MAX_COMPRESSED_STREAMS)]
    few = b"".join(compress(codec, part) for part in parts)
    assert decompress_bounded(codec, few, 1 << 20, 0) == b"".join(parts)
    one_empty = compress(codec, b"")
    many = one_empty * ((1 << 20) // len(one_empty))
    with pytest.raises(CorruptMessageError, match=f"more than {MAX_COMPRESSED_STREAMS} "
                                                  f"(gzip members|lz4 frames)"):
        decompress_bounded(codec, many, INFLATE_CHECK_MAX_BYTES, 0)


def test_a_raw_snappy_block_claiming_a_huge_length_is_not_inflated() -> None:
    """A raw (not xerial) snappy block's first varint is its uncompressed length: one
    claiming 4 GiB is judged too large from it, nothing allocated or decoded; a varint
    longer than 5 bytes is corrupt."""
    claim = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1
    assert decompress_bounded(2, claim + b"\x00" * 20, 1 << 20, 0) is None
    with pytest.raises(CorruptMessageError, match="not a varint of at most 5 bytes"):
        decompress_bounded(2, b"\xff" * 6 + b"x", 1 << 20, 0)
    # within the limit but not what it claims: the library's refusal, as corrupt
    with pytest.raises(CorruptMessageError, match="does not decompress"):
        decompress_bounded(2, b"\x40" + b"\x00" * 5, 1 << 20, 0)


def test_only_the_codecs_own_errors_are_corrupt_messages() -> None:
    """A bad stream is CORRUPT_MESSAGE; a bug of the caller (not a buffer) is not turned
    into one (it was: a catch-all took every exception for a bad stream)."""
    with pytest.raises(TypeError):
        decompress_bounded(1, 12345, 1 << 20, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compress_round_trips_and_matches_the_clients_framing(codec: int) -> None:
    data = bytes(range(256)) * 1000
    packed = compress(codec, data)
    assert decompress_bounded(codec, packed, len(data), 0) == data
    if codec == 2:
        assert packed.startswith(b"\x82SNAPPY\x00")  # xerial framing, as Kafka's clients
    if codec == 3:
        assert packed.startswith(b"\x04\x22\x4d\x18")  # an LZ4 frame


def test_record_timestamps_reads_every_codec() -> None:
    for codec in (2, 3, 4):
        raw = produced(codec)
        assert record_timestamps(raw, check_batches(raw)[0]) == [NOW, NOW - 5, NOW + 14]


# ------------------------------------------------------------------------- the log


def open_log(path: Path, compression_type: str, **config: object) -> PartitionLog:
    log = PartitionLog.open(path / "t-0", "t", 0,
                            LogConfig(compression_type=compression_type, **config),  # type: ignore[arg-type]
                            NOW)
    log.assign_epoch_start_offset(0, 0)
    return log


def stored(log: PartitionLog) -> bytes:
    return bytes(log.read(0, 10 << 20).records)


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_the_leader_stores_the_topics_codec(tmp_path: Path, target: str) -> None:
    log = open_log(tmp_path, target)
    sources = [1, 2, 3, 4, 0]
    for source in sources:
        raw = produced(source)
        log.append_as_leader(raw, 0, NOW)
    data = stored(log)
    batches = check_batches(data)
    assert [b.compression for b in batches] == [COMPRESSION_TYPES[target]] * len(sources)
    assert [b.base_offset for b in batches] == [0, 3, 6, 9, 12]
    for i, b in enumerate(batches):
        assert records_of(data[b.position:b.position + b.size]) == [
            (3 * i + o, t, k, v, h) for o, t, k, v, h in records_of(produced(sources[i]))]


def test_an_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(tmp_path: Path) -> None:
    log = open_log(tmp_path, "zstd")
    raw = produced(1, producer_id=5, epoch=0, sequence=0)
    first = log.append_as_leader(raw, 0, NOW)
    again = log.append_as_leader(raw, 0, NOW)
    assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 3
    nxt = log.append_as_leader(produced(1, producer_id=5, epoch=0, sequence=3), 0, NOW)
    assert nxt.first_offset == 3
    (one, two) = check_batches(stored(log))
    assert (one.base_sequence, two.base_sequence, two.compression) == (0, 3, 4)


def test_a_log_append_time_topic_re_encodes_within_the_caps(tmp_path: Path) -> None:
    """A LogAppendTime topic reads no record timestamps on the way in, so the
    re-encoding is where a batch is inflated: the inflation bound and the cap on
    concatenated streams hold there too (nothing written), and a batch it takes is
    stamped with the broker's time."""
    log = open_log(tmp_path, "zstd", message_timestamp_type="LogAppendTime")
    bomb = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 64 << 20)
    bomb.append(0, NOW, None, bytes(2 * INFLATE_CHECK_MAX_BYTES), [])
    with pytest.raises(MessageTooLargeError, match="decompresses to more than"):
        log.append_as_leader(bytes(bomb.build()), 0, NOW + 1)
    raw = produced(3)
    members = compress(3, b"") * (MAX_COMPRESSED_STREAMS + 1)
    many = bytearray(raw[:61] + members)
    many[8:12] = (len(many) - 12).to_bytes(4, "big")
    many[17:21] = crc32c.crc32c(bytes(many[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptMessageError, match="lz4 frames"):
        log.append_as_leader(bytes(many), 0, NOW + 1)
    assert log.log_end_offset == 0
    log.append_as_leader(raw, 0, NOW + 1)
    (stored_header,) = check_batches(stored(log))
    assert (stored_header.compression, stored_header.is_log_append_time,
            stored_header.max_timestamp) == (4, True, NOW + 1)
    assert records_of(stored(log))[0][1] == NOW + 1


def test_a_batch_too_large_once_re_encoded_is_refused(tmp_path: Path) -> None:
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 22)
    builder.append(0, NOW, None, bytes(200_000), [])
    raw = bytes(builder.build())
    log = open_log(tmp_path, "uncompressed", max_message_bytes=100_000)
    with pytest.raises(MessageTooLargeError, match=r"once re-encoded for compression\.type "
                                                   r"uncompressed"):
        log.append_as_leader(raw, 0, NOW)
    assert log.log_end_offset == 0


def test_a_batch_already_of_the_topics_codec_takes_the_fast_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a zstd topic a zstd batch is appended by the single-batch fast path (the
    general path's check_batches never runs for it); a gzip one takes the general path
    and is re-encoded. Each is stored whole either way."""
    general: list[int] = []
    real = partition_log.check_batches

    def counted(records: bytes | bytearray | memoryview) -> list[BatchHeader]:
        general.append(len(records))
        return real(records)

    monkeypatch.setattr(partition_log, "check_batches", counted)
    log = open_log(tmp_path, "zstd")
    zstd, gzip = produced(4), produced(1)
    log.append_as_leader(zstd, 0, NOW)
    assert general == []
    log.append_as_leader(gzip, 0, NOW)
    assert general[0] == len(gzip)
    first, second = check_batches(stored(log))
    assert (first.compression, second.compression) == (4, 4)
    assert records_of(stored(log)[:first.size]) == records_of(zstd)


def test_producer_keeps_every_batch_as_sent(tmp_path: Path) -> None:
    log = open_log(tmp_path, "producer")
    raws = [produced(c) for c in (0, 1, 2, 3, 4)]
    for raw in raws:
        log.append_as_leader(raw, 0, NOW)
    data = stored(log)
    assert [b.compression for b in check_batches(data)] == [0, 1, 2, 3, 4]


def test_the_coordinators_logs_are_never_re_encoded(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", "__consumer_offsets", 0,
                            LogConfig(compression_type="gzip"), NOW)
    log.assign_epoch_start_offset(0, 0)
    log.append_as_leader(build_batch([b"v"], keys=[b"k"]), 0, NOW)
    assert check_batches(bytes(log.read(0, 1 << 20).records))[0].compression == 0


# ---------------------------------------------------------------------- the config


def test_the_config_takes_kafkas_values_only() -> None:
    for value in COMPRESSION_TYPES:
        assert validate_topic_configs({"compression.type": value}) == {
            "compression.type": value}
    with pytest.raises(InvalidConfigError, match=r"compression\.type must be one of producer, "
                                                 r"uncompressed, gzip, snappy, lz4, zstd, got "
                                                 r"'brotli'"):
        validate_topic_configs({"compression.type": "brotli"})
    with pytest.raises(ValueError, match="compression_type"):
        LogConfig(compression_type="none")


def test_the_topic_value_wins_over_the_brokers_and_both_are_synonyms() -> None:
    broker = dict(BROKER, **{"compression.type": "lz4"})
    assert log_config_for(BROKER, {}).compression_type == "producer"
    assert log_config_for(broker, {}).compression_type == "lz4"
    assert log_config_for(broker, {"compression.type": "gzip"}).compression_type == "gzip"
    [described] = [c for c in describe_topic_configs(
        broker, {"compression.type"}, {"compression.type": "gzip"}, BROKER)
        if c.name == "compression.type"]
    assert described.value == "gzip"
    assert [(n, v, int(s)) for n, v, s in described.synonyms] == [
        ("compression.type", "gzip", 1), ("compression.type", "lz4", 4),
        ("compression.type", "producer", 5)]


def test_the_broker_key_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('"compression.type" = "gzip"\n')
    assert Config.load(path)["compression.type"] == "gzip"
    path.write_text('"compression.type" = "deflate"\n')
    with pytest.raises(ConfigError, match=r"compression\.type"):
        Config.load(path)
