"""`actorlog topics ...` and `actorlog groups ...` against a real broker, as real processes.

The commands use only the Kafka APIs; ``topics alter`` and ``groups delete``
use CreatePartitions, IncrementalAlterConfigs and DeleteGroups.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from tests.fixtures.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.clients, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("admin")
    b = BrokerProcess(base / "data", config={"group.initial.rebalance.delay.ms": 0}).start()
    yield b
    assert b.stop() == 0, b.log()[-3000:]


def actorlog(broker: BrokerProcess | None, *args: str) -> subprocess.CompletedProcess[str]:
    extra = ["--bootstrap", broker.bootstrap] if broker is not None else []
    return subprocess.run([sys.executable, "-m", "actors.cli", *args, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def as_json(broker: BrokerProcess, *args: str, code: int = 0) -> Any:
    proc = actorlog(broker, *args, "--json")
    assert proc.returncode == code, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code and len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# ------------------------------------------------------------------ topics


def test_topics_create_list_describe_delete(admin_broker: BrokerProcess) -> None:
    made = as_json(admin_broker, "topics", "create", "orders", "audit", "--partitions", "3",
                   "--config", "retention.ms=86400000")
    assert [(t["name"], t["created"], t["partitions"]) for t in made["topics"]] == [
        ("orders", True, 3), ("audit", True, 3)]

    listed = as_json(admin_broker, "topics", "list")["topics"]
    assert {"name": "orders", "partitions": 3, "internal": False} in listed
    assert any(t["internal"] for t in listed)  # __consumer_offsets
    assert not any(t["internal"] for t in as_json(admin_broker, "topics", "list",
                                                  "--exclude-internal")["topics"])
    human = actorlog(admin_broker, "topics", "list")
    assert human.returncode == 0 and "orders" in human.stdout and "PARTITIONS" in human.stdout

    [orders] = as_json(admin_broker, "topics", "describe", "orders")["topics"]
    assert [p["partition"] for p in orders["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1]
               for p in orders["partitions"])
    assert orders["configs"]["retention.ms"] == {"value": "86400000",
                                                 "source": "DYNAMIC_TOPIC_CONFIG"}
    text = actorlog(admin_broker, "topics", "describe", "orders").stdout
    assert "retention.ms=86400000" in text and "ISR" in text

    again = actorlog(admin_broker, "topics", "create", "orders")
    assert again.returncode == 1 and "TopicAlreadyExists" in again.stdout
    assert actorlog(admin_broker, "topics", "create", "orders", "--if-not-exists").returncode == 0

    gone = as_json(admin_broker, "topics", "delete", "audit")
    assert gone["topics"] == [{"name": "audit", "deleted": True, "error": None}]
    names = [t["name"] for t in as_json(admin_broker, "topics", "list")["topics"]]
    assert "audit" not in names and "orders" in names
    missing = actorlog(admin_broker, "topics", "delete", "audit")
    assert missing.returncode == 1 and "UnknownTopicOrPartition" in missing.stdout
    assert actorlog(admin_broker, "topics", "delete", "audit", "--if-exists").returncode == 0
    unknown = as_json(admin_broker, "topics", "describe", "audit", code=1)["topics"]
    assert unknown[0]["error"].startswith("UnknownTopicOrPartition")


def test_topic_command_mistakes_get_one_line(admin_broker: BrokerProcess) -> None:
    one_line_error(actorlog(admin_broker, "topics", "create", "x", "--config", "retention.ms"),
                   2, "KEY=VALUE", "retention.ms")
    one_line_error(actorlog(admin_broker, "topics", "alter", "x"), 2, "nothing to alter")
    # an internal topic is refused before anything is deleted, as kafka-topics.sh refuses it
    as_json(admin_broker, "topics", "create", "kept")
    one_line_error(actorlog(admin_broker, "topics", "delete", "kept", "__consumer_offsets"),
                   2, "__consumer_offsets is an internal topic", "nothing was deleted")
    names = {t["name"] for t in as_json(admin_broker, "topics", "list")["topics"]}
    assert {"kept", "__consumer_offsets"} <= names
    one_line_error(actorlog(None, "topics", "list", "--bootstrap", "127.0.0.1:9",
                            "--timeout-ms", "1000"), 1, "cannot reach", "127.0.0.1:9",
                   "--bootstrap")


def test_topics_alter_adds_partitions(admin_broker: BrokerProcess) -> None:
    as_json(admin_broker, "topics", "create", "growing", "--partitions", "1")
    altered = as_json(admin_broker, "topics", "alter", "growing", "--partitions", "3")
    assert altered["topic"]["partitions"] == 3
    [growing] = as_json(admin_broker, "topics", "describe", "growing")["topics"]
    assert len(growing["partitions"]) == 3


def test_topics_alter_sets_and_deletes_configs(admin_broker: BrokerProcess) -> None:
    as_json(admin_broker, "topics", "create", "tuned", "--config", "retention.ms=1000000")
    as_json(admin_broker, "topics", "alter", "tuned", "--config", "segment.bytes=1048576",
            "--delete-config", "retention.ms")
    [tuned] = as_json(admin_broker, "topics", "describe", "tuned")["topics"]
    assert tuned["configs"]["segment.bytes"] == {"value": "1048576",
                                                 "source": "DYNAMIC_TOPIC_CONFIG"}
    assert tuned["configs"]["retention.ms"]["source"] != "DYNAMIC_TOPIC_CONFIG"


def test_topics_alter_fails_when_the_broker_refuses(admin_broker: BrokerProcess) -> None:
    """A config the broker refuses (a bad value, an unknown key, a topic that does not
    exist) is the command's error, exit code 1, with the broker's words; nothing is said
    to be altered and nothing is."""
    as_json(admin_broker, "topics", "create", "strict", "--config", "compression.type=zstd")
    for args, words in [
        (("strict", "--config", "compression.type=brotli"),
         ("InvalidConfiguration", "compression.type must be one of", "brotli")),
        (("strict", "--config", "compresion.type=gzip"),
         ("InvalidConfiguration", "compresion.type")),
        (("never-made", "--config", "compression.type=gzip"),
         ("UnknownTopicOrPartition", "never-made")),
    ]:
        refused = as_json(admin_broker, "topics", "alter", *args, code=1)["topic"]
        assert refused["configs"] is None
        assert all(w in refused["error"] for w in words), refused["error"]
        human = actorlog(admin_broker, "topics", "alter", *args)
        assert human.returncode == 1 and "altered" not in human.stdout, human.stdout
    [strict] = as_json(admin_broker, "topics", "describe", "strict")["topics"]
    assert strict["configs"]["compression.type"]["value"] == "zstd"


# ------------------------------------------------------------------ groups


def _produce(broker: BrokerProcess, topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for partition, count in per_partition.items():
        for i in range(count):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def _consume_and_commit(consumer: Consumer, count: int) -> None:
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    assert got == count
    consumer.commit(asynchronous=False)


def test_groups_list_describe_and_reset_offsets(admin_broker: BrokerProcess) -> None:
    as_json(admin_broker, "topics", "create", "clicks", "--partitions", "2")
    _produce(admin_broker, "clicks", {0: 5, 1: 5})
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "readers",
                         "client.id": "reader-1", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe(["clicks"])
        _consume_and_commit(consumer, 10)
        _produce(admin_broker, "clicks", {0: 3})  # lag 3 on partition 0, 0 on 1

        groups = as_json(admin_broker, "groups", "list")["groups"]
        assert {"group": "readers", "state": "Stable", "protocol_type": "consumer"} in groups

        [readers] = as_json(admin_broker, "groups", "describe", "readers")["groups"]
        assert readers["state"] == "Stable" and readers["protocol_type"] == "consumer"
        [member] = readers["members"]
        assert member["client_id"] == "reader-1"
        assert member["assignment"] == [{"topic": "clicks", "partition": 0},
                                        {"topic": "clicks", "partition": 1}]
        assert [(o["partition"], o["committed"], o["log_end"], o["lag"], o["member"])
                for o in readers["offsets"]] == [(0, 5, 8, 3, member["member_id"]),
                                                 (1, 5, 5, 0, member["member_id"])]
        text = actorlog(admin_broker, "groups", "describe", "readers").stdout
        assert "LAG" in text and "reader-1" in text and "Stable" in text

        busy = actorlog(admin_broker, "groups", "reset-offsets", "readers", "--topic", "clicks",
                        "--to-earliest", "--execute")
        one_line_error(busy, 1, "readers", "Stable", "stop its consumers")
    finally:
        consumer.close()

    plan = as_json(admin_broker, "groups", "reset-offsets", "readers", "--topic", "clicks",
                   "--to-earliest")
    assert plan["executed"] is False
    assert [(o["partition"], o["current"], o["new"]) for o in plan["offsets"]] == [
        (0, 5, 0), (1, 5, 0)]
    [still] = as_json(admin_broker, "groups", "describe", "readers")["groups"]
    assert still["state"] == "Empty" and [o["committed"] for o in still["offsets"]] == [5, 5]

    done = as_json(admin_broker, "groups", "reset-offsets", "readers", "--topic", "clicks:1",
                   "--shift-by", "-2", "--execute")
    assert [(o["partition"], o["new"], o["error"]) for o in done["offsets"]] == [(1, 3, None)]
    as_json(admin_broker, "groups", "reset-offsets", "readers", "--topic", "clicks:0",
            "--to-offset", "99", "--execute")  # kept within the log: the log end
    [after] = as_json(admin_broker, "groups", "describe", "readers")["groups"]
    assert [(o["partition"], o["committed"], o["lag"]) for o in after["offsets"]] == [
        (0, 8, 0), (1, 3, 2)]

    nobody = as_json(admin_broker, "groups", "describe", "nobody", code=1)["groups"]
    assert nobody[0]["error"] == "group 'nobody' does not exist"


def test_group_command_mistakes_get_one_line(admin_broker: BrokerProcess) -> None:
    one_line_error(actorlog(admin_broker, "groups", "reset-offsets", "g", "--topic", "t"), 2,
                   "exactly one of")
    for both in (["--to-earliest", "--to-latest"], ["--to-latest", "--to-earliest"]):
        one_line_error(actorlog(admin_broker, "groups", "reset-offsets", "g", "--topic", "t",
                                *both), 2, "exactly one of")
    one_line_error(actorlog(admin_broker, "groups", "reset-offsets", "g", "--to-latest"), 2,
                   "--topic", "--all-topics")
    one_line_error(actorlog(admin_broker, "groups", "reset-offsets", "g", "--all-topics",
                            "--to-datetime", "yesterday"), 2, "ISO 8601")
    as_json(admin_broker, "topics", "create", "pair", "--partitions", "2", "--if-not-exists")
    one_line_error(actorlog(admin_broker, "groups", "reset-offsets", "g", "--topic", "pair:0,7",
                            "--to-earliest"), 1, "topic 'pair' has no partition 7: it has 2")


def test_groups_delete_removes_an_empty_group(admin_broker: BrokerProcess) -> None:
    as_json(admin_broker, "topics", "create", "short", "--if-not-exists")
    _produce(admin_broker, "short", {0: 1})
    consumer = Consumer({"bootstrap.servers": admin_broker.bootstrap, "group.id": "brief",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["short"])
    try:
        _consume_and_commit(consumer, 1)
    finally:
        consumer.close()
    deleted = as_json(admin_broker, "groups", "delete", "brief")
    assert deleted["groups"] == [{"group": "brief", "deleted": True, "error": None}]
    names = [g["group"] for g in as_json(admin_broker, "groups", "list")["groups"]]
    assert "brief" not in names
