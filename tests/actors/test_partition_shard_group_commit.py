"""Group commit in a PartitionShard: the Appends of one turn are written together.

A sender actor tells the shard many Appends in one frame (one turn of the
shard); the shard stages each batch, writes every partition's staged batches
once at the end of the turn, and only then answers. The answers carry the
offsets the batches have in the files, and a Read in the same frame as the
Appends already sees them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    GetStats,
    Read,
    ReadDone,
    ReadRow,
    TopicEntry,
)
from wire.registry import message


@message(9851)
class SendAll(NamedTuple):
    """Tell ``count`` Appends (over partitions 0 and 1 of "t"), then a Read, in one turn."""

    count: int


def batch(i: int) -> bytes:
    return build_batch([f"v{i}".encode()])


@message(9852)
class GetAnswers(NamedTuple):
    pass


class Sender(Actor):
    def __init__(self, node: Any, name: str, *, shard: Address, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.shard = shard

    def setup(self) -> None:
        self.answers: list[Any] = []

    @handles(SendAll)
    def on_send_all(self, msg: SendAll) -> None:
        for i in range(msg.count):
            self.tell(self.shard, Append(i + 1, 1, 30_000, [AppendRow("t", i % 2, batch(i))]))
        # after the Appends, in the same frame: it sees what they staged
        self.tell(self.shard, Read(1000, -1, 1 << 20, [ReadRow("t", 0, 0, 1 << 20)], False))

    @handles(AppendDone)
    def on_append_done(self, msg: AppendDone) -> None:
        row = msg.rows[0]
        self.answers.append(["append", msg.req_id, row.partition, row.error_code,
                             row.base_offset])

    @handles(ReadDone)
    def on_read_done(self, msg: ReadDone) -> None:
        row = msg.rows[0]
        self.answers.append(["read", row.error_code, row.high_watermark, len(row.records)])

    @handles(GetAnswers)
    def on_get(self, _msg: GetAnswers) -> list[Any]:
        return list(self.answers)


def test_the_appends_of_one_turn_are_written_together_then_answered(
        node: Node, tmp_path: Path) -> None:
    config = Config()
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    topics = {"t": TopicEntry(2, {})}
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    shard = node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config,
                       log_dir=log_dir, topics=topics, broker_id=1, clock=node.clock)
    sender = node.spawn(Sender, "sender", shard=shard)
    node.tell(sender, SendAll(40))
    wait_for(lambda: len(node.ask(sender, GetAnswers())) == 41)
    answers = node.ask(sender, GetAnswers())
    done = sorted(a[1:] for a in answers if a[0] == "append")
    assert done == [[i + 1, i % 2, 0, i // 2] for i in range(40)]
    [read] = [a for a in answers if a[0] == "read"]
    assert read[1:3] == [0, 20] and read[3] > 0
    stats: dict[str, Any] = node.ask(shard, GetStats())
    assert stats["partitions"]["t-0"] == [0, 20, 20] and stats["partitions"]["t-1"] == [0, 20, 20]
    # fewer commits than appends: at least some turns wrote several batches at once
    assert 1 <= stats["group_commits"] < 40
    assert stats["group_committed_appends"] == 40
    node.shutdown(timeout=5)
    for p in (0, 1):
        log = PartitionLog.open(log_dir.partition_path("t", p), "t", p, LogConfig(), 0,
                                clean_shutdown=True)
        assert log.log_end_offset == 20
        data = bytes(log.read(0, 1 << 20).records)
        for i in range(p, 40, 2):
            assert batch(i)[61:] in data  # the records, as sent
        log.close()
