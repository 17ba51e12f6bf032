"""Timer and PurgatoryShard actors on the real clock, with real actors around them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import SystemClock
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from wire.broker_messages import (
    Cancel,
    Expired,
    FetchReady,
    PartitionChanged,
    PartitionStatus,
    ProduceReady,
    Schedule,
    SegmentPosition,
    WatchFetch,
    WatchPartition,
    WatchProduce,
)
from wire.errors import ErrorCode
from wire.registry import message


@message(9201)
class Plan(NamedTuple):
    """Schedule each [key, delay_ms]; cancel the keys in ``cancel``."""

    schedule: list[list[int]]
    cancel: list[int]


@message(9202)
class Report(NamedTuple):
    pass


@message(9203)
class SetStatus(NamedTuple):
    """What the fake shard reports for a partition: [hw, leo, is_leader]."""

    topic: str
    partition: int
    hw: int
    leo: int
    is_leader: bool
    notify: bool


class TimerUser(Actor):
    def setup(self) -> None:
        self.fired: list[tuple[int, int]] = []
        self.clock = SystemClock()

    @handles(Plan)
    def on_plan(self, msg: Plan) -> None:
        now = self.clock.now_ms()
        for key, delay in msg.schedule:
            self.tell(Address(self.node.name, "timer"), Schedule(key, now + delay))
        for key in msg.cancel:
            self.tell(Address(self.node.name, "timer"), Cancel(key))

    @handles(Expired)
    def on_expired(self, msg: Expired) -> None:
        self.fired.append((msg.key, self.clock.now_ms()))

    @handles(Report)
    def report(self, _msg: Report) -> list[Any]:
        return [list(f) for f in self.fired]


class FakeShard(Actor):
    """Stands in for a PartitionShard: answers watches with a status it is told."""

    def setup(self) -> None:
        self.status: dict[tuple[str, int], list[Any]] = {}
        self.watchers: set[Address] = set()

    def _row(self, topic: str, partition: int) -> PartitionStatus:
        hw, leo, leader = self.status.get((topic, partition), [0, 0, True])
        return PartitionStatus(topic, partition, hw, leo, leader, 0, 1, 1,
                               SegmentPosition(0, hw * 10), SegmentPosition(0, leo * 10))

    @handles(WatchPartition)
    def on_watch(self, msg: WatchPartition) -> None:
        assert self.current_sender is not None
        if msg.watch:
            self.watchers.add(self.current_sender)
            self.reply(PartitionChanged(self._row(msg.topic, msg.partition)))

    @handles(SetStatus)
    def on_set(self, msg: SetStatus) -> None:
        self.status[(msg.topic, msg.partition)] = [msg.hw, msg.leo, msg.is_leader]
        if msg.notify:
            for w in self.watchers:
                self.tell(w, PartitionChanged(self._row(msg.topic, msg.partition)))


class Requester(Actor):
    """Plays the handler: sends watches, records the answers with their arrival time."""

    def setup(self) -> None:
        self.answers: list[list[Any]] = []

    @handles(WatchFetch, WatchProduce)
    def forward(self, msg: Any) -> None:
        self.tell(Address(self.node.name, "purgatory-0"), msg)

    @handles(FetchReady, ProduceReady)
    def on_answer(self, msg: Any) -> None:
        self.answers.append([type(msg).__name__, time.monotonic(), list(msg)])

    @handles(Report)
    def report(self, _msg: Report) -> list[Any]:
        return self.answers


@pytest.fixture
def node() -> Iterator[Node]:
    n = Node("t").start()
    yield n
    n.shutdown(timeout=5)


def wait_for(fn, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_timer_fires_in_deadline_order_never_early_and_not_cancelled(node: Node) -> None:
    node.spawn(Timer, "timer")
    user = node.spawn(TimerUser, "user")
    start_ms = SystemClock().now_ms()
    node.tell(user, Plan([[1, 120], [2, 30], [3, 60], [4, 90]], [3]))
    fired = wait_for(lambda: (f := node.ask(user, Report())) and len(f) == 3 and f)
    time.sleep(0.1)
    fired = node.ask(user, Report())
    assert [k for k, _ in fired] == [2, 4, 1]  # 3 was cancelled
    delays = {k: t - start_ms for k, t in fired}
    assert delays[2] >= 30 and delays[4] >= 90 and delays[1] >= 120


def _topology() -> Topology:
    return Topology("t", 1, 1, 1, 1, 1)


def test_delayed_fetch_completes_on_append_or_on_timeout(node: Node) -> None:
    node.spawn(Timer, "timer")
    node.spawn(FakeShard, "shard-0")
    node.spawn(PurgatoryShard, "purgatory-0", topology=_topology())
    req = node.spawn(Requester, "handler-0")
    # 1: nothing arrives: answered once, at max_wait (timed out)
    t0 = time.monotonic()
    node.tell(req, WatchFetch(1, 100, 150, False, [["t", 0, 0, 0, 0, 1000]]))
    answers = wait_for(lambda: node.ask(req, Report()))
    assert answers[0][0] == "FetchReady" and answers[0][2] == [1, "timed_out", True]
    assert answers[0][1] - t0 >= 0.14
    # 2: an append brings enough bytes: answered early (min_bytes)
    t1 = time.monotonic()
    node.tell(req, WatchFetch(2, 100, 5000, False, [["t", 0, 0, 0, 0, 1000]]))
    time.sleep(0.05)
    node.tell(Address("t", "shard-0"), SetStatus("t", 0, 20, 20, True, True))
    answers = wait_for(lambda: (a := node.ask(req, Report())) and len(a) == 2 and a)
    assert answers[1][2] == [2, "min_bytes", False]
    assert answers[1][1] - t1 < 2.0
    time.sleep(0.3)
    assert len(node.ask(req, Report())) == 2  # exactly one answer each


def test_delayed_produce_leader_moved_and_timeout(node: Node) -> None:
    node.spawn(Timer, "timer")
    node.spawn(FakeShard, "shard-0")
    node.spawn(PurgatoryShard, "purgatory-0", topology=_topology())
    req = node.spawn(Requester, "handler-0")
    node.tell(Address("t", "shard-0"), SetStatus("p", 0, 5, 10, True, False))
    node.tell(req, WatchProduce(7, "handler-0", 100, [["p", 0, 10, 5, -1, 0, 0, 0]]))
    answers = wait_for(lambda: node.ask(req, Report()))
    assert answers[0][2] == [7, [["p", 0, int(ErrorCode.REQUEST_TIMED_OUT), 5, -1, 0, None]]]
    node.tell(req, WatchProduce(8, "handler-0", 5000, [["p", 1, 10, 5, -1, 0, 0, 0]]))
    time.sleep(0.05)
    node.tell(Address("t", "shard-0"), SetStatus("p", 1, 5, 10, False, True))
    answers = wait_for(lambda: (a := node.ask(req, Report())) and len(a) == 2 and a)
    assert answers[1][2] == [8, [["p", 1, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), 5, -1, 0, None]]]
