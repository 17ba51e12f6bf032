"""What the API functions share: the handler context reads its injected clock."""

from __future__ import annotations

from actors.apis.base import HandlerContext
from actors.core.metadata_cache import MetadataCache
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import Topology


def context(clock: ManualClock, handler_index: int) -> HandlerContext:
    return HandlerContext(Topology("n", 1, 3, 1, 1, 1), Config(), 1, "127.0.0.1", 9092,
                          "cluster", handler_index, clock=clock)


def test_producer_ids_start_from_the_wall_clock_at_the_first_id() -> None:
    clock = ManualClock(start_ms=0, wall_start_ms=1_000)
    ctx = context(clock, handler_index=2)
    clock.advance(5)  # the base is taken at the first id, not at construction
    first = ctx.next_producer_id()
    assert first == (1_005 << 20) + 1 * 3 + 2
    clock.set_wall_ms(9_999)  # later readings do not move the base
    assert ctx.next_producer_id() == (1_005 << 20) + 2 * 3 + 2


def test_handlers_with_one_clock_never_hand_out_the_same_id() -> None:
    clock = ManualClock(wall_start_ms=1_000)
    contexts = [context(clock, i) for i in range(3)]
    ids = [ctx.next_producer_id() for _ in range(50) for ctx in contexts]
    assert len(set(ids)) == len(ids)


def test_cluster_nodes_starting_in_one_millisecond_never_hand_out_the_same_id() -> None:
    """Each node's base comes from its own clock; the simulator found two nodes whose first
    InitProducerId fell in the same millisecond handing out one id twice."""
    clock = ManualClock(wall_start_ms=1_000)
    contexts = [HandlerContext(Topology(f"node-{b}", 1, 2, 1, 1, 1), Config(), b, "127.0.0.1",
                               9092, "cluster", i, clock=clock, cluster=MetadataCache())
                for b in (1, 2, 3) for i in range(2)]
    ids = [ctx.next_producer_id() for _ in range(200) for ctx in contexts]
    assert len(set(ids)) == len(ids)
    assert all(0 < pid < 2**63 for pid in ids)


def test_the_processes_of_one_broker_starting_in_one_millisecond_never_share_an_id() -> None:
    """num.processes = 3: handler i of every process took its base in the same millisecond
    and handed out the same ids (one idempotent producer's batches were then taken for
    another's duplicates: acknowledged and never written)."""
    clock = ManualClock(wall_start_ms=1_000)
    nodes = ("node-1", "node-1-p1", "node-1-p2")
    contexts = [HandlerContext(Topology(n, 1, 2, 1, 1, 1, home="node-1", process_nodes=nodes),
                               Config(), 1, "127.0.0.1", 9092, "cluster", i, clock=clock)
                for n in nodes for i in range(2)]
    ids = [ctx.next_producer_id() for _ in range(200) for ctx in contexts]
    assert len(set(ids)) == len(ids)
