"""Acceptor: owns one listener's socket, accepts, hands connections out round robin.

There is one Acceptor per listener (``listeners``). Its connection ids carry
the listener's index in their high bits (:func:`listener_of`), so the
Processor knows each connection's security protocol without another message.

Enforces ``max.connections`` and ``max.connections.per.ip``: a connection
over either limit is closed at once, counted and logged.

num.processes.connection.distribution = handoff (actors/handoff.py): process 0's
Acceptor accepts every connection of its listener (the limits then count the
broker's connections, not one process's) and gives each to the live process
with the fewest open ones (ConnectionBalance), passing the socket over that
process's handoff link when it is another; the Acceptor there hands it to its
Processors (which do any TLS or SASL handshake) and reports its close back.
A link that is full or broken does not hold up an accept: the connection goes
to another process (at worst process 0).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import socket
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any

import zmq

from actors.core.connection_balance import ConnectionBalance
from actors.handoff import STOPPING_PACKET, peer_is_child, recv_handed, send_handed, unpack_new
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import LISTENER_SHIFT, Topology, listener_of
from wire.broker_messages import ConnectionClosed, GetStats, NewConnection

__all__ = ["LISTENER_SHIFT", "Acceptor", "listener_of"]


class Acceptor(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 listen_socket: socket.socket, clock: Clock, listener_index: int = 0,
                 listener_name: str = "PLAINTEXT", handoff_socket: socket.socket | None = None,
                 processes: int = 1, handoff_link: socket.socket | None = None,
                 **kw: Any) -> None:
        """``handoff_socket`` (process 0, handoff): where the other processes' links come
        in; ``handoff_link`` (process k, handoff): this process's link to process 0, which
        hands it the connections (``listen_socket`` is then unused)."""
        super().__init__(node, name, **kw)
        self.clock = clock  # nothing here reads time yet; held so one clock drives the node
        self.topology = topology
        self.max_connections = int(config["max.connections"])
        self.max_per_ip = int(config["max.connections.per.ip"])
        self.listen_socket = listen_socket
        self.listener_index = listener_index
        self.listener_name = listener_name
        self.conn_ids = itertools.count((listener_index << LISTENER_SHIFT) + 1)
        # handoff: these outlive a restart of the actor (the other side keeps its end)
        self.handoff_socket = handoff_socket
        self.balance = ConnectionBalance(processes) if handoff_socket is not None else None
        self.links: dict[int, socket.socket] = {}  # process 0: by descriptor, the links
        self.link_process: dict[int, int] = {}  # a link's descriptor -> its process (after hello)
        self.handoff_link = handoff_link
        self.unsent: deque[bytes] = deque()  # process k: close reports the link had no room for

    def setup(self) -> None:
        self.per_ip: dict[str, int] = {}
        self.open = 0
        self.refused = 0
        self.accepted = 0
        self.handed = 0  # process 0: connections passed to another process
        self.handoff_busy = 0  # ... that went elsewhere because that one's link was full
        if self.handoff_link is not None:
            if self.handoff_link.fileno() >= 0:
                self.watch_fd(self.handoff_link.fileno(), self._on_handed)
                if self.unsent:
                    self.modify_fd(self.handoff_link.fileno(), zmq.POLLIN | zmq.POLLOUT)
            return
        if self.listen_socket.fileno() >= 0:
            self.listen_socket.setblocking(False)
            self.watch_fd(self.listen_socket.fileno(), self._on_accept)
        if self.handoff_socket is not None and self.handoff_socket.fileno() >= 0:
            self.watch_fd(self.handoff_socket.fileno(), self._on_link_connect)
            for fd in self.links:
                self.watch_fd(fd, partial(self._on_link, fd))
            if self.balance is not None:  # what the processes hold now (a restart)
                for conns in self.balance.conns:
                    for host in conns.values():
                        self._count_open(host)

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
            self._count_open(host)
            self.accepted += 1
            sock.setblocking(False)
            conn_id = next(self.conn_ids)
            if self.balance is not None:
                self._place(sock, conn_id, host, port)
            else:
                self._to_processor(sock, conn_id, host, port)

    def _to_processor(self, sock: socket.socket, conn_id: int, host: str, port: int) -> None:
        """One of this process's Processors takes the connection."""
        fd = sock.detach()  # the Processor adopts the descriptor
        # Round robin by connection id; the handler is chosen the same way
        # (conn_id % H), so with shared threads Processor and handler share a loop.
        self.tell(self.topology.processor(conn_id % self.topology.num_processors),
                  NewConnection(conn_id, fd, host, port))

    def _count_open(self, host: str) -> None:
        self.open += 1
        self.per_ip[host] = self.per_ip.get(host, 0) + 1

    def _count_closed(self, host: str) -> None:
        self.open = max(0, self.open - 1)
        left = self.per_ip.get(host, 0) - 1
        if left > 0:
            self.per_ip[host] = left
        else:
            self.per_ip.pop(host, None)

    # ------------------------------------------------------------ handoff, process 0
    def _place(self, sock: socket.socket, conn_id: int, host: str, port: int) -> None:
        """Handoff: the live process with the fewest connections takes it (this one, or
        another over its link; a full or broken link sends it to the next choice)."""
        assert self.balance is not None
        tried: set[int] = set()
        while True:
            process = self.balance.choose(tried)
            self.balance.opened(process, conn_id, host)
            if process == 0:
                self._to_processor(sock, conn_id, host, port)
                return
            link = self._link_of(process)
            try:
                if link is None:
                    raise ConnectionResetError("no link")
                send_handed(link, sock, conn_id, host, port)
            except BlockingIOError:
                self.handoff_busy += 1
            except OSError as exc:
                if exc.errno == errno.ETOOMANYREFS:  # descriptors in flight over the limit
                    self.handoff_busy += 1
                elif link is not None:
                    self._drop_link(link.fileno(), f"passing a connection failed: {exc}")
            else:
                sock.close()  # the other process holds it now
                self.handed += 1
                return
            self.balance.closed(process, conn_id)
            tried.add(process)

    def _link_of(self, process: int) -> socket.socket | None:
        for fd, index in self.link_process.items():
            if index == process:
                return self.links[fd]
        return None

    def _on_link_connect(self, _mask: int) -> None:
        assert self.handoff_socket is not None
        for _ in range(16):
            try:
                link, _addr = self.handoff_socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.log.warning("accepting a handoff link failed: {}", exc)
                return
            if not peer_is_child(link):
                self.log.warning("refused a handoff link from a process that is not one of "
                                 "this broker's")
                link.close()
                continue
            link.setblocking(False)
            self.links[link.fileno()] = link
            self.watch_fd(link.fileno(), partial(self._on_link, link.fileno()))

    def _on_link(self, fd: int, _mask: int) -> None:
        """A packet from process k: its hello, or a connection it closed; or its end."""
        link = self.links.get(fd)
        if link is None:
            self.unwatch_fd(fd)
            return
        assert self.balance is not None
        for _ in range(256):
            try:
                packet = link.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._drop_link(fd, str(exc))
                return
            if not packet:
                self._drop_link(fd, "closed")
                return
            kind, _, rest = packet.partition(b" ")
            process = self.link_process.get(fd)
            try:
                value = int(rest)
            except ValueError:
                value = -1
            if kind == b"C" and process is not None:
                host = self.balance.closed(process, value)
                if host is not None:
                    self._count_closed(host)
            elif kind == b"S" and process is not None:  # it stops (SIGTERM): no news
                self._drop_link(fd, "closed: the process stops", quiet=True)
                return
            elif kind == b"H" and process is None and 0 < value < len(self.balance.live):
                for old_fd, index in list(self.link_process.items()):
                    if index == value:  # its earlier life's link, not yet seen closed
                        self._drop_link(old_fd, "replaced")
                self.link_process[fd] = value
                for host in self.balance.up(value):
                    self._count_closed(host)
                self.log.info("process {} takes connections of listener {}", value,
                              self.listener_name)
            else:
                self._drop_link(fd, f"unexpected packet {packet[:40]!r}")
                return

    def _drop_link(self, fd: int, why: str, quiet: bool = False) -> None:
        """Process k's link is gone (it died or stopped): so are its connections.
        ``quiet``: an orderly stop (the broker's or the process's), logged at DEBUG."""
        link = self.links.pop(fd, None)
        process = self.link_process.pop(fd, None)
        if link is not None:
            self.unwatch_fd(fd)
            link.close()
        if process is not None and self.balance is not None:
            lost = self.balance.down(process)
            for host in lost:
                self._count_closed(host)
            level = "DEBUG" if quiet else "INFO"
            self.log.log(level, "process {}'s handoff link of listener {} {}; its {} "
                         "connections are gone, new ones go to the others until it is back",
                         process, self.listener_name, why, len(lost))

    # ------------------------------------------------------------ handoff, process k
    def _on_handed(self, mask: int) -> None:
        link = self.handoff_link
        assert link is not None
        if mask & zmq.POLLOUT:
            self._flush_unsent()
        if not mask & zmq.POLLIN:
            return
        for _ in range(64):
            try:
                packet, fds = recv_handed(link)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close_link(str(exc))
                return
            if not packet and not fds:
                self._close_link("closed by process 0")
                return
            if packet == STOPPING_PACKET and not fds:  # the broker stops
                self._close_link("the broker stops", stopping=True)
                return
            try:
                conn_id, host, port = unpack_new(packet)
                [fd] = fds
            except ValueError:
                for fd in fds:
                    socket.close(fd)
                self.log.error("dropped a bad handoff packet {!r}", packet[:40])
                continue
            self.open += 1
            self.accepted += 1
            self._to_processor(socket.socket(fileno=fd), conn_id, host, port)

    def _report_closed(self, conn_id: int) -> None:
        link = self.handoff_link
        if link is None or link.fileno() < 0:
            return
        self.unsent.append(b"C %d" % conn_id)
        self._flush_unsent()

    def _flush_unsent(self) -> None:
        link = self.handoff_link
        assert link is not None
        while self.unsent:
            try:
                link.send(self.unsent[0], socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
            except BlockingIOError:
                self.modify_fd(link.fileno(), zmq.POLLIN | zmq.POLLOUT)
                return
            except OSError as exc:
                self._close_link(str(exc))
                return
            self.unsent.popleft()
        self.modify_fd(link.fileno(), zmq.POLLIN)

    def _close_link(self, why: str, stopping: bool = False) -> None:
        """``stopping``: this process or the broker stops; the other end is told first,
        so that neither side logs the link's end as news."""
        link = self.handoff_link
        if link is None or link.fileno() < 0:
            return
        self.unwatch_fd(link.fileno())
        if stopping:
            with contextlib.suppress(OSError):
                link.send(STOPPING_PACKET)
        link.close()
        self.unsent.clear()
        self.log.log("DEBUG" if stopping else "INFO",
                     "the handoff link of listener {} to process 0 is down ({}): no new "
                     "connections come to this process", self.listener_name, why)

    @handles(ConnectionClosed)
    def on_closed(self, msg: ConnectionClosed) -> None:
        if self.balance is not None and self.balance.closed(0, msg.conn_id) is None:
            return  # process 0, handoff: one of its own, unless already forgotten
        self._count_closed(msg.peer_host)
        if self.handoff_link is not None:
            self._report_closed(msg.conn_id)

    def on_stopping(self) -> None:
        """Stop accepting: close the listening socket (and the handoff links)."""
        if self.listen_socket.fileno() >= 0:
            self.unwatch_fd(self.listen_socket.fileno())
            self.listen_socket.close()
        if self.handoff_socket is not None and self.handoff_socket.fileno() >= 0:
            path = self.handoff_socket.getsockname()
            self.unwatch_fd(self.handoff_socket.fileno())
            self.handoff_socket.close()
            if isinstance(path, str) and path:
                Path(path).unlink(missing_ok=True)
            for fd in list(self.links):
                with contextlib.suppress(OSError):
                    self.links[fd].send(STOPPING_PACKET)
                self._drop_link(fd, "closed: the broker stops", quiet=True)
        if self.handoff_link is not None:
            self._close_link("the process stops", stopping=True)

    def teardown(self) -> None:
        pass  # the listening socket outlives restarts; on_stopping closes it

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        stats: dict[str, Any] = {"open": self.open, "accepted": self.accepted,
                                 "refused": self.refused}
        if self.balance is not None:  # handoff: the connections each process holds
            stats.update(by_process=self.balance.counts(), handed=self.handed,
                         handoff_busy=self.handoff_busy)
        return stats
