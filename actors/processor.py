"""Processor: owns client connections; reads requests, writes responses in order.

Its poll loop waits on its mailbox and on every socket it owns. Each turn:
adopt new connections, queue the responses that arrived, read what sockets
have, hand completed requests on, write, clean up closed connections (the
order of Kafka's Processor.run). The protocol of each connection (framing,
the size check, sequence numbers, the in-flight bound, in-order release)
is a socket-free core, actors/core/kafka_connection.py; this shell owns the
sockets, the poller, the writing and the bounds, and turns the core's events
into messages.

Writing: a response is a list of pieces, bytes and file regions (a Fetch's
records, sent from their segment file). Answers are queued as they arrive
and written when the turn ends, so the answers one turn gives a connection
cost one ``sendmsg``: bytes of consecutive pieces, over several responses,
go out in one ``sendmsg``; a region goes out with
``os.sendfile`` and its descriptor is closed once it is sent (or when the
connection goes). A connection that cannot use sendfile (TLS, once it is
wired in: the bytes must pass through the encryption) reads a region a chunk
at a time into memory and writes the chunk as bytes, one chunk per
connection at a time. Partial writes leave the rest for the next POLLOUT.

TLS (a connection of an SSL or SASL_SSL listener, known from its id:
actors/acceptor.py ``listener_of``): a socket-free
:class:`~actors.security.tls_connection.TlsConnection` per connection. What
the socket reads goes into it; the handshake advances as far as those bytes
allow, never blocking the loop; once it is done, the decrypted bytes go to
the protocol core as a plaintext connection's would. Bytes to write are
encrypted in ``_send_buffers`` into ``tls_out``, which is written before
anything else is encrypted (so a client that does not read holds at most
one gather of encrypted bytes beyond its unsent answers). A handshake that
fails is logged once with the peer and the reason, its alert flushed, and
the connection closed.

SASL (SASL_PLAINTEXT, SASL_SSL): a
:class:`~actors.security.sasl.SaslConnection` per connection decides every
request before it goes on. Before authentication only ApiVersions and the
SASL APIs pass; SaslHandshake and SaslAuthenticate are answered here (the
state is the connection's), through the same in-order release as the
handlers' answers. A failed authentication is answered
SASL_AUTHENTICATION_FAILED with a message, logged once with the peer, and
the connection closed ``connection.failed.authentication.delay.ms`` after
the answer is written (Kafka's delay: the client reads the refusal before
the close, and a client retrying a wrong password cannot make the broker
spin). As in Kafka, an unsupported mechanism and a request out of turn
while authenticating are failed authentications too. During the delay
nothing is served: the socket is watched only for the peer's close or
reset, which closes it at once (bytes it sends are dropped). Other
refused requests close the connection once their answer is written.

Bounds (a connection is read only while under all of them):

- ``max.inflight.requests.per.connection``: requests read and not answered
  (the core's in-flight bound);
- ``queued.max.requests`` and ``queued.max.request.bytes``: requests, and
  their bytes, read and not answered over all of this Processor's
  connections (its share of each). A request's bytes are counted from its
  size prefix on, and a request begun is read to its end, as Kafka's memory
  pool allocates a request whole;
- ``max.unsent.response.bytes.per.connection``: answers queued for a
  connection and not yet written. A client that does not read stops being
  read until its answers drain, so it cannot make the broker hold more.
"""

from __future__ import annotations

import os
import socket
import ssl
from bisect import bisect_left
from collections import deque
from functools import partial
from itertools import islice
from typing import Any

import zmq

from actors.core.file_regions import close_region
from actors.core.idle_expiry import IdleExpiry
from actors.core.kafka_connection import (
    CLOSING,
    OPEN,
    ConnectionProtocolError,
    FrameRefused,
    KafkaConnection,
    Request,
)
from actors.metrics import BUCKET_NS, latency_keys
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.security.sasl import (
    MAX_RECEIVE_BYTES,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Action,
    SaslConnection,
    SaslState,
)
from actors.security.scram import AuthenticationFailed, CredentialLookup
from actors.security.tls import ANONYMOUS
from actors.security.tls_connection import TlsConnection, TlsError, TlsState
from actors.topology import Topology, listener_of
from wire import kafka_codec as kc
from wire.api_versions import STAGES, api_name, api_snake_name
from wire.broker_messages import (
    ConnectionClosed,
    GetStats,
    KafkaRequest,
    KafkaResponse,
    NewConnection,
)

READ_CHUNK = 256 * 1024
WRITE_GATHER = 64  # byte pieces handed to one sendmsg
REGION_CHUNK = 256 * 1024  # a region read into memory at a time (no sendfile)


_METRIC_KEYS: dict[int, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {}


def metric_keys(api_key: int) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """The API's counter names, built once (this runs for every response): requests,
    their total time, the time of each stage, the latency buckets (``latency_keys``)."""
    keys = _METRIC_KEYS.get(api_key)
    if keys is None:
        api = api_name(api_key)
        keys = _METRIC_KEYS[api_key] = (
            f"requests_total|api={api}",
            f"request_time_ns_total|api={api}",
            tuple(f"request_stage_time_ns_total|api={api},stage={s}" for s in STAGES),
            latency_keys(api),
        )
    return keys


# Poll flags as plain ints: zmq's IntFlag members build an enum on every | and &.
_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)

class _Region:
    """A file region being sent: what is left of it. Owns its descriptor."""

    __slots__ = ("fd", "left", "position")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd = fd
        self.position = position
        self.left = length


class _Done:
    """The end of one response in the send queue: written up to here, it is finished."""

    __slots__ = ("arrived_ns", "response")

    def __init__(self, response: KafkaResponse, arrived_ns: int) -> None:
        self.response = response
        self.arrived_ns = arrived_ns


class _Conn:
    """A socket and what the shell keeps about it; the protocol state is ``core``."""

    __slots__ = (
        "auth_failed",
        "buffer_charge",
        "can_sendfile",
        "conn_id",
        "core",
        "fd",
        "handler",
        "listener",
        "mask",
        "out",
        "peer_host",
        "peer_port",
        "principal",
        "reading",
        "request_sizes",
        "sasl",
        "sock",
        "tls",
        "tls_out",
        "traces",
        "unsent",
    )

    def __init__(self, conn_id: int, sock: socket.socket, peer_host: str, peer_port: int,
                 core: KafkaConnection[tuple[KafkaResponse, int]], can_sendfile: bool,
                 handler: Address) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.peer_host = peer_host
        self.peer_port = peer_port
        # answers carry the ns they reached this Processor (the "send" stage starts there)
        self.core = core
        # the send queue: bytes (memoryview), file regions (_Region), response ends (_Done)
        self.out: deque[Any] = deque()
        self.unsent = 0  # bytes in ``out``
        # plaintext sockets send regions with sendfile; a TLS connection would not
        self.can_sendfile = can_sendfile
        # POLLIN wanted: False while the connection is over any bound
        self.reading = True
        self.traces: dict[int, tuple[int, int, int]] = {}  # seq -> (trace id, in ns, bytes)
        # queued.max.request.bytes: bytes this connection holds, read into the core
        # (a begun frame counted whole) and handed on unanswered (in request order)
        self.buffer_charge = 0
        self.request_sizes: deque[int] = deque()
        self.mask = 0
        self.listener = listener_of(conn_id)
        self.handler = handler  # the RequestHandler of all its requests
        # TLS listeners: the session, and encrypted bytes not yet written
        self.tls: TlsConnection | None = None
        self.tls_out = bytearray()
        self.principal = ANONYMOUS  # User:<certificate subject> with mutual TLS
        self.sasl: SaslConnection | None = None  # SASL listeners: the exchange's state
        # its SASL authentication failed: closed a delay after the refusal is written
        self.auth_failed = False


class Processor(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(
        self, node: Any, name: str, *, topology: Topology, config: Config, clock: Clock,
        sendfile: bool = True, listener_protocols: tuple[str, ...] = ("PLAINTEXT",),
        tls_context: ssl.SSLContext | None = None,
        sasl_mechanisms: tuple[str, ...] = (), credentials: CredentialLookup | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.clock = clock
        self._monotonic_ns = clock.monotonic_ns  # read a few times per request
        self.max_request = int(config["socket.request.max.bytes"])
        self.max_in_flight = max(1, int(config["max.inflight.requests.per.connection"]))
        # queued.max.requests bounds the request path (Kafka's request queue): this
        # Processor's requests sent on and not yet answered, over all connections.
        # Mailboxes themselves are unbounded, so answers never wait on a full queue.
        self.max_queued = max(1, int(config["queued.max.requests"]) // topology.num_processors)
        # queued.max.request.bytes likewise bounds their bytes (-1: no bound)
        max_bytes = int(config["queued.max.request.bytes"])
        self.max_request_bytes = (max(1, max_bytes // topology.num_processors) if max_bytes > 0
                                  else None)
        self.max_unsent = int(config["max.unsent.response.bytes.per.connection"])
        self.sndbuf = int(config["socket.send.buffer.bytes"])
        self.rcvbuf = int(config["socket.receive.buffer.bytes"])
        self.max_idle_ms = int(config["connections.max.idle.ms"])
        self.auth_fail_delay_ms = int(config["connection.failed.authentication.delay.ms"])
        # Plaintext connections send file regions with sendfile; False makes every
        # connection take the chunked path a TLS connection needs.
        self.sendfile = sendfile
        # per listener index: its security protocol; the TLS context of SSL listeners
        self.listener_protocols = listener_protocols
        self.tls_context = tls_context
        self.sasl_mechanisms = sasl_mechanisms
        self.credentials = credentials
        self.reauth_ms = int(config["connections.max.reauth.ms"])

    def setup(self) -> None:
        # A restart loses the connections (their sockets belong to the crashed
        # state): clients see a disconnect and retry, as after a broker bounce.
        for conn in list(getattr(self, "conns", {}).values()):
            self._close(conn, "processor restarted")
        self.conns: dict[int, _Conn] = {}
        self.by_fd: dict[int, _Conn] = {}
        self.stopping = False
        self.stage_ns = [0] * len(STAGES)
        self.responses = 0
        self.queued = 0
        self.request_bytes = 0  # queued.max.request.bytes: held over all connections
        self.peak_request_bytes = 0
        self.paused: dict[int, None] = {}  # connections waiting for processor-wide room
        self.idle = IdleExpiry(self.max_idle_ms)
        # No connection expires before this (None: none tracked). Activity only moves
        # expiries later and a new connection expires after the ones before it, so a
        # turn looks at the table only once this is due (then takes the true one).
        self.idle_due_ms: int | None = None
        self.counts = self.node.metrics.mine()  # setup runs in this actor's thread
        # connections given answers this turn, written once it ends (``_write_answered``)
        self.answered: dict[int, _Conn] = {}
        # connections that failed authentication, answered: conn_id -> when to close them
        # (ms, monotonic). One delay for all, so the first is always the earliest.
        self.close_at: dict[int, int] = {}

    # ------------------------------------------------------------ connections
    @handles(NewConnection)
    def on_new_connection(self, msg: NewConnection) -> None:
        sock = socket.socket(fileno=msg.fd)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.sndbuf > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        if self.rcvbuf > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        protocol = self._protocol_of(msg.conn_id)
        uses_tls = protocol in ("SSL", "SASL_SSL")
        conn = _Conn(msg.conn_id, sock, msg.peer_host, msg.peer_port,
                     KafkaConnection(self.max_request, self.max_in_flight),
                     self.sendfile and not uses_tls, self.topology.handler_for_conn(msg.conn_id))
        if uses_tls:
            if self.tls_context is None:  # the broker makes one for any TLS listener
                raise RuntimeError(f"listener {conn.listener} is {protocol} without a TLS "
                                   f"context")
            conn.tls = TlsConnection(self.tls_context, f"{msg.peer_host}:{msg.peer_port}")
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            lookup = self.credentials or (lambda _user, _mechanism: None)
            conn.sasl = SaslConnection(self.sasl_mechanisms, lookup, self.reauth_ms,
                                       f"{msg.peer_host}:{msg.peer_port}")
            # Kafka's sasl.server.max.receive.size until the client has authenticated
            conn.core.set_max_request_bytes(min(self.max_request, MAX_RECEIVE_BYTES))
        if self.stopping:
            self._close(conn, "broker is shutting down")
            return
        self.conns[conn.conn_id] = conn
        self.by_fd[conn.fd] = conn
        self.idle.update(conn.conn_id, self._monotonic_ns() // 1_000_000)
        if self.idle_due_ms is None:  # the first connection tracked
            self.idle_due_ms = self.idle.next_expiry_ms()
        self._refresh(conn)

    def _protocol_of(self, conn_id: int) -> str:
        index = listener_of(conn_id)
        protocols = self.listener_protocols
        return protocols[index] if index < len(protocols) else "PLAINTEXT"

    def _update_mask(self, conn: _Conn) -> None:
        mask = 0
        if conn.reading and conn.core.state is OPEN and not self.stopping:
            mask |= _POLLIN
        elif conn.conn_id in self.close_at:
            # its failed-authentication delay: watched for the peer's close (or reset),
            # which ends the wait at once; what it sends is read and dropped
            mask |= _POLLIN
        if conn.out or conn.tls_out:
            mask |= _POLLOUT
        if mask == conn.mask:
            return
        if conn.mask == 0:
            self.watch_fd(conn.fd, partial(self._on_fd, conn.fd), mask)
        elif mask == 0:
            self.unwatch_fd(conn.fd)
        else:
            self.modify_fd(conn.fd, mask)
        conn.mask = mask

    def _close(self, conn: _Conn, why: str) -> None:
        if conn.mask:
            self.unwatch_fd(conn.fd)
            conn.mask = 0
        self.conns.pop(conn.conn_id, None)
        self.by_fd.pop(conn.fd, None)
        self.paused.pop(conn.conn_id, None)
        self.answered.pop(conn.conn_id, None)
        self.close_at.pop(conn.conn_id, None)
        self.idle.remove(conn.conn_id)
        for response, _arrived in conn.core.unreleased:  # answers never to be written
            for region in response.regions:
                close_region(region)
        self.queued -= conn.core.close()  # their answers, if any, are dropped on arrival
        self.request_bytes -= conn.buffer_charge + sum(conn.request_sizes)
        conn.buffer_charge = 0
        conn.request_sizes.clear()
        for piece in conn.out:
            if type(piece) is _Region:
                close_region(piece)  # type: ignore[arg-type]
        conn.out.clear()
        conn.unsent = 0
        if conn.tls is not None:
            conn.tls.close()  # a close_notify (or the alert of a failed handshake)
            conn.tls_out += conn.tls.data_to_send()
            if conn.tls_out:
                try:  # best effort: the client learns why, if its socket has room
                    conn.sock.send(conn.tls_out)
                except OSError:
                    pass
                conn.tls_out.clear()
        try:
            conn.sock.close()
        except OSError:
            pass
        self.log.debug("connection {} from {}:{} closed: {}", conn.conn_id, conn.peer_host,
                       conn.peer_port, why)
        self.tell(self.topology.listener_acceptor(conn.listener),
                  ConnectionClosed(conn.conn_id, conn.peer_host))
        if self.paused:
            self._resume_paused()

    def _on_fd(self, fd: int, mask: int) -> None:
        conn = self.by_fd.get(fd)
        if conn is None:
            self.unwatch_fd(fd)
            return
        if conn.conn_id in self.close_at:  # waiting out its failed-authentication delay
            if mask & _POLLIN or not mask & _POLLOUT:  # data, a close, or an error
                self._read_during_auth_delay(conn)
                if conn.conn_id not in self.conns:
                    return
            if mask & _POLLOUT:  # encrypted bytes of the refusal still going out
                self._write(conn)
            if conn.conn_id in self.conns:
                self._update_mask(conn)
            return
        self.idle.update(conn.conn_id, self._monotonic_ns() // 1_000_000)
        # POLLIN may be from before this turn's answers made the connection CLOSING
        # or put it over a bound
        decided = False
        if mask & _POLLIN and conn.reading and conn.core.state is OPEN:
            decided = self._read(conn)
        if mask & _POLLOUT and conn.conn_id in self.conns:
            self._write(conn)
            decided = False  # what it wrote may let the connection read again
        if not decided:
            self._refresh(conn)
        elif conn.conn_id in self.conns:
            # _take_frames decided whether it reads, after the frames it took and with
            # nothing changed since: _refresh would decide the same (three calls a
            # request), so only the mask is left to set
            self._update_mask(conn)

    # ----------------------------------------------------------------- bounds
    def _refresh(self, conn: _Conn) -> None:
        """Decide again whether ``conn`` is read (taking frames read while it was not),
        then its poll mask."""
        if conn.conn_id not in self.conns:
            return
        was_reading = conn.reading
        self._decide_reading(conn)
        if conn.reading and not was_reading and conn.core.buffered_bytes:
            self._take_frames(conn)  # frames read while the connection was stopped
            if conn.conn_id not in self.conns:
                return
        self._update_mask(conn)

    def _decide_reading(self, conn: _Conn) -> None:
        """Read ``conn`` only while it is under every bound (see the module docstring).

        A connection stopped by its own state (in flight, unsent answers) is
        decided again on its own events; one stopped by a bound of the whole
        Processor waits in ``paused`` for room. Stops for the byte bounds are
        counted (metrics) when they begin.
        """
        core = conn.core
        was_reading = conn.reading
        if not core.reading or conn.unsent > self.max_unsent or self.stopping:
            conn.reading = False
            self.paused.pop(conn.conn_id, None)
            if was_reading and conn.unsent > self.max_unsent:
                self.node.metrics.incr("connections_stopped_unsent_response_bytes")
            return
        over_bytes = (self.max_request_bytes is not None
                      and self.request_bytes >= self.max_request_bytes
                      and not core.pending_frame_bytes)
        if self.queued >= self.max_queued or over_bytes:
            conn.reading = False
            self.paused[conn.conn_id] = None
            if was_reading and over_bytes:
                self.node.metrics.incr("connections_paused_queued_request_bytes")
            return
        conn.reading = True
        self.paused.pop(conn.conn_id, None)

    def _resume_paused(self) -> None:
        """Room came free: connections waiting for it are decided again, oldest first."""
        for conn_id in list(self.paused):
            if self.queued >= self.max_queued or (
                    self.max_request_bytes is not None
                    and self.request_bytes >= self.max_request_bytes):
                break
            other = self.conns.get(conn_id)
            if other is None:
                self.paused.pop(conn_id, None)
            else:
                self._refresh(other)

    def _charge_buffer(self, conn: _Conn) -> None:
        """Count what the core holds against queued.max.request.bytes: its bytes, and a
        begun frame whole."""
        core = conn.core
        charge = core.buffered_bytes
        if charge:  # a frame is begun only in bytes held (nearly always none: no call)
            charge = max(charge, core.pending_frame_bytes)
        self.request_bytes += charge - conn.buffer_charge
        conn.buffer_charge = charge
        if self.request_bytes > self.peak_request_bytes:
            self.peak_request_bytes = self.request_bytes

    # ------------------------------------------------------------------ read
    def _read(self, conn: _Conn) -> bool:
        """Read what the socket has and take its frames; True when it ended in
        ``_take_frames`` deciding whether the connection reads on, False when it read
        nothing (nothing decided) or the connection was closed."""
        size = READ_CHUNK
        if self.max_request_bytes is not None and self.request_bytes >= self.max_request_bytes:
            # Over queued.max.request.bytes: only the rest of the frame begun, never
            # the start of the next one (Kafka reads a request into its own buffer).
            size = min(size, conn.core.pending_frame_bytes - conn.core.buffered_bytes)
            if size <= 0:
                return False
        try:
            data = conn.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._close(conn, f"read error: {exc}")
            return False
        if not data:
            self._close(conn, "closed by peer")
            return False
        if conn.tls is not None:
            data = self._decrypt(conn, data)
            if conn.conn_id not in self.conns or not data:
                return False
        conn.core.receive_data(data)
        return self._take_frames(conn)

    def _decrypt(self, conn: _Conn, data: bytes) -> bytes:
        """Feed TLS bytes to the session; the application bytes they complete (or b"")."""
        tls = conn.tls
        assert tls is not None
        was_handshaking = tls.state is TlsState.HANDSHAKING
        try:
            tls.receive_data(data)
        except TlsError as exc:
            self.node.metrics.incr("tls_handshakes_failed")
            self.log.warning("connection {} on listener {}: {}", conn.conn_id, conn.listener,
                             exc)
            self._close(conn, "TLS handshake failed")
            return b""
        conn.tls_out += tls.data_to_send()
        if was_handshaking and tls.handshake_complete:
            conn.principal = tls.principal
            self.node.metrics.incr("tls_handshakes")
            self.log.debug("connection {} from {}:{}: TLS established ({}, {}), principal {}",
                           conn.conn_id, conn.peer_host, conn.peer_port, tls.version,
                           tls.cipher, conn.principal)
        if conn.tls_out:
            self._flush_tls(conn)
            if conn.conn_id not in self.conns:
                return b""
        if not tls.handshake_complete:
            return b""
        plain = bytearray()
        buffer = memoryview(bytearray(READ_CHUNK))
        while True:
            try:
                size = tls.read_into(buffer)
            except TlsError as exc:
                self.log.warning("connection {} from {}: {}; closing it", conn.conn_id,
                                 conn.peer_host, exc)
                self._close(conn, "TLS error")
                return b""
            if not size:
                break
            plain += buffer[:size]
        if tls.state is TlsState.CLOSED and not plain:
            self._close(conn, "closed by peer (TLS)")
            return b""
        return bytes(plain)

    def _flush_tls(self, conn: _Conn) -> bool:
        """Write encrypted bytes waiting; True when none are left."""
        try:
            sent = conn.sock.send(conn.tls_out)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._close(conn, f"write error: {exc}")
            return False
        del conn.tls_out[:sent]
        return not conn.tls_out

    def _take_frames(self, conn: _Conn) -> bool:
        """Dispatch the complete frames the core has, within the request-count bounds;
        True when it then decided whether the connection reads (False: it was closed).

        Also runs when a stopped connection may read again, on bytes read
        earlier; the core refuses a bad size prefix wherever it is found.
        """
        core = conn.core
        while self.queued < self.max_queued:
            event = core.next_event()
            if type(event) is Request:
                self._dispatch(conn, event)
                if conn.conn_id not in self.conns:  # SASL closed it, answering here
                    return False
            elif type(event) is FrameRefused:
                self.node.metrics.incr("requests_oversized" if event.size > 0
                                       else "requests_malformed")
                self.log.warning(
                    "closing connection {} from {}: request size {} outside [8, {}] "
                    "(socket.request.max.bytes)", conn.conn_id, conn.peer_host, event.size,
                    event.max_request_bytes)
                self._close(conn, "bad request size")
                return False
            else:  # NEED_DATA, or PAUSED at the in-flight bound
                break
        self._charge_buffer(conn)
        self._decide_reading(conn)
        return True

    def _dispatch(self, conn: _Conn, request: Request) -> None:
        seq = request.seq
        self.queued += 1
        size = len(request.frame) + 4
        conn.request_sizes.append(size)
        self.request_bytes += size  # moves from the buffer's charge (recounted after)
        now = self._monotonic_ns()
        if conn.sasl is not None and self._sasl_gate(conn, request, now):
            return
        tracer = self.node.tracer
        tid = tracer.sample() if tracer.enabled else 0
        msg = KafkaRequest(conn.conn_id, seq, self.name, request.api_key, request.api_version,
                           request.correlation_id, request.frame, now, conn.principal,
                           conn.peer_host)
        if tid:  # the request record (client leg) is written when the request is finished
            conn.traces[seq] = (tid, self.clock.wall_ns(), size)
            self.tell_traced(conn.handler, msg, tid)
        elif self._trace[0]:  # read while a traced message is handled: a chain of its own
            self.tell_traced(conn.handler, msg, 0)
        else:  # tell_traced's work with no trace to set or restore (nearly every request)
            self.tell(conn.handler, msg)

    # ------------------------------------------------------------------ SASL
    def _sasl_gate(self, conn: _Conn, request: Request, now_ns: int) -> bool:
        """SASL's say on a request; True when it was answered (or refused) here."""
        sasl = conn.sasl
        assert sasl is not None
        now_ms = self.clock.wall_ms()
        if sasl.expects_raw_tokens and sasl.state is SaslState.AUTHENTICATE:
            self._sasl_raw_token(conn, request, now_ns, now_ms)
            return True
        verdict = sasl.on_request(request.api_key, now_ms)
        if verdict.action is Action.PASS:
            if sasl.authenticated:
                conn.principal = sasl.principal or conn.principal
            return False
        frame = b""
        close = verdict.close
        respond = verdict.respond
        try:
            header = kc.parse_request_header(request.frame)
            if verdict.action is Action.SASL:
                body = kc.decode_request(header, request.frame)
                if request.api_key == SASL_HANDSHAKE:
                    shake = sasl.handshake(header.api_version, str(body.mechanism), now_ms)
                    data: dict[str, Any] = {"error_code": shake.error_code,
                                            "mechanisms": list(shake.mechanisms)}
                    close = shake.close
                    if close:  # Kafka's UnsupportedSaslMechanismException: a delayed close
                        conn.auth_failed = True
                        self.log.warning("connection {} from {}: {}", conn.conn_id,
                                         conn.peer_host, sasl.failure_reason)
                else:
                    result = sasl.authenticate(header.api_version, bytes(body.auth_bytes),
                                               now_ms)
                    data = {"error_code": result.error_code,
                            "error_message": result.error_message,
                            "auth_bytes": result.auth_bytes,
                            "session_lifetime_ms": result.session_lifetime_ms}
                    close = result.close
                    if close:
                        conn.auth_failed = True
                        self.node.metrics.incr("sasl_authentication_failed")
                        self.log.warning("connection {} on listener {}: {}", conn.conn_id,
                                         conn.listener, sasl.failure_reason)
                    elif sasl.authenticated:
                        conn.principal = sasl.principal or conn.principal
                        conn.core.set_max_request_bytes(self.max_request)
                        self.log.debug("connection {} from {}:{} authenticated as {} ({})",
                                       conn.conn_id, conn.peer_host, conn.peer_port,
                                       conn.principal, sasl.mechanism)
                frame = kc.encode_response(header, data)
            else:  # refused
                if close:
                    if not sasl.authenticated:
                        # a request out of turn while authenticating (Kafka's
                        # IllegalSaslStateException): closed after the delay, as a failed
                        # login
                        conn.auth_failed = True
                    self.log.warning("connection {} from {}: {}; closing it", conn.conn_id,
                                     conn.peer_host, sasl.failure_reason or verdict.message)
                else:
                    # after a login a SASL request is answered ILLEGAL_SASL_STATE and the
                    # connection kept, unlogged but at debug (Kafka's KafkaApis answers it
                    # and logs nothing): a logged-in client cannot flood the log
                    self.log.debug("connection {} from {}: {}", conn.conn_id, conn.peer_host,
                                   verdict.message)
                if respond and request.api_key == SASL_HANDSHAKE:
                    # no mechanisms: Kafka's error answers to it (SaslHandshakeRequest's
                    # getErrorResponse, KafkaApis after the login) list none
                    frame = kc.encode_response(header, {"error_code": verdict.error_code,
                                                        "mechanisms": []})
                elif respond and request.api_key == SASL_AUTHENTICATE:
                    frame = kc.encode_response(header, {
                        "error_code": verdict.error_code, "error_message": verdict.message,
                        "auth_bytes": b"", "session_lifetime_ms": 0})
                else:
                    respond = False
        except Exception as exc:  # a malformed SASL request: Kafka closes the connection
            self.log.warning("connection {} from {}: bad SASL request ({}); closing it",
                             conn.conn_id, conn.peer_host, exc)
            frame, respond, close = b"", False, True
        self.on_response(KafkaResponse(conn.conn_id, request.seq, frame, respond and bool(frame),
                                       close, request.api_key, request.correlation_id, now_ns,
                                       [0, 0, 0]))
        return True

    def _sasl_raw_token(self, conn: _Conn, request: Request, now_ns: int, now_ms: int) -> None:
        """After a SaslHandshake v0 the client sends bare size-prefixed tokens, not requests;
        the answer goes back the same way (a failure closes without one, as Kafka)."""
        sasl = conn.sasl
        assert sasl is not None
        frame, close = b"", False
        try:
            answer = sasl.raw_token(bytes(request.frame), now_ms)
            frame = len(answer).to_bytes(4, "big") + answer
        except AuthenticationFailed:
            close = conn.auth_failed = True
            self.node.metrics.incr("sasl_authentication_failed")
            self.log.warning("connection {} on listener {}: {}", conn.conn_id, conn.listener,
                             sasl.failure_reason)
        if sasl.authenticated:
            conn.principal = sasl.principal or conn.principal
            conn.core.set_max_request_bytes(self.max_request)
            self.log.debug("connection {} from {}:{} authenticated as {} ({})", conn.conn_id,
                           conn.peer_host, conn.peer_port, conn.principal, sasl.mechanism)
        self.on_response(KafkaResponse(conn.conn_id, request.seq, frame, bool(frame), close,
                                       SASL_AUTHENTICATE, request.correlation_id, now_ns,
                                       [0, 0, 0]))

    # ----------------------------------------------------------------- write
    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        conn = self.conns.get(msg.conn_id)
        if conn is None:
            for region in msg.regions:  # the client went away; nothing to write to
                close_region(region)
            return
        now = self._monotonic_ns()
        self.idle.update(conn.conn_id, now // 1_000_000)
        try:
            ready = conn.core.receive_response(msg.seq, (msg, now), msg.close)
        except ConnectionProtocolError as exc:
            for region in msg.regions:
                close_region(region)
            self.log.error("connection {} from {}: {}; closing it", conn.conn_id,
                           conn.peer_host, exc)
            if conn.out:  # the answers released before it still go out, if the socket takes them
                self._write(conn)
            if conn.conn_id in self.conns:
                self._close(conn, str(exc))
            return
        released = ready.responses
        if released:
            self.queued -= len(released)
            sizes = conn.request_sizes
            for response, arrived_ns in released:
                if sizes:
                    self.request_bytes -= sizes.popleft()
                if response.respond and response.frame:
                    self._queue(conn, response, arrived_ns)
                else:
                    for region in response.regions:
                        close_region(region)
                    self._finished(conn, response, arrived_ns)
        # Written at the end of the turn (``_write_answered``): the answers a connection
        # gets in one turn go out in one sendmsg, and its bounds are decided once.
        self.answered[conn.conn_id] = conn

    def _write_answered(self) -> None:
        """Write the connections answered this turn, in the order they were answered."""
        while self.answered:
            answered, self.answered = self.answered, {}
            for conn in answered.values():
                if conn.conn_id not in self.conns:
                    continue
                if conn.out:
                    self._write(conn)
                    if conn.conn_id not in self.conns:
                        continue
                if conn.core.state is CLOSING and not conn.out:
                    self._close_answered(conn)
                    continue
                self._refresh(conn)
        if self.paused:
            self._resume_paused()

    def _queue(self, conn: _Conn, response: KafkaResponse, arrived_ns: int) -> None:
        """Put a response in the send queue: its bytes cut where its regions go."""
        out = conn.out
        frame = memoryview(response.frame)
        size = len(frame)
        start = 0
        for region in response.regions:
            if region.at > start:
                out.append(frame[start:region.at])
                start = region.at
            if region.length > 0:
                out.append(_Region(region.fd, region.position, region.length))
                size += region.length
            else:
                close_region(region)
        if start < len(frame):
            out.append(frame[start:] if start else frame)
        out.append(_Done(response, arrived_ns))
        conn.unsent += size

    def _write(self, conn: _Conn) -> None:
        """Write the send queue: bytes gathered into one sendmsg, regions with sendfile."""
        if conn.tls_out and not self._flush_tls(conn):
            return  # encrypted bytes first; a closed connection is out of the table
        out = conn.out
        while out:
            head = out[0]
            kind = type(head)
            if kind is _Done:
                out.popleft()
                self._finished(conn, head.response, head.arrived_ns)
                continue
            if kind is _Region:
                if not self._send_region(conn, head):
                    return
                continue
            buffers = []
            for piece in islice(out, WRITE_GATHER):
                kind = type(piece)
                if kind is memoryview:
                    buffers.append(piece)
                elif kind is _Region:
                    break
            try:
                sent = self._send_buffers(conn, buffers)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(conn, f"write error: {exc}")
                return
            conn.unsent -= sent
            while out:
                head = out[0]
                kind = type(head)
                if kind is _Done:
                    out.popleft()
                    self._finished(conn, head.response, head.arrived_ns)
                    continue
                if kind is not memoryview:
                    break
                left = len(head)
                if sent < left:  # the socket is full: the rest waits for POLLOUT
                    if sent:
                        out[0] = head[sent:]
                    return
                sent -= left
                out.popleft()
        if conn.core.state is CLOSING:
            self._close_answered(conn)

    def _close_answered(self, conn: _Conn) -> None:
        """A connection closing after a refused request, its answers written: closed now,
        or, when its authentication failed, once connection.failed.authentication.delay.ms
        has passed; meanwhile its socket is watched only for the peer closing or resetting
        it, and bytes it sends are dropped (``_read_during_auth_delay``)."""
        if not conn.auth_failed or self.auth_fail_delay_ms <= 0:
            self._close(conn, "closed after a refused request")
            return
        if conn.conn_id not in self.close_at:
            self.close_at[conn.conn_id] = (self._monotonic_ns() // 1_000_000
                                           + self.auth_fail_delay_ms)
        self._update_mask(conn)

    def _read_during_auth_delay(self, conn: _Conn) -> None:
        """The peer of a connection waiting out its failed-authentication delay moved: a
        close or a reset closes it now (the delay is for a client still reading, and the
        fd need not be held); bytes it sends are dropped (it is not served)."""
        self.node.metrics.incr("auth_delay_wakeups")
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            why = f"reset by peer ({exc.strerror or exc})"
        else:
            if data:
                return
            why = "closed by peer"
        self.node.metrics.incr("auth_delay_closed_by_peer")
        self._close(conn, f"authentication failed; {why} during "
                          f"connection.failed.authentication.delay.ms")

    @staticmethod
    def _send_buffers(conn: _Conn, buffers: list[memoryview]) -> int:
        """Write bytes; how many the socket took (raises BlockingIOError when none).

        The one place bytes meet the socket: a TLS connection (can_sendfile False,
        so file regions reach it as chunks of bytes too) encrypts them here into
        ``tls_out``, taking them all, but only once the last gather's encrypted
        bytes are written.
        """
        tls = conn.tls
        if tls is None:
            return conn.sock.sendmsg(buffers)
        if conn.tls_out:
            sent = conn.sock.send(conn.tls_out)
            del conn.tls_out[:sent]
            if conn.tls_out:
                raise BlockingIOError
        taken = 0
        try:
            for buffer in buffers:
                tls.send(buffer)
                taken += len(buffer)
        except TlsError as exc:
            raise OSError(str(exc)) from None
        conn.tls_out += tls.data_to_send()
        try:
            sent = conn.sock.send(conn.tls_out)
            del conn.tls_out[:sent]
        except (BlockingIOError, InterruptedError):
            pass  # POLLOUT writes the rest
        return taken

    def _send_region(self, conn: _Conn, region: _Region) -> bool:
        """Send (part of) the region at the head of the queue; False: stop writing now."""
        if conn.can_sendfile:
            try:
                sent = os.sendfile(conn.fd, region.fd, region.position, region.left)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                self._close(conn, f"write error: {exc}")
                return False
            if sent == 0:  # the file ends before the region: cut under it
                self._region_truncated(conn, region)
                return False
            region.position += sent
            region.left -= sent
            conn.unsent -= sent
            if region.left:
                return False  # the socket is full: the rest waits for POLLOUT
            conn.out.popleft()
            close_region(region)  # type: ignore[arg-type]
            return True
        # No sendfile (TLS): one chunk of the region in memory, sent as bytes.
        try:
            chunk = os.pread(region.fd, min(REGION_CHUNK, region.left), region.position)
        except OSError as exc:
            self._close(conn, f"read error on a file region: {exc}")
            return False
        if not chunk:
            self._region_truncated(conn, region)
            return False
        region.position += len(chunk)
        region.left -= len(chunk)
        if not region.left:
            conn.out.popleft()
            close_region(region)  # type: ignore[arg-type]
        conn.out.appendleft(memoryview(chunk))
        return True

    def _region_truncated(self, conn: _Conn, region: _Region) -> None:
        """The log was cut below what a response promised: the client must not get a
        response shorter than its size prefix. Kafka closes the connection too."""
        self.node.metrics.incr("responses_cut_by_truncation")
        self.log.warning("connection {} from {}: a response's log data was truncated while it "
                         "was sent ({} bytes missing at position {}); closing the connection",
                         conn.conn_id, conn.peer_host, region.left, region.position)
        self._close(conn, "log truncated under a response")

    def _finished(self, conn: _Conn, response: KafkaResponse, arrived_ns: int) -> None:
        """Account a request that is done: Kafka's request-time split, per API.

        request_queue: Processor to handler; local: the handler's own work;
        remote: waiting for partition shards, the purgatory or a coordinator;
        response_queue: handler to Processor; send: waiting behind earlier
        answers of the connection, then writing. They add up to the total.
        """
        now = self._monotonic_ns()
        q, local, remote = response.stages_ns
        total = now - response.recv_ns
        send = now - arrived_ns
        response_queue = total - q - local - remote - send
        if response_queue < 0:
            response_queue = 0
        stages = self.stage_ns
        stages[0] += q
        stages[1] += local
        stages[2] += remote
        stages[3] += response_queue
        stages[4] += send
        self.responses += 1
        # this thread's counters, added to directly (a call per count was a share of a
        # small request)
        counts = self.counts
        # metric_keys and latency_key, inline once the API's keys are built
        keys = _METRIC_KEYS.get(response.api_key) or metric_keys(response.api_key)
        count_key, total_key, (k_q, k_local, k_remote, k_rq, k_send), latency = keys
        counts[count_key] += 1
        counts[total_key] += total
        counts[latency[bisect_left(BUCKET_NS, total)]] += 1
        counts[k_q] += q
        counts[k_local] += local
        counts[k_remote] += remote
        counts[k_rq] += response_queue
        counts[k_send] += send
        traced = conn.traces.pop(response.seq, None)
        if traced is not None:
            tid, in_ns, size = traced
            out_bytes = (len(response.frame) + sum(r.length for r in response.regions)
                         if response.respond else 0)
            self.node.tracer.request(tid, self.name, f"{conn.peer_host}:{conn.peer_port}",
                                     api_snake_name(response.api_key), conn.conn_id,
                                     response.correlation_id, response.api_key, size, out_bytes,
                                     in_ns, self.clock.wall_ns())

    # ------------------------------------------------------- idle connections
    def poll_timeout_ms(self) -> int | None:
        if self.answered:
            return 0  # answers to write (normally written before the loop polls again)
        due_ms = self.idle_due_ms
        if self.close_at:
            first = next(iter(self.close_at.values()))
            due_ms = first if due_ms is None else min(due_ms, first)
        return None if due_ms is None else max(0, due_ms - self._monotonic_ns() // 1_000_000)

    def on_turn(self) -> None:
        """Write what this turn answered; close connections quiet for connections.max.idle.ms.

        A connection waiting for the broker (requests in flight, or stopped for
        room of the whole Processor) is not idle; one whose client reads none
        of its answers is, as in Kafka: nothing moved in or out.
        """
        if self.answered:
            self._write_answered()
        if self.close_at:
            self._close_failed_authentications()
        due_ms = self.idle_due_ms
        if due_ms is None:
            return
        now_ms = self._monotonic_ns() // 1_000_000
        if now_ms < due_ms:
            return
        for conn in [self.conns[c] for c in self.idle.expired(now_ms) if c in self.conns]:
            if conn.core.in_flight or conn.conn_id in self.paused:
                self.idle.update(conn.conn_id, now_ms)
            else:
                self._close(conn, f"idle for {self.max_idle_ms} ms (connections.max.idle.ms)")
        self.idle_due_ms = self.idle.next_expiry_ms()

    def _close_failed_authentications(self) -> None:
        """Close the connections whose connection.failed.authentication.delay.ms is over."""
        now_ms = self._monotonic_ns() // 1_000_000
        for conn_id, at_ms in list(self.close_at.items()):
            if at_ms > now_ms:
                break  # the rest are later (one delay, in the order they were added)
            conn = self.conns.get(conn_id)
            if conn is None:
                self.close_at.pop(conn_id, None)
            else:
                self._close(conn, f"authentication failed, closed after "
                                  f"{self.auth_fail_delay_ms} ms "
                                  f"(connection.failed.authentication.delay.ms)")

    # --------------------------------------------------------------- control
    def on_stopping(self) -> None:
        """Shutdown: read no new requests; answers to those in flight still go out."""
        self.stopping = True
        for conn in list(self.conns.values()):
            if conn.core.in_flight == 0 and not conn.out:
                self._close(conn, "broker is shutting down")
            else:
                self._update_mask(conn)

    def teardown(self) -> None:
        if self.answered:  # answers handled in the last turn: one try to write them
            self._write_answered()
        for conn in list(self.conns.values()):
            self._close(conn, "processor stopped")

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"connections": len(self.conns), "responses": self.responses,
                "stage_ns": dict(zip(STAGES, self.stage_ns, strict=True)),
                "queued": self.queued, "request_bytes": self.request_bytes,
                "peak_request_bytes": self.peak_request_bytes,
                "unsent_bytes": sum(c.unsent for c in self.conns.values()),
                "paused": len(self.paused),
                "stopped_unsent": sum(1 for c in self.conns.values()
                                      if c.unsent > self.max_unsent)}
