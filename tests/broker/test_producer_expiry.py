"""producer.id.expiration.ms on a real broker, with real clients (kafka-python's protocol
over a socket for exact sequences, confluent-kafka's idempotent and transactional
producers): a producer idle that long is forgotten (unknown again: Kafka, since KIP-360,
accepts its next batch at any sequence), unless its transaction is open; and a restart,
clean or not, does not bring an expired producer back."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.broker.rawclient import (
    INIT_PRODUCER_ID,
    RawClient,
    record_batch,
    wait_complete,
    wait_for_log,
)
from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients]

EXPIRATION_MS = 3_000
CHECK_MS = 500
CONFIG = {
    "producer.id.expiration.ms": EXPIRATION_MS,
    "producer.id.expiration.check.interval.ms": CHECK_MS,
    "transaction.state.log.num.partitions": 4,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
}
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


@pytest.fixture
def started() -> Iterator[list[BrokerProcess]]:
    """Brokers a test starts; all stopped at the end."""
    brokers: list[BrokerProcess] = []
    yield brokers
    for b in brokers:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()


def start(data_dir: Path, started: list[BrokerProcess], n: int,
          **overrides: int) -> BrokerProcess:
    b = BrokerProcess(data_dir, log_name=f"broker-{n}.log",
                      config={**CONFIG, **overrides}).start()
    started.append(b)
    return b


def expired_line(topic: str, pid: int | None = None) -> str:
    """The shard's debug line for a check that expired producers of ``topic``-0 (that
    expired ``pid`` alone, if given)."""
    return f"expired producer id(s) of {topic}-0: " + ("" if pid is None else f"[{pid}]")


def expired_ids(log: str, topic: str) -> list[list[int]]:
    """The ids each check expired on ``topic``-0, in order, from the broker's log."""
    prefix = expired_line(topic)
    return [json.loads(line.split(prefix, 1)[1].strip())
            for line in log.splitlines() if prefix in line]


def new_producer_id(client: RawClient) -> tuple[int, int]:
    init = client.call(INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60_000,
        "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0
    return init.producer_id, init.producer_epoch


def idempotent_producer(client: RawClient, topic: str,
                        stamp: int | None = None) -> tuple[int, int]:
    """A new idempotent producer id that has written sequences 0-9 to ``topic``."""
    pid, epoch = new_producer_id(client)
    for seq in (0, 5):
        assert client.produce(topic, 0, batch(pid, epoch, seq, stamp),
                              acks=1).base_offset == seq
    return pid, epoch


def batch(pid: int, epoch: int, seq: int, stamp: int | None = None) -> bytes:
    return record_batch([(None, b"%d" % (seq + i)) for i in range(5)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        timestamp_ms=stamp)


def test_an_idle_producer_expires_and_is_then_unknown(
        tmp_path: Path, started: list[BrokerProcess]) -> None:
    b = start(tmp_path / "data", started, 1)
    topic = "idle"
    with RawClient(b.port) as client:
        assert client.create_topic(topic, 1) == 0
        # its batches stamped ten minutes ahead: it cannot expire however slow this is
        pid, epoch = idempotent_producer(client, topic, int(time.time() * 1000) + 600_000)
        # known: a gap is refused, a retry is a duplicate
        assert client.produce(topic, 0, batch(pid, epoch, 30),
                              acks=1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        again = client.produce(topic, 0, batch(pid, epoch, 5), acks=1)
        assert (again.error_code, again.base_offset) == (0, 5)
        # its next batch, stamped now, is its last write: it expires from that
        assert client.produce(topic, 0, batch(pid, epoch, 10), acks=1).base_offset == 10
        assert expired_line(topic, pid) in wait_for_log(b, expired_line(topic, pid))
        # expired: unknown, so its next batch is taken at any sequence (Kafka's answer
        # since KIP-360, not UNKNOWN_PRODUCER_ID), and sequences go on from there
        after = client.produce(topic, 0, batch(pid, epoch, 30), acks=1)
        assert (after.error_code, after.base_offset) == (0, 15)
        assert client.produce(topic, 0, batch(pid, epoch, 5),
                              acks=1).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert client.produce(topic, 0, batch(pid, epoch, 35), acks=1).base_offset == 20
        assert client.list_offset(topic, 0, -1).offset == 25


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
def test_a_restart_does_not_bring_an_expired_producer_back(
        tmp_path: Path, started: list[BrokerProcess], how: str) -> None:
    """The restarted broker checks for expiry only once an hour: what it knows at open
    is what it answers with. A clean stop with no producer left writes an empty
    snapshot; a kill -9 none, so the open replays the log, which holds the producer's
    batches: they must not make it known again (their timestamps are as old as they
    were at the check before the restart)."""
    data = tmp_path / "data"
    b = start(data, started, 1)
    topic = "restart"
    with RawClient(b.port) as client:
        assert client.create_topic(topic, 1) == 0
        pid, epoch = idempotent_producer(client, topic)
        assert expired_line(topic, pid) in wait_for_log(b, expired_line(topic, pid))
    if how == "sigterm":
        assert b.stop(signal.SIGTERM) == 0
    else:
        b.kill()
    b = start(data, started, 2, **{"producer.id.expiration.check.interval.ms": 3_600_000})
    with RawClient(b.port) as client:
        after = client.produce(topic, 0, batch(pid, epoch, 30), acks=1)
        assert (after.error_code, after.base_offset) == (0, 10)


def test_an_open_transaction_keeps_its_producer_while_an_idempotent_one_expires(
        tmp_path: Path, started: list[BrokerProcess]) -> None:
    """Two confluent-kafka producers idle past the expiration on one partition: the
    idempotent one is forgotten (and goes on sending, accepted), the transactional one
    with its transaction open is not, until its commit ends it. A third producer, whose
    write comes after the transactional one's expiration, expires alone: the check that
    found it expired ran while the transaction was open."""
    b = start(tmp_path / "data", started, 1)
    topic = "txn-idle"
    with RawClient(b.port) as client:
        assert client.create_topic(topic, 1) == 0
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failures.append(err)

    idem = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True,
                     "linger.ms": 0})
    txn_id = f"expiry-{uuid.uuid4()}"
    txn = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0,
                    "transactional.id": txn_id})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"t0", partition=0, on_delivery=delivered)
    assert txn.flush(30) == 0
    t0_stamped_by = time.time()  # t0's CreateTime is no later
    for i in range(3):
        idem.produce(topic, b"i%d" % i, partition=0, on_delivery=delivered)
    assert idem.flush(30) == 0
    [[idem_id]] = expired_ids(wait_for_log(b, expired_line(topic)), topic)  # it alone
    # the third producer writes once t0 is EXPIRATION_MS old: a check that expires it
    # would expire the transactional producer too were its transaction not kept
    time.sleep(max(0.0, t0_stamped_by + EXPIRATION_MS / 1000 - time.time()))
    with RawClient(b.port) as client:
        third, third_epoch = new_producer_id(client)
        assert client.produce(topic, 0, batch(third, third_epoch, 0), acks=1).error_code == 0
    log = wait_for_log(b, expired_line(topic, third), timeout=60)
    assert expired_ids(log, topic) == [[idem_id], [third]]
    for i in range(3, 6):
        idem.produce(topic, b"i%d" % i, partition=0, on_delivery=delivered)
    assert idem.flush(30) == 0
    txn.produce(topic, b"t1", partition=0, on_delivery=delivered)
    txn.commit_transaction(30)
    assert failures == []
    wait_complete(b.port, txn_id)  # the marker comes after the answer; read_committed stops
    assert read_committed(b.bootstrap, topic) == [
        b"t0", b"i0", b"i1", b"i2", *(b"%d" % i for i in range(5)), b"i3", b"i4", b"i5",
        b"t1"]
    # the commit ended the transaction: now the transactional producer expires too
    # (the idempotent one, which wrote again, expires again, in that check or its own)
    deadline = time.monotonic() + 60
    while True:
        ids = expired_ids(b.log(), topic)
        later = {pid for check in ids[2:] for pid in check} - {idem_id, third}
        if later or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert ids[:2] == [[idem_id], [third]] and len(later) == 1


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            values.append(m.value())
    finally:
        consumer.close()
    return values
