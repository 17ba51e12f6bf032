"""Deterministic simulation: the real actors of a cluster on one seeded clock, network and disk.

- ``kernel``: the seeded event loop and each node's :class:`SimClock`.
- ``network``: per-link FIFO delivery with delays, partitions, link resets, gateway drops.
- ``node``: :class:`SimNode`, the runtime's Node without ZeroMQ or threads.
- ``world``: :class:`SimWorld`, which runs every actor of every node in one thread.
"""

from __future__ import annotations

from actors.sim.kernel import Kernel, SimClock
from actors.sim.network import NetConfig, SimNetwork
from actors.sim.node import SimNode
from actors.sim.world import SimWorld

__all__ = ["Kernel", "NetConfig", "SimClock", "SimNetwork", "SimNode", "SimWorld"]
