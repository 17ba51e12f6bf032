"""Where the nodes of a cluster listen: each node's gateway endpoint."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from wire.envelope import incarnation_bytes

# How long an actor holds what it sends to a node that left the directory but may register
# again (``Directory.departed``) before it takes them for dead letters. A node whose
# ZooKeeper session expired while it ran on registers again within a session's reconnect;
# until the others read that registration, their answers to what it asks (a follower's
# fetch the moment it runs again) would otherwise be lost.
DEPARTED_HOLD_MS = 10_000
# Re-reads of one node's registration asked for by held answers (``Directory.want_reread``):
# at least this long between two, and a failed read is tried again after a backoff that
# doubles up to the hold
_HOLD_NS = DEPARTED_HOLD_MS * 1_000_000
# Entries of ``departed`` at most: past it the oldest go (what waits for them becomes dead
# letters at the senders' next look, as after the hold)
DEPARTED_MAX = 1024
REREAD_MIN_MS = 1_000
# Earlier incarnations remembered (``Directory.earlier``): per node, and nodes in all
EARLIER_PER_NODE = 4
EARLIER_NODES = 1024
REREAD_BACKOFF_MAX_MS = DEPARTED_HOLD_MS


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
    # the hold is taken for gone (nothing new is held for it) and dropped at the next learn
    # or forget, so a node that never comes back costs nothing after the hold
    departed_ns: dict[str, int] = field(default_factory=dict)
    clock: Any = None  # the node's (Node sets it); None: time.monotonic_ns
    # Re-reads of registrations asked for by actors holding an answer for a process of a
    # node this directory does not list (``want_reread``; any thread), taken by the one
    # that keeps the directory (``due_rereads``, ``reread_done``). Bounded per node: one
    # asked for or under way at a time, ``REREAD_MIN_MS`` between two, on ``clock`` (a
    # node's monotonic clock, safe from any thread; the simulation's clock in a seed, so
    # when a re-read is due replays with the seed).
    reread_requests: int = 0  # asked for (posted), in all
    # Whether something reads the registrations again when asked (a cluster node's
    # controller): then an answer to a node not listed at all waits for it too
    kept: bool = False
    _reread_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # node -> (not before, monotonic ns; the backoff of its next failure, ms); present
    # while a re-read is asked for or under way
    _rereads: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    _reread_last_ns: dict[str, int] = field(default_factory=dict, repr=False)
    _reread_taken: set[str] = field(default_factory=set, repr=False)
    # node -> the incarnations it had before its current one (as frames carry them, newest
    # last; ``EARLIER_PER_NODE`` per node, ``EARLIER_NODES`` nodes at most): a frame from
    # one of them is a late one of a dead process (``was_earlier``)
    earlier: dict[str, list[bytes]] = field(default_factory=dict, repr=False)

    def was_earlier(self, name: str, incarnation: bytes) -> bool:
        """Whether ``incarnation`` is a process ``name`` had before the one learnt since
        (so it is gone: what answers it can never be delivered)."""
        past = self.earlier.get(name)
        return past is not None and incarnation in past

    def _note_earlier(self, name: str, old: NodeEndpoint | None, new: NodeEndpoint) -> None:
        past = self.earlier.get(name)
        if past is not None and new.incarnation:  # listed again: not an earlier one
            learnt = incarnation_bytes(new.incarnation)
            if learnt in past:
                past.remove(learnt)
        if old is None or old.incarnation == new.incarnation:
            return
        self._remember_earlier(name, old)

    def _remember_earlier(self, name: str, old: NodeEndpoint) -> None:
        if not old.incarnation:
            return
        inc = incarnation_bytes(old.incarnation)
        past = self.earlier.get(name)
        if past is None:
            if len(self.earlier) >= EARLIER_NODES:
                self.earlier.pop(next(iter(self.earlier)))
            past = self.earlier[name] = []
        if inc not in past:
            past.append(inc)
            del past[:-EARLIER_PER_NODE]

    def want_reread(self, name: str) -> bool:
        """Ask for ``name``'s registration to be read again (any thread, never blocks).
        False when one is already asked for or under way, or the last was less than
        ``REREAD_MIN_MS`` ago: then nothing is posted."""
        now = self._now_ns()
        with self._reread_lock:
            if name in self._rereads:
                return False
            last = self._reread_last_ns.get(name)
            if last is not None and now - last < REREAD_MIN_MS * 1_000_000:
                return False
            if len(self._reread_last_ns) >= 1024:
                self._reread_last_ns.clear()
            self._rereads[name] = (now, REREAD_MIN_MS)
            self.reread_requests += 1
        return True

    def due_rereads(self) -> list[str]:
        """The nodes whose registration is to be read now (by the directory's keeper, who
        then calls :meth:`reread_done` for each)."""
        now = self._now_ns()
        with self._reread_lock:
            due = [n for n, (at, _b) in self._rereads.items()
                   if at <= now and n not in self._reread_taken]
            self._reread_taken.update(due)
            return due

    def next_reread_ms(self) -> int | None:
        """How soon a re-read asked for is due (ms; None: none is)."""
        now = self._now_ns()
        with self._reread_lock:
            waiting = [at for n, (at, _b) in self._rereads.items()
                       if n not in self._reread_taken]
        return max(0, (min(waiting) - now) // 1_000_000) if waiting else None

    def reread_done(self, name: str, ok: bool) -> None:
        """The re-read of ``name`` ended: read (or the read failed: tried again after a
        backoff; a failure says nothing about the node)."""
        now = self._now_ns()
        with self._reread_lock:
            self._reread_taken.discard(name)
            found = self._rereads.pop(name, None)
            if ok or found is None:
                self._reread_last_ns[name] = now
                return
            backoff = found[1]
            self._rereads[name] = (now + backoff * 1_000_000,
                                   min(backoff * 2, REREAD_BACKOFF_MAX_MS))

    def add(self, name: str, endpoint: NodeEndpoint) -> None:
        self.nodes[name] = endpoint

    def learn(self, name: str, endpoint: NodeEndpoint) -> bool:
        """Add or replace ``name``'s entry; False (entry kept as is) when it is the same.
        An entry (listed or departed) replaced by another process is remembered among
        ``earlier``."""
        current = self.nodes.get(name)
        changed = current != endpoint
        self._note_earlier(name, current if current is not None else self.departed.get(name),
                           endpoint)
        if changed:
            self.nodes[name] = endpoint
        self.departed.pop(name, None)  # after the entry is set: see the class docstring
        self.departed_ns.pop(name, None)
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
            # dropped for good, or for another process learnt next (the controller's
            # forget-then-learn when a registration names a new process): remembered
            # among ``earlier`` either way, so its late frames' answers go at once
            left = endpoint if endpoint is not None else self.departed.get(name)
            if left is not None:
                self._remember_earlier(name, left)
            self.departed.pop(name, None)
            self.departed_ns.pop(name, None)
        gone = self.nodes.pop(name, None) is not None
        self.prune()
        return gone

    def _now_ns(self) -> int:
        return self.clock.monotonic_ns() if self.clock is not None else time.monotonic_ns()

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

    def prune(self) -> None:
        """Drop the departed longer ago than the hold (and the oldest past
        ``DEPARTED_MAX``); by the thread that learns and forgets."""
        now = self._now_ns()
        for name, since in list(self.departed_ns.items()):
            if now - since >= _HOLD_NS or len(self.departed_ns) > DEPARTED_MAX:
                self.departed.pop(name, None)
                self.departed_ns.pop(name, None)


def default_ipc_dir() -> str:
    """Where nodes of one host put their gateway sockets (``ACTORLOG_IPC_DIR`` overrides)."""
    return os.environ.get("ACTORLOG_IPC_DIR", f"/tmp/actorlog-ipc-{os.getuid()}")
