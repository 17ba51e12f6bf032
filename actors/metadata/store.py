"""The metadata store: what the Controller and the nodes need from ZooKeeper, as one interface.

Two implementations satisfy :class:`MetadataStore`: ``actors.metadata.zk``
(kazoo against a real ZooKeeper) and, later, the simulator's model of
ZooKeeper. The controller core never sees either: its shell calls the store
and turns the answers into core events.

Rules every implementation keeps (ZooKeeper's semantics, Kafka's layout):

* Calls are made from the owning actor's thread and block until the store
  answers; they raise :class:`MetadataUnavailable` when the store cannot be
  reached (no session, a timeout), never hang.
* Notices (watches that fired, session changes) go to the ``sink`` given at
  construction, as ``wire.cluster_messages`` messages. The sink is called
  from the store's own threads; it must only hand the notice over (a mailbox
  send), never touch the owner's state.
* A watch fires once: after a notice, read again with ``watch=True`` to see
  the new state and arm the watch again. After every
  ``SessionStateChanged("connected")`` re-read everything you watch (a
  connection loss drops the watches; a new session also drops the broker's
  registration, which must be made again).
* Every controller write takes a :class:`ControllerFence` and is applied
  only if ``/controller_epoch`` still has the version the controller was
  elected with; otherwise the call raises :class:`ControllerMoved` and writes
  nothing. Partition-state writes are also conditional on each state's
  ``version``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from actors.core.cluster_model import (
    BrokerInfo,
    LeaderAndIsr,
    TopicAssignment,
    TopicPartition,
)
from actors.core.cluster_model import WriteCode as WriteCode  # re-exported: part of this interface
from actors.core.cluster_model import WriteResult as WriteResult
from actors.security.acl import AclEntry, ResourcePattern

Sink = Callable[[Any], None]
"""Receives the store's notices (messages of ``wire.cluster_messages``), from any thread."""


class MetadataError(Exception):
    """Base of the store's errors; the message is meant for a log line or a user."""


class MetadataUnavailable(MetadataError):
    """The store cannot be reached now (not connected, session lost, timed out)."""


class BrokerIdInUse(MetadataError):
    """Another live node holds ``/brokers/ids/<id>``."""


class ControllerMoved(MetadataError):
    """A fenced write found ``/controller_epoch`` changed: another controller was elected."""


class TopicExists(MetadataError):
    """``/brokers/topics/<topic>`` already exists."""


class UnknownTopic(MetadataError):
    """No ``/brokers/topics/<topic>``."""


@dataclass(frozen=True, slots=True)
class ControllerFence:
    """Proof of being the elected controller: the epoch and the version of ``/controller_epoch``."""

    controller_id: int
    epoch: int
    epoch_version: int


@dataclass(frozen=True, slots=True)
class IsrChangeNotification:
    """An ``/isr_change_notification/isr_change_<seq>`` znode: partitions whose ISR changed."""

    name: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ChangeNotification:
    """A sequential znode under a change root (``/config/changes``, the ACL change roots)."""

    path: str
    data: bytes
    ctime_ms: int


class SecurityMetadata(Protocol):
    """Users' SCRAM credentials and the ACLs, in Kafka's layout; what a single node keeps in a
    file instead (``actors.security.local_store``).

    Writes are conditional on the version read (-1: the entry does not exist):
    they return False, writing nothing, when someone else changed it meanwhile;
    read again and retry. In ZooKeeper each write also adds Kafka's change
    notification, so every node (and Kafka's own tools) learns of it.
    """

    def get_users(self) -> set[str]:
        """Names with an entity config under ``/config/users``."""

    def get_user_configs(self, user: str) -> tuple[dict[str, str], int]:
        """``/config/users/<user>``'s config (``SCRAM-SHA-256`` -> credential text) and version."""

    def set_user_configs(self, user: str, configs: dict[str, str], version: int) -> bool:
        """Replace the user's config if its version is still ``version``; empty removes it."""

    def get_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        """The ACL entries of one pattern and the version of their znode (-1: none)."""

    def set_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                 version: int) -> bool:
        """Replace one pattern's entries if the version is still ``version``; empty removes it."""

    def get_all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        """Every stored pattern with its entries (what an authorizer loads at start)."""


class MetadataStore(SecurityMetadata, Protocol):
    """Kafka's ZooKeeper-era metadata, as the controller and the nodes use it."""

    # ------------------------------------------------------------- session
    def start(self) -> None:
        """Connect (within ``zookeeper.connection.timeout.ms``) and create the top-level paths."""

    def close(self) -> None:
        """End the session: its ephemeral znodes (registration, /controller) go at once."""

    @property
    def session_id(self) -> int | None:
        """The current session's id, None when there is none."""

    # ------------------------------------------------------------- cluster
    def get_or_create_cluster_id(self, proposed: str) -> str:
        """``/cluster/id``: created once with ``proposed``; afterwards the stored id."""

    # ------------------------------------------------------------- brokers
    def register_broker(self, broker: BrokerInfo, wait_for_stale_ms: int = 0) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; returns the broker epoch.

        Raises :class:`BrokerIdInUse` when another session holds the id. A
        registration with the very same endpoints and gateway is taken for this
        node's previous life (killed, its session not yet expired): the call
        waits up to ``wait_for_stale_ms`` for it to go before it gives up.
        """

    def get_brokers(self, watch: bool = False) -> dict[int, BrokerInfo]:
        """Live brokers with their epochs; ``watch``: :class:`BrokersChanged` on the next change."""

    # ---------------------------------------------------------- controller
    def get_controller(self, watch: bool = False) -> int | None:
        """The elected controller's id; ``watch``: :class:`ControllerChanged` when it changes."""

    def try_elect(self, broker_id: int) -> ControllerFence | None:
        """Create the ephemeral ``/controller`` and bump ``/controller_epoch`` in one transaction.

        Returns the new fence, or None when another broker is the controller. When
        ``/controller`` is already held by this very session for ``broker_id`` (an election
        whose answer was lost, or whose controller stopped without giving it up), returns
        that election's fence: the epoch is still the one it wrote, as nobody can be
        elected while the znode stands.
        """

    def resign(self, fence: ControllerFence) -> None:
        """Delete ``/controller`` if this fence still holds (lets another node take over)."""

    # -------------------------------------------------------------- topics
    def get_topics(self, watch: bool = False) -> set[str]:
        """Names under ``/brokers/topics``; ``watch``: :class:`TopicsChanged`."""

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """The assignments of those of ``topics`` that exist."""

    def get_topic_configs(self, topic: str) -> dict[str, str]:
        """``/config/topics/<topic>`` (empty when absent)."""

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> bool:
        """Replace ``/config/topics/<topic>`` (it must exist) and add a ``/config/changes``
        notification in one transaction; False if the topic's config is gone."""

    def create_topic(self, topic: str, assignment: TopicAssignment, configs: dict[str, str],
                     fence: ControllerFence | None = None) -> int:
        """Write the topic's config and assignment in one transaction; returns its version.

        Raises :class:`TopicExists`. With a fence the write is a controller's.
        """

    def set_topic_assignment(self, topic: str, assignment: TopicAssignment,
                             fence: ControllerFence, clear_adoption: bool = False
                             ) -> WriteResult:
        """Replace the assignment if its version is still ``assignment.version``; one
        marked adopted gets its adoption record in the same transaction, and with
        ``clear_adoption`` (the assignment unmarked) the record of its id is dropped in it.

        :meth:`get_topic_assignments` reads an assignment adopted when its znode's id is
        the one recorded, whether or not the znode still holds its own mark."""

    def delete_topic(self, topic: str, fence: ControllerFence) -> None:
        """Remove the topic: its assignment, partition states, config, deletion marker and
        adoption record."""

    def record_topic_adoptions(self, assignments: dict[str, TopicAssignment],
                               fence: ControllerFence) -> None:
        """Write the adoption record (``/actorlog/adopted_topic_ids/<topic>``) of each of
        these assignments marked adopted that has none of its id: a topic a version
        before the records adopted, known only by its znode's own mark."""

    def mark_topic_for_deletion(self, topic: str) -> bool:
        """Create ``/admin/delete_topics/<topic>``; False when it was already marked."""

    def get_topic_deletions(self, watch: bool = False) -> set[str]:
        """Topics marked for deletion; ``watch``: :class:`TopicDeletionsChanged`."""

    def remove_topic_deletions(self, topics: Iterable[str], fence: ControllerFence) -> None:
        """Drop deletion markers (of topics that do not exist)."""

    # ---------------------------------------------------- partition states
    def get_partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr | None]:
        """Each partition's state znode with its version (None when it has none)."""

    def create_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence
    ) -> dict[TopicPartition, WriteResult]:
        """Create the state znodes of new partitions (NODE_EXISTS when one is there)."""

    def update_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr], fence: ControllerFence | None
    ) -> dict[TopicPartition, WriteResult]:
        """Write each state if its znode's version is still ``state.version``.

        ``fence`` None is a partition leader's own ISR write (the path before
        KIP-497): conditional on the version alone.
        """

    # ------------------------------------------------ ISR change notices
    def notify_isr_change(self, partitions: Iterable[TopicPartition]) -> None:
        """A leader tells the controller it changed these partitions' ISR."""

    def get_isr_change_notifications(self, watch: bool = False) -> list[IsrChangeNotification]:
        """Pending notices, oldest first; ``watch``: :class:`IsrChangesNotified`."""

    def delete_isr_change_notifications(self, names: Iterable[str],
                                        fence: ControllerFence) -> None:
        """Remove handled notices."""

    # --------------------------------------------- change notifications
    def get_change_notifications(self, root: str, watch: bool = False
                                 ) -> list[ChangeNotification]:
        """The notifications under ``root``, oldest first; ``watch``: :class:`ChangesNotified`."""

    def delete_change_notifications(self, paths: Iterable[str]) -> None:
        """Remove processed notifications (Kafka purges those older than 15 minutes)."""
