"""Processor: owns client connections; reads requests, writes responses in order.

Its poll loop waits on its mailbox and on every socket it owns. Each turn:
adopt new connections, queue the responses that arrived, read what sockets
have, hand completed requests on, write, clean up closed connections (the
order of Kafka's Processor.run). The protocol of each connection (framing,
the size check, sequence numbers, the in-flight bound, in-order release)
is a socket-free core, actors/core/kafka_connection.py; this shell owns the
sockets, the poller, the writing and the processor-wide request bound
(queued.max.requests), and turns the core's events into messages.
"""

from __future__ import annotations

import socket
from collections import deque
from itertools import islice
from typing import Any

import zmq

from actors.core.idle_expiry import IdleExpiry
from actors.core.kafka_connection import (
    CLOSING,
    OPEN,
    ConnectionProtocolError,
    FrameRefused,
    KafkaConnection,
    Request,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import Topology
from wire.api_versions import STAGES, api_name, api_snake_name
from wire.broker_messages import (
    ConnectionClosed,
    GetStats,
    KafkaRequest,
    KafkaResponse,
    NewConnection,
)

READ_CHUNK = 256 * 1024
WRITE_GATHER = 64  # responses handed to one sendmsg


_METRIC_KEYS: dict[int, tuple[str, str, tuple[str, ...]]] = {}


def metric_keys(api_key: int) -> tuple[str, str, tuple[str, ...]]:
    """The counter names of one API, built once (this runs for every response)."""
    keys = _METRIC_KEYS.get(api_key)
    if keys is None:
        api = api_name(api_key)
        keys = _METRIC_KEYS[api_key] = (
            f"requests_total|api={api}",
            f"request_time_ns_total|api={api}",
            tuple(f"request_stage_time_ns_total|api={api},stage={s}" for s in STAGES),
        )
    return keys


class _Conn:
    """A socket and what the shell keeps about it; the protocol state is ``core``."""

    __slots__ = (
        "conn_id",
        "core",
        "fd",
        "mask",
        "out",
        "peer_host",
        "peer_port",
        "reading",
        "sock",
        "traces",
    )

    def __init__(self, conn_id: int, sock: socket.socket, peer_host: str, peer_port: int,
                 core: KafkaConnection[tuple[KafkaResponse, int]]) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.peer_host = peer_host
        self.peer_port = peer_port
        # answers carry the ns they reached this Processor (the "send" stage starts there)
        self.core = core
        # queued responses: [memoryview of what is left, response message, handed-over ns]
        self.out: deque[list[Any]] = deque()
        # POLLIN wanted: False at the in-flight bound or while queued.max.requests is full
        self.reading = True
        self.traces: dict[int, tuple[int, int, int]] = {}  # seq -> (trace id, in ns, bytes)
        self.mask = 0


class Processor(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(
        self, node: Any, name: str, *, topology: Topology, config: Config, clock: Clock,
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
        self.sndbuf = int(config["socket.send.buffer.bytes"])
        self.rcvbuf = int(config["socket.receive.buffer.bytes"])
        self.max_idle_ms = int(config["connections.max.idle.ms"])

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
        self.paused: dict[int, None] = {}  # connections waiting for queued to drop
        self.idle = IdleExpiry(self.max_idle_ms)

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
        conn = _Conn(msg.conn_id, sock, msg.peer_host, msg.peer_port,
                     KafkaConnection(self.max_request, self.max_in_flight))
        if self.stopping:
            self._close(conn, "broker is shutting down")
            return
        self.conns[conn.conn_id] = conn
        self.by_fd[conn.fd] = conn
        self.idle.update(conn.conn_id, self._monotonic_ns() // 1_000_000)
        self._update_mask(conn)

    def _update_mask(self, conn: _Conn) -> None:
        mask = 0
        if conn.reading and conn.core.state is OPEN and not self.stopping:
            mask |= zmq.POLLIN
        if conn.out:
            mask |= zmq.POLLOUT
        if mask == conn.mask:
            return
        if conn.mask == 0:
            self.watch_fd(conn.fd, lambda m, fd=conn.fd: self._on_fd(fd, m), mask)
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
        self.idle.remove(conn.conn_id)
        self.queued -= conn.core.close()  # their answers, if any, are dropped on arrival
        try:
            conn.sock.close()
        except OSError:
            pass
        self.log.debug("connection {} from {}:{} closed: {}", conn.conn_id, conn.peer_host,
                       conn.peer_port, why)
        self.tell(self.topology.acceptor, ConnectionClosed(conn.conn_id, conn.peer_host))

    def _on_fd(self, fd: int, mask: int) -> None:
        conn = self.by_fd.get(fd)
        if conn is None:
            self.unwatch_fd(fd)
            return
        self.idle.update(conn.conn_id, self._monotonic_ns() // 1_000_000)
        # POLLIN may be from before this turn's answers made the connection CLOSING
        if mask & zmq.POLLIN and conn.core.state is OPEN:
            self._read(conn)
        if conn.conn_id in self.conns and mask & zmq.POLLOUT:
            self._write(conn)
        if conn.conn_id in self.conns:
            self._update_mask(conn)

    # ------------------------------------------------------------------ read
    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"read error: {exc}")
            return
        if not data:
            self._close(conn, "closed by peer")
            return
        conn.core.receive_data(data)
        self._take_frames(conn)

    def _take_frames(self, conn: _Conn) -> None:
        """Dispatch the complete frames the core has, within both bounds.

        Also runs when answers drain after a pause, on bytes read earlier; the
        core refuses a bad size prefix wherever it is found.
        """
        core = conn.core
        while self.queued < self.max_queued:
            event = core.next_event()
            if type(event) is Request:
                self._dispatch(conn, event)
            elif type(event) is FrameRefused:
                self.node.metrics.incr("requests_oversized" if event.size > 0
                                       else "requests_malformed")
                self.log.warning(
                    "closing connection {} from {}: request size {} outside [8, {}] "
                    "(socket.request.max.bytes)", conn.conn_id, conn.peer_host, event.size,
                    event.max_request_bytes)
                self._close(conn, "bad request size")
                return
            else:  # NEED_DATA, or PAUSED at the in-flight bound
                break
        if not core.reading:
            conn.reading = False
        elif self.queued >= self.max_queued:
            conn.reading = False
            self.paused[conn.conn_id] = None

    def _dispatch(self, conn: _Conn, request: Request) -> None:
        seq = request.seq
        self.queued += 1
        now = self._monotonic_ns()
        tracer = self.node.tracer
        tid = tracer.sample() if tracer.enabled else 0
        if tid:  # the request record (client leg) is written when the request is finished
            conn.traces[seq] = (tid, tracer.wall_ns(), len(request.frame) + 4)
        self.tell_traced(
            self.topology.handler_for_conn(conn.conn_id),
            KafkaRequest(conn.conn_id, seq, self.name, request.api_key, request.api_version,
                         request.correlation_id, request.frame, now),
            tid,
        )

    # ----------------------------------------------------------------- write
    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        conn = self.conns.get(msg.conn_id)
        if conn is None:
            return  # the client went away; nothing to write to
        now = self._monotonic_ns()
        self.idle.update(conn.conn_id, now // 1_000_000)
        try:
            ready = conn.core.receive_response(msg.seq, (msg, now), msg.close)
        except ConnectionProtocolError as exc:
            self.log.error("connection {} from {}: {}; closing it", conn.conn_id,
                           conn.peer_host, exc)
            self._close(conn, str(exc))
            return
        released = ready.responses
        if released:
            self.queued -= len(released)
            for response, arrived_ns in released:
                if response.respond and response.frame:
                    conn.out.append([memoryview(response.frame), response, arrived_ns])
                else:
                    self._finished(conn, response, arrived_ns)
        if conn.out:
            self._write(conn)
        if conn.conn_id not in self.conns:
            return
        if conn.core.state is CLOSING and not conn.out:
            self._close(conn, "closed after a refused request")
            return
        self._resume(conn)
        if self.paused and self.queued < self.max_queued:
            for conn_id in list(self.paused):
                if self.queued >= self.max_queued:
                    break
                del self.paused[conn_id]
                other = self.conns.get(conn_id)
                if other is not None:
                    self._resume(other)

    def _resume(self, conn: _Conn) -> None:
        """Read again once the connection is under its bounds."""
        if not conn.reading and conn.core.reading and self.queued < self.max_queued:
            conn.reading = True
            self.paused.pop(conn.conn_id, None)
            if conn.core.buffered_bytes:
                self._take_frames(conn)  # frames read while the connection was paused
                if conn.conn_id not in self.conns:
                    return
        self._update_mask(conn)

    def _write(self, conn: _Conn) -> None:
        """Write queued responses, several per system call (one sendmsg gathers them)."""
        out = conn.out
        sock = conn.sock
        while out:
            buffers = [item[0] for item in islice(out, WRITE_GATHER)]
            try:
                sent = sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(conn, f"write error: {exc}")
                return
            while sent and out:
                item = out[0]
                left = len(item[0])
                if sent < left:  # the socket is full: the rest waits for POLLOUT
                    item[0] = item[0][sent:]
                    return
                sent -= left
                out.popleft()
                self._finished(conn, item[1], item[2])
        if conn.core.state is CLOSING:
            self._close(conn, "closed after a refused request")

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
        response_queue = max(0, total - q - local - remote - send)
        values = (q, local, remote, response_queue, send)
        stages = self.stage_ns
        for i, value in enumerate(values):
            stages[i] += value
        self.responses += 1
        incr = self.node.metrics.incr
        count_key, total_key, stage_keys = metric_keys(response.api_key)
        incr(count_key)
        incr(total_key, total)
        for key, value in zip(stage_keys, values, strict=True):
            incr(key, value)
        traced = conn.traces.pop(response.seq, None)
        if traced is not None:
            tid, in_ns, size = traced
            tracer = self.node.tracer
            tracer.request(tid, self.name, f"{conn.peer_host}:{conn.peer_port}",
                           api_snake_name(response.api_key), conn.conn_id,
                           response.correlation_id, response.api_key, size,
                           len(response.frame or b"") if response.respond else 0, in_ns,
                           tracer.wall_ns())

    # ------------------------------------------------------- idle connections
    def poll_timeout_ms(self) -> int | None:
        expiry_ms = self.idle.next_expiry_ms()
        return None if expiry_ms is None else max(0, expiry_ms - self._monotonic_ns() // 1_000_000)

    def on_turn(self) -> None:
        """Close connections quiet for connections.max.idle.ms (busy ones are not idle)."""
        now_ms = self._monotonic_ns() // 1_000_000
        for conn in [self.conns[c] for c in self.idle.expired(now_ms) if c in self.conns]:
            if conn.core.in_flight or conn.out or not conn.reading:
                self.idle.update(conn.conn_id, now_ms)
            else:
                self._close(conn, f"idle for {self.max_idle_ms} ms (connections.max.idle.ms)")

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
        for conn in list(self.conns.values()):
            self._close(conn, "processor stopped")

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"connections": len(self.conns), "responses": self.responses,
                "stage_ns": dict(zip(STAGES, self.stage_ns, strict=True))}
