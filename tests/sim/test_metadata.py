"""The simulated ZooKeeper: sessions that expire, ephemeral znodes, one-shot watches,
conditional writes, notices only while the client reaches the server."""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.cluster_model import BrokerInfo, Endpoint, WriteCode
from actors.metadata.memory import Op, ZkError
from actors.metadata.store import MetadataUnavailable
from actors.metadata.znodes import broker_path
from actors.sim import SimWorld
from actors.sim.metadata import ZK, SimMetadataStore, SimZooKeeper
from wire.cluster_messages import BrokersChanged, SessionStateChanged


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", f"b{broker_id}", 9092),),
                      f"tcp://b{broker_id}:9093", None)


def setup_two() -> tuple[SimWorld, SimZooKeeper, dict[str, list[Any]], SimMetadataStore,
                         SimMetadataStore]:
    world = SimWorld(1)
    zk = SimZooKeeper(world)
    notices: dict[str, list[Any]] = {"a": [], "b": []}
    stores = []
    for name in ("a", "b"):
        world.add_node(name)
        store = SimMetadataStore(zk, name, 1, deliver=notices[name].append,
                                 session_timeout_ms=2000)
        store.start()
        stores.append(store)
    world.run_for_ms(50)
    return world, zk, notices, stores[0], stores[1]


def test_ephemeral_registration_goes_with_an_expired_session_and_the_watch_fires_once() -> None:
    world, zk, notices, a, b = setup_two()
    a.register_broker(broker(1))
    assert sorted(b.get_brokers(watch=True)) == [1]
    b.get_brokers(watch=True)  # armed twice: still one notice, as kazoo keeps one watcher
    world.pause("a")          # a stops talking to ZooKeeper
    world.run_for_ms(1_500)
    assert zk.get(broker_path(1)) is not None  # within the session timeout: still there
    world.run_for_ms(1_000)
    assert zk.get(broker_path(1)) is None      # expired: the ephemeral znode went
    assert [type(n) for n in notices["b"]].count(BrokersChanged) == 1
    assert b.get_brokers() == {}
    world.run_for_ms(5_000)
    assert [type(n) for n in notices["b"]].count(BrokersChanged) == 1  # fired once only


def test_a_client_cut_off_is_suspended_then_expired_then_gets_a_new_session() -> None:
    world, _zk, notices, a, _b = setup_two()
    first = a.session_id
    world.net.partition({"a"}, {ZK})
    world.run_for_ms(300)
    assert [n.state for n in notices["a"] if isinstance(n, SessionStateChanged)][-1] \
        == "suspended"
    with pytest.raises(MetadataUnavailable):
        a.get_brokers()
    world.run_for_ms(3_000)
    world.net.heal()
    world.run_for_ms(500)
    states = [n.state for n in notices["a"] if isinstance(n, SessionStateChanged)]
    assert states[-2:] == ["expired", "connected"]
    assert a.session_id is not None and a.session_id != first
    assert a.get_brokers() == {}


def test_a_short_cut_keeps_the_session() -> None:
    world, _zk, notices, a, _b = setup_two()
    first = a.session_id
    world.net.partition({"a"}, {ZK})
    world.run_for_ms(500)
    world.net.heal()
    world.run_for_ms(500)
    states = [n.state for n in notices["a"] if isinstance(n, SessionStateChanged)]
    assert states[-2:] == ["suspended", "connected"]
    assert a.session_id == first


def test_conditional_writes_and_controller_election() -> None:
    _world, _zk, _notices, a, b = setup_two()
    fence = a.try_elect(1)
    assert fence is not None and fence.epoch == 1
    assert b.try_elect(2) is None  # /controller exists
    session = a.session_id
    assert session is not None
    zk = a.zk
    zk.multi(session, [Op("create", "/x", b"1")])
    zk.multi(session, [Op("set", "/x", b"2", version=0)])
    with pytest.raises(ZkError) as refused:
        zk.multi(session, [Op("set", "/x", b"3", version=0)])  # someone wrote in between
    assert refused.value.code is WriteCode.BAD_VERSION
    node = zk.get("/x")
    assert node is not None and node.data == b"2" and node.version == 1
    a.resign(fence)
    assert b.try_elect(2) is not None


def test_no_session_expires_while_zookeeper_is_down() -> None:
    world, zk, notices, a, b = setup_two()
    a.register_broker(broker(1))
    sessions = (a.session_id, b.session_id)
    zk.outage(5_000)  # longer than the 2 s session timeout
    world.run_for_ms(300)
    with pytest.raises(MetadataUnavailable):
        b.get_brokers()
    world.run_for_ms(5_000)
    assert (a.session_id, b.session_id) == sessions
    assert sorted(b.get_brokers()) == [1]
    states = [n.state for n in notices["a"] if isinstance(n, SessionStateChanged)]
    assert states[-2:] == ["suspended", "connected"]
