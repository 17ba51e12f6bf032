"""Where the TransactionCoordinator runs: with ``actor.threads = single`` (the default) in
the process's worker loop, beside the shards and handlers its every request goes through
(a transaction's AddPartitionsToTxn and EndTxn, the appends to ``__transaction_state``,
the markers), so none of those hops waits for a thread to wake up; its own thread only
with ``dedicated``. Checked on an in-process broker committing real transactions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker.test_config_keys import Running

pytestmark = [pytest.mark.clients]


@pytest.fixture(params=["single", "dedicated"])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path / "data", {"num.processes": 1, "actor.threads": request.param,
                                    "transaction.state.log.num.partitions": 4})
    yield r
    r.broker.stop()


def commit_transactions(bootstrap: str, topic: str, count: int) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"placed-{time.time()}",
                  "linger.ms": 5})
    p.init_transactions(30)
    sent = []
    for i in range(count):
        p.begin_transaction()
        for j in range(3):
            value = b"%d-%d" % (i, j)
            p.produce(topic, value)
            sent.append(value)
        p.commit_transaction(30)
    return sent


def read_committed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"placed-{time.time()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_the_transaction_coordinator_placement_follows_actor_threads(
        running: Running) -> None:
    bootstrap = f"127.0.0.1:{running.port}"
    sent = commit_transactions(bootstrap, "placed", 3)
    assert read_committed(bootstrap, "placed", len(sent)) == sent
    running.assert_placed("txn-coordinator-0", "TransactionCoordinator")
