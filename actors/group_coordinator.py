"""GroupCoordinator: the actor shell around :class:`GroupCoordinatorCore`.

Each coordinator owns the groups with ``topology.coordinator_for(group_id)``
equal to its address; every change to them happens in its thread, one
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
records of the groups it owns and hands them to ``core.load``. Until then every group
request is answered with COORDINATOR_LOAD_IN_PROGRESS, which clients retry. A Read
unanswered after READ_TIMEOUT_MS (lost with its shard, or the shard far behind) is
sent again; the late answer is still taken, and the timeout doubles at each expiry.

The core runs on wall-clock milliseconds (they are persisted as commit
timestamps) derived from the injected monotonic clock plus an offset taken
once at setup, so a wall-clock jump never fires a session timer early.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from actors.coordinator_reads import LoadReading
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
    OffsetsRecordError,
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
    GetStats,
    ProduceReady,
    ReadDone,
    ReadRow,
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
READ_PARTITION_MAX_BYTES = 1024 * 1024
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
        # Latest value per record key, in the order of each key's latest write.
        self.loaded_records: dict[bytes, bytes | None] = {}
        # per partition: records of transactions whose marker the load has not met yet
        self.txn_pending: dict[int, dict[int, list[tuple[int, bytes | None, bytes | None]]]] = {}
        # markers written while their partition was being loaded, settled after the load
        self.completions_while_loading: list[CompleteTxnOffsets] = []
        self.loading_parts: set[int] = set()
        self.load_skipped = 0
        self.load_started_ms = 0
        self.refused_loading = 0
        self.led: dict[int, int] = {}       # cluster: partition -> leader epoch, led here
        self.loaded_parts: set[int] = set()  # cluster: partitions whose groups are loaded
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

    def poll_timeout_ms(self) -> int | None:
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
            self.log.error("cannot create {}: {} ({}); retrying", OFFSETS_TOPIC,
                           ErrorCode(row.error_code).name, row.error_message)
            self.phase = "create-retry"
            self.retry_at_ms = self.clock.now_ms() + RETRY_MS
            return
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
        if self.loaded_parts:
            self._perform(self.core.unload(set(self.loaded_parts)))
            self.log.info("unloaded the groups of {}-{}: its partition count changed or is unknown",
                          OFFSETS_TOPIC, sorted(self.loaded_parts))
            self.loaded_parts = set()
        if self.phase in ("loading", "read-retry"):  # its late answers match nothing
            self.reads.reset()
            self.read_offsets = {}
            self.loaded_records = {}
            for p in self.loading_parts:
                self.txn_pending.pop(p, None)
            self.loading_parts = set()
            self.phase = "cluster"
        self.to_load = set(self.led)

    def _send_reads(self) -> None:
        by_shard: dict[Address, list[ReadRow]] = {}
        for p, offset in self.read_offsets.items():
            by_shard.setdefault(self.topology.shard_for(OFFSETS_TOPIC, p), []).append(
                ReadRow(OFFSETS_TOPIC, p, offset, READ_PARTITION_MAX_BYTES))
        for shard, rows in by_shard.items():
            self._read(shard, rows)

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
        again: list[ReadRow] = []
        for row in msg.rows:
            p = row.partition
            if p not in self.read_offsets or asked.get(p) != self.read_offsets[p]:
                continue  # an overdue answer for a partition read further since
            if row.error_code == OUT_OF_RANGE and row.log_start_offset > self.read_offsets[p]:
                self.read_offsets[p] = row.log_start_offset
                again.append(ReadRow(OFFSETS_TOPIC, p, row.log_start_offset,
                                     READ_PARTITION_MAX_BYTES))
                continue
            if row.error_code != NONE:
                self.log.warning("reading {}-{} failed with {}; retrying", OFFSETS_TOPIC, p,
                                 ErrorCode(row.error_code).name)
                continue
            self._take_records(p, bytes(row.records))
            if self.read_offsets[p] >= row.log_end_offset:
                del self.read_offsets[p]
            else:
                again.append(ReadRow(OFFSETS_TOPIC, p, self.read_offsets[p],
                                     READ_PARTITION_MAX_BYTES))
        if again:
            assert self.current_sender is not None
            self._read(self.current_sender, again)
        self.reads.drop_stale(self.read_offsets)
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
        latest = self.loaded_records
        start = self.read_offsets[p]
        for offset, key, value in records:
            if offset < start or key is None:
                continue
            latest.pop(key, None)
            latest[key] = value
        self.read_offsets[p] = next_offset

    def _owned_records(self) -> list[tuple[bytes, bytes | None]]:
        """The latest records of the groups this coordinator owns; corrupt ones are skipped."""
        mine: list[tuple[bytes, bytes | None]] = []
        for key, value in self.loaded_records.items():
            try:
                k, _v = decode_record(key, value)
            except OffsetsRecordError as exc:
                if str(exc).startswith("unknown __consumer_offsets key version"):
                    mine.append((key, value))  # the core counts what it skips
                else:
                    self.load_skipped += 1
                    self.log.warning("skipping a corrupt record of {}: {}", OFFSETS_TOPIC, exc)
                continue
            if self.topology.coordinator_for(k.group) == self.address:
                mine.append((key, value))
        return mine

    def _finish_load(self) -> None:
        if self.cluster:
            self._finish_partition_load()
            return
        read = len(self.loaded_records)
        records = self._owned_records()
        self.loaded_records = {}
        self._perform(self.core.load(records, self.now_ms()))
        self._load_open_transactions(set(self.txn_pending))
        self._settle_completions_met_while_loading()
        self.loaded = True
        self.phase = "ready"
        self.log.info("loaded {} group(s) from {} latest record(s) ({} owned) of {} in {} ms",
                      len(self.core.group_ids()), read, len(records), OFFSETS_TOPIC,
                      self.clock.now_ms() - self.load_started_ms)

    # ---------------------------------------------------------- requests
    def _rid(self, req_id: int) -> tuple[str, str, int]:
        sender = self.current_sender
        assert sender is not None
        return (sender.node, sender.name, req_id)

    def _serving(self, msg: Any) -> bool:
        if self.cluster:
            return self._serving_in_cluster(msg)
        if self.loaded:
            return True
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
        if self.phase in ("loading", "read-retry") and (
                not self.cluster or msg.partition in self.loading_parts):
            # The partition may be read to its end already, this marker after that read
            # (the shard answered the read first): the offsets it settles are still in
            # txn_pending, not in the core. Settled once the load has put them there.
            self.completions_while_loading.append(msg)
            return
        self._perform(self.core.complete_txn(msg.producer_id, msg.partition, msg.commit))

    def _settle_completions_met_while_loading(self) -> None:
        """After a load: the markers written meanwhile (a marker the load read already
        finds nothing left to settle)."""
        met, self.completions_while_loading = self.completions_while_loading, []
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
        if self._serving(msg):
            self._perform(self.core.list_groups(self._rid(msg.req_id), msg.states))

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
            if not self.loaded:
                refused = dict.fromkeys(group_ids, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
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
        self._perform(self.core.topics_deleted(msg.topics))

    @handles(TopicDeletions)
    def on_topic_deletions(self, msg: TopicDeletions) -> None:
        """A cluster's deletions, from this node's replica manager (its UpdateMetadata)."""
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
        if unloading:
            self.loaded_parts -= unloading
            self._perform(self.core.unload(unloading))
            self.log.info("unloaded the groups of {}-{}", OFFSETS_TOPIC, sorted(unloading))
        for row in msg.elected:
            if row.partition not in self.led:
                self.to_load.add(row.partition)
            self.led[row.partition] = row.leader_epoch
        self._maybe_load_partitions()

    def _maybe_load_partitions(self) -> None:
        if self.phase != "cluster" or not self.to_load or not self.count_known:
            return
        batch, self.to_load = sorted(self.to_load), set()
        self.phase = "loading"
        self.load_started_ms = self.clock.now_ms()
        self.reads.reset()
        self.read_offsets = {p: 0 for p in batch}
        self.loading_parts = set(batch)
        self.loaded_records = {}
        self._send_reads()

    def _finish_partition_load(self) -> None:
        batch = {p for p in self.loading_parts if p in self.led}
        records = [(k, v) for k, v in self._owned_records()
                   if self.core.partition_for(self._group_of(k)) in batch]
        self.loaded_records = {}
        self._perform(self.core.load(records, self.now_ms()))
        self._load_open_transactions(batch)
        self._settle_completions_met_while_loading()
        self.loaded_parts |= batch
        self.phase = "cluster"
        self.log.info("loaded {} group record(s) of {}-{} in {} ms", len(records), OFFSETS_TOPIC,
                      sorted(batch), self.clock.now_ms() - self.load_started_ms)
        self._maybe_load_partitions()

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
        # DescribeGroups and DeleteGroups are judged group by group (_refused_groups)
        groups = [] if isinstance(msg, ListGroups) else [msg.group_id]
        code = NONE
        if not groups and self.led and (not self.count_known
                                        or not self.loaded_parts.issuperset(self.led)):
            # ListGroups while a partition this node leads is not loaded (the count not
            # known yet, or its load under way): the list would miss its groups (Kafka's
            # handleListGroups: COORDINATOR_LOAD_IN_PROGRESS while loading)
            code = LOAD_IN_PROGRESS
        for group_id in groups:
            p = self.core.partition_for(group_id)
            if not self.count_known:
                code = int(self._count_unknown_code())
                break
            if p not in self.led:
                code = NOT_COORDINATOR
                break
            if p not in self.loaded_parts:
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
            # group, topic, partition, committed offset: the lag metric's other half
            "committed": [[gid, tp[0], tp[1], o.offset] for gid in self.core.group_ids()
                          if (g := self.core.group(gid)) is not None
                          for tp, o in g.offsets.items()],
        }


def spawn_coordinators(node: Any, topology: Topology, config: Config, clock: Any,
                       cluster: bool = False) -> None:
    """Called by the Broker at start: one GroupCoordinator per ``num.group.coordinators``."""
    for i in range(topology.num_coordinators):
        node.spawn(GroupCoordinator, topology.coordinator(i).name, topology=topology,
                   config=config, clock=clock, cluster=cluster)

