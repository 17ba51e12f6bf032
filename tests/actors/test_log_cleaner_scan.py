"""The LogCleaner's scan when a shard never answers (stuck, or its answer refused on the
way, as an oversized frame is): past ``scan_timeout_ms`` it cleans the logs the other
shards reported and asks again in a later scan, instead of waiting for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from actors.core.checkpoint import RECOVERY_POINT_OFFSET_CHECKPOINT, write_offset_checkpoint
from actors.core.log_cleaner import (
    describe_cleanable,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.log_cleaner import LogCleaner, cleanable_row
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.core.log_cleaner_harness import clean_once
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


class SilentSwapper(Shard):
    """Reports its log with segments the first time only (later: nothing to clean, so the
    cleaner keeps the log's checkpoint), unless mute, and never answers a swap."""

    @handles(CleanableLogs)
    def on_scan(self, msg: CleanableLogs) -> None:
        self.got.append(msg)
        if self.mute:
            return
        rows = self.rows
        self.rows = [row._replace(segments=[], aborted_txns=[]) for row in rows]
        self.reply(CleanableLogsDone(msg.req_id, rows))

    @handles(SwapCleanedSegments)
    def on_swap(self, msg: SwapCleanedSegments) -> None:
        self.got.append(msg)


def _compacted_log(directory: Path) -> PartitionLog:
    log = PartitionLog.open(directory, directory.name.rsplit("-", 1)[0], 0, COMPACT, 0)
    for i in range(40):
        log.append_as_leader(build_batch([b"v%d" % i], keys=[b"k%d" % (i % 4)],
                                         timestamps_ms=[i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    return log


def test_a_swap_never_answered_does_not_stop_the_cleaning_of_other_logs(
        manual_node: Node, tmp_path: Path) -> None:
    """The shard of log a takes the swap and never answers: past ``swap_timeout_ms`` the
    cleaner goes on and cleans log d of the other shard, leaving a's staging directory to
    its shard; a's answer, come late, still moves a's checkpoint. Before, the cleaner
    waited for that answer for good: no log of the node was cleaned again."""
    node = manual_node
    a, b = _compacted_log(tmp_path / "a-0"), _compacted_log(tmp_path / "d-0")
    checkpoints: dict[tuple[str, int], int] = {}
    clean_once(b, checkpoints, b.log_end_offset, 0)  # d is less dirty: a is chosen first
    for i in range(8):
        b.append_as_leader(build_batch([b"w%d" % i], keys=[b"k%d" % (i % 4)]), 0, 0)
    b.update_high_watermark(b.log_end_offset)
    b.roll(0)
    b.flush(0)
    write_cleaner_checkpoint(tmp_path, checkpoints)
    write_offset_checkpoint(tmp_path / RECOVERY_POINT_OFFSET_CHECKPOINT,
                            {("a", 0): a.log_end_offset, ("d", 0): b.log_end_offset})
    topo = Topology(node.name, 1, 1, 2, 1, 1)
    assert {topo.shard_for("a", 0).name, topo.shard_for("d", 0).name} == {"shard-0",
                                                                         "shard-1"}
    silent = node.spawn(SilentSwapper, topo.shard_for("a", 0).name,
                        rows=[cleanable_row(describe_cleanable(a))], mute=False)
    other = node.spawn(Shard, topo.shard_for("d", 0).name,
                       rows=[cleanable_row(describe_cleanable(b))], mute=False)
    cleaner = node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo,
                         config=Config({"log.cleaner.backoff.ms": 1000}), log_dir=tmp_path,
                         clock=node.clock)

    def swaps(shard: Any) -> list[SwapCleanedSegments]:
        return [m for m in cast(Shard, node.actors[shard.name]).got
                if isinstance(m, SwapCleanedSegments)]

    node.advance_clock(1_000)  # the scan
    wait_for(lambda: len(swaps(silent)) == 1, "the swap of a-0")
    [swap] = swaps(silent)
    assert (swap.topic, swaps(other)) == ("a", [])
    node.advance_clock(LogCleaner.swap_timeout_ms - 1)
    assert swaps(other) == [] and len(swaps(silent)) == 1  # still waiting for a's answer
    node.advance_clock(1)  # the wait is over: the next scan, a backoff later, cleans d
    node.advance_clock(1_000)
    wait_for(lambda: len(swaps(other)) == 1, "the swap of d-0")
    wait_for(lambda: node.ask(cleaner, GetStats())["refused"] == 1, "d's (refused) swap")
    assert node.ask(cleaner, GetStats())["swap_timeouts"] == 1
    assert (tmp_path / "a-0" / swap.staging).is_dir()  # left for the shard to swap in
    assert "a-0" not in node.ask(cleaner, GetStats())["checkpoints"]
    # a's shard answers at last: the swap was done, so a's checkpoint moves
    node.tell(cleaner, SwapCleanedSegmentsDone(swap.req_id, "a", 0, True, ""),
              sender=silent.name)
    node.quiesce()
    assert node.ask(cleaner, GetStats())["checkpoints"]["a-0"] == a.active_segment_base_offset
    a.close()
    b.close()


def test_a_late_swap_answer_during_a_scan_keeps_every_checkpoint(
        manual_node: Node, tmp_path: Path) -> None:
    """a's swap times out; the next scan is asked, and a's shard answers the swap (done)
    before either shard reports. Both checkpoints stay, in memory and on disk: a's, just
    moved, and d's, whose shard has not reported yet. Before, the late answer pruned the
    checkpoints on the scan's reports so far (none): both went, and the file with them."""
    node = manual_node
    a, b = _compacted_log(tmp_path / "a-0"), _compacted_log(tmp_path / "d-0")
    checkpoints: dict[tuple[str, int], int] = {}
    clean_once(b, checkpoints, b.log_end_offset, 0)  # d is clean: a is chosen
    write_cleaner_checkpoint(tmp_path, checkpoints)
    write_offset_checkpoint(tmp_path / RECOVERY_POINT_OFFSET_CHECKPOINT,
                            {("a", 0): a.log_end_offset, ("d", 0): b.log_end_offset})
    topo = Topology(node.name, 1, 1, 2, 1, 1)
    a_row, d_row = cleanable_row(describe_cleanable(a)), cleanable_row(describe_cleanable(b))
    silent = node.spawn(SilentSwapper, topo.shard_for("a", 0).name, rows=[a_row], mute=False)
    other = node.spawn(Shard, topo.shard_for("d", 0).name, rows=[d_row], mute=False)
    cleaner = node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo,
                         config=Config({"log.cleaner.backoff.ms": 1000}), log_dir=tmp_path,
                         clock=node.clock)

    def got(shard: Any, kind: type) -> list[Any]:
        return [m for m in cast(Shard, node.actors[shard.name]).got if isinstance(m, kind)]

    node.advance_clock(1_000)  # the first scan: a is cleaned, its swap never answered
    wait_for(lambda: len(got(silent, SwapCleanedSegments)) == 1, "the swap of a-0")
    [swap] = got(silent, SwapCleanedSegments)
    node.advance_clock(LogCleaner.swap_timeout_ms)
    assert node.ask(cleaner, GetStats())["swap_timeouts"] == 1
    # the next scan: both shards asked, neither answers yet
    for shard in (silent, other):
        cast(Shard, node.actors[shard.name]).mute = True
        cast(Shard, node.actors[shard.name]).got.clear()
    node.advance_clock(1_000)
    [scan] = {m.req_id for shard in (silent, other) for m in got(shard, CleanableLogs)}
    expected = {"a-0": a.active_segment_base_offset, "d-0": checkpoints[("d", 0)]}
    # a's shard answers the swap (done), then reports, after d's shard
    node.tell(cleaner, SwapCleanedSegmentsDone(swap.req_id, "a", 0, True, ""),
              sender=silent.name)
    node.quiesce()
    assert node.ask(cleaner, GetStats())["checkpoints"] == expected
    assert read_cleaner_checkpoint(tmp_path) == {("a", 0): expected["a-0"],
                                                 ("d", 0): expected["d-0"]}
    node.tell(cleaner, CleanableLogsDone(scan, [d_row]), sender=other.name)
    node.tell(cleaner, CleanableLogsDone(scan, [a_row._replace(segments=[], aborted_txns=[])]),
              sender=silent.name)
    node.quiesce()
    assert node.ask(cleaner, GetStats())["checkpoints"] == expected
    assert read_cleaner_checkpoint(tmp_path) == {("a", 0): expected["a-0"],
                                                 ("d", 0): expected["d-0"]}
    a.close()
    b.close()


def test_a_log_gone_loses_its_checkpoint_once_the_scan_is_complete(
        manual_node: Node, tmp_path: Path) -> None:
    """A log gone (its directory too) is in no report: once every shard has reported, its
    checkpoint goes, from the file too. A log on disk that no shard reports (not opened
    yet: after a restart, a shard opens a log when told to lead or follow it) keeps its
    checkpoint: forgotten, its cleaned part would count as dirty again."""
    node = manual_node
    (tmp_path / "here-0").mkdir()
    write_cleaner_checkpoint(tmp_path, {("gone", 0): 5, ("here", 0): 7})
    topo = Topology(node.name, 1, 1, 2, 1, 1)
    for i in range(2):
        node.spawn(Shard, topo.shard(i).name, rows=[], mute=False)
    cleaner = node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo,
                         config=Config({"log.cleaner.backoff.ms": 1000}), log_dir=tmp_path,
                         clock=node.clock)
    assert node.ask(cleaner, GetStats())["checkpoints"] == {"gone-0": 5, "here-0": 7}
    node.advance_clock(1_000)
    wait_for(lambda: node.ask(cleaner, GetStats())["checkpoints"] == {"here-0": 7},
             "gone-0 forgotten")
    assert read_cleaner_checkpoint(tmp_path) == {("here", 0): 7}
