"""Consumer groups against a real actorlog broker: kafka-python, confluent-kafka and raw requests.

The broker runs with `group.initial.rebalance.delay.ms` low and clients with
the smallest session timeout the broker accepts (6 s), so rebalances and
session expiries take seconds, not minutes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import CoordinatorLoadInProgressError
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tests.fixtures import waiting
from tests.fixtures.broker import ROOT, BrokerProcess
from wire import kafka_codec as kc
from wire.errors import ErrorCode

GROUP_CONFIG = {
    "group.initial.rebalance.delay.ms": 300,
    "offsets.topic.num.partitions": 10,
}
SESSION_MS = 6000
WAIT_S = 60
wait_for = partial(waiting.wait_for, timeout=WAIT_S, interval=0.05)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("groups")
    b = BrokerProcess(base / "data", config=GROUP_CONFIG).start()
    yield b
    code = b.stop()
    assert code == 0, b.log()[-3000:]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % partitions)
        if i % 5000 == 4999:
            producer.poll(0)
    assert producer.flush(30) == 0


def position(msg: Any) -> tuple[int, int]:
    """(partition, offset) of a confluent-kafka message."""
    return cast(int, msg.partition()), cast(int, msg.offset())


# ------------------------------------------------------------ raw requests


def call(bootstrap: str, request: Any, version: int) -> Any:
    """One request on a fresh connection; the decoded response."""
    host, port = bootstrap.rsplit(":", 1)
    request.with_header(correlation_id=7, client_id="groups-test")
    frame = bytes(request.encode(version=version, header=True, framed=True))
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
        body = _recv_exactly(sock, size)
    return kc.response_class(request.API_KEY, version).decode(body, version=version, header=True)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


def join(bootstrap: str, group: str, member_id: str = "", session_ms: int = SESSION_MS,
         version: int = 5) -> Any:
    """A JoinGroup; retried, as clients do, while the coordinator still loads its
    partition of __consumer_offsets (COORDINATOR_LOAD_IN_PROGRESS) for up to 15 s."""
    deadline = time.monotonic() + 15
    while True:
        response = call(bootstrap, JoinGroupRequest(
            group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=10000,
            member_id=member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
        ), version)
        if (response.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                or time.monotonic() > deadline):
            return response
        time.sleep(0.1)


def test_find_coordinator_names_this_broker_for_every_group(group_broker: BrokerProcess) -> None:
    one = call(group_broker.bootstrap, FindCoordinatorRequest(key="g1", key_type=0), 1)
    assert (one.error_code, one.node_id, one.port) == (0, 1, group_broker.port)
    batched = call(group_broker.bootstrap, FindCoordinatorRequest(
        key_type=0, coordinator_keys=["a", "b", "c"]), 4)
    assert [(c.key, c.error_code, c.node_id, c.port) for c in batched.coordinators] == [
        (k, 0, 1, group_broker.port) for k in "abc"]
    txn = call(group_broker.bootstrap, FindCoordinatorRequest(key="t", key_type=1), 3)
    assert (txn.error_code, txn.node_id, txn.port) == (0, 1, group_broker.port)
    other = call(group_broker.bootstrap, FindCoordinatorRequest(key="t", key_type=2), 3)
    assert other.error_code == ErrorCode.INVALID_REQUEST


def test_offsets_topic_is_created_internal_and_known_to_every_handler(
    group_broker: BrokerProcess,
) -> None:
    def offsets_topic() -> tuple[int, bool, int]:
        meta = call(group_broker.bootstrap, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets")],
            allow_auto_topic_creation=False), 9)
        [topic] = meta.topics
        return topic.error_code, topic.is_internal, len(topic.partitions)

    expected = (0, True, GROUP_CONFIG["offsets.topic.num.partitions"])
    wait_for(lambda: offsets_topic() == expected, "the coordinator to create the topic", timeout=10)
    for _ in range(4):  # new connections land on every handler
        assert offsets_topic() == expected


def test_join_sync_heartbeat_commit_fetch_and_refusals(group_broker: BrokerProcess) -> None:
    bs = group_broker.bootstrap
    create_topic(bs, "raw-topic", 2)
    assert join(bs, "raw", session_ms=1000).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    first = join(bs, "raw")  # v4+: a new dynamic member must come back with its id
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    assert join(bs, "raw", member_id="not-a-member").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    joined = join(bs, "raw", member_id=first.member_id)
    assert joined.error_code == 0 and joined.leader == first.member_id
    assert [m.member_id for m in joined.members] == [first.member_id]
    gen = joined.generation_id
    synced = call(bs, SyncGroupRequest(
        group_id="raw", generation_id=gen, member_id=first.member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=first.member_id, assignment=b"both partitions")]), 5)
    assert (synced.error_code, synced.assignment) == (0, b"both partitions")

    def heartbeat(generation: int, member: str) -> int:
        return int(call(bs, HeartbeatRequest(group_id="raw", generation_id=generation,
                                             member_id=member, group_instance_id=None),
                        4).error_code)

    assert heartbeat(gen, first.member_id) == 0
    assert heartbeat(gen + 1, first.member_id) == ErrorCode.ILLEGAL_GENERATION
    assert heartbeat(gen, "stranger") == ErrorCode.UNKNOWN_MEMBER_ID

    part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition

    def commit(generation: int, topic: str) -> list[int]:
        resp = call(bs, OffsetCommitRequest(
            group_id="raw", generation_id_or_member_epoch=generation,
            member_id=first.member_id, group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                part(partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                     committed_metadata="m0"),
                part(partition_index=1, committed_offset=7, committed_leader_epoch=-1,
                     committed_metadata=None)])]), 8)
        return [p.error_code for t in resp.topics for p in t.partitions]

    assert commit(gen + 5, "raw-topic") == [ErrorCode.ILLEGAL_GENERATION] * 2
    assert commit(gen, "no-such-topic") == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    assert commit(gen, "raw-topic") == [0, 0]

    fetched = call(bs, OffsetFetchRequest(group_id="raw", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="raw-topic", partition_indexes=[0, 1])]),
        5)
    assert [(p.partition_index, p.committed_offset, p.metadata)
            for t in fetched.topics for p in t.partitions] == [(0, 42, "m0"), (1, 7, "")]
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    multi = call(bs, OffsetFetchRequest(groups=[
        group(group_id="raw", member_id=None, member_epoch=-1, topics=None),
        group(group_id="nobody", member_id=None, member_epoch=-1, topics=None)],
        require_stable=False), 8)
    assert [(g.group_id, [(p.partition_index, p.committed_offset)
                          for t in g.topics for p in t.partitions]) for g in multi.groups] == [
        ("raw", [(0, 42), (1, 7)]), ("nobody", [])]


# ------------------------------------------------- three consumers, one group


class KafkaPythonMember(threading.Thread):
    """One kafka-python group member polling in its own thread, committing after each batch."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str,
                 pause_s: float = 0.0, max_poll_records: int = 500,
                 group_instance_id: str | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name,
            group_instance_id=group_instance_id,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1000,
            max_poll_interval_ms=60000, max_poll_records=max_poll_records,
            fetch_max_wait_ms=100)
        self.rebalances: list[tuple[str, set[int]]] = []  # ("revoked"|"assigned", partitions)
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.rebalances.append(("revoked", {tp.partition for tp in revoked}))

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.rebalances.append(("assigned", {tp.partition for tp in assigned}))

        self.consumer.subscribe([topic], listener=Listener())
        self.pause_s = pause_s
        self.stop = threading.Event()
        self.records: list[tuple[int, int, float]] = []  # partition, offset, time
        self.committed: dict[int, int] = {}  # partition -> offset of the last good commit
        self.uncommitted: set[tuple[int, int]] = set()  # consumed, commit failed
        self.assignment: set[int] = set()
        self.commit_failures = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumed: dict[int, int] = {}
            while not self.stop.is_set():
                batches = self.consumer.poll(timeout_ms=100)
                self.assignment = {tp.partition for tp in self.consumer.assignment()}
                now = time.monotonic()
                batch = [(r.partition, r.offset) for rs in batches.values() for r in rs]
                if not batch:
                    continue
                for p, o in batch:
                    self.records.append((p, o, now))
                    consumed[p] = o + 1
                try:
                    self.consumer.commit()
                except Exception:  # a rebalance started: these may be consumed again
                    self.commit_failures += 1
                    self.uncommitted.update(batch)
                else:
                    self.committed.update(
                        {p: o for p, o in consumed.items() if p in self.assignment})
                if self.pause_s:
                    time.sleep(self.pause_s)
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            self.consumer.close()


def check_exactly_once(members: list[Any], partitions: int, per_partition: int) -> None:
    seen = [(p, o) for m in members for p, o, _t in m.records]
    assert len(seen) == partitions * per_partition, "records consumed more than once"
    assert set(seen) == {(p, o) for p in range(partitions) for o in range(per_partition)}


def test_kafka_python_three_consumers_share_six_partitions_exactly_once(
    group_broker: BrokerProcess,
) -> None:
    bs, topic, group, total = group_broker.bootstrap, "kp-six", "kp-group", 30_000
    create_topic(bs, topic, 6)
    members = [KafkaPythonMember(bs, topic, group, f"kp-{i}") for i in range(3)]
    for m in members:
        m.start()
    try:
        wait_for(lambda: all(len(m.assignment) == 2 for m in members),
                 "three members with two partitions each")
        assert set().union(*(m.assignment for m in members)) == set(range(6))
        admin = KafkaAdminClient(bootstrap_servers=bs)
        described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"]) == ("Stable", "consumer")
        assert sorted(m["client_id"] for m in described["members"]) == ["kp-0", "kp-1", "kp-2"]
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["group_state"] == "Stable"
        assignments = [set(m.assignment) for m in members]
        produce(bs, topic, total, 6)
        wait_for(lambda: sum(len(m.records) for m in members) >= total, "every record consumed")
        time.sleep(0.5)  # room for a duplicate to show up
        assert [m.assignment for m in members] == assignments, "the group rebalanced"
        for m, owned in zip(members, assignments, strict=True):
            assert {p for p, _o, _t in m.records} == owned
        check_exactly_once(members, 6, total // 6)
        # A member keeps its records before it commits them (a synchronous commit, after):
        # the last commits may still be on their way when the last record is counted.
        wait_for(lambda: all(m.committed.get(p) == total // 6
                             for m, owned in zip(members, assignments, strict=True)
                             for p in owned), "every member's last commit answered")
        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {
            p: total // 6 for p in range(6)}
        admin.close()
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(timeout=30)
    assert all(m.error is None for m in members), [m.error for m in members]


def test_confluent_three_consumers_share_six_partitions_exactly_once(
    group_broker: BrokerProcess,
) -> None:
    bs, topic, group, total = group_broker.bootstrap, "ck-six", "ck-group", 30_000
    create_topic(bs, topic, 6)
    consumers = [CKConsumer({
        "bootstrap.servers": bs, "group.id": group, "client.id": f"ck-{i}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000,
        "fetch.wait.max.ms": 100}) for i in range(3)]
    records: list[list[tuple[int, int]]] = [[] for _ in consumers]
    owned: list[set[int]] = [set() for _ in consumers]
    errors: list[str] = []
    stop = threading.Event()

    def run(i: int) -> None:
        # Assignments are read in the consumer's own thread (its rebalance callbacks).
        c = consumers[i]
        c.subscribe([topic],
                    on_assign=lambda _c, tps: owned.__setitem__(i, {tp.partition for tp in tps}),
                    on_revoke=lambda _c, _tps: owned.__setitem__(i, set()))
        while not stop.is_set():
            msgs = c.consume(num_messages=500, timeout=0.1)
            good = [m for m in msgs if m.error() is None]
            errors.extend(str(m.error()) for m in msgs if m.error() is not None)
            if good:
                records[i].extend(position(m) for m in good)
                c.commit(asynchronous=False)
        c.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: all(len(o) == 2 for o in owned), "three members with two partitions each")
        assignments = [set(o) for o in owned]
        assert set().union(*assignments) == set(range(6))
        produce(bs, topic, total, 6)
        wait_for(lambda: sum(len(r) for r in records) >= total, "every record consumed")
        time.sleep(0.5)
        assert owned == assignments, "the group rebalanced"
        for rs, mine in zip(records, assignments, strict=True):
            assert {p for p, _o in rs} == mine
        seen = [r for rs in records for r in rs]
        assert len(seen) == total, "records consumed more than once"
        assert set(seen) == {(p, o) for p in range(6) for o in range(total // 6)}
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not errors, errors
    admin = KafkaAdminClient(bootstrap_servers=bs)
    offsets = admin.list_group_offsets(group)[group]
    admin.close()
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {
        p: total // 6 for p in range(6)}


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(
    group_broker: BrokerProcess,
) -> None:
    """A member with group.instance.id sends no LeaveGroup on close; coming back
    within its session it takes its old place and the other member never rebalances."""
    bs, topic, group = group_broker.bootstrap, "static-two", "static-group"
    create_topic(bs, topic, 2)
    dynamic = KafkaPythonMember(bs, topic, group, "dyn")
    static = KafkaPythonMember(bs, topic, group, "static", group_instance_id="instance-1")
    members = [dynamic, static]
    for m in members:
        m.start()
    try:
        wait_for(lambda: all(len(m.assignment) == 1 for m in members), "one partition each")
        before = list(dynamic.rebalances)
        owned = set(static.assignment)
        static.stop.set()
        static.join(timeout=30)
        again = KafkaPythonMember(bs, topic, group, "static-again",
                                  group_instance_id="instance-1")
        members.append(again)
        again.start()
        wait_for(lambda: again.assignment == owned, "the static member's partition back")
        admin = KafkaAdminClient(bootstrap_servers=bs)
        described = admin.describe_groups([group])[group]
        admin.close()
        assert described["group_state"] == "Stable"
        assert sorted((m["client_id"], m["group_instance_id"]) for m in described["members"]) \
            == [("dyn", None), ("static-again", "instance-1")]
        time.sleep(1.5)  # a heartbeat or two: a rebalance would reach the other member now
        assert dynamic.rebalances == before, "the dynamic member went through a rebalance"
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(timeout=30)
    assert all(m.error is None for m in members), [m.error for m in members]


# ------------------------------------------------------------------ rebalance

# It commits exactly the offsets after what it consumed, and reports exactly those: a
# partition it was assigned but never read from has no commit of its own to report.
KILLED_MEMBER = r"""
import json, sys, time
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata
bootstrap, topic, group = sys.argv[1:4]
consumed = {}  # partition -> offset after the last record consumed since the assignment

class Forget(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        consumed.clear()

    def on_partitions_assigned(self, assigned):
        pass

c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="doomed",
                  auto_offset_reset="earliest", enable_auto_commit=False,
                  session_timeout_ms=6000, heartbeat_interval_ms=1000,
                  max_poll_interval_ms=60000, max_poll_records=20, fetch_max_wait_ms=100)
c.subscribe([topic], listener=Forget())
while True:
    batches = c.poll(timeout_ms=100)
    assigned = sorted(tp.partition for tp in c.assignment())
    batch = [[r.partition, r.offset] for rs in batches.values() for r in rs]
    if not batch:
        print(json.dumps({"assigned": assigned}), flush=True)
        continue
    print(json.dumps({"assigned": assigned, "consumed": batch}), flush=True)
    for p, o in batch:
        consumed[p] = o + 1
    offsets = {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in consumed.items()}
    try:
        c.commit(offsets)
    except Exception:
        continue
    print(json.dumps({"committed": {str(tp.partition): om.offset for tp, om in offsets.items()}}),
          flush=True)
    time.sleep(0.3)
"""


class KilledMember:
    """A kafka-python member in a child process, to be killed with SIGKILL (no LeaveGroup)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_MEMBER, bootstrap, topic, group], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ})
        self.assignment: list[int] = []
        self.consumed: list[tuple[int, int]] = []
        self.committed: dict[int, int] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assignment = event["assigned"]
            self.consumed.extend((p, o) for p, o in event.get("consumed", []))
            self.committed.update({int(p): o for p, o in event.get("committed", {}).items()})

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reader.join(timeout=5)


@pytest.mark.slow
def test_rebalance_after_a_clean_leave_and_a_killed_member(group_broker: BrokerProcess) -> None:
    """A killed member's session expires and a leaving member says goodbye: the
    survivors take over both members' partitions from their committed offsets."""
    bs, topic, group, per_partition = group_broker.bootstrap, "rb-six", "rb-group", 1000
    create_topic(bs, topic, 6)
    produce(bs, topic, 6 * per_partition, 6)
    doomed = KilledMember(bs, topic, group)
    survivors = [KafkaPythonMember(bs, topic, group, f"rb-{i}", pause_s=0.05,
                                   max_poll_records=20) for i in range(2)]
    leaver = KafkaPythonMember(bs, topic, group, "rb-leaver", pause_s=0.3, max_poll_records=20)
    members = [*survivors, leaver]
    for m in members:
        m.start()

    def shared_cleanly() -> bool:
        """Each of the four holds partitions, none twice, all six held (no rebalance
        half-seen: the killed member's partitions must be its own when it dies)."""
        held = [list(doomed.assignment), *(list(m.assignment) for m in members)]
        return all(held) and sorted(p for h in held for p in h) == list(range(6))

    try:
        wait_for(shared_cleanly, "four members sharing the six partitions")
        wait_for(lambda: sum(doomed.committed.values()) >= 60
                 and sum(leaver.committed.values()) >= 60 and shared_cleanly(),
                 "commits from the members about to go")
        doomed_parts = set(doomed.assignment)
        doomed.kill()
        killed_at = time.monotonic()
        # Its session (6 s) must expire before anyone else gets its partitions.
        wait_for(lambda: doomed_parts <= set().union(*(m.assignment for m in members)),
                 "the killed member's partitions taken over", timeout=30)
        took_over_after = time.monotonic() - killed_at
        leaver_parts = set(leaver.assignment)
        leaver.stop.set()
        leaver.join(timeout=30)
        left_at = time.monotonic()
        wait_for(lambda: leaver_parts <= set().union(*(m.assignment for m in survivors)),
                 "the leaver's partitions taken over", timeout=20)
        wait_for(lambda: {(p, o) for m in members for p, o, _t in m.records}
                 | set(doomed.consumed) >= {(p, o) for p in range(6)
                                            for o in range(per_partition)},
                 "every record consumed by someone")
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(timeout=30)
        if doomed.proc.poll() is None:
            doomed.kill()
    assert all(m.error is None for m in members), [m.error for m in members]
    assert took_over_after >= SESSION_MS / 1000 - 1.5, "taken over before the session expired"

    # Nothing skipped; anything consumed twice was consumed first without a good commit.
    everything = [(p, o) for m in members for p, o, _t in m.records] + doomed.consumed
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for r in everything:
        counts[r] += 1
    doomed_tail = {(p, o) for p, o in doomed.consumed if o >= doomed.committed.get(p, 0)}
    unconfirmed = doomed_tail | set().union(*(m.uncommitted for m in members))
    twice = {r for r, n in counts.items() if n > 1}
    assert twice <= unconfirmed, sorted(twice - unconfirmed)[:10]

    # The survivors started each taken-over partition at the committed offset.
    def first_after(parts: set[int], since: float) -> dict[int, int]:
        firsts: dict[int, int] = {}
        for m in survivors:
            for p, o, t in m.records:
                if p in parts and t >= since and (p not in firsts or o < firsts[p]):
                    firsts[p] = o
        return firsts

    for p, o in first_after(leaver_parts, left_at).items():
        assert o == leaver.committed.get(p, o), (p, o, leaver.committed)
    doomed_max = {p: max(o for pp, o in doomed.consumed if pp == p) for p, _ in doomed.consumed}
    for p, o in first_after(doomed_parts, killed_at).items():
        if p in doomed.committed:
            assert doomed.committed[p] <= o <= doomed_max.get(p, -1) + 1, (p, o)


# -------------------------------------------------------------------- restart


def test_committed_offsets_survive_a_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", config=GROUP_CONFIG).start()
    bs, topic, group = broker.bootstrap, "restart-topic", "restart-group"
    try:
        create_topic(bs, topic, 3)
        produce(bs, topic, 300, 3)
        consumer = KafkaConsumer(
            topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=1000, max_poll_records=40)
        consumed: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(consumed) < 120 and time.monotonic() < deadline:
            batch = [(r.partition, r.offset)
                     for rs in consumer.poll(timeout_ms=200).values() for r in rs]
            if batch:
                consumed += batch
                consumer.commit()
        before = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
        consumer.close()
        assert sum(o or 0 for o in before.values()) == len(consumed) >= 120
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]

    broker.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=bs)
        offsets: dict[Any, Any] = {}

        def fetched() -> bool:
            nonlocal offsets
            try:
                offsets = admin.list_group_offsets(group)[group]
            except CoordinatorLoadInProgressError:  # answered until the group log is read
                return False
            return True

        wait_for(fetched, "the coordinator to load __consumer_offsets")
        admin.close()
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {
            p: o for p, o in before.items() if o is not None}
        consumer = CKConsumer({"bootstrap.servers": bs, "group.id": group,
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "session.timeout.ms": SESSION_MS})
        consumer.subscribe([topic])
        resumed: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(resumed) < 300 - len(consumed) and time.monotonic() < deadline:
            resumed += [position(m) for m in consumer.consume(100, timeout=0.2)
                        if m.error() is None]
        consumer.close()
        firsts = {p: min(o for pp, o in resumed if pp == p) for p, _ in resumed}
        assert firsts == {p: before.get(p) or 0 for p in firsts}
        assert sorted(consumed + resumed) == [(p, o) for p in range(3) for o in range(100)]
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


# ------------------------------------------------- offsets topic deleted


def test_groups_work_again_after_the_offsets_topic_is_deleted(tmp_path: Path) -> None:
    """Kafka lets an admin delete ``__consumer_offsets`` (DeleteTopics has no internal-topic
    check; only kafka-topics.sh refuses): its coordinator resigns, the groups and their
    offsets are gone, and the topic is made again, so groups work again. Before, this
    broker kept serving groups from memory and every write to the missing topic failed
    (JoinGroup and OffsetCommit answered errors until a restart)."""
    from confluent_kafka import TopicPartition as CKTopicPartition
    from confluent_kafka.admin import AdminClient

    broker = BrokerProcess(tmp_path / "data", config=GROUP_CONFIG).start()
    bs, topic = broker.bootstrap, "after-offsets-delete"
    try:
        create_topic(bs, topic, 2)
        produce(bs, topic, 10, 2)
        before = CKConsumer({"bootstrap.servers": bs, "group.id": "before-delete"})
        before.commit(offsets=[CKTopicPartition(topic, 0, 4)], asynchronous=False)
        before.close()

        admin = AdminClient({"bootstrap.servers": bs})
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(30)

        consumer = CKConsumer({"bootstrap.servers": bs, "group.id": "after-delete",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "session.timeout.ms": SESSION_MS})
        consumer.subscribe([topic])
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(seen) < 10 and time.monotonic() < deadline:
            seen += [position(m) for m in consumer.consume(10, timeout=0.2)
                     if m.error() is None]
        assert sorted(seen) == [(p, o) for p in range(2) for o in range(5)]
        consumer.commit(offsets=[CKTopicPartition(topic, 1, 3)], asynchronous=False)
        [got] = consumer.committed([CKTopicPartition(topic, 1)], timeout=10)
        assert got.offset == 3
        consumer.close()

        # the offsets committed before the deletion went with the topic, as in Kafka
        old = CKConsumer({"bootstrap.servers": bs, "group.id": "before-delete"})
        [gone] = old.committed([CKTopicPartition(topic, 0)], timeout=10)
        old.close()
        assert gone.offset < 0
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def test_describe_names_each_members_client_host(group_broker: BrokerProcess) -> None:
    """DescribeGroups tells each member's host as Kafka does (the client's address as
    Java prints it, "/127.0.0.1"), as kafka-consumer-groups.sh --describe shows it in HOST;
    it answered "" for every member."""
    from confluent_kafka.admin import AdminClient

    bs, group = group_broker.bootstrap, "host-group"
    create_topic(bs, "host-topic", 1)
    consumer = CKConsumer({"bootstrap.servers": bs, "group.id": group, "client.id": "host-client",
                           "session.timeout.ms": SESSION_MS})
    consumer.subscribe(["host-topic"])
    try:
        deadline = time.monotonic() + WAIT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        admin = AdminClient({"bootstrap.servers": bs})
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert [(m.client_id, m.host) for m in described.members] == [
            ("host-client", "/127.0.0.1")]
    finally:
        consumer.close()
