"""Where the GroupCoordinator runs: with ``actor.threads = single`` (the default) in the
process's worker loop, beside the shards and handlers its every request goes through
(JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch, the appends to
``__consumer_offsets``), so none of those hops waits for a thread to wake up; its own
thread only with ``dedicated``. Checked on an in-process broker with a real consumer
group: a member joins, consumes and commits, a second joins, and the committed offsets
are read back by a consumer started afresh.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker.test_config_keys import Running

pytestmark = [pytest.mark.clients]

TOPIC = "grouped"
PARTITIONS = 2


@pytest.fixture(params=["single", "dedicated"])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    r = Running(tmp_path / "data", {"num.processes": 1, "actor.threads": request.param,
                                    "offsets.topic.num.partitions": 4,
                                    "group.initial.rebalance.delay.ms": 0})
    yield r
    r.broker.stop()


def produce(bootstrap: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        p.produce(TOPIC, b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, name: str) -> Any:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
    c.subscribe([TOPIC])
    return c


# a commit refused while the group rebalances (the second member joining): the client
# rejoins and a later commit covers the record
REBALANCING = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
               KafkaError.UNKNOWN_MEMBER_ID)


def refused_by_rebalance(exc: KafkaException) -> bool:
    err = exc.args[0]
    return bool(err.code() in REBALANCING or err.retriable())


def consume_and_commit(c: Any, count: int, timeout: float = 30) -> list[bytes]:
    """Up to ``count`` records, each committed synchronously once read (a commit refused
    by a rebalance is left to a later one)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        m: Any = c.poll(0.5)
        if m is None or m.error() is not None:
            continue
        got.append(m.value())
        try:
            c.commit(message=m, asynchronous=False)
        except KafkaException as exc:
            if not refused_by_rebalance(exc):
                raise
    return got


def commit_positions(c: Any, timeout: float = 30) -> None:
    """Commit what ``c`` consumed of its assignment, again while a rebalance refuses."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c.commit(asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._NO_OFFSET:
                return  # nothing consumed since its last commit
            if not refused_by_rebalance(exc) or time.monotonic() >= deadline:
                raise
        c.poll(0.2)


def test_the_group_coordinator_runs_in_the_worker_loop_with_actor_threads_single(
        running: Running) -> None:
    bootstrap = f"127.0.0.1:{running.port}"
    produce(bootstrap, 20)
    group = f"placed-{time.time()}"
    first = consumer(bootstrap, group, "first")
    second = None
    try:
        got = consume_and_commit(first, 6)
        assert len(got) == 6, got
        # a second member: the group rebalances, the first keeps committing its share
        second = consumer(bootstrap, group, "second")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (second.assignment()
                                                   and len(first.assignment()) < PARTITIONS):
            got += consume_and_commit(first, 1, timeout=0.2)  # polls: it rejoins
            got += consume_and_commit(second, 1, timeout=0.2)
        assert len(first.assignment()) == len(second.assignment()) == 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(set(got)) < 20:
            got += consume_and_commit(first, 20, timeout=0.2)
            got += consume_and_commit(second, 20, timeout=0.2)
        assert sorted(set(got), key=int) == [b"%d" % i for i in range(20)]
        commit_positions(first)
        commit_positions(second)
    finally:
        first.close()
        if second is not None:
            second.close()
    # a consumer started afresh reads the group's committed offsets back
    again = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False})
    try:
        committed = again.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 30)
    finally:
        again.close()
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(0, 10), (1, 10)]

    assert type(running.node.actors["coordinator-0"]).__name__ == "GroupCoordinator"
    running.assert_placed("coordinator-0", "GroupCoordinator")


def test_commits_past_a_loads_read_budget_come_back_after_a_restart(tmp_path: Path) -> None:
    """Real clients commit 800 KB at a time (200 partitions, 4000 bytes of metadata each:
    one batch past the coordinator's 1 MB Read budget shared with other partitions) for
    groups spread over __consumer_offsets, three times to one partition's group; after a
    restart every offset and its metadata comes back (the load reads the partitions the
    budget left out again, those first)."""
    from actors.core.offsets_codec import partition_for

    values = {"num.processes": 1, "offsets.topic.num.partitions": 4}
    running = Running(tmp_path / "data", values)
    bootstrap = f"127.0.0.1:{running.port}"
    wide, parts = "wide", 200
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(wide, parts, 1)])[wide].result(30)
        groups = [next(f"big-{p}-{i}" for i in range(1000)
                       if partition_for(f"big-{p}-{i}", 4) == p) for p in range(4)]
        expected: dict[str, dict[int, tuple[int, str]]] = {}
        for g in groups:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": g})
            try:
                rounds = 3 if g == groups[0] else 1
                for r in range(rounds):
                    meta = f"{g}-{r}-" + "m" * 4000
                    offsets = [TopicPartition(wide, p, 100 * r + p, metadata=meta)
                               for p in range(parts)]
                    c.commit(offsets=offsets, asynchronous=False)
                    expected[g] = {p: (100 * r + p, meta) for p in range(parts)}
            finally:
                c.close()
    finally:
        running.broker.stop()
    running = Running(tmp_path / "data", values)
    bootstrap = f"127.0.0.1:{running.port}"
    try:
        for g in groups:
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": g})
            try:
                got = c.committed([TopicPartition(wide, p) for p in range(parts)], 60)
            finally:
                c.close()
            assert {tp.partition: (tp.offset, tp.metadata) for tp in got} == expected[g], g
    finally:
        running.broker.stop()
