"""A single node's Controller crashes between writing a topic change and sending it.

An in-process broker of two processes (num.processes = 2): the Controller runs in
process 0, half the partition shards in process 1. The test makes the Controller crash
right after it wrote a change to its topic store (the write done, the shards not told);
its supervisor restarts it in place, and the new life sends the change to the shards of
both processes. Before, the change was in the store alone until the broker restarted: a
created topic's partitions were served by no shard (produce answered NOT_LEADER or
UNKNOWN for good), a deleted topic's logs stayed open and on disk.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from actors.broker import Broker
from actors.core.topic_store import TopicStore
from actors.runtime.config import Config
from tests.broker.rawclient import DELETE_TOPICS, RawClient, record_batch
from tests.fixtures.crash import fail_once
from tests.fixtures.waiting import wait_for

PARTITIONS = 4


def _produced(port: int, topic: str, partition: int) -> bool:
    with RawClient(port, timeout=5.0) as client:
        return int(client.produce(topic, partition, record_batch([(None, b"v")])).error_code) == 0


def test_a_change_written_before_a_crash_reaches_the_shards_of_both_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    crash = fail_once(monkeypatch, TopicStore, "save", after=True)
    data = tmp_path / "data"
    broker = Broker(Config({"listeners": "127.0.0.1:0", "log.dirs": str(data),
                            "num.processes": 2, "num.partition.shards": 2}))
    try:
        # in the try: a start that fails part way is stopped too (stop() stops only
        # what was started: the processes, the node, each if there)
        broker.start()
        assert broker.node is not None and broker.topology is not None
        controller = broker.node.actors[broker.topology.controller.name]
        homes = {broker.topology.shard_for("t", p).node for p in range(PARTITIONS)}
        assert len(homes) == 2, f"every partition in one process: {homes}"
        port = int(broker.port)

        crash["crash"] = True
        with contextlib.suppress(OSError), RawClient(port, timeout=5.0) as client:
            client.create_topic("t", PARTITIONS)  # its answer may be lost with the crash
        wait_for(lambda: controller.crashes == 1, "the Controller's crash")
        for p in range(PARTITIONS):
            wait_for(lambda p=p: _produced(port, "t", p), f"a produce to t-{p}", timeout=30)

        crash["crash"] = True
        with contextlib.suppress(OSError), RawClient(port, timeout=5.0) as client:
            client.call(DELETE_TOPICS, 5, {"topic_names": ["t"], "timeout_ms": 5000})
        wait_for(lambda: controller.crashes == 2, "the Controller's second crash")

        def left() -> list[Any]:
            return sorted(p.name for p in data.iterdir() if p.name.startswith("t-"))

        wait_for(lambda: left() == [], "the deleted topic's logs to go", timeout=30)
    finally:
        broker.stop()
