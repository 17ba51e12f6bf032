"""ACLs across the nodes of a cluster (authorizer.class.name = "acl", issue 17).

Two real nodes on a real ZooKeeper, SASL_PLAINTEXT with PLAIN, users made with
`actorlog users add --config` (ZooKeeper's /config/users), `super.users =
User:admin`. The ACLs live under /kafka-acl; each change leaves a notice under
/kafka-acl-changes that every node watches, so an ACL created through node 1
lets alice produce through node 2 at once, and one deleted through node 2
stops her on node 1 (TOPIC_AUTHORIZATION_FAILED) at once. The requests go over
raw connections to the node named, so which node serves each is certain.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.broker.rawclient import CREATE_TOPICS, METADATA, RawClient, record_batch
from tests.fixtures.cluster import Cluster, ClusterNode, add_user_with_cli, wait_for
from wire.errors import ErrorCode

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
TOPIC = "acl-orders"
SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_ACLS, DELETE_ACLS = 17, 36, 30, 31
TOPIC_TYPE, LITERAL, WRITE, ALLOW = 2, 3, 4, 3
# the ACL must take effect on the other node well within this (a watch: tens of ms; the
# slow re-read that backs it up comes only after a minute)
PROPAGATION_S = 5.0


def login(node: ClusterNode, user: str) -> RawClient:
    """A connection to ``node`` authenticated as ``user`` with SASL PLAIN."""
    client = RawClient(node.port, client_id=f"acl-{user}")
    shake = client.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert shake.error_code == 0, shake
    token = f"\0{user}\0{PASSWORDS[user]}".encode()
    done = client.call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
    assert done.error_code == 0, done
    return client


def produce_code(client: RawClient, partition: int) -> int:
    part = client.produce(TOPIC, partition, record_batch([(None, b"from alice")]), acks=1)
    return int(part.error_code)


def write_acl(principal: str = "User:alice") -> dict[str, Any]:
    return {"resource_type": TOPIC_TYPE, "resource_name": TOPIC,
            "resource_pattern_type": LITERAL, "principal": principal, "host": "*",
            "operation": WRITE, "permission_type": ALLOW}


def start_secured(cluster_factory: Any, tmp_path: Path) -> Cluster:
    cluster: Cluster = cluster_factory(size=2, start=False, config={
        "sasl.enabled.mechanisms": "PLAIN", "authorizer.class.name": "acl",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": False})
    for member in cluster.nodes.values():
        member.process.listen = f"SASL_PLAINTEXT://127.0.0.1:{member.port}"
    for user, password in PASSWORDS.items():
        add_user_with_cli(cluster, tmp_path, user, password)
    for member in cluster.nodes.values():
        member.start()
    # both registered and known to the controller before any topic is made (a topic made
    # first would have all its replicas on the one node the controller knew)
    for member in cluster.nodes.values():
        with login(member, "admin") as admin:
            wait_for(f"node {member.broker_id} to list both nodes",
                     lambda a=admin: len(a.call(METADATA, 8, {
                         "topics": [], "allow_auto_topic_creation": False,
                         "include_cluster_authorized_operations": False,
                         "include_topic_authorized_operations": False}).brokers) == 2, 30)
    return cluster


def leaders(client: RawClient) -> dict[int, int]:
    response = client.call(METADATA, 8, {
        "topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})
    found = {p.partition_index: p.leader_id for t in response.topics if t.error_code == 0
             for p in t.partitions}
    return found if len(response.brokers) == 2 else {}


def test_an_acl_made_through_one_node_applies_on_the_other_at_once(
        cluster_factory: Any, tmp_path: Path) -> None:
    cluster = start_secured(cluster_factory, tmp_path)
    node_1, node_2 = cluster.nodes[1], cluster.nodes[2]
    admin_1 = login(node_1, "admin")
    # one replica per partition, spread over both nodes: each node leads some
    created = admin_1.call(CREATE_TOPICS, 7, {
        "topics": [{"name": TOPIC, "num_partitions": 4, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 30_000, "validate_only": False})
    assert created.topics[0].error_code == 0, created
    known: list[dict[int, int]] = []
    for node in (node_1, node_2):
        with login(node, "admin") as admin:
            known.append(wait_for(f"node {node.broker_id} to know {TOPIC} and both nodes",
                                  lambda a=admin: (found := leaders(a)) and len(found) == 4
                                  and min(found.values()) > 0 and found, 30))
    assert known[0] == known[1] and set(known[0].values()) == {1, 2}, known
    on_1 = min(p for p, leader in known[0].items() if leader == 1)
    on_2 = min(p for p, leader in known[0].items() if leader == 2)
    alice_1, alice_2 = login(node_1, "alice"), login(node_2, "alice")
    assert produce_code(alice_2, on_2) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert produce_code(alice_1, on_1) == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    # CreateAcls through node 1: alice may Write; node 2 lets her in at once
    made = admin_1.call(CREATE_ACLS, 2, {"creations": [write_acl()]})
    assert [r.error_code for r in made.results] == [0], made
    start = time.monotonic()
    wait_for("alice's produce through node 2 to be allowed",
             lambda: produce_code(alice_2, on_2) == 0, PROPAGATION_S, every_s=0.02)
    allowed_after = time.monotonic() - start
    assert produce_code(alice_1, on_1) == 0
    wait_for("node 2 to log the ACL change notice",
             lambda: "ACLs of Topic:LITERAL:acl-orders changed (acl_changes_" in node_2.log(),
             10)

    # DeleteAcls through node 2: node 1 refuses her at once
    admin_2 = login(node_2, "admin")
    deleted = admin_2.call(DELETE_ACLS, 2, {"filters": [{
        "resource_type_filter": TOPIC_TYPE, "resource_name_filter": TOPIC,
        "pattern_type_filter": LITERAL, "principal_filter": "User:alice", "host_filter": None,
        "operation": WRITE, "permission_type": ALLOW}]})
    result = deleted.filter_results[0]
    assert result.error_code == 0 and len(result.matching_acls) == 1, deleted
    start = time.monotonic()
    wait_for("alice's produce through node 1 to be refused",
             lambda: produce_code(alice_1, on_1) == ErrorCode.TOPIC_AUTHORIZATION_FAILED,
             PROPAGATION_S, every_s=0.02)
    refused_after = time.monotonic() - start
    assert produce_code(alice_2, on_2) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # (the line comes after the change is applied: the refusal above may precede it)
    wait_for("node 1 to log the ACL change notice",
             lambda: "ACLs of Topic:LITERAL:acl-orders changed" in node_1.log(), 10)
    print(f"allowed on node 2 after {allowed_after * 1000:.0f} ms, refused on node 1 after "
          f"{refused_after * 1000:.0f} ms")
    for client in (admin_1, admin_2, alice_1, alice_2):
        client.close()
