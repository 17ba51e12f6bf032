"""The pykka inbox of an actor whose loop polls ZeroMQ sockets and file descriptors."""

from __future__ import annotations

import os
import queue
from typing import Any


class EventFdInbox:
    """pykka's inbox, woken through an eventfd the actor's poll loop watches.

    pykka puts its envelopes here (proxy calls, ``ActorRef.ask``, stop); the
    write to the eventfd wakes the poll loop, which then takes them with
    :meth:`get`, never blocking.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def put(self, envelope: Any, /) -> None:
        self._queue.put(envelope)
        try:
            os.eventfd_write(self.fd, 1)
        except OSError:
            pass  # closed: the actor is gone and pykka will report it dead

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

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
