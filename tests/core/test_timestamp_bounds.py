"""message.timestamp.before/after.max.ms (KIP-937) and the deprecated
message.timestamp.difference.max.ms: the configs, and the leader's check of
every record's timestamp against the broker's clock on a client append."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from actors.apis.produce import _partition_response
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import (
    INFLATE_CHECK_MAX_BYTES,
    build_batch,
    check_batches,
    compute_crc,
    record_timestamps,
)
from actors.core.topic_config import (
    InvalidConfigError,
    log_config_for,
    validate_topic_configs,
)
from actors.runtime.config import Config
from wire.broker_messages import AppendDone, AppendDoneRow
from wire.errors import InvalidTimestampError
from wire.registry import build

NOW = 1_700_000_000_000
HOUR = 3_600_000
NO_LIMIT = 2**63 - 1
# The broker's values as a loaded Config holds them (log.retention.ms derived from
# log.retention.hours: the key has no default of its own).
BROKER = dict(Config().values)


def open_log(path: Path, **config: object) -> PartitionLog:
    log = PartitionLog.open(path / "t-0", "t", 0, LogConfig(**config), NOW)  # type: ignore[arg-type]
    log.assign_epoch_start_offset(0, 0)
    return log


def stamped(*timestamps: int) -> bytes:
    return build_batch([b"v%d" % i for i in range(len(timestamps))],
                       timestamps_ms=list(timestamps))


def gzipped(*timestamps: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 1 << 20)
    for i, ts in enumerate(timestamps):
        builder.append(i, ts, None, b"v%d" % i, [])
    return bytes(builder.build())


# ------------------------------------------------------------------ configs


def test_bounds_default_to_none_and_difference_fills_the_unset_side() -> None:
    config = log_config_for(BROKER, {})
    assert (config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms) == (NO_LIMIT, NO_LIMIT)
    config = log_config_for(BROKER, {"message.timestamp.difference.max.ms": "500",
                                     "message.timestamp.after.max.ms": "70"})
    assert (config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms) == (500, 70)
    broker = {**BROKER, "log.message.timestamp.before.max.ms": 9000,
              "log.message.timestamp.difference.max.ms": 20}
    config = log_config_for(broker, {})
    assert (config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms) == (9000, 20)
    # a topic override wins over the broker's key of the same side
    config = log_config_for(broker, {"message.timestamp.before.max.ms": "1"})
    assert config.message_timestamp_before_max_ms == 1
    # Kafka resolves the broker's default first: the topic's difference.max.ms does not
    # replace a bound the broker's difference.max.ms gave, unless the topic sets the
    # side itself to Long.MAX_VALUE
    broker = {**BROKER, "log.message.timestamp.difference.max.ms": 20}
    config = log_config_for(broker, {"message.timestamp.difference.max.ms": str(NO_LIMIT)})
    assert config.message_timestamp_before_max_ms == 20
    config = log_config_for(broker, {"message.timestamp.difference.max.ms": str(NO_LIMIT),
                                     "message.timestamp.before.max.ms": str(NO_LIMIT)})
    assert (config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms) == (NO_LIMIT, 20)
    config = log_config_for(BROKER, {"message.timestamp.difference.max.ms": "5"})
    assert (config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms) == (5, 5)


@pytest.mark.parametrize("key", ["message.timestamp.before.max.ms",
                                 "message.timestamp.after.max.ms",
                                 "message.timestamp.difference.max.ms"])
def test_bound_values_are_checked(key: str) -> None:
    assert validate_topic_configs({key: " 0 "}) == {key: "0"}
    assert validate_topic_configs({key: str(NO_LIMIT)}) == {key: str(NO_LIMIT)}
    with pytest.raises(InvalidConfigError, match=f"{key} = -1 is out of range"):
        validate_topic_configs({key: "-1"})
    with pytest.raises(InvalidConfigError, match=f"{key} must be an integer, got '1h'"):
        validate_topic_configs({key: "1h"})
    with pytest.raises(InvalidConfigError, match="out of range"):
        validate_topic_configs({key: str(2**63)})


def test_log_config_refuses_negative_bounds() -> None:
    with pytest.raises(ValueError, match="message_timestamp_before_max_ms"):
        LogConfig(message_timestamp_before_max_ms=-1)


# ------------------------------------------------------------------ appends


@pytest.mark.parametrize("build", [stamped, gzipped], ids=["plain", "gzip"])
def test_each_record_is_checked_and_nothing_is_written(tmp_path: Path,
                                                      build: Callable[..., bytes]) -> None:
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR,
                   message_timestamp_after_max_ms=60_000)
    ok = build(NOW - HOUR, NOW, NOW + 60_000)  # the bounds themselves are in
    assert log.append_as_leader(ok, 0, NOW).last_offset == 2
    # the middle record is older than the first: the header's first and max pass,
    # the record does not
    for bad, index in ((build(NOW, NOW - HOUR - 1, NOW), 1),
                       (build(NOW, NOW, NOW + 60_001), 2),
                       (build(NOW - 2 * HOUR), 0)):
        with pytest.raises(InvalidTimestampError) as caught:
            log.append_as_leader(bad, 0, NOW)
        assert [i for i, _m in caught.value.record_errors] == [index]
        assert f"[{NOW - HOUR}, {NOW + 60_000}]" in caught.value.record_errors[0][1]
        assert int(caught.value.code) == 32
        assert log.log_end_offset == 3
    # a record without a timestamp (-1) is not judged, as in Kafka
    assert log.append_as_leader(build(NOW, -1), 0, NOW).last_offset == 4


def test_every_refused_record_is_named(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_after_max_ms=0)
    with pytest.raises(InvalidTimestampError, match="2 of 4 records refused") as caught:
        log.append_as_leader(stamped(NOW, NOW + 1, 0, NOW + 5), 0, NOW)
    assert [i for i, _m in caught.value.record_errors] == [1, 3]
    assert log.log_end_offset == 0


def test_idempotent_and_transactional_batches_are_checked_before_their_sequence(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_before_max_ms=1000)
    first = build_batch([b"a"], timestamps_ms=[NOW], producer_id=7, producer_epoch=0,
                        base_sequence=0)
    log.append_as_leader(first, 0, NOW)
    late = build_batch([b"b"], timestamps_ms=[NOW - 5000], producer_id=7, producer_epoch=0,
                       base_sequence=1)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(late, 0, NOW)
    # the refused batch took no sequence: the same sequence in bounds goes in
    good = build_batch([b"b"], timestamps_ms=[NOW], producer_id=7, producer_epoch=0,
                       base_sequence=1)
    assert log.append_as_leader(good, 0, NOW).first_offset == 1


def test_log_append_time_followers_and_coordinators_are_not_checked(tmp_path: Path) -> None:
    old = stamped(0)
    appended = open_log(tmp_path / "a", message_timestamp_type="LogAppendTime",
                        message_timestamp_before_max_ms=1)
    assert appended.append_as_leader(old, 0, NOW).log_append_time_ms == NOW
    follower = open_log(tmp_path / "f", message_timestamp_before_max_ms=1)
    assert follower.append_as_follower(old, NOW).last_offset == 0
    coordinator = open_log(tmp_path / "c", message_timestamp_before_max_ms=1)
    assert coordinator.append_as_leader(old, 0, NOW, coordinator=True).last_offset == 0


def test_bounds_set_and_removed_by_a_config_change(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.append_as_leader(stamped(0), 0, NOW).last_offset == 0  # no bounds: any time
    log.update_config(LogConfig(message_timestamp_before_max_ms=HOUR))
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(stamped(0), 0, NOW)
    log.update_config(LogConfig())
    assert log.append_as_leader(stamped(0), 0, NOW).last_offset == 1


def test_a_batch_that_claims_compression_but_does_not_decompress_is_corrupt(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR)
    fake = build_batch([b"x"], timestamps_ms=[NOW], attributes=1)  # "gzip", plain records
    with pytest.raises(Exception, match="does not decompress") as caught:
        log.append_as_leader(fake, 0, NOW)
    assert int(caught.value.code) == 2  # type: ignore[attr-defined]  # CORRUPT_MESSAGE
    assert log.log_end_offset == 0


def test_record_timestamps_reads_plain_and_compressed_batches() -> None:
    stamps = [NOW, NOW - 10, NOW + 7]
    for raw in (stamped(*stamps), gzipped(*stamps)):
        (header,) = check_batches(raw)
        assert record_timestamps(raw, header) == stamps


def test_record_errors_cross_processes_into_the_produce_answer() -> None:
    """AppendDone between processes is msgpack: the pairs come back as lists, and the
    Produce answer still names each record."""
    sent = AppendDone(1, [AppendDoneRow("t", 0, 32, -1, -1, 0, "why", ((1, "a"), (3, "b"))),
                          AppendDoneRow("t", 1, 0, 5, -1, 0, None)])
    got = build(AppendDone, msgpack.unpackb(msgpack.packb(list(sent))))
    assert _partition_response(0, got.rows[0])["record_errors"] == [
        {"batch_index": 1, "batch_index_error_message": "a"},
        {"batch_index": 3, "batch_index_error_message": "b"}]
    assert "record_errors" not in _partition_response(1, got.rows[1])


def test_a_batch_that_inflates_past_the_bound_is_judged_by_its_header(
        tmp_path: Path) -> None:
    """A small gzip batch of one record whose value inflates to more than
    INFLATE_CHECK_MAX_BYTES (a "zip bomb") is not inflated whole on the shard: it is
    judged by its header's first and max timestamps, named by its first record."""
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR)

    def bomb(timestamp: int) -> bytes:
        builder = DefaultRecordBatchBuilder(2, 1, False, -1, -1, -1, 64 << 20)
        builder.append(0, timestamp, None, bytes(INFLATE_CHECK_MAX_BYTES + 1), [])
        return bytes(builder.build())

    old = bomb(NOW - 2 * HOUR)
    assert len(old) < 1 << 20
    with pytest.raises(InvalidTimestampError) as caught:
        log.append_as_leader(old, 0, NOW)
    assert [i for i, _m in caught.value.record_errors] == [0]  # one entry, its first record
    assert (header := check_batches(old)[0]) and record_timestamps(old, header) is None
    assert log.append_as_leader(bomb(NOW), 0, NOW).last_offset == 0  # in bounds: kept as is


def test_the_coordinators_logs_are_not_checked(tmp_path: Path) -> None:
    """The broker stamps its own offset and transaction records: a broker-wide bound
    never refuses them."""
    for topic in ("__consumer_offsets", "__transaction_state"):
        log = PartitionLog.open(tmp_path / f"{topic}-0", topic, 0,
                                LogConfig(message_timestamp_before_max_ms=1), NOW)
        log.assign_epoch_start_offset(0, 0)
        assert log.append_as_leader(stamped(0), 0, NOW).last_offset == 0


def client_stamped(*timestamps: int, max_timestamp: int) -> bytes:
    """A batch a client stamped LogAppendTime (attribute bit 3) whose header's max
    timestamp, the time Kafka reads each of its records with, is ``max_timestamp``."""
    raw = bytearray(build_batch([b"v%d" % i for i in range(len(timestamps))],
                                timestamps_ms=list(timestamps), attributes=0x08))
    struct.pack_into(">q", raw, 35, max_timestamp)  # base offset 8, ... base timestamp 27
    struct.pack_into(">I", raw, 17, compute_crc(raw, 0, len(raw)))
    return bytes(raw)


def test_a_client_log_append_time_batch_is_judged_at_its_max_timestamp(
        tmp_path: Path) -> None:
    """Kafka reads every record of such a batch at the header's max timestamp, so that
    is what the bounds judge, not the records' own deltas."""
    log = open_log(tmp_path, message_timestamp_before_max_ms=HOUR,
                   message_timestamp_after_max_ms=60_000)
    # the records' own times are two hours old, the max (what counts) is now: kept
    kept = client_stamped(NOW - 2 * HOUR, NOW - 2 * HOUR, max_timestamp=NOW)
    assert log.append_as_leader(kept, 0, NOW).max_timestamp_ms == NOW
    # the records' own times are in bounds, the max is a day ahead: refused, every record
    with pytest.raises(InvalidTimestampError) as caught:
        log.append_as_leader(client_stamped(NOW, NOW, max_timestamp=NOW + 24 * HOUR), 0, NOW)
    assert [i for i, _m in caught.value.record_errors] == [0, 1]
    assert log.log_end_offset == 2


@pytest.mark.parametrize("topic_type", ["CreateTime", "LogAppendTime"])
def test_a_client_log_append_time_batch_is_refused_where_kafka_refuses_it(
        tmp_path: Path, topic_type: str) -> None:
    """On a LogAppendTime topic always, on a CreateTime topic when its max timestamp is
    -1 (LogValidator.validateTimestamp): INVALID_TIMESTAMP naming every record, nothing
    written; without bounds too."""
    log = open_log(tmp_path, message_timestamp_type=topic_type)
    bad = client_stamped(NOW, NOW, max_timestamp=-1 if topic_type == "CreateTime" else NOW)
    with pytest.raises(InvalidTimestampError, match="must not set the timestamp type") as caught:
        log.append_as_leader(stamped(NOW) + bad, 0, NOW)
    assert [i for i, _m in caught.value.record_errors] == [1, 2]
    assert int(caught.value.code) == 32 and log.log_end_offset == 0
    # the broker's own batches (the coordinators') are not judged
    assert log.append_as_leader(bad, 0, NOW, coordinator=True).last_offset == 1
