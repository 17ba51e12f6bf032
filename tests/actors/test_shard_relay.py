"""The ShardRelay (process 0's stand-in for a shard of another process, for the
transaction coordinators' markers): its own request ids, and answers passed on."""

from __future__ import annotations

from typing import Any

import pytest

from actors.runtime.actor import Actor, handles
from actors.runtime.node import Node
from actors.shard_relay import ShardRelay
from actors.topology import Topology
from tests.fixtures.crash import crash_once
from tests.fixtures.waiting import wait_for
from wire.broker_messages import GetStats
from wire.transaction_messages import (
    TxnMarkerDoneRow,
    TxnMarkerRow,
    WriteTxnMarkers,
    WriteTxnMarkersDone,
)


class Keeper(Actor):
    """The shard's, and the coordinator's, place: keeps what comes."""

    def setup(self) -> None:
        self.got: list[Any] = []

    @handles(WriteTxnMarkers, WriteTxnMarkersDone)
    def on_any(self, msg: Any) -> None:
        self.got.append(msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        return [[type(m).__name__, list(m)] for m in self.got]


def test_a_late_answer_to_the_old_life_is_not_taken_for_the_new_lifes_request(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay crashes (restarted in place) while its first markers wait for the ISR;
    the same coordinator's next markers get a request id the old life never gave, so
    the shard's late answer to the old one is not passed on as theirs."""
    armed = crash_once(monkeypatch, ShardRelay, "on_markers", WriteTxnMarkers)
    topo = Topology(node.name, 1, 1, 2, 2, 1)
    shard = node.spawn(Keeper, topo.shard(1).name)
    coordinator = node.spawn(Keeper, "coordinator")
    relay = node.spawn(ShardRelay, "relay-1", topology=topo, index=1)
    row = TxnMarkerRow("t", 1, 7, 0, True, 0)
    node.tell(relay, WriteTxnMarkers(50, [row]), sender=coordinator.name)
    [(_n, first)] = wait_for(lambda: node.ask(shard, GetStats()) or None, "the first markers")
    armed["crash"] = True
    node.tell(relay, WriteTxnMarkers(51, [row]), sender=coordinator.name)  # crashes it
    node.tell(relay, WriteTxnMarkers(52, [row]), sender=coordinator.name)
    sent = wait_for(lambda: (lambda g: g if len(g) == 2 else None)(
        node.ask(shard, GetStats())), "the markers after the restart")
    second = sent[1][1]
    assert second[0] != first[0], "a new life's request id repeats the old life's"
    # the old life's answer comes late: not passed on as the answer to request 52
    node.tell(relay, WriteTxnMarkersDone(first[0], [TxnMarkerDoneRow("t", 1, 0)]),
              sender=shard.name)
    node.tell(relay, WriteTxnMarkersDone(second[0], [TxnMarkerDoneRow("t", 1, 0)]),
              sender=shard.name)
    wait_for(lambda: node.ask(coordinator, GetStats()) or None, "the answer")
    node.quiesce()
    answers = node.ask(coordinator, GetStats())
    assert [a[1][0] for a in answers] == [52]
