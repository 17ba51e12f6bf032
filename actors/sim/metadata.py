"""A simulated ZooKeeper for the controller: the in-memory model plus time, sessions and reach.

:class:`SimZooKeeper` is :class:`~actors.metadata.memory.MemoryZooKeeper`
(znodes, versions, ephemeral znodes, one-shot watches, multi-op conditional
transactions) given what a real ensemble adds on a network:

- a session lives while its client is heard from: every tick the server
  hears each client that is up, not paused and not cut off from it, and
  expires a session not heard from for its timeout (its ephemeral znodes go,
  firing watches), as a ZooKeeper leader expires sessions;
- while the whole ensemble is down no client reaches it and no session
  expires; when it is back every session starts a fresh timeout;
- a client cut off from the server gets ``suspended`` from its own client
  library at once, ``connected`` again when the link is back within the
  session timeout, or ``expired`` and then a new session (``connected`` with
  a new id), as kazoo reports them;
- notices reach the client in order, after a delay, only while it can reach
  the server; calls made while it cannot raise MetadataUnavailable.

:class:`SimMetadataStore` is one node's client: the very MemoryMetadataStore
(the MetadataStore interface the ClusterController calls), with its session
and its notices run as above.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from actors.metadata.store import MetadataUnavailable
from actors.sim.kernel import NS_PER_MS
from wire.cluster_messages import (
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    SESSION_SUSPENDED,
    SessionStateChanged,
)

if TYPE_CHECKING:
    from actors.sim.world import SimWorld

ZK = "zk"                # the ensemble's name in the simulated network
TICK_MS = 100            # how often the server hears clients and checks expiry
NOTICE_DELAY_MS = (0.2, 3.0)


class SimZooKeeper(MemoryZooKeeper):
    def __init__(self, world: SimWorld) -> None:
        super().__init__()
        self.world = world
        self.last_heard_ns: dict[int, int] = {}
        self.timeouts_ms: dict[int, int] = {}
        self.clients: list[SimMetadataStore] = []
        self.expired = 0
        world.kernel.after_ms(TICK_MS, self._tick)

    def open_session(self, store: MemoryMetadataStore) -> int:
        session_id = super().open_session(store)
        assert isinstance(store, SimMetadataStore)
        self.last_heard_ns[session_id] = self.world.kernel.now_ns
        self.timeouts_ms[session_id] = store.session_timeout_ms
        return session_id

    def close_session(self, session_id: int, expired: bool = False) -> None:
        if session_id in self.sessions:
            self.world.note(f"zk session {session_id:#x} {'expired' if expired else 'closed'}")
        self.last_heard_ns.pop(session_id, None)
        self.timeouts_ms.pop(session_id, None)
        super().close_session(session_id, expired)

    def reachable(self, node: str) -> bool:
        found = self.world.nodes.get(node)
        return (self.available and found is not None and not found.crashed
                and not found.paused and self.world.net.connected(node, ZK))

    def outage(self, ms: float) -> None:
        """The whole ensemble is down for ``ms``: no client reaches it, and no session
        expires meanwhile (a new leader gives every session a fresh timeout)."""
        self.available = False
        self.world.note(f"zookeeper down for {ms:.0f} ms")
        self.world.kernel.after_ms(ms, self._back)

    def _back(self) -> None:
        self.available = True
        now = self.world.kernel.now_ns
        for session_id in self.last_heard_ns:
            self.last_heard_ns[session_id] = now
        self.world.note("zookeeper back")

    def _tick(self) -> None:
        now = self.world.kernel.now_ns
        for store in list(self.clients):
            store._tick(now)
        for session_id in list(self.sessions) if self.available else []:
            client = self._stores.get(session_id)
            if client is None:
                continue
            assert isinstance(client, SimMetadataStore)
            if client.alive and self.reachable(client.node_name):
                self.last_heard_ns[session_id] = now
            elif now - self.last_heard_ns[session_id] > self.timeouts_ms[session_id] * NS_PER_MS:
                self.expired += 1
                self.expire(session_id)
        self.world.kernel.after_ms(TICK_MS, self._tick)

    def session_of(self, node: str) -> int | None:
        for store in self.clients:
            if store.node_name == node and store.alive:
                return store.session_id
        return None


class SimMetadataStore(MemoryMetadataStore):
    """One node's ZooKeeper client in the simulation."""

    def __init__(self, zk: SimZooKeeper, node_name: str, incarnation: int,
                 deliver: Callable[[Any], None], session_timeout_ms: int) -> None:
        super().__init__(zk, self._queue_notice, wall_ms=self._wall_ms_now)
        self.szk = zk
        self.node_name = node_name
        self.incarnation = incarnation
        self.session_timeout_ms = session_timeout_ms
        self._deliver = deliver
        self.alive = True          # False once its node crashed: it never talks again
        self.closed = False
        self.connected = False     # what the client library believes
        self.pending: deque[Any] = deque()
        self._flush_scheduled = False
        self._watchers: dict[tuple[int, str, str], Callable[[], None]] = {}
        zk.clients.append(self)

    def _wall_ms_now(self) -> int:
        return self.szk.world.clocks[self.node_name].wall_ms()

    # ------------------------------------------------------------- session
    def start(self) -> None:
        if not self.szk.reachable(self.node_name):
            raise MetadataUnavailable("ZooKeeper is not reachable from this node")
        super().start()
        self.connected = True

    def close(self) -> None:
        self.closed = True
        super().close()

    def crashed(self) -> None:
        """Its node died: the session stays until the server expires it."""
        self.alive = False
        self.pending.clear()

    def _sid(self) -> int:
        if not self.alive or not self.szk.reachable(self.node_name):
            raise MetadataUnavailable("not connected: ZooKeeper is not reachable from this node")
        return super()._sid()

    def _tick(self, now: int) -> None:
        if not self.alive or self.closed:
            return
        reachable = self.szk.reachable(self.node_name)
        if self.connected and not reachable:
            self.connected = False
            if self._session is not None:  # the client library says so at once, locally
                self._deliver(SessionStateChanged(SESSION_SUSPENDED, self._session))
        elif reachable and not self.connected:
            self.connected = True
            if self._session is not None:
                self._deliver(SessionStateChanged(SESSION_CONNECTED, self._session))
        if reachable and self._session is None:  # expired: the client makes a new session
            self._session = self.zk.open_session(self)
            self.pending.append(SessionStateChanged(SESSION_CONNECTED, self._session))
        if reachable and self.pending:
            self._schedule_flush()

    def _watch(self, path: str, kind: str, notice: Callable[[int], Any]) -> None:
        """One watcher per path and kind per session, as kazoo keeps a set of watchers per
        path: arming a watch again does not stack a second notice."""
        session = self._sid()
        key = (session, path, kind)
        fire = self._watchers.get(key)
        if fire is None:
            fire = self._watchers[key] = partial(self._fire, notice, session)
        self.zk.watch(session, path, kind, fire)

    def _fire(self, notice: Callable[[int], Any], session: int) -> None:
        self._sink(notice(session))

    # ------------------------------------------------------------- notices
    def _queue_notice(self, notice: Any) -> None:
        if not self.alive:
            return
        self.pending.append(notice)
        if self.szk.reachable(self.node_name):
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_scheduled:
            return
        self._flush_scheduled = True
        world = self.szk.world
        world.kernel.after_ms(world.kernel.rng.uniform(*NOTICE_DELAY_MS), self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self.alive or not self.szk.reachable(self.node_name):
            return
        while self.pending:
            self._deliver(self.pending.popleft())

    def _session_ended(self, state: str) -> None:
        super()._session_ended(state)
        if state == SESSION_EXPIRED:
            self.szk.world.note(f"zk client of {self.node_name} told its session expired")


__all__ = ["ZK", "SimMetadataStore", "SimZooKeeper"]
