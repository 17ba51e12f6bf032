"""A cluster's control plane in one thread: controller cores, their driver, the in-memory store.

Brokers are sessions on a :class:`MemoryZooKeeper` that register themselves;
each controller candidate is a driver around a core with its own session.
Notices queue up as the sinks receive them and are delivered by
:meth:`Cluster.pump`, as a mailbox would. Messages the controller sends to
nodes are recorded, not delivered (there are no nodes here).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from actors.core.cluster_model import BrokerInfo, Endpoint, LeaderAndIsr, TopicPartition
from actors.core.controller_events import Event, Result
from actors.core.controller_state import ControllerConfig, ControllerCore
from actors.metadata.controller_driver import ControllerDriver
from actors.metadata.memory import MemoryMetadataStore, MemoryZooKeeper
from wire.cluster_messages import LeaderAndIsr as LeaderAndIsrRequest
from wire.cluster_messages import StopReplica, UpdateMetadata


def broker_info(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),),
                      f"tcp://127.0.0.1:{19000 + broker_id}")


@dataclass
class Candidate:
    """One node's controller: its store session, core and driver, and what it emitted."""

    broker_id: int
    store: MemoryMetadataStore
    core: ControllerCore
    driver: ControllerDriver
    notices: list[Any] = field(default_factory=list)
    sent: list[tuple[int, Any]] = field(default_factory=list)
    replies: list[tuple[Any, Result]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


class Cluster:
    def __init__(self, seed: int = 0, **config: Any) -> None:
        self.zk = MemoryZooKeeper()
        self.rng = random.Random(seed)
        self.config = config
        self.brokers: dict[int, MemoryMetadataStore] = {}
        self.candidates: dict[int, Candidate] = {}
        self.request_ids = itertools.count(1)
        self.reader = MemoryMetadataStore(self.zk, lambda _m: None)
        self.reader.start()

    # -------------------------------------------------------------- brokers
    def start_broker(self, broker_id: int) -> int:
        store = MemoryMetadataStore(self.zk, lambda _m: None)
        store.start()
        self.brokers[broker_id] = store
        return store.register_broker(broker_info(broker_id))

    def stop_broker(self, broker_id: int) -> None:
        """The broker's process dies: its session ends, its registration goes."""
        self.brokers.pop(broker_id).close()

    def bounce_broker(self, broker_id: int) -> int:
        self.stop_broker(broker_id)
        return self.start_broker(broker_id)

    def epoch_of(self, broker_id: int) -> int:
        return self.reader.get_brokers()[broker_id].epoch

    # ---------------------------------------------------------- controllers
    def add_candidate(self, broker_id: int, elect: bool = True) -> Candidate:
        notices: list[Any] = []
        store = MemoryMetadataStore(self.zk, notices.append)
        config = ControllerConfig(broker_id=broker_id, **self.config)
        core = ControllerCore(config, self.rng.randrange)
        candidate = Candidate(broker_id, store, core, None, notices)  # type: ignore[arg-type]
        candidate.driver = ControllerDriver(
            store, core, send=lambda b, m: candidate.sent.append((b, m)),
            reply=lambda r, res: candidate.replies.append((r, res)), log=candidate.log.append)
        store.start()
        self.candidates[broker_id] = candidate
        if elect:
            candidate.driver.elect()
        self.pump()
        return candidate

    @property
    def controller(self) -> Candidate:
        active = [c for c in self.candidates.values() if c.driver.active]
        assert len(active) == 1, f"{len(active)} active controllers"
        return active[0]

    def pump(self) -> None:
        """Deliver queued store notices until none is left."""
        for _ in range(1000):
            moved = False
            for candidate in list(self.candidates.values()):
                while candidate.notices:
                    candidate.driver.on_notice(candidate.notices.pop(0))
                    moved = True
            if not moved:
                return
        raise AssertionError("notices kept coming")

    def request(self, make: Any) -> Result:
        """Feed a request event (``make(request_id)``) to the controller; its one reply."""
        controller = self.controller
        request_id = next(self.request_ids)
        before = len(controller.replies)
        controller.driver.feed(make(request_id))
        self.pump()
        answers = [res for rid, res in controller.replies[before:] if rid == request_id]
        assert len(answers) == 1, f"request {request_id} got {len(answers)} replies"
        return answers[0]

    def feed(self, event: Event) -> None:
        self.controller.driver.feed(event)
        self.pump()

    # ------------------------------------------------------------- looking
    def states(self) -> dict[TopicPartition, LeaderAndIsr]:
        topics = self.reader.get_topic_assignments(self.reader.get_topics())
        tps = [TopicPartition(t, p) for t, a in topics.items() for p in a.partitions]
        return {tp: s for tp, s in self.reader.get_partition_states(tps).items() if s is not None}

    def state(self, topic: str, partition: int) -> LeaderAndIsr:
        found = self.reader.get_partition_states([TopicPartition(topic, partition)])
        state = found[TopicPartition(topic, partition)]
        assert state is not None
        return state

    def assignment(self, topic: str) -> dict[int, tuple[int, ...]]:
        return self.reader.get_topic_assignments([topic])[topic].partitions


def sent_of(candidate: Candidate, kind: type, since: int = 0) -> Iterator[tuple[int, Any]]:
    for broker_id, message in candidate.sent[since:]:
        if isinstance(message, kind):
            yield broker_id, message


def leader_and_isr_rows(candidate: Candidate, since: int = 0) -> list[tuple[int, Any]]:
    return [(b, row) for b, m in sent_of(candidate, LeaderAndIsrRequest, since)
            for row in m.partitions]


def update_metadata(candidate: Candidate, since: int = 0) -> list[tuple[int, UpdateMetadata]]:
    return list(sent_of(candidate, UpdateMetadata, since))


def stop_replica_rows(candidate: Candidate, since: int = 0) -> list[tuple[int, Any]]:
    return [(b, row) for b, m in sent_of(candidate, StopReplica, since) for row in m.partitions]
