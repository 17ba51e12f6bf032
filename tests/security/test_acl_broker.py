"""ACLs on a running broker with real clients (authorizer.class.name = "acl").

One node with a SASL_PLAINTEXT listener (PLAIN, users made with `actorlog users
add`) and a PLAINTEXT one; `super.users = User:admin`. User:ANONYMOUS (PLAINTEXT)
is tested on a node of its own.
confluent-kafka's AdminClient creates, describes and deletes ACLs; kafka-python
as alice is denied with Kafka's exact codes (29, 30) and then allowed.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)

from actors.security.acl import ResourceType as CoreType
from actors.security.local_store import LocalSecurityStore
from tests.fixtures.broker import ROOT, BrokerProcess, free_port

pytestmark = [pytest.mark.clients]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actors.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    base = tmp_path_factory.mktemp("acl")
    data = base / "data"
    for user, password in PASSWORDS.items():
        secret = base / f"{user}.password"
        secret.write_text(password + "\n")
        out = _cli("users", "add", user, "--mechanism", "SCRAM-SHA-256", "--password-file",
                   str(secret), "--data-dir", str(data))
        assert out.returncode == 0, out.stderr
    port, anonymous = free_port(), free_port()
    broker = BrokerProcess(
        data, port=port,
        listen=f"SASL_PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{anonymous}",
        config={"sasl.enabled.mechanisms": "PLAIN", "authorizer.class.name": "acl",
                "super.users": "User:admin",
                "allow.everyone.if.no.acl.found": False,
                # two processes: an ACL change made through one is decided on by the other
                "num.processes": 2}).start()
    try:
        yield broker, f"127.0.0.1:{anonymous}"
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _kp(user: str) -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def _admin(broker: BrokerProcess, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **_sasl(user)})


def _allow(topic: str, op: AclOperation, principal: str = "User:alice",
           rtype: ResourceType = ResourceType.TOPIC,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, topic, pattern, principal, "*", op, AclPermissionType.ALLOW)


def test_admin_client_creates_describes_and_deletes_acls(
        node: tuple[BrokerProcess, str]) -> None:
    broker, _ = node
    admin = _admin(broker)
    wanted = [_allow("orders-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
              _allow("g1", AclOperation.READ, rtype=ResourceType.GROUP)]
    for future in admin.create_acls(wanted, request_timeout=15).values():
        assert future.result(timeout=15) is None
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice",
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(everything, request_timeout=15).result(timeout=15)
    assert sorted(map(str, found)) == sorted(map(str, wanted))
    # persisted in the data dir's security store, as `actorlog acls list` reads it
    stored = LocalSecurityStore.in_data_dir(broker.data_dir).get_all_acls()
    assert {(p.resource_type, p.name) for p in stored} == {(CoreType.TOPIC, "orders-"),
                                                          (CoreType.GROUP, "g1")}
    # alice is no super user: Alter on the cluster denied (CLUSTER_AUTHORIZATION_FAILED)
    alice = _admin(broker, "alice")  # kept: a dropped client cancels its futures
    [denied] = alice.create_acls([_allow("x", AclOperation.READ)], request_timeout=15).values()
    with pytest.raises(KafkaException) as refused:
        denied.result(timeout=15)
    assert refused.value.args[0].code() == 31
    # delete what the filter matches; the answer names what went
    only_group = AclBindingFilter(ResourceType.GROUP, "g1", ResourcePatternType.LITERAL, None,
                                  None, AclOperation.ANY, AclPermissionType.ANY)
    [gone] = admin.delete_acls([only_group], request_timeout=15).values()
    assert [str(b) for b in gone.result(timeout=15)] == [str(wanted[1])]
    left = admin.describe_acls(everything, request_timeout=15).result(timeout=15)
    assert [str(b) for b in left] == [str(wanted[0])]
    [cleanup] = admin.delete_acls([everything], request_timeout=15).values()
    cleanup.result(timeout=15)


def test_a_user_denied_then_allowed_to_produce_and_consume(
        node: tuple[BrokerProcess, str]) -> None:
    broker, _ = node
    admin = _admin(broker)
    topic, group = f"acl-{time.time_ns()}", "alice-group"
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=15)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=5000,
                             api_version=(2, 5), **_kp("alice"))
    try:
        with pytest.raises(TopicAuthorizationFailedError) as denied:
            producer.send(topic, b"no").get(timeout=10)
        assert denied.value.errno == 29
    finally:
        producer.close(timeout=5)
    for future in admin.create_acls(
            [_allow(topic, AclOperation.WRITE), _allow(topic, AclOperation.READ)],
            request_timeout=15).values():
        future.result(timeout=15)
    # an idempotent producer: InitProducerId is allowed by Write on some topic (KIP-679)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=5000,
                             api_version=(2, 5), **_kp("alice"))
    try:
        producer.send(topic, b"yes").get(timeout=15)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", consumer_timeout_ms=8000,
                             api_version=(2, 5), **_kp("alice"))
    try:
        with pytest.raises(GroupAuthorizationFailedError) as denied_group:
            consumer.poll(timeout_ms=8000)
        assert denied_group.value.errno == 30
    finally:
        consumer.close()
    for future in admin.create_acls([_allow(group, AclOperation.READ,
                                            rtype=ResourceType.GROUP)]).values():
        future.result(timeout=15)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             api_version=(2, 5), **_kp("alice"))
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    try:
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        assert got == [b"yes"]
    finally:
        consumer.close()
    assert broker.log().count("ACL added") >= 3


def test_acls_cli_adds_lists_and_removes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    add = _cli("acls", "add", "--data-dir", str(data), "--allow-principal", "User:bob",
               "--operation", "Read", "--topic", "logs-", "--resource-pattern-type", "prefixed")
    assert add.returncode == 0, add.stderr
    listed = _cli("acls", "list", "--data-dir", str(data))
    assert listed.returncode == 0 and "User:bob" in listed.stdout and "logs-" in listed.stdout
    assert "PREFIXED" in listed.stdout
    bad = _cli("acls", "add", "--data-dir", str(data), "--allow-principal", "bob",
               "--operation", "Read", "--topic", "x")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr
    removed = _cli("acls", "remove", "--data-dir", str(data), "--topic", "logs-",
                   "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0, removed.stderr
    assert "User:bob" in removed.stdout
    assert "User:bob" not in _cli("acls", "list", "--data-dir", str(data)).stdout


def test_allow_everyone_if_no_acl_found_opens_only_resources_no_acl_names(
        tmp_path: Path) -> None:
    """PLAINTEXT (User:ANONYMOUS): topics no ACL names are open; a named one is not."""
    broker = BrokerProcess(tmp_path / "data",
                           config={"authorizer.class.name": "acl",
                                   "allow.everyone.if.no.acl.found": True}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("open", 1, 1),
                                           NewTopic("closed", 1, 1)]).values():
            future.result(timeout=15)
        for future in admin.create_acls([_allow("closed", AclOperation.READ,
                                                principal="User:alice")]).values():
            future.result(timeout=15)
        listed = admin.list_topics(timeout=10).topics
        assert "open" in listed and "closed" not in listed
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=5000,
                                 api_version=(2, 5))
        try:
            producer.send("open", b"ok").get(timeout=15)
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send("closed", b"no").get(timeout=10)
        finally:
            producer.close(timeout=5)
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_admin_requests_without_acls_get_kafka_codes(node: tuple[BrokerProcess, str]) -> None:
    """alice has no ACL on these: each item is refused with its code, the super user's
    same requests are served (the per-item split leaves allowed items alone)."""
    from confluent_kafka.admin import ConfigResource

    broker, _ = node
    admin, alice = _admin(broker), _admin(broker, "alice")
    topic = f"cfg-{time.time_ns()}"
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=15)

    def code(future: Any) -> int:
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=15)
        return int(refused.value.args[0].code())

    [created] = alice.create_topics([NewTopic(f"{topic}-x", 1, 1)]).values()
    assert code(created) == 29
    [deleted] = alice.delete_topics([topic]).values()
    assert code(deleted) == 29
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    [described] = alice.describe_configs([resource]).values()
    assert code(described) == 29
    [ok] = admin.describe_configs([resource]).values()
    assert "cleanup.policy" in ok.result(timeout=15)
    [group] = alice.describe_consumer_groups(["nobody-may"]).values()
    assert code(group) == 30
    [dropped] = alice.delete_consumer_groups(["nobody-may"]).values()
    assert code(dropped) == 30
    assert topic in admin.list_topics(timeout=10).topics
    assert topic not in alice.list_topics(timeout=10).topics
    # `actorlog acls add` on the running node's data dir: read again within ACL_REFRESH_MS
    out = _cli("acls", "add", "--data-dir", str(broker.data_dir), "--allow-principal",
               "User:alice", "--operation", "Describe", "--topic", topic)
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 15
    while topic not in alice.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic in alice.list_topics(timeout=10).topics


def test_a_transactional_producer_without_acls_gets_53(node: tuple[BrokerProcess, str]) -> None:
    from confluent_kafka import Producer

    broker, _ = node
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-alice",
                         **_sasl("alice")})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == 53


def test_partition_reassignments_need_alter_resp_describe_on_the_cluster(
        node: tuple[BrokerProcess, str]) -> None:
    """AlterPartitionReassignments needs Alter on the cluster, ListPartitionReassignments
    Describe on it (Kafka's checks): alice has neither, the super user is served."""
    broker, _ = node
    topic = f"moved-{time.time_ns()}"
    creator = _admin(broker)  # kept: a dropped client cancels its futures
    for future in creator.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=15)
    tp = KTopicPartition(topic, 0)
    alice = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000,
                             **_kp("alice"))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000,
                             **_kp("admin"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.alter_partition_reassignments({tp: None})
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.list_partition_reassignments()
        me = admin.describe_cluster()["brokers"][0]["broker_id"]
        assert admin.alter_partition_reassignments({tp: [me]}) == {tp: None}
        assert admin.list_partition_reassignments() == {}
    finally:
        alice.close()
        admin.close()


def test_offset_fetch_answers_only_the_topics_the_user_may_describe(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka: Describe on the group, then Describe on each topic. A named topic alice may
    not describe answers 29; asking for every topic leaves it out."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    broker, _ = node
    admin, alice = _admin(broker), _admin(broker, "alice")
    stamp = time.time_ns()
    seen, hidden, group = f"seen-{stamp}", f"hidden-{stamp}", f"offsets-{stamp}"
    for future in admin.create_topics([NewTopic(seen, 1, 1), NewTopic(hidden, 1, 1)]).values():
        future.result(timeout=15)
    # Right after the start the group coordinator may still load its log and answers each
    # partition COORDINATOR_LOAD_IN_PROGRESS (as Kafka); the admin client hands that back
    # per partition rather than retrying, so commit again until every partition took it.
    deadline = time.monotonic() + 15
    while True:
        [altered] = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(seen, 0, 3), TopicPartition(hidden, 0, 7)])]).values()
        errors = [tp.error for tp in altered.result(timeout=15).topic_partitions if tp.error]
        if not errors or time.monotonic() > deadline:
            break
        assert all(e.code() == 14 for e in errors), errors
        time.sleep(0.2)
    assert not errors, errors
    for future in admin.create_acls(
            [_allow(group, AclOperation.DESCRIBE, rtype=ResourceType.GROUP),
             _allow(seen, AclOperation.DESCRIBE)], request_timeout=15).values():
        future.result(timeout=15)

    [named] = alice.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(seen, 0), TopicPartition(hidden, 0)])]).values()
    answer = {tp.topic: tp for tp in named.result(timeout=15).topic_partitions}
    assert answer[seen].offset == 3 and answer[seen].error is None
    assert answer[hidden].error is not None and answer[hidden].error.code() == 29
    [every] = alice.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert {tp.topic: tp.offset for tp in every.result(timeout=15).topic_partitions} == {seen: 3}
    [mine] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    assert {tp.topic: tp.offset for tp in mine.result(timeout=15).topic_partitions} == {
        seen: 3, hidden: 7}


def test_an_acl_change_is_decided_on_at_once_by_every_process(
        node: tuple[BrokerProcess, str]) -> None:
    """CreateAcls answered through one process: alice's very next requests, on fresh
    connections that the Acceptor hands to both processes, see the topic (no wait for a
    periodic re-read of the store); DeleteAcls the same way."""
    broker, _ = node
    admin = _admin(broker)
    topic = f"at-once-{time.time_ns()}"
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=15)
    alices = [_admin(broker, "alice") for _ in range(4)]
    for alice in alices:
        assert topic not in alice.list_topics(timeout=10).topics
    for future in admin.create_acls([_allow(topic, AclOperation.DESCRIBE)],
                                    request_timeout=15).values():
        future.result(timeout=15)
    seen = [topic in alice.list_topics(timeout=10).topics for alice in alices]
    assert seen == [True] * 4, seen
    for future in admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", None,
            AclOperation.ANY, AclPermissionType.ANY)], request_timeout=15).values():
        future.result(timeout=15)
    seen = [topic in alice.list_topics(timeout=10).topics for alice in alices]
    assert seen == [False] * 4, seen


def test_topics_named_by_id_hide_the_name_alice_may_not_describe(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka (KIP-516): an id is not secret, a name is. Metadata v12 and DeleteTopics v6
    by id answer a topic alice may not describe TOPIC_AUTHORIZATION_FAILED with a null
    name; one she may describe but not delete keeps its name in the refusal."""
    broker, _ = node
    admin = _admin(broker)
    stamp = time.time_ns()
    hidden, seen = f"id-hidden-{stamp}", f"id-seen-{stamp}"
    for future in admin.create_topics([NewTopic(hidden, 1, 1), NewTopic(seen, 1, 1)]).values():
        future.result(timeout=15)
    for future in admin.create_acls([_allow(seen, AclOperation.DESCRIBE)],
                                    request_timeout=15).values():
        future.result(timeout=15)
    super_kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **_kp("admin"))
    alice = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **_kp("alice"))
    try:
        ids = {t["name"]: uuid.UUID(t["topic_id"])
               for t in super_kp.describe_topics([hidden, seen])}
        described = alice.describe_topics([ids[hidden], ids[seen]])
        assert [(t["error_code"], t["name"], uuid.UUID(t["topic_id"])) for t in described] == [
            (29, None, ids[hidden]), (0, seen, ids[seen])]
        deleted = alice.delete_topics([ids[hidden], ids[seen]], raise_errors=False)
        assert [(r["error_code"], r["name"]) for r in deleted["topics"]] == [
            (29, None), (29, seen)]
        assert {t["name"] for t in super_kp.describe_topics([hidden, seen])
                if t["error_code"] == 0} == {hidden, seen}
    finally:
        alice.close()
        super_kp.close()


def test_a_denied_group_named_twice_in_delete_groups_is_answered_once(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka takes DeleteGroups' names distinct before it authorizes them: a group the
    principal (User:ANONYMOUS here, with no ACL) may not delete, named twice, gets one
    GROUP_AUTHORIZATION_FAILED (it got one per entry)."""
    from kafka.protocol.admin.groups import DeleteGroupsRequest

    from tests.broker.test_groups import call

    _, anonymous = node
    answer = call(anonymous, DeleteGroupsRequest(groups_names=["nobody-may", "nobody-may"]), 2)
    assert [(r.group_id, r.error_code) for r in answer.results] == [("nobody-may", 30)]


def test_offset_for_leader_epoch_needs_describe_on_the_topic_or_cluster_action(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka's handleOffsetForLeaderEpochRequest (KIP-320): ClusterAction on the cluster
    answers every topic; otherwise each topic needs Describe, else 29."""
    from tests.broker.rawclient import RawClient

    broker, anonymous = node
    admin = _admin(broker)
    stamp = time.time_ns()
    seen, hidden = f"epoch-seen-{stamp}", f"epoch-hidden-{stamp}"
    for future in admin.create_topics([NewTopic(seen, 1, 1), NewTopic(hidden, 1, 1)]).values():
        future.result(timeout=15)
    for future in admin.create_acls([_allow(seen, AclOperation.DESCRIBE, "User:ANONYMOUS")],
                                    request_timeout=15).values():
        future.result(timeout=15)

    def ask() -> dict[str, tuple[int, int, int]]:
        with RawClient(int(anonymous.rsplit(":", 1)[1])) as client:
            response = client.call(23, 4, {"replica_id": -1, "topics": [
                {"topic": t, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                             "leader_epoch": 0}]} for t in (seen, hidden)]})
        return {t.topic: (p.error_code, p.leader_epoch, p.end_offset)
                for t in response.topics for p in t.partitions}

    assert ask() == {seen: (0, 0, 0), hidden: (29, -1, -1)}
    cluster_action = _allow("kafka-cluster", AclOperation.CLUSTER_ACTION, "User:ANONYMOUS",
                            rtype=ResourceType.BROKER)
    for future in admin.create_acls([cluster_action], request_timeout=15).values():
        future.result(timeout=15)
    try:
        assert ask() == {seen: (0, 0, 0), hidden: (0, 0, 0)}
    finally:
        for future in admin.delete_acls([AclBindingFilter(
                ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                "User:ANONYMOUS", None, AclOperation.ANY, AclPermissionType.ANY)],
                request_timeout=15).values():
            future.result(timeout=15)


def test_describe_producers_needs_read_on_the_topic(node: tuple[BrokerProcess, str]) -> None:
    """Kafka's handleDescribeProducersRequest (KIP-664): Read on each topic, else 29 for
    each of its partitions, checked before the topic's existence (Describe is not enough)."""
    from tests.broker.rawclient import RawClient

    broker, anonymous = node
    admin = _admin(broker)
    stamp = time.time_ns()
    readable, described = f"producers-read-{stamp}", f"producers-describe-{stamp}"
    for future in admin.create_topics([NewTopic(readable, 2, 1),
                                       NewTopic(described, 1, 1)]).values():
        future.result(timeout=15)
    for future in admin.create_acls(
            [_allow(readable, AclOperation.READ, "User:ANONYMOUS"),
             _allow(described, AclOperation.DESCRIBE, "User:ANONYMOUS")],
            request_timeout=15).values():
        future.result(timeout=15)
    with RawClient(int(anonymous.rsplit(":", 1)[1])) as client:
        response = client.call(61, 0, {"topics": [
            {"name": readable, "partition_indexes": [0, 1, 2]},
            {"name": described, "partition_indexes": [0]},
            {"name": f"producers-missing-{stamp}", "partition_indexes": [0]}]})
    assert [(t.name, [(p.partition_index, p.error_code, list(p.active_producers))
                      for p in t.partitions]) for t in response.topics] == [
        (readable, [(0, 0, []), (1, 0, []), (2, 3, [])]),
        (described, [(0, 29, [])]),
        (f"producers-missing-{stamp}", [(0, 29, [])])]


def test_authorized_operations_are_those_the_acls_allow(node: tuple[BrokerProcess, str]) -> None:
    """include_authorized_operations of describe_cluster (DescribeCluster), describe_topics
    (Metadata) and describe_consumer_groups (DescribeGroups): Kafka answers the bit field of
    the resource's supported operations the principal may do (a super user: all of them;
    READ implies DESCRIBE); none was answered (the clients showed None)."""
    broker, _ = node
    admin = _admin(broker)
    stamp = time.time_ns()
    topic, group = f"ops-{stamp}", f"ops-group-{stamp}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    for future in admin.create_acls([
            _allow(topic, AclOperation.READ),
            _allow(group, AclOperation.READ, rtype=ResourceType.GROUP),
            _allow("kafka-cluster", AclOperation.DESCRIBE, rtype=ResourceType.BROKER)],
            request_timeout=15).values():
        future.result(timeout=15)
    cluster_ops = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                   AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE}
    topic_ops = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                 AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                 AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    group_ops = {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    alice = _admin(broker, "alice")
    for client, expected in ((admin, (cluster_ops, topic_ops, group_ops)),
                             (alice, ({AclOperation.DESCRIBE},
                                      {AclOperation.READ, AclOperation.DESCRIBE},
                                      {AclOperation.READ, AclOperation.DESCRIBE}))):
        described = client.describe_cluster(include_authorized_operations=True,
                                            request_timeout=15).result(timeout=15)
        assert set(described.authorized_operations or []) == expected[0]
        topics = client.describe_topics(TopicCollection([topic]), request_timeout=15,
                                        include_authorized_operations=True)
        assert set(topics[topic].result(timeout=15).authorized_operations or []) == expected[1]
        groups = client.describe_consumer_groups([group], request_timeout=15,
                                                 include_authorized_operations=True)
        assert set(groups[group].result(timeout=15).authorized_operations or []) == expected[2]


def test_cluster_operations_need_describe_on_the_cluster(
        node: tuple[BrokerProcess, str]) -> None:
    """A principal allowed IDEMPOTENT_WRITE on the cluster and not DESCRIBE gets no cluster
    authorized operations (Kafka's KafkaApis answers 0 unless DESCRIBE on the cluster is
    allowed; Metadata v8-v10 shares the rule)."""
    broker, _ = node
    admin = _admin(broker)
    for future in admin.create_acls([_allow("kafka-cluster", AclOperation.IDEMPOTENT_WRITE,
                                            principal="User:bob", rtype=ResourceType.BROKER)],
                                    request_timeout=15).values():
        future.result(timeout=15)
    bob = _admin(broker, "bob")
    described = bob.describe_cluster(include_authorized_operations=True,
                                     request_timeout=15).result(timeout=15)
    assert not described.authorized_operations, described.authorized_operations


def test_describe_topic_partitions_answers_a_named_topic_alice_may_not_describe_as_denied(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka's DescribeTopicPartitionsRequestHandler: the topics the principal may describe
    with the operations it may do on each (READ implies DESCRIBE), a topic it names and may
    not describe answered TOPIC_AUTHORIZATION_FAILED (it was left out of the answer), and
    one asked with no names (all topics) left out."""
    broker, _ = node
    admin = _admin(broker)
    stamp = time.time_ns()
    mine, hidden = f"dtp-{stamp}", f"dtp-hidden-{stamp}"
    for t in (mine, hidden):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(timeout=15)
    for future in admin.create_acls([_allow(mine, AclOperation.READ)],
                                    request_timeout=15).values():
        future.result(timeout=15)
    alice = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000,
                             **_kp("alice"))
    try:
        got = alice.describe_topic_partitions([mine, hidden])
        rows = {t["name"]: (t["error_code"], t["topic_authorized_operations"])
                for t in got["topics"]}
        read_describe = (1 << int(AclOperation.READ.value)) | (
            1 << int(AclOperation.DESCRIBE.value))
        assert rows == {mine: (0, read_describe), hidden: (29, -2147483648)}
        only_hidden = alice.describe_topic_partitions([hidden])
        assert [(t["name"], t["error_code"]) for t in only_hidden["topics"]] == [(hidden, 29)]
        listed = {t["name"] for t in alice.describe_topic_partitions([])["topics"]}
        assert mine in listed and hidden not in listed
    finally:
        alice.close()


def test_sasl_requests_after_login_or_without_sasl_are_illegal_sasl_state(
        node: tuple[BrokerProcess, str]) -> None:
    """Over raw sockets: on the SASL listener, a SaslHandshake or SaslAuthenticate after
    the login (no connections.max.reauth.ms: nothing to renew) is answered
    ILLEGAL_SASL_STATE and the connection kept, as Kafka's KafkaApis answers it once the
    channel is authenticated; on the PLAINTEXT listener of the same broker (ACLs on) the
    same two are answered so too, where they closed the connection."""
    from tests.broker.rawclient import METADATA, RawClient

    broker, anonymous = node
    illegal = 34  # ILLEGAL_SASL_STATE
    message = "SaslAuthenticate request received after successful authentication"
    plain_port = int(anonymous.rsplit(":", 1)[1])
    with RawClient(broker.port) as sasl, RawClient(plain_port) as plain:
        assert sasl.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\0alice\0" + PASSWORDS["alice"].encode()
        assert sasl.call(36, 2, {"auth_bytes": token}).error_code == 0
        for client in (sasl, plain):
            for _ in range(3):  # answered each time, logged not at all (at debug)
                shake = client.call(17, 1, {"mechanism": "PLAIN"})
                # no mechanisms, as Kafka's error answer
                assert (shake.error_code, shake.mechanisms) == (illegal, []), shake
            done = client.call(36, 2, {"auth_bytes": token})
            assert (done.error_code, done.error_message) == (illegal, message)
            # the connection still serves
            answer = client.call(METADATA, 4, {"topics": [], "allow_auto_topic_creation": False})
            assert answer.brokers
    warned = [line for line in broker.log().splitlines()  # the broker logs at DEBUG
              if "after successful authentication" in line and "DEBUG" not in line]
    assert warned == [], warned


def test_add_partitions_to_txn_names_the_denied_and_the_unknown_partitions(
        node: tuple[BrokerProcess, str]) -> None:
    """Kafka's handleAddPartitionToTxnRequest: Write on the transactional id granted, each
    topic's Write is checked before its existence; one failed partition fails the request:
    a topic not writable is TOPIC_AUTHORIZATION_FAILED (29) whether it exists or not, a
    writable one that does not exist UNKNOWN_TOPIC_OR_PARTITION (3), and the writable,
    existing ones OPERATION_NOT_ATTEMPTED (55): nothing is added."""
    from kafka.protocol.producer.transaction import AddPartitionsToTxnRequest

    from tests.broker.test_groups import call

    broker, anonymous = node
    admin = _admin(broker)
    stamp = time.time_ns()
    txn_id, ok, denied = f"apt-{stamp}", f"apt-ok-{stamp}", f"apt-denied-{stamp}"
    unknown, unknown_denied = f"apt-unknown-{stamp}", f"apt-unknown-denied-{stamp}"
    for future in admin.create_topics([NewTopic(ok, 2, 1), NewTopic(denied, 1, 1)]).values():
        future.result(timeout=15)
    for future in admin.create_acls(
            [_allow(txn_id, AclOperation.WRITE, "User:ANONYMOUS",
                    rtype=ResourceType.TRANSACTIONAL_ID),
             _allow(ok, AclOperation.WRITE, "User:ANONYMOUS"),
             _allow(unknown, AclOperation.WRITE, "User:ANONYMOUS")],
            request_timeout=15).values():
        future.result(timeout=15)
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    for version in range(4):
        answer = call(anonymous, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=1000,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[
                topic(name=ok, partitions=[0, 1]), topic(name=denied, partitions=[0]),
                topic(name=unknown, partitions=[0]),
                topic(name=unknown_denied, partitions=[0])]), version)
        codes = {(t.name, p.partition_index): p.partition_error_code
                 for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert codes == {(ok, 0): 55, (ok, 1): 55, (denied, 0): 29, (unknown, 0): 3,
                         (unknown_denied, 0): 29}, (version, codes)
