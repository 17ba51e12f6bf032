"""Topic ids and the partition.metadata file (actors.core.topic_id)."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest

from actors.core.topic_id import (
    PARTITION_METADATA_FILE,
    InvalidTopicId,
    PartitionMetadataError,
    decode_topic_id,
    encode_topic_id,
    is_topic_id,
    new_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)
from actors.core.topic_store import STORE_FILE, TopicInfo, TopicStore, TopicStoreError


def test_a_topic_id_is_kafkas_uuid_text() -> None:
    # Kafka's Uuid.toString: base64url of the 16 bytes, no padding
    raw = uuid.UUID("f81d4fae-7dec-11d0-a765-00a0c91e6bf6").bytes
    text = encode_topic_id(raw)
    assert text == base64.urlsafe_b64encode(raw).decode().rstrip("=") == "-B1Prn3sEdCnZQCgyR5r9g"
    assert len(text) == 22
    assert decode_topic_id(text) == raw


def test_new_ids_are_random_valid_and_never_start_with_a_dash() -> None:
    ids = {new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(is_topic_id(t) and not t.startswith("-") for t in ids)
    # drawn again while the draw is reserved or starts with a dash
    draws = iter([bytes(16), bytes(15) + b"\x01", b"\xf8" + bytes(15), b"\x01" * 16])
    assert new_topic_id(lambda n: next(draws)) == encode_topic_id(b"\x01" * 16)


@pytest.mark.parametrize("text", ["", "abc", "A" * 21, "A" * 23, "AAAAAAAAAAAAAAAAAAAA+A",
                                  "AAAAAAAAAAAAAAAAAAAAAB"])  # last: stray bits in the tail
def test_bad_ids_are_refused(text: str) -> None:
    assert not is_topic_id(text)
    with pytest.raises(InvalidTopicId):
        decode_topic_id(text)


def test_the_file_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    topic_id = new_topic_id()
    write_partition_metadata(tmp_path, topic_id)
    assert (tmp_path / PARTITION_METADATA_FILE).read_text() == (
        f"version: 0\ntopic_id: {topic_id}\n")
    assert read_partition_metadata(tmp_path) == topic_id
    assert sorted(os.listdir(tmp_path)) == [PARTITION_METADATA_FILE]  # no tmp file left
    other = new_topic_id()
    write_partition_metadata(tmp_path, other)  # replaced whole
    assert read_partition_metadata(tmp_path) == other


def test_a_file_kafka_wrote_is_read(tmp_path: Path) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_text("version: 0\r\ntopic_id: "
                                                    "-B1Prn3sEdCnZQCgyR5r9g\r\n")
    assert read_partition_metadata(tmp_path) == "-B1Prn3sEdCnZQCgyR5r9g"


@pytest.mark.parametrize("content, why", [
    (b"", "version None"),
    (b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n", "version '1'"),
    (b"version: 0\n", "no topic_id"),
    (b"version: 0\ntopic_id: nope\n", "22 base64url characters"),
    (b"version 0\n", "line 1: not 'key: value'"),
    (b"\xff\xfe", "not text"),
])
def test_a_damaged_file_is_an_error_naming_it(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_bytes(content)
    with pytest.raises(PartitionMetadataError, match=why) as info:
        read_partition_metadata(tmp_path)
    assert str(tmp_path / PARTITION_METADATA_FILE) in str(info.value)


def test_an_unreadable_file_proves_nothing_either(tmp_path: Path) -> None:
    """EIO, EACCES (a directory where the file should be stands in for them): the same
    error as a damaged file, which the shard's open keeps to that one partition."""
    (tmp_path / PARTITION_METADATA_FILE).mkdir()
    with pytest.raises(PartitionMetadataError, match="cannot be read"):
        read_partition_metadata(tmp_path)


def test_writing_a_bad_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidTopicId):
        write_partition_metadata(tmp_path, "not-an-id")
    assert not (tmp_path / PARTITION_METADATA_FILE).exists()


def test_the_topic_store_keeps_ids_and_never_makes_one_up_at_load(tmp_path: Path) -> None:
    store = TopicStore.load(tmp_path)
    with pytest.raises(TypeError):  # never an id made up for a topic: it is given
        TopicInfo(2)  # type: ignore[call-arg]
    store.topics["a"] = TopicInfo(2, topic_id=new_topic_id())
    store.save()
    again = TopicStore.load(tmp_path)
    assert again.topics["a"].topic_id == store.topics["a"].topic_id
    assert again.table()["a"].topic_id == store.topics["a"].topic_id
    # an older version's table: no id until the broker's start gives one and saves it
    (tmp_path / STORE_FILE).write_text(
        '{"version": 3, "topics": {"old": {"partitions": 1, "replication_factor": 1, '
        '"configs": {}}}}')
    old = TopicStore.load(tmp_path)
    assert old.topics["old"].topic_id == "" and old.table()["old"].topic_id == ""
    assert old.assign_missing_ids() == ["old"] and is_topic_id(old.topics["old"].topic_id)
    assert old.assign_missing_ids() == []
    (tmp_path / STORE_FILE).write_text(
        '{"version": 3, "topics": {"bad": {"partitions": 1, "replication_factor": 1, '
        '"configs": {}, "topic_id": "nope"}}}')
    with pytest.raises(TopicStoreError, match="cannot read the topic table"):
        TopicStore.load(tmp_path)


def test_a_topic_without_an_id_takes_the_one_its_directories_hold(tmp_path: Path) -> None:
    """A table an older version saved (a downgrade) over directories this version gave
    ids: the topic takes the id most of its directories hold, never a new one (which
    would have every shard delete its partitions)."""
    first, other = new_topic_id(), new_topic_id()
    (tmp_path / STORE_FILE).write_text(json.dumps({"version": 3, "topics": {
        name: {"partitions": 3, "replication_factor": 1, "configs": {}}
        for name in ("kept", "split", "bare", "damaged")}}))
    for p in range(3):
        for name in ("kept", "split", "bare", "damaged"):
            (tmp_path / f"{name}-{p}").mkdir()
        write_partition_metadata(tmp_path / f"kept-{p}", first)
    write_partition_metadata(tmp_path / "split-0", other)
    write_partition_metadata(tmp_path / "split-1", first)
    write_partition_metadata(tmp_path / "split-2", first)
    (tmp_path / "damaged-0" / PARTITION_METADATA_FILE).write_text("version: 9\n")
    write_partition_metadata(tmp_path / "damaged-1", other)
    store = TopicStore.load(tmp_path)
    assert store.assign_missing_ids(tmp_path) == ["bare", "damaged", "kept", "split"]
    assert store.topics["kept"].topic_id == first
    assert store.topics["split"].topic_id == first  # split-0 is a dead namesake's
    assert store.topics["damaged"].topic_id == other  # a damaged file is no vote
    assert is_topic_id(store.topics["bare"].topic_id)
    assert store.topics["bare"].topic_id not in (first, other)
    # without the log dir (or no directory holding one): a new id, as before
    again = TopicStore.load(tmp_path)
    again.assign_missing_ids()
    assert again.topics["kept"].topic_id != first
