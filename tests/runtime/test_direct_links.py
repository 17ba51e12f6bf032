"""Direct links between the worker loops of one broker's processes (actors.runtime.direct):
order, a backlog the socket does not take at once, a peer that goes away and comes back."""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq
from loguru import logger

from actors.runtime import direct
from actors.runtime.address import Address
from actors.runtime.clock import SystemClock
from actors.runtime.counters import Counters, DeadLetters
from actors.runtime.direct import DirectInbound, DirectLink, pack
from actors.runtime.node import Directory, Node, NodeEndpoint
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import AdvisorySender, GetState, OrderChecker, Sender, SendSeq
from wire.envelope import encode_frame, new_entry


def loop_node(name: str, directory: Directory, actor: type, actor_name: str,
              direct: bool = True) -> Node:
    """A node whose gateway runs in ``actor_name``'s loop (actor.threads = single)."""
    node = Node(name, directory=directory, direct_peers=directory.nodes if direct else ())
    node.start(gateway=False)
    node.spawn(actor, actor_name)
    node.start_gateway(host=actor_name)
    return node


def two_nodes(tmp_path: Path) -> Directory:
    ipc_dir = str(tmp_path / "ipc")
    return Directory({"a": NodeEndpoint("127.0.0.1", 0, ipc_dir),
                      "b": NodeEndpoint("127.0.0.1", 0, ipc_dir)})


def checker_state(node: Node, count: int) -> dict:
    return wait_for(lambda: (st := node.ask(Address(node.name, "checker"), GetState()))["count"]
                    == count and st, timeout=60)


@pytest.mark.parametrize("sender", [Sender, AdvisorySender])
def test_frames_cross_a_direct_link_in_order(nodes: list[Node], tmp_path: Path,
                                             sender: type) -> None:
    """Sender: batches of 256 messages a frame; AdvisorySender: a frame each, 40,000 of
    them in one handler, far more than the socket's buffer takes at once (the rest waits
    in the link, written as the receiver reads)."""
    directory = two_nodes(tmp_path)
    a = loop_node("a", directory, OrderChecker, "checker")
    nodes.append(a)
    b = loop_node("b", directory, sender, "sender")
    nodes.append(b)
    assert b.ask(Address("b", "sender"), SendSeq(40_000, "a", "checker"), timeout=30) == 40_000
    state = checker_state(a, 40_000)
    assert state["out_of_order"] == 0 and state["last"] == {"sender": 39_999}
    link = b.actor("sender")._out_sockets[Address("a", "checker")]
    assert isinstance(link, DirectLink) and link.connects == 1 and not link.pending
    gateway = a.actor("_gateway")
    assert "checker" in gateway._local and len(gateway._inbound) == 1
    assert not gateway._in[0].getsockopt(zmq.EVENTS) & zmq.POLLIN  # nothing over ZeroMQ
    assert sum(a.dead_letters.by_reason().values()) == 0


def test_a_peer_that_goes_away_gets_what_was_sent_meanwhile_once_back(
        nodes: list[Node], tmp_path: Path) -> None:
    """As a ZeroMQ link queues for a peer that is away: what is sent while the receiving
    node is down waits in the link and reaches the node started again under its name."""
    directory = two_nodes(tmp_path)
    a = loop_node("a", directory, OrderChecker, "checker")
    b = loop_node("b", directory, Sender, "sender")
    nodes.append(b)
    sender = Address("b", "sender")
    assert b.ask(sender, SendSeq(1000, "a", "checker")) == 1000
    checker_state(a, 1000)
    a.shutdown(timeout=5)
    assert not (tmp_path / "ipc" / "a.ux").exists()
    # the first send after the peer left finds the socket closed; the later ones wait
    assert b.ask(sender, SendSeq(3000, "a", "checker")) == 3000
    link = b.actor("sender")._out_sockets[Address("a", "checker")]
    assert isinstance(link, DirectLink) and link.sock is None and link.pending
    a2 = loop_node("a", directory, OrderChecker, "checker")
    nodes.append(a2)
    state = checker_state(a2, 3000)
    assert state["out_of_order"] == 0 and state["last"] == {"sender": 2999}
    assert wait_for(lambda: link.connects == 2 and not link.pending)
    assert b.ask(sender, SendSeq(10, "a", "checker")) == 10
    assert checker_state(a2, 3010)["out_of_order"] == 1  # the new run from 0


def test_without_direct_peers_the_nodes_use_zeromq(nodes: list[Node], tmp_path: Path) -> None:
    directory = two_nodes(tmp_path)
    a = loop_node("a", directory, OrderChecker, "checker", direct=False)
    nodes.append(a)
    b = loop_node("b", directory, Sender, "sender", direct=False)
    nodes.append(b)
    assert b.ask(Address("b", "sender"), SendSeq(500, "a", "checker")) == 500
    assert checker_state(a, 500)["out_of_order"] == 0
    link = b.actor("sender")._out_sockets[Address("a", "checker")]
    assert not isinstance(link, DirectLink)
    assert not (tmp_path / "ipc" / "a.ux").exists()


class _Owner:
    """What a DirectInbound asks of its loop's actor: descriptors to watch, the node's
    frame limit and dead letters."""

    def __init__(self, max_frame_bytes: int = 64 << 20) -> None:
        self.watched: set[int] = set()
        self.node = SimpleNamespace(dead_letters=DeadLetters("a"), metrics=Counters(),
                                    max_frame_bytes=max_frame_bytes)

    def watch_fd(self, fd: int, _handler: object, _events: int) -> None:
        self.watched.add(fd)

    def unwatch_fd(self, fd: int) -> None:
        self.watched.discard(fd)


def test_frames_cut_anywhere_by_the_stream_are_delivered_whole_and_once() -> None:
    """A 3 MB frame between small ones, the stream cut at random places (large frames are
    gathered whole before they are parsed: no copy of the partial frame per read)."""
    rng = random.Random(5)
    frames = [(b"t%d" % i, rng.randbytes(n), b"legs" if i % 3 == 0 else None)
              for i, n in enumerate((10, 3_000_000, 0, 70_000, 5, 200_000, 1))]
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    left, right = socket.socketpair()
    right.setblocking(False)
    owner = _Owner()
    inbound = DirectInbound(right, owner, lambda t, f, legs: got.append((t, f, legs)),  # type: ignore[arg-type]
                            lambda _i: None)
    def write() -> None:  # the stream in random pieces, as a peer's writes arrive
        at = 0
        while at < len(stream):
            cut = min(len(stream), at + rng.choice((1, 7, 100, 4096, 65_536, 300_000)))
            left.sendall(stream[at:cut])
            at = cut

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(frames) and time.monotonic() < deadline:
            if select.select([right], [], [], 1.0)[0]:
                inbound.on_readable(0)
        writer.join(5)
        assert got == [(t, f, legs) for t, f, legs in frames]
        assert not inbound.buf
    finally:
        left.close()
        inbound.close()
    assert not owner.watched


class _CountingSock:
    """A socket whose reads are counted per readiness (DirectInbound reads with recv, and
    the rest of a large frame with recv_into)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        return self.sock.recv(size)

    def recv_into(self, buffer: memoryview) -> int:
        self.reads += 1
        return self.sock.recv_into(buffer)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


def test_one_readiness_takes_every_frame_the_stream_holds() -> None:
    """Produce frames are larger than one read: read once per readiness, each took two
    turns of the receiving loop and the small answers behind them waited (milliseconds
    between a broker's processes under load). Everything already in the stream, big
    frames and small, is delivered by one call."""
    rng = random.Random(7)
    frames = [(b"shard-%d" % i, rng.randbytes(70_000 if i % 2 == 0 else 40), None)
              for i in range(6)]
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    right.setblocking(False)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    inbound = DirectInbound(right, _Owner(), lambda t, f, legs: got.append((t, f, legs)),  # type: ignore[arg-type]
                            lambda _i: None)
    try:
        left.sendall(stream)
        assert select.select([right], [], [], 5.0)[0]
        inbound.on_readable(0)
        assert got == frames
        assert not inbound.buf
    finally:
        left.close()
        inbound.close()


def test_a_large_frame_is_read_into_its_own_buffer_in_one_read_after_its_head() -> None:
    """A frame larger than a read (a produce batch crossing to another process) is read
    straight into a buffer of its size once its head is known: the first read and one
    for all the rest, not a read per READ_BYTES whose pieces are then joined (and a third
    for the small frame behind it, which still comes whole, in order)."""
    rng = random.Random(5)
    frames = [(b"shard-1", rng.randbytes(200_000), b"legs"), (b"h", b"small" * 10, None)]
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    first = stream[:-20]  # the large frame, and the small one but for its last 20 bytes
    left, right = socket.socketpair()
    try:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        left.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            left.sendall(first)
        if select.select([right], [], [], 1)[0] and len(right.recv(len(first),
                                                                   socket.MSG_PEEK)) < len(first):
            pytest.skip("the socket pair holds less than the frame (net.core.wmem_max)")
        right.setblocking(False)
        got: list[tuple[bytes, bytes, bytes | None]] = []
        inbound = _inbound_of(right, got)
        counting = _CountingSock(right)
        inbound.sock = counting  # type: ignore[assignment]
        inbound.on_readable(0)
        assert got == frames[:1]
        # a read with its head, one for all the rest of it, one with the small frame's start
        assert counting.reads == 3
        left.sendall(stream[-20:])
        counting.reads = 0
        inbound.on_readable(0)
        assert got == frames
        assert counting.reads == 2  # the small frame's rest, and one that finds none
        assert not inbound.buf and inbound.big is None
    finally:
        left.close()
        right.close()


def test_a_stream_that_stays_busy_lets_the_loop_go_after_a_bounded_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that keeps writing must not hold the receiving loop: at most
    READS_PER_TURN reads per readiness, and the frames still arrive whole and in order.
    Three reads a turn here: a host's default net.core.wmem_max (a socket pair then holds
    ~416 KiB) is less than the 32 reads of the default."""
    monkeypatch.setattr(direct, "READS_PER_TURN", 3)
    rng = random.Random(11)
    frames = [(b"t", rng.randbytes(100_000), None) for _ in range(60)]  # 6 MB
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    right.setblocking(False)
    left.setblocking(False)
    written = 0  # what the stream holds before the first read: more than one turn's reads
    with contextlib.suppress(BlockingIOError):
        while written < len(stream):
            written += left.send(stream[written:written + 65_536])
    if written <= direct.READS_PER_TURN * direct.READ_BYTES:
        pytest.skip(f"the socket pair holds only {written} bytes (net.core.wmem_max)")
    left.setblocking(True)
    counting = _CountingSock(right)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    inbound = _inbound_of(right, got)
    inbound.sock = counting  # type: ignore[assignment]
    inbound.on_readable(0)
    assert counting.reads == direct.READS_PER_TURN  # the loop gets its turn back
    assert 0 < len(got) < len(frames)
    writer = threading.Thread(target=left.sendall, args=(stream[written:],), daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 30
        while len(got) < len(frames) and time.monotonic() < deadline:
            if select.select([right], [], [], 1.0)[0]:
                counting.reads = 0
                inbound.on_readable(0)
                assert counting.reads <= direct.READS_PER_TURN
        writer.join(5)
        assert got == frames
    finally:
        left.close()
        inbound.close()


def test_many_small_frames_let_the_loop_go_after_a_turns_worth() -> None:
    """Frames are bounded a turn as well as reads: 256 small frames run their handlers in
    this turn, then the loop polls again (the ZeroMQ side's 256 messages a turn); all
    arrive, in order, over the next readinesses."""
    frames = [(b"t", i.to_bytes(4, "big") * 20, None) for i in range(3_000)]  # ~300 KB
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    left, right = socket.socketpair()
    right.setblocking(False)
    writer = threading.Thread(target=left.sendall, args=(stream,), daemon=True)
    writer.start()
    counting = _CountingSock(right)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    inbound = _inbound_of(right, got)
    inbound.sock = counting  # type: ignore[assignment]
    try:
        wait_for(lambda: select.select([right], [], [], 0)[0] != [], timeout=10)
        turns = 0
        deadline = time.monotonic() + 30
        while len(got) < len(frames) and time.monotonic() < deadline:
            if not select.select([right], [], [], 1.0)[0]:
                continue
            before, counting.reads = len(got), 0
            inbound.on_readable(0)
            turns += 1
            # a 64 KiB read holds ~650 of these frames: one read a turn, never another
            # read once 256 were delivered
            assert len(got) - before < direct.FRAMES_PER_TURN + 700
            assert counting.reads <= 2
        writer.join(5)
        assert got == frames
        assert turns >= 4
    finally:
        left.close()
        inbound.close()


def test_a_link_asks_for_a_send_buffer_that_holds_a_burst_of_produce_frames(
        tmp_path: Path) -> None:
    try:
        wmem_max = int(Path("/proc/sys/net/core/wmem_max").read_text())
    except OSError:
        pytest.skip("no /proc/sys/net/core/wmem_max to compare with")
    path = tmp_path / "peer.ux"
    listener = direct.listen(path)

    class Owner(_Owner):
        clock = SystemClock()
        log = logger

    link = DirectLink("peer", path, Owner())  # type: ignore[arg-type]
    try:
        assert link.connect()
        assert link.sock is not None
        # Linux doubles what it is asked for (bookkeeping), capped at wmem_max first
        got = link.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert got >= 2 * min(direct.SEND_BUFFER_BYTES, wmem_max)
    finally:
        link.close(linger_s=0)
        listener.close()


class _LinkOwner(_Owner):
    """What a DirectLink asks of its loop's actor: a clock, a log, the node's counters."""

    clock = SystemClock()
    log = logger



def _frames_in(stream: bytes) -> list[bytes]:
    """The frames of a direct link's stream, each checked whole: [u16 name length][u32
    frame length][u32 legs length][name][frame][legs]."""
    frames = []
    at = 0
    while at < len(stream):
        t_len, f_len, l_len = struct.unpack_from("<HII", stream, at)
        at += 10
        assert stream[at:at + t_len] == b"checker"
        at += t_len
        frames.append(stream[at:at + f_len])
        at += f_len + l_len
        assert at <= len(stream), "a frame cut short"
    return frames


def _read_all(peer: socket.socket, link: DirectLink) -> bytes:
    """What the link still holds, read by its peer (the link's loop writes as it can)."""
    got = bytearray()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if link.pending:
            link.write_pending()
        try:
            data = peer.recv(1 << 20)
        except BlockingIOError:
            if not link.pending:
                return bytes(got)
            select.select([peer], [], [], 0.1)
            continue
        got += data
    raise AssertionError(f"not drained in 30 s: {link.pending_bytes} bytes wait")


def test_a_peer_that_does_not_read_costs_no_more_than_the_backlog_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_lines: list[str]) -> None:
    """A peer process stopped (SIGSTOP) or hung accepts and never reads: the frames the
    socket does not take wait up to the cap, later ones are dropped as dead letters with
    one warning an episode; once it reads, the frames queued before the drops arrive whole
    and in order, and frames sent after the backlog drained arrive too."""
    monkeypatch.setattr(direct, "SEND_BUFFER_BYTES", 16 * 1024)  # a socket that holds little
    cap = 256 * 1024
    path = tmp_path / "b.ux"
    listener = direct.listen(path)
    owner = _LinkOwner()
    link = DirectLink("b", path, owner, backlog_max_bytes=cap)  # type: ignore[arg-type]
    try:
        assert link.connect()
        peer, _ = listener.accept()
        peer.setblocking(False)

        def frame(seq: int) -> bytes:  # two messages, ~10 KB
            body = seq.to_bytes(4, "big") + bytes(5_000)
            return encode_frame("a", "sender", "checker", [new_entry(1, 0, 0, 0, 0, 0, body)] * 2)

        def send_unread(seqs: range) -> list[bytes]:
            """Send with the peer not reading; the frames queued (the others dropped)."""
            queued = []
            for seq in seqs:
                before = link.dropped
                link.send(b"checker", frame(seq), None)
                assert link.pending_bytes <= cap
                assert link.pending_bytes == sum(len(p) for p in link.pending)
                if link.dropped == before:
                    queued.append(frame(seq))
            return queued

        def warnings() -> list[str]:
            return [line for line in log_lines if "direct link to node b full" in line]

        queued = send_unread(range(200))  # 2 MB: eight times the cap
        assert link.dropped == 200 - len(queued) > 150
        assert queued == [frame(seq) for seq in range(len(queued))]  # dropped: all after
        assert link.pending_bytes > cap - len(frame(0)) - direct.HEAD_SIZE - len(b"checker")
        dead = owner.node.dead_letters
        assert dead.by_reason() == {"direct link to node b full": 2 * link.dropped}
        assert dead.last[-1][1:] == ("sender@a", "checker@b")
        assert owner.node.metrics.get("direct_link_frames_dropped") == link.dropped
        assert len(warnings()) == 1
        assert f"cap {cap} bytes" in warnings()[0]

        got = _frames_in(_read_all(peer, link))
        assert got == queued
        assert link.pending_bytes == 0 and link.dropping == 0
        assert any(f"{link.dropped} frame(s) were dropped while it was full" in line
                   for line in log_lines)

        # drained: what is sent now goes, and a new episode of drops is logged again
        queued_again = send_unread(range(200, 400))
        assert len(queued_again) < 200 and queued_again[0] == frame(200)
        assert len(warnings()) == 2
        got = _frames_in(_read_all(peer, link))
        assert got == queued_again
        assert owner.node.metrics.get("direct_link_frames_dropped") == link.dropped
        assert dead.by_reason() == {"direct link to node b full": 2 * link.dropped}
        peer.close()
    finally:
        link.close(linger_s=0)
        listener.close()


def test_the_backlog_byte_count_follows_partial_writes_and_a_lost_peer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames of odd sizes written in pieces (the socket takes part of a frame, the rest
    waits as a memoryview), then the peer goes and its half-written frame is dropped:
    the count is the sum of what waits after every step."""
    monkeypatch.setattr(direct, "SEND_BUFFER_BYTES", 8 * 1024)
    path = tmp_path / "b.ux"
    listener = direct.listen(path)
    link = DirectLink("b", path, _LinkOwner())  # type: ignore[arg-type]
    rng = random.Random(3)

    def exact() -> bool:
        return link.pending_bytes == sum(len(p) for p in link.pending)

    try:
        assert link.connect()
        peer, _ = listener.accept()
        peer.setblocking(False)
        partial = 0
        for i in range(300):
            link.send(b"checker", rng.randbytes(rng.randrange(1, 30_000)), None)
            assert exact()
            if i % 7 == 0:  # the peer reads a little: the link writes part of its backlog
                with contextlib.suppress(BlockingIOError):
                    peer.recv(rng.randrange(1, 50_000))
                link.write_pending()
                assert exact()
            partial += isinstance(link.pending[0], memoryview) if link.pending else 0
        assert partial > 10, partial  # frames were written in pieces
        assert len(link.pending) > 1
        half_written = isinstance(link.pending[0], memoryview)
        listener.close()  # the peer's process is gone: nobody to connect to again
        peer.close()
        link.write_pending()  # a half-written frame goes with it, the others wait
        assert link.sock is None and link.lost == int(half_written)
        assert exact() and link.pending_bytes > 0
    finally:
        link.close(linger_s=0)
        listener.close()
    assert link.pending_bytes == 0 and not link.pending


def test_a_frame_over_the_cap_alone_goes_when_nothing_waits(tmp_path: Path) -> None:
    """The frame limit (actor.max.frame.bytes) bounds frames, and may be set above the
    backlog cap: such a frame still goes on an empty backlog; what comes behind it while
    it waits is dropped."""
    owner = _LinkOwner()
    link = DirectLink("b", tmp_path / "b.ux", owner,  # type: ignore[arg-type]
                      backlog_max_bytes=64 * 1024)  # nobody listens there: all waits
    big = encode_frame("a", "sender", "checker", [new_entry(1, 0, 0, 0, 0, 0, bytes(100_000))])
    link.send(b"checker", big, None)
    assert link.sock is None and len(link.pending) == 1 and link.dropped == 0
    assert link.pending_bytes == len(link.pending[0]) > 100_000
    link.send(b"checker", encode_frame("a", "sender", "checker", []), None)
    assert len(link.pending) == 1 and link.dropped == 1
    assert [last[1:] for last in owner.node.dead_letters.last] == [("sender@a", "checker@b")]
    link.close(linger_s=0)
    assert link.pending_bytes == 0 and not link.pending


def _inbound_of(right: socket.socket, got: list[tuple[bytes, bytes, bytes | None]]
                ) -> DirectInbound:
    """An inbound whose deliveries are kept (as bytes, whatever bytes-like they come as)."""
    return DirectInbound(right, _Owner(), lambda t, f, legs: got.append((t, bytes(f), legs)),  # type: ignore[arg-type]
                         lambda _i: None)


def _boundaries(frames: list[tuple[bytes, bytes, bytes | None]]) -> list[int]:
    """Offsets of a stream where a head, a name, a frame or legs starts or ends."""
    marks = [0]
    for t, f, legs in frames:
        for part in (direct.HEAD_SIZE, len(t), len(f), len(legs or b"")):
            marks.append(marks[-1] + part)
    return sorted(set(marks))


def test_frames_are_whole_with_the_stream_cut_at_and_around_every_boundary() -> None:
    """Two reads with the stream cut at each boundary of each part of each frame, and a
    byte before and after it: a frame of exactly READ_BYTES, one that is READ_BYTES on the
    stream, one a byte over, a 300 KB one, trace legs, small frames in between. Delivered
    whole, in order, once, and nothing held after."""
    rng = random.Random(21)
    read = direct.READ_BYTES - direct.HEAD_SIZE - 2  # with a 2-byte name: READ_BYTES
    frames = [(b"a", b"x", None),
              (b"sh", rng.randbytes(direct.READ_BYTES), b"legs-1"),
              (b"b", rng.randbytes(300), None),
              (b"fb", rng.randbytes(read), None),  # READ_BYTES on the stream
              (b"c", b"", b"L"),
              (b"fo", rng.randbytes(read + 1), b"legs-2"),  # a byte over
              (b"g", rng.randbytes(16_383), None),
              (b"d", rng.randbytes(300_000), None)]
    stream = b"".join(pack(t, f, legs) for t, f, legs in frames)
    cuts = sorted({c + d for c in _boundaries(frames) for d in (-1, 0, 1)
                   if 0 < c + d < len(stream)})
    for cut in cuts:
        left, right = socket.socketpair()
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        right.setblocking(False)
        got: list[tuple[bytes, bytes, bytes | None]] = []
        inbound = _inbound_of(right, got)
        try:
            for piece in (stream[:cut], stream[cut:]):
                writer = threading.Thread(target=left.sendall, args=(piece,), daemon=True)
                writer.start()
                deadline = time.monotonic() + 10
                while writer.is_alive() or select.select([right], [], [], 0)[0]:
                    assert time.monotonic() < deadline, f"cut at {cut}: stuck"
                    if select.select([right], [], [], 0.05)[0]:
                        inbound.on_readable(0)
                writer.join()
            assert got == frames, f"cut at {cut}"
            assert not inbound.buf
        finally:
            left.close()
            inbound.close()


def test_frames_of_every_size_reach_the_peers_inbound_whole_and_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames from 5 bytes to 300 KB, some with trace legs, through a socket that takes
    little at once (the rest waits in the link): the peer's inbound, reading as the link
    writes, gets every one whole, in order, and the backlog count is exact after every
    send."""
    monkeypatch.setattr(direct, "SEND_BUFFER_BYTES", 8 * 1024)
    path = tmp_path / "b.ux"
    listener = direct.listen(path)
    link = DirectLink("b", path, _LinkOwner())  # type: ignore[arg-type]
    rng = random.Random(8)
    sizes = [16_383, 16_384, 5, 70_000, 300_000, 40, 20_000]
    frames = [(b"checker", rng.randbytes(sizes[i % len(sizes)]),
               b"legs%d" % i if i % 3 == 0 else None) for i in range(60)]
    got: list[tuple[bytes, bytes, bytes | None]] = []
    try:
        assert link.connect()
        peer, _ = listener.accept()
        peer.setblocking(False)
        inbound = _inbound_of(peer, got)
        for t, f, legs in frames:
            link.send(t, f, legs)
            assert link.pending_bytes == sum(len(p) for p in link.pending)
            if select.select([peer], [], [], 0)[0]:
                inbound.on_readable(0)
            link.write_pending()
        deadline = time.monotonic() + 30
        while len(got) < len(frames):
            assert time.monotonic() < deadline, f"{len(got)} of {len(frames)} frames"
            link.write_pending()
            if select.select([peer], [], [], 0.05)[0]:
                inbound.on_readable(0)
        assert got == frames
        assert link.pending_bytes == 0 and not link.pending
        inbound.close()
    finally:
        link.close(linger_s=0)
        listener.close()


def test_a_large_frame_to_a_peer_not_listening_waits_whole(tmp_path: Path) -> None:
    """A large frame (with trace legs) sent while nobody listens waits whole, and
    reaches the peer once it listens."""
    path = tmp_path / "b.ux"
    link = DirectLink("b", path, _LinkOwner())  # type: ignore[arg-type]
    frame = random.Random(4).randbytes(200_000)
    try:
        link.send(b"checker", frame, b"legs")
        assert link.sock is None and link.pending_bytes == len(pack(b"checker", frame, b"legs"))
        listener = direct.listen(path)
        link.next_try_ns = 0
        assert link.connect()
        peer, _ = listener.accept()
        peer.setblocking(False)
        got: list[tuple[bytes, bytes, bytes | None]] = []
        inbound = _inbound_of(peer, got)
        deadline = time.monotonic() + 10
        while not got:
            assert time.monotonic() < deadline
            link.write_pending()
            if select.select([peer], [], [], 0.05)[0]:
                inbound.on_readable(0)
        assert got == [(b"checker", frame, b"legs")]
        inbound.close()
        listener.close()
    finally:
        link.close(linger_s=0)


def test_a_frame_announced_over_the_limit_is_refused_before_any_buffer_and_skipped() -> None:
    """A head announcing a frame over the node's frame limit (lengths up to 8 GB fit a
    head) gets no buffer of that size: a dead letter, as the gateway refuses a frame over
    the limit, and its bytes read and dropped; the frame behind it is delivered whole."""
    limit = 10_000
    rng = random.Random(11)
    over = (b"shard-9", rng.randbytes(300_000), None)
    good = (b"h", rng.randbytes(5_000), b"legs")
    stream = pack(*over) + pack(*good)
    left, right = socket.socketpair()
    right.setblocking(False)
    owner = _Owner(max_frame_bytes=limit)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    inbound = DirectInbound(right, owner, lambda t, f, legs: got.append((t, bytes(f), legs)),  # type: ignore[arg-type]
                            lambda _i: None)
    try:
        left.sendall(stream[:1000])  # its head and name, the read cutting it
        assert select.select([right], [], [], 5.0)[0]
        inbound.on_readable(0)
        assert inbound.big is None and inbound.skip == len(pack(*over)) - 1000
        dead = owner.node.dead_letters
        assert [last[2] for last in dead.last] == ["shard-9"]
        assert "over the limit (300000 bytes announced" in dead.last[0][0]
        assert owner.node.metrics.get("direct_link_frames_refused") == 1
        writer = threading.Thread(target=left.sendall, args=(stream[1000:],), daemon=True)
        writer.start()
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            if select.select([right], [], [], 1.0)[0]:
                inbound.on_readable(0)
                assert inbound.big is None or len(inbound.big) <= limit + 100
        writer.join(5)
        assert got == [good]
        assert inbound.skip == 0 and inbound.big is None and not inbound.buf
        assert len(dead.last) == 1
        assert owner.node.metrics.get("direct_link_frames_refused") == 1
    finally:
        left.close()
        inbound.close()


def test_a_stream_closed_in_the_middle_of_a_frame_keeps_no_buffer_of_it() -> None:
    """close() with a large frame read in part lets its buffer go."""
    left, right = socket.socketpair()
    right.setblocking(False)
    got: list[tuple[bytes, bytes, bytes | None]] = []
    inbound = _inbound_of(right, got)
    try:
        left.sendall(pack(b"t", b"x" * 200_000, None)[:50_000])
        assert select.select([right], [], [], 5.0)[0]
        inbound.on_readable(0)
        assert inbound.big is not None
        inbound.close()
        assert inbound.big is None and not inbound.buf and not got
    finally:
        left.close()
