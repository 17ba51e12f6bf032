"""Messages of the replication data plane (type ids 500-599).

A follower node's ReplicaFetcher sends ReplicaFetch to a RequestHandler of
the leader's node (over the gateways); the handler reads the leader's
partitions through their PartitionShards (ReplicaRead), waits in the
purgatory like a consumer's fetch when there is too little, and answers
ReplicaFetchResponse. Record batches travel as opaque bytes, exactly as the
leader's log holds them. On the follower the fetcher hands each partition's
answer to the partition's shard (FollowerApply), the only writer of its log.

Leaders propose ISR changes to their node's ReplicaManager (ProposeIsr),
which sends the controller a KIP-497 AlterPartition and hands the outcome
back (IsrUpdated). The ReplicaManager tells the fetchers which partitions to
follow (AddFetcherPartitions, RemoveFetcherPartitions).

Rows are NamedTuples declared next to the message that carries them.
``diverging_epoch`` -1 with ``diverging_end_offset`` -1 means "no divergence"
(Kafka's FetchResponse DivergingEpoch left unset).
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message

NO_EPOCH = -1

# ------------------------------------------------------ follower -> leader


class ReplicaFetchRow(NamedTuple):
    """One partition of a replica fetch (Kafka's FetchRequest partition, v12 fields)."""

    topic: str
    partition: int
    fetch_offset: int           # the follower's log end offset: it acknowledges what is below
    current_leader_epoch: int   # the epoch the follower follows; another one is refused
    last_fetched_epoch: int     # epoch of the follower's last batch (-1: empty log)
    partition_max_bytes: int
    log_start_offset: int = -1  # the follower's own log start (Kafka's fetch field)


@message(500)
class ReplicaFetch(NamedTuple):
    """ReplicaFetcher -> a RequestHandler of the leader's node."""

    req_id: int
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    rows: list[ReplicaFetchRow]


class ReplicaFetchPartition(NamedTuple):
    """One partition's answer; ``records`` holds whole batches as the leader's log has them."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: int
    diverging_end_offset: int
    records: bytes


@message(501)
class ReplicaFetchResponse(NamedTuple):
    """RequestHandler of the leader's node -> ReplicaFetcher."""

    req_id: int
    rows: list[ReplicaFetchPartition]


# ------------------------------------------------- leader node, inside


class ReplicaReadRow(NamedTuple):
    """One partition of a ReplicaRead, as in the replica fetch."""

    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    partition_max_bytes: int
    log_start_offset: int = -1  # the follower's


@message(502)
class ReplicaRead(NamedTuple):
    """Handler -> PartitionShard: a follower's fetch (read to the log end, count its offset)."""

    req_id: int
    replica_id: int
    max_bytes: int
    rows: list[ReplicaReadRow]


class ReplicaReadDoneRow(NamedTuple):
    """One partition's answer to a ReplicaRead; the segment position of the fetch offset
    lets a waiting fetch count the bytes that arrive after it."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: int
    diverging_end_offset: int
    records: bytes
    fetch_segment_base: int
    fetch_relative_position: int


@message(503)
class ReplicaReadDone(NamedTuple):
    req_id: int
    rows: list[ReplicaReadDoneRow]


# ---------------------------------------------------- follower node, inside


class FollowerApplyRow(NamedTuple):
    """What the fetcher learned for one partition, for its shard to apply.

    ``leader_epoch``: the epoch the fetcher follows (the shard refuses another).
    ``reset_offset`` >= 0: the leader said OFFSET_OUT_OF_RANGE; the shard resets
    as Kafka does (``leader_log_end_offset`` tells which way). ``records`` are
    appended as the follower's (offsets and epochs kept) after any truncation.
    """

    topic: str
    partition: int
    leader_epoch: int
    records: bytes
    leader_high_watermark: int
    leader_log_start_offset: int
    leader_log_end_offset: int
    diverging_epoch: int
    diverging_end_offset: int
    reset_offset: int


@message(504)
class FollowerApply(NamedTuple):
    """ReplicaFetcher -> PartitionShard; rows without records only ask for the state."""

    req_id: int
    rows: list[FollowerApplyRow]


class FollowerStateRow(NamedTuple):
    """A follower partition after an apply: where the next fetch starts."""

    topic: str
    partition: int
    error_code: int
    log_end_offset: int
    last_fetched_epoch: int
    high_watermark: int
    truncated: bool  # the log was cut (by divergence or a reset)
    log_start_offset: int = -1


@message(505)
class FollowerApplied(NamedTuple):
    req_id: int
    rows: list[FollowerStateRow]


class FetcherPartitionRow(NamedTuple):
    """A partition to fetch from ``leader`` (its node's gateway is known) at ``leader_epoch``."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int


@message(506)
class AddFetcherPartitions(NamedTuple):
    """ReplicaManager -> ReplicaFetcher: fetch these (replacing their earlier leader/epoch).

    ``leader_handlers``: how many RequestHandlers the leader's node runs now, as the
    controller last said (0: unknown); the fetcher sends to one of those.
    """

    rows: list[FetcherPartitionRow]
    leader_handlers: int = 0


class FetcherRemoveRow(NamedTuple):
    topic: str
    partition: int


@message(507)
class RemoveFetcherPartitions(NamedTuple):
    """ReplicaManager -> ReplicaFetcher: stop fetching these."""

    rows: list[FetcherRemoveRow]


# ------------------------------------------------------- ISR changes


class IsrProposalRow(NamedTuple):
    """A leader's wanted ISR at its leader epoch and partition epoch (znode version)."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int


@message(508)
class ProposeIsr(NamedTuple):
    """PartitionShard -> its node's ReplicaManager: send these to the controller."""

    rows: list[IsrProposalRow]


class IsrUpdateRow(NamedTuple):
    """The controller's answer for one proposal (or the reason it got none).

    ``proposed_*`` name the proposal answered, so a shard never applies the
    answer to an older proposal to a newer one.
    """

    topic: str
    partition: int
    proposed_leader_epoch: int
    proposed_partition_epoch: int
    error_code: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int


@message(509)
class IsrUpdated(NamedTuple):
    """ReplicaManager -> PartitionShard: the outcome of its proposals."""

    rows: list[IsrUpdateRow]


# ------------------------------------------- OffsetForLeaderEpoch (Kafka API 23)


class OffsetForEpochRow(NamedTuple):
    """One partition of an OffsetForLeaderEpoch: the epoch to find the end of, and the
    leader epoch the client knows (-1: not checked)."""

    topic: str
    partition: int
    current_leader_epoch: int
    leader_epoch: int


@message(540)
class OffsetForLeaderEpoch(NamedTuple):
    """Handler -> PartitionShard: the end offset of each row's ``leader_epoch`` on the
    leader (KIP-279/320: a consumer checks after a leader change that its position is
    still in the log)."""

    req_id: int
    rows: list[OffsetForEpochRow]


class OffsetForEpochDoneRow(NamedTuple):
    """One partition's answer: the largest epoch not above the one asked and where it
    ends, or (-1, -1) when the log knows no such epoch."""

    topic: str
    partition: int
    error_code: int
    leader_epoch: int
    end_offset: int


@message(541)
class OffsetForLeaderEpochDone(NamedTuple):
    req_id: int
    rows: list[OffsetForEpochDoneRow]
