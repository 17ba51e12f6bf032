"""A coordinator whose request to create its log topic is lost asks again.

A single node's GroupCoordinator and TransactionCoordinator ask the Controller to create
``__consumer_offsets`` / ``__transaction_state`` before their first load. If the
Controller crashes on that request (or its process restarts with it unread), or crashes
after creating the topic but before answering, no answer ever comes: without a bound the
coordinator stays "creating" and refuses every request COORDINATOR_LOAD_IN_PROGRESS for
good. It asks again CREATE_WAIT_MS after asking; a topic the lost request did create is
answered TOPIC_ALREADY_EXISTS the second time, which is success. (A crash on the shards'
answer, ShardDone, no longer loses the answer: the Controller's new life asks the shard
whether it applied the change, and answers; the answer is lost here by a crash as it is
sent.)

An answer that comes after all, late, to the ask given up on is no answer to the one
asked again: ignored (and counted), whatever it says.

Real actors on a manual clock: the Controller (crashed once by the test, then restarted
in place by its supervisor), the coordinator, the PartitionShard that opens and serves
the topic, its LogManager, purgatory and the Timer. Only the request handler is a
stand-in that acknowledges every topic table the Controller sends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from actors.controller import Controller
from actors.coordinator_reads import CREATE_WAIT_MS, REFUSED_RETRY_MS
from actors.core.log_dir import LogDir
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.topic_store import TopicStore
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.group_coordinator import RETRY_MS as GROUP_RETRY_MS
from actors.group_coordinator import GroupCoordinator
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.timer import Timer
from actors.topology import Topology
from actors.transaction_coordinator import RETRY_MS as TXN_RETRY_MS
from actors.transaction_coordinator import TransactionCoordinator, txn_coordinator_for
from tests.actors.test_transaction_coordinator_shell import Probe
from tests.fixtures.crash import crash_once, fail_once
from tests.fixtures.waiting import wait_for
from wire.broker_messages import (
    CreateTopicDoneRow,
    CreateTopics,
    CreateTopicsDone,
    GetStats,
    MetadataApplied,
    MetadataUpdate,
)
from wire.errors import ErrorCode
from wire.transaction_messages import InitTxnProducer

LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
# where the Controller crashes: on the request itself (nothing created), or as it sends
# the answer (the topic is created, saved, opened and known to the handlers; the answer
# is lost): a handler of that message, or (None) a method called in one
LOSSES: list[tuple[str, type | None]] = [("on_create", CreateTopics), ("_answer", None)]


class AckingHandler(Actor):
    """A request handler's place: applies (acknowledges) every topic table at once."""

    @handles(MetadataUpdate)
    def on_update(self, msg: MetadataUpdate) -> None:
        if msg.ack_id:
            self.reply(MetadataApplied(msg.ack_id))


class Node1:
    """One node's Controller, shard and coordinators' neighbours; the Controller crashes
    once, where the test says, on the first such message."""

    def __init__(self, node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 handler: str, message: type | None) -> None:
        self.node = node
        self.config = Config({"offsets.topic.num.partitions": 2,
                              "transaction.state.log.num.partitions": 2,
                              "num.group.coordinators": 1, "num.partition.shards": 1,
                              "num.io.threads": 1})
        self.topo = Topology.from_config(node.name, self.config)
        log_dir = LogDir.open(tmp_path / "logs")
        self.armed = (fail_once(monkeypatch, Controller, handler) if message is None
                      else crash_once(monkeypatch, Controller, handler, message))
        self.armed["crash"] = True
        node.spawn(Timer, self.topo.timer.name, clock=node.clock)
        node.spawn(LogManager, self.topo.log_manager.name, log_dir=log_dir, num_shards=1,
                   clock=node.clock)
        node.spawn(PurgatoryShard, self.topo.purgatory(0).name, topology=self.topo,
                   clock=node.clock)
        node.spawn(PartitionShard, self.topo.shard(0).name, topology=self.topo,
                   config=self.config, log_dir=log_dir, topics={}, broker_id=1,
                   clock=node.clock)
        self.controller = node.spawn(Controller, self.topo.controller.name,
                                     topology=self.topo, config=self.config,
                                     store=TopicStore.load(tmp_path / "logs"))
        for h in self.topo.all_handlers():
            node.spawn(AckingHandler, h.name)
        node.spawn(Probe, "probe")

    def advance(self, ms: int) -> None:
        self.node.clock.advance(ms)  # type: ignore[attr-defined]
        self.node.run_turns()
        self.node.quiesce()

    def stats(self, who: Address) -> dict[str, Any]:
        stats: dict[str, Any] = self.node.ask(who, GetStats())
        return stats

    def crashed(self) -> None:
        wait_for(lambda: not self.armed["crash"], "the Controller's crash")
        self.node.quiesce()

    def topics(self) -> dict[str, Any]:
        return dict(self.stats(self.controller)["topics"])


@pytest.mark.parametrize(("handler", "message"), LOSSES, ids=["request", "answer"])
def test_a_group_coordinator_asks_again_for_its_topic(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        handler: str, message: type | None) -> None:
    n = Node1(manual_node, tmp_path, monkeypatch, handler, message)
    coordinator = manual_node.spawn(GroupCoordinator, n.topo.coordinator(0).name,
                                    topology=n.topo, config=n.config,
                                    clock=manual_node.clock, wait_for_handlers=False)
    n.crashed()
    assert (OFFSETS_TOPIC in n.topics()) == (handler == "_answer")
    n.advance(CREATE_WAIT_MS - 1)
    assert n.stats(coordinator)["phase"] == "creating", "asked again before the wait"
    n.advance(1)
    wait_for(lambda: n.stats(coordinator)["loaded"], "the load after asking again")
    assert n.stats(coordinator)["creates_lost"] == 1
    assert n.topics()[OFFSETS_TOPIC][0] == 2  # created once, with its two partitions


@pytest.mark.parametrize(("handler", "message"), LOSSES, ids=["request", "answer"])
def test_a_transaction_coordinator_asks_again_for_its_topic(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        handler: str, message: type | None) -> None:
    n = Node1(manual_node, tmp_path, monkeypatch, handler, message)
    coordinator = txn_coordinator_for(
        n.topo, int(n.config["transaction.state.log.num.partitions"]), "app")
    manual_node.spawn(TransactionCoordinator, coordinator.name, topology=n.topo,
                      config=n.config, index=0, clock=manual_node.clock)
    rid = iter(range(1, 100))

    def init() -> int:
        req_id = next(rid)
        manual_node.tell(coordinator, InitTxnProducer(req_id, "app", 60_000, -1, -1),
                         sender="probe")
        found = wait_for(lambda: [a for a in manual_node.ask(Address(manual_node.name, "probe"),
                                                             GetStats()) if a[0] == req_id],
                         f"the answer to init {req_id}")
        assert found is not None
        code: int = found[0][1]
        return code

    assert init() == LOADING  # the first request has the topic created
    n.crashed()
    n.advance(CREATE_WAIT_MS - 1)
    assert init() == LOADING
    assert n.stats(coordinator)["phase"] == "creating", "asked again before the wait"
    n.advance(1)
    wait_for(lambda: n.stats(coordinator)["loaded_partitions"] == [0, 1],
             "the load after asking again")
    assert init() == int(ErrorCode.NONE)
    assert n.stats(coordinator)["creates_lost"] == 1
    assert n.topics()[TRANSACTION_STATE_TOPIC][0] == 2


class SilentController(Actor):
    """The Controller's place: keeps the CreateTopics it is sent, answers nothing itself."""

    def setup(self) -> None:
        self.asked: list[int] = []

    @handles(CreateTopics)
    def on_create(self, msg: CreateTopics) -> None:
        self.asked.append(msg.req_id)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.asked)


def _silent_start(manual_node: Node, kind: str) -> tuple[Address, Address, str]:
    """A coordinator of ``kind`` asking a SilentController for its log topic: (the
    Controller, the coordinator, the topic)."""
    config = Config({"offsets.topic.num.partitions": 2,
                     "transaction.state.log.num.partitions": 2,
                     "num.group.coordinators": 1, "num.partition.shards": 1,
                     "num.io.threads": 1})
    topo = Topology.from_config(manual_node.name, config)
    controller = manual_node.spawn(SilentController, topo.controller.name)
    if kind == "group":
        coordinator = manual_node.spawn(GroupCoordinator, topo.coordinator(0).name,
                                        topology=topo, config=config,
                                        clock=manual_node.clock, wait_for_handlers=False)
        return controller, coordinator, OFFSETS_TOPIC
    coordinator = txn_coordinator_for(
        topo, int(config["transaction.state.log.num.partitions"]), "app")
    manual_node.spawn(TransactionCoordinator, coordinator.name, topology=topo,
                      config=config, index=0, clock=manual_node.clock, topic_exists=True)
    return controller, coordinator, TRANSACTION_STATE_TOPIC


def _asked(manual_node: Node, controller: Address, count: int) -> list[int]:
    return list(wait_for(lambda: (lambda a: a if len(a) >= count else None)(
        manual_node.ask(controller, GetStats())), f"{count} CreateTopics"))


def _answer(manual_node: Node, controller: Address, coordinator: Address, req_id: int,
            topic: str, code: ErrorCode, message: str | None) -> None:
    ok = code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)
    manual_node.tell(coordinator, CreateTopicsDone(req_id, [CreateTopicDoneRow(
        topic, int(code), message, 2 if ok else -1, 1 if ok else -1)]), sender=controller.name)


@pytest.mark.parametrize("kind", ["group", "transaction"])
def test_a_late_answer_to_an_earlier_ask_is_not_taken_for_the_current_one(
        manual_node: Node, kind: str) -> None:
    """The first ask's answer comes after the coordinator gave up on it and asked again:
    an error (the Controller's give-up on it, say) does not send the coordinator to retry
    the ask still in flight; a success does stand for it (the topic is there: the current
    ask, if lost too, need not be waited for). Each ignored answer is counted."""
    controller, coordinator, topic = _silent_start(manual_node, kind)

    def asked(count: int) -> list[int]:
        return _asked(manual_node, controller, count)

    def stats() -> dict[str, Any]:
        found: dict[str, Any] = manual_node.ask(coordinator, GetStats())
        return found

    def answer(req_id: int, code: ErrorCode) -> None:
        manual_node.tell(coordinator, CreateTopicsDone(req_id, [CreateTopicDoneRow(
            topic, int(code), None if code == ErrorCode.NONE else "late", 2, 1)]),
            sender=controller.name)

    [first] = asked(1)
    manual_node.advance_clock(CREATE_WAIT_MS)
    first_again, second = asked(2)
    assert first_again == first and second != first
    assert stats()["creates_lost"] == 1

    answer(first, ErrorCode.REQUEST_TIMED_OUT)
    found = stats()
    assert found["phase"] == "creating", "the first ask's late error taken for the second's"
    assert found["create_answers_stale"] == 1

    answer(first, ErrorCode.NONE)  # late too, but it says the topic is there: taken
    found = stats()
    assert found["phase"] not in ("creating", "create-retry")
    assert found["create_answers_stale"] == 1
    answer(second, ErrorCode.NONE)  # the current ask's, once moved on: nothing to do
    answer(first, ErrorCode.NONE)  # late again, once the topic was taken: counted
    found = stats()
    assert found["create_answers_stale"] == 2 and found["phase"] not in ("creating",
                                                                          "create-retry")
    assert asked(2) == [first, second]  # asked no more


@pytest.mark.parametrize("kind", ["group", "transaction"])
def test_a_refused_name_is_no_success_and_is_asked_for_again_seldom(
        manual_node: Node, kind: str) -> None:
    """The Controller refuses the log topic's name (its znodes were removed from ZooKeeper
    by hand: INVALID_TOPIC_EXCEPTION, until they are written back or the controller moves).
    The coordinator loads
    nothing (the topic does not exist) and asks again only after REFUSED_RETRY_MS, not at
    its passing-failure pace."""
    controller, coordinator, topic = _silent_start(manual_node, kind)

    def asked(count: int) -> list[int]:
        return _asked(manual_node, controller, count)

    [first] = asked(1)
    _answer(manual_node, controller, coordinator, first, topic,
            ErrorCode.INVALID_TOPIC_EXCEPTION, "removed from ZooKeeper by hand")
    found: dict[str, Any] = manual_node.ask(coordinator, GetStats())
    assert found["phase"] == "create-retry", "a refusal taken for the topic"
    manual_node.advance_clock(REFUSED_RETRY_MS - 1)
    assert manual_node.ask(controller, GetStats()) == [first], "asked again at once"
    manual_node.advance_clock(1)
    assert len(asked(2)) == 2


@pytest.mark.parametrize("code", [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER,
                                  ErrorCode.POLICY_VIOLATION], ids=lambda c: c.name)
@pytest.mark.parametrize("kind", ["group", "transaction"])
def test_a_passing_failure_is_asked_again_at_the_retry_pace(
        manual_node: Node, kind: str, code: ErrorCode) -> None:
    """Only the removed-by-hand refusal waits REFUSED_RETRY_MS: a passing failure, and a
    POLICY_VIOLATION (a partition budget's, lifted as soon as partitions go), is asked
    again after the coordinator's RETRY_MS, as before."""
    retry_ms = GROUP_RETRY_MS if kind == "group" else TXN_RETRY_MS
    assert retry_ms < REFUSED_RETRY_MS
    controller, coordinator, topic = _silent_start(manual_node, kind)
    [first] = _asked(manual_node, controller, 1)
    _answer(manual_node, controller, coordinator, first, topic, code, "injected")
    found: dict[str, Any] = manual_node.ask(coordinator, GetStats())
    assert found["phase"] == "create-retry"
    manual_node.advance_clock(retry_ms - 1)
    assert manual_node.ask(controller, GetStats()) == [first], "asked again at once"
    manual_node.advance_clock(1)
    assert len(_asked(manual_node, controller, 2)) == 2


@pytest.mark.parametrize("kind", ["group", "transaction"])
def test_a_create_error_is_logged_once_until_it_changes(manual_node: Node, kind: str) -> None:
    """The same error again is logged at debug only; a different one at error again; a
    success forgets the last one logged."""
    retry_ms = GROUP_RETRY_MS if kind == "group" else TXN_RETRY_MS
    controller, coordinator, topic = _silent_start(manual_node, kind)
    lines: list[tuple[str, str]] = []
    sink = logger.add(lambda m: lines.append((m.record["level"].name, m.record["message"])),
                      level="DEBUG", filter=lambda r: "cannot create" in r["message"])
    try:
        sequence = [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT,
                    ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_CONTROLLER]
        for count, code in enumerate(sequence, start=1):
            req_id = _asked(manual_node, controller, count)[-1]
            _answer(manual_node, controller, coordinator, req_id, topic, code, "injected")
            manual_node.ask(coordinator, GetStats())  # the answer taken
            manual_node.advance_clock(retry_ms)
        assert [level for level, _ in lines] == ["ERROR", "DEBUG", "ERROR", "DEBUG"]
        assert "REQUEST_TIMED_OUT" in lines[0][1] and "NOT_CONTROLLER" in lines[2][1]
        actor: Any = manual_node.actors[coordinator.name]
        assert actor.create_error_logged == (int(ErrorCode.NOT_CONTROLLER), "injected")
        req_id = _asked(manual_node, controller, len(sequence) + 1)[-1]
        _answer(manual_node, controller, coordinator, req_id, topic,
                ErrorCode.TOPIC_ALREADY_EXISTS, None)
        manual_node.ask(coordinator, GetStats())
        assert actor.create_error_logged is None
    finally:
        logger.remove(sink)
