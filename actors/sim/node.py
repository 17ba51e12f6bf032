"""A node of the simulation: the runtime's Node with its OS boundary swapped out.

:class:`SimNode` is a :class:`~actors.runtime.node.Node`, and its actors are
the real actor classes, built as usual (``Actor.__init__``) and run through
the runtime's own dispatch (``Actor._dispatch_entries``, ``take_turn``,
``tell``, ``flush``). What changes is only what the runtime reaches the OS
for, through the hooks the Node already has:

- ``_new_link`` hands out links with no socket;
- ``_send_frame`` gives the encoded frame (real msgpack, real type registry,
  real frame limits) to the simulated network instead of ZeroMQ;
- ``spawn`` builds the actor and runs its ``setup`` in the caller's thread
  instead of starting a pykka thread with a ZeroMQ mailbox, and ``stop_actor``
  stops it there (no thread to wait for).

The :class:`~actors.sim.world.SimWorld` then decodes each arriving frame and
hands its entries to the receiving actor, and wakes each actor when its
``poll_timeout_ms`` says it wants a turn: one thread, one seeded scheduler,
for every actor of every node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from actors.runtime.actor import Actor
from actors.runtime.address import ASK_SENDER, Address
from actors.runtime.clock import Clock
from actors.runtime.directory import Directory, NodeEndpoint
from actors.runtime.gateway import Gateway
from actors.runtime.node import ASK_ID_START_BITS, AskRouter, Link, Node, NodeError

if TYPE_CHECKING:
    from actors.sim.world import SimWorld


class _NoSocket:
    """Stands where a link's ZeroMQ socket would be: closing it closes nothing."""

    def close(self, linger: int = 0) -> None:
        pass


_NO_SOCKET = _NoSocket()


class _NoContext:
    """A SimNode has no ZeroMQ context: any attempt to make a socket is a bug."""

    def socket(self, *_args: Any) -> Any:
        raise NodeError("a simulated node has no sockets")

    def term(self) -> None:
        pass


class SimLink(Link):
    """A link towards a mailbox or another node, with no socket under it."""

    def __init__(self, remote: bool, node: str, endpoint: NodeEndpoint | None = None) -> None:
        super().__init__(_NO_SOCKET, remote, node, endpoint)


class SimNode(Node):
    """A node whose actors run in the simulation's one thread."""

    def __init__(self, name: str, world: SimWorld, *, clock: Clock,
                 directory: Directory | None = None, endpoint: NodeEndpoint | None = None,
                 incarnation: int = 1) -> None:
        # Its first ask id as a real process's, random, but drawn from its process id (the
        # seed, the name, the start) and no random source of the run: one seed, one run
        # (no simulated actor asks today: SimNode.ask raises, and a FailAsks its router
        # took would wait in an inbox the simulation reads only at the router's stop)
        process = int(world.process_id(name, incarnation), 16)
        super().__init__(name, directory=directory, endpoint=endpoint, clock=clock,
                         context=cast(Any, _NoContext()),
                         first_ask=1 + process % (1 << ASK_ID_START_BITS))
        self.world = world
        self.incarnation = incarnation
        self.crashed = False
        self.paused = False
        self.held: list[tuple[Any, ...]] = []   # events that arrived while paused, in order
        self.wake_gen: dict[str, int] = {}
        self.stalled: dict[str, list[tuple[Any, ...]]] = {}  # actor -> deliveries held

    # ------------------------------------------------------------ lifecycle
    def start(self, gateway_host: str | None = None, gateway: bool = True) -> SimNode:
        # placement on threads means nothing here: the gateway is always spawned
        if self._started:
            return self
        self._started = True
        self.spawn(AskRouter, ASK_SENDER)
        self.spawn(Gateway, "_gateway", endpoint=None)  # it pings peers; frames skip it
        return self

    def spawn(self, actor_cls: type[Actor], name: str, **kwargs: Any) -> Address:
        previous = self.actors.get(name)
        if previous is not None and not previous.actor_stopped.is_set():
            raise NodeError(f"an actor named {name!r} already runs on node {self.name}")
        if self._stopped or self.crashed:
            raise NodeError(f"node {self.name} is shut down")
        kwargs.pop("host", None)  # placement on threads means nothing here
        actor = actor_cls(self, name, **kwargs)
        # as Node.spawn: the previous actor's counts stay (Node.mailbox_depth)
        self._put_actor(name, actor, previous)
        try:
            actor.setup()
        except Exception as exc:
            actor.log.opt(exception=exc).error("actor {} failed to start", name)
            actor.actor_inbox.close()
            actor.actor_stopped.set()
            raise NodeError(f"actor {name!r} failed to start on node {self.name}") from exc
        actor._ready.set()
        self.world.after_turn(self, actor)
        return actor.address

    def crash(self) -> None:
        """The process dies: no teardown, nothing flushed; its actors are dropped."""
        self.crashed = True
        self._stopped = True
        for actor in self.actors.values():
            if not actor.actor_stopped.is_set():  # a stopped actor closed its inbox already
                actor.actor_inbox.close()
                actor.actor_stopped.set()
        self.held.clear()
        self.stalled.clear()
        self.tracer.close()  # what it traced so far is on its disk

    def stop_actor(self, name: str, timeout: float = 10.0) -> bool:
        """Stop one actor now, with its teardown, in the caller's turn (the runtime's waits
        for the actor's thread, which a simulated actor does not have: that wait would
        cost ``timeout`` of real time and fail). Deliveries still on their way to it become
        dead letters, as the real one's do once it stopped."""
        actor = self.actors.get(name)
        if actor is not None and not actor.actor_stopped.is_set():
            actor._stopping = True
            actor._finish_stop()
        return True

    def shutdown(self, timeout: float = 10.0, quiet: bool = False) -> None:
        """A clean stop: intake stops, then actors stop newest first, with their teardown
        (it logs no "stopped" line either way)."""
        if self._stopped:
            return
        self._stopped = True
        for name in reversed(self._order):
            self.stop_actor(name)

    def quiesce(self, timeout: float = 10.0) -> bool:
        raise NodeError("a simulated node settles by running the simulation, not by waiting")

    def ask(self, address: Address, msg: Any, timeout: float = 5.0,
            trace_id: int | None = None) -> Any:
        raise NodeError("a simulated node cannot block on an ask; send and observe instead")

    # -------------------------------------------------------------- routing
    def _new_link(self, address: Address) -> Link:
        if address.node == self.name:
            return SimLink(False, address.node)
        endpoint = self.directory.nodes[address.node]
        return SimLink(True, address.node, endpoint)

    def _send_frame(self, link: Link, address: Address, frame: bytes, waiter: Any = None,
                    net_legs: bytes | None = None) -> bool:
        if not self.crashed:
            self.world.send_frame(self.name, address, frame)
        return True  # the simulated network takes every frame (and may lose it later)
