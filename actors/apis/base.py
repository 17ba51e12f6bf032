"""What every Kafka API function gets and gives.

An API function is a generator: it yields a list of ``Call`` (messages to
other actors that answer with a ``*Done``/``*Ready`` carrying the same
req_id), receives their answers in the same order, and finally returns a
``Respond``. The RequestHandler actor drives it, so the function reads top
to bottom while the actor never blocks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from loguru import logger

from actors.core.metadata_cache import MetadataCache
from actors.core.topic_config import internal_partition_count
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.security.acl import Authorizer, Operation, ResourceType
from actors.security.authorizer_log import log_decision
from actors.topology import Topology, listener_of
from wire.broker_messages import TopicEntry
from wire.cluster_messages import UpdateMetadata
from wire.errors import ErrorCode

ANONYMOUS_PRINCIPAL = "User:ANONYMOUS"
# a store without a stamp is read again this often; a failed read is tried again after it
ACL_REFRESH_MS = 1000


class Access(NamedTuple):
    """Who sent the request being handled: principal, client address, API name, and the
    connection it came on (its id tells the listener: ``HandlerContext.listener_name``)."""

    principal: str
    host: str
    api: str
    conn_id: int = 0


PRODUCER_ID_NODE_SLOTS = 1024  # cluster nodes whose broker ids differ modulo this never collide


class Call(NamedTuple):
    target: Address
    make: Callable[[int], Any]  # req_id -> message
    # How long the answer may rightly take (a JoinGroup waits for the whole
    # rebalance); the handler abandons a request only past this plus
    # request.timeout.ms.
    max_wait_ms: int = 0
    # A call with an ``on_timeout`` has a deadline: ``deadline_ms`` after it was sent, still
    # unanswered, the handler takes ``on_timeout(req_id)`` as its answer and resumes the
    # API as with any answer; the real one, should it come later, is dropped (counted in
    # internal_answers_late). Such a call is never abandoned: its deadline answers it.
    # Without one (None), the abandon time alone ends the wait (see max_wait_ms).
    deadline_ms: int = 0
    on_timeout: Callable[[int], Any] | None = None
    # ``silence``: a live process answers this call at once, or by max_wait_ms (a Read, a
    # WatchFetch, a ListOffsets, an OffsetForLeaderEpoch, a DescribeProducers, a
    # DescribeLogDir, a coordinator's Heartbeat, LeaveGroup, OffsetFetch, DescribeGroups,
    # ListGroups), so its deadline passing says the target's process is silent (paused,
    # or not ready after a restart). The handler then marks that process and, till any
    # answer from it, gives such calls to it at most max_wait_ms plus carry_ms plus
    # SILENT_DEADLINE_MS, and sends only one of them at a time (the probe; the others
    # are answered by that short deadline unsent: request_handler.py). A Produce's Append
    # does not say so: acks=-1 waits for the followers too, and its REQUEST_TIMED_OUT
    # sooner than timeout_ms would be a retry (a duplicate for a producer without
    # idempotence); nor does a DeleteRecords (it waits for the followers) or an
    # OffsetCommit (for its write).
    silence: bool = False
    # The part of deadline_ms given to carry the answer's bytes through the link (a Read's
    # or ReplicaRead's fetch.carry_ms): kept in the short deadline of a silent process's
    # call, as a big read from a live process takes longer than SILENT_DEADLINE_MS.
    carry_ms: int = 0


# The most a topic change's timeout_ms adds to the handler's wait for the Controller's
# answer: the Controllers answer within their own give-ups whatever the timeout, so a
# client's huge timeout_ms never keeps a lost request waiting for days.
TOPIC_CHANGE_WAIT_CAP_MS = 30_000


def topic_change_wait_ms(timeout_ms: int) -> int:
    """``Call.max_wait_ms`` for a CreateTopics, DeleteTopics or CreatePartitions."""
    return min(max(0, int(timeout_ms)), TOPIC_CHANGE_WAIT_CAP_MS)


class Respond(NamedTuple):
    data: Any  # a response dict for the codec, or None when respond is False
    respond: bool = True
    close: bool = False
    # The non-zero error codes in ``data`` (the errors metric), when the API already
    # knows them; None: the handler finds them by walking ``data``.
    error_codes: list[int] | None = None


ApiGen = Generator[list[Call], list[Any], Respond]


@dataclass
class HandlerContext:
    """What the API functions may read; owned by one RequestHandler actor."""

    topology: Topology
    config: Config
    broker_id: int
    advertised_host: str
    advertised_port: int
    cluster_id: str
    handler_index: int
    topics: dict[str, TopicEntry] = field(default_factory=dict)
    producer_id_counter: int = 0
    producer_id_base: int = 0
    # the handler's clock: wall time for producer-id bases, monotonic for request timings
    clock: Clock = field(kw_only=True)
    # cluster mode (zookeeper.connect): this handler's copy of the cluster metadata, kept by
    # the UpdateMetadata requests the ReplicaManager forwards; None on a single node
    cluster: MetadataCache | None = field(default=None, kw_only=True)
    # authorizer.class.name = acl: this handler's copy of the ACLs (None: everyone may do
    # everything), and who asks right now: the handler sets it before it runs a request's
    # generator, so an API function's checks see its own request's principal
    authorizer: Authorizer | None = field(default=None, kw_only=True)
    # where CreateAcls/DeleteAcls write (SecurityMetadata: the data dir's file or ZooKeeper)
    acl_store: Any = field(default=None, kw_only=True)
    # where AlterUserScramCredentials writes and DescribeUserScramCredentials reads
    # (SecurityMetadata, whether or not ACLs are on), and the SASL credential cache of
    # this process that a change refreshes at once (None without SASL listeners)
    user_store: Any = field(default=None, kw_only=True)
    credentials: Any = field(default=None, kw_only=True)
    # processes 1.. of a cluster node (num.processes > 1): no store of their own; the SCRAM
    # and ACL admin go to process 0's controller, and its answers go into this process's
    # copy of the users and ACLs (a SecurityMirror) before the client is answered
    security_mirror: Any = field(default=None, kw_only=True)
    access: Access = field(default_factory=lambda: Access(ANONYMOUS_PRINCIPAL, "", ""),
                           kw_only=True)
    # num.processes > 1: the generation of each process of this broker (its node name ->
    # 0 at start, +1 at each restart) as this handler knows it, stamped on its Appends
    # (Append.generation); kept by the handler as ProcessStarted tells it. Missing: 0.
    process_generations: dict[str, int] = field(default_factory=dict, kw_only=True)
    # The listeners' names by index (``listeners`` order: a connection id carries the
    # index), and what each advertises (name -> host, port; a listener not advertised has
    # none). Empty: the one listener advertised as advertised_host:advertised_port.
    listener_names: tuple[str, ...] = field(default=(), kw_only=True)
    advertised: dict[str, tuple[str, int]] = field(default_factory=dict, kw_only=True)
    # topic_name_of's reverse map, and the table it was built from
    _names_by_id: tuple[dict[str, TopicEntry] | None, dict[str, str]] = field(
        default=(None, {}), init=False, repr=False)

    def listener_name(self) -> str | None:
        """The listener the current request came in on (Kafka's request.context.listenerName):
        answers that name brokers give each broker's endpoint of this listener, as a client
        can reach only the listener it connected to. None: no named listeners (the one
        advertised endpoint is everyone's)."""
        names = self.listener_names
        if not names:
            return None
        index = listener_of(self.access.conn_id)
        return names[index] if index < len(names) else names[0]

    def own_endpoint(self) -> tuple[str, int] | None:
        """This broker's (host, port) on the current request's listener; None when that
        listener is not advertised (Kafka leaves the broker out of such answers)."""
        name = self.listener_name()
        if name is None or not self.advertised:
            return self.advertised_host, self.advertised_port
        return self.advertised.get(name)

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str,
                log: bool = True) -> bool:
        """Kafka's ``authorize``: may the current request's principal do this?

        Every decision goes to the ``authorizer`` logger (denials at INFO); ``log``
        False for the probes Kafka does not log either (KIP-679's "any topic").
        """
        if self.authorizer is None:
            return True
        self.refresh_acls()
        access = self.access
        decision = self.authorizer.authorize(access.principal, access.host, operation,
                                             resource_type, name)
        if log:
            log_decision(decision, access.api, self.topology.node)
        return decision.allowed

    def refresh_acls(self, force: bool = False) -> None:
        """Read the store's ACLs again when they changed (or ``force``): a single node's
        store file says so by its stamp (one ``stat`` a decision), so a change made through
        any process of the broker is decided on by the next request on every connection,
        as Kafka's broker applies its own changes at once; a store without a stamp is read
        again when the last read is ACL_REFRESH_MS old.

        In a cluster only ``force`` reads (this handler's own CreateAcls, DeleteAcls and
        DescribeAcls): the ClusterController applies the changes ZooKeeper notifies under
        /kafka-acl-changes as they come, whichever node made them."""
        authorizer, store = self.authorizer, self.acl_store
        if authorizer is None or store is None:
            return
        if force:
            with authorizer.lock:  # after any read that started before this one
                try:
                    acls = store.get_all_acls()
                except Exception as exc:  # the store is down: keep what was read last
                    logger.bind(actor="authorizer").warning("reading the ACLs failed: {}", exc)
                    return
                authorizer.replace(acls)
                authorizer.read_ms = self.clock.now_ms()
                authorizer.read_failed = False
            return
        if self.cluster is not None:
            return
        stamp_of = getattr(store, "acls_stamp", None)
        stamp: object = None
        now = self.clock.now_ms()
        if stamp_of is not None:
            stamp = stamp_of()  # taken before the read: a write meanwhile is read next time
            if stamp == authorizer.read_stamp:
                return
            if authorizer.read_failed and now - authorizer.read_ms < ACL_REFRESH_MS:
                return  # the last read failed: tried again a period after it, not each call
        elif now - authorizer.read_ms < ACL_REFRESH_MS:
            return
        authorizer.read_ms = now  # shared by the process's handlers
        generation = authorizer.generation
        try:
            acls = store.get_all_acls()
        except Exception as exc:  # the store is down: keep deciding on what was read last
            logger.bind(actor="authorizer").warning("reading the ACLs failed: {}", exc)
            authorizer.read_failed = True
            return
        authorizer.read_failed = False
        if authorizer.generation == generation:
            authorizer.replace(acls)
            authorizer.read_stamp = stamp

    def allowed_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """The principal may do ``operation`` on some resource of the type (KIP-679)."""
        if self.authorizer is None:
            return True
        access = self.access
        if access.principal in self.authorizer.super_users:
            return True
        names = {b.pattern.name for b in self.authorizer.bindings()
                 if b.pattern.resource_type is resource_type}
        return any(self.allowed(operation, resource_type, n, log=False) for n in names)

    def topic_name_of(self, topic_id: str) -> str | None:
        """The name of the topic with this id (base64url text) in this handler's table, or
        None. The reverse map is built once per table (the table is replaced, never
        changed in place)."""
        if self._names_by_id[0] is not self.topics:
            self._names_by_id = (self.topics, {e.topic_id: name for name, e in self.topics.items()
                                               if e.topic_id})
        return self._names_by_id[1].get(topic_id) if topic_id else None

    def partition_count(self, topic: str) -> int | None:
        entry = self.topics.get(topic)
        return None if entry is None else entry.num_partitions

    def internal_partitions(self, topic: str) -> int:
        """How many partitions an internal topic's ids map over: those it has (the cluster's
        metadata, or this node's table), the config's while it has none."""
        found = (self.cluster.whole_partition_count(topic) if self.cluster is not None
                 else self.partition_count(topic))
        return internal_partition_count(topic, found, self.config)

    def not_leader(self, topic: str, partition: int) -> bool:
        """In a cluster: the metadata names another leader (or none) for this partition."""
        return self.cluster is not None and self.cluster.leader(topic, partition) != self.broker_id

    def client_epoch(self, partition_row: Any) -> int:
        """The current_leader_epoch a client sent for a partition (Fetch v9+, ListOffsets v4+,
        OffsetForLeaderEpoch), -1 when absent. A single node answers -1 (unchecked): its
        Metadata says epoch 0 and it never changes leaders, while a log it inherited (a
        cluster node's directory) may hold a higher epoch, which would fence every client
        for good."""
        if self.cluster is None:
            return -1
        epoch = getattr(partition_row, "current_leader_epoch", -1)
        return -1 if epoch is None else int(epoch)

    def not_leader_code(self, topic: str, partition: int, current_leader_epoch: int) -> int:
        """The error for a partition this node does not lead (``not_leader``), in Kafka's
        order: a node that holds no replica of it (not among the metadata's replicas)
        answers NOT_LEADER_OR_FOLLOWER whatever the client's epoch (ReplicaManager's
        getPartitionOrError finds no Partition, before any epoch is checked); a follower
        checks the client's epoch (Fetch v9+, ListOffsets v4+, OffsetForLeaderEpoch) first
        (Partition.getLocalLog): older than the metadata's is FENCED_LEADER_EPOCH, newer
        UNKNOWN_LEADER_EPOCH; at the same epoch, or none (-1), NOT_LEADER_OR_FOLLOWER."""
        known = self.cluster.partition(topic, partition) if self.cluster is not None else None
        if (known is not None and self.broker_id in known.replicas
                and 0 <= current_leader_epoch != known.leader_epoch):
            return int(ErrorCode.FENCED_LEADER_EPOCH if current_leader_epoch < known.leader_epoch
                       else ErrorCode.UNKNOWN_LEADER_EPOCH)
        return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def apply_metadata(self, update: UpdateMetadata) -> None:
        """An UpdateMetadata the ReplicaManager accepted: the cache, then the topic table."""
        assert self.cluster is not None
        self.cluster.apply(update)
        self.topics = {
            t: TopicEntry(self.cluster.partition_count(t) or 0, self.cluster.configs(t),
                          self.cluster.topic_id(t))
            for t in self.cluster.topics()
        }

    def next_producer_id(self) -> int:
        """Unique across handlers and restarts, without masking anything away.

        (start ms << 20) leaves room for a million ids per handler-set and ms of
        uptime before the next start's range; within a run, handler i hands out
        i, i + H, i + 2H, ... so handlers never collide. With num.processes = N the
        handlers of all processes count as one set of N * H (handler i of process k is
        k * H + i): two processes' handler i whose first InitProducerId fell in the
        same millisecond handed out the same ids, and one producer's batches were
        taken for another's duplicates (acknowledged, never written).
        """
        if not self.producer_id_base:
            self.producer_id_base = self.clock.wall_ms() << 20
        self.producer_id_counter += 1
        topo = self.topology
        nodes = topo.process_nodes
        handlers = topo.num_handlers * max(1, len(nodes))
        index = (nodes.index(topo.node) if topo.node in nodes else 0) * topo.num_handlers \
            + self.handler_index
        local = self.producer_id_counter * handlers + index
        if self.cluster is None:
            return self.producer_id_base + local
        # In a cluster every node takes its base from its own clock: two nodes whose first
        # InitProducerId falls in the same millisecond had the same base and handed out the
        # same ids (found by the simulator; tests/sim/test_regressions.py replays it). The
        # broker id in the low bits keeps nodes apart (ids distinct modulo 1024).
        return self.producer_id_base + local * PRODUCER_ID_NODE_SLOTS + (
            self.broker_id % PRODUCER_ID_NODE_SLOTS)


class PartitionRow(Protocol):
    """Any row that names a partition."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


R = TypeVar("R", bound=PartitionRow)


def group_by_shard(ctx: HandlerContext, rows: list[R]) -> dict[Address, list[R]]:
    """Rows grouped by the shard that owns their partition, in their order."""
    out: dict[Address, list[R]] = {}
    for row in rows:
        out.setdefault(ctx.topology.shard_for(row.topic, row.partition), []).append(row)
    return out


# The code a call to another process answers, by its deadline, for each partition it
# named (a Read, a ReplicaRead, a ListOffsets, an OffsetForLeaderEpoch, a DescribeProducers):
# the one every client retries quietly after a metadata refresh ("this partition's leader
# is not answering here"), and the one a restarted process's generation refusal gives.
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
# The deadline of a call to another process that a live process answers at once, with no
# max wait in the request to go by (a ListOffsets, an OffsetForLeaderEpoch, a
# DescribeProducers, a DescribeLogDir): its answer takes milliseconds (an index look-up, a
# part of a segment read, a walk of the producer state); 5 s is far past a loaded host's
# delays (a needless error costs the client a metadata refresh and a back-off), and a stuck
# process costs the other partitions of such a request this much.
PROMPT_DEADLINE_MS = 5_000
# How long past the time a write may rightly take (a Produce's or DeleteRecords' timeout_ms,
# an OffsetCommit's own give-up) a call to another process waits before it is answered by
# its deadline: the owner's own timeout answer, one link hop away, comes first unless its
# process is stuck, and a leader's own write late by less than this on a loaded host is
# never answered in error.
WRITE_DEADLINE_GRACE_MS = 1000


def remote_call(ctx: HandlerContext, target: Address, make: Callable[[int], Any],
                max_wait_ms: int, deadline_ms: int, on_timeout: Callable[[int], Any],
                silence: bool, carry_ms: int = 0) -> Call:
    """A call to ``target`` that, if it lives in another process of this broker
    (num.processes > 1), has the deadline ``deadline_ms`` and ``on_timeout`` (and
    ``silence`` and ``carry_ms``: see Call). Such a process may not answer: paused, or
    restarted and not ready yet. A call to an actor of the handler's own process is the
    plain Call: that actor answers unless the process itself is stuck, and a deadline
    there could only fire on a loaded host, with a needless error. (A fetch's and a
    replica fetch's Reads make this test inline, ``target.node == ctx.topology.node``: no
    Python call for it on a one-process broker's hottest path.)"""
    if target.node == ctx.topology.node:
        return Call(target, make, max_wait_ms)
    return Call(target, make, max_wait_ms, deadline_ms, on_timeout, silence, carry_ms)


def prompt_call(ctx: HandlerContext, target: Address, make: Callable[[int], Any],
                on_timeout: Callable[[int], Any]) -> Call:
    """A call a live actor answers at once (an index look-up, a walk of producer state, a
    coordinator's Heartbeat): remote_call with PROMPT_DEADLINE_MS and ``silence``."""
    return remote_call(ctx, target, make, 0, PROMPT_DEADLINE_MS, on_timeout, silence=True)


class _Row(Protocol):
    """A shard's answer row for one partition (a NamedTuple)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    def _replace(self, *, topic: str = ..., partition: int = ...) -> Any: ...


def partitions_timed_out(done: Callable[[int, list[Any]], Any], template: _Row,
                         rows: list[Any]) -> Callable[[int], Any]:
    """``on_timeout`` for a call naming partitions (``rows``: each has topic and partition):
    ``done(req_id, answers)``, each answer the ``template`` row (the code, and -1 or
    nothing for the rest) with a row's topic and partition. The answer the handler takes
    when the shard's process does not answer by the call's deadline."""
    return functools.partial(_partitions_timed_out, done, template, rows)


def _partitions_timed_out(done: Callable[[int, list[Any]], Any], template: _Row,
                          rows: list[Any], req_id: int) -> Any:
    return done(req_id, [template._replace(topic=r.topic, partition=r.partition)
                         for r in rows])
