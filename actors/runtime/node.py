"""A node: one process's actors, their ZeroMQ context, and its gateway.

Addresses are ``(node, name)``. A message to an actor of this node goes
straight to its ``inproc://`` mailbox. A message to another node goes to that
node's gateway: over ``ipc://`` when both nodes have the same host address,
over ``tcp://`` otherwise. The gateway is itself an actor: it receives
``[receiver name, frame]`` and hands the frame, undecoded, to the local
mailbox; when it runs in the receiver's own loop (``start(gateway_host=...)``),
it decodes the frame and hands its messages over in memory instead, as
actors of one loop do. Between the processes of one broker (``direct_peers``) the
actors of the gateway's loop send over direct links instead, Unix stream sockets
to the other processes' gateways (actors.runtime.direct): no ZeroMQ I/O thread
on either side. Sending code is the same in every case: ``tell(address, message)``.

With a :class:`~actors.security.curve.CurveIdentity` (``curve``) the sockets
between nodes use CURVE: the gateway is a CURVE server behind a ZAP handler
that admits only the identity's peer keys, and every link to another node
is a CURVE client that expects the key the identity holds for that node.
"""

from __future__ import annotations

import itertools
import secrets
import signal
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pykka
import zmq
from loguru import logger

from actors.runtime.actor import _TO_ANY, Actor, handles
from actors.runtime.address import ASK_SENDER, Address
from actors.runtime.clock import Clock, SystemClock
from actors.runtime.counters import Counters, DeadLetters
from actors.runtime.direct import DirectLink
from actors.runtime.directory import Directory, NodeEndpoint, default_ipc_dir
from actors.runtime.errors import AskFailed, AskTimeout, MessageTooLarge, NodeError
from actors.runtime.gateway import HEARTBEAT_IVL_MS, HEARTBEAT_TIMEOUT_MS, Gateway
from actors.runtime.pykka_compat import actor_of, call_message
from actors.runtime.tracing import Tracer, net_legs, new_id
from actors.security.curve import CurveIdentity
from wire import registry
from wire.envelope import (
    DEFAULT_MAX_FRAME_BYTES,
    BadFrame,
    decode_frame_full,
    encode_frames,
    incarnation_bytes,
    new_entry,
)
from wire.runtime_messages import Reply

_NOBLOCK = int(zmq.NOBLOCK)
# spawn waits for an actor's setup without a deadline (a single node's shard recovers its
# logs in its setup, for as long as that takes), saying every this many seconds that it
# still waits
START_NOTE_S = 30.0
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
# A process's asks count up from a random start (Node.ask): a Reply or a failure meant for an
# earlier process of this node (an answer that came late, the failure another node sends for
# an ask that reached a stopped actor) then completes no ask of this one, even where nothing
# names the process (a frame or a directory entry with no incarnation; with one, Actor.tell
# and the ask router check it as well). A start below 2**62 leaves 3 * 2**62 asks before an
# id would pass msgpack's uint64, the widest integer a frame carries: none wraps.
ASK_ID_START_BITS = 62


def first_ask_id() -> int:
    """A random first ask id for a new process, 1 to 2**62 (0 means no ask)."""
    return 1 + secrets.randbits(ASK_ID_START_BITS)


# Re-exported: callers import these from here.
__all__ = [
    "AskFailed",
    "AskTimeout",
    "Directory",
    "Gateway",
    "Link",
    "MessageTooLarge",
    "Node",
    "NodeEndpoint",
    "NodeError",
    "default_ipc_dir",
]


class Link:
    """One sender thread's socket towards one local mailbox or one remote gateway.

    ``endpoint`` is the directory entry a remote link was made from: once the
    directory holds another object for that node (or none), the link is stale.
    """

    __slots__ = ("endpoint", "node", "remote", "sock", "target")

    def __init__(self, sock: Any, remote: bool, node: str,
                 endpoint: NodeEndpoint | None = None, target: Actor | None = None) -> None:
        self.sock = sock
        self.remote = remote
        self.node = node
        self.endpoint = endpoint
        # A local link: the actor whose mailbox it reaches. An inproc socket never
        # reconnects, so once that actor stopped and another of its name was spawned
        # (an idle replica fetcher started again), the link is stale.
        self.target = target

    def stale(self, directory: Directory, actors: dict[str, Actor] | None = None) -> bool:
        if self.remote:
            return directory.nodes.get(self.node) is not self.endpoint
        target = self.target
        return (target is not None and actors is not None and target._dead
                and actors.get(target.name) is not target)


class FailAsks(NamedTuple):
    """pykka message to the ask router: answer these asks of ``sender`` (an actor of
    another node, of its process ``incarnation``; b"": none said) with a failure, ``why``."""

    sender: Address
    incarnation: bytes
    ask_ids: list[int]
    why: str


class AskRouter(Actor):
    """Receives the Replies to this node's asks and completes their futures. It also
    answers, with a failure, the asks of other nodes that reached an actor here once it
    had stopped (Node._entries_undelivered): any thread finds such an ask, this actor's
    loop sends the answer, as a handler's Reply goes."""

    mailbox_size = 100_000
    # Those failures are all it sends to other nodes, and best effort (the asker's timeout
    # covers a lost one): waiting on a link that takes nothing (its node dead, or never
    # listening) would stall every ask of this node, and its stop, for good.
    waits_on_remote = False

    def __init__(self, node: Node, name: str, **kwargs: Any) -> None:
        super().__init__(node, name, **kwargs)
        # FailAsks go into the pykka inbox under this lock, and only while the router takes
        # them: its stop says it no longer does, then answers what the inbox holds (its
        # loop looks there no more), so each is answered or a dead letter (take_failures)
        self._failures_lock = threading.Lock()
        self._takes_failures = True

    def take_failures(self, msg: FailAsks) -> bool:
        """From any thread: hand ``msg`` to this router's loop; False, nothing handed, once
        its stop took its last look at the inbox (Node._fail_remote_asks then records the
        failures as dead letters)."""
        with self._failures_lock:
            if not self._takes_failures:
                return False
            try:
                self.actor_ref.tell(msg)
            except pykka.ActorDeadError:
                return False
            return True

    def _finish_stop(self) -> None:
        if not self.actor_stopped.is_set():
            # What came into the inbox after the loop's last look at it (a FailAsks told
            # while the stop ran) was never read: the asker waited its whole timeout
            with self._failures_lock:
                self._takes_failures = False
            self._drain_pykka_inbox()
        super()._finish_stop()

    @handles(Reply)
    def on_reply(self, msg: Reply) -> None:
        self.node._complete_ask(msg)

    def on_receive(self, message: Any) -> Any:
        if type(message) is FailAsks:
            self._fail_asks(message)
            return None
        return super().on_receive(message)

    def _fail_asks(self, msg: FailAsks) -> None:
        if msg.incarnation and not self._only_to(msg.sender, msg.incarnation):
            # never to another process of that node: its asks count from another start,
            # which a random one makes unlikely to reach these ids, not impossible
            self.node.dead_letters.record(
                f"no route to actor {msg.sender} (the process of its node that asked is "
                f"not the one these failures would reach)", len(msg.ask_ids),
                sender=str(self.address), receiver=str(msg.sender))
            return
        # as the answers to a frame of that sender's: held while the directory does not
        # list the process that asked yet (Actor.tell)
        self.current_sender = msg.sender
        self._origin = (msg.sender.node, msg.incarnation) if msg.incarnation else None
        try:
            for ask_id in msg.ask_ids:
                self.tell(msg.sender, Reply(ask_id, False, msg.why))
        finally:
            self.current_sender = None
            self._origin = None
        if self._out:
            self.flush()

    def _only_to(self, sender: Address, incarnation: bytes) -> bool:
        """Whether answers to ``sender`` of its node's process ``incarnation`` can reach
        that process only (Actor.tell): sent now (the directory lists it), held for it
        alone (released once listed, dropped if not), or dropped as a process gone. Not
        when answers to another process of that node are held already (what else is
        sent to ``sender`` goes with them), nor where tell sends them to whatever the
        directory lists by then (this actor stops, it holds for too many processes, or
        nothing would read that node's registration)."""
        held = self._origin_out.get(sender)
        if held is not None:
            return held[0] == incarnation
        return self._origin_route(sender, incarnation) != _TO_ANY


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: Reply | None = None


class Node:
    """The actors of one node in this process."""

    def __init__(
        self,
        name: str,
        *,
        directory: Directory | None = None,
        endpoint: NodeEndpoint | None = None,
        data_dir: Path | None = None,
        trace_sample_ratio: float = 0.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        batch_max_messages: int = 256,
        gateway_hwm: int = 1000,
        context: zmq.Context[Any] | None = None,
        clock: Clock | None = None,
        curve: CurveIdentity | None = None,
        direct_peers: Iterable[str] = (),
        first_ask: int = 0,
    ) -> None:
        """``first_ask``: the id of this process's first ask; 0, a random one
        (:func:`first_ask_id`; a simulation derives its own from the seed)."""
        if not name or "/" in name or "@" in name:
            raise NodeError(f"bad node name {name!r}: must be non-empty, without '/' or '@'")
        self.name = name
        # The clock every actor of this node reads (unless spawned with its own).
        self.clock: Clock = clock or SystemClock()
        self.directory = directory or Directory()
        if endpoint is not None:
            self.directory.add(name, endpoint)
        self.endpoint = self.directory.nodes.get(name)
        if self.directory.clock is None:
            self.directory.clock = self.clock  # when the departed left (Directory.departed_ns)
        self.context = context or zmq.Context()
        self._own_context = context is None
        self.max_frame_bytes = max_frame_bytes
        self.batch_max_messages = batch_max_messages
        self.gateway_hwm = gateway_hwm
        self.data_dir = data_dir
        self.curve = curve
        # The other processes of this broker: the actors of the gateway's loop send to
        # them over direct links (actors.runtime.direct), never with CURVE
        self.direct_peers = frozenset(direct_peers) - {name} if curve is None else frozenset()
        self.own_processes = frozenset(direct_peers) - {name}  # with CURVE too
        # This process's incarnation as its frames to other nodes carry it
        # (wire.envelope.incarnation_bytes): a node that asks learns which process to answer
        # (Actor.tell). A cluster node sets the one it registers; b"": none sent (a node
        # outside a cluster). Never sent to the other processes of this broker.
        self.frame_incarnation = (incarnation_bytes(self.endpoint.incarnation)
                            if self.endpoint is not None and self.endpoint.incarnation
                            else b"")
        self._zap: Any = None
        self._keyless: set[str] = set()  # nodes without a CURVE key here, logged once each
        self.actors: dict[str, Actor] = {}
        # name -> the actor whose mailbox is bound to that name's inproc endpoint now
        self.mailboxes: dict[str, Actor] = {}
        self._order: list[str] = []
        self.dead_letters = DeadLetters(name, self.clock)
        self.metrics = Counters()
        # Log-line limiters the actors of this node share (actors.request_handler
        # .process_limiter), by kind: one set per node object, so a restarted node or the
        # next seed of a simulation (same names, its clock from 0) starts afresh
        self.limiters: dict[str, Any] = {}
        self.tracer = Tracer(
            name, (data_dir / "traces") if data_dir is not None else None, trace_sample_ratio,
            clock=self.clock,
        )
        self._thread_links = threading.local()
        self._all_external_links: list[Link] = []
        self._ask_ids = itertools.count(first_ask or first_ask_id())
        self._pending: dict[int, _Pending] = {}
        self._external_sent = 0
        # what actors replaced by a namesake (Node.spawn after stop_actor) sent and took:
        # their counts leave self.actors with them, quiesce still needs them
        self._replaced_sent = 0
        self._replaced_received = 0
        # messages of this node's senders to actors of it that had stopped (dead letters at
        # their mailbox): counted sent, never taken
        self._undelivered_count = 0
        self._undelivered_lock = threading.Lock()
        # the depth of a mailbox (mailbox_depth): by actor name, what actors of this node
        # sent to that name and no actor of it will take (dead letters), and what the
        # actors of that name replaced by a namesake took (messages_dequeued)
        self._undelivered_to: Counter[str] = Counter()
        self._dequeued_replaced: Counter[str] = Counter()
        self._ready_events: list[threading.Event] = []
        self._started = False
        self._stopped = False
        self._intake_stopped = False
        self.log = logger.bind(node=name, actor="node")

    # ------------------------------------------------------------ lifecycle
    def inproc_endpoint(self, actor_name: str) -> str:
        return f"inproc://{self.name}/{actor_name}"

    def start(self, gateway_host: str | None = None, gateway: bool = True) -> Node:
        """Start the node's own actors: the ask router and the gateway.

        ``gateway_host``: the gateway runs in that actor's loop (``actor.threads =
        single``: the worker loop), so a frame from another node for an actor of that
        loop is handed over in memory in the same turn, with no inproc socket and no
        thread switch; None: a thread of its own. ``gateway=False`` leaves it to
        :meth:`start_gateway`, for a host spawned after the node started.
        """
        if self._started:
            return self
        if self.endpoint is not None and self.endpoint.ipc_dir:
            refuse_ipc_in_use(Path(self.endpoint.ipc_dir) / f"{self.name}.gw")
        self._started = True
        if self.curve is not None:  # before the gateway binds: ZAP is asked at the handshake
            from actors.security.zap import ZapPolicy
            from actors.security.zap_handler import ZapHandler
            self._zap = ZapHandler(self.context, ZapPolicy(self.curve.admitted()),
                                   node=self.name).start()
        self.tracer.start()
        self.spawn(AskRouter, ASK_SENDER)
        if gateway:
            self.start_gateway(gateway_host)
        return self

    def start_gateway(self, host: str | None = None) -> None:
        """Spawn the gateway (``start(gateway=False)`` left it), in ``host``'s loop if
        given. Until it binds, what other nodes send here waits in their links."""
        if "_gateway" in self.actors and not self.actors["_gateway"].actor_stopped.is_set():
            return
        self.spawn(Gateway, "_gateway", endpoint=self.endpoint,
                   **({"host": host} if host is not None else {}))

    def spawn(self, actor_cls: type[Actor], name: str, **kwargs: Any) -> Address:
        """Start an actor on this node and wait until its mailbox is bound."""
        previous = self.actors.get(name)
        if previous is not None and not previous.actor_stopped.is_set():
            raise NodeError(f"an actor named {name!r} already runs on node {self.name}")
        if self._stopped:
            raise NodeError(f"node {self.name} is shut down")
        host = kwargs.get("host")
        if isinstance(host, str):  # run in that actor's thread and poll loop
            if host not in self.actors:
                raise NodeError(f"host actor {host!r} does not run on node {self.name}")
            kwargs["host"] = self.actors[host]
        host_actor = kwargs.get("host")
        if isinstance(host_actor, Actor) and host_actor.actor_stopped.is_set():
            raise NodeError(f"host actor {host_actor.name!r} of {name!r} stopped on node "
                            f"{self.name}")
        ref = actor_cls.start(self, name, **kwargs)
        actor = actor_of(ref)  # the object itself: the node supervises it
        assert actor is not None
        waited = 0.0
        while not actor._ready.wait(timeout=START_NOTE_S):
            waited += START_NOTE_S
            if isinstance(host_actor, Actor) and host_actor.actor_stopped.is_set():
                # a guest handed to a loop that stopped meanwhile is never set up
                raise NodeError(f"actor {name!r} did not start on node {self.name}: its "
                                f"host {host_actor.name!r} stopped")
            self.log.warning("actor {} still starting on node {} after {:.0f} s", name,
                             self.name, waited)
        if actor.actor_stopped.is_set():
            why = actor._start_error
            raise NodeError(f"actor {name!r} failed to start on node {self.name}"
                            + (f": {str(why) or type(why).__name__}" if why is not None else ""))
        self._put_actor(name, actor, previous)
        return actor.address

    def _put_actor(self, name: str, actor: Actor, previous: Actor | None) -> None:
        """Make ``actor`` the one of ``name``; what ``previous``, the namesake it replaces
        (stopped: its counts are final), sent and took stays counted for quiesce and
        mailbox_depth. (SimNode.spawn too.)"""
        if previous is not None:
            self._replaced_sent += previous.sent_local
            self._replaced_received += previous.received
        # the new actor first: a depth read in between never counts what the previous
        # one took twice (Node.mailbox_depth)
        self.actors[name] = actor
        if previous is not None:
            with self._undelivered_lock:
                self._dequeued_replaced[name] += previous.messages_dequeued
        else:
            self._order.append(name)

    def stop_actor(self, name: str, timeout: float = 10.0) -> bool:
        """Stop one actor (it finishes its mailbox first); an actor of that name may be
        spawned again afterwards. False when it did not stop within ``timeout``."""
        actor = self.actors.get(name)
        if actor is None or actor.actor_stopped.is_set():
            return True
        try:
            actor.actor_ref.stop(block=True, timeout=timeout)
        except Exception as exc:
            self.log.warning("actor {} did not stop within {} s: {}", name, timeout, exc)
            return False
        return True

    def _new_ready_event(self) -> threading.Event:
        return threading.Event()

    def _forget(self, actor: Actor) -> None:
        pass  # kept in self.actors for post-mortem counters

    def actor(self, name: str) -> Actor:
        return self.actors[name]

    # -------------------------------------------------------------- routing
    def _new_link(self, address: Address) -> Link:
        sock = self.context.socket(zmq.PUSH)
        try:
            return self._link_on(sock, address)
        except BaseException:
            sock.close(linger=0)  # a failed connect (EMFILE, ...) leaks no socket
            raise

    def _link_on(self, sock: Any, address: Address) -> Link:
        sock.setsockopt(zmq.SNDHWM, 100)
        sock.setsockopt(zmq.LINGER, 5000)
        if address.node == self.name:
            # the actor whose mailbox is bound now (one still in its setup is not in
            # self.actors yet, its stopped namesake still is); else the one registered.
            # Read BEFORE connecting: a namesake that binds in between then makes this
            # link's target the old, stopped actor (a dead letter, and stale() links
            # again), never a live one while the pipe reaches the closed mailbox.
            target = self.mailboxes.get(address.name) or self.actors.get(address.name)
            sock.connect(self.inproc_endpoint(address.name))
            return Link(sock, False, address.node, target=target)
        endpoint = self.directory.nodes[address.node]
        curve = self.curve
        if curve is not None:
            server_key = curve.server_key(address.node)
            if server_key is None:
                sock.close(linger=0)
                raise NodeError(f"node {address.node} has no CURVE public key in "
                                f"actor.curve.public.keys.dir of node {self.name}")
            sock.curve_serverkey = server_key
            sock.curve_publickey = curve.keys.public
            sock.curve_secretkey = curve.keys.secret
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        me = self.endpoint
        if me is not None and endpoint.ipc_dir and me.host == endpoint.host:
            sock.connect(endpoint.ipc(address.node))
        elif endpoint.port:
            sock.connect(endpoint.tcp())
        else:
            sock.close(linger=0)
            raise NodeError(f"node {address.node} has no reachable endpoint from {self.name}")
        return Link(sock, True, address.node, endpoint)

    def incarnation_for(self, node: str) -> bytes:
        """What a frame to ``node`` carries as its sender's incarnation: none to this node
        or another process of this broker."""
        if not self.frame_incarnation or node == self.name or node in self.own_processes:
            return b""
        return self.frame_incarnation

    def _direct_link(self, sender: Actor, node: str) -> DirectLink | None:
        """The direct link to ``node`` when ``sender`` runs in the gateway's loop and
        ``node`` is another process of this broker; else None (ZeroMQ)."""
        if node not in self.direct_peers:
            return None
        gateway = self.actors.get("_gateway")
        if gateway is None or gateway._dead or gateway._owner is not sender._owner:
            return None
        assert isinstance(gateway, Gateway)
        return gateway.direct_link(node)

    def _connect_out(self, address: Address) -> Link | None:
        if address.node == self.name:
            if address.name not in self.actors or self.actors[address.name].actor_stopped.is_set():
                return None
        elif address.node not in self.directory.nodes:
            return None
        elif self.curve is not None and self.curve.server_key(address.node) is None:
            if address.node not in self._keyless:
                self._keyless.add(address.node)
                self.log.warning("node {} has no CURVE public key in actor.curve.public.keys.dir;"
                                 " messages to it go to dead letters", address.node)
            return None
        return self._new_link(address)

    def _send_frame(self, link: Link, address: Address, frame: bytes, waiter: Any = None,
                    net_legs: bytes | None = None) -> bool:
        """Send one frame, waiting (never dropping) while the receiver's mailbox is full;
        False, nothing sent, when the link is remote and ``waiter`` does not wait on
        remote links (``Actor.waits_on_remote``).

        ``net_legs`` (``actors.runtime.tracing.net_legs``) rides along to a remote
        gateway when the frame carries traced messages."""
        sock = link.sock
        remote = link.remote
        target = None if remote else link.target
        waited = False
        while True:
            try:
                if target is not None:
                    # under the mailbox's lock, and only while it takes frames: a frame
                    # that went into the pipe once its stop drained it was lost unread
                    with target._shut_lock:
                        if not target._mailbox_shut:
                            sock.send(frame, _NOBLOCK)
                            return True
                    self._undelivered(frame, address, f"actor {address} stopped")
                    return True
                if not remote:
                    sock.send(frame, _NOBLOCK)
                else:
                    # the parts one by one, flags as ints: send_multipart's type checks and
                    # enum arithmetic cost more than the sends of a small frame. A multipart
                    # message is delivered whole or not at all; a later part refused (the
                    # peer's pipe ending mid-message) loses the message, as with
                    # send_multipart.
                    sock.send(address.name.encode(), _NOBLOCK_MORE)
                    if net_legs is None:
                        sock.send(frame, _NOBLOCK)
                    else:
                        sock.send(frame, _NOBLOCK_MORE)
                        sock.send(net_legs, _NOBLOCK)
                return True
            except zmq.Again:
                if remote and waiter is not None and not waiter.waits_on_remote:
                    return False
                if not waited:
                    waited = True
                    self.metrics.incr("mailbox_full_waits")
                if address.node == self.name and self._receiver_gone(link, address.name):
                    self._undelivered(frame, address,
                                      f"actor {address} stopped while a frame waited for it")
                    return True
                sock.poll(100, zmq.POLLOUT)

    def _undelivered(self, frame: bytes, address: Address, reason: str) -> None:
        """A frame for ``address``, an actor of this node, that will never be read (the
        actor stopped): its messages are dead letters. Those a sender of this node sent
        count as taken for quiesce (their sender counted them sent), and an ask among them
        fails at once instead of waiting for its timeout."""
        try:
            s_node, s_name, _r_name, entries, inc = decode_frame_full(frame,
                                                                      self.max_frame_bytes)
        except BadFrame as exc:
            self.dead_letters.record(f"{reason} ({exc})", receiver=str(address))
            return
        self._entries_undelivered(s_node, s_name, entries, address, reason, inc)

    def _entries_undelivered(self, s_node: str, s_name: str, entries: list[Any],
                             receiver: Address, reason: str, s_inc: bytes = b"") -> None:
        """Entries of s_name@s_node (of its process ``s_inc``, as the frame said) that
        ``receiver``, an actor of this node, will never handle (it stopped): dead letters;
        those of this node's senders count as taken for quiesce. Asks among them fail at
        once: this node's here, another node's by a failure Reply from the ask router. A
        Reply among them to this node's ask router (its stop drained it) completes its
        ask, and is no dead letter. From any thread: a sender's (its frame refused), the
        gateway's (a frame of another node's refused), or the receiver's (its stop drains
        the mailbox, or supervision gave up on it in the middle of a frame)."""
        dead = len(entries)
        if receiver.name == ASK_SENDER and receiver.node == self.name:
            dead -= self._complete_replies(entries)
        if dead:
            self.dead_letters.record(reason, dead, sender=str(Address(s_node, s_name)),
                                     receiver=str(receiver))
        if s_node != self.name:
            ask_ids = _ask_ids(entries)
            if ask_ids and receiver.name != ASK_SENDER:
                self._fail_remote_asks(Address(s_node, s_name), s_inc, ask_ids, reason)
            return
        # sent by an actor of this node, and counted so (mailbox_depth): as taken from one
        by_actor = s_name != receiver.name and s_name != ASK_SENDER and s_name in self.actors
        with self._undelivered_lock:  # from any sender's thread
            self._undelivered_count += len(entries)
            if by_actor:
                self._undelivered_to[receiver.name] += len(entries)
        if s_name == ASK_SENDER:
            for ask_id in _ask_ids(entries):
                self._complete_ask(Reply(ask_id, False, reason))

    def _complete_replies(self, entries: list[Any]) -> int:
        """Complete this node's asks answered by the Replies among ``entries``, which the
        ask router will never handle; how many were."""
        reply_type = registry.type_id_of(Reply)
        done = 0
        for entry in entries:
            if type(entry) is not list or len(entry) != 7 or entry[0] != reply_type:
                continue
            body = entry[6]
            try:
                reply = body if type(body) is Reply else registry.build(Reply, body)
            except registry.WrongShape:  # a broken Reply: only a dead letter
                continue
            self._complete_ask(reply)
            done += 1
        return done

    def _fail_remote_asks(self, sender: Address, incarnation: bytes, ask_ids: list[int],
                          why: str) -> None:
        """Have the ask router answer asks of another node's ``sender`` with a failure;
        from the router's ``_finish_stop`` on (while it is only stopping it still takes and
        answers them) those failures are dead letters, and the asks wait their timeout."""
        router = self.actors.get(ASK_SENDER)
        if isinstance(router, AskRouter) and router.take_failures(
                FailAsks(sender, incarnation, ask_ids, why)):
            return
        self.dead_letters.record(
            f"failures to asks of {sender} not sent (the ask router of node {self.name} "
            f"stopped)", len(ask_ids),
            sender=str(Address(self.name, ASK_SENDER)), receiver=str(sender))

    def _receiver_gone(self, link: Link, name: str) -> bool:
        """A local link's send was refused: whether the mailbox it reaches is gone, so
        waiting would never end. That is the link's own actor once it stopped, even when
        another of its name runs by now (an idle replica fetcher stopped and started
        again at once): an inproc socket never reconnects. A shard that waited there
        on an answer to the old fetcher waited for good, and with it every actor of its
        loop (the acceptor, processors and handlers of a node that then never stopped)."""
        target = link.target
        if target is not None:
            # decided by the link's own actor alone: self.actors may still hold the
            # stopped namesake while the target is the new one in its setup
            return target.actor_stopped.is_set()
        current = self.actors.get(name)
        return current is None or current.actor_stopped.is_set()

    # ------------------------------------------------- external (non-actor) API
    def _external_link(self, address: Address) -> Link | None:
        links = getattr(self._thread_links, "links", None)
        if links is None:
            links = self._thread_links.links = {}
        link = links.get(address)
        if link is not None and link.stale(self.directory, self.actors):
            link.sock.close(linger=0)
            del links[address]
            link = None
        if link is None:
            link = self._connect_out(address)
            if link is None:
                return None
            links[address] = link
            self._all_external_links.append(link)
        return link

    def tell(
        self,
        address: Address,
        msg: Any,
        *,
        sender: str = "_external",
        trace_id: int | None = None,
        ask_id: int = 0,
    ) -> None:
        """Send from a thread that is not an actor (CLI, tests, signal handling).

        Raises MessageTooLarge, sending nothing, for a message no frame can carry.
        """
        link = self._external_link(address)
        if link is None:
            self.dead_letters.record(f"no route to actor {address}", sender=sender)
            return
        tid = self.tracer.sample() if trace_id is None else trace_id
        span = new_id() if tid else 0  # the receiver writes the hop's record
        # the send time only for a traced message, as Actor.tell: untraced ones carry 0
        entry = new_entry(registry.type_id_of(type(msg)), tid, span, 0,
                          self.clock.wall_ns() if tid else 0, ask_id, msg)
        frames, refused = encode_frames(self.name, sender, address.name, [entry],
                                        self.max_frame_bytes, self.incarnation_for(address.node))
        if refused:
            self.metrics.incr("messages_refused_oversized")
            reason = (f"{type(msg).__name__} of {refused[0].frame_bytes} bytes from {sender} to "
                      f"{address} is over the {self.max_frame_bytes} byte frame limit "
                      f"(actor.max.frame.bytes); not sent")
            self.log.warning("{}", reason)
            raise MessageTooLarge(reason)
        legs = net_legs(self.name, sender, [entry]) if tid and link.remote else None
        self._send_frame(link, address, frames[0], net_legs=legs)
        if address.node == self.name:
            self._external_sent += 1

    def send_raw(self, address: Address, frame: bytes) -> None:
        """Put arbitrary bytes in a mailbox (for tests of dead-letter handling)."""
        link = self._external_link(address)
        if link is None:
            raise NodeError(f"no route to {address}")
        self._send_frame(link, address, frame)

    def ask(
        self, address: Address, msg: Any, timeout: float = 5.0, trace_id: int | None = None
    ) -> Any:
        """Send and wait for the handler's return value (control paths and tests)."""
        ask_id = next(self._ask_ids)
        pending = _Pending()
        self._pending[ask_id] = pending
        try:
            self.tell(address, msg, sender=ASK_SENDER, ask_id=ask_id, trace_id=trace_id)
            if not pending.event.wait(timeout):
                raise AskTimeout(f"no answer from {address} to {type(msg).__name__} in {timeout} s")
        finally:
            self._pending.pop(ask_id, None)
        reply = pending.reply
        assert reply is not None
        if not reply.ok:
            raise AskFailed(f"{address} failed on {type(msg).__name__}: {reply.value}")
        return reply.value

    def mailbox_depth(self, name: str) -> int:
        """Messages actors of this node sent to the actor ``name`` that it has not taken
        yet (the actor_mailbox_depth gauge)."""
        enqueued = self.metrics.get(f"actor_messages_enqueued_total|actor={name}")
        # the sent count runs over every actor of that name: what earlier ones took, and
        # what reached any of them once stopped, is taken off (a name spawned again starts
        # at 0). Counted on both sides by different threads: a moment's view may be off.
        # The replaced counts first, then the actor: spawn puts the new actor in before it
        # adds the old one's count, so a respawn in between never counts that twice.
        with self._undelivered_lock:
            gone = self._undelivered_to[name] + self._dequeued_replaced[name]
        actor = self.actors.get(name)
        taken = gone + (actor.messages_dequeued if actor is not None else 0)
        return max(0, enqueued - taken)

    def _complete_ask(self, reply: Reply) -> None:
        pending = self._pending.get(reply.ask_id)
        if pending is not None and pending.reply is None:  # the first answer is the answer
            pending.reply = reply
            pending.event.set()

    # ------------------------------------------------------------- shutdown
    def quiesce(self, timeout: float = 10.0) -> bool:
        """Wait until every message sent between this node's actors has been handled.

        The caller's thread waits on the actors' threads, so ``timeout`` is real
        time whatever clock the actors run on (a ManualClock does not move here).
        """
        real = SystemClock()
        deadline_ms = real.now_ms() + int(timeout * 1000)
        pause = threading.Event()  # never set: a 20 ms wait between looks
        stable = 0
        last = None
        while real.now_ms() < deadline_ms:
            actors = list(self.actors.values())
            sent = self._external_sent + self._replaced_sent + sum(a.sent_local for a in actors)
            received = (self._replaced_received + self._undelivered_count
                        + sum(a.received for a in actors))
            state = (sent, received)
            if received >= sent and state == last:
                stable += 1
                if stable >= 3:
                    return True
            else:
                stable = 0
            last = state
            pause.wait(0.02)
        return False

    def run_turns(self, timeout: float = 10.0) -> None:
        """Have every running actor take a turn now, and wait until each has.

        Actors act on time in their turns (the Timer fires what is due, a shard
        runs its housekeeping). After a ManualClock is moved by hand, this makes
        every actor see the new time at once instead of at its loop's next wake-up;
        ``quiesce`` then waits for the messages those turns sent.
        """
        for name in list(self._order):
            actor = self.actors[name]
            if actor.actor_stopped.is_set():
                continue
            try:
                actor.actor_ref.ask(call_message("take_turn"), timeout=timeout)
            except pykka.ActorDeadError:
                pass  # stopped meanwhile, or its stop began (Actor._refused): it ended

    def advance_clock(self, ms: int, timeout: float = 10.0) -> None:
        """Move this node's ManualClock by ``ms``, let every actor act on it, then settle."""
        advance = getattr(self.clock, "advance", None)
        if advance is None:
            raise NodeError(f"node {self.name} runs on {type(self.clock).__name__}, "
                            f"which cannot be moved by hand")
        advance(ms)
        self.run_turns(timeout)
        self.quiesce(timeout)

    @property
    def intake_stopped(self) -> bool:
        """``stop_intake`` began: an actor spawned since got no ``on_stopping``."""
        return self._intake_stopped

    def stop_intake(self, timeout: float = 10.0) -> None:
        """Have every actor stop taking new external input (``on_stopping``), once; the
        actors keep running and answer what they already took. ``shutdown`` begins so."""
        if self._intake_stopped:
            return
        self._intake_stopped = True
        user_actors = [self.actors[n] for n in reversed(self._order) if not n.startswith("_")]
        for actor in user_actors:
            if not actor.actor_stopped.is_set():
                try:
                    actor.actor_ref.ask(call_message("on_stopping"), timeout=timeout)
                except pykka.ActorDeadError:
                    pass  # stopped meanwhile (or its stop began): it takes nothing more
                except Exception as exc:
                    self.log.warning("actor {} did not stop intake cleanly: {}", actor.name, exc)

    def shutdown(self, timeout: float = 10.0, quiet: bool = False) -> None:
        """Stop intake, let in-flight messages finish, then stop actors newest first.
        ``quiet``: no "stopped" line (whoever stops it says so in its own)."""
        if self._stopped:
            return
        self._stopped = True
        self.stop_intake(timeout)
        if not self.quiesce(timeout):
            self.log.warning("node {} did not quiesce within {} s", self.name, timeout)
        for name in reversed(self._order):
            actor = self.actors[name]
            if actor.actor_stopped.is_set():
                continue
            try:
                actor.actor_ref.stop(block=True, timeout=timeout)
            except Exception as exc:
                self.log.warning("actor {} did not stop within {} s: {}", name, timeout, exc)
        for link in self._all_external_links:  # unlingered to a node that left (nobody reads)
            link.sock.close(linger=0 if link.remote and link.stale(self.directory) else 1000)
        self._all_external_links.clear()
        self.tracer.close()
        if self._zap is not None:
            self._zap.stop()
            self._zap = None
        if self._own_context:
            self._end_context(timeout)
        if not quiet:
            self.log.info("node {} stopped", self.name)

    def _end_context(self, timeout: float) -> None:
        """Terminate the ZeroMQ context without hanging on a socket someone left open.

        ``term`` waits for every socket of the context to be closed; one that an actor
        which did not stop, or a path that forgot it, still holds would block a shutdown
        forever. After ``timeout`` the sockets still open are named and closed unlingered.
        """
        ender = threading.Thread(target=self.context.term, name=f"{self.name}-zmq-term",
                                 daemon=True)
        ender.start()
        ender.join(timeout)
        if not ender.is_alive():
            return
        still_open = [sock for sock in list(getattr(self.context, "_sockets", ()))
                      if not sock.closed]
        self.log.warning("node {}: {} ZeroMQ socket(s) still open {} s after its actors "
                         "stopped, closed now: {}", self.name, len(still_open), timeout,
                         ", ".join(_describe_socket(sock) for sock in still_open) or "none")
        for sock in still_open:
            sock.close(linger=0)
        ender.join(timeout)

    def run_until_signal(self, before_shutdown: Callable[[], None] | None = None,
                         received: list[int] | None = None) -> int:
        """Block the main thread until SIGTERM or SIGINT, then shut down cleanly.

        ``before_shutdown`` runs first, with every actor still up (a cluster node's
        controlled shutdown). ``received``: signals a handler installed earlier
        already caught (the broker's, from before it said it listens).
        """
        if received is None:
            received = []

        def on_signal(signum: int, _frame: Any) -> None:
            # Only a list append: a handler that set a threading.Event could run while
            # the main thread holds that Event's lock inside wait(), and hang for good.
            received.append(signum)

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        pause = threading.Event()  # never set: its wait() is only a sleep
        try:
            while not received:
                pause.wait(0.2)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        self.log.info("node {} got {}; shutting down", self.name, signal.Signals(received[0]).name)
        if before_shutdown is not None:
            before_shutdown()
        self.shutdown()
        return 0


def _ask_ids(entries: list[Any]) -> list[int]:
    """The ask ids of the asks among ``entries``; an entry of another shape (a forged or
    broken frame) is only a dead letter, never an error in the stop that drains it."""
    return [entry[5] for entry in entries
            if type(entry) is list and len(entry) > 5 and type(entry[5]) is int and entry[5]]


def refuse_ipc_in_use(path: Path) -> None:
    """Raise NodeError if a live process listens on the gateway socket ``path``.

    The gateway replaces a stale socket file of an earlier run; it must never
    take over one that another node (another broker, a test) still serves.
    """
    if not path.exists():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return  # nobody listens: a stale file, replaced at bind
    finally:
        probe.close()
    raise NodeError(f"the gateway socket {path} is in use by another process; give this node "
                    f"another name (node.name) or ipc dir (actor.ipc.dir)")


def _describe_socket(sock: zmq.Socket[Any]) -> str:
    try:
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT) or "no endpoint"
    except zmq.ZMQError:
        endpoint = "endpoint unknown"
    return f"{sock.socket_type} {endpoint}"
