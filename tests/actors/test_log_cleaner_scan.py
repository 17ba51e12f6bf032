"""The LogCleaner's scan when a shard never answers (stuck, or its answer refused on the
way, as an oversized frame is): past ``scan_timeout_ms`` it cleans the logs the other
shards reported and asks again in a later scan, instead of waiting for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from actors.core.checkpoint import RECOVERY_POINT_OFFSET_CHECKPOINT, write_offset_checkpoint
from actors.core.log_cleaner import describe_cleanable
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.log_cleaner import LogCleaner, cleanable_row
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.admin_messages import (
    CleanableLogs,
    CleanableLogsDone,
    SwapCleanedSegments,
    SwapCleanedSegmentsDone,
)
from wire.broker_messages import GetStats

COMPACT = LogConfig(segment_bytes=400, index_interval_bytes=100, cleanup_policy=("compact",),
                    min_cleanable_dirty_ratio=0.0)


class Shard(Actor):
    """Stands in for a partition shard: answers CleanableLogs with ``rows`` unless mute,
    refuses every swap (the log stays as it is), and keeps what it was sent."""

    def __init__(self, node: Any, name: str, *, rows: list[Any], mute: bool,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.rows = rows
        self.mute = mute
        self.got: list[Any] = []

    @handles(CleanableLogs)
    def on_scan(self, msg: CleanableLogs) -> None:
        self.got.append(msg)
        if not self.mute:
            self.reply(CleanableLogsDone(msg.req_id, self.rows))

    @handles(SwapCleanedSegments)
    def on_swap(self, msg: SwapCleanedSegments) -> None:
        self.got.append(msg)
        self.reply(SwapCleanedSegmentsDone(msg.req_id, msg.topic, msg.partition, False,
                                           "a test shard swaps nothing"))


def test_a_shard_that_never_answers_does_not_stop_the_cleaning_of_the_others(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0)
    for i in range(40):
        log.append_as_leader(build_batch([b"v%d" % i], keys=[b"k%d" % (i % 4)],
                                         timestamps_ms=[i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    write_offset_checkpoint(tmp_path / RECOVERY_POINT_OFFSET_CHECKPOINT,
                            {("t", 0): log.log_end_offset})
    topo = Topology(node.name, 1, 1, 2, 1, 1)
    answering = node.spawn(Shard, topo.shard(0).name,
                           rows=[cleanable_row(describe_cleanable(log))], mute=False)
    mute = node.spawn(Shard, topo.shard(1).name, rows=[], mute=True)
    cleaner = node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo,
                         config=Config({"log.cleaner.backoff.ms": 1000}), log_dir=tmp_path,
                         clock=node.clock)

    def got(shard: Any, kind: type) -> int:
        return sum(isinstance(m, kind) for m in cast(Shard, node.actors[shard.name]).got)

    node.advance_clock(1_000)
    assert got(answering, CleanableLogs) == got(mute, CleanableLogs) == 1
    node.advance_clock(LogCleaner.scan_timeout_ms - 1)
    assert got(answering, SwapCleanedSegments) == 0  # still waiting for shard-1
    node.advance_clock(1)
    # past the timeout: the answering shard's log was cleaned (its swap asked for)
    wait_for(lambda: got(answering, SwapCleanedSegments) == 1, "the swap of t-0")
    wait_for(lambda: node.ask(cleaner, GetStats())["refused"] == 1, "the refused swap")
    stats: dict[str, Any] = node.ask(cleaner, GetStats())
    assert stats["scan_timeouts"] == 1
    # the silent shard's answer to that scan, come late, starts nothing
    first_scan = cast(Shard, node.actors[mute.name]).got[0].req_id
    node.tell(cleaner, CleanableLogsDone(first_scan, [cleanable_row(describe_cleanable(log))]),
              sender=mute.name)
    node.quiesce()
    assert node.ask(cleaner, GetStats())["cleaning"] is None
    assert got(answering, SwapCleanedSegments) == 1
    # and the next scan asks both shards again
    node.advance_clock(1_000)
    assert got(answering, CleanableLogs) == got(mute, CleanableLogs) == 2
    log.close()
