"""A node of a build whose inter-node messages differ is refused, on a real ZooKeeper.

Such a node used to join silently and be useless (Metadata with no topics, FindCoordinator
hanging, "malformed envelope" dead letters): both builds said version 0.1.0. Now each node
registers its wire fingerprint (``wire.fingerprint``) and a node of another one refuses to
start with one line, while the cluster goes on serving; a registration of another wire that
appears anyway is named once in the nodes' logs and left out of the cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.core.cluster_model import BrokerInfo, Endpoint
from actors.hosts.cluster import open_store
from actors.metadata.zk_server import free_port
from tests.cluster.test_replication import consume_all, create_topic, produce_acks_all
from tests.fixtures.cluster import ClusterNode, wait_for
from wire.fingerprint import TEST_SALT_ENV, fingerprint_of, wire_fingerprint, wire_messages

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def test_a_node_of_another_wire_is_refused_and_the_cluster_keeps_serving(
        cluster_factory: Any, tmp_path: Path) -> None:
    ours = wire_fingerprint()
    assert ours == fingerprint_of(wire_messages()), f"{TEST_SALT_ENV} is set for the tests"
    cluster = cluster_factory(size=1)
    first = cluster.nodes[1]
    assert f"inter-node wire {ours}" in first.log()  # its startup line says which
    create_topic(cluster, rf=1)
    before = [f"v{i}".encode() for i in range(50)]
    assert produce_acks_all(cluster, before) == (before, [])

    # "Another build": the same code, its fingerprint perturbed by the tests' hook
    later = ClusterNode(2, tmp_path / "cluster0", "127.0.0.1", {**first.config, "node.id": 2})
    later.process.env = {TEST_SALT_ENV: "a later build"}
    theirs = fingerprint_of(wire_messages(), "a later build")
    try:
        with pytest.raises(RuntimeError, match="broker exited with 2"):
            later.start(timeout_s=60)
    finally:
        later.kill()  # (only if it did start: a failure of this test)
    line = (f"node 1 runs inter-node wire {ours}, this build {theirs}: stop every node to "
            f"upgrade, see README")
    assert line in later.log() and "Traceback" not in later.log(), later.log()[-3000:]
    with open_store(cluster.zk_connect) as store:
        assert sorted(store.get_brokers()) == [1]  # it never registered

    # the first node serves on as if nothing happened
    after = [f"w{i}".encode() for i in range(50)]
    assert produce_acks_all(cluster, after) == (after, [])
    assert consume_all(cluster.bootstrap, expect=100) == before + after
    assert first.running and first.metadata().brokers.keys() == {1}
    assert "malformed envelope" not in first.log() + later.log()


def test_a_registration_of_another_wire_is_named_once_and_left_out(cluster_factory: Any) -> None:
    """What the start's check cannot stop (a node of an older build, which does not check,
    or two starting at once): the running nodes leave it out and say so, once."""
    ours = wire_fingerprint()
    cluster = cluster_factory(size=1)
    first = cluster.nodes[1]

    def registration(broker_id: int, wire: str) -> BrokerInfo:
        return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", free_port()),),
                          f"tcp://127.0.0.1:{free_port()}", wire=wire)

    with open_store(cluster.zk_connect) as other, open_store(cluster.zk_connect) as same:
        other.register_broker(registration(5, "ffffffffffff"))
        line = (f"broker 5 runs inter-node wire ffffffffffff, this build {ours}: stop every "
                f"node to upgrade, see README; it is left out of the cluster: nothing is sent "
                f"to it")
        wait_for("node 1 to name broker 5", lambda: line in first.log(), 30)
        # a registration of this build's wire, for contrast, is taken in as a live broker
        same.register_broker(registration(6, ours))
        wait_for("node 1 to list broker 6",
                 lambda: first.metadata().brokers.keys() == {1, 6}, 30)
        assert first.log().count(line) == 1  # said once, though the brokers changed again
        assert 5 not in first.metadata().brokers
