"""Which actor owns what: names and the sharding functions of one broker node.

Every function here is deterministic across processes (no salted ``hash``),
so any node computes the same owner for a partition, group or connection.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from actors.runtime.address import Address
from actors.runtime.config import Config

LISTENER_SHIFT = 40  # conn_id = listener index << 40 | a count of that listener's accepts


def listener_of(conn_id: int) -> int:
    """The index (in ``listeners``) of the listener a connection came in on: every
    process's Acceptor of listener i mints its ids so, handed-off connections too."""
    return conn_id >> LISTENER_SHIFT


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def broker_node_name(broker_id: int) -> str:
    """The node name of broker ``broker_id`` in a cluster: every node can name every other."""
    return f"node-{broker_id}"


_SHARD_CACHE_MAX = 100_000


def _remember(cache: dict[tuple[str, int], Address], key: tuple[str, int],
              owner: Address) -> Address:
    """Keep ``owner`` for ``key``; a cache grown to its cap (topics deleted and made anew)
    starts again."""
    if len(cache) >= _SHARD_CACHE_MAX:
        cache.clear()
    cache[key] = owner
    return owner


def spread_index(topic: str, partition: int, count: int) -> int:
    """Which of ``count`` shards (or purgatories) owns a partition.

    Consecutive partitions of a topic go to consecutive ones, from a start the
    topic's name picks (hashing "topic-partition" as a whole would not spread them:
    crc32 is affine, so partitions 0-3 of every topic landed on one shard of two)."""
    return (stable_hash(topic) + partition) % count


def purgatory_count(config: Config) -> int:
    """num.purgatory.shards, 0 (the default) standing for one per process of the broker
    (num.processes, resolved from 0 before a broker builds its Topology; 1 when unresolved)."""
    value = int(config["num.purgatory.shards"])
    if value < 0:
        raise ValueError(f"num.purgatory.shards must be 0 (one per process) or more, got {value}")
    return value or max(1, int(config["num.processes"]))


# Another broker's actors. Nodes of one cluster may run different numbers of handlers,
# shards and coordinators, so an index is taken modulo the counts *that* node
# registered (BrokerRow, LiveLeaderRow), never this node's own Topology.

def peer_handler(broker_id: int, num_handlers: int, key: int) -> Address:
    """RequestHandler ``key % num_handlers`` of broker ``broker_id``; handler-0, which every
    node runs, when its count is unknown (0: a registration that did not say)."""
    index = key % num_handlers if num_handlers > 0 else 0
    return Address(broker_node_name(broker_id), f"handler-{index}")


def peer_shard_for(broker_id: int, num_shards: int, topic: str, partition: int) -> Address:
    """The PartitionShard of broker ``broker_id`` that owns the partition, by its count of
    shards (``num_shards`` must be known: no other shard can stand in)."""
    return Address(broker_node_name(broker_id),
                   f"shard-{spread_index(topic, partition, num_shards)}")


@dataclass(frozen=True)
class Topology:
    node: str
    num_processors: int
    num_handlers: int
    num_shards: int
    num_purgatories: int
    num_coordinators: int
    # num.processes > 1: the node of process 0, which owns the coordinators, controller
    # and log manager ("" : this node), and the nodes of every process of the broker
    # (process 0 first). Each process serves connections (an Acceptor, Processors and
    # RequestHandlers of its own) and runs a share of the partitions: shard i and
    # purgatory i live in process ``i % len(process_nodes)`` (shard_placement "spread";
    # with "first" all of them live in process 0: process_index).
    home: str = ""
    process_nodes: tuple[str, ...] = ()
    # num.processes.shard.placement: "spread" (shard i and purgatory i in process i % N)
    # or "first" (all of them in process 0; processes 1.. serve connections only)
    shard_placement: str = "spread"
    # (topic, partition) -> its shard's Address: every produce and fetch asks, and the
    # answer is fixed for this Topology (a CRC, a string and an Address less per request)
    _shard_of: dict[tuple[str, int], Address] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)
    # (topic, partition) -> its purgatory's Address (every parked fetch and acks=-1 wait)
    _purgatory_of: dict[tuple[str, int], Address] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @classmethod
    def from_config(cls, node: str, config: Config) -> Topology:
        def positive(key: str) -> int:
            value = int(config[key])
            if value < 1:
                raise ValueError(f"{key} must be at least 1, got {value}")
            return value

        return cls(
            node,
            positive("num.network.threads"),
            positive("num.io.threads"),
            positive("num.partition.shards"),
            purgatory_count(config),
            positive("num.group.coordinators"),
            shard_placement=str(config["num.processes.shard.placement"]),
        )

    # names
    def processor(self, i: int) -> Address:
        return Address(self.node, f"processor-{i}")

    def handler(self, i: int) -> Address:
        return Address(self.node, f"handler-{i}")

    def process_index(self, i: int) -> int:
        """The index of the process that runs shard ``i`` and purgatory ``i``: ``i % N``,
        or 0 with num.processes.shard.placement = first."""
        nodes = self.process_nodes
        return i % len(nodes) if nodes and self.shard_placement == "spread" else 0

    def process_of(self, i: int) -> str:
        """The node of the process that runs shard ``i`` and purgatory ``i``."""
        nodes = self.process_nodes
        return nodes[self.process_index(i)] if nodes else (self.home or self.node)

    def shard(self, i: int) -> Address:
        return Address(self.process_of(i), f"shard-{i}")

    def purgatory(self, i: int) -> Address:
        return Address(self.process_of(i), f"purgatory-{i}")

    def local_shards(self) -> list[int]:
        """The indexes of the shards that run in this process (all with one process)."""
        return [i for i in range(self.num_shards) if self.process_of(i) == self.node]

    def local_purgatories(self) -> list[int]:
        return [i for i in range(self.num_purgatories) if self.process_of(i) == self.node]

    def coordinator(self, i: int) -> Address:
        return Address(self.home or self.node, f"coordinator-{i}")

    @property
    def acceptor(self) -> Address:
        """The first listener's Acceptor."""
        return Address(self.node, "acceptor")

    def listener_acceptor(self, index: int) -> Address:
        """The Acceptor of listener ``index`` (in ``listeners`` order)."""
        return self.acceptor if index == 0 else Address(self.node, f"acceptor-{index}")

    @property
    def controller(self) -> Address:
        return Address(self.home or self.node, "controller")

    @property
    def timer(self) -> Address:
        """Every process runs a Timer of its own (its purgatories' waits stay local)."""
        return Address(self.node, "timer")

    @property
    def log_manager(self) -> Address:
        return Address(self.home or self.node, "log-manager")

    @property
    def log_cleaner(self) -> Address:
        return Address(self.home or self.node, "log-cleaner")  # process 0's, as the log dir

    @property
    def security_view(self) -> Address:
        """Processes 1.. of a cluster node with SASL or ACLs: the copy of process 0's users
        and ACLs this process decides on (a SecurityView)."""
        return Address(self.node, "security-view")

    def security_views(self) -> list[Address]:
        """The SecurityViews of processes 1.. (none with one process)."""
        return [Address(node, "security-view") for node in self.process_nodes[1:]]

    @property
    def replica_manager(self) -> Address:
        """Cluster mode only: where the controller's requests to this node go."""
        return Address(self.home or self.node, "replica-manager")

    # owners
    def handler_for_conn(self, conn_id: int) -> Address:
        return self.handler(conn_id % self.num_handlers)

    def shard_for(self, topic: str, partition: int) -> Address:
        key = (topic, partition)
        owner = self._shard_of.get(key)
        if owner is None:
            owner = _remember(self._shard_of, key,
                              self.shard(spread_index(topic, partition, self.num_shards)))
        return owner

    def purgatory_for(self, topic: str, partition: int) -> Address:
        """The purgatory that parks the partition's delayed fetches and produces: one that
        runs in the process of the partition's shard, so the watch and the shard's
        PartitionChanged after each append stay in that process."""
        key = (topic, partition)
        owner = self._purgatory_of.get(key)
        if owner is None:
            owner = _remember(self._purgatory_of, key,
                              self.purgatory(self.purgatory_index(topic, partition)))
        return owner

    def purgatory_index(self, topic: str, partition: int) -> int:
        """The index of ``purgatory_for``'s purgatory.

        Purgatory j runs in process j % N, like shard j. The partition's shard s runs in
        process p = s % N, whose purgatories are p, p + N, p + 2N, ...: the partition takes
        one of them by its rank among the partitions of that process (consecutive
        partitions of a topic go to consecutive shards of the process, then to the next
        purgatory of it), so they spread evenly over that process's purgatories. With
        one process this is ``spread_index`` over all of them. A process with no
        purgatory (num.purgatory.shards below num.processes) falls back to
        ``spread_index`` over all of them, wherever they run. With placement ``first``
        every shard and purgatory runs in process 0: ``spread_index`` over all of them."""
        n = len(self.process_nodes) or 1
        if self.shard_placement != "spread":
            n = 1
        key = stable_hash(topic) + partition
        shard = spread_index(topic, partition, self.num_shards)  # key % num_shards
        process = shard % n
        here = len(range(process, self.num_purgatories, n))  # purgatories of that process
        if here == 0:
            return key % self.num_purgatories
        shards_here = len(range(process, self.num_shards, n))
        rank = (key // self.num_shards) * shards_here + shard // n
        return process + n * (rank % here)

    def coordinator_for(self, group_id: str) -> Address:
        return self.coordinator(stable_hash(group_id) % self.num_coordinators)

    def all_handlers(self) -> list[Address]:
        """The handlers of every process of this broker (metadata goes to each)."""
        return [Address(node, f"handler-{i}") for node in (self.process_nodes or (self.node,))
                for i in range(self.num_handlers)]
