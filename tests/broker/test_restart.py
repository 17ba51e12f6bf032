"""Restarts keep every acknowledged record.

kill -9 in the middle of a stream of acks=1 produces: everything the broker
acknowledged is there after a restart on the same data dir, at the offsets
it acknowledged, in order and without duplicates. A SIGTERM stop writes the
clean-shutdown marker and the restart serves every record without recovery.
A deleted topic whose directory cannot be renamed aside (``chattr +i``) stays deleted
across a restart: its records are not served, and a namesake starts empty.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.broker.rawclient import (
    DELETE_TOPICS,
    PRODUCE,
    RawClient,
    produce_values,
    read_records,
    record_batch,
    wait_for_log,
)
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.immutable import chattr_works
from tests.fixtures.waiting import wait_for

PARTITIONS = 3
PER_BATCH = 20
WINDOW = 16
MARKER = ".kafka_cleanshutdown"
UNCLEAN = "no clean-shutdown marker"


def value(partition: int, seq: int) -> bytes:
    return f"{partition}:{seq:07d}".encode() + b"." * 40


def seq_of(raw: bytes) -> int:
    return int(raw.split(b":")[1][:7])


class AckedStream:
    """acks=1 batches pipelined on one connection; records what was acknowledged."""

    def __init__(self, port: int, topic: str) -> None:
        self.client = RawClient(port)
        self.topic = topic
        self.acked: list[tuple[int, int, int]] = []  # partition, base offset, first seq
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> AckedStream:
        self.thread.start()
        return self

    def _run(self) -> None:
        next_seq = dict.fromkeys(range(PARTITIONS), 0)
        pending: list[tuple[int, int, int]] = []  # cid, partition, first seq
        i = 0
        try:
            while True:
                while len(pending) < WINDOW:
                    p = i % PARTITIONS
                    i += 1
                    first = next_seq[p]
                    next_seq[p] += PER_BATCH
                    batch = record_batch([(b"%d" % p, value(p, first + k))
                                          for k in range(PER_BATCH)])
                    cid = self.client.send(PRODUCE, 9, produce_values(self.topic, p, batch, 1))
                    pending.append((cid, p, first))
                cid, response = self.client.recv()
                want_cid, p, first = pending.pop(0)
                assert cid == want_cid
                part = response.responses[0].partition_responses[0]
                assert part.error_code == 0, part
                self.acked.append((p, part.base_offset, first))
        except OSError:
            return  # the broker was killed
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def join(self) -> None:
        self.thread.join(30)
        self.client.close()
        assert not self.thread.is_alive()
        assert self.error is None, self.error


def read_all(port: int, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes]]:
    out: list[tuple[int, bytes | None, bytes]] = []
    with RawClient(port) as client:
        end = client.list_offset(topic, partition, -1).offset
        while len(out) < end:
            part = client.fetch(topic, partition, len(out), max_bytes=4 << 20)
            assert part.error_code == 0
            records = read_records(part.records)
            assert records, f"no progress at offset {len(out)} of {end}"
            out += [r for r in records if r[0] >= len(out)]
    return out


@pytest.fixture
def restarted(fresh_broker: BrokerProcess) -> Iterator[list[BrokerProcess]]:
    """Brokers a test starts again on fresh_broker's data dir; all stopped at the end."""
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()


def restart(old: BrokerProcess, started: list[BrokerProcess], n: int) -> BrokerProcess:
    b = BrokerProcess(old.data_dir, log_name=f"broker-restart-{n}.log",
                      config=old.config).start()
    started.append(b)
    return b


def test_kill_9_during_acks_1_produce_keeps_every_acknowledged_record(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:
    topic = "stream"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    stream = AckedStream(fresh_broker.port, topic).start()
    deadline = time.monotonic() + 30
    while len(stream.acked) < 150 and time.monotonic() < deadline and stream.thread.is_alive():
        time.sleep(0.02)
    fresh_broker.kill()  # SIGKILL with requests in flight
    stream.join()
    assert len(stream.acked) >= 150
    assert not (fresh_broker.data_dir / MARKER).exists()

    b = restart(fresh_broker, restarted, 1)
    assert UNCLEAN in b.log()
    for p in range(PARTITIONS):
        rows = read_all(b.port, topic, p)
        # In order, nothing lost in between, nothing twice: a prefix of what was sent.
        assert [seq_of(v) for _o, _k, v in rows] == list(range(len(rows)))
        assert all(v == value(p, seq_of(v)) and k == b"%d" % p for _o, k, v in rows)
        acked = [(base, first) for q, base, first in stream.acked if q == p]
        assert acked, f"partition {p} got no acknowledgement"
        for base, first in acked:
            assert base == first  # offset n holds seq n: one producer, no retries
            assert len(rows) >= base + PER_BATCH, f"acknowledged batch at {base} lost"
    # The log goes on where it stopped.
    with RawClient(b.port) as client:
        end = client.list_offset(topic, 0, -1).offset
        assert client.produce(topic, 0, record_batch([(b"0", b"after")])).base_offset == end


def test_sigterm_writes_the_marker_and_restart_serves_everything(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:
    topic = "clean"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
        for i in range(60):
            p = i % PARTITIONS
            batch = record_batch([(b"%d" % p, value(p, i // PARTITIONS * 10 + k))
                                  for k in range(10)])
            assert client.produce(topic, p, batch, acks=-1).error_code == 0
    assert not (fresh_broker.data_dir / MARKER).exists()  # only while stopped
    assert fresh_broker.stop(signal.SIGTERM) == 0
    assert (fresh_broker.data_dir / MARKER).exists()

    b = restart(fresh_broker, restarted, 1)
    assert UNCLEAN not in b.log()
    assert not (b.data_dir / MARKER).exists()
    for p in range(PARTITIONS):
        rows = read_all(b.port, topic, p)
        assert [o for o, _k, _v in rows] == list(range(200))
        assert [seq_of(v) for _o, _k, v in rows] == list(range(200))
    # Topics survive too: a second clean restart still knows the topic and its data.
    assert b.stop() == 0
    again = restart(b, restarted, 2)
    with RawClient(again.port) as client:
        assert client.list_offset(topic, 2, -1).offset == 200
        assert client.create_topic(topic, PARTITIONS) == 36  # TOPIC_ALREADY_EXISTS


def test_kill_9_with_a_confluent_producer(fresh_broker: BrokerProcess,
                                          restarted: list[BrokerProcess]) -> None:
    """librdkafka's delivery reports (acks=1) are the acknowledged set."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = "librdkafka"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    delivered: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            delivered[msg.partition()][msg.offset()] = msg.value()  # type: ignore[attr-defined]

    producer = confluent_kafka.Producer({
        "bootstrap.servers": fresh_broker.bootstrap, "acks": 1, "linger.ms": 2,
        "enable.idempotence": False, "message.timeout.ms": 3000, "retries": 0,
        "reconnect.backoff.max.ms": 100})
    sent = 0
    start = time.monotonic()
    while sum(len(d) for d in delivered.values()) < 3000 and time.monotonic() - start < 30:
        for _ in range(200):
            producer.produce(topic, value=value(sent % PARTITIONS, sent), partition=sent % 3,
                             on_delivery=on_delivery)
            sent += 1
        producer.poll(0.01)
    fresh_broker.kill()
    producer.flush(10)
    acked = {p: dict(d) for p, d in delivered.items()}
    assert sum(len(d) for d in acked.values()) >= 3000

    b = restart(fresh_broker, restarted, 1)
    for p in range(PARTITIONS):
        rows = read_all(b.port, topic, p)
        stored = {o: v for o, _k, v in rows}
        for offset, v in acked[p].items():
            assert stored.get(offset) == v, f"acknowledged {p}@{offset} lost or changed"
        seqs = [seq_of(v) for _o, _k, v in rows]
        assert seqs == sorted(set(seqs)), f"partition {p}: out of order or duplicated"



def test_idempotent_retry_after_kill_9_is_still_a_duplicate(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:
    """A producer retrying across a broker crash gets its original offsets, not a copy.

    The producer state is rebuilt from the log at restart, as Kafka does.
    """
    from tests.broker.rawclient import INIT_PRODUCER_ID

    topic = "idem-restart"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, 1) == 0
        init = client.call(INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int) -> bytes:
            return record_batch([(None, b"%d" % (seq + i)) for i in range(5)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq)

        for seq in (0, 5, 10):
            assert client.produce(topic, 0, batch(seq), acks=1).base_offset == seq
    fresh_broker.kill()

    b = restart(fresh_broker, restarted, 1)
    with RawClient(b.port) as client:
        for seq in (5, 10):  # retries of batches acknowledged before the crash
            again = client.produce(topic, 0, batch(seq), acks=1)
            assert (again.error_code, again.base_offset) == (0, seq)
        assert client.produce(topic, 0, batch(15), acks=1).base_offset == 15
        gap = client.produce(topic, 0, batch(30), acks=1)
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert client.list_offset(topic, 0, -1).offset == 20


def test_sigterm_during_a_produce_stream(fresh_broker: BrokerProcess,
                                         restarted: list[BrokerProcess]) -> None:
    """A clean stop under load: exit 0, marker written, every acknowledged record kept."""
    topic = "busy"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    stream = AckedStream(fresh_broker.port, topic).start()
    deadline = time.monotonic() + 30
    while len(stream.acked) < 100 and time.monotonic() < deadline and stream.thread.is_alive():
        time.sleep(0.02)
    assert fresh_broker.stop(signal.SIGTERM) == 0, fresh_broker.log()[-3000:]
    stream.join()
    assert (fresh_broker.data_dir / MARKER).exists()
    log = fresh_broker.log()
    assert "Traceback" not in log and "crashed" not in log, log[-4000:]

    b = restart(fresh_broker, restarted, 1)
    assert UNCLEAN not in b.log()
    for p in range(PARTITIONS):
        rows = read_all(b.port, topic, p)
        assert [seq_of(v) for _o, _k, v in rows] == list(range(len(rows)))
        for q, base, _first in stream.acked:
            if q == p:
                assert len(rows) >= base + PER_BATCH


def test_a_deleted_topic_whose_directory_cannot_go_stays_deleted_across_a_restart(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:
    data = fresh_broker.data_dir
    if not chattr_works(data):
        pytest.skip("chattr +i cannot be set here: the broker's rename cannot be made to fail")
    topic = "gone"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, 1) == 0
        assert client.produce(topic, 0, record_batch([(None, b"old")] * 5)).error_code == 0
    directory = data / f"{topic}-0"
    subprocess.run(["chattr", "+i", str(directory)], check=True)
    try:
        with RawClient(fresh_broker.port) as client:
            deleted = client.call(DELETE_TOPICS, 5, {"topic_names": [topic],
                                                     "timeout_ms": 10_000})
            assert [r.error_code for r in deleted.responses] == [0]
            assert client.create_topic(topic, 1) == 0  # a namesake, in the store; its log waits
        assert fresh_broker.stop(signal.SIGTERM) == 0
        b = restart(fresh_broker, restarted, 1)
        with RawClient(b.port) as client:
            part = client.fetch(topic, 0, 0)
            assert part.error_code != 0 or not read_records(part.records), \
                "the deleted topic's records are served"
        assert "was deleted and its directory still cannot be set aside" in b.log()
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=False)  # keep the failure

    def served() -> bool:
        with RawClient(b.port) as client:
            return bool(client.list_offset(topic, 0, -1).error_code == 0)

    wait_for(served, "the namesake served", timeout=20)
    with RawClient(b.port) as client:
        assert client.list_offset(topic, 0, -1).offset == 0, "the namesake is not empty"
        assert client.produce(topic, 0, record_batch([(None, b"new")])).base_offset == 0
        assert [v for _o, _k, v in read_records(client.fetch(topic, 0, 0).records)] == [b"new"]
    assert b.stop() == 0


def test_recovery_says_what_it_cut_from_a_torn_tail(
        fresh_broker: BrokerProcess, restarted: list[BrokerProcess]) -> None:
    """A crash's torn last batch is cut at the restart, as Kafka cuts it, and said so in the
    log (Kafka warns of the invalid bytes it truncates): the log no longer holds them."""
    topic = "torn"
    with RawClient(fresh_broker.port) as client:
        assert client.create_topic(topic, 1) == 0
        for i in range(5):
            assert client.produce(topic, 0, record_batch([(None, b"%d" % i)]),
                                  acks=-1).error_code == 0
    fresh_broker.kill()
    segment = fresh_broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    with open(segment, "ab") as f:  # a batch header whose length promises more than follows
        f.write((5).to_bytes(8, "big") + (200).to_bytes(4, "big") + b"\xff" * 30)

    b = restart(fresh_broker, restarted, 1)
    assert UNCLEAN in b.log()
    cut = f"{topic}-0: recovery cut 42 byte(s) of torn or damaged batches from its log; " \
          f"it ends at offset 5"
    assert cut in wait_for_log(b, cut), b.log()[-3000:]
    assert segment.stat().st_size == size
    assert [v for _o, _k, v in read_all(b.port, topic, 0)] == [b"%d" % i for i in range(5)]
    # a clean stop and start has nothing to cut, and says nothing; the stops flush the log,
    # so the count is of every line the two runs wrote
    assert b.stop() == 0
    b.start()
    assert [v for _o, _k, v in read_all(b.port, topic, 0)] == [b"%d" % i for i in range(5)]
    assert b.stop() == 0
    assert b.log().count("recovery cut") == 1, b.log()[-3000:]
