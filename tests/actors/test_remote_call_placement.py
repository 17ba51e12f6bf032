"""Which of the partition-shard and coordinator calls get a deadline: only a call to an
actor of another process of the broker (num.processes > 1), never one to the handler's
own process, so a one-process broker and a process's own partitions are answered as they
were before deadlines. The calls are taken from the APIs' own generators (their first
yield), as the RequestHandler gets them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from actors.apis.base import PROMPT_DEADLINE_MS, HandlerContext
from actors.apis.describe_producers import handle_describe_producers
from actors.apis.groups import handle_heartbeat
from actors.apis.offset_for_leader_epoch import handle_offset_for_leader_epoch
from actors.core.topic_store import TopicEntry
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import Topology

MAIN, P1 = "node-1", "node-1-p1"
PARTITIONS = 4


def _context(node: str) -> HandlerContext:
    """A handler of process ``node`` of a broker of two processes (shard i in process
    i % 2; the coordinators in process 0)."""
    topo = Topology(node, 1, 1, 2, 2, 1, home=MAIN, process_nodes=(MAIN, P1))
    return HandlerContext(topo, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                          {"t": TopicEntry(PARTITIONS, {})}, clock=ManualClock())


def _first_calls(gen: Any) -> dict[str, Any]:
    """The calls an API's generator yields first, by their target's node."""
    return {call.target.node: call for call in next(gen)}


def _partition_calls(ctx: HandlerContext) -> dict[str, dict[str, Any]]:
    """An OffsetForLeaderEpoch's and a DescribeProducers' calls for every partition of t."""
    epoch = SimpleNamespace(topics=[SimpleNamespace(topic="t", partitions=[
        SimpleNamespace(partition=p, current_leader_epoch=-1, leader_epoch=0)
        for p in range(PARTITIONS)])])
    producers = SimpleNamespace(topics=[SimpleNamespace(
        name="t", partition_indexes=list(range(PARTITIONS)))])
    header = SimpleNamespace(api_version=4)
    return {"offset_for_leader_epoch": _first_calls(
                handle_offset_for_leader_epoch(ctx, header, epoch)),
            "describe_producers": _first_calls(
                handle_describe_producers(ctx, header, producers))}


def _remote(call: Any) -> bool:
    assert call.on_timeout is not None and call.deadline_ms == PROMPT_DEADLINE_MS, call
    assert call.silence, call  # a live shard or coordinator answers these at once
    return True


def _local(call: Any) -> bool:
    assert call.on_timeout is None and call.deadline_ms == 0 and not call.silence, call
    return True


def test_a_partition_call_to_the_handlers_own_process_has_no_deadline() -> None:
    for node, other in ((MAIN, P1), (P1, MAIN)):
        for api, calls in _partition_calls(_context(node)).items():
            assert sorted(calls) == sorted((MAIN, P1)), (api, calls)
            assert _local(calls[node]) and _remote(calls[other]), api


def test_a_one_process_broker_gives_its_partition_calls_no_deadline() -> None:
    topo = Topology(MAIN, 1, 1, 2, 2, 1)
    ctx = HandlerContext(topo, Config(), 1, "127.0.0.1", 9092, "cluster", 0,
                         {"t": TopicEntry(PARTITIONS, {})}, clock=ManualClock())
    for api, calls in _partition_calls(ctx).items():
        assert list(calls) == [MAIN], (api, calls)
        assert _local(calls[MAIN]), api


def test_a_coordinator_call_has_a_deadline_only_from_another_process() -> None:
    heartbeat = SimpleNamespace(group_id="g", generation_id=1, member_id="m",
                                group_instance_id=None)
    header = SimpleNamespace(api_version=4)
    [own] = _first_calls(handle_heartbeat(_context(MAIN), header, heartbeat)).values()
    [other] = _first_calls(handle_heartbeat(_context(P1), header, heartbeat)).values()
    assert own.target.node == other.target.node == MAIN
    assert _local(own) and _remote(other)
