"""Znode JSON: Kafka's formats both ways, and a clear error for anything else."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from actors.core.cluster_model import (
    BrokerInfo,
    Endpoint,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
)
from actors.metadata import znodes
from actors.metadata.znodes import BadZnode

# As a Kafka 2.8 broker writes it (two listeners, a rack), without our gateway field.
KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPL":"SSL"},'
    b'"endpoints":["CLIENT://10.0.0.5:9092","REPL://10.0.0.5:9093"],"jmx_port":-1,'
    b'"host":null,"timestamp":"1700000000000","port":-1,"version":5,"rack":"rack-a"}'
)


def test_a_kafka_broker_registration_decodes() -> None:
    info = znodes.decode_broker(3, KAFKA_BROKER, epoch=77)
    assert info == BrokerInfo(3, (Endpoint("CLIENT", "10.0.0.5", 9092, "PLAINTEXT"),
                                  Endpoint("REPL", "10.0.0.5", 9093, "SSL")), "", "rack-a", 77)


def test_broker_registration_round_trips_with_ipv6_and_no_rack() -> None:
    info = BrokerInfo(1, (Endpoint("PLAINTEXT", "::1", 9092),), "tcp://[::1]:19092", None, 5)
    data = znodes.encode_broker(info, timestamp_ms=123)
    assert json.loads(data)["endpoints"] == ["PLAINTEXT://[::1]:9092"]
    assert "rack" not in json.loads(data)
    assert znodes.decode_broker(1, data, epoch=5) == info


def test_the_registration_says_how_many_actors_the_node_runs() -> None:
    """``actorlog_actors`` is added next to Kafka's fields (none renamed); a registration
    without it, or with nonsense in it, decodes with the counts unknown (0)."""
    info = BrokerInfo(2, (Endpoint("PLAINTEXT", "10.0.0.2", 9092),), "tcp://10.0.0.2:19092",
                      None, 9, num_handlers=1, num_shards=3, num_coordinators=2)
    doc = json.loads(znodes.encode_broker(info, timestamp_ms=123))
    assert doc["actorlog_actors"] == {"num.io.threads": 1, "num.partition.shards": 3,
                                      "num.group.coordinators": 2}
    assert {"endpoints", "host", "port", "version", "actorlog_gateway"} <= set(doc)
    assert znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9) == info
    del doc["actorlog_actors"]
    older = znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9)
    assert (older.num_handlers, older.num_shards, older.num_coordinators) == (0, 0, 0)
    doc["actorlog_actors"] = {"num.io.threads": "4", "num.partition.shards": -1,
                              "num.group.coordinators": True}
    odd = znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9)
    assert (odd.num_handlers, odd.num_shards, odd.num_coordinators) == (0, 0, 0)


def test_partition_state_and_topic_round_trip_in_kafkas_json() -> None:
    tp = TopicPartition("orders", 4)
    state = LeaderAndIsr(2, 7, (2, 3, 1), 12, 5)
    data = znodes.encode_partition_state(state)
    assert data == b'{"controller_epoch":12,"leader":2,"version":1,"leader_epoch":7,"isr":[2,3,1]}'
    assert znodes.decode_partition_state(tp, data, 5) == state
    assignment = TopicAssignment({1: (2, 3), 0: (1, 2)}, 3)
    data = znodes.encode_topic_assignment(assignment)
    assert data == (b'{"version":2,"partitions":{"0":[1,2],"1":[2,3]},'
                    b'"adding_replicas":{},"removing_replicas":{}}')
    assert znodes.decode_topic_assignment("orders", data, 3) == assignment
    # Kafka 1.x/2.x version 1 (no adding/removing replicas) still reads.
    assert znodes.decode_topic_assignment("orders", b'{"version":1,"partitions":{"0":[4]}}') == \
        TopicAssignment({0: (4,)})
    # With a topic id: Kafka's version 3 and "topic_id" (an older version's znode has none)
    with_id = TopicAssignment({0: (1, 2)}, 3, "-B1Prn3sEdCnZQCgyR5r9g")
    data = znodes.encode_topic_assignment(with_id)
    assert json.loads(data) == {"version": 3, "partitions": {"0": [1, 2]}, "adding_replicas": {},
                                "removing_replicas": {}, "topic_id": "-B1Prn3sEdCnZQCgyR5r9g"}
    assert znodes.decode_topic_assignment("orders", data, 3) == with_id
    # an id given late (to a topic that existed without one) says so
    adopted = TopicAssignment({0: (1, 2)}, 4, "-B1Prn3sEdCnZQCgyR5r9g", True)
    data = znodes.encode_topic_assignment(adopted)
    assert json.loads(data)["topic_id_adopted"] is True
    assert znodes.decode_topic_assignment("orders", data, 4) == adopted


def test_an_adoption_record_round_trips_and_marks_the_topic_of_its_id() -> None:
    record = znodes.AdoptedTopicId("-B1Prn3sEdCnZQCgyR5r9g", 1_700_000_000_123)
    data = znodes.encode_adopted_topic_id(record)
    assert json.loads(data) == {"version": 1, "topic_id": "-B1Prn3sEdCnZQCgyR5r9g",
                                "adopted_ms": 1_700_000_000_123}
    assert znodes.decode_adopted_topic_id("orders", data) == record
    assert znodes.adopted_topic_id_path("orders") == "/actorlog/adopted_topic_ids/orders"
    assert znodes.ADOPTED_TOPIC_IDS in znodes.PERSISTENT_PATHS
    # As a Kafka 2.8+ tool rewrites the topic znode: topic_id kept, our mark dropped.
    kafka_rewrite = (b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"adding_replicas":{},'
                     b'"removing_replicas":{},"topic_id":"-B1Prn3sEdCnZQCgyR5r9g"}')
    plain = znodes.decode_topic_assignment("orders", kafka_rewrite, 9)
    assert not plain.topic_id_adopted
    assert znodes.with_adoption(plain, record) == TopicAssignment(
        {0: (1, 2), 1: (2, 1)}, 9, "-B1Prn3sEdCnZQCgyR5r9g", True)
    assert znodes.with_adoption(plain, None) == plain
    # a record of another id (an adoption since replaced) marks nothing
    other = znodes.AdoptedTopicId("AAAAAAAAAAAAAAAAAAAAAA", 5)
    assert znodes.with_adoption(plain, other) == plain
    without_id = TopicAssignment({0: (1,)}, 2)
    assert znodes.with_adoption(without_id, record) == without_id
    with pytest.raises(ValueError, match="not a topic id: 'nope'"):
        znodes.encode_adopted_topic_id(znodes.AdoptedTopicId("nope", 1))


def test_an_adoption_record_of_a_newer_format_or_unreadable_marks_its_topic() -> None:
    """A newer version's record is read for its id (its other fields are not needed);
    one that cannot be read does not raise: its topic counts as adopted (the safe
    direction), the next write replaces it and clearing drops it."""
    plain = TopicAssignment({0: (1, 2)}, 9, "-B1Prn3sEdCnZQCgyR5r9g")
    newer = znodes.read_adopted_topic_id(
        "t", b'{"version":2,"topic_id":"-B1Prn3sEdCnZQCgyR5r9g","adopted_at":"x"}')
    assert newer == znodes.AdoptedTopicId("-B1Prn3sEdCnZQCgyR5r9g", 0)
    assert znodes.with_adoption(plain, newer).topic_id_adopted
    assert znodes.adoption_recorded(newer, plain.topic_id)
    for data in (b"\x00garbage", b"[]", b'{"version":1}', None,
                 b'{"version":2,"topic_id":"nope"}', b'{"version":"2"}'):
        unreadable = znodes.read_adopted_topic_id("t", data)
        assert isinstance(unreadable, znodes.UnreadableAdoption), data
        assert unreadable.reason.startswith("/actorlog/adopted_topic_ids/t: ")
        assert znodes.with_adoption(plain, unreadable) == replace(plain, topic_id_adopted=True)
        assert not znodes.adoption_recorded(unreadable, plain.topic_id)  # to be rewritten
        assert znodes.adoption_to_clear(unreadable, plain.topic_id)
    # a topic without an id yet is not marked by anything
    without_id = TopicAssignment({0: (1,)}, 2)
    assert znodes.with_adoption(without_id, znodes.UnreadableAdoption("x")) == without_id
    # a readable record of another id is neither this id's record nor cleared with it
    other = znodes.AdoptedTopicId("AAAAAAAAAAAAAAAAAAAAAA", 5)
    assert not znodes.adoption_recorded(other, plain.topic_id)
    assert not znodes.adoption_to_clear(other, plain.topic_id)


def test_the_small_znodes() -> None:
    assert znodes.encode_controller_epoch(41) == b"41"
    assert znodes.decode_controller_epoch(b"41") == 41
    assert znodes.decode_controller(znodes.encode_controller(3, 99)) == 3
    assert json.loads(znodes.encode_controller(3, 99)) == {
        "version": 1, "brokerid": 3, "timestamp": "99"}
    assert znodes.decode_cluster_id(znodes.encode_cluster_id("abc")) == "abc"
    assert znodes.decode_topic_config("t", znodes.encode_topic_config({"a": "1"})) == {"a": "1"}
    change = [TopicPartition("t", 0), TopicPartition("u", 2)]
    assert znodes.decode_isr_change("isr_change_0000000001",
                                    znodes.encode_isr_change(change)) == tuple(change)
    assert znodes.partition_state_path(TopicPartition("t", 3)) == \
        "/brokers/topics/t/partitions/3/state"


@pytest.mark.parametrize(
    ("decode", "error"),
    [
        (lambda: znodes.decode_partition_state(TopicPartition("t", 0), b"{", 0),
         "/brokers/topics/t/partitions/0/state: not JSON: b'{'"),
        (lambda: znodes.decode_partition_state(TopicPartition("t", 0), b'{"leader":1}', 0),
         "/brokers/topics/t/partitions/0/state: no 'isr' in {'leader': 1}"),
        (lambda: znodes.decode_partition_state(
            TopicPartition("t", 0),
            b'{"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":1}', 0),
         "/brokers/topics/t/partitions/0/state: 'leader' must be an integer, got '1'"),
        (lambda: znodes.decode_topic_assignment("t", b'{"partitions":{"x":[1]}}'),
         "/brokers/topics/t: bad partition entry 'x': [1]"),
        (lambda: znodes.decode_topic_assignment(
            "t", b'{"partitions":{"0":[1]},"topic_id":"not-an-id"}'),
         "/brokers/topics/t: bad topic_id 'not-an-id'"),
        (lambda: znodes.decode_topic_assignment(
            "t", b'{"partitions":{"0":[1]},"topic_id_adopted":true}'),
         "/brokers/topics/t: bad topic_id_adopted True"),
        (lambda: znodes.decode_adopted_topic_id("t", b'{"version":1,"adopted_ms":1}'),
         "/actorlog/adopted_topic_ids/t: no 'topic_id' in {'version': 1, 'adopted_ms': 1}"),
        (lambda: znodes.decode_adopted_topic_id(
            "t", b'{"version":1,"topic_id":"x","adopted_ms":1}'),
         "/actorlog/adopted_topic_ids/t: bad topic_id 'x'"),
        (lambda: znodes.decode_adopted_topic_id(
            "t", b'{"version":0,"topic_id":"-B1Prn3sEdCnZQCgyR5r9g","adopted_ms":1}'),
         "/actorlog/adopted_topic_ids/t: unknown version 0"),
        (lambda: znodes.decode_adopted_topic_id(
            "t", b'{"version":1,"topic_id":"-B1Prn3sEdCnZQCgyR5r9g","adopted_ms":"1"}'),
         "/actorlog/adopted_topic_ids/t: 'adopted_ms' must be an integer, got '1'"),
        (lambda: znodes.decode_broker(1, b'{"endpoints":["nonsense"]}'),
         "/brokers/ids/1: bad endpoint 'nonsense'"),
        (lambda: znodes.decode_controller_epoch(b"x1"),
         "/controller_epoch: not an integer: 'x1'"),
    ],
)
def test_bad_znodes_are_refused_with_the_path(decode: object, error: str) -> None:
    with pytest.raises(BadZnode) as info:
        decode()  # type: ignore[operator]
    assert str(info.value) == error


def test_the_registration_carries_the_curve_key_of_a_node_with_curve() -> None:
    info = BrokerInfo(2, (Endpoint("PLAINTEXT", "10.0.0.2", 9092),), "tcp://10.0.0.2:19092",
                      None, 9, curve_key="x" * 40)
    doc = json.loads(znodes.encode_broker(info, timestamp_ms=123))
    assert doc["actorlog_curve_key"] == "x" * 40
    assert znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9) == info
    plain = json.loads(znodes.encode_broker(
        BrokerInfo(2, info.endpoints, info.gateway, None, 9), timestamp_ms=123))
    assert "actorlog_curve_key" not in plain


def test_the_registration_carries_the_inter_node_wire_fingerprint() -> None:
    info = BrokerInfo(2, (Endpoint("PLAINTEXT", "10.0.0.2", 9092),), "tcp://10.0.0.2:19092",
                      None, 9, wire="0123456789ab")
    doc = json.loads(znodes.encode_broker(info, timestamp_ms=123))
    assert doc["actorlog_wire"] == "0123456789ab"
    assert znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9) == info
    # a registration from before the fingerprint (or a Kafka broker's): empty, not an error
    assert znodes.decode_broker(3, KAFKA_BROKER, epoch=77).wire == ""


def test_the_registration_carries_the_incarnation_of_the_process() -> None:
    """Each start of a node registers a new incarnation: the others tell a node restarted
    on the same gateway from the process they knew (Directory.departed)."""
    info = BrokerInfo(2, (Endpoint("PLAINTEXT", "10.0.0.2", 9092),), "tcp://10.0.0.2:19092",
                      None, 9, incarnation="5f0c")
    doc = json.loads(znodes.encode_broker(info, timestamp_ms=123))
    assert doc["actorlog_incarnation"] == "5f0c"
    assert znodes.decode_broker(2, json.dumps(doc).encode(), epoch=9) == info
    assert znodes.decode_broker(3, KAFKA_BROKER, epoch=77).incarnation == ""


def test_topic_assignment_keeps_a_reassignment_in_kafkas_fields() -> None:
    assignment = TopicAssignment({0: (3, 1), 1: (2,)}, adding={0: (3,)}, removing={0: (1,)})
    data = znodes.encode_topic_assignment(assignment)
    doc = json.loads(data)
    assert doc["adding_replicas"] == {"0": [3]} and doc["removing_replicas"] == {"0": [1]}
    back = znodes.decode_topic_assignment("t", data, 4)
    assert back == replace(assignment, version=4)
    assert back.replica_assignment(0).origin == (1,) and back.replica_assignment(0).target == (3,)
    # Kafka's own znode, written by its controller mid-reassignment, reads the same
    kafka = (b'{"version":2,"partitions":{"0":[3,1],"1":[2]},'
             b'"adding_replicas":{"0":[3]},"removing_replicas":{"0":[1]}}')
    assert znodes.decode_topic_assignment("t", kafka, 4) == back
    # adding/removing replicas not among the partition's: those fields are dropped (logged),
    # the rest of the znode read (not a BadZnode stopping the controller's load)
    odd = znodes.decode_topic_assignment("t", (
        b'{"version":2,"partitions":{"0":[1],"1":[3,2]},"adding_replicas":{"0":[3],"1":[3]},'
        b'"removing_replicas":{"0":[1],"1":[2],"7":[5]}}'), 4)
    assert odd.partitions == {0: (1,), 1: (3, 2)}
    assert odd.adding == {1: (3,)} and odd.removing == {1: (2,)}
