"""The ZooKeeper metadata store against a real ZooKeeper server (and a real ensemble)."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from kazoo.client import KazooClient

from actors.core.cluster_model import (
    BrokerInfo,
    Endpoint,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
)
from actors.metadata.store import (
    BrokerIdInUse,
    ControllerFence,
    ControllerMoved,
    MetadataUnavailable,
    TopicExists,
    UnknownTopic,
    WriteCode,
)
from actors.metadata.zk import ZkMetadataStore
from actors.metadata.zk_server import ZooKeeperEnsemble, free_port
from tests.fixtures.tcp_proxy import tcp_proxy
from wire.cluster_messages import (
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    SESSION_SUSPENDED,
    BrokersChanged,
    ControllerChanged,
    IsrChangesNotified,
    SessionStateChanged,
    TopicDeletionsChanged,
    TopicsChanged,
)

WAIT_S = 20.0


class Notices:
    """The sink a store's owner would have: a queue the test reads from."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()

    def __call__(self, msg: Any) -> None:
        self.queue.put(msg)

    def wait_for(self, match: Callable[[Any], bool], timeout_s: float = WAIT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        seen: list[Any] = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching notice within {timeout_s} s; saw {seen}")
            try:
                msg = self.queue.get(timeout=left)
            except queue.Empty:
                continue
            seen.append(msg)
            if match(msg):
                return msg

    def drain(self) -> list[Any]:
        out = []
        while True:
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                return out


StoreFactory = Callable[..., tuple[ZkMetadataStore, Notices]]


@pytest.fixture
def make_store() -> Iterator[StoreFactory]:
    stores: list[ZkMetadataStore] = []

    def make(connect: str, start: bool = True, **kw: Any) -> tuple[ZkMetadataStore, Notices]:
        notices = Notices()
        kw.setdefault("session_timeout_ms", 6000)
        store = ZkMetadataStore(connect, notices, **kw)
        stores.append(store)
        if start:
            store.start()
        return store, notices

    yield make
    for store in stores:
        store.close()


def broker(broker_id: int, port: int = 9092, host: str = "127.0.0.1",
           rack: str | None = None) -> BrokerInfo:
    return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", host, port),),
                      f"tcp://{host}:{port + 1000}", rack)


def raw_get(connect: str, path: str) -> bytes:
    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        return bytes(client.get(path)[0])
    finally:
        client.stop()
        client.close()


def is_session(state: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, SessionStateChanged) and m.state == state


# ------------------------------------------------------------------ basics
def test_start_without_a_server_fails_with_a_clear_error(make_store: StoreFactory) -> None:
    connect = f"127.0.0.1:{free_port()}"
    store, _ = make_store(connect, start=False, connection_timeout_ms=1000)
    with pytest.raises(MetadataUnavailable,
                       match=f"could not connect to ZooKeeper at {connect} within 1000 ms"):
        store.start()


def test_cluster_id_is_created_once(zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, _ = make_store(zk_connect)
    assert a.get_or_create_cluster_id("first-id") == "first-id"
    assert b.get_or_create_cluster_id("second-id") == "first-id"
    assert json.loads(raw_get(zk_connect, "/cluster/id")) == {"version": "1", "id": "first-id"}


# ------------------------------------------------------------ registration
def test_brokers_register_as_kafka_does(zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, _ = make_store(zk_connect)
    epoch_a = a.register_broker(broker(1, 9092, rack="r1"))
    epoch_b = b.register_broker(broker(2, 9093))
    assert epoch_b > epoch_a > 0
    brokers = a.get_brokers()
    assert brokers == {1: broker(1, 9092, rack="r1").with_epoch(epoch_a),
                       2: broker(2, 9093).with_epoch(epoch_b)}
    doc = json.loads(raw_get(zk_connect, "/brokers/ids/1"))
    assert doc["version"] == 5 and doc["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert doc["host"] == "127.0.0.1" and doc["port"] == 9092 and doc["rack"] == "r1"
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert doc["actorlog_gateway"] == "tcp://127.0.0.1:10092"
    b.close()  # the session ends: its ephemeral registration goes with it
    assert set(a.get_brokers()) == {1}


def test_a_live_duplicate_id_is_refused(zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, _ = make_store(zk_connect)
    a.register_broker(broker(1, 9092))
    with pytest.raises(BrokerIdInUse) as info:
        b.register_broker(broker(1, 9192))
    assert str(info.value) == (
        "node.id 1 is already registered in ZooKeeper by a live node "
        "(PLAINTEXT://127.0.0.1:9092, gateway tcp://127.0.0.1:10092); "
        "node.id must be unique in the cluster")
    # Even with the same endpoints, a registration whose session lives is refused
    # once the wait for it to go has passed.
    with pytest.raises(BrokerIdInUse):
        b.register_broker(broker(1, 9092), wait_for_stale_ms=300)
    a.close()
    assert b.register_broker(broker(1, 9192)) > 0


def test_a_restarted_node_waits_for_its_previous_session(zookeeper_server: Any, zk_connect: str,
                                                         make_store: StoreFactory) -> None:
    """kill -9 and restart: the old session holds the id until ZooKeeper expires it."""
    chroot = zk_connect[zk_connect.index("/"):]
    with tcp_proxy(zookeeper_server.host, zookeeper_server.client_port) as proxy:
        old, _ = make_store(proxy.address + chroot, session_timeout_ms=1500)
        old.register_broker(broker(7, 9092))
        proxy.cut()  # the old process is gone: nothing reaches ZooKeeper from it
        new, _ = make_store(zk_connect)
        assert new.register_broker(broker(7, 9092), wait_for_stale_ms=30_000) > 0
        assert set(new.get_brokers()) == {7}


# ---------------------------------------------------------------- election
def test_election_and_takeover_when_the_controller_session_ends(
        zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, b_notices = make_store(zk_connect)
    fence_a = a.try_elect(1)
    assert fence_a is not None and fence_a.controller_id == 1 and fence_a.epoch == 1
    assert b.try_elect(2) is None
    assert b.get_controller(watch=True) == 1
    assert json.loads(raw_get(zk_connect, "/controller"))["brokerid"] == 1
    assert raw_get(zk_connect, "/controller_epoch") == b"1"
    a.close()
    b_notices.wait_for(lambda m: isinstance(m, ControllerChanged))
    assert b.get_controller(watch=True) is None
    fence_b = b.try_elect(2)
    assert fence_b is not None and fence_b.epoch == 2
    assert fence_b.epoch_version > fence_a.epoch_version
    assert b.get_controller() == 2


def test_resign_lets_another_node_take_over(zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, _ = make_store(zk_connect)
    fence = a.try_elect(1)
    assert fence is not None
    a.resign(fence)
    assert a.get_controller() is None
    fence_b = b.try_elect(2)
    assert fence_b is not None and fence_b.epoch == 2
    a.resign(fence)  # stale: a no-op, b stays controller
    assert b.get_controller() == 2


def _topic_with_states(store: ZkMetadataStore, fence: ControllerFence, topic: str,
                       partitions: int = 2) -> dict[TopicPartition, LeaderAndIsr]:
    store.create_topic(topic, TopicAssignment({p: (1, 2) for p in range(partitions)}),
                       {"retention.ms": "1000"}, fence)
    states = {TopicPartition(topic, p): LeaderAndIsr(1, 0, (1, 2), fence.epoch)
              for p in range(partitions)}
    results = store.create_partition_states(states, fence)
    assert all(r.ok and r.version == 0 for r in results.values()), results
    return {tp: s.with_version(0) for tp, s in states.items()}


def test_a_write_with_a_stale_controller_epoch_fails_and_changes_nothing(
        zk_connect: str, make_store: StoreFactory) -> None:
    a, _ = make_store(zk_connect)
    b, _ = make_store(zk_connect)
    fence = a.try_elect(1)
    assert fence is not None
    states = _topic_with_states(a, fence, "t")
    a.resign(fence)
    new_fence = b.try_elect(2)
    assert new_fence is not None
    tp = TopicPartition("t", 0)
    moved = {tp: states[tp].new_leader_and_isr(2, (2,), fence.epoch)}
    with pytest.raises(ControllerMoved, match="controller 1 with epoch 1 is no longer"):
        a.update_partition_states(moved, fence)
    with pytest.raises(ControllerMoved):
        a.create_topic("u", TopicAssignment({0: (1,)}), {}, fence)
    with pytest.raises(ControllerMoved):
        a.delete_topic("t", fence)
    assert a.get_partition_states([tp]) == {tp: states[tp]}
    assert a.get_topics() == {"t"}
    # The new controller's fence works.
    assert b.update_partition_states({tp: states[tp].new_leader_and_isr(2, (2,), 2)},
                                     new_fence)[tp].ok


# -------------------------------------------------------- partition states
def test_partition_state_writes_are_conditional_on_the_version(
        zk_connect: str, make_store: StoreFactory) -> None:
    store, _ = make_store(zk_connect)
    fence = store.try_elect(1)
    assert fence is not None
    states = _topic_with_states(store, fence, "t", partitions=3)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert json.loads(raw_get(zk_connect, "/brokers/topics/t/partitions/0/state")) == {
        "controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2]}

    first = store.update_partition_states({tp0: states[tp0].new_leader_and_isr(2, (2,), 1)}, fence)
    assert first[tp0].ok and first[tp0].version == 1
    # The same write again names version 0, which is gone: refused, nothing written.
    again = store.update_partition_states(
        {tp0: states[tp0].new_leader_and_isr(1, (1,), 1), tp1: states[tp1]}, fence)
    assert again[tp0].code is WriteCode.BAD_VERSION
    assert again[tp1].ok and again[tp1].version == 1  # one partition's conflict spares the rest
    now = store.get_partition_states([tp0, TopicPartition("t", 9)])
    assert now == {tp0: LeaderAndIsr(2, 1, (2,), 1, 1), TopicPartition("t", 9): None}
    # A leader's own ISR write (no fence) is conditional on the version alone.
    grown = LeaderAndIsr(2, 1, (2, 1), 1, 1)
    assert store.update_partition_states({tp0: grown}, None)[tp0].version == 2
    assert store.update_partition_states({tp0: grown}, None)[tp0].code is WriteCode.BAD_VERSION
    # Creating a state that exists is NODE_EXISTS.
    assert store.create_partition_states({tp0: states[tp0]}, fence)[tp0].code is \
        WriteCode.NODE_EXISTS


def test_a_state_read_carries_the_zxid_that_wrote_it_on_the_broker_epochs_clock(
        zk_connect: str, make_store: StoreFactory) -> None:
    """KIP-380 across a controller failover: a broker registered after a state was written
    has a larger epoch than the state's zxid (its mzxid), one written after has a smaller."""
    store, _ = make_store(zk_connect)
    before = store.register_broker(broker(1))
    fence = store.try_elect(1)
    assert fence is not None
    tp = TopicPartition("t", 0)
    _topic_with_states(store, fence, "t", partitions=1)
    written = store.get_partition_states([tp])[tp]
    assert written is not None and before < written.zxid
    other, _ = make_store(zk_connect)
    assert other.register_broker(broker(2, port=9094)) > written.zxid
    store.update_partition_states({tp: written.new_leader_and_isr(2, (2,), 1)}, fence)
    rewritten = store.get_partition_states([tp])[tp]
    assert rewritten is not None and rewritten.zxid > written.zxid


# ------------------------------------------------------------------ topics
def test_topics_are_created_listed_marked_and_deleted(zk_connect: str,
                                                      make_store: StoreFactory) -> None:
    store, _ = make_store(zk_connect)
    other, _ = make_store(zk_connect)
    fence = store.try_elect(1)
    assert fence is not None
    _topic_with_states(store, fence, "t", partitions=2)
    with pytest.raises(TopicExists, match="topic 't' already exists"):
        other.create_topic("t", TopicAssignment({0: (2,)}), {})
    other.create_topic("u", TopicAssignment({0: (2, 1)}), {})  # any node may, as Kafka's admin
    assert store.get_topics() == {"t", "u"}
    assert store.get_topic_assignments(["t", "u", "nope"]) == {
        "t": TopicAssignment({0: (1, 2), 1: (1, 2)}, 0), "u": TopicAssignment({0: (2, 1)}, 0)}
    assert json.loads(raw_get(zk_connect, "/brokers/topics/t")) == {
        "version": 2, "partitions": {"0": [1, 2], "1": [1, 2]},
        "adding_replicas": {}, "removing_replicas": {}}
    assert store.get_topic_configs("t") == {"retention.ms": "1000"}
    assert json.loads(raw_get(zk_connect, "/config/topics/t")) == {
        "version": 1, "config": {"retention.ms": "1000"}}

    grown = store.set_topic_assignment(
        "t", TopicAssignment({0: (1, 2), 1: (1, 2), 2: (2, 1)}, 0), fence)
    assert grown.ok and grown.version == 1
    stale = store.set_topic_assignment("t", TopicAssignment({0: (1,)}, 0), fence)
    assert stale.code is WriteCode.BAD_VERSION

    assert other.mark_topic_for_deletion("t") is True
    assert other.mark_topic_for_deletion("t") is False
    with pytest.raises(UnknownTopic):
        other.mark_topic_for_deletion("nope")
    assert store.get_topic_deletions() == {"t"}
    store.delete_topic("t", fence)
    assert store.get_topics() == {"u"}
    assert store.get_topic_deletions() == set()
    assert store.get_topic_configs("t") == {}
    assert store.get_partition_states([TopicPartition("t", 0)]) == {TopicPartition("t", 0): None}
    store.delete_topic("t", fence)  # already gone: nothing to do


def test_an_adopted_id_is_recorded_where_kafkas_tools_do_not_write(
        zk_connect: str, make_store: StoreFactory) -> None:
    """The controller's write of an adopted id records it under /actorlog in the same
    transaction; a Kafka 2.8+ tool's rewrite of the topic znode (id kept, our mark
    dropped) still reads adopted; a topic deleted drops its record."""
    store, _ = make_store(zk_connect)
    fence = store.try_elect(1)
    assert fence is not None
    store.create_topic("t", TopicAssignment({0: (1, 2)}), {})
    late = "-B1Prn3sEdCnZQCgyR5r9g"
    refused = store.set_topic_assignment("t", TopicAssignment({0: (1, 2)}, 7, late, True), fence)
    assert refused.code is WriteCode.BAD_VERSION  # and no record written without the znode
    assert store.get_topic_assignments(["t"])["t"] == TopicAssignment({0: (1, 2)}, 0)
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        assert client.exists("/actorlog/adopted_topic_ids/t") is None
        written = store.set_topic_assignment(
            "t", TopicAssignment({0: (1, 2)}, 0, late, True), fence)
        assert written.ok and written.version == 1
        record = json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/t"))
        assert record["version"] == 1 and record["topic_id"] == late
        assert abs(record["adopted_ms"] - time.time() * 1000) < 60_000
        # as kafka-reassign-partitions (2.8+) writes it back: topic_id kept, our mark gone
        client.set("/brokers/topics/t", json.dumps(
            {"version": 3, "partitions": {"0": [2, 1]}, "adding_replicas": {},
             "removing_replicas": {}, "topic_id": late}).encode())
        assert store.get_topic_assignments(["t"])["t"] == TopicAssignment(
            {0: (2, 1)}, 2, late, True)
        # the controller grows it: the record stays as it was (same id, same time)
        grown = store.set_topic_assignment(
            "t", TopicAssignment({0: (2, 1), 1: (1, 2)}, 2, late, True), fence)
        assert grown.ok
        assert json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/t")) == record
        # clearing it: at a stale version nothing changes; at the current one the znode
        # is written unmarked and the record dropped, together
        unmarked = TopicAssignment({0: (2, 1), 1: (1, 2)}, 2, late)
        assert store.set_topic_assignment("t", unmarked, fence, clear_adoption=True).code \
            is WriteCode.BAD_VERSION
        assert client.exists("/actorlog/adopted_topic_ids/t") is not None
        cleared = store.set_topic_assignment("t", replace(unmarked, version=grown.version),
                                             fence, clear_adoption=True)
        assert cleared.ok and cleared.version == grown.version + 1
        assert client.exists("/actorlog/adopted_topic_ids/t") is None
        assert not store.get_topic_assignments(["t"])["t"].topic_id_adopted
        assert "topic_id_adopted" not in json.loads(raw_get(zk_connect, "/brokers/topics/t"))
        # a topic adopted before the records (its znode's mark only) gets one at load
        store.create_topic("old", TopicAssignment({0: (1,)}), {})
        client.set("/brokers/topics/old", json.dumps(
            {"version": 3, "partitions": {"0": [1]}, "adding_replicas": {},
             "removing_replicas": {}, "topic_id": late, "topic_id_adopted": True}).encode())
        store.record_topic_adoptions(store.get_topic_assignments(["old"]), fence)
        assert json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/old"))[
            "topic_id"] == late
        store.delete_topic("old", fence)
        assert client.exists("/actorlog/adopted_topic_ids/old") is None
    finally:
        client.stop()
        client.close()


def test_an_unreadable_adoption_record_is_read_as_adopted_and_replaced(
        zk_connect: str, make_store: StoreFactory) -> None:
    """A damaged record (or a newer format's) raises nowhere: its topic reads adopted, a
    write of the adopted topic replaces it with a readable record, and clearing the
    adoption drops it; a newer format's record with a valid id is read for that id."""
    store, _ = make_store(zk_connect)
    fence = store.try_elect(1)
    assert fence is not None
    late = "-B1Prn3sEdCnZQCgyR5r9g"
    store.create_topic("t", TopicAssignment({0: (1, 2)}, topic_id=late), {})
    store.create_topic("u", TopicAssignment({0: (1, 2)}, topic_id=late), {})
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    try:
        client.create("/actorlog/adopted_topic_ids/t", b"\x00garbage", makepath=True)
        client.create("/actorlog/adopted_topic_ids/u", json.dumps(
            {"version": 2, "topic_id": late, "adopted_at": "x"}).encode(), makepath=True)
        found = store.get_topic_assignments(["t", "u"])
        assert found["t"] == TopicAssignment({0: (1, 2)}, 0, late, True)
        assert found["u"] == TopicAssignment({0: (1, 2)}, 0, late, True)
        store.record_topic_adoptions(found, fence)  # as at a controller's load
        assert json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/t"))[
            "topic_id"] == late
        assert json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/u"))[
            "version"] == 2  # a readable record of the id: left as it is
        client.set("/actorlog/adopted_topic_ids/t", b'{"version":1}')
        grown = store.set_topic_assignment(
            "t", TopicAssignment({0: (1, 2), 1: (2, 1)}, 0, late, True), fence)
        assert grown.ok
        assert json.loads(raw_get(zk_connect, "/actorlog/adopted_topic_ids/t"))[
            "topic_id"] == late
        client.set("/actorlog/adopted_topic_ids/t", b"[]")
        cleared = store.set_topic_assignment(
            "t", TopicAssignment({0: (1, 2), 1: (2, 1)}, grown.version, late), fence,
            clear_adoption=True)
        assert cleared.ok
        assert client.exists("/actorlog/adopted_topic_ids/t") is None
        assert not store.get_topic_assignments(["t"])["t"].topic_id_adopted
    finally:
        client.stop()
        client.close()


def test_isr_change_notifications(zk_connect: str, make_store: StoreFactory) -> None:
    leader, _ = make_store(zk_connect)
    controller, _ = make_store(zk_connect)
    fence = controller.try_elect(9)
    assert fence is not None
    leader.notify_isr_change([TopicPartition("t", 0), TopicPartition("t", 1)])
    leader.notify_isr_change([TopicPartition("u", 3)])
    notes = controller.get_isr_change_notifications()
    assert [n.partitions for n in notes] == [
        (TopicPartition("t", 0), TopicPartition("t", 1)), (TopicPartition("u", 3),)]
    assert all(n.name.startswith("isr_change_") for n in notes)
    controller.delete_isr_change_notifications([notes[0].name], fence)
    assert [n.name for n in controller.get_isr_change_notifications()] == [notes[1].name]


# ----------------------------------------------------------------- watches
def test_watches_fire_once_per_arming(zk_connect: str, make_store: StoreFactory) -> None:
    watcher, notices = make_store(zk_connect)
    other, _ = make_store(zk_connect)
    third, _ = make_store(zk_connect)
    assert watcher.get_brokers(watch=True) == {}
    other.register_broker(broker(1))
    notices.wait_for(lambda m: isinstance(m, BrokersChanged))
    third.register_broker(broker(2))  # not armed again: no notice for this one
    assert set(watcher.get_brokers(watch=True)) == {1, 2}
    third.close()
    notices.wait_for(lambda m: isinstance(m, BrokersChanged))
    # Kazoo hands watch notices over in order: a notice for the unarmed change would
    # have come before the one just seen.
    assert not [m for m in notices.drain() if isinstance(m, BrokersChanged)]

    watcher.get_topics(watch=True)
    watcher.get_topic_deletions(watch=True)
    watcher.get_isr_change_notifications(watch=True)
    other.create_topic("t", TopicAssignment({0: (1,)}), {})
    notices.wait_for(lambda m: isinstance(m, TopicsChanged))
    other.mark_topic_for_deletion("t")
    notices.wait_for(lambda m: isinstance(m, TopicDeletionsChanged))
    other.notify_isr_change([TopicPartition("t", 0)])
    notices.wait_for(lambda m: isinstance(m, IsrChangesNotified))


# -------------------------------------------------------- sessions, faults
def test_session_expiry_is_reported_and_fences_the_old_controller(
        zookeeper_server: Any, zk_connect: str, make_store: StoreFactory) -> None:
    chroot = zk_connect[zk_connect.index("/"):]
    with tcp_proxy(zookeeper_server.host, zookeeper_server.client_port) as proxy:
        old, old_notices = make_store(proxy.address + chroot, session_timeout_ms=1500)
        other, other_notices = make_store(zk_connect)
        old.register_broker(broker(1))
        fence = old.try_elect(1)
        assert fence is not None
        states = _topic_with_states(old, fence, "t", partitions=1)
        first_session = old.session_id
        assert other.get_controller(watch=True) == 1

        proxy.cut()
        old_notices.wait_for(is_session(SESSION_SUSPENDED))
        with pytest.raises(MetadataUnavailable, match="not connected to ZooKeeper"):
            old.update_partition_states(states, fence)
        # ZooKeeper expires the session: its ephemeral znodes go, the others see it.
        other_notices.wait_for(lambda m: isinstance(m, ControllerChanged))
        assert other.get_brokers() == {}
        new_fence = other.try_elect(2)
        assert new_fence is not None and new_fence.epoch == 2

        proxy.heal()
        old_notices.wait_for(is_session(SESSION_EXPIRED))
        connected = old_notices.wait_for(is_session(SESSION_CONNECTED))
        assert connected.session_id != first_session and old.session_id == connected.session_id
        # The old controller, alive again on a new session, can no longer write.
        tp = TopicPartition("t", 0)
        with pytest.raises(ControllerMoved):
            old.update_partition_states({tp: states[tp].new_leader_and_isr(1, (1,), 1)}, fence)
        assert old.get_partition_states([tp]) == {tp: states[tp]}
        assert old.get_brokers() == {}  # registration died with the session: register again
        assert old.register_broker(broker(1)) > 0


def write_through_failover(store: ZkMetadataStore, fence: ControllerFence, tp: TopicPartition,
                           wanted: LeaderAndIsr) -> LeaderAndIsr:
    """Write until ZooKeeper answers; a write whose answer was lost may have been applied."""
    for _ in range(400):
        try:
            result = store.update_partition_states({tp: wanted}, fence)[tp]
        except MetadataUnavailable:
            time.sleep(0.05)
            continue
        if result.ok:
            return wanted.with_version(result.version)
        now = store.get_partition_states([tp])[tp]
        assert result.code is WriteCode.BAD_VERSION and now is not None
        assert now.with_version(wanted.version) == wanted, (now, wanted)
        return now
    raise AssertionError(f"no write of {tp} got through")


def test_an_ensemble_keeps_serving_with_one_server_killed(
        zk_ensemble: ZooKeeperEnsemble, make_store: StoreFactory) -> None:
    store, notices = make_store(zk_ensemble.connect_string, session_timeout_ms=6000)
    store.register_broker(broker(1))
    fence = store.try_elect(1)
    assert fence is not None
    states = _topic_with_states(store, fence, "t", partitions=1)
    session = store.session_id
    tp = TopicPartition("t", 0)
    for victim in list(zk_ensemble.servers):
        victim.kill()
        # Whichever server dies (the client's, the leader, a follower), two of three
        # still form a quorum; the client moves over within its session.
        wanted = states[tp].new_leader_and_isr(1, (1,), fence.epoch)
        states[tp] = write_through_failover(store, fence, tp, wanted)
        assert store.session_id == session
        assert set(store.get_brokers()) == {1}
        victim.start()
        victim.wait_serving()
    assert not [m for m in notices.drain() if is_session(SESSION_EXPIRED)(m)]
