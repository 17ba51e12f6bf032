"""Direct links: Unix stream sockets between the worker loops of one broker's processes.

The processes of one broker (``num.processes``) are runtime nodes of one host that
trust each other. Between them a frame need not go through ZeroMQ: its ipc send
wakes ZeroMQ's I/O thread on each side, which on a machine of few cores preempts
the very loop that sent or is to receive the frame. A direct link is a plain Unix
stream socket from the gateway's loop of one process to the gateway of another
(``<ipc dir>/<node>.ux``), polled by the receiving loop as a descriptor.

On the stream each frame is ``[u16 receiver name length][u32 frame length][u32
trace legs length][receiver name][frame][legs]``: the parts a gateway takes from
ZeroMQ, handed to the same dispatch (frame limit, dead letters, tracing legs).

Sending never blocks the loop. What the socket does not take at once waits in the
link, in order, and is written when the socket is writable again; but no more than
``BACKLOG_MAX_BYTES`` of it, as a ZeroMQ link to another node holds a bounded pipe: a
frame that would take the backlog over that is dropped, and its messages are dead
letters (a peer process stopped, hung or slow to come back must not let the sender's
memory grow without bound). A link whose peer is gone (the process died) keeps what it
was given, up to that cap, and connects again every ``RECONNECT_MS`` until the peer's
gateway listens again (the supervisor restarted it), as a ZeroMQ link queues for a
peer that is away; a frame the dead process had taken (in the socket, or half written)
is lost with it, as with ZeroMQ. Only actors of the gateway's loop send this way (a
link's buffer belongs to that thread); other threads keep their ZeroMQ links. Never
used with CURVE (the frames are not authenticated) nor between nodes of a cluster.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import zmq

from wire.envelope import frame_head

if TYPE_CHECKING:
    from actors.runtime.actor import Actor

HEAD = struct.Struct("<HII")
HEAD_SIZE = HEAD.size
RECONNECT_MS = 100
READ_BYTES = 64 * 1024  # under malloc's mmap threshold: a read allocates from the heap
# reads of one stream per turn of the loop (2 MiB): it drains a busy link without keeping
# the loop's other descriptors waiting for long
READS_PER_TURN = 32
FRAMES_PER_TURN = 256  # and no more reads once this many frames were delivered in a turn
#                        (the gateway's ZeroMQ side takes 256 messages a turn, too)
SEND_BUFFER_BYTES = 4 * 1024 * 1024  # the kernel caps it at net.core.wmem_max
SEND_PARTS = 64  # buffers per sendmsg when a backlog is written
# Bytes a link keeps for a peer that does not take them (stopped, hung, restarting). A
# live peer reads up to 2 MiB a turn and leaves far less waiting; a stalled one holds what
# the clients have in flight towards it (5 requests of up to 1 MiB per producer
# connection by default): this is about 50 busy connections' worth, so a peer stuck for
# a few seconds (a slow disk) loses nothing, and one stopped for good costs a bounded
# amount. ZeroMQ's SNDHWM of 100 frames bounds the other links the same way.
BACKLOG_MAX_BYTES = 256 * 1024 * 1024
_POLLOUT = int(zmq.POLLOUT)
_POLLIN = int(zmq.POLLIN)
_GONE = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNREFUSED, errno.ENOENT)


def direct_path(ipc_dir: str, node: str) -> Path:
    """Where ``node``'s gateway takes direct links (next to its ZeroMQ ``.gw`` socket)."""
    return Path(ipc_dir) / f"{node}.ux"


def pack(target: bytes, frame: bytes, legs: bytes | None) -> bytes:
    if legs is None:
        return HEAD.pack(len(target), len(frame), 0) + target + frame
    return b"".join((HEAD.pack(len(target), len(frame), len(legs)), target, frame, legs))


class DirectLink:
    """The stream from this loop to one peer process's gateway.

    ``owner``: the actor (the gateway) whose loop watches the socket while a backlog
    waits for room. ``remote``: for the senders, a link to another node (trace legs
    ride along). ``backlog_max_bytes``: what ``pending`` may hold before frames are
    dropped (``BACKLOG_MAX_BYTES``)."""

    remote = True

    def __init__(self, node: str, path: Path, owner: Actor, *,
                 backlog_max_bytes: int = BACKLOG_MAX_BYTES) -> None:
        self.node = node
        self.path = path
        self.owner = owner
        self.sock: socket.socket | None = None
        self.pending: deque[bytes | memoryview] = deque()
        self.pending_bytes = 0  # sum(len(p) for p in pending), kept as they change
        self.backlog_max_bytes = backlog_max_bytes
        self.dropped = 0  # frames not queued: the backlog was full
        self.dropping = 0  # of those, since the backlog was last under half its cap
        self.watching = False
        self.closed = False
        self.next_try_ns = 0
        self.lost = 0  # frames the peer's death took (written, or half written, before)
        self.connects = 0
        self.warned: set[int | None] = set()  # connect errnos logged once

    def send(self, target: bytes, frame: bytes, legs: bytes | None) -> None:
        """Write the frame, or queue what the socket does not take; drop it (dead
        letters) if the backlog would pass its cap. Never raises into the sender's loop."""
        sock = self.sock
        if sock is not None and not self.pending:
            # The common case: the socket takes the whole frame at once. Its parts go as
            # they are, in one sendmsg, not joined first: a produce frame is tens of KB,
            # and the join was a copy and an allocation of that size for every one.
            prefix = HEAD.pack(len(target), len(frame), len(legs) if legs else 0) + target
            parts = (prefix, frame) if legs is None else (prefix, frame, legs)
            size = len(prefix) + len(frame) + (len(legs) if legs else 0)
            try:
                sent = sock.sendmsg(parts)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                data = pack(target, frame, legs)
                self.pending.append(data)  # never written: it goes once the peer is back
                self.pending_bytes += size
                self._gone(exc)
                return
            if sent < size:  # the rest waits in the backlog, as one piece (it is rare)
                data = pack(target, frame, legs)
                self.pending.append(memoryview(data)[sent:] if sent else data)
                self.pending_bytes += size - sent
                self._watch()
            return
        data = pack(target, frame, legs)
        size = len(data)
        # A frame alone over the cap still goes when nothing waits:
        # actor.max.frame.bytes (16 MiB by default, but up to 2 GiB allowed) bounds
        # frames already, and a link that refused a legal frame could never carry it.
        # Once dropping, every frame is dropped until the backlog is under half the
        # cap: the loss is one run of frames, never a gap between delivered ones.
        if self.pending and (self.dropping
                             or self.pending_bytes + size > self.backlog_max_bytes):
            self._drop(target, frame)
            return
        self.pending.append(data)
        self.pending_bytes += size
        if sock is None:
            self.connect()

    def _drop(self, target: bytes, frame: bytes) -> None:
        """The backlog is full: the frame's messages are dead letters, the first of an
        episode logged (the next once the backlog went under half its cap)."""
        first = not self.dropping
        self.dropping += 1
        self.dropped += 1
        node = self.owner.node
        node.metrics.incr("direct_link_frames_dropped")
        head = frame_head(frame)
        sender, count = (f"{head[1]}@{head[0]}", head[2]) if head is not None else ("", 1)
        node.dead_letters.record(
            f"direct link to node {self.node} full ({self.pending_bytes} bytes in "
            f"{len(self.pending)} frame(s) wait for its process, stopped, hung or away; "
            f"cap {self.backlog_max_bytes} bytes)",
            count, sender=sender, receiver=f"{target.decode(errors='replace')}@{self.node}",
            log=first)

    def _maybe_drained(self) -> None:
        """An episode of drops ends once the backlog is under half its cap."""
        if not self.dropping or self.pending_bytes * 2 >= self.backlog_max_bytes:
            return
        self.owner.log.info("direct link to {}: its backlog is under half its cap again; "
                            "{} frame(s) were dropped while it was full",
                            self.node, self.dropping)
        self.dropping = 0

    def connect(self) -> bool:
        """Connect if the peer listens (never waits); True when connected."""
        if self.sock is not None:
            return True
        if self.closed:
            return False
        now = self.owner.clock.monotonic_ns()
        if now < self.next_try_ns:
            return False
        self.next_try_ns = now + RECONNECT_MS * 1_000_000
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:  # no descriptor left (EMFILE): what waits, waits
            self.owner.log.warning("direct link to {}: no socket ({}); trying again",
                                   self.node, exc)
            return False
        sock.setblocking(False)
        try:
            # Room for a burst of produce frames: a Unix stream holds only the sender's
            # SO_SNDBUF (about three 64 KiB batches by default) before the sender must wait
            # for the reader's next turn and then its own next poll
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        except OSError:
            pass  # the OS default then
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            # other than "not listening (yet)": said once, tried again as for a peer away
            quiet = (*_GONE, errno.EAGAIN, errno.ECONNABORTED)
            if exc.errno not in quiet and exc.errno not in self.warned:
                self.warned.add(exc.errno)
                self.owner.log.warning("direct link to {}: connect failed ({}); what waits, "
                                       "waits, and it tries again", self.node, exc)
            return False
        self.sock = sock
        self.connects += 1
        if self.connects > 1:
            self.owner.log.info("direct link to {} connected again; {} frame(s) ({} bytes) "
                                "waited for it", self.node, len(self.pending),
                                self.pending_bytes)
        if self.pending:
            self.write_pending()
        return True

    def write_pending(self) -> None:
        sock = self.sock
        pending = self.pending
        while pending and sock is not None:
            parts = [pending[i] for i in range(min(len(pending), SEND_PARTS))]
            try:
                sent = sock.sendmsg(parts)
            except BlockingIOError:
                self._watch()
                return
            except OSError as exc:
                self._gone(exc)
                return
            self.pending_bytes -= sent
            self._maybe_drained()
            while sent:
                head = pending[0]
                if sent >= len(head):
                    sent -= len(head)
                    pending.popleft()
                else:
                    pending[0] = memoryview(head)[sent:]
                    sent = 0
                    self._watch()
                    return
        self._unwatch()

    def _watch(self) -> None:
        if not self.watching and self.sock is not None:
            self.watching = True
            self.owner.watch_fd(self.sock.fileno(), self._on_writable, _POLLOUT)

    def _unwatch(self) -> None:
        if self.watching and self.sock is not None:
            self.watching = False
            self.owner.unwatch_fd(self.sock.fileno())

    def _on_writable(self, _mask: int) -> None:
        self.write_pending()

    def _gone(self, exc: OSError) -> None:
        """The peer closed (its process died), or the stream failed otherwise: drop the
        socket, keep what waits (but a frame half written: the rest alone would be garbage
        to the next peer) and connect again. Never an exception into the sender's loop."""
        self._unwatch()
        if self.pending and isinstance(self.pending[0], memoryview):
            self.pending_bytes -= len(self.pending.popleft())
            self.lost += 1
            self._maybe_drained()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if exc.errno in _GONE:
            self.owner.log.warning("direct link to {} lost (its process gone); {} frame(s) "
                                   "wait for it to listen again", self.node, len(self.pending))
        else:
            self.owner.log.warning("direct link to {} failed ({}); {} frame(s) wait for it to "
                                   "connect again", self.node, exc, len(self.pending))
        self.next_try_ns = 0
        self.connect()

    def close(self, linger_s: float = 1.0) -> None:
        """Close, first writing what waits for up to ``linger_s`` (as a ZeroMQ link lingers
        so that a live peer still gets what was sent)."""
        self._unwatch()
        self.closed = True
        sock = self.sock
        self.sock = None
        if sock is not None:
            if self.pending and linger_s > 0:
                sock.settimeout(linger_s)
                try:
                    while self.pending:
                        sock.sendall(self.pending[0])
                        self.pending_bytes -= len(self.pending.popleft())
                except OSError:
                    pass  # gone, or no room for that long: what is left is lost
            sock.close()
        self.pending.clear()  # nobody sends on a closed link: its memory goes now
        self.pending_bytes = 0


class DirectInbound:
    """One accepted stream: reads it and hands each whole frame to ``deliver``.

    A frame is handed over as a memoryview of the bytes read (the gateway decodes it at
    once and keeps no reference): a produce frame of tens of KB is not copied out of
    them. One a read cut after its head (a produce frame larger than a read, mostly) is
    read on straight into a buffer of its size, its rest in one read when the stream
    holds it, and handed over from there: not read in ``READ_BYTES`` pieces that were
    then joined, copied whole and sliced (three copies of each crossing batch)."""

    def __init__(self, sock: socket.socket, owner: Actor,
                 deliver: Callable[[bytes, bytes | memoryview, bytes | None], None],
                 on_closed: Callable[[DirectInbound], None]) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.owner = owner
        self.deliver = deliver
        self.on_closed = on_closed
        self.buf = bytearray()  # the start of a frame the last read cut (its head cut)
        self.need = 0  # bytes ``buf`` must hold before it is parsed (its head whole)
        # A frame a read cut after its head, small or large, read on into a buffer of its
        # size: only once its announced lengths are checked against the node's limits.
        self.big: bytearray | None = None
        self.filled = 0  # bytes of ``big`` read so far
        self.skip = 0  # bytes still on the stream of a frame refused for its announced size
        self.max_frame = owner.node.max_frame_bytes
        owner.watch_fd(self.fd, self.on_readable, _POLLIN)

    def on_readable(self, _mask: int) -> None:
        """Read what the stream holds, up to ``READS_PER_TURN`` reads, and deliver every
        whole frame. One read a turn was too little: a produce frame is larger than a
        read, so each took two turns of the loop, and the small answers queued behind
        them on the same stream waited milliseconds."""
        delivered = 0
        for _ in range(READS_PER_TURN):
            skip = self.skip
            if skip:  # the rest of a refused frame: read and dropped, the stream kept in step
                data = self._recv(min(skip, READ_BYTES))
                if data is None:
                    return
                self.skip = skip - len(data)
                continue
            big = self.big
            if big is not None:  # the rest of one large frame, into its buffer
                wanted = len(big) - self.filled
                try:
                    got = self.sock.recv_into(memoryview(big)[self.filled:])
                except BlockingIOError:
                    return
                except OSError:
                    got = 0
                if not got:
                    self.close()
                    return
                self.filled += got
                if got < wanted:
                    return  # the stream is drained
                self.big = None
                self._deliver_big(big)
                delivered += 1
                if self.fd < 0 or delivered >= FRAMES_PER_TURN:
                    return  # a delivery closed it, or the loop's turn
                continue
            data = self._recv(READ_BYTES)
            if data is None:
                return
            delivered += self._take(data)
            if self.fd < 0:
                return  # a delivery closed it
            if len(data) < READ_BYTES:
                return  # the stream is drained
            if delivered >= FRAMES_PER_TURN:
                return  # many small frames: their handlers run this turn; the loop's turn

    def _deliver_big(self, big: bytearray) -> None:
        t_len, f_len, l_len = HEAD.unpack_from(big, 0)
        f_at = HEAD_SIZE + t_len
        l_at = f_at + f_len
        view = memoryview(big)
        self.deliver(bytes(view[HEAD_SIZE:f_at]), view[f_at:l_at],
                     bytes(view[l_at:]) if l_len else None)

    def _take(self, data: bytes) -> int:
        """Deliver the whole frames ``data`` completes; keep the rest. How many were."""
        if self.buf:  # the rest of a frame whose head the last read cut
            self.buf += data
            if len(self.buf) < self.need:
                return 0
            data = bytes(self.buf)
            self.buf = bytearray()
        at = 0
        end = len(data)
        deliver = self.deliver
        unpack = HEAD.unpack_from
        view = memoryview(data)
        count = 0
        while end - at >= HEAD_SIZE:
            t_len, f_len, l_len = unpack(data, at)
            start = at + HEAD_SIZE
            stop = start + t_len + f_len + l_len
            if stop > end:
                # its head read, the rest still on the stream: into a buffer of its size,
                # unless the sizes announced are over the limits (a frame over the node's
                # frame limit, legs over four times it as ZeroMQ's MAXMSGSIZE; the name's
                # length is 16 bits): then refused as the gateway refuses one, and its
                # bytes read and dropped, not buffered (up to 8 GB announced)
                if f_len > self.max_frame or l_len > 4 * self.max_frame:
                    self._refuse(data[start:start + t_len] if start + t_len <= end else b"",
                                 f_len, l_len)
                    self.skip = stop - end
                    return count
                big = self.big = bytearray(stop - at)
                big[:end - at] = view[at:]
                self.filled = end - at
                return count
            f_at = start + t_len
            l_at = f_at + f_len
            deliver(data[start:f_at], view[f_at:l_at], data[l_at:stop] if l_len else None)
            at = stop
            count += 1
        if at < end:  # a head cut
            self.buf = bytearray(view[at:])
            self.need = HEAD_SIZE
        return count

    def _recv(self, size: int) -> bytes | None:
        """Up to ``size`` bytes read, or None: nothing to read now, or the stream ended
        (closed here)."""
        try:
            data = self.sock.recv(size)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:
            self.close()
            return None
        return data

    def _refuse(self, target: bytes, f_len: int, l_len: int) -> None:
        self.owner.node.metrics.incr("direct_link_frames_refused")
        self.owner.node.dead_letters.record(
            f"direct link frame over the limit ({f_len} bytes announced, trace legs "
            f"{l_len}; limit {self.max_frame} bytes)", receiver=target.decode("utf-8", "replace"))

    def close(self) -> None:
        self.big = None  # a frame read in part: its buffer not kept
        self.buf = bytearray()
        self.skip = 0
        if self.fd < 0:
            return
        self.owner.unwatch_fd(self.fd)
        self.sock.close()
        self.fd = -1
        self.on_closed(self)


def listen(path: Path) -> socket.socket:
    """The gateway's listening socket for direct links (a stale file replaced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.bind(str(path))
    sock.listen(64)
    return sock


def accept_all(listener: socket.socket) -> tuple[list[socket.socket], OSError | None]:
    """The connections waiting; and the error that stopped the accepting when it was not
    "none left" (no descriptor: EMFILE, ENFILE, ...), which leaves the listener readable."""
    accepted: list[socket.socket] = []
    while True:
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return accepted, None
        except OSError as exc:
            if exc.errno == errno.ECONNABORTED:
                continue
            return accepted, exc
        conn.setblocking(False)
        accepted.append(conn)
