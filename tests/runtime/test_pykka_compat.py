"""pykka's private names, as actors/runtime/pykka_compat.py uses them.

If a pykka release renames, re-signs or re-wires any of them, a test here
fails and says which; then adapt pykka_compat.py (and only it) and widen the
pykka range in pyproject.toml.
"""

from __future__ import annotations

import inspect
import select
from importlib.metadata import version
from typing import Any

import pykka
import pytest
from pykka import messages

from actors.runtime import pykka_compat
from actors.runtime.inbox import EventFdInbox
from actors.runtime.pykka_compat import PykkaActor, actor_of, call_message, envelope, is_stop
from tests.fixtures.waiting import wait_for


def params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


@pytest.mark.parametrize(
    ("owner", "name", "expected"),
    [
        (pykka.Actor, "_create_actor_inbox", []),
        (pykka.ThreadingActor, "_create_actor_inbox", []),
        (pykka.ThreadingActor, "_start_actor_loop", ["self"]),
        (pykka.Actor, "_actor_loop", ["self"]),
        (pykka.Actor, "_actor_loop_running", ["self"]),
        (pykka.Actor, "_handle_receive", ["self", "message"]),
        (pykka.Actor, "_handle_failure", ["self", "exception_type", "exception_value",
                                          "traceback"]),
    ],
)
def test_the_private_methods_we_override_or_call_are_there(
    owner: type, name: str, expected: list[str]
) -> None:
    fn = inspect.getattr_static(owner, name, None)
    assert fn is not None, f"pykka {version('pykka')}: {owner.__name__}.{name} is gone"
    if name == "_create_actor_inbox":
        assert isinstance(fn, staticmethod), f"{owner.__name__}.{name} is no longer static"
    assert params(getattr(owner, name)) == expected, (
        f"pykka {version('pykka')}: {owner.__name__}.{name} takes "
        f"{params(getattr(owner, name))}, pykka_compat expects {expected}"
    )


def test_the_private_message_and_envelope_types_are_there() -> None:
    assert inspect.isclass(messages._ActorStop)
    env = pykka_compat.Envelope("m")
    assert (env.message, env.reply_to) == ("m", None)
    assert params(pykka_compat.Envelope) == ["message", "reply_to"]
    assert is_stop(messages._ActorStop()) and not is_stop("stop")
    assert call_message("go") == messages.ProxyCall(attr_path=("go",), args=(), kwargs={})


class Looping(PykkaActor):
    """A PykkaActor with the smallest poll loop: the runtime's, without ZeroMQ."""

    def __init__(self, fail_on_start: bool = False) -> None:
        super().__init__()
        self.fail_on_start = fail_on_start
        self.started_by_us = False
        self.failures: list[type[BaseException] | None] = []
        self.plain: list[Any] = []
        self.value = 41

    def _start_thread(self) -> None:
        self.started_by_us = True
        super()._start_thread()

    def on_start(self) -> None:
        if self.fail_on_start:
            raise RuntimeError("no start")

    def answer(self) -> int:
        return self.value + 1

    def _run_loop(self) -> None:
        inbox = self.actor_inbox
        while not self.actor_stopped.is_set():
            select.select([inbox.fd], [], [], 5.0)
            inbox.clear_wakeups()
            while not inbox.empty():
                env = inbox.get()
                if is_stop(env.message):
                    pykka.ActorRegistry.unregister(self.actor_ref)
                    self.actor_stopped.set()
                    if env.reply_to is not None:
                        env.reply_to.set(None)
                    return
                if isinstance(env.message, str):
                    self.plain.append((env.message, env.reply_to))
                    continue
                result = self._handle_pykka_message(env.message)
                if env.reply_to is not None:
                    env.reply_to.set(result)

    def _on_loop_failure(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        self.failures.append(exc_type)
        super()._on_loop_failure(exc_type, exc_value, tb)


def test_our_inbox_thread_loop_and_dispatch_are_the_ones_pykka_runs() -> None:
    ref = Looping.start()
    try:
        actor = actor_of(ref)
        assert isinstance(actor, Looping)
        assert isinstance(actor.actor_inbox, EventFdInbox)  # _create_actor_inbox was used
        assert actor.started_by_us  # _start_actor_loop went through _start_thread
        assert ref.ask(call_message("answer"), timeout=5) == 42  # ask -> our loop -> pykka
        assert ref.proxy().value.get(timeout=5) == 41
        actor.actor_inbox.put(envelope("plain"))
        assert wait_for(lambda: actor.plain == [("plain", None)])
    finally:
        assert ref.stop(timeout=5) is True  # pykka's stop message reached our loop
    assert actor.actor_stopped.is_set() and actor.failures == []


def test_a_failing_start_reaches_our_failure_hook_and_stops_the_actor() -> None:
    ref = Looping.start(fail_on_start=True)
    actor = actor_of(ref)
    assert wait_for(lambda: actor.failures == [RuntimeError])
    assert wait_for(actor.actor_stopped.is_set)
    assert not ref.is_alive()

