"""Processor: owns client connections; reads requests, writes responses in order.

Its poll loop waits on its mailbox and on every socket it owns. Each turn:
adopt new connections, queue the responses that arrived, read what sockets
have, hand completed requests on, write, clean up closed connections (the
order of Kafka's Processor.run). Requests of a connection are numbered; a
response is written only after every earlier one, so a client may pipeline
up to ``max.inflight.requests.per.connection`` requests and still sees its
answers in request order. At that bound the connection is not read until
answers drain.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import deque
from itertools import islice
from typing import Any

import zmq

from actors.runtime.actor import Actor, handles
from actors.runtime.config import Config
from actors.topology import Topology
from wire.api_versions import STAGES, api_name
from wire.broker_messages import (
    ConnectionClosed,
    GetStats,
    KafkaRequest,
    KafkaResponse,
    NewConnection,
)

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
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
    __slots__ = (
        "closing",
        "conn_id",
        "fd",
        "in_flight",
        "mask",
        "next_release",
        "next_seq",
        "out",
        "peer_host",
        "peer_port",
        "rbuf",
        "reading",
        "ready",
        "sock",
        "traces",
    )

    def __init__(self, conn_id: int, sock: socket.socket, peer_host: str, peer_port: int) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.peer_host = peer_host
        self.peer_port = peer_port
        self.rbuf = bytearray()
        # queued responses: [memoryview of what is left, response message, handed-over ns]
        self.out: deque[list[Any]] = deque()
        self.next_seq = 0
        self.next_release = 0
        self.ready: dict[int, tuple[KafkaResponse, int]] = {}
        self.in_flight = 0
        self.reading = True
        self.closing = False
        self.traces: dict[int, int] = {}
        self.mask = 0


class Processor(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(
        self, node: Any, name: str, *, topology: Topology, config: Config, **kw: Any
    ) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.max_request = int(config["socket.request.max.bytes"])
        self.max_in_flight = max(1, int(config["max.inflight.requests.per.connection"]))
        # queued.max.requests bounds the request path (Kafka's request queue): this
        # Processor's requests sent on and not yet answered, over all connections.
        # Mailboxes themselves are unbounded, so answers never wait on a full queue.
        self.max_queued = max(1, int(config["queued.max.requests"]) // topology.num_processors)
        self.sndbuf = int(config["socket.send.buffer.bytes"])
        self.rcvbuf = int(config["socket.receive.buffer.bytes"])

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
        conn = _Conn(msg.conn_id, sock, msg.peer_host, msg.peer_port)
        if self.stopping:
            self._close(conn, "broker is shutting down")
            return
        self.conns[conn.conn_id] = conn
        self.by_fd[conn.fd] = conn
        self._update_mask(conn)

    def _update_mask(self, conn: _Conn) -> None:
        mask = 0
        if conn.reading and not conn.closing and not self.stopping:
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
        self.queued -= conn.in_flight  # their answers, if any, are dropped on arrival
        conn.in_flight = 0
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
        if mask & zmq.POLLIN:
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
        conn.rbuf += data
        self._take_frames(conn)

    def _take_frames(self, conn: _Conn) -> None:
        """Dispatch the complete frames in the read buffer, up to the in-flight bound.

        Also runs when answers drain after a pause, on bytes read earlier, so
        the size check lives here: a bad size prefix is refused wherever it
        is found, never sliced into a short frame.
        """
        buf = conn.rbuf
        pos = 0
        end = len(buf)
        while end - pos >= 4 and conn.in_flight < self.max_in_flight \
                and self.queued < self.max_queued:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 8 or size > self.max_request:
                self.node.metrics.incr("requests_oversized" if size > 0 else "requests_malformed")
                self.log.warning(
                    "closing connection {} from {}: request size {} outside [8, {}] "
                    "(socket.request.max.bytes)", conn.conn_id, conn.peer_host, size,
                    self.max_request)
                self._close(conn, "bad request size")
                return
            if end - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            self._dispatch(conn, frame)
        if pos:
            del buf[:pos]
        if conn.in_flight >= self.max_in_flight:
            conn.reading = False
        elif self.queued >= self.max_queued:
            conn.reading = False
            self.paused[conn.conn_id] = None

    def _dispatch(self, conn: _Conn, frame: bytes) -> None:
        api_key, api_version, correlation_id = _HEADER.unpack_from(frame, 0)
        seq = conn.next_seq
        conn.next_seq += 1
        conn.in_flight += 1
        self.queued += 1
        now = time.monotonic_ns()
        tracer = self.node.tracer
        tid = tracer.sample() if tracer.enabled else 0
        if tid:
            conn.traces[seq] = tid
            tracer.event("net_in", tid, 0, 0, self.name, f"{conn.peer_host}:{conn.peer_port}",
                         "request", conn.conn_id, correlation_id, api_key, len(frame) + 4,
                         mono_ns=now)
        self.tell_traced(
            self.topology.handler_for_conn(conn.conn_id),
            KafkaRequest(conn.conn_id, seq, self.name, api_key, api_version, correlation_id,
                         frame, now),
            tid,
        )

    # ----------------------------------------------------------------- write
    @handles(KafkaResponse)
    def on_response(self, msg: KafkaResponse) -> None:
        conn = self.conns.get(msg.conn_id)
        if conn is None:
            return  # the client went away; nothing to write to
        conn.ready[msg.seq] = (msg, time.monotonic_ns())
        while conn.next_release in conn.ready:
            response, arrived_ns = conn.ready.pop(conn.next_release)
            conn.next_release += 1
            conn.in_flight -= 1
            self.queued -= 1
            if response.respond and response.frame:
                conn.out.append([memoryview(response.frame), response, arrived_ns])
            else:
                self._finished(conn, response, arrived_ns)
            if response.close:
                conn.closing = True
                break
        if conn.out:
            self._write(conn)
        if conn.conn_id not in self.conns:
            return
        if conn.closing and not conn.out:
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
        if (not conn.reading and not conn.closing and conn.in_flight < self.max_in_flight
                and self.queued < self.max_queued):
            conn.reading = True
            self.paused.pop(conn.conn_id, None)
            if conn.rbuf:
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
        if conn.closing:
            self._close(conn, "closed after a refused request")

    def _finished(self, conn: _Conn, response: KafkaResponse, arrived_ns: int) -> None:
        """Account a request that is done: Kafka's request-time split, per API.

        request_queue: Processor to handler; local: the handler's own work;
        remote: waiting for partition shards, the purgatory or a coordinator;
        response_queue: handler to Processor; send: waiting behind earlier
        answers of the connection, then writing. They add up to the total.
        """
        now = time.monotonic_ns()
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
        tid = conn.traces.pop(response.seq, 0)
        if tid:
            self.node.tracer.event("net_out", tid, 0, 0, self.name,
                                   f"{conn.peer_host}:{conn.peer_port}", "response",
                                   conn.conn_id, response.correlation_id, response.api_key,
                                   len(response.frame), mono_ns=now)

    # --------------------------------------------------------------- control
    def on_stopping(self) -> None:
        """Shutdown: read no new requests; answers to those in flight still go out."""
        self.stopping = True
        for conn in list(self.conns.values()):
            if conn.in_flight == 0 and not conn.out:
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
