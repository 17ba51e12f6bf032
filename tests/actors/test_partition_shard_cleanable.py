"""CleanableLogs in a PartitionShard, through its real sender and the wire: the report of
a compacted log carries its aborted transactions as the cleaner reads them (the rows
decode to AbortedTxn), and only those at or above the cleaner's first dirty offset, so a
scan's answer stays small however many aborts the log has kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch
from actors.core.txn_index import AbortedTxn
from actors.log_cleaner import cleanable_from_row
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.admin_messages import CleanableLogs, CleanableLogsDone, CleanerCheckpointRow
from wire.broker_messages import Append, AppendDone, AppendRow, GetStats, TopicEntry
from wire.transaction_messages import TxnMarkerRow, WriteTxnMarkers, WriteTxnMarkersDone


class Collector(Actor):
    """Stands in for the LogCleaner and a producer: keeps the answers."""

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(AppendDone, WriteTxnMarkersDone, CleanableLogsDone)
    def on_done(self, msg: Any) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.answers)


def _txn_batch(seq: int, key: bytes) -> bytes:
    return build_batch([b"aborted"], keys=[key], producer_id=7, producer_epoch=0,
                       base_sequence=seq, attributes=TRANSACTIONAL_BIT)


def test_a_cleanable_report_carries_the_aborts_from_the_first_dirty_offset(
        node: Node, tmp_path: Path) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    topics = {"c": TopicEntry(1, {"cleanup.policy": "compact", "segment.bytes": "150"})}
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)
    collector = node.spawn(Collector, "collector")
    seen = 0

    def send(msg: Any) -> Any:
        nonlocal seen
        node.tell(shard, msg, sender="collector")
        wait_for(lambda: len(node.ask(collector, GetStats())) > seen)
        seen += 1
        return cast(Collector, node.actors[collector.name]).answers[-1]  # decoded, as sent

    # two aborted transactions of producer 7, each followed by plain records (new segments)
    for round_ in range(2):
        send(Append(1, 1, 30_000, [AppendRow("c", 0, _txn_batch(round_, b"a%d" % round_))]))
        send(WriteTxnMarkers(1, [TxnMarkerRow("c", 0, 7, 0, False, 0)]))
        for i in range(3):
            done = send(Append(1, 1, 30_000, [AppendRow("c", 0, build_batch(
                [b"x" * 60], keys=[b"k%d" % i]))]))
            assert done.rows[0].error_code == 0, done
    first, second = AbortedTxn(7, 0, 1, 2), AbortedTxn(7, 5, 6, 7)

    report = send(CleanableLogs(2, []))
    assert isinstance(report, CleanableLogsDone) and report.req_id == 2
    [row] = report.rows
    log = cleanable_from_row(row)
    assert log.aborted == (first, second)
    assert all(type(entry) is AbortedTxn for entry in log.aborted)
    assert log.active_base_offset > second.last_offset

    # the cleaner cleaned below 5: the first abort lies wholly below, the second is due
    bases = [s.base_offset for s in log.segments]
    assert 5 in bases
    [row] = send(CleanableLogs(3, [CleanerCheckpointRow("c", 0, 5)])).rows
    assert cleanable_from_row(row).aborted == (second,)
    # another log's checkpoint changes nothing; past both markers, nothing is sent
    [row] = send(CleanableLogs(4, [CleanerCheckpointRow("d", 0, 100)])).rows
    assert cleanable_from_row(row).aborted == (first, second)
    [row] = send(CleanableLogs(5, [CleanerCheckpointRow("c", 0, log.active_base_offset)])).rows
    assert cleanable_from_row(row).aborted == ()


def test_a_report_over_the_frame_limit_leaves_out_the_log_of_the_most_aborts(
        tmp_path: Path) -> None:
    """A log whose dirty part holds more aborted transactions than a frame carries (before
    its first cleaning) would make the shard's whole report too large, and no log of the
    shard would be cleaned. The report is sent again with that log as having nothing to
    clean (kept in the report: the cleaner keeps its checkpoint); the others as they are."""
    compact = {"cleanup.policy": "compact", "segment.bytes": "4096"}
    log_dir = LogDir.open(tmp_path)
    config = LogConfig(segment_bytes=4096, cleanup_policy=("compact",))
    logs = []
    for topic, aborts in (("big", 1000), ("small", 1)):
        log = log_dir.open_partition(topic, 0, config, 0)
        for i in range(aborts):
            log.append_as_leader(build_batch([b"a"], keys=[b"k"], producer_id=7,
                                             producer_epoch=0, base_sequence=i,
                                             attributes=TRANSACTIONAL_BIT), 0, 0)
            log.append_control(7, 0, False, 0, 0, 0)
        log.append_as_leader(build_batch([b"x"], keys=[b"k"]), 0, 0)
        log.update_high_watermark(log.log_end_offset)
        log.roll(0)
        logs.append(log)
    log_dir.checkpoint(logs)
    for log in logs:
        log.close()
    node = Node("t", max_frame_bytes=4096).start()
    try:
        topo = Topology(node.name, 1, 1, 1, 1, 1)
        log_dir = LogDir.open(tmp_path)
        topics = {"big": TopicEntry(1, compact), "small": TopicEntry(1, compact)}
        node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
                   clock=node.clock)
        shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo,
                           config=Config(), log_dir=log_dir, topics=topics, broker_id=1,
                           clock=node.clock)
        node.spawn(Collector, "collector")
        node.tell(shard, CleanableLogs(1, []), sender="collector")
        wait_for(lambda: bool(cast(Collector, node.actors["collector"]).answers))
        [report] = cast(Collector, node.actors["collector"]).answers
        rows = {row.topic: cleanable_from_row(row) for row in report.rows}
        assert rows["big"].segments == () and rows["big"].aborted == ()
        assert rows["small"].segments and [a[:3] for a in rows["small"].aborted] == [(7, 0, 1)]
        assert node.metrics.get("messages_refused_oversized") >= 1
    finally:
        node.shutdown(timeout=5)
