"""The controller's channel to the nodes: one request in flight per broker, resent until
the answer that names its correlation id comes. No actors, no clock: ``now_ms`` is handed in."""

from __future__ import annotations

from typing import Any

import pytest

from actors.core.controller_channel import ControllerChannel
from wire import cluster_messages as cm

RETRY_MS = 100
E = 7 << 32  # the ids of controller epoch 7 (the requests' epoch) are E + 1, E + 2, ...


def _lai(leader_epoch: int, controller_epoch: int = 7) -> cm.LeaderAndIsr:
    return cm.LeaderAndIsr(1, controller_epoch, 5, [cm.LeaderAndIsrPartition(
        "t", 0, 7, 2, leader_epoch, [2], 1, [2], False)], [], {"t": {}})


def _um(controller_epoch: int = 7) -> cm.UpdateMetadata:
    return cm.UpdateMetadata(1, controller_epoch, 5, False, [], [], {})


def _stop() -> cm.StopReplica:
    return cm.StopReplica(1, 7, 5, [cm.StopReplicaPartition("t", 0, -1, True)])


def _ids(sent: list[tuple[int, Any]]) -> list[tuple[int, str, int]]:
    return [(broker, type(r).__name__, r.correlation_id) for broker, r in sent]


def test_each_request_goes_out_with_the_next_id_of_its_broker() -> None:
    channel = ControllerChannel(RETRY_MS)
    assert _ids(channel.enqueue(2, _um(), 0)) == [(2, "UpdateMetadata", E + 1)]
    assert channel.enqueue(2, _lai(3), 0) == []  # waits behind the first
    assert _ids(channel.enqueue(3, _lai(3), 0)) == [(3, "LeaderAndIsr", E + 1)]  # ids per broker
    answered, nxt = channel.acknowledge(2, cm.UpdateMetadata, E + 1, 10)
    assert answered == _um()._replace(correlation_id=E + 1)
    assert _ids(nxt) == [(2, "LeaderAndIsr", E + 2)]
    assert nxt[0][1]._replace(correlation_id=0) == _lai(3), "only the id is set"
    assert channel.ignored == 0


def test_a_resend_keeps_its_id_and_its_answer_acknowledges_it() -> None:
    channel = ControllerChannel(RETRY_MS)
    [(_, first)] = channel.enqueue(2, _lai(3), 0)
    assert channel.due(RETRY_MS - 1) == []
    assert channel.due(RETRY_MS) == [(2, first)]
    assert channel.due(2 * RETRY_MS) == [(2, first)]
    assert first.correlation_id == E + 1 and channel.resent == 2
    answered, _ = channel.acknowledge(2, cm.LeaderAndIsr, E + 1, 2 * RETRY_MS + 1)
    assert answered is first
    assert channel.pending() == 0


def test_a_late_answer_to_an_earlier_request_does_not_acknowledge_the_next() -> None:
    """LeaderAndIsr 1 was sent twice; the answer to the resend came first and the next
    LeaderAndIsr (2) went out. The answer to the first send, late, names id 1: before the
    ids it was taken for request 2, which the node may not have applied yet."""
    channel = ControllerChannel(RETRY_MS)
    channel.enqueue(2, _lai(3), 0)
    channel.enqueue(2, _lai(4), 0)
    channel.due(RETRY_MS)  # resent, same id
    answered, nxt = channel.acknowledge(2, cm.LeaderAndIsr, E + 1, RETRY_MS + 1)
    assert answered is not None and answered.partitions[0].leader_epoch == 3
    assert _ids(nxt) == [(2, "LeaderAndIsr", E + 2)]

    assert channel.acknowledge(2, cm.LeaderAndIsr, E + 1, RETRY_MS + 2) == (None, [])
    assert channel.ignored == 1
    assert channel.pending(2) == 1
    assert channel.in_flight(2).correlation_id == E + 2, "request 2 is still waiting"
    # ... and is resent until its own answer comes
    assert _ids(channel.due(2 * RETRY_MS + 1)) == [(2, "LeaderAndIsr", E + 2)]
    answered, _ = channel.acknowledge(2, cm.LeaderAndIsr, E + 2, 2 * RETRY_MS + 2)
    assert answered is not None and answered.partitions[0].leader_epoch == 4
    assert channel.pending() == 0


@pytest.mark.parametrize(("request_type", "correlation_id"), [
    (cm.StopReplica, E + 1),    # the id in flight, another type
    (cm.LeaderAndIsr, 0),       # an answer naming no request (a sender without ids)
    (cm.LeaderAndIsr, E + 2),   # an id not given yet
    (cm.LeaderAndIsr, 1),       # the number in flight, without its term's epoch
    (cm.LeaderAndIsr, (6 << 32) + 1),  # the same number of the term before
])
def test_an_answer_that_does_not_name_the_request_in_flight_is_ignored(
        request_type: type, correlation_id: int) -> None:
    channel = ControllerChannel(RETRY_MS)
    channel.enqueue(2, _lai(3), 0)
    assert channel.acknowledge(2, request_type, correlation_id, 1) == (None, [])
    assert channel.ignored == 1
    assert channel.in_flight(2).correlation_id == E + 1


def test_an_answer_from_a_broker_with_nothing_in_flight_is_ignored() -> None:
    channel = ControllerChannel(RETRY_MS)
    assert channel.acknowledge(4, cm.UpdateMetadata, E + 1, 0) == (None, [])
    channel.enqueue(2, _um(), 0)
    channel.acknowledge(2, cm.UpdateMetadata, E + 1, 1)
    assert channel.acknowledge(2, cm.UpdateMetadata, E + 1, 2) == (None, [])  # answered twice
    assert channel.ignored == 2


def test_ids_go_on_after_the_broker_left_the_channel_was_cleared_or_replaced() -> None:
    """An answer of the broker's previous life, or to the controller's previous term, may
    still come: a new request never reuses the id it names."""
    channel = ControllerChannel(RETRY_MS)
    channel.enqueue(2, _stop(), 0)
    assert channel.remove_broker(2) == 1
    assert _ids(channel.enqueue(2, _stop(), 0)) == [(2, "StopReplica", E + 2)]
    assert channel.acknowledge(2, cm.StopReplica, E + 1, 1) == (None, [])
    channel.clear()
    assert _ids(channel.enqueue(2, _um(), 0)) == [(2, "UpdateMetadata", E + 3)]
    # the controller actor restarted: its new channel starts after the old one's ids
    again = ControllerChannel(RETRY_MS, channel.last_ids)
    assert _ids(again.enqueue(2, _um(), 0)) == [(2, "UpdateMetadata", E + 4)]
    assert _ids(again.enqueue(5, _um(), 0)) == [(5, "UpdateMetadata", E + 1)]


def test_a_controller_that_lost_its_counters_gives_no_id_of_its_earlier_term() -> None:
    """The controller node's process restarted (nothing of its channel is left) and won the
    election again, at epoch 8. Broker 2 still held LeaderAndIsr 2 of epoch 7 and answers
    it late, to the same address: that answer must not acknowledge the new term's second
    request, which broker 2 has not applied."""
    before = ControllerChannel(RETRY_MS)
    before.enqueue(2, _um(), 0)
    before.enqueue(2, _lai(3), 0)
    before.acknowledge(2, cm.UpdateMetadata, E + 1, 1)
    [(_, old)] = before.due(RETRY_MS + 1)
    assert old.correlation_id == E + 2  # unanswered when the process died

    after = ControllerChannel(RETRY_MS)  # a new process: no last_ids
    assert _ids(after.enqueue(2, _um(8), 0)) == [(2, "UpdateMetadata", (8 << 32) + 1)]
    assert after.enqueue(2, _lai(5, 8), 0) == []
    answered, nxt = after.acknowledge(2, cm.UpdateMetadata, (8 << 32) + 1, 1)
    assert answered is not None and _ids(nxt) == [(2, "LeaderAndIsr", (8 << 32) + 2)]
    assert after.acknowledge(2, cm.LeaderAndIsr, old.correlation_id, 2) == (None, [])
    assert after.in_flight(2).partitions[0].leader_epoch == 5, "still waiting for its answer"
    # a channel that kept its counters over a term change starts at the new epoch too
    assert _ids(before.enqueue(3, _um(8), 0)) == [(3, "UpdateMetadata", (8 << 32) + 1)]
    before.clear()
    assert _ids(before.enqueue(2, _um(8), 0)) == [(2, "UpdateMetadata", (8 << 32) + 1)]


def test_retry_ms_must_be_positive() -> None:
    with pytest.raises(ValueError, match="retry_ms must be positive, got 0"):
        ControllerChannel(0)
