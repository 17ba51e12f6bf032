"""Timer and PurgatoryShard actors on a manual clock, with real actors around them.

Every actor of the node reads one ManualClock; ``Node.advance_clock`` moves
it and waits until the actors have acted on the new time, so each test says
exactly when an answer is due and checks the millisecond before it too.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from wire.broker_messages import (
    Cancel,
    Expired,
    FetchReady,
    GetStats,
    PartitionChanged,
    PartitionStatus,
    ProduceReady,
    Schedule,
    SegmentPosition,
    WatchFetch,
    WatchFetchRow,
    WatchPartition,
    WatchProduce,
    WatchProduceRow,
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
        self.watchers: dict[tuple[str, int], set[Address]] = {}

    def _row(self, topic: str, partition: int) -> PartitionStatus:
        hw, leo, leader = self.status.get((topic, partition), [0, 0, True])
        return PartitionStatus(topic, partition, hw, leo, leader, 0, 1, 1,
                               SegmentPosition(0, hw * 10), SegmentPosition(0, leo * 10))

    @handles(WatchPartition)
    def on_watch(self, msg: WatchPartition) -> None:
        assert self.current_sender is not None
        key = (msg.topic, msg.partition)
        if msg.watch:
            self.watchers.setdefault(key, set()).add(self.current_sender)
            self.reply(PartitionChanged(self._row(msg.topic, msg.partition)))
        else:
            self.watchers.get(key, set()).discard(self.current_sender)

    @handles(SetStatus)
    def on_set(self, msg: SetStatus) -> None:
        self.status[(msg.topic, msg.partition)] = [msg.hw, msg.leo, msg.is_leader]
        if msg.notify:
            for w in self.watchers.get((msg.topic, msg.partition), ()):
                self.tell(w, PartitionChanged(self._row(msg.topic, msg.partition)))

    @handles(Report)
    def report(self, _msg: Report) -> list[list[Any]]:
        """The partitions someone watches, as [topic, partition]."""
        return sorted([list(k) for k, ws in self.watchers.items() if ws])


class Requester(Actor):
    """Plays the handler: sends watches, records each answer with the clock's time."""

    def setup(self) -> None:
        self.answers: list[list[Any]] = []

    @handles(WatchFetch, WatchProduce)
    def forward(self, msg: Any) -> None:
        self.tell(Address(self.node.name, "purgatory-0"), msg)

    @handles(FetchReady, ProduceReady)
    def on_answer(self, msg: Any) -> None:
        self.answers.append([type(msg).__name__, self.clock.now_ms(), list(msg)])

    @handles(Report)
    def report(self, _msg: Report) -> list[Any]:
        return self.answers


def test_timer_fires_at_each_deadline_never_early_and_not_when_cancelled(
        manual_node: Node) -> None:
    node = manual_node
    node.spawn(Timer, "timer")
    user = node.spawn(TimerUser, "user")
    node.tell(user, Plan([[1, 120], [2, 30], [3, 60], [4, 90]], [3]))
    node.quiesce()
    fired: list[Any] = []
    for step_ms, expected in ((29, []), (1, [[2, 30]]), (59, [[2, 30]]),
                              (1, [[2, 30], [4, 90]]), (29, [[2, 30], [4, 90]]),
                              (1, [[2, 30], [4, 90], [1, 120]]),
                              (10_000, [[2, 30], [4, 90], [1, 120]])):  # 3 was cancelled
        node.advance_clock(step_ms)
        fired = node.ask(user, Report())
        assert fired == expected, f"at {node.clock.now_ms()} ms"
    assert node.ask(Address(node.name, "timer"), GetStats()) == {"scheduled": 0, "expired": 3}


def _topology() -> Topology:
    return Topology("t", 1, 1, 1, 1, 1)


def spawn_purgatory(node: Node) -> Address:
    node.spawn(Timer, "timer")
    node.spawn(FakeShard, "shard-0")
    node.spawn(PurgatoryShard, "purgatory-0", topology=_topology())
    return node.spawn(Requester, "handler-0")


def test_delayed_fetch_completes_on_append_or_on_timeout(manual_node: Node) -> None:
    node = manual_node
    req = spawn_purgatory(node)
    shard = Address(node.name, "shard-0")
    # 1: nothing arrives: answered once, at max_wait (timed out), not a millisecond before
    node.tell(req, WatchFetch(1, 100, 150, False, [WatchFetchRow("t", 0, 0, 0, 0, 1000)]))
    node.quiesce()
    assert node.ask(shard, Report()) == [["t", 0]]
    node.advance_clock(149)
    assert node.ask(req, Report()) == []
    node.advance_clock(1)
    assert node.ask(req, Report()) == [["FetchReady", 150, [1, "timed_out", True]]]
    assert node.ask(shard, Report()) == []  # unwatched with its last waiting fetch
    # 2: an append brings enough bytes: answered then (min_bytes), with no time passing
    node.tell(req, WatchFetch(2, 100, 5000, False, [WatchFetchRow("t", 0, 0, 0, 0, 1000)]))
    node.quiesce()
    node.tell(shard, SetStatus("t", 0, 20, 20, True, True))
    node.quiesce()
    assert node.ask(req, Report())[1:] == [["FetchReady", 150, [2, "min_bytes", False]]]
    # its deadline passing later changes nothing: exactly one answer each
    node.advance_clock(10_000)
    assert len(node.ask(req, Report())) == 2
    assert node.ask(Address(node.name, "purgatory-0"), GetStats())["expirations"] == 1


def test_delayed_produce_leader_moved_and_timeout(manual_node: Node) -> None:
    node = manual_node
    req = spawn_purgatory(node)
    shard = Address(node.name, "shard-0")
    node.tell(shard, SetStatus("p", 0, 5, 10, True, False))
    node.tell(req, WatchProduce(7, "handler-0", 100,
                                [WatchProduceRow("p", 0, 10, 5, -1, 0, 0, 0)]))
    node.quiesce()
    node.advance_clock(99)
    assert node.ask(req, Report()) == []  # the high watermark (5) is short of 10
    node.advance_clock(1)
    assert node.ask(req, Report()) == [
        ["ProduceReady", 100,
         [7, [["p", 0, int(ErrorCode.REQUEST_TIMED_OUT), 5, -1, 0, None, []]]]]]
    node.tell(req, WatchProduce(8, "handler-0", 5000,
                                [WatchProduceRow("p", 1, 10, 5, -1, 0, 0, 0)]))
    node.quiesce()
    node.tell(shard, SetStatus("p", 1, 5, 10, False, True))
    node.quiesce()
    assert node.ask(req, Report())[1:] == [
        ["ProduceReady", 100,
         [8, [["p", 1, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), 5, -1, 0, None, []]]]]]
    node.advance_clock(10_000)
    assert len(node.ask(req, Report())) == 2
    assert node.ask(shard, Report()) == []
