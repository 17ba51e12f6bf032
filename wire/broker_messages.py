"""Messages between the broker's actors (type ids 200-299).

Record data always travels as whole batches (``bytes``), never as single
records. Per-partition rows inside a message are ``NamedTuple`` rows declared
just above the message that carries them, field by field; on the wire a row
is an array like the message itself, and the registry checks and rebuilds it
on arrival (wire/registry.py).
"""

from __future__ import annotations

from typing import NamedTuple

from wire.file_region import FileRegion, RegionAt
from wire.registry import message


class TopicPartition(NamedTuple):
    """One partition, by name: a row of DropPartitions, CheckpointOffsets.dropped and
    OffsetFetch, and the purgatory's watch key (equal to, and hashing like, a plain
    ``(topic, partition)`` tuple)."""

    topic: str
    partition: int


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
    # who sent it (authorizer.class.name = acl): the connection's principal (TLS
    # certificate subject or SASL user) and the client's address
    principal: str = "User:ANONYMOUS"
    client_host: str = ""


@message(203)
class KafkaResponse(NamedTuple):
    """RequestHandler -> Processor: the response frame of request ``seq``.

    ``respond`` False (acks=0 produce) advances the sequence without writing;
    ``close`` closes the connection once everything before it was written.
    ``stages_ns`` = [request queue, local, remote] durations, for metrics.
    ``regions`` (Fetch) are file regions sent from their files into ``frame``
    at their ``at`` offsets, in order; ``frame``'s size prefix counts them.
    Their descriptors belong to the message: the Processor closes each once
    sent, or when the connection goes.
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
    regions: list[RegionAt] = []  # shared default, never mutated


# ---------------------------------------------------------- partition shards


class AppendRow(NamedTuple):
    """One partition of an Append: its batches, appended as they are."""

    topic: str
    partition: int
    records: bytes


@message(210)
class Append(NamedTuple):
    """Handler -> PartitionShard: append each row's batches as leader."""

    req_id: int
    acks: int
    timeout_ms: int
    rows: list[AppendRow]
    # a coordinator's append (transactional offset commits): the producer's epoch is
    # checked, not its sequence
    coordinator: bool = False
    # The generation of the shard's process as the sender knew it when it sent this
    # (num.processes > 1: +1 each time the supervisor restarts that process). A sender
    # that gives its Appends up when it learns of a restart (a RequestHandler, at
    # ProcessStarted) stamps it; the shard refuses (NOT_LEADER_OR_FOLLOWER, nothing
    # written) one stamped older than its own process, so a given-up Append a link
    # delivers late to the new process is never written. -1: not fenced (the
    # coordinators: a write of theirs given up after its timeout, REQUEST_TIMED_OUT,
    # may still land, as a timed-out write may in Kafka; the link delivers it before
    # their later writes).
    generation: int = -1


class AppendDoneRow(NamedTuple):
    """One partition's answer to an Append (also a settled delayed produce's)."""

    topic: str
    partition: int
    error_code: int
    base_offset: int  # -1 on error
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    error_message: str | None
    # (record index, why) per refused record: Produce v8+'s record_errors
    record_errors: tuple[tuple[int, str], ...] = ()


@message(211)
class AppendDone(NamedTuple):
    """PartitionShard -> Handler: one row per row of the Append, in its order."""

    req_id: int
    rows: list[AppendDoneRow]


class ReadRow(NamedTuple):
    """One partition of a Read."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    # the leader epoch the client knows (Fetch v9+); -1: none, not checked. Older than the
    # shard's: FENCED_LEADER_EPOCH; newer: UNKNOWN_LEADER_EPOCH (KIP-320)
    current_leader_epoch: int = -1


LOG_END_READER = -2  # Kafka's DEBUGGING_CONSUMER_ID: a Read to the log end, no follower's


@message(212)
class Read(NamedTuple):
    """Handler -> PartitionShard.

    ``replica_id`` -1 (a consumer) reads to the high watermark; a follower's
    id reads to the log end and counts as that follower's fetch;
    ``LOG_END_READER`` reads to the log end and counts as nobody's fetch (a
    coordinator loading the partition it now leads).
    ``regions`` True: a partition's data comes back as a file region of the
    segment (ReadDoneRow.region) for the Processor to send without reading it,
    save small amounts, which come as bytes; False: as bytes (readers in
    another process, replica fetches carried in messages).
    """

    req_id: int
    replica_id: int
    max_bytes: int
    rows: list[ReadRow]
    regions: bool = False
    # 1 (read_committed): a consumer reads up to the last stable offset, and the
    # rows carry the aborted transactions of the range
    isolation_level: int = 0


class AbortedTxnRow(NamedTuple):
    """An aborted transaction a read_committed Fetch answers (Kafka's AbortedTransaction)."""

    producer_id: int
    first_offset: int


class ReadDoneRow(NamedTuple):
    """One partition's answer to a Read.

    ``fetch_segment_base`` and ``fetch_relative_position`` locate the fetch
    offset in the log, so a waiting fetch can count the bytes that arrive
    after it without reading them. With ``region`` set (a Read asking for
    regions) the whole batches are there, in the file, and ``records`` is
    empty; the region's descriptor belongs to the message.
    """

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes  # whole batches; empty when there is nothing (or an error)
    fetch_segment_base: int
    fetch_relative_position: int
    log_end_offset: int
    region: FileRegion | None = None
    last_stable_offset: int = -1  # -1: the high watermark (no transaction open)
    aborted: list[AbortedTxnRow] | None = None  # read_committed reads only

    @property
    def size(self) -> int:
        """Bytes of records, wherever they are."""
        return self.region.length if self.region is not None else len(self.records)


@message(213)
class ReadDone(NamedTuple):
    """PartitionShard -> Handler."""

    req_id: int
    rows: list[ReadDoneRow]


class ListOffsetsRow(NamedTuple):
    """One partition of a ListOffsets."""

    topic: str
    partition: int
    timestamp: int  # -1 latest, -2 earliest, -3 max timestamp, else a time in ms
    current_leader_epoch: int = -1  # ListOffsets v4+; -1: not checked (as ReadRow's)


@message(214)
class ListOffsets(NamedTuple):
    req_id: int
    isolation_level: int
    rows: list[ListOffsetsRow]


class ListOffsetsDoneRow(NamedTuple):
    """One partition's answer to a ListOffsets (-1 where there is none)."""

    topic: str
    partition: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int


@message(215)
class ListOffsetsDone(NamedTuple):
    req_id: int
    rows: list[ListOffsetsDoneRow]


class OpenPartitionRow(NamedTuple):
    """One partition to host, with its topic's config overrides."""

    topic: str
    partition: int
    configs: dict[str, str]
    # the topic's id (base64url, Kafka's Uuid text; "": not known), written in the
    # partition's directory: a directory holding another is a deleted namesake's
    topic_id: str = ""


@message(216)
class OpenPartitions(NamedTuple):
    """Controller -> PartitionShard: host these partitions (create or load their logs)."""

    req_id: int
    rows: list[OpenPartitionRow]


@message(217)
class DropPartitions(NamedTuple):
    """Controller -> PartitionShard: delete these partitions' logs."""

    req_id: int
    rows: list[TopicPartition]


@message(510)
class TopicsDeleted(NamedTuple):
    """Controller -> GroupCoordinator: these topics are deleted; their committed offsets go
    from every group (Kafka's onPartitionsDeleted)."""

    topics: list[str]


@message(590)
class TopicDeletions(NamedTuple):
    """ReplicaManager -> its node's GroupCoordinators (a cluster), from UpdateMetadata:
    topic name -> topic id ("" if none) of topics whose deletion the controller has
    ``started`` (their partitions come with LEADER_DURING_DELETE) or ``completed`` (znodes
    gone). At a completion a coordinator takes every offset of the topic from its groups
    (a start alone takes nothing; a resent completion is applied once)."""

    started: dict[str, str]
    completed: dict[str, str]


@message(218)
class ShardDone(NamedTuple):
    """PartitionShard -> whoever sent it OpenPartitions, DropPartitions or
    UpdatePartitionConfigs (the Controller, the ReplicaManager): done. ``failed``: the
    partitions it could not open, delete or reconfigure (the others were); ``error``:
    the last failure's text, for the log ("" when none failed)."""

    req_id: int
    error: str
    failed: list[TopicPartition]


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


class SegmentPosition(NamedTuple):
    """Where an offset sits in the log: Kafka's LogOffsetMetadata without the offset."""

    segment_base_offset: int
    relative_position: int  # byte position inside that segment's .log file


class PartitionStatus(NamedTuple):
    """The latest state of one partition, as its PartitionShard reports it.

    A partition the node no longer hosts has ``is_leader`` False and -1 offsets.
    """

    topic: str
    partition: int
    high_watermark: int
    log_end_offset: int
    is_leader: bool
    leader_epoch: int
    isr_size: int
    min_insync_replicas: int
    high_watermark_position: SegmentPosition
    log_end_position: SegmentPosition
    # The leader epoch at which this node's unbroken leadership began: a controller's
    # ISR change gives the same leader the next epoch and does not end it (-1: unknown,
    # take ``leader_epoch``)
    leader_since_epoch: int = -1

    @property
    def key(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class FollowerAck(NamedTuple):
    """A follower's fetch that moved the high watermark (for trace records)."""

    replica_id: int
    fetch_offset: int  # the follower's log end offset: it acknowledges what is below


@message(220)
class PartitionChanged(NamedTuple):
    """PartitionShard -> PurgatoryShard: the latest state of a watched partition.

    ``ack``: the follower fetch whose acknowledgement moved the high watermark to
    this status (None for any other change); the purgatory names it in the trace
    record of a delayed produce it completes."""

    status: PartitionStatus
    ack: FollowerAck | None = None


# ----------------------------------------------------------------- purgatory


class WatchFetchRow(NamedTuple):
    """One partition of a waiting fetch: where its read ended, and how much it may take."""

    topic: str
    partition: int
    fetch_offset: int
    segment_base_offset: int
    relative_position: int
    max_bytes: int


@message(230)
class WatchFetch(NamedTuple):
    """Handler -> PurgatoryShard: wake me (FetchReady) once the fetch can complete."""

    req_id: int
    min_bytes: int
    max_wait_ms: int
    from_follower: bool
    rows: list[WatchFetchRow]


@message(231)
class FetchReady(NamedTuple):
    """PurgatoryShard -> Handler: read again and answer (reason for the trace)."""

    req_id: int
    reason: str
    timed_out: bool


class WatchProduceRow(NamedTuple):
    """One partition of an acks=-1 append after the local write.

    A row that does not wait (settled at append) has ``required_offset`` -1,
    ``leader_epoch`` None and its error code.
    """

    topic: str
    partition: int
    required_offset: int  # last appended offset + 1: the high watermark it waits for
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    leader_epoch: int | None  # at append time; another epoch means the leader moved
    error_code: int


@message(232)
class WatchProduce(NamedTuple):
    """PartitionShard -> PurgatoryShard: an acks=-1 append waits for the ISR."""

    req_id: int
    handler: str
    timeout_ms: int
    rows: list[WatchProduceRow]
    # the handler's node when it is not the shard's (num.processes > 1); "": the same
    handler_node: str = ""


@message(233)
class ProduceReady(NamedTuple):
    """PurgatoryShard -> Handler: the rows of a delayed produce, settled."""

    req_id: int
    rows: list[AppendDoneRow]


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


class ReplicaAssignmentRow(NamedTuple):
    """One partition of a manual replica assignment: its brokers, the preferred leader first."""

    partition: int
    broker_ids: list[int]


class CreateTopicRow(NamedTuple):
    """One topic to create; -1 partitions or replication factor: the broker's default."""

    name: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str | None]
    # The client's manual assignment (CreateTopics' ``assignments``), as it listed it (a
    # partition named twice is the controller's to refuse); None: the controller places
    # the replicas. With one, the counts must both be -1.
    assignments: list[ReplicaAssignmentRow] | None = None
    # A coordinator's creation of its own internal topic: not held to the rules on a
    # client's (the partition count it is configured with, name collisions)
    internal: bool = False


@message(250)
class CreateTopics(NamedTuple):
    """Handler -> Controller. ``validate_only`` checks without creating."""

    req_id: int
    validate_only: bool
    rows: list[CreateTopicRow]
    # The client's timeout_ms: the topics not fully created by then are answered
    # REQUEST_TIMED_OUT (created all the same). None (the broker's own requests) and
    # <= 0: answered once complete, every handler told (see the Controller).
    timeout_ms: int | None = None


class CreateTopicDoneRow(NamedTuple):
    """One topic's answer to a CreateTopics (-1 counts on error)."""

    name: str
    error_code: int
    error_message: str | None
    num_partitions: int
    replication_factor: int
    # the created topic's id (CreateTopics v7 answers it); "": none (an error, validate_only)
    topic_id: str = ""


@message(251)
class CreateTopicsDone(NamedTuple):
    req_id: int
    rows: list[CreateTopicDoneRow]


class DeleteTopicRow(NamedTuple):
    name: str
    # DeleteTopics v6 named the topic by this id (resolved to ``name`` by the handler): the
    # controller deletes ``name`` only while it still has this id, else UNKNOWN_TOPIC_ID
    # (the topic was deleted, maybe made again, since). "": by name, whatever its id.
    topic_id: str = ""


@message(252)
class DeleteTopics(NamedTuple):
    req_id: int
    rows: list[DeleteTopicRow]
    timeout_ms: int | None = None  # as CreateTopics.timeout_ms


class DeleteTopicDoneRow(NamedTuple):
    name: str
    error_code: int
    error_message: str | None
    topic_id: str = ""  # the deleted topic's id, when it had one ("": none, or not found)


@message(253)
class DeleteTopicsDone(NamedTuple):
    req_id: int
    rows: list[DeleteTopicDoneRow]


class TopicEntry(NamedTuple):
    """One topic of the table the handlers and shards know."""

    num_partitions: int
    configs: dict[str, str]
    topic_id: str = ""  # base64url, Kafka's Uuid text ("": not known)


@message(254)
class MetadataUpdate(NamedTuple):
    """Controller -> every handler: the full topic table, by topic name."""

    version: int
    topics: dict[str, TopicEntry]
    # non-zero asks the handler to answer MetadataApplied(ack_id), so a topic change is
    # answered once every handler (of every process of the broker) knows it
    ack_id: int = 0


@message(298)
class MetadataApplied(NamedTuple):
    """Handler -> Controller: the MetadataUpdate carrying ``ack_id`` is applied."""

    ack_id: int


@message(255)
class GetStats(NamedTuple):
    """Ask any broker actor for its counters (tests, metrics endpoint)."""


@message(952)
class GetGroupGauges(NamedTuple):
    """Metrics endpoint -> GroupCoordinator: how many groups it holds and their committed
    offsets, without GetStats' per-group states (members, assignments). The committed
    offsets, which the lag metric needs, still walk every group's offsets: a scrape's
    cost still grows with the groups and their committed partitions, by less."""


@message(256)
class Flush(NamedTuple):
    """Ask a PartitionShard to write checkpoints (and fsync) now."""


class CheckpointRow(NamedTuple):
    """One partition's offsets for Kafka's three checkpoint files."""

    topic: str
    partition: int
    high_watermark: int
    recovery_point: int
    log_start_offset: int


@message(257)
class CheckpointOffsets(NamedTuple):
    """PartitionShard -> LogManager: offsets to checkpoint.

    ``final`` is sent once, when the shard closed its logs cleanly; ``dropped``
    lists the partitions to remove from the checkpoints.
    """

    shard: str
    final: bool
    rows: list[CheckpointRow]
    dropped: list[TopicPartition]


# ---------------------------------------------- DescribeProducers (Kafka API 61)


class ProducerStateRow(NamedTuple):
    """One active producer of a partition, as Kafka's DescribeProducers ProducerState
    (KIP-664): -1 where the partition's state does not know a value."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class DescribeProducersDoneRow(NamedTuple):
    """One partition's answer: an error, or its active producers."""

    topic: str
    partition: int
    error_code: int
    producers: list[ProducerStateRow]


@message(260)
class DescribeProducers(NamedTuple):
    """Handler -> PartitionShard: the active producers of each partition it holds."""

    req_id: int
    rows: list[TopicPartition]


@message(261)
class DescribeProducersDone(NamedTuple):
    req_id: int
    rows: list[DescribeProducersDoneRow]
