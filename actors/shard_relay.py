"""ShardRelay: another broker's WriteTxnMarkers to a shard of processes 1.. (num.processes > 1).

Other brokers reach this node through process 0 alone (its gateway is the one
registered in ZooKeeper), and a transaction coordinator there names the shard
that owns a partition by this node's shard count, ``<node>/shard-<i>``. With
num.processes > 1 shard i may live in process ``i % N``; process 0 then runs a
relay under that shard's name, which hands the markers to the shard (one ipc
hop) and its answer back to the coordinator, under the coordinator's req id. Markers the
ISR does not hold yet are answered by the shard's purgatory (ProduceReady), to the shard's
asker, this relay: passed on as the WriteTxnMarkersDone the shard would have sent.
"""

from __future__ import annotations

import itertools
from typing import Any

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.topology import Topology
from wire.broker_messages import GetStats, ProduceReady
from wire.transaction_messages import TxnMarkerDoneRow, WriteTxnMarkers, WriteTxnMarkersDone


class ShardRelay(Actor):
    mailbox_size = 0  # unbounded: the coordinators bound their own markers in flight

    def __init__(self, node: Any, name: str, *, topology: Topology, index: int,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.target = topology.shard(index)

    def setup(self) -> None:
        # kept over a crash restart: a late answer (markers wait for the ISR) to an id of
        # the old life must not match a new request's
        self.req_ids = getattr(self, "req_ids", None) or itertools.count(1)
        self.waiting: dict[int, tuple[Address, int]] = {}  # our req id -> (asker, its req id)
        self.relayed = 0

    @handles(WriteTxnMarkers)
    def on_markers(self, msg: WriteTxnMarkers) -> None:
        assert self.current_sender is not None
        req_id = next(self.req_ids)
        self.waiting[req_id] = (self.current_sender, msg.req_id)
        self.relayed += 1
        self.tell(self.target, WriteTxnMarkers(req_id, msg.rows))

    @handles(WriteTxnMarkersDone)
    def on_done(self, msg: WriteTxnMarkersDone) -> None:
        entry = self.waiting.pop(msg.req_id, None)
        if entry is not None:  # else: its process restarted; the coordinator retries
            asker, their_id = entry
            self.tell(asker, WriteTxnMarkersDone(their_id, msg.rows))

    @handles(ProduceReady)
    def on_ready(self, msg: ProduceReady) -> None:
        """The markers waited for the ISR (acks=-1) and the shard's purgatory settled them."""
        self.on_done(WriteTxnMarkersDone(msg.req_id, [
            TxnMarkerDoneRow(r.topic, r.partition, r.error_code) for r in msg.rows]))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"relayed": self.relayed, "waiting": len(self.waiting), "to": str(self.target)}
