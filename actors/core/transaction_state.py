"""The transaction coordinator's state machine: a pure core (no I/O, no clock).

One :class:`TransactionCoordinatorCore` holds the transactional ids of the
``__transaction_state`` partitions its actor leads. Requests come in as
method calls with ``now_ms``; the core answers with effects the shell
performs:

* ``WriteLog``: persist one record to ``__transaction_state``; the shell calls
  :meth:`on_log_written` with the outcome. Every transition is persisted
  before it takes effect: while the write is in flight the id has a
  ``pending`` state and other requests for it get CONCURRENT_TRANSACTIONS.
* ``WriteMarkers``: write commit/abort control batches to every partition of
  the transaction; the shell retries until all are written, then calls
  :meth:`on_markers_written`.
* ``Reply``: the answer to one request (an error code, and for
  InitProducerId the producer id and epoch).

Transitions follow Kafka's TransactionState table (``VALID_PREVIOUS``); an
illegal one raises :class:`IllegalTransitionError` and changes nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from actors.core.transaction_log import (
    TxnLogValue,
    TxnStatus,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from wire.errors import ErrorCode

S = TxnStatus
# the states a tick moves on when no write is in flight (retry_stuck)
_STUCK_STATES = frozenset((S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE))
MAX_EPOCH = 32767 - 1  # an epoch of Short.MaxValue - 1 forces a new producer id (Kafka)
NO_PRODUCER_ID = -1
NO_EPOCH = -1

VALID_PREVIOUS: dict[TxnStatus, frozenset[TxnStatus]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


# How a failed append to __transaction_state is answered (Kafka's TransactionStateManager):
# a retriable "not now" for a short ISR or a timeout, "ask elsewhere" when this node does
# not lead the partition (or its log failed), and a server error for a record too large.
_LOG_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def coordinator_error(log_error: ErrorCode) -> ErrorCode:
    """The error a transactional request gets when its __transaction_state write failed
    with ``log_error``; anything unexpected is retriable (COORDINATOR_NOT_AVAILABLE)."""
    return _LOG_ERRORS.get(log_error, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class IllegalTransitionError(Exception):
    """A transition Kafka's table does not allow; the metadata is left as it was."""


# --- effects ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    request_id: Any
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class WriteLog:
    write_id: int
    partition: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class WriteMarkers:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


Effect = Reply | WriteLog | WriteMarkers


# --- metadata ---------------------------------------------------------------


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata, minus its lock)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnStatus
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnStatus | None = None

    def value(self, state: TxnStatus, partitions: Iterable[tuple[str, int]], epoch: int,
              start_ms: int, now_ms: int, producer_id: int | None = None) -> TxnLogValue:
        return TxnLogValue(self.producer_id if producer_id is None else producer_id, epoch,
                           self.timeout_ms, state, tuple(sorted(partitions)), now_ms, start_ms)


@dataclass(frozen=True, slots=True)
class _Write:
    """A transition waiting for its log write, and what to do when it lands."""

    transactional_id: str
    target: TxnLogValue
    request_id: Any  # None: nobody waits for this write
    then: str  # "reply", "reply-init", "markers", "complete", "fence-abort"
    commit: bool = False


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 15 * 60 * 1000  # transaction.max.timeout.ms


class TransactionCoordinatorCore:
    """The transactional ids of the led ``__transaction_state`` partitions."""

    def __init__(self, config: CoordinatorConfig,
                 next_producer_id: Callable[[], int]) -> None:
        self.config = config
        self.next_producer_id = next_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self.coordinator_epochs: dict[int, int] = {}  # led partition -> leader epoch
        self._writes: dict[int, _Write] = {}
        self._next_write = 1
        # ids whose markers are all written but whose CompleteX write failed retriably
        # (Kafka's txnLogAppendRetryQueue): retry_completions writes them again
        self.completing: set[str] = set()
        # CompleteX writes failed as COORDINATOR_NOT_AVAILABLE (a timeout among them): a
        # success answered late for one is still taken while its id waits for it
        self._late_completions: dict[int, _Write] = {}
        self.skipped_records = 0
        # The tick's scans look only at ids that can be due, not at every id held (with
        # actor.threads = single they run in a worker loop shared with the handlers and
        # shards): a heap of (start_ms + timeout_ms, seq, id), one entry pushed as an id's
        # transaction begins (Ongoing), live while ``_deadline_seq[id]`` is its seq (a
        # reload or a re-push leaves the old one stale); and the ids that went into a
        # PrepareX state (stale ones are dropped as met).
        self._deadlines: list[tuple[int, int, str]] = []
        self._deadline_seq: dict[str, int] = {}
        self._seq = 0
        self._held: list[tuple[int, int, str]] = []  # looked at by a sweep under way
        self.prepared: set[str] = set()
        self.expiry_visits = 0  # entries the scans looked at (GetStats: their work)
        self.expiry_more = False  # abort_timed_out stopped at its limit with ids due

    # --- ownership ------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def load_partition(self, partition: int, coordinator_epoch: int,
                       records: Iterable[tuple[bytes, bytes | None]], now_ms: int,
                       fresh: bool = True) -> list[Effect]:
        """Rebuild the ids of ``partition`` from its records (in log order); transactions
        caught in PrepareCommit/PrepareAbort get their markers written again. ``fresh``
        False: more ids of a partition whose load began with an earlier call (a slice of
        its records, each id in one slice only), whose ids' retries are kept."""
        self.coordinator_epochs[partition] = coordinator_epoch
        if fresh:
            self.completing -= {t for t in self.completing
                                if self.partition_for(t) == partition}
            self._forget_late_completions(lambda t: self.partition_for(t) == partition)
        latest: dict[str, TxnLogValue | None] = {}
        for key, value in records:
            try:
                txn_id = decode_key(key)
                latest[txn_id] = None if value is None else decode_value(value)
            except Exception:
                self.skipped_records += 1
        effects: list[Effect] = []
        for txn_id, val in latest.items():
            if self.partition_for(txn_id) != partition:
                continue
            if val is None:
                self.txns.pop(txn_id, None)
                continue
            meta = TxnMetadata(txn_id, val.producer_id, NO_PRODUCER_ID, val.producer_epoch,
                               NO_EPOCH, val.timeout_ms, val.status, set(val.partitions),
                               val.start_ms, val.last_update_ms)
            self.txns[txn_id] = meta
            self._track(meta, True)
            if val.status in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                effects.append(self._markers(meta, val.status == S.PREPARE_COMMIT))
        return effects

    def unload_partitions(self, partitions: set[int]) -> list[Effect]:
        """This node no longer leads them: forget their ids and writes in flight."""
        for p in partitions:
            self.coordinator_epochs.pop(p, None)
        for txn_id in [t for t in self.txns if self.partition_for(t) in partitions]:
            del self.txns[txn_id]
            self.completing.discard(txn_id)
            self.prepared.discard(txn_id)
            self._deadline_seq.pop(txn_id, None)
        self._forget_late_completions(lambda t: self.partition_for(t) in partitions)
        effects: list[Effect] = []
        for write_id, write in list(self._writes.items()):
            if self.partition_for(write.transactional_id) in partitions:
                del self._writes[write_id]
                if write.request_id is not None:
                    effects.append(Reply(write.request_id, ErrorCode.NOT_COORDINATOR))
        return effects

    def leads(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self.coordinator_epochs

    # --- transitions ----------------------------------------------------

    def _write(self, meta: TxnMetadata, target: TxnLogValue, request_id: Any, then: str,
               commit: bool = False) -> WriteLog:
        if meta.state not in VALID_PREVIOUS[target.status]:
            raise IllegalTransitionError(
                f"{meta.transactional_id}: {meta.state.kafka_name} -> "
                f"{target.status.kafka_name} is not a legal transition")
        if meta.pending is not None:
            raise IllegalTransitionError(
                f"{meta.transactional_id}: a transition to {meta.pending.kafka_name} is "
                f"already in flight")
        meta.pending = target.status
        if self._late_completions and target.status not in (S.COMPLETE_COMMIT,
                                                             S.COMPLETE_ABORT):
            # the id moves on (a new transaction, a fence): a late success of an earlier
            # completion must not complete what comes next at the same producer epoch
            self._forget_late_completions(meta.transactional_id.__eq__)
        write_id = self._next_write
        self._next_write += 1
        self._writes[write_id] = _Write(meta.transactional_id, target, request_id, then, commit)
        return WriteLog(write_id, self.partition_for(meta.transactional_id),
                        encode_key(meta.transactional_id), encode_value(target))

    def awaits_late(self, write_id: int) -> bool:
        """Whether a late success for ``write_id`` (failed already) would still count."""
        return write_id in self._late_completions

    def _forget_late_completions(self, which: Callable[[str], bool]) -> None:
        for write_id in [w for w, write in self._late_completions.items()
                         if which(write.transactional_id)]:
            del self._late_completions[write_id]

    def on_log_written(self, write_id: int, error: ErrorCode, now_ms: int) -> list[Effect]:
        write = self._writes.pop(write_id, None)
        if write is None:
            late = self._late_completions.pop(write_id, None)
            if late is not None and error == ErrorCode.NONE:
                self._late_completion(late)
            return []  # unloaded meanwhile, or failed already
        meta = self.txns.get(write.transactional_id)
        if meta is None:
            return []
        meta.pending = None
        if error != ErrorCode.NONE:
            code = coordinator_error(error)
            if write.then == "complete":
                # markers are written: the completion must land. COORDINATOR_NOT_AVAILABLE
                # (the log's ISR below transaction.state.log.min.isr, a timeout) is
                # retried by retry_completions; otherwise this node no longer leads the
                # partition and the next coordinator completes it from PrepareX.
                if code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                    self.completing.add(write.transactional_id)
                    self._late_completions[write_id] = write
                return []
            if write.request_id is None:
                return []
            if meta.state == S.EMPTY and meta.producer_epoch == NO_EPOCH:
                del self.txns[write.transactional_id]  # never persisted
            return [Reply(write.request_id, code)]
        if write.then == "complete":
            self.completing.discard(write.transactional_id)
            self._forget_late_completions(write.transactional_id.__eq__)
        self._apply(meta, write.target)
        effects: list[Effect] = []
        if write.then == "reply-init":
            effects.append(Reply(write.request_id, ErrorCode.NONE, meta.producer_id,
                                 meta.producer_epoch))
        elif write.then == "reply":
            effects.append(Reply(write.request_id, ErrorCode.NONE))
        elif write.then == "markers":
            if write.request_id is not None:
                effects.append(Reply(write.request_id, ErrorCode.NONE))
            effects.append(self._markers(meta, write.commit))
        elif write.then == "fence-abort":
            effects.extend(self._prepare_abort_fenced(meta, now_ms))
        return effects

    def _track(self, meta: TxnMetadata, began: bool) -> None:
        """Note an id the tick's scans may have to look at: a transaction that ``began``
        (its timeout counts from start_ms), or one in a PrepareX state."""
        if meta.state == S.ONGOING:
            if began:
                self._push_deadline(meta.start_ms + meta.timeout_ms, meta.transactional_id)
        elif meta.state in _STUCK_STATES:
            self.prepared.add(meta.transactional_id)

    def _push_deadline(self, deadline_ms: int, txn_id: str) -> None:
        self._seq += 1
        self._deadline_seq[txn_id] = self._seq
        heapq.heappush(self._deadlines, (deadline_ms, self._seq, txn_id))
        if len(self._deadlines) > 2 * len(self._deadline_seq) + 1024:
            # mostly stale entries (transactions ended before their deadline): kept
            # lean, at a cost amortized over the pushes that made them
            self._deadlines = [e for e in self._deadlines
                               if self._deadline_seq.get(e[2]) == e[1]]
            heapq.heapify(self._deadlines)

    def _apply(self, meta: TxnMetadata, target: TxnLogValue) -> None:
        """What a transition's successful write makes of the id in memory."""
        began = target.status == S.ONGOING and (
            meta.state != S.ONGOING or meta.start_ms != target.start_ms)
        if target.producer_id != meta.producer_id:
            meta.last_producer_id = meta.producer_id
        if target.producer_epoch != meta.producer_epoch:
            meta.last_producer_epoch = meta.producer_epoch
        meta.producer_id = target.producer_id
        meta.producer_epoch = target.producer_epoch
        meta.state = target.status
        meta.partitions = set(target.partitions)
        meta.start_ms = target.start_ms
        meta.last_update_ms = target.last_update_ms
        self._track(meta, began)

    def _late_completion(self, write: _Write) -> None:
        """A CompleteX write answered as failed (timed out) was written after all: if its
        id still waits in the PrepareX it completes, take it, as the answer in time would
        have been. A retry of it in flight (``pending``) is left to land: it writes the
        same value, and keeps new transitions out until it is answered."""
        meta = self.txns.get(write.transactional_id)
        target = write.target
        if (meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
                or target.status != (S.COMPLETE_COMMIT if meta.state == S.PREPARE_COMMIT
                                     else S.COMPLETE_ABORT)
                or (target.producer_id, target.producer_epoch, target.start_ms)
                != (meta.producer_id, meta.producer_epoch, meta.start_ms)):
            return  # (a producer keeps its epoch over transactions: start_ms tells them apart)
        self.completing.discard(write.transactional_id)
        self._forget_late_completions(write.transactional_id.__eq__)
        self._apply(meta, target)

    def _markers(self, meta: TxnMetadata, commit: bool) -> WriteMarkers:
        return WriteMarkers(meta.transactional_id, meta.producer_id, meta.producer_epoch, commit,
                            self.coordinator_epochs.get(self.partition_for(meta.transactional_id),
                                                        0),
                            tuple(sorted(meta.partitions)))

    def on_markers_written(self, transactional_id: str, producer_epoch: int,
                           now_ms: int) -> list[Effect]:
        """Every marker is in: PrepareX -> CompleteX (and the partitions are forgotten)."""
        meta = self.txns.get(transactional_id)
        if (meta is None or meta.pending is not None or meta.producer_epoch != producer_epoch
                or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT)):
            return []
        done = S.COMPLETE_COMMIT if meta.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return [self._write(meta, meta.value(done, (), meta.producer_epoch, meta.start_ms,
                                             now_ms), None, "complete")]

    # --- InitProducerId -------------------------------------------------

    def init_producer_id(self, request_id: Any, transactional_id: str, timeout_ms: int,
                         expected_pid: int, expected_epoch: int, now_ms: int) -> list[Effect]:
        if not self.leads(transactional_id):
            return [Reply(request_id, ErrorCode.NOT_COORDINATOR)]
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return [Reply(request_id, ErrorCode.INVALID_TRANSACTION_TIMEOUT)]
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, self.next_producer_id(), NO_PRODUCER_ID,
                               NO_EPOCH, NO_EPOCH, timeout_ms, S.EMPTY)
            self.txns[transactional_id] = meta
        if meta.pending is not None or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                                       S.PREPARE_EPOCH_FENCE, S.DEAD):
            return [Reply(request_id, ErrorCode.CONCURRENT_TRANSACTIONS)]
        if expected_pid != NO_PRODUCER_ID:
            # KIP-360: the producer names its current id and epoch; a retry of a bump that
            # already happened is answered with the bumped epoch.
            if (expected_pid == meta.last_producer_id or expected_pid == meta.producer_id) and (
                    expected_epoch == meta.last_producer_epoch and meta.state == S.EMPTY
                    and meta.last_producer_epoch != NO_EPOCH):
                return [Reply(request_id, ErrorCode.NONE, meta.producer_id,
                              meta.producer_epoch)]
            if expected_pid != meta.producer_id or expected_epoch != meta.producer_epoch:
                return [Reply(request_id, ErrorCode.PRODUCER_FENCED)]
        if meta.state == S.ONGOING:
            # A new instance of this id: fence the old one (bump the epoch), abort its
            # transaction; the client retries on CONCURRENT_TRANSACTIONS.
            return self._fence(meta, request_id, now_ms)
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if epoch > MAX_EPOCH:
            pid, epoch = self.next_producer_id(), 0
        meta.timeout_ms = timeout_ms
        target = meta.value(S.EMPTY, (), epoch, -1, now_ms, producer_id=pid)
        return [self._write(meta, target, request_id, "reply-init")]

    def _fence(self, meta: TxnMetadata, request_id: Any, now_ms: int) -> list[Effect]:
        """PrepareEpochFence (epoch + 1), then PrepareAbort and the abort markers."""
        epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
        target = meta.value(S.PREPARE_EPOCH_FENCE, meta.partitions, epoch, meta.start_ms, now_ms)
        write = self._write(meta, target, None, "fence-abort")
        if request_id is None:
            return [write]
        # The init request is answered at once (retriable); the abort goes on behind it.
        return [Reply(request_id, ErrorCode.CONCURRENT_TRANSACTIONS), write]

    def _prepare_abort_fenced(self, meta: TxnMetadata, now_ms: int) -> list[Effect]:
        target = meta.value(S.PREPARE_ABORT, meta.partitions, meta.producer_epoch, meta.start_ms,
                            now_ms)
        return [self._write(meta, target, None, "markers", commit=False)]

    # --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------

    def _check_producer(self, transactional_id: str, producer_id: int,
                        producer_epoch: int) -> tuple[TxnMetadata | None, ErrorCode]:
        if not self.leads(transactional_id):
            return None, ErrorCode.NOT_COORDINATOR
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < meta.producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        if producer_epoch != meta.producer_epoch:
            return None, ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.pending is not None or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                                       S.PREPARE_EPOCH_FENCE):
            return None, ErrorCode.CONCURRENT_TRANSACTIONS
        return meta, ErrorCode.NONE

    def add_partitions(self, request_id: Any, transactional_id: str, producer_id: int,
                       producer_epoch: int, partitions: Iterable[tuple[str, int]],
                       now_ms: int) -> list[Effect]:
        meta, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            return [Reply(request_id, error)]
        if meta.state == S.DEAD:
            return [Reply(request_id, ErrorCode.INVALID_TXN_STATE)]
        wanted = set(partitions)
        if meta.state == S.ONGOING and wanted <= meta.partitions:
            return [Reply(request_id, ErrorCode.NONE)]
        start_ms = meta.start_ms if meta.state == S.ONGOING else now_ms
        target = meta.value(S.ONGOING, meta.partitions | wanted
                            if meta.state == S.ONGOING else wanted,
                            meta.producer_epoch, start_ms, now_ms)
        return [self._write(meta, target, request_id, "reply")]

    # --- EndTxn -----------------------------------------------------------

    def end_txn(self, request_id: Any, transactional_id: str, producer_id: int,
                producer_epoch: int, commit: bool, now_ms: int) -> list[Effect]:
        meta, error = self._check_producer(transactional_id, producer_id, producer_epoch)
        if meta is None:
            if error == ErrorCode.CONCURRENT_TRANSACTIONS:
                stored = self.txns[transactional_id]
                if stored.pending is None and stored.state == (
                        S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                    return [Reply(request_id, ErrorCode.CONCURRENT_TRANSACTIONS)]
                if stored.pending is None and stored.state in (S.PREPARE_COMMIT,
                                                               S.PREPARE_ABORT):
                    return [Reply(request_id, ErrorCode.INVALID_TXN_STATE)]
            return [Reply(request_id, error)]
        if meta.state == S.ONGOING:
            status = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            target = meta.value(status, meta.partitions, meta.producer_epoch, meta.start_ms,
                                now_ms)
            return [self._write(meta, target, request_id, "markers", commit=commit)]
        if meta.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return [Reply(request_id, ErrorCode.NONE)]  # a retry of a finished EndTxn
        return [Reply(request_id, ErrorCode.INVALID_TXN_STATE)]

    # --- timeouts ---------------------------------------------------------

    def abort_timed_out(self, now_ms: int, skip: set[int] | None = None,
                        limit: int | None = None) -> list[Effect]:
        """Ongoing transactions past their timeout: fence the producer and abort. The
        ids of the partitions in ``skip`` (partly restored) are left alone, as Kafka
        looks only at loaded partitions. Only the ids whose deadline has passed are
        looked at (the heap), at most ``limit`` a call: ``expiry_more`` then says the
        sweep goes on at the next call. One left alone (a write in flight, a partition
        in ``skip``) or fenced (its write may fail and leave it Ongoing) is held aside
        until the sweep ends, then goes back in the heap: the next sweep looks at it
        again, as Kafka's scan of every id would."""
        effects: list[Effect] = []
        heap, seqs, held = self._deadlines, self._deadline_seq, self._held
        looked = 0
        self.expiry_more = False
        while heap and heap[0][0] < now_ms:
            if limit is not None and looked >= limit:
                self.expiry_more = True
                break
            entry = heapq.heappop(heap)
            looked += 1  # a stale entry too: they count against the limit
            deadline, seq, txn_id = entry
            if seqs.get(txn_id) != seq:
                continue  # stale: pushed again, or unloaded
            meta = self.txns.get(txn_id)
            if (meta is None or meta.state != S.ONGOING
                    or meta.start_ms + meta.timeout_ms != deadline):
                del seqs[txn_id]  # its transaction ended (a new one pushes anew)
                continue
            held.append(entry)
            if meta.pending is None and not (
                    skip and self.partition_for(txn_id) in skip):
                effects.extend(self._fence(meta, None, now_ms))
        if not self.expiry_more:
            for entry in held:
                if seqs.get(entry[2]) == entry[1]:
                    heapq.heappush(heap, entry)
            held.clear()
        self.expiry_visits += looked
        return effects

    def retry_stuck(self, now_ms: int, skip: set[int] | None = None) -> list[Effect]:
        """Prepared transactions with no write in flight: their markers (again); those
        whose markers are written and whose completion is being retried are left to
        :meth:`retry_completions`. A fenced one (PrepareEpochFence) whose PrepareAbort
        write failed (refused, or timed out with its answer lost) has it written again:
        nothing else moves it on (requests get CONCURRENT_TRANSACTIONS, the timeout
        check looks at Ongoing ones), and one loaded in that state is the same case. The
        ids of the partitions in ``skip`` are left alone."""
        effects: list[Effect] = []
        for txn_id in sorted(self.prepared):
            self.expiry_visits += 1
            meta = self.txns.get(txn_id)
            if meta is None or meta.state not in _STUCK_STATES:
                self.prepared.discard(txn_id)  # completed, or gone
                continue
            if meta.pending is not None:
                continue
            if skip and self.partition_for(meta.transactional_id) in skip:
                continue
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                if meta.transactional_id not in self.completing:
                    effects.append(self._markers(meta, meta.state == S.PREPARE_COMMIT))
            elif meta.state == S.PREPARE_EPOCH_FENCE:
                effects.extend(self._prepare_abort_fenced(meta, now_ms))
        return effects

    def retry_completions(self, now_ms: int) -> list[Effect]:
        """The CompleteCommit/CompleteAbort writes that failed retriably, written again."""
        effects: list[Effect] = []
        for txn_id in sorted(self.completing):
            meta = self.txns.get(txn_id)
            if meta is None or meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self.completing.discard(txn_id)
                self._forget_late_completions(txn_id.__eq__)
            elif meta.pending is None:
                effects.extend(self.on_markers_written(txn_id, meta.producer_epoch, now_ms))
        return effects

    # --- reads ------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        meta = self.txns.get(transactional_id)
        return None if meta is None else replace(meta, partitions=set(meta.partitions))

    def list_transactions(self, states: set[str], producer_ids: set[int], now_ms: int = 0,
                          min_duration_ms: int = -1) -> list[TxnMetadata]:
        """ListTransactions' filters; ``min_duration_ms`` >= 0 keeps only transactions
        started at least that long ago (Kafka's DurationFilter)."""
        return [m for m in self.txns.values()
                if (not states or m.state.kafka_name in states)
                and (not producer_ids or m.producer_id in producer_ids)
                and (min_duration_ms < 0
                     or (m.start_ms >= 0 and now_ms - m.start_ms >= min_duration_ms))]
