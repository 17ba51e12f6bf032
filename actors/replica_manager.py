"""ReplicaManager: a cluster node's end of the controller's requests.

Only in cluster mode (``zookeeper.connect``). The elected controller, on this
node or another, sends it LeaderAndIsr, UpdateMetadata and StopReplica; it
fences each on the controller epoch and this node's broker epoch
(``actors.core.replica_fencing``), then:

* LeaderAndIsr: hands each accepted partition's role to its PartitionShard
  (``BecomeLeaderOrFollower``: the shard opens or creates the log and leads or
  follows), answers the controller once every shard is done, then tells the
  GroupCoordinators which ``__consumer_offsets`` partitions this node leads
  now, and the replica fetchers what to fetch (the hook for replication).
* UpdateMetadata: updates its MetadataCache and forwards the request to
  every RequestHandler, which keeps its own copy for Metadata,
  DescribeCluster, FindCoordinator and the NOT_LEADER_OR_FOLLOWER answers;
  then answers the handlers waiting for topics to appear or go (AwaitTopics),
  once every handler of every process of the node acknowledged an update that
  shows it (below), so a client told its topic was created (or deleted) sees it so
  on any connection to this node, as Kafka's one metadata cache per broker does.
* StopReplica: deletes the logs of a deleted topic (``DropPartitions``), or
  only stops following (controlled shutdown of a follower).

With ``num.processes`` > 1 it runs in process 0 with the fetchers, the
controller and the coordinators; the shards it tells live in any process
(``Topology.shard_for``: one hop over the processes' ipc gateways), and every
other broker reaches this node through process 0 alone. It keeps each
partition's last role (``states``) and the metadata, so a process that starts
(``ProcessStarted``) gets the metadata for its handlers.

Each UpdateMetadata (and each snapshot a started process's handlers get) is followed,
to every handler, by a ``MetadataSync`` carrying this actor's count of them
(``metadata_version``); the handler answers ``MetadataSynced`` with it, and since
messages from one sender to one receiver keep their order, that says its cache
holds all of them. A wait for topics is answered once the metadata shows them
(or their absence) and every handler acknowledged the version that first showed
it; a handler silent for ``SYNC_WAIT_MS`` past that (its process is restarting:
it takes no connection before it holds the metadata again) is given up on,
logged with its process, and the wait answered. A wait with ``timeout_ms`` <= 0
(confluent-kafka's admin sends 0) is bounded by ``SYNC_WAIT_MS`` alone: that long at most
for the change to show, then that long at most from when it showed for the handlers to
acknowledge it (so ``2 * SYNC_WAIT_MS`` in all, ``NO_TIMEOUT_WAIT_MS``; a change that showed
late in the first window does not cost a live handler its own). One with a positive timeout
is answered by then at the latest, naming missing what is not yet shown, or not yet
acknowledged, everywhere.

A shard that lost its memory (its process restarted, or a crash restarted it
in place: ``ShardRestarted``) gets its partitions' last roles again
(``RestoreRoles``), so they serve without waiting for the controller, then the
fetchers of the partitions it follows ask it anew where their logs end. What is
restored is what the controller last said, not an older copy: the newest
LeaderAndIsr accepted (kept when accepted, not when the shards answer, so one
still on its way to the shard is not undone, and the shard ignores a restored
role no newer than one it applied since it restarted), the ISR changes the
controller wrote since (its AlterPartition answers), an ISR proposal whose
outcome is not known yet (pending again, so the high watermark stays over the
larger ISR, and its late answer finds it). The shard answers the restore (``RolesRestored``)
after what was in its mailbox before it, so a LeaderAndIsr or a delete sent to it
and still unanswered then died with it: a LeaderAndIsr is settled with the
restore's outcome (the controller gets its answer, the coordinators and fetchers
follow the role), a delete is sent again and its answer settles it. A role given
for a partition whose delete its shard has not answered yet goes after that delete,
sent again (``_drops_ahead``): had the delete died with the shard, its reopened log
would be the namesake's. A delete lost with its shard's whole process (mailbox and
all) while the namesake's role is already on record goes out in the restore: the role
carries the namesake's topic id (Kafka's KIP-516), and the shard deletes, never opens, a
directory holding another id (``partition.metadata``: a drop that never ran), unless
the role marks the id adopted (given late: the directory's is the topic's earlier id,
rewritten). A shard
has one restore on record at most: its next restart's replaces one never answered, and
one unanswered for
``RESTORE_OVERDUE_MS`` is reported (kept: a late answer still settles).

A replica whose storage failed (a failed fsync restarted its shard, or its log reopened
below the high watermark it had) is answered KAFKA_STORAGE_ERROR by its shard for every
role until the controller has taken it offline, and named apart in the answer (a log
that would not open is answered 56 too, and not reported: a new role would fail the
same way): this actor reports those to the controller (``LogDirEventNotification``,
Kafka's log dir event, each with whether it led an ISR of itself alone at the failure
and the leader epoch of the role refused), again every ``LOG_DIR_EVENT_RETRY_MS`` until it
answers NONE; the controller writes each at a new leader epoch without it in the ISR
(another leader where it led, offline where it was the ISR's last member unless it led
alone; the same leader and ISR the first time for one out of the ISR already), or, reported
already or stale (refused at a leader epoch older than the partition's), sends its current
role again (let in at the refused leader epoch), and that role is the one the shard takes.

Requests that arrive before this node's registration is known are held and
applied once it is (``BrokerRegistered`` from the node's controller actor); a
resend replaces its held copy and at most HELD_MAX are held. The registration
is kept over a crash restart of this actor (nobody would tell it again), and so is
what the shards and fetchers hold (leader epochs, last roles, proposals)
and what is on its way about it (the AlterPartitions, with their deadlines, and
the unanswered RestoreRoles), and the metadata with the handlers' waits on it: a
resend at a held leader epoch is accepted once more, and the shard answers it
without applying it again.

Every answer to the controller names the ``correlation_id`` of the request it
answers (a refusal, a duplicate answered at once, a request settled by a
restore): the controller's channel takes only the answer to the request it has
in flight, so an answer sent late (the resend of its request was answered
first) acknowledges nothing else, and every request can be answered. A resend
of a request still being applied (same controller and id) is neither applied
again nor answered: the original's answer, when its shards are done, is the
one the channel waits for. Once its shards are ``SHARDS_OVERDUE_MS`` late (a
message to a shard in another process may be lost), a resend sends it to them
again (a role only while it is its partition's last), and the first of their
answers settles it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from actors.core.cluster_model import LEADER_DURING_DELETE, TopicPartition
from actors.core.fetcher_state import FetcherConfig
from actors.core.metadata_cache import SYNC_WAIT_MS, MetadataCache
from actors.core.offsets_codec import OFFSETS_TOPIC
from actors.core.partition_state import HELD_ERRORS, NOT_APPLIED_ERRORS
from actors.core.replica_fencing import NONE, ReplicaFencing
from actors.core.transaction_log import TRANSACTION_STATE_TOPIC
from actors.replica_fetcher import ReplicaFetcher, fetcher_name
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.runtime.errors import NodeError
from actors.topology import Topology, broker_node_name, stable_hash
from actors.transaction_coordinator import all_txn_coordinators
from wire.broker_messages import DropPartitions, GetStats, ShardDone, TopicDeletions
from wire.broker_messages import TopicPartition as TopicPartitionRow
from wire.cluster_messages import (
    AlterPartition,
    AlterPartitionItem,
    AlterPartitionResponse,
    AwaitTopics,
    BecameLeaderOrFollower,
    BecomeLeaderOrFollower,
    BrokerRegistered,
    CancelKeptRoles,
    CoordinatorPartitionRow,
    CoordinatorPartitions,
    CoordinatorRestarted,
    LeaderAndIsr,
    LeaderAndIsrResponse,
    LogDirEventNotification,
    LogDirEventNotificationResponse,
    MetadataSync,
    MetadataSynced,
    OfflineReplicaRow,
    PartitionErrorRow,
    PendingIsrRow,
    ProcessStarted,
    ReplicaStateRow,
    RestoredRoleRow,
    RestoreRoles,
    RoleRefusedRow,
    RolesRestored,
    RolesTaken,
    ShardRestarted,
    StopReplica,
    StopReplicaResponse,
    TopicIdRow,
    TopicsAwaited,
    UpdateMetadata,
    UpdateMetadataResponse,
)
from wire.cluster_messages import TopicPartitionRow as KeptRoleRow
from wire.errors import ErrorCode
from wire.replication_messages import (
    AddFetcherPartitions,
    FetcherPartitionRow,
    FetcherRemoveRow,
    IsrProposalRow,
    IsrUpdated,
    IsrUpdateRow,
    ProposeIsr,
    RemoveFetcherPartitions,
)
from wire.transaction_messages import TxnCoordinatorPartitions, TxnPartitionRow

ALTER_PARTITION_TIMEOUT_MS = 5000  # an AlterPartition unanswered this long is proposed again
# a RestoreRoles unanswered this long is reported (once): it stays recorded until the
# shard answers or restarts again (the next restore replaces it), one per shard at most
RESTORE_OVERDUE_MS = 30_000
# a restore a crash of the ReplicaManager interrupted is done again on its next turn, at
# most this many times in all (a restore that crashes it every time is given up, logged:
# the actor lives on and the shard's partitions wait for the controller's next role)
RESTORE_TRIES = 3
# a controller request its shards have not all answered this long: its next resend sends
# it again to the shards still to answer (a message to a shard in another process can be
# lost without a restart of the shard), then again each time it is this long overdue
SHARDS_OVERDUE_MS = 30_000
# a LogDirEventNotification unanswered this long (or refused: no controller known, a new
# one) is sent again, with every failed replica not taken offline yet
LOG_DIR_EVENT_RETRY_MS = 3000
# requests held before this node's registration is known, at most (the oldest is dropped:
# the controller's channel sends what it does not get answered again)
HELD_MAX = 64


@dataclass
class _Pending:
    """A controller request waiting for shards: who asked, and what to answer."""

    controller: Address
    kind: str                                     # "lai" or "stop"
    rows: dict[tuple[str, int], int]              # partition -> error code
    waiting: set[Address] = field(default_factory=set)  # the shards yet to answer
    error_code: int = NONE
    became: list[ReplicaStateRow] = field(default_factory=list)
    stopped: list[TopicPartition] = field(default_factory=list)
    # a delete's rows per shard: sent again after the restore of a shard that lost them
    drops: dict[Address, list[TopicPartitionRow]] = field(default_factory=dict)
    # the controller channel's id of the request: its answer names it
    correlation_id: int = 0
    # when it was last sent to the shards: a resend while younger than SHARDS_OVERDUE_MS
    # is swallowed; past it, sent to the shards still to answer again
    sent_ms: int = 0
    # partitions whose role ``became`` gave the shard refused while it was their last
    # role: dark on that shard (no role, no coordinator, no fetcher) once settled
    dark: list[TopicPartition] = field(default_factory=list)
    # a delete's drops sent again to a shard ahead of a namesake's role (``_drops_ahead``),
    # with the request id counter's value then: a restore sent before them does not
    # settle the delete (their answer does)
    ahead: dict[Address, int] = field(default_factory=dict)
    # the partitions whose drop went ahead of a namesake's role: never again (a later
    # role's would delete the namesake the first one opened, and what it acknowledged)
    ahead_of_role: set[tuple[str, int]] = field(default_factory=set)
    # the adopted ids its shards read back from their disks (LeaderAndIsrResponse's
    # ``topic_ids_confirmed``), from their answers or, for a request a restore settled,
    # from what the restore read back (RolesRestored): only positive evidence counts,
    # and what is missing leaves a topic's adoption as it is
    confirmed: list[TopicIdRow] = field(default_factory=list)


@dataclass
class _Waiter:
    handler: Address
    req_id: int
    topics: list[str]
    present: bool
    deadline_ms: int  # answered by then, shown and acknowledged or not
    at_least: dict[str, int]  # the fewest partitions of a topic awaited (CreatePartitions)
    # the client gave a timeout (timeout_ms > 0): at ``deadline_ms`` what is shown but not
    # acknowledged everywhere is named missing; else the deadline bounds only the showing
    # (a change shown by then is waited for until ``give_up_ms``)
    client_timeout: bool = True
    # the metadata version that first showed what it waits for (None: not shown yet),
    # when that was, and when the handlers that have not acknowledged it by then are given
    # up on (SYNC_WAIT_MS after it showed: a live handler has its whole window however late
    # in the wait the change showed)
    shown_version: int | None = None
    shown_ms: int = 0
    give_up_ms: int = 0


class ReplicaManager(Actor):
    mailbox_size = 0  # unbounded: the controller sends one request at a time

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 broker_id: int, clock: Clock, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.config = config
        self.broker_id = broker_id
        self.clock = clock

    def setup(self) -> None:
        # What a crash restart of this actor keeps: the registration and the newest
        # controller seen (only the controller actor tells the registration, at its start
        # and a new session: a new life that forgot it would hold every request forever),
        # and what the shards and fetchers hold, as they keep it over this restart: the
        # leader epochs accepted, the last role given, the proposals (with the
        # AlterPartitions and RestoreRoles on their way), which fetcher fetches each
        # followed partition.
        # Forgotten, a later shard restart restored nothing (its partitions went dark).
        # The requests being applied are not kept: the controller sends them again, a
        # role at the leader epoch held is accepted once more (the shard answers it
        # without applying it again; its proposal and the ISR written since stay),
        # and a late shard answer to the previous life's request settles nothing
        # (``req_ids``)
        old_fencing: ReplicaFencing | None = getattr(self, "fencing", None)
        self.fencing = ReplicaFencing(self.broker_id)
        if old_fencing is not None:
            self.fencing.carry_over(old_fencing)
        # the metadata and the handlers waiting on it go on too: forgotten, a process
        # started after the crash got none for its handlers (it takes no connections
        # before they hold it) and a wait for topics present was not answered, until the
        # controller's next UpdateMetadata, which a quiet cluster may not send for long.
        # One that crashed this actor mid-apply is sent again (its answer never went),
        # and applying one again changes nothing
        self.cache: MetadataCache = getattr(self, "cache", None) or MetadataCache()
        self.held: list[tuple[Address, Any]] = []
        # The counters (stats) go on over a restart too: reset, a crash hid what came
        # before it (the restores, refusals, resends that led up to it) from the stats
        # and from a test or a sim checker comparing them
        self.held_replaced = getattr(self, "held_replaced", 0)  # held requests a resend replaced
        self.held_dropped = getattr(self, "held_dropped", 0)  # dropped past HELD_MAX (oldest)
        # the ids of requests to the shards go on over a restart of this actor: a late
        # answer to its previous life's (BecameLeaderOrFollower, ShardDone, RolesRestored)
        # must not settle a new one (an answer meant for a previous process of this node is
        # not held for this one: Directory.departed compares incarnations)
        self.req_ids: Iterator[int] = getattr(self, "req_ids", None) or itertools.count(1)
        self.pending: dict[int, _Pending] = {}
        self.waiters: list[_Waiter] = getattr(self, "waiters", [])
        # the UpdateMetadata (and snapshots) sent to the handlers so far, and the newest of
        # those each handler acknowledged (MetadataSynced); kept over a restart of this
        # actor, as the handlers keep what they applied
        self.metadata_version: int = getattr(self, "metadata_version", 0)
        self.synced: dict[Address, int] = getattr(self, "synced", {})
        # per handler of a started process: the version of the snapshot it was sent; what
        # it confirms below that came from its process's earlier life (the links keep and
        # deliver what was queued to it) and says nothing of what it holds
        self.sync_floor: dict[Address, int] = getattr(self, "sync_floor", {})
        # handlers given up on (silent past SYNC_WAIT_MS): not waited for again until they
        # confirm something, so a stopped process costs one wait, not one a topic change
        self.sync_given_up: set[Address] = getattr(self, "sync_given_up", set())
        self.sync_give_ups = getattr(self, "sync_give_ups", 0)
        # -> (leader, leader epoch)
        self.roles: dict[TopicPartition, tuple[int, int]] = getattr(self, "roles", {})
        # the last role given (the newest LeaderAndIsr accepted, with the ISR changes
        # written since): what a shard that lost its memory gets again
        self.states: dict[TopicPartition, ReplicaStateRow] = getattr(self, "states", {})
        # each leader's last ISR proposal whose outcome is not known: (it, send it again)
        self.proposals: dict[TopicPartition, tuple[IsrProposalRow, bool]] = getattr(
            self, "proposals", {})
        self.processes_restarted = getattr(self, "processes_restarted", 0)
        self.shards_restarted = getattr(self, "shards_restarted", 0)
        # The restores not answered yet go on over a restart of this actor, as the roles
        # they carry do. Forgotten, the shard's answer was ignored: a role it could not
        # take stayed on record (given again at its next restore), one it holds again after
        # an earlier refusal stayed off it (left out of its next restore: dark); and one
        # never answered was not reported
        # RestoreRoles not answered yet -> its shard
        self.restoring: dict[int, Address] = getattr(self, "restoring", {})
        # when each unanswered RestoreRoles is overdue (dropped once reported)
        self.restore_overdue_ms: dict[int, int] = getattr(self, "restore_overdue_ms", {})
        self.restores_overdue = getattr(self, "restores_overdue", 0)
        # shards owed a restore (why, tries), recorded before any of it is sent and gone
        # once all of it is: kept over a restart of this actor, whose next turn does again
        # the restores a crash interrupted. Forgotten, a shard restarted while this actor
        # crashed in its restore got none: no role, its partitions dark until the
        # controller's next LeaderAndIsr
        self.restores_owed: dict[Address, tuple[str, int]] = getattr(self, "restores_owed", {})
        self.restores_redone = getattr(self, "restores_redone", 0)
        # partitions left out of a restore because their role could not be rebuilt
        self.restore_rows_failed = getattr(self, "restore_rows_failed", 0)
        # roles a shard took late, once a deleted namesake's directory was gone (RolesTaken)
        self.roles_taken_later = getattr(self, "roles_taken_later", 0)
        # and those it could not take then (RolesTaken.refused)
        self.roles_refused_later = getattr(self, "roles_refused_later", 0)
        # Partitions whose role their shard keeps until a deleted namesake's directory goes
        # (it answered ``awaiting_delete``), until it says otherwise (the role taken or
        # refused) or a StopReplica: a restore gives them no fetcher (the shard would
        # refuse the role again), and one it takes then gets it with its outcome
        self.kept_for_delete: set[TopicPartition] = getattr(self, "kept_for_delete", set())
        self.restores_replaced = getattr(self, "restores_replaced", 0)
        # answers to a replaced (or unknown) RestoreRoles
        self.restore_answers_ignored = getattr(self, "restore_answers_ignored", 0)
        # what each unanswered RestoreRoles carried (a StopReplica accepted since takes its
        # partitions out): the answer settles what the ReplicaManager keeps of each
        self.restore_sent: dict[int, dict[TopicPartition, ReplicaStateRow]] = getattr(
            self, "restore_sent", {})
        # broker -> its RequestHandlers (0: unknown)
        self.leader_handlers: dict[int, int] = getattr(self, "leader_handlers", {})
        self.refusals_logged: set[tuple[str, int, int]] = set()
        self.refused = getattr(self, "refused", 0)
        # resends of a request still being applied: not answered
        self.resends_in_progress = getattr(self, "resends_in_progress", 0)
        # resends that sent their overdue request to shards again
        self.resends_reapplied = getattr(self, "resends_reapplied", 0)
        self.applied: dict[str, int] = getattr(self, "applied", None) or {
            "lai": 0, "um": 0, "stop": 0}
        self.fetched_by: dict[TopicPartition, str] = getattr(self, "fetched_by", {})
        self.fetchers_stopped = getattr(self, "fetchers_stopped", 0)
        # the AlterPartitions on their way to the controller, with their deadlines, go on
        # over a restart of this actor, as ``proposals`` does: the previous life's answer
        # is taken, and one lost is answered REQUEST_TIMED_OUT at its deadline (the shard
        # sends it again). Forgotten, neither came, and the shard's proposal stayed pending
        # for good: no ISR change since, and a shrink that left out a dead follower held
        # acks=all produces and the high watermark
        self.isr_pending: dict[int, tuple[list[IsrProposalRow], int]] = getattr(
            self, "isr_pending", {})
        # Replicas whose storage failed (a shard refused them a role for it), not taken
        # offline by the controller yet -> the failure's number (a later failure of the
        # same replica is reported anew, whatever an answer to the earlier one says) and
        # whether it led an ISR of itself alone at the failure;
        # the LogDirEventNotification on its way (req id, what it carried), and when it is
        # sent again. Kept over a restart of this actor: forgotten, a failed leader's
        # partition stayed without a leader until the controller's next change of it
        self.storage_failed: dict[TopicPartition, tuple[int, bool, int]] = getattr(
            self, "storage_failed", {})
        self.storage_failures: Iterator[int] = getattr(self, "storage_failures", None) \
            or itertools.count(1)
        self.log_dir_event: tuple[int, dict[TopicPartition, tuple[int, bool, int]]] | None = \
            getattr(self, "log_dir_event", None)
        self.log_dir_event_due_ms: int | None = getattr(self, "log_dir_event_due_ms", None)
        self.log_dir_events_sent = getattr(self, "log_dir_events_sent", 0)
        # reports refused in a row since the last one taken (logged at 1, 2, 4, 8, ...)
        self.log_dir_events_refused = getattr(self, "log_dir_events_refused", 0)
        self.num_fetchers = int(self.config["num.replica.fetchers"])
        self.fetcher_config = FetcherConfig(
            replica_id=self.broker_id,
            max_wait_ms=int(self.config["replica.fetch.wait.max.ms"]),
            min_bytes=int(self.config["replica.fetch.min.bytes"]),
            max_bytes=int(self.config["replica.fetch.response.max.bytes"]),
            partition_max_bytes=int(self.config["replica.fetch.max.bytes"]),
            backoff_ms=int(self.config["replica.fetch.backoff.ms"]),
            request_timeout_ms=int(self.config["replica.socket.timeout.ms"]))

    # ------------------------------------------------------------ registration
    @handles(BrokerRegistered)
    def on_registered(self, msg: BrokerRegistered) -> None:
        self.fencing.register(msg.broker_epoch)
        self.log.info("registered as broker {} at epoch {}", msg.broker_id, msg.broker_epoch)
        held, self.held = self.held, []
        for sender, request in held:
            self.current_sender = sender
            self._dispatch(request)

    def _hold(self, request: Any) -> bool:
        """Keep a request that came before the registration; True when held. A resend
        replaces its earlier copy (same controller, type and correlation id), and past
        HELD_MAX the oldest is dropped (logged): the controller sends its requests again."""
        if self.fencing.registered:
            return False
        sender = self.current_sender
        assert sender is not None
        if request.correlation_id:
            same = [i for i, (s, r) in enumerate(self.held)
                    if s == sender and type(r) is type(request)
                    and r.correlation_id == request.correlation_id]
            for i in reversed(same):
                del self.held[i]
                self.held_replaced += 1
        self.held.append((sender, request))
        if len(self.held) > HELD_MAX:
            _sender, oldest = self.held.pop(0)
            self.held_dropped += 1
            self.log.warning("more than {} requests held before this node's registration: "
                             "the oldest ({} {} from controller {}) dropped ({} dropped so "
                             "far)", HELD_MAX, type(oldest).__name__,
                             oldest.correlation_id, oldest.controller_id, self.held_dropped)
        return True

    def _dispatch(self, request: Any) -> None:
        if isinstance(request, LeaderAndIsr):
            self.on_leader_and_isr(request)
        elif isinstance(request, UpdateMetadata):
            self.on_update_metadata(request)
        else:
            self.on_stop_replica(request)

    def _in_progress(self, kind: str, msg: LeaderAndIsr | StopReplica) -> bool:
        """Is ``msg`` a resend of a request still being applied (same controller, kind and
        correlation id)? Then it is not applied again nor answered: the original's answer
        names the same id, and an answer now would acknowledge the request before its
        shards applied it (and a delete would be sent to them again). Once the shards are
        SHARDS_OVERDUE_MS late, what they owe is sent to them again (``_send_again``)."""
        name = "LeaderAndIsr" if kind == "lai" else "StopReplica"
        if msg.correlation_id == 0:
            self._no_id(name, msg.controller_id, msg.controller_epoch)
            return False
        for req_id, entry in self.pending.items():
            if (entry.correlation_id == msg.correlation_id and entry.kind == kind
                    and entry.controller == self.current_sender):
                if self.clock.now_ms() - entry.sent_ms >= SHARDS_OVERDUE_MS:
                    self._send_again(req_id, entry, name)
                    return True
                self.resends_in_progress += 1
                self.log.debug("{} {} from controller {} is still being applied (shards {} "
                               "to answer): the resend waits for its answer", name,
                               msg.correlation_id, msg.controller_id,
                               ", ".join(sorted(a.name for a in entry.waiting)))
                return True
        return False

    def _send_again(self, req_id: int, entry: _Pending, name: str) -> None:
        """The shards still to answer ``entry`` have not for SHARDS_OVERDUE_MS: its message
        to them may be lost (a full or failed link to their process), so it goes to them
        again, with the same shard request id (the first of their answers settles; a
        second finds nothing). A role is sent only while it is its partition's last one
        given (as it stands now, with the ISR changes written since), and not when the
        shard showed it holds it (a proposal at its leader epoch since; the
        shard also answers a role at an epoch it holds without applying it again): a
        newer role given since (the metadata's move, a restore's) is not undone; a
        delete, not for a partition a namesake has a role on since. A shard left with
        nothing to apply is settled."""
        now = self.clock.now_ms()
        self.resends_reapplied += 1
        self.log.warning("{} {} from controller {}: shard(s) {} have not answered for {} ms; "
                         "its resend sends it to them again", name, entry.correlation_id,
                         entry.controller.name, ", ".join(sorted(a.name for a in entry.waiting)),
                         now - entry.sent_ms)
        entry.sent_ms = now
        for shard in sorted(entry.waiting, key=lambda a: a.name):
            if entry.kind == "lai":
                rows = []
                for row in entry.became:
                    tp = TopicPartition(row.topic, row.partition)
                    state = self.states.get(tp)
                    if (self.topology.shard_for(row.topic, row.partition) == shard
                            and state is not None and state.leader_epoch == row.leader_epoch
                            and not self._holds(tp, row.leader_epoch)):
                        rows.append(state)
                if rows:
                    self.tell(shard, BecomeLeaderOrFollower(req_id, rows))
                    continue
            elif self._drop_again(req_id, entry, shard, "unanswered"):
                continue
            self._shard_done(req_id, entry, shard)

    def _holds(self, tp: TopicPartition, leader_epoch: int) -> bool:
        """Did ``tp``'s leader show it holds the role at ``leader_epoch`` (an ISR proposal
        at that epoch)? Then only its answer is missing. A proposal of an older epoch (sent
        before the role, come after it) says nothing of this role: skipped on it, the role
        would be settled unapplied."""
        proposal = self.proposals.get(tp)
        return proposal is not None and proposal[0].leader_epoch == leader_epoch

    def _no_id(self, name: str, controller_id: int, controller_epoch: int) -> None:
        """A request without a correlation id (0: not from a controller's channel) is
        applied and answered, but no channel takes its answer, and a resend of it cannot be
        told from a new request: logged once per controller epoch and kind."""
        key = (f"{name} without id", controller_id, controller_epoch)
        if key not in self.refusals_logged:
            self.refusals_logged.add(key)
            self.log.warning("{} from controller {} epoch {} has no correlation id (0): its "
                             "answer names none", name, controller_id, controller_epoch)

    def _refusal(self, kind: str, controller_id: int, controller_epoch: int, code: int,
                 reason: str) -> None:
        """Count every refused request; log one line per controller epoch and kind."""
        self.refused += 1
        key = (kind, controller_id, controller_epoch)
        if key not in self.refusals_logged:
            self.refusals_logged.add(key)
            self.log.warning("refused {} from controller {} epoch {}: {} ({})", kind,
                             controller_id, controller_epoch, reason, ErrorCode(code).name)

    # ------------------------------------------------------------ LeaderAndIsr
    @handles(LeaderAndIsr)
    def on_leader_and_isr(self, msg: LeaderAndIsr) -> None:
        if self._hold(msg) or self._in_progress("lai", msg):
            return
        assert self.current_sender is not None
        decision = self.fencing.leader_and_isr(msg)
        if decision.error_code != NONE:
            self._refusal("LeaderAndIsr", msg.controller_id, msg.controller_epoch,
                          decision.error_code, decision.reason)
            self.reply(LeaderAndIsrResponse(self.broker_id, decision.error_code, decision.rows,
                                            msg.correlation_id))
            return
        if decision.reason:
            self.log.info("LeaderAndIsr from controller {} epoch {}: {}", msg.controller_id,
                          msg.controller_epoch, decision.reason)
        self.applied["lai"] += 1
        for leader in msg.live_leaders:
            self.leader_handlers[leader.broker_id] = leader.num_handlers
        for row in decision.accepted:
            self._new_role(row)
        rows = {(r.topic, r.partition): r.error_code for r in decision.rows}
        pending = _Pending(self.current_sender, "lai", rows, became=decision.accepted,
                           correlation_id=msg.correlation_id)
        by_shard: dict[Address, list[ReplicaStateRow]] = {}
        for row in decision.accepted:
            by_shard.setdefault(self.topology.shard_for(row.topic, row.partition), []).append(row)
        self._drops_ahead(by_shard)
        self._fan_out(pending, by_shard, BecomeLeaderOrFollower)

    def _drops_ahead(self, by_shard: dict[Address, list[ReplicaStateRow]]) -> None:
        """A role for a partition whose delete its shard has not answered yet goes after
        that delete, sent again: had the delete died with a crash of the shard (before the
        shard forgot the partition or marked anything), the restarted shard reopened the
        deleted log, and the namesake's role would take it, deleted records and all. A
        drop is idempotent and the messages to a shard keep their order, so the shard
        deletes before it opens the namesake; the first answer settles the StopReplica.
        The delete's other partitions go with it (its answer settles them too), but not
        one whose namesake has a role since (its own role went to the shard already), and
        only the first role of a namesake has its delete sent ahead: a later one's would
        delete the log the first opened, and what it acknowledged."""
        for shard, roles in by_shard.items():
            wanted = {(r.topic, r.partition) for r in roles}
            for req_id, entry in sorted(self.pending.items()):
                if entry.kind != "stop" or shard not in entry.waiting:
                    continue
                drops = entry.drops.get(shard, [])
                first = {(d.topic, d.partition) for d in drops
                         if (d.topic, d.partition) in wanted - entry.ahead_of_role}
                if not first:
                    continue
                again = [d for d in drops if (d.topic, d.partition) in first
                         or TopicPartition(d.topic, d.partition) not in self.states]
                entry.ahead_of_role |= first
                entry.ahead[shard] = next(self.req_ids)
                entry.sent_ms = self.clock.now_ms()
                self.log.info("StopReplica request {}: deletes of {} sent again to shard {} "
                              "ahead of a namesake's role (not answered yet: they may have "
                              "died with it)", req_id,
                              ", ".join(f"{d.topic}-{d.partition}" for d in again), shard.name)
                self.tell(shard, DropPartitions(req_id, list(again)))

    def _new_role(self, row: ReplicaStateRow) -> None:
        """A role newer than the last: kept now, not once the shard applied it (a restore
        sent meanwhile must not carry the older one); it ends what the older leader
        epoch's proposal said."""
        tp = TopicPartition(row.topic, row.partition)
        held = self.states.get(tp)
        if held is not None and held.leader_epoch == row.leader_epoch:
            # accepted once more by a new life of this actor (``accept_again``): the shard
            # holds it, with the ISR written since and the proposal at it. Only
            # that lets a role at the held leader epoch in: ReplicaFencing.leader_and_isr
            # refuses one at the epoch it holds unless the partition is in ``accept_again``
            # (``states`` is never newer than the fencing's epochs), and the metadata's
            # move (``_demote_from_metadata``) passes only newer ones. Were equality let in
            # otherwise, this would keep a proposal the shard no longer holds
            if row.partition_epoch > held.partition_epoch:
                self.states[tp] = row._replace(is_new=False)
            return
        self.states[tp] = row._replace(is_new=False)
        self.proposals.pop(tp, None)

    @handles(BecameLeaderOrFollower)
    def on_became(self, msg: BecameLeaderOrFollower) -> None:
        entry = self.pending.get(msg.req_id)
        if entry is None or self.current_sender not in entry.waiting:
            return  # settled already (its shard's restore answered for it)
        awaiting = {(r.topic, r.partition) for r in msg.awaiting_delete}
        for row in msg.rows:
            if (row.topic, row.partition) not in awaiting:
                self.kept_for_delete.discard(TopicPartition(row.topic, row.partition))
            if row.error_code != NONE:
                self._role_refused(entry, row.topic, row.partition, row.error_code,
                                   (row.topic, row.partition) in awaiting)
        self._storage_failed(msg.storage_failed)
        entry.confirmed.extend(msg.topic_ids_confirmed)
        assert self.current_sender is not None
        self._shard_done(msg.req_id, entry, self.current_sender)

    def _role_refused(self, entry: _Pending, topic: str, partition: int, code: int,
                      awaiting_delete: bool = False) -> None:
        """The shard could not take a role ``entry`` gave (its log would not open): the
        partition is dark on it, as before, so no restore gives that role either (a newer
        one accepted since stays). Unless it waits for the directory of a deleted partition
        of the same name to go (``awaiting_delete``): answered as refused, but no storage
        failure and not forgotten: the shard keeps it, takes it once the directory goes
        and says so (RolesTaken), and a restore meanwhile gives it again."""
        entry.rows[(topic, partition)] = code
        tp = TopicPartition(topic, partition)
        if awaiting_delete:
            if tp in self.states:  # not stopped since (its StopReplica cancelled the role)
                self.kept_for_delete.add(tp)
            # no role on the shard until then: no fetcher (one a restore added would fetch
            # a partition the shard does not host), no coordinator. Done now, not when the
            # request settles: the shard's RolesTaken comes after this answer, and may
            # come before the request's other shards answer
            self._no_role([tp])
            return
        state = self.states.get(tp)
        if state is not None and any(
                (r.topic, r.partition, r.leader_epoch) == (topic, partition, state.leader_epoch)
                for r in entry.became):
            del self.states[tp]
            entry.dark.append(tp)

    def _current(self, row: ReplicaStateRow) -> bool:
        """Is ``row`` still the partition's last role given? Not when a StopReplica was
        accepted since (no role), nor a newer leader epoch (a LeaderAndIsr, the metadata's
        move, a restore's): settling an older request must not undo that."""
        state = self.states.get(TopicPartition(row.topic, row.partition))
        return state is not None and state.leader_epoch <= row.leader_epoch

    def _after_leader_and_isr(self, entry: _Pending) -> None:
        self._roles_applied([r for r in entry.became
                             if entry.rows.get((r.topic, r.partition)) == NONE])
        # refused while their last role, and given none since (a StopReplica accepted
        # since forgot them too: the first to settle undoes, the other finds nothing)
        dark = [tp for tp in entry.dark if tp not in self.states]
        if dark:
            self._no_role(dark)

    def _roles_applied(self, rows: list[ReplicaStateRow]) -> None:
        """Roles the shards hold now (a LeaderAndIsr applied, the metadata's move, a
        restore's role kept again): each still the partition's last role is recorded, the
        coordinators of offsets and transaction-state partitions follow, and the fetchers."""
        applied = [r for r in rows if self._current(r)]
        elected: list[CoordinatorPartitionRow] = []
        resigned: list[int] = []
        txn_elected: list[TxnPartitionRow] = []
        txn_resigned: list[int] = []
        follow: list[ReplicaStateRow] = []
        lead: list[TopicPartition] = []
        for row in applied:
            tp = TopicPartition(row.topic, row.partition)
            was_leader = self.roles.get(tp, (-1, -1))[0] == self.broker_id
            self.roles[tp] = (row.leader, row.leader_epoch)
            if row.leader == self.broker_id:
                lead.append(tp)
            else:
                follow.append(row)
            if row.topic == OFFSETS_TOPIC:
                if row.leader == self.broker_id:
                    elected.append(CoordinatorPartitionRow(row.partition, row.leader_epoch))
                elif was_leader:
                    resigned.append(row.partition)
            elif row.topic == TRANSACTION_STATE_TOPIC:
                if row.leader == self.broker_id:
                    txn_elected.append(TxnPartitionRow(row.partition, row.leader_epoch))
                elif was_leader:
                    txn_resigned.append(row.partition)
        self._coordinators(elected, resigned)
        self._txn_coordinators(txn_elected, txn_resigned)
        self._fetchers(follow, lead)

    def _no_role(self, tps: list[TopicPartition]) -> None:
        """``tps`` have no role on their shards any more (stopped, or dark: the shard could
        not take the role given): forgotten, the coordinators of the offsets and
        transaction-state partitions this node led resign, and no fetcher fetches them."""
        resigned: list[int] = []
        txn_resigned: list[int] = []
        for tp in tps:
            leader, _epoch = self.roles.pop(tp, (-1, -1))
            if leader != self.broker_id:
                continue
            if tp.topic == OFFSETS_TOPIC:
                resigned.append(tp.partition)
            elif tp.topic == TRANSACTION_STATE_TOPIC:
                txn_resigned.append(tp.partition)
        self._coordinators([], resigned)
        self._txn_coordinators([], txn_resigned)
        self._fetchers([], [], stopped=tps)

    # ------------------------------------------------------------ StopReplica
    @handles(StopReplica)
    def on_stop_replica(self, msg: StopReplica) -> None:
        if self._hold(msg) or self._in_progress("stop", msg):
            return
        assert self.current_sender is not None
        decision = self.fencing.stop_replica(msg)
        if decision.error_code != NONE:
            self._refusal("StopReplica", msg.controller_id, msg.controller_epoch,
                          decision.error_code, decision.reason)
            self.reply(StopReplicaResponse(self.broker_id, decision.error_code, decision.rows,
                                           msg.correlation_id))
            return
        self.applied["stop"] += 1
        rows = {(r.topic, r.partition): r.error_code for r in decision.rows}
        stopped = [TopicPartition(p.topic, p.partition) for p in decision.accepted]
        for tp in stopped:  # no role to restore from now on (a deleted log stays deleted)
            self.states.pop(tp, None)
            self.proposals.pop(tp, None)
            self.kept_for_delete.discard(tp)
        # A role a shard keeps for a namesake (until a deleted predecessor's directory
        # goes) is the controller's no more: a delete drops it with the partition, a stop
        # without delete cancels it here (else the shard would take it once the directory
        # went: a role the controller took away). Every such partition, known kept or not
        # (its answer may still be on its way); in order after the roles sent before.
        kept: dict[Address, list[KeptRoleRow]] = {}
        for p in decision.accepted:
            if not p.delete:
                kept.setdefault(self.topology.shard_for(p.topic, p.partition), []).append(
                    KeptRoleRow(p.topic, p.partition))
        for shard, cancelled in kept.items():
            self.tell(shard, CancelKeptRoles(cancelled))
        for sent in self.restore_sent.values():  # a restore on its way must not put it back
            for tp in stopped:
                sent.pop(tp, None)
        pending = _Pending(self.current_sender, "stop", rows, stopped=stopped,
                           correlation_id=msg.correlation_id)
        by_shard: dict[Address, list[TopicPartitionRow]] = {}
        for p in decision.accepted:
            if p.delete:
                by_shard.setdefault(self.topology.shard_for(p.topic, p.partition), []).append(
                    TopicPartitionRow(p.topic, p.partition))
        pending.drops = by_shard
        self._fan_out(pending, by_shard, DropPartitions)

    @handles(ShardDone)
    def on_shard_done(self, msg: ShardDone) -> None:
        entry = self.pending.get(msg.req_id)
        if entry is None or self.current_sender not in entry.waiting:
            return
        assert self.current_sender is not None
        if msg.failed or msg.error:
            # only the partitions the shard names failed (it deleted the others): the
            # controller moves each failed replica to deletion-ineligible, retried only
            # when this broker registers again
            self.log.error("shard {} failed to delete {}: {}", self.current_sender.name,
                           ", ".join(f"{t}-{p}" for t, p in msg.failed) or "?", msg.error)
            for row in msg.failed:
                key = (row.topic, row.partition)
                if key in entry.rows:
                    entry.rows[key] = int(ErrorCode.KAFKA_STORAGE_ERROR)
        self._shard_done(msg.req_id, entry, self.current_sender)

    def _after_stop_replica(self, entry: _Pending) -> None:
        # states: forgotten when accepted; one there now is a namesake's role accepted
        # since, whose roles and fetcher are not this delete's to undo
        self._no_role([tp for tp in entry.stopped if tp not in self.states])

    # ------------------------------------------------------------ fan out / in
    def _fan_out(self, entry: _Pending, by_shard: dict[Address, list[Any]], msg_type: Any) -> None:
        if not by_shard:
            self._answer(entry)
            return
        req_id = next(self.req_ids)
        entry.waiting = set(by_shard)
        entry.sent_ms = self.clock.now_ms()
        self.pending[req_id] = entry
        for shard, rows in by_shard.items():
            self.tell(shard, msg_type(req_id, rows))

    def _shard_done(self, req_id: int, entry: _Pending, shard: Address) -> None:
        entry.waiting.discard(shard)
        if entry.waiting:
            return
        del self.pending[req_id]
        self._answer(entry)

    def _answer(self, entry: _Pending) -> None:
        """Every request is answered, naming its correlation id: the controller's channel
        takes the answer only if that request is the one in flight (the answer to a resend
        may have come first), so a late one acknowledges nothing else."""
        rows = [PartitionErrorRow(t, p, code) for (t, p), code in entry.rows.items()]
        if entry.kind == "lai":
            self.tell(entry.controller, LeaderAndIsrResponse(
                self.broker_id, entry.error_code, rows, entry.correlation_id,
                entry.confirmed))
            self._after_leader_and_isr(entry)
        else:
            self.tell(entry.controller, StopReplicaResponse(
                self.broker_id, entry.error_code, rows, entry.correlation_id))
            self._after_stop_replica(entry)

    # ------------------------------------------------------------ UpdateMetadata
    @handles(UpdateMetadata)
    def on_update_metadata(self, msg: UpdateMetadata) -> None:
        if self._hold(msg):
            return
        if msg.correlation_id == 0:
            self._no_id("UpdateMetadata", msg.controller_id, msg.controller_epoch)
        code, reason = self.fencing.check(msg.controller_id, msg.controller_epoch,
                                          msg.broker_epoch)
        if code != NONE:
            self._refusal("UpdateMetadata", msg.controller_id, msg.controller_epoch, code,
                          reason)
            self.reply(UpdateMetadataResponse(self.broker_id, code, msg.correlation_id))
            return
        self.applied["um"] += 1
        self._tell_deletions(msg)
        counts = {t: self.cache.whole_partition_count(t)
                  for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)}
        self.cache.apply(msg)
        self._internal_counts_changed(counts)
        self.metadata_version += 1
        sync = MetadataSync(self.metadata_version)
        for handler in self.topology.all_handlers():
            self.tell(handler, msg)
            self.tell(handler, sync)
        for txn_coordinator in all_txn_coordinators(self.topology):  # markers: who leads
            self.tell(txn_coordinator, msg)
        self.reply(UpdateMetadataResponse(self.broker_id, NONE, msg.correlation_id))
        self._demote_from_metadata(msg)
        self._check_waiters(self.clock.now_ms())

    def _tell_deletions(self, msg: UpdateMetadata) -> None:
        """Kafka's handleUpdateMetadataRequest -> onPartitionsDeleted, for this node's group
        coordinators: the topics being deleted (LEADER_DURING_DELETE) and those whose
        deletion is complete. Told before the handlers get this metadata: a namesake's
        commit comes through a handler that has seen a later UpdateMetadata."""
        started = {p.topic: msg.topic_ids.get(p.topic, "") for p in msg.partitions
                   if p.leader == LEADER_DURING_DELETE}
        completed = dict(msg.deleted_topics)
        if not started and not completed:
            return
        note = TopicDeletions(started, completed)
        for i in range(self.topology.num_coordinators):
            self.tell(self.topology.coordinator(i), note)

    def _demote_from_metadata(self, msg: UpdateMetadata) -> None:
        """Partitions this node leads that the metadata gives to another leader at a newer
        epoch. A controlled shutdown moves leaderships without a LeaderAndIsr to the node
        that stops (as Kafka); its shards and coordinators learn it here, so the node does
        not go on acknowledging writes nobody will read."""
        rows = []
        for p in msg.partitions:
            tp = TopicPartition(p.topic, p.partition)
            role = self.roles.get(tp)
            known_epoch = self.fencing.leader_epochs.get(tp, -1)
            # (no state: stopped, its delete perhaps unanswered; a namesake's role comes by
            # LeaderAndIsr, after that delete, never from here)
            if (role is None or role[0] != self.broker_id or p.leader == self.broker_id
                    or p.leader < -1 or p.leader_epoch <= known_epoch
                    or tp not in self.states):
                continue
            self.fencing.leader_epochs[tp] = p.leader_epoch
            rows.append(ReplicaStateRow(p.topic, p.partition, p.leader, p.leader_epoch,
                                        list(p.isr), list(p.replicas), p.partition_epoch, False,
                                        dict(msg.topic_configs.get(p.topic, {})),
                                        self.states[tp].topic_id,
                                        self.states[tp].topic_id_adopted))
            self._new_role(rows[-1])
        if not rows:
            return
        self.log.info("no longer leading {} (moved by controller {} epoch {})",
                      ", ".join(f"{r.topic}-{r.partition}" for r in rows), msg.controller_id,
                      msg.controller_epoch)
        by_shard: dict[Address, list[ReplicaStateRow]] = {}
        for row in rows:
            by_shard.setdefault(self.topology.shard_for(row.topic, row.partition), []).append(row)
        req_id = next(self.req_ids)  # not pending: nobody waits for the shards' answers
        for shard, shard_rows in by_shard.items():
            self.tell(shard, BecomeLeaderOrFollower(req_id, shard_rows))
        self._roles_applied(rows)

    # ------------------------------------------------------------ waiting for topics
    @handles(AwaitTopics)
    def on_await(self, msg: AwaitTopics) -> None:
        assert self.current_sender is not None
        now = self.clock.now_ms()
        timeout_ms = msg.timeout_ms if msg.timeout_ms > 0 else SYNC_WAIT_MS
        self.waiters.append(_Waiter(self.current_sender, msg.req_id, list(msg.topics),
                                    msg.present, now + timeout_ms, dict(msg.at_least),
                                    msg.timeout_ms > 0))
        self._check_waiters(now)

    @handles(MetadataSynced)
    def on_metadata_synced(self, msg: MetadataSynced) -> None:
        handler = self.current_sender
        if handler is None or msg.version > self.metadata_version \
                or msg.version < self.sync_floor.get(handler, 0):
            return  # not one this life sent, or one its process's earlier life was sent
        self.sync_given_up.discard(handler)
        if msg.version > self.synced.get(handler, 0):
            self.synced[handler] = msg.version
            if self.waiters:
                self._check_waiters(self.clock.now_ms())

    def _lagging(self, version: int) -> list[Address]:
        """The handlers that have not acknowledged metadata ``version`` yet."""
        return [h for h in self.topology.all_handlers()
                if self.synced.get(h, 0) < version and h not in self.sync_given_up]

    def _check_waiters(self, now_ms: int) -> None:
        if not self.waiters:
            return
        keep = []
        for waiter in self.waiters:
            missing = self.cache.missing(waiter.topics, waiter.present, waiter.at_least)
            if missing:
                waiter.shown_version = None  # shown, then not (a leader lost): anew
                if now_ms < waiter.deadline_ms:
                    keep.append(waiter)
                else:
                    self.tell(waiter.handler, TopicsAwaited(waiter.req_id, missing))
                continue
            if waiter.shown_version is None:
                waiter.shown_version = self.metadata_version
                waiter.shown_ms = now_ms
                # measured from the showing, never past the deadline's own window: a change
                # that shows, goes and shows again keeps no wait beyond
                # deadline + SYNC_WAIT_MS (after the deadline a change not shown is answered)
                waiter.give_up_ms = min(now_ms, waiter.deadline_ms) + SYNC_WAIT_MS
            lagging = self._lagging(waiter.shown_version)
            if not lagging:
                self.tell(waiter.handler, TopicsAwaited(waiter.req_id, []))
            elif now_ms >= waiter.give_up_ms:
                self._give_up(waiter, lagging, now_ms)
                self.tell(waiter.handler, TopicsAwaited(waiter.req_id, []))
            elif now_ms >= waiter.deadline_ms and waiter.client_timeout:
                # the client's timeout: shown here, not yet on every connection's process
                self.tell(waiter.handler, TopicsAwaited(waiter.req_id, list(waiter.topics)))
            else:
                keep.append(waiter)
        self.waiters = keep

    def _give_up(self, waiter: _Waiter, lagging: list[Address], now_ms: int) -> None:
        self.sync_give_ups += 1
        self.sync_given_up.update(lagging)
        nodes = list(self.topology.process_nodes)
        by_process: dict[str, list[str]] = {}
        for h in lagging:
            process = f"process {nodes.index(h.node)}" if h.node in nodes else h.node
            by_process.setdefault(process, []).append(h.name)
        self.log.warning("{} of topic(s) {}: {} did not acknowledge metadata version {} "
                         "{} ms after it showed them (restarting?); answered anyway",
                         "creation" if waiter.present else "deletion",
                         ", ".join(waiter.topics),
                         "; ".join(f"{p} ({', '.join(sorted(names))})"
                                   for p, names in sorted(by_process.items())),
                         waiter.shown_version, now_ms - waiter.shown_ms)

    def poll_timeout_ms(self) -> int | None:
        if self.restores_owed:
            return 0  # a restore a crash interrupted: done again at once
        # a wait without a client timeout, shown, outlives its deadline until its give-up:
        # that deadline past must not make the loop spin
        deadlines = [w.deadline_ms for w in self.waiters
                     if w.shown_version is None or w.client_timeout]
        deadlines += [w.give_up_ms for w in self.waiters if w.shown_version is not None]
        deadlines += [deadline for _rows, deadline in self.isr_pending.values()]
        deadlines += self.restore_overdue_ms.values()
        if self.log_dir_event_due_ms is not None:
            deadlines.append(self.log_dir_event_due_ms)
        if not deadlines:
            return None
        return max(0, min(deadlines) - self.clock.now_ms())

    def on_turn(self) -> None:
        if self.restores_owed:
            self._restore_owed()
        if self.waiters:
            self._check_waiters(self.clock.now_ms())
        if self.isr_pending:
            self._expire_isr_proposals(self.clock.now_ms())
        if self.restore_overdue_ms:
            self._report_overdue_restores(self.clock.now_ms())
        if self.log_dir_event_due_ms is not None \
                and self.clock.now_ms() >= self.log_dir_event_due_ms:
            self._report_storage_failed()

    # ------------------------------------------------------------ the others
    def _coordinators(self, elected: list[CoordinatorPartitionRow], resigned: list[int],
                      count_changed: bool = False) -> None:
        """Tell the group coordinators what this node now leads of ``__consumer_offsets``
        and how many partitions it has (their ids map over those, not the config's)."""
        if not elected and not resigned and not count_changed:
            return
        count = self.cache.whole_partition_count(OFFSETS_TOPIC) or 0
        for i in range(self.topology.num_coordinators):
            self.tell(self.topology.coordinator(i),
                      CoordinatorPartitions(elected, resigned, count))

    def _txn_coordinators(self, elected: list[TxnPartitionRow], resigned: list[int],
                          count_changed: bool = False) -> None:
        if elected or resigned or count_changed:
            count = self.cache.whole_partition_count(TRANSACTION_STATE_TOPIC) or 0
            for address in all_txn_coordinators(self.topology):
                self.tell(address, TxnCoordinatorPartitions(elected, resigned, count))

    def _internal_counts_changed(self, before: dict[str, int | None]) -> None:
        """A LeaderAndIsr may come before the metadata that shows how many partitions an
        internal topic has: the coordinators hear of the count once the metadata does."""
        changed = {t for t, n in before.items()
                   if self.cache.whole_partition_count(t) not in (n, None)}
        if OFFSETS_TOPIC in changed:
            self._coordinators([], [], True)
        if TRANSACTION_STATE_TOPIC in changed:
            self._txn_coordinators([], [], True)

    def _fetchers(self, follow: list[ReplicaStateRow], lead: list[TopicPartition],
                  stopped: list[TopicPartition] | None = None) -> None:
        """Kafka's ReplicaFetcherManager: which fetcher fetches which partition.

        ``follow``: partitions this node now follows at ``leader_epoch``; each goes to
        fetcher ``hash(topic, partition) % num.replica.fetchers`` of its leader's node
        (spawned the first time it is needed), and leaves the fetcher it had if its
        leader changed. No leader (-1): fetched by none until the next LeaderAndIsr.
        ``lead`` and ``stopped``: partitions no fetcher fetches any more.
        """
        adds: dict[str, list[FetcherPartitionRow]] = {}
        removes: dict[str, list[FetcherRemoveRow]] = {}
        # Worked out on a copy, kept only once the fetchers are told: a crash on the way
        # leaves ``fetched_by`` as the fetchers know it, and a redo tells the old ones.
        fetched = dict(self.fetched_by)
        for row in follow:
            tp = TopicPartition(row.topic, row.partition)
            name = None
            if row.leader >= 0 and row.leader != self.broker_id:
                fetcher_id = stable_hash(f"{row.topic}-{row.partition}") % self.num_fetchers
                name = self._fetcher(row.leader, fetcher_id)
            old = fetched.get(tp)
            if old is not None and old != name:
                removes.setdefault(old, []).append(FetcherRemoveRow(tp.topic, tp.partition))
            if name is None:
                fetched.pop(tp, None)
                continue
            fetched[tp] = name
            adds.setdefault(name, []).append(FetcherPartitionRow(row.topic, row.partition,
                                                                 row.leader, row.leader_epoch))
        for tp in [*lead, *(stopped or [])]:
            old = fetched.pop(tp, None)
            if old is not None:
                removes.setdefault(old, []).append(FetcherRemoveRow(tp.topic, tp.partition))
        busy = set(fetched.values())
        # Once the node stopped intake, a fetcher left idle is not stopped here: its stop
        # would wait (up to 10 s) in this loop, and the node's shutdown stops it anyway
        stopping = self.node.intake_stopped
        for name, remove_rows in removes.items():
            if name in busy or stopping:
                self.tell(Address(self.node.name, name), RemoveFetcherPartitions(remove_rows))
            else:
                self._stop_idle_fetcher(name)
        for name, add_rows in adds.items():
            self.tell(Address(self.node.name, name),
                      AddFetcherPartitions(add_rows, self._handlers_of(add_rows[0].leader)))
        self.fetched_by.clear()
        self.fetched_by.update(fetched)

    def _fetcher_name(self, row: ReplicaStateRow) -> str | None:
        """The fetcher that fetches followed ``row`` (None: no leader to fetch from)."""
        if row.leader < 0 or row.leader == self.broker_id:
            return None
        return fetcher_name(row.leader,
                            stable_hash(f"{row.topic}-{row.partition}") % self.num_fetchers)

    def _handlers_of(self, broker_id: int) -> int:
        """How many RequestHandlers ``broker_id`` runs: from the last LeaderAndIsr that named
        it a leader, else the metadata cache (0: unknown)."""
        count = self.leader_handlers.get(broker_id, 0)
        if count <= 0:
            row = self.cache.brokers.get(broker_id)
            count = row.num_handlers if row is not None else 0
        return count

    def _stop_idle_fetcher(self, name: str) -> None:
        """Kafka's shutdownIdleFetcherThreads: a fetcher left with no partition stops (a
        later partition of that leader spawns it again). Answers still on their way to
        it (a fetch, a shard's apply) become dead letters; the shards own the logs."""
        if self.node.stop_actor(name, timeout=10.0):
            self.log.info("stopped idle replica fetcher {}", name)
            self.fetchers_stopped += 1
        else:
            self.log.warning("idle replica fetcher {} did not stop", name)

    def _fetcher(self, leader: int, fetcher_id: int) -> str | None:
        """The name of the fetcher of (leader, id), spawned on first use; None once the
        node stops.

        The node stops (Kafka's ReplicaManager.shutdown stops its fetcher manager first): a
        LeaderAndIsr that makes it a follower meanwhile gives the partition to no fetcher,
        neither a new one (it would fetch nothing, and only hold up the node's stop) nor
        one running (it would ask the shard where the log ends, for nothing); the
        partition leaves the fetcher it had."""
        name = fetcher_name(leader, fetcher_id)
        if self.node.intake_stopped:
            self.log.debug("no replica fetcher for broker {}: the node is stopping", leader)
            return None
        running = self.node.actors.get(name)
        if running is None or running.actor_stopped.is_set():  # never started, or idle
            try:
                self.node.spawn(ReplicaFetcher, name, topology=self.topology,
                                config=self.fetcher_config, leader=leader,
                                fetcher_id=fetcher_id, clock=self.clock,
                                leader_handlers=self._handlers_of(leader))
            except NodeError as exc:  # the node is stopping, or the fetcher's start failed
                self.log.warning("no replica fetcher for broker {}: {}", leader, exc)
                return None
            self.log.info("started replica fetcher {} for broker {}", name, leader)
        return name

    # ------------------------------------------------------------ ISR changes (KIP-497)
    @handles(ProposeIsr)
    def on_propose_isr(self, msg: ProposeIsr) -> None:
        """A leader shard's ISR change, sent to the controller as AlterPartition.

        Its ``isr_pending`` entry is recorded first, before anything else: the shard sends
        a proposal once and again only on an answer, so should this handler fail on the
        way (a crash restart keeps ``isr_pending``), the entry's deadline still answers it
        REQUEST_TIMED_OUT and the shard proposes again. Recorded after, a crash before it
        lost the proposal: no AlterPartition, no answer, no ISR change from that leader
        until its next role."""
        req_id = next(self.req_ids)
        self.isr_pending[req_id] = (list(msg.rows),
                                    self.clock.now_ms() + ALTER_PARTITION_TIMEOUT_MS)
        controller = self.fencing.controller_id
        for row in msg.rows:
            tp = TopicPartition(row.topic, row.partition)
            if tp in self.states:  # else stopped since it was sent: no role to restore
                self.proposals[tp] = (row, False)
        if controller is None or controller < 0 or not self.fencing.registered:
            self._isr_answer(msg.rows, int(ErrorCode.NOT_CONTROLLER))
            del self.isr_pending[req_id]  # answered (a crash before: answered at its deadline)
            return
        self.tell(self._controller_address(controller), AlterPartition(
            req_id, self.broker_id, self.fencing.broker_epoch,
            [AlterPartitionItem(r.topic, r.partition, r.leader_epoch, list(r.new_isr),
                                r.partition_epoch) for r in msg.rows]))

    # ------------------------------------------------------------ failed storage
    def _storage_failed(self, rows: list[OfflineReplicaRow]) -> None:
        """Replicas a shard refused a role because their logs' storage failed (a failed
        fsync restarted the shard, or a log reopened below the high watermark it had),
        answered KAFKA_STORAGE_ERROR and named apart: a log that would not open is
        answered 56 too, but is not reported (the controller can do nothing about it, and
        each new role it wrote would fail the same way). The shard refuses them every
        role that would count them in the ISR; the controller is told (Kafka's log dir
        event), takes them out of the ISR and elects another leader where this node
        led."""
        if not rows:
            return
        for row in rows:
            tp = TopicPartition(row.topic, row.partition)
            self.storage_failed[tp] = (next(self.storage_failures), bool(row.led_alone),
                                       int(row.leader_epoch))
            # the shard does not hold the role it refused: the controller's role at that
            # leader epoch is let in once more (a replica out of the ISR already gets its
            # current role again, not a new leader epoch)
            self.fencing.accept_again.add(tp)
        self.log.warning("the storage of {} failed: reported to the controller as offline "
                         "replicas (KAFKA_STORAGE_ERROR)",
                         ", ".join(f"{r.topic}-{r.partition}" for r in rows))
        if self.log_dir_event is None:
            self._report_storage_failed()

    def _report_storage_failed(self) -> None:
        """Send the controller every failed replica not taken offline yet (one request on
        its way at most; sent again at its deadline, with what failed since)."""
        self.log_dir_event = None
        self.log_dir_event_due_ms = None
        if not self.storage_failed:
            return
        now_ms = self.clock.now_ms()
        self.log_dir_event_due_ms = now_ms + LOG_DIR_EVENT_RETRY_MS
        controller = self.fencing.controller_id
        if controller is None or controller < 0 or not self.fencing.registered:
            return  # no controller known yet: tried again at the deadline
        req_id = next(self.req_ids)
        carried = dict(self.storage_failed)
        self.log_dir_event = (req_id, carried)
        self.log_dir_events_sent += 1
        self.tell(self._controller_address(controller), LogDirEventNotification(
            req_id, self.broker_id, self.fencing.broker_epoch,
            [OfflineReplicaRow(tp.topic, tp.partition, carried[tp][1], carried[tp][2])
             for tp in sorted(carried)]))

    @handles(LogDirEventNotificationResponse)
    def on_log_dir_event_response(self, msg: LogDirEventNotificationResponse) -> None:
        if self.log_dir_event is None or self.log_dir_event[0] != msg.req_id:
            return  # an answer to one sent again since
        _req_id, carried = self.log_dir_event
        if msg.error_code != NONE:
            # told again every LOG_DIR_EVENT_RETRY_MS for as long as it is refused (no
            # controller elected for a while): logged at the 1st, 2nd, 4th, 8th... refusal
            self.log_dir_events_refused = refused = self.log_dir_events_refused + 1
            if refused & (refused - 1) == 0:
                self.log.warning("the controller did not take the failed replicas offline "
                                 "({}): told again every {} ms; refused {} time(s) in a row",
                                 ErrorCode(msg.error_code).name, LOG_DIR_EVENT_RETRY_MS,
                                 refused)
            self.log_dir_event = None  # the deadline sends it again
            return
        self.log_dir_events_refused = 0
        for tp, failure in carried.items():
            if self.storage_failed.get(tp) == failure:
                del self.storage_failed[tp]
        self.log.info("the controller took {} offline (out of the ISR, led elsewhere)",
                      ", ".join(map(str, sorted(carried))))
        self._report_storage_failed()

    def _controller_address(self, controller: int) -> Address:
        node = self.node.name if controller == self.broker_id else broker_node_name(controller)
        return Address(node, self.topology.controller.name)

    @handles(AlterPartitionResponse)
    def on_alter_partition_response(self, msg: AlterPartitionResponse) -> None:
        # taken off ``isr_pending`` once its shards are told (below): should this handler
        # fail on the way, its deadline still answers them REQUEST_TIMED_OUT
        entry = self.isr_pending.get(msg.req_id)
        if entry is None:
            return
        proposals, _deadline = entry
        if msg.error_code != NONE:
            self.log.info("AlterPartition refused as a whole: {}",
                          ErrorCode(msg.error_code).name)
            self._isr_answer(proposals, msg.error_code)
            del self.isr_pending[msg.req_id]
            return
        results = {(r.topic, r.partition): r for r in msg.partitions}
        by_shard: dict[Address, list[IsrUpdateRow]] = {}
        for p in proposals:
            r = results.get((p.topic, p.partition))
            if r is not None and r.error_code == NONE:
                self._isr_changed(p.topic, p.partition, r.leader_epoch, list(r.isr),
                                  r.partition_epoch)
            self._settle(p, r.error_code if r is not None else int(ErrorCode.UNKNOWN_SERVER_ERROR))
            row = (IsrUpdateRow(p.topic, p.partition, p.leader_epoch, p.partition_epoch,
                                r.error_code, r.leader_epoch, list(r.isr), r.partition_epoch)
                   if r is not None else
                   IsrUpdateRow(p.topic, p.partition, p.leader_epoch, p.partition_epoch,
                                int(ErrorCode.UNKNOWN_SERVER_ERROR), -1, [], -1))
            by_shard.setdefault(self.topology.shard_for(p.topic, p.partition), []).append(row)
        for shard, rows in by_shard.items():
            self.tell(shard, IsrUpdated(rows))
        del self.isr_pending[msg.req_id]

    def _isr_changed(self, topic: str, partition: int, leader_epoch: int, isr: list[int],
                     partition_epoch: int) -> None:
        """An ISR the controller wrote: part of the role a shard that lost its memory gets
        again (its own answer may have died with it)."""
        tp = TopicPartition(topic, partition)
        state = self.states.get(tp)
        if state is not None and state.leader_epoch == leader_epoch \
                and partition_epoch > state.partition_epoch:
            self.states[tp] = state._replace(isr=isr, partition_epoch=partition_epoch)

    def _settle(self, proposal: IsrProposalRow, error_code: int) -> None:
        """What the controller's answer (``error_code``) says of ``proposal``, as the
        leader's PartitionState takes it: written or not written (no longer pending),
        held (a stale leader or partition epoch, an unknown partition: pending, unsent), or
        unknown (sent again)."""
        tp = TopicPartition(proposal.topic, proposal.partition)
        if tp not in self.states:
            return  # stopped (StopReplica) since it was proposed: nothing to restore
        current = self.proposals.get(tp)
        same = current is not None and (current[0].leader_epoch, current[0].partition_epoch,
                                        list(current[0].new_isr)) == (
            proposal.leader_epoch, proposal.partition_epoch, list(proposal.new_isr))
        if not same:
            return
        if error_code == NONE or error_code in NOT_APPLIED_ERRORS:
            del self.proposals[tp]
        else:
            self.proposals[tp] = (proposal, error_code not in HELD_ERRORS)

    # ------------------------------------------------------------ processes 1..
    @handles(ProcessStarted)
    def on_process_started(self, msg: ProcessStarted) -> dict[str, int]:
        """Process ``msg.process`` runs: its handlers get the metadata; after a restart its
        shards get their partitions' roles again (their logs were recovered from disk; the
        roles lived in memory) and the fetchers ask the followed ones where they end."""
        nodes = self.topology.process_nodes
        if not 0 < msg.process < len(nodes):
            return {}
        node = nodes[msg.process]
        # "metadata": its handlers were sent the metadata (the process waits until they
        # hold it before it takes connections: this answer may reach it first)
        metadata = 1 if self.cache.updates else 0
        if msg.restarted:  # owed first: a crash on the way leaves the restore to redo
            for shard in (self.topology.shard(i) for i in range(self.topology.num_shards)):
                if shard.node == node:
                    self.restores_owed.setdefault(shard, (f"process {msg.process} restarted", 0))
        # Its handlers are new: what their process's earlier life confirmed holds no more,
        # and they are waited for again (bounded by the give-up, as any).
        mine = [h for h in self.topology.all_handlers() if h.node == node]
        for handler in mine:
            self.synced.pop(handler, None)
            self.sync_given_up.discard(handler)
        if metadata:
            snapshot = self.cache.snapshot(self.fencing.broker_epoch)
            # the snapshot holds every update: a version of its own, which only its
            # confirmation can reach (an earlier life's queued syncs stay below it); the
            # other handlers, which hold every update already, confirm it too (a wait
            # begun from now on waits for it from every handler)
            self.metadata_version += 1
            sync = MetadataSync(self.metadata_version)
            for handler in self.topology.all_handlers():
                if handler.node == node:
                    self.sync_floor[handler] = self.metadata_version
                    self.tell(handler, snapshot)
                self.tell(handler, sync)
        if not msg.restarted:
            # the roles sent before it started wait in its links
            return {"partitions": 0, "metadata": metadata}
        self.processes_restarted += 1
        # what it owed them will not come; with its generation, which they stamp on their
        # Appends to it from then on (what they sent before is refused there). Told before
        # the restore: a crash in it (done again at the next turn) does not lose them
        for handler in self.topology.all_handlers():
            if handler.node != node:
                self.tell(handler, msg)
        sent = self._restore(lambda shard: shard.node == node,
                             f"process {msg.process} restarted")
        return {"partitions": sent, "metadata": metadata}

    @handles(CoordinatorRestarted)
    def on_coordinator_restarted(self, msg: CoordinatorRestarted) -> None:
        """A coordinator crashed and was restarted in place: it forgot which partitions of
        its topic this node leads (and a TransactionCoordinator its metadata). It is told
        every one led now, as if newly elected, after the metadata as it is now."""
        assert self.current_sender is not None
        topic = TRANSACTION_STATE_TOPIC if msg.transactions else OFFSETS_TOPIC
        led = sorted((tp.partition, epoch) for tp, (leader, epoch) in self.roles.items()
                     if tp.topic == topic and leader == self.broker_id)
        self.log.info("{} restarted: told the {} partition(s) of {} this node leads",
                      self.current_sender.name, len(led), topic)
        if msg.transactions:  # its metadata too (markers go to the partitions' leaders)
            self.tell(self.current_sender, self.cache.snapshot(self.fencing.broker_epoch))
            self.tell(self.current_sender, TxnCoordinatorPartitions(
                [TxnPartitionRow(p, e) for p, e in led], [],
                self.cache.whole_partition_count(topic) or 0))
        else:
            self.tell(self.current_sender, CoordinatorPartitions(
                [CoordinatorPartitionRow(p, e) for p, e in led], [],
                self.cache.whole_partition_count(topic) or 0))

    @handles(ShardRestarted)
    def on_shard_restarted(self, msg: ShardRestarted) -> None:
        """A shard crashed and was restarted in place: it reopened its logs with no role.
        It gets its partitions' last roles, as a restarted process's shards do."""
        if not 0 <= msg.shard < self.topology.num_shards:
            self.log.warning("ShardRestarted names shard {}, not one of the {} shards",
                             msg.shard, self.topology.num_shards)
            return
        restarted = self.topology.shard(msg.shard)
        self.shards_restarted += 1
        self._restore(lambda shard: shard == restarted, f"shard {msg.shard} crashed")

    def _restore(self, selected: Callable[[Address], bool], reason: str) -> int:
        """The shards ``selected`` picks lost their memory (roles, watchers, answers to the
        fetchers): each gets its partitions' last roles (RestoreRoles, even none: it then
        has the purgatories watch again, and answers RolesRestored, which settles what it
        owed and will not answer), and the fetchers of the partitions they follow forget
        and re-add them (an answer they waited for may have died with the shard), as the
        restored roles say. Returns how many roles were sent.

        The shards are recorded as owed their restore before anything is sent, and taken
        off once all is: a crash on the way leaves them owed, and the new life's next turn
        does it again (``_restore_owed``); a restore sent twice is harmless (the shard
        keeps a role at a leader epoch it holds; the second replaces the first)."""
        shards = [shard for shard in (self.topology.shard(i)
                                      for i in range(self.topology.num_shards))
                  if selected(shard)]
        for shard in shards:
            _why, tries = self.restores_owed.get(shard, ("", 0))
            self.restores_owed[shard] = (reason, tries + 1)
            if tries:
                # a restore a crash interrupted, tried again now: counted as it is tried
                # (not before: a crash before this line tried nothing)
                self.restores_redone += 1
        by_shard: dict[Address, list[RestoredRoleRow]] = {shard: [] for shard in shards}
        pending = 0
        for tp, role in self.states.items():
            rows = by_shard.get(self.topology.shard_for(tp.topic, tp.partition))
            if rows is None:
                continue
            try:
                row = self._restored(tp, role)
            except Exception:  # one partition's bad state must not keep the others dark
                self.restore_rows_failed += 1
                self.log.exception("the last role of {}-{} could not be rebuilt for the "
                                   "restore: left out (it waits for the controller's next "
                                   "LeaderAndIsr)", tp.topic, tp.partition)
                continue
            pending += row.pending is not None
            rows.append(row)
        now_ms = self.clock.now_ms()
        for shard, rows in by_shard.items():
            req_id = next(self.req_ids)
            for old_id in [i for i, s in self.restoring.items() if s == shard]:
                # its answer died with the shard: this one settles what it would have
                self._forget_restore(old_id)
                self.restores_replaced += 1
                self.log.info("RestoreRoles {} to shard {} was never answered: replaced by "
                              "RestoreRoles {} ({})", old_id, shard.name, req_id, reason)
            self.restoring[req_id] = shard
            self.restore_overdue_ms[req_id] = now_ms + RESTORE_OVERDUE_MS
            self.restore_sent[req_id] = {TopicPartition(r.role.topic, r.role.partition): r.role
                                         for r in rows}
            self.tell(shard, RestoreRoles(req_id, reason, rows))
        # the fetchers, as for a LeaderAndIsr applied: what they fetch follows the restored
        # roles (a newer one than the last applied may be among them), and a partition
        # that stays with its fetcher is removed first (it forgets what it waited for)
        # (not for a role its shard keeps until a deleted namesake's directory goes: it
        # will refuse it again, and the fetcher would fetch a partition it does not host;
        # one it takes meanwhile gets its fetcher with the restore's outcome)
        follow = [r.role for rows in by_shard.values() for r in rows
                  if r.role.leader != self.broker_id and TopicPartition(
                      r.role.topic, r.role.partition) not in self.kept_for_delete]
        lead = [TopicPartition(r.role.topic, r.role.partition)
                for rows in by_shard.values() for r in rows if r.role.leader == self.broker_id]
        again: dict[str, list[FetcherRemoveRow]] = {}
        for role in follow:
            name = self.fetched_by.get(TopicPartition(role.topic, role.partition))
            if name is not None and name == self._fetcher_name(role):
                again.setdefault(name, []).append(FetcherRemoveRow(role.topic, role.partition))
        for name, remove_rows in again.items():
            self.tell(Address(self.node.name, name), RemoveFetcherPartitions(remove_rows))
        self._fetchers(follow, lead)
        for shard in shards:
            self.restores_owed.pop(shard, None)
        sent = sum(len(r) for r in by_shard.values())
        self.log.info("{}: last roles of {} partition(s) sent to {} shard(s) ({} with an "
                      "ISR proposal pending), {} followed ones fetched anew",
                      reason, sent, len(by_shard), pending,
                      sum(1 for r in follow if r.leader >= 0))
        return sent

    def _restore_owed(self) -> None:
        """Do again the restores a crash of this actor interrupted (``restores_owed``),
        whole: RestoreRoles to each shard (one that went before the crash is replaced),
        its followed partitions to their fetchers anew. One tried RESTORE_TRIES times is
        given up (the crash would come again, and supervision stops an actor that crashes
        too often): the shard is sent an empty RestoreRoles then, which ends its wait for
        one (a restarted process waits for its shards' before it serves) with no role
        (its partitions wait for the controller's next LeaderAndIsr); its answer is
        ignored (no restore waits for it)."""
        again: dict[str, set[Address]] = {}
        for shard, (reason, tries) in list(self.restores_owed.items()):
            if tries >= RESTORE_TRIES:
                del self.restores_owed[shard]
                self.log.error("the restore of shard {} ({}) failed {} times: given up; its "
                               "partitions wait for the controller's next LeaderAndIsr",
                               shard.name, reason, tries)
                self.tell(shard, RestoreRoles(next(self.req_ids),
                                              f"{reason}: given up, no role restored", []))
                continue
            again.setdefault(reason, set()).add(shard)
        for reason, shards in sorted(again.items()):
            self.log.warning("the restore of shard(s) {} ({}) was interrupted by a crash of "
                             "this actor: done again", ", ".join(sorted(s.name for s in shards)),
                             reason)
            self._restore(shards.__contains__, reason)

    def _drop_again(self, req_id: int, entry: _Pending, shard: Address,
                    why: str = "they died with it") -> bool:
        """``shard`` answered its restore before the delete ``entry`` sent it: the delete
        died with it (a crash, its process restarted). Sent again, now (a drop sent right
        after the restore could follow the lost one still in its mailbox, and delete a
        namesake created meanwhile); a drop is idempotent (a log never opened is deleted
        from the disk). A partition given a role since the StopReplica is not dropped (that
        role is a namesake's) and is answered failed. True when sent: its answer settles."""
        rows = []
        for row in entry.drops.get(shard, []):
            if TopicPartition(row.topic, row.partition) in self.states:
                self.log.warning("{}-{}: its delete to shard {} was not done ({}) and a "
                                 "namesake has a role since: not deleted again", row.topic,
                                 row.partition, shard.name, why)
                entry.rows[(row.topic, row.partition)] = int(ErrorCode.KAFKA_STORAGE_ERROR)
            else:
                rows.append(row)
        entry.drops[shard] = rows
        if not rows:
            return False
        self.log.info("StopReplica request {}: deletes of {} sent again to shard {} ({})",
                      req_id, ", ".join(f"{r.topic}-{r.partition}" for r in rows),
                      shard.name, why)
        # sent now: a resend of the StopReplica is swallowed for SHARDS_OVERDUE_MS again
        entry.sent_ms = self.clock.now_ms()
        self.tell(shard, DropPartitions(req_id, list(rows)))
        return True

    @handles(RolesTaken)
    def on_roles_taken(self, msg: RolesTaken) -> None:
        """A shard took roles it had refused while the directory of a deleted partition of
        the same name was still there: each still the partition's last role (no newer one
        given since, no StopReplica) is followed now by the fetchers and coordinators, as
        a LeaderAndIsr applied; an older one, superseded, leaves the newer one's to it."""
        self.roles_taken_later += len(msg.rows)
        for key in [(r.topic, r.partition) for r in msg.rows] + [
                (r.topic, r.partition) for r in msg.refused]:
            self.kept_for_delete.discard(TopicPartition(*key))
        if msg.rows:
            self.log.info("shard {} took the role(s) of {} once their deleted namesakes' "
                          "directories were gone", msg.shard, ", ".join(
                              f"{r.topic}-{r.partition}@{r.leader_epoch}" for r in msg.rows))
            self._roles_applied(list(msg.rows))
        if msg.refused:
            self._kept_roles_refused(msg.shard, msg.refused)
        self._storage_failed(msg.storage_failed)

    def _kept_roles_refused(self, shard: int, refused: list[RoleRefusedRow]) -> None:
        """Kept roles the shard could not take once the directory went: each still the
        partition's last role is forgotten now (dark there, as a refused LeaderAndIsr row:
        no restore gives it again, it waits for the controller's next LeaderAndIsr)."""
        self.roles_refused_later += len(refused)
        dark: list[TopicPartition] = []
        for row in refused:
            tp = TopicPartition(row.topic, row.partition)
            state = self.states.get(tp)
            if state is not None and state.leader_epoch == row.leader_epoch:
                del self.states[tp]
                dark.append(tp)
        self.log.warning("shard {} could not take the kept role(s) of {} once their deleted "
                         "namesakes' directories were gone; {} wait for the controller's next "
                         "LeaderAndIsr", shard, ", ".join(
                             f"{r.topic}-{r.partition}@{r.leader_epoch} (error {r.error_code})"
                             for r in refused),
                         ", ".join(map(str, dark)) or "none of them (newer roles given since)")
        if dark:
            self._no_role(dark)

    @handles(RolesRestored)
    def on_roles_restored(self, msg: RolesRestored) -> None:
        """A shard applied RestoreRoles ``msg.req_id``. It answers in order, so what was sent
        to it before the restore and is still unanswered died with it: a LeaderAndIsr's
        roles are settled as the restore went (it carried them, or newer ones), so the
        controller gets its answer and the coordinators and fetchers follow; a delete is
        sent again (``_drop_again``): its answer settles it.

        What the restore carried is settled by its outcomes: a role the shard could not
        take is not kept (as a refused LeaderAndIsr's), and one it holds is kept again if
        an answer of the shard's previous life refused it meanwhile."""
        shard = self.restoring.get(msg.req_id)
        sent = self.restore_sent.get(msg.req_id, {})
        self._forget_restore(msg.req_id)
        if shard is None:
            self.restore_answers_ignored += 1
            self.log.debug("RolesRestored {} from {} ignored: not a restore waiting for its "
                           "answer (a later one replaced it)", msg.req_id,
                           self.current_sender.name if self.current_sender else "?")
            return
        outcomes = {(r.topic, r.partition): r.error_code for r in msg.rows}
        awaiting = {(r.topic, r.partition) for r in msg.awaiting_delete}
        self._restore_outcomes(sent, outcomes, awaiting)
        self._storage_failed(msg.storage_failed)
        for req_id, entry in sorted(self.pending.items()):
            if req_id > msg.req_id or shard not in entry.waiting:
                continue
            if entry.kind == "lai":
                mine = {(r.topic, r.partition) for r in entry.became
                        if self.topology.shard_for(r.topic, r.partition) == shard}
                entry.confirmed.extend(r for r in msg.topic_ids_confirmed
                                       if (r.topic, r.partition) in mine)
                for row in entry.became:
                    key = (row.topic, row.partition)
                    if self.topology.shard_for(*key) != shard:
                        continue
                    code = outcomes.get(key)
                    if code is None:
                        # not restored: stopped since (a StopReplica accepted after it): the
                        # row is no longer this request's to answer
                        entry.rows.pop(key, None)
                    elif code != NONE:
                        self._role_refused(entry, row.topic, row.partition, code,
                                           key in awaiting)
            elif entry.ahead.get(shard, 0) > msg.req_id:
                continue  # its drops went again after the restore: their answer settles it
            elif self._drop_again(req_id, entry, shard):
                continue  # the drop sent again answers for it
            self.log.info("{} request {} settled by shard {}'s restore (its answer died "
                          "with it)", "LeaderAndIsr" if entry.kind == "lai" else "StopReplica",
                          req_id, shard.name)
            self._shard_done(req_id, entry, shard)

    def _forget_restore(self, req_id: int) -> None:
        self.restoring.pop(req_id, None)
        self.restore_sent.pop(req_id, None)
        self.restore_overdue_ms.pop(req_id, None)

    def _report_overdue_restores(self, now_ms: int) -> None:
        """A RestoreRoles unanswered for RESTORE_OVERDUE_MS is reported once. It stays
        recorded: its answer, however late, settles what the shard owed (the requests
        that died with it); the shard's next restart replaces it."""
        for req_id, overdue_ms in list(self.restore_overdue_ms.items()):
            if now_ms < overdue_ms:
                continue
            del self.restore_overdue_ms[req_id]
            self.restores_overdue += 1
            waiting = sum(1 for entry in self.pending.values()
                          if self.restoring[req_id] in entry.waiting)
            self.log.warning("RestoreRoles {} to shard {} unanswered for {} s ({} controller "
                             "request(s) wait for that shard): kept until it answers or "
                             "restarts again", req_id, self.restoring[req_id].name,
                             RESTORE_OVERDUE_MS // 1000, waiting)

    def _restore_outcomes(self, sent: dict[TopicPartition, ReplicaStateRow],
                          outcomes: dict[tuple[str, int], int],
                          awaiting: set[tuple[str, int]]) -> None:
        """What the ReplicaManager keeps of the roles a restore carried (``sent``: those
        still its to settle), as the shard's outcomes say (a role that waits for a deleted
        namesake's directory to go is kept: the shard takes it then)."""
        dark: list[TopicPartition] = []
        back: list[ReplicaStateRow] = []
        waiting: list[TopicPartition] = []
        for tp, role in sent.items():
            code = outcomes.get((tp.topic, tp.partition))
            state = self.states.get(tp)
            if code is None:
                continue
            if (tp.topic, tp.partition) in awaiting:
                # kept: the shard takes it once the old directory goes (RolesTaken, after
                # this answer); no role there until then, so no fetcher nor coordinator
                if state is not None:  # not stopped since (the stop cancelled the role)
                    self.kept_for_delete.add(tp)
                waiting.append(tp)
                continue
            kept = tp in self.kept_for_delete
            self.kept_for_delete.discard(tp)
            if code == NONE and kept and state is not None:
                # taken now (the directory went): the restore gave it no fetcher
                back.append(role)
                continue
            if code != NONE:
                # the shard could not take it: dark there, as a refused LeaderAndIsr's
                if state is not None and state.leader_epoch == role.leader_epoch:
                    del self.states[tp]
                    dark.append(tp)
            elif state is None:
                # the shard holds it; an answer of its previous life refused it meanwhile
                # (the StopReplicas accepted since took it out of ``sent``)
                self.log.info("{}: the restore's role at leader epoch {} holds again (an "
                              "earlier answer refused it)", tp, role.leader_epoch)
                self.states[tp] = role
                back.append(role)
        if waiting:
            self._no_role(waiting)
        if dark:
            # as a refused LeaderAndIsr row: no role kept, a coordinator of a partition led
            # here resigns, no fetcher
            self.log.warning("the restore left {} without a role: they wait for the "
                             "controller's next LeaderAndIsr", ", ".join(map(str, dark)))
            self._no_role(dark)
        if back:
            # as an applied LeaderAndIsr row (the refusal undid its role): roles, an
            # offsets or transaction-state partition led here elects its coordinator,
            # fetchers
            self._roles_applied(back)

    def _restored(self, tp: TopicPartition, role: ReplicaStateRow) -> RestoredRoleRow:
        """``role`` with what the controller said of it since: the topic's configs (the
        LeaderAndIsr's may be older: a config change reaches the shards directly, and
        this node's metadata by UpdateMetadata), and the proposal at its epochs
        whose outcome is not known (pending again on the leader)."""
        configs = self.cache.topic_configs.get(tp.topic)
        if configs is not None and configs != role.configs:
            role = role._replace(configs=dict(configs))
        if role.leader != self.broker_id:
            return RestoredRoleRow(role, None)
        proposal = self.proposals.get(tp)
        pending = None
        if (proposal is not None and proposal[0].leader_epoch == role.leader_epoch
                and proposal[0].partition_epoch == role.partition_epoch):
            p, send_again = proposal
            pending = PendingIsrRow(p.leader_epoch, list(p.new_isr), p.partition_epoch,
                                    send_again)
        return RestoredRoleRow(role, pending)

    def _isr_answer(self, proposals: list[IsrProposalRow], error_code: int) -> None:
        by_shard: dict[Address, list[IsrUpdateRow]] = {}
        for p in proposals:
            self._settle(p, error_code)
            by_shard.setdefault(self.topology.shard_for(p.topic, p.partition), []).append(
                IsrUpdateRow(p.topic, p.partition, p.leader_epoch, p.partition_epoch,
                             error_code, -1, [], -1))
        for shard, rows in by_shard.items():
            self.tell(shard, IsrUpdated(rows))

    def _expire_isr_proposals(self, now_ms: int) -> None:
        for req_id, (proposals, deadline) in list(self.isr_pending.items()):
            if now_ms >= deadline:
                del self.isr_pending[req_id]
                self._isr_answer(proposals, int(ErrorCode.REQUEST_TIMED_OUT))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {
            "broker_epoch": self.fencing.broker_epoch,
            "controller_epoch": self.fencing.controller_epoch,
            "controller_id": self.fencing.controller_id,
            "applied": dict(self.applied),
            "refused": self.refused,
            "resends_in_progress": self.resends_in_progress,
            "resends_reapplied": self.resends_reapplied,
            "held": len(self.held),
            "held_replaced": self.held_replaced,
            "held_dropped": self.held_dropped,
            "leading": sorted(str(tp) for tp, (leader, _e) in self.roles.items()
                              if leader == self.broker_id),
            "following": sorted(str(tp) for tp, (leader, _e) in self.roles.items()
                                if leader != self.broker_id),
            "brokers": self.cache.broker_ids(),
            "topics": self.cache.topics(),
            "waiters": len(self.waiters),
            # the metadata updates sent to the handlers, the lowest any acknowledged, and
            # the waits answered with a handler given up on
            "metadata_version": self.metadata_version,
            "metadata_synced_min": min((self.synced.get(h, 0)
                                        for h in self.topology.all_handlers()), default=0),
            "sync_give_ups": self.sync_give_ups,
            "fetched_by": {str(tp): name for tp, name in self.fetched_by.items()},
            "fetchers": sorted(set(self.fetched_by.values())),
            "fetchers_stopped": self.fetchers_stopped,
            "isr_pending": len(self.isr_pending),
            # replicas whose storage failed, not taken offline by the controller yet
            "storage_failed": sorted(str(tp) for tp in self.storage_failed),
            "log_dir_events_sent": self.log_dir_events_sent,
            "log_dir_events_refused": self.log_dir_events_refused,
            "processes_restarted": self.processes_restarted,
            "shards_restarted": self.shards_restarted,
            "restoring": len(self.restoring),
            "restores_owed": len(self.restores_owed),
            "restores_redone": self.restores_redone,
            "restore_rows_failed": self.restore_rows_failed,
            "roles_taken_later": self.roles_taken_later,
            "roles_refused_later": self.roles_refused_later,
            "kept_for_delete": sorted(str(tp) for tp in self.kept_for_delete),
            "restores_overdue": self.restores_overdue,
            "restores_replaced": self.restores_replaced,
            "restore_answers_ignored": self.restore_answers_ignored,
            "pending": len(self.pending),
            "proposals": sorted(str(tp) for tp in self.proposals),
        }
