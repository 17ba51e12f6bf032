"""Naming another broker's actors by the counts that broker registered, not our own; and
where a partition's purgatory runs (its shard's process)."""

from __future__ import annotations

import dataclasses

import pytest

from actors.runtime.address import Address
from actors.runtime.config import Config, ConfigError
from actors.topology import Topology, peer_handler, peer_shard_for, spread_index


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


def processes_topology(processes: int, shards: int, purgatories: int) -> Topology:
    nodes = tuple(f"node-1/{k}" for k in range(processes)) if processes > 1 else ()
    return Topology(nodes[0] if nodes else "node-1", 1, 1, shards, purgatories, 1,
                    home=nodes[0] if nodes else "", process_nodes=nodes)


TOPICS = ("orders", "payments", "t", "a-much-longer-topic-name", "x1")


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
@pytest.mark.parametrize("shards", [1, 2, 3, 4, 6, 8])
def test_a_partitions_purgatory_runs_in_its_shards_process(processes: int, shards: int) -> None:
    for purgatories in range(processes, 3 * processes + 2):  # every process has one
        topo = processes_topology(processes, shards, purgatories)
        for topic in TOPICS:
            for partition in range(40):
                shard, purgatory = topo.shard_for(topic, partition), \
                    topo.purgatory_for(topic, partition)
                assert purgatory.node == shard.node, (processes, shards, purgatories, topic,
                                                      partition)
                index = int(purgatory.name.removeprefix("purgatory-"))
                assert 0 <= index < purgatories


@pytest.mark.parametrize(("processes", "shards", "purgatories"),
                         [(2, 2, 4), (2, 4, 4), (3, 3, 6), (2, 2, 6), (2, 6, 4), (1, 2, 3)])
def test_partitions_spread_evenly_over_their_process_purgatories(
        processes: int, shards: int, purgatories: int) -> None:
    topo = processes_topology(processes, shards, purgatories)
    used: dict[str, int] = {}
    for topic in TOPICS:
        for partition in range(120):
            name = topo.purgatory_for(topic, partition).name
            used[name] = used.get(name, 0) + 1
    # every purgatory of a process that runs a shard gets a fair share of its partitions
    live = {f"purgatory-{j}" for j in range(purgatories) if j % processes < shards}
    assert set(used) == live
    for node in set(topo.process_nodes or ("node-1",)):
        counts = [c for name, c in used.items()
                  if topo.purgatory(int(name.removeprefix("purgatory-"))).node == node]
        if counts:
            assert max(counts) <= 1.25 * min(counts), (node, used)


def test_one_process_spreads_as_before() -> None:
    for shards, purgatories in ((1, 1), (2, 1), (2, 3), (5, 2)):
        topo = processes_topology(1, shards, purgatories)
        for topic in TOPICS:
            for partition in range(30):
                assert topo.purgatory_index(topic, partition) == \
                    spread_index(topic, partition, purgatories)


def test_a_process_with_no_purgatory_falls_back_to_the_spread_over_all() -> None:
    topo = processes_topology(3, 3, 1)  # processes 1 and 2 have none
    assert {topo.purgatory_for(t, p) for t in TOPICS for p in range(20)} == \
        {topo.purgatory(0)}
    topo = processes_topology(3, 6, 2)  # process 2 has none: anywhere, as before
    for topic in TOPICS:
        for partition in range(30):
            shard = topo.shard_for(topic, partition)
            index = topo.purgatory_index(topic, partition)
            if shard.node == "node-1/2":
                assert index == spread_index(topic, partition, 2)
            else:
                assert topo.purgatory(index).node == shard.node


@pytest.mark.parametrize(("settings", "expected"), [
    ({}, 1),  # num.processes 0 (not resolved yet): one
    ({"num.processes": 1}, 1),
    ({"num.processes": 2}, 2),
    ({"num.processes": 4, "num.partition.shards": 8}, 4),
    ({"num.processes": 2, "num.purgatory.shards": 3}, 3),  # explicit settings kept
    ({"num.processes": 4, "num.purgatory.shards": 1}, 1),
])
def test_the_default_purgatory_count_is_one_per_process(settings: dict[str, int],
                                                         expected: int) -> None:
    assert Topology.from_config("node-1", Config(settings)).num_purgatories == expected


def test_a_negative_purgatory_count_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"num\.purgatory\.shards"):
        Config({"num.purgatory.shards": -1})


@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize(("shards", "purgatories"), [(2, 2), (4, 3), (6, 6), (1, 1)])
def test_placement_first_puts_every_shard_and_purgatory_in_process_0(
        processes: int, shards: int, purgatories: int) -> None:
    nodes = tuple(f"node-1/{k}" for k in range(processes))
    config = Config({"num.partition.shards": shards, "num.purgatory.shards": purgatories,
                     "num.processes.shard.placement": "first"})
    topo = dataclasses.replace(Topology.from_config(nodes[1], config), home=nodes[0],
                               process_nodes=nodes)
    assert topo.local_shards() == [] and topo.local_purgatories() == []
    first = dataclasses.replace(topo, node=nodes[0])
    assert first.local_shards() == list(range(shards))
    assert first.local_purgatories() == list(range(purgatories))
    for topic in TOPICS:
        for partition in range(40):  # the same shards as with one process
            assert topo.shard_for(topic, partition) == \
                Address(nodes[0], f"shard-{spread_index(topic, partition, shards)}")
            assert topo.purgatory_for(topic, partition) == \
                Address(nodes[0], f"purgatory-{spread_index(topic, partition, purgatories)}")


def test_an_unknown_placement_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"num\.processes\.shard\.placement"):
        Config({"num.processes.shard.placement": "last"})
