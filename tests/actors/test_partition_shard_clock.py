"""A PartitionShard on a ManualClock: its wall-clock work moves only with that clock.

Retention compares record timestamps with the shard's wall reading, so a
jump of the injected wall clock (the monotonic reading left where it is)
is what expires a segment; the real time the test takes plays no part.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.core.log_dir import LogDir
from actors.core.partition_log import PartitionLog
from actors.core.record_batch import build_batch
from actors.core.topic_config import log_config_for
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.actors.test_partition_shard_restart import (
    _alters,
    _cluster,
    _crash,
    _crash_on_flush,
    _got,
)
from wire.broker_messages import GetStats, TopicEntry

WALL_MS = 1_700_000_000_000
TOPIC_CONFIGS = {"retention.ms": "60000"}


@pytest.fixture
def manual_clock() -> ManualClock:
    """The suite's manual clock, its wall reading where the records were written."""
    return ManualClock(start_ms=0, wall_start_ms=WALL_MS)


def a_log_of_two_records(data_dir: Path, config: Config) -> LogDir:
    """One partition holding two records stamped WALL_MS, all committed."""
    log_dir = LogDir.open(data_dir)
    log = PartitionLog.open(log_dir.partition_path("t", 0), "t", 0,
                            log_config_for(config, TOPIC_CONFIGS), WALL_MS)
    log.append_as_leader(build_batch([b"a", b"b"], timestamps_ms=[WALL_MS, WALL_MS]), 0,
                         WALL_MS)
    log.close(WALL_MS)
    log_dir.high_watermarks[("t", 0)] = 2
    log_dir.recovery_points[("t", 0)] = 2
    return log_dir


def test_retention_runs_on_the_injected_wall_clock(manual_node: Node, manual_clock: ManualClock,
                                                   tmp_path: Path) -> None:
    node, clock = manual_node, manual_clock
    config = Config()
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = a_log_of_two_records(tmp_path, config)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1, clock=clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=log_dir, topics={"t": TopicEntry(1, TOPIC_CONFIGS)}, broker_id=1,
                       clock=clock)

    def offsets() -> list[int]:
        stats: dict[str, Any] = node.ask(shard, GetStats())
        return list(stats["partitions"]["t-0"])

    assert offsets() == [0, 2, 2]  # [log start, high watermark, log end]
    node.advance_clock(30_000)  # half of retention.ms, and under the checkpoint interval
    assert offsets() == [0, 2, 2]
    # Ten minutes later on the wall only: past retention.ms and the check interval.
    clock.set_wall_ms(WALL_MS + 600_000)
    node.run_turns()  # the shard's housekeeping turn on the new time
    node.quiesce()
    assert offsets() == [2, 2, 2]
    assert clock.now_ms() == 30_000  # the monotonic reading never moved


def test_a_wall_clock_stepped_back_does_not_put_off_the_producer_expiry_check(
        manual_node: Node, manual_clock: ManualClock, tmp_path: Path) -> None:
    """Producer 7 wrote at WALL_MS; producer.id.expiration.ms and the check's interval are
    ten minutes. The shard starts 5 min later (next check at +15 min); the wall steps back
    100 s. At +13:20 (past the expiration, a check interval after the step) the producer
    is gone: the step did not put the check off to +15 min."""
    node, clock = manual_node, manual_clock
    config = Config({"producer.id.expiration.ms": 600_000,
                     "producer.id.expiration.check.interval.ms": 600_000})
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    log = PartitionLog.open(log_dir.partition_path("t", 0), "t", 0, log_config_for(config, {}),
                            WALL_MS)
    log.append_as_leader(build_batch([b"a"], timestamps_ms=[WALL_MS], producer_id=7,
                                     producer_epoch=0, base_sequence=0), 0, WALL_MS)
    log.close(WALL_MS)
    log_dir.high_watermarks[("t", 0)] = 1
    log_dir.recovery_points[("t", 0)] = 1
    clock.set_wall_ms(WALL_MS + 300_000)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1, clock=clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=log_dir, topics={"t": TopicEntry(1, {})}, broker_id=1,
                       clock=clock)
    node.ask(shard, GetStats())

    def producers() -> set[int]:
        node.run_turns()
        node.quiesce()
        node.ask(shard, GetStats())
        actor: Any = node.actors[shard.name]
        return set(actor.partitions[("t", 0)].log.producer_state.producers)

    assert producers() == {7}
    clock.set_wall_ms(WALL_MS + 200_000)  # 100 s back
    assert producers() == {7}
    clock.set_wall_ms(WALL_MS + 800_000)
    assert producers() == set()


def test_a_wall_clock_stepped_back_does_not_put_off_the_isr_check(
        manual_node: Node, tmp_path: Path) -> None:
    """c-0's follower 2 never fetches (caught up as of the lead, at WALL_MS);
    replica.lag.time.max.ms is 30 s, the ISR check every 15 s. At +20 s a check leaves the
    ISR as it is (next at +35 s); the wall steps back 4 s. At +31 s (past the lag, a check
    interval after the step) the leader proposes to leave 2 out: the step did not put the
    check off to +35 s."""
    node = manual_node
    c = _cluster(node, tmp_path, [1, 2])
    lag_ms = int(Config()["replica.lag.time.max.ms"])
    assert lag_ms == 30_000
    clock = node.clock
    assert isinstance(clock, ManualClock)
    clock.set_wall_ms(WALL_MS + 20_000)
    node.advance_clock(0)
    assert _got(node, c.controller, "AlterPartition") == []
    clock.set_wall_ms(WALL_MS + 16_000)  # 4 s back
    node.advance_clock(0)
    clock.set_wall_ms(WALL_MS + 31_000)
    node.advance_clock(0)
    [alter] = _alters(c, 1)
    assert [tuple(i) for i in alter[3]] == [("c", 0, 3, [1], 4)]


def _shard_of_flush_ms_1s(node: Node, clock: ManualClock, tmp_path: Path,
                          interval_ms: int | None) -> tuple[Any, Any]:
    """A shard (its address, its actor) holding topic t of one partition with flush.ms
    1 s, its log.flush.scheduler.interval.ms ``interval_ms`` (None: the default)."""
    config = Config({} if interval_ms is None else
                    {"log.flush.scheduler.interval.ms": interval_ms})
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1, clock=clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=log_dir, topics={"t": TopicEntry(1, {"flush.ms": "1000"})},
                       broker_id=1, clock=clock)
    node.ask(shard, GetStats())
    return shard, node.actors[shard.name]


@pytest.mark.parametrize("interval_ms", [None, 0, 5_000])
def test_the_flush_check_runs_after_the_initial_delay_then_every_interval(
        manual_node: Node, manual_clock: ManualClock, tmp_path: Path,
        interval_ms: int | None) -> None:
    """flush.ms = 1 s; a record appended at the start (written on the log itself: no
    append-time check). As Kafka's kafka-log-flusher, the first check is
    log.initial.task.delay.ms (30 s) after the start: unflushed at +20 s (and after a 3 s
    step back), flushed at +30 s. Another record then: log.flush.scheduler.interval.ms
    5 s flushes it at +36 s, a step back of 3 s at +34 s not putting the check off; not set
    (Long.MAX_VALUE) or 0, the first check was the only one: unflushed ten minutes on, and
    a step back, even behind the start, starts none (each check is counted on the log)."""
    node, clock = manual_node, manual_clock
    shard, actor = _shard_of_flush_ms_1s(node, clock, tmp_path, interval_ms)
    assert actor.config["log.initial.task.delay.ms"] == 30_000
    log = actor.partitions[("t", 0)].log
    log.append_as_leader(build_batch([b"a"], timestamps_ms=[WALL_MS]), 0, WALL_MS)
    checks: list[int] = []  # each timed check's call, on this log
    real_maybe_flush = log.maybe_flush

    def counted(now_ms: int) -> bool:
        checks.append(now_ms - WALL_MS)
        return bool(real_maybe_flush(now_ms))
    log.maybe_flush = counted

    def recovery_point_at(after_ms: int) -> int:
        clock.set_wall_ms(WALL_MS + after_ms)
        node.run_turns()
        node.quiesce()
        node.ask(shard, GetStats())
        return int(log.recovery_point)

    assert recovery_point_at(20_000) == 0
    assert recovery_point_at(17_000) == 0  # 3 s back
    assert checks == []
    assert recovery_point_at(30_000) == 1 and checks == [30_000]
    log.append_as_leader(build_batch([b"b"], timestamps_ms=[WALL_MS]), 0, WALL_MS + 30_000)
    assert recovery_point_at(34_000) == 1
    assert recovery_point_at(31_000) == 1  # 3 s back
    if interval_ms == 5_000:
        assert recovery_point_at(36_000) == 2 and checks == [30_000, 36_000]
    else:
        assert recovery_point_at(600_000) == 1
        assert recovery_point_at(-5_000) == 1  # behind the start
        assert checks == [30_000]


@pytest.mark.parametrize("interval_ms", [None, 5_000])
def test_a_crash_restart_in_place_keeps_the_flush_checks_schedule(
        manual_node: Node, manual_clock: ManualClock, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, interval_ms: int | None) -> None:
    """flush.ms = 1 s; the first timed check at +30 s, then the shard crashes at +32 s
    and is restarted in place. Kafka's flusher is scheduled once: the restart arms no
    new initial delay. With log.flush.scheduler.interval.ms 5 s the next checks are at
    +35 s and +40 s (on the schedule from the start, not at +62 s); with the default
    (Long.MAX_VALUE) no check comes again, none at +62 s either. The restart's close
    flushed the log, so the checks are counted on the reopened log, with a record
    appended after the restart that only a check flushes."""
    armed = _crash_on_flush(monkeypatch)
    node, clock = manual_node, manual_clock
    shard, actor = _shard_of_flush_ms_1s(node, clock, tmp_path, interval_ms)
    checks: list[int] = []  # each timed check's call, on the log the shard holds

    def counted_log() -> PartitionLog:
        log: PartitionLog = actor.partitions[("t", 0)].log
        real_maybe_flush = log.maybe_flush

        def counted(now_ms: int) -> bool:
            checks.append(now_ms - WALL_MS)
            return bool(real_maybe_flush(now_ms))
        log.maybe_flush = counted  # type: ignore[method-assign]
        return log

    def at(after_ms: int) -> None:
        clock.set_wall_ms(WALL_MS + after_ms)
        node.run_turns()
        node.quiesce()
        node.ask(shard, GetStats())

    log = counted_log()
    log.append_as_leader(build_batch([b"a"], timestamps_ms=[WALL_MS]), 0, WALL_MS)
    at(30_000)
    assert checks == [30_000] and log.recovery_point == 1
    at(32_000)
    _crash(node, shard, armed)  # restarted in place at +32 s
    node.ask(shard, GetStats())  # once its setup reopened the log
    reopened = counted_log()
    assert reopened is not log and reopened.recovery_point == 1
    reopened.append_as_leader(build_batch([b"b"], timestamps_ms=[WALL_MS]), 0,
                              WALL_MS + 32_000)
    checks.clear()
    if interval_ms == 5_000:
        at(34_000)
        assert checks == []
        at(35_000)
        assert checks == [35_000] and reopened.recovery_point == 2
        at(40_000)
        assert checks == [35_000, 40_000]
    else:
        at(62_000)
        at(600_000)
        assert checks == [] and reopened.recovery_point == 1
