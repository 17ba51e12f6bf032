"""The metadata store on a real ZooKeeper, through kazoo.

Kazoo runs its own threads (connection, callbacks). Their only job here is to
hand notices to the owner's ``sink``: a watch that fired becomes a message
of ``wire.cluster_messages``, a session change becomes a
``SessionStateChanged``. Everything else runs in the caller's thread (the
owning actor) and blocks until ZooKeeper answers, at most
``request_timeout_ms``; without a connection a call fails at once with
:class:`MetadataUnavailable` instead of waiting for one.

Controller writes are Kafka's: each is a ZooKeeper transaction that first
checks ``/controller_epoch`` against the version the controller was elected
with, so a controller that lost its place can no longer change anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry
from loguru import logger

from actors.core.cluster_model import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from actors.metadata import znodes
from actors.metadata.store import (
    BrokerIdInUse,
    ChangeNotification,
    ControllerFence,
    ControllerMoved,
    IsrChangeNotification,
    MetadataError,
    MetadataUnavailable,
    Sink,
    TopicExists,
    UnknownTopic,
    WriteCode,
    WriteResult,
)
from actors.security.acl import AclEntry, PatternType, ResourcePattern, ResourceType
from wire.cluster_messages import (
    SESSION_CLOSED,
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    SESSION_SUSPENDED,
    BrokersChanged,
    ControllerChanged,
    IsrChangesNotified,
    SessionStateChanged,
    TopicDeletionsChanged,
    TopicsChanged,
)
from wire.security_messages import ChangesNotified

_UNAVAILABLE = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class _KazooToLoguru(logging.Handler):
    """kazoo logs through ``logging``; its lines (a retry per refused connection while
    ZooKeeper is away) go to the node's log at DEBUG: the session notices say what matters."""

    def emit(self, record: logging.LogRecord) -> None:
        logger.bind(node="-", actor="zookeeper").debug("kazoo: {}", record.getMessage())


_kazoo_log = logging.getLogger("kazoo")
if not any(isinstance(h, _KazooToLoguru) for h in _kazoo_log.handlers):
    _kazoo_log.addHandler(_KazooToLoguru())
    _kazoo_log.propagate = False


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _change_notice(session_id: int, root: str) -> ChangesNotified:
    return ChangesNotified(session_id, root)


def _write_code(exc: BaseException) -> WriteCode:
    if isinstance(exc, BadVersionError):
        return WriteCode.BAD_VERSION
    if isinstance(exc, NoNodeError):
        return WriteCode.NO_NODE
    if isinstance(exc, NodeExistsError):
        return WriteCode.NODE_EXISTS
    return WriteCode.ERROR


class ZkMetadataStore:
    """:class:`actors.metadata.store.MetadataStore` on ZooKeeper (``zookeeper.connect``)."""

    def __init__(
        self,
        connect: str,
        sink: Sink,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
        request_timeout_ms: int | None = None,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.connect = connect
        self._sink = sink
        self._wall_ms = wall_ms
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.request_timeout_ms = request_timeout_ms or session_timeout_ms
        self._closing = False
        self._last_session = 0  # the session a "lost" notice is about (kazoo forgets it first)
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
        )
        self._client.add_listener(self._on_state)
        # One callable per watched path, made once: kazoo keeps a set of watchers per
        # path, so arming a watch again does not stack a second notice.
        self._on_brokers = self._notice(BrokersChanged)
        self._on_topics = self._notice(TopicsChanged)
        self._on_deletions = self._notice(TopicDeletionsChanged)
        self._on_isr_changes = self._notice(IsrChangesNotified)
        self._on_controller = self._notice(ControllerChanged)
        self._on_changes = {root: self._notice(partial(_change_notice, root=root))
                            for root in znodes.CHANGE_ROOTS}

    # ------------------------------------------------------------ callbacks
    # These run on kazoo's threads: they build a message and hand it over, nothing else.
    def _notice(self, cls: Callable[[int], Any]) -> Callable[[WatchedEvent], None]:
        def fire(event: WatchedEvent) -> None:
            # A NONE event is kazoo dropping its watches on a lost connection; the
            # session notices say that already (re-read after "connected").
            if event.type != EventType.NONE:
                self._sink(cls(self._current_session()))

        return fire

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._last_session = self._current_session()
            self._sink(SessionStateChanged(SESSION_CONNECTED, self._last_session))
        elif state == KazooState.SUSPENDED:
            self._sink(SessionStateChanged(SESSION_SUSPENDED, self._last_session))
        elif state == KazooState.LOST:
            # Name the session that ended: by the time its owner reads this notice the
            # client may hold a new one (a controller elected in it must not resign).
            ended, self._last_session = self._last_session, 0
            self._sink(SessionStateChanged(SESSION_CLOSED if self._closing else SESSION_EXPIRED,
                                           ended))

    def _current_session(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    # -------------------------------------------------------------- session
    def start(self) -> None:
        try:
            self._client.start(timeout=self.connection_timeout_ms / 1000)
        except self._client.handler.timeout_exception:
            self._client.stop()
            self._client.close()
            raise MetadataUnavailable(
                f"could not connect to ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_ms} ms (zookeeper.connection.timeout.ms)") from None
        chroot = self._client.chroot
        if chroot:
            # Kafka creates its chroot on first start; kazoo would only prefix it.
            self._client.chroot = ""
            try:
                self._client.ensure_path(chroot)
            finally:
                self._client.chroot = chroot
        for path in znodes.PERSISTENT_PATHS:
            self._wait(self._client.ensure_path_async(path))

    def close(self) -> None:
        self._closing = True
        try:
            self._client.stop()
        finally:
            self._client.close()

    @property
    def session_id(self) -> int | None:
        return self._current_session() or None

    # ---------------------------------------------------------------- calls
    def _require_connected(self) -> None:
        if not self._client.connected:
            raise MetadataUnavailable(
                f"not connected to ZooKeeper at {self.connect} (state {self._client.state})")

    def _wait(self, result: Any) -> Any:
        """The outcome of one async kazoo call; losing the connection is MetadataUnavailable."""
        try:
            return result.get(timeout=self.request_timeout_ms / 1000)
        except self._client.handler.timeout_exception:
            raise MetadataUnavailable(
                f"ZooKeeper at {self.connect} did not answer within {self.request_timeout_ms} ms"
            ) from None
        except _UNAVAILABLE as exc:
            raise MetadataUnavailable(
                f"lost the ZooKeeper connection ({type(exc).__name__})") from None

    def _get(self, path: str, watch: Callable[[WatchedEvent], None] | None = None
             ) -> tuple[bytes, Any] | None:
        try:
            return self._wait(self._client.get_async(path, watch))  # type: ignore[no-any-return]
        except NoNodeError:
            return None

    def _get_many(self, paths: list[str]) -> list[tuple[bytes, Any] | None]:
        pending = [self._client.get_async(p) for p in paths]
        out: list[tuple[bytes, Any] | None] = []
        for result in pending:
            try:
                out.append(self._wait(result))
            except NoNodeError:
                out.append(None)
        return out

    def _children(self, path: str, watch: Callable[[WatchedEvent], None] | None) -> list[str]:
        self._require_connected()
        try:
            return list(self._wait(self._client.get_children_async(path, watch)))
        except NoNodeError:
            return []

    def _transaction(self, fence: ControllerFence | None) -> TransactionRequest:
        tx = self._client.transaction()
        if fence is not None:
            tx.check(znodes.CONTROLLER_EPOCH, fence.epoch_version)
        return tx

    def _commit_all(self, txs: list[TransactionRequest], fence: ControllerFence | None
                    ) -> list[list[Any]]:
        """Commit pipelined transactions; their results without the fence check.

        Raises ControllerMoved, after every answer is in, if the fence failed in any.
        """
        self._require_connected()
        pending = [tx.commit_async() for tx in txs]
        results = [self._wait(p) for p in pending]
        if fence is None:
            return results
        for result in results:
            # The check failed itself (another op failing shows here as "rolled back").
            if isinstance(result[0], Exception) and not isinstance(result[0], RolledBackError):
                raise ControllerMoved(
                    f"controller {fence.controller_id} with epoch {fence.epoch} is no longer "
                    f"the controller (/controller_epoch changed: {type(result[0]).__name__})")
        return [r[1:] for r in results]

    @staticmethod
    def _first_error(ops: list[Any]) -> BaseException | None:
        """The op that failed a transaction (the others report being rolled back)."""
        errors = [r for r in ops if isinstance(r, Exception)]
        real = [e for e in errors if not isinstance(e, (RolledBackError, RuntimeInconsistency))]
        found = real or errors
        return found[0] if found else None

    def _write_result(self, ops: list[Any], index: int) -> WriteResult:
        failed = self._first_error(ops)
        if failed is None:
            value = ops[index]
            return WriteResult(WriteCode.OK, getattr(value, "version", 0))
        return WriteResult(_write_code(failed), -1, f"{type(failed).__name__}")

    # -------------------------------------------------------------- cluster
    def get_or_create_cluster_id(self, proposed: str) -> str:
        self._require_connected()
        try:
            self._wait(self._client.create_async(
                znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed), makepath=True))
            return proposed
        except NodeExistsError:
            found = self._get(znodes.CLUSTER_ID)
            if found is None:
                raise MetadataError(f"{znodes.CLUSTER_ID} vanished while being read") from None
            return znodes.decode_cluster_id(found[0])

    # -------------------------------------------------------------- brokers
    def register_broker(self, broker: BrokerInfo, wait_for_stale_ms: int = 0) -> int:
        self._require_connected()
        path = znodes.broker_path(broker.broker_id)
        deadline = time.monotonic() + wait_for_stale_ms / 1000
        while True:
            data = znodes.encode_broker(broker, self._wall_ms())
            try:
                _path, stat = self._wait(self._client.create_async(
                    path, data, ephemeral=True, makepath=True, include_data=True))
                return int(stat.czxid)
            except NodeExistsError:
                pass
            found = self._get(path)
            if found is None:
                continue
            stat = found[1]
            if stat.ephemeralOwner == self._current_session():
                return int(stat.czxid)
            holder = znodes.decode_broker(broker.broker_id, found[0], stat.czxid)
            itself = holder.endpoints == broker.endpoints and holder.gateway == broker.gateway
            if not itself or time.monotonic() >= deadline:
                listeners = ",".join(e.connection_string for e in holder.endpoints)
                raise BrokerIdInUse(
                    f"node.id {broker.broker_id} is already registered in ZooKeeper by a live "
                    f"node ({listeners}, gateway {holder.gateway or '?'}); node.id must be "
                    f"unique in the cluster")
            time.sleep(0.1)  # our previous life's session: ZooKeeper drops it at its timeout

    def get_brokers(self, watch: bool = False) -> dict[int, BrokerInfo]:
        ids = sorted(int(c) for c in self._children(znodes.BROKER_IDS,
                                                    self._on_brokers if watch else None)
                     if c.isdigit())
        found = self._get_many([znodes.broker_path(i) for i in ids])
        return {i: znodes.decode_broker(i, f[0], f[1].czxid)
                for i, f in zip(ids, found, strict=True) if f is not None}

    # ----------------------------------------------------------- controller
    def get_controller(self, watch: bool = False) -> int | None:
        self._require_connected()
        if watch:
            stat = self._wait(self._client.exists_async(znodes.CONTROLLER, self._on_controller))
            if stat is None:
                return None
        found = self._get(znodes.CONTROLLER)
        return None if found is None else znodes.decode_controller(found[0])

    def get_controller_epoch(self) -> int | None:
        """The controller epoch as ZooKeeper holds it (read only; None before any election)."""
        self._require_connected()
        found = self._get(znodes.CONTROLLER_EPOCH)
        return None if found is None else znodes.decode_controller_epoch(found[0])

    def _controller_epoch(self) -> tuple[int, int]:
        found = self._get(znodes.CONTROLLER_EPOCH)
        if found is not None:
            return znodes.decode_controller_epoch(found[0]), int(found[1].version)
        try:
            self._wait(self._client.create_async(znodes.CONTROLLER_EPOCH,
                                                 znodes.encode_controller_epoch(0)))
            return 0, 0
        except NodeExistsError:
            return self._controller_epoch()

    def try_elect(self, broker_id: int) -> ControllerFence | None:
        self._require_connected()
        epoch, version = self._controller_epoch()
        tx = self._client.transaction()
        tx.create(znodes.CONTROLLER, znodes.encode_controller(broker_id, self._wall_ms()),
                  ephemeral=True)
        tx.set_data(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch + 1), version)
        (ops,) = self._commit_all([tx], None)
        if self._first_error(ops) is None:
            return ControllerFence(broker_id, epoch + 1, int(ops[1].version))
        # As Kafka: /controller may be ours after all (an answer lost to a reconnect, or an
        # election of this session whose controller stopped without giving it up). It is
        # if this very session holds it. The epoch is read first: while our session holds
        # /controller nobody can be elected, so the epoch read before is still ours.
        now_epoch, now_version = self._controller_epoch()
        found = self._get(znodes.CONTROLLER)
        session = self._current_session()
        if (found is not None and session and found[1].ephemeralOwner == session
                and znodes.decode_controller(found[0]) == broker_id):
            return ControllerFence(broker_id, now_epoch, now_version)
        return None

    def resign(self, fence: ControllerFence) -> None:
        tx = self._transaction(fence)
        tx.delete(znodes.CONTROLLER)
        try:
            self._commit_all([tx], fence)
        except ControllerMoved:
            pass  # someone else is the controller already: nothing of ours to delete

    # --------------------------------------------------------------- topics
    def get_topics(self, watch: bool = False) -> set[str]:
        return set(self._children(znodes.TOPICS, self._on_topics if watch else None))

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        self._require_connected()
        names = sorted(topics)
        found = self._get_many([znodes.topic_path(t) for t in names]
                               + [znodes.adopted_topic_id_path(t) for t in names])
        out = {}
        for t, f, r in zip(names, found[:len(names)], found[len(names):], strict=True):
            if f is not None:
                record = None if r is None else znodes.read_adopted_topic_id(t, r[0])
                out[t] = znodes.with_adoption(
                    znodes.decode_topic_assignment(t, f[0], f[1].version), record)
        return out

    def get_topic_configs(self, topic: str) -> dict[str, str]:
        self._require_connected()
        found = self._get(znodes.topic_config_path(topic))
        return {} if found is None else znodes.decode_topic_config(topic, found[0])

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> bool:
        self._require_connected()
        path = znodes.topic_config_path(topic)
        stat = self._wait(self._client.exists_async(path))
        if stat is None:
            return False
        return self._conditional_write(path, znodes.encode_topic_config(configs), stat.version,
                                       znodes.CONFIG_CHANGES, znodes.encode_topic_change(topic))

    def create_topic(self, topic: str, assignment: TopicAssignment, configs: dict[str, str],
                     fence: ControllerFence | None = None) -> int:
        self._require_connected()
        config_path = znodes.topic_config_path(topic)
        config_stat = self._wait(self._client.exists_async(config_path))
        tx = self._transaction(fence)
        # Config first, as Kafka: whoever sees the topic sees its config too.
        if config_stat is None:
            tx.create(config_path, znodes.encode_topic_config(configs))
        else:
            tx.set_data(config_path, znodes.encode_topic_config(configs))
        tx.create(znodes.topic_path(topic), znodes.encode_topic_assignment(assignment))
        (ops,) = self._commit_all([tx], fence)
        failed = self._first_error(ops)
        if failed is None:
            return 0
        if isinstance(failed, NodeExistsError):
            raise TopicExists(f"topic {topic!r} already exists")
        raise MetadataError(f"creating topic {topic!r} failed: {type(failed).__name__}")

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment,
                             fence: ControllerFence, clear_adoption: bool = False
                             ) -> WriteResult:
        self._require_connected()
        if clear_adoption and assignment.topic_id_adopted:
            raise ValueError(f"{topic}: an adoption is cleared by an unmarked assignment")
        tx = self._transaction(fence)
        recorded = self._adoption_record_op(tx, topic, assignment)
        if clear_adoption:
            path = znodes.adopted_topic_id_path(topic)
            found = self._get(path)
            if found is not None and znodes.adoption_to_clear(
                    znodes.read_adopted_topic_id(topic, found[0]), assignment.topic_id):
                tx.delete(path, found[1].version)
                recorded = True
        tx.set_data(znodes.topic_path(topic), znodes.encode_topic_assignment(assignment),
                    assignment.version)
        (ops,) = self._commit_all([tx], fence)
        return self._write_result(ops, int(recorded))

    def _adoption_record_op(self, tx: TransactionRequest, topic: str,
                            assignment: TopicAssignment) -> bool:
        """Add to ``tx`` the write of the topic's adoption record if ``assignment``'s id
        is adopted and not recorded yet (in the same transaction as the topic znode, so a
        Kafka tool's rewrite can never find the mark without its record); True if added."""
        if not assignment.topic_id_adopted:
            return False
        path = znodes.adopted_topic_id_path(topic)
        found = self._get(path)
        if found is not None and znodes.adoption_recorded(
                znodes.read_adopted_topic_id(topic, found[0]), assignment.topic_id):
            return False
        data = znodes.encode_adopted_topic_id(
            znodes.AdoptedTopicId(assignment.topic_id, self._wall_ms()))
        if found is None:
            tx.create(path, data)
        else:
            tx.set_data(path, data, found[1].version)
        return True

    def record_topic_adoptions(self, assignments: dict[str, TopicAssignment],
                               fence: ControllerFence) -> None:
        self._require_connected()
        txs = []
        for topic, assignment in sorted(assignments.items()):
            tx = self._transaction(fence)
            if self._adoption_record_op(tx, topic, assignment):
                txs.append(tx)
        for ops in self._commit_all(txs, fence):
            failed = self._first_error(ops)
            if failed is not None:
                raise MetadataError(f"recording an adopted topic id failed: "
                                    f"{type(failed).__name__}")

    def delete_topic(self, topic: str, fence: ControllerFence) -> None:
        for _attempt in range(5):
            self._require_connected()
            partitions = self._children(znodes.topic_partitions_path(topic), None)
            if not self._wait(self._client.exists_async(znodes.topic_path(topic))):
                paths: list[str] = []
            else:
                paths = []
                for p in partitions:
                    part = f"{znodes.topic_partitions_path(topic)}/{p}"
                    paths += [f"{part}/{c}" for c in self._children(part, None)]
                    paths.append(part)
                if partitions:
                    paths.append(znodes.topic_partitions_path(topic))
                paths.append(znodes.topic_path(topic))
            for extra in (znodes.topic_config_path(topic), znodes.delete_topic_path(topic),
                          znodes.adopted_topic_id_path(topic)):
                if self._wait(self._client.exists_async(extra)):
                    paths.append(extra)
            if not paths:
                return
            tx = self._transaction(fence)
            for path in paths:
                tx.delete(path)
            (ops,) = self._commit_all([tx], fence)
            failed = self._first_error(ops)
            if failed is None:
                return
            if not isinstance(failed, (NotEmptyError, NoNodeError)):
                raise MetadataError(f"deleting topic {topic!r} failed: {type(failed).__name__}")
            # A znode came or went between the listing and the delete: list again.
        raise MetadataError(f"deleting topic {topic!r}: its znodes kept changing")

    def mark_topic_for_deletion(self, topic: str) -> bool:
        self._require_connected()
        if not self._wait(self._client.exists_async(znodes.topic_path(topic))):
            raise UnknownTopic(f"topic {topic!r} does not exist")
        try:
            self._wait(self._client.create_async(znodes.delete_topic_path(topic), makepath=True))
            return True
        except NodeExistsError:
            return False

    def get_topic_deletions(self, watch: bool = False) -> set[str]:
        return set(self._children(znodes.DELETE_TOPICS, self._on_deletions if watch else None))

    def remove_topic_deletions(self, topics: Iterable[str], fence: ControllerFence) -> None:
        txs = []
        for topic in topics:
            tx = self._transaction(fence)
            tx.delete(znodes.delete_topic_path(topic))
            txs.append(tx)
        self._commit_all(txs, fence)  # a marker already gone is fine

    # ----------------------------------------------------- partition states
    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        self._require_connected()
        tps = list(partitions)
        found = self._get_many([znodes.partition_state_path(tp) for tp in tps])
        return {tp: None if f is None
                else znodes.decode_partition_state(tp, f[0], f[1].version, int(f[1].mzxid))
                for tp, f in zip(tps, found, strict=True)}

    def create_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence
    ) -> dict[TopicPartition, WriteResult]:
        tps = list(states)
        # Parents first (Kafka's createTopicPartitions / createTopicPartition): each a
        # fenced create that may find the znode there already.
        for parents in (sorted({znodes.topic_partitions_path(tp.topic) for tp in tps}),
                        [znodes.partition_path(tp) for tp in tps]):
            txs = []
            for path in parents:
                tx = self._transaction(fence)
                tx.create(path)
                txs.append(tx)
            self._commit_all(txs, fence)
        txs = []
        for tp in tps:
            tx = self._transaction(fence)
            tx.create(znodes.partition_state_path(tp), znodes.encode_partition_state(states[tp]))
            txs.append(tx)
        results = self._commit_all(txs, fence)
        out = {}
        for tp, ops in zip(tps, results, strict=True):
            result = self._write_result(ops, 0)
            out[tp] = WriteResult(WriteCode.OK, 0) if result.ok else result
        return out

    def update_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence | None
    ) -> dict[TopicPartition, WriteResult]:
        tps = list(states)
        txs = []
        for tp in tps:
            state = states[tp]
            tx = self._transaction(fence)
            tx.set_data(znodes.partition_state_path(tp), znodes.encode_partition_state(state),
                        state.version)
            txs.append(tx)
        results = self._commit_all(txs, fence)
        return {tp: self._write_result(ops, 0) for tp, ops in zip(tps, results, strict=True)}

    # --------------------------------------------------- ISR change notices
    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        self._require_connected()
        self._wait(self._client.create_async(
            f"{znodes.ISR_CHANGE_NOTIFICATION}/{znodes.ISR_CHANGE_PREFIX}",
            znodes.encode_isr_change(list(partitions)), sequence=True))

    def get_isr_change_notifications(self, watch: bool = False) -> list[IsrChangeNotification]:
        names = sorted(self._children(znodes.ISR_CHANGE_NOTIFICATION,
                                      self._on_isr_changes if watch else None))
        found = self._get_many([f"{znodes.ISR_CHANGE_NOTIFICATION}/{n}" for n in names])
        return [IsrChangeNotification(n, znodes.decode_isr_change(n, f[0]))
                for n, f in zip(names, found, strict=True) if f is not None]

    def delete_isr_change_notifications(self, names: Iterable[str],
                                        fence: ControllerFence) -> None:
        txs = []
        for name in names:
            tx = self._transaction(fence)
            tx.delete(f"{znodes.ISR_CHANGE_NOTIFICATION}/{name}")
            txs.append(tx)
        self._commit_all(txs, fence)

    # ------------------------------------------------ users and ACLs
    def _conditional_write(self, path: str, data: bytes | None, version: int,
                           change_root: str, change: bytes) -> bool:
        """Create (version -1), replace or delete (data None) ``path`` with a change notice."""
        self._require_connected()
        if version == -1 and data is None:  # "absent" stays absent: true unless it exists
            return self._wait(self._client.exists_async(path)) is None
        if version == -1:
            parent = path.rsplit("/", 1)[0]
            self._wait(self._client.ensure_path_async(parent))
        self._wait(self._client.ensure_path_async(change_root))
        tx = self._client.transaction()
        if version == -1:
            tx.create(path, data)
        elif data is None:
            tx.delete(path, version)
        else:
            tx.set_data(path, data, version)
        prefix = (znodes.CONFIG_CHANGE_PREFIX if change_root == znodes.CONFIG_CHANGES
                  else znodes.ACL_CHANGE_PREFIX)
        tx.create(f"{change_root}/{prefix}", change, sequence=True)
        (ops,) = self._commit_all([tx], None)
        failed = self._first_error(ops)
        if failed is None:
            return True
        if isinstance(failed, (BadVersionError, NodeExistsError, NoNodeError)):
            return False
        raise MetadataError(f"writing {path} failed: {type(failed).__name__}")

    def get_users(self) -> set[str]:
        return {znodes.desanitize(c) for c in self._children(znodes.CONFIG_USERS, None)}

    def get_user_configs(self, user: str) -> tuple[dict[str, str], int]:
        self._require_connected()
        found = self._get(znodes.user_config_path(user))
        if found is None:
            return {}, -1
        return znodes.decode_user_config(user, found[0]), int(found[1].version)

    def set_user_configs(self, user: str, configs: dict[str, str], version: int) -> bool:
        return self._conditional_write(
            znodes.user_config_path(user), znodes.encode_user_config(configs) if configs else None,
            version, znodes.CONFIG_CHANGES, znodes.encode_user_change(user))

    def get_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        self._require_connected()
        path = znodes.acl_path(pattern)
        found = self._get(path)
        if found is None:
            return frozenset(), -1
        return znodes.decode_acls(path, found[0]), int(found[1].version)

    def set_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                 version: int) -> bool:
        return self._conditional_write(
            znodes.acl_path(pattern), znodes.encode_acls(entries) if entries else None, version,
            znodes.acl_change_root(pattern), znodes.encode_acl_change(pattern))

    def get_all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        patterns: list[ResourcePattern] = []
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for type_name in self._children(znodes.ACL_ROOTS[pattern_type], None):
                try:
                    resource_type = ResourceType.parse(type_name)
                except ValueError:
                    continue  # a resource type this broker does not know (DelegationToken)
                path = znodes.acl_type_path(resource_type, pattern_type)
                patterns += [ResourcePattern(resource_type, name, pattern_type)
                             for name in self._children(path, None)]
        found = self._get_many([znodes.acl_path(p) for p in patterns])
        out = {}
        for pattern, f in zip(patterns, found, strict=True):
            if f is not None:
                entries = znodes.decode_acls(znodes.acl_path(pattern), f[0])
                if entries:
                    out[pattern] = entries
        return out

    # ------------------------------------------- change notifications
    def get_change_notifications(self, root: str, watch: bool = False
                                 ) -> list[ChangeNotification]:
        names = sorted(self._children(root, self._on_changes[root] if watch else None))
        paths = [f"{root}/{n}" for n in names]
        found = self._get_many(paths)
        return [ChangeNotification(p, bytes(f[0] or b""), int(f[1].ctime))
                for p, f in zip(paths, found, strict=True) if f is not None]

    def delete_change_notifications(self, paths: Iterable[str]) -> None:
        self._require_connected()
        pending = [self._client.delete_async(p) for p in paths]
        for result in pending:
            try:
                self._wait(result)
            except NoNodeError:
                pass


if TYPE_CHECKING:
    from actors.metadata.store import MetadataStore

    def _satisfies_the_protocol(store: ZkMetadataStore) -> MetadataStore:
        return store
