"""The world of one simulation run: the nodes, the network, the clock, the trace.

:class:`SimWorld` owns the kernel and the network and does the two things a
real node's actor threads do, for every actor of every node, in one thread:
it hands an arriving frame to its actor (decoded by the runtime's own
``decode_frame_full``, dispatched by the actor's own ``_dispatch_entries``
with the sender's incarnation the frame carries), and
it gives an actor a turn (``take_turn``) when the actor's
``poll_timeout_ms`` comes due. Node faults (crash, pause, resume, a step of
a node's wall clock) are methods here; network faults are on
:attr:`SimWorld.net`.

Every delivery is one line of the run's trace (time, sender, receiver,
message types and a checksum of the frame's bytes): two runs of one seed
give the same trace, byte for byte, and a failing seed's trace says what
happened. The run's directory (``root``) is taken out of what is summed:
paths travel in messages, and the directory is ``seed-<seed>-1`` rather than
``-0`` while another run of the seed (another process's) holds that one. A
frame with the directory in it is summed re-encoded with ``<root>`` in its
place (the raw bytes' string headers count the directory's length).

Each start of a cluster node is a process of its own, as a real node's is: it
registers an incarnation (:meth:`SimWorld.process_id`, 16 bytes from the seed,
the node's name and its count of starts, as a real node's uuid4) and its frames
to other nodes carry it, so a receiver's holds for answers to a process it has
not read yet (``Actor._hold_for_origin``) run in a seed as on real nodes.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgpack

from actors.runtime.actor import Actor
from actors.runtime.address import Address
from actors.runtime.directory import Directory, NodeEndpoint
from actors.runtime.tracing import Tracer
from actors.sim.kernel import NS_PER_MS, Kernel, SimClock
from actors.sim.network import NetConfig, SimNetwork
from actors.sim.node import SimNode
from wire import registry
from wire.envelope import BadFrame, decode_frame_full

Observer = Callable[[SimNode, Actor, str, str, list[Any]], None]


class SimWorld:
    def __init__(self, seed: int, net: NetConfig | None = None, keep_trace: bool = True,
                 trace_tail: int = 2000, trace_dir: Path | None = None,
                 root: Path | None = None) -> None:
        self.seed = seed
        # resolved, as the brokers resolve their data directories (the paths that travel)
        self.root = str(Path(root).resolve()).encode() if root is not None else None
        self.trace_dir = trace_dir  # every chain traced, in the trace format, per node life
        self.kernel = Kernel(seed)
        self.net = SimNetwork(self.kernel, net or NetConfig())
        self.nodes: dict[str, SimNode] = {}
        self.clocks: dict[str, SimClock] = {}
        self.incarnations: dict[str, int] = {}
        self.observers: list[Observer] = []
        self.keep_trace = keep_trace
        # the whole trace, or only its tail (for a violation's report)
        self.trace: list[str] | deque[str] = [] if keep_trace else deque(maxlen=trace_tail)
        self.trace_tail = trace_tail
        self.digest = 0
        self.lost_to_dead = 0
        self.failures: list[str] = []
        self.closed = False   # exceptions that escaped an actor's own supervision

    # ------------------------------------------------------------------ nodes
    def add_node(self, name: str, directory: Directory | None = None,
                 endpoint: NodeEndpoint | None = None) -> SimNode:
        """A fresh node (or a fresh life of a node that crashed), started."""
        clock = self.clocks.get(name)
        if clock is None:
            clock = self.clocks[name] = SimClock(self.kernel)
        incarnation = self.incarnations.get(name, 0) + 1
        self.incarnations[name] = incarnation
        node = SimNode(name, self, clock=clock, directory=directory, endpoint=endpoint,
                       incarnation=incarnation)
        if self.trace_dir is not None:
            # Written when the node's life ends (close), not by a writer thread.
            node.tracer = Tracer(name, self.trace_dir, 1.0, clock=clock)
        self.nodes[name] = node
        node.start()
        return node

    def process_id(self, name: str, incarnation: int) -> str:
        """The incarnation start ``incarnation`` of node ``name`` registers and its frames
        carry: 32 hex digits (16 bytes on the wire), as a real node's ``uuid4().hex``, made
        from the seed, the name and the start, so no random source of the run is drawn."""
        return hashlib.blake2b(f"{self.seed}/{name}/{incarnation}".encode(),
                               digest_size=16).hexdigest()

    def next_process_id(self, name: str) -> str:
        """The incarnation the next :meth:`add_node` of ``name`` is."""
        return self.process_id(name, self.incarnations.get(name, 0) + 1)

    def crash(self, name: str) -> None:
        node = self.nodes[name]
        node.crash()
        self._line(f"crash {name}")

    def pause(self, name: str) -> None:
        self.nodes[name].paused = True
        self._line(f"pause {name}")

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        if not node.paused:
            return
        node.paused = False
        self._line(f"resume {name}")
        held, node.held = node.held, []
        for event in held:
            event[0](*event[1:])
        for actor in list(node.actors.values()):
            self.after_turn(node, actor)

    def stall(self, name: str, actor_prefix: str, ms: float) -> None:
        """The actors of node ``name`` whose names start with ``actor_prefix`` take nothing
        from their mailboxes for ``ms`` (a write or fsync stuck on a slow disk)."""
        node = self.nodes[name]
        stalled = [a for a in node.actors if a.startswith(actor_prefix)
                   and a not in node.stalled]
        for actor_name in stalled:
            node.stalled[actor_name] = []
        self._line(f"stall {actor_prefix}* of {name} for {ms:.0f} ms")
        self.kernel.after_ms(ms, self._unstall, node, stalled)

    def _unstall(self, node: SimNode, actor_names: list[str]) -> None:
        for actor_name in actor_names:
            held = node.stalled.pop(actor_name, [])
            for event in held:
                event[0](*event[1:])
            actor = node.actors.get(actor_name)
            if actor is not None and not node.crashed:
                self.after_turn(node, actor)

    def jump_wall_clock(self, name: str, ms: int) -> None:
        self.clocks[name].jump_wall_ms(ms)
        self._line(f"clock {name} wall {ms:+d} ms")

    def up(self, name: str) -> bool:
        node = self.nodes.get(name)
        return node is not None and not node.crashed

    # -------------------------------------------------------------- messages
    def send_frame(self, src: str, address: Address, frame: bytes) -> None:
        dst = address.node
        incarnation = self.incarnations.get(dst, 0)
        self.net.send(src, dst, partial(self._deliver, dst, incarnation, address.name, frame))

    def _deliver(self, dst: str, incarnation: int, actor_name: str, frame: bytes) -> None:
        node = self.nodes.get(dst)
        if node is None or node.crashed or node.incarnation != incarnation:
            self.lost_to_dead += 1
            return
        if node.paused:
            node.held.append((self._deliver, dst, incarnation, actor_name, frame))
            return
        actor = node.actors.get(actor_name)
        if actor is None:
            node.dead_letters.record(f"no actor named {actor_name!r} on node {dst}",
                                     receiver=actor_name)
            return
        if actor.actor_stopped.is_set():
            # as a frame in a real actor's mailbox when it stops: its messages are dead
            # letters, those of this node's actors taken off the name's depth
            # (Node.mailbox_depth)
            node._undelivered(frame, actor.address, f"actor {actor.address} stopped")
            return
        stalled = node.stalled.get(actor_name)
        if stalled is not None:  # its thread is stuck (a slow disk): wait behind it, in order
            stalled.append((self._deliver, dst, incarnation, actor_name, frame))
            return
        try:
            s_node, s_name, _receiver, entries, s_inc = decode_frame_full(
                frame, node.max_frame_bytes)
        except BadFrame as exc:
            node.dead_letters.record(str(exc), 1, receiver=actor_name)
            return
        known = _TYPE_NAMES
        names = ",".join([known[e[0]] if e[0] in known else _type_name(e[0])
                          for e in entries])
        root = self.root
        if root is not None and root in frame:
            # Summed re-encoded with the directory taken out of each string: a string's
            # length header counts the directory's length (seed-1-9 vs seed-1-10).
            summed = msgpack.packb([s_node, s_name, _receiver,
                                    _without_root(entries, root.decode(), root), s_inc])
        else:
            summed = frame
        self._line(f"{s_name}@{s_node} -> {actor_name}@{dst} {names} {zlib.crc32(summed):08x}")
        for observe in self.observers:
            observe(node, actor, s_node, s_name, entries)
        # the sender's incarnation too: what the actor answers goes to that process (held
        # while this node's directory lists another one, as on a real node)
        self._run_actor(node, actor, actor._dispatch_entries, s_node, s_name, entries, s_inc)

    def _run_actor(self, node: SimNode, actor: Actor, fn: Callable[..., Any],
                   *args: Any) -> None:
        try:
            fn(*args)
            if actor._out:
                actor.flush()
            if not actor.actor_stopped.is_set():
                actor.take_turn()
        except Exception as exc:  # the runtime's supervision let it through: a loop failure
            self.failures.append(f"{actor.name}@{node.name}: {type(exc).__name__}: {exc}")
            actor.log.opt(exception=exc).error("actor {} failed in the simulation", actor.name)
        self.after_turn(node, actor)

    # ------------------------------------------------------------------ turns
    def after_turn(self, node: SimNode, actor: Actor) -> None:
        """Schedule the actor's next timed turn, as its poll loop would sleep until then."""
        if node.crashed or actor.actor_stopped.is_set():
            return
        gen = node.wake_gen.get(actor.name, 0) + 1
        node.wake_gen[actor.name] = gen
        if actor._to_self or actor._local_in:
            timeout: int | None = 0
        else:
            try:
                timeout = actor.poll_timeout_ms()
            except Exception as exc:
                self.failures.append(f"{actor.name}@{node.name}: poll_timeout_ms: {exc!r}")
                return
            held = actor.held_wait_ms()  # messages wait for a departed node
            if held is not None and (timeout is None or held < timeout):
                timeout = held
        if timeout is None:
            return
        # at least a millisecond: a loop woken with nothing due sleeps again, not spins
        self.kernel.at(self.kernel.now_ns + max(timeout, 1) * NS_PER_MS, self._wake, node,
                       actor, gen)

    def _wake(self, node: SimNode, actor: Actor, gen: int) -> None:
        if node.crashed or node.wake_gen.get(actor.name) != gen or actor.actor_stopped.is_set():
            return
        if actor.name in node.stalled:
            return  # its turn comes when the stall ends
        if node.paused:
            node.held.append((self._wake, node, actor, gen))
            return
        self._run_actor(node, actor, _nothing)

    # ------------------------------------------------------------------ trace
    def _line(self, text: str) -> None:
        if self.closed:
            return  # the run is over: freeing the nodes is no part of it
        line = f"{self.kernel.now_ns} {text}"
        self.digest = zlib.crc32(line.encode(), self.digest)
        self.trace.append(line)

    def note(self, text: str) -> None:
        """A line of the simulation's own (a fault, a client's step) in the trace."""
        self._line(text)

    def tail(self, n: int | None = None) -> list[str]:
        return list(self.trace)[-(n or self.trace_tail):]

    def run_for_ms(self, ms: float, max_steps: int | None = None) -> None:
        self.kernel.run(self.kernel.now_ns + int(ms * NS_PER_MS), max_steps)


def _nothing() -> None:
    pass


def _without_root(value: Any, root: str, root_bytes: bytes) -> Any:
    """``value`` with the run's directory replaced by ``<root>`` in every string in it."""
    if type(value) is str:
        return value.replace(root, "<root>") if root in value else value
    if type(value) is bytes:
        return value.replace(root_bytes, b"<root>") if root_bytes in value else value
    if type(value) is list or type(value) is tuple:
        return [_without_root(v, root, root_bytes) for v in value]
    if type(value) is dict:
        return {_without_root(k, root, root_bytes): _without_root(v, root, root_bytes)
                for k, v in value.items()}
    return value


# type id -> the message type's name in trace lines, filled as ids are first seen
_TYPE_NAMES: dict[int, str] = {}


def _type_name(type_id: Any) -> str:
    cls = registry._BY_ID.get(type_id) if type(type_id) is int else None
    if cls is None:
        return str(type_id)
    _TYPE_NAMES[type_id] = name = cls.__name__
    return name
