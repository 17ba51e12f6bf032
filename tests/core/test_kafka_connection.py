"""The Kafka connection core as a state machine: no socket, no thread, no clock.

Every illegal call is checked twice: it raises the exact error, and the
connection afterwards behaves as if the call had never been made.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.core.kafka_connection import (
    CLOSED,
    CLOSING,
    NEED_DATA,
    NOTHING_READY,
    OPEN,
    PAUSED,
    ConnectionClosedError,
    ConnectionClosingError,
    DuplicateResponseError,
    FrameRefused,
    KafkaConnection,
    Request,
    ResponsesReady,
    UnknownRequestError,
)


def frame(correlation_id: int, body: bytes = b"", api_key: int = 0, api_version: int = 9) -> bytes:
    """A request as a client writes it: size prefix, header, body."""
    payload = struct.pack(">hhi", api_key, api_version, correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def snapshot(conn: KafkaConnection[Any]) -> tuple[Any, ...]:
    return (conn.state, conn.in_flight, conn.next_seq, conn.next_release, conn.buffered_bytes,
            conn.reading)


def drain(conn: KafkaConnection[Any]) -> list[Any]:
    """Every event up to NEED_DATA or PAUSED (that one included)."""
    events = []
    while True:
        event = conn.next_event()
        events.append(event)
        if event is NEED_DATA or event is PAUSED or isinstance(event, FrameRefused):
            return events


# ------------------------------------------------------------------ framing
def test_a_frame_in_one_piece_is_one_request_with_its_header() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    data = frame(77, b"body", api_key=3, api_version=12)
    conn.receive_data(data)
    assert conn.next_event() == Request(0, 3, 12, 77, data[4:])
    assert conn.next_event() is NEED_DATA
    assert conn.buffered_bytes == 0
    assert (conn.in_flight, conn.next_seq) == (1, 1)


def test_a_frame_split_byte_by_byte_is_whole_only_at_its_last_byte() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    data = frame(5, b"xyz")
    for byte in data[:-1]:
        conn.receive_data(bytes([byte]))
        assert conn.next_event() is NEED_DATA
    conn.receive_data(data[-1:])
    assert conn.next_event() == Request(0, 0, 9, 5, data[4:])


def test_frames_in_one_chunk_are_numbered_in_order_and_a_partial_tail_waits() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    a, b, c = frame(10, b"a"), frame(11, b"bb"), frame(12, b"ccc")
    conn.receive_data(a + b + c[:5])
    assert drain(conn) == [Request(0, 0, 9, 10, a[4:]), Request(1, 0, 9, 11, b[4:]), NEED_DATA]
    assert conn.buffered_bytes == 5
    conn.receive_data(c[5:])
    assert drain(conn) == [Request(2, 0, 9, 12, c[4:]), NEED_DATA]


def test_an_empty_read_changes_nothing() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    conn.receive_data(b"")
    assert conn.next_event() is NEED_DATA
    assert snapshot(conn) == (OPEN, 0, 0, 0, 0, True)


def test_a_begun_frame_is_charged_whole_from_its_size_prefix() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    data = frame(7, b"x" * 100)
    assert conn.pending_frame_bytes == 0
    conn.receive_data(data[:3])  # the prefix itself is not all there
    assert conn.pending_frame_bytes == 0
    conn.receive_data(data[3:20])
    assert conn.pending_frame_bytes == len(data)
    conn.receive_data(data[20:])  # complete: nothing is begun any more
    assert conn.pending_frame_bytes == 0
    assert conn.next_event() == Request(0, 0, 9, 7, data[4:])
    conn.receive_data(struct.pack(">i", 5000))  # a size the core refuses is never charged
    assert conn.pending_frame_bytes == 0


def test_answers_held_back_are_there_to_see() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 5)
    conn.receive_data(frame(1) + frame(2) + frame(3))
    drain(conn)
    assert conn.receive_response(2, "c") == NOTHING_READY
    assert conn.receive_response(1, "b") == NOTHING_READY
    assert sorted(conn.unreleased) == ["b", "c"]
    assert conn.receive_response(0, "a") == ResponsesReady(("a", "b", "c"), False)
    assert conn.unreleased == ()


# --------------------------------------------------------------- size check
@pytest.mark.parametrize("size", [8, 100])
def test_sizes_from_eight_to_the_limit_are_read(size: int) -> None:
    conn: KafkaConnection[str] = KafkaConnection(100, 5)
    conn.receive_data(frame(1, b"\0" * (size - 8)))
    event = conn.next_event()
    assert isinstance(event, Request) and len(event.frame) == size


@pytest.mark.parametrize("size", [101, 2**31 - 1, 7, 0, -1, -(2**31)])
def test_a_size_outside_eight_to_the_limit_is_refused_and_closes(size: int) -> None:
    conn: KafkaConnection[str] = KafkaConnection(100, 5)
    conn.receive_data(struct.pack(">i", size) + b"\0" * 12)
    assert conn.next_event() == FrameRefused(size, 100)
    assert conn.state is CLOSED
    assert conn.buffered_bytes == 0
    assert not conn.reading


def test_a_bad_size_is_refused_only_when_its_turn_comes() -> None:
    """Requests before it are served; it is refused when it would be read."""
    conn: KafkaConnection[str] = KafkaConnection(100, 1)
    good = frame(1)
    conn.receive_data(good + struct.pack(">i", 10_000))
    assert drain(conn) == [Request(0, 0, 9, 1, good[4:]), PAUSED]
    assert conn.receive_response(0, "r0") == ResponsesReady(("r0",), False)
    assert conn.next_event() == FrameRefused(10_000, 100)
    assert conn.close() == 0


def test_refusal_after_requests_in_flight_reports_them_as_abandoned_on_close() -> None:
    conn: KafkaConnection[str] = KafkaConnection(100, 5)
    conn.receive_data(frame(1) + frame(2) + struct.pack(">i", 101))
    events = drain(conn)
    assert [type(e) for e in events] == [Request, Request, FrameRefused]
    assert conn.close() == 2
    assert conn.close() == 0


# ---------------------------------------------------------- in-flight bound
def test_the_in_flight_bound_pauses_reading_and_an_answer_resumes_it() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 2)
    frames = [frame(i) for i in range(3)]
    conn.receive_data(b"".join(frames))
    assert drain(conn) == [Request(0, 0, 9, 0, frames[0][4:]),
                           Request(1, 0, 9, 1, frames[1][4:]), PAUSED]
    assert not conn.reading
    assert conn.buffered_bytes == len(frames[2])
    assert conn.next_event() is PAUSED  # asking again changes nothing
    assert conn.receive_response(1, "r1") is NOTHING_READY  # out of order: still 2 in flight
    assert not conn.reading
    assert conn.receive_response(0, "r0") == ResponsesReady(("r0", "r1"), False)
    assert conn.reading
    assert drain(conn) == [Request(2, 0, 9, 2, frames[2][4:]), NEED_DATA]
    assert conn.reading and conn.in_flight == 1


# ------------------------------------------------------------ in-order release
def test_answers_in_any_order_are_released_in_request_order() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    conn.receive_data(b"".join(frame(i) for i in range(5)))
    drain(conn)
    assert conn.receive_response(3, "r3") is NOTHING_READY
    assert conn.receive_response(1, "r1") is NOTHING_READY
    assert conn.receive_response(0, "r0") == ResponsesReady(("r0", "r1"), False)
    assert conn.receive_response(2, "r2") == ResponsesReady(("r2", "r3"), False)
    assert conn.next_release == 4 and conn.in_flight == 1
    assert conn.receive_response(4, "r4") == ResponsesReady(("r4",), False)
    assert conn.in_flight == 0


def test_an_answer_that_closes_is_released_last_and_nothing_is_read_or_released_after() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    conn.receive_data(b"".join(frame(i) for i in range(4)))
    drain(conn)
    conn.receive_data(frame(9)[:3])
    assert conn.receive_response(2, "r2") is NOTHING_READY
    assert conn.receive_response(1, "refused", close=True) is NOTHING_READY
    assert conn.receive_response(0, "r0") == ResponsesReady(("r0", "refused"), True)
    assert conn.state is CLOSING and not conn.reading
    assert conn.buffered_bytes == 0  # bytes after the refused request are never read
    assert conn.next_event() is PAUSED
    assert conn.receive_response(3, "r3") is NOTHING_READY  # held, never written
    assert conn.in_flight == 2
    assert conn.close() == 2
    assert conn.state is CLOSED


# ------------------------------------------------- illegal calls: raise, change nothing
def test_an_answer_to_a_request_never_read_raises_and_changes_nothing() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    with pytest.raises(UnknownRequestError, match=r"^answer to request 0, but no request "
                                                  r"was read$"):
        conn.receive_response(0, "r0")
    conn.receive_data(frame(1) + frame(2))
    drain(conn)
    before = snapshot(conn)
    for seq in (2, 99, -1):
        with pytest.raises(UnknownRequestError,
                           match=rf"^answer to request {seq}, but requests 0\.\.1 were read$"):
            conn.receive_response(seq, "bogus")
        assert snapshot(conn) == before
    assert conn.receive_response(0, "r0") == ResponsesReady(("r0",), False)


@pytest.mark.parametrize("released_first", [True, False])
def test_a_second_answer_to_one_request_raises_and_changes_nothing(released_first: bool) -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    conn.receive_data(frame(1) + frame(2) + frame(3))
    drain(conn)
    seq = 0 if released_first else 2
    conn.receive_response(seq, "first")
    before = snapshot(conn)
    with pytest.raises(DuplicateResponseError, match=rf"^request {seq} was answered already$"):
        conn.receive_response(seq, "second")
    assert snapshot(conn) == before
    released = [*conn.receive_response(1, "r1").responses]
    released += conn.receive_response(0, "r0").responses if not released_first else []
    assert "second" not in released
    assert released == (["r1"] if released_first else ["r0", "r1", "first"])


def test_bytes_while_closing_raise_and_change_nothing() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    conn.receive_data(frame(1) + frame(2))
    drain(conn)
    conn.receive_response(0, "bye", close=True)
    before = snapshot(conn)
    with pytest.raises(ConnectionClosingError, match=r"^cannot receive data: the connection is "
                                                     r"closing after the answer to request 0$"):
        conn.receive_data(frame(3))
    assert snapshot(conn) == before
    assert conn.next_event() is PAUSED


def test_everything_but_close_raises_once_closed_and_changes_nothing() -> None:
    conn: KafkaConnection[str] = KafkaConnection(1024, 8)
    conn.receive_data(frame(1))
    drain(conn)
    assert conn.close() == 1
    before = snapshot(conn)
    assert before == (CLOSED, 0, 1, 0, 0, False)
    with pytest.raises(ConnectionClosedError,
                       match=r"^cannot receive data: the connection is closed$"):
        conn.receive_data(frame(2))
    with pytest.raises(ConnectionClosedError,
                       match=r"^cannot read a request: the connection is closed$"):
        conn.next_event()
    with pytest.raises(ConnectionClosedError,
                       match=r"^cannot take the answer to request 0: the connection is closed$"):
        conn.receive_response(0, "late")
    assert snapshot(conn) == before
    assert conn.close() == 0


def test_the_in_flight_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^max_in_flight must be at least 1, got 0$"):
        KafkaConnection(1024, 0)


# ------------------------------------------------------------------ properties
def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=40), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    max_in_flight=st.integers(min_value=1, max_value=6),
    data=st.data(),
)
def test_any_split_and_any_answer_order_release_exactly_the_request_order(
    bodies: list[bytes], cuts: list[int], max_in_flight: int, data: st.DataObject
) -> None:
    """Feed the stream in random pieces, answer outstanding requests in random order."""
    frames = [frame(1000 + i, body, api_key=i % 20) for i, body in enumerate(bodies)]
    chunks = split(b"".join(frames), cuts)
    conn: KafkaConnection[int] = KafkaConnection(1024, max_in_flight)
    unanswered: list[int] = []
    released: list[int] = []
    read: list[Request] = []

    def pull() -> None:
        while True:
            event = conn.next_event()
            if event is NEED_DATA or event is PAUSED:
                return
            assert isinstance(event, Request)
            read.append(event)
            unanswered.append(event.seq)
            assert conn.in_flight <= max_in_flight

    while chunks or unanswered:
        if chunks and (not unanswered or data.draw(st.booleans())):
            conn.receive_data(chunks.pop(0))
            pull()
        else:
            seq = unanswered.pop(data.draw(st.integers(0, len(unanswered) - 1)))
            ready = conn.receive_response(seq, seq)
            assert not ready.close
            released.extend(ready.responses)
            pull()
        assert conn.in_flight <= max_in_flight
        assert conn.in_flight == conn.next_seq - conn.next_release
    assert [r.seq for r in read] == list(range(len(frames)))
    assert [r.frame for r in read] == [f[4:] for f in frames]
    assert [r.correlation_id for r in read] == [1000 + i for i in range(len(frames))]
    assert released == list(range(len(frames)))
    assert conn.in_flight == 0 and conn.buffered_bytes == 0


class ConnectionMachine(RuleBasedStateMachine):
    """Random bytes arriving, requests read, answers (some closing) in random order.

    The model: the byte stream sent so far, the requests read, the answers
    given; released answers must always be a prefix of the request order,
    stop after the first closing one, and never more than the bound may be
    outstanding.
    """

    @initialize(max_in_flight=st.integers(min_value=1, max_value=5),
                bodies=st.lists(st.binary(max_size=30), min_size=1, max_size=25))
    def start(self, max_in_flight: int, bodies: list[bytes]) -> None:
        self.max_in_flight = max_in_flight
        self.conn: KafkaConnection[int] = KafkaConnection(512, max_in_flight)
        self.stream = b"".join(frame(i, b) for i, b in enumerate(bodies))
        self.frames = [frame(i, b)[4:] for i, b in enumerate(bodies)]
        self.sent = 0
        self.read: list[int] = []
        self.answered: set[int] = set()
        self.released: list[int] = []
        self.closing_at: int | None = None
        self.closed = False

    @precondition(lambda self: not self.closed and self.closing_at is None)
    @rule(n=st.integers(min_value=1, max_value=64))
    def bytes_arrive(self, n: int) -> None:
        piece = self.stream[self.sent:self.sent + n]
        self.sent += len(piece)
        self.conn.receive_data(piece)

    @precondition(lambda self: not self.closed)
    @rule()
    def read_requests(self) -> None:
        while True:
            event = self.conn.next_event()
            if event is NEED_DATA or event is PAUSED:
                break
            assert isinstance(event, Request)
            assert event.seq == len(self.read)
            assert event.frame == self.frames[event.seq]
            self.read.append(event.seq)

    @precondition(lambda self: not self.closed)
    @rule(pick=st.integers(min_value=0), close=st.sampled_from([False] * 9 + [True]))
    def answer(self, pick: int, close: bool) -> None:
        open_ = [s for s in self.read if s not in self.answered]
        assume(open_)
        seq = open_[pick % len(open_)]
        self.answered.add(seq)
        ready = self.conn.receive_response(seq, seq, close)
        if self.closing_at is not None:
            assert ready.responses == () and not ready.close
        self.released.extend(ready.responses)
        if ready.close:
            self.closing_at = self.released[-1]

    @precondition(lambda self: not self.closed)
    @rule(pick=st.integers(min_value=0))
    def duplicate_answer_is_refused(self, pick: int) -> None:
        assume(self.answered)
        seq = sorted(self.answered)[pick % len(self.answered)]
        before = snapshot(self.conn)
        with pytest.raises(DuplicateResponseError):
            self.conn.receive_response(seq, -1)
        assert snapshot(self.conn) == before

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        assert self.conn.close() == len(self.read) - len(self.released)
        self.closed = True

    @precondition(lambda self: self.closed)
    @rule(seq=st.integers(min_value=0, max_value=30))
    def calls_after_close_raise(self, seq: int) -> None:
        before = snapshot(self.conn)
        with pytest.raises(ConnectionClosedError):
            self.conn.receive_data(b"\0")
        with pytest.raises(ConnectionClosedError):
            self.conn.next_event()
        with pytest.raises(ConnectionClosedError):
            self.conn.receive_response(seq, seq)
        assert snapshot(self.conn) == before
        assert self.conn.close() == 0

    @invariant()
    def released_in_request_order_within_the_bound(self) -> None:
        if not hasattr(self, "conn"):
            return
        assert self.released == list(range(len(self.released)))
        if self.closed:
            assert self.conn.state is CLOSED and self.conn.in_flight == 0
        if self.closing_at is not None:
            assert self.released[-1] == self.closing_at
            assert self.conn.state is (CLOSED if self.closed else CLOSING)
        if not self.closed:
            assert self.conn.in_flight == len(self.read) - len(self.released)
            assert self.conn.in_flight <= self.max_in_flight
            assert self.conn.reading == (self.closing_at is None
                                         and self.conn.in_flight < self.max_in_flight)


ConnectionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60,
                                               deadline=None)
TestConnectionMachine = ConnectionMachine.TestCase
