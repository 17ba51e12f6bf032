"""Messages between the broker's actors (type ids 200-299).

Record data always travels as whole batches (``bytes``), never as single
records. Per-partition rows inside a message are plain arrays, documented
field by field on the type that carries them.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message

# ----------------------------------------------------------------- network


@message(200)
class NewConnection(NamedTuple):
    """Acceptor -> Processor: adopt this accepted socket (same process: an fd)."""

    conn_id: int
    fd: int
    peer_host: str
    peer_port: int


@message(201)
class ConnectionClosed(NamedTuple):
    """Processor -> Acceptor: a connection ended (frees its max.connections slots)."""

    conn_id: int
    peer_host: str


@message(202)
class KafkaRequest(NamedTuple):
    """Processor -> RequestHandler[hash(conn_id) % H]: one request frame (no size prefix).

    ``seq`` numbers the requests of one connection; the Processor writes the
    responses in that order. ``recv_ns`` is the monotonic time the frame was
    complete (start of Kafka's "request queue" stage).
    """

    conn_id: int
    seq: int
    processor: str
    api_key: int
    api_version: int
    correlation_id: int
    frame: bytes
    recv_ns: int


@message(203)
class KafkaResponse(NamedTuple):
    """RequestHandler -> Processor: the response frame of request ``seq``.

    ``respond`` False (acks=0 produce) advances the sequence without writing;
    ``close`` closes the connection once everything before it was written.
    ``stages_ns`` = [request queue, local, remote] durations, for metrics.
    """

    conn_id: int
    seq: int
    frame: bytes
    respond: bool
    close: bool
    api_key: int
    correlation_id: int
    recv_ns: int
    stages_ns: list[int]


# ---------------------------------------------------------- partition shards


@message(210)
class Append(NamedTuple):
    """Handler -> PartitionShard: append each row's batches as leader.

    rows: [topic, partition, records bytes]
    """

    req_id: int
    acks: int
    timeout_ms: int
    rows: list[list[object]]


@message(211)
class AppendDone(NamedTuple):
    """PartitionShard -> Handler.

    rows: [topic, partition, error_code, base_offset, log_append_time_ms,
           log_start_offset, error_message or None]
    """

    req_id: int
    rows: list[list[object]]


@message(212)
class Read(NamedTuple):
    """Handler -> PartitionShard.

    rows: [topic, partition, fetch_offset, partition_max_bytes]
    ``isolation`` 0: read to the high watermark; -1: to the log end (followers).
    """

    req_id: int
    replica_id: int
    max_bytes: int
    rows: list[list[object]]


@message(213)
class ReadDone(NamedTuple):
    """PartitionShard -> Handler.

    rows: [topic, partition, error_code, high_watermark, log_start_offset,
           records bytes, fetch_segment_base, fetch_relative_position, log_end_offset]
    """

    req_id: int
    rows: list[list[object]]


@message(214)
class ListOffsets(NamedTuple):
    """rows: [topic, partition, timestamp (-1 latest, -2 earliest, -3 max timestamp)]"""

    req_id: int
    isolation_level: int
    rows: list[list[object]]


@message(215)
class ListOffsetsDone(NamedTuple):
    """rows: [topic, partition, error_code, timestamp, offset, leader_epoch]"""

    req_id: int
    rows: list[list[object]]


@message(216)
class OpenPartitions(NamedTuple):
    """Controller -> PartitionShard: host these partitions (create or load their logs).

    rows: [topic, partition, topic configs dict]
    """

    req_id: int
    rows: list[list[object]]


@message(217)
class DropPartitions(NamedTuple):
    """Controller -> PartitionShard: delete these partitions' logs. rows: [topic, partition]"""

    req_id: int
    rows: list[list[object]]


@message(218)
class ShardDone(NamedTuple):
    """PartitionShard -> Controller: OpenPartitions/DropPartitions finished."""

    req_id: int
    error: str


@message(219)
class WatchPartition(NamedTuple):
    """PurgatoryShard -> PartitionShard: send PartitionChanged for this partition.

    ``seen_log_end_offset`` is what the watcher last knew; if the log moved
    past it already, the shard answers at once, so no append is missed.
    ``watch`` False withdraws the interest.
    """

    topic: str
    partition: int
    seen_log_end_offset: int
    watch: bool


@message(220)
class PartitionChanged(NamedTuple):
    """PartitionShard -> PurgatoryShard: the latest state of a watched partition.

    ``status`` is the fields of actors.core.delayed_ops.PartitionStatus in
    order, positions as [segment_base_offset, relative_position].
    """

    status: list[object]


# ----------------------------------------------------------------- purgatory


@message(230)
class WatchFetch(NamedTuple):
    """Handler -> PurgatoryShard: wake me (FetchReady) once the fetch can complete.

    rows: [topic, partition, fetch_offset, segment_base, relative_position, max_bytes]
    """

    req_id: int
    min_bytes: int
    max_wait_ms: int
    from_follower: bool
    rows: list[list[object]]


@message(231)
class FetchReady(NamedTuple):
    """PurgatoryShard -> Handler: read again and answer (reason for the trace)."""

    req_id: int
    reason: str
    timed_out: bool


@message(232)
class WatchProduce(NamedTuple):
    """PartitionShard -> PurgatoryShard: an acks=-1 append waits for the ISR.

    rows: [topic, partition, required_offset, base_offset, log_append_time_ms,
           log_start_offset, leader_epoch, error_code]; a row that does not wait
           (settled at append) has required_offset -1 and its error code.
    """

    req_id: int
    handler: str
    timeout_ms: int
    rows: list[list[object]]


@message(233)
class ProduceReady(NamedTuple):
    """PurgatoryShard -> Handler: the rows of a delayed produce, settled.

    rows: as AppendDone rows.
    """

    req_id: int
    rows: list[list[object]]


# --------------------------------------------------------------------- timer


@message(240)
class Schedule(NamedTuple):
    """Owner -> Timer: send Expired(key) back at ``deadline_ms`` (Timer's clock)."""

    key: int
    deadline_ms: int


@message(241)
class Cancel(NamedTuple):
    key: int


@message(242)
class Expired(NamedTuple):
    key: int


# ------------------------------------------------------------- metadata/admin


@message(250)
class CreateTopics(NamedTuple):
    """Handler -> Controller. rows: [name, num_partitions, replication_factor, configs dict]

    ``validate_only`` checks without creating.
    """

    req_id: int
    validate_only: bool
    rows: list[list[object]]


@message(251)
class CreateTopicsDone(NamedTuple):
    """rows: [name, error_code, error_message or None, num_partitions, replication_factor]"""

    req_id: int
    rows: list[list[object]]


@message(252)
class DeleteTopics(NamedTuple):
    """rows: [name]"""

    req_id: int
    rows: list[list[object]]


@message(253)
class DeleteTopicsDone(NamedTuple):
    """rows: [name, error_code, error_message or None]"""

    req_id: int
    rows: list[list[object]]


@message(254)
class MetadataUpdate(NamedTuple):
    """Controller -> every handler: the full topic table.

    topics: {name: [num_partitions, configs dict]}
    """

    version: int
    topics: dict[str, list[object]]


@message(255)
class GetStats(NamedTuple):
    """Ask any broker actor for its counters (tests, metrics endpoint)."""


@message(256)
class Flush(NamedTuple):
    """Ask a PartitionShard to write checkpoints (and fsync) now."""


@message(257)
class CheckpointOffsets(NamedTuple):
    """PartitionShard -> LogManager: offsets to checkpoint.

    rows: [topic, partition, high_watermark, recovery_point, log_start_offset]
    ``final`` is sent once, when the shard closed its logs cleanly; ``dropped``
    lists [topic, partition] rows to remove from the checkpoints.
    """

    shard: str
    final: bool
    rows: list[list[object]]
    dropped: list[list[object]]
