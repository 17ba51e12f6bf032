"""The descriptor poller of a worker loop: zmq.Poller's interface over epoll.

A worker loop waits on plain descriptors only (each mailbox's ZMQ_FD, the pykka
inbox's, sockets): zmq_poll re-registers every one of them in the kernel on each wait
(a loop of a broker holds about twenty), which a busy loop pays several microseconds a
turn for, and a broker of several processes turns about twice as often per request (each
frame from another process is a wake-up). epoll keeps the registrations and costs what
is ready. Readiness is level-triggered, as poll's: the loop sees the same events.

Masks are zmq's (``zmq.POLLIN``, ``POLLOUT``, ``POLLERR``) both ways, as zmq_poll reports
them for a plain descriptor: anything but in and out (an error, a hang-up) is POLLERR.
"""

from __future__ import annotations

import select

import zmq

_ZIN = int(zmq.POLLIN)
_ZOUT = int(zmq.POLLOUT)
_ZERR = int(zmq.POLLERR)
_EIN = select.EPOLLIN
_EOUT = select.EPOLLOUT


def _to_epoll(events: int) -> int:
    return (_EIN if events & _ZIN else 0) | (_EOUT if events & _ZOUT else 0)


def _from_epoll(events: int) -> int:
    if events == _EIN:
        return _ZIN
    mask = (_ZIN if events & _EIN else 0) | (_ZOUT if events & _EOUT else 0)
    if events & ~(_EIN | _EOUT):
        mask |= _ZERR
    return mask


class FdPoller:
    """register / modify / unregister / poll, as zmq.Poller's, for descriptors (ints)."""

    def __init__(self) -> None:
        # made at the first registration: every actor has a poller, only a loop's owner
        # uses it (an epoll is a descriptor; it is closed with its object)
        self._ep: select.epoll | None = None
        self._events: dict[int, int] = {}

    @property
    def _epoll(self) -> select.epoll:
        if self._ep is None:
            self._ep = select.epoll()
        return self._ep

    def register(self, fd: int, events: int) -> None:
        if type(fd) is not int:
            raise TypeError(f"a worker loop polls descriptors only, not {type(fd).__name__}")
        if not events:  # as zmq.Poller: no events is no registration
            if fd in self._events:
                self.unregister(fd)
            return
        wanted = _to_epoll(events)
        if fd in self._events:
            try:
                self._epoll.modify(fd, wanted)
            except FileNotFoundError:  # closed and its number taken again: a new file
                self._epoll.register(fd, wanted)
        else:
            try:
                self._epoll.register(fd, wanted)
            except FileExistsError:
                self._epoll.modify(fd, wanted)
        self._events[fd] = events

    def modify(self, fd: int, events: int) -> None:
        self.register(fd, events)

    def unregister(self, fd: int) -> None:
        del self._events[fd]  # KeyError for one not registered, as zmq.Poller
        try:
            self._epoll.unregister(fd)
        except OSError:  # closed already (epoll dropped it with its file)
            pass

    def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
        """Ready descriptors and their masks; ``timeout`` in ms (None or < 0: no limit)."""
        seconds = -1.0 if timeout is None or timeout < 0 else timeout / 1000
        ready = self._epoll.poll(seconds)
        if not ready:
            return ready
        return [(fd, _ZIN if ev == _EIN else _from_epoll(ev)) for fd, ev in ready]

    def close(self) -> None:
        if self._ep is not None:
            self._ep.close()
            self._ep = None
        self._events.clear()
