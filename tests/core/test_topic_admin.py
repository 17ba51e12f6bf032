"""The per-topic rules of the admin APIs, DescribeConfigs' sources, the log's side of
DeleteRecords and config changes, and OffsetDelete in the group core."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from actors.apis.configs import describe_broker_configs
from actors.core.group_state import OffsetDeleteResponse
from actors.core.group_types import DeleteGroupsResponse
from actors.core.offsets_codec import OffsetCommitKey, decode_record
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.core.topic_admin import (
    AlterConfigOp,
    ConfigChange,
    altered_topic_configs,
    check_partition_increase,
)
from actors.core.topic_config import (
    TOPIC_CONFIG_TYPES,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    DescribedConfig,
    broker_synonyms,
    broker_value_text,
    describe_topic_configs,
    log_config_for,
    validate_topic_configs,
)
from actors.runtime.config import DEFAULTS, Config, ConfigError
from tests.core.test_group_state import Shell, stable_group
from wire.errors import ErrorCode, KafkaError, OffsetOutOfRangeError

E = ErrorCode
SET, DELETE, APPEND, SUBTRACT = (int(op) for op in AlterConfigOp)


def code_of(call: object, *args: object) -> ErrorCode:
    with pytest.raises(KafkaError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.code


# ------------------------------------------------------------ partitions


def test_partition_counts_only_grow() -> None:
    assert check_partition_increase("t", 3, 5, None) == 2
    assert check_partition_increase("t", 3, 5, [[1], [1]]) == 2
    assert code_of(check_partition_increase, "t", 3, 3, None) is E.INVALID_PARTITIONS
    assert code_of(check_partition_increase, "t", 3, 2, None) is E.INVALID_PARTITIONS
    assert code_of(check_partition_increase, "t", 3, 5, [[1]]) is E.INVALID_REPLICA_ASSIGNMENT


# ---------------------------------------------------------------- configs


def default_of(key: str) -> str:
    return {"cleanup.policy": "delete"}.get(key, "0")


def test_incremental_changes_key_by_key() -> None:
    current = {"retention.ms": "1000", "flush.ms": "5"}
    out = altered_topic_configs(current, [
        ConfigChange("segment.bytes", SET, "4096"),
        ConfigChange("flush.ms", DELETE, None),
        ConfigChange("cleanup.policy", APPEND, "compact"),
    ], True, default_of)
    assert out == {"retention.ms": "1000", "segment.bytes": "4096",
                   "cleanup.policy": "delete,compact"}
    out = altered_topic_configs(out, [ConfigChange("cleanup.policy", SUBTRACT, "delete")],
                                True, default_of)
    assert out["cleanup.policy"] == "compact"
    # appending what is there already changes nothing; deleting what is not set neither
    assert altered_topic_configs(out, [ConfigChange("cleanup.policy", APPEND, "compact"),
                                       ConfigChange("max.message.bytes", DELETE, None)],
                                 True, default_of) == out


def test_alter_configs_replaces_all_overrides() -> None:
    out = altered_topic_configs({"retention.ms": "1000"},
                                [ConfigChange("segment.ms", SET, "60000")], False, default_of)
    assert out == {"segment.ms": "60000"}


@pytest.mark.parametrize(("changes", "incremental", "code"), [
    ([ConfigChange("retention.ms", SET, "1"), ConfigChange("retention.ms", SET, "2")], True,
     E.INVALID_REQUEST),
    ([ConfigChange("retention.ms", 9, "1")], True, E.INVALID_REQUEST),
    ([ConfigChange("retention.ms", SET, None)], True, E.INVALID_REQUEST),
    ([ConfigChange("retention.ms", DELETE, None)], False, E.INVALID_REQUEST),
    ([ConfigChange("no.such", SET, "1")], True, E.INVALID_CONFIG),
    ([ConfigChange("segment.bytes", APPEND, "1")], True, E.INVALID_CONFIG),
    ([ConfigChange("segment.bytes", SET, "13")], True, E.INVALID_CONFIG),
    ([ConfigChange("segment.bytes", SET, str(2**31))], True, E.INVALID_CONFIG),
    ([ConfigChange("retention.ms", SET, "-2")], True, E.INVALID_CONFIG),
    ([ConfigChange("min.cleanable.dirty.ratio", SET, "1.5")], True, E.INVALID_CONFIG),
    ([ConfigChange("delete.retention.ms", SET, "-1")], True, E.INVALID_CONFIG),
    ([ConfigChange("cleanup.policy", SET, "shred")], True, E.INVALID_CONFIG),
    ([ConfigChange("message.timestamp.type", SET, "Whenever")], False, E.INVALID_CONFIG),
])
def test_bad_changes_get_kafkas_codes(changes: list[ConfigChange], incremental: bool,
                                      code: ErrorCode) -> None:
    assert code_of(altered_topic_configs, {}, changes, incremental, default_of) is code


def test_every_topic_config_has_a_type_and_values_keep_their_text() -> None:
    assert set(TOPIC_CONFIG_TYPES) == set(TOPIC_CONFIGS)
    assert validate_topic_configs({"cleanup.policy": " compact , delete ",
                                   "retention.ms": " 25"}) == {
        "cleanup.policy": "compact,delete", "retention.ms": "25"}


def test_described_sources_follow_precedence() -> None:
    broker = Config({"log.retention.ms": 5000})
    described = {c.name: c for c in describe_topic_configs(
        broker.values, broker.set_keys, {"segment.bytes": "2048"}, DEFAULTS)}
    seg = described["segment.bytes"]
    assert (seg.value, seg.source) == ("2048", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert seg.synonyms == (("segment.bytes", "2048", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                            ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG))
    ret = described["retention.ms"]
    assert (ret.value, ret.source) == ("5000", ConfigSource.STATIC_BROKER_CONFIG)
    # log.retention.ms has no default of its own (Kafka's null): the default synonym is
    # log.retention.hours's, not what the file set
    assert ret.synonyms == (("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
                            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    # log.roll.ms and log.flush.interval.ms have no default in Kafka either (null; its
    # log.roll.hours and log.flush.scheduler.interval.ms give them, and its drop of the
    # synonyms before the key's own name leaves none): the value, no synonyms
    for key, broker_key in (("segment.ms", "log.roll.ms"), ("flush.ms", "log.flush.interval.ms")):
        entry = described[key]
        assert (entry.value, entry.source, entry.synonyms) == (
            broker_value_text(broker[broker_key]), ConfigSource.DEFAULT_CONFIG, ()), key
    roll = Config({"log.roll.ms": 60_000})
    rolled = {c.name: c for c in describe_topic_configs(
        roll.values, roll.set_keys, {}, DEFAULTS)}["segment.ms"]
    assert (rolled.value, rolled.source, rolled.synonyms) == (
        "60000", ConfigSource.STATIC_BROKER_CONFIG,
        (("log.roll.ms", "60000", ConfigSource.STATIC_BROKER_CONFIG),
         ("log.roll.hours", "168", ConfigSource.DEFAULT_CONFIG)))
    assert described["cleanup.policy"].config_type is ConfigType.LIST
    assert Config().set_keys == set()


def test_retention_keys_take_kafkas_precedence_and_synonyms() -> None:
    """log.retention.ms over .minutes over .hours (KafkaConfig.logRetentionTimeMillis);
    a topic's retention.ms lists the broker chain only from log.retention.ms on, as
    Kafka's ConfigHelper drops the synonyms before the first of the key's own name."""
    def retention(values: dict[str, Any]) -> DescribedConfig:
        broker = Config(values)
        return {c.name: c for c in describe_topic_configs(
            broker.values, broker.set_keys, {}, DEFAULTS)}["retention.ms"]

    S, D = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
    assert Config().values["log.retention.ms"] == 168 * 3_600_000
    assert Config({"log.retention.hours": 2}).values["log.retention.ms"] == 7_200_000
    assert Config({"log.retention.hours": 2, "log.retention.minutes": 3}).values[
        "log.retention.ms"] == 180_000
    assert Config({"log.retention.minutes": 3, "log.retention.ms": 5}).values[
        "log.retention.ms"] == 5
    assert Config({"log.retention.hours": -2}).values["log.retention.ms"] == -1
    # the command line after the file: a later minutes still gives way to the file's ms
    assert Config({"log.retention.ms": 5}).update({"log.retention.minutes": 3}).values[
        "log.retention.ms"] == 5
    assert Config({"log.retention.minutes": 3}).update({"log.retention.hours": 1}).values[
        "log.retention.ms"] == 180_000
    with pytest.raises(ConfigError, match=r"log\.retention\.hours"):
        Config({"log.retention.hours": 2**31})
    # 0 ms from whichever key gives the value is refused, as Kafka refuses to start on it
    # (logRetentionTimeMillis must be -1 or at least 1); a 0 that gives way is not
    for key in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        with pytest.raises(ConfigError, match=rf"^f: {key} = 0 would delete every segment"):
            Config({key: 0}, source="f")
    assert Config({"log.retention.hours": 0, "log.retention.minutes": 1}).values[
        "log.retention.ms"] == 60_000
    assert Config({"log.retention.minutes": 0, "log.retention.ms": -1}).values[
        "log.retention.ms"] == -1
    # log.retention.ms has no default (Kafka's null): Config() derives it from the hours
    assert DEFAULTS["log.retention.ms"] is None
    assert Config().values["log.retention.ms"] == Config({}).values["log.retention.ms"] == (
        168 * 3_600_000)

    assert retention({}) == ("retention.ms", "604800000", D, ConfigType.LONG, ())
    # minutes and hours set, ms not: the value they give, no synonyms (Kafka's drop)
    assert retention({"log.retention.minutes": 3, "log.retention.hours": 2}) == (
        "retention.ms", "180000", D, ConfigType.LONG, ())
    assert retention({"log.retention.ms": 5, "log.retention.minutes": 3,
                      "log.retention.hours": 2}).synonyms == (
        ("log.retention.ms", "5", S), ("log.retention.minutes", "3", S),
        ("log.retention.hours", "2", S), ("log.retention.hours", "168", D))


def test_roll_keys_take_kafkas_precedence_and_synonyms() -> None:
    """log.roll.ms over log.roll.hours (KafkaConfig.logRollTimeMillis), synonyms in
    DynamicBrokerConfig.brokerConfigSynonyms' order; a log.retention.ms below -1 is no
    limit, as logRetentionTimeMillis takes any negative value, shown as given."""
    S, D = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
    assert DEFAULTS["log.roll.ms"] is None and DEFAULTS["log.roll.hours"] == 168
    assert Config().values["log.roll.ms"] == 168 * 3_600_000
    assert Config({"log.roll.hours": 2}).values["log.roll.ms"] == 7_200_000
    assert Config({"log.roll.hours": 2, "log.roll.ms": 5}).values["log.roll.ms"] == 5
    assert Config({"log.roll.ms": 5}).update({"log.roll.hours": 2}).values["log.roll.ms"] == 5
    for bad in ({"log.roll.hours": 0}, {"log.roll.ms": 0}):  # atLeast(1); require >= 1
        with pytest.raises(ConfigError, match="out of range"):
            Config(bad)
    both = Config({"log.roll.hours": 2, "log.roll.ms": 5})
    assert broker_synonyms("log.roll.ms", both.given, both.set_keys, DEFAULTS) == [
        ("log.roll.ms", "5", S), ("log.roll.hours", "2", S), ("log.roll.hours", "168", D)]
    assert broker_synonyms("log.roll.hours", both.given, both.set_keys, DEFAULTS) == [
        ("log.roll.hours", "2", S), ("log.roll.hours", "168", D)]

    negative = Config({"log.retention.ms": -5})
    assert negative.values["log.retention.ms"] == -1 and negative.given["log.retention.ms"] == -5
    described = {c.name: c for c in describe_topic_configs(
        negative.values, negative.set_keys, {}, DEFAULTS, given=negative.given)}
    assert (described["retention.ms"].value, described["retention.ms"].synonyms[0]) == (
        "-1", ("log.retention.ms", "-5", S))


def test_flush_interval_falls_back_to_the_scheduler_interval() -> None:
    """KafkaConfig.logFlushIntervalMs: log.flush.interval.ms, else
    log.flush.scheduler.interval.ms (default Long.MAX_VALUE); synonyms in that order."""
    S, D = ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG
    assert DEFAULTS["log.flush.interval.ms"] is None
    assert Config().values["log.flush.interval.ms"] == 2**63 - 1
    assert Config({"log.flush.scheduler.interval.ms": 200}).values[
        "log.flush.interval.ms"] == 200
    both = Config({"log.flush.scheduler.interval.ms": 200, "log.flush.interval.ms": 5})
    assert both.values["log.flush.interval.ms"] == 5
    assert broker_synonyms("log.flush.interval.ms", both.given, both.set_keys, DEFAULTS) == [
        ("log.flush.interval.ms", "5", S), ("log.flush.scheduler.interval.ms", "200", S),
        ("log.flush.scheduler.interval.ms", str(2**63 - 1), D)]
    assert broker_synonyms("log.flush.scheduler.interval.ms", both.given, both.set_keys,
                           DEFAULTS) == [("log.flush.scheduler.interval.ms", "200", S),
                                         ("log.flush.scheduler.interval.ms", str(2**63 - 1), D)]


def test_an_internal_key_is_described_only_when_set() -> None:
    """log.initial.task.delay.ms is internal in Kafka (defineInternal): its DescribeConfigs
    names it only when it is set (ConfigHelper.allConfigs)."""
    def names(config: Config) -> set[str]:
        return {c.name for c in describe_broker_configs(config)}

    key = "log.initial.task.delay.ms"
    assert key not in names(Config()) and "log.flush.scheduler.interval.ms" in names(Config())
    [described] = [c for c in describe_broker_configs(Config({key: 0})) if c.name == key]
    assert (described.value, described.source) == ("0", ConfigSource.STATIC_BROKER_CONFIG)


def test_subtracting_the_last_cleanup_policy_leaves_an_empty_list() -> None:
    """Kafka's ValidList takes an empty cleanup.policy: neither retention nor compaction."""
    out = altered_topic_configs({"cleanup.policy": "compact"},
                                [ConfigChange("cleanup.policy", SUBTRACT, "compact")],
                                True, default_of)
    assert out == {"cleanup.policy": ""}
    assert altered_topic_configs({}, [ConfigChange("cleanup.policy", SUBTRACT, "delete")],
                                 True, default_of) == {"cleanup.policy": ""}
    assert validate_topic_configs({"cleanup.policy": " "}) == {"cleanup.policy": ""}
    cfg = log_config_for(Config(), out)
    assert cfg.cleanup_policy == () and not cfg.compact and not cfg.delete


def test_log_config_carries_the_cleaner_settings() -> None:
    cfg = log_config_for(Config(), {"cleanup.policy": "compact", "delete.retention.ms": "7",
                                    "min.compaction.lag.ms": "8",
                                    "min.cleanable.dirty.ratio": "0.1"})
    assert cfg.compact and not cfg.delete
    assert (cfg.delete_retention_ms, cfg.min_compaction_lag_ms,
            cfg.min_cleanable_dirty_ratio) == (7, 8, 0.1)
    default = log_config_for(Config({"log.cleaner.min.cleanable.ratio": 0.25}), {})
    assert default.delete and not default.compact and default.min_cleanable_dirty_ratio == 0.25


# --------------------------------------------------- the log: DeleteRecords, configs


def _log(tmp_path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig(**config), 0)  # type: ignore[arg-type]


def _fill(log: PartitionLog, count: int) -> None:
    for i in range(count):
        log.append_as_leader(build_batch([b"x" * 100], keys=[b"k%d" % i], timestamps_ms=[i]),
                             0, i)
    log.update_high_watermark(log.log_end_offset)


@pytest.mark.parametrize(("broker", "kept"), [
    ({"log.retention.ms": 2_000, "log.retention.minutes": 1}, [1]),  # ms wins: 2 s
    ({"log.retention.minutes": 1, "log.retention.hours": 1}, [0, 1]),  # minutes: 60 s
])
def test_a_log_deletes_by_the_retention_key_that_wins(
        tmp_path: Path, broker: dict[str, int], kept: list[int]) -> None:
    """The log's retention.ms is the broker key Kafka's precedence picks: at 10 s, a
    segment stamped 0 is past log.retention.ms = 2000 but within the minute."""
    config = log_config_for(Config(broker), {"segment.bytes": "100"})  # a batch each
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    for stamp in (0, 9_500):
        log.append_as_leader(build_batch([b"x"], timestamps_ms=[stamp]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(now_ms=10_000)
    assert log.segment_base_offsets == kept


def test_log_start_moves_up_to_the_high_watermark_only(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=400)
    _fill(log, 10)
    assert len(log.segments) > 3
    assert log.increment_log_start_offset(5)
    assert not log.increment_log_start_offset(3)  # never back
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert log.read(5, 1000).records
    deleted = log.delete_old_segments(10**12, retention=False)  # only what is below 5
    assert deleted > 0 and log.segments[0].base_offset <= 5 < log.segments[0].next_offset
    log.update_high_watermark(8)
    with pytest.raises(OffsetOutOfRangeError):
        log.increment_log_start_offset(log.log_end_offset + 1)
    log.close(100)


def test_a_compact_only_log_is_not_trimmed_by_retention(tmp_path: Path) -> None:
    log = _log(tmp_path, segment_bytes=400, retention_ms=1, cleanup_policy=("compact",))
    _fill(log, 10)
    count = len(log.segments)
    assert log.delete_old_segments(10**12) == 0 and len(log.segments) == count
    log.update_config(LogConfig(segment_bytes=400, retention_ms=1))  # back to delete
    assert log.delete_old_segments(10**12) == count  # all, after a roll
    assert log.log_start_offset == log.log_end_offset == 10
    log.close(100)


# ------------------------------------------------------------- OffsetDelete


def _subscription(*topics: str) -> bytes:
    """A consumer protocol Subscription v1 (topics, no user data, no owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1) + struct.pack(">i", 0)


def _offset_delete(shell: Shell, group: str, parts: list[tuple[str, int]]) -> object:
    r = shell.rid()
    shell.run(shell.core.offset_delete(r, group, parts))
    return shell.answers[r]


def test_offset_delete_follows_kafkas_rules() -> None:
    shell = Shell()
    shell.commit({("old", 0): 5, ("old", 1): 6, ("now", 0): 7}, group="g")
    # a consumer group with a live member subscribed to "now"
    shell.join(group="g", client="c", require_known=False,
               protocols=[("range", _subscription("now"))])
    g = shell.group("g")
    [member] = list(g.members)
    shell.sync(member, g.generation_id, {member: b""})
    answer = _offset_delete(shell, "g", [("now", 0), ("old", 0), ("never", 3)])
    assert answer == OffsetDeleteResponse(E.NONE, (
        ("now", 0, E.GROUP_SUBSCRIBED_TO_TOPIC), ("old", 0, E.NONE), ("never", 3, E.NONE)))
    assert shell.fetch(group="g") == {("old", 1): 6, ("now", 0): 7}
    assert decode_record(shell.log[-1].key, shell.log[-1].value) == (
        OffsetCommitKey("g", "old", 0), None)  # a tombstone
    assert _offset_delete(shell, "nobody", [("old", 1)]) == OffsetDeleteResponse(
        E.GROUP_ID_NOT_FOUND)

    # a group with members that is not a consumer group: NON_EMPTY_GROUP
    other = Shell()
    stable_group(other, 1, group="connect")
    other.group("connect").protocol_type = "connect"
    assert _offset_delete(other, "connect", [("x", 0)]) == OffsetDeleteResponse(
        E.NON_EMPTY_GROUP)


def test_delete_groups_answers_per_group() -> None:
    shell = Shell()
    stable_group(shell, 1)
    r = shell.rid()
    shell.run(shell.core.delete_groups(r, ["g"], shell.now))
    assert shell.answers[r] == DeleteGroupsResponse((("g", E.NON_EMPTY_GROUP),))
