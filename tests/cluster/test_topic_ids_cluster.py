"""Topic ids in a cluster (real nodes, real ZooKeeper).

The controller gives each topic an id when it creates it, kept as ``topic_id`` in
``/brokers/topics/<name>`` as Kafka keeps it, and sends it with every LeaderAndIsr; each
replica writes it in its partition directory (``partition.metadata``).

A delete lost with its shard's process (its mailbox and all, while the namesake's role
was on record already: see ReplicaManager's docstring) leaves the deleted topic's
directory on a node that then takes the namesake's role. Before topic ids the role
opened that directory and the namesake served the deleted topic's records. The test makes
that state with real nodes: a deleted topic's directories are put back where the delete
removed them (the disk as a delete that never ran leaves it), then the namesake is
created. Its replicas find another id in the directories: deleted, never opened.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import NewTopic

from actors.core.topic_id import (
    decode_topic_id,
    is_topic_id,
    read_partition_metadata,
)
from actors.metadata import znodes
from tests.broker.rawclient import DELETE_TOPICS, METADATA, build, read_records
from tests.cluster.test_cluster import admin, create
from tests.fixtures.cluster import Cluster, kafka_call, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, fetch_from, produce_to
from wire.errors import ErrorCode


def _topic_id(zk_connect: str, topic: str) -> str:
    zk = ZooKeeperReader(zk_connect)
    try:
        data = zk.get(znodes.topic_path(topic))
    finally:
        zk.close()
    assert data is not None, f"no znode for {topic}"
    topic_id: str = json.loads(data).get("topic_id", "")
    return topic_id


def _values(cluster: Cluster, topic: str) -> list[bytes]:
    leader = cluster.view().leaders(topic)[0]
    part = fetch_from(cluster.nodes[leader], topic, 0)
    assert part.error_code == 0, part
    return [v for _o, _k, v in read_records(part.records)]


def _metadata_topic_id(cluster: Cluster, node_id: int, topic: str) -> uuid.UUID:
    """Metadata v12's ``topic_id`` of ``topic`` as node ``node_id`` answers it."""
    node = cluster.nodes[node_id]
    response = kafka_call(node.host, node.port, build(METADATA, 12, {
        "topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}))
    [found] = response.topics
    topic_id: uuid.UUID = found.topic_id
    return topic_id


def _delete(cluster: Cluster, topic: str) -> None:
    client = admin(cluster)
    try:
        client.delete_topics([topic])
    finally:
        client.close()
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id} to delete {topic}",
                 lambda n=node: not (n.data_dir / f"{topic}-0").exists())


def test_a_namesakes_replicas_delete_a_dead_topics_directory_instead_of_serving_it(
        cluster_factory: Any, zk_connect: str, tmp_path: Path) -> None:
    cluster: Cluster = cluster_factory(2)
    topic = "reborn"
    create(cluster, topic, 1, 2)
    cluster.wait_topic(topic, 1)
    old_id = _topic_id(zk_connect, topic)
    assert is_topic_id(old_id)
    leader = cluster.view().leaders(topic)[0]
    assert produce_to(cluster.nodes[leader], topic, 0, [b"old"] * 5).error_code == 0
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s directory to hold the id",
                 lambda n=node: read_partition_metadata(n.data_dir / f"{topic}-0") == old_id)
    cluster.stop()
    kept = {i: tmp_path / f"kept-{i}" for i in cluster.nodes}
    for i, node in cluster.nodes.items():
        shutil.copytree(node.data_dir / f"{topic}-0", kept[i])

    cluster.start()
    _delete(cluster, topic)
    cluster.stop()
    for i, node in cluster.nodes.items():  # the directories the delete removed, back
        shutil.copytree(kept[i], node.data_dir / f"{topic}-0")

    cluster.start()
    create(cluster, topic, 1, 2)
    cluster.wait_topic(topic, 1)
    new_id = _topic_id(zk_connect, topic)
    assert is_topic_id(new_id) and new_id != old_id
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id} to open the namesake anew",
                 lambda n=node: read_partition_metadata(n.data_dir / f"{topic}-0") == new_id)
    assert _values(cluster, topic) == [], "the deleted topic's records are served"
    leader = cluster.view().leaders(topic)[0]
    assert produce_to(cluster.nodes[leader], topic, 0, [b"new"]).base_offset == 0
    assert _values(cluster, topic) == [b"new"]
    for i in cluster.nodes:  # Metadata v10+ answers the id, on every node
        wait_for(f"node {i}'s Metadata to give the id", lambda i=i: _metadata_topic_id(
            cluster, i, topic) == uuid.UUID(bytes=decode_topic_id(new_id)))
    for node in cluster.nodes.values():
        assert re.search(rf"{topic}-0: its directory holds topic id {re.escape(old_id)}, "
                         rf"not {re.escape(new_id)}", node.log()), node.broker_id


def test_a_topic_created_over_an_orphan_directory_says_so_on_each_replica(
        cluster_factory: Any) -> None:
    """A partition directory with no id that no topic names, on every node: a topic created
    by its name opens it through the controller's LeaderAndIsr, records and all (as Kafka's
    LogManager would); each replica warns once naming the directory (it was said only on a
    single node's path)."""
    cluster: Cluster = cluster_factory(2)
    create(cluster, "source", 1, 2)
    cluster.wait_topic("source", 1)
    leader = cluster.view().leaders("source")[0]
    assert produce_to(cluster.nodes[leader], "source", 0, [b"left"] * 3).error_code == 0
    for node in cluster.nodes.values():  # (acks=-1: the ISR's; the follower's on disk)
        wait_for(f"node {node.broker_id}'s replica to hold the records",
                 lambda n=node: (n.data_dir / "source-0" / f"{0:020d}.log").stat().st_size > 0)
    cluster.stop()
    for node in cluster.nodes.values():
        orphan = node.data_dir / "orphan-0"
        shutil.copytree(node.data_dir / "source-0", orphan)
        (orphan / "partition.metadata").unlink()

    cluster.start()
    create(cluster, "orphan", 1, 2)
    cluster.wait_topic("orphan", 1)
    for node in cluster.nodes.values():
        said = (f"orphan-0: created, and its directory {node.data_dir / 'orphan-0'} was there "
                "already (")
        wait_for(f"node {node.broker_id} to warn of the orphan directory",
                 lambda n=node, said=said: said in n.log())
        assert node.log().count(said) == 1, node.broker_id
    def served() -> bool:  # once the leader's high watermark passes them (a follower's fetch)
        leader = cluster.view().leaders("orphan")[0]
        part = fetch_from(cluster.nodes[leader], "orphan", 0)
        return part.error_code == 0 and [v for _o, _k, v in read_records(part.records)] == [
            b"left"] * 3

    wait_for("the orphan directory's records to be served", served)
    create(cluster, "plain", 1, 2)  # a topic created on no directory says nothing of it
    cluster.wait_topic("plain", 1)
    for node in cluster.nodes.values():
        assert "plain-0: created, and its directory" not in node.log(), node.broker_id


def test_the_controller_gives_an_id_to_a_topic_an_older_version_made(
        cluster_factory: Any, zk_connect: str) -> None:
    """A topic znode without ``topic_id`` (written as an actorlog before ids wrote it): the
    controller writes one in, and the replicas write it in their directories."""
    cluster: Cluster = cluster_factory(2)
    topic = "from-before"
    zk = ZooKeeperReader(zk_connect)
    try:
        zk.client.create(znodes.topic_config_path(topic), znodes.encode_topic_config({}),
                         makepath=True)
        zk.client.create(znodes.topic_path(topic), json.dumps(
            {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {},
             "removing_replicas": {}}).encode(), makepath=True)
    finally:
        zk.close()
    wait_for("the controller to give it an id", lambda: is_topic_id(_topic_id(zk_connect, topic)))
    topic_id = _topic_id(zk_connect, topic)
    cluster.wait_topic(topic, 1)
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s directory to hold the id",
                 lambda n=node: read_partition_metadata(n.data_dir / f"{topic}-0") == topic_id)
    leader = cluster.view().leaders(topic)[0]
    assert produce_to(cluster.nodes[leader], topic, 0, [b"v"]).error_code == 0
    cluster.stop()
    cluster.start()  # the next controller keeps it
    assert _topic_id(zk_connect, topic) == topic_id
    cluster.wait_topic(topic, 1)
    wait_for("the partition served again", lambda: _values(cluster, topic) == [b"v"])


def _written_back_without_its_id(cluster: Cluster, zk_connect: str, topic: str,
                                 value: bytes, configs: dict[str, str]) -> str:
    """A 1-partition RF 2 topic with 4 acknowledged records and its id in both replicas'
    directories; then the cluster stopped and the topic's znode written back as an older
    version writes it, without the id. Returns the id the directories hold."""
    create(cluster, topic, 1, 2, configs=configs)
    cluster.wait_topic(topic, 1)
    first = _topic_id(zk_connect, topic)
    leader = cluster.view().leaders(topic)[0]
    assert produce_to(cluster.nodes[leader], topic, 0, [value] * 4).error_code == 0
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s directory to hold the id",
                 lambda n=node: read_partition_metadata(n.data_dir / f"{topic}-0") == first)
    cluster.stop()
    zk = ZooKeeperReader(zk_connect)
    try:  # as an older version writes it back: no id
        zk.client.set(znodes.topic_path(topic), json.dumps(
            {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {},
             "removing_replicas": {}}).encode())
    finally:
        zk.close()
    return first


def test_a_znode_an_older_version_rewrote_without_the_id_keeps_the_replicas_records(
        cluster_factory: Any, zk_connect: str) -> None:
    """An older controller (or admin tool) rewrote the topic's znode without its id, over
    replicas whose directories hold it. The controller gives the topic another id, marked
    adopted: every replica rewrites its directory's id and keeps its records (as Kafka's
    ZooKeeper mode, which never deletes on a mismatch). Before: each replica took its
    directory for a dead namesake's and deleted it."""
    cluster: Cluster = cluster_factory(2)
    topic = "rewritten"
    first = _written_back_without_its_id(cluster, zk_connect, topic, b"kept", {})
    cluster.start()
    wait_for("the controller to give it an id", lambda: is_topic_id(_topic_id(zk_connect, topic)))
    late = _topic_id(zk_connect, topic)
    assert late != first
    cluster.stop()
    cluster.start()  # every replica is given the late id with its role
    cluster.wait_topic(topic, 1)
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s directory to hold the late id",
                 lambda n=node: read_partition_metadata(n.data_dir / f"{topic}-0") == late)
    wait_for("the records served", lambda: _values(cluster, topic) == [b"kept"] * 4)
    for node in cluster.nodes.values():
        log = node.log()
        assert "a deleted namesake's whose delete was lost" not in log, node.broker_id
        assert f"its directory holds topic id {first}, and the topic's id {late} was " \
            "given late" in log, node.broker_id
    _wait_adoption_cleared(zk_connect, topic, late)


def _metadata_by_id(cluster: Cluster, node_id: int, topic_id: uuid.UUID) -> Any:
    node = cluster.nodes[node_id]
    response = kafka_call(node.host, node.port, build(METADATA, 12, {
        "topics": [{"topic_id": topic_id, "name": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False}))
    [found] = response.topics
    return found


@pytest.mark.num_processes(1, 2)  # with 2, each connection may land on either process
def test_create_answers_the_znodes_id_and_every_node_describes_and_deletes_by_it(
        cluster_factory: Any, zk_connect: str) -> None:
    """CreateTopics v7, Metadata v12 by id and DeleteTopics v6 through kafka-python's
    admin client, as a client of a ZooKeeper cluster sees them from any node."""
    cluster: Cluster = cluster_factory(2)
    topic = "by-id"
    client = admin(cluster)
    try:
        [row] = client.create_topics([NewTopic(topic, 2, 2)])["topics"]
        assert row["error_code"] == 0 and row["topic_id"], row
        topic_id = uuid.UUID(row["topic_id"])  # kafka-python's to_dict: a Uuid as text
        assert topic_id.bytes == decode_topic_id(_topic_id(zk_connect, topic))
        cluster.wait_topic(topic, 2)
        for i in cluster.nodes:
            wait_for(f"node {i} to describe the topic by its id", lambda i=i: (
                lambda t: (t.error_code, t.name, len(t.partitions)) == (0, topic, 2))(
                    _metadata_by_id(cluster, i, topic_id)))
        unknown = uuid.uuid4()
        for i in cluster.nodes:
            found = _metadata_by_id(cluster, i, unknown)
            assert (found.error_code, found.name, found.topic_id) == (
                int(ErrorCode.UNKNOWN_TOPIC_ID), None, unknown)
        for i, node in cluster.nodes.items():  # a topic named both ways: refused, kept
            response = kafka_call(node.host, node.port, build(DELETE_TOPICS, 6, {
                "topics": [{"name": topic, "topic_id": topic_id}], "timeout_ms": 10_000}))
            assert [r.error_code for r in response.responses] == [
                int(ErrorCode.INVALID_REQUEST)], i
        result = client.delete_topics([topic_id], timeout_ms=30_000)
        assert [(r["error_code"], r["name"], uuid.UUID(r["topic_id"]))
                for r in result["topics"]] == [(0, topic, topic_id)]
        for i in cluster.nodes:
            wait_for(f"node {i} to forget the id", lambda i=i: _metadata_by_id(
                cluster, i, topic_id).error_code == int(ErrorCode.UNKNOWN_TOPIC_ID))
        again = client.delete_topics([topic_id], raise_errors=False)
        assert [r["error_code"] for r in again["topics"]] == [int(ErrorCode.UNKNOWN_TOPIC_ID)]
    finally:
        client.close()
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id} to delete {topic}",
                 lambda n=node: not (n.data_dir / f"{topic}-0").exists())


def _wait_adoption_cleared(zk_connect: str, topic: str, topic_id: str) -> None:
    """Every replica read the adopted id back from its disk: the topic znode is written
    without the mark and the record under /actorlog dropped."""
    zk = ZooKeeperReader(zk_connect)
    try:
        wait_for(f"the adoption of {topic}'s id cleared",
                 lambda: zk.get(znodes.adopted_topic_id_path(topic)) is None, timeout_s=60)
        doc = json.loads(zk.get(znodes.topic_path(topic)) or b"{}")
        assert doc["topic_id"] == topic_id and "topic_id_adopted" not in doc, doc
    finally:
        zk.close()


def test_an_adopted_id_survives_a_kafka_tools_rewrite_of_the_topic_znode(
        cluster_factory: Any, zk_connect: str) -> None:
    """The adopted mark outlives a Kafka 2.8+ tool's rewrite of the topic znode.

    An older version rewrote the znode without its id while node 2 was down; the
    controller gave the topic a late id, marked adopted. Then a Kafka
    2.8+ tool (partition reassignment, more partitions) rewrote the znode as it does:
    ``topic_id`` kept, the fields it does not know (our ``topic_id_adopted``) dropped.
    Node 2's directory still holds the topic's earlier id (it never learnt the late one),
    and it comes back alone, the partition's only live replica (elected uncleanly, as
    the topic allows). Before the record under ``/actorlog`` it took its directory for a
    dead namesake's and deleted the acknowledged records; now it rewrites the id and
    serves them. The adoption stands while a replica has not read the late id back."""
    cluster: Cluster = cluster_factory(2)
    topic = "rewritten-twice"
    first = _written_back_without_its_id(cluster, zk_connect, topic, b"acked",
                                         {"unclean.leader.election.enable": "true"})
    one, two = cluster.nodes[1], cluster.nodes[2]
    one.start()
    wait_for("the controller to give it an id", lambda: is_topic_id(_topic_id(zk_connect, topic)))
    late = _topic_id(zk_connect, topic)
    assert late != first
    one.stop()

    zk = ZooKeeperReader(zk_connect)
    try:  # as a Kafka 2.8+ tool writes it: the id kept, the fields it does not know dropped
        doc = json.loads(zk.get(znodes.topic_path(topic)) or b"{}")
        # (node 2 has not read the late id back: the adoption stands)
        assert doc.pop("topic_id_adopted") is True
        zk.client.set(znodes.topic_path(topic), json.dumps(doc).encode())
    finally:
        zk.close()
    assert read_partition_metadata(two.data_dir / f"{topic}-0") == first

    two.start()
    wait_for("node 2 to lead", lambda: two.metadata([topic]).leaders(topic).get(0) == 2)
    wait_for("node 2's directory to hold the late id",
             lambda: read_partition_metadata(two.data_dir / f"{topic}-0") == late)

    def served() -> list[bytes]:
        part = fetch_from(two, topic, 0)
        assert part.error_code == 0, part
        return [v for _o, _k, v in read_records(part.records)]

    wait_for("the acknowledged records served", lambda: served() == [b"acked"] * 4)
    assert "a deleted namesake's whose delete was lost" not in two.log()
    assert f"not {late}" not in two.log()
    # node 1, a replica, has not said it holds the late id (it is down): the adoption
    # stands, recorded where no Kafka tool writes. Its clearing, once every replica read
    # the id back, is the other tests' (here it would wait on node 1's answer alone)
    zk = ZooKeeperReader(zk_connect)
    try:
        record = zk.get(znodes.adopted_topic_id_path(topic))
        assert record is not None
        assert znodes.decode_adopted_topic_id(topic, record).topic_id == late
        assert json.loads(zk.get(znodes.topic_path(topic)) or b"{}")["topic_id"] == late
    finally:
        zk.close()


def test_a_damaged_adoption_record_does_not_keep_the_cluster_without_a_controller(
        cluster_factory: Any, zk_connect: str) -> None:
    """A record under /actorlog/adopted_topic_ids that cannot be read (damaged, or a
    format this version does not know): each controller that loaded it failed, resigned,
    and the next failed on it too, leaving the cluster without one. Now it counts as
    adopted (the safe direction): the controller loads, writes it readable, the replicas
    keep their records, and the adoption clears once both have read the id back."""
    cluster: Cluster = cluster_factory(2)
    topic = "damaged-record"
    create(cluster, topic, 1, 2)
    cluster.wait_topic(topic, 1)
    first = _topic_id(zk_connect, topic)
    leader = cluster.view().leaders(topic)[0]
    assert produce_to(cluster.nodes[leader], topic, 0, [b"kept"] * 3).error_code == 0
    cluster.stop()
    zk = ZooKeeperReader(zk_connect)
    try:
        zk.client.create(znodes.adopted_topic_id_path(topic), b"\x00not json", makepath=True)
    finally:
        zk.close()
    cluster.start()
    create(cluster, "after", 1, 2)  # a controller answers
    cluster.wait_topic("after", 1)
    cluster.wait_topic(topic, 1)
    wait_for("the records served", lambda: _values(cluster, topic) == [b"kept"] * 3)
    assert _topic_id(zk_connect, topic) == first
    _wait_adoption_cleared(zk_connect, topic, first)
