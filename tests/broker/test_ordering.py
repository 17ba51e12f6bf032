"""Pipelined produce requests on one connection are answered in request order.

Partitions of one topic live on different PartitionShard actors, which
answer independently; the Processor must still write the responses of a
connection in the order the requests came, and each partition's offsets
must grow in request order.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from actors.topology import Topology
from tests.broker.rawclient import (
    PRODUCE,
    RawClient,
    build,
    produce_values,
    record_batch,
    wait_for_log,
)
from tests.fixtures.broker import BrokerProcess

pytestmark = pytest.mark.num_processes(1, 2)

SHARDS = 2  # num.partition.shards default
PARTITIONS = 8  # crc32 is affine: with 2 shards, partitions 0-3 share a shard, 4-7 the other


def spread_topic(partitions: int = PARTITIONS) -> str:
    """A topic name whose partitions land on every shard."""
    for _ in range(1000):
        name = f"order-{uuid.uuid4().hex[:8]}"
        topology = Topology("node-1", 2, 2, SHARDS, 1, 1)
        shards = {topology.shard_for(name, p) for p in range(partitions)}
        if len(shards) == SHARDS:
            return name
    raise AssertionError(f"no topic name spreads {partitions} partitions over {SHARDS} shards")


def pipeline(port: int, topic: str, partitions: int, requests: int) -> None:
    """Send every request before reading any answer; check order and offsets."""
    with RawClient(port) as client:
        assert client.create_topic(topic, partitions) == 0
        sent: list[tuple[int, int, int]] = []  # correlation id, partition, records
        expected_next = dict.fromkeys(range(partitions), 0)
        for i in range(requests):
            # Uneven work: a big batch on one shard, a small one on the other.
            partition = i % partitions
            count = 200 if partition == 0 else 1
            batch = record_batch([(b"k%d" % i, b"v" * 50)] * count)
            cid = client.send(PRODUCE, 9, produce_values(topic, partition, batch, acks=1))
            sent.append((cid, partition, count))
        for cid, partition, count in sent:
            got_cid, response = client.recv()
            assert got_cid == cid, f"response {got_cid} came where {cid} was due"
            part = response.responses[0].partition_responses[0]
            assert (part.index, part.error_code) == (partition, 0)
            assert part.base_offset == expected_next[partition]
            expected_next[partition] += count


def test_pipelined_produces_answered_in_request_order(broker: BrokerProcess) -> None:
    pipeline(broker.port, spread_topic(), PARTITIONS, 300)


def test_multi_partition_requests_keep_order(broker: BrokerProcess) -> None:
    """One request may touch partitions on both shards; its answer waits for both."""
    topic = spread_topic()
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
        cids = []
        for i in range(100):
            values = {"transactional_id": None, "acks": -1, "timeout_ms": 10_000,
                      "topic_data": [{"name": topic, "partition_data": [
                          {"index": p, "records": record_batch([(None, b"%d" % i)] * (p + 1))}
                          for p in range(PARTITIONS)]}]}
            cids.append(client.send(PRODUCE, 9, values))
        for i, cid in enumerate(cids):
            got_cid, response = client.recv()
            assert got_cid == cid
            parts = {p.index: p for p in response.responses[0].partition_responses}
            assert sorted(parts) == list(range(PARTITIONS))
            for p, part in parts.items():
                assert part.error_code == 0
                assert part.base_offset == i * (p + 1)


@pytest.fixture(scope="module")
def small_inflight_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """max.inflight.requests.per.connection = 5: the Processor pauses reading. One for the
    module: its tests write topics of their own and leave it serving."""
    b = BrokerProcess(tmp_path_factory.mktemp("inflight") / "data",
                      config={"max.inflight.requests.per.connection": 5}).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.log()[-3000:]


def test_pipeline_beyond_the_in_flight_bound(small_inflight_broker: BrokerProcess) -> None:
    """200 requests against a bound of 5: reads pause and resume, order holds."""
    pipeline(small_inflight_broker.port, spread_topic(), PARTITIONS, 200)


def test_bad_frame_behind_the_in_flight_bound(small_inflight_broker: BrokerProcess) -> None:
    """A bad size prefix read while the connection was paused still closes it, once."""
    b = small_inflight_broker
    topic = spread_topic()
    with RawClient(b.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    with RawClient(b.port) as client:
        batch = record_batch([(None, b"x" * 10)])
        # One write: the Processor reads all of it at once, takes five requests
        # (the bound) and keeps the rest, the bad size prefix included, for later.
        for _ in range(8):
            client.protocol.send_request(build(PRODUCE, 9, produce_values(topic, 0, batch, 1)))
        client.send_raw(bytes(client.protocol.send_bytes()) + b"\xff\xff\xff\xf0" + b"\0" * 16)
        answered = []
        try:
            while True:
                answered.append(client.recv()[0])
        except (ConnectionError, OSError):
            pass
        # Kafka closes at the bad frame; answers already written arrive in order.
        assert answered == list(range(1, len(answered) + 1))
        assert len(answered) <= 8
    with RawClient(b.port) as other:  # the broker still serves
        assert other.produce(topic, 1, record_batch([(None, b"y")]), acks=1).error_code == 0
    assert b.proc is not None and b.proc.poll() is None
    log = wait_for_log(b, "request size -16")
    assert log.count("request size -16") == 1, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_confluent_producer_max_in_flight_5_keeps_partition_order(broker: BrokerProcess) -> None:
    """librdkafka pipelining (5 in flight, tiny batches): offsets follow produce order."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = spread_topic()
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0,
        "batch.num.messages": 3, "max.in.flight.requests.per.connection": 5,
        "enable.idempotence": False})
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        acked[msg.partition()].append((int(msg.value()), msg.offset()))  # type: ignore[attr-defined]

    for i in range(2000):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS,
                         on_delivery=on_delivery)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    for p, rows in acked.items():
        rows.sort()
        assert [off for _i, off in rows] == list(range(2000 // PARTITIONS)), f"partition {p}"


def test_slow_reader_gets_every_response(broker: BrokerProcess) -> None:
    """A client that reads late (socket buffers full) still gets all answers in order."""
    topic = spread_topic()
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        cids = [client.send(PRODUCE, 9, produce_values(
            topic, i % PARTITIONS, record_batch([(None, b"z" * 20)]), acks=1)) for i in range(400)]
        time.sleep(0.5)
        assert [client.recv()[0] for _ in cids] == cids


def test_fast_answers_wait_behind_a_slow_one(broker: BrokerProcess) -> None:
    """A waiting fetch, then a produce and a metadata request: answered in that order."""
    from tests.broker.rawclient import FETCH, METADATA, fetch_values

    topic = spread_topic()
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
        t0 = time.monotonic()
        slow = client.send(FETCH, 11, fetch_values(topic, 5, 0, max_wait_ms=600, min_bytes=1 << 20))
        fast = [
            client.send(PRODUCE, 9, produce_values(topic, 1, record_batch([(None, b"a")]), 1)),
            client.send(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False}),
        ]
        got = [client.recv()[0] for _ in range(3)]
        elapsed = time.monotonic() - t0
    assert got == [slow, *fast]
    assert elapsed >= 0.55


def test_many_connections_at_once(broker: BrokerProcess) -> None:
    """12 pipelining connections on every partition: each sees its own answers in order,
    and every partition's offsets are handed out once each, densely."""
    import threading

    topic = spread_topic()
    with RawClient(broker.port) as client:
        assert client.create_topic(topic, PARTITIONS) == 0
    got: dict[int, list[tuple[int, int]]] = {}  # connection -> [(partition, base offset)]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            with RawClient(broker.port) as c:
                sent = []
                for i in range(40):
                    p = (n + i) % PARTITIONS
                    batch = record_batch([(None, b"%d-%d" % (n, i))] * 3)
                    sent.append((c.send(PRODUCE, 9, produce_values(topic, p, batch, 1)), p))
                rows = []
                for cid, p in sent:
                    got_cid, response = c.recv()
                    assert got_cid == cid
                    part = response.responses[0].partition_responses[0]
                    assert (part.index, part.error_code) == (p, 0)
                    rows.append((p, part.base_offset))
                got[n] = rows
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    by_partition: dict[int, list[int]] = {}
    for n, rows in got.items():
        last: dict[int, int] = {}
        for p, base in rows:
            assert base > last.get(p, -1), f"connection {n}: offsets went back on {p}"
            last[p] = base
            by_partition.setdefault(p, []).append(base)
    for p, bases in by_partition.items():
        assert sorted(bases) == list(range(0, 3 * len(bases), 3)), f"partition {p}"
