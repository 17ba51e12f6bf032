"""The simulated network between nodes: per-link FIFO, seeded delay, loss and partitions.

A link is the ordered pair (sending node, receiving node). Frames on one
link arrive in the order they were sent, as the real transport (one ZeroMQ
socket per sender and receiver over TCP) guarantees, after a delay drawn
from the seed. Faults:

- a partition cuts the links between two sets of nodes both ways; a frame
  that arrives while its link is cut is lost (it was in flight when the
  connection broke);
- a link reset loses what is in flight on one link at that moment (a
  reconnect of the TCP connection under a ZeroMQ socket);
- a node's gateway may drop a share of the frames it receives (a full
  gateway, a frame refused) for a while.

Frames between actors of one node never cross the network: they take a few
microseconds and are never lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from actors.sim.kernel import NS_PER_MS, Kernel

LOCAL_DELAY_NS = (1_000, 20_000)


@dataclass
class NetConfig:
    """Delays of remote frames (ms) and how often faults strike."""

    min_delay_ms: float = 0.2
    max_delay_ms: float = 5.0


@dataclass
class NetStats:
    sent: int = 0
    delivered: int = 0
    lost_partition: int = 0
    lost_reset: int = 0
    lost_gateway: int = 0
    local: int = 0


@dataclass
class _Link:
    last_arrival_ns: int = 0
    generation: int = 0


@dataclass
class SimNetwork:
    kernel: Kernel
    config: NetConfig = field(default_factory=NetConfig)
    stats: NetStats = field(default_factory=NetStats)
    _links: dict[tuple[str, str], _Link] = field(default_factory=dict)
    _cut: set[frozenset[str]] = field(default_factory=set)
    _gateway_drop: dict[str, float] = field(default_factory=dict)

    # -------------------------------------------------------------- sending
    def send(self, src: str, dst: str, deliver: Callable[[], None]) -> None:
        """Carry one frame from node ``src`` to node ``dst``; ``deliver`` runs on arrival."""
        kernel = self.kernel
        if src == dst:
            self.stats.local += 1
            lo, hi = LOCAL_DELAY_NS
            link = self._link(src, dst)
            arrival = max(kernel.now_ns + kernel.rng.randint(lo, hi), link.last_arrival_ns + 1)
            link.last_arrival_ns = arrival
            kernel.at(arrival, deliver)
            return
        self.stats.sent += 1
        link = self._link(src, dst)
        delay_ns = int(kernel.rng.uniform(self.config.min_delay_ms, self.config.max_delay_ms)
                       * NS_PER_MS)
        arrival = max(kernel.now_ns + delay_ns, link.last_arrival_ns + 1)
        link.last_arrival_ns = arrival
        kernel.at(arrival, self._arrive, src, dst, link.generation, deliver)

    def _arrive(self, src: str, dst: str, generation: int, deliver: Callable[[], None]) -> None:
        if not self.connected(src, dst):
            self.stats.lost_partition += 1
            return
        if self._link(src, dst).generation != generation:
            self.stats.lost_reset += 1
            return
        drop = self._gateway_drop.get(dst, 0.0)
        if drop and self.kernel.rng.random() < drop:
            self.stats.lost_gateway += 1
            return
        self.stats.delivered += 1
        deliver()

    def _link(self, src: str, dst: str) -> _Link:
        link = self._links.get((src, dst))
        if link is None:
            link = self._links[(src, dst)] = _Link()
        return link

    # ---------------------------------------------------------------- faults
    def connected(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) not in self._cut

    def partition(self, side: set[str], others: set[str]) -> None:
        """Cut every link between ``side`` and ``others``, both ways."""
        for a in side:
            for b in others:
                if a != b:
                    self._cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self._cut.clear()

    @property
    def partitioned(self) -> bool:
        return bool(self._cut)

    def reset_link(self, src: str, dst: str) -> None:
        """Lose what is in flight from ``src`` to ``dst`` now."""
        self._link(src, dst).generation += 1

    def drop_at_gateway(self, node: str, ratio: float) -> None:
        """``node``'s gateway drops this share of incoming frames (0 stops it)."""
        if ratio:
            self._gateway_drop[node] = ratio
        else:
            self._gateway_drop.pop(node, None)
