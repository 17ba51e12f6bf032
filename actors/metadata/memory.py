"""The metadata store on a model of ZooKeeper held in memory: the second implementation.

:class:`MemoryZooKeeper` keeps ZooKeeper's data model for one process:
znodes with data, versions and creating zxids; sessions owning ephemeral
znodes; watches that fire once; multi-op transactions that apply all or
nothing. :class:`MemoryMetadataStore` is one session on it and satisfies the
same :class:`~actors.metadata.store.MetadataStore` interface as the kazoo
store, writing the same JSON (``actors.metadata.znodes``). It is what the
controller core's property tests run against, and the start of the
deterministic simulator's metadata service: no threads, no clock; notices
go to the sink at the moment of the change (the sink must only queue them,
as with the real store).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.core.cluster_model import (
    BrokerInfo,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
    WriteCode,
    WriteResult,
)
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
)
from actors.security.acl import AclEntry, PatternType, ResourcePattern, ResourceType
from wire.cluster_messages import (
    SESSION_CLOSED,
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    BrokersChanged,
    ControllerChanged,
    IsrChangesNotified,
    SessionStateChanged,
    TopicDeletionsChanged,
    TopicsChanged,
)
from wire.security_messages import ChangesNotified


class ZkError(Exception):
    """One failed operation of a transaction, with ZooKeeper's code."""

    def __init__(self, code: WriteCode, path: str) -> None:
        super().__init__(f"{code.value}: {path}")
        self.code = code
        self.path = path
        self.index = -1  # which op of its transaction failed


@dataclass
class Znode:
    data: bytes
    version: int
    czxid: int
    owner: int = 0                 # session id of an ephemeral znode's owner
    sequence: int = 0              # next sequential child number
    ctime_ms: int = 0              # wall time of creation (the store's clock)
    mzxid: int = 0                 # zxid of the last create or set of its data


@dataclass
class Op:
    """One operation of a transaction: create, set, delete or check."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False
    sequential: bool = False
    ctime_ms: int = 0


@dataclass
class _Session:
    session_id: int
    watches: dict[tuple[str, str], set[Callable[[], None]]] = field(default_factory=dict)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class MemoryZooKeeper:
    """ZooKeeper's data model in memory; sessions are opened by :class:`MemoryMetadataStore`."""

    def __init__(self) -> None:
        self.nodes: dict[str, Znode] = {"/": Znode(b"", 0, 0)}
        self.zxid = 0
        self._session_ids = itertools.count(0x1000)
        self.sessions: dict[int, _Session] = {}
        self.available = True
        self._stores: dict[int, MemoryMetadataStore] = {}

    # --------------------------------------------------------------- sessions
    def open_session(self, store: MemoryMetadataStore) -> int:
        if not self.available:
            raise MetadataUnavailable("the in-memory ZooKeeper is unavailable")
        session_id = next(self._session_ids)
        self.sessions[session_id] = _Session(session_id)
        self._stores[session_id] = store
        return session_id

    def close_session(self, session_id: int, expired: bool = False) -> None:
        """End a session: its ephemeral znodes go (firing watches); its store is told."""
        if self.sessions.pop(session_id, None) is None:
            return
        store = self._stores.pop(session_id)
        self.zxid += 1
        for path in sorted((p for p, n in self.nodes.items() if n.owner == session_id),
                           reverse=True):
            self._remove(path)
        store._session_ended(SESSION_EXPIRED if expired else SESSION_CLOSED)

    def expire(self, session_id: int) -> None:
        self.close_session(session_id, expired=True)

    # ---------------------------------------------------------------- watches
    def watch(self, session_id: int, path: str, kind: str, fire: Callable[[], None]) -> None:
        """Arm a one-shot watch: ``kind`` "child" (children of path) or "data" (the znode)."""
        self.sessions[session_id].watches.setdefault((path, kind), set()).add(fire)

    def _trigger(self, path: str, kind: str) -> None:
        for session in list(self.sessions.values()):
            fired = session.watches.pop((path, kind), set())
            for fire in fired:
                fire()

    # ------------------------------------------------------------- operations
    def _check(self, op: Op, pending: dict[str, Znode | None]) -> None:
        def node(path: str) -> Znode | None:
            return pending[path] if path in pending else self.nodes.get(path)

        current = node(op.path)
        if op.kind == "create":
            parent = node(_parent(op.path))
            if parent is None:
                raise ZkError(WriteCode.NO_NODE, _parent(op.path))
            if parent.owner:
                raise ZkError(WriteCode.ERROR, f"{_parent(op.path)} is ephemeral")
            if current is not None and not op.sequential:
                raise ZkError(WriteCode.NODE_EXISTS, op.path)
            return
        if current is None:
            raise ZkError(WriteCode.NO_NODE, op.path)
        if op.version != -1 and current.version != op.version:
            raise ZkError(WriteCode.BAD_VERSION, op.path)
        if op.kind == "delete" and any(_parent(p) == op.path for p, n in self.nodes.items()
                                       if pending.get(p, n) is not None and p != "/"):
            raise ZkError(WriteCode.ERROR, f"{op.path} has children")

    def multi(self, session_id: int, ops: list[Op]) -> list[Any]:
        """Apply all ops or none; on failure raises ZkError naming the first failing op."""
        if not self.available:
            raise MetadataUnavailable("the in-memory ZooKeeper is unavailable")
        if session_id not in self.sessions:
            raise MetadataUnavailable("the session has ended")
        pending: dict[str, Znode | None] = {}
        self.zxid += 1
        zxid = self.zxid
        results: list[Any] = []
        for index, op in enumerate(ops):
            try:
                self._check(op, pending)
            except ZkError as exc:
                exc.index = index
                raise
            path = op.path
            if op.kind == "create":
                if op.sequential:
                    parent = pending.get(_parent(path)) or self.nodes[_parent(path)]
                    path = f"{op.path}{parent.sequence:010d}"
                    pending[_parent(op.path)] = Znode(parent.data, parent.version, parent.czxid,
                                                      parent.owner, parent.sequence + 1,
                                                      parent.ctime_ms, parent.mzxid)
                pending[path] = Znode(op.data, 0, zxid, session_id if op.ephemeral else 0,
                                      ctime_ms=op.ctime_ms, mzxid=zxid)
                results.append((path, pending[path]))
            elif op.kind == "set":
                node = pending.get(path) or self.nodes[path]
                pending[path] = Znode(op.data, node.version + 1, node.czxid, node.owner,
                                      node.sequence, node.ctime_ms, zxid)
                results.append(pending[path])
            elif op.kind == "delete":
                pending[path] = None
                results.append(True)
            else:
                results.append(True)
        for path, new in pending.items():
            old = self.nodes.get(path)
            if new is None:
                self._remove(path)
            else:
                self.nodes[path] = new
                if old is None:
                    self._trigger(path, "data")
                    self._trigger(_parent(path), "child")
                elif old.version != new.version:
                    self._trigger(path, "data")
        return results

    def _remove(self, path: str) -> None:
        if self.nodes.pop(path, None) is not None:
            self._trigger(path, "data")
            self._trigger(path, "child")
            self._trigger(_parent(path), "child")

    def get(self, path: str) -> Znode | None:
        if not self.available:
            raise MetadataUnavailable("the in-memory ZooKeeper is unavailable")
        return self.nodes.get(path)

    def children(self, path: str) -> list[str]:
        if not self.available:
            raise MetadataUnavailable("the in-memory ZooKeeper is unavailable")
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.nodes
                      if p.startswith(prefix) and "/" not in p[len(prefix):] and p != "/")


class MemoryMetadataStore:
    """One session on a :class:`MemoryZooKeeper`, as the MetadataStore interface."""

    def __init__(self, zk: MemoryZooKeeper, sink: Sink, wall_ms: Callable[[], int] = lambda: 0
                 ) -> None:
        self.zk = zk
        self._sink = sink
        self._wall_ms = wall_ms
        self._session: int | None = None

    # ---------------------------------------------------------------- session
    def start(self) -> None:
        self._session = self.zk.open_session(self)
        for path in znodes.PERSISTENT_PATHS:
            self._ensure(path)
        self._sink(SessionStateChanged(SESSION_CONNECTED, self._session))

    def close(self) -> None:
        if self._session is not None:
            self.zk.close_session(self._session)

    def _session_ended(self, state: str) -> None:
        ended, self._session = self._session, None
        self._sink(SessionStateChanged(state, ended or 0))

    @property
    def session_id(self) -> int | None:
        return self._session

    def _sid(self) -> int:
        if self._session is None:
            raise MetadataUnavailable("not connected: the session has ended")
        if not self.zk.available:
            raise MetadataUnavailable("the in-memory ZooKeeper is unavailable")
        return self._session

    def _ensure(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if self.zk.get(sub) is None:
                self.zk.multi(self._sid(), [Op("create", sub)])

    def _watch(self, path: str, kind: str, notice: Callable[[int], Any]) -> None:
        session = self._sid()
        self.zk.watch(session, path, kind, lambda: self._sink(notice(session)))

    def _commit(self, ops: list[Op], fence: ControllerFence | None) -> list[Any]:
        """One transaction; ControllerMoved if the fence fails, ZkError for another op."""
        checked = ([Op("check", znodes.CONTROLLER_EPOCH, version=fence.epoch_version)]
                   if fence is not None else [])
        try:
            results = self.zk.multi(self._sid(), checked + ops)
        except ZkError as exc:
            if fence is not None and exc.index == 0:
                raise ControllerMoved(
                    f"controller {fence.controller_id} with epoch {fence.epoch} is no longer the "
                    f"controller (/controller_epoch changed)") from None
            raise
        return results[len(checked):]

    def _write(self, ops: list[Op], fence: ControllerFence | None) -> WriteResult:
        try:
            results = self._commit(ops, fence)
        except ZkError as exc:
            return WriteResult(exc.code, -1, exc.path)
        last = results[-1]
        return WriteResult(WriteCode.OK, last.version if isinstance(last, Znode) else 0)

    # ---------------------------------------------------------------- cluster
    def get_or_create_cluster_id(self, proposed: str) -> str:
        self._sid()
        node = self.zk.get(znodes.CLUSTER_ID)
        if node is not None:
            return znodes.decode_cluster_id(node.data)
        self._commit([Op("create", znodes.CLUSTER_ID, znodes.encode_cluster_id(proposed))], None)
        return proposed

    # ---------------------------------------------------------------- brokers
    def register_broker(self, broker: BrokerInfo, wait_for_stale_ms: int = 0) -> int:
        session = self._sid()
        path = znodes.broker_path(broker.broker_id)
        existing = self.zk.get(path)
        if existing is not None:
            if existing.owner == session:
                return existing.czxid
            holder = znodes.decode_broker(broker.broker_id, existing.data, existing.czxid)
            listeners = ",".join(e.connection_string for e in holder.endpoints)
            raise BrokerIdInUse(
                f"node.id {broker.broker_id} is already registered in ZooKeeper by a live node "
                f"({listeners}, gateway {holder.gateway or '?'}); node.id must be unique in "
                f"the cluster")
        (created,) = self._commit([Op("create", path, znodes.encode_broker(
            broker, self._wall_ms()), ephemeral=True)], None)
        return int(created[1].czxid)

    def get_brokers(self, watch: bool = False) -> dict[int, BrokerInfo]:
        self._sid()
        if watch:
            self._watch(znodes.BROKER_IDS, "child", BrokersChanged)
        out = {}
        for child in self.zk.children(znodes.BROKER_IDS):
            node = self.zk.get(f"{znodes.BROKER_IDS}/{child}")
            if node is not None and child.isdigit():
                out[int(child)] = znodes.decode_broker(int(child), node.data, node.czxid)
        return dict(sorted(out.items()))

    # ------------------------------------------------------------- controller
    def get_controller(self, watch: bool = False) -> int | None:
        self._sid()
        if watch:
            self._watch(znodes.CONTROLLER, "data", ControllerChanged)
        node = self.zk.get(znodes.CONTROLLER)
        return None if node is None else znodes.decode_controller(node.data)

    def try_elect(self, broker_id: int) -> ControllerFence | None:
        self._sid()
        node = self.zk.get(znodes.CONTROLLER_EPOCH)
        if node is None:
            self._commit([Op("create", znodes.CONTROLLER_EPOCH,
                             znodes.encode_controller_epoch(0))], None)
            node = self.zk.get(znodes.CONTROLLER_EPOCH)
        assert node is not None
        epoch = znodes.decode_controller_epoch(node.data)
        try:
            results = self._commit([
                Op("create", znodes.CONTROLLER, znodes.encode_controller(broker_id, 0),
                   ephemeral=True),
                Op("set", znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch + 1),
                   node.version),
            ], None)
        except ZkError:
            # /controller exists: ours if this very session holds it (an election of this
            # session whose controller stopped without giving it up).
            held = self.zk.get(znodes.CONTROLLER)
            if (held is not None and held.owner == self._session
                    and znodes.decode_controller(held.data) == broker_id):
                return ControllerFence(broker_id, epoch, node.version)
            return None
        return ControllerFence(broker_id, epoch + 1, results[1].version)

    def resign(self, fence: ControllerFence) -> None:
        try:
            self._commit([Op("delete", znodes.CONTROLLER)], fence)
        except (ControllerMoved, ZkError):
            pass

    # ---------------------------------------------------------------- topics
    def get_topics(self, watch: bool = False) -> set[str]:
        self._sid()
        if watch:
            self._watch(znodes.TOPICS, "child", TopicsChanged)
        return set(self.zk.children(znodes.TOPICS))

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        self._sid()
        out = {}
        for topic in sorted(topics):
            node = self.zk.get(znodes.topic_path(topic))
            if node is not None:
                found = self.zk.get(znodes.adopted_topic_id_path(topic))
                record = None if found is None else znodes.read_adopted_topic_id(
                    topic, found.data)
                out[topic] = znodes.with_adoption(
                    znodes.decode_topic_assignment(topic, node.data, node.version), record)
        return out

    def get_topic_configs(self, topic: str) -> dict[str, str]:
        self._sid()
        node = self.zk.get(znodes.topic_config_path(topic))
        return {} if node is None else znodes.decode_topic_config(topic, node.data)

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> bool:
        self._sid()
        path = znodes.topic_config_path(topic)
        node = self.zk.get(path)
        if node is None:
            return False
        return self._conditional_write(path, znodes.encode_topic_config(configs), node.version,
                                       znodes.CONFIG_CHANGES, znodes.encode_topic_change(topic))

    def create_topic(self, topic: str, assignment: TopicAssignment, configs: dict[str, str],
                     fence: ControllerFence | None = None) -> int:
        config_path = znodes.topic_config_path(topic)
        config_op = Op("set" if self.zk.get(config_path) else "create", config_path,
                       znodes.encode_topic_config(configs))
        try:
            self._commit([config_op, Op("create", znodes.topic_path(topic),
                                        znodes.encode_topic_assignment(assignment))], fence)
        except ZkError as exc:
            if exc.code is WriteCode.NODE_EXISTS:
                raise TopicExists(f"topic {topic!r} already exists") from None
            raise MetadataError(f"creating topic {topic!r} failed: {exc}") from None
        return 0

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment,
                             fence: ControllerFence, clear_adoption: bool = False
                             ) -> WriteResult:
        self._sid()
        if clear_adoption and assignment.topic_id_adopted:
            raise ValueError(f"{topic}: an adoption is cleared by an unmarked assignment")
        ops = self._adoption_record_ops(topic, assignment)
        if clear_adoption:
            path = znodes.adopted_topic_id_path(topic)
            found = self.zk.get(path)
            if found is not None and znodes.adoption_to_clear(
                    znodes.read_adopted_topic_id(topic, found.data), assignment.topic_id):
                ops.append(Op("delete", path, version=found.version))
        return self._write([*ops,
                            Op("set", znodes.topic_path(topic),
                               znodes.encode_topic_assignment(assignment),
                               assignment.version)], fence)

    def _adoption_record_ops(self, topic: str, assignment: TopicAssignment) -> list[Op]:
        """The write of the topic's adoption record, if its id is adopted and not recorded
        yet (committed with the topic znode, as the ZooKeeper store does)."""
        if not assignment.topic_id_adopted:
            return []
        path = znodes.adopted_topic_id_path(topic)
        found = self.zk.get(path)
        if found is not None and znodes.adoption_recorded(
                znodes.read_adopted_topic_id(topic, found.data), assignment.topic_id):
            return []
        data = znodes.encode_adopted_topic_id(
            znodes.AdoptedTopicId(assignment.topic_id, self._wall_ms()))
        if found is None:
            return [Op("create", path, data)]
        return [Op("set", path, data, found.version)]

    def record_topic_adoptions(self, assignments: dict[str, TopicAssignment],
                               fence: ControllerFence) -> None:
        self._sid()
        for topic, assignment in sorted(assignments.items()):
            ops = self._adoption_record_ops(topic, assignment)
            if ops:
                try:
                    self._commit(ops, fence)
                except ZkError as exc:
                    raise MetadataError(f"recording an adopted topic id failed: {exc}") from None

    def delete_topic(self, topic: str, fence: ControllerFence) -> None:
        self._sid()
        prefix = znodes.topic_path(topic)
        paths = sorted((p for p in self.zk.nodes if p == prefix or p.startswith(prefix + "/")),
                       key=lambda p: -p.count("/"))
        paths += [p for p in (znodes.topic_config_path(topic), znodes.delete_topic_path(topic),
                              znodes.adopted_topic_id_path(topic))
                  if self.zk.get(p) is not None]
        if paths:
            self._commit([Op("delete", p) for p in paths], fence)

    def mark_topic_for_deletion(self, topic: str) -> bool:
        self._sid()
        if self.zk.get(znodes.topic_path(topic)) is None:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        if self.zk.get(znodes.delete_topic_path(topic)) is not None:
            return False
        self._commit([Op("create", znodes.delete_topic_path(topic))], None)
        return True

    def get_topic_deletions(self, watch: bool = False) -> set[str]:
        self._sid()
        if watch:
            self._watch(znodes.DELETE_TOPICS, "child", TopicDeletionsChanged)
        return set(self.zk.children(znodes.DELETE_TOPICS))

    def remove_topic_deletions(self, topics: Iterable[str], fence: ControllerFence) -> None:
        for topic in topics:
            try:
                self._commit([Op("delete", znodes.delete_topic_path(topic))], fence)
            except ZkError:
                pass

    # ------------------------------------------------------- partition states
    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        self._sid()
        out: dict[TopicPartition, LeaderAndIsr | None] = {}
        for tp in partitions:
            node = self.zk.get(znodes.partition_state_path(tp))
            out[tp] = (None if node is None
                       else znodes.decode_partition_state(tp, node.data, node.version,
                                                          node.mzxid))
        return out

    def create_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence
    ) -> dict[TopicPartition, WriteResult]:
        out = {}
        for tp, state in states.items():
            for parent in (znodes.topic_partitions_path(tp.topic), znodes.partition_path(tp)):
                if self.zk.get(parent) is None:
                    self._write([Op("create", parent)], fence)
            result = self._write([Op("create", znodes.partition_state_path(tp),
                                     znodes.encode_partition_state(state))], fence)
            out[tp] = WriteResult(WriteCode.OK, 0) if result.ok else result
        return out

    def update_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence | None
    ) -> dict[TopicPartition, WriteResult]:
        return {tp: self._write([Op("set", znodes.partition_state_path(tp),
                                    znodes.encode_partition_state(state), state.version)], fence)
                for tp, state in states.items()}

    # --------------------------------------------------- ISR change notices
    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        self._commit([Op("create", f"{znodes.ISR_CHANGE_NOTIFICATION}/{znodes.ISR_CHANGE_PREFIX}",
                         znodes.encode_isr_change(list(partitions)), sequential=True)], None)

    def get_isr_change_notifications(self, watch: bool = False) -> list[IsrChangeNotification]:
        self._sid()
        if watch:
            self._watch(znodes.ISR_CHANGE_NOTIFICATION, "child", IsrChangesNotified)
        out = []
        for name in self.zk.children(znodes.ISR_CHANGE_NOTIFICATION):
            node = self.zk.get(f"{znodes.ISR_CHANGE_NOTIFICATION}/{name}")
            if node is not None:
                out.append(IsrChangeNotification(name, znodes.decode_isr_change(name, node.data)))
        return out

    def delete_isr_change_notifications(self, names: Iterable[str],
                                        fence: ControllerFence) -> None:
        for name in names:
            try:
                self._commit([Op("delete", f"{znodes.ISR_CHANGE_NOTIFICATION}/{name}")], fence)
            except ZkError:
                pass

    # ------------------------------------------------------ users and ACLs
    def _conditional_write(self, path: str, data: bytes | None, version: int,
                           change_root: str, change: bytes) -> bool:
        self._sid()
        if version == -1 and data is None:  # "absent" stays absent: true unless it exists
            return self.zk.get(path) is None
        if version == -1:
            self._ensure(path.rsplit("/", 1)[0])
        self._ensure(change_root)
        prefix = (znodes.CONFIG_CHANGE_PREFIX if change_root == znodes.CONFIG_CHANGES
                  else znodes.ACL_CHANGE_PREFIX)
        ops = [Op("create", path, data or b"", ctime_ms=self._wall_ms()) if version == -1
               else Op("delete", path, version=version) if data is None
               else Op("set", path, data, version=version),
               Op("create", f"{change_root}/{prefix}", change, sequential=True,
                  ctime_ms=self._wall_ms())]
        try:
            self._commit(ops, None)
        except ZkError:
            return False
        return True

    def get_users(self) -> set[str]:
        self._sid()
        return {znodes.desanitize(c) for c in self.zk.children(znodes.CONFIG_USERS)}

    def get_user_configs(self, user: str) -> tuple[dict[str, str], int]:
        self._sid()
        node = self.zk.get(znodes.user_config_path(user))
        if node is None:
            return {}, -1
        return znodes.decode_user_config(user, node.data), node.version

    def set_user_configs(self, user: str, configs: dict[str, str], version: int) -> bool:
        return self._conditional_write(
            znodes.user_config_path(user), znodes.encode_user_config(configs) if configs else None,
            version, znodes.CONFIG_CHANGES, znodes.encode_user_change(user))

    def get_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        self._sid()
        path = znodes.acl_path(pattern)
        node = self.zk.get(path)
        if node is None:
            return frozenset(), -1
        return znodes.decode_acls(path, node.data), node.version

    def set_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                 version: int) -> bool:
        return self._conditional_write(
            znodes.acl_path(pattern), znodes.encode_acls(entries) if entries else None, version,
            znodes.acl_change_root(pattern), znodes.encode_acl_change(pattern))

    def get_all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        self._sid()
        out = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for type_name in self.zk.children(znodes.ACL_ROOTS[pattern_type]):
                try:
                    resource_type = ResourceType.parse(type_name)
                except ValueError:
                    continue
                for name in self.zk.children(znodes.acl_type_path(resource_type, pattern_type)):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    node = self.zk.get(znodes.acl_path(pattern))
                    if node is not None:
                        entries = znodes.decode_acls(znodes.acl_path(pattern), node.data)
                        if entries:
                            out[pattern] = entries
        return out

    # ---------------------------------------------- change notifications
    def get_change_notifications(self, root: str, watch: bool = False
                                 ) -> list[ChangeNotification]:
        self._sid()
        if watch:
            self._watch(root, "child", lambda session: ChangesNotified(session, root))
        out = []
        for name in self.zk.children(root):
            node = self.zk.get(f"{root}/{name}")
            if node is not None:
                out.append(ChangeNotification(f"{root}/{name}", node.data, node.ctime_ms))
        return out

    def delete_change_notifications(self, paths: Iterable[str]) -> None:
        for path in paths:
            try:
                self._commit([Op("delete", path)], None)
            except ZkError:
                pass


if TYPE_CHECKING:
    from actors.metadata.store import MetadataStore

    def _satisfies_the_protocol(store: MemoryMetadataStore) -> MetadataStore:
        return store
