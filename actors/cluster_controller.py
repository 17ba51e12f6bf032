"""The Controller of a cluster node: ZooKeeper, election, the controller core, its requests.

Every node of a cluster runs one, at the address the single node's
Controller has (``controller@node-<id>``), so the handlers send topic admin
to it the same way. It owns the node's ZooKeeper session (a
``MetadataStore``; the store's threads only send it notices) and:

* keeps the runtime's Directory in step with ``/brokers/ids``: every live
  node's gateway is learned from its registration (``actorlog_gateway``) and
  forgotten when the node leaves;
* registers the node again after each new ZooKeeper session (the Broker made
  the first registration before telling it ``StartController``) and tells
  the node's ReplicaManager the broker epoch;
* runs the ControllerDriver (election, the pure controller core, its
  metadata writes): the node whose driver won ``/controller`` is the active
  controller; it sends LeaderAndIsr, UpdateMetadata and StopReplica to the
  nodes' ReplicaManagers through a ControllerChannel (in order, one in
  flight per node, resent until answered or the node leaves) and answers
  CreateTopics, DeleteTopics, ControlledShutdown and AlterPartition;
* forwards the topic admin of its own node's handlers to the active
  controller when it is not that one itself (retrying when the controller
  moved, NOT_CONTROLLER), and runs this node's controlled shutdown;
* ticks ``retry_writes`` (writes the store could not reach) and the
  automatic preferred-leader election from the injected clock;
* keeps the node's SCRAM users and ACLs (SASL listeners, ``authorizer.class.name``)
  fresh from ZooKeeper's change notifications; with num.processes > 1 it is
  their single owner for every process of the node: it relays each change to
  the SecurityView of processes 1.. (``SecurityRelay``; all of them to a process
  that starts) and serves the SCRAM and ACL admin requests their handlers
  forward, so no process but this one needs a ZooKeeper session.

Every call to the store blocks this actor only; when ZooKeeper is away the
calls fail at once (MetadataUnavailable) and are tried again later.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from actors.core.cluster_model import BrokerInfo, TopicPartition
from actors.core.controller_channel import ControllerChannel
from actors.core.controller_events import (
    AlterPartitionReassignments,
    AlterPartitionRequest,
    AlterPartitionResult,
    AlterReassignmentsResult,
    AutoLeaderRebalance,
    ControlledShutdownRequest,
    ControlledShutdownResult,
    CreatePartitions,
    CreatePartitionsResult,
    CreateTopics,
    CreateTopicsResult,
    DeleteTopics,
    DeleteTopicsResult,
    ElectionType,
    ElectLeaders,
    ElectLeadersResult,
    IsrProposal,
    ListPartitionReassignments,
    ListReassignmentsResult,
    NewPartitions,
    NewTopic,
    ReplicasOffline,
    ReplicasOfflineResult,
    Result,
    RetryReassignments,
    StopReplicaDone,
    TopicConfigsChanged,
    TopicIdsConfirmed,
)
from actors.core.controller_state import ControllerConfig, ControllerCore
from actors.core.topic_admin import ConfigChange, altered_topic_configs
from actors.core.topic_config import effective, internal_partition_counts
from actors.metadata import znodes
from actors.metadata.controller_driver import ControllerDriver
from actors.metadata.store import BrokerIdInUse, MetadataError, MetadataStore, MetadataUnavailable
from actors.partition_limits import read_partition_budget
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.runtime.directory import REREAD_MIN_MS, NodeEndpoint
from actors.security.acl import AclError, Authorizer, ResourcePattern
from actors.security.acl_admin import create_acls, delete_acls
from actors.security.mirror import (
    acl_rows,
    binding_of,
    binding_row,
    filter_of,
    scram_texts,
    user_rows,
)
from actors.security.scram_admin import (
    Deletion,
    Upsertion,
    alter_scram_credentials,
    describe_scram_credentials,
)
from actors.topology import Topology, broker_node_name
from wire import admin_messages as am
from wire import broker_messages as bm
from wire import cluster_messages as cm
from wire import security_messages as sm
from wire.errors import ErrorCode, KafkaError
from wire.fingerprint import mismatch_line
from wire.security_messages import ChangesNotified

NOT_CONTROLLER = int(ErrorCode.NOT_CONTROLLER)
NONE = int(ErrorCode.NONE)
CHANNEL_RETRY_MS = 3000     # a node's request unanswered this long is sent again
RETRY_WRITES_MS = 1000      # writes the store could not reach are tried again this often
REASSIGN_RETRY_MS = 5000    # a reassignment step whose write failed is tried again this often
FORWARD_RETRY_MS = 200      # no controller known, or it moved: ask again after this
REGISTER_RETRY_MS = 1000    # a registration that failed (ZooKeeper away) is tried again
# authorizer.class.name = acl: the ACLs are read whole again this often, a safety net under
# the /kafka-acl-changes watches (a notice whose read failed, a change made without one)
ACL_RESYNC_MS = 60_000
ACL_CHANGE_ROOTS = (znodes.ACL_CHANGES, znodes.ACL_EXTENDED_CHANGES)


def gateway_endpoint(gateway: str, incarnation: str = "") -> NodeEndpoint | None:
    """``tcp://host:port`` (as registered) into a directory entry; None if unusable.
    ``incarnation``: the registering process's (``BrokerInfo.incarnation``)."""
    text = gateway.strip()
    if not text.startswith("tcp://"):
        return None
    host, sep, port = text[len("tcp://"):].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return NodeEndpoint(host, int(port), incarnation=incarnation)


ForwardedRequest = (bm.CreateTopics | bm.DeleteTopics | am.CreatePartitions
                    | am.AlterTopicConfigs | am.ElectLeadersAsk | am.AlterReassignmentsAsk
                    | am.ListReassignmentsAsk)
ForwardedAnswer = (bm.CreateTopicsDone | bm.DeleteTopicsDone | am.CreatePartitionsDone
                   | am.AlterTopicConfigsDone | am.ElectLeadersDone | am.AlterReassignmentsDone
                   | am.ListReassignmentsDone)
# Config change notifications older than this are deleted by the controller (Kafka's 15 min).
CONFIG_CHANGE_EXPIRY_MS = 15 * 60 * 1000


@dataclass
class _Forward:
    """A topic admin request of this node's handlers, on its way to the active controller."""

    origin: Address
    origin_req_id: int
    request: ForwardedRequest
    deadline_ms: int
    next_try_ms: int = 0
    sent_to: int | None = None  # the controller it was last sent to (None: to find)
    # the nodes of every controller it was sent to: a success from any answers it (one sent
    # again to a new controller may have been done by the first)
    sent_nodes: set[str] = field(default_factory=set)


@dataclass
class _Shutdown:
    """This node's controlled shutdown: attempts made, partitions it still leads."""

    state: str = "running"          # running, done, failed, skipped
    attempts: int = 0
    req_id: int = 0
    sent_ms: int = 0
    sent_to: int | None = None      # the controller of the attempt in flight (None: answered)
    # /controller changed since that attempt went (the controller may have restarted and
    # won again: same id, its answer lost with its old life)
    controller_changed: bool = False
    next_try_ms: int = 0
    remaining: int = -1
    message: str = ""


def controller_config(broker_id: int, config: Config) -> ControllerConfig:
    return ControllerConfig(
        broker_id=broker_id,
        num_partitions=int(config["num.partitions"]),
        default_replication_factor=int(config["default.replication.factor"]),
        unclean_leader_election_enable=bool(config["unclean.leader.election.enable"]),
        delete_topic_enable=bool(config["delete.topic.enable"]),
        leader_imbalance_per_broker_percentage=int(
            config["leader.imbalance.per.broker.percentage"]),
        partition_budget=read_partition_budget(),
        internal_partitions=internal_partition_counts(config),
    )


class ClusterController(Actor):
    mailbox_size = 0  # unbounded: notices and node requests must never wait

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 store: MetadataStore, broker: BrokerInfo, clock: Clock,
                 rng: random.Random | None = None, credentials: Any = None,
                 authorizer: Authorizer | None = None, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        # the ACLs this node's handlers decide on (authorizer.class.name = acl), kept up to
        # date from the /kafka-acl-changes notifications; None without ACLs
        self.authorizer = authorizer
        # the node's SASL credential cache (CredentialCache), refreshed for each user a
        # /config/changes notification names; None without SASL listeners
        self.credentials = credentials
        self.topology = topology
        self.config = config
        self.store = store
        self.broker = broker
        self.clock = clock
        self.rng = rng or random.Random()
        # a simulator's seeded generator (its runs are replayed by seed), or None: the
        # topic ids then come from os.urandom
        self.seeded = rng is not None

    # ------------------------------------------------------------ lifecycle
    def _topic_id_bytes(self) -> Callable[[int], bytes]:
        """The topic ids' randomness. Outside the simulator os.urandom: an id must never
        come again (a namesake given a dead topic's id would serve its directories).
        In the simulator a generator of its own, seeded from the assignments' state
        without drawing from it (a seed's run makes the same assignments with ids as
        without), made once and kept over this actor's restarts: made again from a state
        that had not moved, it would hand out the same ids again."""
        if not self.seeded:
            return os.urandom
        ids: random.Random | None = getattr(self, "_ids", None)
        if ids is None:
            # its words (ints hash alike anywhere)
            ids = self._ids = random.Random(hash(self.rng.getstate()[1]))
        return ids.randbytes

    def setup(self) -> None:
        broker_id = self.broker.broker_id
        self.core = ControllerCore(controller_config(broker_id, self.config), self.rng.randrange,
                                   self._topic_id_bytes())
        self.driver = ControllerDriver(self.store, self.core, send=self._send_to_broker,
                                       reply=self._reply, log=self._state_change,
                                       wire=self.broker.wire or None)
        # (broker, epoch) registrations with another inter-node wire, already said once
        self.wire_refused: set[tuple[int, int]] = getattr(self, "wire_refused", set())
        # the correlation ids go on over a restart of this actor: an answer to a request
        # of its previous life may still come, and must not acknowledge a new one
        old_channel: ControllerChannel | None = getattr(self, "channel", None)
        self.channel = ControllerChannel(
            CHANNEL_RETRY_MS, old_channel.last_ids if old_channel is not None else None)
        # so do the ids of what it forwards and sends to the shards: a late answer to its
        # previous life's forward must not answer a new one's handler
        self.req_ids: Iterator[int] = getattr(self, "req_ids", None) or itertools.count(1)
        self.started = getattr(self, "started", False)
        self.broker_epoch: int = getattr(self, "broker_epoch", -1)
        self.registered_session: int | None = getattr(self, "registered_session", None)
        self.register_retry_ms: int | None = None
        self.brokers: dict[int, BrokerInfo] = {}
        self.forwards: dict[int, _Forward] = {}
        self.forward_answers_ignored = 0  # answers from a node a forward was not sent to
        # per reporting ReplicaManager: its storage reports since the last one taken
        self.log_dir_reports: dict[Address, int] = {}
        self.shutdown: _Shutdown | None = None
        self.last_config_change: str | None = getattr(self, "last_config_change", None)
        # the last ACL change notice applied, per change root (None: read everything)
        self.last_acl_change: dict[str, str | None] = {root: None for root in ACL_CHANGE_ROOTS}
        self.next_acl_resync_ms: int | None = None
        self.was_active = False
        self.elections = 0
        # the version of the last SecurityRelay to processes 1.. (kept over a restart of
        # this actor: theirs only take rows newer than what they hold)
        self.relay_version: int = getattr(self, "relay_version", 0)
        now = self.clock.now_ms()
        self.next_retry_writes_ms = now + RETRY_WRITES_MS
        self.next_reassign_retry_ms = now + REASSIGN_RETRY_MS
        self.reassign_was_pending = False
        self.rebalance_ms = int(self.config["leader.imbalance.check.interval.seconds"]) * 1000
        self.next_rebalance_ms = now + self.rebalance_ms
        self.request_timeout_ms = int(self.config["request.timeout.ms"])
        self.next_reread_ms = 0  # re-reads actors ask for: one a second at most, in all
        # this actor reads the registrations again when asked (Directory.want_reread)
        self.node.directory.kept = True
        if self.started:  # restarted after a crash: take part again at once
            self._refresh_brokers()
            self._call_driver(self.driver.elect)

    def teardown(self) -> None:
        if not self._stopping:
            # A crash: give the controllership up (a driver starts again from the store),
            # but keep the session, which holds this node's registration.
            if self.driver.active:
                self.driver.resign("the controller actor restarts", give_up_znode=True)
            return
        self.node.directory.kept = False
        try:
            self.store.close()  # its ephemeral znodes go: others see this node leave now
        except Exception:
            self.log.exception("closing the ZooKeeper session failed")

    def _state_change(self, line: str) -> None:
        self.log.info("{}", line)

    # ------------------------------------------------------------ start
    @handles(cm.StartController)
    def on_start_controller(self, msg: cm.StartController) -> None:
        self.started = True
        self.broker_epoch = msg.broker_epoch
        self.registered_session = self.store.session_id
        self.tell(self._replica_manager(), cm.BrokerRegistered(self.broker.broker_id,
                                                               msg.broker_epoch))
        self._refresh_brokers()
        self._call_driver(self.driver.elect)
        self._read_config_changes()
        self._read_acl_changes(resync=True)

    def _replica_manager(self, broker_id: int | None = None) -> Address:
        node = (self.node.name if broker_id is None or broker_id == self.broker.broker_id
                else broker_node_name(broker_id))
        return Address(node, "replica-manager")

    def _controller_of(self, broker_id: int) -> Address:
        return Address(self.node.name if broker_id == self.broker.broker_id
                       else broker_node_name(broker_id), self.name)

    # ------------------------------------------------------------ driver calls
    def _call_driver(self, fn: Any, *args: Any) -> None:
        """Call the driver, then act on a change of controllership it made."""
        fn(*args)
        active = self.driver.active
        if active and not self.was_active:
            self.elections += 1
            fence = self.driver.fence
            self.log.info("this node (broker {}) is the active controller, epoch {}",
                          self.broker.broker_id, fence.epoch if fence else "?")
            self.next_rebalance_ms = self.clock.now_ms() + self.rebalance_ms
            self.log_dir_reports.clear()  # counts of an earlier term would hide new failures
        elif self.was_active and not active:
            dropped = self.channel.pending()
            self.channel.clear()
            self.log.info("this node is no longer the controller ({} request(s) to nodes "
                          "dropped)", dropped)
        self.was_active = active
        pending = active and self.driver.core.reassign_retry_pending
        if pending and not self.reassign_was_pending:
            # a step just failed: its first retry a whole interval later (the deadline
            # moved on while nothing was pending, and may be past already)
            self.next_reassign_retry_ms = self.clock.now_ms() + REASSIGN_RETRY_MS
        self.reassign_was_pending = pending

    # ------------------------------------------------------------ store notices
    @handles(cm.SessionStateChanged)
    def on_session(self, msg: cm.SessionStateChanged) -> None:
        if not self.started:
            return
        if msg.state == cm.SESSION_CONNECTED:
            self.log.info("ZooKeeper session {:#x} connected", msg.session_id)
            self._ensure_registered()
            self._refresh_brokers()
            self._read_config_changes()  # the watch is gone after a reconnect
            self._read_acl_changes(resync=True)  # and changes may have gone unnoticed
        elif msg.state == cm.SESSION_SUSPENDED:
            self.log.warning("ZooKeeper connection lost; session {:#x} may still live",
                             msg.session_id)
        elif msg.state == cm.SESSION_EXPIRED:
            self.log.warning("ZooKeeper session expired: this node's registration is gone")
        self._call_driver(self.driver.on_notice, msg)

    @handles(cm.BrokersChanged)
    def on_brokers_changed(self, msg: cm.BrokersChanged) -> None:
        if not self.started:
            return
        self._refresh_brokers()
        self._call_driver(self.driver.on_notice, msg)

    @handles(cm.ControllerChanged, cm.TopicsChanged, cm.TopicDeletionsChanged,
             cm.IsrChangesNotified)
    def on_notice(self, msg: Any) -> None:
        found = self.shutdown
        if (isinstance(msg, cm.ControllerChanged) and found is not None
                and found.sent_to is not None):
            found.controller_changed = True
        if self.started:
            self._call_driver(self.driver.on_notice, msg)

    def _ensure_registered(self) -> None:
        """After a new session, register this node again (a new broker epoch)."""
        session = self.store.session_id
        if session is None or session == self.registered_session:
            return
        try:
            epoch = self.store.register_broker(self.broker, wait_for_stale_ms=0)
        except BrokerIdInUse as exc:
            self.log.error("cannot register again: {}", exc)
            self.register_retry_ms = self.clock.now_ms() + REGISTER_RETRY_MS
            return
        except MetadataError as exc:
            self.log.warning("registering again failed ({}); retrying", exc)
            self.register_retry_ms = self.clock.now_ms() + REGISTER_RETRY_MS
            return
        self.register_retry_ms = None
        self.registered_session = session
        self.broker_epoch = epoch
        self.log.info("registered again as broker {} at epoch {}", self.broker.broker_id, epoch)
        self.tell(self._replica_manager(), cm.BrokerRegistered(self.broker.broker_id, epoch))

    def _refresh_brokers(self) -> bool:
        """The Directory follows ``/brokers/ids``: learn gateways, forget departed nodes.
        False when the registrations could not be read."""
        try:
            now = self.store.get_brokers(watch=True)
        except MetadataUnavailable as exc:
            self.log.debug("brokers not read: {}", exc)
            return False
        directory = self.node.directory
        me = self.broker.broker_id
        now = self._readable(now)
        for broker_id, info in now.items():
            if broker_id == me:
                continue
            name = broker_node_name(broker_id)
            old = self.brokers.get(broker_id)
            endpoint = gateway_endpoint(info.gateway, info.incarnation)
            if endpoint is None:
                self.log.warning("broker {} registered no usable gateway ({!r}); it cannot be "
                                 "reached", broker_id, info.gateway)
                continue
            if old is not None and old.epoch != info.epoch:
                # registered again: links made for the old registration are remade (it is
                # learnt again below). The same process (its session expired while it ran
                # on) gets what was held for it; a new one (restarted, ids it matches
                # answers by start again) does not: that is dead letters
                same = bool(info.incarnation) and old.incarnation == info.incarnation
                directory.forget(name, may_return=same)
                self.channel.remove_broker(broker_id)
            if directory.learn(name, endpoint):
                self.log.info("broker {} at {} (gateway {})", broker_id,
                              ", ".join(e.connection_string for e in info.endpoints),
                              info.gateway)
                if bool(info.curve_key) != (self.node.curve is not None):
                    self.log.warning("broker {} registered {} CURVE between nodes, this node "
                                     "{}: they cannot reach each other", broker_id,
                                     "with" if info.curve_key else "without",
                                     "has it" if self.node.curve is not None else "has none")
        for broker_id in set(self.brokers) - set(now):
            if broker_id != me:
                # it may register again (a session expired while it ran on): what is sent
                # to it meanwhile, answers to what it asked, waits for its registration
                directory.forget(broker_node_name(broker_id),
                                 may_return=bool(self.brokers[broker_id].incarnation))
                dropped = self.channel.remove_broker(broker_id)
                self.log.info("broker {} left the cluster ({} request(s) to it dropped)",
                              broker_id, dropped)
        self.brokers = now
        return True

    def _reread_asked(self) -> None:
        """Read the registrations again for the nodes actors asked about: an answer to a
        process of a node this directory does not list waits for its registration
        (``Directory.want_reread``, rate-limited there; a failed read is tried again).

        Cost: the read runs synchronously in this actor's turn, as the watch-driven
        refresh does: one ZooKeeper round trip for the children of ``/brokers/ids`` and one
        per broker (1 + N), so this turn (and the actors sharing its loop) waits that
        long. At most once per ``REREAD_MIN_MS`` here, whatever the number of nodes or
        held answers that ask."""
        directory = self.node.directory
        # This gate runs on the controller's clock, Directory's per-node limits and backoff
        # on the node's (``Directory.clock``; in a seed both are the simulated one). Either
        # bounds the reads alone.
        now = self.clock.now_ms()
        if now < self.next_reread_ms:
            return  # a peer naming ever new nodes does not make it read more often
        due = directory.due_rereads()
        if not due:
            return
        self.next_reread_ms = now + REREAD_MIN_MS
        self.log.info("reading the registrations again: answers to a process of {} this "
                      "node has not read wait for it", ", ".join(sorted(due)))
        ok = self._refresh_brokers()
        for name in due:
            directory.reread_done(name, ok)

    def _readable(self, brokers: dict[int, BrokerInfo]) -> dict[int, BrokerInfo]:
        """Leave out the brokers whose inter-node wire is not this build's: they and this
        node cannot read each other's messages, so none is sent to them (the elected
        controller's driver leaves them out of the live brokers too). Said once a life."""
        own = self.broker.wire
        if not own:
            return brokers
        readable = {}
        for broker_id, info in brokers.items():
            if broker_id == self.broker.broker_id or info.wire == own:
                readable[broker_id] = info
            elif (broker_id, info.epoch) not in self.wire_refused:
                self.wire_refused.add((broker_id, info.epoch))
                self.log.error("{}; it is left out of the cluster: nothing is sent to it",
                               mismatch_line(f"broker {broker_id}", info.wire, own))
        return readable

    # ------------------------------------------------------------ to the nodes
    def _send_to_broker(self, broker_id: int, message: Any) -> None:
        for target, request in self.channel.enqueue(broker_id, message, self.clock.now_ms()):
            self.tell(self._replica_manager(target), request)

    def _acknowledge(self, broker_id: int, request_type: type, correlation_id: int) -> Any:
        """The request an answer names, if it is the one in flight to ``broker_id`` (then the
        next goes out); None for a late answer to an earlier one (ignored)."""
        answered, nxt = self.channel.acknowledge(broker_id, request_type, correlation_id,
                                                 self.clock.now_ms())
        if answered is None:
            in_flight = self.channel.in_flight(broker_id)
            self.log.debug("{} answer from broker {} to request {} ignored: in flight {}",
                           request_type.__name__, broker_id, correlation_id,
                           "none" if in_flight is None else
                           f"{type(in_flight).__name__} {in_flight.correlation_id}")
        for target, request in nxt:
            self.tell(self._replica_manager(target), request)
        return answered

    @handles(cm.LeaderAndIsrResponse)
    def on_leader_and_isr_response(self, msg: cm.LeaderAndIsrResponse) -> None:
        answered = self._acknowledge(msg.broker_id, cm.LeaderAndIsr, msg.correlation_id)
        if answered is None:
            return
        if msg.error_code:
            self.log.warning("broker {} refused LeaderAndIsr: {}", msg.broker_id,
                             ErrorCode(msg.error_code).name)
        if msg.topic_ids_confirmed and self.driver.active:
            # the epoch of the registration the request went to (the answer is its)
            self._call_driver(self.driver.feed, TopicIdsConfirmed(
                msg.broker_id, answered.broker_epoch, {
                TopicPartition(r.topic, r.partition): r.topic_id
                for r in msg.topic_ids_confirmed}))

    @handles(cm.UpdateMetadataResponse)
    def on_update_metadata_response(self, msg: cm.UpdateMetadataResponse) -> None:
        if (self._acknowledge(msg.broker_id, cm.UpdateMetadata, msg.correlation_id) is not None
                and msg.error_code):
            self.log.warning("broker {} refused UpdateMetadata: {}", msg.broker_id,
                             ErrorCode(msg.error_code).name)

    @handles(cm.StopReplicaResponse)
    def on_stop_replica_response(self, msg: cm.StopReplicaResponse) -> None:
        if self._acknowledge(msg.broker_id, cm.StopReplica, msg.correlation_id) is None:
            return
        if self.driver.active:
            self._call_driver(self.driver.feed, StopReplicaDone(
                msg.broker_id, msg.error_code,
                {TopicPartition(r.topic, r.partition): r.error_code for r in msg.partitions}))

    # ------------------------------------------------------------ replies
    def _reply(self, request_id: Hashable, result: Result) -> None:
        to: Address
        req_id: int
        _kind, to, req_id = request_id  # type: ignore[misc]
        if isinstance(result, (CreateTopicsResult, CreatePartitionsResult)):
            refused = [t for t in result.topics if t.error_code == ErrorCode.POLICY_VIOLATION]
            if refused:  # one line per request: the limits refused these topics
                self.log.warning("refused {} topic(s): {}", len(refused), "; ".join(
                    str(t.message) for t in refused[:3]) + ("; ..." if len(refused) > 3 else ""))
        if isinstance(result, CreateTopicsResult):
            self.tell(to, bm.CreateTopicsDone(req_id, [
                bm.CreateTopicDoneRow(t.name, t.error_code, t.message, t.num_partitions,
                                      t.replication_factor, t.topic_id)
                for t in result.topics]))
        elif isinstance(result, DeleteTopicsResult):
            self.tell(to, bm.DeleteTopicsDone(req_id, [
                bm.DeleteTopicDoneRow(t.name, t.error_code, t.message, t.topic_id)
                for t in result.topics]))
        elif isinstance(result, ControlledShutdownResult):
            self.tell(to, cm.ControlledShutdownResponse(req_id, result.error_code, [
                cm.TopicPartitionRow(tp.topic, tp.partition) for tp in result.remaining]))
        elif isinstance(result, AlterPartitionResult):
            rows = []
            for part in result.partitions:
                state = part.state
                rows.append(cm.AlterPartitionResult(
                    part.partition.topic, part.partition.partition, part.error_code,
                    state.leader if state else -1, state.leader_epoch if state else -1,
                    list(state.isr) if state else [], state.version if state else -1))
            self.tell(to, cm.AlterPartitionResponse(req_id, result.error_code, rows))
        elif isinstance(result, ReplicasOfflineResult):
            if result.error_code == NONE and self.log_dir_reports.pop(to, 0) > 1:
                self.log.info("the storage report of {} taken at last", to)
            self.tell(to, cm.LogDirEventNotificationResponse(req_id, result.error_code))
        elif isinstance(result, CreatePartitionsResult):
            self.tell(to, am.CreatePartitionsDone(req_id, [
                am.TopicResultRow(t.name, t.error_code, t.message) for t in result.topics]))
        elif isinstance(result, ElectLeadersResult):
            self.tell(to, am.ElectLeadersDone(req_id, result.error_code, [
                am.ElectLeadersRow(p.partition.topic, p.partition.partition, p.error_code,
                                   p.message) for p in result.partitions]))
        elif isinstance(result, AlterReassignmentsResult):
            self.tell(to, am.AlterReassignmentsDone(req_id, result.error_code, [
                am.ReassignDoneRow(p.partition.topic, p.partition.partition, p.error_code,
                                   p.message) for p in result.partitions]))
        elif isinstance(result, ListReassignmentsResult):
            self.tell(to, am.ListReassignmentsDone(req_id, result.error_code, [
                am.OngoingReassignmentRow(r.partition.topic, r.partition.partition,
                                          list(r.replicas), list(r.adding), list(r.removing))
                for r in result.reassignments]))

    # ------------------------------------------------------------ topic admin
    @handles(bm.CreateTopics)
    def on_create_topics(self, msg: bm.CreateTopics) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            self._call_driver(self.driver.feed, CreateTopics(
                ("create", self.current_sender, msg.req_id),
                tuple(NewTopic(r.name, r.num_partitions, r.replication_factor,
                               None if not r.assignments else tuple(
                                   (a.partition, tuple(a.broker_ids)) for a in r.assignments),
                               # a None value stays None: refused, not made "None"
                               {k: None if v is None else str(v)
                                for k, v in r.configs.items()}, r.internal)
                      for r in msg.rows),
                msg.validate_only))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(bm.CreateTopicsDone(msg.req_id, [
                bm.CreateTopicDoneRow(r.name, NOT_CONTROLLER, self._not_controller(), -1, -1)
                for r in msg.rows]))

    @handles(bm.DeleteTopics)
    def on_delete_topics(self, msg: bm.DeleteTopics) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            self._call_driver(self.driver.feed, DeleteTopics(
                ("delete", self.current_sender, msg.req_id), tuple(r.name for r in msg.rows),
                {r.name: r.topic_id for r in msg.rows if r.topic_id}))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(bm.DeleteTopicsDone(msg.req_id, [
                bm.DeleteTopicDoneRow(r.name, NOT_CONTROLLER, self._not_controller())
                for r in msg.rows]))

    @handles(am.CreatePartitions)
    def on_create_partitions(self, msg: am.CreatePartitions) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            self._call_driver(self.driver.feed, CreatePartitions(
                ("partitions", self.current_sender, msg.req_id),
                tuple(NewPartitions(r.name, r.new_total,
                                    None if r.assignments is None
                                    else tuple(tuple(a) for a in r.assignments))
                      for r in msg.rows),
                msg.validate_only))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(am.CreatePartitionsDone(msg.req_id, [
                am.TopicResultRow(r.name, NOT_CONTROLLER, self._not_controller())
                for r in msg.rows]))

    @handles(am.ElectLeadersAsk)
    def on_elect_leaders(self, msg: am.ElectLeadersAsk) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            partitions = (None if msg.partitions is None else
                          tuple(TopicPartition(t, p) for t, p in msg.partitions))
            self._call_driver(self.driver.feed, ElectLeaders(
                ("elect", self.current_sender, msg.req_id), partitions,
                ElectionType(msg.election)))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(am.ElectLeadersDone(msg.req_id, NOT_CONTROLLER, []))

    @handles(am.AlterReassignmentsAsk)
    def on_alter_reassignments(self, msg: am.AlterReassignmentsAsk) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            self._call_driver(self.driver.feed, AlterPartitionReassignments(
                ("reassign", self.current_sender, msg.req_id),
                tuple((TopicPartition(r.topic, r.partition),
                       None if r.replicas is None else tuple(r.replicas)) for r in msg.rows),
                msg.allow_rf_change))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(am.AlterReassignmentsDone(msg.req_id, NOT_CONTROLLER, []))

    @handles(am.ListReassignmentsAsk)
    def on_list_reassignments(self, msg: am.ListReassignmentsAsk) -> None:
        assert self.current_sender is not None
        if self.driver.active:
            self._call_driver(self.driver.feed, ListPartitionReassignments(
                ("list_reassignments", self.current_sender, msg.req_id),
                None if msg.partitions is None
                else tuple(TopicPartition(t, p) for t, p in msg.partitions)))
        elif self._from_this_broker():
            self._forward(msg)
        else:
            self.reply(am.ListReassignmentsDone(msg.req_id, NOT_CONTROLLER, []))

    @handles(am.AlterTopicConfigs)
    def on_alter_topic_configs(self, msg: am.AlterTopicConfigs) -> None:
        """AlterConfigs / IncrementalAlterConfigs of topics: the active controller checks
        them, writes ``/config/topics/<t>`` with a ``/config/changes`` notification (every
        node applies it to its replicas) and has the nodes' metadata carry them."""
        assert self.current_sender is not None
        if not self.driver.active:
            if self._from_this_broker():
                self._forward(msg)
            else:
                self.reply(am.AlterTopicConfigsDone(msg.req_id, [
                    am.TopicResultRow(r.name, NOT_CONTROLLER, self._not_controller())
                    for r in msg.rows]))
            return
        rows: list[am.TopicResultRow] = []
        changed: dict[str, dict[str, str]] = {}
        names = [r.name for r in msg.rows]
        for row in msg.rows:
            try:
                record = self.core.topics.get(row.name)
                if names.count(row.name) > 1:
                    raise KafkaError(f"topic {row.name!r} is named twice",
                                     ErrorCode.INVALID_REQUEST)
                if record is None or row.name in self.core.deleting:
                    raise KafkaError(f"topic {row.name!r} does not exist",
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                configs = altered_topic_configs(
                    record.configs, [ConfigChange(c.name, c.op, c.value) for c in row.ops],
                    msg.incremental, lambda key: effective(self.config, {})[key][0])
                if not msg.validate_only and configs != record.configs:
                    if not self.store.set_topic_configs(row.name, configs):
                        raise KafkaError(f"topic {row.name!r} was deleted meanwhile",
                                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    changed[row.name] = configs
            except KafkaError as exc:
                rows.append(am.TopicResultRow(row.name, int(exc.code), str(exc)))
                continue
            except MetadataError as exc:
                rows.append(am.TopicResultRow(row.name, int(ErrorCode.REQUEST_TIMED_OUT),
                                              f"writing the config of {row.name!r}: {exc}"))
                continue
            rows.append(am.TopicResultRow(row.name, NONE, None))
        if changed:
            self.log.info("topic configs changed: {}", "; ".join(
                f"{t} {c}" for t, c in sorted(changed.items())))
            self._call_driver(self.driver.feed, TopicConfigsChanged(changed))
        self.reply(am.AlterTopicConfigsDone(msg.req_id, rows))

    # ------------------------------------------------------------ config changes
    def _read_config_changes(self) -> None:
        """Apply the topic config changes notified under ``/config/changes`` since the
        last one seen (the watch is armed again by the read)."""
        try:
            notes = self.store.get_change_notifications(znodes.CONFIG_CHANGES, watch=True)
        except MetadataError as exc:
            self.log.debug("config changes not read: {}", exc)
            return
        if self.last_config_change is None:  # first read: the logs opened with current configs
            self.last_config_change = notes[-1].path if notes else ""
            notes = []
        fresh = [n for n in notes if n.path > self.last_config_change]
        topics: set[str] = set()
        users: set[str] = set()
        for note in fresh:
            try:
                kind, name = znodes.decode_config_change(note.data)
            except znodes.BadZnode as exc:
                self.log.warning("ignoring a config change notification: {}", exc)
                continue
            if kind == "topics":
                topics.add(name)
            elif kind == "users":
                users.add(name)
        if fresh:
            self.last_config_change = fresh[-1].path
        for topic in sorted(topics):
            self._apply_topic_configs(topic)
        for user in sorted(users):
            self._refresh_user(user)
        if self.driver.active:
            cutoff = self.clock.wall_ms() - CONFIG_CHANGE_EXPIRY_MS
            old = [n.path for n in notes if n.ctime_ms < cutoff]
            if old:
                try:
                    self.store.delete_change_notifications(old)
                except MetadataError as exc:
                    self.log.debug("old config changes not deleted: {}", exc)

    def _apply_topic_configs(self, topic: str) -> None:
        """This node's replicas of ``topic`` take its configs from ZooKeeper at once."""
        try:
            configs = self.store.get_topic_configs(topic)
            assignment = self.store.get_topic_assignments([topic]).get(topic)
        except MetadataError as exc:
            self.log.warning("the new config of topic {} was not read: {}", topic, exc)
            return
        if assignment is None:
            return
        me = self.broker.broker_id
        by_shard: dict[Address, list[bm.OpenPartitionRow]] = {}
        for partition, replicas in sorted(assignment.partitions.items()):
            if me in replicas:
                by_shard.setdefault(self.topology.shard_for(topic, partition), []).append(
                    bm.OpenPartitionRow(topic, partition, dict(configs)))
        for shard, rows in by_shard.items():
            self.tell(shard, am.UpdatePartitionConfigs(next(self.req_ids), rows))
        if by_shard:
            self.log.info("topic {}: this node's replicas take the config {}", topic, configs)

    def _refresh_user(self, user: str) -> None:
        """SASL logins on this node take the user's new credentials (or lose the old)."""
        if self.credentials is None:
            return
        try:
            configs = self.store.get_user_configs(user)[0]
            self.credentials.update(user, configs)
        except (MetadataError, ValueError) as exc:
            self.log.warning("the new credentials of user {} were not read: {}", user, exc)
            return
        self.log.info("user {}: SCRAM credentials refreshed", user)
        self._relay(users=[sm.UserRow(user, scram_texts(configs))])

    @handles(ChangesNotified)
    def on_changes_notified(self, msg: ChangesNotified) -> None:
        if self.started and msg.root == znodes.CONFIG_CHANGES:
            self._read_config_changes()
        elif self.started and msg.root in ACL_CHANGE_ROOTS:
            self._read_acl_changes()

    # ------------------------------------------------------------ ACL changes
    def _read_acl_changes(self, resync: bool = False) -> None:
        """Apply the ACL changes notified under /kafka-acl-changes and
        /kafka-acl-extended-changes since the last seen (reading them arms the watches
        again): the ACLs of each pattern named are read and put in at once, wherever the
        change was made. ``resync`` (start, a new session, the slow timer) reads them all.
        """
        authorizer = self.authorizer
        if authorizer is None:
            return
        now = self.clock.now_ms()
        self.next_acl_resync_ms = now + ACL_RESYNC_MS
        changed: dict[ResourcePattern, str] = {}
        relayed: list[sm.AclPatternRow] = []
        seen: dict[str, str | None] = {}
        expired: list[str] = []
        cutoff = self.clock.wall_ms() - CONFIG_CHANGE_EXPIRY_MS
        try:
            for root in ACL_CHANGE_ROOTS:
                notes = self.store.get_change_notifications(root, watch=True)
                last = self.last_acl_change[root]
                seen[root] = notes[-1].path if notes else (last or "")
                expired += [n.path for n in notes if n.ctime_ms < cutoff]
                if last is None:
                    resync = True  # the first read: everything, whatever the notices say
                    continue
                for note in notes:
                    if note.path <= last:
                        continue
                    try:
                        changed[znodes.decode_acl_change(root, note.data)] = note.path
                    except znodes.BadZnode as exc:
                        self.log.warning("ignoring an ACL change notification: {}", exc)
            with authorizer.lock:  # after any read a handler started before this one
                if resync:
                    authorizer.replace(self.store.get_all_acls())
                    relayed = acl_rows(authorizer.table())
                elif changed:
                    fresh = {p: self.store.get_acls(p)[0] for p in changed}
                    authorizer.update(fresh)
                    relayed = acl_rows(fresh)
        except MetadataError as exc:
            # read them all again soon: a notice read now but not applied is not read again
            self.log.warning("the ACL changes were not read: {}", exc)
            self.next_acl_resync_ms = now + RETRY_WRITES_MS
            return
        self.last_acl_change.update(seen)
        if resync:
            self._relay(acls=relayed, acls_whole=True)
        elif changed:
            self._relay(acls=relayed)
        for pattern, path in sorted(changed.items(), key=lambda item: item[1]):
            self.log.info("ACLs of {} changed ({}): {} entries now", pattern,
                          path.rsplit("/", 1)[-1], len(authorizer.acls(pattern)))
        if self.driver.active and expired:
            try:
                self.store.delete_change_notifications(expired)
            except MetadataError as exc:
                self.log.debug("old ACL changes not deleted: {}", exc)

    # ------------------------------------------------------------ processes 1..: users, ACLs
    def _relay(self, acls: list[sm.AclPatternRow] | None = None, acls_whole: bool = False,
               users: list[sm.UserRow] | None = None, users_whole: bool = False,
               to: list[Address] | None = None) -> int:
        """Tell the SecurityViews of processes 1.. (or ``to``) these rows; their version."""
        views = self.topology.security_views() if to is None else to
        if not views or (self.authorizer is None and self.credentials is None):
            return self.relay_version
        self.relay_version += 1
        relay = sm.SecurityRelay(self.relay_version, acls_whole, acls, users_whole, users)
        for view in views:
            self.tell(view, relay)
        return self.relay_version

    @handles(sm.SecuritySnapshotAsk)
    def on_security_snapshot(self, msg: sm.SecuritySnapshotAsk) -> None:
        """Process ``msg.process`` starts (or restarted): every user and ACL this process
        holds, to its SecurityView (on the path later relays take)."""
        nodes = self.topology.process_nodes
        if not 0 < msg.process < len(nodes):
            return
        authorizer, credentials = self.authorizer, self.credentials
        acls = None
        if authorizer is not None:
            with authorizer.lock:
                acls = acl_rows(authorizer.table())
        users = user_rows(credentials.users()) if credentials is not None else None
        version = self._relay(acls, True, users, True,
                              to=[Address(nodes[msg.process], "security-view")])
        self.log.info("process {}: users and ACLs sent ({} ACL patterns, {} users, version "
                      "{})", msg.process, len(acls) if acls is not None else "no",
                      len(users) if users is not None else "no", version)

    @handles(sm.ScramCredentialsDescribe)
    def on_describe_scram(self, msg: sm.ScramCredentialsDescribe) -> None:
        """DescribeUserScramCredentials from a handler of processes 1..: read here."""
        if not self._from_this_broker():
            return self._refuse_security(msg)
        try:
            rows = describe_scram_credentials(self.store, msg.users)
        except (MetadataError, OSError, ValueError) as exc:
            self.log.warning("DescribeUserScramCredentials failed: {}", exc)
            return self._reply_failed(msg, ErrorCode.UNKNOWN_SERVER_ERROR,
                                      f"reading the users failed: {exc}")
        self.reply(sm.ScramCredentialsDone(msg.req_id, NONE, None, [
            sm.ScramUserResultRow(r.user, int(r.error), r.message,
                                  [[m, i] for m, i in r.credentials]) for r in rows],
            self.relay_version, []))

    @handles(sm.ScramCredentialsAlter)
    def on_alter_scram(self, msg: sm.ScramCredentialsAlter) -> None:
        """AlterUserScramCredentials from a handler of processes 1..: written here, taken by
        this process's SASL cache and relayed to the others; the answer carries the
        changed users for the asking process."""
        if not self._from_this_broker():
            return self._refuse_security(msg)
        try:
            results = alter_scram_credentials(
                self.store, [Deletion(d.user, d.mechanism) for d in msg.deletions],
                [Upsertion(u.user, u.mechanism, u.iterations, u.salt, u.salted_password)
                 for u in msg.upsertions])
            changed = {r.user: self.store.get_user_configs(r.user)[0] for r in results
                       if r.error == ErrorCode.NONE}
        except (MetadataError, OSError, ValueError) as exc:  # ZooKeeper away
            self.log.warning("AlterUserScramCredentials failed: {}", exc)
            return self._reply_failed(msg, ErrorCode.UNKNOWN_SERVER_ERROR,
                                      f"writing the users failed: {exc}")
        version = self.relay_version
        rows = []
        if self.credentials is not None:
            for user, configs in changed.items():
                try:
                    self.credentials.update(user, configs)
                except ValueError as exc:  # this process keeps the old ones: so do the others
                    self.log.warning("user {} not refreshed in the SASL cache: {}", user, exc)
                    continue
                rows.append(sm.UserRow(user, scram_texts(configs)))
            if rows:
                version = self._relay(users=rows)
        for user in changed:
            self.log.info("SCRAM credentials of user {} changed by {} (through process {})",
                          user, msg.principal, self._process_of_sender())
        self.reply(sm.ScramCredentialsDone(msg.req_id, NONE, None, [
            sm.ScramUserResultRow(r.user, int(r.error), r.message, []) for r in results],
            version, rows if self.credentials is not None else []))

    @handles(sm.AclsCreate, sm.AclsDelete)
    def on_acls_change(self, msg: sm.AclsCreate | sm.AclsDelete) -> None:
        """CreateAcls / DeleteAcls from a handler of processes 1.. (checked there): written
        here, put in this process's Authorizer and relayed; the answer carries the
        changed patterns for the asking process."""
        authorizer = self.authorizer
        if not self._from_this_broker():
            return self._refuse_security(msg)
        if authorizer is None:
            return self._reply_failed(msg, ErrorCode.SECURITY_DISABLED,
                                      "no authorizer is configured on the broker")
        problems: list[str | None] = []
        deleted: list[list[sm.AclBindingRow]] = []
        try:
            if isinstance(msg, sm.AclsCreate):
                bindings = [binding_of(b) for b in msg.bindings]
                problems = create_acls(self.store, bindings)
                patterns = {b.pattern for b, p in zip(bindings, problems, strict=True)
                            if p is None}
            else:
                found = delete_acls(self.store, [filter_of(f) for f in msg.filters])
                deleted = [[binding_row(b) for b in removed] for removed in found]
                patterns = {b.pattern for removed in found for b in removed}
            with authorizer.lock:
                fresh = {p: self.store.get_acls(p)[0] for p in patterns}
                authorizer.update(fresh)
        except (AclError, MetadataError, OSError, ValueError) as exc:
            what = "CreateAcls" if isinstance(msg, sm.AclsCreate) else "DeleteAcls"
            self.log.warning("{} failed: {}", what, exc)
            return self._reply_failed(msg, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        rows = acl_rows(fresh)
        version = self._relay(acls=rows) if rows else self.relay_version
        self.reply(sm.AclsDone(msg.req_id, NONE, None, problems, deleted, version, rows))

    def _refuse_security(self, msg: Any) -> None:
        """Users and ACLs are changed through a node's own processes, never another node."""
        text = "security admin is served to the processes of this broker alone"
        self.log.warning("{} from {} refused: {}", type(msg).__name__, self.current_sender, text)
        self._reply_failed(msg, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, text)

    def _reply_failed(self, msg: Any, code: ErrorCode, text: str) -> None:
        """The answer to a security admin request that changed nothing: ``code`` for all."""
        if isinstance(msg, (sm.AclsCreate, sm.AclsDelete)):
            self.reply(sm.AclsDone(msg.req_id, int(code), text, [], [], self.relay_version, []))
        else:
            self.reply(sm.ScramCredentialsDone(msg.req_id, int(code), text, [],
                                               self.relay_version, []))

    def _process_of_sender(self) -> int:
        sender = self.current_sender
        nodes = self.topology.process_nodes
        return nodes.index(sender.node) if sender is not None and sender.node in nodes else 0

    @handles(bm.ShardDone)
    def on_shard_done(self, msg: bm.ShardDone) -> None:
        if msg.failed or msg.error:
            self.log.error("a partition shard failed to take a topic config for {}: {}",
                           ", ".join(f"{t}-{p}" for t, p in msg.failed) or "?", msg.error)

    def _not_controller(self) -> str:
        known = self.driver.controller_id
        return (f"broker {self.broker.broker_id} is not the controller (the controller is "
                f"{known if known is not None else 'unknown'})")

    def _from_this_broker(self) -> bool:
        """The request comes from this broker's own handlers (in any of its processes, with
        num.processes > 1), not from another node's controller forwarding it here."""
        assert self.current_sender is not None
        node = self.current_sender.node
        return node == self.node.name or node in self.topology.process_nodes

    def _forward(self, msg: ForwardedRequest) -> None:
        assert self.current_sender is not None
        now = self.clock.now_ms()
        fwd = _Forward(self.current_sender, msg.req_id, msg, now + self.request_timeout_ms)
        req_id = next(self.req_ids)
        self.forwards[req_id] = fwd
        self._try_forward(req_id, fwd, now)

    def _try_forward(self, req_id: int, fwd: _Forward, now: int) -> None:
        controller = self.driver.controller_id
        if controller is None or controller == self.broker.broker_id:
            fwd.next_try_ms = now + FORWARD_RETRY_MS  # none known, or it is us but not yet
            return
        fwd.sent_to = controller
        fwd.sent_nodes.add(self._controller_of(controller).node)
        fwd.next_try_ms = now + self.request_timeout_ms
        self.tell(self._controller_of(controller), fwd.request._replace(req_id=req_id))

    @handles(bm.CreateTopicsDone, bm.DeleteTopicsDone, am.CreatePartitionsDone,
             am.AlterTopicConfigsDone, am.ElectLeadersDone, am.AlterReassignmentsDone,
             am.ListReassignmentsDone)
    def on_forwarded_answer(self, msg: ForwardedAnswer) -> None:
        fwd = self.forwards.get(msg.req_id)
        if fwd is None:
            return  # answered already (timed out)
        sender = self.current_sender
        if (fwd.sent_nodes and sender is not None
                and sender.node not in fwd.sent_nodes):
            self.forward_answers_ignored += 1
            self.log.debug("{} {} from {} ignored: forward {} was sent to {}",
                           type(msg).__name__, msg.req_id, sender.node, msg.req_id,
                           ", ".join(sorted(fwd.sent_nodes)))
            return
        now = self.clock.now_ms()
        moved = (msg.error_code == NOT_CONTROLLER
                 if isinstance(msg, (am.ElectLeadersDone, am.AlterReassignmentsDone,
                                     am.ListReassignmentsDone))
                 else bool(msg.rows) and all(r.error_code == NOT_CONTROLLER for r in msg.rows))
        if moved and fwd.sent_to is not None and sender is not None \
                and sender.node != self._controller_of(fwd.sent_to).node:
            # an earlier controller's: the forward waits for the one it went to last
            self.forward_answers_ignored += 1
            self.log.debug("{} {} from {} ignored: not the controller, and the forward "
                           "went to broker {} since", type(msg).__name__, msg.req_id,
                           sender.node, fwd.sent_to)
            return
        if moved and now < fwd.deadline_ms:
            fwd.sent_to = None
            fwd.next_try_ms = now + FORWARD_RETRY_MS  # the controller moved: find it again
            return
        del self.forwards[msg.req_id]
        self.tell(fwd.origin, msg._replace(req_id=fwd.origin_req_id))

    def _expire_forward(self, fwd: _Forward) -> None:
        text = (f"no controller answered within {self.request_timeout_ms} ms "
                f"(request.timeout.ms): {self._not_controller()}")
        request = fwd.request
        timed_out = int(ErrorCode.REQUEST_TIMED_OUT)
        if isinstance(request, am.CreatePartitions):
            self.tell(fwd.origin, am.CreatePartitionsDone(fwd.origin_req_id, [
                am.TopicResultRow(r.name, timed_out, text) for r in request.rows]))
        elif isinstance(request, am.AlterTopicConfigs):
            self.tell(fwd.origin, am.AlterTopicConfigsDone(fwd.origin_req_id, [
                am.TopicResultRow(r.name, timed_out, text) for r in request.rows]))
        elif isinstance(request, am.ElectLeadersAsk):
            self.tell(fwd.origin, am.ElectLeadersDone(fwd.origin_req_id, timed_out, []))
        elif isinstance(request, am.AlterReassignmentsAsk):
            self.tell(fwd.origin, am.AlterReassignmentsDone(fwd.origin_req_id, timed_out, []))
        elif isinstance(request, am.ListReassignmentsAsk):
            self.tell(fwd.origin, am.ListReassignmentsDone(fwd.origin_req_id, timed_out, []))
        elif isinstance(request, bm.CreateTopics):
            self.tell(fwd.origin, bm.CreateTopicsDone(fwd.origin_req_id, [
                bm.CreateTopicDoneRow(r.name, int(ErrorCode.REQUEST_TIMED_OUT), text, -1, -1)
                for r in request.rows]))
        else:
            self.tell(fwd.origin, bm.DeleteTopicsDone(fwd.origin_req_id, [
                bm.DeleteTopicDoneRow(r.name, int(ErrorCode.REQUEST_TIMED_OUT), text)
                for r in request.rows]))

    # ------------------------------------------------------------ node -> controller
    @handles(cm.ControlledShutdown)
    def on_controlled_shutdown(self, msg: cm.ControlledShutdown) -> None:
        assert self.current_sender is not None
        if not self.driver.active:
            self.reply(cm.ControlledShutdownResponse(msg.req_id, NOT_CONTROLLER, []))
            return
        self.log.info("broker {} asks for a controlled shutdown", msg.broker_id)
        self._call_driver(self.driver.feed, ControlledShutdownRequest(
            ("shutdown", self.current_sender, msg.req_id), msg.broker_id, msg.broker_epoch))

    @handles(cm.AlterPartition)
    def on_alter_partition(self, msg: cm.AlterPartition) -> None:
        """A leader's ISR change (KIP-497): the path replication (issue 15) takes."""
        assert self.current_sender is not None
        if not self.driver.active:
            self.reply(cm.AlterPartitionResponse(msg.req_id, NOT_CONTROLLER, []))
            return
        self._call_driver(self.driver.feed, AlterPartitionRequest(
            ("alter", self.current_sender, msg.req_id), msg.broker_id, msg.broker_epoch,
            tuple(IsrProposal(TopicPartition(p.topic, p.partition), p.leader_epoch,
                              tuple(p.new_isr), p.partition_epoch) for p in msg.partitions)))

    @handles(cm.LogDirEventNotification)
    def on_log_dir_event(self, msg: cm.LogDirEventNotification) -> None:
        """A node's replicas whose storage failed (KAFKA_STORAGE_ERROR): offline replicas,
        out of their ISRs, their leaderships elected elsewhere."""
        assert self.current_sender is not None
        if not self.driver.active:
            self.reply(cm.LogDirEventNotificationResponse(msg.req_id, NOT_CONTROLLER))
            return
        # A refused report (a stale broker epoch) comes again every 3 s: logged at the
        # 1st, 2nd, 4th, 8th... report from that node since the last one taken.
        reports = self.log_dir_reports[self.current_sender] = \
            self.log_dir_reports.get(self.current_sender, 0) + 1
        if reports & (reports - 1) == 0:
            self.log.warning("broker {} reports the storage of {} replica(s) failed: {}{}",
                             msg.broker_id, len(msg.partitions),
                             ", ".join(f"{r.topic}-{r.partition}" for r in msg.partitions[:10]),
                             "" if reports == 1 else
                             f" (report {reports} in a row not taken yet)")
        self._call_driver(self.driver.feed, ReplicasOffline(
            ("log_dir", self.current_sender, msg.req_id), msg.broker_id, msg.broker_epoch,
            tuple(TopicPartition(r.topic, r.partition) for r in msg.partitions),
            frozenset(TopicPartition(r.topic, r.partition) for r in msg.partitions
                      if r.led_alone),
            {TopicPartition(r.topic, r.partition): r.leader_epoch for r in msg.partitions
             if r.leader_epoch >= 0}))

    # ------------------------------------------------------------ controlled shutdown
    @handles(cm.ControlledShutdownStep)
    def on_shutdown_step(self, msg: cm.ControlledShutdownStep) -> dict[str, Any]:
        if msg.start and self.shutdown is None:
            if not self.started or not bool(self.config["controlled.shutdown.enable"]):
                self.shutdown = _Shutdown("skipped")
            else:
                self.shutdown = _Shutdown()
                if self._shutdown_attempts_left() > 0:
                    self.log.info("controlled shutdown: asking the controller to move this "
                                  "node's leaderships")
                    self._try_shutdown(self.clock.now_ms())
                else:  # as Kafka's: max.retries counts every attempt, so 0 makes none
                    self.shutdown.state = "failed"
                    self.shutdown.message = "controlled.shutdown.max.retries is 0"
        found = self.shutdown
        if found is None:
            return {"state": "idle"}
        return {"state": found.state, "attempts": found.attempts, "remaining": found.remaining,
                "message": found.message}

    def _shutdown_attempts_left(self) -> int:
        """Kafka's controlledShutdown makes ``controlled.shutdown.max.retries`` attempts in
        all (its remainingRetries counts down from it), the first one included."""
        found = self.shutdown
        assert found is not None
        return max(0, int(self.config["controlled.shutdown.max.retries"]) - found.attempts)

    def _try_shutdown(self, now: int) -> None:
        """One attempt, counted whatever comes of it, as each pass of Kafka's
        controlledShutdown loop is: one that finds no controller to ask (none known, or
        the one /controller names not registered, Kafka's "broker registration for
        controller is not available") fails at once and the next waits the backoff."""
        found = self.shutdown
        assert found is not None
        found.attempts += 1
        controller = self.driver.controller_id
        if controller is None:
            self._shutdown_attempt_failed(found, now, "no controller known")
            return
        if controller != self.broker.broker_id and controller not in self.brokers:
            self._shutdown_attempt_failed(
                found, now, f"controller {controller} is not a registered broker")
            return
        found.req_id = next(self.req_ids)
        found.sent_ms = now
        found.sent_to = controller
        found.controller_changed = False
        found.next_try_ms = now + self.request_timeout_ms
        self.tell(self._controller_of(controller), cm.ControlledShutdown(
            found.req_id, self.broker.broker_id, self.broker_epoch))

    def _shutdown_attempt_failed(self, found: _Shutdown, now: int, reason: str) -> None:
        """The attempt made ended without the shutdown done: logged once; the next waits
        ``controlled.shutdown.retry.backoff.ms``, as Kafka's loop sleeps after every pass
        that did not succeed but the last; after the last, the shutdown failed (the node
        stops anyway, and says so). An answer to this attempt coming later is not taken
        (Kafka's request ended with it)."""
        found.message = reason
        found.sent_to = None
        found.req_id = -1
        left = self._shutdown_attempts_left()
        if left == 0:
            found.state = "failed"
            self.log.warning("controlled shutdown attempt {} not complete ({}); none left",
                             found.attempts, reason)
            return
        backoff_ms = int(self.config["controlled.shutdown.retry.backoff.ms"])
        self.log.info("controlled shutdown attempt {} not complete ({}); {} left, the next "
                      "in {} ms", found.attempts, reason, left, backoff_ms)
        found.next_try_ms = now + backoff_ms

    def _shutdown_controller_moved(self, found: _Shutdown) -> bool:
        """The attempt in flight went to a controller that is not the controller any more
        (it died, or its session expired): its answer may never come (a node that lost the
        role, or restarted, may not even reach this one to say NOT_CONTROLLER), so the
        attempt fails now, not request.timeout.ms after, and the next goes to the new
        controller after the backoff (as Kafka's fails when its connection to a dead
        controller breaks, or is answered NOT_CONTROLLER, and sleeps). The same
        when /controller changed since the attempt went, whoever holds it now (the same
        node, restarted and elected again, lost the attempt with its old life)."""
        known = self.driver.controller_id
        return found.sent_to is not None and (
            found.controller_changed or (known is not None and known != found.sent_to))

    @handles(cm.ControlledShutdownResponse)
    def on_shutdown_response(self, msg: cm.ControlledShutdownResponse) -> None:
        found = self.shutdown
        if found is None or found.state != "running" or msg.req_id != found.req_id:
            return
        found.remaining = len(msg.remaining)
        if msg.error_code == NONE and not msg.remaining:
            found.sent_to = None
            found.state = "done"
            self.log.info("controlled shutdown done after {} attempt(s): this node leads "
                          "nothing the others could take", found.attempts)
            return
        self._shutdown_attempt_failed(
            found, self.clock.now_ms(),
            ErrorCode(msg.error_code).name if msg.error_code
            else f"{len(msg.remaining)} partition(s) still led here")

    # ------------------------------------------------------------ timers
    def poll_timeout_ms(self) -> int | None:
        if not self.started:
            return None
        now = self.clock.now_ms()
        deadlines = [self.next_retry_writes_ms]
        channel = self.channel.next_deadline_ms()
        if channel is not None:
            deadlines.append(channel)
        if self.driver.active and bool(self.config["auto.leader.rebalance.enable"]):
            deadlines.append(self.next_rebalance_ms)
        if self.driver.active and self.driver.core.reassign_retry_pending:
            deadlines.append(self.next_reassign_retry_ms)
        deadlines += [min(f.next_try_ms, f.deadline_ms) for f in self.forwards.values()]
        if self.shutdown is not None and self.shutdown.state == "running":
            deadlines.append(self.shutdown.next_try_ms)
        if self.register_retry_ms is not None:
            deadlines.append(self.register_retry_ms)
        if self.next_acl_resync_ms is not None:
            deadlines.append(self.next_acl_resync_ms)
        reread = self.node.directory.next_reread_ms()
        if reread is not None:
            deadlines.append(max(now + reread, self.next_reread_ms))
        return max(0, min(deadlines) - now)

    def on_turn(self) -> None:
        if not self.started:
            return
        self._reread_asked()
        now = self.clock.now_ms()
        for target, request in self.channel.due(now):
            self.tell(self._replica_manager(target), request)
        if now >= self.next_retry_writes_ms:
            self.next_retry_writes_ms = now + RETRY_WRITES_MS
            if self.driver.pending_retries:
                self._call_driver(self.driver.retry_writes)
        if self.register_retry_ms is not None and now >= self.register_retry_ms:
            self.register_retry_ms = None
            self._ensure_registered()
        if self.next_acl_resync_ms is not None and now >= self.next_acl_resync_ms:
            self._read_acl_changes(resync=True)
        if now >= self.next_reassign_retry_ms:
            self.next_reassign_retry_ms = now + REASSIGN_RETRY_MS
            if self.driver.active and self.driver.core.reassign_retry_pending:
                self._call_driver(self.driver.feed, RetryReassignments())
        if now >= self.next_rebalance_ms:
            self.next_rebalance_ms = now + self.rebalance_ms
            if self.driver.active and bool(self.config["auto.leader.rebalance.enable"]):
                self._call_driver(self.driver.feed, AutoLeaderRebalance())
        for req_id, fwd in list(self.forwards.items()):
            if now >= fwd.deadline_ms:
                del self.forwards[req_id]
                self._expire_forward(fwd)
            elif now >= fwd.next_try_ms:
                self._try_forward(req_id, fwd, now)
        found = self.shutdown
        if found is not None and found.state == "running":
            if found.sent_to is None:
                if now >= found.next_try_ms:  # the backoff after a failed attempt is over
                    self._try_shutdown(now)
            elif self._shutdown_controller_moved(found):
                self._shutdown_attempt_failed(
                    found, now, f"/controller changed since it went to broker {found.sent_to}")
            elif now >= found.next_try_ms:
                self._shutdown_attempt_failed(
                    found, now, f"no answer from controller {found.sent_to} within "
                                f"{self.request_timeout_ms} ms")

    # ------------------------------------------------------------ inspection
    @handles(bm.GetStats)
    def stats(self, _msg: bm.GetStats) -> dict[str, Any]:
        fence = self.driver.fence
        return {
            "broker_id": self.broker.broker_id,
            "broker_epoch": self.broker_epoch,
            "active": self.driver.active,
            "controller_id": self.driver.controller_id,
            "epoch": fence.epoch if fence else -1,
            "elections": self.elections,
            "brokers": sorted(self.brokers),
            "directory": sorted(self.node.directory.nodes),
            "pending_to_nodes": self.channel.pending(),
            "resent_to_nodes": self.channel.resent,
            "late_answers_ignored": self.channel.ignored,
            "pending_writes": self.driver.pending_retries,
            "forwards": len(self.forwards),
            "forward_answers_ignored": self.forward_answers_ignored,
            "topics": sorted(self.core.topics) if self.driver.active else [],
        }
