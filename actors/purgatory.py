"""PurgatoryShard: delayed produces and fetches waiting on partition changes.

It owns the watcher lists of its keys (pure core: DelayedOperationPurgatory).
Partition shards tell it about changes of the partitions it watches; the
Timer tells it when an operation is due. Completion and expiry arrive as
messages in one mailbox, so whichever comes first wins and the other finds
the operation finished: the requester gets exactly one answer.
"""

from __future__ import annotations

import itertools
from typing import Any

from actors.core.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from actors.core.delayed_produce_fetch import (
    DelayedFetch,
    DelayedProduce,
    FetchPartitionStatus,
    ProducePartitionStatus,
    SegmentPosition,
    TopicPartition,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock, SystemClock
from actors.topology import Topology
from wire.broker_messages import (
    AppendDoneRow,
    Cancel,
    Expired,
    FetchReady,
    GetStats,
    PartitionChanged,
    ProduceReady,
    Schedule,
    WatchFetch,
    WatchPartition,
    WatchProduce,
)
from wire.errors import ErrorCode


class PurgatoryShard(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology,
                 purge_interval_requests: int = 1000, clock: Clock | None = None,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.purge_interval = purge_interval_requests
        self.clock = clock or SystemClock()

    def setup(self) -> None:
        # Waiting requests are not durable in Kafka either: after a restart the
        # clients' requests time out and are retried.
        self.purgatory = DelayedOperationPurgatory(self.name, self.purge_interval)
        self.ops: dict[int, tuple[DelayedOperation, Address, int]] = {}
        self.id_of: dict[DelayedOperation, int] = {}
        self.keys_of: dict[int, tuple[TopicPartition, ...]] = {}
        self.watch_count: dict[TopicPartition, int] = {}
        self.op_ids = itertools.count(1)
        self.expirations = 0

    # ---------------------------------------------------------------- watches
    @handles(WatchFetch)
    def on_watch_fetch(self, msg: WatchFetch) -> None:
        assert self.current_sender is not None
        parts = {
            (r.topic, r.partition): FetchPartitionStatus(
                r.fetch_offset, SegmentPosition(r.segment_base_offset, r.relative_position),
                r.max_bytes)
            for r in msg.rows
        }
        deadline = self.clock.now_ms() + max(0, msg.max_wait_ms)
        op = DelayedFetch(deadline, parts, msg.min_bytes, msg.from_follower)
        self._watch(op, self.current_sender, msg.req_id, op.watch_keys,
                    {tp: status.fetch_offset for tp, status in op.partitions.items()})

    @handles(WatchProduce)
    def on_watch_produce(self, msg: WatchProduce) -> None:
        parts = {
            (r.topic, r.partition): ProducePartitionStatus(
                r.required_offset, r.base_offset, r.log_append_time_ms, r.log_start_offset,
                ErrorCode(r.error_code), r.leader_epoch)
            for r in msg.rows
        }
        deadline = self.clock.now_ms() + max(0, msg.timeout_ms)
        op = DelayedProduce(deadline, parts)
        keys = op.watch_keys
        owner = Address(self.node.name, msg.handler)
        if not keys:
            self._answer(op, owner, msg.req_id)
            return
        self._watch(op, owner, msg.req_id, keys, {tp: -1 for tp in keys})

    def _watch(self, op: DelayedOperation, owner: Address, req_id: int,
               keys: tuple[TopicPartition, ...], seen: dict[TopicPartition, int]) -> None:
        if self.purgatory.try_complete_else_watch(op, keys):
            self._answer(op, owner, req_id)
            return
        op_id = next(self.op_ids)
        self.ops[op_id] = (op, owner, req_id)
        self.keys_of[op_id] = keys
        self.id_of[op] = op_id
        self.tell(self.topology.timer, Schedule(op_id, op.deadline_ms))
        for tp in keys:
            self.watch_count[tp] = self.watch_count.get(tp, 0) + 1
            # Every new watch asks for a fresh status: the shard answers at once.
            self.tell(self.topology.shard_for(tp.topic, tp.partition),
                      WatchPartition(tp.topic, tp.partition, seen.get(tp, -1), True))

    # ----------------------------------------------------------- completions
    @handles(PartitionChanged)
    def on_changed(self, msg: PartitionChanged) -> None:
        status = msg.status
        for op in self.purgatory.check_and_complete(status.key, status):
            op_id = self.id_of.pop(op, None)
            if op_id is None or op_id not in self.ops:
                continue
            _op, owner, req_id = self.ops.pop(op_id)
            self.tell(self.topology.timer, Cancel(op_id))
            self._release(op_id)
            self._answer(op, owner, req_id)

    @handles(Expired)
    def on_expired(self, msg: Expired) -> None:
        entry = self.ops.pop(msg.key, None)
        if entry is None:
            return  # completed first: the expiry lost the race
        op, owner, req_id = entry
        self.id_of.pop(op, None)
        self._release(msg.key)
        if self.purgatory.expire(op):
            self.expirations += 1
            self._answer(op, owner, req_id)

    def _release(self, op_id: int) -> None:
        for tp in self.keys_of.pop(op_id, ()):
            left = self.watch_count.get(tp, 0) - 1
            if left <= 0:
                self.watch_count.pop(tp, None)
                self.tell(self.topology.shard_for(tp.topic, tp.partition),
                          WatchPartition(tp.topic, tp.partition, -1, False))
            else:
                self.watch_count[tp] = left

    def _answer(self, op: DelayedOperation, owner: Address, req_id: int) -> None:
        outcome = op.outcome
        if isinstance(op, DelayedFetch):
            self.tell(owner, FetchReady(req_id, outcome.reason, outcome.timed_out))
        else:
            rows = [
                AppendDoneRow(tp.topic, tp.partition, int(r.error_code), r.base_offset,
                              r.log_append_time_ms, r.log_start_offset, None)
                for tp, r in outcome.responses.items()
            ]
            self.tell(owner, ProduceReady(req_id, rows))

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        m = self.purgatory.metrics()
        return {"delayed": m.num_delayed if hasattr(m, "num_delayed") else len(self.ops),
                "watched_keys": self.purgatory.watched_keys, "expirations": self.expirations,
                "live": len(self.ops)}
