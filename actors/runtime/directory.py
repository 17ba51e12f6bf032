"""Where the nodes of a cluster listen: each node's gateway endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# How long an actor holds what it sends to a node that left the directory but may register
# again (``Directory.departed``) before it takes them for dead letters. A node whose
# ZooKeeper session expired while it ran on registers again within a session's reconnect;
# until the others read that registration, their answers to what it asks (a follower's
# fetch the moment it runs again) would otherwise be lost.
DEPARTED_HOLD_MS = 10_000
_HOLD_NS = DEPARTED_HOLD_MS * 1_000_000
# Entries of ``departed`` and ``arrived`` at most: past it the oldest go (their messages
# become dead letters at the senders' next look, as after the hold)
DEPARTED_MAX = 1024


@dataclass(frozen=True)
class NodeEndpoint:
    """How other nodes reach a node's gateway."""

    host: str
    port: int = 0
    ipc_dir: str = ""
    # Which process of the node: made new at each start and registered with the gateway
    # (``BrokerInfo.incarnation``), so a node restarted on the same host and ports is a
    # different entry. Empty: not known (a node not in a cluster, an older registration)
    incarnation: str = ""

    def tcp(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def ipc(self, node: str) -> str:
        return f"ipc://{self.ipc_dir}/{node}.gw"


@dataclass
class Directory:
    """Where every node of the cluster listens.

    Static for a single node; in a cluster the node's Controller actor keeps it
    up to date from the brokers' registrations (:meth:`learn`, :meth:`forget`),
    and every other thread only reads it. A changed or forgotten entry is a new
    object or none at all, and senders compare their link's endpoint with the
    entry by identity, so a link to a node that left or moved is closed and
    made again (or the message goes to dead letters) instead of being used.
    Closing drops what the link had not sent yet (linger 0).

    ``departed``: nodes forgotten that may register again (a cluster node whose
    registration went), each with the entry it left with. Messages to them are held by
    their senders for up to ``DEPARTED_HOLD_MS`` and sent once the node is learnt again
    with an equal entry (the same process: the same ``incarnation``): a reply goes back
    through this directory, not on the request's link, and a node that registered again
    may ask before this one has read its new registration. Learnt again with another
    entry (a new process, ids it matches answers by start again), they are dead letters.
    Only what is sent after the node left is held: what its old link had not sent yet is
    dropped with the link, so a receiver may see a sender's earlier messages, a gap,
    then the held ones (in order among themselves).

    Writes are ordered for the threads that read without a lock: ``learn`` sets the
    entry before it drops the node from ``departed``, ``forget`` adds to ``departed``
    before it drops the entry. So a reader that looks at ``departed`` first, then at
    ``nodes``, never finds the node in neither while it is in one; a reader that looks
    at ``nodes`` first may (``learn`` ran between its reads) and must look at ``nodes``
    once more before it takes the node for forgotten.
    """

    nodes: dict[str, NodeEndpoint] = field(default_factory=dict)
    departed: dict[str, NodeEndpoint] = field(default_factory=dict)
    # When each node of ``departed`` left (monotonic ns of ``clock``): an entry older than
    # the hold is taken for gone (no new message is held for it) and dropped at the next
    # learn or forget, so a node that never comes back costs nothing after the hold
    departed_ns: dict[str, int] = field(default_factory=dict)
    # Processes of other nodes a frame came from (its sender's incarnation) before this
    # directory held their registration: node -> (incarnation, when first seen). Answers
    # to them are held for that incarnation (not for the one the node left with, nor
    # sent to the old process's link) until it is learnt; ``on_arrival`` is told at once so
    # the registration is read again (a frame's claim is never where we connect).
    arrived: dict[str, tuple[str, int]] = field(default_factory=dict)
    on_arrival: Callable[[str, str], None] | None = None
    clock: Any = None  # the node's (Node sets it); None: time.monotonic_ns

    def _now_ns(self) -> int:
        return self.clock.monotonic_ns() if self.clock is not None else time.monotonic_ns()

    def add(self, name: str, endpoint: NodeEndpoint) -> None:
        self.nodes[name] = endpoint

    def learn(self, name: str, endpoint: NodeEndpoint) -> bool:
        """Add or replace ``name``'s entry; False (entry kept as is) when it is the same."""
        changed = self.nodes.get(name) != endpoint
        if changed:
            self.nodes[name] = endpoint
        self.departed.pop(name, None)  # after the entry is set: see the class docstring
        self.departed_ns.pop(name, None)
        found = self.arrived.get(name)
        if found is not None and found[0] == endpoint.incarnation:
            self.arrived.pop(name, None)
        self.prune()
        return changed

    def forget(self, name: str, may_return: bool = False) -> bool:
        """Drop ``name``'s entry (the node left); False when there was none. ``may_return``:
        it may register again, what is sent to it meanwhile is held (``departed``)."""
        endpoint = self.nodes.get(name)
        if endpoint is not None and may_return:
            self.departed_ns[name] = self._now_ns()
            self.departed[name] = endpoint  # before the entry goes: see the class docstring
        elif not may_return:
            self.departed.pop(name, None)
            self.departed_ns.pop(name, None)
            self.arrived.pop(name, None)
        gone = self.nodes.pop(name, None) is not None
        self.prune()
        return gone

    def left_with(self, name: str) -> NodeEndpoint | None:
        """The entry ``name`` left with, while what is sent to it may be held (None: not
        departed, or departed longer ago than the hold)."""
        endpoint = self.departed.get(name)
        if endpoint is None:
            return None
        since = self.departed_ns.get(name)
        if since is not None and self._now_ns() - since >= _HOLD_NS:
            return None
        return endpoint

    def expected(self, name: str) -> str | None:
        """The incarnation of ``name`` a frame came from that this directory does not hold
        yet (None: none, or it is the one held, or it was seen longer ago than the hold)."""
        found = self.arrived.get(name)
        if found is None:
            return None
        incarnation, since = found
        current = self.nodes.get(name)
        if current is not None and current.incarnation == incarnation:
            return None
        if self._now_ns() - since >= _HOLD_NS:
            return None
        return incarnation

    def arrival(self, name: str, incarnation: str) -> None:
        """A frame came from ``incarnation`` of node ``name``, which this directory does not
        hold (any thread). Noted once (again after the hold) and ``on_arrival`` told."""
        found = self.arrived.get(name)
        now = self._now_ns()
        if found is not None and found[0] == incarnation and now - found[1] < _HOLD_NS:
            return
        if len(self.arrived) >= DEPARTED_MAX:
            for oldest in list(self.arrived)[:1]:
                self.arrived.pop(oldest, None)
        self.arrived[name] = (incarnation, now)
        current = self.nodes.get(name)
        if current is not None and current.incarnation == incarnation:
            self.arrived.pop(name, None)  # learnt meanwhile
            return
        if self.on_arrival is not None:
            self.on_arrival(name, incarnation)

    def refute(self, name: str, incarnation: str) -> None:
        """The registrations read after ``incarnation`` of ``name`` spoke name another
        process: that one is not the node (a stale process's frame); what goes to the node
        goes to the registered process again."""
        found = self.arrived.get(name)
        if found is not None and found[0] == incarnation:
            self.arrived.pop(name, None)

    def prune(self) -> None:
        """Drop what is older than the hold (and the oldest past ``DEPARTED_MAX``); by the
        thread that learns and forgets."""
        now = self._now_ns()
        for name, since in list(self.departed_ns.items()):
            if now - since >= _HOLD_NS or len(self.departed_ns) > DEPARTED_MAX:
                self.departed.pop(name, None)
                self.departed_ns.pop(name, None)
        for name, (_incarnation, since) in list(self.arrived.items()):
            if now - since >= _HOLD_NS:
                self.arrived.pop(name, None)


def default_ipc_dir() -> str:
    """Where nodes of one host put their gateway sockets (``ACTORLOG_IPC_DIR`` overrides)."""
    return os.environ.get("ACTORLOG_IPC_DIR", f"/tmp/actorlog-ipc-{os.getuid()}")
