"""The pykka inbox of an actor whose loop polls ZeroMQ sockets and file descriptors."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any


class EventFdInbox:
    """pykka's inbox, woken through an eventfd the actor's poll loop watches.

    pykka puts its envelopes here (proxy calls, ``ActorRef.ask``, stop); the
    write to the eventfd wakes the poll loop, which then takes them with
    :meth:`get`, never blocking.

    Once the loop reads it no more (the actor's stop, :meth:`seal`), an envelope put is
    handed to the refusal the seal named, in the putter's thread: none waits, unread, in
    an inbox nobody looks at. Puts are not on the request path (only the node's own
    calls, stops and guests' adoptions come this way), so they take a lock.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        # Every put and the seal under it: an envelope is in the queue when the seal takes
        # what is left, or refused; and no put writes to the descriptor once it is closed
        # (its number may be another file's by then)
        self._lock = threading.Lock()
        self._refuse: Callable[[Any], None] | None = None
        self._closed = False

    def put(self, envelope: Any, /) -> None:
        with self._lock:
            refuse = self._refuse
            if refuse is None:
                self._queue.put(envelope)
                if not self._closed:
                    try:
                        os.eventfd_write(self.fd, 1)
                    except OSError:
                        pass
                return
        refuse(envelope)

    def get(self) -> Any:
        """The next envelope; raises ``queue.Empty`` when there is none."""
        return self._queue.get_nowait()

    def empty(self) -> bool:
        return self._queue.empty()

    def clear_wakeups(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass

    def seal(self, refuse: Callable[[Any], None]) -> list[Any]:
        """The loop reads no more: every envelope put from now on goes to ``refuse`` (in
        the putter's thread). Returns the envelopes put and not taken, in order (none
        when sealed already)."""
        with self._lock:
            if self._refuse is not None:
                return []
            self._refuse = refuse
        left = []
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                return left

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            os.close(self.fd)
        except OSError:
            pass
