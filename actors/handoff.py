"""The handoff links of num.processes.connection.distribution = handoff.

Process 0's Acceptor of listener i listens on a Unix SOCK_SEQPACKET socket,
``<ipc dir>/<node>.h<i>``; the Acceptor of the same listener in process k
connects to it at start and says hello (``H k``). Process 0 then passes each
accepted socket it gives to process k as one packet, ``N conn_id port host``
with the descriptor attached (SCM_RIGHTS), and process k answers ``C conn_id``
when that connection closes; either side sends ``S 0`` as it stops (SIGTERM). A packet is one
message (no framing); a link that closes means the process on the other side
is gone.

Only a child of process 0 running as the same user may take a link
(SO_PEERCRED): the sockets handed over are clients' connections.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

PACKET_MAX = 512  # the longest packet: "N <conn id> <port> <host>"
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def handoff_path(ipc_dir: str, main: str, listener_index: int) -> str:
    return f"{ipc_dir.rstrip('/')}/{main}.h{listener_index}"


def bind_handoff(path: str) -> socket.socket:
    """Process 0: the listening end of one listener's links (a stale one is replaced:
    the data dir's lock makes this broker the only user of its ipc dir)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def connect_handoff(path: str) -> socket.socket:
    """Process k: its link to process 0 (not yet greeted: ``hello`` once it can take sockets)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


# either end of a link as its process stops (SIGTERM): the link's end is no news then
STOPPING_PACKET = b"S 0"


def hello(link: socket.socket, process_index: int) -> None:
    link.sendall(b"H %d" % process_index)
    link.setblocking(False)


def peer_is_child(link: socket.socket) -> bool:
    """Whether the process at the other end of ``link`` is a child of this one, as this user."""
    pid, uid, _gid = _CRED.unpack(link.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                  _CRED.size))
    if uid != os.getuid():
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # pid (comm) state ppid ...; comm may hold spaces and parentheses
            ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    return ppid == os.getpid()


def pack_new(conn_id: int, host: str, port: int) -> bytes:
    return b"N %d %d %s" % (conn_id, port, host.encode())


def unpack_new(packet: bytes) -> tuple[int, str, int]:
    """(conn id, host, port) of an ``N`` packet; ValueError for anything else."""
    kind, conn_id, port, host = packet.split(b" ", 3)
    if kind != b"N":
        raise ValueError(f"not a handed connection: {packet[:40]!r}")
    return int(conn_id), host.decode(), int(port)


def send_handed(link: socket.socket, sock: socket.socket, conn_id: int, host: str,
                port: int) -> None:
    """Pass ``sock`` over ``link`` (never waits: BlockingIOError when the link is full)."""
    socket.send_fds(link, [pack_new(conn_id, host, port)], [sock.fileno()],
                    socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)


def recv_handed(link: socket.socket) -> tuple[bytes, list[int]]:
    """One packet and its descriptors (close-on-exec); (b"", []) when the link closed."""
    packet, fds, _flags, _addr = socket.recv_fds(link, PACKET_MAX, 1,
                                                 socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
    return packet, fds
