"""The actor base: a pykka ThreadingActor whose mailbox is a ZeroMQ socket.

One thread per actor runs one poll loop over everything the actor waits on:
its ZeroMQ mailbox (PULL, bound at ``inproc://<node>/<name>``; the loop polls
its ZMQ_FD, a plain descriptor, and asks the socket before each recv), an eventfd
that wakes it for pykka's own calls (proxies, ``ActorRef.ask``, stop), and any
file descriptors it owns (the broker's Acceptor and Processors wait on their
sockets here, with no extra thread hop). Handlers run one message at a time,
so an actor's state needs no lock.

Sending is batched: every ``tell`` made while handling one incoming frame
(or one ready file descriptor) is buffered per receiver and flushed as one
frame right after it (or when ``actor.batch.max.messages`` is reached), so
what one frame caused travels together while the next actor never waits for
the rest of this actor's turn. Order from one sender to one receiver is kept
because each pair has one socket.

A frame never passes ``actor.max.frame.bytes`` (its receiver would refuse it
unread): what one turn sent to one receiver is cut into as many frames as the
limit needs, in order. A single message too large for any frame is refused
to its sender: :meth:`Actor.on_refused` runs in the sender's thread (an ask's
oversized Reply becomes an error Reply, so the asker gets an answer), and the
refusal is counted and logged once with sender, receiver, type and size.
"""

from __future__ import annotations

import errno
import queue
import sys
import threading
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import pykka
import zmq
from loguru import logger

from actors.runtime.address import ASK_SENDER, Address
from actors.runtime.clock import Clock
from actors.runtime.direct import DirectLink
from actors.runtime.directory import DEPARTED_HOLD_MS, NodeEndpoint
from actors.runtime.pykka_compat import PykkaActor, envelope, is_stop
from actors.runtime.supervision import RestartWindow, restart_after_crash
from actors.runtime.tracing import net_legs, new_id, trace_fields
from wire import registry
from wire.envelope import BadFrame, decode_frame_full, encode_frames, incarnation_bytes
from wire.runtime_messages import Reply

if TYPE_CHECKING:
    from actors.runtime.node import Link, Node

_encode_frames = encode_frames
_decode_frame = decode_frame_full
_inc_bytes = incarnation_bytes
_type_ids = registry._BY_TYPE
_types = registry._BY_ID
_build = registry.build
_NOBLOCK = zmq.NOBLOCK
_Again = zmq.Again
_POLLIN = int(zmq.POLLIN)
# While an actor holds messages for a departed node, its loop looks this often whether
# the directory has learnt the node again
_HELD_POLL_MS = 20
_HOLD_NS = DEPARTED_HOLD_MS * 1_000_000
# Messages held for one receiver at most; past it they are dead letters, as before
_HELD_MAX = 10_000
# Why held messages became dead letters (in the dead letter's reason)
_FORGOTTEN = "its node left the cluster for good"
_NEW_PROCESS = "its node registered again as a new process"
_OVERFLOW = f"more than {_HELD_MAX} held for it while its node was away"
_STOPPED = "the sender stopped while its node was away"


def _expired() -> str:  # the hold as it is (tests shorten it)
    return f"its node left and did not register again within {_HOLD_NS // 1_000_000} ms"


def _unregistered() -> str:
    return (f"the process of its node that asked was not registered within "
            f"{_HOLD_NS // 1_000_000} ms")


_GONE_PROCESS = "the process of its node that asked is gone (the node registered a newer one)"


def _lists(entry: NodeEndpoint | None, incarnation: bytes) -> bool:
    """Whether a directory entry is process ``incarnation`` (or names no process)."""
    return entry is not None and (not entry.incarnation
                                  or _inc_bytes(entry.incarnation) == incarnation)
# Answers held for processes not registered yet (Actor._origin_out), per actor at most; past
# it they go as any other send (a peer naming ever new processes cannot grow this)
_ORIGIN_HELD_MAX = 1024
# Actor._origin_route's answers
_TO_LISTED, _TO_GONE, _TO_HOLD, _TO_ANY = "listed", "gone", "hold", "any"
_EVENTS = zmq.EVENTS


def handles(*message_types: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as the handler of one or more message types."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__actorlog_handles__ = message_types  # type: ignore[attr-defined]
        return fn

    return mark


class _AdoptGuest:
    """pykka control message: a host actor takes a guest into its thread and loop."""

    __slots__ = ("guest",)

    def __init__(self, guest: Actor) -> None:
        self.guest = guest


_MAILBOX, _INBOX, _FD = 0, 1, 2
# Rounds over a loop's actors between two polls while they hand each other messages
# (bounded: sockets and mailboxes are not kept waiting by a chatty loop).
_LOCAL_ROUNDS = 4


class Actor(PykkaActor):
    """Base of every actorlog actor.

    Subclasses declare handlers with :func:`handles`, build their state in
    :meth:`setup` (called at start and again after every crash: state comes
    back from durable storage, the mailbox is kept), and send with
    :meth:`tell`.

    Placement: by default an actor has a thread of its own. Spawned with
    ``host=`` another actor, it runs as a *guest* in the host's thread: the
    host's poll loop also waits on the guest's mailbox, pykka inbox and file
    descriptors. The guest keeps its own mailbox, state and supervision;
    messages between actors of one loop are handed over in memory, in order,
    without ZeroMQ or a thread switch (they are immutable once told). Where an
    actor runs is configuration; its code is the same either way.
    """

    mailbox_size: ClassVar[int] = 1000
    """Frames the mailbox holds before senders are slowed down (ZeroMQ HWM); 0: unbounded.

    Bound a mailbox only where no cycle can run through it: two actors each
    waiting for room in the other's full mailbox would wait forever. The broker
    bounds its request path in the Processors and leaves every mailbox unbounded,
    as Kafka bounds its request queue and not its response queues."""
    max_restarts: ClassVar[int] = 10
    restart_window_s: ClassVar[float] = 60.0
    waits_on_remote: ClassVar[bool] = True
    """Whether a send to another node waits while the link there takes nothing (a full
    pipe, a peer that never completes its handshake). False: what the link does not take at
    once is a dead letter, logged once per node; for advisory traffic (the gateway's pings)
    from an actor that shares its thread with the request path."""

    def __init__(self, node: Node, name: str, **kwargs: Any) -> None:
        super().__init__()
        self.node = node
        self.name = name
        self.address = Address(node.name, name)
        self.log = logger.bind(actor=name, node=node.name)
        # The node's clock unless a subclass is given its own: one clock drives the node.
        self.clock: Clock = node.clock
        self.current_sender: Address | None = None
        self.received = 0
        self.sent_local = 0
        self.crashes = 0
        # supervision restarts by the exception's class (the sim's checker excuses the ones
        # a failed flush makes on purpose, and only those)
        self.restarts_by_cause: dict[type, int] = {}
        host = kwargs.pop("host", None)
        self._init_kwargs = kwargs
        self._handlers: dict[type, Callable[[Any], Any]] = {}
        for klass in reversed(type(self).__mro__):
            for attr, fn in vars(klass).items():
                for mt in getattr(fn, "__actorlog_handles__", ()):
                    self._handlers[mt] = getattr(self, attr)
        self._out: dict[Address, list[Any]] = {}
        self._to_self: list[Any] = []
        # frames handed over in memory by actors of the same loop, and by the gateway when
        # it runs in this loop (frames from other nodes): (sender node, sender name, entries)
        # (sender node, sender name, entries, sender's incarnation: b"" when not said)
        self._local_in: list[tuple[str, str, list[Any], bytes]] = []
        self._out_sockets: dict[Address, Link | _LocalLink | DirectLink] = {}
        # What waits for a node that left the directory and may register again
        # (Directory.departed): receiver -> (held since, monotonic ns; the entry its node left
        # with; the entries, in order)
        self._departed_out: dict[Address, tuple[int, NodeEndpoint, list[Any]]] = {}
        # The node and process (incarnation, as frames carry it) the frame being handled
        # came from; None: from this node, or a frame that names no process
        self._origin: tuple[str, bytes] | None = None
        # Answers to the sender of a frame from a process of another node the directory
        # does not list (restarted; its registration not read here yet): receiver -> (the
        # process, held since (monotonic ns), the entries in order, whether each answers
        # that process). What else is sent to that receiver meanwhile (a timer's, a deferred
        # answer) is appended, so nothing overtakes what waits. Sent once the directory
        # lists that process; after the hold the answers are dead letters, the rest goes.
        self._origin_out: dict[Address, tuple[bytes, int, list[Any], list[bool]]] = {}
        self._not_taken_logged: set[str] = set()  # nodes (waits_on_remote False)
        self._owner: Actor = host if host is not None else self
        # Actors this loop runs (owner only). A tuple: adopting or dropping a member
        # puts a new one here, so the loop walks the tuple it read at the start of a
        # walk without a copy per turn (a handler or a crash may change the members
        # during the walk).
        self._members: tuple[Actor, ...] = (self,)
        # polls this loop has made (owner only): a member's on_turn also runs in the
        # rounds over local messages between two polls; this tells them apart
        self.loop_polls = 0
        # Members whose mailbox may hold frames the loop has not taken (owner only): the
        # loop waits on each mailbox's ZMQ_FD, which signals only a change, so a mailbox
        # left with frames (a drain's cap, a new one) is drained again before a sleep.
        self._mailbox_backlog: list[Actor] = []
        self._routes: dict[Any, tuple[Actor, int, Any]] = {}  # owner only
        self._my_routes: list[Any] = []
        self._poller = zmq.Poller()
        self._mailbox: zmq.Socket[Any] | None = None
        # Set, under the lock, when the mailbox stops taking frames (its stop): a sender's
        # local link sends under the same lock only while it is not set (Node._send_frame),
        # so every frame is either in the socket when the stop drains it into dead letters
        # or refused as one; none goes into the pipe ZeroMQ's reaper ends later, unread.
        self._shut_lock = threading.Lock()
        self._mailbox_shut = False
        # Metrics (written by this actor's thread only; a scrape reads them as they are):
        # messages handled, time in handlers, and messages taken from actors of this node
        # (the mailbox depth is what they sent, counted on their side, minus this).
        self.messages_handled = 0
        self.handler_ns = 0
        self.messages_dequeued = 0
        self._enqueue_keys: dict[str, str] = {}
        self._enqueue_counts: Counter[str] | None = None  # this thread's, once it sends
        self._stopping = False
        self._members_stopping = False  # owner: whether any member began to stop
        # Futures of the stops asked of this actor (pykka's stop): answered once it stopped.
        # None once answered: a stop asked later (refused by the sealed inbox) is at once.
        self._stop_waiters: list[Any] | None = []
        self._stop_lock = threading.Lock()
        # actor_stopped, as a plain attribute: Event.is_set is a Python call, and the
        # dispatch loop looks at it for every message
        self._dead = False
        # a guest its host refused (stopping): never set up, so no teardown either (it
        # would trip over all a setup makes)
        self._never_set_up = False
        self._ready = node._new_ready_event()
        self._start_error: BaseException | None = None  # why on_start failed (spawn names it)
        self.restarts = RestartWindow(self.max_restarts, self.restart_window_s)
        self._trace = (0, 0)  # (trace id, span id) of the message being handled
        self._tracer = node.tracer
        self._batch_max = node.batch_max_messages
        self._max_frame = node.max_frame_bytes
        # Whether on_turn does anything: the loop skips the call for actors that keep
        # the base class's (a call per actor per turn is a share of a small request).
        self._has_turn = type(self).on_turn is not Actor.on_turn
        # Likewise poll_timeout_ms, asked of every member before each poll.
        self._has_timeout = type(self).poll_timeout_ms is not Actor.poll_timeout_ms
        # messages_handled when the actor last said it waits on no deadline (quiet_turns):
        # until it handles another message the loop neither asks its poll_timeout_ms nor
        # runs its on_turn (-1: ask; reset by a pykka call, which handles no message)
        self._quiet_at = -1
        # Senders' addresses by (node, name): one per sender, not one built per frame.
        self._senders: dict[tuple[str, str], Address] = {}
        size = kwargs.pop("mailbox_size", None)
        self._mailbox_size = self.mailbox_size if size is None else size  # 0: unbounded

    # ------------------------------------------------------------------ hooks
    def setup(self) -> None:
        """Build the actor's state; runs in the actor thread at start and on restart."""

    def teardown(self) -> None:
        """Release what setup took; runs at stop and before a restart."""

    def poll_timeout_ms(self) -> int | None:
        """How long the loop may sleep with nothing to do (None: until woken)."""
        return None

    def on_turn(self) -> None:
        """Runs after every poll turn, before buffered sends are flushed."""

    def quiet_turns(self) -> None:
        """Say, from poll_timeout_ms or on_turn, that nothing waits on a deadline or a turn
        of the loop until the next message: the loop skips both calls till then (an idle
        actor in a worker loop shared with the shards and Processors costs no call a turn).
        Only for an actor whose deadlines and turn work are set by its handled messages
        alone (not by a clock, another thread or a socket)."""
        self._quiet_at = self.messages_handled

    def on_stopping(self) -> None:
        """The node is shutting down: stop taking new external input."""

    def take_turn(self) -> None:
        """One turn outside the poll loop (``Node.run_turns``), as the loop ends each of its own."""
        self._owner.loop_polls += 1  # a turn stands for a poll (a restore slices per poll)
        self._drain_local()
        self._run_guarded(self.on_turn)
        self._drain_local()
        if self._departed_out:
            self._release_departed()
        if self._origin_out:
            self._release_origin()
        if self._out:
            self.flush()

    def on_refused(self, address: Address, msg: Any, frame_bytes: int) -> None:
        """``msg`` to ``address`` is too large for a frame and was not sent.

        Runs in this actor's thread right after the refusal was counted and
        logged. The default answers an oversized Reply with an error Reply, so
        an ask gets an answer; actors whose messages may grow with client data
        override this to answer the request the message belonged to.
        """
        if type(msg) is Reply:
            self.tell(address, Reply(msg.ask_id, False, (
                f"the reply of {frame_bytes} bytes is over the {self._max_frame} byte frame "
                f"limit (actor.max.frame.bytes)")))

    # ----------------------------------------------------------------- sending
    def tell(self, address: Address, msg: Any) -> None:
        """Send ``msg`` to ``address``; delivered in order, batched per incoming frame."""
        tid = self._trace[0]
        span = new_id() if tid else 0  # the sender records nothing: the receiver writes the hop
        # wire.envelope.new_entry's layout, inline: this runs for every message sent. The
        # send time is read for traced messages only: nothing else reads it (the hop and
        # network-leg records), so an untraced one carries 0 and costs no clock read.
        entry = [_type_ids[type(msg)], tid, span, self._trace[1] if tid else 0,
                 self.clock.wall_ns() if tid else 0, 0, msg]
        if address == self.address:
            self._to_self.append(entry)  # never wait on our own mailbox
            return
        if self._origin_out:
            held = self._origin_out.get(address)
            if held is not None:  # behind what waits, whatever this is
                origin = self._origin
                self._hold_more(address, held, entry, origin is not None
                                and address == self.current_sender and origin[1] == held[0])
                return
        origin = self._origin
        if (origin is not None and address == self.current_sender
                and self._hold_for_origin(address, entry, origin[1])):
            return
        buf = self._out.get(address)
        if buf is None:
            self._out[address] = [entry]
        else:
            buf.append(entry)
            if len(buf) >= self._batch_max:
                self._flush_one(address)

    def tell_traced(self, address: Address, msg: Any, trace_id: int) -> None:
        """Send ``msg`` as the first message of a (possibly sampled) new chain."""
        saved = self._trace
        self._trace = (trace_id, 0)
        try:
            self.tell(address, msg)
        finally:
            self._trace = saved

    def tell_in(self, trace_id: int, parent_span_id: int, address: Address, msg: Any) -> None:
        """Send ``msg`` as a child of span ``parent_span_id`` of trace ``trace_id`` (a
        message handled earlier: an answer that waited for something else)."""
        saved = self._trace
        self._trace = (trace_id, parent_span_id)
        try:
            self.tell(address, msg)
        finally:
            self._trace = saved

    def reply(self, msg: Any) -> None:
        """Answer the sender of the message being handled."""
        assert self.current_sender is not None, "reply() outside a handler"
        self.tell(self.current_sender, msg)

    def flush(self) -> None:
        while self._out:  # on_refused may tell again
            for address in list(self._out):
                self._flush_one(address)

    def held_wait_ms(self) -> int | None:
        """How soon the loop must look at what waits for a departed node (None: nothing
        does)."""
        return _HELD_POLL_MS if self._departed_out or self._origin_out else None

    def _hold_for_origin(self, address: Address, entry: list[Any], incarnation: bytes) -> bool:
        """Whether ``entry``, an answer to ``address`` (the sender of the frame being
        handled, from process ``incarnation`` of its node), is held or dropped rather than
        sent: held when the directory lists that node as another process or not at all and
        that process may be a newer one (it restarted, and its registration is not read
        here yet); a dead letter at once when it is one the node had before the one listed
        (a late frame of a dead process). Only answers to that frame's sender are held: a
        frame's claim never changes where anything else goes, so a forged or stale one can
        delay only the answers to itself. The directory's keeper is asked to read the
        registrations again (rate-limited)."""
        route = self._origin_route(address, incarnation)
        if route in (_TO_LISTED, _TO_ANY):
            return False
        if route == _TO_GONE:
            self._held_dead(address, [entry], _GONE_PROCESS)
            return True
        if address in self._out:
            self._flush_one(address)  # what was sent before goes first
        self._origin_out[address] = (incarnation, self.clock.monotonic_ns(), [entry], [True])
        self.node.directory.want_reread(address.node)
        return True

    def _origin_route(self, address: Address, incarnation: bytes) -> str:
        """Where an answer to ``address`` of its node's process ``incarnation`` goes now:
        _TO_LISTED (sent: that process is listed, or the listing names no process),
        _TO_GONE (a dead letter: a process the node had before the one listed), _TO_HOLD
        (held until that process is listed), or _TO_ANY (sent to whatever is listed: this
        actor stops, and what is held is dropped at the stop; nothing would read that
        node's registration; or it holds for too many processes already)."""
        directory = self.node.directory
        node = address.node
        current = directory.nodes.get(node)
        if _lists(current, incarnation):
            return _TO_LISTED
        if self._stopping or self._dead:
            return _TO_ANY
        if directory.was_earlier(node, incarnation):
            return _TO_GONE
        if current is None and not directory.kept and node not in directory.departed:
            return _TO_ANY  # as to any unknown node
        if len(self._origin_out) >= _ORIGIN_HELD_MAX:
            return _TO_ANY
        return _TO_HOLD

    def _hold_more(self, address: Address, held: tuple[bytes, int, list[Any], list[bool]],
                   entry: list[Any], answer: bool) -> None:
        entries = held[2]
        if len(entries) >= _HELD_MAX:
            self._held_dead(address, [entry], _OVERFLOW)
            return
        entries.append(entry)
        held[3].append(answer)

    def _release_origin(self) -> None:
        """Send what waited for a process the directory lists now; after the hold, or once
        that process is known to be an earlier one, the answers to it are dead letters and
        the rest is sent. Asks again for the registrations meanwhile (the directory limits
        how often: a read may come before the process registered)."""
        directory = self.node.directory
        now = self.clock.monotonic_ns()
        for address, (incarnation, since, entries, answers) in list(self._origin_out.items()):
            if _lists(directory.nodes.get(address.node), incarnation):
                why = None
            elif directory.was_earlier(address.node, incarnation):
                why = _GONE_PROCESS
            elif now - since >= _HOLD_NS:
                why = _unregistered()
            else:
                directory.want_reread(address.node)
                continue
            del self._origin_out[address]
            if why is not None:
                if any(answers):
                    pairs = list(zip(entries, answers, strict=True))
                    self._held_dead(address, [e for e, a in pairs if a], why)
                    entries = [e for e, a in pairs if not a]
                if not entries:
                    continue
            buf = self._out.get(address)
            self._out[address] = entries + buf if buf else entries
            self._flush_one(address)

    def _release_departed(self) -> None:
        """Send what waited for a node the directory has learnt again as the same process;
        dead letters what waited for a node forgotten for good, learnt again as a new
        process, or not learnt again within the hold."""
        directory = self.node.directory
        now = self.clock.monotonic_ns()
        for address, (since, left, entries) in list(self._departed_out.items()):
            current = directory.nodes.get(address.node)
            if current is None and address.node not in directory.departed:
                # learn may have run between the two reads (it sets the entry, then drops
                # the node from departed): look at the entry once more before giving up
                current = directory.nodes.get(address.node)
            if current is not None and current == left:
                self._flush_one(address)
                continue
            why = (_NEW_PROCESS if current is not None
                   else _expired() if now - since >= _HOLD_NS
                   else _FORGOTTEN if address.node not in directory.departed else None)
            if why is not None:
                del self._departed_out[address]
                self._held_dead(address, entries, why)

    def _held_dead(self, address: Address, entries: list[Any], why: str) -> None:
        self.node.dead_letters.record(f"no route to actor {address} ({why})", len(entries),
                                      sender=str(self.address))

    def _hold_departed(self, address: Address, entries: list[Any], since: int,
                       left: NodeEndpoint | None) -> str | None:
        """Keep ``entries`` for ``address`` while its node is departed (it may register
        again; ``since``: when holding began, 0 now; ``left``: the entry it left with, None
        when not held yet). None: held; else why they are dead letters ("" when its node
        was never departed: no route, as for any unknown node)."""
        if address.node == self.node.name:
            return ""
        directory = self.node.directory
        now_left = directory.left_with(address.node)
        if now_left is None:
            # The caller found no entry; learn may have set one since and dropped the node
            # from departed: then hold for it all the same (the next look at what is held
            # sends it, or finds a new process).
            now_left = directory.nodes.get(address.node)
            if now_left is None:  # gone for good, or away for longer than the hold
                if not since:
                    return ""
                return _expired() if address.node in directory.departed else _FORGOTTEN
        if left is not None and now_left != left:
            return _NEW_PROCESS
        now = self.clock.monotonic_ns()
        if not since:
            since = now
            self.log.debug("holding messages to {}: node {} left the directory and may "
                           "register again", address, address.node)
        if now - since >= _HOLD_NS:
            return _expired()
        if len(entries) > _HELD_MAX:
            return _OVERFLOW
        self._departed_out[address] = (since, now_left, entries)
        return None

    def _flush_one(self, address: Address) -> None:
        entries = self._out.pop(address, None)
        since = 0
        left: NodeEndpoint | None = None
        held_count = 0  # how many of entries (the first) waited for ``left``
        if self._departed_out:
            found = self._departed_out.pop(address, None)
            if found is not None:
                since, left, held = found
                current = self.node.directory.nodes.get(address.node)
                if current is not None and current != left:
                    # learnt again as a new process: what waited was meant for the old one
                    self._held_dead(address, held, _NEW_PROCESS)
                    since, left = 0, None
                else:  # first what waited, in order
                    held_count = len(held)
                    entries = held + entries if entries else held
        if not entries:
            return
        cached = self._out_sockets.get(address)
        if isinstance(cached, DirectLink):
            if not cached.closed:
                self._send_direct(cached, address, entries)
                return
            del self._out_sockets[address]  # the gateway was set up again: a new one
            cached = None
        link: Link | _LocalLink | None = cached
        if (link is not None and not isinstance(link, _LocalLink)
                and link.stale(self.node.directory, self.node.actors)):
            # The node left or moved, or the actor was started again: what the old
            # socket did not take is lost.
            link.sock.close(linger=0)
            del self._out_sockets[address]
            link = None
        if link is None:
            peer = self.node.actors.get(address.name) if address.node == self.node.name else None
            if peer is not None and peer._owner is self._owner and not peer.actor_stopped.is_set():
                link = _LOCAL
            elif (direct := self.node._direct_link(self, address.node)) is not None:
                self._out_sockets[address] = direct
                self._send_direct(direct, address, entries)
                return
            else:
                try:
                    link = self.node._connect_out(address)
                except zmq.ZMQError as exc:  # no socket to be had (EMFILE, ...)
                    self._send_failed(address, len(entries), exc)
                    return
                if link is None:
                    why = self._hold_departed(address, entries, since, left)
                    if why is None:
                        return
                    self.node.dead_letters.record(
                        f"no route to actor {address}" + (f" ({why})" if why else ""),
                        len(entries), sender=str(self.address)
                    )
                    return
            self._out_sockets[address] = link
        if (held_count and not isinstance(link, _LocalLink) and link.remote
                and link.endpoint != left):
            # The link was made from the directory as read again after the look above:
            # the node was learnt again in between, as a new process, which must not get
            # what waited for the old one.
            self._held_dead(address, entries[:held_count], _NEW_PROCESS)
            entries = entries[held_count:]
            if not entries:
                return
        if isinstance(link, _LocalLink):
            peer = self.node.actors[address.name]
            if peer._owner is not self._owner and not peer._dead:
                # spawned again since, in another thread's loop: through its mailbox
                del self._out_sockets[address]
                self._out[address] = entries
                self._flush_one(address)
                return
            if peer._dead:
                self.node.dead_letters.record(
                    f"actor {address} stopped", len(entries), sender=str(self.address))
                return
            peer._local_in.append((self.node.name, self.name, entries, b""))
            count = len(entries)
            self.sent_local += count
            # _count_enqueued, inline: every hop between actors of one loop comes here
            counts = self._enqueue_counts
            key = self._enqueue_keys.get(address.name)
            if counts is None or key is None:
                self._count_enqueued(address.name, count)
            else:
                counts[key] += count
            return
        frames, refused = _encode_frames(self.node.name, self.name, address.name, entries,
                                         self._max_frame, self.node.incarnation_for(address.node)
                                         if getattr(link, "remote", False) else b"")
        # A traced message leaving the node: its gateway there writes the network leg.
        # The legs ride with the last frame (split frames are rare: very large turns).
        legs = (self._net_legs(entries, refused)
                if frames and self._tracer.enabled and getattr(link, "remote", False) else None)
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            try:
                if not self.node._send_frame(link, address, frame, waiter=self,
                                             net_legs=legs if i == last else None):
                    self._not_taken(address, len(entries))
                    return
            except zmq.ZMQError as exc:
                # A send failure, like any other: the messages are dead letters and the
                # link is dropped (the next message makes a new one), never the thread.
                link.sock.close(linger=0)
                self._out_sockets.pop(address, None)
                self._send_failed(address, len(entries), exc)
                return
        if address.node == self.node.name:
            self.sent_local += len(entries) - len(refused)
            self._count_enqueued(address.name, len(entries) - len(refused))
        for oversized in refused:
            self._refuse_oversized(address, entries[oversized.entry][6], oversized.frame_bytes)

    def _send_direct(self, link: DirectLink, address: Address, entries: list[Any]) -> None:
        """To another process of this broker over the loop's direct link (never waits)."""
        frames, refused = _encode_frames(self.node.name, self.name, address.name, entries,
                                         self._max_frame)
        legs = self._net_legs(entries, refused) if frames and self._tracer.enabled else None
        target = address.name.encode()
        last = len(frames) - 1
        for i, frame in enumerate(frames):
            link.send(target, frame, legs if i == last else None)
        for oversized in refused:
            self._refuse_oversized(address, entries[oversized.entry][6], oversized.frame_bytes)

    def _net_legs(self, entries: list[Any], refused: list[Any]) -> bytes | None:
        """The network legs of the entries that go (the oversized ones refused do not)."""
        sent = entries
        if refused:
            gone = {oversized.entry for oversized in refused}
            sent = [e for i, e in enumerate(entries) if i not in gone]
        return net_legs(self.node.name, self.name, sent)

    def _not_taken(self, address: Address, count: int) -> None:
        """The link to ``address`` took nothing and this actor does not wait on remote
        links: dead letters, logged the first time for that node."""
        first = address.node not in self._not_taken_logged
        self._not_taken_logged.add(address.node)
        self.node.dead_letters.record(
            f"link to node {address.node} takes nothing (no handshake done, or its pipe "
            f"full); {self.name} does not wait on it", count,
            sender=str(self.address), receiver=str(address), log=first)

    def _send_failed(self, address: Address, count: int, exc: zmq.ZMQError) -> None:
        """ZeroMQ refused a link or a send (e.g. EMFILE: no descriptor left for a socket):
        what was to go are dead letters, with the errno in the log line."""
        self.node.metrics.incr("messages_send_failed")
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self.node.dead_letters.record(
            f"send failed (errno {exc.errno} {name}: {exc.strerror})", count,
            sender=str(self.address), receiver=str(address))

    def _count_enqueued(self, receiver: str, count: int) -> None:
        key = self._enqueue_keys.get(receiver)
        if key is None:
            key = self._enqueue_keys[receiver] = f"actor_messages_enqueued_total|actor={receiver}"
        counts = self._enqueue_counts
        if counts is None:  # taken in the actor's thread, which makes every send
            counts = self._enqueue_counts = self.node.metrics.mine()
        counts[key] += count

    def _refuse_oversized(self, address: Address, msg: Any, frame_bytes: int) -> None:
        self.node.metrics.incr("messages_refused_oversized")
        self.node.dead_letters.record(
            f"message over the frame limit: {type(msg).__name__} of {frame_bytes} bytes, "
            f"limit {self._max_frame} (actor.max.frame.bytes); refused to its sender",
            sender=str(self.address), receiver=str(address))
        self._run_guarded(self.on_refused, address, msg, frame_bytes)

    # --------------------------------------------------------------- fd watch
    def _route(self, key: Any, kind: int, handler: Any, events: int) -> None:
        owner = self._owner
        owner._routes[key] = (self, kind, handler)
        owner._poller.register(key, events)
        if key not in self._my_routes:
            self._my_routes.append(key)

    def _unroute(self, key: Any) -> None:
        owner = self._owner
        owner._routes.pop(key, None)
        try:
            owner._poller.unregister(key)
        except KeyError:
            pass
        if key in self._my_routes:
            self._my_routes.remove(key)

    def watch_fd(self, fd: int, handler: Callable[[int], None], events: int = zmq.POLLIN) -> None:
        """Wait on ``fd`` in the actor's poll loop; ``handler(event_mask)`` runs on readiness."""
        self._route(fd, _FD, handler, events)

    def modify_fd(self, fd: int, events: int) -> None:
        self._owner._poller.modify(fd, events)

    def unwatch_fd(self, fd: int) -> None:
        self._unroute(fd)

    # ---------------------------------------------------------------- loop
    def _start_thread(self) -> None:
        if self._owner is self:
            super()._start_thread()
        else:  # a guest: its host's thread runs it
            self._owner.actor_inbox.put(envelope(_AdoptGuest(self)))

    def on_start(self) -> None:
        node = self.node
        sock = node.context.socket(zmq.PULL)
        sock.setsockopt(zmq.RCVHWM, self._mailbox_size)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(node.inproc_endpoint(self.name))
        self._mailbox = sock
        node.mailboxes[self.name] = self
        # The loop polls the socket's ZMQ_FD, a plain descriptor, not the socket: zmq_poll
        # asks every ZeroMQ socket for its events in each call (syscalls per socket and
        # call), several microseconds per mailbox per turn in a loop of many actors.
        self._route(sock.getsockopt(zmq.FD), _MAILBOX, sock, _POLLIN)
        self._owner._mailbox_backlog.append(self)  # frames may be in it already
        self._route(self.actor_inbox.fd, _INBOX, None, _POLLIN)
        self.setup()
        # Reachable by name before anything it set up can run (spawn registers it
        # only after _ready): an Acceptor's first connection can close, and its
        # Processor tell the Acceptor, before the spawning thread runs again
        node.actors[self.name] = self
        # Only now: a setup that raised has _ready set once the actor is stopped (by
        # _adopt, or _on_loop_failure), so spawn sees the failure, not a started actor
        self._ready.set()

    def _adopt(self, guest: Actor) -> None:
        """Host side: start a guest in this thread."""
        self._members = (*self._members, guest)  # a new tuple (see __init__)
        try:
            guest.on_start()
        except Exception as exc:
            guest._log_start_failure(exc)
            guest._start_error = exc
            try:
                guest._finish_stop()
            finally:  # spawn waits on it, whatever the teardown did
                guest._ready.set()

    def _next_timeout(self) -> int | None:
        timeout: int | None = None
        if self._mailbox_backlog:
            return 0
        for m in self._members:
            if m._stopping or m._local_in or m._to_self:
                return 0
            if ((m._departed_out or m._origin_out)
                    and (timeout is None or timeout > _HELD_POLL_MS)):
                timeout = _HELD_POLL_MS
            if not m._has_timeout or m._quiet_at == m.messages_handled:
                continue
            try:  # as on_turn: a member's fault restarts it, never ends the loop
                t = m.poll_timeout_ms()
            except Exception as exc:
                m._crashed(exc, None)
                return 0  # the members may have changed: ask again at once
            if t is not None and (timeout is None or t < timeout):
                timeout = t
        return timeout

    def _run_loop(self) -> None:
        """One turn: poll, handle what is ready, then every member's on_turn and flush.

        What a turn costs whatever it handles (the member scans, every member's
        poll_timeout_ms, the on_turn calls that find nothing to do) was measured in a
        broker's loop of 8-9 members: _next_timeout alone is 2-3 us of CPU in an idle
        broker and 6-7 us under load (a cold cache, probably), a few us more for the rest. Under
        `bench scale`'s load (8 connections, 5 requests in flight each) a turn serves
        many requests: 0.03 turns a request at num.processes = 1, 0.10-0.13 at 2, so
        the fixed cost is about 1% and 2-3% of broker CPU per request. It weighs more at
        low concurrency (1 connection: 0.26 and 0.84 turns a request). A member that said
        quiet_turns (an idle coordinator, a request handler with nothing pending) is asked
        nothing until it handles another message.
        """
        poll = self._poller.poll
        routes = self._routes
        while not self._dead:  # actor_stopped, without a Python call a turn
            try:
                events = poll(self._next_timeout())
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            self.loop_polls += 1
            for sock, mask in events:
                route = routes.get(sock)
                if route is None:
                    continue
                actor, kind, handler = route
                if kind == _MAILBOX:
                    actor._drain_mailbox(handler)
                elif kind == _INBOX:
                    actor._drain_pykka_inbox()
                else:
                    actor._run_guarded(handler, mask)
                    if actor._out:
                        actor.flush()
            if self._mailbox_backlog:
                backlog, self._mailbox_backlog = self._mailbox_backlog, []
                for m in backlog:
                    if m._mailbox is not None:
                        m._drain_mailbox(m._mailbox)
            # self._members is a tuple, replaced on a change: no copy to walk it
            for m in self._members:
                if m._local_in or m._to_self:
                    m._drain_local()
                if m._has_turn and m._quiet_at != m.messages_handled:
                    try:  # _run_guarded, inline: every member, every turn
                        m.on_turn()
                    except Exception as exc:
                        m._crashed(exc, None)
                if m._local_in or m._to_self:
                    m._drain_local()
                if m._departed_out:
                    m._release_departed()
                if m._origin_out:
                    m._release_origin()
                if m._out:
                    m.flush()
            # What a later member handed an earlier one (a handler's Append to the shard
            # hosting it) is taken now, not after a poll: each poll lets go of the GIL,
            # and with it, often, the rest of this thread's time slice. Those members
            # take a turn of their own; a bounded number, so sockets are not kept waiting.
            for _ in range(_LOCAL_ROUNDS):
                for m in self._members:
                    if m._local_in or m._to_self:
                        break
                else:
                    break
                for m in self._members:
                    if not (m._local_in or m._to_self):
                        continue
                    m._drain_local()
                    if m._has_turn and m._quiet_at != m.messages_handled:
                        try:
                            m.on_turn()
                        except Exception as exc:
                            m._crashed(exc, None)
                    if m._local_in or m._to_self:
                        m._drain_local()
                    if m._out:
                        m.flush()
            if self._members_stopping:
                for m in self._members:
                    if (m._stopping and not m._local_in and not m._to_self
                            and not m.mailbox_pending()):
                        m._finish_stop()

    def _drain_local(self) -> None:
        """Frames from actors of this loop (and from other nodes, through a gateway in this
        loop), and messages this actor told itself."""
        while self._local_in or self._to_self:
            if self._local_in:
                batch, self._local_in = self._local_in, []
                for sender_node, sender_name, entries, s_inc in batch:
                    self._dispatch_entries(sender_node, sender_name, entries, s_inc)
                    if self._out:
                        self.flush()
            if self._to_self:
                entries, self._to_self = self._to_self, []
                self.sent_local += len(entries)
                self._dispatch_entries(self.node.name, self.name, entries)
                if self._out:
                    self.flush()

    def _drain_mailbox(self, mailbox: Any) -> None:
        # Asked before each recv, not found out by a failed one: the loop wakes on the
        # socket's ZMQ_FD, which also signals changes that bring no frame, and zmq.Again
        # costs a Python exception (with imports in its __init__), the question one C call.
        # Asking also re-arms the descriptor: it signals again only after this question.
        for _ in range(64):
            if self._mailbox is None:  # stopped by a handler's crash (supervision gave up)
                return
            if not mailbox.getsockopt(_EVENTS) & _POLLIN:
                return
            try:
                data = mailbox.recv(_NOBLOCK)
            except _Again:
                return
            try:
                s_node, s_name, _r_name, entries, s_inc = _decode_frame(data, self._max_frame)
            except BadFrame as exc:  # garbage of any kind
                self.node.dead_letters.record(str(exc), 1, receiver=self.name)
                continue
            self._dispatch_entries(s_node, s_name, entries, s_inc)
            if self._out:
                # Flush per incoming frame, not per turn: what one frame caused goes out
                # together, but the next actor does not wait for the rest of our turn.
                self.flush()
        # the cap: what is left is taken after the loop's other work, before it sleeps
        if self._mailbox is not None:
            self._owner._mailbox_backlog.append(self)

    def _dispatch_entries(self, s_node: str, s_name: str, entries: list[Any],
                          s_inc: bytes = b"") -> None:
        senders = self._senders
        sender = senders.get((s_node, s_name))
        if sender is None:
            if len(senders) >= 4096:  # bounded: other nodes' actors come and go
                senders.clear()
            sender = senders[(s_node, s_name)] = Address(s_node, s_name)
        self.current_sender = sender
        # what this handling sends to its sender answers process s_inc of s_node (tell)
        self._origin = (s_node, s_inc) if s_inc and s_node != self.node.name else None
        try:
            # taken from an actor of this node (Node.mailbox_depth); not the node's own
            # asks (Node.ask sends as ASK_SENDER, its ask router's name, counting nothing)
            by_actor = (s_node == self.node.name and s_name != self.name
                        and s_name != ASK_SENDER and s_name in self.node.actors)
            if by_actor:
                self.messages_dequeued += len(entries)
            handlers = self._handlers
            # handler_ns (actor_handle_seconds): one clock read per batch and one per
            # message handled, not two per message. A message's time runs from the read
            # before it (the batch's first, or the one after the previous handler) to the
            # read after its handler: the handler and the Reply of an ask, and also what
            # lies between two handlers of one batch (the previous message's trace record,
            # this one's envelope unpacking and handler lookup, entries refused as dead
            # letters). Outside every batch (frame decoding, the flush of what the
            # handlers sent) nothing is counted, as before.
            monotonic_ns = self.clock.monotonic_ns
            started_ns = monotonic_ns()
            sender_text = ""  # for trace records, formatted at the first traced entry
            wall_ns = self.clock.wall_ns
            for i, entry in enumerate(entries):
                if self._dead:  # supervision gave up on a crash just now
                    if by_actor:  # the rest are dead letters, and counted as such
                        self.messages_dequeued -= len(entries) - i
                    self.node._entries_undelivered(s_node, s_name, entries[i:], self.address,
                                                   f"actor {self.address} stopped", s_inc)
                    break
                try:
                    type_id, tid, span, parent, send_ns, ask_id, body = entry
                    cls = _types[type_id]
                    # In-memory hand-overs carry the message itself; frames carry its fields.
                    msg = body if type(body) is cls else _build(cls, body)
                except KeyError:
                    self.node.dead_letters.record(
                        f"unknown message type id {entry[0]!r}", 1, receiver=self.name,
                        sender=str(sender),
                    )
                    continue
                except Exception as exc:
                    self.node.dead_letters.record(
                        f"malformed envelope: {exc}", 1, receiver=self.name, sender=str(sender)
                    )
                    continue
                self.received += 1
                handler = handlers.get(cls)
                if handler is None:
                    self.node.dead_letters.record(
                        f"{self.name} has no handler for {cls.__name__}", 1, receiver=self.name,
                        sender=str(sender),
                    )
                    continue
                if tid:
                    self._trace = (tid, span)
                    recv_ns = wall_ns()
                try:
                    result = handler(msg)
                except Exception as exc:
                    # the restarted actor's on_start sends answer no frame
                    origin, self._origin = self._origin, None
                    self._crashed(exc, msg)
                    self._origin = origin
                    if ask_id:
                        self.tell(sender, Reply(ask_id, False, f"{type(exc).__name__}: {exc}"))
                else:
                    if ask_id:
                        self.tell(sender, Reply(ask_id, True, result))
                ended_ns = monotonic_ns()
                self.handler_ns += ended_ns - started_ns
                started_ns = ended_ns
                self.messages_handled += 1
                if tid:
                    # One record per hop, written by the receiver once it has handled it
                    # (Tracer.hop's tuple, inline: this runs for every traced message).
                    # Only numbers and strings, so the garbage collector stops tracking the
                    # tuple while it waits for the writer.
                    conn, corr, api, size = trace_fields(msg)
                    if not sender_text:
                        sender_text = f"{s_name}@{s_node}"
                    self._tracer.hops.append((tid, span, parent, self.name, sender_text,
                                              cls.__name__, conn, corr, api, size, send_ns,
                                              recv_ns, wall_ns(), self._tracer.clock_offset_ns))
                    self._trace = (0, 0)
        finally:
            # cleared on every way out: a later send (a timer's) is no answer to this frame
            self.current_sender = None
            self._origin = None

    def _run_guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self._crashed(exc, None)

    def _crashed(self, exc: BaseException, msg: Any) -> None:
        """Supervision: log and count the crash, then rebuild the actor's state."""
        restart_after_crash(self, exc, msg)

    def _drain_pykka_inbox(self) -> None:
        inbox = self.actor_inbox
        inbox.clear_wakeups()
        while True:
            try:
                envelope = inbox.get()
            except queue.Empty:
                return
            message = envelope.message
            if isinstance(message, _AdoptGuest):
                self._adopt(message.guest)
                continue
            if is_stop(message):
                self._begin_stop(envelope.reply_to)
                continue
            self._quiet_at = -1  # a call may set what a turn waits on
            try:
                response = self._handle_pykka_message(message)
                if envelope.reply_to is not None:
                    envelope.reply_to.set(response)
            except Exception:
                if envelope.reply_to is not None:
                    envelope.reply_to.set_exception(sys.exc_info())
                else:
                    self._crashed(sys.exc_info()[1] or RuntimeError("?"), message)

    # ------------------------------------------------------------- stopping
    def _begin_stop(self, reply_to: Any) -> None:
        """Finish what is in the mailbox, then stop (see Node.shutdown for the order)."""
        self._stopping = True
        self._owner._members_stopping = True
        if reply_to is not None:
            self._answer_stop(reply_to)

    def _answer_stop(self, reply_to: Any) -> None:
        """A stop asked of this actor returns once it stopped (at once if it has)."""
        with self._stop_lock:
            if self._stop_waiters is not None:
                self._stop_waiters.append(reply_to)
                return
        reply_to.set(None)

    def _refused(self, env: Any) -> None:
        """An envelope for the pykka inbox once the loop reads it no more (its stop began):
        answered as pykka answers one for a stopped actor, from any thread. A stop returns
        once the actor stopped; an ask fails with ActorDeadError; a guest handed to this
        host fails to start; any other tell is a dead letter."""
        message, reply_to = env.message, env.reply_to
        if is_stop(message):
            if reply_to is not None:
                self._answer_stop(reply_to)
        elif isinstance(message, _AdoptGuest):
            message.guest._host_stopped(self)
        elif reply_to is not None:
            reply_to.set_exception((pykka.ActorDeadError, pykka.ActorDeadError(
                f"{self.actor_ref} stopped before handling the message"), None))
        else:
            self.node.dead_letters.record(
                f"actor {self.address} stopped (a {type(message).__name__} told to its "
                f"pykka inbox as it stopped)", 1, receiver=str(self.address))

    def _host_stopped(self, host: Actor) -> None:
        """A guest whose adoption its host refused (it was stopping): never set up, it
        stops; spawn, which waits for it, fails naming the host."""
        self._start_error = RuntimeError(f"its host {host.name!r} stopped")
        self._never_set_up = True
        try:
            self._finish_stop()
        finally:
            self._ready.set()

    def _finish_stop(self) -> None:
        if self.actor_stopped.is_set():
            return
        # The loop looked at the pykka inbox for the last time: what came since, and what
        # comes until (and after) this stop ends, is answered as to a stopped actor, never
        # left unread (a second stop, run_turns' take_turn, a guest's adoption)
        for env in self.actor_inbox.seal(self._refused):
            try:  # (one refusal failing stops neither the others nor this stop)
                self._refused(env)
            except Exception:
                self.log.exception("answering a {} put to the inbox of stopping {} failed",
                                   type(env.message).__name__, self.name)
        if self._owner is self:
            for guest in [m for m in self._members if m is not self]:
                guest._finish_stop()
        self._drain_local()
        if self._out:
            self.flush()
        try:
            if not self._never_set_up:
                self.teardown()
        except Exception:
            if self._start_error is None:
                self.log.exception("teardown of {} failed", self.name)
            else:  # a teardown may trip over what the failed setup never made
                self.log.opt(exception=True).debug("teardown of {} after its failed start "
                                                   "failed", self.name)
        # Answers held for a process not registered yet are dead letters; what only queued
        # behind them (no answer to that process) goes to the process listed, in order
        for address, (_inc, _since, entries, answers) in self._origin_out.items():
            pairs = list(zip(entries, answers, strict=True))
            if any(answers):
                self._held_dead(address, [e for e, a in pairs if a], _STOPPED)
            rest = [e for e, a in pairs if not a]
            if rest:
                buf = self._out.get(address)
                self._out[address] = rest + buf if buf else rest
        self._origin_out.clear()
        if self._out:
            self.flush()
        for address, (_since, _left, entries) in self._departed_out.items():
            self._held_dead(address, entries, _STOPPED)
        self._departed_out.clear()
        pykka.ActorRegistry.unregister(self.actor_ref)
        # the mailbox is closed (its inproc name free) before anyone hears of the stop:
        # Node.stop_actor's caller may spawn the name again at once
        self._close_sockets()
        self._dead = True
        self.actor_stopped.set()
        with self._stop_lock:
            waiters, self._stop_waiters = self._stop_waiters or [], None
        for waiter in waiters:
            waiter.set(None)

    def _close_sockets(self) -> None:
        for key in list(self._my_routes):
            self._unroute(key)
        directory = self.node.directory
        for link in self._out_sockets.values():
            if not isinstance(link, (_LocalLink, DirectLink)):  # a direct link: the gateway's
                # Queued for a node that left: nobody will read it, waiting is for nothing
                link.sock.close(linger=0 if link.remote and link.stale(directory) else 1000)
        self._out_sockets.clear()
        if self._mailbox is not None:
            with self._shut_lock:
                self._mailbox_shut = True
            # what came after the last look (a sender's frame since) is dead letters
            mailbox = self._mailbox
            while True:
                try:
                    frame = mailbox.recv(_NOBLOCK)
                except zmq.ZMQError:  # empty (EAGAIN), or the context terminates (ETERM)
                    break
                self.node._undelivered(frame, self.address, f"actor {self.address} stopped")
            # close() frees an inproc name later, in ZeroMQ's reaper thread (a rebind at once
            # failed 286 times in 20,000 here); unbind frees it now, in this thread
            if self.node.mailboxes.get(self.name) is self:
                del self.node.mailboxes[self.name]
            try:
                self._mailbox.unbind(self.node.inproc_endpoint(self.name))
            except zmq.ZMQError:
                pass  # never bound (the bind itself failed)
            self._mailbox.close(linger=0)
            self._mailbox = None
        owner = self._owner
        if owner is not self and self in owner._members:
            owner._members = tuple(m for m in owner._members if m is not self)
        self.node._forget(self)
        self.actor_inbox.close()

    def _on_loop_failure(self, exc_type: type[BaseException] | None,
                         exc_value: BaseException | None, tb: TracebackType | None) -> None:
        if exc_value is None or isinstance(exc_value, Exception):
            self._log_start_failure(exc_value or RuntimeError("?"))
        else:
            self.log.opt(exception=(exc_type, exc_value, tb)).error("actor {} failed", self.name)
        self._start_error = exc_value
        try:
            # Stopped as _adopt stops a guest: what setup made is torn down and the mailbox
            # closed (its inproc name free). Not in node._order, shutdown never stops it:
            # its open sockets held the context's term for the whole shutdown timeout.
            self._finish_stop()
        finally:
            self._dead = True
            super()._on_loop_failure(exc_type, exc_value, tb)
            self._ready.set()

    def _log_start_failure(self, exc: Exception) -> None:
        """Once, as the failure of this actor's start (spawn raises it to its caller): a
        refusal of the system (a file, a port) in a line, a bug with its traceback."""
        if isinstance(exc, (OSError, zmq.ZMQError)):
            self.log.error("actor {} failed to start: {}", self.name, exc)
        else:
            self.log.opt(exception=exc).error("actor {} failed to start", self.name)

    def _stop(self) -> None:  # pykka's own immediate stop: the runtime never asks for it
        self._dead = True
        super()._stop()

    def mailbox_pending(self) -> bool:
        """True while frames are waiting in the mailbox (checked from the actor thread).

        Asking takes the mailbox descriptor's signal: frames found are drained by the
        loop's backlog, as the descriptor will not wake it for them."""
        pending = bool(self._mailbox is not None and self._mailbox.poll(0, _POLLIN))
        if pending and self not in self._owner._mailbox_backlog:
            self._owner._mailbox_backlog.append(self)
        return pending


class _LocalLink:
    """The link to an actor of the same loop: an in-memory hand-over, no socket."""

    __slots__ = ()


_LOCAL = _LocalLink()
