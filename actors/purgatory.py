"""PurgatoryShard: delayed produces and fetches waiting on partition changes.

A thin shell around its core (actors/core/purgatory_core.py), which owns the
watcher lists, the watch counts and the operation ids. Partition shards tell
it about changes of the partitions it watches; the Timer tells it when an
operation is due. Completion and expiry arrive as messages in one mailbox, so
whichever comes first wins and the other finds the operation answered: the
requester gets exactly one answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from actors.core.delayed_produce_fetch import (
    FetchPartitionStatus,
    ProducePartitionStatus,
    SegmentPosition,
    TopicPartition,
)
from actors.core.purgatory_core import (
    AnswerFetch,
    AnswerProduce,
    CancelExpiry,
    Effect,
    Event,
    ExpiryDue,
    FetchWaits,
    PartitionUpdated,
    ProduceWaits,
    PurgatoryCore,
    ScheduleExpiry,
    WatchStatus,
)
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.runtime.tracing import new_id
from actors.topology import Topology, broker_node_name
from wire.broker_messages import (
    AppendDoneRow,
    Cancel,
    Expired,
    FetchReady,
    FollowerAck,
    GetStats,
    PartitionChanged,
    ProduceReady,
    Schedule,
    WatchFetch,
    WatchPartition,
    WatchProduce,
)
from wire.cluster_messages import ShardRestarted
from wire.errors import ErrorCode


class PurgatoryShard(Actor):
    """Messages in, core events; core effects, messages out (actors/core/purgatory_core.py)."""

    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, topology: Topology,
                 purge_interval_requests: int = 1000, clock: Clock | None = None,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.purge_interval = purge_interval_requests
        if clock is not None:
            self.clock = clock

    def setup(self) -> None:
        self.core = PurgatoryCore(self.name, self.purge_interval)
        # Traced waits: (requester, req_id) -> (trace id, span id of the Watch message,
        # wall ns it arrived, "DelayedProduce" or "DelayedFetch"). The answer goes out
        # in that trace, and a "wait" record says how long it waited and what ended it.
        self.traced: dict[tuple[Any, int], tuple[int, int, int, str]] = {}
        # While a PartitionChanged is handled: the follower fetch that caused it and
        # that fetch's trace context (what a completion links to).
        self._cause: tuple[FollowerAck | None, int, int] | None = None

    def _remember(self, requester: Any, req_id: int, kind: str) -> None:
        tid, span = self._trace
        if tid and self._tracer.enabled:
            self.traced[(requester, req_id)] = (tid, span, self._tracer.wall_ns(), kind)

    @handles(WatchFetch)
    def on_watch_fetch(self, msg: WatchFetch) -> None:
        assert self.current_sender is not None
        parts = {
            TopicPartition(r.topic, r.partition): FetchPartitionStatus(
                r.fetch_offset, SegmentPosition(r.segment_base_offset, r.relative_position),
                r.max_bytes)
            for r in msg.rows
        }
        self._remember(self.current_sender, msg.req_id, "DelayedFetch")
        self._run(FetchWaits(self.current_sender, msg.req_id, msg.min_bytes, msg.max_wait_ms,
                             msg.from_follower, parts))

    @handles(WatchProduce)
    def on_watch_produce(self, msg: WatchProduce) -> None:
        parts = {
            TopicPartition(r.topic, r.partition): ProducePartitionStatus(
                r.required_offset, r.base_offset, r.log_append_time_ms, r.log_start_offset,
                ErrorCode(r.error_code), r.leader_epoch)
            for r in msg.rows
        }
        handler = Address(msg.handler_node or self.node.name, msg.handler)
        self._remember(handler, msg.req_id, "DelayedProduce")
        self._run(ProduceWaits(handler, msg.req_id, msg.timeout_ms, parts))

    @handles(PartitionChanged)
    def on_changed(self, msg: PartitionChanged) -> None:
        self._cause = (msg.ack, *self._trace)
        try:
            self._run(PartitionUpdated(msg.status))
        finally:
            self._cause = None

    @handles(ShardRestarted)
    def on_shard_restarted(self, msg: ShardRestarted) -> None:
        """One shard lost its memory (a crash restarted it in place, or its process was
        restarted) and its partitions serve again: it forgot its watchers. Watch them
        again; a shard that does not host one any more answers it gone, and its waits
        end (the clients retry) rather than wait out their timeouts."""
        if not 0 <= msg.shard < self.topology.num_shards:
            self.log.warning("ShardRestarted names shard {}, not one of the {} shards",
                             msg.shard, self.topology.num_shards)
            return
        restarted = self.topology.shard(msg.shard)
        self._watch_again(lambda shard: shard == restarted)

    def _watch_again(self, restarted: Callable[[Address], bool]) -> None:
        """Watch again every watched partition whose shard ``restarted`` says forgot it."""
        for tp in self.core.watch_counts():
            shard = self.topology.shard_for(tp.topic, tp.partition)
            if restarted(shard):
                self.tell(shard, WatchPartition(tp.topic, tp.partition, -1, True))

    @handles(Expired)
    def on_expired(self, msg: Expired) -> None:
        self._run(ExpiryDue(msg.key))

    def _run(self, event: Event) -> None:
        for fx in self.core.handle(event, self.clock.now_ms()):
            self._perform(fx)

    def _perform(self, fx: Effect) -> None:
        if isinstance(fx, WatchStatus):
            tp = fx.partition
            self.tell(self.topology.shard_for(tp.topic, tp.partition),
                      WatchPartition(tp.topic, tp.partition, fx.seen_log_end_offset, True))
        elif isinstance(fx, ScheduleExpiry):
            self.tell(self.topology.timer, Schedule(fx.op_id, fx.deadline_ms))
        elif isinstance(fx, CancelExpiry):
            self.tell(self.topology.timer, Cancel(fx.op_id))
        elif isinstance(fx, AnswerFetch):
            outcome = fx.outcome
            self._answer(fx.requester, fx.req_id,
                         FetchReady(fx.req_id, outcome.reason, outcome.timed_out),
                         outcome.timed_out)
        elif isinstance(fx, AnswerProduce):
            rows = [AppendDoneRow(tp.topic, tp.partition, int(r.error_code), r.base_offset,
                                  r.log_append_time_ms, r.log_start_offset, None)
                    for tp, r in fx.outcome.responses.items()]
            self._answer(fx.requester, fx.req_id, ProduceReady(fx.req_id, rows),
                         fx.outcome.timed_out)
        else:  # UnwatchStatus
            tp = fx.partition
            self.tell(self.topology.shard_for(tp.topic, tp.partition),
                      WatchPartition(tp.topic, tp.partition, -1, False))

    def _answer(self, requester: Any, req_id: int, msg: Any, timed_out: bool) -> None:
        """Answer a wait; a traced one in its own trace, after its ``wait`` record."""
        traced = self.traced.pop((requester, req_id), None)
        if traced is None:
            self.tell(cast(Address, requester), msg)
            return
        tid, span, since_ns, kind = traced
        link_tid = link_span = 0
        offset = -1
        detail = "timed out" if timed_out else "completed"
        cause = self._cause
        if cause is not None and not timed_out:
            ack, link_tid, link_span = cause
            if ack is not None:
                offset = ack.fetch_offset
                detail = (f"high watermark moved by the fetch of replica {ack.replica_id} "
                          f"({broker_node_name(ack.replica_id)}) at offset {ack.fetch_offset}")
        now = self._tracer.wall_ns()
        self._tracer.record("wait", tid, new_id(), span, self.name, str(requester), kind,
                            sent_ns=since_ns, recv_ns=since_ns, done_ns=now,
                            link_trace_id=link_tid, link_span_id=link_span, offset=offset,
                            detail=detail)
        self.tell_in(tid, span, cast(Address, requester), msg)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        s = self.core.stats()
        return {"delayed": s.waiting, "watched_keys": s.watched_keys,
                "expirations": s.expirations, "live": s.waiting,
                "watched_partitions": s.watched_partitions,
                "by_kind": self.core.waiting_by_kind()}
