"""Every pykka internal the runtime relies on, behind names of our own.

pykka's public API (``ThreadingActor``, ``ActorRef``, ``ActorRegistry``,
``Future``, ``ProxyCall``) does not cover an actor whose one thread polls
ZeroMQ sockets as well as pykka's inbox: the runtime swaps in its own inbox
and loop, takes pykka's stop message itself, and hands pykka's envelopes to
pykka's dispatcher. Those are private to pykka and may change in any release,
so they are used here and nowhere else. tests/runtime/test_pykka_compat.py
checks each of them (by name, signature and behaviour), and pyproject.toml
pins pykka to the releases that test passed on.

The private names: ``Actor._create_actor_inbox``, ``_start_actor_loop``,
``_actor_loop_running``, ``_handle_receive``, ``_handle_failure``,
``pykka.messages._ActorStop``, ``pykka._envelope.Envelope`` (its ``message``
and ``reply_to``) and ``ActorRef._actor_weakref`` (``ActorRef._actor`` in 4.4.0 and earlier).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import pykka
from pykka._envelope import Envelope
from pykka.messages import ProxyCall, _ActorStop

from actors.runtime.inbox import EventFdInbox

__all__ = ["Envelope", "PykkaActor", "actor_of", "call_message", "envelope", "is_stop"]


class PykkaActor(pykka.ThreadingActor):
    """``pykka.ThreadingActor`` with the internals the runtime replaces under our names.

    A subclass implements :meth:`_run_loop` (the whole life of the actor's
    thread after ``on_start``), may override :meth:`_start_thread` (a guest
    actor asks its host instead), and gets :meth:`_on_loop_failure` when
    ``on_start`` or the loop raises.
    """

    actor_inbox: EventFdInbox  # type: ignore[assignment]

    @staticmethod
    def _create_actor_inbox() -> EventFdInbox:  # type: ignore[override]
        return EventFdInbox()

    def _start_actor_loop(self) -> None:
        self._start_thread()

    def _start_thread(self) -> None:
        """Start the actor's own thread, which runs ``on_start`` and then the loop."""
        pykka.ThreadingActor._start_actor_loop(self)

    def _actor_loop_running(self) -> None:
        self._run_loop()

    def _run_loop(self) -> None:
        raise NotImplementedError

    def _handle_pykka_message(self, message: Any) -> Any:
        """Run a pykka message (a proxy call, get or set) the way pykka does."""
        return self._handle_receive(message)

    def _handle_failure(self, exc_type: type[BaseException] | None,
                        exc_value: BaseException | None, tb: TracebackType | None) -> None:
        self._on_loop_failure(exc_type, exc_value, tb)

    def _on_loop_failure(self, exc_type: type[BaseException] | None,
                         exc_value: BaseException | None, tb: TracebackType | None) -> None:
        """``on_start`` or the loop raised: pykka logs it and marks the actor stopped."""
        pykka.ThreadingActor._handle_failure(self, exc_type, exc_value, tb)


def envelope(message: Any) -> Envelope[Any]:
    """A pykka envelope (no reply expected) to put straight into an actor's inbox."""
    return Envelope(message)


def is_stop(message: Any) -> bool:
    """Whether a message taken from the inbox is pykka's stop request."""
    return isinstance(message, _ActorStop)


def call_message(method: str) -> ProxyCall:
    """The message that makes ``ActorRef.ask`` call ``method()`` on the actor."""
    return ProxyCall(attr_path=(method,), args=(), kwargs={})


def actor_of(ref: pykka.ActorRef[Any]) -> Any:
    """The actor object behind a ref: the node supervises it."""
    weak = getattr(ref, "_actor_weakref", None)  # pykka 4.5 holds a weakref
    if weak is not None:
        return weak()
    return ref._actor  # type: ignore[attr-defined]  # 4.4.0 and earlier: the actor
