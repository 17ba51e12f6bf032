"""Topic admin that changes a live cluster goes through its controller: CreatePartitions,
topic config changes and ElectLeaders on three `actorlog serve` processes and a real ZooKeeper, with
confluent-kafka's AdminClient and kafka-python's KafkaAdminClient.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    UnknownTopicOrPartitionError,
)
from kafka.protocol.admin.groups import DeleteGroupsRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from actors.metadata import znodes
from tests.broker.test_groups import call
from tests.cluster.test_cluster import create
from tests.fixtures.cluster import Cluster, wait_for
from tests.fixtures.cluster_tools import ZooKeeperReader, produce_to
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def _code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return int(exc.args[0].code())


def _assignment(zk_connect: str, topic: str) -> dict[int, list[int]]:
    zk = ZooKeeperReader(zk_connect)
    try:
        doc = json.loads(zk.get(znodes.topic_path(topic)) or b"{}")
    finally:
        zk.close()
    return {int(p): list(r) for p, r in doc.get("partitions", {}).items()}


def test_create_partitions_goes_through_the_controller_and_reaches_every_node(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    create(cluster, "grow", 2, 2)
    cluster.wait_topic("grow", 2)
    # A node that is not the controller takes the request: it is forwarded.
    via = next(i for i in cluster.nodes if i != cluster.controller())
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})

    # Kafka's errors for bad input, and validate_only changes nothing.
    futures = client.create_partitions([NewPartitions("grow", 1), NewPartitions("nope", 4)])
    with pytest.raises(KafkaException) as smaller:
        futures["grow"].result(30)
    assert _code(smaller.value) == int(ErrorCode.INVALID_PARTITIONS)
    with pytest.raises(KafkaException) as unknown:
        futures["nope"].result(30)
    assert _code(unknown.value) == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    bad = client.create_partitions([NewPartitions("grow", 5, [[1, 1], [2, 3], [3, 1]])])
    with pytest.raises(KafkaException) as duplicate:
        bad["grow"].result(30)
    assert _code(duplicate.value) == int(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    client.create_partitions([NewPartitions("grow", 6)], validate_only=True)["grow"].result(30)
    assert len(_assignment(zk_connect, "grow")) == 2

    # Grow to 4 with an explicit assignment, then to 6 by the controller's round robin.
    client.create_partitions([NewPartitions("grow", 4, [[3, 1], [1, 2]])])["grow"].result(30)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        kp.create_partitions({"grow": KpNewPartitions(6)})
        with pytest.raises(InvalidPartitionsError):
            kp.create_partitions({"grow": KpNewPartitions(6)})
        with pytest.raises(UnknownTopicOrPartitionError):
            kp.create_partitions({"absent": KpNewPartitions(3)})
    finally:
        kp.close()
    stored = _assignment(zk_connect, "grow")
    assert sorted(stored) == list(range(6))
    assert stored[2] == [3, 1] and stored[3] == [1, 2]
    assert all(len(r) == 2 and len(set(r)) == 2 for r in stored.values())
    for i in cluster.nodes:  # every node's metadata has the six partitions with leaders
        found = wait_for(f"node {i} sees grow's 6 partitions with leaders", lambda i=i: (
            lambda v: v if len(v.leaders("grow")) == 6
            and all(leader > 0 for leader in v.leaders("grow").values()) else None)(
                cluster.nodes[i].metadata(["grow"])))
        assert found.partitions[("grow", 2)].replicas == (3, 1)
    # The new partitions take records at their leader, replicated to the follower.
    leaders = cluster.view().leaders("grow")
    for partition in (2, 5):
        node = cluster.nodes[leaders[partition]]
        answer = produce_to(node, "grow", partition, [b"a", b"b"], acks=-1)
        assert answer.error_code == 0 and answer.base_offset == 0


def test_elect_leaders_preferred_and_unclean_through_the_controller(
        cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(3)
    create(cluster, "elect", 3, 2)
    view = cluster.wait_topic("elect", 3)
    preferred = {p: part.replicas[0] for (t, p), part in view.partitions.items() if t == "elect"}
    client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    tps = [TopicPartition("elect", p) for p in range(3)]

    # Every leader is its preferred replica already: nothing to elect.
    answer = client.elect_leaders(ElectionType.PREFERRED, tps).result(30)
    assert {tp.partition: _code(KafkaException(e)) for tp, e in answer.items()} == \
        {p: int(ErrorCode.ELECTION_NOT_NEEDED) for p in range(3)}
    answer = client.elect_leaders(ElectionType.UNCLEAN, tps[:1]).result(30)
    assert _code(KafkaException(answer[tps[0]])) == int(ErrorCode.ELECTION_NOT_NEEDED)
    absent = TopicPartition("elect", 7)
    answer = client.elect_leaders(ElectionType.PREFERRED, [absent]).result(30)
    assert _code(KafkaException(answer[absent])) == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    # A preferred leader stopped (controlled shutdown moves its leaderships), then back as a
    # follower: the election moves leadership back once it is in the ISR.
    moved = next(p for p, b in preferred.items())
    target = preferred[moved]
    cluster.nodes[target].stop()
    wait_for("leadership moved off the stopped node", lambda: (
        lambda v: v if v.leaders("elect").get(moved, target) not in (target, -1) else None)(
            cluster.view(next(i for i in cluster.nodes if i != target))))
    other = next(i for i in cluster.nodes if i != target)
    # The client sends ElectLeaders to the controller its first Metadata names and does not
    # ask again while that one refuses connections: when the stopped node was the controller,
    # ``other`` must name its successor first (leaderships move before the controller does).
    wait_for("a live controller named by every process of the node asked", lambda: all(
        v.controller_id not in (target, -1) for v in cluster.nodes[other].views()) or None)
    down = AdminClient({"bootstrap.servers": cluster.nodes[other].bootstrap})
    answer = down.elect_leaders(ElectionType.PREFERRED, [TopicPartition("elect", moved)]) \
        .result(30)
    assert _code(KafkaException(answer[TopicPartition("elect", moved)])) == \
        int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    cluster.nodes[target].start()
    wait_for("the preferred replica back in the ISR", lambda: (
        lambda part: part if target in part.isr else None)(
            cluster.view(other).partitions[("elect", moved)]))
    answer = down.elect_leaders(ElectionType.PREFERRED, None).result(30)
    errors = {tp.partition: e for tp, e in answer.items() if tp.topic == "elect"}
    assert errors[moved] is None
    wait_for("the preferred replica leads again", lambda: (
        cluster.view(other).leaders("elect")[moved] == target) or None)


def _produce_codes(cluster: Cluster, topic: str) -> dict[int, int]:
    """Each partition's Produce (acks=all) error code, sent to its leader."""
    leaders = cluster.view().leaders(topic)
    return {p: produce_to(cluster.nodes[leader], topic, p, [b"x"], acks=-1, key=b"k").error_code
            for p, leader in sorted(leaders.items())}


def test_topic_config_changes_go_to_zookeeper_and_every_node_applies_them(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster: Cluster = cluster_factory(3)
    create(cluster, "conf", 3, 3)
    view = cluster.wait_topic("conf", 3)
    assert set(view.leaders("conf").values()) == {1, 2, 3}  # each node leads one
    via = next(i for i in cluster.nodes if i != cluster.controller())
    client = AdminClient({"bootstrap.servers": cluster.nodes[via].bootstrap})
    topic = ConfigResource(ResourceType.TOPIC, "conf")

    # Bad input: Kafka's codes, nothing written.
    bad = [ConfigResource(ResourceType.TOPIC, "conf", set_config={"retention.ms": "soon"}),
           ConfigResource(ResourceType.TOPIC, "absent", set_config={"retention.ms": "1000"})]
    futures = client.alter_configs(bad)
    codes = {}
    for res, fut in futures.items():
        with pytest.raises(KafkaException) as err:
            fut.result(30)
        codes[res.name] = _code(err.value)
    assert codes == {"conf": int(ErrorCode.INVALID_CONFIG),
                     "absent": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    # a null config value in CreateTopics is INVALID_CONFIG for being null, as Kafka
    # (ZkAdminManager); the cluster's controller made it the text "None", refused only
    # because no topic config takes that text ("retention.ms must be an integer")
    kp = KafkaAdminClient(bootstrap_servers=cluster.nodes[via].bootstrap,
                          request_timeout_ms=30_000)
    try:
        with pytest.raises(InvalidConfigurationError):
            kp.create_topics({"nulled": {"num_partitions": 1, "replication_factor": 3,
                                         "configs": {"retention.ms": None}}})
        [answer] = kp.create_topics({"nulled": {"configs": {"cleanup.policy": None}}},
                                    raise_errors=False)["topics"]
        assert answer["error_code"] == ErrorCode.INVALID_CONFIG
        assert "null value" in answer["error_message"], answer
    finally:
        kp.close()
    assert "nulled" not in client.list_topics(timeout=30).topics
    client.alter_configs([ConfigResource(ResourceType.TOPIC, "conf",
                                         set_config={"min.insync.replicas": "4"})],
                         validate_only=True)[topic].result(30)
    assert _produce_codes(cluster, "conf") == {0: 0, 1: 0, 2: 0}

    # min.insync.replicas above the replicas: every node's leader refuses acks=all now.
    client.alter_configs([ConfigResource(ResourceType.TOPIC, "conf", set_config={
        "min.insync.replicas": "4", "retention.ms": "3600000"})])[topic].result(30)
    zk = ZooKeeperReader(zk_connect)
    try:
        stored = json.loads(zk.get(znodes.topic_config_path("conf")) or b"{}")["config"]
        changes = [json.loads(zk.get(f"{znodes.CONFIG_CHANGES}/{c}") or b"{}")
                   for c in zk.children(znodes.CONFIG_CHANGES)]
    finally:
        zk.close()
    assert stored == {"min.insync.replicas": "4", "retention.ms": "3600000"}
    assert {"version": 2, "entity_path": "topics/conf"} in changes
    not_enough = int(ErrorCode.NOT_ENOUGH_REPLICAS)
    wait_for("every leader refuses acks=all", lambda: _produce_codes(cluster, "conf") == {
        0: not_enough, 1: not_enough, 2: not_enough} or None)
    for i, node in cluster.nodes.items():  # every node describes the override
        node_client = AdminClient({"bootstrap.servers": node.bootstrap})
        described = wait_for(f"node {i} describes the new config", lambda c=node_client: (
            lambda d: d if d["retention.ms"].value == "3600000" else None)(
                c.describe_configs([topic])[topic].result(30)))
        assert described["min.insync.replicas"].value == "4"
        assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # Incremental: DELETE restores the default (acks=all works again), APPEND a list config.
    inc = ConfigResource(ResourceType.TOPIC, "conf", incremental_configs=[
        ConfigEntry("min.insync.replicas", None,
                    incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    client.incremental_alter_configs([inc])[inc].result(30)
    wait_for("acks=all accepted again", lambda: _produce_codes(cluster, "conf") == {
        0: 0, 1: 0, 2: 0} or None)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        kp.alter_configs([KpConfigResource(KpResourceType.TOPIC, "conf",
                                           configs={"segment.ms": "600000"})])
    finally:
        kp.close()
    described = wait_for("kafka-python's change is described", lambda: (
        lambda d: d if d["segment.ms"].value == "600000" else None)(
            client.describe_configs([topic])[topic].result(30)))
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete,compact"
    # AlterConfigs (not incremental) replaces the overrides: the others revert.
    client.alter_configs([ConfigResource(ResourceType.TOPIC, "conf",
                                         set_config={"segment.ms": "700000"})])[topic].result(30)
    described = wait_for("the overrides replaced", lambda: (
        lambda d: d if d["segment.ms"].value == "700000" else None)(
            client.describe_configs([topic])[topic].result(30)))
    assert described["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete"

    # SUBTRACT of the last policy: an empty list, as Kafka's ValidList takes it; stored in
    # ZooKeeper so, and every node describes it
    inc = ConfigResource(ResourceType.TOPIC, "conf", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    client.incremental_alter_configs([inc])[inc].result(30)
    zk = ZooKeeperReader(zk_connect)
    try:
        stored = json.loads(zk.get(znodes.topic_config_path("conf")) or b"{}")["config"]
    finally:
        zk.close()
    assert stored == {"segment.ms": "700000", "cleanup.policy": ""}
    for i, node in cluster.nodes.items():
        node_client = AdminClient({"bootstrap.servers": node.bootstrap})
        described = wait_for(f"node {i} describes the empty policy", lambda c=node_client: (
            lambda d: d if d["cleanup.policy"].value == "" else None)(
                c.describe_configs([topic])[topic].result(30)))
        assert described["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        # each broker answers for itself: its id under Kafka's name, named listeners
        own = ConfigResource(ResourceType.BROKER, str(i))
        broker_entries = node_client.describe_configs([own])[own].result(30)
        assert broker_entries["broker.id"].value == str(i)
        assert broker_entries["listeners"].value.startswith("PLAINTEXT://")


def test_delete_groups_in_a_cluster_deletes_an_empty_group_and_refuses_one_with_members(
        cluster_factory: Any) -> None:
    """DeleteGroups reaches the group's coordinator on the leader of its __consumer_offsets
    partition: an Empty group goes, one with a member is NON_EMPTY_GROUP, and the
    coordinator serves on (it crashed on every DeleteGroups in a cluster, and came back
    leading nothing: every group of the node answered NOT_COORDINATOR)."""
    cluster: Cluster = cluster_factory(3)
    create(cluster, "grouped", 1, 3)
    cluster.wait_topic("grouped", 1)
    members = []
    for group in ("gone", "busy"):
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        consumer.subscribe(["grouped"])
        deadline = time.monotonic() + 60  # joined
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment(), f"{group}: never joined"
        consumer.commit(offsets=[TopicPartition("grouped", 0, 0)], asynchronous=False)
        members.append(consumer)
    members[0].close()  # "gone" is Empty now; "busy" keeps its member
    try:
        client = AdminClient({"bootstrap.servers": cluster.bootstrap})
        client.delete_consumer_groups(["gone"], request_timeout=30)["gone"].result(30)
        with pytest.raises(KafkaException) as refused:
            client.delete_consumer_groups(["busy"], request_timeout=30)["busy"].result(30)
        assert _code(refused.value) == ErrorCode.NON_EMPTY_GROUP
        listed = {g.group_id for g in client.list_consumer_groups().result(30).valid}
        assert listed == {"busy"}
        described = client.describe_consumer_groups(["busy"])["busy"].result(30)
        assert len(described.members) == 1
    finally:
        members[1].close()
    for node in cluster.nodes.values():
        assert "crashed handling DeleteGroups" not in node.log()


def _group_led_by(cluster: Cluster, node_id: int, taken: set[str]) -> str:
    """A group id whose coordinator (FindCoordinator, asked of node 1) is ``node_id``."""
    for i in range(200):
        group = f"spread-{i}"
        if group in taken:
            continue
        answer = wait_for(f"a coordinator for {group}", lambda g=group: (  # type: ignore[misc]
            a if (a := call(cluster.nodes[1].bootstrap,
                            FindCoordinatorRequest(key=g, key_type=0), 1)).error_code == 0
            else None), timeout_s=30)
        if answer.node_id == node_id:
            return group
    raise AssertionError(f"no group led by node {node_id} among 200")


def _commit_one(cluster: Cluster, group: str) -> None:
    """An Empty group with one committed offset (a consumer that joined, committed, left)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["spread"])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        assert consumer.assignment(), f"{group}: never joined"
        consumer.commit(offsets=[TopicPartition("spread", 0, 0)], asynchronous=False)
    finally:
        consumer.close()


def test_describe_and_delete_groups_answer_each_group_when_some_are_led_by_another_broker(
        cluster_factory: Any) -> None:
    """One DescribeGroups / DeleteGroups naming a group this broker coordinates and one
    another broker does (kafka-python sends all of them to the one broker it is given):
    each group gets its own answer, as Kafka's GroupCoordinator gives them; the group led
    here is described and deleted, the other is NOT_COORDINATOR and left alone (the whole
    request was NOT_COORDINATOR). A group named twice is answered once."""
    cluster: Cluster = cluster_factory(2)
    create(cluster, "spread", 1, 2)
    cluster.wait_topic("spread", 1)
    here = _group_led_by(cluster, 1, set())
    elsewhere = _group_led_by(cluster, 2, {here})
    for group in (here, elsewhere):
        _commit_one(cluster, group)
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        described = kadmin.describe_groups([here, elsewhere], group_coordinator_id=1)
        assert (described[here]["error"], described[here]["group_state"]) == (None, "Empty")
        assert "NotCoordinator" in described[elsewhere]["error"]
        # each named twice: one answer per group, as Kafka (names taken distinct); the
        # group led here deleted once, OK (its second deletion answered GROUP_ID_NOT_FOUND)
        answer = call(cluster.nodes[1].bootstrap, DeleteGroupsRequest(
            groups_names=[here, elsewhere, here, elsewhere]), 2)
        assert [(r.group_id, r.error_code) for r in answer.results] == [
            (here, ErrorCode.NONE), (elsewhere, ErrorCode.NOT_COORDINATOR)]
        assert kadmin.delete_groups([here, elsewhere], group_coordinator_id=1) == {
            here: "GroupIdNotFoundError", elsewhere: "NotCoordinatorError"}
        # each asked of its own coordinator now: the one led elsewhere is still there
        assert kadmin.delete_groups([here]) == {here: "GroupIdNotFoundError"}
        assert kadmin.describe_groups([elsewhere])[elsewhere]["group_state"] == "Empty"
    finally:
        kadmin.close()


def test_a_topic_named_twice_in_create_topics_is_invalid_request_once_in_a_cluster(
        cluster_factory: Any) -> None:
    """As on a single node (ControllerApis.createTopics): over a raw connection to a node
    that is not the controller, a name given twice is answered once, INVALID_REQUEST
    "Duplicate topic name.", and not made; the other name is."""
    from tests.broker.rawclient import CREATE_TOPICS, RawClient

    cluster: Cluster = cluster_factory(2)
    spec = {"num_partitions": 1, "replication_factor": 2, "assignments": [], "configs": []}
    node = next(n for i, n in cluster.nodes.items() if i != cluster.controller())
    with RawClient(node.port) as client:
        response = client.call(CREATE_TOPICS, 5, {"topics": [
            {"name": "dup-twice", **spec}, {"name": "dup-once", **spec},
            {"name": "dup-twice", **spec}], "timeout_ms": 30_000, "validate_only": False})
    answers = [(t.name, t.error_code, t.error_message) for t in response.topics]
    assert answers == [("dup-twice", ErrorCode.INVALID_REQUEST, "Duplicate topic name."),
                       ("dup-once", 0, None)], answers
    cluster.wait_topic("dup-once", 1)
    with RawClient(node.port) as client:
        meta = client.call(3, 4, {"topics": [{"name": "dup-twice"}],
                                  "allow_auto_topic_creation": False})
        assert [t.error_code for t in meta.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        # Metadata takes its names as a set (Kafka's KafkaApis): one asked twice is
        # auto-created and answered once, as on a single node (the controller refused it)
        meta = client.call(3, 4, {"topics": [{"name": "meta-twice"}] * 2,
                                  "allow_auto_topic_creation": True})
        assert [t.name for t in meta.topics] == ["meta-twice"], meta
    cluster.wait_topic("meta-twice", 1)
