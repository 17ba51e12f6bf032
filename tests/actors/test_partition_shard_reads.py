"""A PartitionShard's reads: file regions when asked for, bytes within a frame otherwise.

Real actors on one node (the reader in its own thread, so the answers travel
as frames through ZeroMQ, descriptors and all).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from actors.core.log_dir import LogDir
from actors.core.partition_log import PartitionLog
from actors.core.record_batch import build_batch
from actors.core.topic_config import log_config_for
from actors.log_manager import LogManager
from actors.partition_shard import FRAME_SLACK_BYTES, REGION_MIN_BYTES, PartitionShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from wire import registry
from wire.broker_messages import Read, ReadDone, ReadRow, TopicEntry
from wire.registry import message

WALL_MS = 1_700_000_000_000
VALUE = 20 * 1024
BATCHES = 50  # one record of VALUE bytes each: about 1 MB
FRAME_LIMIT = 256 * 1024


@message(9801)
class AskRead(NamedTuple):
    read: Read


@message(9802)
class Answers(NamedTuple):
    pass


class Reader(Actor):
    def setup(self) -> None:
        self.answers: list[ReadDone] = []

    @handles(AskRead)
    def ask_read(self, msg: AskRead) -> None:
        self.tell(Address(self.node.name, "shard-0"), msg.read)

    @handles(ReadDone)
    def on_done(self, msg: ReadDone) -> None:
        self.answers.append(msg)

    @handles(Answers)
    def get(self, _msg: Answers) -> list[ReadDone]:
        return self.answers


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node("shard-reads", max_frame_bytes=FRAME_LIMIT).start()
    config = Config()
    clock = ManualClock(start_ms=0, wall_start_ms=WALL_MS)
    topo = Topology(n.name, 1, 1, 1, 1, 1)
    log_dir = LogDir.open(tmp_path)
    for topic in ("big", "small"):
        log = PartitionLog.open(log_dir.partition_path(topic, 0), topic, 0,
                                log_config_for(config, {}), WALL_MS)
        count = BATCHES if topic == "big" else 2
        for i in range(count):
            log.append_as_leader(build_batch([bytes([i]) * (VALUE if topic == "big" else 100)],
                                             timestamps_ms=[WALL_MS]), 0, WALL_MS)
        log.close(WALL_MS)
        log_dir.high_watermarks[(topic, 0)] = count
        log_dir.recovery_points[(topic, 0)] = count
    n.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1, clock=clock)
    n.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=config, log_dir=log_dir,
            topics={"big": TopicEntry(1, {}), "small": TopicEntry(1, {})}, broker_id=1,
            clock=clock)
    n.spawn(Reader, "reader")
    yield n
    n.shutdown(timeout=5)


def read(node: Node, req_id: int, rows: list[ReadRow], max_bytes: int,
         regions: bool) -> ReadDone:
    reader = Address(node.name, "reader")
    node.tell(reader, AskRead(Read(req_id, -1, max_bytes, rows, regions)))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for body in node.ask(reader, Answers()):  # the ask's value travelled as msgpack
            answer = registry.build(ReadDone, body)
            if answer.req_id == req_id:
                return answer
        time.sleep(0.01)
    raise AssertionError(f"no answer to read {req_id}")


def test_a_read_asking_for_regions_gets_the_same_batches_as_a_file_region(node: Node) -> None:
    rows = [ReadRow("big", 0, 3, 200 * 1024), ReadRow("small", 0, 0, 1 << 20)]
    as_bytes = read(node, 1, rows, 1 << 20, regions=False)
    as_regions = read(node, 2, rows, 1 << 20, regions=True)
    big, small = as_regions.rows
    assert big.region is not None and big.records == b""
    try:
        assert REGION_MIN_BYTES <= big.region.length <= 200 * 1024
        data = os.pread(big.region.fd, big.region.length, big.region.position)
        assert data == as_bytes.rows[0].records
    finally:
        os.close(big.region.fd)
    # A small amount comes as bytes: cheaper than a descriptor.
    assert small.region is None and small.records == as_bytes.rows[1].records
    assert 0 < len(small.records) < REGION_MIN_BYTES
    assert (big.high_watermark, big.fetch_segment_base) == (BATCHES, 0)


def test_a_read_for_bytes_stays_within_one_frame(node: Node) -> None:
    answer = read(node, 3, [ReadRow("big", 0, 0, 10 << 20)], 10 << 20, regions=False)
    (row,) = answer.rows
    assert row.error_code == 0 and row.region is None
    assert 0 < len(row.records) <= FRAME_LIMIT - FRAME_SLACK_BYTES
    assert node.dead_letters.total == 0
