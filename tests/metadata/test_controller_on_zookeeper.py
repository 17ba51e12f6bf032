"""The controller (core + driver) on a real ZooKeeper, and the same story on the in-memory model.

Brokers are ZooKeeper sessions that register themselves; two controller
candidates race for ``/controller``. Notices arrive on kazoo's threads into
queues, and the test thread hands them to the drivers, as the Controller
actor's mailbox will. Each scenario runs on both store implementations with
the same assertions: one interface, two implementations.
"""

from __future__ import annotations

import queue
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from actors.core.cluster_model import BrokerInfo, Endpoint, LeaderAndIsr, TopicPartition
from actors.core.controller_events import (
    ControlledShutdownRequest,
    ControlledShutdownResult,
    CreateTopics,
    CreateTopicsResult,
    NewTopic,
)
from actors.core.controller_state import ControllerConfig, ControllerCore
from actors.metadata import znodes
from actors.metadata.controller_driver import ControllerDriver
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper, Op
from actors.metadata.store import MetadataStore
from actors.metadata.zk import ZkMetadataStore
from tests.fixtures.cluster_tools import ZooKeeperReader
from tests.fixtures.tcp_proxy import tcp_proxy
from wire.cluster_messages import (
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    SESSION_SUSPENDED,
    ControllerChanged,
    SessionStateChanged,
    UpdateMetadata,
)
from wire.errors import ErrorCode

StoreFactory = Callable[[Callable[[Any], None]], MetadataStore]


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
                      f"tcp://127.0.0.1:{19000 + broker_id}")


@dataclass
class Node:
    """A controller candidate: its store, driver, inbox of notices and what it emitted."""

    broker_id: int
    store: MetadataStore
    driver: ControllerDriver
    inbox: queue.Queue[Any]
    sent: list[tuple[int, Any]] = field(default_factory=list)
    replies: list[tuple[Any, Any]] = field(default_factory=list)


class World:
    def __init__(self, make_store: StoreFactory) -> None:
        self.make_store = make_store
        self.stores: list[MetadataStore] = []
        self.brokers: dict[int, MetadataStore] = {}
        self.nodes: dict[int, Node] = {}
        self.reader = self.store(lambda _m: None)
        # ``deleteall <path>`` as an operator's ZooKeeper shell, from its own session
        self.deleteall: Callable[[str], None] = lambda _path: None
        self.closing: list[Callable[[], None]] = []

    def store(self, sink: Callable[[Any], None]) -> MetadataStore:
        store = self.make_store(sink)
        store.start()
        self.stores.append(store)
        return store

    def start_broker(self, broker_id: int) -> None:
        self.brokers[broker_id] = store = self.store(lambda _m: None)
        store.register_broker(broker(broker_id))

    def stop_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id).close()

    def add_candidate(self, broker_id: int) -> Node:
        inbox: queue.Queue[Any] = queue.Queue()
        store = self.store(inbox.put)
        core = ControllerCore(ControllerConfig(broker_id), random.Random(3).randrange)
        node = Node(broker_id, store, None, inbox)  # type: ignore[arg-type]
        node.driver = ControllerDriver(store, core, lambda b, m: node.sent.append((b, m)),
                                       lambda r, res: node.replies.append((r, res)))
        self.nodes[broker_id] = node
        node.driver.elect()
        return node

    def pump_until(self, done: Callable[[], bool], timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for node in list(self.nodes.values()):
                while True:
                    try:
                        node.driver.on_notice(node.inbox.get_nowait())
                    except queue.Empty:
                        break
            if done():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not done within {timeout_s} s")
            time.sleep(0.01)

    def state(self, topic: str, partition: int) -> LeaderAndIsr | None:
        return self.reader.get_partition_states([TopicPartition(topic, partition)])[
            TopicPartition(topic, partition)]

    def close(self) -> None:
        for store in reversed(self.stores):
            store.close()
        for close in self.closing:
            close()


@pytest.fixture(params=["zookeeper", "memory"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    if request.param == "zookeeper":
        connect = request.getfixturevalue("zk_connect")
        made = World(lambda sink: ZkMetadataStore(connect, sink, session_timeout_ms=6000))
        shell = ZooKeeperReader(connect)
        made.closing.append(shell.close)
        made.deleteall = lambda path: shell.client.delete(path, recursive=True)
    else:
        zk = MemoryZooKeeper()
        made = World(lambda sink: MemoryMetadataStore(zk, sink))
        reader = made.reader
        assert isinstance(reader, MemoryMetadataStore)

        def deleteall(path: str) -> None:
            paths = sorted((p for p in zk.nodes if p == path or p.startswith(path + "/")),
                           key=lambda p: -p.count("/"))
            zk.multi(reader.session_id or 0, [Op("delete", p) for p in paths])

        made.deleteall = deleteall
    try:
        yield made
    finally:
        made.close()


def test_create_fail_over_and_fence(world: World) -> None:
    for b in (1, 2, 3):
        world.start_broker(b)
    first = world.add_candidate(101)
    second = world.add_candidate(102)
    assert first.driver.active and not second.driver.active
    assert {b for b, m in first.sent if isinstance(m, UpdateMetadata) and m.full} == {1, 2, 3}

    first.driver.feed(CreateTopics("c1", (NewTopic("orders", 6, 3),)))
    [(_, created)] = first.replies
    assert isinstance(created, CreateTopicsResult) and created.topics[0].error_code == 0
    leaders = [world.state("orders", p) for p in range(6)]
    assert sorted(s.leader for s in leaders if s) == [1, 1, 2, 2, 3, 3]

    # A broker dies: the controller hears of it through its watch and moves the leaderships.
    led_by_one = [p for p, s in enumerate(leaders) if s and s.leader == 1]
    world.stop_broker(1)
    world.pump_until(lambda: all((s := world.state("orders", p)) is not None and s.leader != 1
                                 for p in led_by_one))
    for p in range(6):
        state = world.state("orders", p)
        assert state is not None and 1 not in state.isr and state.controller_epoch == 1

    # Controlled shutdown of broker 2 through the controller.
    first.driver.feed(ControlledShutdownRequest("cs", 2, world.reader.get_brokers()[2].epoch))
    assert first.replies[-1] == ("cs", ControlledShutdownResult(0, None, ()))
    assert all((s := world.state("orders", p)) is not None and s.leader == 3 for p in range(6))

    # The controller's session ends: the standby takes over with a higher epoch.
    first.store.close()
    world.pump_until(lambda: second.driver.active)
    assert not first.driver.active
    assert second.driver.core.epoch == 2
    assert {b for b, m in second.sent if isinstance(m, UpdateMetadata) and m.full} == {2, 3}
    world.start_broker(1)
    world.pump_until(lambda: any(b == 1 for b, _ in second.sent))
    # Broker 1 came back as a follower outside the ISR; the leaders stay where they are.
    assert all((s := world.state("orders", p)) is not None and s.leader == 3 for p in range(6))
    final = {p: world.state("orders", p) for p in range(6)}
    assert all(s is not None and s.isr == (3,) for s in final.values())


def test_a_deposed_controller_cannot_write(world: World) -> None:
    world.start_broker(1)
    first = world.add_candidate(101)
    first.driver.feed(CreateTopics("c1", (NewTopic("t", 1, 1),)))
    fence = first.driver.fence
    assert fence is not None
    # Another controller is elected while the first still believes it leads: its /controller
    # went (a lost session whose news has not reached it yet), the epoch moved on.
    world.reader.resign(fence)
    second = world.add_candidate(102)
    assert second.driver.active and second.driver.core.epoch == 2
    first.driver.feed(CreateTopics("c2", (NewTopic("u", 1, 1),)))
    assert not first.driver.active
    [result] = [res for rid, res in first.replies if rid == "c2"]
    assert isinstance(result, CreateTopicsResult)
    assert result.topics[0].error_code == ErrorCode.NOT_CONTROLLER
    assert world.reader.get_topics() == {"t"}


def test_a_stale_session_notice_does_not_unseat_the_controller(world: World) -> None:
    """Seed 11 of the simulator: a controller elected in its new session was made to resign
    by the late notice that its previous session had expired."""
    world.start_broker(1)
    first = world.add_candidate(101)
    session = first.store.session_id
    assert first.driver.active and session is not None
    first.driver.on_notice(SessionStateChanged(SESSION_EXPIRED, session + 1))
    assert first.driver.active and world.reader.get_controller() == 101
    # Its own session's end (or an end of unknown session) does unseat it.
    first.driver.on_notice(SessionStateChanged(SESSION_EXPIRED, 0))
    assert not first.driver.active


def test_controller_znode_of_its_own_session_makes_the_broker_controller_again(
        world: World) -> None:
    """A controller that stopped without giving /controller up (its session still holds it)
    acts again at its next election (Kafka compares /controller with its own id); another
    session of the same broker id does not adopt it."""
    world.start_broker(1)
    first = world.add_candidate(101)
    assert first.driver.fence is not None
    epoch = first.driver.fence.epoch
    first.driver.resign("a stale session notice")
    assert not first.driver.active and world.reader.get_controller() == 101
    twin = world.add_candidate(101)  # the same broker id on another session
    assert not twin.driver.active
    assert first.driver.elect()
    assert first.driver.fence is not None and first.driver.fence.epoch == epoch
    assert first.driver.core.epoch == epoch
    assert any(isinstance(m, UpdateMetadata) and m.full for _, m in first.sent)
    # The fence is the live one: its writes go through.
    first.driver.feed(CreateTopics("c1", (NewTopic("t", 1, 1),)))
    assert isinstance(result := first.replies[-1][1], CreateTopicsResult)
    assert result.topics[0].error_code == 0 and first.driver.active


def test_a_controller_elected_in_a_new_session_outlives_the_old_sessions_expiry(
        zookeeper_server: Any, zk_connect: str) -> None:
    """On a real ZooKeeper: a candidate's session expires while a ControllerChanged of that
    session waits in its mailbox; the candidate is elected in its new session when it reads
    it, then reads the old session's expiry, and stays the controller."""
    chroot = zk_connect[zk_connect.index("/"):]
    world = World(lambda sink: ZkMetadataStore(zk_connect, sink, session_timeout_ms=6000))
    with tcp_proxy(zookeeper_server.host, zookeeper_server.client_port) as proxy:
        try:
            world.start_broker(1)
            second = world.add_candidate(102)
            assert second.driver.active
            inbox: queue.Queue[Any] = queue.Queue()
            # (a session of 1.5 s was seen to lapse again after the heal under a CPU-bound
            # 4-worker suite, leaving 101 without the controller: 4 s, still quick to expire)
            store = ZkMetadataStore(proxy.address + chroot, inbox.put, session_timeout_ms=4000)
            store.start()
            world.stores.append(store)
            core = ControllerCore(ControllerConfig(101), random.Random(3).randrange)
            first = Node(101, store, None, inbox)  # type: ignore[arg-type]
            first.driver = ControllerDriver(store, core, lambda b, m: first.sent.append((b, m)),
                                            lambda r, res: first.replies.append((r, res)))
            store.register_broker(broker(101))
            assert not first.driver.elect()
            old_session = store.session_id
            while not inbox.empty():  # its first "connected": read before the story begins
                first.driver.on_notice(inbox.get())

            held: list[Any] = []  # the mailbox, not yet read

            def hold_until(match: Callable[[Any], bool]) -> None:
                deadline = time.monotonic() + 20
                while not any(match(m) for m in held):
                    assert time.monotonic() < deadline, held
                    try:
                        held.append(inbox.get(timeout=0.1))
                    except queue.Empty:
                        pass

            world.stores.remove(second.store)
            second.store.close()  # the controller goes: a ControllerChanged waits for 101
            hold_until(lambda m: isinstance(m, ControllerChanged))
            proxy.cut()
            hold_until(lambda m: getattr(m, "state", None) == SESSION_SUSPENDED)
            deadline = time.monotonic() + 20
            while 101 in world.reader.get_brokers():  # ZooKeeper expires the session
                assert time.monotonic() < deadline
                time.sleep(0.1)
            proxy.heal()
            hold_until(lambda m: getattr(m, "state", None) == SESSION_CONNECTED
                       and m.session_id != old_session)
            states = [(m.state, m.session_id) for m in held if isinstance(m, SessionStateChanged)]
            assert (SESSION_EXPIRED, old_session) in states
            assert store.session_id not in (None, old_session)

            for msg in held:
                first.driver.on_notice(msg)
            assert first.driver.active, (held, store.session_id)
            assert world.reader.get_controller() == 101
            assert first.driver.fence is not None and first.driver.fence.epoch == 2
        finally:
            world.close()


def test_a_topic_whose_znodes_an_operator_removes_is_forgotten(world: World) -> None:
    """Kafka's processTopicChange: ``deleteall /brokers/topics/gone`` under the controller
    (not DeleteTopics): the controller forgets the topic, elects for the others only, and
    refuses the name to CreateTopics (the nodes keep the removed topic's replicas)."""
    for b in (1, 2):
        world.start_broker(b)
    first = world.add_candidate(101)
    first.driver.feed(CreateTopics("c1", (NewTopic("gone", 1, 2), NewTopic("kept", 1, 2))))
    world.deleteall(znodes.topic_path("gone"))
    world.pump_until(lambda: "gone" not in first.driver.core.topics)
    assert [tp for tp in first.driver.core.states if tp.topic == "gone"] == []
    kept = world.state("kept", 0)
    assert kept is not None
    world.stop_broker(kept.leader)
    world.pump_until(lambda: (s := world.state("kept", 0)) is not None
                     and s.leader not in (kept.leader, -1))
    assert world.reader.get_topics() == {"kept"}
    assert first.driver.active and first.driver.pending_retries == 0

    first.driver.feed(CreateTopics("c2", (NewTopic("gone", 1, 1),)))
    [refused] = [res for rid, res in first.replies if rid == "c2"]
    assert isinstance(refused, CreateTopicsResult)
    assert refused.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert world.reader.get_topics() == {"kept"}
