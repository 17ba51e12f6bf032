"""Planted bugs: a known mistake switched on for one run, to show the simulator finds it.

A plant swaps one attribute (a method of a core or an actor) for a faulty
version while the run lasts and puts the original back afterwards; the code
under test is otherwise the code on this branch. A plant names what it needs:
the replication plants of issue 21 (``hw-ignores-isr``, ``no-epoch-fence``,
``ack-before-replication``, ``isr-shrink-unpersisted``) need the replication
of issue 15 (ReplicaFetchers, ISR, high watermark), which this branch does not
have yet; they are listed so ``actorlog sim --plant`` says so in one line, and
each becomes one more entry with its swap once that code is here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from actors.core.producer_state import ProducerStateManager
from actors.core.purgatory_core import CancelExpiry, Effect, PurgatoryCore, _answer


class PlantUnavailable(Exception):
    """The plant needs code this branch does not have."""


@dataclass(frozen=True)
class Plant:
    name: str
    description: str
    swaps: Callable[[], list[tuple[Any, str, Any]]] | None  # (owner, attribute, faulty value)
    needs: str = ""


# ------------------------------------------------------------ double-complete
def _updated_keeps_expiry(self: PurgatoryCore, status: Any) -> list[Effect]:
    """As PurgatoryCore._updated, but the completed operation stays registered for its
    expiry (no CancelExpiry, still in the waiting table)."""
    effects: list[Effect] = []
    for op in self.purgatory.check_and_complete(status.key, status):
        op_id = self._id_of[op]
        waiting = self._waiting[op_id]
        effects.append(_answer(op, waiting.requester, waiting.req_id))
    return [fx for fx in effects if not isinstance(fx, CancelExpiry)]


def _expired_answers_anyway(self: PurgatoryCore, op_id: int) -> list[Effect]:
    """As PurgatoryCore._expired, without asking whether the operation completed first."""
    waiting = self._waiting.pop(op_id, None)
    if waiting is None:
        return []
    self._id_of.pop(waiting.op, None)
    effects: list[Effect] = []
    self._release(waiting.keys, effects)
    self.purgatory.expire(waiting.op)
    effects.append(_answer(waiting.op, waiting.requester, waiting.req_id))
    return effects


def _double_complete() -> list[tuple[Any, str, Any]]:
    return [(PurgatoryCore, "_updated", _updated_keeps_expiry),
            (PurgatoryCore, "_expired", _expired_answers_anyway)]


# ------------------------------------------------------------- no-idempotence
def _no_duplicate(self: ProducerStateManager, header: Any) -> None:
    """As ProducerStateManager.find_duplicate, forgetting every batch already written."""
    return None


def _no_sequence_check(self: ProducerStateManager, headers: list[Any]) -> None:
    """As ProducerStateManager.check_batches, with no epoch or sequence checked."""


def _no_idempotence() -> list[tuple[Any, str, Any]]:
    return [(ProducerStateManager, "find_duplicate", _no_duplicate),
            (ProducerStateManager, "check_batches", _no_sequence_check)]


PLANTS: dict[str, Plant] = {p.name: p for p in [
    Plant("double-complete", "a delayed operation completed by a partition change keeps its "
          "expiry, which answers it again", _double_complete),
    Plant("no-idempotence", "a retried idempotent batch is written again (no duplicate or "
          "sequence check)", _no_idempotence),
    Plant("hw-ignores-isr", "the high watermark follows the leader's log end alone", None,
          needs="replication (issue 15)"),
    Plant("no-epoch-fence", "a follower accepts data from a stale leader epoch", None,
          needs="replication (issue 15)"),
    Plant("ack-before-replication", "acks=all is answered after the local append", None,
          needs="replication (issue 15)"),
    Plant("isr-shrink-unpersisted", "the ISR shrinks without the version-checked write", None,
          needs="replication (issue 15)"),
]}


@contextmanager
def planted(name: str | None) -> Iterator[Plant | None]:
    """Switch the named plant on for the block (nothing for None)."""
    if name is None:
        yield None
        return
    plant = PLANTS.get(name)
    if plant is None:
        raise PlantUnavailable(f"no plant named {name!r}; known: {', '.join(sorted(PLANTS))}")
    if plant.swaps is None:
        raise PlantUnavailable(f"plant {name!r} needs {plant.needs}, which this branch does "
                               f"not have yet")
    saved: list[tuple[Any, str, Any]] = []
    try:
        for owner, attr, value in plant.swaps():
            saved.append((owner, attr, owner.__dict__[attr]))
            setattr(owner, attr, value)
        yield plant
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)
