"""Tombstones and transaction markers of a compacted topic go once their delete horizon
(Kafka's KIP-534: stamped in the batch by the first cleaning that keeps them, that
cleaning's time + delete.retention.ms) has passed, in `actorlog serve` processes
(num.processes 1 and 2, a partition on each shard), across a restart; confluent-kafka
reads what is left, read_committed included, and a raw Fetch shows the markers.

Passes are counted from the broker's "cleaned <topic>-<p> up to offset" lines; each new
one is asked for by a record that closes another segment (a batch of it fits no
segment holding anything else), so the cleaner has something dirty.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from actors.core.record_batch import check_batches
from actors.topology import Topology
from tests.broker.rawclient import RawClient
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.waiting import wait_for

pytestmark = [pytest.mark.clients]

TOPIC_CONFIGS = {"cleanup.policy": "compact", "delete.retention.ms": "500",
                 "segment.bytes": "1024", "segment.ms": "60000",
                 "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}
BIG = b"f" * 900  # a batch of it fits no segment holding more: it rolls one
PARTITIONS = (0, 1)


def spread_topic(prefix: str) -> str:
    """A topic name whose partitions 0 and 1 live on shards 0 and 1 (with num.processes
    2: one in each process)."""
    topo = Topology("x", 1, 1, 2, 2, 1)
    return next(name for name in (f"{prefix}-{i}" for i in range(1000))
                if {topo.shard_for(name, p).name for p in PARTITIONS} == {"shard-0", "shard-1"})


@pytest.fixture(params=[1, 2], ids=["processes1", "processes2"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", config={
        "num.processes": request.param, "num.partition.shards": 2,
        "log.cleaner.backoff.ms": 100, "log.flush.offset.checkpoint.interval.ms": 100,
        "transaction.state.log.num.partitions": 1}).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.stop()


def cleaned_up_to(broker: BrokerProcess, topic: str, partition: int) -> list[int]:
    """The end offset of every pass over the partition so far, in order."""
    return [int(m) for m in re.findall(rf"cleaned {re.escape(topic)}-{partition} up to "
                                       rf"offset (\d+)", broker.log())]


def create(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, len(PARTITIONS), 1, config=TOPIC_CONFIGS)])[
        topic].result(30)


def produce(broker: BrokerProcess, topic: str, partition: int,
            records: list[tuple[bytes, bytes | None]]) -> list[int]:
    """The offsets the records were written at."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "enable.idempotence": False, "batch.num.messages": 1})
    offsets: list[int] = []
    errors: list[Any] = []

    def done(err: Any, msg: Any) -> None:
        (errors if err else offsets).append(err or msg.offset())

    for key, value in records:
        producer.produce(topic, value, key=key, partition=partition, on_delivery=done)
        producer.flush(30)  # one at a time: offsets in order, one batch each
    assert not errors and len(offsets) == len(records), errors[:3]
    return offsets


def read_all(broker: BrokerProcess, topic: str, partition: int,
             isolation: str = "read_uncommitted") -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record confluent-kafka reads from the beginning."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "isolation.level": isolation})
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    _low, high = consumer.get_watermark_offsets(tp, 10)
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    idle = 0
    while time.monotonic() < deadline and idle < 6:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
            # a control batch at the log's end is never handed out, but the position
            # passes it: read to the high watermark, not 3 s of empty polls more
            if consumer.position([tp])[0].offset >= high:
                break
            continue
        if msg.error():
            continue
        idle = 0
        out.append((msg.offset(), msg.key(), msg.value()))
        if msg.offset() >= high - 1:
            break
    consumer.close()
    return out


def batches(broker: BrokerProcess, topic: str, partition: int) -> list[Any]:
    """Every batch header of the partition, as a raw Fetch (read_uncommitted) returns it."""
    out: list[Any] = []
    offset = 0
    with RawClient(broker.port) as client:
        for _ in range(10_000):
            response = client.fetch(topic, partition, offset)
            headers = check_batches(bytes(response.records or b""))
            if not headers:
                return out
            out += headers
            offset = headers[-1].next_offset
    raise AssertionError("fetch did not reach the log end")


def another_pass(broker: BrokerProcess, topic: str, partition: int) -> None:
    """Close a segment with a filler record and wait for the pass it leads to."""
    before = len(cleaned_up_to(broker, topic, partition))
    produce(broker, topic, partition, [(b"filler", BIG)])
    wait_for(lambda: len(cleaned_up_to(broker, topic, partition)) > before,
             f"a pass over {topic}-{partition}", timeout=60, interval=0.1)


def test_tombstones_go_after_their_horizon_and_a_restart_keeps_it(
        broker: BrokerProcess) -> None:
    topic = spread_topic("tombs")
    create(broker, topic)
    written: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    for p in PARTITIONS:
        records: list[tuple[bytes, bytes | None]] = [(b"k%d" % (i % 10), b"v%d-%d" % (p, i))
                                                     for i in range(60)]
        records += [(b"k%d" % i, None) for i in range(5)]  # k0-k4 deleted
        written[p] = dict(zip(produce(broker, topic, p, records), records, strict=True))
    time.sleep(1)  # the tombstones' segment is older than delete.retention.ms (500 ms)
    for p in PARTITIONS:  # close it; the first pass over the tombstones follows
        written[p].update(zip(produce(broker, topic, p, [(b"filler", BIG)]),
                              [(b"filler", BIG)], strict=True))
    last_tombstone = {p: max(o for o, (_k, v) in written[p].items() if v is None)
                      for p in PARTITIONS}
    for p in PARTITIONS:
        wait_for(lambda p=p: max(cleaned_up_to(broker, topic, p), default=-1)
                 > last_tombstone[p], f"a pass over {topic}-{p}'s tombstones", timeout=60,
                 interval=0.1)
        # that pass kept them (delete.retention.ms from that pass on) and stamped them
        got = read_all(broker, topic, p)
        assert {k for _o, k, v in got if v is None} == {b"k%d" % i for i in range(5)}
        assert all(log_batch.attributes & 0x40 for log_batch in batches(broker, topic, p)
                   if log_batch.base_offset in {o for o, _k, v in got if v is None})
    broker.stop()
    broker.start()
    for p in PARTITIONS:
        for _ in range(10):  # bounded: one pass past the horizon is enough
            if not [1 for _o, _k, v in read_all(broker, topic, p) if v is None]:
                break
            another_pass(broker, topic, p)
        got = read_all(broker, topic, p)
        assert [o for o, _k, v in got if v is None] == []  # the tombstones are gone
        for offset, key, value in got:  # nothing moved, nothing else written
            assert key == b"filler" or written[p][offset] == (key, value)
        latest = {k: v for _o, (k, v) in sorted(written[p].items()) if k != b"filler"}
        assert {k: v for _o, k, v in got if k != b"filler"} == {
            k: v for k, v in latest.items() if v is not None}  # live keys' latest remain


def test_transaction_markers_go_after_their_horizon_and_read_committed_stays_right(
        broker: BrokerProcess) -> None:
    """Per partition: a committed transaction (t0-t4 = c1), an aborted one (= aborted), a
    committed one superseding the first (= c2), one more (last = c3: its producer's last
    batch). The first pass drops the superseded and aborted records; the next stamps the
    markers whose transactions are empty; one past the horizon drops them (the ABORT's
    .txnindex entry with it). The markers of the transactions whose records remain stay.
    read_committed reads exactly the committed records throughout, and after a restart."""
    topic = spread_topic("txns")
    create(broker, topic)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                    "transactional.id": f"{topic}-producer"})
    txn.init_transactions(30)
    keys = [b"t%d" % i for i in range(5)]
    for value, commit in ((b"c1", True), (b"aborted", False), (b"c2", True)):
        txn.begin_transaction()
        for p in PARTITIONS:
            for key in keys:
                txn.produce(topic, value, key=key, partition=p)
        assert txn.flush(30) == 0
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    txn.begin_transaction()
    for p in PARTITIONS:
        txn.produce(topic, b"c3", key=b"last", partition=p)
    txn.commit_transaction(30)
    expected = {**{k: b"c2" for k in keys}, b"last": b"c3"}

    def markers(p: int) -> list[int]:
        return [h.base_offset for h in batches(broker, topic, p) if h.is_control]

    def committed(p: int) -> dict[bytes | None, bytes | None]:
        return {k: v for _o, k, v in read_all(broker, topic, p, "read_committed")
                if k != b"filler"}

    for p in PARTITIONS:
        # the last commit's markers are written after EndTxn answers (as Kafka's)
        wait_for(lambda p=p: len(markers(p)) == 4, f"c3's commit marker on {topic}-{p}")
        assert committed(p) == expected
        another_pass(broker, topic, p)
        wait_for(lambda p=p: max(cleaned_up_to(broker, topic, p), default=-1)
                 > markers(p)[-1], f"a pass over {topic}-{p}'s markers", timeout=60,
                 interval=0.1)
        assert committed(p) == expected
    broker.stop()
    broker.start()
    for p in PARTITIONS:
        for _ in range(10):  # bounded: a pass to stamp, one past the horizon to drop
            if len(markers(p)) == 2:
                break
            assert committed(p) == expected
            time.sleep(0.6)  # past delete.retention.ms (500 ms) of the last stamp
            another_pass(broker, topic, p)
        assert len(markers(p)) == 2  # c2's (its records stay) and c3's
        assert committed(p) == expected
        with RawClient(broker.port) as client:  # no aborted transaction left to tell of
            response = client.call(1, 11, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 1, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            assert not response.responses[0].partitions[0].aborted_transactions
    broker.stop()
    broker.start()
    for p in PARTITIONS:
        assert committed(p) == expected and len(markers(p)) == 2
