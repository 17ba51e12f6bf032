"""One Kafka client connection as a state machine: bytes in, events out, no socket.

The Processor actor owns the socket and the poller; this core owns what the
Kafka wire protocol says about a connection:

- framing: a request is a 4-byte big-endian size, then that many bytes
  (api_key int16, api_version int16, correlation_id int32, the rest);
- the size check: a size outside [8, socket.request.max.bytes] is refused
  (Kafka closes the connection rather than read a frame it cannot trust);
- sequence numbers: requests are numbered 0, 1, 2, ... in the order read;
- the in-flight bound: at ``max_in_flight`` requests without an answer the
  connection is paused (``next_event`` says PAUSED and ``reading`` is False)
  until answers drain;
- in-order release: answers may come in any order, they are released in
  request order, so a pipelining client sees its responses in order;
- close after a response: an answer that asks to close the connection is
  released last; the connection is then CLOSING (nothing more is read or
  released) until the shell has written it and calls ``close``.

Use::

    conn.receive_data(data)            # whatever recv() returned (not EOF)
    while (event := conn.next_event()) is not NEED_DATA and event is not PAUSED:
        ...                            # a Request, or FrameRefused (then close)
    ready = conn.receive_response(seq, item, close)   # any order
    for item in ready.responses: ...   # write these, in this order
    if ready.close: ...                # then close once they are written
    abandoned = conn.close()           # requests that will never be answered

Calls the protocol does not allow raise a ConnectionProtocolError subclass
with an exact message and change nothing. The processor-wide request bound
(queued.max.requests spans connections) stays with the shell: it simply
stops asking ``next_event`` while its queue is full.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Generic, NamedTuple, TypeVar

R = TypeVar("R")

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
MIN_REQUEST_BYTES = _HEADER.size  # api_key, api_version, correlation_id


class ConnectionState(enum.Enum):
    OPEN = "OPEN"  # reading requests (below the in-flight bound), releasing answers
    CLOSING = "CLOSING"  # an answer asked to close after it: nothing more read or released
    CLOSED = "CLOSED"


OPEN = ConnectionState.OPEN
CLOSING = ConnectionState.CLOSING
CLOSED = ConnectionState.CLOSED


# --------------------------------------------------------------------- events
# NamedTuples: immutable and without a __dict__ like frozen slotted dataclasses,
# and about three times cheaper to build, which matters once per request.
class Request(NamedTuple):
    """A complete request frame, numbered in the order it was read."""

    seq: int
    api_key: int
    api_version: int
    correlation_id: int
    frame: bytes  # the request without its 4-byte size prefix


class FrameRefused(NamedTuple):
    """A size prefix outside [8, max_request_bytes]: the connection is now CLOSED."""

    size: int
    max_request_bytes: int


class ResponsesReady(NamedTuple, Generic[R]):
    """Answers to write now, in request order (possibly none)."""

    responses: tuple[R, ...]
    close: bool  # the last one asked to close the connection once it is written


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")  # no complete frame buffered
PAUSED = _Sentinel("PAUSED")  # at the in-flight bound, or CLOSING: read nothing now

Event = Request | FrameRefused | _Sentinel

NOTHING_READY: ResponsesReady[Any] = ResponsesReady((), False)


# ----------------------------------------------------------------- exceptions
class ConnectionProtocolError(Exception):
    """A call the connection's state does not allow; the state is unchanged."""


class ConnectionClosedError(ConnectionProtocolError):
    """Anything but ``close`` on a CLOSED connection."""


class ConnectionClosingError(ConnectionProtocolError):
    """Bytes handed to a connection that is closing after a response."""


class UnknownRequestError(ConnectionProtocolError):
    """An answer for a sequence number no request was given."""


class DuplicateResponseError(ConnectionProtocolError):
    """A second answer for the same request."""


# ----------------------------------------------------------------- the machine
class KafkaConnection(Generic[R]):
    """The protocol state of one connection; ``R`` is whatever the shell calls an answer."""

    __slots__ = (
        "_buf",
        "_closing_after",
        "_in_flight",
        "_max_in_flight",
        "_max_request_bytes",
        "_next_release",
        "_next_seq",
        "_pos",
        "_ready",
        "state",
    )

    def __init__(self, max_request_bytes: int, max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self._max_request_bytes = max_request_bytes
        self._max_in_flight = max_in_flight
        # read by the shell, set only here: a plain attribute, not a property (a Python
        # call, asked several times a request)
        self.state = OPEN
        self._buf = bytearray()
        self._pos = 0  # bytes of _buf already taken as frames
        self._next_seq = 0
        self._next_release = 0
        self._in_flight = 0
        self._ready: dict[int, tuple[R, bool]] = {}  # answers waiting for earlier ones
        self._closing_after = -1

    def set_max_request_bytes(self, max_request_bytes: int) -> None:
        """A new frame size limit from the next size prefix on (SASL lifts its own limit
        once the client has authenticated)."""
        self._max_request_bytes = max_request_bytes

    # ------------------------------------------------------------ read-outs
    @property
    def in_flight(self) -> int:
        """Requests handed out and not released (answered or not)."""
        return self._in_flight

    @property
    def next_seq(self) -> int:
        """The number the next request gets: how many were read."""
        return self._next_seq

    @property
    def next_release(self) -> int:
        """The request whose answer is written next."""
        return self._next_release

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet taken as a request."""
        return len(self._buf) - self._pos

    @property
    def pending_frame_bytes(self) -> int:
        """The whole size (prefix included) of a frame begun but not complete at the
        head of the buffer, from its size prefix; 0 if none is begun or the prefix
        is incomplete or refused. A shell bounding request memory charges a frame
        this much as soon as it begins, as Kafka's memory pool allocates on the
        size, and lets a begun frame finish."""
        available = len(self._buf) - self._pos
        if available < 4 or self.state is not OPEN:
            return 0
        (size,) = _SIZE.unpack_from(self._buf, self._pos)
        if size < MIN_REQUEST_BYTES or size > self._max_request_bytes or available >= size + 4:
            return 0
        return size + 4

    @property
    def unreleased(self) -> tuple[R, ...]:
        """Answers received and held back (behind an earlier one, or while CLOSING)."""
        return tuple(response for response, _close in self._ready.values())

    @property
    def reading(self) -> bool:
        """Whether more requests may be read now (the shell polls for input only then)."""
        return self.state is OPEN and self._in_flight < self._max_in_flight

    def __repr__(self) -> str:
        return (f"<KafkaConnection {self.state.name} next_seq={self._next_seq} "
                f"next_release={self._next_release} in_flight={self._in_flight} "
                f"buffered={self.buffered_bytes}>")

    # ---------------------------------------------------------------- input
    def receive_data(self, data: bytes) -> None:
        """Bytes the socket gave, in order; the shell closes on end of stream itself."""
        if self.state is not OPEN:
            self._refuse_data()
        self._buf += data

    def _refuse_data(self) -> None:
        if self.state is CLOSED:
            raise ConnectionClosedError("cannot receive data: the connection is closed")
        raise ConnectionClosingError(
            f"cannot receive data: the connection is closing after the answer to "
            f"request {self._closing_after}")

    def next_event(self) -> Event:
        """The next request frame, FrameRefused, NEED_DATA or PAUSED.

        The in-flight bound is checked before the buffer, so a bad size
        prefix behind a full pipeline is refused only once it would be read.
        """
        state = self.state
        if state is not OPEN:
            if state is CLOSED:
                raise ConnectionClosedError("cannot read a request: the connection is closed")
            return PAUSED
        buf = self._buf
        pos = self._pos
        if self._in_flight >= self._max_in_flight:
            self._compact()
            return PAUSED
        available = len(buf) - pos
        if available < 4:
            self._compact()
            return NEED_DATA
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < MIN_REQUEST_BYTES or size > self._max_request_bytes:
            self.state = CLOSED
            self._drop_input()
            return FrameRefused(size, self._max_request_bytes)
        if available - 4 < size:
            self._compact()
            return NEED_DATA
        start = pos + 4
        end = start + size
        api_key, api_version, correlation_id = _HEADER.unpack_from(buf, start)
        frame = bytes(buf[start:end])
        if end == len(buf):  # the usual read: whole frames and nothing after them
            buf.clear()
            self._pos = 0
        else:
            self._pos = end
        seq = self._next_seq
        self._next_seq = seq + 1
        self._in_flight += 1
        return Request(seq, api_key, api_version, correlation_id, frame)

    def _compact(self) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0

    # --------------------------------------------------------------- output
    def receive_response(self, seq: int, response: R, close: bool = False) -> ResponsesReady[R]:
        """An answer to request ``seq``; returns the answers now in order to write.

        While CLOSING, answers are accepted (their requests were read) but
        not released: the client sees nothing after the closing answer.
        """
        if (seq == self._next_release and self._in_flight and not self._ready
                and self.state is OPEN):
            # the usual case: the answer to the oldest request, none held behind it
            self._next_release = seq + 1
            self._in_flight -= 1
            if close:
                self._close_after(seq)
            return ResponsesReady((response,), close)
        return self._receive_response(seq, response, close)

    def _receive_response(self, seq: int, response: R, close: bool) -> ResponsesReady[R]:
        state = self.state
        if state is CLOSED:
            raise ConnectionClosedError(
                f"cannot take the answer to request {seq}: the connection is closed")
        if seq < 0 or seq >= self._next_seq:
            raise UnknownRequestError(
                f"answer to request {seq}, but requests 0..{self._next_seq - 1} were read"
                if self._next_seq else f"answer to request {seq}, but no request was read")
        if seq < self._next_release or seq in self._ready:
            raise DuplicateResponseError(f"request {seq} was answered already")
        if state is CLOSING or seq != self._next_release:
            self._ready[seq] = (response, close)
            return NOTHING_READY
        released = [response]
        seq += 1
        ready = self._ready
        while not close and ready:
            entry = ready.pop(seq, None)
            if entry is None:
                break
            response, close = entry
            released.append(response)
            seq += 1
        self._next_release = seq
        self._in_flight -= len(released)
        if close:
            self._close_after(seq - 1)
        return ResponsesReady(tuple(released), close)

    def _close_after(self, seq: int) -> None:
        self.state = CLOSING
        self._closing_after = seq
        self._drop_input()

    # ---------------------------------------------------------------- close
    def close(self) -> int:
        """The shell closed the socket; returns how many requests go unanswered.

        Legal in every state (a socket may fail at any time); a second call
        returns 0.
        """
        abandoned = self._in_flight
        self.state = CLOSED
        self._in_flight = 0
        self._ready.clear()
        self._drop_input()
        return abandoned

    def _drop_input(self) -> None:
        self._buf = bytearray()
        self._pos = 0
