"""Simulated Kafka clients: an admin, an idempotent producer, a consumer, a group member,
and a reassigner (``--reassign``) that moves a partition.

They are actors on the simulation's client node and speak Kafka to the
brokers' SimProcessors (ClientRequest / ClientResponse): requests encoded
and responses decoded by kafka-python's own protocol classes (``KafkaProtocol``,
as kafka-python's connection uses them), one connection per broker, answers
in request order, a request unanswered within ``request.timeout.ms`` failing
its connection (a new one is made), as a client does.

What they were told (acknowledged records, consumed records) goes to the
run's :class:`History`, which the invariants read.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kafka.errors import KafkaError
from kafka.protocol.parser import KafkaProtocol
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.sim.processor import NAME as PROCESSOR
from actors.topology import broker_node_name
from wire import kafka_codec as kc
from wire.errors import ErrorCode
from wire.sim_messages import ClientDisconnected, ClientRequest, ClientResponse

PRODUCE, FETCH, METADATA, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 3, 19, 22
ALTER_PARTITION_REASSIGNMENTS = 45
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = (
    8, 9, 10, 11, 12, 14)
MEMBER_ID_REQUIRED = int(ErrorCode.MEMBER_ID_REQUIRED)
UNKNOWN_MEMBER_ID = int(ErrorCode.UNKNOWN_MEMBER_ID)
REBALANCE_IN_PROGRESS = int(ErrorCode.REBALANCE_IN_PROGRESS)
COORDINATOR_ERRORS = {int(ErrorCode.NOT_COORDINATOR), int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                      int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}
NONE = int(ErrorCode.NONE)
DUPLICATE_SEQUENCE = int(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
OUT_OF_ORDER_SEQUENCE = int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
UNKNOWN_PRODUCER_ID = int(ErrorCode.UNKNOWN_PRODUCER_ID)
TOPIC_ALREADY_EXISTS = int(ErrorCode.TOPIC_ALREADY_EXISTS)
OFFSET_OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)
# An AlterPartitionReassignments answer that says the move (or cancel) was not written:
# anything else but NONE (a timeout, NOT_CONTROLLER from a controller that resigned with
# the write in flight) leaves it unknown
REASSIGN_REFUSED = {int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    int(ErrorCode.REASSIGNMENT_IN_PROGRESS),
                    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
NO_REASSIGNMENT_IN_PROGRESS = int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
REQUEST_TIMEOUT_MS = 2000
CLIENT_NODE = "clients"


def build_request(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A kafka.protocol request object, made with its own generated classes."""
    cls = kc.request_class(api_key, version)
    return _make(cls._struct, cls, values, version)


def _make(struct: Any, data_class: Any, values: dict[str, Any], version: int) -> Any:
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        spec = struct.fields[name]
        if spec.is_struct_array() and value is not None:
            value = [_make(spec.array_of, spec.data_class, item, version) for item in value]
        elif spec.is_struct() and value is not None:
            value = _make(spec, spec.data_class, value, version)
        kwargs[name] = value
    if struct is getattr(data_class, "_struct", None):
        kwargs["version"] = version
    return data_class(**kwargs)


def record_batch(values: list[bytes], timestamp_ms: int, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, producer_epoch,
                                        base_sequence, 1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp_ms, None, value, [])
    return bytes(builder.build())


def batch_records(data: bytes) -> list[tuple[int, int, int, bytes | None]]:
    """(offset, producer id, sequence, value) of every record in whole batches (sequence -1
    for a batch without one)."""
    out: list[tuple[int, int, int, bytes | None]] = []
    records = MemoryRecords(bytes(data))
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        base_seq = batch.base_sequence
        for record in batch:
            seq = base_seq + (record.offset - batch.base_offset) if base_seq >= 0 else -1
            out.append((record.offset, batch.producer_id, seq, record.value))


def fetched_records(data: bytes) -> list[tuple[int, bytes | None, int]]:
    """(offset, value, the leader epoch its batch was written in) of every record in whole
    batches."""
    out: list[tuple[int, bytes | None, int]] = []
    records = MemoryRecords(bytes(data))
    while True:
        batch = records.next_batch()
        if batch is None:
            return out
        out.extend((record.offset, record.value, batch.leader_epoch) for record in batch)


@dataclass
class Ack:
    topic: str
    partition: int
    base_offset: int
    values: list[bytes]
    broker_id: int
    broker_life: int
    producer_id: int
    base_sequence: int
    time_ns: int              # answered (the client's monotonic clock, the simulated one)
    acks: int = 1             # the producer's acks: 1 (the leader's append) or -1 (all)
    # the leader epoch the answering leader wrote the batch in (its leader epoch cache when
    # the answer came), dated by the checker (Checker.note_ack); -1: not known
    leader_epoch: int = -1


@dataclass
class Reassignment:
    """A move of one partition to ``target`` (KIP-455) and what its answers said: the
    replica sets the partition may end with (``original``, ``target``, or either when an
    answer was lost or a cancel's outcome is unknown)."""

    topic: str
    partition: int
    original: tuple[int, ...] = ()
    target: tuple[int, ...] = ()
    accepted: bool = False        # a move was answered NONE
    cancelled: bool = False       # a cancel was answered NONE
    completed_first: bool = False  # a cancel was answered NO_REASSIGNMENT_IN_PROGRESS
    unknown: int = 0              # attempts whose outcome is unknown (lost, timed out)
    # the original sets of the moves of this partition before this one: a move answered
    # NONE may still be in progress when the next starts, and a cancel goes back to the
    # replicas before the first move in progress (Kafka's originReplicas), in some order
    earlier: list[tuple[int, ...]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)   # (time, what) for a report

    def outcomes(self) -> set[tuple[int, ...]]:
        """The replica sets the partition may end with."""
        if not self.original:
            return set()   # never described: never asked to move
        # a cancel moves back to the original replicas in the order the moving set holds
        # them, the target's first (Kafka's originReplicas: [2, 3] to [3, 2, 1], cancelled,
        # is [3, 2])
        back = tuple(r for r in dict.fromkeys((*self.target, *self.original))
                     if r in self.original)
        if self.unknown:
            return {self.original, back, self.target}
        if self.cancelled:
            return {back}
        if self.accepted:
            return {self.target}
        return {self.original}


@dataclass
class History:
    """What the clients were told, for the invariants."""

    acks: list[Ack] = field(default_factory=list)
    # (topic, partition) -> (offset, value, broker read from, that broker's life, the leader
    # epoch of the record's batch)
    consumed: dict[tuple[str, int], list[tuple[int, bytes | None, int, int, int]]] = field(
        default_factory=dict)
    producer_ids: dict[int, str] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (invariant, what broke)
    topics_created: set[str] = field(default_factory=set)
    # value -> when its producer made it (simulated ms): no replica had it before
    created_ms: dict[bytes, float] = field(default_factory=dict)
    produce_errors: dict[int, int] = field(default_factory=dict)
    # consumer group: every offset a member committed, per partition; every generation a
    # member joined, per (member, coordinator, coordinator's life)
    committed: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    generations: dict[tuple[str, int, int, int], list[int]] = field(default_factory=dict)
    group_rebalances: int = 0
    # partition moves asked for (``SimReassigner``)
    reassignments: list[Reassignment] = field(default_factory=list)
    # called with every acknowledgement as it is recorded (the checker dates its epoch)
    ack_listeners: list[Callable[[Ack], None]] = field(default_factory=list)

    def acked(self, ack: Ack) -> None:
        self.acks.append(ack)
        for listener in self.ack_listeners:
            listener(ack)


@dataclass
class _Conn:
    conn_id: int
    protocol: KafkaProtocol
    waiting: dict[int, tuple[Callable[[Any], None], int]] = field(default_factory=dict)


class SimClient(Actor):
    """Connections to the brokers and a step function the subclass fills in."""

    mailbox_size = 0
    step_ms = (20, 200)

    def __init__(self, node: Any, name: str, *, brokers: list[int], rng: random.Random,
                 history: History, lives: Callable[[int], int], **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.brokers = brokers
        self.rng = rng
        self.history = history
        self.lives = lives
        self.conn_ids = itertools.count(rng.randrange(1, 1 << 20) * 1000)

    def setup(self) -> None:
        self.conns: dict[int, _Conn] = {}
        self.next_step_ms = self.clock.now_ms()
        self.stopped = False

    # ------------------------------------------------------------ requests
    def send_request(self, broker_id: int, api_key: int, version: int, values: dict[str, Any],
                     callback: Callable[[Any], None]) -> None:
        conn = self.conns.get(broker_id)
        if conn is None:
            conn = self.conns[broker_id] = _Conn(next(self.conn_ids),
                                                 KafkaProtocol(client_id=self.name))
        corr = conn.protocol.send_request(build_request(api_key, version, values))
        conn.waiting[corr] = (callback, self.clock.now_ms() + REQUEST_TIMEOUT_MS)
        self.tell(Address(broker_node_name(broker_id), PROCESSOR),
                  ClientRequest(conn.conn_id, self.name, bytes(conn.protocol.send_bytes())))

    def _fail(self, broker_id: int) -> None:
        conn = self.conns.pop(broker_id, None)
        if conn is not None:
            for callback, _deadline in conn.waiting.values():
                callback(None)

    @handles(ClientResponse)
    def on_response(self, msg: ClientResponse) -> None:
        for broker_id, conn in list(self.conns.items()):
            if conn.conn_id == msg.conn_id:
                try:
                    responses = conn.protocol.receive_bytes(msg.frame)
                except KafkaError:
                    # A response was lost on the way (the link broke under it): as a
                    # client does on a broken connection, fail what waits on it.
                    self._fail(broker_id)
                    return
                for corr, response in responses:
                    found = conn.waiting.pop(corr, None)
                    if found is not None:
                        found[0](response)
                return

    @handles(ClientDisconnected)
    def on_disconnected(self, msg: ClientDisconnected) -> None:
        for broker_id, conn in list(self.conns.items()):
            if conn.conn_id == msg.conn_id:
                self._fail(broker_id)

    # --------------------------------------------------------------- turns
    def poll_timeout_ms(self) -> int | None:
        if self.stopped:
            return None
        deadlines = [self.next_step_ms]
        deadlines += [d for c in self.conns.values() for _cb, d in c.waiting.values()]
        return max(0, min(deadlines) - self.clock.now_ms())

    def on_turn(self) -> None:
        now = self.clock.now_ms()
        for broker_id, conn in list(self.conns.items()):
            if any(deadline <= now for _cb, deadline in conn.waiting.values()):
                self._fail(broker_id)  # a request timed out: the connection is given up
        if not self.stopped and now >= self.next_step_ms:
            self.next_step_ms = now + self.rng.randint(*self.step_ms)
            self.step()

    def step(self) -> None:
        raise NotImplementedError

    def any_broker(self) -> int:
        return self.rng.choice(self.brokers)

    def in_flight(self) -> int:
        return sum(len(c.waiting) for c in self.conns.values())


class SimAdmin(SimClient):
    """Creates the run's topics through CreateTopics (forwarded to the active controller)."""

    def __init__(self, node: Any, name: str, *, topics: dict[str, tuple[int, int]],
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topics = topics

    def step(self) -> None:
        missing = [t for t in sorted(self.topics) if t not in self.history.topics_created]
        if not missing:
            self.stopped = True
            return
        if self.in_flight():
            return
        request = {"topics": [{"name": t, "num_partitions": self.topics[t][0],
                               "replication_factor": self.topics[t][1], "assignments": [],
                               "configs": []} for t in missing],
                   "timeout_ms": 4000, "validate_only": False}
        self.send_request(self.any_broker(), CREATE_TOPICS, 5, request, self._created)

    def _created(self, response: Any) -> None:
        if response is None:
            return
        for topic in response.topics:
            if topic.error_code in (NONE, TOPIC_ALREADY_EXISTS):
                self.history.topics_created.add(topic.name)


class SimReassigner(SimClient):
    """Moves one partition to other replica sets (AlterPartitionReassignments), ``moves``
    times one after the other, the first at a seeded time, and at times cancels a move a
    seeded while later: the replicas, seen in a Metadata answer, then a target of 2 or 3
    brokers (of those there are) other than them (after the first move, one that adds a
    replica when there is one: a replica a move just removed may be added back), asked for
    until an answer says it was written or refused."""

    step_ms = (100, 400)

    def __init__(self, node: Any, name: str, *, topics: dict[str, int], start_ms: float,
                 cancel_after_ms: float | None, moves: int = 1, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topic_partitions = [(t, p) for t in sorted(topics) for p in range(topics[t])]
        self.start_ms = start_ms
        self.cancel_after_ms = cancel_after_ms
        self.moves = moves

    def setup(self) -> None:
        super().setup()
        topic, partition = self.rng.choice(self.topic_partitions)
        self.move = Reassignment(topic, partition)
        self.history.reassignments.append(self.move)
        self.phase = "wait"
        self.due_ms = self.clock.now_ms() + self.start_ms
        self.attempts = 0
        self.moved = 0

    def _note(self, what: str) -> None:
        self.move.steps.append(f"{self.clock.now_ms()} ms: {what}")

    def step(self) -> None:
        now = self.clock.now_ms()
        if now < self.due_ms or self.in_flight() or self.move.topic not in \
                self.history.topics_created:
            return
        if self.phase in ("wait", "describe"):
            self.phase = "describe"
            self.send_request(self.any_broker(), METADATA, 8, {
                "topics": [{"name": self.move.topic}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}, self._described)
        elif self.phase == "move":
            self._alter(self.move.target)
        elif self.phase == "cancel":
            self._alter(None)
        elif self.phase == "done":
            self.stopped = True

    def _described(self, response: Any) -> None:
        if response is None or self.phase != "describe":
            return
        for topic in response.topics:
            for part in topic.partitions:
                if topic.error_code == NONE and part.partition_index == self.move.partition \
                        and part.replica_nodes:
                    self._aim(tuple(part.replica_nodes))

    def _aim(self, original: tuple[int, ...]) -> None:
        choices = [c for size in (2, 3) if size <= len(self.brokers)
                   for c in itertools.permutations(self.brokers, size)
                   if set(c) != set(original)]
        if self.moved:
            adding = [c for c in choices if set(c) - set(original)]
            choices = adding or choices
        if not choices:
            self.phase = "done"
            return
        self.move.original = original
        self.move.target = self.rng.choice(sorted(choices))
        self._note(f"move {self.move.topic}-{self.move.partition} from "
                   f"{list(original)} to {list(self.move.target)}")
        self.phase = "move"
        self.attempts = 0

    def _alter(self, replicas: tuple[int, ...] | None) -> None:
        self.attempts += 1
        if self.attempts > 100:   # bounded: the run's faults end, a refusal does not
            self.phase = "done"
            return
        self.send_request(self.any_broker(), ALTER_PARTITION_REASSIGNMENTS, 0, {
            "timeout_ms": 1500, "topics": [{"name": self.move.topic, "partitions": [
                {"partition_index": self.move.partition,
                 "replicas": None if replicas is None else list(replicas)}]}]},
            partial(self._altered, replicas is None))

    def _altered(self, cancel: bool, response: Any) -> None:
        what = "cancel" if cancel else "move"
        code: int | None = None
        if response is not None:
            code = response.error_code
            if code == NONE:
                code = response.responses[0].partitions[0].error_code
        self._note(f"{what} answered {code}")
        if code in REASSIGN_REFUSED:
            return   # not written: asked again on a later step
        if code == NONE or (cancel and code == NO_REASSIGNMENT_IN_PROGRESS):
            if not cancel:
                self.move.accepted = True
                if self.cancel_after_ms is None:
                    self._next()
                else:
                    self.phase = "cancel"
                    self.due_ms = self.clock.now_ms() + self.cancel_after_ms
            else:
                self.move.cancelled = code == NONE
                self.move.completed_first = code != NONE
                self._next()
            return
        self.move.unknown += 1   # lost, timed out, or a controller resigning: asked again

    def _next(self) -> None:
        """The next move of the same partition, from where this one ends (none when that is
        not known: an answer was lost)."""
        self.moved += 1
        self.phase = "done"
        ends = self.move.outcomes()
        if self.moved >= self.moves or len(ends) != 1:
            return
        before = self.move
        self.move = Reassignment(self.move.topic, self.move.partition,
                                 earlier=[*before.earlier, before.original])
        self.history.reassignments.append(self.move)
        self.due_ms = self.clock.now_ms() + self.rng.uniform(500, 3_000)
        self.cancel_after_ms = self.rng.uniform(0, 1_500) if self.rng.random() < 0.3 \
            else None
        self._aim(ends.pop())


class _Metadata:
    """Leaders as the last Metadata response told them."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int] = {}
        self.stale = True
        self.asking = False


class MetadataClient(SimClient):
    def setup(self) -> None:
        super().setup()
        self.meta = _Metadata()

    def refresh_metadata(self, topics: list[str]) -> None:
        if self.meta.asking:
            return
        self.meta.asking = True
        self.send_request(self.any_broker(), METADATA, 8, {
            "topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}, self._on_metadata)

    def _on_metadata(self, response: Any) -> None:
        self.meta.asking = False
        if response is None:
            return
        complete = True
        for topic in response.topics:
            if topic.error_code != NONE or not topic.partitions:
                complete = False
                continue
            for part in topic.partitions:
                if part.leader_id >= 0:
                    self.meta.leaders[(topic.name, part.partition_index)] = part.leader_id
                else:
                    complete = False
                    self.meta.leaders.pop((topic.name, part.partition_index), None)
        self.meta.stale = not complete


@dataclass
class _Batch:
    topic: str
    partition: int
    values: list[bytes]
    base_sequence: int
    producer_id: int
    producer_epoch: int
    attempts: int = 0


class SimProducer(MetadataClient):
    """An idempotent producer (acks=1, or acks=all with ``acks=-1``), one batch in flight per
    partition (ordered)."""

    def __init__(self, node: Any, name: str, *, topics: dict[str, int], acks: int = 1,
                 max_batches: int = 200, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topic_partitions = [(t, p) for t in sorted(topics) for p in range(topics[t])]
        self.acks = acks
        self.max_batches = max_batches

    def setup(self) -> None:
        super().setup()
        self.producer_id = -1
        self.producer_epoch = -1
        self.initializing = False
        self.sequences: dict[tuple[str, int], int] = {}
        self.in_flight_batches: dict[tuple[str, int], _Batch] = {}
        self.retry: dict[tuple[str, int], _Batch] = {}
        self.batches = 0
        self.counter = 0

    def step(self) -> None:
        if not set(t for t, _p in self.topic_partitions) <= self.history.topics_created:
            return
        if self.producer_id < 0:
            if not self.initializing:
                self.initializing = True
                self.send_request(self.any_broker(), INIT_PRODUCER_ID, 1, {
                    "transactional_id": None, "transaction_timeout_ms": 60_000}, self._on_pid)
            return
        if self.meta.stale:
            self.refresh_metadata(sorted({t for t, _p in self.topic_partitions}))
            if not self.meta.leaders:
                return
        for tp in self.rng.sample(self.topic_partitions, len(self.topic_partitions)):
            if tp in self.in_flight_batches:
                continue
            batch = self.retry.pop(tp, None)
            if batch is None:
                if self.batches >= self.max_batches:
                    continue
                self.batches += 1
                seq = self.sequences.get(tp, 0)
                values = []
                for _ in range(self.rng.randint(1, 3)):
                    self.counter += 1
                    values.append(f"{self.name}:{tp[0]}-{tp[1]}:{self.counter}".encode())
                    self.history.created_ms[values[-1]] = self.clock.now_ms()
                batch = _Batch(tp[0], tp[1], values, seq, self.producer_id, self.producer_epoch)
                self.sequences[tp] = seq + len(values)
            self._send(batch)
            return

    def _send(self, batch: _Batch) -> None:
        tp = (batch.topic, batch.partition)
        leader = self.meta.leaders.get(tp)
        if leader is None:
            self.retry[tp] = batch
            self.meta.stale = True
            return
        batch.attempts += 1
        self.in_flight_batches[tp] = batch
        life = self.lives(leader)
        records = record_batch(batch.values, self.clock.wall_ms(), batch.producer_id,
                               batch.producer_epoch, batch.base_sequence)
        self.send_request(leader, PRODUCE, 9, {
            "transactional_id": None, "acks": self.acks, "timeout_ms": 3000,
            "topic_data": [{"name": batch.topic, "partition_data": [
                {"index": batch.partition, "records": records}]}]},
            lambda response: self._on_produce(batch, leader, life, response))

    def _on_pid(self, response: Any) -> None:
        self.initializing = False
        if response is None or response.error_code != NONE:
            return
        pid = response.producer_id
        owner = self.history.producer_ids.get(pid)
        if owner is not None:
            self.history.problems.append((
                "producer ids are unique",
                f"producer id {pid} handed out twice: to {owner} and to {self.name}"))
        self.history.producer_ids[pid] = self.name
        self.producer_id, self.producer_epoch = pid, response.producer_epoch
        self.sequences.clear()  # a new producer id starts every partition at 0
        for tp, batch in list(self.retry.items()):
            self._renumber(tp, batch)

    def _renumber(self, tp: tuple[str, int], batch: _Batch) -> None:
        seq = self.sequences.get(tp, 0)
        batch.base_sequence = seq
        batch.producer_id, batch.producer_epoch = self.producer_id, self.producer_epoch
        self.sequences[tp] = seq + len(batch.values)

    def _on_produce(self, batch: _Batch, leader: int, life: int, response: Any) -> None:
        tp = (batch.topic, batch.partition)
        self.in_flight_batches.pop(tp, None)
        if response is None:
            self.retry[tp] = batch
            self.meta.stale = True
            return
        part = response.responses[0].partition_responses[0]
        code = part.error_code
        if code != NONE:
            self.history.produce_errors[code] = self.history.produce_errors.get(code, 0) + 1
        if code == NONE:
            self.history.acked(Ack(batch.topic, batch.partition, part.base_offset,
                                   batch.values, leader, life, batch.producer_id,
                                   batch.base_sequence, self.clock.monotonic_ns(), self.acks))
        elif code == DUPLICATE_SEQUENCE:
            pass  # written before: the producer takes it as done, as Kafka's does
        elif code in (OUT_OF_ORDER_SEQUENCE, UNKNOWN_PRODUCER_ID):
            # The leader does not know this producer's sequence (a new leader without
            # replication): start over with a new producer id, this batch first.
            self.producer_id = -1
            self.retry[tp] = batch
        else:
            self.retry[tp] = batch
            self.meta.stale = True


class SimConsumer(MetadataClient):
    """Fetches every partition from its leader with max.wait (delayed fetches in purgatory)."""

    def __init__(self, node: Any, name: str, *, topics: dict[str, int], **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topic_partitions = [(t, p) for t in sorted(topics) for p in range(topics[t])]

    def setup(self) -> None:
        super().setup()
        self.positions: dict[tuple[str, int], int] = {tp: 0 for tp in self.topic_partitions}
        self.fetching: set[int] = set()

    def step(self) -> None:
        if not set(t for t, _p in self.topic_partitions) <= self.history.topics_created:
            return
        if self.meta.stale:
            self.refresh_metadata(sorted({t for t, _p in self.topic_partitions}))
            if not self.meta.leaders:
                return
        self.fetch_from_leaders()

    def fetching_partitions(self) -> list[tuple[str, int]]:
        return self.topic_partitions

    def fetch_from_leaders(self) -> None:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.fetching_partitions():
            leader = self.meta.leaders.get(tp)
            if leader is not None:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in sorted(by_leader.items()):
            if leader in self.fetching:
                continue
            self.fetching.add(leader)
            topics: dict[str, list[dict[str, Any]]] = {}
            for topic, p in tps:
                topics.setdefault(topic, []).append({
                    "partition": p, "current_leader_epoch": -1,
                    "fetch_offset": self.positions[(topic, p)], "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1 << 16})
            self.send_request(leader, FETCH, 11, {
                "replica_id": -1, "max_wait_ms": self.rng.choice([0, 100, 500]),
                "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": ""},
                partial(self._on_fetch, leader, self.lives(leader)))

    def _on_fetch(self, leader: int, life: int, response: Any) -> None:
        self.fetching.discard(leader)
        if response is None:
            self.meta.stale = True
            return
        for topic in response.responses:
            for part in topic.partitions:
                tp = (topic.topic, part.partition_index)
                if part.error_code == OFFSET_OUT_OF_RANGE:
                    self.positions[tp] = 0  # a new leader with less data: from its start
                    self.meta.stale = True
                    continue
                if part.error_code != NONE:
                    self.meta.stale = True
                    continue
                records = fetched_records(part.records or b"")
                seen = self.history.consumed.setdefault(tp, [])
                for offset, value, epoch in records:
                    if offset >= self.positions[tp]:
                        seen.append((offset, value, leader, life, epoch))
                        self.positions[tp] = offset + 1


class SimGroupMember(SimConsumer):
    """A member of consumer group ``group``: finds the coordinator, joins (the leader
    assigns partitions round-robin, in an assignment format of its own: the broker keeps
    it opaque), syncs, heartbeats, fetches its partitions from the committed offsets and
    commits what it read. Invariants fed: the generations a member joins only grow while
    one coordinator serves the group without a break (one life of the broker, one leader
    epoch of the group's __consumer_offsets partition: without replication a coordinator
    that lost the partition and got it back reloads only its own log); an offset fetched
    as committed is one that a member committed (or none)."""

    heartbeat_ms = 1000
    commit_ms = 1500

    def __init__(self, node: Any, name: str, *, group: str,
                 load_epoch: Callable[[int], int], **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.group = group
        # (the harness's) leader epoch of the group's __consumer_offsets partition on a
        # broker: one value per continuous load of the group by that coordinator
        self.load_epoch = load_epoch

    def setup(self) -> None:
        super().setup()
        self.coordinator: int | None = None
        self.coordinator_life = 0
        self.member_id = ""
        self.generation = -1
        self.phase = "find"
        self.busy = False
        self.assigned: list[tuple[str, int]] = []
        self.next_heartbeat_ms = 0
        self.next_commit_ms = 0

    def fetching_partitions(self) -> list[tuple[str, int]]:
        return self.assigned if self.phase == "stable" else []

    def step(self) -> None:
        if not {t for t, _p in self.topic_partitions} <= self.history.topics_created:
            return
        if self.meta.stale:
            self.refresh_metadata(sorted({t for t, _p in self.topic_partitions}))
        if self.busy:
            return
        now = self.clock.now_ms()
        if self.phase == "find":
            self._call(self.any_broker(), FIND_COORDINATOR, 3, {"key": self.group,
                                                               "key_type": 0}, self._found)
        elif self.phase == "join":
            self._call(self.coordinator, JOIN_GROUP, 5, {
                "group_id": self.group, "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 10_000, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "sim",
                "protocols": [{"name": "round-robin", "metadata": b""}]}, self._joined)
        elif self.phase == "stable":
            if now >= self.next_commit_ms and self.assigned:
                self.next_commit_ms = now + self.commit_ms
                self._commit()
            elif now >= self.next_heartbeat_ms:
                self.next_heartbeat_ms = now + self.heartbeat_ms
                self._call(self.coordinator, HEARTBEAT, 3, {
                    "group_id": self.group, "generation_id": self.generation,
                    "member_id": self.member_id, "group_instance_id": None}, self._beat)
            if not self.meta.stale:
                self.fetch_from_leaders()

    def _call(self, broker: int | None, api: int, version: int, values: dict[str, Any],
              then: Callable[[Any], None]) -> None:
        if broker is None:
            self.phase = "find"
            return
        self.busy = True
        self.send_request(broker, api, version, values, partial(self._answered, then))

    def _answered(self, then: Callable[[Any], None], response: Any) -> None:
        self.busy = False
        if response is None:  # the connection failed: find the coordinator again
            self.coordinator, self.phase = None, "find"
            return
        then(response)

    def _coordinator_error(self, code: int) -> bool:
        if code in COORDINATOR_ERRORS:
            self.coordinator, self.phase = None, "find"
            return True
        return False

    def _found(self, response: Any) -> None:
        if response.error_code == NONE and response.node_id >= 0:
            self.coordinator = response.node_id
            self.coordinator_life = self.lives(response.node_id)
            self.phase = "join"

    def _joined(self, response: Any) -> None:
        code = response.error_code
        if code == MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return
        if self._coordinator_error(code) or code != NONE:
            return
        assert self.coordinator is not None
        epoch = self.load_epoch(self.coordinator)
        key = (self.name, self.coordinator, self.coordinator_life, epoch)
        seen = self.history.generations.setdefault(key, [])
        # A follower that joins again with nothing changed gets the current generation
        # back (Kafka's coordinator answers it without a rebalance): equal is fine.
        if seen and response.generation_id < seen[-1]:
            self.history.problems.append((
                "group generations only grow",
                f"{self.name} joined generation {response.generation_id} of group "
                f"{self.group} after generation {seen[-1]} while broker {self.coordinator} "
                f"coordinated it without a break (offsets partition leader epoch {epoch})"))
        seen.append(response.generation_id)
        self.history.group_rebalances += 1
        self.member_id = response.member_id
        self.generation = response.generation_id
        assignments = []
        if response.leader == self.member_id:
            members = sorted(m.member_id for m in response.members)
            plan: dict[str, list[list[Any]]] = {m: [] for m in members}
            for i, tp in enumerate(self.topic_partitions):
                plan[members[i % len(members)]].append(list(tp))
            assignments = [{"member_id": m, "assignment": json.dumps(plan[m]).encode()}
                           for m in members]
        self.phase = "sync"
        self._call(self.coordinator, SYNC_GROUP, 3, {
            "group_id": self.group, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None,
            "assignments": assignments}, self._synced)

    def _synced(self, response: Any) -> None:
        code = response.error_code
        if self._coordinator_error(code):
            return
        if code != NONE:
            self.phase = "join"
            return
        self.assigned = [(t, p) for t, p in json.loads(response.assignment or b"[]")]
        topics: dict[str, list[int]] = {}
        for t, p in self.assigned:
            topics.setdefault(t, []).append(p)
        self.phase = "offsets"
        self._call(self.coordinator, OFFSET_FETCH, 5, {
            "group_id": self.group,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())]},
            self._offsets)

    def _offsets(self, response: Any) -> None:
        if self._coordinator_error(response.error_code):
            return
        if response.error_code != NONE:
            self.phase = "join"
            return
        for topic in response.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                offset = part.committed_offset
                if part.error_code != NONE:
                    self.phase = "join"
                    return
                if offset >= 0 and offset not in self.history.committed.get(tp, set()):
                    self.history.problems.append((
                        "committed offsets are the group's",
                        f"group {self.group} fetched committed offset {offset} of "
                        f"{tp[0]}-{tp[1]}, which no member committed"))
                self.positions[tp] = max(offset, 0)
        self.phase = "stable"
        now = self.clock.now_ms()
        self.next_heartbeat_ms = now + self.heartbeat_ms
        self.next_commit_ms = now + self.commit_ms

    def _beat(self, response: Any) -> None:
        code = response.error_code
        if self._coordinator_error(code):
            return
        if code == UNKNOWN_MEMBER_ID:
            self.member_id, self.phase = "", "join"
        elif code != NONE:
            self.phase = "join"

    def _commit(self) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for t, p in self.assigned:
            offset = self.positions.get((t, p), 0)
            topics.setdefault(t, []).append({
                "partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                "committed_metadata": ""})
            self.history.committed.setdefault((t, p), set()).add(offset)
        self._call(self.coordinator, OFFSET_COMMIT, 7, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation,
            "member_id": self.member_id, "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())]},
            self._beat_like_commit)

    def _beat_like_commit(self, response: Any) -> None:
        for topic in response.topics:
            for part in topic.partitions:
                if part.error_code != NONE:
                    self._beat(part)
                    return
