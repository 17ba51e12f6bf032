"""PartitionShard: the only owner of its partitions' logs and replica state.

Handlers send it whole record batches to append and offsets to read; it
answers with offsets and raw log bytes, or file regions of the segments for
the Processors to send without reading them (Read.regions). Purgatory shards that wait on one of
its partitions register interest, and get a PartitionChanged after every
change of that partition's log end or high watermark.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.core.checkpoint import fsync_dir, write_atomically
from actors.core.delayed_produce_fetch import same_leadership
from actors.core.file_regions import close_regions
from actors.core.follower_truncation import reset_offset, truncation_offset
from actors.core.log_cleaner import describe_cleanable
from actors.core.log_dir import LogDir
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.partition_log import (
    DeletedNotClosedError,
    FlushFailedError,
    PartitionLog,
    SwapRefusedError,
    remove_set_aside,
    set_aside,
)
from actors.core.partition_state import (
    PROPOSAL_RETRY_MS,
    IsrProposal,
    PartitionState,
    delete_records_wait_ms,
)
from actors.core.segment_swap import discard_staging
from actors.core.topic_config import log_config_for
from actors.core.topic_id import (
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)
from actors.log_cleaner import cleanable_row
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.runtime.scheduling import apply_to_worker_loop
from actors.topology import Topology, broker_node_name
from wire.admin_messages import (
    CleanableLogs,
    CleanableLogsDone,
    CleanerLogTruncated,
    DeleteRecords,
    DeleteRecordsDone,
    DeleteRecordsDoneRow,
    DescribeLogDir,
    DescribeLogDirDone,
    LogDirPartitionRow,
    SwapCleanedSegments,
    SwapCleanedSegmentsDone,
    UpdatePartitionConfigs,
)
from wire.broker_messages import (
    LOG_END_READER,
    AbortedTxnRow,
    Append,
    AppendDone,
    AppendDoneRow,
    CheckpointOffsets,
    CheckpointRow,
    DescribeProducers,
    DescribeProducersDone,
    DescribeProducersDoneRow,
    DropPartitions,
    Flush,
    FollowerAck,
    GetStats,
    ListOffsets,
    ListOffsetsDone,
    ListOffsetsDoneRow,
    OpenPartitions,
    PartitionChanged,
    ProducerStateRow,
    Read,
    ReadDone,
    ReadDoneRow,
    ShardDone,
    TopicEntry,
    TopicPartition,
    WatchPartition,
    WatchProduce,
    WatchProduceRow,
)
from wire.cluster_messages import (
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    CancelKeptRoles,
    OfflineReplicaRow,
    PartitionErrorRow,
    ProcessStarted,
    ReplicaStateRow,
    RestoredRoleRow,
    RestoreRoles,
    RoleRefusedRow,
    RolesRestored,
    RolesTaken,
    ShardRestarted,
    TopicIdRow,
    TopicPartitionRow,
)
from wire.errors import ErrorCode, KafkaError, OffsetOutOfRangeError, StorageError
from wire.replication_messages import (
    FollowerApplied,
    FollowerApply,
    FollowerApplyRow,
    FollowerStateRow,
    IsrProposalRow,
    IsrUpdated,
    OffsetForEpochDoneRow,
    OffsetForLeaderEpoch,
    OffsetForLeaderEpochDone,
    ProposeIsr,
    ReplicaRead,
    ReplicaReadDone,
    ReplicaReadDoneRow,
)
from wire.transaction_messages import (
    CompleteTxnOffsets,
    TxnMarkerDoneRow,
    WriteTxnMarkers,
    WriteTxnMarkersDone,
)

NONE = int(ErrorCode.NONE)
UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
# Reads asking for regions: a partition's data of at least REGION_MIN_BYTES comes
# as a file region; smaller amounts are read, while this answer holds less than
# INLINE_MAX_BYTES of them (past that, everything is a region).
REGION_MIN_BYTES = 32 * 1024
INLINE_MAX_BYTES = 1024 * 1024
# Room left in a frame for the envelope and the rows around the records.
FRAME_SLACK_BYTES = 64 * 1024
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
# How long a marker waits for the ISR; shorter than the coordinator's MARKER_TIMEOUT_MS, so
# a slow ISR is answered REQUEST_TIMED_OUT (and the marker sent again) before it gives up.
MARKER_ACKS_TIMEOUT_MS = 3000
# How often the housekeeping warns that deletes it tries again still fail.
DELETE_WARNING_INTERVAL_MS = 60_000
NEVER_MS = 2**63 - 1  # Kafka's Long.MAX_VALUE: a period that never comes
# How many of the roles a BecomeLeaderOrFollower gave at a leader epoch held already its
# one log line names (all are counted: roles_held_already in the replication stats).
ROLES_HELD_LOGGED = 10
# In a partition's directory while its replica's storage failure is not healed (written
# and fsynced when it is marked failed, removed once it is in the ISR at a leader epoch
# after the failure): a process restarted reads it, marks the replica failed again and
# refuses its restored role, so a new controller never elects it with its short log
STORAGE_FAILED_MARKER = "storage-failed"


@dataclass(slots=True)
class Hosted:
    """A partition a shard hosts, as kept across a crash restart (``setup`` rebuilds the
    rest): its topic's configs, whether it is a single node's (it leads alone) or a
    cluster's (the controller gives its role), the offsets its log had when
    ``teardown`` closed it (None before that: the log dir's checkpoints hold them), and
    whether its storage failed (``storage_failed``)."""

    configs: dict[str, str]
    leader_alone: bool
    offsets: CheckpointRow | None = None
    # Why its storage failed (a flush failed, or its log reopened below the high watermark
    # it had), in a cluster: until the controller gave it a role out of the ISR, it takes
    # no role that counts it in the ISR (its log may lack acknowledged records)
    storage_failed: str | None = None
    # the leader epoch it held then (-1: not known, a process restarted): a role at it or
    # older, or restored, is the controller's word from before the failure
    failed_epoch: int = -1
    # whether it led an ISR of itself alone then: only then may it lead an ISR of itself
    # alone again (nobody else had its acknowledged records). A follower that failed and
    # was then elected alone (the leader left before the controller heard of the failure)
    # refuses: the leader that left has what it lost, and would truncate it away
    failed_alone: bool = False
    # its STORAGE_FAILED_MARKER is on disk (removed once it is back in the ISR, or caught
    # up as a follower past ``heal_at``)
    marked_on_disk: bool = False
    # the offset below which it had everything acknowledged before the failure (a leader's
    # high watermark, a follower's log end): a follower at a leader epoch after the failure
    # whose log reaches it again holds what it lost (-1: not known, healed only by a role in
    # the ISR)
    heal_at: int = -1
    # the marker could not be written (the disk is failing): in this process's life it
    # takes no leader role of this partition (one with other replicas), whatever it is
    # told, since a restart would forget the failure
    unmarked: bool = False
    # the id of the topic it belongs to ("": not known, a topic made by an older version)
    topic_id: str = ""
    # and whether it was given late (a directory of another id is the topic's): kept for a
    # reopen after a crash, should the directory's file not have been rewritten yet
    topic_id_adopted: bool = False


@dataclass(slots=True)
class _PendingDelete:
    """A DeleteRecords answer that waits for followers (rows by index in ``waiting``:
    topic, partition, the log start they must reach, the leader epoch it was asked at)."""

    sender: Address
    req_id: int
    rows: list[DeleteRecordsDoneRow]
    waiting: dict[int, tuple[str, int, int, int]]
    deadline_ms: int  # on the monotonic clock: a wall-clock step does not move it
    # per waiting row, the partition's state and its ``changes`` when last checked: the
    # rows whose partition did not change are not checked again until the deadline
    checked: dict[int, tuple[PartitionState, int]] = field(default_factory=dict)


class PartitionShard(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(
        self,
        node: Any,
        name: str,
        *,
        topology: Topology,
        config: Config,
        log_dir: LogDir,
        topics: dict[str, TopicEntry],
        broker_id: int,
        clock: Clock,
        generation: int = 0,
        **kw: Any,
    ) -> None:
        super().__init__(node, name, **kw)
        # The generation of this shard's process (num.processes > 1: 0 at the broker's
        # start, +1 at each restart of the process; a crash restart in place keeps it).
        # An Append stamped older was sent to the process this one replaced, and its
        # handler gave it up (ProcessStarted): refused, never written (on_append).
        self.generation = generation
        # such Appends refused since the start (the stats; logged at 1, 2, 4, 8, ...)
        self.stale_appends_refused = 0
        # partitions whose failed-storage marker could not be removed, warned of once
        self.unmark_warned: set[tuple[str, int]] = set()
        # this shard's process (its index in the broker's processes; None: one process)
        nodes = topology.process_nodes
        self.process_index = nodes.index(node.name) if node.name in nodes else None
        self.clock = clock  # wall time: record timestamps, retention, flush and roll
        # the clock's wall_ns (the builtin for the system clock), read every turn and append:
        # the milliseconds from it without a Python call to wall_ms
        self._wall_ns = clock.wall_ns
        self.topology = topology
        self.config = config
        self.log_dir = log_dir  # the checkpoints read at start; written: delete markers only
        self.initial_topics = topics
        self.broker_id = broker_id
        self.index = int(name.rsplit("-", 1)[1])
        # What this shard hosts, kept here (not in setup) so that a restart after a crash
        # reopens exactly these: the topics given at spawn, those opened since
        # (OpenPartitions, LeaderAndIsr), less those dropped.
        self.hosted: dict[tuple[str, int], Hosted] = {}
        # Partitions deleted since the start: the log dir's offsets for them (read at
        # start) were the deleted log's, not a namesake's created later.
        self.dropped: set[tuple[str, int]] = set()
        # Deleted partitions whose directory could not be set aside (renamed): no longer
        # served nor hosted, tried again by the housekeeping, and no namesake opens the
        # directory meanwhile. And set-aside directories whose removal failed. A delete is
        # marked on disk before its rename (LogDir.mark_delete_pending): those an earlier
        # process of this node left pending, and the log dir could not complete at start,
        # are this shard's undeleted ones from the start.
        self.undeleted: set[tuple[str, int]] = {
            key for key in log_dir.pending_deletes if topology.shard_for(*key) == self.address}
        # partitions whose delete could not be marked on disk, said so once (at error)
        self.delete_unmarked: set[tuple[str, int]] = set()
        self.set_aside_left: list[Path] = []
        # A namesake of an undeleted partition that OpenPartitions (a topic created on a
        # single node) asked for: its configs and its topic's id ("" if not known); opened
        # as soon as the directory goes.
        self.open_later: dict[tuple[str, int], tuple[dict[str, str], str]] = {}
        # A cluster's namesake of an undeleted partition whose role (a LeaderAndIsr, a
        # restore) was refused for it: the newest role given, taken as soon as the
        # directory goes (the ReplicaManager told then: RolesTaken). Kept here, not in
        # setup: nothing asks for the role again after a crash of this shard either (a
        # restore gives it again only if the ReplicaManager still has it on record).
        self.roles_later: dict[tuple[str, int], ReplicaStateRow] = {}
        # The housekeeping's tries that left some of those, and when it next warns so
        # (once a minute: each try's failure is at debug).
        self.failed_delete_tries = 0
        self.warned_delete_tries = 0
        self.next_delete_warning_ms = 0
        # directories of a dead namesake found when opening a partition, deleted (stats)
        self.dead_namesakes_deleted = 0
        # partitions whose partition.metadata could not be written (opened anyway): the
        # failure is logged once each
        self.topic_id_unwritten: set[tuple[str, int]] = set()
        # partitions whose directory of another id was taken for an adopted id (logged once)
        self.readopted_logged: set[tuple[str, int]] = set()
        # Logs whose flush failed since the start (each restarted the shard, which reopened
        # it from its recovery point): kept across restarts, for the stats.
        self.flush_failures = 0
        # the timed flush check's schedule (setup arms it once; kept across restarts)
        self.flush_scheduled = False
        self.flush_wait_ms = 0
        self.next_flush_check_ms: int | None = None

    # ------------------------------------------------------------- lifecycle
    def setup(self) -> None:
        # This runs in the worker loop's thread (a guest shard: its host's): its policy
        apply_to_worker_loop(str(self.config["actor.threads.scheduling"]), self.log.warning)
        # Group commit: logs with batches staged this turn, and the Append answers
        # that wait for them (sender, message, rows, acks=-1 waits), sent at turn end.
        self.staged: dict[tuple[str, int], PartitionState] = {}
        self.unanswered: list[tuple[Address, Append, list[AppendDoneRow],
                                    list[WatchProduceRow], tuple[int, int]]] = []
        self.group_commits = 0
        self.group_committed_appends = 0
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.watchers: dict[tuple[str, int], set[Address]] = {}
        # DeleteRecords answers that wait for the followers' log starts
        self.pending_deletes: list[_PendingDelete] = []
        self._cleaning_skipped: set[str] = set()  # logs a too large report left out
        self.errors_logged: set[tuple[str, int, int]] = set()
        # partitions whose log's failed flush was logged (the log's life: until the
        # restart that reopens it)
        self.flush_failures_logged: set[tuple[str, int]] = set()
        # a FollowerApply's first failed flush, raised once every row is answered
        self.follower_flush_failed: FlushFailedError | None = None
        self._topic_keys: dict[tuple[str, str], tuple[str, str]] = {}
        self.counts = self.node.metrics.mine()  # setup runs in this actor's thread
        now = self.clock.wall_ms()
        self.lag_time_max_ms = int(self.config["replica.lag.time.max.ms"])
        # Kafka checks the ISR every replica.lag.time.max.ms / 2.
        self.isr_check_ms = max(1, self.lag_time_max_ms // 2)
        self.next_isr_check_ms = now + self.isr_check_ms
        # Kafka's PeriodicProducerExpirationCheck, on this actor's housekeeping turn
        self.producer_id_expiration_ms = int(self.config["producer.id.expiration.ms"])
        self.producer_expiry_check_ms = int(
            self.config["producer.id.expiration.check.interval.ms"])
        self.next_producer_expiry_ms = now + self.producer_expiry_check_ms
        # partitions whose pending ISR proposal is sent again (its answer left its fate
        # unknown), and the earliest time one is due
        self.resends: set[tuple[str, int]] = set()
        self.next_resend_ms = now
        self.replication = {"isr_shrinks": 0, "isr_expands": 0, "truncations": 0,
                            "follower_appends": 0}
        # partitions whose role the ReplicaManager gave since this setup (a LeaderAndIsr, a
        # restore): only their leader epochs make a restored role old (a log's own epoch,
        # leading alone, is no word of the controller)
        self.roles_given: set[tuple[str, int]] = set()
        # A cluster's shard answers NOT_LEADER_OR_FOLLOWER for a partition it does not
        # hold, whatever the reason (Kafka's answer for a partition its metadata knows and
        # the broker does not host: the client refreshes its metadata and retries). A
        # request comes here only once a handler's, a coordinator's or a follower's
        # metadata has the partition (a deleted topic's is answered UNKNOWN_TOPIC_OR_PARTITION
        # there), and the shard has no metadata of its own to tell "not yet given"
        # (before the first LeaderAndIsr, before RestoreRoles) from "gone": never
        # UNKNOWN_TOPIC_OR_PARTITION, which a transaction coordinator could take for a
        # deleted partition. A single node holds every partition of the broker: one it
        # does not hold does not exist (UNKNOWN_TOPIC_OR_PARTITION, as Kafka's single
        # broker).
        self.in_cluster = bool(str(self.config["zookeeper.connect"]).strip())
        # A cluster's shard that lost its memory (a crash restarted it in place, or its
        # process restarted) holds no role, and after a process restart no log, until the
        # ReplicaManager's RestoreRoles (or, if that never comes, its next role): the
        # restarted process waits for it before it serves.
        self.awaiting_restore = self.in_cluster and bool(self.crashes or self.generation > 0)
        if self.crashes:
            self._reopen_hosted(now)
        else:
            for topic, entry in self.initial_topics.items():
                for p in range(entry.num_partitions):
                    if self.topology.shard_for(topic, p) != self.address:
                        continue
                    try:
                        self._open(topic, p, entry.configs, now, topic_id=entry.topic_id)
                    except NotDeletedYetError as exc:
                        # a namesake created while its deleted predecessor's directory
                        # could not go, in an earlier process: opened once it does
                        self.open_later[(topic, p)] = (dict(entry.configs), entry.topic_id)
                        self.log.warning("{}; it is opened once that is done", exc)
                    except PartitionMetadataError as exc:
                        # proof of nothing: neither opened nor deleted, and the shard's
                        # other partitions open
                        self.log.error("{}-{} is not opened: its topic id cannot be read "
                                       "({}); its directory is kept as it is", topic, p, exc)
        self.next_housekeeping_ms = now + 1000
        # Kafka's kafka-log-flusher (LogManager, on KafkaScheduler): the logs whose flush.ms
        # has passed are flushed at a check log.initial.task.delay.ms after the start, then
        # every log.flush.scheduler.interval.ms; of no period (<= 0) or Long.MAX_VALUE's
        # (the default), that first check is the only one. flush_wait_ms: the gap to the
        # check due (the step-back rule's bound); next_flush_check_ms None: none to come
        # (armed at the first setup only: a crash restart in place keeps the schedule, as
        # Kafka's flusher is scheduled once however often a log fails)
        self.flush_check_ms = int(self.config["log.flush.scheduler.interval.ms"])
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.flush_wait_ms = int(self.config["log.initial.task.delay.ms"])
            self.next_flush_check_ms = now + self.flush_wait_ms
        self.last_checkpoint_ms = now
        self.last_hw_checkpoint_ms = now
        self.hw_checkpoint_ms = int(self.config["replica.high.watermark.checkpoint.interval.ms"])

    def _open(self, topic: str, partition: int, configs: dict[str, str], now: int,
              leader_alone: bool = True, topic_id: str = "", adopted: bool = False) -> None:
        """Open (or create) the partition's log; a single node leads it alone, a cluster's
        node has no role until one is given (``leader_alone`` False): by the controller's
        LeaderAndIsr, or after a crash or a process restart by the ReplicaManager's
        RestoreRoles.

        ``topic_id`` (if known) is the topic's: a directory (or open log) of another id
        is a deleted namesake's, whose delete never ran here; it is deleted, never
        served, and the partition opened new (``_discard_dead_namesake``). A directory
        with no id (an older version's) is taken as this topic's and given the id. So is
        one of another id when the id is ``adopted`` (given late, to a topic that existed
        without one: the directory's is an id the topic had before, its znode rewritten
        by an older version): rewritten, never deleted."""
        key = (topic, partition)
        if key in self.partitions:
            held = self.hosted.get(key)
            if not topic_id or held is None or held.topic_id == topic_id:
                return
            # opened without an id (an older controller's role): the directory's says
            was = held.topic_id or read_partition_metadata(
                self.log_dir.partition_path(topic, partition)) or ""
            if not was or was == topic_id or adopted:  # adopted
                if was and was != topic_id:
                    self._log_readopted(topic, partition, was, topic_id)
                self._write_topic_id(topic, partition, topic_id)
                held.topic_id = topic_id
                held.topic_id_adopted = adopted
                return
            self.log.warning(
                "{}-{}: open as topic id {}, now given as topic id {}: the open log is a "
                "deleted namesake's (its delete never reached this shard); deleted, and "
                "the partition opened new", topic, partition, was, topic_id)
            try:
                self._delete(topic, partition)
            except Exception as exc:
                raise NotDeletedYetError(
                    f"{topic}-{partition}: the log of a deleted namesake (topic id {was}) "
                    f"could not be deleted ({exc}): the partition is not opened before it "
                    "is") from exc
            self.dead_namesakes_deleted += 1
            self.tell(self.topology.log_manager, CheckpointOffsets(
                self.name, False, [], [TopicPartition(topic, partition)]))
        if key in self.undeleted and not self._delete_again(topic, partition):
            raise NotDeletedYetError(f"{topic}-{partition} was deleted and its directory "
                                     "could not be removed yet: it is not opened before it is")
        directory = self.log_dir.partition_path(topic, partition)
        if topic_id:
            self._discard_dead_namesake(topic, partition, topic_id, adopted)
            if read_partition_metadata(directory) != topic_id:
                # new, an older version's, or (adopted) an id the topic had before: the
                # id is on disk before any record is
                self._write_topic_id(topic, partition, topic_id)
        self.open_later.pop(key, None)  # opened now
        self.roles_later.pop(key, None)  # a role given now is newer than the one kept
        # a new log: its refusals are logged again, once each
        self.errors_logged = {k for k in self.errors_logged if k[:2] != key}
        self.flush_failures_logged.discard(key)
        hosted = self.hosted.get(key)
        offsets = hosted.offsets if hosted is not None else None
        storage_failed = hosted.storage_failed if hosted is not None else None
        failed_epoch = hosted.failed_epoch if hosted is not None else -1
        # a log first opened in this process (restarted): what it led is not known, and a
        # crash's loss is the crash election's, as before (it may lead an ISR of itself)
        failed_alone = hosted.failed_alone if hosted is not None else True
        marked_on_disk = hosted.marked_on_disk if hosted is not None else False
        unmarked = hosted.unmarked if hosted is not None else False
        heal_at = hosted.heal_at if hosted is not None else -1
        if hosted is None and not leader_alone:
            marker = self._read_failed_marker(topic, partition)
            if marker is not None:
                # a failure an earlier process of this node marked, not healed since
                storage_failed, failed_epoch, failed_alone, heal_at = marker
                marked_on_disk = True
        if offsets is not None:
            # Reopened after a crash: the offsets its log had when teardown closed it.
            # The log dir's are from start-up (the LogManager keeps the newer ones), and
            # the scan from the recovery point checks what the crash left on disk.
            recovery_point, log_start = offsets.recovery_point, offsets.log_start_offset
            high_watermark, clean = offsets.high_watermark, False
        elif key in self.dropped:
            recovery_point = log_start = high_watermark = 0
            clean = False
        else:
            recovery_point = self.log_dir.recovery_points.get(key, 0)
            log_start = self.log_dir.log_start_offsets.get(key, 0)
            high_watermark = self.log_dir.high_watermarks.get(key, 0)
            clean = self.log_dir.had_clean_shutdown
        log = PartitionLog.open(
            self.log_dir.partition_path(topic, partition), topic, partition,
            log_config_for(self.config, configs), now, recovery_point=recovery_point,
            log_start_offset=log_start, high_watermark=high_watermark, clean_shutdown=clean,
            producer_id_expiration_ms=self.producer_id_expiration_ms)
        min_isr = int(configs.get("min.insync.replicas", self.config["min.insync.replicas"]))
        self.partitions[key] = (PartitionState.leader_alone(log, self.broker_id, min_isr)
                                if leader_alone else
                                PartitionState.hosted(log, self.broker_id, min_isr,
                                                      self.lag_time_max_ms))
        if log.recovery_cut_bytes:
            self.log.warning("{}-{}: recovery cut {} byte(s) of torn or damaged batches from "
                             "its log; it ends at offset {}", topic, partition,
                             log.recovery_cut_bytes, log.log_end_offset)
        if log.log_end_offset < high_watermark:
            # what it acknowledged (or a leader told it was) is not all in its log: lost
            # with the storage (the pages a failed fsync dropped, a crash's unflushed tail)
            lost = (f"its log reopened at log end {log.log_end_offset}, below the high "
                    f"watermark {high_watermark} it had")
            if leader_alone:
                # nobody to fail over to: it serves on, and says so
                self.log.error("{}-{}: {}: the acknowledged records from offset {} are lost",
                               topic, partition, lost, log.log_end_offset)
            else:
                storage_failed = lost
                heal_at = max(heal_at, high_watermark)
        hosted = self.hosted[key] = Hosted(
            dict(configs), leader_alone, storage_failed=None if leader_alone else storage_failed,
            failed_epoch=failed_epoch, failed_alone=failed_alone, marked_on_disk=marked_on_disk,
            unmarked=unmarked, heal_at=heal_at, topic_id=topic_id, topic_id_adopted=adopted)
        if hosted.storage_failed is not None and not hosted.marked_on_disk:
            self._write_failed_marker(topic, partition, hosted)
        self.log.debug("opened {}-{} at LEO {} HW {}", topic, partition, log.log_end_offset,
                       log.high_watermark)

    def _reopen_hosted(self, now: int) -> None:
        """After a crash (supervision ran teardown, then this setup): reopen every log
        hosted before it, with the offsets teardown recorded.

        A single node's lead alone again at once, and the purgatories watch them again
        (the watchers were forgotten). A cluster's come back with no role (roles lived
        in this shard's memory) and the ReplicaManager is asked for their last roles
        (ShardRestarted): it answers RestoreRoles, which a LeaderAndIsr that waits in
        this mailbox, applied first, wins over; the purgatories are told once they are
        applied."""
        reopened = 0
        cluster = bool(str(self.config["zookeeper.connect"]).strip())
        for (topic, partition), hosted in sorted(self.hosted.items()):
            cluster = cluster or not hosted.leader_alone
            try:
                self._open(topic, partition, hosted.configs, now, hosted.leader_alone,
                           hosted.topic_id, hosted.topic_id_adopted)
                reopened += 1
            except Exception:
                # kept in self.hosted: the next restart, or the next role, tries again
                self.log.exception("cannot reopen {}-{} after a crash", topic, partition)
        self.log.info("reopened {} of the {} partition(s) hosted before the crash", reopened,
                      len(self.hosted))
        notice = ShardRestarted(self.index)
        if cluster:
            self.awaiting_restore = True  # (a cluster's role can be its only sign)
            self.tell(self.topology.replica_manager, notice)
        elif reopened:
            for i in range(self.topology.num_purgatories):
                self.tell(self.topology.purgatory(i), notice)

    def teardown(self) -> None:
        try:
            self._close_logs()
        finally:
            # after the closes: a log whose close failed to flush answers as failed
            self._fail_pending_deletes()
            self.partitions = {}

    def _close_logs(self) -> None:
        self._commit_and_answer()
        now = self.clock.wall_ms()
        rows = []
        # a stop is clean (the LogManager writes the clean-shutdown marker, and the next
        # start scans nothing) only if every log was closed and flushed
        clean = True
        for key, state in self.partitions.items():
            closed = True
            try:
                state.log.close(now)
            except Exception:
                self.log.exception("closing {}-{} failed", state.log.topic, state.log.partition)
                closed = False
            self._report_flush_failure(state.log)  # a failed flush no handler saw
            if not closed or state.log.flush_failed is not None:
                clean = False  # closed as a crash leaves it: the next start scans it
            row = self._offset_row(state)
            hosted = self.hosted.get(key)
            if hosted is not None and not hosted.leader_alone and (
                    not closed or state.log.flush_failed is not None):
                # its unflushed records may be gone (a failed fsync may drop the pages it
                # did not write): reopened, it waits for a role out of the ISR
                if hosted.storage_failed is None:
                    hosted.failed_alone = state.is_leader and state.isr == {self.broker_id}
                hosted.storage_failed = (f"a flush failed ({state.log.flush_failed})"
                                         if state.log.flush_failed is not None
                                         else "closing its log failed")
                hosted.failed_epoch = max(hosted.failed_epoch, state.leader_epoch)
                # a leader acknowledged up to its high watermark; a follower may have
                # been counted up to its log end (its own high watermark lags)
                hosted.heal_at = max(hosted.heal_at, row.high_watermark if state.is_leader
                                     else max(state.log.log_end_offset, row.high_watermark))
                self._write_failed_marker(state.log.topic, state.log.partition, hosted)
            if hosted is not None:
                # what a restart after a crash reopens it with (its recovery point is
                # only what was flushed: a failed close leaves the rest to the scan)
                hosted.offsets = row
            if closed:
                rows.append(row)
        # Only a real stop is final: a crash restart runs teardown too, and must not
        # let the LogManager write the clean-shutdown marker while the node runs. Nor
        # must a stop that left a log unflushed: the next start would not scan it.
        self.tell(self.topology.log_manager,
                  CheckpointOffsets(self.name, self._stopping and clean, rows, []))

    @staticmethod
    def _offset_row(state: PartitionState) -> CheckpointRow:
        log = state.log
        return CheckpointRow(log.topic, log.partition, log.high_watermark, log.recovery_point,
                             log.log_start_offset)

    # ---------------------------------------------------------- housekeeping
    def poll_timeout_ms(self) -> int | None:
        due = min(self.next_housekeeping_ms, self.next_isr_check_ms)
        if self.next_flush_check_ms is not None:
            due = min(due, self.next_flush_check_ms)
        if self.resends:
            due = min(due, self.next_resend_ms)
        wait = due - self._wall_ns() // 1_000_000
        if self.pending_deletes:
            wait = min(wait, min(p.deadline_ms for p in self.pending_deletes)
                       - self.clock.monotonic_ns() // 1_000_000)
        return max(0, wait)

    def on_turn(self) -> None:
        if self.unanswered or self.staged:
            self._commit_and_answer()
        now = self._wall_ns() // 1_000_000
        if self.pending_deletes:
            self._settle_deletes(self.clock.monotonic_ns() // 1_000_000)
        # the wall clock stepped back: a check is not put off by the step's size (as
        # _resend_proposals)
        if (now >= self.next_isr_check_ms
                or self.next_isr_check_ms - now > self.isr_check_ms):
            self.next_isr_check_ms = now + self.isr_check_ms
            self._maybe_shrink_isr(now)
        if self.resends and (now >= self.next_resend_ms
                             or self.next_resend_ms - now > PROPOSAL_RETRY_MS):
            self._resend_proposals(now)
        # (stepped back: as the ISR check; with no check to come, none starts)
        if self.next_flush_check_ms is not None and (
                now >= self.next_flush_check_ms
                or self.next_flush_check_ms - now > self.flush_wait_ms):
            self.flush_wait_ms = self.flush_check_ms
            self.next_flush_check_ms = (now + self.flush_check_ms
                                        if 0 < self.flush_check_ms < NEVER_MS else None)
            for state in self.partitions.values():
                state.log.maybe_flush(now)
        # (stepped back: as the ISR check)
        if now < self.next_housekeeping_ms and self.next_housekeeping_ms - now <= 1000:
            return
        self.next_housekeeping_ms = now + 1000
        if self.undeleted or self.set_aside_left:
            self._retry_deletes()
        if self.topic_id_unwritten:
            self._retry_topic_ids()
        if (now >= self.next_producer_expiry_ms
                or self.next_producer_expiry_ms - now > self.producer_expiry_check_ms):
            self.next_producer_expiry_ms = now + self.producer_expiry_check_ms
            expired = partitions = 0
            for state in self.partitions.values():
                gone = state.log.remove_expired_producers(now)
                if gone:
                    expired += len(gone)
                    partitions += 1
                    self.log.debug("expired producer id(s) of {}-{}: {}", state.log.topic,
                                   state.log.partition, sorted(gone))
            if expired:  # one line a check: a broker may hold many partitions
                self.log.info("{} producer id(s) expired in {} partition(s)", expired,
                              partitions)
        if now - self.last_checkpoint_ms >= min(
            int(self.config["log.flush.offset.checkpoint.interval.ms"]),
            int(self.config["log.retention.check.interval.ms"]),
        ):
            self.last_checkpoint_ms = now
            for state in self.partitions.values():
                deleted = state.log.delete_old_segments(now)
                if deleted:
                    self.log.info("retention deleted {} segment(s) of {}-{}", deleted,
                                  state.log.topic, state.log.partition)
            self._checkpoint()
        elif now - self.last_hw_checkpoint_ms >= self.hw_checkpoint_ms:
            # replica.high.watermark.checkpoint.interval.ms: replication-offset-checkpoint.
            self.last_hw_checkpoint_ms = now
            self._checkpoint()

    def _checkpoint(self) -> None:
        rows = [self._offset_row(s) for s in self.partitions.values()]
        self.tell(self.topology.log_manager, CheckpointOffsets(self.name, False, rows, []))

    @handles(Flush)
    def on_flush(self, _msg: Flush) -> int:
        now = self.clock.wall_ms()
        for state in self.partitions.values():
            state.log.flush(now)
        self._checkpoint()
        return len(self.partitions)

    # ------------------------------------------------------------ partitions
    @handles(OpenPartitions)
    def on_open(self, msg: OpenPartitions) -> None:
        now = self.clock.wall_ms()
        error = ""
        failed: list[TopicPartition] = []
        for row in msg.rows:
            try:
                self._warn_of_an_orphan(row.topic, row.partition)
                self._open(row.topic, row.partition, row.configs, now, topic_id=row.topic_id)
            except NotDeletedYetError as exc:
                # answered failed (it is not served yet), and opened by the housekeeping
                # once the deleted one's directory goes: nothing else would open it
                self.open_later[(row.topic, row.partition)] = (dict(row.configs),
                                                               row.topic_id)
                self.log.warning("{}; it is opened once that is done", exc)
                error = f"{row.topic}-{row.partition}: {exc}; opened once it is"
                failed.append(TopicPartition(row.topic, row.partition))
            except Exception as exc:
                self.log.exception("cannot open {}-{}", row.topic, row.partition)
                error = f"{row.topic}-{row.partition}: {exc}"
                failed.append(TopicPartition(row.topic, row.partition))
        self.reply(ShardDone(msg.req_id, error, failed))

    @handles(DropPartitions)
    def on_drop(self, msg: DropPartitions) -> None:
        """Delete partitions (a deleted topic), open or not: each one's directory is set
        aside (renamed to a ``-delete`` name of its own, as Kafka's), then removed.

        A partition whose directory cannot be renamed is answered failed (``failed``:
        the ReplicaManager answers the controller KAFKA_STORAGE_ERROR for it), is no
        longer served and stays known as not deleted (``undeleted``): the housekeeping
        tries again, and a namesake is not opened on its directory meanwhile. A
        set-aside directory whose removal fails is deleted all the same (no log opens a
        ``-delete`` directory, the log dir removes them at start); the housekeeping
        tries again to remove it.
        """
        dropped: list[TopicPartition] = []
        failed: list[TopicPartition] = []
        error = ""
        for tp in msg.rows:
            try:
                self._delete(tp.topic, tp.partition)
            except Exception as exc:
                # answered, not a crash (a crash's restore would send this drop again)
                self.log.exception("cannot delete {}-{} (tried again later)", tp.topic,
                                   tp.partition)
                error = f"{tp.topic}-{tp.partition}: {exc}"
                failed.append(TopicPartition(tp.topic, tp.partition))
                continue
            dropped.append(TopicPartition(tp.topic, tp.partition))
        if dropped:
            self.tell(self.topology.log_manager, CheckpointOffsets(self.name, False, [], dropped))
        self.reply(ShardDone(msg.req_id, error, failed))

    def _delete(self, topic: str, partition: int) -> None:
        """Forget the partition and set its directory aside; raises if it cannot be (the
        partition is then out of service, its log closed, and known as undeleted).

        Whatever fails on the way, from the first step, leaves it undeleted (kept over a
        crash restart in place), so a namesake opens only once the directory is gone: a
        failure before the mark left it forgotten and known nowhere as deleted, and the
        next role of a namesake opened its directory, deleted records and all."""
        key = (topic, partition)
        state = None
        try:
            # forgotten even if not open (a reopen failed, or a cluster's waiting for its
            # role), or if the delete fails: a later crash must not bring a deleted
            # partition back
            self.hosted.pop(key, None)
            self.roles_given.discard(key)
            self.open_later.pop(key, None)  # a namesake created meanwhile is deleted too
            self.roles_later.pop(key, None)  # and so is a role kept for it
            state = self.partitions.pop(key, None)
            self._mark_deleting(topic, partition)
            if state is None:
                # not open (a cluster's process opens nothing at start; a reopen
                # failed): its directory goes all the same, or a later topic of the
                # name would open the deleted one's data
                left = self._set_aside(topic, partition)
            else:
                # forgotten first: a failure telling them leaves none behind
                watchers = self.watchers.pop(key, None)
                if watchers:
                    gone = PartitionChanged(PartitionState.gone_status(topic, partition), None)
                    for watcher in watchers:
                        self.tell(watcher, gone)
                try:
                    left = state.log.delete()  # a failed rename leaves it open, unchanged
                except DeletedNotClosedError as exc:
                    # renamed aside: deleted all the same; what is left goes later
                    self.log.exception("deleting {}-{}: {}", topic, partition, exc)
                    left = exc.left
        except Exception:
            self.undeleted.add(key)
            if state is not None:
                try:
                    state.log.close_without_flush()
                except Exception:
                    self.log.exception("closing {}-{} failed", topic, partition)
            raise
        self._deleted(topic, partition, left, "" if state is not None else " (not open)")

    def _write_topic_id(self, topic: str, partition: int, topic_id: str) -> None:
        """Write the partition's ``partition.metadata``. A failed write (ENOSPC, say) does
        not keep the partition closed: a directory without the file is this topic's (as
        an older version's is), and housekeeping writes it again; logged once."""
        key = (topic, partition)
        directory = self.log_dir.partition_path(topic, partition)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_partition_metadata(directory, topic_id)
        except OSError as exc:
            if key not in self.topic_id_unwritten:
                self.topic_id_unwritten.add(key)
                self.log.warning("{}-{}: its topic id {} could not be written in {} ({}); "
                                 "opened without it, written again each second", topic,
                                 partition, topic_id, directory, exc)
            return
        self.topic_id_unwritten.discard(key)

    def _retry_topic_ids(self) -> None:
        """Write again the ``partition.metadata`` a failed write left out (housekeeping):
        meanwhile the directory, without the file, would be taken as any namesake's."""
        for key in sorted(self.topic_id_unwritten):
            hosted = self.hosted.get(key)
            if hosted is None or not hosted.topic_id:
                self.topic_id_unwritten.discard(key)  # not hosted here any more
                continue
            self._write_topic_id(key[0], key[1], hosted.topic_id)
            if key not in self.topic_id_unwritten:
                self.log.info("{}-{}: its topic id written now", *key)

    def _log_readopted(self, topic: str, partition: int, was: str, topic_id: str) -> None:
        """Logged once per partition: a directory of another id taken as this topic's."""
        if (topic, partition) in self.readopted_logged:
            return
        self.readopted_logged.add((topic, partition))
        self.log.warning("{}-{}: its directory holds topic id {}, and the topic's id {} was "
                         "given late (its znode rewritten without an id, by an older "
                         "version): the directory is the topic's, its id rewritten",
                         topic, partition, was, topic_id)

    def _warn_of_an_orphan(self, topic: str, partition: int) -> None:
        """A partition just created (a single node's OpenPartitions, or a cluster's
        LeaderAndIsr marked new) whose directory is there already, with no topic id: a
        directory no topic named (left by hand, or by an older version's lost delete). Its
        log is opened as the new partition's, records and all (as Kafka, whose LogManager
        loads every partition directory at start and a new topic gets the log of its
        name); one warning with its size, so that the records are not taken silently. One
        of another id is a deleted namesake's (``_discard_dead_namesake`` says so)."""
        key = (topic, partition)
        directory = self.log_dir.partition_path(topic, partition)
        if key in self.partitions or key in self.undeleted or not directory.is_dir():
            return
        try:
            if read_partition_metadata(directory) is not None:
                return
        except PartitionMetadataError:
            return  # the open says it
        self.log.warning(
            "{}-{}: created, and its directory {} was there already ({} bytes, no topic "
            "id: a partition directory no topic named): its log is opened as the new "
            "partition's, its records kept", topic, partition, directory,
            _dir_bytes(directory))

    def _discard_dead_namesake(self, topic: str, partition: int, topic_id: str,
                               adopted: bool = False) -> None:
        """Delete the partition's directory if it holds another topic id than ``topic_id``:
        a deleted namesake left it (its delete was lost with a crash: the topic table, or
        the role on record, is the new topic's already). Deleted as any delete (marked,
        set aside, removed), never opened; raises NotDeletedYetError if it cannot be yet
        (the caller keeps the open for later, as for any undeleted namesake), and
        PartitionMetadataError if the file is damaged (proof of nothing: neither opened
        nor deleted)."""
        key = (topic, partition)
        directory = self.log_dir.partition_path(topic, partition)
        if not directory.is_dir():
            return
        found = read_partition_metadata(directory)
        if found is None or found == topic_id:
            return
        if adopted:  # the caller rewrites the file
            self._log_readopted(topic, partition, found, topic_id)
            return
        self.log.warning("{}-{}: its directory holds topic id {}, not {}: a deleted namesake's "
                         "whose delete was lost; it is deleted ({}, {} bytes), not opened, and "
                         "the partition starts new", topic, partition, found, topic_id,
                         directory, _dir_bytes(directory))
        self.dead_namesakes_deleted += 1
        self.hosted.pop(key, None)  # what was kept of it (offsets, failures) was the dead one's
        self._mark_deleting(topic, partition)
        try:
            left = self._set_aside(topic, partition)
        except OSError as exc:
            self.undeleted.add(key)
            raise NotDeletedYetError(
                f"{topic}-{partition}: the directory of a deleted namesake (topic id {found}) "
                f"could not be removed yet ({exc}): it is not opened before it is") from exc
        if not self._deleted(topic, partition, left, f" (a dead namesake's, topic id {found})"):
            raise NotDeletedYetError(
                f"{topic}-{partition}: the delete of a deleted namesake's directory (topic id "
                f"{found}) is not complete yet: it is not opened before it is")
        self.tell(self.topology.log_manager, CheckpointOffsets(
            self.name, False, [], [TopicPartition(topic, partition)]))

    def _mark_deleting(self, topic: str, partition: int) -> None:
        """Mark the delete on disk before the directory is renamed aside: if the rename
        fails, a restart of this process must not open the directory again as a live
        partition (LogDir.open completes the delete, or leaves it pending). If not even
        the mark can be written, it is said once, and the delete goes on unmarked."""
        try:
            self.log_dir.mark_delete_pending(topic, partition)
        except OSError as exc:
            if (topic, partition) not in self.delete_unmarked:
                self.delete_unmarked.add((topic, partition))
                self.log.error("{}-{}: its delete could not be marked on disk ({}): should "
                               "its directory not be set aside either, a restart of this "
                               "process would open it again", topic, partition, exc)

    def _set_aside(self, topic: str, partition: int) -> Path | None:
        """Set aside and remove a partition's directory that no log has open; the
        set-aside directory if its removal failed."""
        path = self.log_dir.partition_path(topic, partition)
        if not path.exists():
            return None
        aside = set_aside(path)
        return None if remove_set_aside(aside) else aside

    def _deleted(self, topic: str, partition: int, left: Path | None, how: str) -> bool:
        """The directory is gone (set aside): the delete is done once its record in the
        log dir (if the mark went there) is gone too; until then it stays undeleted (no
        namesake opens: a restart would delete the namesake's directory). Whether done."""
        key = (topic, partition)
        if key in self.log_dir.recovery_points or key in self.log_dir.high_watermarks:
            self.dropped.add(key)  # only start-up offsets can be a namesake's
        if left is not None:
            self.set_aside_left.append(left)
        try:
            self.log_dir.clear_delete_record(topic, partition)
        except OSError as exc:
            # warned of once, then with the housekeeping's other failed tries
            say = self.log.debug if key in self.undeleted else self.log.warning
            self.undeleted.add(key)
            say("deleted {}-{}{}; its delete record could not be removed yet ({}): no "
                "namesake is opened before it is", topic, partition, how, exc)
            return False
        self.undeleted.discard(key)
        self.delete_unmarked.discard(key)
        if left is not None:
            self.log.warning("deleted {}-{}{}; its set-aside directory {} could not be "
                             "removed yet", topic, partition, how, left.name)
        else:
            self.log.info("deleted {}-{}{}", topic, partition, how)
        return True

    def _delete_again(self, topic: str, partition: int) -> bool:
        """Try again to set aside the directory of an undeleted partition."""
        try:
            left = self._set_aside(topic, partition)
        except OSError as exc:
            self.log.debug("{}-{}: its directory still cannot be set aside: {}", topic,
                           partition, exc)
            return False
        if not self._deleted(topic, partition, left, " (its delete had failed)"):
            return False
        self.tell(self.topology.log_manager, CheckpointOffsets(
            self.name, False, [], [TopicPartition(topic, partition)]))
        return True

    def _retry_deletes(self) -> None:
        now = self.clock.wall_ms()
        taken: list[ReplicaStateRow] = []
        failed: list[OfflineReplicaRow] = []
        refused: list[RoleRefusedRow] = []
        for topic, partition in sorted(self.undeleted):
            if not self._delete_again(topic, partition):
                continue
            role = self.roles_later.pop((topic, partition), None)
            if role is not None:
                self._take_role_later(role, now, taken, failed, refused)
                continue
            later = self.open_later.pop((topic, partition), None)
            if later is None:
                continue
            configs, topic_id = later
            try:
                self._open(topic, partition, configs, now, topic_id=topic_id)
            except Exception:
                self.log.exception("cannot open {}-{}, created while its deleted namesake "
                                   "was being removed", topic, partition)
            else:
                self.log.info("opened {}-{}, created while its deleted namesake was being "
                              "removed", topic, partition)
        if taken or failed or refused:
            self.tell(self.topology.replica_manager,
                      RolesTaken(self.index, taken, failed, refused))
        self.set_aside_left = [aside for aside in self.set_aside_left
                               if not remove_set_aside(aside)]
        if self.undeleted or self.set_aside_left:
            self.failed_delete_tries += 1
            if now >= self.next_delete_warning_ms:
                # each try's failure is at debug: one warning a minute says it goes on
                self.next_delete_warning_ms = now + DELETE_WARNING_INTERVAL_MS
                self.log.warning(
                    "{} tries ({} since the last warning) left {} deleted partition(s) whose "
                    "directory cannot be set aside ({}) and {} set-aside directory(ies) not "
                    "removed ({}); trying again every second", self.failed_delete_tries,
                    self.failed_delete_tries - self.warned_delete_tries, len(self.undeleted),
                    ", ".join(f"{t}-{p}" for t, p in sorted(self.undeleted)),
                    len(self.set_aside_left), ", ".join(a.name for a in self.set_aside_left))
                self.warned_delete_tries = self.failed_delete_tries
        else:
            # all gone: a later failed delete is warned of at its first retry
            self.next_delete_warning_ms = 0

    def _take_role_later(self, role: ReplicaStateRow, now: int, taken: list[ReplicaStateRow],
                         failed: list[OfflineReplicaRow], refused: list[RoleRefusedRow]
                         ) -> None:
        """Take the role kept for a namesake now that its deleted predecessor's directory
        is gone; added to ``taken`` if it is, else to ``refused`` (said once, here or by
        ``_storage_refuses``): the ReplicaManager learns it at once (RolesTaken), not at
        this shard's next restore."""
        try:
            code = self._take_role(role, now, failed)
        except Exception:
            self.log.exception("cannot open {}-{}, given a role while its deleted namesake "
                               "was being removed: the ReplicaManager is told",
                               role.topic, role.partition)
            code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        if code != NONE:
            refused.append(RoleRefusedRow(role.topic, role.partition, role.leader_epoch, code))
            return
        taken.append(role)
        self.log.info("{}-{}: its deleted namesake's directory is gone: the role given "
                      "meanwhile ({} at leader epoch {}) is taken", role.topic,
                      role.partition, "leader" if role.leader == self.broker_id
                      else f"following {role.leader}", role.leader_epoch)

    def _keep_role_later(self, role: ReplicaStateRow, exc: NotDeletedYetError,
                         awaiting: list[TopicPartitionRow]) -> None:
        """A role refused because a deleted partition of the name still has its directory:
        kept (the newest given) and taken once the directory goes."""
        key = (role.topic, role.partition)
        kept = self.roles_later.get(key)
        if kept is None or role.leader_epoch >= kept.leader_epoch:
            self.roles_later[key] = role
        awaiting.append(TopicPartitionRow(role.topic, role.partition))
        self.log.warning("{}; its role at leader epoch {} is taken once it is", exc,
                         role.leader_epoch)

    @handles(CancelKeptRoles)
    def on_cancel_kept_roles(self, msg: CancelKeptRoles) -> None:
        """A StopReplica without delete: the roles kept for these partitions (until a
        deleted namesake's directory goes) are the controller's no more, and are never
        taken."""
        dropped = [f"{r.topic}-{r.partition}@{role.leader_epoch}" for r in msg.rows
                   if (role := self.roles_later.pop((r.topic, r.partition), None)) is not None]
        if dropped:
            self.log.info("the role(s) kept for {} (until their deleted namesakes' "
                          "directories go) cancelled: stopped by the controller",
                          ", ".join(dropped))

    @handles(UpdatePartitionConfigs)
    def on_update_configs(self, msg: UpdatePartitionConfigs) -> None:
        """A topic's overrides changed: its logs take the new settings now."""
        error = ""
        failed: list[TopicPartition] = []
        for row in msg.rows:
            key = (row.topic, row.partition)
            state = self.partitions.get(key)
            if state is None:
                if key in self.open_later:
                    # not open yet (its deleted namesake's directory is still there): the
                    # housekeeping opens it with these
                    self.open_later[key] = (dict(row.configs), self.open_later[key][1])
                if key in self.roles_later:
                    self.roles_later[key] = self.roles_later[key]._replace(
                        configs=dict(row.configs))
                continue
            try:
                state.log.update_config(log_config_for(self.config, row.configs))
                state.min_insync_replicas = int(row.configs.get(
                    "min.insync.replicas", self.config["min.insync.replicas"]))
                hosted = self.hosted.get((row.topic, row.partition))
                if hosted is not None:
                    hosted.configs = dict(row.configs)
            except Exception as exc:
                self.log.exception("cannot apply new configs to {}-{}", row.topic,
                                   row.partition)
                error = f"{row.topic}-{row.partition}: {exc}"
                failed.append(TopicPartition(row.topic, row.partition))
        self.reply(ShardDone(msg.req_id, error, failed))

    # ------------------------------------------------------------ admin
    @handles(DeleteRecords)
    def on_delete_records(self, msg: DeleteRecords) -> None:
        """Kafka's DeleteRecords on a leader: the log start moves up to the offset (-1: the
        high watermark); segments wholly below it are deleted now."""
        rows: list[DeleteRecordsDoneRow] = []
        waiting: dict[int, tuple[str, int, int, int]] = {}
        moved: list[PartitionState] = []
        now = self.clock.wall_ms()
        unflushed: FlushFailedError | None = None
        for req in msg.rows:
            state = self.partitions.get((req.topic, req.partition))
            if state is None:
                rows.append(DeleteRecordsDoneRow(req.topic, req.partition, -1, self._not_hosted(),
                                                 "this broker does not host the partition"))
                continue
            if not state.is_leader:
                rows.append(DeleteRecordsDoneRow(req.topic, req.partition, -1, NOT_LEADER,
                                                 "this broker does not lead the partition"))
                continue
            log = state.log
            offset = log.high_watermark if req.offset == -1 else req.offset
            try:
                if not log.config.delete:
                    raise KafkaError(f"records of {req.topic}-{req.partition} cannot be "
                                     f"deleted: its cleanup.policy is "
                                     f"{','.join(log.config.cleanup_policy) or 'empty'}",
                                     ErrorCode.POLICY_VIOLATION)
                if offset < 0:
                    raise OffsetOutOfRangeError(f"offset {offset} is negative")
                if log.increment_log_start_offset(offset):
                    moved.append(state)
                    deleted = log.delete_old_segments(now, retention=False)
                    self.log.info("DeleteRecords moved the log start of {}-{} to {} "
                                  "({} segment(s) deleted)", req.topic, req.partition,
                                  log.log_start_offset, deleted)
            except KafkaError as exc:
                if isinstance(exc, FlushFailedError):
                    # a roll's flush failed: answered, then the shard restarts (below)
                    self._report_flush_failure(log)
                    unflushed = exc
                elif isinstance(exc, StorageError):
                    # a roll's write of this turn's staged batches failed: told now
                    self._fail_lost_rows(req.topic, req.partition, state, [], [])
                rows.append(DeleteRecordsDoneRow(req.topic, req.partition, -1, int(exc.code),
                                                 str(exc)))
                continue
            low = state.low_watermark()
            if low < offset:
                # answered once every ISR follower's log start is there too (Kafka's
                # requiredOffset: the offset asked, not a log start already past it):
                # before, a follower elected leader would bring the deleted records back
                waiting[len(rows)] = (req.topic, req.partition, offset, state.leader_epoch)
            rows.append(DeleteRecordsDoneRow(req.topic, req.partition, low, NONE, None))
        if moved:
            self.tell(self.topology.log_manager, CheckpointOffsets(
                self.name, False, [self._offset_row(s) for s in moved], []))
        if waiting:
            assert self.current_sender is not None
            self.pending_deletes.append(_PendingDelete(
                self.current_sender, msg.req_id, rows, waiting,
                self.clock.monotonic_ns() // 1_000_000
                + delete_records_wait_ms(msg.timeout_ms)))
            # a timeout_ms of 0 (or the cap's) answers now, REQUEST_TIMED_OUT if it must
            self._settle_deletes(self.clock.monotonic_ns() // 1_000_000)
        else:
            self.reply(DeleteRecordsDone(msg.req_id, rows))
        if unflushed is not None:
            # the log flushes no more: the restart reopens it from its recovery point;
            # the answers that wait are given now (the restart forgets them)
            self._fail_pending_deletes()
            raise unflushed

    def _fail_pending_deletes(self) -> None:
        """Answer every waiting DeleteRecords row: the shard restarts or stops, and forgets
        what waits. A partition whose log failed is KAFKA_STORAGE_ERROR (Kafka's offline
        partition), any other NOT_LEADER_OR_FOLLOWER (the client asks the leader again)."""
        pending, self.pending_deletes = self.pending_deletes, []
        for p in pending:
            for index, (topic, partition, _required, _epoch) in p.waiting.items():
                state = self.partitions.get((topic, partition))
                if state is not None and state.log.flush_failed is not None:
                    p.rows[index] = DeleteRecordsDoneRow(
                        topic, partition, -1, int(ErrorCode.KAFKA_STORAGE_ERROR),
                        f"the log of {topic}-{partition} failed to flush")
                else:
                    p.rows[index] = DeleteRecordsDoneRow(
                        topic, partition, -1, NOT_LEADER,
                        "the partition's shard restarted or stopped before the followers "
                        "moved their log start")
            self.tell(p.sender, DeleteRecordsDone(p.req_id, p.rows))

    def _settle_deletes(self, now_mono_ms: int) -> None:
        """Answer the DeleteRecords whose partitions' low watermarks reached the offsets
        asked, as Kafka's DelayedDeleteRecords: a partition gone is UNKNOWN_TOPIC_OR_PARTITION,
        one whose leadership moved NOT_LEADER_OR_FOLLOWER, one past the deadline
        REQUEST_TIMED_OUT with the low watermark it has then."""
        still: list[_PendingDelete] = []
        for pending in self.pending_deletes:
            expired = now_mono_ms >= pending.deadline_ms
            for index, (topic, partition, required, epoch) in list(pending.waiting.items()):
                state = self.partitions.get((topic, partition))
                last = pending.checked.get(index)
                if (not expired and state is not None and last is not None
                        and last[0] is state and last[1] == state.changes):
                    continue
                if state is None:
                    row = DeleteRecordsDoneRow(topic, partition, -1, UNKNOWN_TP,
                                               "the partition is no longer hosted here")
                elif not state.is_leader or not same_leadership(state, epoch):
                    row = DeleteRecordsDoneRow(topic, partition, -1, NOT_LEADER,
                                               "this broker no longer leads the partition")
                else:
                    low = state.low_watermark()
                    if low >= required:
                        row = DeleteRecordsDoneRow(topic, partition, low, NONE, None)
                    elif expired:
                        row = DeleteRecordsDoneRow(
                            topic, partition, low, int(ErrorCode.REQUEST_TIMED_OUT),
                            f"the in-sync replicas' log start did not reach {required}")
                    else:
                        pending.checked[index] = (state, state.changes)
                        continue
                pending.rows[index] = row
                del pending.waiting[index]
            if pending.waiting:
                still.append(pending)
            else:
                self.tell(pending.sender, DeleteRecordsDone(pending.req_id, pending.rows))
        self.pending_deletes = still

    @handles(DescribeLogDir)
    def on_describe_log_dir(self, msg: DescribeLogDir) -> None:
        wanted = None if msg.rows is None else {(r.topic, r.partition) for r in msg.rows}
        rows = [LogDirPartitionRow(t, p, state.log.size_in_bytes,
                                   max(0, state.log.high_watermark - state.log.log_end_offset))
                for (t, p), state in sorted(self.partitions.items())
                if wanted is None or (t, p) in wanted]
        try:
            fs = os.statvfs(self.log_dir.path)
            total, usable = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
        except OSError:
            total = usable = -1
        self.reply(DescribeLogDirDone(msg.req_id, str(self.log_dir.path), total, usable, rows))

    # ------------------------------------------------------------ cleaning
    @handles(CleanableLogs)
    def on_cleanable_logs(self, msg: CleanableLogs) -> None:
        """The LogCleaner asks: every compacted log, its closed segments and settings."""
        rows = []
        cleaned = {(r.topic, r.partition): r.offset for r in msg.checkpoints}
        for key, state in self.partitions.items():
            if not state.log.config.compact:
                continue
            rows.append(cleanable_row(describe_cleanable(state.log, cleaned.get(key))))
        self.reply(CleanableLogsDone(msg.req_id, rows))

    @handles(SwapCleanedSegments)
    def on_swap_cleaned(self, msg: SwapCleanedSegments) -> None:
        """Swap in the cleaned copies, in this thread, unless the log moved on."""
        state = self.partitions.get((msg.topic, msg.partition))
        if state is None:
            self.reply(SwapCleanedSegmentsDone(msg.req_id, msg.topic, msg.partition, False,
                                               "the partition is gone"))
            return
        log = state.log
        try:
            log.replace_cleaned_segments(
                msg.staging, [(s.base_offset, s.size_bytes) for s in msg.old_segments],
                list(msg.new_bases), msg.generation, self.clock.wall_ms(),
                dropped_aborts=msg.dropped_aborts)
        except SwapRefusedError as exc:
            discard_staging(log.dir, msg.staging)
            self.reply(SwapCleanedSegmentsDone(msg.req_id, msg.topic, msg.partition, False,
                                               str(exc)))
            return
        except Exception as exc:
            # Past the commit the log is completed from its manifest when reopened:
            # the restart (supervision) does that.
            self.reply(SwapCleanedSegmentsDone(msg.req_id, msg.topic, msg.partition, False,
                                               f"swap failed: {exc!r}"))
            raise
        self.node.metrics.incr("log_cleaner_swaps")
        self.reply(SwapCleanedSegmentsDone(msg.req_id, msg.topic, msg.partition, True, ""))

    # ---------------------------------------------------------------- produce
    @handles(Append)
    def on_append(self, msg: Append) -> None:
        """Append each partition's batch; the answer waits for the turn's group commit.

        Batches on the log's common path are staged, not written: at the end of
        the turn (on_turn) every staged log is written with one writev, and then
        the answers go out, so nothing is acknowledged before it is written.
        """
        if msg.generation < self.generation and msg.generation >= 0:
            self._refuse_stale_append(msg)
            return
        rows: list[AppendDoneRow] = []
        waiting: list[WatchProduceRow] = []
        now = self._wall_ns() // 1_000_000
        staged = self.staged
        unflushed: FlushFailedError | None = None
        try:
            for req in msg.rows:
                topic, partition = req.topic, req.partition
                state = self.partitions.get((topic, partition))
                if state is None:
                    rows.append(AppendDoneRow(topic, partition, self._not_hosted(), -1, -1, -1,
                                              None))
                    continue
                failed = state.log.flush_failed
                if failed is not None:
                    # its flush failed (in this Append, below): refused, and the shard
                    # restarts after this Append (whatever path let a failure go on)
                    self._report_flush_failure(state.log)
                    rows.append(AppendDoneRow(topic, partition, int(failed.code), -1, -1,
                                              state.log.log_start_offset, str(failed)))
                    unflushed = unflushed or failed
                    continue
                if not state.is_leader:
                    rows.append(AppendDoneRow(topic, partition, NOT_LEADER, -1, -1, -1, None))
                    continue
                if msg.acks == -1 and not state.has_enough_replicas():
                    rows.append(AppendDoneRow(
                        topic, partition, int(ErrorCode.NOT_ENOUGH_REPLICAS), -1, -1, -1,
                        f"ISR has {len(state.isr)} replicas, "
                        f"min.insync.replicas is {state.min_insync_replicas}"))
                    continue
                log = state.log
                try:
                    info = log.append_as_leader(req.records, state.leader_epoch, now,
                                                msg.coordinator, defer=True)
                except FlushFailedError as exc:
                    # The log's flush failed: a roll's before the batch (not in the log), or
                    # the one flush.messages asked for right after it (UnflushedAppendError:
                    # in the log). Answered KAFKA_STORAGE_ERROR, as Kafka does (the
                    # producer was promised that flush). The record may remain in the log
                    # (the restart reopens it from the recovery point and keeps what is
                    # whole), as in Kafka once the log dir is back: a producer without
                    # idempotence that sends it again may find it twice. The other rows
                    # go on; then the failure goes on to the shard's restart, which reopens
                    # the log from its recovery point (as Kafka takes a failed log dir
                    # offline): the log flushes no more until then.
                    self._report_flush_failure(log)
                    self._log_refusal(topic, partition, exc)
                    rows.append(AppendDoneRow(topic, partition, int(exc.code), -1, -1,
                                              log.log_start_offset, str(exc)))
                    unflushed = exc
                    continue
                except KafkaError as exc:
                    if isinstance(exc, StorageError):
                        # a failed write put back this turn's staged batches too
                        self._fail_lost_rows(topic, partition, state, rows, waiting)
                    self._log_refusal(topic, partition, exc)
                    rows.append(AppendDoneRow(topic, partition, int(exc.code), -1, -1,
                                              log.log_start_offset, str(exc),
                                              getattr(exc, "record_errors", ())))
                    continue
                # The batch is in the log, or staged for the turn's write: its row and its
                # wait are recorded before anything else can fail, so that a failure from
                # here on answers it at its offset (after the turn's write; acks=-1
                # through the purgatory), never as failed: the producer would send it
                # again, and the log would hold it twice.
                if log.segments[-1].staged_bytes:  # log.staged_bytes, without its call
                    staged[(topic, partition)] = state
                first, last = info.first_offset, info.last_offset
                rows.append(AppendDoneRow(topic, partition, NONE, first,
                                          info.log_append_time_ms, info.log_start_offset, None))
                try:
                    state.on_leader_append()
                finally:
                    # acks=-1 waits unless the ISR holds it already (a leader alone), the
                    # bookkeeping failed or not (it only moves the high watermark up)
                    if msg.acks == -1 and log.high_watermark <= last:
                        waiting.append(WatchProduceRow(
                            topic, partition, last + 1, first, info.log_append_time_ms,
                            info.log_start_offset, state.leader_epoch, NONE))
                try:
                    log.maybe_flush(now)
                except FlushFailedError as exc:
                    # flush.ms's flush, after the batch (answered at its offset): the shard
                    # restarts after this Append, as above
                    self._report_flush_failure(log)
                    unflushed = exc
                self._count(topic, "in", len(req.records), last - first + 1)
                self._notify(state)
            if unflushed is not None:
                raise unflushed  # every row answered: after the turn's write (below)
        except Exception:
            # Rows recorded before the failure keep their offsets (answering them as
            # failed would make non-idempotent producers write them twice), and go out as
            # any answer does: after the turn's staged writes (a failed write makes them
            # KAFKA_STORAGE_ERROR), an acks=-1 row the ISR lacks through the purgatory,
            # never NONE at once (a failure in _notify, after the row, acknowledged a
            # record only this leader had).
            assert self.current_sender is not None
            self.unanswered.append((self.current_sender, msg, rows + [
                AppendDoneRow(r.topic, r.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR), -1, -1,
                              -1, "internal error")
                for r in msg.rows[len(rows):]
            ], waiting, self._trace))
            self._commit_and_answer()
            raise
        assert self.current_sender is not None
        if staged or self.unanswered:
            # The answer leaves at the end of the turn: it keeps this Append's trace.
            self.unanswered.append((self.current_sender, msg, rows, waiting, self._trace))
        else:
            self._answer(self.current_sender, msg, rows, waiting)

    def _refuse_stale_append(self, msg: Append) -> None:
        """An Append stamped with an older generation of this process: its sender sent it
        to the process this one replaced (a link kept it while the process was away and
        delivers it now, or the sender had not yet learnt of the restart). The sender gave
        it up, or will when ProcessStarted reaches it, closing the client's connection; the
        client sends the records again (under a new producer epoch, if a later answer told
        it they were not written). Written now, they would be in the log twice: refused,
        nothing written, whatever gave this shard its roles."""
        self.stale_appends_refused = refused = self.stale_appends_refused + 1
        if refused & (refused - 1) == 0:
            self.log.warning("refused an Append stamped with generation {} of this process "
                             "(it is generation {}): sent before the restart, given up by "
                             "its sender; {} refused so far", msg.generation,
                             self.generation, refused)
        self.reply(AppendDone(msg.req_id, [
            AppendDoneRow(r.topic, r.partition, NOT_LEADER, -1, -1, -1,
                          "sent to this broker process before it restarted")
            for r in msg.rows]))
        if self.process_index:
            # The sender learns the generation here should the notice of the restart not
            # have reached it yet (or never: it would be refused for good), as from that
            # notice: it gives up what it still waits for from this process (sent before,
            # stamped older: refused here, or lost with the old process) and stamps its
            # next Appends with this generation. After this answer, on the same link.
            # Told at every refusal, not once per sender: should this notice be lost too,
            # the next refusal tells it again. A burst of stale Appends (a link's backlog)
            # costs the handler a burst of notices it ignores once it knows (not newer).
            self.reply(ProcessStarted(self.process_index, True, self.generation))

    def _commit_and_answer(self) -> None:
        """Write every staged log (one writev each), then send the answers that waited.

        A log whose write failed was put back as it was before the staged
        batches: their rows are answered KAFKA_STORAGE_ERROR.
        """
        failed: dict[tuple[str, int], tuple[StorageError, int]] = {}
        if self.staged:
            self.group_commits += 1
            for key, state in self.staged.items():
                lost = state.log.commit_lost()
                if lost is not None:
                    # the batches the failed write put back: those at or past the log end
                    # it left
                    failed[key] = lost
                    self.log.error("lost the staged appends of {}-{}: {}", key[0], key[1],
                                   lost[0])
            self.staged = {}
        answers, self.unanswered = self.unanswered, []
        self.group_committed_appends += len(answers)
        saved = self._trace
        for sender, msg, rows, waiting, trace in answers:
            self._trace = trace
            if failed:
                rows, waiting = _without_lost(rows, waiting, failed)
            self._answer(sender, msg, rows, waiting)
        self._trace = saved

    def _fail_lost_rows(self, topic: str, partition: int, state: PartitionState,
                        rows: list[AppendDoneRow], waiting: list[WatchProduceRow]) -> None:
        """A StorageError from a write to the log (an append's, a marker's, a roll's): a
        failed write may have put the log back as it was before batches staged earlier
        in this turn, whose rows (this Append's ``rows`` and ``waiting``, and the
        answers that wait) say they are written. The log's commit tells (and forgets)
        that error now, before a later append takes their offsets again (the log
        refuses every append until then): the rows at or past the log end become
        KAFKA_STORAGE_ERROR."""
        found = state.log.commit_lost()
        if found is None:
            return
        self.log.error("lost the staged appends of {}-{}: {}", topic, partition, found[0])
        lost = {(topic, partition): found}
        rows[:], waiting[:] = _without_lost(rows, waiting, lost)
        self.unanswered = [(sender, msg, *_without_lost(r, w, lost), trace)
                           for sender, msg, r, w, trace in self.unanswered]

    def _answer(self, sender: Address, msg: Append, rows: list[AppendDoneRow],
                waiting: list[WatchProduceRow]) -> None:
        if waiting:
            self._watch_produce(sender, msg, rows, waiting)
        else:
            self.tell(sender, AppendDone(msg.req_id, rows))

    @handles(WriteTxnMarkers)
    def on_write_txn_markers(self, msg: WriteTxnMarkers) -> None:
        """Commit/abort markers from a transaction coordinator, as control batches.

        Written with acks=-1, as Kafka does: refused NOT_ENOUGH_REPLICAS (nothing appended)
        while the ISR is smaller than ``min.insync.replicas``, so the coordinator sends it
        again until the ISR is back; a marker the ISR does not hold yet is answered through
        the purgatory (ProduceReady) once the high watermark passes it.
        Answered at once, a leader killed before its followers copied the marker would
        leave the new leader without it while the coordinator, told it was written, marks
        the transaction complete: its records there would stay open (below the LSO) for good.
        """
        rows: list[TxnMarkerDoneRow] = []
        appended: list[AppendDoneRow] = []
        waiting: list[WatchProduceRow] = []
        now = self.clock.wall_ms()
        unflushed: FlushFailedError | None = None
        broken: set[tuple[str, int]] = set()
        for req in msg.rows:
            state = self.partitions.get((req.topic, req.partition))
            failed = None if state is None else state.log.flush_failed
            if (req.topic, req.partition) in broken or failed is not None:
                # its log's flush failed (below): nothing more is written to it before the
                # restart (the fsync tried again would say it succeeded, and a marker
                # written now would be answered as flushed)
                if unflushed is None:
                    assert state is not None and failed is not None
                    self._report_flush_failure(state.log)
                    unflushed = failed  # whatever path let it go on: the restart mends it
                code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                rows.append(TxnMarkerDoneRow(req.topic, req.partition, code))
                appended.append(AppendDoneRow(req.topic, req.partition, code, -1, -1, -1,
                                              str(unflushed)))
                continue
            if state is None or not state.is_leader:
                code = self._not_hosted() if state is None else NOT_LEADER
                rows.append(TxnMarkerDoneRow(req.topic, req.partition, code))
                appended.append(AppendDoneRow(req.topic, req.partition, code, -1, -1, -1, None))
                continue
            if not state.has_enough_replicas():
                # Kafka's acks=-1 check before the append: a marker written now would become
                # visible once the shrunken ISR holds it, below the durability asked for
                code = int(ErrorCode.NOT_ENOUGH_REPLICAS)
                rows.append(TxnMarkerDoneRow(req.topic, req.partition, code))
                appended.append(AppendDoneRow(req.topic, req.partition, code, -1, -1, -1, None))
                continue
            try:
                info = state.log.append_control(req.producer_id, req.producer_epoch, req.commit,
                                                req.coordinator_epoch, state.leader_epoch, now)
            except KafkaError as exc:
                if isinstance(exc, FlushFailedError):
                    # The log's flush failed: a roll's before the marker (not in the log),
                    # or the one flush.messages asked for after it (UnflushedAppendError:
                    # in the log). Answered KAFKA_STORAGE_ERROR, as an Append's (and
                    # Kafka's), its outcome untold to the group coordinators; the
                    # coordinator sends it again, and a marker with no open transaction
                    # changes nothing. The marker may remain in the log. Then the failure
                    # goes on (the shard's restart, which reopens the log from its recovery
                    # point); the partition's later markers here are refused.
                    self._report_flush_failure(state.log)
                    unflushed = exc
                    broken.add((req.topic, req.partition))
                elif isinstance(exc, StorageError):
                    # the write of this turn's staged batches (before the marker) failed:
                    # told now, so the later appends of the turn are not refused
                    self._fail_lost_rows(req.topic, req.partition, state, [], [])
                self._log_refusal(req.topic, req.partition, exc)
                rows.append(TxnMarkerDoneRow(req.topic, req.partition, int(exc.code)))
                appended.append(AppendDoneRow(req.topic, req.partition, int(exc.code), -1, -1,
                                              -1, None))
                continue
            state.on_leader_append()
            self._notify(state)
            if req.topic == OFFSETS_TOPIC:
                # This node's group coordinators learn the producer's offsets' fate here,
                # from the leader that wrote the marker (as Kafka's WriteTxnMarkers handler
                # does): the transaction coordinator may die before it hears of the write.
                for i in range(self.topology.num_coordinators):
                    self.tell(self.topology.coordinator(i), CompleteTxnOffsets(
                        req.producer_id, req.partition, req.commit))
            rows.append(TxnMarkerDoneRow(req.topic, req.partition, NONE))
            appended.append(AppendDoneRow(req.topic, req.partition, NONE, info.first_offset, -1,
                                          info.log_start_offset, None))
            if state.log.high_watermark <= info.last_offset:
                waiting.append(WatchProduceRow(
                    req.topic, req.partition, info.last_offset + 1, info.first_offset, -1,
                    info.log_start_offset, state.leader_epoch, NONE))
        if not waiting:
            self.reply(WriteTxnMarkersDone(msg.req_id, rows))
        else:
            sender = self.current_sender
            assert sender is not None
            self._watch_produce(sender, Append(msg.req_id, -1, MARKER_ACKS_TIMEOUT_MS, []),
                                appended, waiting)
        if unflushed is not None:
            raise unflushed

    def _watch_produce(self, sender: Address, msg: Append, rows: list[AppendDoneRow],
                       waiting: list[WatchProduceRow]) -> None:
        """acks=-1 and the ISR is behind: the purgatory answers the handler later."""
        by_key = {(w.topic, w.partition): w for w in waiting}
        wait_rows = []
        for r in rows:  # rows not waiting are settled already: carried along as they are
            waits = by_key.get((r.topic, r.partition))
            wait_rows.append(waits or WatchProduceRow(
                r.topic, r.partition, -1, r.base_offset, r.log_append_time_ms,
                r.log_start_offset, None, r.error_code))
        first = waiting[0]
        purgatory = self.topology.purgatory_for(first.topic, first.partition)
        # The handler's node, unless it is the purgatory's own: with num.processes > 1 and
        # fewer purgatories than processes, a handler and a shard of process k wait in a
        # purgatory of process 0 (their node left out, it answered process 0's handler)
        self.tell(purgatory, WatchProduce(msg.req_id, sender.name, msg.timeout_ms, wait_rows,
                                          "" if sender.node == purgatory.node
                                          else sender.node))

    def _count(self, topic: str, direction: str, size: int, records: int) -> None:
        """Bytes and records in or out of a topic (metrics)."""
        keys = self._topic_keys.get((topic, direction))
        if keys is None:
            keys = self._topic_keys[(topic, direction)] = (
                f"topic_bytes_{direction}_total|topic={topic}",
                f"topic_records_{direction}_total|topic={topic}")
        counts = self.counts  # this thread's counters, added to directly
        counts[keys[0]] += size
        counts[keys[1]] += max(0, records)

    def _report_flush_failure(self, log: PartitionLog) -> None:
        """A log's flush failed: said at ERROR once per log (its refusals after that are
        warned of once by _log_refusal), and counted for the stats."""
        failed = log.flush_failed
        key = (log.topic, log.partition)
        if failed is None or key in self.flush_failures_logged:
            return
        self.flush_failures_logged.add(key)
        self.flush_failures += 1
        code = "?" if failed.errno is None else errno.errorcode.get(failed.errno, failed.errno)
        self.log.error("the flush of {}-{} failed (segment {}, errno {}): {}; nothing after "
                       "offset {} is known to be on disk: the log is reopened from there (the "
                       "shard's restart, or the next start)", log.topic, log.partition,
                       failed.segment, code, failed, log.recovery_point)

    def _log_refusal(self, topic: str, partition: int, exc: KafkaError) -> None:
        key = (topic, partition, int(exc.code))
        if key not in self.errors_logged:  # once per partition and error
            self.errors_logged.add(key)
            self.log.warning("refused a batch for {}-{}: {} ({})", topic, partition,
                             exc.code.name, exc)

    # ------------------------------------------------------------------ fetch
    @handles(Read)
    def on_read(self, msg: Read) -> None:
        rows: list[ReadDoneRow] = []
        # The request's max_bytes is a budget over its partitions, as in Kafka: only
        # the first partition with data may go over it (one whole batch at least).
        budget = msg.max_bytes
        if not msg.regions:  # bytes travel in the answer: keep it within one frame
            budget = min(budget, max(self._max_frame - FRAME_SLACK_BYTES, 1))
        inline = 0  # bytes read into this answer (regions: small amounts only)
        got_data = False
        try:
            for req in msg.rows:
                topic, partition, offset = req.topic, req.partition, req.fetch_offset
                state = self.partitions.get((topic, partition))
                if state is None:
                    rows.append(ReadDoneRow(topic, partition, self._not_hosted(), -1, -1, b"", 0,
                                            0, -1))
                    continue
                refused = state.check_client_epoch(req.current_leader_epoch)
                if refused != NONE:
                    rows.append(ReadDoneRow(topic, partition, refused, -1, -1, b"", 0, 0, -1))
                    continue
                log = state.log
                # A replica's fetch over the Kafka wire counts as its log end only within
                # the log: an offset past the end (a bad or stray client naming a replica
                # id) would move the high watermark over records that replica lacks.
                if (msg.replica_id >= 0 and log.log_start_offset <= offset <= log.log_end_offset
                        and state.on_follower_fetch(msg.replica_id, offset,
                                                    self.clock.wall_ms())):
                    self._notify(state, ack=FollowerAck(msg.replica_id, offset))  # HW moved
                to_log_end = msg.replica_id >= 0 or msg.replica_id == LOG_END_READER
                committed = msg.isolation_level == 1 and not to_log_end
                max_offset = (None if to_log_end
                              else log.last_stable_offset if committed else log.high_watermark)
                limit = min(req.partition_max_bytes, budget) if budget > 0 else -1
                region_min = None
                if msg.regions:
                    region_min = REGION_MIN_BYTES if inline < INLINE_MAX_BYTES else 1
                try:
                    info = log.read(offset, limit, max_offset, not got_data,
                                    region_min_bytes=region_min)
                except OffsetOutOfRangeError:
                    rows.append(ReadDoneRow(topic, partition, int(ErrorCode.OFFSET_OUT_OF_RANGE),
                                            log.high_watermark, log.log_start_offset, b"", 0, 0,
                                            log.log_end_offset))
                    continue
                meta = info.fetch_offset_metadata
                size = len(info.records) if info.region is None else info.region.length
                if size:
                    self._count(topic, "out", size, log.offset_after(meta, size) - offset)
                    got_data = True
                    budget -= size
                    if info.region is None:
                        inline += size
                aborted = None
                fetch_position = (meta.segment_base_offset, meta.relative_position_in_segment)
                if committed:
                    aborted = [AbortedTxnRow(a.producer_id, a.first_offset)
                               for a in log.aborted_transactions(offset, max_offset or 0)]
                    if not size and log.high_watermark > offset:
                        # Stopped by an open transaction: a waiting fetch counts what is
                        # appended after the high watermark (the marker among it), not the
                        # open transaction's bytes, or it would wake at once, read nothing
                        # and spin (Kafka's DelayedFetch waits on the LSO).
                        hw = log.high_watermark_metadata
                        fetch_position = (hw.segment_base_offset,
                                          hw.relative_position_in_segment)
                rows.append(ReadDoneRow(topic, partition, NONE, info.high_watermark,
                                        info.log_start_offset, bytes(info.records),
                                        fetch_position[0], fetch_position[1],
                                        info.log_end_offset, info.region,
                                        log.last_stable_offset, aborted))
        except Exception:
            close_regions(rows)
            self.reply(ReadDone(msg.req_id, [
                ReadDoneRow(r.topic, r.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR), -1, -1,
                            b"", 0, 0, -1)
                for r in msg.rows
            ]))
            raise
        self.reply(ReadDone(msg.req_id, rows))

    def on_refused(self, address: Address, msg: Any, frame_bytes: int) -> None:
        """A ReadDone too large for a frame still answers its Read: with an error per row."""
        if type(msg) is ReadDone:
            close_regions(msg.rows)
            self.tell(address, ReadDone(msg.req_id, [
                ReadDoneRow(r.topic, r.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR), -1, -1,
                            b"", 0, 0, -1)
                for r in msg.rows]))
        elif type(msg) is CleanableLogsDone:
            self._smaller_cleanable_report(address, msg, frame_bytes)
        else:
            super().on_refused(address, msg, frame_bytes)

    def _smaller_cleanable_report(self, address: Address, msg: CleanableLogsDone,
                                  frame_bytes: int) -> None:
        """A cleanable-logs report over the frame limit (logs whose dirty part holds very
        many aborted transactions, as before their first cleaning) is sent again with the
        logs of the most aborts reported as having nothing to clean (no segments, no
        aborts: the cleaner keeps their checkpoints and leaves them), so the others are
        still cleaned. Refused again, it strips more; with nothing left to strip, the
        cleaner's scan times out."""
        rows = list(msg.rows)
        total = sum(len(r.aborted_txns) for r in rows)
        fits = total * self._max_frame // (2 * frame_bytes)  # with room to spare
        stripped = []
        for i in sorted(range(len(rows)), key=lambda i: -len(rows[i].aborted_txns)):
            if total <= fits or not rows[i].aborted_txns:
                break
            total -= len(rows[i].aborted_txns)
            rows[i] = rows[i]._replace(segments=[], aborted_txns=[])
            stripped.append(f"{rows[i].topic}-{rows[i].partition}")
        if not stripped:
            super().on_refused(address, msg, frame_bytes)
            return
        if set(stripped) != self._cleaning_skipped:  # once per change, not every scan
            self.log.warning("not cleaning {} now: their aborted transactions would not fit "
                             "the report to the log cleaner ({} bytes)", ", ".join(stripped),
                             frame_bytes)
        self._cleaning_skipped = set(stripped)
        self.tell(address, CleanableLogsDone(msg.req_id, rows))

    @handles(ListOffsets)
    def on_list_offsets(self, msg: ListOffsets) -> None:
        rows: list[ListOffsetsDoneRow] = []
        for req in msg.rows:
            topic, partition, ts = req.topic, req.partition, req.timestamp
            state = self.partitions.get((topic, partition))
            if state is None:
                rows.append(ListOffsetsDoneRow(topic, partition, self._not_hosted(), -1, -1, -1))
                continue
            refused = state.check_client_epoch(req.current_leader_epoch)
            if refused != NONE:
                rows.append(ListOffsetsDoneRow(topic, partition, refused, -1, -1, -1))
                continue
            log = state.log
            # read_committed sees up to the last stable offset (Kafka's lastFetchableOffset)
            visible = log.last_stable_offset if msg.isolation_level == 1 else log.high_watermark
            # The leader epoch answered (v4+) is that of the offset answered, as Kafka's
            # fetchOffsetByTimestamp, read from the leader epoch cache (not the batch): the
            # epoch holding the offset for a record found, the cache's first epoch for the
            # log start (if that entry starts there or below), the current leader epoch
            # for the latest; -1 when no record is found (Kafka's default).
            if ts == -2:
                cached = log.epoch_cache.entries
                first = cached[0][0] if cached and cached[0][1] <= log.log_start_offset else -1
                rows.append(ListOffsetsDoneRow(topic, partition, NONE, -1, log.log_start_offset,
                                               first))
            elif ts == -1:
                rows.append(ListOffsetsDoneRow(topic, partition, NONE, -1, visible,
                                               state.leader_epoch))
            elif ts == -3 or (isinstance(ts, int) and ts >= 0):
                found = (self._max_timestamp_offset(log, visible) if ts == -3
                         else log.offset_for_timestamp(ts))
                if found is None or found[0] >= visible:
                    rows.append(ListOffsetsDoneRow(topic, partition, NONE, -1, -1, -1))
                else:
                    rows.append(ListOffsetsDoneRow(topic, partition, NONE, found[1], found[0],
                                                   log.epoch_cache.epoch_for_offset(found[0])))
            else:  # the handler answers these UNSUPPORTED_VERSION before asking (Kafka's)
                rows.append(ListOffsetsDoneRow(topic, partition, int(ErrorCode.INVALID_REQUEST),
                                               -1, -1, -1))
        self.reply(ListOffsetsDone(msg.req_id, rows))

    @handles(OffsetForLeaderEpoch)
    def on_offset_for_leader_epoch(self, msg: OffsetForLeaderEpoch) -> None:
        """Kafka's lastOffsetForLeaderEpoch on the leader: the client's epoch checked, then
        the end of the largest epoch not above the one asked (the log end for the current
        epoch; (-1, -1) when the log knows none)."""
        rows: list[OffsetForEpochDoneRow] = []
        for req in msg.rows:
            topic, partition = req.topic, req.partition
            state = self.partitions.get((topic, partition))
            if state is None:
                rows.append(OffsetForEpochDoneRow(topic, partition, self._not_hosted(), -1, -1))
                continue
            refused = state.check_client_epoch(req.current_leader_epoch)
            if refused != NONE:
                rows.append(OffsetForEpochDoneRow(topic, partition, refused, -1, -1))
                continue
            epoch, end = state.log.end_offset_for_epoch(req.leader_epoch)
            if end < 0:  # Kafka answers no epoch with no offset (UnifiedLog.endOffsetForEpoch)
                epoch = -1
            rows.append(OffsetForEpochDoneRow(topic, partition, NONE, epoch, end))
        self.reply(OffsetForLeaderEpochDone(msg.req_id, rows))

    @handles(DescribeProducers)
    def on_describe_producers(self, msg: DescribeProducers) -> None:
        """Kafka's Partition.activeProducerState: every producer the partition's state
        holds, on a leader or a follower (each keeps the state from the batches it
        appends); the coordinator epoch is that of the producer's last marker (-1: none)."""
        rows: list[DescribeProducersDoneRow] = []
        for topic, partition in msg.rows:
            state = self.partitions.get((topic, partition))
            if state is None:
                rows.append(DescribeProducersDoneRow(topic, partition, self._not_hosted(), []))
                continue
            producer_state = state.log.producer_state
            ongoing = producer_state.ongoing_txns
            producers = [
                ProducerStateRow(pid, entry.producer_epoch, entry.last_seq,
                                 entry.last_timestamp, entry.coordinator_epoch,
                                 ongoing.get(pid, -1))
                for pid, entry in producer_state.producers.items()]
            # an open transaction whose producer's entry is gone (never expected: an
            # entry with an open transaction does not expire) is still shown
            producers.extend(ProducerStateRow(pid, -1, -1, -1, -1, first)
                             for pid, first in ongoing.items()
                             if pid not in producer_state.producers)
            rows.append(DescribeProducersDoneRow(topic, partition, NONE, producers))
        self.reply(DescribeProducersDone(msg.req_id, rows))

    @staticmethod
    def _max_timestamp_offset(log: PartitionLog, visible: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp.

        ListOffsets -3 (KIP-734). Segments know their max timestamp from their
        batch headers; the record is then found like a by-timestamp lookup.
        Records above the high watermark are not visible to consumers, so a
        maximum found there is not reported. One below the log start (DeleteRecords,
        or retention within a segment) in a segment still held is: Kafka's
        UnifiedLog.fetchOffsetByTimestamp takes the max over every segment held and
        does not compare it with the log start.
        """
        max_ts = max((segment.max_timestamp_ms for segment in log.segments), default=-1)
        if max_ts < 0:
            return None
        found = log.offset_for_timestamp(max_ts, below_log_start=True)
        if found is None or found[0] >= visible:
            return None
        return found

    # ------------------------------------------------------------- watchers
    @handles(WatchPartition)
    def on_watch(self, msg: WatchPartition) -> None:
        key = (msg.topic, msg.partition)
        assert self.current_sender is not None
        if not msg.watch:
            watchers = self.watchers.get(key)
            if watchers is not None:
                watchers.discard(self.current_sender)
                if not watchers:
                    del self.watchers[key]
            return
        self.watchers.setdefault(key, set()).add(self.current_sender)
        state = self.partitions.get(key)
        if state is None:
            self.reply(PartitionChanged(PartitionState.gone_status(msg.topic, msg.partition)))
        else:
            # Always answer once: the watcher decides with fresh numbers, so an
            # append that landed between its read and this watch is not missed.
            self.reply(PartitionChanged(state.status()))

    def _notify(self, state: PartitionState, removed: bool = False,
                ack: FollowerAck | None = None) -> None:
        key = (state.log.topic, state.log.partition)
        watchers = self.watchers.get(key)
        if not watchers:
            return
        status = (PartitionState.gone_status(*key) if removed else state.status())
        for watcher in watchers:
            self.tell(watcher, PartitionChanged(status, ack))

    # ------------------------------------------------------------- cluster
    @handles(BecomeLeaderOrFollower)
    def on_become_leader_or_follower(self, msg: BecomeLeaderOrFollower) -> None:
        """The roles a LeaderAndIsr gave (the ReplicaManager fenced it already).

        A log not hosted yet is opened or created. Waiting produces and fetches
        of a partition that stopped leading are answered NOT_LEADER_OR_FOLLOWER
        through the watchers. A role at a leader epoch this shard holds already (given
        in this life) is answered as applied and not applied again: a duplicate, or a
        resend queued behind the original, would forget the leader's pending ISR
        proposal and its followers' state (Kafka applies a leader epoch once).
        """
        now = self.clock.wall_ms()
        rows: list[PartitionErrorRow] = []
        failed: list[OfflineReplicaRow] = []  # refused: its storage failed
        held_already: list[str] = []  # "topic-partition@held epoch", logged once below
        awaiting: list[TopicPartitionRow] = []  # refused: a deleted namesake's dir is there
        confirmed: list[TopicIdRow] = []  # an adopted id read back from the disk
        for row in msg.rows:
            key = (row.topic, row.partition)
            held = self.partitions.get(key)
            if held is not None and key in self.roles_given \
                    and held.leader_epoch >= row.leader_epoch:
                held_already.append(f"{row.topic}-{row.partition}@{held.leader_epoch}")
                rows.append(PartitionErrorRow(row.topic, row.partition, NONE))
                self._confirm_topic_id(row, confirmed)
                continue
            try:
                code = self._take_role(row, now, failed)
            except NotDeletedYetError as exc:
                # not a storage failure: the role is kept, and taken once the directory goes
                self._keep_role_later(row, exc, awaiting)
                code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            except Exception:
                self.log.exception("cannot open {}-{}", row.topic, row.partition)
                code = int(ErrorCode.KAFKA_STORAGE_ERROR)
            rows.append(PartitionErrorRow(row.topic, row.partition, code))
            if code == NONE:
                self._confirm_topic_id(row, confirmed)
        if held_already:
            # counted per role, logged once per message (a resend of a LeaderAndIsr for
            # every partition of the node is one line, not one per partition)
            self.replication["roles_held_already"] = (
                self.replication.get("roles_held_already", 0) + len(held_already))
            shown = ", ".join(held_already[:ROLES_HELD_LOGGED])
            more = len(held_already) - ROLES_HELD_LOGGED
            self.log.info("{} role(s) at a leader epoch held already not applied again "
                          "(request {}; partition@leader epoch held): {}{}",
                          len(held_already), msg.req_id, shown,
                          f" and {more} more" if more > 0 else "")
        self.reply(BecameLeaderOrFollower(msg.req_id, rows, failed, awaiting, confirmed))

    def _confirm_topic_id(self, row: ReplicaStateRow, confirmed: list[TopicIdRow]) -> None:
        """Add ``row``'s partition to ``confirmed`` if its role's id is adopted and its
        ``partition.metadata``, read back from the disk, holds it: the controller clears a
        topic's adoption once every replica has said so, and only on what the disk says
        (a write that failed left the earlier id there, retried by housekeeping)."""
        if not (row.topic_id and row.topic_id_adopted):
            return
        try:
            found = read_partition_metadata(self.log_dir.partition_path(row.topic, row.partition))
        except PartitionMetadataError:
            return  # damaged or unreadable: proves nothing
        if found == row.topic_id:
            confirmed.append(TopicIdRow(row.topic, row.partition, row.topic_id))

    def _take_role(self, row: ReplicaStateRow, now: int,
                   failed: list[OfflineReplicaRow]) -> int:
        """Open (or create) the partition's log and take ``row``'s role: NONE, or
        KAFKA_STORAGE_ERROR if its storage failed (added to ``failed``). Raises if the
        log cannot be opened (NotDeletedYetError: a deleted namesake's directory is still
        there)."""
        key = (row.topic, row.partition)
        if row.is_new:  # the controller's LeaderAndIsr of a partition it just created
            self._warn_of_an_orphan(row.topic, row.partition)
        self._open(row.topic, row.partition, dict(row.configs), now, leader_alone=False,
                   topic_id=row.topic_id, adopted=row.topic_id_adopted)
        if self._storage_refuses(row.topic, row.partition, row.leader, list(row.isr),
                                 list(row.replicas), row.leader_epoch, failed,
                                 restored=False):
            return int(ErrorCode.KAFKA_STORAGE_ERROR)
        state = self.partitions[key]
        self.roles_given.add(key)
        was_leader = state.is_leader
        if row.leader == self.broker_id:
            state.become_leader(row.leader_epoch, list(row.isr), list(row.replicas),
                                row.partition_epoch, now)
        else:
            state.become_follower(row.leader, row.leader_epoch, list(row.isr),
                                  list(row.replicas), row.partition_epoch)
        self._healed(row.topic, row.partition, row.leader, list(row.isr), row.leader_epoch)
        if was_leader or state.is_leader:
            self._notify(state)
        return NONE

    def _storage_refuses(self, topic: str, partition: int, leader: int, isr: list[int],
                         replicas: list[int], leader_epoch: int,
                         failed: list[OfflineReplicaRow], restored: bool) -> bool:
        """A replica whose storage failed takes no role until the controller has taken it
        offline (Kafka's OfflineReplica: out of the ISR, led elsewhere): its log may lack
        records the ISR acknowledged, which a follower would truncate to, or an election
        from the ISR would lose. Refused (answered KAFKA_STORAGE_ERROR), the ReplicaManager
        tells the controller, which writes the partition at a new leader epoch and gives
        every replica its role. Taken then: a role newer than every one it refused (or held
        at the failure) that counts it out of the ISR, or leading an ISR of itself alone
        if it led one alone at the failure, or is the only replica (nobody else has more;
        a follower that failed and was elected alone before the controller heard of it
        refuses: the leader gone has what it lost). A restored role is the controller's
        word from before the failure, and a follower's ISR may be older than the leader's
        (an expansion it was not told of): neither is taken. The mark goes, and it
        truncates to its leader and catches up as any follower. A refused role is added
        to ``failed``, which the ReplicaManager reports to the controller."""
        hosted = self.hosted.get((topic, partition))
        if hosted is None:
            return False
        me = self.broker_id
        if hosted.storage_failed is None:
            if not (hosted.unmarked and leader == me and list(replicas) != [me]):
                return False
            # its failure could not be made durable: it leads nothing in this life
            failed.append(OfflineReplicaRow(topic, partition, False, leader_epoch))
            self.replication["storage_refused"] = self.replication.get("storage_refused", 0) + 1
            self.log.warning("{}-{}: its storage failed and the mark could not be written: the "
                             "leader role at leader epoch {} refused (KAFKA_STORAGE_ERROR)",
                             topic, partition, leader_epoch)
            return True
        # out of the ISR at the leader epoch refused (the controller's current role, sent
        # again: it was out of the ISR already) or newer; leading alone only at a newer one
        out_of_isr = leader != me and me not in isr and leader_epoch >= hosted.failed_epoch
        may_lead_alone = hosted.failed_alone or list(replicas) == [me]
        alone = leader == me and list(isr) == [me] and may_lead_alone \
            and leader_epoch > hosted.failed_epoch
        if not restored and (out_of_isr or alone):
            self.log.info("{}-{}: its storage failed ({}); it takes the role {} at leader "
                          "epoch {} and serves again", topic, partition, hosted.storage_failed,
                          "out of the ISR" if out_of_isr else "of an ISR of itself alone",
                          leader_epoch)
            hosted.storage_failed = None
            return False
        hosted.failed_epoch = max(hosted.failed_epoch, leader_epoch)
        failed.append(OfflineReplicaRow(topic, partition, may_lead_alone, leader_epoch))
        self.replication["storage_refused"] = self.replication.get("storage_refused", 0) + 1
        self.log.warning("{}-{}: its storage failed ({}): the {}role {} ISR {} at leader "
                         "epoch {} refused (KAFKA_STORAGE_ERROR) until the controller takes "
                         "it offline", topic, partition, hosted.storage_failed,
                         "restored " if restored else "",
                         "leading" if leader == me else f"following {leader} in the", isr,
                         leader_epoch)
        return True

    def _failed_marker_path(self, topic: str, partition: int) -> Path:
        return Path(self.log_dir.partition_path(topic, partition)) / STORAGE_FAILED_MARKER

    def _write_failed_marker(self, topic: str, partition: int, hosted: Hosted) -> None:
        """Make the replica's failure durable (STORAGE_FAILED_MARKER, written and fsynced):
        the controller's memory of it, and this process's, do not outlive a restart. Not
        written (the disk is failing): it takes no leader role of the partition in this
        process's life (``unmarked``)."""
        path = self._failed_marker_path(topic, partition)
        data = json.dumps({"leader_epoch": hosted.failed_epoch, "led_alone": hosted.failed_alone,
                           "heal_at": hosted.heal_at, "reason": hosted.storage_failed}).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data)
        except OSError as exc:
            hosted.unmarked = True
            self.log.error("{}-{}: its storage failed and the mark could not be written ({}): "
                           "it takes no leader role of it until this process restarts",
                           topic, partition, exc)
            return
        hosted.marked_on_disk = True

    def _read_failed_marker(self, topic: str,
                            partition: int) -> tuple[str, int, bool, int] | None:
        """The failure an earlier process marked (why, its leader epoch, whether it led
        alone), or None. A marker that cannot be read counts as a failure at an unknown
        leader epoch, not led alone."""
        path = self._failed_marker_path(topic, partition)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"its failed-storage marker could not be read ({exc})", -1, False, -1
        try:
            marker = json.loads(raw)
            epoch, alone = int(marker["leader_epoch"]), marker["led_alone"] is True
            heal_at = int(marker.get("heal_at", -1))
            reason = str(marker.get("reason"))
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            return f"its failed-storage marker is damaged ({exc})", -1, False, -1
        self.log.warning("{}-{}: its storage failed in an earlier process ({}, at leader "
                         "epoch {}): it takes no role in the ISR until the controller took it "
                         "offline", topic, partition, reason, epoch)
        return f"marked failed on disk: {reason}", epoch, alone, heal_at

    def _healed(self, topic: str, partition: int, leader: int, isr: list[int],
                leader_epoch: int) -> None:
        """A role taken that counts it in the ISR at a leader epoch after its failure:
        its leader took it back (it caught up), or it leads alone as it did: the marker
        goes."""
        hosted = self.hosted.get((topic, partition))
        if hosted is None or not hosted.marked_on_disk or hosted.storage_failed is not None:
            return
        if (leader != self.broker_id and self.broker_id not in isr) \
                or leader_epoch <= hosted.failed_epoch:
            return
        self._unmark(topic, partition, hosted, f"back in the ISR at leader epoch {leader_epoch}")

    def _caught_up(self, state: PartitionState) -> None:
        """A follower marked failed on disk, following at a leader epoch after the failure,
        whose log reaches the end it had before it again: it holds what it lost (its
        leader takes it back into the ISR, which it is not told of): the marker goes."""
        log = state.log
        hosted = self.hosted.get((log.topic, log.partition))
        if hosted is None or not hosted.marked_on_disk or hosted.storage_failed is not None \
                or hosted.heal_at < 0 or state.is_leader \
                or state.leader_epoch <= hosted.failed_epoch \
                or log.log_end_offset < hosted.heal_at:
            return
        # What it fetched back must be on disk before the marker goes: a crash now would
        # otherwise reopen it short again, unmarked (a failed flush restarts the shard, as
        # any, and the marker stays)
        log.flush(self.clock.wall_ms())
        self._unmark(log.topic, log.partition, hosted,
                     f"caught up to offset {log.log_end_offset} at leader epoch "
                     f"{state.leader_epoch}")

    def _unmark(self, topic: str, partition: int, hosted: Hosted, why: str) -> None:
        path = self._failed_marker_path(topic, partition)
        try:
            path.unlink(missing_ok=True)
            fsync_dir(path.parent)
        except OSError as exc:
            if (topic, partition) not in self.unmark_warned:  # tried at every apply: once
                self.unmark_warned.add((topic, partition))
                self.log.warning("{}-{}: its failed-storage marker could not be removed "
                                 "({}): tried again at its next role or catch-up", topic,
                                 partition, exc)
            return
        self.unmark_warned.discard((topic, partition))
        hosted.marked_on_disk = False
        self.log.info("{}-{}: {}: its failed-storage marker is removed", topic, partition, why)

    def _not_hosted(self) -> int:
        """The error for a request about a partition this shard does not hold."""
        return NOT_LEADER if self.in_cluster or self.awaiting_restore else UNKNOWN_TP

    @handles(RestoreRoles)
    def on_restore_roles(self, msg: RestoreRoles) -> None:
        """The last roles the ReplicaManager knows, after this shard lost its memory (a
        crash, or its process restarted). A role is applied only if its leader epoch is
        newer than the one this shard holds: a LeaderAndIsr that waited in the mailbox
        and was applied first is the controller's newer word (Kafka applies a leader
        epoch once). Then the purgatories watch this shard's partitions again."""
        now = self.clock.wall_ms()
        self.replication["restores"] = self.replication.get("restores", 0) + 1
        self.awaiting_restore = False
        applied: list[str] = []
        outcomes: list[PartitionErrorRow] = []
        confirmed: list[TopicIdRow] = []  # an adopted id read back (as a role's answer)
        failed: list[OfflineReplicaRow] = []  # refused: its storage failed
        awaiting: list[TopicPartitionRow] = []  # refused: a deleted namesake's dir is there
        kept = 0
        for row in msg.rows:
            role = row.role
            key = (role.topic, role.partition)
            held = self.partitions.get(key)
            if held is not None and key in self.roles_given \
                    and held.leader_epoch >= role.leader_epoch:
                kept += 1
                self.log.debug("{}-{}: restored role at leader epoch {} ignored ({}): "
                              "leader epoch {} applied since", role.topic, role.partition,
                              role.leader_epoch, msg.reason, held.leader_epoch)
                outcomes.append(PartitionErrorRow(role.topic, role.partition, NONE))
                self._confirm_topic_id(role, confirmed)
                continue
            # the configs this shard kept (a config change since reached it directly), else
            # those the ReplicaManager knows
            hosted = self.hosted.get(key)
            configs = dict(hosted.configs if hosted is not None else role.configs)
            try:
                self._open(role.topic, role.partition, configs, now, leader_alone=False,
                           topic_id=role.topic_id, adopted=role.topic_id_adopted)
                state = self.partitions[key]
                if self._storage_refuses(role.topic, role.partition, role.leader,
                                         list(role.isr), list(role.replicas),
                                         role.leader_epoch, failed, restored=True):
                    outcomes.append(PartitionErrorRow(role.topic, role.partition,
                                                      int(ErrorCode.KAFKA_STORAGE_ERROR)))
                    continue
                self._restore_role(state, row, now)
                self.roles_given.add(key)
            except NotDeletedYetError as exc:
                # the last role of a namesake created while the directory of the deleted
                # partition could not go: kept, and taken once it goes (as a LeaderAndIsr's)
                self._keep_role_later(role._replace(configs=configs), exc, awaiting)
                outcomes.append(PartitionErrorRow(role.topic, role.partition,
                                                  int(ErrorCode.KAFKA_STORAGE_ERROR)))
                continue
            except Exception:
                # one partition's failure does not stop the others' (nor crash the shard
                # again, which would restore the same rows again)
                self.log.exception("cannot restore the role of {}-{}", role.topic,
                                   role.partition)
                outcomes.append(PartitionErrorRow(role.topic, role.partition,
                                                  int(ErrorCode.KAFKA_STORAGE_ERROR)))
                continue
            applied.append(self._restored_text(state, row))
            outcomes.append(PartitionErrorRow(role.topic, role.partition, NONE))
            self._confirm_topic_id(role, confirmed)
        if applied or kept:
            self.log.info("restored roles ({}): {}{}", msg.reason, ", ".join(applied) or "none",
                          f"; {kept} newer role(s) applied since kept" if kept else "")
        dark = sorted(f"{t}-{p}" for (t, p), state in self.partitions.items()
                      if state.leader_epoch < 0)
        if dark:
            # the ReplicaManager knows no role for them (it restarted itself, or never gave
            # one): they serve again at the controller's next LeaderAndIsr
            self.log.warning("no role known for {} after the restore ({}): they wait for the "
                             "controller's next LeaderAndIsr", ", ".join(dark), msg.reason)
        notice = ShardRestarted(self.index)
        for i in range(self.topology.num_purgatories):
            self.tell(self.topology.purgatory(i), notice)
        self.reply(RolesRestored(msg.req_id, outcomes, failed, awaiting, confirmed))

    def _restore_role(self, state: PartitionState, row: RestoredRoleRow, now: int) -> None:
        role = row.role
        if role.leader != self.broker_id:
            state.become_follower(role.leader, role.leader_epoch, list(role.isr),
                                  list(role.replicas), role.partition_epoch)
            return
        p = row.pending
        state.restore_leader(
            role.leader_epoch, list(role.isr), list(role.replicas), role.partition_epoch, now,
            pending=(IsrProposal(p.leader_epoch, tuple(p.new_isr), p.partition_epoch)
                     if p is not None else None),
            resend=p is not None and p.send_again)
        if state.resend_at_ms is not None:
            self.next_resend_ms = (min(self.next_resend_ms, state.resend_at_ms)
                                   if self.resends else state.resend_at_ms)
            self.resends.add((role.topic, role.partition))

    @staticmethod
    def _restored_text(state: PartitionState, row: RestoredRoleRow) -> str:
        role = row.role
        if role.leader != state.broker_id:
            what = f"follows {role.leader}"
        else:
            what = f"leads, ISR {sorted(state.isr)}"
            if state.pending is not None:
                what += f", ISR {list(state.pending.new_isr)} pending"
        return f"{role.topic}-{role.partition} {what} at leader epoch {role.leader_epoch}"

    # ------------------------------------------------------------- replication
    @handles(ReplicaRead)
    def on_replica_read(self, msg: ReplicaRead) -> None:
        """A follower's fetch on the leader: check its epochs, count its offset, read to
        the log end (KIP-320: a divergence is answered instead of data)."""
        rows: list[ReplicaReadDoneRow] = []
        budget = min(msg.max_bytes, max(self._max_frame - FRAME_SLACK_BYTES, 1))
        got_data = False
        now = self.clock.wall_ms()
        for req in msg.rows:
            topic, partition, offset = req.topic, req.partition, req.fetch_offset
            state = self.partitions.get((topic, partition))
            if state is None:
                rows.append(_replica_error(topic, partition, self._not_hosted()))
                continue
            error = state.check_fetch_epoch(req.current_leader_epoch)
            if error != NONE:
                rows.append(_replica_error(topic, partition, error))
                continue
            log = state.log
            diverging = state.diverging_epoch(req.last_fetched_epoch, offset)
            if diverging is not None:
                rows.append(ReplicaReadDoneRow(topic, partition, NONE, log.high_watermark,
                                               log.log_start_offset, log.log_end_offset,
                                               diverging[0], diverging[1], b"", 0, 0))
                continue
            if offset > log.log_end_offset or offset < log.log_start_offset:
                rows.append(ReplicaReadDoneRow(topic, partition,
                                               int(ErrorCode.OFFSET_OUT_OF_RANGE),
                                               log.high_watermark, log.log_start_offset,
                                               log.log_end_offset, -1, -1, b"", 0, 0))
                continue
            if self._trace[0]:
                # a traced fetch: where this follower is against the leader's log end
                # (trace analyze's replication lag; wire/trace_format.py)
                t = self._tracer.wall_ns()
                self._tracer.record("replica", self._trace[0], 0, self._trace[1], self.name,
                                    broker_node_name(msg.replica_id), "ReplicaRead",
                                    sent_ns=t, recv_ns=t, done_ns=t, offset=offset,
                                    detail=f"{topic}-{partition} leo {log.log_end_offset}")
            if state.on_follower_fetch(msg.replica_id, offset, now, req.log_start_offset):
                # the high watermark moved: waiting produces complete (their traces
                # name this fetch as the cause)
                self._notify(state, ack=FollowerAck(msg.replica_id, offset))
            proposal = state.isr_expansion(msg.replica_id, now)
            if proposal is not None:
                self._propose(state, proposal, "expand")
            limit = min(req.partition_max_bytes, budget) if budget > 0 else -1
            try:
                info = log.read(offset, limit, None, not got_data)
            except OffsetOutOfRangeError:
                rows.append(ReplicaReadDoneRow(topic, partition,
                                               int(ErrorCode.OFFSET_OUT_OF_RANGE),
                                               log.high_watermark, log.log_start_offset,
                                               log.log_end_offset, -1, -1, b"", 0, 0))
                continue
            records = bytes(info.records)
            if records:
                got_data = True
                budget -= len(records)
            meta = info.fetch_offset_metadata
            rows.append(ReplicaReadDoneRow(topic, partition, NONE, log.high_watermark,
                                           log.log_start_offset, log.log_end_offset, -1, -1,
                                           records, meta.segment_base_offset,
                                           meta.relative_position_in_segment))
        self.reply(ReplicaReadDone(msg.req_id, rows))

    def _propose(self, state: PartitionState, proposal: Any, kind: str) -> None:
        state.propose(proposal)
        log = state.log
        if state.resends_in_row == 0:  # a resend's one line is on_isr_updated's
            self.log.info("{}-{}: proposing ISR {} (was {}, {}) at leader epoch {}, partition "
                          "epoch {}", log.topic, log.partition, list(proposal.new_isr),
                          sorted(state.isr), kind, proposal.leader_epoch,
                          proposal.partition_epoch)
        self.tell(self.topology.replica_manager, ProposeIsr([IsrProposalRow(
            log.topic, log.partition, proposal.leader_epoch, list(proposal.new_isr),
            proposal.partition_epoch)]))

    def _maybe_shrink_isr(self, now: int) -> None:
        for state in self.partitions.values():
            proposal = state.isr_shrink(now)
            if proposal is not None:
                self._propose(state, proposal, "shrink: lagging "
                              + str(sorted(state.out_of_sync(now))))

    def _resend_proposals(self, now: int) -> None:
        """Send again the pending ISR proposals whose last answer left their fate unknown."""
        later: list[int] = []
        for key in sorted(self.resends):
            state = self.partitions.get(key)
            if (state is None or state.resend_at_ms is None or state.pending is None
                    or not state.is_leader):
                self.resends.discard(key)
                continue
            proposal = state.resend_due(now)
            if proposal is None:
                later.append(state.resend_at_ms)
                continue
            self.resends.discard(key)
            self._propose(state, proposal, "sent again: the last answer left it unknown")
        self.next_resend_ms = min(later) if later else now

    @handles(IsrUpdated)
    def on_isr_updated(self, msg: IsrUpdated) -> None:
        for row in msg.rows:
            state = self.partitions.get((row.topic, row.partition))
            if state is None:
                continue
            outcome = state.on_isr_result(row.proposed_leader_epoch,
                                          row.proposed_partition_epoch, row.error_code,
                                          list(row.isr), row.partition_epoch,
                                          self.clock.wall_ms())
            if outcome == "applied":
                self.log.info("{}-{}: ISR is now {} (partition epoch {})", row.topic,
                              row.partition, sorted(state.isr), state.partition_epoch)
                self.replication["isr_changes"] = self.replication.get("isr_changes", 0) + 1
                self._notify(state)
            elif outcome == "retry":
                self.log.info("{}-{}: ISR change not made ({}); proposed again later",
                              row.topic, row.partition, ErrorCode(row.error_code).name)
                self._notify(state)  # the high watermark may have moved (committed ISR)
            elif outcome == "resend":
                # the change may have been written: the high watermark stays over the
                # larger ISR until an answer says what became of it. Sent again every
                # PROPOSAL_RETRY_MS for as long as such answers come (a controller that
                # keeps refusing): logged at the 1st, 2nd, 4th... in a row
                n = state.resends_in_row
                if n & (n - 1) == 0:
                    self.log.info("{}-{}: ISR change to {} not confirmed ({}); sent again "
                                  "every {} ms; {} time(s) in a row", row.topic,
                                  row.partition, list(state.pending.new_isr)
                                  if state.pending else [], ErrorCode(row.error_code).name,
                                  PROPOSAL_RETRY_MS, n)
                at = state.resend_at_ms if state.resend_at_ms is not None else 0
                self.next_resend_ms = min(self.next_resend_ms, at) if self.resends else at
                self.resends.add((row.topic, row.partition))
            elif outcome == "held":
                self.log.warning("{}-{}: the controller refused the ISR change ({}); still "
                                 "leading, the change held and no other made until a "
                                 "LeaderAndIsr at a leader epoch above {}",
                                 row.topic, row.partition, ErrorCode(row.error_code).name,
                                 state.leader_epoch)

    @handles(FollowerApply)
    def on_follower_apply(self, msg: FollowerApply) -> None:
        """The fetcher's answer from the leader, applied to this follower's log (Kafka's
        processPartitionData / truncate / appendAsFollower)."""
        now = self.clock.wall_ms()
        self.follower_flush_failed = None
        rows = [self._apply_one(row, now) for row in msg.rows]
        self.reply(FollowerApplied(msg.req_id, rows))
        unflushed, self.follower_flush_failed = self.follower_flush_failed, None
        if unflushed is not None:
            # a log's flush failed (its row answered KAFKA_STORAGE_ERROR): it flushes no
            # more, and its follower would stay out of the ISR for good; the shard's restart
            # reopens it from its recovery point, and the fetcher goes on from there (no
            # marker is healed in this turn: one may have just failed again)
            raise unflushed
        for row in msg.rows:
            applied = self.partitions.get((row.topic, row.partition))
            if applied is not None:
                self._caught_up(applied)

    def _apply_one(self, row: FollowerApplyRow, now: int) -> FollowerStateRow:
        topic, partition = row.topic, row.partition
        state = self.partitions.get((topic, partition))
        if state is None:
            return FollowerStateRow(topic, partition, UNKNOWN_TP, -1, -1, -1, False)
        log = state.log
        if state.leader_id == self.broker_id or row.leader_epoch != state.leader_epoch:
            code = NOT_LEADER if state.leader_id == self.broker_id else int(
                ErrorCode.FENCED_LEADER_EPOCH)
            return FollowerStateRow(topic, partition, code, log.log_end_offset,
                                    log.latest_epoch, log.high_watermark, False,
                                    log.log_start_offset)
        truncated = False
        try:
            if row.reset_offset >= 0:
                truncated = self._reset(state, row, now)
            elif row.diverging_end_offset >= 0 or row.diverging_epoch >= 0:
                cut = truncation_offset(row.diverging_epoch, row.diverging_end_offset,
                                        log.end_offset_for_epoch(row.diverging_epoch),
                                        log.log_end_offset, log.high_watermark)
                self.log.info("{}-{}: diverges from leader {} at epoch {} (leader's end {}); "
                              "truncating from {} to {}", topic, partition, state.leader_id,
                              row.diverging_epoch, row.diverging_end_offset,
                              log.log_end_offset, cut.offset)
                truncated = log.truncate_to(cut.offset, now)
                if truncated:
                    self.replication["truncations"] += 1
                    self._tell_cleaner_truncated(log)
            elif row.records:
                log.append_as_follower(row.records, now)
                self.replication["follower_appends"] += 1
                log.maybe_flush(now)
            if row.leader_high_watermark >= 0:
                # Follower HW = min(leader HW, own LEO) (update clamps to the LEO).
                target = min(row.leader_high_watermark, log.log_end_offset)
                if target > log.high_watermark:
                    log.update_high_watermark(target)
            if row.leader_log_start_offset > log.log_start_offset:
                self._follow_log_start(state, row.leader_log_start_offset, now)
        except KafkaError as exc:
            if isinstance(exc, FlushFailedError):
                self._report_flush_failure(log)
                self.follower_flush_failed = self.follower_flush_failed or exc
            self._log_refusal(topic, partition, exc)
            return FollowerStateRow(topic, partition, int(exc.code), log.log_end_offset,
                                    log.latest_epoch, log.high_watermark, truncated,
                                    log.log_start_offset)
        if truncated:
            self._notify(state)
        return FollowerStateRow(topic, partition, NONE, log.log_end_offset, log.latest_epoch,
                                log.high_watermark, truncated, log.log_start_offset)

    def _follow_log_start(self, state: PartitionState, leader_log_start: int,
                          now: int) -> None:
        """The leader's log start moved (DeleteRecords, retention): the follower's follows
        (Kafka's maybeIncrementLogStartOffset with LeaderOffsetIncremented), never past
        its own high watermark, and the segments wholly below it go."""
        log = state.log
        offset = min(leader_log_start, log.high_watermark)
        if log.increment_log_start_offset(offset):
            deleted = log.delete_old_segments(now, retention=False)
            self.replication["log_start_follows"] = self.replication.get(
                "log_start_follows", 0) + 1
            self.log.info("{}-{}: log start follows leader {} to {} ({} segment(s) deleted)",
                          log.topic, log.partition, state.leader_id, log.log_start_offset,
                          deleted)
            self.tell(self.topology.log_manager, CheckpointOffsets(
                self.name, False, [self._offset_row(state)], []))

    def _reset(self, state: PartitionState, row: FollowerApplyRow, now: int) -> bool:
        """OFFSET_OUT_OF_RANGE from the leader (Kafka's handleOutOfRangeError)."""
        log = state.log
        how, offset = reset_offset(row.reset_offset, row.leader_log_start_offset,
                                   row.leader_log_end_offset)
        self.log.warning("{}-{}: fetch offset {} out of range on leader {} (log {}..{}); {} "
                         "at {}", log.topic, log.partition, row.reset_offset, state.leader_id,
                         row.leader_log_start_offset, row.leader_log_end_offset, how, offset)
        self.replication["truncations"] += 1
        if how == "truncate":
            truncated = log.truncate_to(offset, now)
        else:
            log.truncate_fully_and_start_at(offset, now)
            truncated = True
        if truncated:
            self._tell_cleaner_truncated(log)
        return truncated

    def _tell_cleaner_truncated(self, log: PartitionLog) -> None:
        """The records written again above the new active segment's base must be dirty
        to the log cleaner: its checkpoint of the log is lowered there (Kafka's
        maybeTruncateCheckpoint). A pass under way is refused at its swap (the log's
        generation moved)."""
        if self.config["log.cleaner.enable"]:
            self.tell(self.topology.log_cleaner, CleanerLogTruncated(
                log.topic, log.partition, log.active_segment_base_offset))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {
            "partitions": {f"{t}-{p}": [s.log.log_start_offset, s.log.high_watermark,
                                        s.log.log_end_offset]
                           for (t, p), s in self.partitions.items()},
            "leaders": sorted(f"{t}-{p}" for (t, p), s in self.partitions.items()
                              if s.is_leader),
            "watched": len(self.watchers),
            # DeleteRecords answers waiting for the followers' log starts
            "pending_deletes": len(self.pending_deletes),
            # deleted partitions whose directory could not be set aside yet, set-aside
            # directories not removed yet, and the housekeeping's tries that left some
            # (since the start: cumulative, not reset when none are left)
            "undeleted": len(self.undeleted),
            "roles_later": sorted(f"{t}-{p}@{r.leader_epoch}"
                                  for (t, p), r in self.roles_later.items()),
            "set_aside_left": len(self.set_aside_left),
            "failed_delete_tries": self.failed_delete_tries,
            # the logs whose flush failed and that were not reopened yet (the restart
            # their failure leads to reopens them), and how many failed since the start
            "flush_failed": sorted(f"{t}-{p}" for (t, p), s in self.partitions.items()
                                   if s.log.flush_failed is not None),
            "flush_failures": self.flush_failures,
            "dead_namesakes_deleted": self.dead_namesakes_deleted,
            "group_commits": self.group_commits,
            "group_committed_appends": self.group_committed_appends,
            # this process's generation, and the Appends stamped older it refused
            "generation": self.generation,
            "stale_appends_refused": self.stale_appends_refused,
            # lost its memory and not given its roles again yet (RestoreRoles)
            "awaiting_restore": self.awaiting_restore,
            "replication": dict(self.replication),
            "isr": {f"{t}-{p}": sorted(s.isr) for (t, p), s in self.partitions.items()
                    if s.is_leader},
            "epochs": {f"{t}-{p}": s.log.epoch_cache.entries
                       for (t, p), s in self.partitions.items()},
            # topic, partition, size, log start, log end, HW, leads, under-replicated, offline
            "metrics": [[t, p, s.log.size_in_bytes, s.log.log_start_offset,
                         s.log.log_end_offset, s.log.high_watermark, s.is_leader,
                         s.is_leader and len(s.isr) < len(s.replicas), s.leader_id < 0]
                        for (t, p), s in self.partitions.items()],
        }


class NotDeletedYetError(StorageError):
    """A partition is opened while its deleted namesake's directory is still there."""


def _without_lost(rows: list[AppendDoneRow], waiting: list[WatchProduceRow],
                  lost: dict[tuple[str, int], tuple[StorageError, int]],
                  ) -> tuple[list[AppendDoneRow], list[WatchProduceRow]]:
    """``rows`` and ``waiting`` with the appends a failed write put back (``lost``: per
    partition, the error and the log end it left; a row at or past it is not in the log)
    answered KAFKA_STORAGE_ERROR, and not waited for."""
    def gone(topic: str, partition: int, base_offset: int) -> StorageError | None:
        found = lost.get((topic, partition))
        return found[0] if found is not None and base_offset >= found[1] else None

    kept = []
    for r in rows:
        error = gone(r.topic, r.partition, r.base_offset) if r.error_code == NONE else None
        kept.append(r if error is None else AppendDoneRow(
            r.topic, r.partition, int(ErrorCode.KAFKA_STORAGE_ERROR), -1, -1, -1, str(error)))
    return kept, [w for w in waiting if gone(w.topic, w.partition, w.base_offset) is None]


def _replica_error(topic: str, partition: int, code: int) -> ReplicaReadDoneRow:
    return ReplicaReadDoneRow(topic, partition, code, -1, -1, -1, -1, -1, b"", 0, 0)


def _dir_bytes(directory: Path) -> int:
    """The bytes of the files in a partition directory (for a warning: 0 if unreadable)."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except OSError:
        return 0
    return total
