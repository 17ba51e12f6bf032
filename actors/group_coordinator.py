"""GroupCoordinator: the actor shell around :class:`GroupCoordinatorCore`.

Each coordinator owns the groups with ``topology.coordinator_for(group_id)``
equal to its address; every change to them happens in its own turns, one
message at a time. Request handlers send it the group requests
(``wire/group_messages.py``) and get one ``*Done`` back per request, maybe
much later (JoinGroup waits for the rebalance).

The core returns effects; this shell performs them:

* ``Respond``: the answer goes to the handler that asked (the core's
  request id is ``(node, handler name, req_id)``).
* ``ScheduleTimer`` / ``CancelTimer``: the DelayedJoin (rebalance), the
  DelayedHeartbeat (session) and the pending-member timers run on the Timer
  actor. Every schedule gets a fresh integer key, so an Expired from a timer
  that was replaced or cancelled meanwhile is recognised and dropped, and the
  live one fires exactly once.
* ``AppendRecords``: the records become one real Kafka v2 batch appended
  (acks=-1) to their ``__consumer_offsets`` partition on its shard; the
  shard's AppendDone (or the purgatory's ProduceReady) completes it. An
  append unanswered after APPEND_TIMEOUT_MS (``offsets.commit.timeout.ms``)
  plus ANSWER_MARGIN_MS (the shard crashed with it, or its process died and
  the Append reaches the restarted one late, if at all; the margin is wide
  enough not to take a slow success for a lost answer) completes with
  REQUEST_TIMED_OUT, which the core answers as Kafka's GroupMetadataManager
  does (an OffsetCommit gets REQUEST_TIMED_OUT, a SyncGroup's assignment
  write REBALANCE_IN_PROGRESS);
  an answer after that is counted and ignored. A write answered so may still
  be in the log (it was only slow): the client retries, and a reload reads
  what the log holds, as in Kafka.

Start-up: once the request handlers exist (so they hear of the new topic),
the coordinator asks the Controller to create ``__consumer_offsets``
(``offsets.topic.num.partitions`` partitions; "already exists" is fine, and the
partitions it has are those the groups map over; an answer
not come after CREATE_WAIT_MS was lost with the Controller, which is asked again), reads
every partition from offset 0 to its log end (as Kafka's FetchLogEnd: a new
leader's high watermark can lag commits its ISR acknowledged), keeps the
records of the groups it owns and restores them (``core.load_decoded``), a partition at a
time as each is read to its end, while the others are still read. A group is served once
its own partition is restored (``loaded_parts``), as Kafka's GroupMetadataManager refuses
only the groups of partitions still loading (isGroupLoading): until then its requests are
answered COORDINATOR_LOAD_IN_PROGRESS, which clients retry (not all: an old librdkafka's
DescribeGroups does not, so a partition read late, or a big one, must not hold up the
groups of the others). ListGroups answers that error, with the groups of the partitions
restored, until every partition is (Kafka's handleListGroups while any loads). A Read
unanswered after READ_TIMEOUT_MS (lost with its shard, or the shard far behind) is
sent again; the late answer is still taken, and the timeout doubles at each expiry.

Single node: an admin may delete ``__consumer_offsets`` (Kafka allows it). The
Controller's TopicsDeleted, or an append answered UNKNOWN_TOPIC_OR_PARTITION (a single
node's shards hold every partition it has, but for one whose old directory is not yet
deleted or whose topic id cannot be read), makes the coordinator start over as at
start-up: groups and offsets dropped, parked requests answered NOT_COORDINATOR, writes
in flight failed, the topic made and loaded again (a load's Read so answered is read
again, paced, as any failed Read: such a partition may be opened later). A caveat
with shards in other processes: an Append sent just before the
deletion travels there while the coordinator starts over, and could in principle land
after the shard has made the partition again (the re-creation takes a CreateTopics
round and a load, milliseconds, against the microseconds of the Append's trip): it is
written to the new topic, its answer ignored as late (the client was told it failed),
and the next load reads it.

The core runs on wall-clock milliseconds (they are persisted as commit
timestamps) derived from the injected monotonic clock plus an offset taken
once at setup, so a wall-clock jump never fires a session timer early.

With ``actor.threads = single`` the coordinators run in the worker loop of process 0
(the broker places them), beside the handlers and shards every group request goes
through, so what a coordinator does in one call holds up every request of that
process. Sessions and rebalances are timers on the Timer actor; the turn returns at
once when nothing waits on a deadline; a load's Read is answered with at most
LOAD_READ_MAX_BYTES over all its partitions plus one batch (about 50 ms of decoding a
MB; actors/coordinator_reads.py), and the end of a load sorts the latest records by
group, then restores the groups, LOAD_SLICE_RECORDS records at most once a poll of the
loop, not in its rounds over local messages (``restoring``; each key and value decoded
once; a group's requests refused COORDINATOR_LOAD_IN_PROGRESS until all the groups of its
partition are back: a single node restores each partition alone, as soon as it is read,
and serves it then; a cluster node the partitions of a load together). A resign, a new
epoch or a changed partition count mid-restore drops what was restored of those
partitions, and the markers held for them (a partition still led is loaded anew, whole).
An unload (a resigned partition, a changed partition count, a deleted
``__consumer_offsets``) takes its partitions' groups from the core's index by
partition, not by hashing every group id held (one partition of 50 with 20,000 groups:
about 1 ms against 77 ms here). Still one call, over everything the coordinator holds: a
topic's deletion (TopicsDeleted, TopicDeletions: the core's ``_remove_topics``) looks
at every group's offsets and writes their tombstones, in appends shared by the groups of
a partition (one append a group before; 20,000 groups holding two partitions of the
topic: 0.5-1 s in the core and 20,000 appends, then 0.14-0.26 s and 50 appends, on a
loaded machine); ListGroups lists every group (35-55 ms for 20,000).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection
from typing import Any

from actors.coordinator_reads import REFUSALS, REFUSED_RETRY_MS, LoadReading
from actors.core.group_state import (
    AppendRecords,
    CancelTimer,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    Effect,
    GroupConfig,
    GroupCoordinatorCore,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    MemberIdentity,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    Respond,
    Response,
    ScheduleTimer,
    SyncGroupResponse,
    TimerKey,
)
from actors.core.inflight_appends import ID_BAND, InFlightAppends, LoadReads, id_start
from actors.core.offsets_codec import (
    OFFSETS_TOPIC,
    OffsetCommitKey,
    OffsetsRecordError,
    RecordKey,
    RecordValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_record,
)
from actors.core.record_batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    build_batch,
    parse_header,
    read_records,
)
from actors.core.transaction_log import CONTROL_COMMIT, control_type
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import Topology
from wire.admin_messages import (
    AlterTopicConfigs,
    AlterTopicConfigsDone,
    AlterTopicConfigsRow,
    ConfigOpRow,
    DeleteGroups,
    DeleteGroupsDone,
    GroupResultRow,
    OffsetDelete,
    OffsetDeleteDone,
    OffsetDeleteDoneRow,
)
from wire.broker_messages import (
    Append,
    AppendDone,
    AppendRow,
    Cancel,
    CreateTopicRow,
    CreateTopicsDone,
    Expired,
    GetGroupGauges,
    GetStats,
    ProduceReady,
    ReadDone,
    Schedule,
    TopicDeletions,
    TopicsDeleted,
)
from wire.cluster_messages import CoordinatorPartitions, CoordinatorRestarted
from wire.errors import CorruptMessageError, ErrorCode
from wire.group_messages import (
    DescribeGroupRow,
    DescribeGroups,
    DescribeGroupsDone,
    DescribeMemberRow,
    Heartbeat,
    HeartbeatDone,
    JoinGroup,
    JoinGroupDone,
    JoinGroupMemberRow,
    LeaveGroup,
    LeaveGroupDone,
    LeaveGroupMemberRow,
    ListGroups,
    ListGroupsDone,
    ListGroupsRow,
    OffsetCommit,
    OffsetCommitDone,
    OffsetCommitDoneRow,
    OffsetFetch,
    OffsetFetchDone,
    OffsetFetchDoneRow,
    SyncGroup,
    SyncGroupDone,
)
from wire.transaction_messages import CompleteTxnOffsets, TxnOffsetCommit

NONE = int(ErrorCode.NONE)
LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
TOPIC_EXISTS = int(ErrorCode.TOPIC_ALREADY_EXISTS)
OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)

OFFSETS_TOPIC_CONFIGS = {
    # As Kafka's: compacted (the LogCleaner keeps each key's latest record), never
    # trimmed by age (a group's last commit can be old).
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "segment.bytes": str(100 * 1024 * 1024),  # Kafka's offsets.topic.segment.bytes
    # Kafka's offsets.topic.compression.codec default: batches kept as written (the
    # coordinator reads them uncompressed); a broker-wide compression.type is not for it
    "compression.type": "producer",
}
# the phases with a deadline of their own (poll_timeout_ms, on_turn)
_TIMED_PHASES = frozenset(("waiting", "creating", "create-retry", "loading", "read-retry",
                           "restoring"))
# latest records whose keys are sorted, then whose values are decoded and restored, in
# one poll of the loop at a load's end (phase "restoring"; about 3-6 us a key and 6-14 us a value
# with its restore were measured here, so 15-30 ms a turn); a group's records are never
# split over two turns, so a group with more is one turn
LOAD_SLICE_RECORDS = 2000
# A load's Read unanswered by then is overdue (its shard is far behind, or lost it):
# what it was reading is read again, the late answer is still taken if it comes, and
# the timeout doubles at every expiry, up to READ_TIMEOUT_MAX_MS (see LoadReads).
READ_TIMEOUT_MS = 5000
READ_TIMEOUT_MAX_MS = 60_000
APPEND_TIMEOUT_MS = 5000  # Kafka's offsets.commit.timeout.ms
# An append's answer is waited for APPEND_TIMEOUT_MS (the shard's own wait for the ISR's
# acks, after which it answers REQUEST_TIMED_OUT itself) plus this, then given up on
# (ANSWER_BUCKET_MS later at most: see InFlightAppends). The shard's wait starts when its
# purgatory gets the write, not when the coordinator sends it: the shard's backlog, the
# hops and a late Timer all come before it, and a healthy write acknowledged late by a
# follower succeeds well after APPEND_TIMEOUT_MS. The give-up must only catch a lost
# answer, never a slow success (Kafka's coordinators never give up on their own), so the
# margin is twice the shard's whole wait: an answer is given up on 15-15.5 s after
# sending, still half the clients' request.timeout.ms (30 s), so the client hears of it.
ANSWER_MARGIN_MS = 2 * APPEND_TIMEOUT_MS
ANSWER_BUCKET_MS = 500
HANDLER_WAIT_MS = 5000
RETRY_MS = 500


# ---------------------------------------------------------------- records


def decode_batches(
    buf: bytes, pending: dict[int, list[tuple[int, bytes | None, bytes | None]]] | None = None,
) -> tuple[list[tuple[int, bytes | None, bytes | None]], int | None]:
    """(offset, key, value) of every record in the whole uncompressed batches of ``buf``.

    Returns the records and the offset after the last whole batch (None if
    ``buf`` holds no whole batch: a read can end inside one). A compressed batch
    raises CorruptMessageError, since only the coordinator writes this topic and
    it never compresses. With ``pending`` (the reader's, kept across reads), the
    records of transactional batches wait there per producer until its marker:
    a commit releases them at the marker's offset, an abort drops them; control
    batches are skipped otherwise.
    """
    records: list[tuple[int, bytes | None, bytes | None]] = []
    pos = 0
    next_offset: int | None = None
    while len(buf) - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        end = pos + header.batch_length + LOG_OVERHEAD
        if end > len(buf):
            break
        next_offset = header.base_offset + header.last_offset_delta + 1
        if header.attributes & CONTROL_BIT:
            if pending is not None and header.producer_id in pending:
                held = pending.pop(header.producer_id)
                marker = next(iter(read_records(buf, header, pos)), None)
                if marker is not None and control_type(marker.key) == CONTROL_COMMIT:
                    records.extend((header.base_offset, k, v) for _o, k, v in held)
            pos = end
            continue
        if pending is not None and header.attributes & TRANSACTIONAL_BIT:
            if header.attributes & COMPRESSION_MASK:
                raise CorruptMessageError(
                    f"compressed batch at offset {header.base_offset} in {OFFSETS_TOPIC}")
            pending.setdefault(header.producer_id, []).extend(
                (r.offset, r.key, r.value) for r in read_records(buf, header, pos))
            pos = end
            continue
        if header.attributes & COMPRESSION_MASK:
            raise CorruptMessageError(
                f"compressed batch at offset {header.base_offset} in {OFFSETS_TOPIC}"
            )
        records.extend((r.offset, r.key, r.value) for r in read_records(buf, header, pos))
        pos = end
    return records, next_offset


def encode_records(records: Any, now_ms: int, producer_id: int = -1,
                   producer_epoch: int = -1) -> bytes:
    """The core's records as one uncompressed v2 batch (null values stay null: tombstones);
    with a producer id, that producer's transactional batch (a TxnOffsetCommit)."""
    recs = list(records)
    if producer_id >= 0:
        return build_batch([r.value for r in recs], keys=[r.key for r in recs],
                           timestamps_ms=[now_ms] * len(recs), producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=0,
                           attributes=TRANSACTIONAL_BIT)
    return build_batch(
        [r.value for r in recs],
        keys=[r.key for r in recs],
        timestamps_ms=[now_ms] * len(recs),
    )


# ------------------------------------------------------------------ answers


def answer_for(req_id: int, response: Response) -> Any:
    """The ``*Done`` message carrying one core response."""
    if isinstance(response, JoinGroupResponse):
        return JoinGroupDone(
            req_id, int(response.error_code), response.generation_id, response.protocol_type,
            response.protocol_name, response.leader, response.member_id,
            [JoinGroupMemberRow(m.member_id, m.group_instance_id, bytes(m.metadata))
             for m in response.members],
        )
    if isinstance(response, SyncGroupResponse):
        return SyncGroupDone(req_id, int(response.error_code), response.protocol_type,
                             response.protocol_name, bytes(response.assignment))
    if isinstance(response, HeartbeatResponse):
        return HeartbeatDone(req_id, int(response.error_code))
    if isinstance(response, LeaveGroupResponse):
        return LeaveGroupDone(req_id, int(response.error_code), [
            LeaveGroupMemberRow(m.member_id, m.group_instance_id, int(m.error_code))
            for m in response.members
        ])
    if isinstance(response, OffsetCommitResponse):
        return OffsetCommitDone(req_id, [
            OffsetCommitDoneRow(t, p, int(c)) for t, p, c in response.partitions])
    if isinstance(response, OffsetFetchResponse):
        return OffsetFetchDone(req_id, int(response.error_code), [
            OffsetFetchDoneRow(p.topic, p.partition, p.offset, p.leader_epoch, p.metadata,
                               int(p.error_code))
            for p in response.partitions
        ])
    if isinstance(response, ListGroupsResponse):
        return ListGroupsDone(req_id, int(response.error_code), [
            ListGroupsRow(g.group_id, g.protocol_type, g.state) for g in response.groups
        ])
    if isinstance(response, DescribeGroupsResponse):
        return DescribeGroupsDone(req_id, [
            DescribeGroupRow(int(g.error_code), g.group_id, g.state, g.protocol_type,
                             g.protocol_data, [
                DescribeMemberRow(m.member_id, m.group_instance_id, m.client_id,
                                  m.client_host, bytes(m.metadata), bytes(m.assignment))
                for m in g.members
            ])
            for g in response.groups
        ])
    if isinstance(response, DeleteGroupsResponse):
        return DeleteGroupsDone(req_id, [GroupResultRow(g, int(c)) for g, c in response.results])
    if isinstance(response, OffsetDeleteResponse):
        return OffsetDeleteDone(req_id, int(response.error_code), [
            OffsetDeleteDoneRow(t, p, int(c)) for t, p, c in response.partitions])
    raise TypeError(f"no answer message for {type(response).__name__}")


def refusal_for(msg: Any, code: int) -> Any:
    """The answer to a group request the coordinator cannot serve yet (or at all).
    DescribeGroups and DeleteGroups are answered group by group (_refused_groups)."""
    if isinstance(msg, JoinGroup):
        return JoinGroupDone(msg.req_id, code, -1, None, None, "", msg.member_id, [])
    if isinstance(msg, SyncGroup):
        return SyncGroupDone(msg.req_id, code, None, None, b"")
    if isinstance(msg, Heartbeat):
        return HeartbeatDone(msg.req_id, code)
    if isinstance(msg, LeaveGroup):
        return LeaveGroupDone(msg.req_id, code, [
            LeaveGroupMemberRow(m.member_id, m.group_instance_id, code) for m in msg.members])
    if isinstance(msg, OffsetCommit | TxnOffsetCommit):
        return OffsetCommitDone(msg.req_id, [
            OffsetCommitDoneRow(r.topic, r.partition, code) for r in msg.rows])
    if isinstance(msg, OffsetFetch):
        return OffsetFetchDone(msg.req_id, code, [])
    if isinstance(msg, ListGroups):
        return ListGroupsDone(msg.req_id, code, [])
    if isinstance(msg, OffsetDelete):
        return OffsetDeleteDone(msg.req_id, code, [])
    raise TypeError(f"not a group request: {type(msg).__name__}")


# -------------------------------------------------------------------- actor


class GroupCoordinator(LoadReading, Actor):
    LOG_TOPIC = OFFSETS_TOPIC  # named in the load-read log lines
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 clock: Clock | None = None, wait_for_handlers: bool = True,
                 cluster: bool = False, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.config = config
        if clock is not None:
            self.clock = clock
        self.wait_for_handlers = wait_for_handlers
        self._id_floor = 0  # survives restarts in place: see id_start
        # Cluster mode: coordinate only the groups whose __consumer_offsets partition this
        # node leads (the ReplicaManager says which: CoordinatorPartitions).
        self.cluster = cluster

    # ------------------------------------------------------------ lifecycle
    def setup(self) -> None:
        # Also runs after a crash: the groups come back from the log, parked
        # requests are lost (their handlers give up on them).
        self.core = GroupCoordinatorCore(GroupConfig.from_kafka_config(self.config.values))
        self.num_partitions = self.core.config.offsets_topic_num_partitions
        self.wall_offset_ms = self.clock.wall_ms() - self.clock.now_ms()
        # Fresh request ids and timer keys after a restart, so answers and Expired
        # messages meant for the crashed instance match nothing.
        start = id_start(self.clock.monotonic_ns(), self._id_floor)
        self._id_floor = start + ID_BAND
        self.req_ids = itertools.count(start)
        self.timer_ids = itertools.count(start)
        self.timer_id_of: dict[TimerKey, int] = {}
        self.timer_key_of: dict[int, TimerKey] = {}
        # Append req_id -> core append_id, until answered or timed out
        self.appends: InFlightAppends[int] = InFlightAppends(
            APPEND_TIMEOUT_MS + ANSWER_MARGIN_MS, ANSWER_BUCKET_MS)
        self.loaded = False
        self.phase = "waiting"  # -> creating -> loading -> ready
        self.create_due_ms = 0
        self.creates_lost = 0
        self.create_req_id: int | None = None
        self.create_answers_stale = 0
        self.started_ms = self.clock.now_ms()
        self.retry_at_ms = self.started_ms
        self.read_offsets: dict[int, int] = {}
        self.reads = LoadReads(READ_TIMEOUT_MS, READ_TIMEOUT_MAX_MS)
        # Per partition: the latest value per record key, in the order of each key's
        # latest write.
        self.loaded_records: dict[int, dict[bytes, bytes | None]] = {}
        # per partition: records of transactions whose marker the load has not met yet
        self.txn_pending: dict[int, dict[int, list[tuple[int, bytes | None, bytes | None]]]] = {}
        # markers written while their partition was being loaded, settled after its
        # restore (single node: those of a partition restored already are settled at once)
        self.completions_while_loading: list[CompleteTxnOffsets] = []
        # topics deleted while a load was on: applied again, to the groups it restored,
        # at the end of each restore (those restored after the deletion would have their
        # offsets back); single node: kept till the load's end, for every partition
        self.deletions_while_loading: set[str] = set()
        self.loading_parts: set[int] = set()
        # a restore: the latest records read (key, value) and how far their keys
        # are sorted into restore_groups (group -> (key, value bytes), in log order); then
        # the groups still to restore (popped from the end); the partitions they are
        # restored for (cluster: one lost meanwhile is dropped), the records restored
        self.restore_raw: list[tuple[bytes, bytes | None]] = []
        self.restore_raw_at = 0
        self.restore_groups: dict[str, list[tuple[RecordKey, bytes | None]]] = {}
        self.restore: list[tuple[str, list[tuple[RecordKey, bytes | None]]]] = []
        self.restore_parts: set[int] = set()
        self.restoring = False  # a restore is on (cluster: phase "restoring")
        # single node: partitions read to their log end, their restore not begun yet; the
        # records read and restored by the restores of this load so far (logged at its end)
        self.to_restore: list[int] = []
        self.load_read = 0
        self.load_restored = 0
        self.restore_count = 0
        self.restore_slices = 0  # slices restored (turns taken) since the start (GetStats)
        self.restore_poll = -1  # the loop's poll count at the last slice
        self.load_skipped = 0
        self.load_started_ms = 0
        self.refused_loading = 0
        self.led: dict[int, int] = {}       # cluster: partition -> leader epoch, led here
        # partitions whose groups are loaded (single node: restored so far by the load on;
        # all once ``loaded``)
        self.loaded_parts: set[int] = set()
        self.to_load: set[int] = set()
        self.refused_not_coordinator = 0
        # cluster: whether the ReplicaManager has said how many partitions the topic has
        self.count_known = not self.cluster
        if self.cluster:
            self.phase = "cluster"
            if self.crashes:  # restarted: which partitions this node leads died with the crash
                self.tell(self.topology.replica_manager, CoordinatorRestarted(False))

    def now_ms(self) -> int:
        return self.clock.now_ms() + self.wall_offset_ms

    def _nothing_timed(self) -> bool:
        """Nothing waits on a deadline: the common case. Only a handled message sets one
        (an append, a phase), so the worker loop it may share with the shards, handlers
        and Processors is told to skip it until the next (quiet_turns)."""
        if self.appends.waiting or self.phase in _TIMED_PHASES:
            return False
        self.quiet_turns()
        return True

    def poll_timeout_ms(self) -> int | None:
        if self._nothing_timed():
            return None
        if self.restoring:
            return 0  # the next slice, at the next turn
        if self.phase == "waiting":
            return 20
        expiry = self.appends.next_expiry_ms()
        if self.phase in ("create-retry", "read-retry") and (
                expiry is None or self.retry_at_ms < expiry):
            expiry = self.retry_at_ms
        elif self.phase == "creating" and (expiry is None or self.create_due_ms < expiry):
            expiry = self.create_due_ms
        due = self.reads.next_due_ms() if self.phase == "loading" else None
        if due is not None:
            expiry = due if expiry is None else min(expiry, due)
        return None if expiry is None else max(0, expiry - self.clock.now_ms())

    def on_turn(self) -> None:
        if self._nothing_timed():
            return
        if self.restoring and self.restore_poll != self._owner.loop_polls:
            # one slice a poll of the loop: not again in its rounds over local messages
            self.restore_poll = self._owner.loop_polls
            self._restore_slice()
        now = self.clock.now_ms()
        expiry = self.appends.next_expiry_ms()
        if expiry is not None and now >= expiry:
            self._expire_appends(now)
        if self.phase == "loading" and self.reads.waiting():
            self._expire_reads(now)
        self._create_overdue(now)
        if self.phase == "waiting":
            if self.wait_for_handlers and now - self.started_ms < HANDLER_WAIT_MS and not all(
                h.name in self.node.actors for h in self.topology.all_handlers()
            ):
                return
            self._create_topic()
        elif self.phase == "create-retry" and now >= self.retry_at_ms:
            self._create_topic()
        elif self.phase == "read-retry" and now >= self.retry_at_ms:
            self.phase = "loading"
            if self.cluster:  # partitions lost meanwhile are not read again
                self.read_offsets = {p: o for p, o in self.read_offsets.items() if p in self.led}
                if not self.read_offsets:
                    self._finish_load()
                    return
            self._send_reads()

    # ---------------------------------------------------------- start-up
    def _create_topic(self) -> None:
        self._ask_create(CreateTopicRow(OFFSETS_TOPIC, self.num_partitions, 1,
                                        dict(OFFSETS_TOPIC_CONFIGS), internal=True))

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
        if row.error_code == TOPIC_EXISTS:
            # Made before it was compacted: make it so (no change if it is already).
            self.tell(self.topology.controller, AlterTopicConfigs(
                next(self.req_ids), False, True, [AlterTopicConfigsRow(
                    OFFSETS_TOPIC, [ConfigOpRow("cleanup.policy", 0, "compact")])]))
        self.phase = "loading"
        self.load_started_ms = self.clock.now_ms()
        self.reads.reset()
        self.read_offsets = {p: 0 for p in range(self.num_partitions)}
        self.loaded_records = {}
        self._send_reads()

    def _use_partition_count(self, count: int) -> None:
        """Map the groups over the partitions ``__consumer_offsets`` has (Kafka's
        partitionFor), not a changed ``offsets.topic.num.partitions``: otherwise a group
        would look for its offsets, and its coordinator, on another partition.

        In a cluster a count of 0 is unknown (the ReplicaManager's metadata lacks the
        topic: a LeaderAndIsr came before the UpdateMetadata, or the topic was re-created):
        nothing is loaded or served until a count arrives, as a group served under a
        guessed count may commit to a partition it does not map to."""
        if count <= 0:
            if self.cluster and self.count_known:
                self.count_known = False
                self._forget_loads()
            return
        self.count_known = True
        if count == self.num_partitions:
            return
        configured = int(self.config["offsets.topic.num.partitions"])
        if count != configured and self.address == self.topology.coordinator(0):
            self.log.warning("{} has {} partitions, offsets.topic.num.partitions is {}: "
                             "groups are mapped over the {} it has", OFFSETS_TOPIC, count,
                             configured, count)
        if self.cluster:
            self._forget_loads()
        self.num_partitions = count
        self.core.config = dataclasses.replace(self.core.config,
                                               offsets_topic_num_partitions=count)

    def _forget_loads(self) -> None:
        """Cluster: the groups loaded, or being loaded, under a count the topic no longer
        has are unloaded (members parked in a JoinGroup or SyncGroup answered
        NOT_COORDINATOR) and loaded again once the count is known: a load under the old
        count kept the wrong groups, and one finished later would replace live ones."""
        restoring = self.restore_parts if self.phase == "restoring" else set()
        if self.loaded_parts or restoring:
            self._perform(self.core.unload(self.loaded_parts | restoring))
            self.log.info("unloaded the groups of {}-{}: its partition count changed or is unknown",
                          OFFSETS_TOPIC, sorted(self.loaded_parts | restoring))
            self.loaded_parts = set()
        if self.phase in ("loading", "read-retry", "restoring"):  # late answers match nothing
            self.reads.reset()
            self.read_offsets = {}
            self.loaded_records = {}
            self.restore_raw = []
            self.restore_groups = {}
            self.restore = []
            self.restore_parts = set()
            self.restoring = False
            for p in self.loading_parts:
                self.txn_pending.pop(p, None)
            self.loading_parts = set()
            # markers met meanwhile name partitions of the old count; the load anew reads
            # every marker written from the log
            self.completions_while_loading = []
            # the load anew reads the tombstones written since; a deletion met before
            # them, or not yet applied, is the gap of on_topics_deleted's docstring
            self.deletions_while_loading = set()
            self.phase = "cluster"
        self.to_load = set(self.led)

    def _send_reads(self) -> None:
        self._read_all()

    @handles(AlterTopicConfigsDone)
    def on_offsets_topic_altered(self, msg: AlterTopicConfigsDone) -> None:
        for row in msg.rows:
            if row.error_code != NONE:
                self.log.error("cannot make {} compacted: {} ({})", OFFSETS_TOPIC,
                               ErrorCode(row.error_code).name, row.error_message)

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
                continue  # an overdue answer for a partition read further since
            if row.error_code == OUT_OF_RANGE and row.log_start_offset > self.read_offsets[p]:
                self.read_offsets[p] = row.log_start_offset
                rest.append((p, True))
                continue
            if row.error_code != NONE:
                self._read_failed(p, row.error_code)
                continue
            self._read_succeeded(p)
            self._take_records(p, bytes(row.records))
            if self.read_offsets[p] >= row.log_end_offset:
                del self.read_offsets[p]
                if not self.cluster:
                    self.to_restore.append(p)
            else:
                rest.append((p, bool(row.records)))
        self._read_rest(rest)
        self.reads.drop_stale(self.read_offsets)
        if not self.cluster:
            self._restore_read()  # its groups served once restored, the others read on
        if self.reads.waiting():
            return
        if self.read_offsets:  # some partitions failed: read them again a little later
            if self.phase == "loading":
                self.phase = "read-retry"
                self.retry_at_ms = self.clock.now_ms() + RETRY_MS
        else:
            self._finish_load()

    def _take_records(self, p: int, buf: bytes) -> None:
        """Keep each key's latest value only, moved to the end on every write.

        Replaying only those in that order gives ``core.load`` the same result
        as replaying the whole log (later writes win; a group tombstone only
        clears what was written before it), and without compaction the log
        holds every commit ever made.
        """
        records, next_offset = decode_batches(buf, self.txn_pending.setdefault(p, {}))
        if next_offset is None:
            if buf:
                raise CorruptMessageError(
                    f"{OFFSETS_TOPIC}-{p} at offset {self.read_offsets[p]}: a read returned "
                    f"{len(buf)} bytes but no whole batch")
            return
        latest = self.loaded_records.setdefault(p, {})
        start = self.read_offsets[p]
        for offset, key, value in records:
            if offset < start or key is None:
                continue
            latest.pop(key, None)
            latest[key] = value
        self.read_offsets[p] = next_offset

    def _finish_load(self) -> None:
        """Every partition read. Cluster: the latest records of the partitions read are
        restored in polls of the loop (``phase`` "restoring", requests for their groups
        still refused COORDINATOR_LOAD_IN_PROGRESS), so the worker loop it may share
        serves other requests between them (at most one slice a poll, by on_turn): first
        their keys, LOAD_SLICE_RECORDS a slice, sort them by group (those of groups
        another coordinator owns, or of partitions not loaded here, are dropped); then
        about LOAD_SLICE_RECORDS a slice, whole groups, have their values decoded and go
        to ``core.load_decoded``, which replaces only the groups it is given, so the
        slices rebuild what one call with them all would. Each key and value is decoded
        once. Single node: each partition was restored as soon as it was read to its
        end (``_restore_read``); the load ends when the last is."""
        self.phase = "restoring"
        if not self.cluster:
            self._restore_read()
            return
        records, self.loaded_records = self.loaded_records, {}
        self._start_restore({p for p in self.loading_parts if p in self.led},
                            [kv for p in sorted(records) for kv in records[p].items()])

    def _restore_read(self) -> None:
        """Single node: with no restore on, the next partition read to its log end is
        restored (its groups served once it is, as Kafka serves each partition once its
        own load ends: GroupMetadataManager.isGroupLoading), one at a time, so the groups
        of the partitions read first are not held up by the rest of the load (a partition
        read late, or a big one); with none left, and every partition read (``phase``
        "restoring"), the load ends."""
        while not self.restoring and self.to_restore:
            p = self.to_restore.pop(0)
            raw = list(self.loaded_records.pop(p, {}).items())
            if raw:
                self._start_restore({p}, raw)
            else:  # no record: served at once (not through _end_restore: no recursion)
                self.restore_count = 0
                self._restored({p}, 0)
        if not self.restoring and self.phase == "restoring":
            self._end_load()

    def _start_restore(self, parts: set[int], raw: list[tuple[bytes, bytes | None]]) -> None:
        self.restore_parts = parts
        self.restore_raw = raw
        self.restore_raw_at = 0
        self.restore_groups = {}
        self.restore = []
        self.restore_count = 0
        self.restoring = True
        if self.cluster and not parts:
            self._restore_nothing()  # every partition lost while read
        elif not raw:
            self._restore_slice()  # nothing to restore: it ends now
        else:  # the first slice waits for the next poll: this one decoded the last answer
            self.restore_poll = self._owner.loop_polls

    def _restore_slice(self) -> None:
        """One slice of the restore; the last ends it."""
        self.restore_slices += 1
        if self.restore_raw_at < len(self.restore_raw):
            self._sort_keys(self.restore_raw[self.restore_raw_at:
                                             self.restore_raw_at + LOAD_SLICE_RECORDS])
            self.restore_raw_at += LOAD_SLICE_RECORDS
            if self.restore_raw_at < len(self.restore_raw):
                return
            self.restore = list(self.restore_groups.items())
            self.restore.reverse()  # popped from the end: in the order first read
            self.restore_groups = {}
            return
        part: list[tuple[RecordKey, RecordValue | None]] = []
        while self.restore and len(part) < LOAD_SLICE_RECORDS:
            group_id, records = self.restore.pop()
            if self.cluster and self.core.partition_for(group_id) not in self.restore_parts:
                continue  # its partition was lost meanwhile
            for key, value in records:
                try:
                    part.append((key, decode_offset_commit_value(value)
                                 if isinstance(key, OffsetCommitKey)
                                 else decode_group_metadata_value(value)))
                except OffsetsRecordError as exc:
                    self.load_skipped += 1
                    self.log.warning("skipping a corrupt record of {}: {}", OFFSETS_TOPIC, exc)
        if part:
            self._perform(self.core.load_decoded(part, self.now_ms()))
            self.restore_count += len(part)
        if not self.restore:
            self._end_restore()

    def _end_restore(self) -> None:
        """The restore's end: the open transactions read in its partitions and the markers
        and deletions met meanwhile are applied, and its partitions served."""
        read = len(self.restore_raw)
        self.restore_raw = []
        self.restore_raw_at = 0
        loaded = self.restore_parts
        self.restore_parts = set()
        self.restoring = False
        self._restored(loaded, read)
        if not self.cluster:
            self._restore_read()

    def _restored(self, loaded: set[int], read: int) -> None:
        """The groups of ``loaded`` restored (``read`` latest records of them): their open
        transactions, and the markers and deletions met meanwhile, are applied, and they
        are served."""
        self._load_open_transactions(loaded)
        self._settle_completions_met_while_loading(None if self.cluster else loaded)
        if self.deletions_while_loading:
            held = self.deletions_while_loading
            if self.cluster:
                self.deletions_while_loading = set()
            # single node: still held for the partitions restored later, till the load's end
            self._perform(self.core.topics_deleted_in(set(held), loaded))
        self.loaded_parts |= loaded
        if self.cluster:
            self.phase = "cluster"
            self.log.info("loaded {} group record(s) of {}-{} in {} ms", self.restore_count,
                          OFFSETS_TOPIC, sorted(loaded),
                          self.clock.now_ms() - self.load_started_ms)
            self._maybe_load_partitions()
            return
        self.load_read += read
        self.load_restored += self.restore_count

    def _end_load(self) -> None:
        """Single node: every partition read and restored; every group served."""
        self.deletions_while_loading = set()
        self._settle_completions_met_while_loading(None)  # any of a partition not loaded
        self.loaded = True
        self.phase = "ready"
        self.log.info("loaded {} group(s) from {} latest record(s) ({} owned) of {} in {} ms",
                      len(self.core.group_ids()), self.load_read, self.load_restored,
                      OFFSETS_TOPIC, self.clock.now_ms() - self.load_started_ms)

    def _sort_keys(self, items: list[tuple[bytes, bytes | None]]) -> None:
        """Keys decoded, each record kept under its group if this coordinator owns the
        group (and, cluster, loads its partition); the values stay undecoded till their
        slice. A key of a version unknown is skipped and counted, as a corrupt one."""
        for key, value in items:
            try:
                k = decode_key(key)
            except OffsetsRecordError as exc:
                self.load_skipped += 1
                if not str(exc).startswith("unknown __consumer_offsets key version"):
                    self.log.warning("skipping a corrupt record of {}: {}", OFFSETS_TOPIC, exc)
                continue
            records = self.restore_groups.get(k.group)
            if records is None:  # the group's first record: is it kept?
                if (self.topology.coordinator_for(k.group) != self.address
                        or self.core.partition_for(k.group) not in self.restore_parts):
                    # cluster: a partition not loaded here. Single node: a group's
                    # records outside its home partition are dropped, kept only in that
                    # one's restore, as load_decoded replaces the groups it is given: a
                    # later partition's restore would overwrite a group served already
                    # (Kafka's loadGroup keeps the group cached, logged at debug). Only a
                    # foreign data directory holds such records: the internal topic's
                    # partition count cannot change.
                    continue
                records = self.restore_groups[k.group] = []
            records.append((k, value))

    # ---------------------------------------------------------- requests
    def _rid(self, req_id: int) -> tuple[str, str, int]:
        sender = self.current_sender
        assert sender is not None
        return (sender.node, sender.name, req_id)

    def _serving(self, msg: Any) -> bool:
        if self.cluster:
            return self._serving_in_cluster(msg)
        if self.loaded or self.core.partition_for(msg.group_id) in self.loaded_parts:
            return True  # (ListGroups while loading: on_list)
        self.refused_loading += 1
        self.reply(refusal_for(msg, LOAD_IN_PROGRESS))
        return False

    @handles(JoinGroup)
    def on_join(self, msg: JoinGroup) -> None:
        if self._serving(msg):
            self._perform(self.core.join_group(
                self._rid(msg.req_id), msg.group_id, msg.member_id, msg.group_instance_id,
                msg.client_id, msg.client_host, msg.protocol_type,
                [(p.name, p.metadata) for p in msg.protocols],
                msg.session_timeout_ms, msg.rebalance_timeout_ms, self.now_ms(),
                msg.require_known_member_id))

    @handles(SyncGroup)
    def on_sync(self, msg: SyncGroup) -> None:
        if self._serving(msg):
            self._perform(self.core.sync_group(
                self._rid(msg.req_id), msg.group_id, msg.generation_id, msg.member_id,
                msg.group_instance_id, {k: bytes(v) for k, v in msg.assignments.items()},
                self.now_ms(), msg.protocol_type, msg.protocol_name))

    @handles(Heartbeat)
    def on_heartbeat(self, msg: Heartbeat) -> None:
        if self._serving(msg):
            self._perform(self.core.heartbeat(
                self._rid(msg.req_id), msg.group_id, msg.generation_id, msg.member_id,
                msg.group_instance_id, self.now_ms()))

    @handles(LeaveGroup)
    def on_leave(self, msg: LeaveGroup) -> None:
        if self._serving(msg):
            members = [MemberIdentity(m.member_id, m.group_instance_id) for m in msg.members]
            self._perform(self.core.leave_group(self._rid(msg.req_id), msg.group_id, members,
                                                self.now_ms()))

    @handles(OffsetCommit)
    def on_commit(self, msg: OffsetCommit) -> None:
        if self._serving(msg):
            parts = [OffsetCommitPartition(r.topic, r.partition, r.offset, r.leader_epoch,
                                           r.metadata)
                     for r in msg.rows]
            self._perform(self.core.offset_commit(
                self._rid(msg.req_id), msg.group_id, msg.generation_id, msg.member_id,
                msg.group_instance_id, parts, self.now_ms()))

    @handles(TxnOffsetCommit)
    def on_txn_commit(self, msg: TxnOffsetCommit) -> None:
        if self._serving(msg):
            parts = [OffsetCommitPartition(r.topic, r.partition, r.offset, r.leader_epoch,
                                           r.metadata)
                     for r in msg.rows]
            self._perform(self.core.txn_offset_commit(
                self._rid(msg.req_id), msg.group_id, msg.producer_id, msg.producer_epoch,
                msg.generation_id, msg.member_id, msg.group_instance_id, parts, self.now_ms()))

    @handles(CompleteTxnOffsets)
    def on_txn_complete(self, msg: CompleteTxnOffsets) -> None:
        if self.phase in ("loading", "read-retry", "restoring") and (
                msg.partition in self.loading_parts if self.cluster
                else msg.partition not in self.loaded_parts):
            # The partition may be read to its end already, this marker after that read
            # (the shard answered the read first): the offsets it settles are still in
            # txn_pending, not in the core. Settled once the load has put them there
            # (single node: once its partition is restored; one restored already is
            # served, its markers settled as they come).
            self.completions_while_loading.append(msg)
            return
        self._perform(self.core.complete_txn(msg.producer_id, msg.partition, msg.commit))

    def _settle_completions_met_while_loading(self, partitions: set[int] | None) -> None:
        """After a load (of ``partitions``; None: all): the markers written meanwhile
        (a marker the load read already finds nothing left to settle)."""
        met = self.completions_while_loading
        if partitions is None:
            self.completions_while_loading = []
        else:
            self.completions_while_loading = [
                c for c in met if c.partition not in partitions]
            met = [c for c in met if c.partition in partitions]
        for msg in met:
            self._perform(self.core.complete_txn(msg.producer_id, msg.partition, msg.commit))

    @handles(OffsetFetch)
    def on_fetch(self, msg: OffsetFetch) -> None:
        if self._serving(msg):
            rows = None if msg.rows is None else [(r.topic, r.partition) for r in msg.rows]
            self._perform(self.core.offset_fetch(self._rid(msg.req_id), msg.group_id, rows,
                                                 msg.require_stable))

    @handles(ListGroups)
    def on_list(self, msg: ListGroups) -> None:
        if not self.cluster:
            if not self.loaded:
                self._list_while_loading(msg, self.loaded_parts)
                return
        elif self.led and not self.count_known:
            # no group maps to a partition yet, so none is loaded: the error alone
            self._list_while_loading(msg, ())
            return
        elif self.led and not self.loaded_parts.issuperset(self.led):
            # a partition this node leads still loads: the list would miss its groups
            self._list_while_loading(msg, self.loaded_parts & self.led.keys())
            return
        self._perform(self.core.list_groups(self._rid(msg.req_id), msg.states))

    def _list_while_loading(self, msg: ListGroups, served: Collection[int]) -> None:
        """A load on: the groups of the partitions ``served`` (restored; in a cluster,
        those led here), answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka's
        handleListGroups lists the groups loaded with that error while any partition
        loads (the groups of a partition being restored are not listed: some may be
        missing yet). A single node and a cluster node answer alike. Counted in
        refused_loading, as a DescribeGroups with a group refused is: the client is
        answered that error."""
        self.refused_loading += 1
        self._perform(self.core.list_groups(self._rid(msg.req_id), msg.states, served,
                                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))

    @handles(DescribeGroups)
    def on_describe(self, msg: DescribeGroups) -> None:
        # the refused groups are answered by the core too, untouched
        self._perform(self.core.describe_groups(self._rid(msg.req_id), msg.group_ids,
                                                self._refused_groups(msg.group_ids)))

    @handles(DeleteGroups)
    def on_delete_groups(self, msg: DeleteGroups) -> None:
        self._perform(self.core.delete_groups(self._rid(msg.req_id), msg.group_ids,
                                              self.now_ms(), self._refused_groups(msg.group_ids)))

    def _refused_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """The groups of a many-group request (DescribeGroups, DeleteGroups) this
        coordinator cannot serve, each with its own code: NOT_COORDINATOR where this
        node does not lead the group's __consumer_offsets partition, LOAD_IN_PROGRESS
        where it is still loading it. Kafka answers such requests group by group
        (GroupCoordinator.handleDeleteGroups, handleDescribeGroup), so one group led
        elsewhere must not refuse the others (it refused the whole request here)."""
        refused: dict[str, ErrorCode] = {}
        if not self.cluster:
            if not self.loaded:  # those of partitions restored are served
                refused = {g: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS for g in group_ids
                           if self.core.partition_for(g) not in self.loaded_parts}
        else:
            for group_id in group_ids:
                p = self.core.partition_for(group_id)
                if not self.count_known:
                    refused[group_id] = self._count_unknown_code()
                elif p not in self.led:
                    refused[group_id] = ErrorCode.NOT_COORDINATOR
                elif p not in self.loaded_parts:
                    refused[group_id] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        codes = set(refused.values())
        self.refused_not_coordinator += ErrorCode.NOT_COORDINATOR in codes
        self.refused_loading += ErrorCode.COORDINATOR_LOAD_IN_PROGRESS in codes
        return refused

    @handles(OffsetDelete)
    def on_offset_delete(self, msg: OffsetDelete) -> None:
        if self._serving(msg):
            self._perform(self.core.offset_delete(
                self._rid(msg.req_id), msg.group_id, [(r.topic, r.partition) for r in msg.rows]))

    @handles(TopicsDeleted)
    def on_topics_deleted(self, msg: TopicsDeleted) -> None:
        """Deleted topics' offsets go from every group held, and, if a load is on, from
        those it restores (at its end). A gap left, as in Kafka (its cleanupGroupMetadata
        runs over the groups loaded when the deletion comes): a cluster's partition not
        being loaded then (elected later, or its load started over) gets them back from
        a log read before their tombstones are written, until they expire."""
        if OFFSETS_TOPIC in msg.topics and not self.cluster:
            self._offsets_topic_deleted()
            return
        self._hold_deletions(set(msg.topics))
        self._perform(self.core.topics_deleted(msg.topics))

    def _hold_deletions(self, topics: set[str]) -> None:
        if topics and self.phase in ("waiting", "creating", "create-retry", "loading",
                                     "read-retry", "restoring"):
            self.deletions_while_loading |= topics

    def _offsets_topic_deleted(self) -> None:
        """An admin deleted ``__consumer_offsets`` (Kafka allows it): as Kafka's coordinator
        resigns its partitions, the groups and their offsets are dropped (members parked in
        a JoinGroup or SyncGroup answered NOT_COORDINATOR, writes in flight failed), and the
        coordinator starts over as at start-up: it makes the topic again and loads it, so
        groups work again (answered COORDINATOR_LOAD_IN_PROGRESS meanwhile). Otherwise it
        kept serving from memory while every write to the missing topic failed. Told by
        the Controller's TopicsDeleted or by an append or a load's Read answered
        UNKNOWN_TOPIC_OR_PARTITION (single node)."""
        for _rid, append_id in self.appends.expire(1 << 62):
            self._perform(self.core.on_append_complete(
                append_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, self.now_ms()))
        self._perform(self.core.unload(set(range(self.num_partitions))))
        for timer_id in self.timer_key_of:
            self.tell(self.topology.timer, Cancel(timer_id))
        self.log.warning("{} was deleted: its groups and offsets are dropped; making it again",
                         OFFSETS_TOPIC)
        self.setup()

    @handles(TopicDeletions)
    def on_topic_deletions(self, msg: TopicDeletions) -> None:
        """A cluster's deletions, from this node's replica manager (its UpdateMetadata);
        held for a load's end as on_topics_deleted's."""
        self._hold_deletions(self.core.new_completions(msg.completed))
        self._perform(self.core.topic_deletions(msg.started, msg.completed, self.now_ms()))

    # ---------------------------------------------------------- effects
    def _perform(self, effects: list[Effect]) -> None:
        for fx in effects:
            if isinstance(fx, Respond):
                request_id: tuple[str, str, int] = fx.request_id  # type: ignore[assignment]
                node, name, req_id = request_id
                self.tell(Address(node, name), answer_for(req_id, fx.response))
            elif isinstance(fx, ScheduleTimer):
                self._schedule(fx.key, fx.deadline_ms)
            elif isinstance(fx, CancelTimer):
                old = self.timer_id_of.pop(fx.key, None)
                if old is not None:
                    del self.timer_key_of[old]
                    self.tell(self.topology.timer, Cancel(old))
            elif isinstance(fx, AppendRecords):
                self._append(fx)
            else:
                raise TypeError(f"unknown effect {fx!r}")

    def _schedule(self, key: TimerKey, deadline_ms: int) -> None:
        old = self.timer_id_of.pop(key, None)
        if old is not None:
            del self.timer_key_of[old]
            self.tell(self.topology.timer, Cancel(old))
        timer_id = next(self.timer_ids)
        self.timer_id_of[key] = timer_id
        self.timer_key_of[timer_id] = key
        self.tell(self.topology.timer, Schedule(timer_id, deadline_ms - self.wall_offset_ms))

    @handles(Expired)
    def on_expired(self, msg: Expired) -> None:
        key = self.timer_key_of.pop(msg.key, None)
        if key is None:
            return  # replaced or cancelled after the Timer sent it
        del self.timer_id_of[key]
        self._perform(self.core.on_timer(key, self.now_ms()))

    def _append(self, fx: AppendRecords) -> None:
        rid = next(self.req_ids)
        self.appends.add(rid, fx.append_id, self.clock.now_ms())
        batch = encode_records(fx.records, self.now_ms(), fx.producer_id, fx.producer_epoch)
        self.tell(self.topology.shard_for(fx.topic, fx.partition),
                  Append(rid, -1, APPEND_TIMEOUT_MS, [AppendRow(fx.topic, fx.partition, batch)],
                         fx.producer_id >= 0))

    @handles(AppendDone, ProduceReady)
    def on_appended(self, msg: AppendDone | ProduceReady) -> None:
        append_id = self.appends.pop(msg.req_id)
        if append_id is None:
            if self.appends.first_of_burst():
                self.log.warning("an answer to an append to {} came after its timeout (or "
                                 "a restart) and is ignored; late answers so far: {}",
                                 OFFSETS_TOPIC, self.appends.late)
            return
        rows = msg.rows
        code = rows[0].error_code if rows else int(ErrorCode.UNKNOWN_SERVER_ERROR)
        if code != NONE:
            self.log.warning("appending to {} failed: {} ({})", OFFSETS_TOPIC,
                             ErrorCode(code).name, rows[0].error_message if rows else "")
        self._perform(self.core.on_append_complete(append_id, ErrorCode(code), self.now_ms()))
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and not self.cluster:
            # A single node's shards hold every partition it has: this one is gone. The
            # Controller's TopicsDeleted, told once after its save, dies with a crash
            # between the two; this answer says it as well.
            self._offsets_topic_deleted()

    def _expire_appends(self, now: int) -> None:
        """Appends unanswered too long: the shard crashed handling them, or its process
        died and the restarted one gets them late if at all. Each completes as a
        timed-out write."""
        expired = self.appends.expire(now)
        if not expired:
            return
        if self.appends.first_of_burst():
            self.log.warning("{} append(s) to {} unanswered after {} ms: failed as {}; "
                             "appends given up on so far: {}", len(expired), OFFSETS_TOPIC,
                             self.appends.wait_ms, ErrorCode.REQUEST_TIMED_OUT.name,
                             self.appends.expired)
        now_ms = self.now_ms()
        for _rid, append_id in expired:
            self._perform(self.core.on_append_complete(append_id, ErrorCode.REQUEST_TIMED_OUT,
                                                       now_ms))

    # ---------------------------------------------------------- cluster mode
    @handles(CoordinatorPartitions)
    def on_coordinator_partitions(self, msg: CoordinatorPartitions) -> None:
        """Load the groups of partitions this node now leads; unload those it lost."""
        self._use_partition_count(msg.partition_count)
        if not msg.elected and not msg.resigned:
            self._maybe_load_partitions()
            return
        resigned = {p for p in msg.resigned if p in self.led}
        for p in resigned:
            del self.led[p]
            self.to_load.discard(p)
        unloading = resigned & self.loaded_parts
        if self.phase == "restoring":
            # A resign, or a new epoch, of a partition being restored: its groups restored
            # so far go and the rest is skipped; one still led (elected again, even at the
            # same epoch: the ReplicaManager's _no_role then _roles_applied) is loaded
            # anew, whole, after this restore
            renewed = {row.partition for row in msg.elected
                       if row.partition in self.restore_parts
                       and self.led.get(row.partition) != row.leader_epoch}
            dropped = (resigned | renewed) & self.restore_parts
            unloading |= dropped
            self.restore_parts -= dropped
            self.to_load |= renewed
            self._drop_held(dropped)
        elif self.phase in ("loading", "read-retry"):
            self._drop_held(resigned & self.loading_parts)
            # no longer read (nor its open transactions' records held): the Reads in
            # flight for it alone are forgotten, and with nothing left to read the load ends
            for p in resigned:
                self.read_offsets.pop(p, None)
            self.reads.drop_stale(self.read_offsets)
            if self.phase == "loading" and not self.reads.waiting():
                if self.read_offsets:
                    # what is left failed its last Read: read again after a pause, as
                    # on_read does (a shard refusing them would be asked again at once)
                    self.phase = "read-retry"
                    self.retry_at_ms = self.clock.now_ms() + RETRY_MS
                else:
                    self._finish_load()
        if unloading:
            self.loaded_parts -= unloading
            self._perform(self.core.unload(unloading))
            self.log.info("unloaded the groups of {}-{}", OFFSETS_TOPIC, sorted(unloading))
        # A new epoch for a partition loaded (or being read) here keeps its groups, as
        # Kafka's do (4b75265: Partition.makeLeader answers false for a leader staying
        # leader, so onElection is not called, and GroupMetadataManager's
        # addLoadingPartition refuses a partition it owns; today's CoordinatorRuntime
        # logs "already active"). Unlike the transaction coordinator's, which this
        # project reloads on a new epoch as KRaft-mode Kafka does (BrokerMetadataPublisher
        # calls TransactionCoordinator.onElection for every local leader change, and
        # TransactionStateManager replaces the partition's cache; in ZooKeeper mode,
        # 4b75265, RequestHandlerHelper.onLeadershipChange gates it by the same
        # makeLeader result): the groups held are those of the local log, and another
        # leader's writes can only reach that log through this replica following it,
        # which the ReplicaManager reports as a resign first (the groups unloaded,
        # loaded again on the next election).
        for row in msg.elected:
            if row.partition not in self.led:
                self.to_load.add(row.partition)
            self.led[row.partition] = row.leader_epoch
        if self.phase == "restoring" and not self.restore_parts:
            self._restore_nothing()
        self._maybe_load_partitions()

    def _restore_nothing(self) -> None:
        """Cluster: every partition of the restore dropped: it ends now, not after
        slices that would keep nothing."""
        self.restore_raw = []
        self.restore_groups = {}
        self.restore = []
        self._end_restore()

    def _drop_held(self, partitions: set[int]) -> None:
        """Partitions dropped from a load: the markers met meanwhile and the records of
        open transactions read are not settled or kept for them (their load anew reads
        the log again, every marker written included)."""
        if not partitions:
            return
        self.loading_parts -= partitions
        self.completions_while_loading = [
            c for c in self.completions_while_loading if c.partition not in partitions]
        for p in partitions:
            self.txn_pending.pop(p, None)

    def _maybe_load_partitions(self) -> None:
        if self.phase != "cluster" or not self.to_load or not self.count_known:
            return
        batch, self.to_load = sorted(self.to_load), set()
        self.phase = "loading"
        self.load_started_ms = self.clock.now_ms()
        self.reads.reset()
        self.read_offsets = {p: 0 for p in batch}
        self.loading_parts = set(batch)
        for p in batch:  # read again from the start: nothing held from an earlier read
            self.txn_pending.pop(p, None)
        self.loaded_records = {}
        self._send_reads()

    def _load_open_transactions(self, partitions: set[int]) -> None:
        """Offsets of transactions still open at the end of the load stay pending."""
        for p in partitions:
            for pid, held in self.txn_pending.pop(p, {}).items():
                mine = [(k, v) for _o, k, v in held if k is not None
                        and self.topology.coordinator_for(self._group_of(k)) == self.address]
                if mine:
                    self.core.load_txn_offsets(pid, mine)

    @staticmethod
    def _group_of(key: bytes) -> str:
        try:
            return decode_record(key, None)[0].group
        except OffsetsRecordError:
            return ""

    def _serving_in_cluster(self, msg: Any) -> bool:
        # DescribeGroups and DeleteGroups are judged group by group (_refused_groups),
        # ListGroups by on_list
        code = NONE
        if not self.count_known:
            code = int(self._count_unknown_code())
        else:
            p = self.core.partition_for(msg.group_id)
            if p not in self.led:
                code = NOT_COORDINATOR
            elif p not in self.loaded_parts:
                code = LOAD_IN_PROGRESS
        if code == NONE:
            return True
        if code == NOT_COORDINATOR:
            self.refused_not_coordinator += 1
        else:
            self.refused_loading += 1
        self.reply(refusal_for(msg, code))
        return False

    def _count_unknown_code(self) -> ErrorCode:
        """Without the count no group maps to a partition: LOAD_IN_PROGRESS while this node
        leads some (they load once it comes), NOT_COORDINATOR otherwise; both retriable."""
        return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.led
                else ErrorCode.NOT_COORDINATOR)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {
            "led_partitions": sorted(self.led),
            "loaded_partitions": sorted(self.loaded_parts),
            "refused_not_coordinator": self.refused_not_coordinator,
            "loaded": self.loaded,
            "phase": self.phase,
            "partition_count_known": self.count_known,
            "creates_lost": self.creates_lost,
            "create_answers_stale": self.create_answers_stale,
            "groups": {gid: g.state.value for gid in self.core.group_ids()
                       if (g := self.core.group(gid)) is not None},
            "timers": len(self.timer_id_of),
            "appends_in_flight": len(self.appends),
            "appends_timed_out": self.appends.expired,
            "late_append_answers": self.appends.late,
            "skipped_records": self.core.skipped_records + self.load_skipped,
            "refused_loading": self.refused_loading,
            "restore_slices": self.restore_slices,
            "committed": self._committed(),
        }

    @handles(GetGroupGauges)
    def gauges(self, _msg: GetGroupGauges) -> dict[str, Any]:
        """The metrics endpoint's: the groups counted, not each one's state built."""
        return {"groups": self.core.group_count(), "committed": self._committed()}

    def _committed(self) -> list[list[Any]]:
        """Group, topic, partition, committed offset: the lag metric's other half."""
        return [[gid, tp[0], tp[1], o.offset] for gid in self.core.group_ids()
                if (g := self.core.group(gid)) is not None
                for tp, o in g.offsets.items()]


def spawn_coordinators(node: Any, topology: Topology, config: Config, clock: Any,
                       cluster: bool = False, host: str | None = None) -> None:
    """Called by the Broker at start: one GroupCoordinator per ``num.group.coordinators``;
    ``host``: the worker loop that runs them (actor.threads = single)."""
    for i in range(topology.num_coordinators):
        node.spawn(GroupCoordinator, topology.coordinator(i).name, topology=topology,
                   config=config, clock=clock, cluster=cluster,
                   **({"host": host} if host else {}))

