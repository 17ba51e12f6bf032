"""The simulated runtime: real actors on SimNodes, frames through the real codec."""

from __future__ import annotations

from typing import NamedTuple

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.directory import Directory, NodeEndpoint
from actors.sim import SimWorld
from tests.runtime.node_actors import OrderChecker, Sender, Seq
from wire.registry import message


@message(9860)
class SimPing(NamedTuple):
    seq: int
    payload: bytes


@message(9861)
class SimPong(NamedTuple):
    seq: int


class Pinger(Actor):
    """Sends a ping every 10 ms of its clock to ``target``, counts pongs, keeps their order."""

    def __init__(self, node: object, name: str, *, target: Address, **kw: object) -> None:
        super().__init__(node, name, **kw)
        self.target = target

    def setup(self) -> None:
        self.seq = 0
        self.pongs: list[int] = []
        self.next_ms = self.clock.now_ms()

    def poll_timeout_ms(self) -> int | None:
        return max(0, self.next_ms - self.clock.now_ms()) if self.seq < 50 else None

    def on_turn(self) -> None:
        if self.seq < 50 and self.clock.now_ms() >= self.next_ms:
            self.seq += 1
            self.next_ms = self.clock.now_ms() + 10
            self.tell(self.target, SimPing(self.seq, b"x" * self.seq))

    @handles(SimPong)
    def on_pong(self, msg: SimPong) -> None:
        self.pongs.append(msg.seq)


class Ponger(Actor):
    def setup(self) -> None:
        self.seen: list[int] = []

    @handles(SimPing)
    def on_ping(self, msg: SimPing) -> None:
        assert msg.payload == b"x" * msg.seq  # came through msgpack intact
        self.seen.append(msg.seq)
        self.reply(SimPong(msg.seq))


def two_nodes(seed: int) -> tuple[SimWorld, Pinger, Ponger]:
    world = SimWorld(seed)
    directory = Directory({"a": NodeEndpoint("a.sim", 1), "b": NodeEndpoint("b.sim", 1)})
    a = world.add_node("a", directory=directory)
    b = world.add_node("b", directory=directory)
    b.spawn(Ponger, "ponger")
    a.spawn(Pinger, "pinger", target=Address("b", "ponger"))
    return world, a.actors["pinger"], b.actors["ponger"]  # type: ignore[return-value]


def test_actors_on_two_nodes_exchange_frames_in_order_on_simulated_time() -> None:
    world, pinger, ponger = two_nodes(7)
    world.run_for_ms(2_000)
    assert ponger.seen == list(range(1, 51))
    assert pinger.pongs == list(range(1, 51))
    assert world.kernel.now_ns == 2_000 * 1_000_000  # the clock jumped, nothing waited
    assert world.net.stats.delivered >= 100


def test_a_partition_loses_frames_and_heal_restores_the_link() -> None:
    world, _pinger, ponger = two_nodes(3)
    world.run_for_ms(100)
    world.net.partition({"a"}, {"b"})
    world.run_for_ms(100)
    world.net.heal()
    world.run_for_ms(1_000)
    assert world.net.stats.lost_partition > 0
    assert len(ponger.seen) < 50
    assert ponger.seen == sorted(ponger.seen)  # FIFO: what arrives keeps its order
    assert ponger.seen[-1] == 50


def test_pause_holds_delivery_until_resume_and_crash_drops_it() -> None:
    world, _pinger, ponger = two_nodes(5)
    world.run_for_ms(50)
    world.pause("b")
    world.run_for_ms(100)
    count = len(ponger.seen)
    world.run_for_ms(100)
    assert len(ponger.seen) == count
    world.resume("b")
    world.run_for_ms(1_000)
    assert ponger.seen == list(range(1, 51))
    world.crash("b")
    assert world.nodes["b"].crashed


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    runs = []
    for seed in (11, 11, 12):
        world, _pinger, _ponger = two_nodes(seed)
        world.run_for_ms(1_000)
        runs.append("\n".join(world.trace))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_frames_go_through_the_registry_a_wrong_shape_is_a_dead_letter() -> None:
    world, pinger, ponger = two_nodes(9)
    pinger.tell(Address("b", "ponger"), SimPing("not an int", b""))  # type: ignore[arg-type]
    pinger.flush()
    world.run_for_ms(5)
    node_b = world.nodes["b"]
    assert "not an int" not in ponger.seen  # never handled: decoding refused the body
    assert any("malformed envelope" in reason for reason, _s, _r in node_b.dead_letters.last)


def test_a_sim_nodes_mailbox_depth_agrees_with_a_nodes_when_a_name_is_spawned_again() -> None:
    """Node.mailbox_depth takes off what the actors a name's actor replaced took, and what
    reached that name once its actor stopped (dead letters). A SimNode did neither: after
    the checker took 5, stopped and was spawned again its depth read 5 with nothing
    waiting, and 3 sent to it once stopped counted as waiting for good. It reads as a
    Node's now: what is on its way, then 0."""
    world = SimWorld(1)
    node = world.add_node("n")
    node.spawn(Sender, "s")
    node.spawn(OrderChecker, "checker")
    sender = node.actors["s"]

    def send(count: int) -> None:
        for i in range(count):
            sender.tell(Address("n", "checker"), Seq("s", i))
        sender.flush()

    send(5)
    assert node.mailbox_depth("checker") == 5  # on its way
    world.run_for_ms(5)
    assert node.actors["checker"].count == 5  # type: ignore[attr-defined]
    assert node.mailbox_depth("checker") == 0
    assert node.stop_actor("checker")
    node.spawn(OrderChecker, "checker")
    assert node.mailbox_depth("checker") == 0
    send(3)
    assert node.stop_actor("checker")
    world.run_for_ms(5)  # they reach it stopped
    assert node.dead_letters.by_reason() == {"actor checker@n stopped": 3}
    assert node.mailbox_depth("checker") == 0
    node.spawn(OrderChecker, "checker")
    send(2)
    assert node.mailbox_depth("checker") == 2
    world.run_for_ms(5)
    assert node.actors["checker"].count == 2  # type: ignore[attr-defined]
    assert node.mailbox_depth("checker") == 0


def test_a_sim_nodes_asks_count_from_a_start_its_seed_decides() -> None:
    """A Node's asks count from a random start (a Reply for an earlier process of the node
    then completes none of its asks); a SimNode's start comes from the seed, the name and
    the start of the node, as its process id does: one seed, the same ids; a node started
    again, others."""
    firsts = []
    for seed in (21, 21, 22):
        world = SimWorld(seed)
        firsts.append(next(world.add_node("n")._ask_ids))
    assert firsts[0] == firsts[1] != firsts[2]
    again = SimWorld(21)
    again.add_node("n").crash()
    assert next(again.add_node("n")._ask_ids) not in (firsts[0], 0)
    assert all(0 < first <= 2**62 for first in firsts)
