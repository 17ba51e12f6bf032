"""Transactions with real clients (issue 20): commit and abort seen through each isolation
level, transactional offsets, a zombie fenced, timeouts, a consume-transform-produce
worker killed with SIGKILL mid-transaction, a broker killed with a transaction open,
DescribeTransactions and ListTransactions, and the transaction config keys.
"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.broker.rawclient import (
    DESCRIBE_TXNS,
    FETCH,
    LIST_OFFSETS,
    RawClient,
    fetch_values,
    read_batches,
    wait_complete,
)
from tests.fixtures.broker import ROOT, BrokerProcess
from tests.fixtures.waiting import wait_for

pytestmark = [pytest.mark.clients]

CLEANUP_MS = 300
TXN_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": CLEANUP_MS,
    "transaction.max.timeout.ms": 120000,
    "transaction.state.log.num.partitions": 8,
    "transaction.state.log.replication.factor": 3,  # capped to the one live broker
    "transaction.state.log.min.isr": 2,             # capped to that replication factor
}
FIND_COORDINATOR, INIT_PRODUCER_ID, LIST_TXNS = 10, 22, 66
ADD_PARTITIONS_TO_TXN = 24


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", config=TXN_CONFIG).start()
    yield b
    code = b.stop()
    assert code == 0, b.log()[-3000:]


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "linger.ms": 5, **extra})


def read_all(bootstrap: str, topic: str, level: str, partitions: int = 1) -> list[bytes]:
    """Every record an isolation level shows, to the end (the LSO for read_committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time()}",
                         "isolation.level": level, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == -191:  # _PARTITION_EOF
                    at_end.add(m.partition())
                    continue
                raise AssertionError(m.error())
            at_end.discard(m.partition())
            values.append(m.value())
    finally:
        consumer.close()
    assert len(at_end) == partitions, "did not reach the end of every partition"
    return values


def watermarks(bootstrap: str, topic: str, level: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm",
                         "isolation.level": level})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


# ----------------------------------------------------------------- commit / abort


def test_confluent_commit_and_abort_through_each_isolation_level(
        txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "t-commit")
    p = producer(bs, "commit-abort")
    p.init_transactions(30)
    p.begin_transaction()
    for v in values("c", 10):
        p.produce("t-commit", v)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in values("a", 10):
        p.produce("t-commit", v)
    p.flush(30)  # sent, then aborted: in the log, never committed
    p.abort_transaction(30)
    p.begin_transaction()
    for v in values("o", 5):
        p.produce("t-commit", v)
    p.flush(30)
    # open: read_committed stops at the LSO, read_uncommitted sees everything
    assert read_all(bs, "t-commit", "read_committed") == values("c", 10)
    assert read_all(bs, "t-commit", "read_uncommitted") == (
        values("c", 10) + values("a", 10) + values("o", 5))
    low, committed_high = watermarks(bs, "t-commit", "read_committed")
    _low, high = watermarks(bs, "t-commit", "read_uncommitted")
    # 10 committed + marker + 10 aborted + marker: the open transaction starts at 22
    assert (low, committed_high, high) == (0, 22, 27)
    p.commit_transaction(30)
    wait_complete(txn_broker.port, "commit-abort")
    assert read_all(bs, "t-commit", "read_committed") == values("c", 10) + values("o", 5)
    assert watermarks(bs, "t-commit", "read_committed") == (0, 28)


def test_kafka_python_transactional_producer(txn_broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    bs = txn_broker.bootstrap
    create_topic(bs, "t-kp")
    kp = KafkaProducer(bootstrap_servers=bs, transactional_id="kafka-python-txn",
                       max_block_ms=60_000)
    try:
        kp.init_transactions()
        kp.begin_transaction()
        for v in values("k", 5):
            kp.send("t-kp", v)
        kp.commit_transaction()
        kp.begin_transaction()
        for v in values("x", 5):
            kp.send("t-kp", v)
        kp.flush()
        kp.abort_transaction()
    finally:
        kp.close(timeout=10)
    assert read_all(bs, "t-kp", "read_committed") == values("k", 5)
    assert read_all(bs, "t-kp", "read_uncommitted") == values("k", 5) + values("x", 5)


def test_offsets_sent_in_a_transaction_count_only_when_it_commits(
        txn_broker: BrokerProcess) -> None:
    """A read_uncommitted consumer sees the last decided offset while the transaction is
    open; a read_committed one (OffsetFetch require_stable) waits for the decision."""
    bs = txn_broker.bootstrap
    create_topic(bs, "t-offsets")
    stable = Consumer({"bootstrap.servers": bs, "group.id": "txn-offsets",
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    unstable = Consumer({"bootstrap.servers": bs, "group.id": "txn-offsets",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    tp = TopicPartition("t-offsets", 0)
    try:
        p = producer(bs, "offsets-txn")
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("t-offsets", b"x")
        p.send_offsets_to_transaction([TopicPartition("t-offsets", 0, 5)],
                                      stable.consumer_group_metadata(), 30)
        assert unstable.committed([tp], timeout=10)[0].offset < 0  # pending
        p.commit_transaction(30)
        assert stable.committed([tp], timeout=20)[0].offset == 5
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition("t-offsets", 0, 9)],
                                      stable.consumer_group_metadata(), 30)
        assert unstable.committed([tp], timeout=10)[0].offset == 5
        p.abort_transaction(30)
        assert stable.committed([tp], timeout=20)[0].offset == 5
    finally:
        stable.close()
        unstable.close()


def test_a_zombie_with_the_older_epoch_is_fenced(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "t-zombie")
    zombie = producer(bs, "zombie")
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce("t-zombie", b"from-zombie")
    zombie.flush(30)
    successor = producer(bs, "zombie")
    successor.init_transactions(30)  # bumps the epoch, aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("t-zombie", b"from-successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    error = info.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
    wait_complete(txn_broker.port, "zombie")  # the successor's commit marker
    assert read_all(bs, "t-zombie", "read_committed") == [b"from-successor"]


def test_a_transaction_past_its_timeout_is_aborted(txn_broker: BrokerProcess) -> None:
    """transaction.timeout.ms below the cleanup tick
    (transaction.abort.timed.out.transaction.cleanup.interval.ms); transaction.max.timeout.ms
    refuses a longer one."""
    bs = txn_broker.bootstrap
    create_topic(bs, "t-timeout")
    slow = producer(bs, "slow-txn", **{"transaction.timeout.ms": 1500})
    slow.init_transactions(30)
    slow.begin_transaction()
    slow.produce("t-timeout", b"late")
    slow.flush(30)
    wait_complete(txn_broker.port, "slow-txn", "CompleteAbort")
    with RawClient(txn_broker.port) as raw:
        too_long = raw.call(INIT_PRODUCER_ID, 1, {"transactional_id": "greedy",
                                                   "transaction_timeout_ms": 120001})
        assert too_long.error_code == 50  # INVALID_TRANSACTION_TIMEOUT
    other = producer(bs, "after-timeout")
    other.init_transactions(30)
    other.begin_transaction()
    other.produce("t-timeout", b"on-time")
    other.commit_transaction(30)
    wait_complete(txn_broker.port, "after-timeout")
    assert read_all(bs, "t-timeout", "read_committed") == [b"on-time"]
    with pytest.raises(KafkaException):
        slow.commit_transaction(10)


def test_describe_and_list_transactions(txn_broker: BrokerProcess) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "t-describe", 2)
    p = producer(bs, "described")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("t-describe", b"v", partition=1)
    p.flush(30)
    with RawClient(txn_broker.port) as raw:
        found = raw.call(FIND_COORDINATOR, 3, {"key": "described", "key_type": 1})
        assert (found.error_code, found.node_id, found.port) == (0, 1, txn_broker.port)
        reply = raw.call(DESCRIBE_TXNS, 0, {"transactional_ids": ["described", "nobody"]})
        mine, unknown = reply.transaction_states
        assert (mine.error_code, mine.transaction_state, mine.transaction_timeout_ms) == (
            0, "Ongoing", 60000)
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [("t-describe", [1])]
        assert unknown.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = raw.call(LIST_TXNS, 0, {"state_filters": ["Ongoing", "Bogus"],
                                         "producer_id_filters": []})
        assert listed.error_code == 0 and list(listed.unknown_state_filters) == ["Bogus"]
        assert ("described", mine.producer_id, "Ongoing") in [
            (s.transactional_id, s.producer_id, s.transaction_state)
            for s in listed.transaction_states]
        mine_only = {"state_filters": [], "producer_id_filters": [mine.producer_id]}
        recent = raw.call(LIST_TXNS, 1, {**mine_only, "duration_filter": 0})
        assert [s.transactional_id for s in recent.transaction_states] == ["described"]
        old = raw.call(LIST_TXNS, 1, {**mine_only, "duration_filter": 3_600_000})
        assert list(old.transaction_states) == []
    p.commit_transaction(30)


def test_a_read_committed_fetch_waits_for_the_marker_and_names_aborted_transactions(
        txn_broker: BrokerProcess) -> None:
    """Fetch isolation_level=1 at the LSO with max_wait: it is answered with the records
    once the transaction commits (a fetch that woke on the open transaction's own bytes
    would answer empty at once); the aborted transaction before it is listed."""
    bs = txn_broker.bootstrap
    create_topic(bs, "t-wait")
    p = producer(bs, "waiter")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("t-wait", b"aborted")
    p.flush(30)
    p.abort_transaction(30)          # offsets 0 (record) and 1 (marker)
    p.begin_transaction()
    p.produce("t-wait", b"committed")
    p.flush(30)                      # offset 2, open: the LSO is 2
    with RawClient(txn_broker.port) as raw:
        values_ = fetch_values("t-wait", 0, 0, max_wait_ms=30_000, min_bytes=1)
        values_["isolation_level"] = 1
        first = raw.call(FETCH, 11, values_).responses[0].partitions[0]
        assert (first.high_watermark, first.last_stable_offset) == (3, 2)
        assert [(a.producer_id, a.first_offset) for a in first.aborted_transactions] == [
            (first.aborted_transactions[0].producer_id, 0)]
        batches = read_batches(first.records)  # the aborted record, then its marker
        assert [b.is_control_batch for b in batches] == [False, True]
        assert [r.value for r in batches[0]] == [b"aborted"]
        values_ = fetch_values("t-wait", 0, 2, max_wait_ms=30_000, min_bytes=1)
        values_["isolation_level"] = 1
        raw.send(FETCH, 11, values_)  # waits: nothing stable after 2 yet
        p.commit_transaction(30)
        _correlation, waited = raw.recv()
        part = waited.responses[0].partitions[0]
        assert part.last_stable_offset == 4 and part.aborted_transactions == []
        assert [[r.value for r in b] for b in read_batches(part.records)
                if not b.is_control_batch] == [[b"committed"]]


def test_list_offsets_by_isolation_level(txn_broker: BrokerProcess) -> None:
    """Latest, max timestamp and by-timestamp lookups stop at the LSO for read_committed."""
    bs = txn_broker.bootstrap
    create_topic(bs, "t-list")
    p = producer(bs, "lister")
    p.init_transactions(30)
    now_ms = int(time.time() * 1000)
    later_ms = now_ms + 3_600_000          # after the commit marker's (wall clock) stamp
    p.begin_transaction()
    p.produce("t-list", b"done", timestamp=now_ms)
    p.commit_transaction(30)                # 0 record, 1 marker
    p.begin_transaction()
    p.produce("t-list", b"open", timestamp=later_ms)
    p.flush(30)                             # 2, open

    def lookup(raw: RawClient, level: int, timestamp: int) -> int:
        reply = raw.call(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": level,
                                            "topics": [{"name": "t-list", "partitions": [
                                                {"partition_index": 0,
                                                 "current_leader_epoch": -1,
                                                 "timestamp": timestamp}]}]})
        return int(reply.topics[0].partitions[0].offset)

    with RawClient(txn_broker.port) as raw:
        assert [lookup(raw, 0, ts) for ts in (-1, -3, later_ms - 1)] == [3, 2, 2]
        assert [lookup(raw, 1, ts) for ts in (-1, -3, later_ms - 1)] == [2, -1, -1]
        assert lookup(raw, 1, now_ms) == 0
    p.commit_transaction(30)


def test_markers_on_a_log_append_time_topic_are_stamped_with_the_append_time(
        txn_broker: BrokerProcess) -> None:
    """message.timestamp.type=LogAppendTime: the commit and abort markers the coordinator's
    WriteTxnMarkers appends carry the append time and the LogAppendTime bit, as every
    batch the leader appends there (Kafka's LogValidator stamps them too); they kept
    CreateTime."""
    bs = txn_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([NewTopic(
            "t-appended", 1, 1, config={"message.timestamp.type": "LogAppendTime"})]).values():
        future.result(30)
    p = producer(bs, "appender")
    p.init_transactions(30)
    before_ms = int(time.time() * 1000)
    for finish in (p.commit_transaction, p.abort_transaction):
        p.begin_transaction()
        p.produce("t-appended", b"old", timestamp=1000)
        p.flush(30)
        finish(30)                         # 0 record, 1 commit; 2 record, 3 abort
    with RawClient(txn_broker.port) as raw:
        # the abort answers once it is prepared; its marker may come a moment later
        wait_for(lambda: raw.fetch("t-appended", 0, 0).high_watermark >= 4,
                 "the abort marker to be written")
        batches = read_batches(raw.fetch("t-appended", 0, 0).records)
    assert [(b.is_control_batch, b.timestamp_type) for b in batches] == [
        (False, 1), (True, 1), (False, 1), (True, 1)]
    assert all(b.max_timestamp >= before_ms for b in batches), [
        b.max_timestamp for b in batches]


# ------------------------------------------------------------- crashes and restarts


def _start_worker(bs: str, total: int, log: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.broker.txn_worker", bs, "ctp-in", "ctp-out",
            "ctp-group", "ctp-worker", str(total), "20"]
    with open(log, "ab") as err:  # the child writes to its own copy of the fd
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err)


def test_consume_transform_produce_killed_mid_transaction_outputs_exactly_once(
        txn_broker: BrokerProcess, tmp_path: Path) -> None:
    bs = txn_broker.bootstrap
    create_topic(bs, "ctp-in", 2)
    create_topic(bs, "ctp-out", 2)
    total = 300
    source = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(total):
        source.produce("ctp-in", f"r{i}".encode(), partition=i % 2)
    assert source.flush(30) == 0
    worker = _start_worker(bs, total, tmp_path / "worker.log")
    assert worker.stdout is not None
    commits = 0
    killed = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = worker.stdout.readline().decode()
        if not line:
            break
        if line.startswith("committed"):
            commits += 1
        elif line.startswith("in-txn") and commits >= 3:
            worker.send_signal(signal.SIGKILL)  # records sent, offsets and commit not yet
            killed = True
            break
    worker.wait(30)
    assert killed, (tmp_path / "worker.log").read_text()[-2000:]
    # the dead transaction's records are in the log, never committed
    assert len(read_all(bs, "ctp-out", "read_uncommitted", 2)) > len(
        read_all(bs, "ctp-out", "read_committed", 2))
    again = _start_worker(bs, total, tmp_path / "worker.log")
    again.communicate(timeout=150)
    assert again.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    # its last act was a commit, whose markers may still be on their way
    wait_complete(txn_broker.port, "ctp-worker")
    output = read_all(bs, "ctp-out", "read_committed", 2)
    counts = collections.Counter(output)
    assert set(counts) == {f"out-r{i}".encode() for i in range(total)}
    assert max(counts.values()) == 1, [v for v, c in counts.items() if c > 1][:5]


def test_a_broker_killed_with_a_transaction_open_recovers_it(tmp_path: Path) -> None:
    """Commits survive a SIGKILL; the open transaction is aborted by the next instance of
    its producer, the state rebuilt from __transaction_state."""
    b = BrokerProcess(tmp_path / "data", config=TXN_CONFIG).start()
    try:
        bs = b.bootstrap
        create_topic(bs, "t-crash")
        p = producer(bs, "crashing")
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("t-crash", b"kept")
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("t-crash", b"lost")
        p.flush(30)
        b.kill()
        del p
        b.start()
        with RawClient(b.port) as raw:
            state = ""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and state != "Ongoing":
                reply = raw.call(DESCRIBE_TXNS, 0, {"transactional_ids": ["crashing"]})
                state = reply.transaction_states[0].transaction_state
                time.sleep(0.2)
            assert state == "Ongoing"  # loaded from the log
        again = producer(bs, "crashing")
        again.init_transactions(30)
        again.begin_transaction()
        again.produce("t-crash", b"after")
        again.commit_transaction(30)
        wait_complete(b.port, "crashing")
        assert read_all(bs, "t-crash", "read_committed") == [b"kept", b"after"]
        assert read_all(bs, "t-crash", "read_uncommitted") == [b"kept", b"lost", b"after"]
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()


def test_idempotent_producers_still_work(txn_broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": txn_broker.bootstrap, "enable.idempotence": True})
    p.produce("idem", b"v")
    assert p.flush(30) == 0


def _txn_batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, True, pid, epoch, seq, 1 << 30)
    builder.append(0, int(time.time() * 1000), None, value, [])
    return bytes(builder.build())


def _init_producer_id(raw: RawClient, txn_id: str) -> Any:
    """InitProducerId, retried while the coordinator loads (14) or aborts the open
    transaction (51, CONCURRENT_TRANSACTIONS)."""
    deadline = time.monotonic() + 30
    while True:
        reply = raw.call(INIT_PRODUCER_ID, 1, {"transactional_id": txn_id,
                                                "transaction_timeout_ms": 60_000})
        if reply.error_code not in (14, 51) or time.monotonic() > deadline:
            assert reply.error_code == 0, reply
            return reply
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["kill-9", "sigterm"])
def test_the_epoch_an_abort_marker_bumped_still_fences_after_a_restart(
        tmp_path: Path, how: str) -> None:
    """A successor's InitProducerId aborts the zombie's transaction with a bumped epoch
    (the marker carries it). The partition fences the zombie's epoch before a restart and
    after it: kill -9 replays the log, SIGTERM loads the producer-state snapshot, and
    either way the marker's epoch is the producer's (as Kafka keeps an entry with no
    batch, only an epoch)."""
    b = BrokerProcess(tmp_path / "data", config=TXN_CONFIG).start()
    try:
        topic = "t-bumped"
        with RawClient(b.port) as raw:
            assert raw.create_topic(topic, 1) == 0
            init = _init_producer_id(raw, "bumped")
            pid, epoch = init.producer_id, init.producer_epoch
            added = raw.call(ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": "bumped", "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            assert added.results_by_topic_v3_and_below[0].results_by_partition[
                0].partition_error_code == 0
            assert raw.produce(topic, 0, _txn_batch(pid, epoch, 0, b"zombie-0")).error_code == 0
            # The successor: aborts the open transaction with a bumped epoch.
            assert _init_producer_id(raw, "bumped").producer_id == pid
            part = raw.fetch(topic, 0, 0)
            markers = [x for x in read_batches(part.records) if x.is_control_batch]
            assert [m.producer_epoch for m in markers] == [epoch + 1]
            before = raw.produce(topic, 0, _txn_batch(pid, epoch, 1, b"zombie-1"))
            assert before.error_code == 47  # INVALID_PRODUCER_EPOCH
        if how == "kill-9":
            b.kill()
        else:
            assert b.stop() == 0
        b.start()
        with RawClient(b.port) as raw:
            after = raw.produce(topic, 0, _txn_batch(pid, epoch, 1, b"zombie-1"))
            assert after.error_code == 47, after  # still fenced
            part = raw.fetch(topic, 0, 0)
            assert [r.value for x in read_batches(part.records) if not x.is_control_batch
                    for r in x] == [b"zombie-0"]
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()


def test_add_partitions_refusal_names_the_refused_partitions_only(
        txn_broker: BrokerProcess) -> None:
    """As Kafka's handleAddPartitionToTxnRequest: an internal topic is never authorized
    there (TOPIC_AUTHORIZATION_FAILED; AddOffsetsToTxn adds __consumer_offsets), an unknown
    partition is UNKNOWN_TOPIC_OR_PARTITION, and the request's other partitions were not
    tried (OPERATION_NOT_ATTEMPTED); nothing is added."""
    bs = txn_broker.bootstrap
    create_topic(bs, "t-refusals")
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "g-refusals"})
    try:  # a group's FindCoordinator makes __consumer_offsets
        consumer.committed([TopicPartition("t-refusals", 0)], timeout=30)
    finally:
        consumer.close()
    with RawClient(txn_broker.port) as raw:
        init = _init_producer_id(raw, "refusals")
        added = raw.call(ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "refusals",
            "v3_and_below_producer_id": init.producer_id,
            "v3_and_below_producer_epoch": init.producer_epoch,
            "v3_and_below_topics": [{"name": "t-refusals", "partitions": [0, 7]},
                                    {"name": "__consumer_offsets", "partitions": [0]}]})
        codes = {(t.name, r.partition_index): r.partition_error_code
                 for t in added.results_by_topic_v3_and_below for r in t.results_by_partition}
        assert codes == {("t-refusals", 0): 55,          # OPERATION_NOT_ATTEMPTED
                         ("t-refusals", 7): 3,           # UNKNOWN_TOPIC_OR_PARTITION
                         ("__consumer_offsets", 0): 29}  # TOPIC_AUTHORIZATION_FAILED
