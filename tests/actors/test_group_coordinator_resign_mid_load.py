"""A cluster's GroupCoordinator whose load loses, by a resign, the partition it was
still reading: the partitions whose Read failed are read again RETRY_MS later, as after
any failed Read, not at once (a shard that refuses them would otherwise be asked again
at every resign, with no pause). The real coordinator and Timer on a manual clock; the
shard is a stand-in."""

from __future__ import annotations

from typing import Any

from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.group_coordinator import RETRY_MS, GroupCoordinator
from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats, Read, ReadDone, ReadDoneRow
from wire.cluster_messages import CoordinatorPartitionRow, CoordinatorPartitions
from wire.errors import ErrorCode


class SlowAndFailingShard(Actor):
    """Partition 0 has records past its first answer, which carries none of them (read
    on), and its further Reads are never answered (a load under way); the first Read of
    partition 1 fails NOT_LEADER_OR_FOLLOWER, the next ones find it empty."""

    def setup(self) -> None:
        self.reads: list[int] = []

    @handles(Read)
    def on_read(self, msg: Read) -> None:
        rows = []
        for r in msg.rows:
            self.reads.append(r.partition)
            if r.partition == 0:
                if self.reads.count(0) > 1:
                    return
                rows.append(ReadDoneRow(r.topic, 0, 0, 5, 0, b"", 0, 0, 5))
            elif self.reads.count(1) == 1:
                rows.append(ReadDoneRow(r.topic, 1, int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                                        -1, -1, b"", 0, 0, -1))
            else:
                rows.append(ReadDoneRow(r.topic, 1, 0, 0, 0, b"", 0, 0, 0))
        self.reply(ReadDone(msg.req_id, rows))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.reads)


def test_a_resign_that_ends_a_loads_reads_waits_to_read_the_failed_again(
        manual_node: Node) -> None:
    node = manual_node
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    config = Config({"offsets.topic.num.partitions": 2})
    node.spawn(Timer, topo.timer.name)
    node.spawn(SlowAndFailingShard, topo.shard(0).name)
    groups = node.spawn(GroupCoordinator, topo.coordinator(0).name, topology=topo,
                        config=config, clock=node.clock, cluster=True)
    node.tell(groups, CoordinatorPartitions(
        [CoordinatorPartitionRow(0, 0), CoordinatorPartitionRow(1, 0)], [], 2))
    node.quiesce()
    shard = topo.shard(0)
    # partition 0 read on (unanswered), partition 1 failed: the load waits for 0
    assert sorted(node.ask(shard, GetStats())) == [0, 0, 1]
    assert node.ask(groups, GetStats())["phase"] == "loading"
    node.tell(groups, CoordinatorPartitions([], [0], 2))  # nothing left in flight
    node.quiesce()
    assert node.ask(groups, GetStats())["phase"] == "read-retry"
    assert node.ask(shard, GetStats()).count(1) == 1  # not read again at once
    node.advance_clock(RETRY_MS)
    wait_for(lambda: node.ask(groups, GetStats())["loaded_partitions"] == [1] or None,
             f"{OFFSETS_TOPIC}-1 read again after RETRY_MS and loaded")
    assert node.ask(shard, GetStats()).count(1) == 2
