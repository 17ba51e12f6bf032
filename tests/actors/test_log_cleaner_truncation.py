"""A follower's truncation below the log cleaner's checkpoint lowers the checkpoint to
the log's new active segment (Kafka's maybeTruncateCheckpoint): the records the follower
then writes again there are dirty. A real PartitionShard (the follower of leader 2),
LogManager and LogCleaner; the leader is this test, sending FollowerApply as the
fetcher does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.core.log_cleaner import read_cleaner_checkpoint
from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.log_cleaner import LogCleaner
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats, TopicEntry
from wire.cluster_messages import BecameLeaderOrFollower, BecomeLeaderOrFollower, ReplicaStateRow
from wire.replication_messages import (
    FollowerApplied,
    FollowerApply,
    FollowerApplyRow,
    FollowerStateRow,
)

CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "300", "min.compaction.lag.ms": "0",
           "min.cleanable.dirty.ratio": "0.01"}


class Leader(Actor):
    """Stands in for the controller and the fetcher: keeps the shard's answers."""

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(BecameLeaderOrFollower, FollowerApplied)
    def on_answer(self, msg: Any) -> None:
        self.answers.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.answers)


def test_a_truncation_below_the_cleaner_checkpoint_lowers_it(node: Node, tmp_path: Path) -> None:
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    config = Config({"log.flush.offset.checkpoint.interval.ms": 100,
                     "log.cleaner.backoff.ms": 100})
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=log_dir, topics={"t": TopicEntry(1, CONFIGS)}, broker_id=1,
                       clock=node.clock)
    cleaner = node.spawn(LogCleaner, topo.log_cleaner.name, topology=topo, config=config,
                         log_dir=tmp_path, clock=node.clock)
    leader = node.spawn(Leader, "leader")
    req_ids = iter(range(1, 10_000))

    def answer(msg: Any) -> Any:
        """The shard's answer, as the wire carries it (fields in order)."""
        node.tell(shard, msg, sender=leader.name)
        return wait_for(lambda: [a for a in node.ask(leader, GetStats())
                                 if a[0] == msg.req_id], f"the answer to {msg}")[0]

    def apply(row: FollowerApplyRow) -> FollowerStateRow:
        [state] = answer(FollowerApply(next(req_ids), [row]))[1]
        return FollowerStateRow(*state)

    def checkpoint() -> int:
        stats: dict[str, Any] = node.ask(cleaner, GetStats())
        return int(stats["checkpoints"].get("t-0", -1))

    answer(BecomeLeaderOrFollower(next(req_ids), [ReplicaStateRow(
        "t", 0, 2, 1, [1, 2], [1, 2], 1, False, CONFIGS)]))
    for offset in range(60):  # the leader's records, each applied with its high watermark
        batch = build_batch([b"v%d" % offset], keys=[b"k%d" % (offset % 4)],
                            base_offset=offset, partition_leader_epoch=1)
        state = apply(FollowerApplyRow("t", 0, 1, batch, offset, 0, offset + 1, -1, -1, -1))
        assert state.error_code == 0, state
    wait_for(lambda: checkpoint() > 20, "a cleaning of most of the log")
    cleaned = checkpoint()
    # an unclean election: the new leader's log ends at 10; the follower truncates there
    state = apply(FollowerApplyRow("t", 0, 1, b"", -1, 0, 10, -1, -1, 60))
    assert state.truncated and state.log_end_offset == 10
    # the log's new active segment, the last on disk (nothing is appended meanwhile)
    active = max(int(p.stem) for p in (tmp_path / "t-0").glob("*.log"))
    assert active <= 10
    wait_for(lambda: checkpoint() == active,
             f"the checkpoint ({cleaned}) lowered to the active segment's base {active}")
    assert read_cleaner_checkpoint(tmp_path)[("t", 0)] == active


def test_a_shard_of_process_1_tells_the_cleaner_of_process_0() -> None:
    """num.processes > 1: the LogCleaner (one per log dir) runs in process 0; a shard of
    process 1 addresses it there, not in its own process (where there is none)."""
    process_1 = Topology("broker-p1", 1, 1, 2, 2, 1, home="broker",
                         process_nodes=("broker", "broker-p1"))
    assert process_1.log_cleaner.node == "broker"
    assert Topology("broker", 1, 1, 2, 2, 1).log_cleaner.node == "broker"
