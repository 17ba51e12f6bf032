"""What reaches an actor's pykka inbox once its loop took its last look there, before the
actor is marked stopped: its stop runs (teardown, the last flush, the sockets' close)
and nobody reads the inbox again. Each test holds the real stop at that point."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest

from actors.runtime.actor import Actor
from actors.runtime.node import Node, NodeError
from actors.runtime.pykka_compat import call_message


class _Held(Actor):
    """An actor whose stop waits until ``go`` is set: in its loop's turn once told to stop
    (``hold = "turn"``: past its last look at its pykka inbox, before its stop begins), or
    in its teardown (``"teardown"``: its stop began)."""

    hold = "turn"

    def setup(self) -> None:
        self.held = threading.Event()
        self.go = threading.Event()
        self.turns = 0
        self.told: list[Any] = []

    def take_turn(self) -> None:
        self.turns += 1
        super().take_turn()

    def on_receive(self, message: Any) -> Any:
        self.told.append(message)
        return None

    def on_turn(self) -> None:
        if self.hold == "turn" and self._stopping and not self.held.is_set():
            self._wait()

    def teardown(self) -> None:
        if self.hold == "teardown":
            self._wait()

    def _wait(self) -> None:
        self.held.set()
        self.go.wait(30)


class _HeldInTeardown(_Held):
    hold = "teardown"


class _Turns(Actor):
    """Counts the turns ``Node.run_turns`` has it take."""

    def setup(self) -> None:
        self.turns = 0

    def take_turn(self) -> None:
        self.turns += 1
        super().take_turn()


class _TornDown(_Turns):
    """Lists each of its teardowns."""

    torn_down: list[str] = []

    def teardown(self) -> None:
        _TornDown.torn_down.append(self.name)


_HOLDS = {"turn": _Held, "teardown": _HeldInTeardown}


def _held_stop(node: Node, hold: str, placement: str = "own") -> tuple[_Held, threading.Thread]:
    """Actor "held" on ``node`` (in a thread of its own, or a guest of actor "host"), told
    to stop and held at ``hold``: (it, the stopper)."""
    if placement == "guest":
        node.spawn(_Turns, "host")
        node.spawn(_HOLDS[hold], "held", host="host")
    else:
        node.spawn(_HOLDS[hold], "held")
    actor = node.actors["held"]
    assert isinstance(actor, _Held)
    stopper = threading.Thread(target=node.stop_actor, args=("held", 30), daemon=True)
    stopper.start()
    assert actor.held.wait(10)
    return actor, stopper


_PLACES = pytest.mark.parametrize("placement", ["own", "guest"])
_HOLD_AT = pytest.mark.parametrize("hold", ["turn", "teardown"])


@_PLACES
@_HOLD_AT
def test_a_second_stop_of_a_stopping_actor_returns_true_once_it_stopped(
        nodes: list[Node], hold: str, placement: str) -> None:
    """A second stop_actor told to a guest while the first one's stop runs went into an
    inbox nobody reads again (pykka's end of a thread answers what its own inbox holds, a
    guest has no thread of its own): it waited its whole timeout and said the actor did
    not stop, though it had. Now it returns True as soon as the actor stopped. (The cases
    of an actor with its own thread passed before too, pykka's end of the thread answering
    them: kept as guards of the seal.)"""
    node = Node("a").start()
    nodes.append(node)
    actor, stopper = _held_stop(node, hold, placement)
    results: list[tuple[bool, float]] = []
    second = threading.Thread(
        target=lambda: results.append((node.stop_actor("held", 5), time.monotonic())),
        daemon=True)
    try:
        second.start()
        time.sleep(0.3)  # told meanwhile: into the inbox, or refused there
        assert not results  # the actor has not stopped yet: the second stop waits for it
    finally:
        released = time.monotonic()
        actor.go.set()
    second.join(10)
    stopper.join(10)
    assert not second.is_alive() and not stopper.is_alive()
    [(stopped, at)] = results
    assert stopped
    assert at - released < 2
    assert actor.actor_stopped.is_set()


def test_run_turns_takes_a_stopping_actor_as_one_that_ended(nodes: list[Node]) -> None:
    """run_turns while an actor's teardown runs (its stop began): its take_turn waited in
    an inbox nobody reads until the actor's thread ended; a teardown longer than
    run_turns' timeout raised pykka's Timeout to run_turns' caller, and the actors after
    it got no turn (their loops ran on). Now the ask fails at once as to a stopped
    actor: run_turns goes on and every other actor takes its turn."""
    node = Node("a").start()
    nodes.append(node)
    node.spawn(_Turns, "before")
    actor, stopper = _held_stop(node, "teardown")
    node.spawn(_Turns, "after")
    errors: list[BaseException] = []
    runner = threading.Thread(target=lambda: _run_turns(node, errors), daemon=True)
    try:
        runner.start()
        runner.join(3)  # past run_turns' timeout, the teardown still held
    finally:
        actor.go.set()
    runner.join(10)
    stopper.join(10)
    assert not runner.is_alive() and not stopper.is_alive()
    assert not errors, errors
    assert node.actors["before"].turns == 1  # type: ignore[attr-defined]
    assert node.actors["after"].turns == 1  # type: ignore[attr-defined]
    assert actor.turns == 0
    assert actor.actor_stopped.is_set()


def _run_turns(node: Node, errors: list[BaseException]) -> None:
    try:
        node.run_turns(timeout=1)
    except BaseException as exc:
        errors.append(exc)


@_PLACES
@_HOLD_AT
def test_what_reaches_a_stopping_actors_inbox_is_answered_as_to_a_stopped_one(
        nodes: list[Node], hold: str, placement: str) -> None:
    """An ask (a proxy call) and a tell to the pykka inbox of an actor finishing its stop:
    the tell was lost, unsaid, and a guest's ask waited its whole timeout (one in a
    thread of its own failed once the thread ended). Now the ask fails with
    ActorDeadError (at once once the stop began) and the tell is a dead letter, "actor
    held@a stopped"."""
    node = Node("a").start()
    nodes.append(node)
    actor, stopper = _held_stop(node, hold, placement)
    ref = actor.actor_ref
    try:
        asked = ref.ask(call_message("take_turn"), block=False)
        ref.tell("hello")
        if hold == "teardown":  # refused at once
            with pytest.raises(pykka.ActorDeadError):
                asked.get(timeout=2)
    finally:
        actor.go.set()
    with pytest.raises(pykka.ActorDeadError):
        asked.get(timeout=2)
    stopper.join(10)
    assert not stopper.is_alive()
    assert actor.turns == 0 and actor.told == []
    assert node.dead_letters.by_reason() == {"actor held@a stopped": 1}


def test_a_guest_handed_to_a_stopping_host_fails_to_start_at_once(nodes: list[Node]) -> None:
    """A guest spawned on a host finishing its stop: its adoption waited in the host's
    inbox nobody reads, and spawn waited START_NOTE_S (30 s) before it said so. Now
    spawn fails at once, naming the host; the guest's teardown does not run, as its
    setup never did."""
    _TornDown.torn_down.clear()
    node = Node("a").start()
    nodes.append(node)
    actor, stopper = _held_stop(node, "teardown")
    failures: list[BaseException] = []

    def spawn_guest() -> None:
        try:
            node.spawn(_TornDown, "guest", host="held")
        except BaseException as exc:
            failures.append(exc)

    spawner = threading.Thread(target=spawn_guest, daemon=True)
    try:
        spawner.start()
        spawner.join(5)
        assert not spawner.is_alive()
    finally:
        actor.go.set()
    stopper.join(10)
    [exc] = failures
    assert isinstance(exc, NodeError)
    assert "its host 'held' stopped" in str(exc), exc
    assert "guest" not in node.actors or node.actors["guest"].actor_stopped.is_set()
    assert _TornDown.torn_down == []
