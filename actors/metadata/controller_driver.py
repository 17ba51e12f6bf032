"""The Controller's shell logic, without the actor: election, loading, notices, effects.

:class:`ControllerDriver` is what the Controller actor does between its
mailbox and the two things it wraps, the pure :class:`ControllerCore` and a
:class:`MetadataStore`. It is synchronous and single-threaded: the actor
calls it from its handlers, and a test or the simulator can call it from a
plain loop. Sending to nodes and answering requests are callbacks, so the
same driver runs on the actor runtime, in tests and in the simulator.

The actor, in outline::

    driver = ControllerDriver(store, core, send=..., reply=..., log=...)
    on start, and on every store notice:    driver.on_notice(notice)
    on a node's request (CreateTopics...):  driver.feed(core_event)
    on a StopReplica response:              driver.feed(StopReplicaDone(...))
    on a LeaderAndIsr response naming ids: driver.feed(TopicIdsConfirmed(...))
    every retry.backoff.ms while pending:   driver.retry_writes()
    every leader.imbalance.check.interval:  driver.feed(AutoLeaderRebalance())
    every 5 s while core.reassign_retry_pending: driver.feed(RetryReassignments())

Effects of one event are performed in order; the outcome of a metadata write
is handled after the effects already returned (first in, first out), so
brokers get the UpdateMetadata of a change before the LeaderAndIsr of the
writes it caused. A write the store could not reach is retried by
:meth:`retry_writes` (when it may not fail fast); ControllerMoved from the
store ends the controllership at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from loguru import logger

from actors.core.cluster_model import BrokerInfo, TopicPartition, TopicRecord
from actors.core.controller_events import (
    BecameController,
    Event,
    IsrChanged,
    LiveBrokersChanged,
    MetadataWrite,
    MetadataWriteFailed,
    MetadataWritten,
    NewTopicsFound,
    Reply,
    RequestId,
    ResignController,
    Resigned,
    Result,
    SendToBroker,
    StateChangeFailed,
    TopicDeletionsRequested,
    TopicsGone,
    without_topics,
)
from actors.core.controller_state import ControllerCore
from actors.metadata.executor import execute_write
from actors.metadata.store import (
    ControllerFence,
    ControllerMoved,
    MetadataError,
    MetadataStore,
    MetadataUnavailable,
)
from wire.cluster_messages import (
    SESSION_CLOSED,
    SESSION_CONNECTED,
    SESSION_EXPIRED,
    BrokersChanged,
    ControllerChanged,
    IsrChangesNotified,
    SessionStateChanged,
    TopicDeletionsChanged,
    TopicsChanged,
)


class ControllerDriver:
    def __init__(
        self,
        store: MetadataStore,
        core: ControllerCore,
        send: Callable[[int, Any], None],
        reply: Callable[[RequestId, Result], None],
        log: Callable[[str], None] = lambda _line: None,
        wire: str | None = None,
    ) -> None:
        self.store = store
        # This node's inter-node wire fingerprint: a registered broker with another one
        # cannot read the controller's requests (nor we its answers), so it is not taken
        # for live. None: every registered broker counts (tests, the simulator).
        self.wire = wire
        self.core = core
        self.broker_id = core.config.broker_id
        self._send = send
        self._reply = reply
        self._log = log
        self.fence: ControllerFence | None = None
        # The store session the controller was elected in (None: not known): only that
        # session's end unseats it; a notice about an earlier session is stale.
        self.elected_session: int | None = None
        self.controller_id: int | None = None
        self._retry: list[MetadataWrite] = []

    @property
    def active(self) -> bool:
        return self.fence is not None

    @property
    def pending_retries(self) -> int:
        return len(self._retry)

    # --------------------------------------------------------------- election
    def elect(self) -> bool:
        """Watch ``/controller``; if nobody holds it, try to. True when this node is controller.

        As Kafka's ``maybeResign`` + ``elect``: an active controller that /controller no
        longer names stops; /controller naming this broker while it is not active is an
        election of this very session whose controller stopped (a stale session notice
        made it resign): the store hands its fence back and this node acts again, or (held
        by another session of this broker, one that is ending) the watch tells when it goes.
        """
        try:
            self.controller_id = self.store.get_controller(watch=True)
            if self.active and self.controller_id != self.broker_id:
                self.resign(f"/controller names broker {self.controller_id}, not this one")
            if self.controller_id is None or (self.controller_id == self.broker_id
                                              and not self.active):
                session = self.store.session_id
                fence = self.store.try_elect(self.broker_id)
                if fence is not None:
                    # Elected in that session only if no other began meanwhile.
                    stable = session is not None and self.store.session_id == session
                    self._become(fence, session if stable else None)
                self.controller_id = self.store.get_controller(watch=True)
        except MetadataUnavailable as exc:
            self._log(f"controller election on broker {self.broker_id} postponed: {exc}")
        return self.active

    def _become(self, fence: ControllerFence, session: int | None) -> None:
        self.fence = fence
        self.elected_session = session
        self._retry.clear()
        self._log(f"broker {self.broker_id} is the controller with epoch {fence.epoch}")
        try:
            loaded = self._load(fence)
        except (MetadataUnavailable, ControllerMoved) as exc:
            self._log(f"controller {self.broker_id} could not load the metadata: {exc}; "
                      f"resigning")
            self.resign(f"loading the metadata failed: {exc}", give_up_znode=True)
            return
        self.feed(loaded)

    def _load(self, fence: ControllerFence) -> BecameController:
        store = self.store
        brokers = self._live_brokers()
        topics = store.get_topics(watch=True)
        deletions = store.get_topic_deletions(watch=True)
        # Notices a previous controller did not handle: the load reads every state anyway.
        notices = store.get_isr_change_notifications(watch=True)
        if notices:
            store.delete_isr_change_notifications([n.name for n in notices], fence)
        records = self._topic_records(topics)
        # a topic adopted before the records were kept: its mark, kept where no Kafka tool
        # writes. Not a reason to give the controllership up: the znode's own mark stands
        try:
            store.record_topic_adoptions({t: r.assignment for t, r in records.items()
                                          if r.assignment.topic_id_adopted}, fence)
        except (MetadataUnavailable, ControllerMoved):
            raise
        except MetadataError as exc:
            self._log(f"controller {self.broker_id}: {exc}; the topic znodes' own marks stand")
        partitions = [TopicPartition(t, p) for t, r in records.items()
                      for p in r.assignment.partitions]
        states = {tp: s for tp, s in store.get_partition_states(partitions).items()
                  if s is not None}
        return BecameController(fence.epoch, tuple(brokers.values()), records, states,
                                frozenset(deletions))

    def _live_brokers(self) -> dict[int, BrokerInfo]:
        """The registered brokers (watched) that can read this build's messages."""
        brokers = self.store.get_brokers(watch=True)
        if self.wire is None:
            return brokers
        return {b: info for b, info in brokers.items() if info.wire == self.wire}

    def _topic_records(self, topics: set[str]) -> dict[str, TopicRecord]:
        assignments = self.store.get_topic_assignments(topics)
        return {t: TopicRecord(a, self.store.get_topic_configs(t))
                for t, a in assignments.items()}

    def resign(self, reason: str, give_up_znode: bool = False) -> None:
        """Stop acting as controller; ``give_up_znode``: also delete /controller (if still ours)."""
        fence, self.fence = self.fence, None
        self._retry.clear()
        if fence is not None and give_up_znode:
            try:
                self.store.resign(fence)
            except MetadataUnavailable:
                pass
        self._run([Resigned(reason)])

    # ---------------------------------------------------------------- notices
    def on_notice(self, notice: Any) -> None:
        """A message from the store's sink (``wire.cluster_messages`` 480-489)."""
        try:
            self._on_notice(notice)
        except MetadataUnavailable as exc:
            self._log(f"controller {self.broker_id}: {type(notice).__name__} not handled: {exc}")
        except ControllerMoved as exc:
            self.resign(str(exc))

    def _on_notice(self, notice: Any) -> None:
        if isinstance(notice, SessionStateChanged):
            if notice.state in (SESSION_EXPIRED, SESSION_CLOSED):
                if self._stale(notice.session_id):
                    self._log(f"controller {self.broker_id}: ZooKeeper session "
                              f"{notice.session_id:#x} {notice.state}, but it was elected in "
                              f"session {self.elected_session:#x}: still the controller")
                    return
                self.controller_id = None
                if self.active:
                    self.resign(f"ZooKeeper session {notice.state}")
            elif notice.state == SESSION_CONNECTED:
                self.retry_writes()
                self.elect()
                if self.active:
                    self._rearm()
            return
        if isinstance(notice, ControllerChanged):
            self.controller_id = self.store.get_controller(watch=True)
            if self.active and self.controller_id != self.broker_id:
                self.resign(f"broker {self.controller_id} is the controller now")
            if self.controller_id is None or (self.controller_id == self.broker_id
                                              and not self.active):
                self.elect()
            return
        if not self.active:
            return
        if isinstance(notice, BrokersChanged):
            self.feed(LiveBrokersChanged(tuple(self._live_brokers().values())))
        elif isinstance(notice, TopicsChanged):
            topics = self.store.get_topics(watch=True)
            gone = set(self.core.topics) - topics
            if gone:
                # the core forgets their writes' outcomes: none is tried again
                kept = (without_topics(write, gone) for write in self._retry)
                self._retry = [write for write in kept if write is not None]
                self.feed(TopicsGone(frozenset(gone)))
            fresh = topics - set(self.core.topics)
            if fresh:
                self.feed(NewTopicsFound(self._topic_records(fresh)))
        elif isinstance(notice, TopicDeletionsChanged):
            deletions = self.store.get_topic_deletions(watch=True)
            if deletions:
                self.feed(TopicDeletionsRequested(frozenset(deletions)))
        elif isinstance(notice, IsrChangesNotified):
            self._on_isr_notices()

    def _stale(self, session_id: int) -> bool:
        """A session notice about another session than the one this controller was elected in
        (0 or an unknown election session: not known to be stale)."""
        return (self.active and session_id != 0 and self.elected_session is not None
                and session_id != self.elected_session)

    def _rearm(self) -> None:
        """After a reconnect the watches are gone: read everything watched again."""
        for notice_type in (BrokersChanged, TopicsChanged, TopicDeletionsChanged,
                            IsrChangesNotified):
            self._on_notice(notice_type(0))

    def _on_isr_notices(self) -> None:
        assert self.fence is not None
        notices = self.store.get_isr_change_notifications(watch=True)
        if not notices:
            return
        partitions = sorted({tp for n in notices for tp in n.partitions})
        states = {tp: s for tp, s in self.store.get_partition_states(partitions).items()
                  if s is not None}
        self.feed(IsrChanged(states))
        if self.fence is not None:
            self.store.delete_isr_change_notifications([n.name for n in notices], self.fence)

    # ---------------------------------------------------------------- effects
    def feed(self, event: Event) -> None:
        """Hand one event to the core and perform what follows from it."""
        self._run([event])

    def retry_writes(self) -> None:
        """Try again the writes the store could not reach (call on a timer and on reconnect)."""
        if not self._retry or self.fence is None:
            return
        pending, self._retry = self._retry, []
        self._run([], pending)

    def _run(self, events: list[Event], writes: list[MetadataWrite] | None = None) -> None:
        queue: deque[Event] = deque(events)
        for write in writes or []:
            outcome = self._execute(write)
            if outcome is not None:
                queue.append(outcome)
        while queue:
            event = queue.popleft()
            try:
                effects = self.core.handle(event)
            except Exception as exc:
                # A bug in the core: its state may be half changed. Give the controllership
                # up, so a controller (maybe this one) starts again from the store.
                logger.opt(exception=exc).error(
                    "controller {}: {} failed in the core; resigning", self.broker_id,
                    type(event).__name__)
                if isinstance(event, Resigned):
                    raise
                fence, self.fence = self.fence, None
                self._retry.clear()
                if fence is not None:
                    try:
                        self.store.resign(fence)
                    except MetadataUnavailable:
                        pass
                queue.clear()
                queue.append(Resigned(f"{type(exc).__name__} in the controller core", event))
                continue
            for effect in effects:
                if isinstance(effect, SendToBroker):
                    self._send(effect.broker_id, effect.message)
                elif isinstance(effect, Reply):
                    self._reply(effect.request_id, effect.result)
                elif isinstance(effect, StateChangeFailed):
                    self._log(effect.message)
                elif isinstance(effect, ResignController):
                    queue.clear()
                    self.fence = None
                    self._retry.clear()
                    queue.append(Resigned(effect.reason))
                    break
                else:
                    if self.fence is None:
                        continue  # resigned meanwhile: nothing more is written
                    outcome = self._execute(effect)
                    if outcome is None and self.fence is None:
                        queue.clear()
                        queue.append(Resigned("another controller was elected"))
                        break
                    if outcome is not None:
                        queue.append(outcome)

    def _execute(self, write: MetadataWrite) -> MetadataWritten | MetadataWriteFailed | None:
        """None: nothing to hand the core now (retrying later, or the controller moved)."""
        assert self.fence is not None
        try:
            outcome = execute_write(write, self.store, self.fence)
        except ControllerMoved as exc:
            self._log(f"controller {self.broker_id}: {exc}")
            self.fence = None
            self._retry.clear()
            return None
        if isinstance(outcome, MetadataWriteFailed) and not write.fail_fast:
            self._retry.append(write)
            return None
        return outcome
