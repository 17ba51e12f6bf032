"""TransactionCoordinator: the actor shell around :class:`TransactionCoordinatorCore`.

A node runs ``num.group.coordinators`` of them; coordinator ``i`` owns the
``__transaction_state`` partitions ``p`` with ``p % count == i`` (of those this
node leads, in a cluster), and with them every transactional id whose
``partitionFor`` is such a ``p``. Handlers send it the transactional requests
(wire/transaction_messages.py) and get one answer each.

The core returns effects; this shell performs them:

* ``WriteLog``: one record appended (acks=-1) to its ``__transaction_state``
  partition on the local shard; the AppendDone (or the purgatory's
  ProduceReady) completes it. With that partition's ISR below its
  ``min.insync.replicas`` (``transaction.state.log.min.isr``) the append is refused
  NOT_ENOUGH_REPLICAS: a request waiting for it is answered COORDINATOR_NOT_AVAILABLE
  (the client retries), and a CompleteCommit/CompleteAbort is written again every
  RETRY_MS until it lands, as Kafka's retry queue of log appends does.
* ``WriteMarkers``: commit/abort control batches to every partition of the
  transaction, through the shards of the partitions' leaders (other nodes'
  shards in a cluster), written with acks=-1 (a marker the ISR does not hold
  yet is answered by that node's purgatory, ProduceReady; a partition whose ISR is below
  ``min.insync.replicas`` refuses it, NOT_ENOUGH_REPLICAS); partitions that fail are
  sent again every RETRY_MS until all are written (logged once per job, partition and
  error, and once more when the job is done, not at every retry). A request
  unanswered after MARKER_TIMEOUT_MS (its node died, or the leader named by stale
  metadata is gone and the message became a dead letter) counts as failed and is
  sent again, to the leader of that moment. The leader that writes a marker on
  ``__consumer_offsets`` tells its node's GroupCoordinators the fate of the
  producer's offsets.
* ``Reply``: the answer to the handler that asked.

Start-up: a single node creates ``__transaction_state`` on the first request
(or at start if it exists: prepared transactions must be finished and open
ones may time out), reads its partitions to their log end and loads them
(as Kafka does: a new leader's high watermark can lag the writes its ISR
acknowledged, and loading only to it would lose them); until then requests
are answered COORDINATOR_LOAD_IN_PROGRESS (a Read unanswered after READ_TIMEOUT_MS
is sent again, its late answer still taken, the timeout doubled). In a cluster, the ReplicaManager's
TxnCoordinatorPartitions say which partitions to load and unload. A Timer tick every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` aborts the
transactions past their timeout and finishes those whose completion write
failed, and those fenced (PrepareEpochFence) whose PrepareAbort write failed.

With ``actor.threads = single`` the coordinators run in the worker loop of process 0
(the broker places them), beside the handlers and shards every transaction request
goes through, so what they do in one handler call holds up every request of that
process. A load's Read is answered with at most LOAD_READ_MAX_BYTES over all its
partitions plus one batch (about 50 ms of decoding a MB; actors/coordinator_reads.py
puts the partitions an answer left out first in the next Read), and the end of a load
restores LOAD_SLICE_IDS ids at most once a poll of the loop, not in the rounds over
local messages between two polls (``phase`` "restoring"; 16-40 us an id were measured
here, so 2000 take 30-80 ms), requests for a partition refused
COORDINATOR_LOAD_IN_PROGRESS until all its ids are back. A resign, a new epoch or a
changed partition count mid-restore drops what was restored of those partitions (a
partition still led is loaded anew, whole). The Timer tick's ``abort_timed_out`` and
``retry_stuck`` leave a partly restored partition's ids alone, and look only at ids
that can be due, not at every id held (that scan took about 1-1.6 us an id here:
100,000 ids held the loop 0.1-0.16 s a tick): the core keeps the deadlines of the
Ongoing transactions in a heap and the ids in a PrepareX state in a set, and a tick
looks at most at TICK_SLICE_IDS due entries a poll, the rest at the next polls.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from actors.coordinator_reads import REFUSALS, REFUSED_RETRY_MS, LoadReading
from actors.core.cluster_model import NO_LEADER
from actors.core.inflight_appends import ID_BAND, InFlightAppends, LoadReads, id_start
from actors.core.metadata_cache import MetadataCache
from actors.core.record_batch import build_batch
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.core.transaction_state import (
    CoordinatorConfig,
    Effect,
    Reply,
    TransactionCoordinatorCore,
    WriteLog,
    WriteMarkers,
)
from actors.group_coordinator import (
    ANSWER_BUCKET_MS,
    ANSWER_MARGIN_MS,
    OFFSETS_TOPIC,
    READ_TIMEOUT_MAX_MS,
    decode_batches,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import Topology, peer_shard_for
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    CreateTopicRow,
    CreateTopicsDone,
    Expired,
    GetStats,
    ProduceReady,
    ReadDone,
    Schedule,
)
from wire.cluster_messages import CoordinatorRestarted, UpdateMetadata
from wire.errors import ErrorCode
from wire.transaction_messages import (
    AddPartitionsRefused,
    AddPartitionsToTxn,
    DescribeTxns,
    DescribeTxnsDone,
    EndTxn,
    InitTxnProducer,
    InitTxnProducerDone,
    ListTxns,
    ListTxnsDone,
    TxnCoordinatorPartitions,
    TxnDone,
    TxnListRow,
    TxnMarkerDoneRow,
    TxnMarkerRow,
    TxnStateRow,
    TxnTopicPartition,
    WriteTxnMarkers,
    WriteTxnMarkersDone,
)

NONE = int(ErrorCode.NONE)
TOPIC_EXISTS = int(ErrorCode.TOPIC_ALREADY_EXISTS)
OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)
LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
TRANSACTION_STATE_CONFIGS = {
    # Kafka compacts this topic; actorlog's logs only delete, so nothing may age out.
    "retention.ms": "-1",
    "segment.bytes": str(100 * 1024 * 1024),  # transaction.state.log.segment.bytes
    "compression.type": "uncompressed",  # as Kafka's: the coordinator reads it plain
}
# ids restored in one poll of the loop at a load's end (16-40 us each on this machine)
LOAD_SLICE_IDS = 2000
# deadline entries (stale ones too) a tick's abort sweep looks at in one poll of the
# loop; more go on at the next
TICK_SLICE_IDS = 2000
READ_TIMEOUT_MS = 5000  # a load's Read unanswered by then is overdue: read again
APPEND_TIMEOUT_MS = 5000
RETRY_MS = 500
MARKER_TIMEOUT_MS = 5000  # a WriteTxnMarkers with no answer by then is sent again
PRODUCER_ID_SPACE = 1 << 62  # coordinator-made ids never meet the handlers' ones


def txn_coordinator_name(i: int) -> str:
    return f"txn-coordinator-{i}"


def txn_coordinator_for(topology: Topology, num_partitions: int, transactional_id: str
                        ) -> Address:
    """The coordinator actor (of this broker) owning ``transactional_id``'s partition, of
    ``num_partitions`` (those ``__transaction_state`` has: ``internal_partition_count``)."""
    from actors.core.transaction_log import partition_for

    p = partition_for(transactional_id, num_partitions)
    return Address(topology.home or topology.node,
                   txn_coordinator_name(p % topology.num_coordinators))


def all_txn_coordinators(topology: Topology) -> list[Address]:
    """Every coordinator of this broker: in process 0 with num.processes > 1 (the handlers
    of processes 1.. named their own node, where none runs)."""
    return [Address(topology.home or topology.node, txn_coordinator_name(i))
            for i in range(topology.num_coordinators)]


class _MarkerJob:
    __slots__ = ("failed", "fx", "in_flight", "offsets_wait_until", "remaining", "retries",
                 "retry_at_ms")

    def __init__(self, fx: WriteMarkers) -> None:
        self.fx = fx
        self.remaining = set(fx.partitions)
        self.in_flight: set[int] = set()
        self.retry_at_ms = 0
        self.failed: set[tuple[str, int, int]] = set()  # (topic, partition, error) logged
        self.retries = 0
        # when its __consumer_offsets markers stop waiting for that topic's metadata
        # (0: not waiting); see TransactionCoordinator._gone
        self.offsets_wait_until = 0


class TransactionCoordinator(LoadReading, Actor):
    LOG_TOPIC = TRANSACTION_STATE_TOPIC  # named in the load-read log lines
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 index: int, clock: Clock | None = None, cluster: bool = False,
                 topic_exists: bool = False, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.config = config
        self.index = index
        if clock is not None:
            self.clock = clock
        self.cluster = cluster
        self.topic_exists = topic_exists
        self._id_floor = 0  # survives restarts in place: see id_start

    # ------------------------------------------------------------ lifecycle
    def setup(self) -> None:
        self.num_partitions = int(self.config["transaction.state.log.num.partitions"])
        self.count = self.topology.num_coordinators
        self.pid_base = PRODUCER_ID_SPACE + (self.clock.wall_ms() << 20)
        self.pid_counter = itertools.count(1)
        self.core = TransactionCoordinatorCore(
            CoordinatorConfig(self.num_partitions, int(self.config["transaction.max.timeout.ms"])),
            self._new_producer_id)
        self.wall_offset_ms = self.clock.wall_ms() - self.clock.now_ms()
        # fresh after a restart: answers meant for the crashed instance match nothing
        start = id_start(self.clock.monotonic_ns(), self._id_floor)
        self._id_floor = start + ID_BAND
        self.req_ids = itertools.count(start)
        self.timer_ids = itertools.count(start)
        self.timer_id = 0
        self.tick_ms = int(self.config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        # Append req_id -> (write id, partition), until answered or timed out
        self.writes: InFlightAppends[tuple[int, int]] = InFlightAppends(
            APPEND_TIMEOUT_MS + ANSWER_MARGIN_MS, ANSWER_BUCKET_MS)
        # Append req_id -> write id, for the writes given up on whose late success the
        # core would still take (a CompleteX its id still waits for)
        self.timed_out: dict[int, int] = {}
        # __transaction_state partition -> (error, failed appends) since its last success
        self.log_failures: dict[int, tuple[int, int]] = {}
        self.complete_retry_at_ms = 0  # when to write failed completions again (0: none)
        # _next_due_ms's cache: the earliest deadline, as of messages_handled = due_seen
        self.due_seen = -1
        self.due_ms: int | None = None
        self.marker_jobs: dict[str, _MarkerJob] = {}
        # WriteTxnMarkers req_id -> (transactional id, partitions, answer deadline)
        self.marker_reqs: dict[int, tuple[str, list[tuple[str, int]], int]] = {}
        self.phase = "idle"  # -> creating -> loading -> ready (single node)
        self.retry_at_ms = 0
        self.create_due_ms = 0
        self.creates_lost = 0
        self.create_req_id: int | None = None
        self.create_answers_stale = 0
        self.led: dict[int, int] = {}  # partition -> leader epoch (cluster: led here)
        self.loaded: set[int] = set()
        self.to_load: set[int] = set()
        self.read_offsets: dict[int, int] = {}
        self.reads = LoadReads(READ_TIMEOUT_MS, READ_TIMEOUT_MAX_MS)
        self.records: dict[int, dict[bytes, bytes | None]] = {}
        # phase "restoring": (partition, leader epoch, its records) still to restore, the
        # last first; how far into the last one, the ids restored so far, and the
        # partitions read by this load
        self.restore: list[tuple[int, int, list[tuple[bytes, bytes | None]]]] = []
        self.restore_at = 0
        self.restore_count = 0
        self.restore_loaded: list[int] = []
        self.restore_slices = 0  # slices restored since the start, one a poll (GetStats)
        self.restore_poll = -1  # the loop's poll count at the last slice
        self.expiry_poll = -1  # the same for the tick's abort sweep (core.expiry_more)
        self.expiry_slices = 0  # abort_timed_out calls since the start (GetStats)
        self.expiry_slice_most = 0  # the most entries one of them looked at (GetStats)
        self.metadata = MetadataCache() if self.cluster else None
        self.refused_loading = 0
        # cluster: whether the ReplicaManager has said how many partitions the topic has
        self.count_known = not self.cluster
        if self.cluster:
            self.phase = "cluster"
            if self.crashes:  # restarted: what it led, and the metadata, died with the crash
                self.tell(self.topology.replica_manager, CoordinatorRestarted(True))
        elif self.topic_exists:
            self._create_topic()
        self._schedule_tick()

    def now_ms(self) -> int:
        return self.clock.now_ms() + self.wall_offset_ms

    def _new_producer_id(self) -> int:
        return self.pid_base + next(self.pid_counter) * self.count + self.index

    def _owned(self, partition: int) -> bool:
        return partition % self.count == self.index

    # ---------------------------------------------------------- single node
    def _create_topic(self) -> None:
        self._ask_create(CreateTopicRow(TRANSACTION_STATE_TOPIC, self.num_partitions, 1,
                                        dict(TRANSACTION_STATE_CONFIGS), internal=True))

    @handles(CreateTopicsDone)
    def on_topic_created(self, msg: CreateTopicsDone) -> None:
        if not self._answers_create(msg):
            return
        row = msg.rows[0]
        if row.error_code not in (NONE, TOPIC_EXISTS):
            self._create_failed(row, REFUSED_RETRY_MS if row.error_code in REFUSALS
                                else RETRY_MS)
            return
        self.create_error_logged = None
        self._use_partition_count(row.num_partitions)
        for p in range(self.num_partitions):
            if self._owned(p):
                self.led[p] = 0
        self.to_load = set(self.led)
        self.phase = "ready"
        self._maybe_load()

    def _use_partition_count(self, count: int) -> None:
        """Map the transactional ids over the partitions ``__transaction_state`` has
        (Kafka's partitionFor), not a changed ``transaction.state.log.num.partitions``:
        otherwise an id would look for its state on another partition.

        In a cluster a count of 0 is unknown (the ReplicaManager's metadata lacks the
        topic): nothing is loaded or served until a count arrives, as an InitProducerId
        served from the wrong partition hands out a new producer id without fencing the
        id's real state."""
        if count <= 0:
            if self.cluster and self.count_known:
                self.count_known = False
                self._forget_loads()
            return
        self.count_known = True
        if count == self.num_partitions:
            return
        configured = int(self.config["transaction.state.log.num.partitions"])
        if count != configured and self.index == 0:
            self.log.warning("{} has {} partitions, transaction.state.log.num.partitions is "
                             "{}: transactional ids are mapped over the {} it has",
                             TRANSACTION_STATE_TOPIC, count, configured, count)
        if self.cluster:
            self._forget_loads()
        self.num_partitions = count
        self.core.config = dataclasses.replace(self.core.config, num_partitions=count)

    def _forget_loads(self) -> None:
        """Cluster: the ids loaded, or being loaded, under a count the topic no longer has
        are unloaded (writes in flight answered NOT_COORDINATOR) and loaded again once
        the count is known: their lookups went to other partitions. A partly restored
        partition is among them (its ids, completion retries and marker jobs would map
        to other partitions under the new count)."""
        held = self.loaded | set(self.core.coordinator_epochs)
        held.update(p for p, _epoch, _items in self.restore)
        if held:
            self._perform(self.core.unload_partitions(held))
            self.marker_jobs.clear()
            self.log.info("unloaded {}-{}: its partition count changed or is unknown",
                          TRANSACTION_STATE_TOPIC, sorted(held))
            self.loaded = set()
        if self.phase in ("loading", "read-retry", "restoring"):  # late answers match nothing
            self.reads.reset()
            self.read_offsets = {}
            self.records = {}
            self.phase = self.resume_phase
        self.restore = []
        self.restore_at = 0
        self.to_load = set(self.led)

    def _next_due_ms(self) -> int | None:
        """The earliest deadline anything waits on (None: none), cached: every deadline
        is set or moved by a handled message or by on_turn's own work, so it is computed
        again only after one of those (the scans over the marker jobs and requests are
        O(transactions in flight)); asked at every turn of the worker loop it may share
        with the shards, handlers and Processors, which mostly bring it nothing. A pykka
        call is not counted: none sets a deadline here (a call that does must reset
        ``due_seen``)."""
        if self.messages_handled == self.due_seen:
            return self.due_ms
        self.due_seen = self.messages_handled
        waits = [job.retry_at_ms for job in self.marker_jobs.values()
                 if job.remaining and not job.in_flight]
        waits.extend(deadline for _t, _p, deadline in self.marker_reqs.values())
        if self.phase in ("create-retry", "read-retry"):
            waits.append(self.retry_at_ms)
        elif self.phase == "creating":
            waits.append(self.create_due_ms)
        if self.complete_retry_at_ms:
            waits.append(self.complete_retry_at_ms)
        expiry = self.writes.next_expiry_ms()
        if expiry is not None:
            waits.append(expiry)
        due = self.reads.next_due_ms() if self.phase == "loading" else None
        if due is not None:
            waits.append(due)
        self.due_ms = min(waits) if waits else None
        return self.due_ms

    def poll_timeout_ms(self) -> int | None:
        if self.phase == "restoring" or self.core.expiry_more:
            return 0  # the next slice, at the next poll
        due = self._next_due_ms()
        if due is None:
            # only a handled message sets a deadline: the loop skips this actor till then
            self.quiet_turns()
            return None
        return max(0, due - self.clock.now_ms())

    def on_turn(self) -> None:
        if self.phase == "restoring" and self.restore_poll != self._owner.loop_polls:
            # one slice a poll of the loop: not again in its rounds over local messages
            self.restore_poll = self._owner.loop_polls
            self._restore_slice()
            # a slice may set deadlines (a Prepare* id's markers, a write for markers
            # done at once, the load's end): computed again, once a slice, not a turn
            self.due_seen = -1
        if self.core.expiry_more and self.expiry_poll != self._owner.loop_polls:
            self._abort_timed_out()  # the tick's sweep goes on, a slice a poll
            self.due_seen = -1
        # the restore's slices are kept apart from the deadlines: the scans below (over
        # every transaction in flight) run only when one of those has passed
        due = self._next_due_ms()
        if due is None:
            # neither a restore's next slice nor the sweep's next part waits on a deadline
            if self.phase != "restoring" and not self.core.expiry_more:
                self.quiet_turns()  # as poll_timeout_ms
            return
        if self.clock.now_ms() < due:
            return  # every step below waits on one of the deadlines of _next_due_ms
        self.due_seen = -1  # what follows sets deadlines: computed again at the next ask
        now = self.clock.now_ms()
        expiry = self.writes.next_expiry_ms()
        if expiry is not None and now >= expiry:
            self._expire_writes(now)
        if self.phase == "loading" and self.reads.waiting():
            self._expire_reads(now)
        self._create_overdue(now)
        if self.phase == "create-retry" and now >= self.retry_at_ms:
            self._create_topic()
        elif self.phase == "read-retry" and now >= self.retry_at_ms:
            self.phase = "loading"
            self.read_offsets = {p: o for p, o in self.read_offsets.items() if p in self.led}
            self._send_reads()
        self._expire_marker_requests(now)
        if self.complete_retry_at_ms and now >= self.complete_retry_at_ms:
            self.complete_retry_at_ms = 0
            self._perform(self.core.retry_completions(self.now_ms()))
        for txn_id, job in list(self.marker_jobs.items()):
            if job.remaining and not job.in_flight and now >= job.retry_at_ms:
                self._send_markers(txn_id, job)

    # ---------------------------------------------------------- loading
    def _maybe_load(self) -> None:
        if self.phase not in ("ready", "cluster") or not self.to_load or not self.count_known:
            return
        batch, self.to_load = sorted(self.to_load), set()
        self.resume_phase = self.phase
        self.phase = "loading"
        self.reads.reset()
        self.read_offsets = {p: 0 for p in batch}
        self.records = {p: {} for p in batch}
        self.load_started_ms = self.clock.now_ms()
        self._send_reads()

    def _send_reads(self) -> None:
        if not self.read_offsets:
            self._finish_load()
            return
        self._read_all()

    @handles(ReadDone)
    def on_read(self, msg: ReadDone) -> None:
        if self.phase not in ("loading", "read-retry"):
            return
        asked = self.reads.answered(msg.req_id)
        if asked is None:
            return
        rest: list[tuple[int, bool]] = []  # read on: (partition, records came)
        for row in msg.rows:
            p = row.partition
            if p not in self.read_offsets or asked.get(p) != self.read_offsets[p]:
                continue  # unloaded, or an overdue answer for a partition read further since
            if row.error_code == OUT_OF_RANGE and row.log_start_offset > self.read_offsets[p]:
                self.read_offsets[p] = row.log_start_offset
                rest.append((p, True))
                continue
            if row.error_code != NONE:
                self._read_failed(p, row.error_code)
                continue
            self._read_succeeded(p)
            records, next_offset = decode_batches(bytes(row.records))
            latest = self.records.setdefault(p, {})
            for offset, key, value in records:
                if offset >= self.read_offsets[p] and key is not None:
                    latest.pop(key, None)
                    latest[key] = value
            if next_offset is not None:
                self.read_offsets[p] = next_offset
            if self.read_offsets[p] >= row.log_end_offset:
                del self.read_offsets[p]
            else:
                rest.append((p, bool(row.records)))
        self._read_rest(rest)
        self.reads.drop_stale(self.read_offsets)
        if self.reads.waiting():
            return
        if self.read_offsets:
            if self.phase == "loading":
                self.phase = "read-retry"
                self.retry_at_ms = self.clock.now_ms() + RETRY_MS
        else:
            self._finish_load()

    def _finish_load(self) -> None:
        """Every partition read: its ids are restored LOAD_SLICE_IDS at a time, at most
        one slice a poll of the loop (``phase`` "restoring", requests for them still
        refused), by on_turn, so the worker loop it may share serves other requests
        between slices."""
        self.restore = [(p, self.led[p], list(latest.items()))
                        for p, latest in sorted(self.records.items()) if p in self.led]
        self.restore.reverse()  # popped from the end: lowest partition first
        self.restore_at = 0
        self.restore_count = 0
        self.restore_loaded = []
        self.records = {}
        self.phase = "restoring"
        if not self.restore:
            self._restore_slice()  # nothing to restore: the load ends now
        else:  # the first slice waits for the next poll: this one decoded the last answer
            self.restore_poll = self._owner.loop_polls

    def _drop_restore(self, partitions: set[int]) -> None:
        """Resigned, elected again or unloaded: no slice of theirs is restored any more
        (an earlier slice's ids may be gone); one still led is loaded anew, whole."""
        if self.restore and self.restore[-1][0] in partitions:
            self.restore_at = 0
        self.restore = [r for r in self.restore if r[0] not in partitions]

    def _restore_slice(self) -> None:
        """Up to LOAD_SLICE_IDS of the ids being restored; the last slice ends the load."""
        self.restore_slices += 1
        budget = LOAD_SLICE_IDS
        while self.restore:
            p, epoch, items = self.restore[-1]
            # else resigned, or elected again: loaded anew (an earlier slice may be gone)
            if self.led.get(p) == epoch and (
                    not self.restore_at or self.core.coordinator_epochs.get(p) == epoch):
                part = items[self.restore_at:self.restore_at + budget]
                if part or not self.restore_at:  # an empty partition is loaded too
                    self._perform(self.core.load_partition(p, epoch, part, self.now_ms(),
                                                           fresh=not self.restore_at))
                self.restore_at += len(part)
                self.restore_count += len(part)
                budget -= len(part)
                if self.restore_at < len(items):
                    return
                self.loaded.add(p)
                self.restore_loaded.append(p)
            elif p in self.led:
                self.to_load.add(p)
            self.restore.pop()
            self.restore_at = 0
            if budget <= 0 and self.restore:
                return
        self.phase = self.resume_phase
        self.log.info("loaded {} transactional id record(s) of {} partitions {} in {} ms",
                      self.restore_count, TRANSACTION_STATE_TOPIC, self.restore_loaded,
                      self.clock.now_ms() - self.load_started_ms)
        self._maybe_load()

    # ---------------------------------------------------------- cluster
    @handles(TxnCoordinatorPartitions)
    def on_partitions(self, msg: TxnCoordinatorPartitions) -> None:
        self._use_partition_count(msg.partition_count)
        resigned = {p for p in msg.resigned if p in self.led}
        for p in resigned:
            del self.led[p]
            self.to_load.discard(p)
        # a new epoch for a partition held (or being restored): as on a resign, its ids,
        # writes and marker jobs go (Kafka's onElection drops its pending markers), and
        # it is loaded anew
        renewed = {row.partition for row in msg.elected
                   if self._owned(row.partition) and row.partition in self.led
                   and self.led[row.partition] != row.leader_epoch}
        dropped = resigned | (renewed & (self.loaded | set(self.core.coordinator_epochs)))
        self._drop_restore(resigned | renewed)
        if dropped:
            self.loaded -= dropped
            for txn_id in [t for t in self.marker_jobs
                           if self.core.partition_for(t) in dropped]:
                del self.marker_jobs[txn_id]
            self._perform(self.core.unload_partitions(dropped))
            self.log.info("unloaded {}-{}", TRANSACTION_STATE_TOPIC, sorted(dropped))
        for row in msg.elected:
            if not self._owned(row.partition):
                continue
            if self.led.get(row.partition) != row.leader_epoch:
                self.to_load.add(row.partition)
                self.loaded.discard(row.partition)
            self.led[row.partition] = row.leader_epoch
        self._maybe_load()

    @handles(UpdateMetadata)
    def on_metadata(self, msg: UpdateMetadata) -> None:
        if self.metadata is not None:
            self.metadata.apply(msg)

    # ---------------------------------------------------------- requests
    def _serving(self, transactional_id: str) -> int:
        """NONE, or why this coordinator cannot answer for ``transactional_id`` now."""
        p = self.core.partition_for(transactional_id)
        if not self.cluster and self.phase == "idle":
            self._create_topic()
        if not self.count_known:  # no id maps to a partition yet; both retriable
            if not self.led:
                return NOT_COORDINATOR
            self.refused_loading += 1
            return LOAD_IN_PROGRESS
        if self.cluster and p not in self.led:
            return NOT_COORDINATOR
        if p not in self.loaded:
            self.refused_loading += 1
            return LOAD_IN_PROGRESS
        return NONE

    def _rid(self, req_id: int, kind: str) -> tuple[str, str, int, str]:
        sender = self.current_sender
        assert sender is not None
        return (sender.node, sender.name, req_id, kind)

    @handles(InitTxnProducer)
    def on_init(self, msg: InitTxnProducer) -> None:
        code = self._serving(msg.transactional_id)
        if code != NONE:
            self.reply(InitTxnProducerDone(msg.req_id, code, -1, -1))
            return
        self._perform(self.core.init_producer_id(
            self._rid(msg.req_id, "init"), msg.transactional_id, msg.timeout_ms,
            msg.producer_id, msg.producer_epoch, self.now_ms()))

    @handles(AddPartitionsToTxn)
    def on_add(self, msg: AddPartitionsToTxn) -> None:
        code = self._serving(msg.transactional_id)
        if code != NONE:
            self.reply(TxnDone(msg.req_id, code))
            return
        unknown = self._unknown(msg.partitions)
        if unknown:  # Kafka: those say why, the others were not tried
            self.reply(AddPartitionsRefused(msg.req_id, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                            unknown))
            return
        self._perform(self.core.add_partitions(
            self._rid(msg.req_id, "txn"), msg.transactional_id, msg.producer_id,
            msg.producer_epoch, [(tp.topic, tp.partition) for tp in msg.partitions],
            self.now_ms()))

    @handles(EndTxn)
    def on_end(self, msg: EndTxn) -> None:
        code = self._serving(msg.transactional_id)
        if code != NONE:
            self.reply(TxnDone(msg.req_id, code))
            return
        self._perform(self.core.end_txn(
            self._rid(msg.req_id, "txn"), msg.transactional_id, msg.producer_id,
            msg.producer_epoch, msg.commit, self.now_ms()))

    @handles(DescribeTxns)
    def on_describe(self, msg: DescribeTxns) -> None:
        rows = []
        for txn_id in msg.transactional_ids:
            code = self._serving(txn_id)
            meta = self.core.describe(txn_id) if code == NONE else None
            if meta is None or meta.producer_epoch < 0:
                rows.append(TxnStateRow(
                    code if code != NONE else int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND),
                    txn_id, "", 0, -1, -1, -1, []))
                continue
            rows.append(TxnStateRow(NONE, txn_id, meta.state.kafka_name, meta.timeout_ms,
                                    meta.start_ms, meta.producer_id, meta.producer_epoch,
                                    [TxnTopicPartition(t, p) for t, p in sorted(meta.partitions)]))
        self.reply(DescribeTxnsDone(msg.req_id, rows))

    @handles(ListTxns)
    def on_list(self, msg: ListTxns) -> None:
        if self.led and (not self.count_known or not self.loaded.issuperset(self.led)):
            # a partition this node leads not loaded yet (the count not known, or its load
            # under way): the list would miss its transactions (Kafka's
            # listTransactionStates: COORDINATOR_LOAD_IN_PROGRESS while any loads)
            self.refused_loading += 1
            self.reply(ListTxnsDone(msg.req_id, LOAD_IN_PROGRESS, []))
            return
        found = self.core.list_transactions(set(msg.states), set(msg.producer_ids),
                                            self.now_ms(), msg.min_duration_ms)
        self.reply(ListTxnsDone(msg.req_id, NONE, [
            TxnListRow(m.transactional_id, m.producer_id, m.state.kafka_name)
            for m in found if m.producer_epoch >= 0]))

    # ---------------------------------------------------------- effects
    def _perform(self, effects: list[Effect]) -> None:
        for fx in effects:
            if isinstance(fx, Reply):
                node, name, req_id, kind = fx.request_id
                if kind == "init":
                    answer: Any = InitTxnProducerDone(req_id, int(fx.error), fx.producer_id,
                                                      fx.producer_epoch)
                else:
                    answer = TxnDone(req_id, int(fx.error))
                self.tell(Address(node, name), answer)
            elif isinstance(fx, WriteLog):
                self._write_log(fx)
            elif isinstance(fx, WriteMarkers):
                job = _MarkerJob(fx)
                self.marker_jobs[fx.transactional_id] = job
                self._send_markers(fx.transactional_id, job)
            else:
                raise TypeError(f"unknown effect {fx!r}")

    def _write_log(self, fx: WriteLog) -> None:
        rid = next(self.req_ids)
        self.writes.add(rid, (fx.write_id, fx.partition), self.clock.now_ms())
        batch = build_batch([fx.value], keys=[fx.key], timestamps_ms=[self.now_ms()])
        self.tell(self.topology.shard_for(TRANSACTION_STATE_TOPIC, fx.partition),
                  Append(rid, -1, APPEND_TIMEOUT_MS,
                         [AppendRow(TRANSACTION_STATE_TOPIC, fx.partition, batch)]))

    @handles(AppendDone, ProduceReady)
    def on_appended(self, msg: AppendDone | ProduceReady) -> None:
        if isinstance(msg, ProduceReady) and (
                msg.req_id in self.marker_reqs
                or any(r.topic != TRANSACTION_STATE_TOPIC for r in msg.rows)):
            # markers the ISR did not hold at once, settled by the leader's purgatory
            # (on_markers drops one whose request was given up on)
            self.on_markers(WriteTxnMarkersDone(msg.req_id, [
                TxnMarkerDoneRow(r.topic, r.partition, r.error_code) for r in msg.rows]))
            return
        entry = self.writes.pop(msg.req_id)
        if entry is None:
            write_id = self.timed_out.pop(msg.req_id, None)
            if write_id is not None and msg.rows and msg.rows[0].error_code == NONE:
                self._log_written(write_id, NONE)  # a completion written after all
            if self.writes.first_of_burst():
                self.log.warning("an answer to an append to {} (or to markers) came after "
                                 "its timeout (or a restart) and is ignored; late answers so "
                                 "far: {}",
                                 TRANSACTION_STATE_TOPIC, self.writes.late)
            return
        write_id, partition = entry
        rows = msg.rows
        code = rows[0].error_code if rows else int(ErrorCode.UNKNOWN_SERVER_ERROR)
        self._note_log_write(partition, code, rows[0].error_message if rows else "")
        self._log_written(write_id, code)

    def _log_written(self, write_id: int, code: int) -> None:
        self._perform(self.core.on_log_written(write_id, ErrorCode(code), self.now_ms()))
        if self.core.completing and not self.complete_retry_at_ms:
            self.complete_retry_at_ms = self.clock.now_ms() + RETRY_MS

    def _expire_writes(self, now: int) -> None:
        """Appends unanswered too long: the shard crashed handling them, or its process
        died and the restarted one gets them late if at all. Each fails as a timed-out
        write, as Kafka's would; a completion's late success is still taken while its
        id waits for it (``timed_out``)."""
        expired = self.writes.expire(now)
        if not expired:
            return
        if self.writes.first_of_burst():
            self.log.warning("{} append(s) to {} unanswered after {} ms: failed as {}; "
                             "appends given up on so far: {}", len(expired),
                             TRANSACTION_STATE_TOPIC, self.writes.wait_ms,
                             ErrorCode.REQUEST_TIMED_OUT.name, self.writes.expired)
        for _rid, (write_id, _partition) in expired:
            self._log_written(write_id, int(ErrorCode.REQUEST_TIMED_OUT))
        awaits = self.core.awaits_late
        self.timed_out = {rid: w for rid, w in self.timed_out.items() if awaits(w)}
        self.timed_out.update((rid, w) for rid, (w, _p) in expired if awaits(w))

    def _note_log_write(self, partition: int, code: int, message: str | None) -> None:
        """Log a partition's failed appends once per error while they go on (a short ISR
        lasts as long as a replica is away), and the first success after them."""
        before = self.log_failures.get(partition)
        if code == NONE:
            if before is not None:
                del self.log_failures[partition]
                self.log.info("writing to {}-{} works again after {} failed append(s)",
                              TRANSACTION_STATE_TOPIC, partition, before[1])
            return
        if before is None or before[0] != code:
            self.log.warning("writing to {}-{} failed: {}{}; not logged again until a write "
                             "there succeeds", TRANSACTION_STATE_TOPIC, partition,
                             ErrorCode(code).name, f" ({message})" if message else "")
        self.log_failures[partition] = (code, (before[1] if before else 0) + 1)

    def _leader_shard(self, topic: str, partition: int) -> Address | None:
        """The shard of the partition's leader that owns it, named by the shard count the
        leader registered (nodes may run different num.partition.shards); this node's own
        count when it did not say (right while every node runs the same)."""
        if self.metadata is None:
            return self.topology.shard_for(topic, partition)
        leader = self.metadata.leader(topic, partition)
        if leader == NO_LEADER:
            return None
        if leader == int(self.config["node.id"]):
            # this broker: its own shard, in whichever of its processes it lives
            return self.topology.shard_for(topic, partition)
        row = self.metadata.brokers.get(leader)
        shards = row.num_shards if row is not None and row.num_shards > 0 else \
            self.topology.num_shards
        return peer_shard_for(leader, shards, topic, partition)

    def _unknown(self, partitions: list[TxnTopicPartition]) -> list[TxnTopicPartition]:
        """Those of ``partitions`` this cluster coordinator's metadata lacks (not yet
        come: a topic just created, known to the broker the client asked)? Kafka's
        AddPartitionsToTxn refuses those UNKNOWN_TOPIC_OR_PARTITION (the client retries),
        checked against the metadata cache its marker channel reads: a partition taken
        into a transaction is one that metadata has, so it lacks it later only once the
        partition is deleted (``_deleted``). __consumer_offsets (AddOffsetsToTxn) is not
        checked, as Kafka: ``_gone`` judges its markers."""
        if self.metadata is None:
            return []
        return [tp for tp in partitions if tp.topic != OFFSETS_TOPIC
                and self.metadata.partition(tp.topic, tp.partition) is None]

    def _deleted(self, topic: str, partition: int) -> bool:
        """A cluster's partition gone from this node's metadata: deleted, its marker is
        dropped (Kafka's TransactionMarkerChannelManager drops a partition its metadata
        cache no longer has). A shard's UNKNOWN_TOPIC_OR_PARTITION is no proof of that in
        a cluster (a replica that does not hold the partition yet), so it is retried
        while the metadata has the partition. Metadata not yet come says nothing. A
        single node has no metadata here: its shard's answer is the word (it holds every
        partition of the broker). __consumer_offsets is judged by ``_gone``."""
        if self.metadata is None or not self.metadata.updates or topic == OFFSETS_TOPIC:
            return False
        return self.metadata.partition(topic, partition) is None

    def _gone(self, txn_id: str, job: _MarkerJob, topic: str, partition: int) -> bool:
        """Is the marker for ``topic``-``partition`` to be dropped? ``_deleted``'s rule,
        except for __consumer_offsets: AddOffsetsToTxn takes its partition from this
        node's count of its partitions unchecked (as Kafka), before the topic may
        exist (it is made at the first FindCoordinator(GROUP)) and whatever count the
        real topic has. A partition past the real topic's count is dropped. While the
        metadata has no such topic at all its markers wait for it (it is being made) at
        most the transaction's timeout, then are dropped with one warning: waiting on
        would hold the transaction in PrepareCommit/PrepareAbort, and its producer's
        InitProducerId at CONCURRENT_TRANSACTIONS, for ever if the topic never comes.
        Kafka drops them at once (TransactionMarkerChannelManager, 4b75265: a partition
        without a leader in its metadata cache is taken for deleted)."""
        if topic != OFFSETS_TOPIC:
            return self._deleted(topic, partition)
        if self.metadata is None or not self.metadata.updates:
            return False
        if self.metadata.has_topic(OFFSETS_TOPIC):
            return self.metadata.partition(topic, partition) is None
        now = self.clock.now_ms()
        if not job.offsets_wait_until:
            meta = self.core.txns.get(txn_id)
            job.offsets_wait_until = now + (meta.timeout_ms if meta is not None
                                            else MARKER_TIMEOUT_MS)
        if now < job.offsets_wait_until:
            return False
        failure = (OFFSETS_TOPIC, -1, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        if failure not in job.failed:  # once per job
            job.failed.add(failure)
            self.log.warning("markers for {} on {} dropped: that topic is still missing from "
                             "this node's metadata after the transaction's timeout, taken "
                             "for deleted", txn_id, OFFSETS_TOPIC)
        return True

    def _send_markers(self, txn_id: str, job: _MarkerJob) -> None:
        fx = job.fx
        by_shard: dict[Address, list[TxnMarkerRow]] = {}
        for topic, partition in sorted(job.remaining):
            if self._gone(txn_id, job, topic, partition):
                job.remaining.discard((topic, partition))
                continue
            shard = self._leader_shard(topic, partition)
            if shard is None:
                continue  # no leader now: the next retry
            by_shard.setdefault(shard, []).append(TxnMarkerRow(
                topic, partition, fx.producer_id, fx.producer_epoch, fx.commit,
                fx.coordinator_epoch))
        for shard, rows in by_shard.items():
            rid = next(self.req_ids)
            job.in_flight.add(rid)
            self.marker_reqs[rid] = (txn_id, [(r.topic, r.partition) for r in rows],
                                     self.clock.now_ms() + MARKER_TIMEOUT_MS)
            self.tell(shard, WriteTxnMarkers(rid, rows))
        if not job.in_flight:
            job.retry_at_ms = self.clock.now_ms() + RETRY_MS
        if not job.remaining:
            self._markers_done(txn_id, job)

    @handles(WriteTxnMarkersDone)
    def on_markers(self, msg: WriteTxnMarkersDone) -> None:
        entry = self.marker_reqs.pop(msg.req_id, None)
        if entry is None:
            return
        txn_id, _parts, _deadline = entry
        job = self.marker_jobs.get(txn_id)
        if job is None or msg.req_id not in job.in_flight:
            return
        job.in_flight.discard(msg.req_id)
        for row in msg.rows:
            tp = (row.topic, row.partition)
            if row.error_code == NONE or (
                    row.error_code == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    and (self.metadata is None
                         or self._gone(txn_id, job, row.topic, row.partition))):
                # written, or the partition is deleted and needs no marker any more
                # (Kafka's rule too); the leader that wrote a marker on __consumer_offsets
                # told its group coordinators itself
                job.remaining.discard(tp)
                continue
            job.retries += 1
            failure = (row.topic, row.partition, row.error_code)
            if failure not in job.failed:  # once per job, partition and error
                job.failed.add(failure)
                self.log.warning("marker for {} on {}-{} failed: {}; retrying every {} ms "
                                 "until it is written", txn_id, row.topic, row.partition,
                                 ErrorCode(row.error_code).name, RETRY_MS)
        if job.in_flight:
            return
        if job.remaining:
            job.retry_at_ms = self.clock.now_ms() + RETRY_MS
            return
        self._markers_done(txn_id, job)

    def _expire_marker_requests(self, now: int) -> None:
        """Marker requests past their deadline will not be answered (a dead letter to a
        node gone, or a node killed mid-request): without this their job would wait
        forever and the transaction stay in PrepareCommit/PrepareAbort."""
        for rid, (txn_id, parts, deadline) in list(self.marker_reqs.items()):
            if now < deadline:
                continue
            del self.marker_reqs[rid]
            job = self.marker_jobs.get(txn_id)
            if job is None or rid not in job.in_flight:
                continue
            job.in_flight.discard(rid)
            job.retries += 1
            failure = ("", -1, int(ErrorCode.REQUEST_TIMED_OUT))
            if failure not in job.failed:
                job.failed.add(failure)
                self.log.warning("markers for {} on {} unanswered after {} ms; sending again",
                                 txn_id, parts, MARKER_TIMEOUT_MS)
            if not job.in_flight:
                job.retry_at_ms = now

    def _markers_done(self, txn_id: str, job: _MarkerJob) -> None:
        if self.marker_jobs.get(txn_id) is job:
            del self.marker_jobs[txn_id]
        if job.retries:
            self.log.info("markers for {} written after {} failed attempt(s)", txn_id,
                          job.retries)
        self._perform(self.core.on_markers_written(txn_id, job.fx.producer_epoch,
                                                   self.now_ms()))

    # ---------------------------------------------------------- timeouts
    def _schedule_tick(self) -> None:
        self.timer_id = next(self.timer_ids)
        self.tell(self.topology.timer, Schedule(self.timer_id, self.clock.now_ms() + self.tick_ms))

    @handles(Expired)
    def on_expired(self, msg: Expired) -> None:
        if msg.key != self.timer_id:
            return
        now = self.now_ms()
        self._abort_timed_out()
        partial = {p for p in self.core.coordinator_epochs if p not in self.loaded}
        stuck = [fx for fx in self.core.retry_stuck(now, partial)
                 if not isinstance(fx, WriteMarkers)
                 or fx.transactional_id not in self.marker_jobs]
        self._perform(list(stuck))
        self._schedule_tick()

    def _abort_timed_out(self) -> None:
        """Fence and abort the transactions past their timeout, looking at most at
        TICK_SLICE_IDS due entries (only those due are looked at); more go on at the
        next poll (``core.expiry_more``),
        so a tick that finds many does not hold the loop. The ids of a partition being
        restored wait for the rest of it (Kafka's scan sees only loaded partitions)."""
        self.expiry_poll = self._owner.loop_polls
        self.expiry_slices += 1
        partial = {p for p in self.core.coordinator_epochs if p not in self.loaded}
        visits = self.core.expiry_visits
        effects = self.core.abort_timed_out(self.now_ms(), partial, TICK_SLICE_IDS)
        self.expiry_slice_most = max(self.expiry_slice_most,
                                     self.core.expiry_visits - visits)
        self._perform(effects)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "partition_count_known": self.count_known,
            "creates_lost": self.creates_lost,
            "create_answers_stale": self.create_answers_stale,
            "led_partitions": sorted(self.led),
            "loaded_partitions": sorted(self.loaded),
            "transactions": {t: m.state.kafka_name for t, m in self.core.txns.items()},
            "marker_jobs": len(self.marker_jobs),
            "writes_in_flight": len(self.writes),
            "writes_timed_out": self.writes.expired,
            "late_write_answers": self.writes.late,
            "completions_to_retry": len(self.core.completing),
            "refused_loading": self.refused_loading,
            "restore_slices": self.restore_slices,
            "expiry_visits": self.core.expiry_visits,
            "expiry_slices": self.expiry_slices,
            "expiry_slice_most": self.expiry_slice_most,
        }


def spawn_txn_coordinators(node: Any, topology: Topology, config: Config, clock: Any,
                           cluster: bool = False, topic_exists: bool = False,
                           host: str | None = None) -> None:
    """Called by the Broker at start: as many TransactionCoordinators as group coordinators."""
    for i in range(topology.num_coordinators):
        node.spawn(TransactionCoordinator, txn_coordinator_name(i), topology=topology,
                   config=config, index=i, clock=clock, cluster=cluster,
                   topic_exists=topic_exists, **({"host": host} if host else {}))
