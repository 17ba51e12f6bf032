"""Messages of the cluster's control plane (type ids 400-499).

The elected Controller sends LeaderAndIsr, UpdateMetadata and StopReplica to
the nodes (Kafka's controller requests, as actor messages over the gateways);
each carries the controller's epoch, and a node refuses one older than the
newest it has seen (STALE_CONTROLLER_EPOCH), and the epoch of the broker it
is meant for (a restarted node refuses what was meant for its previous life,
STALE_BROKER_EPOCH). Each also carries the ``correlation_id`` the
controller's channel gave it (unique per broker and controller term; a
resend keeps it), and the node's answer names it: the channel takes an
answer only for the request it has in flight (a late answer to an earlier
request is not taken for the next). Nodes send the controller
ControlledShutdown and AlterPartition (KIP-497: a leader's ISR change). The
metadata store's notices to the actor that owns it are here too (480-489).

Rows are NamedTuples declared next to the message that carries them.
"""

from __future__ import annotations

from typing import NamedTuple

from wire.registry import message

# ------------------------------------------------------------------- rows


class EndpointRow(NamedTuple):
    """An advertised listener: ``listener://host:port`` with its security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str


class BrokerRow(NamedTuple):
    """A live broker: its id, epoch, actor gateway (``tcp://host:port``), rack, listeners,
    and how many RequestHandlers, PartitionShards and GroupCoordinators it runs (0:
    unknown), so other nodes name only actors it has."""

    broker_id: int
    broker_epoch: int
    gateway: str
    rack: str | None
    endpoints: list[EndpointRow]
    num_handlers: int = 0
    num_shards: int = 0
    num_coordinators: int = 0


class PartitionErrorRow(NamedTuple):
    topic: str
    partition: int
    error_code: int


class TopicPartitionRow(NamedTuple):
    topic: str
    partition: int


class TopicIdRow(NamedTuple):
    """A replica's ``partition.metadata`` holds ``topic_id`` (read back from its disk)."""

    topic: str
    partition: int
    topic_id: str


# ------------------------------------------------------- controller -> node


class LeaderAndIsrPartition(NamedTuple):
    """One partition's state: be its leader when ``leader`` is you, else follow ``leader``.

    ``partition_epoch`` is the version of the partition's state znode (KIP-497's
    partition epoch); a leader's AlterPartition must name it. ``is_new``: the
    partition was just created, no log exists yet anywhere.
    """

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool


class LiveLeaderRow(NamedTuple):
    """Where a leader named in a LeaderAndIsr lives (its actor gateway), and how many
    RequestHandlers it runs (0: unknown): its followers' fetchers pick one of those."""

    broker_id: int
    gateway: str
    num_handlers: int = 0


@message(400)
class LeaderAndIsr(NamedTuple):
    """Controller -> node: become leader or follower of these partitions (Kafka's LeaderAndIsr).

    A node applies a partition's row only if ``leader_epoch`` is newer than the
    one it has (an equal or older epoch is answered STALE_CONTROLLER_EPOCH /
    FENCED_LEADER_EPOCH per partition, as Kafka).
    """

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: list[LeaderAndIsrPartition]
    live_leaders: list[LiveLeaderRow]
    topic_configs: dict[str, dict[str, str]]  # the configs of the topics named above
    # the controller channel's id of this request: 0 as the core makes it, set by the
    # channel when it goes out (a node logs one that comes without)
    correlation_id: int = 0
    # the ids of the topics named above (those that have one: a topic an older version
    # made has none until the controller gives it one)
    topic_ids: dict[str, str] = {}
    # those of them whose id was given late (TopicAssignment.topic_id_adopted): a replica
    # directory holding another id is rewritten to it, never deleted
    topic_ids_adopted: list[str] = []


@message(401)
class LeaderAndIsrResponse(NamedTuple):
    """Node -> controller: ``error_code`` for the whole request, then per partition."""

    broker_id: int
    error_code: int
    partitions: list[PartitionErrorRow]
    correlation_id: int  # the id of the request answered (its ``correlation_id``)
    # the partitions of an adopted topic (``topic_ids_adopted``) whose directory here was
    # read back holding the role's id after the role was taken: once every replica of a
    # topic has, the controller clears its adoption
    topic_ids_confirmed: list[TopicIdRow] = []


class UpdateMetadataPartition(NamedTuple):
    """A partition as the nodes' metadata caches hold it.

    ``leader`` -2 (Kafka's LeaderDuringDelete) means the topic is being
    deleted: drop the partition from the cache.
    """

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    offline_replicas: list[int]


@message(402)
class UpdateMetadata(NamedTuple):
    """Controller -> every node: the live brokers and the partition states for the handlers' caches.

    ``brokers`` is always the whole live set (it replaces the cache's).
    ``full`` True: ``partitions`` is every partition of the cluster and the
    cache drops what is not listed; False: upsert the listed ones.
    """

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    full: bool
    brokers: list[BrokerRow]
    partitions: list[UpdateMetadataPartition]
    topic_configs: dict[str, dict[str, str]]  # the configs of the topics listed
    # the controller channel's id of this request: 0 as the core makes it, set by the
    # channel when it goes out (a node logs one that comes without)
    correlation_id: int = 0
    # the ids of the topics listed that have one (Metadata v10+ answers them)
    topic_ids: dict[str, str] = {}
    # topics whose deletion the controller has completed (znodes gone) since its last
    # UpdateMetadata -> their id ("" if they had none): the node's group coordinators
    # take their committed offsets (Kafka's onPartitionsDeleted)
    deleted_topics: dict[str, str] = {}
    # the internal topics listed -> how many partitions they are assigned: a partition
    # left NEW (no replica alive when it was made) is in no row, and the coordinators'
    # ids map over the assigned count (Kafka's, read from the topic's znode)
    assigned_partitions: dict[str, int] = {}


@message(403)
class UpdateMetadataResponse(NamedTuple):
    broker_id: int
    error_code: int
    correlation_id: int  # the id of the request answered (its ``correlation_id``)


class StopReplicaPartition(NamedTuple):
    """Stop fetching/leading this replica; ``delete``: remove its log too (topic deletion).

    ``leader_epoch`` -1 means "whatever epoch you have" (Kafka's sentinel);
    otherwise a replica with a newer epoch ignores the request (KIP-570).
    """

    topic: str
    partition: int
    leader_epoch: int
    delete: bool


@message(404)
class StopReplica(NamedTuple):
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partitions: list[StopReplicaPartition]
    # the controller channel's id of this request: 0 as the core makes it, set by the
    # channel when it goes out (a node logs one that comes without)
    correlation_id: int = 0


@message(405)
class StopReplicaResponse(NamedTuple):
    broker_id: int
    error_code: int
    partitions: list[PartitionErrorRow]
    correlation_id: int  # the id of the request answered (its ``correlation_id``)


# ------------------------------------------------------- node -> controller


@message(406)
class ControlledShutdown(NamedTuple):
    """Node -> controller: move my leaderships away and drop me from the ISRs, I am stopping."""

    req_id: int
    broker_id: int
    broker_epoch: int


@message(407)
class ControlledShutdownResponse(NamedTuple):
    """``remaining``: partitions the node still leads (it retries until none, or gives up)."""

    req_id: int
    error_code: int
    remaining: list[TopicPartitionRow]


class AlterPartitionItem(NamedTuple):
    """A leader's proposed ISR, valid only at its ``leader_epoch`` and ``partition_epoch``."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int


@message(408)
class AlterPartition(NamedTuple):
    """Leader node -> controller: change these partitions' ISR (KIP-497 AlterIsr)."""

    req_id: int
    broker_id: int
    broker_epoch: int
    partitions: list[AlterPartitionItem]


class AlterPartitionResult(NamedTuple):
    """The partition's state after the request (or ``error_code`` and the rest -1/empty)."""

    topic: str
    partition: int
    error_code: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int


@message(409)
class AlterPartitionResponse(NamedTuple):
    """``error_code`` of the whole request (NOT_CONTROLLER, STALE_BROKER_EPOCH), then each row's."""

    req_id: int
    error_code: int
    partitions: list[AlterPartitionResult]


class OfflineReplicaRow(NamedTuple):
    """A replica whose storage failed; ``led_alone``: it led an ISR of itself alone when
    its storage failed (nobody else had its acknowledged records), so the controller may
    have it lead on at a new leader epoch. Else it is never elected while it is known to
    have failed: the partition stays offline rather than lose what another replica has."""

    topic: str
    partition: int
    led_alone: bool
    # the leader epoch of the role it refused (-1: not known): the controller ignores a
    # row older than the partition's current leader epoch (a report sent again after the
    # replica took a newer role, caught up and rejoined the ISR)
    leader_epoch: int = -1


@message(420)
class LogDirEventNotification(NamedTuple):
    """Node -> controller: the storage of these replicas failed (an fsync failed, or a log
    reopened below the high watermark it had): answered KAFKA_STORAGE_ERROR, they are
    offline replicas (Kafka's /log_dir_event_notification znode, whose controller then
    finds them by the KAFKA_STORAGE_ERROR of a LeaderAndIsr; here the node names them).
    The controller takes them out of their ISRs and elects another leader where one led,
    at a new leader epoch, so no follower truncates to a log that lost acknowledged
    records; the node follows again, out of the ISR, once its log is open."""

    req_id: int
    broker_id: int
    broker_epoch: int
    partitions: list[OfflineReplicaRow]


@message(421)
class LogDirEventNotificationResponse(NamedTuple):
    """``error_code`` NONE once the controller took the replicas offline (and wrote the new
    states), else why not (NOT_CONTROLLER, STALE_BROKER_EPOCH): the node sends it again."""

    req_id: int
    error_code: int


# ------------------------------------------- inside one node (cluster mode)


@message(486)
class ProcessStarted(NamedTuple):
    """Process ``process`` (1..) of this broker -> the ReplicaManager of process 0, once its
    shards and handlers run (num.processes > 1 in a cluster).

    Its handlers get the metadata the ReplicaManager holds; after a restart
    (``restarted``: the process died and its supervisor started it again) its
    shards also get the roles of their partitions again, and the fetchers ask
    the followed ones' shards where their logs end.

    ``generation``: the process's generation (0 at the broker's start, +1 at each
    restart of that process). The handlers of the other processes get it after a
    restart (forwarded by the ReplicaManager; on a single node, from the process
    itself): each gives up what it sent to that process before, and stamps its
    Appends to it with this generation from then on (Append.generation).
    """

    process: int
    restarted: bool
    generation: int = 0


@message(487)
class ShardRestarted(NamedTuple):
    """PartitionShard ``shard`` (its index), after a crash restarted it in place.

    To the ReplicaManager of its broker (cluster mode): the shard reopened the logs
    it hosted with no role (roles lived in its memory); the ReplicaManager answers
    with RestoreRoles, as it does for a restarted process's shards.
    To every PurgatoryShard of its broker, once its partitions serve again (a
    single node's at once, a cluster's after RestoreRoles): the purgatories watch
    again what they watched on that shard (its watchers were forgotten).
    """

    shard: int


@message(489)
class CoordinatorRestarted(NamedTuple):
    """A GroupCoordinator (``transactions`` False) or TransactionCoordinator (True), after a
    crash restarted it in place (cluster mode), to the ReplicaManager of its broker: it
    forgot which ``__consumer_offsets`` (resp. ``__transaction_state``) partitions this node
    leads; the ReplicaManager answers with CoordinatorPartitions (resp.
    TxnCoordinatorPartitions) naming every one it leads now, and the coordinator loads them."""

    transactions: bool


@message(410)
class BrokerRegistered(NamedTuple):
    """Controller actor -> its node's ReplicaManager: the node registered at ``broker_epoch``.

    Controller requests wait until the first one; from then on those meant
    for an older epoch (a previous registration) are refused.
    """

    broker_id: int
    broker_epoch: int


class ReplicaStateRow(NamedTuple):
    """One partition's role on this node, from a LeaderAndIsr the ReplicaManager accepted."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    replicas: list[int]
    partition_epoch: int
    is_new: bool
    configs: dict[str, str]
    # the topic's id (base64url; "": not known, a topic an older controller made): the
    # shard deletes a directory of the name holding another (a dead namesake's)
    topic_id: str = ""
    # unless the id was given late (adopted): the directory's id is then rewritten
    topic_id_adopted: bool = False


@message(411)
class BecomeLeaderOrFollower(NamedTuple):
    """ReplicaManager -> PartitionShard: host these partitions (open the log) in these roles."""

    req_id: int
    rows: list[ReplicaStateRow]


class PendingIsrRow(NamedTuple):
    """An ISR change a leader proposed whose outcome its ReplicaManager has not learnt.
    ``send_again``: the last answer left its fate unknown (timed out, no controller): the
    leader sends it again; else its AlterPartition still waits for the controller's
    answer, or the controller refused it for good (held until a LeaderAndIsr at a higher
    leader epoch)."""

    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int
    send_again: bool


class RestoredRoleRow(NamedTuple):
    """A partition's last role as its ReplicaManager knows it: the newest LeaderAndIsr it
    accepted, with the ISR changes the controller wrote since. ``pending``: the ISR
    proposal whose outcome is unknown, pending again (the high watermark over the larger
    ISR)."""

    role: ReplicaStateRow
    pending: PendingIsrRow | None


@message(418)
class RestoreRoles(NamedTuple):
    """ReplicaManager -> a PartitionShard that lost its memory (``reason``: a crash
    restarted it in place, or its process was restarted): the last roles of its
    partitions. Unlike BecomeLeaderOrFollower, a role is applied only when newer than
    what the shard applied since it started again (a LeaderAndIsr that waited in its
    mailbox wins); once applied, the shard has the purgatories watch again
    (ShardRestarted) and answers RolesRestored."""

    req_id: int
    reason: str
    rows: list[RestoredRoleRow]


@message(419)
class RolesRestored(NamedTuple):
    """PartitionShard -> ReplicaManager: RestoreRoles ``req_id`` applied; ``rows``, each
    restored partition's outcome (0: its role holds, applied or kept as newer; else why it
    could not be). The shard answers in order, so a BecomeLeaderOrFollower or
    DropPartitions sent to it before the RestoreRoles and still unanswered died with it:
    the ReplicaManager settles a BecomeLeaderOrFollower with these outcomes (the restore
    carried its role), and sends a DropPartitions again (its answer settles it)."""

    req_id: int
    rows: list[PartitionErrorRow]
    # the roles refused because the replica's storage failed (their rows say
    # KAFKA_STORAGE_ERROR): the ReplicaManager reports these, and only these, to the
    # controller (a log that cannot open is answered 56 too, but is not reported)
    storage_failed: list[OfflineReplicaRow] = []
    # the roles refused (56) because a deleted partition of the same name still has its
    # directory: no storage failure (never reported), and the role is not forgotten: the
    # shard keeps the newest one and takes it once the directory is gone (RolesTaken)
    awaiting_delete: list[TopicPartitionRow] = []
    # the restored roles of an adopted id whose ``partition.metadata`` was read back
    # holding it: a LeaderAndIsr settled by this restore answers them
    topic_ids_confirmed: list[TopicIdRow] = []


@message(412)
class BecameLeaderOrFollower(NamedTuple):
    """PartitionShard -> ReplicaManager: each partition's outcome (0, or why it failed),
    the roles refused because the replica's storage failed, and those that wait for a
    deleted namesake's directory to go (as RolesRestored's)."""

    req_id: int
    rows: list[PartitionErrorRow]
    storage_failed: list[OfflineReplicaRow] = []
    awaiting_delete: list[TopicPartitionRow] = []
    # the roles of an adopted id whose ``partition.metadata`` was read back holding it
    # (LeaderAndIsrResponse's ``topic_ids_confirmed``)
    topic_ids_confirmed: list[TopicIdRow] = []


class RoleRefusedRow(NamedTuple):
    """A role (the partition, at ``leader_epoch``) a shard could not take: why (an error
    code)."""

    topic: str
    partition: int
    leader_epoch: int
    error_code: int


@message(424)
class RolesTaken(NamedTuple):
    """PartitionShard ``shard`` (its index) -> ReplicaManager: roles it refused while the
    directory of a deleted partition of the same name was still there (answered
    KAFKA_STORAGE_ERROR, ``awaiting_delete``), taken now that it is gone: the newest
    role it was given for each, unless a delete of the partition came since. The
    ReplicaManager has the fetchers and coordinators follow each one that is still the
    partition's last role (as for a LeaderAndIsr applied), and reports ``storage_failed``
    as a BecameLeaderOrFollower's."""

    shard: int
    rows: list[ReplicaStateRow]
    storage_failed: list[OfflineReplicaRow] = []
    # the kept roles it could not take once the directory went (their log would not open,
    # or its storage failed: those are in ``storage_failed`` too): the ReplicaManager
    # forgets each still the partition's last role (dark here, as a refused LeaderAndIsr
    # row), at once rather than at the shard's next restore
    refused: list[RoleRefusedRow] = []


@message(440)
class CancelKeptRoles(NamedTuple):
    """ReplicaManager -> PartitionShard: a StopReplica without delete stopped these
    partitions here. A role the shard keeps for one of them (refused while a deleted
    namesake's directory was still there, to be taken once it goes) is dropped: the
    controller took it away. Not answered (the StopReplica is answered without the shards,
    as before); the shard handles it in order, after any role sent to it before."""

    rows: list[TopicPartitionRow]


class CoordinatorPartitionRow(NamedTuple):
    partition: int
    leader_epoch: int


@message(413)
class CoordinatorPartitions(NamedTuple):
    """ReplicaManager -> every GroupCoordinator: ``__consumer_offsets`` partitions this node now
    leads (load their groups) and those it no longer leads (unload them)."""

    elected: list[CoordinatorPartitionRow]
    resigned: list[int]
    # the partitions __consumer_offsets has (groups map over them); 0: unknown
    partition_count: int = 0


@message(414)
class AwaitTopics(NamedTuple):
    """Handler -> ReplicaManager: answer once the metadata has every topic (``present``: with a
    leader for each partition) or has none of them (not ``present``), or after the timeout.

    The ReplicaManager answers once every handler of every process of the node
    acknowledged (MetadataSynced) an update that shows what was awaited, so the asking
    handler's cache and every other one already show it.
    """

    req_id: int
    topics: list[str]
    present: bool
    # > 0: answered by then at the latest (the topics not so yet named missing); <= 0:
    # no timeout of the client's, still bounded by the ReplicaManager's give-up
    timeout_ms: int
    # ``present``: the fewest partitions a topic named here must have (a CreatePartitions
    # waits for its new ones); a topic not named needs one at least
    at_least: dict[str, int] = {}


@message(415)
class TopicsAwaited(NamedTuple):
    """ReplicaManager -> handler: ``missing``: the topics still not as awaited (timed out)."""

    req_id: int
    missing: list[str]


@message(422)
class MetadataSync(NamedTuple):
    """ReplicaManager -> each RequestHandler of every process of the node, right after each
    UpdateMetadata (or the snapshot a started process gets): answer MetadataSynced with
    ``version``. Messages from one sender to one receiver keep their order, so the answer
    says the handler's cache holds every update up to ``version`` (the ReplicaManager's
    count of the updates it sent): a topic change is answered once every process of the
    node serves it, not only process 0."""

    version: int


@message(423)
class MetadataSynced(NamedTuple):
    """RequestHandler -> ReplicaManager: the metadata up to ``version`` is applied."""

    version: int


@message(416)
class StartController(NamedTuple):
    """Broker -> its controller actor: the node registered at ``broker_epoch``; take part."""

    broker_epoch: int


@message(417)
class ControlledShutdownStep(NamedTuple):
    """Broker (ask) -> its controller actor: ``start`` the controlled shutdown, or only
    report how it goes (a dict: state, attempts, remaining partitions, message)."""

    start: bool


# -------------------------------------------- metadata store -> its owner


@message(480)
class BrokersChanged(NamedTuple):
    """The children of ``/brokers/ids`` changed (a watch fired once; read again to re-arm)."""

    session_id: int


@message(481)
class TopicsChanged(NamedTuple):
    """The children of ``/brokers/topics`` changed."""

    session_id: int


@message(482)
class TopicDeletionsChanged(NamedTuple):
    """The children of ``/admin/delete_topics`` changed."""

    session_id: int


@message(483)
class IsrChangesNotified(NamedTuple):
    """A leader added an ``/isr_change_notification`` znode."""

    session_id: int


@message(484)
class ControllerChanged(NamedTuple):
    """``/controller`` was created, changed or deleted."""

    session_id: int


SESSION_CONNECTED = "connected"
SESSION_SUSPENDED = "suspended"
SESSION_EXPIRED = "expired"
SESSION_CLOSED = "closed"


@message(485)
class SessionStateChanged(NamedTuple):
    """The store's session: ``connected`` (``session_id`` is the live session, maybe a new one),
    ``suspended`` (connection lost, the session may still live; writes fail meanwhile),
    ``expired`` (the session is gone with its ephemeral znodes and watches: a controller
    stops acting at once, a node must register again), ``closed`` (by :meth:`close`).
    ``expired`` and ``closed`` name the session that ended (0: not known): the client may
    hold a new session by the time the notice is read, and the notice is about the old one.
    """

    state: str
    session_id: int
