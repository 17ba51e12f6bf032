"""Planted bugs: a known mistake switched on for one run, to show the simulator finds it.

A plant swaps one attribute (a method of a core or an actor) for a faulty
version while the run lasts and puts the original back afterwards; the code
under test is otherwise the code on this branch. The replication plants each
break the one method that keeps one of Kafka's replication promises:

- ``hw-ignores-isr``: PartitionState.maybe_increment_high_watermark takes the
  leader's log end, whatever the followers have;
- ``no-epoch-fence``: the follower's two fences against a stale leader epoch
  are gone: PartitionShard._apply_one applies a fetcher's answer whatever
  leader epoch it was fetched at, and PartitionState.diverging_epoch never
  tells a follower that its log left the leader's (KIP-320), so what it
  fetched from a stale leader stays in its log;
- ``ack-before-replication``: PartitionShard._answer answers an acks=all
  append at once, without parking it in the purgatory for the ISR;
- ``isr-shrink-unpersisted``: PartitionShard._propose applies an ISR shrink in
  memory and writes nothing (no AlterPartition, no version-checked write), so
  ZooKeeper keeps the dropped follower in the ISR and may elect it;
- ``isr-unknown-forgotten``: PartitionState.on_isr_result takes an answer
  that leaves an ISR change's fate unknown (timed out, no controller) as a
  refusal: back to the committed ISR, while ZooKeeper may hold the change and
  the controller may elect a replica it added (sim seed 80);
- ``reassign-keeps-removed``: the controller's last write of a completed
  reassignment (KIP-455's B6) clears the adding and removing replicas but
  keeps the whole replica set, the removed replicas with the target
  (``--reassign``'s check finds it).

A plant that needs code this branch lacks has ``swaps`` None and says what in
``needs`` (none today).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from actors.core.cluster_model import ReplicaAssignment, TopicPartition
from actors.core.controller_state import ControllerCore
from actors.core.partition_state import PROPOSAL_RETRY_MS, PartitionState
from actors.core.producer_state import ProducerStateManager
from actors.core.purgatory_core import CancelExpiry, Effect, PurgatoryCore, _answer
from actors.partition_shard import PartitionShard
from wire.broker_messages import AppendDone


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


# ------------------------------------------------------------- hw-ignores-isr
def _hw_from_log_end(self: PartitionState) -> bool:
    """As PartitionState.maybe_increment_high_watermark, over the leader alone."""
    new_hw = self.log.log_end_offset
    if new_hw > self.log.high_watermark:
        self.log.update_high_watermark(new_hw)
        return True
    return False


def _hw_ignores_isr() -> list[tuple[Any, str, Any]]:
    return [(PartitionState, "maybe_increment_high_watermark", _hw_from_log_end)]


# ------------------------------------------------------------- no-epoch-fence
_REAL_APPLY_ONE = PartitionShard.__dict__["_apply_one"]


def _apply_any_epoch(self: PartitionShard, row: Any, now: int) -> Any:
    """As PartitionShard._apply_one, taking an answer fetched at any leader epoch as one of
    the epoch the follower is at now."""
    state = self.partitions.get((row.topic, row.partition))
    if state is not None and state.leader_id != self.broker_id:
        row = row._replace(leader_epoch=state.leader_epoch)
    return _REAL_APPLY_ONE(self, row, now)


def _never_diverges(self: PartitionState, last_fetched_epoch: int,
                    fetch_offset: int) -> tuple[int, int] | None:
    """As PartitionState.diverging_epoch, never telling a follower that its log left this
    one: what it fetched in a stale leader epoch stays in its log."""
    return None


def _no_epoch_fence() -> list[tuple[Any, str, Any]]:
    return [(PartitionShard, "_apply_one", _apply_any_epoch),
            (PartitionState, "diverging_epoch", _never_diverges)]


# ------------------------------------------------------ ack-before-replication
def _answer_at_once(self: PartitionShard, sender: Any, msg: Any, rows: list[Any],
                    waiting: list[Any]) -> None:
    """As PartitionShard._answer, not waiting for the ISR: acks=all answered after the
    leader's own append."""
    self.tell(sender, AppendDone(msg.req_id, rows))


def _ack_before_replication() -> list[tuple[Any, str, Any]]:
    return [(PartitionShard, "_answer", _answer_at_once)]


# ----------------------------------------------------- isr-shrink-unpersisted
_REAL_PROPOSE = PartitionShard.__dict__["_propose"]


def _shrink_in_memory(self: PartitionShard, state: PartitionState, proposal: Any,
                      kind: str) -> None:
    """As PartitionShard._propose, but a shrink takes effect at once, in memory only:
    nothing is written, so ZooKeeper's ISR still names the dropped followers."""
    if set(proposal.new_isr) < state.isr:
        state.isr = set(proposal.new_isr)
        state.maybe_increment_high_watermark()
        self._notify(state)
        return
    _REAL_PROPOSE(self, state, proposal, kind)


def _isr_shrink_unpersisted() -> list[tuple[Any, str, Any]]:
    return [(PartitionShard, "_propose", _shrink_in_memory)]


# ----------------------------------------------------- isr-unknown-forgotten
_REAL_ON_ISR_RESULT = PartitionState.__dict__["on_isr_result"]


def _unknown_as_refused(self: PartitionState, proposed_leader_epoch: int,
                        proposed_partition_epoch: int, error_code: int, isr: list[int],
                        partition_epoch: int, now_ms: int = 0) -> str:
    """As PartitionState.on_isr_result, but an answer that leaves the change's fate unknown
    drops the pending proposal: the high watermark goes back to the committed ISR."""
    outcome: str = _REAL_ON_ISR_RESULT(self, proposed_leader_epoch, proposed_partition_epoch,
                                       error_code, isr, partition_epoch, now_ms)
    if outcome != "resend":
        return outcome
    self.pending = None
    self.resend_at_ms = None
    self.proposals_held_until_ms = now_ms + PROPOSAL_RETRY_MS
    return "retry"


def _isr_unknown_forgotten() -> list[tuple[Any, str, Any]]:
    return [(PartitionState, "on_isr_result", _unknown_as_refused)]


# ----------------------------------------------------- reassign-keeps-removed
_REAL_WRITE_ASSIGNMENT = ControllerCore.__dict__["_write_partition_assignment"]


def _completed_keeping_removed(self: ControllerCore, tp: TopicPartition,
                               assignment: ReplicaAssignment, then: Any) -> None:
    """As ControllerCore._write_partition_assignment, but the write that completes a
    reassignment (its target, nothing moving) keeps the full replica set."""
    current = self.replica_assignment(tp)
    if current.being_reassigned and not assignment.being_reassigned \
            and assignment.replicas == current.target:
        assignment = ReplicaAssignment(current.replicas)
    _REAL_WRITE_ASSIGNMENT(self, tp, assignment, then)


def _reassign_keeps_removed() -> list[tuple[Any, str, Any]]:
    return [(ControllerCore, "_write_partition_assignment", _completed_keeping_removed)]


PLANTS: dict[str, Plant] = {p.name: p for p in [
    Plant("double-complete", "a delayed operation completed by a partition change keeps its "
          "expiry, which answers it again", _double_complete),
    Plant("no-idempotence", "a retried idempotent batch is written again (no duplicate or "
          "sequence check)", _no_idempotence),
    Plant("hw-ignores-isr", "the high watermark follows the leader's log end alone",
          _hw_ignores_isr),
    Plant("no-epoch-fence", "a follower accepts data from a stale leader epoch",
          _no_epoch_fence),
    Plant("ack-before-replication", "acks=all is answered after the local append",
          _ack_before_replication),
    Plant("isr-shrink-unpersisted", "the ISR shrinks in memory without the version-checked "
          "write", _isr_shrink_unpersisted),
    Plant("isr-unknown-forgotten", "an ISR change whose answer was lost is taken as not "
          "made", _isr_unknown_forgotten),
    Plant("reassign-keeps-removed", "a completed reassignment keeps the removed replicas in "
          "the replica set", _reassign_keeps_removed),
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
