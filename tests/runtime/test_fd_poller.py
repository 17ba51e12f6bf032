"""The worker loop's descriptor poller (actors.runtime.fd_poller): zmq.Poller's answers
over epoll, for plain descriptors and ZeroMQ sockets' ZMQ_FDs."""

from __future__ import annotations

import os
import socket

import pytest
import zmq

from actors.runtime.fd_poller import FdPoller


def _both(fds_events: list[tuple[int, int]]) -> tuple[FdPoller, zmq.Poller]:
    ours, theirs = FdPoller(), zmq.Poller()
    for fd, events in fds_events:
        ours.register(fd, events)
        theirs.register(fd, events)
    return ours, theirs


def test_readiness_and_masks_are_zmq_pollers() -> None:
    """In, out, in and out, a hang-up (an error to zmq_poll), nothing ready: the same
    answers as zmq.Poller for the same descriptors."""
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    r, w = os.pipe()
    try:
        ours, theirs = _both([(b.fileno(), zmq.POLLIN), (d.fileno(), zmq.POLLIN | zmq.POLLOUT),
                              (r, zmq.POLLIN)])
        assert sorted(ours.poll(0)) == sorted(theirs.poll(0)) == [(d.fileno(), zmq.POLLOUT)]
        a.send(b"x")
        c.send(b"y")
        assert sorted(ours.poll(0)) == sorted(theirs.poll(0))
        assert dict(ours.poll(0)) == {b.fileno(): zmq.POLLIN,
                                      d.fileno(): zmq.POLLIN | zmq.POLLOUT}
        os.close(w)  # the pipe's writer gone: readable (end of file), and a hang-up
        w = -1
        assert dict(ours.poll(0))[r] == dict(theirs.poll(0))[r]
        ours.modify(d.fileno(), zmq.POLLIN)
        theirs.modify(d.fileno(), zmq.POLLIN)
        assert sorted(ours.poll(0)) == sorted(theirs.poll(0))
        ours.register(b.fileno(), 0)  # no events: no longer watched, as zmq.Poller
        assert b.fileno() not in dict(ours.poll(0))
        ours.close()
    finally:
        for s in (a, b, c, d):
            s.close()
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_timeout_waits_and_none_waits_for_readiness() -> None:
    a, b = socket.socketpair()
    poller = FdPoller()
    try:
        poller.register(b.fileno(), zmq.POLLIN)
        assert poller.poll(20) == []
        a.send(b"x")
        assert poller.poll(None) == [(b.fileno(), zmq.POLLIN)]
        assert poller.poll(-1) == [(b.fileno(), zmq.POLLIN)]
    finally:
        poller.close()
        a.close()
        b.close()


def test_unregister_of_a_closed_descriptor_and_its_number_taken_again() -> None:
    """A descriptor closed before it was unregistered (epoll forgot it with its file):
    unregister still succeeds; a new socket with the same number registers and is
    polled; a descriptor never registered is a KeyError, as with zmq.Poller."""
    poller = FdPoller()
    a, b = socket.socketpair()
    number = b.fileno()
    poller.register(number, zmq.POLLIN)
    b.close()
    poller.unregister(number)
    with pytest.raises(KeyError):
        poller.unregister(number)
    c, d = socket.socketpair()
    try:
        fd = c.fileno() if c.fileno() == number else d.fileno()
        poller.register(number, zmq.POLLIN)  # closed without unregister, reused
        poller.register(fd, zmq.POLLIN)  # registered twice: the second is a modify
        (d if fd == c.fileno() else c).send(b"x")
        assert (fd, zmq.POLLIN) in poller.poll(0)
        with pytest.raises(TypeError):
            poller.register(zmq.Context.instance().socket(zmq.PULL), zmq.POLLIN)  # type: ignore[arg-type]
    finally:
        poller.close()
        for s in (a, c, d):
            s.close()


def test_a_zeromq_sockets_fd_signals_a_frame() -> None:
    """The loop waits on each mailbox's ZMQ_FD: a frame sent makes it readable."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind("inproc://fd-poller")
    push = ctx.socket(zmq.PUSH)
    push.connect("inproc://fd-poller")
    poller = FdPoller()
    try:
        fd = pull.getsockopt(zmq.FD)
        poller.register(fd, zmq.POLLIN)
        pull.getsockopt(zmq.EVENTS)  # asked: the descriptor signals the next change
        push.send(b"frame")
        assert poller.poll(2000) == [(fd, zmq.POLLIN)]
        assert pull.getsockopt(zmq.EVENTS) & zmq.POLLIN
        assert pull.recv() == b"frame"
    finally:
        poller.close()
        push.close(linger=0)
        pull.close(linger=0)
        ctx.term()
