"""The single-node Controller answers a topic change once every handler applied it.

Handlers serve DescribeConfigs and Metadata from their own copy of the topic table, which
the controller sends each of them (MetadataUpdate). A client that changes a topic and then
reads it on another connection (another handler) must see the change: the controller
holds the answer until every handler, those of its own process included (they run on
other threads and loops), acknowledged the new table with MetadataApplied; only a handler
that never does (its process is restarting) is given up, after ACK_WAIT_NS, with a
warning. A real Controller, PartitionShard and LogManager on a ManualClock here; recorders
take the handlers' places, and the test says when each acknowledges.

A client's request carries timeout_ms, honoured as Kafka's DelayedCreatePartitions and
DelayedDeleteTopics do: a change not complete by then (a shard that has not opened or
dropped the partitions, a handler that has not applied the table) is answered
REQUEST_TIMED_OUT for the topics it changed (done all the same; rows in error keep
theirs); timeout_ms <= 0 waits for every handler as a request without a timeout does
(Kafka answers it at once: a deliberate difference, see actors/controller.py).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from actors.controller import ACK_WAIT_NS, PENDING_GIVE_UP_NS, RESEND_TRIES, Controller
from actors.core.log_dir import LogDir
from actors.core.record_batch import build_batch
from actors.core.topic_id import new_topic_id
from actors.core.topic_store import TopicStore
from actors.log_manager import LogManager
from actors.partition_shard import PartitionShard
from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.crash import crash_once, fail_once
from tests.fixtures.two_processes import two_processes
from tests.fixtures.waiting import wait_for
from wire.admin_messages import (
    AlterTopicConfigs,
    AlterTopicConfigsDone,
    AlterTopicConfigsRow,
    ConfigOpRow,
    CreatePartitions,
    CreatePartitionsDone,
    CreatePartitionsRow,
)
from wire.broker_messages import (
    Append,
    AppendRow,
    CreateTopicDoneRow,
    CreateTopicRow,
    CreateTopics,
    CreateTopicsDone,
    DeleteTopicRow,
    DeleteTopics,
    DeleteTopicsDone,
    DropPartitions,
    GetStats,
    MetadataApplied,
    MetadataUpdate,
    OpenPartitions,
    Schedule,
    ShardDone,
)
from wire.cluster_messages import ProcessStarted
from wire.errors import ErrorCode

HANDLERS = 3
SUBTRACT = 3
TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)


class Recorder(Actor):
    """A handler's (or the timer's, or the asking client's) place: keeps what comes."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(MetadataUpdate, CreateTopicsDone, AlterTopicConfigsDone, DeleteTopicsDone,
             CreatePartitionsDone, Schedule)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _got(node: Node, who: Address, kind: type) -> list[Any]:
    """What ``who`` got of ``kind`` (an ask's answer carries the fields, rebuilt here)."""
    return [kind(*fields) for name, fields in node.ask(who, GetStats())
            if name == kind.__name__]


def _start(node: Node, tmp_path: Path) -> tuple[Address, list[Address], Address]:
    """The controller with its shard and log manager; handler-0 and handler-2 on threads
    of their own, handler-1 in the controller's loop; and the asking client."""
    topo = Topology(node.name, 1, HANDLERS, 1, 1, 1)
    log_dir = LogDir.open(tmp_path / "logs")
    node.spawn(LogManager, topo.log_manager.name, log_dir=log_dir, num_shards=1,
               clock=node.clock)
    node.spawn(PartitionShard, topo.shard(0).name, topology=topo, config=Config(),
               log_dir=log_dir, topics={}, broker_id=1, clock=node.clock)
    node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo, clock=node.clock)
    node.spawn(Recorder, topo.timer.name)
    controller = node.spawn(Controller, topo.controller.name, topology=topo, config=Config(),
                            store=TopicStore.load(tmp_path / "logs"))
    handlers = [node.spawn(Recorder, topo.handler(i).name,
                           **({"host": controller.name} if i == 1 else {}))
                for i in range(HANDLERS)]
    client = node.spawn(Recorder, "client")
    return controller, handlers, client


def _updates(node: Node, handlers: list[Address], count: int) -> list[MetadataUpdate]:
    """Every handler's ``count``-th MetadataUpdate, once all have one."""
    def each() -> list[MetadataUpdate] | None:
        got = [_got(node, h, MetadataUpdate) for h in handlers]
        return [g[count - 1] for g in got] if all(len(g) >= count for g in got) else None

    updates = wait_for(each, f"update {count} at every handler")
    assert updates is not None
    return updates


def _ack(node: Node, controller: Address, handler: Address, update: MetadataUpdate) -> None:
    """``handler`` applied ``update``: its MetadataApplied, from its address."""
    assert update.ack_id, "the controller did not ask this handler to acknowledge"
    node.tell(controller, MetadataApplied(update.ack_id), sender=handler.name)


def _answered_after_every_ack(node: Node, controller: Address, handlers: list[Address],
                              client: Address, count: int, kind: type) -> Any:
    """The ``count``-th table reached every handler: the client's answer comes only with
    the last handler's acknowledgement, whichever loop each runs in."""
    updates = _updates(node, handlers, count)
    for i, (handler, update) in enumerate(zip(handlers, updates, strict=True)):
        node.quiesce()
        assert _got(node, client, kind) == [], (
            f"answered with {HANDLERS - i} handler(s) not acknowledging the new table")
        _ack(node, controller, handler, update)
    [answer] = wait_for(lambda: _got(node, client, kind), f"the {kind.__name__}")
    return answer


def test_a_topic_change_is_answered_once_every_handler_applied_it(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow(
        "t", 2, 1, {"cleanup.policy": "delete,compact"})]), sender=client.name)
    created = _answered_after_every_ack(node, controller, handlers, client, 1,
                                        CreateTopicsDone)
    assert [r[1] for r in created.rows] == [0]
    for update in _updates(node, handlers, 1):
        assert update.topics["t"][1] == {"cleanup.policy": "delete,compact"}

    # the CI case: SUBTRACT compact, then another handler's DescribeConfigs
    node.tell(controller, AlterTopicConfigs(2, False, True, [AlterTopicConfigsRow(
        "t", [ConfigOpRow("cleanup.policy", SUBTRACT, "compact")])]), sender=client.name)
    altered = _answered_after_every_ack(node, controller, handlers, client, 2,
                                        AlterTopicConfigsDone)
    assert [r[1] for r in altered.rows] == [0]
    for update in _updates(node, handlers, 2):
        assert update.topics["t"][1] == {"cleanup.policy": "delete"}

    node.tell(controller, DeleteTopics(3, [DeleteTopicRow("t")]), sender=client.name)
    deleted = _answered_after_every_ack(node, controller, handlers, client, 3,
                                        DeleteTopicsDone)
    assert [r[1] for r in deleted.rows] == [0]
    assert all("t" not in u.topics for u in _updates(node, handlers, 3))


def test_a_handler_that_never_acknowledges_delays_the_answer_until_the_give_up(
        manual_node: Node, tmp_path: Path) -> None:
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
                  sender=client.name)
        updates = _updates(node, handlers, 1)
        for handler, update in zip(handlers[:-1], updates, strict=False):
            _ack(node, controller, handler, update)  # handler-2 never does (restarting)
        wait_ms = ACK_WAIT_NS // 1_000_000
        node.advance_clock(wait_ms - 1)
        assert _got(node, client, CreateTopicsDone) == [], "given up before ACK_WAIT_NS"
        assert not [ln for ln in lines if "answering anyway" in ln]
        node.advance_clock(1)
        [created] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the answer")
        assert [r[1] for r in created.rows] == [0]
        [warning] = [ln for ln in lines if "answering anyway" in ln]
        assert "1 handler(s)" in warning and str(handlers[2]) in warning, warning
        # its late acknowledgement answers nothing twice
        _ack(node, controller, handlers[2], updates[2])
        node.quiesce()
        assert len(_got(node, client, CreateTopicsDone)) == 1
    finally:
        logger.remove(sink)


def _create_through_a_crash(node: Node, tmp_path: Path,
                            armed: dict[str, bool]) -> tuple[Address, list[Address], Address]:
    """``_start``, then a CreateTopics of "t" (2 partitions) that crashes the Controller
    once where ``armed`` (from ``crash_once``/``fail_once``, patched first) says."""
    controller, handlers, client = _start(node, tmp_path)
    armed["crash"] = True
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 2, 1, {})]),
              sender=client.name)
    wait_for(lambda: node.actors[controller.name].crashes == 1, "the Controller's crash")
    return controller, handlers, client


def _ack_all(node: Node, controller: Address, handlers: list[Address], count: int) -> None:
    for handler, update in zip(handlers, _updates(node, handlers, count), strict=True):
        _ack(node, controller, handler, update)


def test_a_change_not_acknowledged_within_the_request_timeout_is_answered_timed_out(
        manual_node: Node, tmp_path: Path) -> None:
    """CreateTopics, CreatePartitions and DeleteTopics alike: past timeout_ms (shorter
    than the give-up), the changed topics are REQUEST_TIMED_OUT, those in error keep
    their error, the change is made, and the late acknowledgements answer nothing."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    asks: list[tuple[Any, type]] = [
        (CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {}),
                                 CreateTopicRow("bad", 0, 1, {})], 3000), CreateTopicsDone),
        (CreatePartitions(2, False, [CreatePartitionsRow("t", 3, None),
                                     CreatePartitionsRow("none", 2, None)], 3000),
         CreatePartitionsDone),
        (DeleteTopics(3, [DeleteTopicRow("t"), DeleteTopicRow("none")], 3000),
         DeleteTopicsDone),
    ]
    for count, (ask, kind) in enumerate(asks, 1):
        node.tell(controller, ask, sender=client.name)
        updates = _updates(node, handlers, count)
        _ack(node, controller, handlers[0], updates[0])  # the others are slow
        node.advance_clock(2999)
        assert _got(node, client, kind) == [], f"{kind.__name__} answered before its timeout"
        node.advance_clock(1)
        [answer] = wait_for(lambda k=kind: _got(node, client, k), f"the {kind.__name__}")
        changed, refused = answer.rows  # as lists: (name, error code, message, ...)
        assert changed[1] == TIMED_OUT, answer
        assert "3000" in str(changed[2])
        assert refused[1] not in (0, TIMED_OUT), answer  # its own error
        if kind is CreateTopicsDone:
            assert changed[3:] == [-1, -1, ""], "Kafka resets the counts and id on an error"
        for handler, update in zip(handlers[1:], updates[1:], strict=True):
            _ack(node, controller, handler, update)
        node.quiesce()
        assert len(_got(node, client, kind)) == 1, "answered twice"
    topics = node.ask(controller, GetStats())["topics"]
    assert "t" not in topics  # created, grown to 3, then deleted: each change was made
    partitions = [u.topics["t"][0] for u in _updates(node, handlers, 2)]
    assert partitions == [3] * HANDLERS


def test_a_change_whose_shard_does_not_answer_is_answered_timed_out(
        manual_node: Node, tmp_path: Path) -> None:
    """The wait for the shards is bounded by timeout_ms too (a request of the broker's
    own, with no timeout, still waits for them)."""
    node = manual_node
    controller, _handlers, client = _start(node, tmp_path)
    node.stop_actor(Topology(node.name, 1, HANDLERS, 1, 1, 1).shard(0).name)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})], 500),
              sender=client.name)
    node.quiesce()  # the Controller has the request (its clock starts then)
    node.advance_clock(499)
    assert _got(node, client, CreateTopicsDone) == []
    node.advance_clock(1)
    [answer] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the answer")
    assert [r[1] for r in answer.rows] == [TIMED_OUT]
    assert "t" in node.ask(controller, GetStats())["topics"], "the change was not written"


def test_a_zero_timeout_waits_for_every_handler_as_no_timeout_does(
        manual_node: Node, tmp_path: Path) -> None:
    """timeout_ms <= 0 (confluent-kafka's default): answered once every handler applied
    the table, never REQUEST_TIMED_OUT, so the client's next read elsewhere sees it."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})], 0),
              sender=client.name)
    _updates(node, handlers, 1)
    node.advance_clock(1_000)
    node.quiesce()
    assert _got(node, client, CreateTopicsDone) == [], "answered before the handlers"
    _ack_all(node, controller, handlers, 1)
    [answer] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the answer")
    assert [r[1] for r in answer.rows] == [0]
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("t")], -1), sender=client.name)
    _updates(node, handlers, 2)
    node.quiesce()
    assert _got(node, client, DeleteTopicsDone) == [], "answered before the handlers"
    _ack_all(node, controller, handlers, 2)
    [deleted] = wait_for(lambda: _got(node, client, DeleteTopicsDone), "the delete's answer")
    assert [r[1] for r in deleted.rows] == [0]


def test_a_timeout_longer_than_the_give_up_is_answered_at_the_give_up(
        manual_node: Node, tmp_path: Path) -> None:
    """A handler silent for ACK_WAIT_NS is taken as restarting (it reads the table from
    the file): a longer timeout_ms gets the same success at the give-up."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    wait_ms = ACK_WAIT_NS // 1_000_000
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})],
                                       3 * wait_ms), sender=client.name)
    _updates(node, handlers, 1)
    node.advance_clock(wait_ms - 1)
    node.quiesce()
    assert _got(node, client, CreateTopicsDone) == []
    node.advance_clock(1)
    [answer] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the answer")
    assert [r[1] for r in answer.rows] == [0]


def test_a_topic_change_is_sent_and_answered_after_a_crash_before_its_broadcast(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard opened the new topic's partitions; the Controller crashes as it sends the
    table to the handlers. The change was recorded as awaited before, and is kept over the
    restart: the new life sends the table again, and answers the client once every handler
    acknowledged it. Before, the crash lost it: the topic was in the store, no handler
    knew it (until the next topic change) and the client was never answered."""
    node = manual_node
    controller, handlers, client = _create_through_a_crash(
        node, tmp_path, fail_once(monkeypatch, Controller, "_broadcast"))
    created = _answered_after_every_ack(node, controller, handlers, client, 1,
                                        CreateTopicsDone)
    assert [r[1] for r in created.rows] == [0]
    assert all("t" in u.topics for u in _updates(node, handlers, 1))

    # the ids go on over the restart: the next change is acknowledged and answered
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("t")]), sender=client.name)
    deleted = _answered_after_every_ack(node, controller, handlers, client, 2,
                                        DeleteTopicsDone)
    assert [r[1] for r in deleted.rows] == [0]



def test_a_table_that_cannot_be_sent_is_tried_a_bounded_number_of_times(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table cannot be built (every try raises): the broadcast crashes the Controller,
    the new life's sends again crash it RESEND_TRIES times, then it stops trying (it is not
    crashed until supervision stops it) and the give-up answers the client."""
    node = manual_node
    controller, _handlers, client = _start(node, tmp_path)

    def broken(_self: Any) -> Any:
        raise RuntimeError("a table that cannot be built")

    monkeypatch.setattr(TopicStore, "table", broken)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    wait_for(lambda: node.actors[controller.name].crashes == 1 + RESEND_TRIES, "every try")
    node.quiesce()
    assert node.actors[controller.name].crashes == 1 + RESEND_TRIES
    node.advance_clock(ACK_WAIT_NS // 1_000_000)
    [created] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the answer")
    assert [r[1] for r in created.rows] == [0]


def _hosted(node: Node, topic: str) -> list[str]:
    """The partitions of ``topic`` the shard has open."""
    shard = Topology(node.name, 1, HANDLERS, 1, 1, 1).shard(0)
    return sorted(p for p in node.ask(shard, GetStats())["partitions"]
                  if p.rsplit("-", 1)[0] == topic)


def test_a_change_written_before_a_crash_reaches_the_shards_and_the_handlers(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Controller crashes right after writing each change to its store, before it
    told the shard: the change was recorded before the write and is kept over the
    restart, so the new life has the shard apply it and every handler learn it, before it
    handles anything else. Before, the change was in the store alone: a created topic
    or its added partitions no shard opened (produce answered NOT_LEADER for good), a
    deleted topic's logs stayed open and on disk, until the broker's restart."""
    crash = fail_once(monkeypatch, TopicStore, "save", after=True)
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    asks: list[tuple[Any, type, list[str]]] = [
        (CreateTopics(1, False, [CreateTopicRow("t", 2, 1, {})]), CreateTopicsDone,
         ["t-0", "t-1"]),
        (CreatePartitions(2, False, [CreatePartitionsRow("t", 3, None)]),
         CreatePartitionsDone, ["t-0", "t-1", "t-2"]),
        (DeleteTopics(3, [DeleteTopicRow("t")]), DeleteTopicsDone, []),
    ]
    for count, (ask, kind, hosted) in enumerate(asks, 1):
        crash["crash"] = True
        node.tell(controller, ask, sender=client.name)
        wait_for(lambda c=count: node.actors[controller.name].crashes == c, "the crash")
        wait_for(lambda h=hosted: _hosted(node, "t") == h, f"the shard to host {hosted}")
        partitions = [u.topics["t"][0] if "t" in u.topics else 0
                      for u in _updates(node, handlers, count)]
        assert partitions == [len(hosted)] * HANDLERS
        _ack_all(node, controller, handlers, count)
        # the request that crashed is answered too (its handler may have given up)
        [answer] = wait_for(lambda k=kind: _got(node, client, k), f"the {kind.__name__}")
        assert [r[1] for r in answer.rows] == [0]
    assert not list((tmp_path / "logs").glob("t-*")), "the deleted logs stayed on disk"
    assert "t" not in TopicStore.load(tmp_path / "logs").topics


def test_a_shard_answer_lost_in_a_crash_is_asked_again(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Controller crashes on the shard's ShardDone (lost: a message whose handler
    crashed is not handled again). The new life sends the change to the shard again; it
    opens nothing twice, answers again, and the change goes on to the handlers and the
    client. Before, the change waited for that answer for good: the client was never
    answered, and the handlers learnt the topic only with the next change."""
    node = manual_node
    controller, handlers, client = _create_through_a_crash(
        node, tmp_path, crash_once(monkeypatch, Controller, "on_shard_done", ShardDone))
    created = _answered_after_every_ack(node, controller, handlers, client, 1,
                                        CreateTopicsDone)
    assert [r[1] for r in created.rows] == [0]
    assert _hosted(node, "t") == ["t-0", "t-1"]


def test_the_change_after_a_crashed_one_is_applied_after_it(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DeleteTopics crashes after its write; a CreateTopics of the same name follows at
    once: the delete reaches the shard first, so the new topic's partitions are open, the
    first one an empty log (not the deleted topic's), and stay so."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    _ack_all(node, controller, handlers, 1)
    wait_for(lambda: _got(node, client, CreateTopicsDone), "the first create")
    shard = Topology(node.name, 1, HANDLERS, 1, 1, 1).shard(0)
    node.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([b"old"]))]),
              sender=client.name)
    wait_for(lambda: node.ask(shard, GetStats())["partitions"]["t-0"][2] == 1, "the record")
    crash = fail_once(monkeypatch, TopicStore, "save", after=True)
    crash["crash"] = True
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("t")]), sender=client.name)
    node.tell(controller, CreateTopics(3, False, [CreateTopicRow("t", 2, 1, {})]),
              sender=client.name)
    wait_for(lambda: node.actors[controller.name].crashes == 1, "the crash")
    for count in (2, 3):
        _ack_all(node, controller, handlers, count)
    wait_for(lambda: len(_got(node, client, CreateTopicsDone)) == 2, "the second create")
    node.quiesce()
    assert _hosted(node, "t") == ["t-0", "t-1"]
    assert node.ask(shard, GetStats())["partitions"]["t-0"] == [0, 0, 0], \
        "the deleted topic's log serves its namesake"
    assert [u.topics["t"][0] for u in _updates(node, handlers, 3)] == [2] * HANDLERS


def test_an_answer_that_changes_nothing_waits_for_the_change_before_it(
        manual_node: Node, tmp_path: Path) -> None:
    """Client A creates "t"; while the handlers have not all applied the new table, client
    B's CreateTopics of "t" (TOPIC_ALREADY_EXISTS), its validate_only CreatePartitions, its
    AlterConfigs that changes nothing and its DeleteTopics of an unknown topic are held:
    answered with A's answer, after the last acknowledgement, so that B's next read on
    another connection sees "t" as A's does. Before, B was answered at once, "t" unknown
    yet to the handler of B's next request. With nothing awaited, B is answered at once."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    other = node.spawn(Recorder, "other-client")
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    updates = _updates(node, handlers, 1)
    asks: list[tuple[Any, type, int]] = [
        (CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]), CreateTopicsDone,
         int(ErrorCode.TOPIC_ALREADY_EXISTS)),
        (CreatePartitions(2, True, [CreatePartitionsRow("t", 2, None)]),
         CreatePartitionsDone, 0),
        (AlterTopicConfigs(3, False, True, [AlterTopicConfigsRow("t", [])]),
         AlterTopicConfigsDone, 0),
        (DeleteTopics(4, [DeleteTopicRow("none")]), DeleteTopicsDone,
         int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)),
    ]
    for ask, _kind, _code in asks:
        node.tell(controller, ask, sender=other.name)
    for handler, update in zip(handlers, updates, strict=True):
        node.quiesce()
        assert _got(node, other, CreateTopicsDone) == []
        held = [k.__name__ for _a, k, _c in asks if _got(node, other, k)]
        assert held == [], f"answered before the handlers applied the change: {held}"
        _ack(node, controller, handler, update)
    wait_for(lambda: _got(node, client, CreateTopicsDone), "A's answer")
    for ask, kind, code in asks:
        [answer] = wait_for(lambda k=kind: _got(node, other, k), f"B's {kind.__name__}")
        assert answer.req_id == ask.req_id and [r[1] for r in answer.rows] == [code]
    # nothing awaited: answered at once, without any acknowledgement
    node.tell(controller, CreateTopics(5, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=other.name)
    wait_for(lambda: len(_got(node, other, CreateTopicsDone)) == 2, "the answer at once")


def test_a_held_answer_goes_at_its_timeout_or_the_give_up(
        manual_node: Node, tmp_path: Path) -> None:
    """A handler never acknowledges the change before it: the held answer goes at its
    request's timeout_ms (as it is: it changed nothing), or without one when the change
    itself is given up (ACK_WAIT_NS)."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    other = node.spawn(Recorder, "other-client")
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    updates = _updates(node, handlers, 1)
    _ack(node, controller, handlers[0], updates[0])  # the others never do
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("none")], 500), sender=other.name)
    node.tell(controller, CreateTopics(3, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=other.name)
    node.quiesce()
    node.advance_clock(499)
    assert _got(node, other, DeleteTopicsDone) == []
    node.advance_clock(1)
    [deleted] = wait_for(lambda: _got(node, other, DeleteTopicsDone), "the timeout's answer")
    assert [r[1] for r in deleted.rows] == [int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    node.advance_clock(ACK_WAIT_NS // 1_000_000 - 501)
    node.quiesce()
    assert _got(node, other, CreateTopicsDone) == [], "answered before the give-up"
    node.advance_clock(1)
    wait_for(lambda: _got(node, client, CreateTopicsDone), "A's answer at the give-up")
    [exists] = wait_for(lambda: _got(node, other, CreateTopicsDone), "B's at the give-up")
    assert [r[1] for r in exists.rows] == [int(ErrorCode.TOPIC_ALREADY_EXISTS)]


def test_a_crash_on_the_last_shard_answer_completes_the_change_after_the_restart(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Controller crashes on the shard's (last) ShardDone after counting it, before
    the change went on to the handlers: the new life finds it pending with no shard left
    to answer, and completes it (table to the handlers, then the answer). Before, it sent
    the change to nobody and waited for an answer that never came: never answered, the
    handlers never told."""
    node = manual_node
    controller, handlers, client = _create_through_a_crash(
        node, tmp_path, fail_once(monkeypatch, Topology, "all_handlers"))
    assert _hosted(node, "t") == ["t-0", "t-1"]
    created = _answered_after_every_ack(node, controller, handlers, client, 1,
                                        CreateTopicsDone)
    assert [r[1] for r in created.rows] == [0]
    assert all(u.topics["t"][0] == 2 for u in _updates(node, handlers, 1))


def test_a_change_no_shard_answers_is_given_up(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard crashes on the OpenPartitions (lost with the crash): it never answers.
    The answer held behind the change goes at its own cap (ACK_WAIT_NS); at
    PENDING_GIVE_UP_NS the change is given up, once, with an error: its requester (without
    a timeout) is answered UNKNOWN_SERVER_ERROR, the handlers get the table all the same,
    and a later request that changes nothing is answered at once. Before, the change
    stayed pending for good: never answered, and every answer that changes nothing
    waited ACK_WAIT_NS."""
    crash = crash_once(monkeypatch, PartitionShard, "on_open", OpenPartitions)
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    other = node.spawn(Recorder, "other-client")
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="ERROR")
    try:
        crash["crash"] = True
        node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
                  sender=client.name)
        shard = Topology(node.name, 1, HANDLERS, 1, 1, 1).shard(0)
        wait_for(lambda: node.actors[shard.name].crashes == 1, "the shard's crash")
        node.tell(controller, CreateTopics(2, False, [CreateTopicRow("t", 1, 1, {})]),
                  sender=other.name)
        node.quiesce()
        node.advance_clock(ACK_WAIT_NS // 1_000_000)
        [exists] = wait_for(lambda: _got(node, other, CreateTopicsDone), "the held answer")
        assert [r[1] for r in exists.rows] == [int(ErrorCode.TOPIC_ALREADY_EXISTS)]
        node.advance_clock((PENDING_GIVE_UP_NS - ACK_WAIT_NS) // 1_000_000 - 1)
        node.quiesce()
        assert _got(node, client, CreateTopicsDone) == [], "given up too early"
        node.advance_clock(1)
        [created] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the give-up")
        assert [r[1] for r in created.rows] == [int(ErrorCode.UNKNOWN_SERVER_ERROR)]
        assert "partition shard" in str(created.rows[0][2])
        assert all("t" in u.topics for u in _updates(node, handlers, 1)), "table not sent"
        node.tell(controller, CreateTopics(3, False, [CreateTopicRow("t", 1, 1, {})]),
                  sender=other.name)
        wait_for(lambda: len(_got(node, other, CreateTopicsDone)) == 2, "answered at once")
        node.advance_clock(ACK_WAIT_NS // 1_000_000)
        node.quiesce()
        assert len([ln for ln in lines if "given up" in ln]) == 1, lines
    finally:
        logger.remove(sink)


def test_a_lost_answer_does_not_apply_the_change_again_over_a_newer_one(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Delete "t" then create it anew: the shard applies both, and the new "t" takes a
    record; the Controller crashes on the delete's ShardDone (lost), with the create's
    behind it. The new life must not send the delete (nor the create) again: the shard
    would drop the new "t" and its record. It asks the shard instead (an empty message of
    that id), which answers it, and both changes complete; the new "t" keeps its data."""
    hold = threading.Event()
    armed = crash_once(monkeypatch, Controller, "on_shard_done", ShardDone, hold)
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    shard = Topology(node.name, 1, HANDLERS, 1, 1, 1).shard(0)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    _ack_all(node, controller, handlers, 1)
    wait_for(lambda: _got(node, client, CreateTopicsDone), "the first create")
    armed["crash"] = True
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("t")]), sender=client.name)
    node.tell(controller, CreateTopics(3, False, [CreateTopicRow("t", 2, 1, {})]),
              sender=client.name)
    # the Controller holds in the crashing handler; the shard has done both, and the new
    # t-0 takes a record
    wait_for(lambda: _hosted(node, "t") == ["t-0", "t-1"], "the new topic's partitions")
    node.tell(shard, Append(1, 1, 30_000, [AppendRow("t", 0, build_batch([b"new"]))]),
              sender=client.name)
    wait_for(lambda: node.ask(shard, GetStats())["partitions"]["t-0"][2] == 1, "the record")
    hold.set()
    wait_for(lambda: node.actors[controller.name].crashes == 1, "the crash")
    for count in (2, 3):
        _ack_all(node, controller, handlers, count)
    wait_for(lambda: len(_got(node, client, CreateTopicsDone)) == 2, "the second create")
    [deleted] = wait_for(lambda: _got(node, client, DeleteTopicsDone), "the delete")
    assert [r[1] for r in deleted.rows] == [0]
    node.quiesce()
    assert _hosted(node, "t") == ["t-0", "t-1"], "the old delete dropped the new topic"
    assert node.ask(shard, GetStats())["partitions"]["t-0"][2] == 1, "the record is lost"
    assert "t" in TopicStore.load(tmp_path / "logs").topics
    assert [u.topics["t"][0] for u in _updates(node, handlers, 3)] == [2] * HANDLERS


def test_a_change_never_written_is_given_up_unmade_and_never_sent_to_the_handlers(
        manual_node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of the store fails (the Controller crashes on each): the change is
    recorded, written again by RESEND_TRIES new lives, then given up at PENDING_GIVE_UP_NS.
    Its requester is answered UNKNOWN_SERVER_ERROR (not written, not made), the handlers
    are sent nothing (the store never had it), and the table in memory is the store's
    again: the next change, written, does not bring it in. Before, the give-up sent every
    handler the table in memory with the unwritten topic in it (a topic no shard opened,
    that a restarted process would not know), and the next write put it in the store.
    The '.'/'_' index of the names goes back with the table: the given-up name's twin
    (t_x for t.x) is made, not refused as colliding with a topic that does not exist."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    real = TopicStore.save
    failing = {"on": True}

    def save(self: TopicStore) -> None:
        if failing["on"]:
            raise OSError("a disk that takes no write")
        real(self)

    monkeypatch.setattr(TopicStore, "save", save)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t.x", 1, 1, {})]),
              sender=client.name)
    wait_for(lambda: node.actors[controller.name].crashes == 1 + RESEND_TRIES, "every try")
    node.quiesce()
    assert "t.x" in node.ask(controller, GetStats())["topics"]  # in memory, not written
    node.advance_clock(PENDING_GIVE_UP_NS // 1_000_000)
    [answer] = wait_for(lambda: _got(node, client, CreateTopicsDone), "the give-up")
    assert [r[1] for r in answer.rows] == [int(ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert "could not be written" in str(answer.rows[0][2])
    node.quiesce()
    assert [_got(node, h, MetadataUpdate) for h in handlers] == [[]] * HANDLERS, \
        "the handlers were sent a table the store never had"
    assert "t.x" not in node.ask(controller, GetStats())["topics"]

    failing["on"] = False
    node.tell(controller, CreateTopics(2, False, [CreateTopicRow("t_x", 1, 1, {})]),
              sender=client.name)
    _ack_all(node, controller, handlers, 1)
    wait_for(lambda: len(_got(node, client, CreateTopicsDone)) == 2, "the next create")
    made = _got(node, client, CreateTopicsDone)[1]
    assert [r[1] for r in made.rows] == [0], made
    assert sorted(TopicStore.load(tmp_path / "logs").topics) == ["t_x"]
    assert [sorted(u.topics) for u in _updates(node, handlers, 1)] == [["t_x"]] * HANDLERS
    assert _hosted(node, "t.x") == []


class ShardKeeper(Actor):
    """A shard of process 1 that answers nothing (its process is about to die): keeps what
    comes, as [type name, message]."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(OpenPartitions, DropPartitions)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, msg])

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


@pytest.mark.parametrize("unwritten_delete", [False, True], ids=["written", "unwritten"])
def test_a_restarted_process_has_its_shards_asked_for_the_pending_changes_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unwritten_delete: bool) -> None:
    """Process 1's shard never answers three changes: topics a and b created, both deleted,
    b created anew (a namesake). Process 1 restarts (ProcessStarted): the Controller asks
    its new shard at once for each change, never applying one again: the creates get an
    empty OpenPartitions of their id (the new shard opened the table as written); the
    delete is sent again for a-0 alone (its directory must go), not for b-0, the
    namesake's now. Before, the Controller was not told, and each change waited for the
    give-up (60 s).

    ``unwritten``: a second delete of b (the namesake) is then never written (each write
    of the store fails): b is gone from the table in memory but not from the store the
    new shard opened, so the first delete is still sent again for a-0 alone."""
    with two_processes(tmp_path) as (main, p1, _manager):
        topo = Topology("node-1", 1, 1, 2, 2, 1, home="node-1",
                        process_nodes=("node-1", "node-1-p1"))
        shard = topo.shard(1)
        assert shard.node == p1.name
        names = [n for n in (f"t{i}" for i in range(100))
                 if topo.shard_for(n, 0) == shard][:2]
        a, b = names
        p1.spawn(ShardKeeper, shard.name)
        controller = main.spawn(Controller, topo.controller.name, topology=topo,
                                config=Config(), store=TopicStore.load(tmp_path / "logs"))
        client = main.spawn(Recorder, "client")
        for ask in (CreateTopics(1, False, [CreateTopicRow(a, 1, 1, {}),
                                            CreateTopicRow(b, 1, 1, {})]),
                    DeleteTopics(2, [DeleteTopicRow(a), DeleteTopicRow(b)]),
                    CreateTopics(3, False, [CreateTopicRow(b, 1, 1, {})])):
            main.tell(controller, ask, sender=client.name)
        before = wait_for(lambda: (lambda g: g if len(g) == 3 else None)(
            p1.ask(shard, GetStats())), "the three changes at process 1's shard")
        ids = [msg[0] for _name, msg in before]
        assert [name for name, _msg in before] == ["OpenPartitions", "DropPartitions",
                                                   "OpenPartitions"]
        if unwritten_delete:
            def save(_store: TopicStore) -> None:
                raise OSError("a disk that takes no write")

            monkeypatch.setattr(TopicStore, "save", save)
            main.tell(controller, DeleteTopics(4, [DeleteTopicRow(b)]), sender=client.name)
            wait_for(lambda: main.actors[controller.name].crashes == 1 + RESEND_TRIES,
                     "every write of the second delete")
            assert b not in main.ask(controller, GetStats())["topics"]  # in memory only
            main.quiesce()
            p1.quiesce()  # (each new life asked the shard again: probes, counted here)
        seen = len(p1.ask(shard, GetStats()))

        main.tell(controller, ProcessStarted(1, True, 1))

        after = wait_for(lambda: (lambda g: g[seen:] if len(g) == seen + 3 else None)(
            p1.ask(shard, GetStats())), "the pending changes asked again")
        assert [(name, msg[0], sorted(tuple(r) for r in msg[1])) for name, msg in after] == [
            ("OpenPartitions", ids[0], []),
            ("DropPartitions", ids[1], [(a, 0)]),
            ("OpenPartitions", ids[2], []),
        ]
        if not unwritten_delete:
            assert main.ask(controller, GetStats())["topics"].keys() == {b}


def test_create_answers_the_topic_id_and_a_delete_by_a_stale_id_keeps_the_topic(
        manual_node: Node, tmp_path: Path) -> None:
    """The id CreateTopicsDone answers is the one every handler's table gets; a delete
    naming the topic by another id (a deleted namesake's) is UNKNOWN_TOPIC_ID and
    deletes nothing; by its own id it deletes and answers the id."""
    node = manual_node
    controller, handlers, client = _start(node, tmp_path)
    node.tell(controller, CreateTopics(1, False, [CreateTopicRow("t", 1, 1, {})]),
              sender=client.name)
    [created] = _answered_after_every_ack(node, controller, handlers, client, 1,
                                          CreateTopicsDone).rows
    topic_id = CreateTopicDoneRow(*created).topic_id
    assert topic_id and all(u.topics["t"][2] == topic_id for u in _updates(node, handlers, 1))
    stale = new_topic_id()  # a well-formed id no topic has
    node.tell(controller, DeleteTopics(2, [DeleteTopicRow("t", stale)]), sender=client.name)
    [refused] = wait_for(lambda: _got(node, client, DeleteTopicsDone), "the refusal")
    assert [r[1] for r in refused.rows] == [int(ErrorCode.UNKNOWN_TOPIC_ID)]
    assert "t" in node.ask(controller, GetStats())["topics"]
    node.tell(controller, DeleteTopics(3, [DeleteTopicRow("t", topic_id)]), sender=client.name)
    _ack_all(node, controller, handlers, 2)
    [_refused, deleted] = wait_for(lambda: (lambda got: got if len(got) == 2 else None)(
        _got(node, client, DeleteTopicsDone)), "the delete's answer")
    assert [(r[1], r[3]) for r in deleted.rows] == [(0, topic_id)]
    assert "t" not in node.ask(controller, GetStats())["topics"]
