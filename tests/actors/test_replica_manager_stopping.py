"""A stopping node starts no replica fetcher.

Once its node stops taking input (``Node.stop_intake``: after the controlled shutdown,
while processes 1.. stop), the metadata still moves partitions: a LeaderAndIsr that
makes this broker a follower of a leader it fetches from nothing yet must not spawn
that leader's fetcher (Kafka's ReplicaManager.shutdown stops its fetcher manager
first). Before, one was spawned; it sent no fetch (its node had stopped), but it was
one more actor the shutdown had to stop. Real shard, ReplicaManager, log manager and
purgatory in one node (tests/actors/test_partition_shard_restart.py's cluster).
"""

from __future__ import annotations

from pathlib import Path

from actors.replica_fetcher import fetcher_name
from actors.runtime.config import Config
from actors.runtime.node import Node
from actors.topology import stable_hash
from tests.actors.test_partition_shard_restart import Cluster, _cluster, _got, _stats
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.cluster_messages import LeaderAndIsr, LeaderAndIsrPartition, LiveLeaderRow
from wire.errors import ErrorCode

NONE = int(ErrorCode.NONE)


def _lai(c: Cluster, row: LeaderAndIsrPartition, answers: int) -> None:
    """``row`` given (brokers 1, 2 and 3 live), its answer the ``answers``-th: no error."""
    c.node.tell(c.manager, LeaderAndIsr(1, 1, 5, [row], [
        LiveLeaderRow(1, ""), LiveLeaderRow(2, ""), LiveLeaderRow(3, "")], {row.topic: {}}),
        sender=c.controller.name)
    wait_for(lambda: len(_got(c.node, c.controller, "LeaderAndIsrResponse")) >= answers,
             "the LeaderAndIsr answer")
    response = _got(c.node, c.controller, "LeaderAndIsrResponse")[answers - 1]
    assert response[1] == NONE and [tuple(r) for r in response[2]] == [
        (row.topic, row.partition, NONE)], response


def test_a_follower_role_given_while_the_node_stops_starts_no_fetcher(
        node: Node, tmp_path: Path) -> None:
    c = _cluster(node, tmp_path, [1, 2])
    # m-0 led here (replicas 1 and 3): no fetcher of broker 3 runs
    _lai(c, LeaderAndIsrPartition("m", 0, 1, 1, 0, [1, 3], 0, [1, 3], True), 2)
    wait_for(lambda: "m-0" in node.ask(c.manager, GetStats())["leading"], "m-0 led")
    name = fetcher_name(3, stable_hash("m-0") % int(Config()["num.replica.fetchers"]))
    assert name not in node.actors

    node.stop_intake(timeout=5)
    # the controlled shutdown moved m-0 to broker 3; this broker follows it
    _lai(c, LeaderAndIsrPartition("m", 0, 1, 3, 1, [3, 1], 1, [1, 3], False), 3)

    wait_for(lambda: "m-0" in node.ask(c.manager, GetStats())["following"], "m-0 followed")
    assert _stats(node, c.shard)["leaders"] == ["c-0"]  # the role taken by the shard
    assert name not in node.actors, "a fetcher was started on a stopping node"


def test_a_follower_role_given_while_the_node_stops_adds_nothing_to_a_running_fetcher(
        node: Node, tmp_path: Path) -> None:
    """As above, with the leader's fetcher running already (it fetches f-0 from broker 2):
    the partition the stop made this broker follow is not added to it. Before, it was: the
    fetcher asked the shard where m-0's log ends, for a partition nobody would fetch."""
    c = _cluster(node, tmp_path, [1, 2])
    added = _got(node, c.fetcher, "AddFetcherPartitions")
    assert len(added) == 1  # f-0, at the cluster's start
    _lai(c, LeaderAndIsrPartition("m", 0, 1, 1, 0, [1, 2], 0, [1, 2], True), 2)
    wait_for(lambda: "m-0" in node.ask(c.manager, GetStats())["leading"], "m-0 led")

    node.stop_intake(timeout=5)
    # the controlled shutdown moved m-0 to broker 2, whose fetcher here runs
    _lai(c, LeaderAndIsrPartition("m", 0, 1, 2, 1, [2, 1], 1, [1, 2], False), 3)

    wait_for(lambda: "m-0" in node.ask(c.manager, GetStats())["following"], "m-0 followed")
    assert node.quiesce(timeout=10)
    assert _got(node, c.fetcher, "AddFetcherPartitions") == added, \
        "a partition was added to a fetcher of a stopping node"
    assert not node.actors[c.fetcher.name].actor_stopped.is_set()  # f-0 stays with it


def test_a_fetcher_left_idle_while_the_node_stops_is_not_stopped_by_the_replica_manager(
        node: Node, tmp_path: Path) -> None:
    """The stop makes this broker lead f-0, the only partition its fetcher of broker 2
    fetches: the fetcher is told to drop it, and left to the node's shutdown. Before, the
    ReplicaManager stopped it there and then, waiting (up to 10 s) in its own loop."""
    c = _cluster(node, tmp_path, [1, 2])
    node.stop_intake(timeout=5)
    _lai(c, LeaderAndIsrPartition("f", 0, 1, 1, 8, [1, 2], 10, [2, 1], False), 2)

    wait_for(lambda: "f-0" in node.ask(c.manager, GetStats())["leading"], "f-0 led")
    assert node.quiesce(timeout=10)
    assert not node.actors[c.fetcher.name].actor_stopped.is_set(), \
        "the replica manager stopped an idle fetcher of a stopping node"
    assert _got(node, c.fetcher, "RemoveFetcherPartitions") == [[[["f", 0]]]]
