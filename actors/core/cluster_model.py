"""The values a cluster's metadata is made of: brokers, partition states, topic assignments.

Plain immutable data shared by the controller core, the metadata store (ZooKeeper
or the simulator's model of it) and the nodes. Nothing here does I/O; the JSON
forms they take in ZooKeeper live in ``actors.metadata.znodes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import NamedTuple

NO_LEADER = -1
"""``leader`` of a partition that has none (offline)."""

LEADER_DURING_DELETE = -2
"""Kafka's marker leader for a partition whose topic is being deleted."""

NO_VERSION = -1
"""``version`` of a state that was never stored."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a broker, as Kafka's ``PLAINTEXT://host:port``."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker as registered under ``/brokers/ids/<id>``.

    ``gateway`` is the node's actor gateway (``tcp://host:port``) that the other
    nodes' actors send to. ``epoch`` is Kafka's broker epoch: the zxid that
    created the registration, so a broker that restarts gets a larger one and
    requests meant for its previous life can be told apart (KIP-380).

    ``num_handlers``, ``num_shards``, ``num_coordinators``: how many
    RequestHandlers, PartitionShards and GroupCoordinators the node runs
    (``num.io.threads``, ``num.partition.shards``, ``num.group.coordinators``).
    Nodes may differ, so a node that names another's actors by index must use
    that node's counts, not its own; 0 means unknown (a registration that did
    not say).

    ``curve_key``: the node's CURVE public key (Z85) when its gateway and links
    use CURVE (``actor.curve.*``), empty otherwise; a starting node compares it
    with its own setting, as nodes with and without CURVE cannot talk.

    ``wire``: the node's inter-node wire fingerprint (``wire.fingerprint``); nodes
    whose fingerprints differ cannot read each other's messages. Empty: a
    registration that did not say (a build from before fingerprints).

    ``incarnation``: made new each time the node starts (random), so the others
    tell a restarted node (the same gateway host and port) from the process they
    knew: what they held for the old one is not given to the new one, whose ids
    for matching answers start again (``Directory.departed``). Empty: did not say.
    """

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    gateway: str
    rack: str | None = None
    epoch: int = -1
    num_handlers: int = 0
    num_shards: int = 0
    num_coordinators: int = 0
    curve_key: str = ""
    wire: str = ""
    incarnation: str = ""

    def with_epoch(self, epoch: int) -> BrokerInfo:
        return replace(self, epoch=epoch)


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state znode: leader, leader epoch, ISR, the controller epoch that wrote it.

    ``version`` is the znode's version (Kafka's zkVersion, KIP-497's partition
    epoch): every write of the state is conditional on it.

    ``zxid``: the zxid of the write that stored this state (the znode's mzxid), as read
    from the store; -1 for a state not read from it. Broker epochs are zxids too, so a
    leader or ISR member whose broker epoch is larger registered after this state was
    written: the state names a previous life of that broker (KIP-380's bounced broker,
    seen by a controller that did not watch it restart). Not part of equality.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = NO_VERSION
    zxid: int = field(default=-1, compare=False)

    def new_leader_and_isr(self, leader: int, isr: tuple[int, ...],
                           controller_epoch: int) -> LeaderAndIsr:
        """A controller's change of leader or ISR: the leader epoch goes up by one."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), controller_epoch,
                            self.version)

    def with_version(self, version: int) -> LeaderAndIsr:
        return replace(self, version=version)

    @property
    def has_leader(self) -> bool:
        return self.leader >= 0


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: partition -> replicas (the first is the preferred leader)."""

    partitions: dict[int, tuple[int, ...]]
    version: int = NO_VERSION
    # the topic's id (base64url, KIP-516), "topic_id" in the znode; "" for a topic made by
    # an older version, until the controller gives it one
    topic_id: str = ""
    # the id was given late, to a topic that existed without one (an older version's,
    # or one whose znode an older version rewrote without its id): its replicas'
    # directories may hold an id it had before, which is then this topic's, not a dead
    # namesake's (rewritten, never deleted). "topic_id_adopted" in the znode, and
    # recorded under /actorlog/adopted_topic_ids (a Kafka tool's rewrite drops the
    # znode's field); cleared once every replica has read the id back from its disk.
    topic_id_adopted: bool = False
    # A partition being reassigned (KIP-455): ``partitions`` holds the full replica set
    # (target then original), ``adding`` those not in the original, ``removing`` those not
    # in the target ("adding_replicas", "removing_replicas" in the znode); a partition
    # not reassigned is in neither
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def replicas(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition]

    def replica_assignment(self, partition: int) -> ReplicaAssignment:
        return ReplicaAssignment(self.partitions[partition], self.adding.get(partition, ()),
                                 self.removing.get(partition, ()))

    def with_replica_assignment(self, partition: int,
                                assignment: ReplicaAssignment) -> TopicAssignment:
        """This topic's assignment with ``partition``'s replaced (same version)."""
        adding = {p: r for p, r in self.adding.items() if p != partition}
        removing = {p: r for p, r in self.removing.items() if p != partition}
        if assignment.adding:
            adding[partition] = assignment.adding
        if assignment.removing:
            removing[partition] = assignment.removing
        return replace(self, partitions={**self.partitions, partition: assignment.replicas},
                       adding=adding, removing=removing)


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """One partition's replicas, with those being added and removed by a reassignment
    (Kafka's ReplicaAssignment: the original set is ``replicas`` minus ``adding``, the
    target ``replicas`` minus ``removing``)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def origin(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    def reassign_to(self, target: tuple[int, ...]) -> ReplicaAssignment:
        """The assignment while moving to ``target``: the target first, then the original
        replicas it drops (a cancel is a move back to the original set)."""
        origin = self.origin
        full = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """What the controller knows of one topic when it loads the metadata."""

    assignment: TopicAssignment
    configs: dict[str, str] = field(default_factory=dict)


class WriteCode(Enum):
    OK = "ok"
    BAD_VERSION = "bad_version"      # the znode's version was not the expected one
    NO_NODE = "no_node"              # it (or its parent) does not exist
    NODE_EXISTS = "node_exists"      # a create found it already there
    ERROR = "error"                  # anything else; ``message`` says what


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The outcome of one conditional metadata write; ``version``: the znode's new version if OK."""

    code: WriteCode
    version: int = -1
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code is WriteCode.OK
