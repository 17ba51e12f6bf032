"""Naming another broker's actors by the counts that broker registered, not our own."""

from __future__ import annotations

from actors.runtime.address import Address
from actors.runtime.config import Config
from actors.topology import Topology, peer_handler, peer_shard_for


def test_a_peer_handler_is_one_the_peer_runs() -> None:
    assert peer_handler(1, 1, 2) == Address("node-1", "handler-0")
    assert peer_handler(1, 4, 6) == Address("node-1", "handler-2")
    assert {peer_handler(3, 2, k).name for k in range(10)} == {"handler-0", "handler-1"}


def test_an_unknown_handler_count_falls_back_to_handler_0() -> None:
    assert peer_handler(2, 0, 7) == Address("node-2", "handler-0")


def test_a_peer_shard_is_the_one_its_own_topology_picks() -> None:
    for shards in (1, 2, 3, 5):
        theirs = Topology.from_config("node-4", Config({"num.partition.shards": shards}))
        for partition in range(8):
            assert peer_shard_for(4, shards, "orders", partition) == \
                theirs.shard_for("orders", partition)
