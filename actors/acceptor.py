"""Acceptor: owns one listener's socket, accepts, hands connections out round robin.

There is one Acceptor per listener (``listeners``). Its connection ids carry
the listener's index in their high bits (:func:`listener_of`), so the
Processor knows each connection's security protocol without another message.

Enforces ``max.connections`` and ``max.connections.per.ip``: a connection
over either limit is closed at once, counted and logged.
"""

from __future__ import annotations

import itertools
import socket
from typing import Any

from actors.runtime.actor import Actor, handles
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import Topology
from wire.broker_messages import ConnectionClosed, GetStats, NewConnection

LISTENER_SHIFT = 40  # conn_id = listener index << 40 | a count of that listener's accepts


def listener_of(conn_id: int) -> int:
    """The index (in ``listeners``) of the listener a connection came in on."""
    return conn_id >> LISTENER_SHIFT


class Acceptor(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 listen_socket: socket.socket, clock: Clock, listener_index: int = 0,
                 listener_name: str = "PLAINTEXT", **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.clock = clock  # nothing here reads time yet; held so one clock drives the node
        self.topology = topology
        self.max_connections = int(config["max.connections"])
        self.max_per_ip = int(config["max.connections.per.ip"])
        self.listen_socket = listen_socket
        self.listener_index = listener_index
        self.listener_name = listener_name
        self.conn_ids = itertools.count((listener_index << LISTENER_SHIFT) + 1)

    def setup(self) -> None:
        self.per_ip: dict[str, int] = {}
        self.open = 0
        self.refused = 0
        self.accepted = 0
        if self.listen_socket.fileno() >= 0:
            self.listen_socket.setblocking(False)
            self.watch_fd(self.listen_socket.fileno(), self._on_accept)

    def _on_accept(self, _mask: int) -> None:
        for _ in range(64):
            try:
                sock, addr = self.listen_socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.log.warning("accept failed: {}", exc)
                return
            host, port = addr[0], addr[1]
            if self.open >= self.max_connections or self.per_ip.get(host, 0) >= self.max_per_ip:
                self.refused += 1
                self.node.metrics.incr("connections_refused")
                which = ("max.connections" if self.open >= self.max_connections
                         else "max.connections.per.ip")
                self.log.warning("refused connection from {}:{} on listener {}: {} reached",
                                 host, port, self.listener_name, which)
                sock.close()
                continue
            self.open += 1
            self.accepted += 1
            self.per_ip[host] = self.per_ip.get(host, 0) + 1
            sock.setblocking(False)
            conn_id = next(self.conn_ids)
            fd = sock.detach()  # the Processor adopts the descriptor
            # Round robin by connection id; the handler is chosen the same way
            # (conn_id % H), so with shared threads Processor and handler share a loop.
            self.tell(self.topology.processor(conn_id % self.topology.num_processors),
                      NewConnection(conn_id, fd, host, port))

    @handles(ConnectionClosed)
    def on_closed(self, msg: ConnectionClosed) -> None:
        self.open = max(0, self.open - 1)
        left = self.per_ip.get(msg.peer_host, 0) - 1
        if left > 0:
            self.per_ip[msg.peer_host] = left
        else:
            self.per_ip.pop(msg.peer_host, None)

    def on_stopping(self) -> None:
        """Stop accepting: close the listening socket."""
        if self.listen_socket.fileno() >= 0:
            self.unwatch_fd(self.listen_socket.fileno())
            self.listen_socket.close()

    def teardown(self) -> None:
        pass  # the listening socket outlives restarts; on_stopping closes it

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, int]:
        return {"open": self.open, "accepted": self.accepted, "refused": self.refused}
