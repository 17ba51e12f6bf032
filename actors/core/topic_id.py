"""Topic ids, and the ``partition.metadata`` file that ties a partition directory to one.

A topic's name can be reused once the topic is deleted; its id cannot. Each topic gets
a random 16-byte id when it is created (Kafka's KIP-516), shown as Kafka shows a Uuid:
base64url without padding, 22 characters. Every partition directory holds the id of
the topic that made it (``partition.metadata``, the format Kafka writes:
``version: 0`` then ``topic_id: <id>``), so a directory left behind by a deleted
topic is told apart from its namesake's, whatever the topic table says.

No I/O here beyond the one file: the shard decides what to do with a directory whose
id differs (it is deleted, never opened).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Callable
from pathlib import Path

from actors.core.checkpoint import write_atomically

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
TOPIC_ID_BYTES = 16
TOPIC_ID_CHARS = 22  # base64url of 16 bytes, without its "==" padding
# Kafka's reserved ids: the zero id ("no id") and 1 (its metadata topic's)
_RESERVED = (bytes(TOPIC_ID_BYTES), bytes(TOPIC_ID_BYTES - 1) + b"\x01")


class InvalidTopicId(ValueError):
    """A text that is not a topic id (22 base64url characters of 16 bytes)."""


class PartitionMetadataError(ValueError):
    """A ``partition.metadata`` file that does not parse (named, with why)."""


def encode_topic_id(raw: bytes) -> str:
    if len(raw) != TOPIC_ID_BYTES:
        raise InvalidTopicId(f"a topic id is {TOPIC_ID_BYTES} bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_topic_id(text: str) -> bytes:
    """The 16 bytes of a topic id's text; raises InvalidTopicId."""
    if not isinstance(text, str) or len(text) != TOPIC_ID_CHARS:
        raise InvalidTopicId(f"a topic id is {TOPIC_ID_CHARS} base64url characters, "
                             f"got {text!r:.60}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise InvalidTopicId(f"not base64url: {text!r}") from None
    if encode_topic_id(raw) != text:  # stray bits in the last character
        raise InvalidTopicId(f"not the canonical form of a topic id: {text!r}")
    return raw


def is_topic_id(text: object) -> bool:
    try:
        decode_topic_id(text)  # type: ignore[arg-type]
    except InvalidTopicId:
        return False
    return True


def new_topic_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A random topic id. Not a reserved one, and (as Kafka) none whose text starts with
    a dash, which a command line would take for an option."""
    while True:
        raw = random_bytes(TOPIC_ID_BYTES)
        text = encode_topic_id(raw)
        if raw not in _RESERVED and not text.startswith("-"):
            return text


def render_partition_metadata(topic_id: str) -> bytes:
    decode_topic_id(topic_id)
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {topic_id}\n".encode()


def parse_partition_metadata(path: Path, data: bytes) -> str:
    """The topic id in a ``partition.metadata`` file's bytes; raises PartitionMetadataError."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PartitionMetadataError(f"{path}: not text") from None
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise PartitionMetadataError(f"{path}: line {number}: not 'key: value': {line!r:.60}")
        fields[key.strip()] = value.strip()
    if fields.get("version") != str(PARTITION_METADATA_VERSION):
        raise PartitionMetadataError(
            f"{path}: version {fields.get('version')!r}, expected {PARTITION_METADATA_VERSION}")
    if "topic_id" not in fields:
        raise PartitionMetadataError(f"{path}: no topic_id")
    try:
        decode_topic_id(fields["topic_id"])
    except InvalidTopicId as exc:
        raise PartitionMetadataError(f"{path}: {exc}") from None
    return fields["topic_id"]


def read_partition_metadata(directory: Path) -> str | None:
    """The topic id written in ``directory``, or None when it has no such file (made by
    an older version, or not made yet). Raises PartitionMetadataError for a damaged file
    (a damaged file proves nothing: its directory is neither adopted nor deleted), and
    for one that cannot be read (EIO, EACCES): it proves nothing either."""
    path = directory / PARTITION_METADATA_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PartitionMetadataError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_partition_metadata(path, data)


def write_partition_metadata(directory: Path, topic_id: str) -> None:
    """Write the file atomically (tmp, fsync, rename, fsync the directory)."""
    write_atomically(directory / PARTITION_METADATA_FILE, render_partition_metadata(topic_id))
