"""Messages of the transaction protocol between actors (type ids 700-799).

Handlers send the transactional requests to the TransactionCoordinator that
owns the transactional id's ``__transaction_state`` partition and get one
answer with the same ``req_id``. Coordinators write commit/abort markers
through the PartitionShards (WriteTxnMarkers, also between nodes) and tell
the GroupCoordinators when a transaction's offsets are decided. Error codes
are ``wire.errors.ErrorCode`` values as plain ints.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.group_messages import OffsetCommitRow
from wire.registry import message

# ---------------------------------------------------------------- markers


class TxnMarkerRow(NamedTuple):
    """One marker to append: the end of ``producer_id``'s transaction in one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@message(700)
class WriteTxnMarkers(NamedTuple):
    """TransactionCoordinator -> PartitionShard (of the partition's leader)."""

    req_id: int
    rows: list[TxnMarkerRow]


class TxnMarkerDoneRow(NamedTuple):
    topic: str
    partition: int
    error_code: int


@message(701)
class WriteTxnMarkersDone(NamedTuple):
    req_id: int
    rows: list[TxnMarkerDoneRow]


class TxnPartitionRow(NamedTuple):
    partition: int
    leader_epoch: int


@message(702)
class TxnCoordinatorPartitions(NamedTuple):
    """ReplicaManager -> every TransactionCoordinator: ``__transaction_state`` partitions this
    node now leads (load them) and those it no longer leads (unload them)."""

    elected: list[TxnPartitionRow]
    resigned: list[int]
    # the partitions __transaction_state has (transactional ids map over them); 0: unknown
    partition_count: int = 0


# --------------------------------------------------------------- requests


@message(703)
class InitTxnProducer(NamedTuple):
    """Handler -> coordinator: InitProducerId with a transactional id.

    ``producer_id``/``producer_epoch`` are -1 unless the client asks for an epoch
    bump of the producer it has (KIP-360, InitProducerId v3+).
    """

    req_id: int
    transactional_id: str
    timeout_ms: int
    producer_id: int
    producer_epoch: int


@message(704)
class InitTxnProducerDone(NamedTuple):
    req_id: int
    error_code: int
    producer_id: int
    producer_epoch: int


class TxnTopicPartition(NamedTuple):
    topic: str
    partition: int


@message(705)
class AddPartitionsToTxn(NamedTuple):
    """Handler -> coordinator: AddPartitionsToTxn, and AddOffsetsToTxn as the group's
    ``__consumer_offsets`` partition."""

    req_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[TxnTopicPartition]


@message(706)
class TxnDone(NamedTuple):
    """Coordinator -> handler: the answer to AddPartitionsToTxn or EndTxn."""

    req_id: int
    error_code: int


@message(714)
class AddPartitionsRefused(NamedTuple):
    """Coordinator -> handler: AddPartitionsToTxn refused for ``partitions`` (their code
    ``error_code``); nothing was added, the request's other partitions were not tried
    (Kafka answers them OPERATION_NOT_ATTEMPTED)."""

    req_id: int
    error_code: int
    partitions: list[TxnTopicPartition]


@message(707)
class EndTxn(NamedTuple):
    req_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@message(708)
class DescribeTxns(NamedTuple):
    req_id: int
    transactional_ids: list[str]


class TxnStateRow(NamedTuple):
    """DescribeTransactions' TransactionState (error NOT_COORDINATOR / TRANSACTIONAL_ID_NOT_FOUND
    when not described here)."""

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: list[TxnTopicPartition]


@message(709)
class DescribeTxnsDone(NamedTuple):
    req_id: int
    rows: list[TxnStateRow]


@message(710)
class ListTxns(NamedTuple):
    """``states`` and ``producer_ids`` empty: no filter."""

    req_id: int
    states: list[str]
    producer_ids: list[int]
    min_duration_ms: int = -1  # v1: only transactions open at least this long (-1: any)


class TxnListRow(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


@message(711)
class ListTxnsDone(NamedTuple):
    """``error_code`` COORDINATOR_LOAD_IN_PROGRESS (and no rows) while a partition the
    coordinator leads is loading: the list would miss its transactions."""

    req_id: int
    error_code: int
    rows: list[TxnListRow]


# ----------------------------------------------------------------- groups


@message(712)
class TxnOffsetCommit(NamedTuple):
    """Handler -> GroupCoordinator: offsets written in a transaction, visible at its commit.

    ``generation_id`` -1 and an empty ``member_id`` skip the member check (TxnOffsetCommit
    before v3, without KIP-447's group metadata). Answered with an OffsetCommitDone.
    """

    req_id: int
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    rows: list[OffsetCommitRow]


@message(713)
class CompleteTxnOffsets(NamedTuple):
    """PartitionShard leading ``partition`` of ``__consumer_offsets`` -> every GroupCoordinator
    of its node: the marker is written, so the producer's pending offsets there are
    committed (or dropped)."""

    producer_id: int
    partition: int
    commit: bool
