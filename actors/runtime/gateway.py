"""The gateway: a node's one door for frames from other nodes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.direct import (
    RECONNECT_MS,
    DirectInbound,
    DirectLink,
    accept_all,
    direct_path,
    listen,
)
from actors.runtime.directory import NodeEndpoint
from actors.runtime.tracing import record_net_legs
from wire.envelope import BadFrame, claimed_sender, decode_frame_full, sender_prefixes
from wire.runtime_messages import GetClockOffsets, Ping, Pong

_POLLIN = int(zmq.POLLIN)
_decode_frame = decode_frame_full

if TYPE_CHECKING:
    from actors.runtime.node import Link, Node

# ZMTP heartbeats on the sockets between nodes (the gateway's and the links to it):
# a peer silent this long is taken for gone and the connection made again, so a
# half-open TCP connection after a host crash does not hold queued frames for good.
# The timeout is longer than a ZooKeeper session (18 s by default): a node paused
# that long is taken for dead by the cluster anyway, and a shorter pause (SIGSTOP)
# costs no connection, so nothing sent to it in the meantime is lost.
HEARTBEAT_IVL_MS = 5000
HEARTBEAT_TIMEOUT_MS = 30_000


class Gateway(Actor):
    """Receives frames from other nodes and hands them to local mailboxes.

    It also estimates clock offsets: every ``PING_INTERVAL_MS`` it pings the
    gateway of every other node; from a Pong, offset(remote - local) =
    pong_wall - (ping_wall + arrival_wall) / 2, and the sample with the
    smallest round trip in the recent window is kept. The node whose name
    sorts first is the reference clock; the tracer records this node's offset
    to it, so trace readers can put every node on one timeline.
    """

    mailbox_size = 1000
    # Pings are advisory: a peer that takes nothing (its handshake refused, its pipe full)
    # must not hold the worker loop this gateway may share with the request path
    waits_on_remote = False
    PING_INTERVAL_MS = 2000
    WINDOW = 8

    def __init__(self, node: Node, name: str, endpoint: NodeEndpoint | None, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.endpoint = endpoint
        self._in: list[Any] = []
        self._fwd: dict[str, Link] = {}
        self._local: dict[str, Actor] = {}  # receivers that run in this gateway's loop
        self._more = False  # a drain stopped at its cap: frames are waiting
        self.samples: dict[str, list[tuple[int, int]]] = {}  # node -> [(rtt ns, offset ns)]
        self._ping_seq = 0
        self._next_ping_ns = 0
        # CURVE: the ZAP handler names the node whose key authenticated a connection (the
        # User-Id of each message); a frame must claim that node (or another process of
        # it) as its sender. Authenticated node -> the frame prefixes it may send.
        self._prefixes: dict[str, tuple[bytes, ...]] = {}
        self._forged: set[tuple[str, str]] = set()  # (peer, claimed) already logged
        # Direct links (actors.runtime.direct) with the other processes of this broker
        self._listener: Any = None
        self._accept_failed = False  # the last accept found no descriptor (logged once)
        self._accept_again_ns = 0  # the listener unwatched until then (0: watched)
        self._inbound: list[DirectInbound] = []
        self._direct: dict[str, DirectLink] = {}  # peer node -> the link this loop sends on

    def _peers(self) -> list[str]:
        return sorted(n for n in self.node.directory.nodes if n != self.node.name)

    def poll_timeout_ms(self) -> int | None:
        if self._more:
            return 0
        now_ns = self.clock.monotonic_ns()
        wait_ns = self._next_ping_ns - now_ns
        for link in self._direct.values():
            if link.sock is None and link.pending:  # waits for its peer to listen again
                wait_ns = min(wait_ns, link.next_try_ns - now_ns)
        if self._accept_again_ns:
            wait_ns = min(wait_ns, self._accept_again_ns - now_ns)
        if wait_ns > 0:  # the next ping (or look for peers) is due then
            return wait_ns // 1_000_000
        if self.endpoint is None and not self._peers():
            return None  # a simulated node alone: nobody to ping until a peer tells it
        return 0

    def on_turn(self) -> None:
        if self._more:  # the descriptor will not signal what a capped drain left
            self._on_readable(0)
        for link in self._direct.values():
            if link.sock is None and link.pending:
                link.connect()
        if self._accept_again_ns and self.clock.monotonic_ns() >= self._accept_again_ns:
            self._accept_again_ns = 0
            if self._listener is not None:
                self.watch_fd(self._listener.fileno(), self._on_connection)
        # the time first: in a worker loop this runs after every poll turn, the directory
        # is sorted only when a ping may be due
        now_ns = self.clock.monotonic_ns()
        if now_ns < self._next_ping_ns:
            return
        peers = self._peers()
        if not peers:
            if self.endpoint is not None:
                # A real node's directory may learn a peer from another thread (the
                # cluster controller): look again after an interval, not every turn
                self._next_ping_ns = now_ns + self.PING_INTERVAL_MS * 1_000_000
            return
        self._next_ping_ns = now_ns + self.PING_INTERVAL_MS * 1_000_000
        self._ping_seq += 1
        for peer in peers:
            self.tell(Address(peer, self.name), Ping(self._ping_seq, self.clock.wall_ns()))

    @handles(Ping)
    def on_ping(self, msg: Ping) -> None:
        self.reply(Pong(msg.seq, msg.sent_wall_ns, self.clock.wall_ns()))

    @handles(Pong)
    def on_pong(self, msg: Pong) -> None:
        assert self.current_sender is not None
        arrived = self.clock.wall_ns()
        rtt = arrived - msg.ping_wall_ns
        offset = msg.pong_wall_ns - (msg.ping_wall_ns + arrived) // 2
        window = self.samples.setdefault(self.current_sender.node, [])
        window.append((rtt, offset))
        del window[: -self.WINDOW]
        self._update_tracer_offset()
        tracer = self.node.tracer
        if tracer.enabled:  # the raw sample, so readers can redo the estimate over time
            tracer.record("clock", 0, 0, 0, self.name, self.current_sender.node, "clock",
                          sent_ns=msg.ping_wall_ns, recv_ns=msg.pong_wall_ns, done_ns=arrived)

    def offset_to(self, node: str) -> int | None:
        """Best estimate of (node's wall clock - ours) in ns, or None without samples."""
        if node == self.node.name:
            return 0
        window = self.samples.get(node)
        return min(window)[1] if window else None

    def _update_tracer_offset(self) -> None:
        reference = min([self.node.name, *self._peers()])
        offset = self.offset_to(reference)
        if offset is not None:
            self.node.tracer.clock_offset_ns = offset

    @handles(GetClockOffsets)
    def clock_offsets(self, _msg: GetClockOffsets) -> dict[str, list[int]]:
        return {node: list(min(window)) for node, window in self.samples.items() if window}

    def direct_link(self, peer: str) -> DirectLink | None:
        """The direct link to ``peer``'s gateway for the actors of this loop (None: the
        nodes use ZeroMQ; see ``Node.direct_peers``)."""
        link = self._direct.get(peer)
        if link is None:
            if self._listener is None:
                return None
            endpoint = self.node.directory.nodes.get(peer)
            if endpoint is None or not endpoint.ipc_dir:
                return None
            link = self._direct[peer] = DirectLink(peer, direct_path(endpoint.ipc_dir, peer), self)
            link.connect()
        return link

    def _on_connection(self, _mask: int) -> None:
        accepted, exc = accept_all(self._listener)
        for conn in accepted:
            self._inbound.append(DirectInbound(conn, self, self._deliver_direct,
                                               self._inbound.remove))
        if exc is not None:
            # No descriptor for it (EMFILE, ...): the connection stays in the backlog and the
            # listener readable. Look again a reconnect interval later, not on every turn.
            if not self._accept_failed:
                self.log.warning("direct links: a process's connection not accepted ({}); "
                                 "trying again every {} ms", exc, RECONNECT_MS)
            self._accept_failed = True
            self.unwatch_fd(self._listener.fileno())
            self._accept_again_ns = self.clock.monotonic_ns() + RECONNECT_MS * 1_000_000
        elif self._accept_failed:
            self._accept_failed = False
            self.log.info("direct links: connections accepted again")

    def _deliver_direct(self, target: bytes, frame: bytes | memoryview,
                        legs: bytes | None) -> None:
        legs_ns = 0
        if legs is not None:
            if self.node.tracer.enabled:
                legs_ns = self.clock.wall_ns()
            else:
                legs = None
        self._deliver(target, frame, legs, legs_ns)

    def setup(self) -> None:
        node = self.node
        if (self._listener is None and node.direct_peers and node.curve is None
                and self.endpoint is not None and self.endpoint.ipc_dir):
            self._listener = listen(direct_path(self.endpoint.ipc_dir, node.name))
            self.watch_fd(self._listener.fileno(), self._on_connection)
        if self._in or self.endpoint is None:
            return
        for url in self._bind_urls():
            sock = node.context.socket(zmq.PULL)
            sock.setsockopt(zmq.RCVHWM, node.gateway_hwm)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, 4 * node.max_frame_bytes + 1024)
            sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
            if node.curve is not None:  # the node's ZAP handler admits the cluster's keys
                sock.curve_server = True
                sock.curve_publickey = node.curve.keys.public
                sock.curve_secretkey = node.curve.keys.secret
                sock.zap_domain = b"actorlog"
            try:
                sock.bind(url)
            except zmq.ZMQError:  # not in _in yet: teardown would leave it open
                sock.close(linger=0)
                raise
            self._in.append(sock)
            # its ZMQ_FD, a plain descriptor: cheaper to poll than the socket (zmq_poll
            # asks each socket for its events); _on_readable asks before each recv
            self.watch_fd(int(sock.getsockopt(zmq.FD)), self._on_readable)
            self._more = True  # asked once at the first turn
            self.log.debug("gateway of {} listening on {}", node.name, url)

    def _bind_urls(self) -> list[str]:
        assert self.endpoint is not None
        urls = []
        if self.endpoint.ipc_dir:
            Path(self.endpoint.ipc_dir).mkdir(parents=True, exist_ok=True)
            path = Path(self.endpoint.ipc_dir) / f"{self.node.name}.gw"
            if path.exists():
                path.unlink()  # a stale socket file from a previous run of this node
            urls.append(self.endpoint.ipc(self.node.name))
        if self.endpoint.port:
            urls.append(self.endpoint.tcp())
        return urls

    def _sender_prefixes(self, peer: str) -> tuple[bytes, ...]:
        """The prefixes of the frames the node authenticated as ``peer`` may send (none for
        a peer the keys do not name: an empty User-Id means no ZAP verdict named it)."""
        found = self._prefixes.get(peer)
        if found is None:
            curve = self.node.curve
            names = curve.names_of(peer) if curve is not None and peer else frozenset()
            found = self._prefixes[peer] = tuple(p for n in sorted(names)
                                                 for p in sender_prefixes(n))
        return found

    def _refuse_forged(self, meta: Any, peer: str, frame: bytes, target: str) -> None:
        claimed = claimed_sender(frame)
        reason = (f"frame refused: sender node {claimed!r} is not the CURVE-authenticated "
                  f"peer {peer or '?'}")
        first = (peer, claimed) not in self._forged
        if first:
            if len(self._forged) >= 4096:
                self._forged.clear()
            self._forged.add((peer, claimed))
            try:
                address = meta.get("Peer-Address")
            except zmq.ZMQError:
                address = "?"
            self.log.warning("gateway refused a frame from CURVE peer {} ({}) claiming sender "
                             "node {} (to {}); its frames claiming {} are dropped",
                             peer or "?", address, claimed, target, claimed)
        self.node.dead_letters.record(reason, sender=claimed, receiver=target, log=False)

    def _on_readable(self, _mask: int) -> None:
        dl = self.node.dead_letters
        tracer = self.node.tracer
        checked = self.node.curve is not None
        self._more = False
        for sock in self._in:
            for taken in range(257):
                if taken == 256:  # the cap: the rest after the loop's other work
                    self._more = True
                    break
                # asked before each recv: a zmq.Again ending every drain costs a Python
                # exception (its __init__ imports), the question one C call
                if not sock.getsockopt(zmq.EVENTS) & _POLLIN:
                    break
                try:
                    if checked:  # the first part's metadata names the authenticated peer
                        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        parts = [f.bytes for f in frames]
                    else:
                        parts = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if len(parts) == 3 and tracer.enabled:  # traced messages: the network leg
                    legs_ns = self.clock.wall_ns()
                    target, frame, legs = parts
                elif len(parts) in (2, 3):
                    target, frame = parts[0], parts[1]
                    legs = None
                    legs_ns = 0
                else:
                    dl.record(f"gateway frame with {len(parts)} parts", receiver=self.name)
                    continue
                if checked:
                    try:
                        peer = frames[0].get("User-Id")
                    except zmq.ZMQError:
                        peer = ""
                    prefixes = self._prefixes.get(peer) or self._sender_prefixes(peer)
                    if not frame.startswith(prefixes):
                        self._refuse_forged(frames[0], peer, frame,
                                            target.decode("utf-8", "replace"))
                        continue
                self._deliver(target, frame, legs, legs_ns)

    def _deliver(self, target: bytes, frame: bytes | memoryview, legs: bytes | None,
                 legs_ns: int) -> None:
        """One frame from another node (checked for its size) to its actor here: in memory
        to an actor of this loop, else to its mailbox. ``legs``: trace legs to record.
        ``frame``: a direct link's is a view of the bytes it read, used only in this call."""
        name = target.decode("utf-8", "replace")
        if len(frame) > self.node.max_frame_bytes:
            self.node.dead_letters.record(
                f"frame of {len(frame)} bytes is over the {self.node.max_frame_bytes} byte "
                f"limit", receiver=name)
            return
        local = self._local.get(name)
        if local is None or local._dead:
            local = self._in_loop(name)
        if local is not None:
            # An actor of this worker loop: the frame goes into its in-memory
            # queue, decoded here, as from an actor of the loop (no inproc socket,
            # no thread switch); it runs in this same turn of the loop.
            try:
                s_node, s_name, _r_name, entries, s_inc = _decode_frame(
                    frame, self.node.max_frame_bytes)
            except BadFrame as exc:
                self.node.dead_letters.record(str(exc), 1, receiver=name)
                return
            local._local_in.append((s_node, s_name, entries, s_inc))
            if legs is not None:
                record_net_legs(self.node.tracer, self.name, legs, legs_ns, self.clock.wall_ns())
            return
        link = self._fwd.get(name)
        if link is not None and link.stale(self.node.directory, self.node.actors):
            link.sock.close(linger=0)  # that actor was started again
            link = None
        if link is None:
            if name not in self.node.actors:
                self.node.dead_letters.record(
                    f"no actor named {name!r} on node {self.node.name}", receiver=name)
                return
            link = self.node._new_link(Address(self.node.name, name))
            self._fwd[name] = link
        self.node._send_frame(link, Address(self.node.name, name), bytes(frame), waiter=self)
        if legs is not None:
            record_net_legs(self.node.tracer, self.name, legs, legs_ns, self.clock.wall_ns())

    def _in_loop(self, name: str) -> Actor | None:
        """The running actor ``name`` when it runs in this gateway's loop (else None: its
        frames go to its mailbox over an inproc link)."""
        actor = self.node.actors.get(name)
        if actor is None or actor._dead or actor._owner is not self._owner:
            self._local.pop(name, None)
            return None
        self._local[name] = actor
        return actor

    def teardown(self) -> None:
        for sock in self._in:
            self.unwatch_fd(int(sock.getsockopt(zmq.FD)))
            sock.close(linger=0)
        self._in = []
        for link in self._fwd.values():
            link.sock.close(linger=1000)
        self._fwd = {}
        self._local = {}
        for direct in self._direct.values():  # senders holding one make a new one
            direct.close()
        self._direct = {}
        for inbound in list(self._inbound):
            inbound.close()
        if self._listener is not None:
            self.unwatch_fd(self._listener.fileno())
            self._listener.close()
            self._listener = None
            if self.endpoint is not None:
                direct_path(self.endpoint.ipc_dir, self.node.name).unlink(missing_ok=True)
