"""The single node's topic table, kept in one JSON file written atomically.

Each topic has an id (``topic_id``, KIP-516's), given when it is created and written
with it; the shards write it in each partition's directory, so that a directory a
deleted topic left (its delete lost with a crash after this file was written) is never
taken for a namesake's. A table written by an older version has no ids: they load as ""
(a shard then checks nothing), and the broker's start gives them ids and saves the table
before any shard opens (``assign_missing_ids``): the id the topic's partition directories
hold, when they hold one (the table saved by an older version after a downgrade), else a
new one. Never an id made up at load, nor for an existing topic: a reader
that does not save (a restarted process of the broker) would hand its shards an id no
directory holds, and they would delete the topic's records."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from actors.core.log_dir import partition_dir_name
from actors.core.topic_id import (
    InvalidTopicId,
    PartitionMetadataError,
    decode_topic_id,
    new_topic_id,
    read_partition_metadata,
)
from wire.broker_messages import TopicEntry

STORE_FILE = "__actorlog_topics.json"


class TopicStoreError(ValueError):
    pass


@dataclass
class TopicInfo:
    num_partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    # required (keyword): a TopicInfo built for an existing topic must never get an id
    # made up for it, which its shards would take for a namesake's and delete its records
    topic_id: str = field(kw_only=True)


def ids_on_disk(log_dir: Path, topic: str, num_partitions: int) -> Counter[str]:
    """How many of the topic's partition directories hold each topic id (a damaged or
    unreadable ``partition.metadata`` counts for none, logged)."""
    held: Counter[str] = Counter()
    for p in range(num_partitions):
        try:
            found = read_partition_metadata(log_dir / partition_dir_name(topic, p))
        except (PartitionMetadataError, OSError) as exc:
            logger.warning("{}-{}: its topic id cannot be read: {}", topic, p, exc)
            continue
        if found is not None:
            held[found] += 1
    return held


class TopicStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.topics: dict[str, TopicInfo] = {}
        self.version = 0

    @classmethod
    def load(cls, log_dir: Path) -> TopicStore:
        store = cls(log_dir / STORE_FILE)
        if store.path.exists():
            try:
                doc = json.loads(store.path.read_text())
                store.version = int(doc["version"])
                store.topics = {}
                for name, t in doc["topics"].items():
                    info = TopicInfo(int(t["partitions"]), int(t["replication_factor"]),
                                     dict(t["configs"]), topic_id=t.get("topic_id", ""))
                    if info.topic_id:
                        decode_topic_id(info.topic_id)
                    store.topics[name] = info
            except (ValueError, KeyError, TypeError, InvalidTopicId) as exc:
                raise TopicStoreError(f"{store.path}: cannot read the topic table: {exc}") from None
        return store

    def assign_missing_ids(self, log_dir: Path | None = None) -> list[str]:
        """Give an id to each topic without one (an older version's table); returns their
        names. The caller saves the table before any shard opens a partition.

        A topic's partition directories in ``log_dir`` may hold its id already: a table
        saved by an older version (a downgrade, then this version again) drops the ids,
        the directories keep theirs. The topic takes the id most of them hold (a
        directory holding another is then a dead namesake's, as ever); a new id only
        when none holds one. A new id over directories holding one would have every
        shard delete its partitions."""
        missing = sorted(name for name, info in self.topics.items() if not info.topic_id)
        for name in missing:
            info = self.topics[name]
            held = ids_on_disk(log_dir, name, info.num_partitions) if log_dir else Counter()
            if held:
                # the most held; a tie (never made by one topic) decided the same each time
                info.topic_id = min(held, key=lambda i: (-held[i], i))
                if len(held) > 1:
                    logger.warning("{}: its partition directories hold topic ids {}: it takes "
                                   "{} (the most held); the others are dead namesakes'",
                                   name, dict(held), info.topic_id)
            else:
                info.topic_id = new_topic_id()
        return missing

    def save(self) -> None:
        self.version += 1
        doc = {
            "version": self.version,
            "topics": {
                name: {"partitions": t.num_partitions, "replication_factor": t.replication_factor,
                       "configs": t.configs, "topic_id": t.topic_id}
                for name, t in sorted(self.topics.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(doc, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def table(self) -> dict[str, TopicEntry]:
        """The wire form of MetadataUpdate.topics."""
        return {name: TopicEntry(t.num_partitions, dict(t.configs), t.topic_id)
                for name, t in self.topics.items()}
