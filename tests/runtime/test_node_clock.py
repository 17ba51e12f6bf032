"""One clock drives a node: every actor, supervision, dead letters and trace events read it.

A node built with a ManualClock never reads the host's clocks for what its
actors decide; ``Node.advance_clock`` moves it and lets every actor act on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from loguru import logger

from actors.purgatory import PurgatoryShard
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import ManualClock
from actors.runtime.directory import Directory, NodeEndpoint
from actors.runtime.errors import NodeError
from actors.runtime.node import Node
from actors.runtime.tracing import Tracer
from actors.timer import Timer
from actors.topology import Topology
from actors.trace.store import read_trace_dirs
from tests.fixtures.broker import free_port
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import Boom, GetState
from wire.registry import message
from wire.runtime_messages import GetClockOffsets


@message(9711)
class WhichClock(NamedTuple):
    pass


class Fragile(Actor):
    """Crashes on Boom; gives up after two crashes within a minute of its clock."""

    max_restarts = 2
    restart_window_s = 60.0

    @handles(Boom)
    def on_boom(self, msg: Boom) -> None:
        raise RuntimeError(msg.reason)

    @handles(GetState)
    def state(self, _msg: GetState) -> int:
        return self.crashes

    @handles(WhichClock)
    def which(self, _msg: WhichClock) -> int:
        return id(self.clock)


def test_every_actor_reads_the_clock_of_its_node(manual_node: Node,
                                                 manual_clock: ManualClock) -> None:
    topo = Topology(manual_node.name, 1, 1, 1, 1, 1)
    manual_node.spawn(Timer, topo.timer.name)
    manual_node.spawn(PurgatoryShard, topo.purgatory(0).name, topology=topo)
    fragile = manual_node.spawn(Fragile, "fragile")
    assert manual_node.ask(fragile, WhichClock()) == id(manual_clock)
    for name in (topo.timer.name, topo.purgatory(0).name, "_gateway", "_asks"):
        assert manual_node.actor(name).clock is manual_clock, name


# Giving up inside a handler once crashed the actor's thread on its closed mailbox.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_restart_intensity_is_counted_on_the_node_clock(manual_node: Node) -> None:
    fragile = manual_node.spawn(Fragile, "fragile")
    for reason in ("one", "two"):
        manual_node.tell(fragile, Boom(reason))
    manual_node.quiesce()
    assert manual_node.ask(fragile, GetState()) == 2  # restarted twice: at the limit
    manual_node.advance_clock(60_000)  # a minute later the old crashes no longer count
    manual_node.tell(fragile, Boom("three"))
    manual_node.tell(fragile, Boom("four"))
    manual_node.quiesce()
    assert manual_node.ask(fragile, GetState()) == 4
    manual_node.tell(fragile, Boom("five"))  # the third within the window: stopped for good
    manual_node.quiesce()
    assert manual_node.actor("fragile").actor_stopped.is_set()
    assert manual_node.metrics.get("actor_gave_up") == 1


def test_dead_letters_are_logged_at_most_20_per_second_of_the_node_clock(
        manual_node: Node) -> None:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    try:
        for _ in range(25):
            manual_node.dead_letters.record("no route to actor x@t")
        assert len(lines) == 20
        manual_node.advance_clock(1_000)
        manual_node.dead_letters.record("no route to actor x@t")
        assert len(lines) == 21
    finally:
        logger.remove(sink)
    assert manual_node.dead_letters.total == 26


def test_trace_records_carry_the_node_clock_readings(tmp_path: Path,
                                                     manual_clock: ManualClock) -> None:
    """A hop's send, receive and handled times, and the request record's, are the node clock's."""
    node = Node("n", data_dir=tmp_path, trace_sample_ratio=1.0, clock=manual_clock).start()
    try:
        manual_clock.advance(5)
        fragile = node.spawn(Fragile, "fragile")
        node.tell(fragile, WhichClock(), trace_id=77)
        node.quiesce()
    finally:
        node.shutdown(timeout=5)
    hops = [r for r in read_trace_dirs([tmp_path]) if r["trace_id"] == 77]
    wall = manual_clock.wall_ns()
    assert [(r["kind"], r["sent_ns"], r["recv_ns"], r["done_ns"]) for r in hops] == [
        ("hop", wall, wall, wall)]
    tracer = Tracer("n", None, clock=manual_clock)
    assert tracer.wall_ns() == wall


def test_only_a_manual_clock_can_be_moved_by_hand(node: Node) -> None:
    with pytest.raises(NodeError, match=r"^node t runs on SystemClock, which cannot be moved "
                                        r"by hand$"):
        node.advance_clock(1)


def test_gateways_estimate_the_offset_between_two_manual_clocks_exactly() -> None:
    """Clocks that stand still while a ping crosses: round trip 0, the offset exact."""
    directory = Directory({"a": NodeEndpoint("127.0.0.2", free_port("127.0.0.2")),
                           "b": NodeEndpoint("127.0.0.3", free_port("127.0.0.3"))})
    clock_a = ManualClock(wall_start_ms=1_000_000)
    clock_b = ManualClock(wall_start_ms=1_005_000)  # b's wall clock is 5 s ahead
    a = Node("a", directory=directory, clock=clock_a).start()
    b = Node("b", directory=directory, clock=clock_b).start()
    try:
        a.run_turns()  # a's gateway pings b on its first turn, then waits PING_INTERVAL_MS
        offsets = wait_for(lambda: a.ask(Address("a", "_gateway"), GetClockOffsets()))
        assert offsets == {"b": [0, 5_000_000_000]}
        gateway = a.actor("_gateway")
        assert gateway.poll_timeout_ms() == gateway.PING_INTERVAL_MS  # nothing moved it
    finally:
        a.shutdown(timeout=5)
        b.shutdown(timeout=5)


def test_directory_rereads_are_limited_and_backed_off_on_the_node_clock() -> None:
    """The limits on re-reads of registrations asked for by held answers (one per node a
    second, a failed read tried again after a backoff) run on the node's clock, so in a
    simulated seed when a re-read is due replays with the seed, not with the host's
    speed."""
    clock = ManualClock()
    directory = Directory(clock=clock)
    assert directory.want_reread("b")
    assert directory.due_rereads() == ["b"]
    directory.reread_done("b", ok=False)  # failed: tried again a second later
    assert directory.due_rereads() == []
    assert directory.next_reread_ms() == 1_000
    clock.advance(1_000)
    assert directory.due_rereads() == ["b"]
    directory.reread_done("b", ok=True)
    assert not directory.want_reread("b")  # within a second of the last read
    clock.advance(999)
    assert not directory.want_reread("b")
    clock.advance(1)
    assert directory.want_reread("b")
    assert directory.reread_requests == 2
