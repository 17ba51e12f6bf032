"""The ReplicaManager answers a wait for topics once every handler of the node serves them.

In cluster mode each RequestHandler (those of processes 1.. too) answers Metadata from its
own copy of the metadata, which the ReplicaManager forwards; a client told its topic was
created (or deleted) may ask on another connection, held by another handler, at once. So
the ReplicaManager follows each UpdateMetadata with a MetadataSync(version) and answers an
AwaitTopics only once its metadata shows what is awaited and every handler acknowledged
(MetadataSynced) the version that first showed it; a handler silent for SYNC_WAIT_MS (its
process is restarting) is given up on with a warning naming it. timeout_ms <= 0 waits the
same way; a positive timeout_ms is answered by then, the topics not yet everywhere named.

The real ReplicaManager on a ManualClock; recorders take the two handlers' places and the
test says when each acknowledges.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from actors.core.metadata_cache import SYNC_WAIT_MS
from actors.replica_manager import ReplicaManager
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import Topology
from tests.fixtures.two_processes import two_processes
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import (
    AwaitTopics,
    BrokerRegistered,
    BrokerRow,
    MetadataSync,
    MetadataSynced,
    ProcessStarted,
    TopicsAwaited,
    UpdateMetadata,
    UpdateMetadataPartition,
    UpdateMetadataResponse,
)

E = 4 << 32  # ids of controller epoch 4, as its channel gives them
LIVE = [BrokerRow(1, 5, "", None, [])]


class Recorder(Actor):
    """A handler's (or the controller's) place: keeps the syncs and answers it gets."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(MetadataSync, TopicsAwaited, UpdateMetadataResponse)
    def on_any(self, msg: Any) -> None:
        self.got.append([type(msg).__name__, list(msg)])

    @handles(UpdateMetadata, ProcessStarted)
    def on_update(self, _msg: Any) -> None:
        pass  # what a handler's cache takes; the syncs that follow it are what is kept

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return list(self.got)


def _partition(topic: str, index: int = 0) -> UpdateMetadataPartition:
    return UpdateMetadataPartition(topic, index, 4, 1, 1, [1], 1, [1], [])


class _Node:
    """The ReplicaManager with two recorded handlers and a recorded controller."""

    def __init__(self, node: Node) -> None:
        self.node = node
        topo = Topology(node.name, 1, 2, 1, 1, 1)
        self.manager = node.spawn(ReplicaManager, topo.replica_manager.name, topology=topo,
                                  config=Config(), broker_id=1, clock=node.clock)
        self.controller = node.spawn(Recorder, topo.controller.name)
        self.handlers = [node.spawn(Recorder, topo.handler(i).name) for i in range(2)]
        self.correlation = 0
        node.tell(self.manager, BrokerRegistered(1, 5), sender=self.controller.name)

    def update(self, full: bool, topics: list[str], partitions: int = 1) -> int:
        """An UpdateMetadata listing ``partitions`` of each of ``topics``; the version each
        handler is asked to sync."""
        self.correlation += 1
        self.node.tell(self.manager, UpdateMetadata(
            2, 4, 5, full, LIVE, [_partition(t, i) for t in topics for i in range(partitions)],
            {t: {} for t in topics},
            E + self.correlation), sender=self.controller.name)
        syncs = wait_for(lambda: (lambda s: s if all(len(x) >= self.correlation for x in s)
                                  else None)([self._got(h, "MetadataSync")
                                              for h in self.handlers]),
                         f"sync {self.correlation} at both handlers")
        versions = {s[self.correlation - 1][0] for s in syncs}
        assert len(versions) == 1
        return versions.pop()

    def _got(self, who: Address, kind: str) -> list[Any]:
        return [fields for name, fields in self.node.ask(who, GetStats()) if name == kind]

    def ack(self, i: int, version: int) -> None:
        self.node.tell(self.manager, MetadataSynced(version), sender=self.handlers[i].name)

    def wait(self, req_id: int, topics: list[str], present: bool, timeout_ms: int,
             at_least: dict[str, int] | None = None) -> None:
        self.node.tell(self.manager, AwaitTopics(req_id, topics, present, timeout_ms,
                                                 at_least or {}),
                       sender=self.handlers[0].name)

    def answers(self) -> list[Any]:
        """The TopicsAwaited handler-0 got, once what the manager had sent has arrived."""
        self.node.ask(self.manager, GetStats())  # the manager is past what was told it
        return self._got(self.handlers[0], "TopicsAwaited")


def test_a_wait_is_answered_once_every_handler_applied_the_topic(manual_node: Node) -> None:
    n = _Node(manual_node)
    version = n.update(True, ["t"])
    n.wait(1, ["t"], True, 60_000)
    assert n.answers() == []  # shown here, acknowledged by no handler
    n.ack(0, version)
    assert n.answers() == []  # handler-1 may still answer Metadata without t
    n.ack(1, version + 1)  # not a version it was sent: acknowledges nothing
    assert n.answers() == []
    n.ack(1, version)
    assert wait_for(n.answers, "the answer") == [[1, []]]

    # a deletion likewise: the full update without t, acknowledged by both
    gone = n.update(True, [])
    n.wait(2, ["t"], False, 60_000)
    n.ack(1, gone)
    assert n.answers() == [[1, []]]
    n.ack(0, gone)
    assert wait_for(lambda: (lambda a: a if len(a) == 2 else None)(n.answers()),
                    "the deletion's answer")[1] == [2, []]

    # both at the current version: a wait for what is shown is answered at once
    n.wait(3, ["u"], False, 60_000)
    assert wait_for(lambda: (lambda a: a if len(a) == 3 else None)(n.answers()),
                    "the answer at once")[2] == [3, []]


def test_a_silent_handler_is_given_up_on_and_named(manual_node: Node) -> None:
    """timeout_ms 0 waits too (confluent-kafka's default), bounded by SYNC_WAIT_MS; a
    positive timeout_ms shorter than that is answered with the topic named missing."""
    n = _Node(manual_node)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        version = n.update(True, ["t"])
        n.wait(1, ["t"], True, 0)
        n.ack(0, version)
        assert n.answers() == []  # (and the manager took both before the clock moves)
        manual_node.advance_clock(SYNC_WAIT_MS - 1)
        assert n.answers() == []
        manual_node.advance_clock(1)
        assert wait_for(n.answers, "the answer at the give-up") == [[1, []]]
        assert manual_node.ask(n.manager, GetStats())["sync_give_ups"] == 1
        assert any("handler-1" in line and f"version {version}" in line for line in lines), \
            lines

        # given up on: not waited for again until it confirms something (a stopped
        # process costs one give-up, not one every topic change)
        later = n.update(False, ["u"])
        n.wait(2, ["u"], True, 500)
        n.ack(0, later)
        got = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(n.answers()),
                       "the answer without the handler given up on")
        assert got[1] == [2, []]
        n.ack(1, later)  # back: waited for again
        again = n.update(False, ["v"])
        n.wait(3, ["v"], True, 500)
        n.ack(0, again)
        assert len(n.answers()) == 2
        manual_node.advance_clock(500)
        got = wait_for(lambda: (lambda a: a if len(a) == 3 else None)(n.answers()),
                       "the answer at timeout_ms")
        assert got[2] == [3, ["v"]]  # shown here, not by handler-1: not everywhere in time
        n.ack(1, again)
        n.wait(4, ["v"], True, 500)
        assert wait_for(lambda: (lambda a: a if len(a) == 4 else None)(n.answers()),
                        "the answer at once")[3] == [4, []]
    finally:
        logger.remove(sink)


def test_a_wait_for_new_partitions_waits_for_them_everywhere(manual_node: Node) -> None:
    """A CreatePartitions' wait: the topic shown with its old partitions is not enough."""
    n = _Node(manual_node)
    version = n.update(True, ["t"])
    n.ack(0, version)
    n.ack(1, version)
    n.wait(1, ["t"], True, 60_000, {"t": 3})
    assert n.answers() == []  # one partition of the three
    grown = n.update(False, ["t"], 3)
    n.ack(0, grown)
    assert n.answers() == []  # handler-1 still serves one
    n.ack(1, grown)
    assert wait_for(n.answers, "the answer") == [[1, []]]


def test_a_restarted_process_counts_only_once_it_confirms_its_snapshot(tmp_path: Any) -> None:
    """Process 1 restarted while a wait needed its handler: a sync of its earlier life
    still queued to it (the links deliver what was queued, before the snapshot) confirms
    nothing; only the snapshot's own version, which every handler is sent, does."""
    with two_processes(tmp_path) as (main, p1, manager):
        controller = main.spawn(Recorder, "controller")
        h0 = main.spawn(Recorder, "handler-0")
        h1 = p1.spawn(Recorder, "handler-0")
        main.tell(manager, BrokerRegistered(1, 5), sender=controller.name)
        main.tell(manager, UpdateMetadata(2, 4, 5, True, LIVE, [_partition("t")], {"t": {}},
                                          E + 1), sender=controller.name)

        def got(who: Any, node: Node, kind: str, count: int) -> list[Any]:
            return list(wait_for(lambda: (lambda g: g if len(g) >= count else None)(
                [f for name, f in node.ask(who, GetStats()) if name == kind]),
                f"{count} {kind} at {who}"))

        [[version]] = got(h0, main, "MetadataSync", 1)
        main.tell(manager, MetadataSynced(version), sender=h0.name)
        main.tell(manager, AwaitTopics(1, ["t"], True, 0, {}), sender=h0.name)  # needs h1
        main.ask(manager, ProcessStarted(1, True, 1))
        floor = got(h1, p1, "MetadataSync", 2)[1][0]
        assert floor > version and got(h0, main, "MetadataSync", 2)[1] == [floor]
        # the earlier life's confirmation, delivered to the new life late, then a wait of
        # its own from the same sender (answered at its 1 ms timeout: the first was taken)
        p1.tell(manager, MetadataSynced(version), sender=h1.name)
        p1.tell(manager, AwaitTopics(9, ["t"], True, 1, {}), sender=h1.name)
        assert got(h1, p1, "TopicsAwaited", 1)[0][0] == 9
        assert [f for name, f in main.ask(h0, GetStats()) if name == "TopicsAwaited"] == [], \
            "answered on a confirmation of the process's earlier life"
        main.tell(manager, MetadataSynced(floor), sender=h0.name)
        p1.tell(manager, MetadataSynced(floor), sender=h1.name)
        assert got(h0, main, "TopicsAwaited", 1) == [[1, []]]


def test_a_change_shown_late_in_a_wait_gives_the_handlers_their_whole_window(
        manual_node: Node) -> None:
    """timeout_ms 0, the topic shown 1 ms before the wait's own SYNC_WAIT_MS is up: the
    handlers are given SYNC_WAIT_MS from the showing to acknowledge it, so a live one
    acknowledging 5 s later is not given up on (it would be waited for no more, and the
    next change answered without it); a silent one is given up on SYNC_WAIT_MS after the
    showing, not later (the wait stays bounded: 2 * SYNC_WAIT_MS from its arrival)."""
    n = _Node(manual_node)
    n.wait(1, ["t"], True, 0)
    assert n.answers() == []  # (and the manager took the wait at this time)
    manual_node.advance_clock(SYNC_WAIT_MS - 1)
    version = n.update(True, ["t"])
    n.ack(0, version)
    manual_node.advance_clock(1)  # the wait's arrival + SYNC_WAIT_MS
    assert n.answers() == [], "given up on a live handler 1 ms after the change showed"
    # past its deadline, the wait's next moment is its give-up, not "now" (a spinning loop)
    assert manual_node.actor(n.manager.name).poll_timeout_ms() == SYNC_WAIT_MS - 1
    manual_node.advance_clock(5_000)
    assert n.answers() == []
    n.ack(1, version)
    assert wait_for(n.answers, "the answer on the acknowledgement") == [[1, []]]
    assert manual_node.ask(n.manager, GetStats())["sync_give_ups"] == 0

    # the bound: shown late again, handler-1 silent this time
    n.wait(2, ["u"], True, 0)
    assert len(n.answers()) == 1  # (and the manager took the wait at this time)
    manual_node.advance_clock(SYNC_WAIT_MS - 1)
    later = n.update(True, ["t", "u"])
    n.ack(0, later)
    manual_node.advance_clock(SYNC_WAIT_MS - 1)
    assert len(n.answers()) == 1
    manual_node.advance_clock(1)  # SYNC_WAIT_MS after the showing
    got = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(n.answers()),
                   "the answer at the give-up")
    assert got[1] == [2, []]
    assert manual_node.ask(n.manager, GetStats())["sync_give_ups"] == 1


def test_a_wait_without_timeout_is_bounded_however_the_change_comes_and_goes(
        manual_node: Node) -> None:
    """A topic shown, then not (its leader lost), then shown again 1 ms before the wait's
    arrival + SYNC_WAIT_MS: the handlers get SYNC_WAIT_MS from the second showing, and no
    more (2 * SYNC_WAIT_MS from the arrival at most); not shown by its arrival +
    SYNC_WAIT_MS, a wait is answered then, as before, and shown then lost after that too."""
    n = _Node(manual_node)
    n.wait(1, ["t"], True, 0)
    assert n.answers() == []  # (and the manager took the wait at this time)
    manual_node.advance_clock(SYNC_WAIT_MS // 2)
    first = n.update(True, ["t"])
    n.ack(0, first)
    lost = n.update(True, [])  # gone again before handler-1 acknowledged
    n.ack(0, lost)
    n.ack(1, lost)  # (handler-1 is live: acknowledges what came since)
    manual_node.advance_clock(SYNC_WAIT_MS // 2 - 1)
    again = n.update(True, ["t"])  # shown again 1 ms before the arrival + SYNC_WAIT_MS
    n.ack(0, again)
    manual_node.advance_clock(SYNC_WAIT_MS - 1)
    assert n.answers() == []
    manual_node.advance_clock(1)  # the arrival + 2 * SYNC_WAIT_MS - 1: the second's window
    assert wait_for(n.answers, "the answer at the bound") == [[1, []]]
    assert manual_node.ask(n.manager, GetStats())["sync_give_ups"] == 1

    n.wait(2, ["never"], True, 0)
    assert len(n.answers()) == 1  # (and the manager took the wait at this time)
    manual_node.advance_clock(SYNC_WAIT_MS - 1)
    assert len(n.answers()) == 1
    manual_node.advance_clock(1)
    got = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(n.answers()),
                   "the answer of a change that never showed")
    assert got[1] == [2, ["never"]]
