"""A single node's topic ids: a deleted topic's records never come back under a namesake.

The window: DeleteTopics writes the topic store (the delete recorded), then the shards
set the partitions' directories aside. A kill -9 between the two leaves the directories
on disk with no topic naming them; the start does not reconcile the store with the
directories (deleting what the store does not list is unsafe if the store is damaged).
Before topic ids, a namesake created next opened those directories and served the old
records. Each directory now holds its topic's id (``partition.metadata``): the namesake,
a new id, deletes the directory instead of opening it.

The broker is killed (-9) and the store is then written as the delete writes it
(the topic removed, the version moved on): the exact state a kill between the two
writes leaves, made without racing the shards.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from actors.core.topic_id import (
    PARTITION_METADATA_FILE,
    decode_topic_id,
    is_topic_id,
    read_partition_metadata,
)
from actors.core.topic_store import STORE_FILE, TopicStore
from tests.broker.rawclient import (
    METADATA,
    RawClient,
    read_records,
    record_batch,
    wait_for_log,
)
from tests.broker.test_restart import restart, restarted  # noqa: F401
from tests.fixtures.broker import BrokerProcess


def values(port: int, topic: str, partition: int) -> list[bytes]:
    with RawClient(port) as client:
        part = client.fetch(topic, partition, 0)
        assert part.error_code == 0
        return [v for _o, _k, v in read_records(part.records)]


def metadata_topic_ids(port: int, topics: list[str]) -> dict[str, uuid.UUID]:
    """Metadata v12's ``topic_id`` per topic (v10+ carry it)."""
    with RawClient(port) as client:
        response = client.call(METADATA, 12, {
            "topics": [{"topic_id": None, "name": t} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return {t.name: t.topic_id for t in response.topics}


def store_doc(data: Path) -> dict:
    doc: dict = json.loads((data / STORE_FILE).read_text())
    return doc


@pytest.mark.parametrize("processes", [1, 2])
def test_a_delete_killed_before_the_directories_went_does_not_feed_a_namesake(
        tmp_path: Path, processes: int) -> None:
    """num.processes 2: the shards of process 1 check the ids through its read-only
    log dir, and their deletes go through it."""
    data = tmp_path / "data"
    config = {"num.processes": processes, "num.partition.shards": 2}
    started: list[BrokerProcess] = []
    try:
        _namesake_after_a_killed_delete(data, config, started)
    finally:
        for b in started:
            if b.proc is not None and b.proc.poll() is None:
                b.stop()


def _namesake_after_a_killed_delete(data: Path, config: dict, started: list[BrokerProcess]
                                    ) -> None:
    fresh_broker = BrokerProcess(data, config=config).start()
    started.append(fresh_broker)
    topic = "reborn"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, 2) == 0
        for p in range(2):
            assert client.produce(topic, p, record_batch([(None, b"old")] * 5)).error_code == 0
    old_id = store_doc(data)["topics"][topic]["topic_id"]
    assert is_topic_id(old_id)
    assert read_partition_metadata(data / f"{topic}-0") == old_id
    fresh_broker.kill()
    store = TopicStore.load(data)  # the delete's write, done; the shards' never ran
    del store.topics[topic]
    store.save()
    assert (data / f"{topic}-0").is_dir() and (data / f"{topic}-1").is_dir()

    b = restart(fresh_broker, started, 1)
    with RawClient(b.port) as client:
        assert client.create_topic(topic, 2) == 0
    new_id = store_doc(data)["topics"][topic]["topic_id"]
    assert is_topic_id(new_id) and new_id != old_id
    for p in range(2):
        assert values(b.port, topic, p) == [], "the deleted topic's records are served"
        with RawClient(b.port) as client:
            assert client.list_offset(topic, p, -1).offset == 0
            assert client.produce(topic, p, record_batch([(None, b"new")])).base_offset == 0
        assert values(b.port, topic, p) == [b"new"]
        assert read_partition_metadata(data / f"{topic}-{p}") == new_id
    assert metadata_topic_ids(b.port, [topic]) == {topic: uuid.UUID(bytes=decode_topic_id(new_id))}
    log = b.log()
    for p in range(2):
        assert f"{topic}-{p}: its directory holds topic id {old_id}, not {new_id}" in log
        # the warning says which directory went, and how big it was (not the size of the
        # kill's: the start trims a killed log dir's preallocated indexes first)
        assert re.search(re.escape(f"it is deleted ({data / f'{topic}-{p}'}, ") + r"\d+ bytes\)",
                         log), log[-3000:]
    assert b.stop() == 0
    # and so it stays: the restart opens the namesake's own directories
    b = restart(fresh_broker, started, 2)
    for p in range(2):
        assert values(b.port, topic, p) == [b"new"]
    assert "a deleted namesake's whose delete was lost" not in b.log()


def dir_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def test_a_topic_created_over_an_orphan_directory_says_so(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:  # noqa: F811
    """A partition directory with no id that no topic names (left by hand, or by an
    older version): a topic created by its name opens it, records and all, as Kafka's
    LogManager would; one warning names the directory and its size (it was silent)."""
    data = fresh_broker.data_dir
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic("source", 1) == 0
        assert client.produce("source", 0, record_batch([(None, b"left")] * 3)).error_code == 0
    assert fresh_broker.stop() == 0
    orphan = data / "orphan-0"
    shutil.copytree(data / "source-0", orphan)
    (orphan / PARTITION_METADATA_FILE).unlink()
    size = dir_bytes(orphan)
    assert size > 0

    b = restart(fresh_broker, restarted, 1)
    with RawClient(b.port) as client:
        assert client.create_topic("orphan", 1) == 0
    assert values(b.port, "orphan", 0) == [b"left"] * 3
    said = f"orphan-0: created, and its directory {orphan} was there already ({size} bytes"
    log = wait_for_log(b, said)
    assert log.count(said) == 1, log[-3000:]
    # a topic created on no directory says nothing of the kind
    with RawClient(b.port) as client:
        assert client.create_topic("plain", 1) == 0
    assert "plain-0: created, and its directory" not in b.log()


def test_an_older_versions_topics_get_ids_and_keep_their_records(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:  # noqa: F811
    """A store and directories without ids (made by an older actorlog): the start gives
    each topic an id, and the partitions are adopted (the file written), not deleted."""
    data = fresh_broker.data_dir
    topic = "before-ids"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, 1) == 0
        assert client.produce(topic, 0, record_batch([(None, b"kept")] * 3)).error_code == 0
    assert fresh_broker.stop() == 0
    doc = store_doc(data)
    for entry in doc["topics"].values():
        del entry["topic_id"]
    (data / STORE_FILE).write_text(json.dumps(doc))
    (data / f"{topic}-0" / PARTITION_METADATA_FILE).unlink()

    b = restart(fresh_broker, restarted, 1)
    assert values(b.port, topic, 0) == [b"kept"] * 3
    topic_id = store_doc(data)["topics"][topic]["topic_id"]
    assert is_topic_id(topic_id)
    assert read_partition_metadata(data / f"{topic}-0") == topic_id
    assert re.search(r"gave topic ids to \d+ topic\(s\) made by an older version: .*before-ids",
                     b.log())
    assert b.stop() == 0
    b = restart(fresh_broker, restarted, 2)  # the id given is the one kept
    assert store_doc(data)["topics"][topic]["topic_id"] == topic_id
    assert values(b.port, topic, 0) == [b"kept"] * 3


def test_a_downgrade_and_upgrade_keeps_every_topics_records(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:  # noqa: F811
    """An older actorlog's start saves the table without the ids; the partition
    directories keep their ``partition.metadata``. Upgraded again, each topic takes the
    id its directories hold: no shard takes them for a dead namesake's (before: a new id
    was given and every partition deleted)."""
    data = fresh_broker.data_dir
    topics = {"down-a": 2, "down-b": 3}
    with RawClient(fresh_broker.port) as client:
        for topic, n in topics.items():
            assert client.create_topic(topic, n) == 0
            for p in range(n):
                batch = record_batch([(None, f"{topic}-{p}".encode())] * 4)
                assert client.produce(topic, p, batch).error_code == 0
    ids = {t: e["topic_id"] for t, e in store_doc(data)["topics"].items()}
    assert fresh_broker.stop() == 0
    doc = store_doc(data)  # the older version's save: no ids, the directories untouched
    for entry in doc["topics"].values():
        del entry["topic_id"]
    doc["version"] += 1
    (data / STORE_FILE).write_text(json.dumps(doc))
    assert read_partition_metadata(data / "down-b-2") == ids["down-b"]

    b = restart(fresh_broker, restarted, 1)
    for topic, n in topics.items():
        for p in range(n):
            assert values(b.port, topic, p) == [f"{topic}-{p}".encode()] * 4
            assert read_partition_metadata(data / f"{topic}-{p}") == ids[topic]
    assert {t: e["topic_id"] for t, e in store_doc(data)["topics"].items()} == ids
    assert "a deleted namesake's whose delete was lost" not in b.log()
