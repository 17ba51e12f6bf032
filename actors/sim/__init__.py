"""Deterministic simulation: the real actors of a cluster on one seeded clock, network and disk.

- ``kernel``: the seeded event loop and each node's :class:`SimClock`.
- ``network``: per-link FIFO delivery with delays, partitions, link resets, gateway drops.
- ``node``: :class:`SimNode`, the runtime's Node without ZeroMQ or threads.
- ``world``: :class:`SimWorld`, which runs every actor of every node in one thread.
- ``metadata``: :class:`SimZooKeeper` and :class:`SimMetadataStore` (ZooKeeper's semantics).
- ``disk``: :class:`SimDisk` (what a crash keeps: the fsynced bytes, at times a torn tail).
- ``processor``, ``cluster``: broker nodes wired as the Broker wires them, sockets aside.
- ``clients``: simulated admin, idempotent producer and consumer speaking Kafka.
- ``invariants``, ``plants``, ``run``: what must hold, bugs to plant, one seed's run.
"""

from __future__ import annotations

from actors.sim.disk import SimDisk
from actors.sim.kernel import Kernel, SimClock
from actors.sim.metadata import SimMetadataStore, SimZooKeeper
from actors.sim.network import NetConfig, SimNetwork
from actors.sim.node import SimNode
from actors.sim.run import SeedResult, SimOptions, run_seed
from actors.sim.world import SimWorld

__all__ = ["Kernel", "NetConfig", "SeedResult", "SimClock", "SimDisk", "SimMetadataStore",
           "SimNetwork", "SimNode", "SimOptions", "SimWorld", "SimZooKeeper", "run_seed"]
