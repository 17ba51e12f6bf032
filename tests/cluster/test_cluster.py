"""Three `actorlog serve` processes form one cluster on a real ZooKeeper; real clients use it.

Registration and what each node answers (Metadata, DescribeCluster), topic
creation spread over the nodes, kafka-python, confluent-kafka and kcat
through any node (produce to leaders elsewhere, consume, groups), a second
node with a node.id in use, a ZooKeeper that is not there, topic deletion on
every replica.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from actors.metadata import znodes
from tests.broker.conftest import ROOT, free_port
from tests.broker.rawclient import DELETE_TOPICS, build
from tests.fixtures.cluster import Cluster, kafka_call, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, fetch_from, produce_to
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients, pytest.mark.num_processes(1, 2)]

NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


def admin(cluster: Cluster, via: int | None = None) -> KafkaAdminClient:
    bootstrap = cluster.nodes[via].bootstrap if via is not None else cluster.bootstrap
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def create(cluster: Cluster, name: str, partitions: int, rf: int, via: int | None = None,
           configs: dict[str, str] | None = None) -> None:
    client = admin(cluster, via)
    try:
        client.create_topics([NewTopic(name, partitions, rf, topic_configs=configs or {})])
    finally:
        client.close()


def test_nodes_on_three_addresses_register_and_each_answers_for_the_whole_cluster(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster = cluster_factory(3, hosts=["127.0.0.1", "127.0.0.2", "127.0.0.3"],
                              node_config={2: {"broker.rack": "rack-b"}})
    views = {i: n.metadata() for i, n in cluster.nodes.items()}
    expected = {i: (n.host, n.port, "rack-b" if i == 2 else None)
                for i, n in cluster.nodes.items()}
    for view in views.values():
        assert view.brokers == expected
    assert len({v.controller_id for v in views.values()}) == 1
    assert len({v.cluster_id for v in views.values()}) == 1
    cluster_id = views[1].cluster_id
    assert cluster_id
    for node in cluster.nodes.values():
        meta = (node.data_dir / "meta.properties").read_text()
        assert f"cluster.id={cluster_id}" in meta and f"broker.id={node.broker_id}" in meta

    # ZooKeeper holds Kafka's layout: each registration with the node's gateway.
    zk = ZooKeeperReader(zk_connect)
    try:
        assert zk.children(znodes.BROKER_IDS) == ["1", "2", "3"]
        for i, node in cluster.nodes.items():
            doc = json.loads(zk.get(znodes.broker_path(i)) or b"{}")
            assert doc["endpoints"] == [f"PLAINTEXT://{node.host}:{node.port}"]
            assert doc["actorlog_gateway"] == f"tcp://{node.host}:{node.gateway_port}"
        assert json.loads(zk.get(znodes.CONTROLLER) or b"{}")["brokerid"] == \
            views[1].controller_id
        assert (zk.get(znodes.CLUSTER_ID) or b"").decode().find(cluster_id) >= 0
    finally:
        zk.close()

    # DescribeCluster (kafka-python's admin uses it), through each node.
    for i in cluster.nodes:
        client = admin(cluster, via=i)
        try:
            described = client.describe_cluster()
        finally:
            client.close()
        assert described["cluster_id"] == cluster_id
        assert described["controller_id"] == views[1].controller_id
        assert {b["broker_id"]: (b["host"], b["port"], b["rack"])
                for b in described["brokers"]} == expected


def test_create_topics_rf3_spreads_leaders_and_replicas_over_the_nodes(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    create(cluster, "spread", 6, 3, via=2)
    view = cluster.wait_topic("spread", 6)
    parts = [view.partitions[("spread", p)] for p in range(6)]
    assert Counter(p.leader for p in parts) == {1: 2, 2: 2, 3: 2}
    for p in parts:
        assert sorted(p.replicas) == [1, 2, 3] and p.leader == p.replicas[0]
        assert sorted(p.isr) == [1, 2, 3] and p.offline == () and p.leader_epoch == 0
    # Each node hosts a log of every partition, leading some and following the others.
    # (Metadata can reach a node before its shards have opened the logs: wait for them.)
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s logs of spread",
                 lambda n=node: sorted(d.name for d in n.data_dir.glob("spread-*")) == [
                     f"spread-{p}" for p in range(6)])
    # Every node answers the same.
    assert all(n.metadata().partitions == view.partitions for n in cluster.nodes.values())

    client = admin(cluster)
    try:
        with pytest.raises(Exception, match=r"INVALID_REPLICATION_FACTOR|InvalidReplication"):
            client.create_topics([NewTopic("too-many", 1, 4)])
    finally:
        client.close()


def test_real_clients_through_any_node_produce_to_leaders_elsewhere_consume_and_use_groups(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(3)
    create(cluster, "orders", 6, 3, via=1)
    leaders = cluster.wait_topic("orders", 6).leaders("orders")

    # A node refuses produce and fetch for a partition it does not lead.
    p0_leader = leaders[0]
    other = next(n for i, n in cluster.nodes.items() if i != p0_leader)
    assert produce_to(other, "orders", 0, [b"x"]).error_code == NOT_LEADER
    assert fetch_from(other, "orders", 0).error_code == NOT_LEADER

    # confluent-kafka bootstrapped on node 1 only: every partition's leader gets its records.
    failed: list[Any] = []
    producer = Producer({"bootstrap.servers": cluster.nodes[1].bootstrap, "acks": "all",
                         "linger.ms": 5})
    for i in range(600):
        producer.produce("orders", key=f"k{i}".encode(), value=f"c{i}".encode(),
                         partition=i % 6,
                         on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and failed == []

    # kafka-python bootstrapped on node 2.
    kp = KafkaProducer(bootstrap_servers=cluster.nodes[2].bootstrap, acks="all")
    for i in range(60):
        kp.send("orders", value=f"p{i}".encode(), partition=i % 6).get(timeout=30)
    kp.close()

    # kcat bootstrapped on node 3.
    lines = "".join(f"kcat{i}\n" for i in range(30))
    subprocess.run(["kcat", "-P", "-b", cluster.nodes[3].bootstrap, "-t", "orders", "-p", "4"],
                   input=lines.encode(), check=True, timeout=60)

    # Each record is on its partition's leader, read back through every node's metadata.
    expected = {f"c{i}".encode() for i in range(600)} | {f"p{i}".encode() for i in range(60)} \
        | {f"kcat{i}".encode() for i in range(30)}
    got: list[bytes] = []
    consumer = Consumer({"bootstrap.servers": cluster.nodes[3].bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 90
    while len(got) < len(expected) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(bytes(msg.value()))
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted(expected)
    for partition, leader in leaders.items():
        node = cluster.nodes[leader]
        assert fetch_from(node, "orders", partition).high_watermark > 0

    # The group's coordinator is the leader of its __consumer_offsets partition, and
    # another node's FindCoordinator says so too; its committed offsets are seen everywhere.
    # (__consumer_offsets reaches the metadata of the nodes, and of each of their processes,
    # by UpdateMetadata after the coordinator's node made it: wait until every one knows it.)
    cluster.wait_topic("__consumer_offsets", 6)
    offsets_view = cluster.view(2)
    assert len(offsets_view.leaders("__consumer_offsets")) == 6
    for i in cluster.nodes:
        client = admin(cluster, via=i)
        try:
            committed = client.list_group_offsets("readers")["readers"]
        finally:
            client.close()
        assert sum(meta.offset for meta in committed.values()) == len(expected)

    # kafka-python consumer group through node 1, kcat reading through node 2.
    kc = KafkaConsumer("orders", bootstrap_servers=cluster.nodes[1].bootstrap,
                       group_id="kp-readers", auto_offset_reset="earliest",
                       consumer_timeout_ms=20_000)
    seen = [m.value for m in kc]
    kc.commit()
    kc.close()
    assert sorted(seen) == sorted(expected)
    out = subprocess.run(["kcat", "-C", "-b", cluster.nodes[2].bootstrap, "-t", "orders",
                          "-p", "4", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=60)
    assert {f"kcat{i}" for i in range(30)} <= set(out.stdout.decode().split())


def test_a_zstd_topic_answers_an_old_fetch_not_leader_where_its_log_is_not(
        cluster_factory: Any) -> None:
    """A Fetch older than v10 of a zstd topic is UNSUPPORTED_COMPRESSION_TYPE from its
    leader only: another node answers NOT_LEADER_OR_FOLLOWER, as Kafka decides on the
    codec where it reads the log, so the client looks for the leader first."""
    cluster = cluster_factory(2)
    create(cluster, "zstd-old", 1, 1, configs={"compression.type": "zstd"})
    leader = cluster.wait_topic("zstd-old", 1).leaders("zstd-old")[0]
    other = next(n for i, n in cluster.nodes.items() if i != leader)
    assert fetch_from(other, "zstd-old", 0, version=9).error_code == NOT_LEADER
    assert fetch_from(cluster.nodes[leader], "zstd-old", 0, version=9).error_code == int(
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)


def test_a_second_node_with_a_node_id_in_use_is_refused_in_one_line(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(2)
    config = tmp_path / "dup.toml"
    config.write_text(f'"zookeeper.connect" = "{cluster.zk_connect}"\n"node.id" = 1\n'
                      f'"zookeeper.session.timeout.ms" = 4000\n')
    done = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "dup")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: node.id 1 is already registered"), done.stderr
    assert "must be unique" in lines[-1]
    assert not (tmp_path / "dup").exists()
    assert set(cluster.view(2).brokers) == {1, 2}  # the holder is untouched


def test_no_zookeeper_within_the_connection_timeout_is_one_line(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    config = tmp_path / "node.toml"
    config.write_text(f'"zookeeper.connect" = "127.0.0.1:{port}"\n'
                      f'"zookeeper.connection.timeout.ms" = 1500\n')
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    waited = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"Error: could not connect to ZooKeeper at 127.0.0.1:{port} "
                           f"within 1500 ms (zookeeper.connection.timeout.ms)"), done.stderr
    assert waited >= 1.5  # it did wait as long as told (the lower bound only)
    assert not (tmp_path / "data").exists()


def test_delete_topics_removes_every_replica_and_the_znodes(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster = cluster_factory(3)
    create(cluster, "doomed", 3, 3)
    create(cluster, "kept", 1, 2)
    # CreateTopics is answered once the answering node knows the topic; the others learn it
    # by UpdateMetadata after (and a node that hosts no replica of kept has no log to wait for).
    cluster.wait_topic("kept", 1)
    for node in cluster.nodes.values():
        wait_for("the logs of doomed", lambda n=node: len(list(n.data_dir.glob("doomed-*"))) == 3)
    client = admin(cluster, via=3)
    try:
        client.delete_topics(["doomed"])
    finally:
        client.close()
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id} to delete doomed",
                 lambda n=node: not list(n.data_dir.glob("doomed-*")))
        # The StopReplica that deletes the logs and the UpdateMetadata that drops the topic
        # are separate requests (and each process of a node holds its own copy of the
        # metadata): the metadata may say doomed a moment after the logs went.
        wait_for(f"node {node.broker_id}'s metadata to drop doomed",
                 lambda n=node: all("doomed" not in v.topics() for v in n.views()))
        assert all("kept" in v.topics() for v in node.views())
    zk = ZooKeeperReader(zk_connect)
    try:
        wait_for("the znodes of doomed to go",
                 lambda: "doomed" not in zk.children(znodes.TOPICS)
                 and not zk.children(znodes.DELETE_TOPICS))
    finally:
        zk.close()


def test_delete_topic_enable_false_refuses_deletion(cluster_factory: Any) -> None:
    cluster = cluster_factory(2, config={"delete.topic.enable": False})
    create(cluster, "stays", 1, 2)
    cluster.wait_topic("stays", 1)  # node 1 may learn it after the controller answered
    # Each replica opens its log when its LeaderAndIsr arrives, after CreateTopics is
    # answered (as in Kafka); the logs must be there before the refusal can keep them.
    for node in cluster.nodes.values():
        wait_for(f"node {node.broker_id}'s log of stays",
                 lambda n=node: list(n.data_dir.glob("stays-*")))
    client = admin(cluster)
    try:
        with pytest.raises(Exception, match=r"TOPIC_DELETION_DISABLED|TopicDeletionDisabled"):
            client.delete_topics(["stays"])
        # refused before any topic is looked at, as Kafka: an unknown (stale) id too (it
        # was UNKNOWN_TOPIC_ID), on every node, the controller or not
        unknown = uuid.uuid4()
        result = client.delete_topics([unknown], raise_errors=False)
        assert [r["error_code"] for r in result["topics"]] == [
            int(ErrorCode.TOPIC_DELETION_DISABLED)]
    finally:
        client.close()
    for i, node in cluster.nodes.items():
        response = kafka_call(node.host, node.port, build(DELETE_TOPICS, 6, {
            "topics": [{"name": None, "topic_id": unknown}, {"name": "absent", "topic_id": None}],
            "timeout_ms": 10_000}))
        assert [r.error_code for r in response.responses] == [
            int(ErrorCode.TOPIC_DELETION_DISABLED)] * 2, i
    assert "stays" in cluster.view(1).topics()
    assert all(list(n.data_dir.glob("stays-*")) for n in cluster.nodes.values())


def offsets_topic_made_by_a_group(cluster: Cluster, group: str, partitions: int) -> None:
    """A consumer's FindCoordinator makes the cluster create __consumer_offsets."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    consumer.subscribe(["anything"])
    deadline = time.monotonic() + 60
    try:
        while len(cluster.view(1).leaders("__consumer_offsets")) < partitions:
            assert time.monotonic() < deadline, "no __consumer_offsets after 60 s"
            consumer.poll(0.2)
    finally:
        consumer.close()


def test_offsets_topic_replication_factor_is_capped_to_the_live_brokers(
        cluster_factory: Any) -> None:
    cluster = cluster_factory(2, config={"offsets.topic.replication.factor": 3,
                                         "offsets.topic.num.partitions": 4})
    offsets_topic_made_by_a_group(cluster, "capped", 4)
    parts = offsets_partitions_seen(cluster, 2, 4)
    assert all(len(p.replicas) == 2 for p in parts)  # 3 wanted, 2 brokers live

    small = cluster_factory(3, config={"offsets.topic.replication.factor": 1,
                                       "offsets.topic.num.partitions": 3})
    offsets_topic_made_by_a_group(small, "single", 3)
    parts = offsets_partitions_seen(small, 3, 3)
    assert all(len(p.replicas) == 1 for p in parts)


def offsets_partitions_seen(cluster: Cluster, via: int, partitions: int) -> list[Any]:
    """__consumer_offsets' partitions as node ``via`` tells them, once it knows all of them
    (node 1 saw them first: the metadata reaches each node, and each of its processes, in
    its own time)."""
    return wait_for(f"node {via} to know the {partitions} partitions of __consumer_offsets",
                    lambda: (lambda parts: parts if len(parts) == partitions else None)(
                        [p for (t, _), p in cluster.view(via).partitions.items()
                         if t == "__consumer_offsets"]), timeout_s=30)
