"""The LogCleaner in a running broker: compacted topics and __consumer_offsets cleaned
while real clients produce, consume and commit; the log.cleaner.* keys and the topic
overrides they default.

The broker (in this process, so its actors can be asked for their stats) cleans
often: a short backoff, offset checkpoints every second (the cleaner cleans up to
the checkpointed recovery point), small segments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from actors.runtime.address import Address
from tests.broker.rawclient import wait_complete
from tests.broker.test_config_keys import Running
from tests.fixtures.log_files import log_bytes
from wire.broker_messages import GetStats

pytestmark = [pytest.mark.clients]

CLEANING: dict[str, Any] = {
    "log.cleaner.backoff.ms": 100,
    "log.cleaner.min.cleanable.ratio": 0.01,
    "log.cleaner.delete.retention.ms": 1,
    "log.cleaner.min.compaction.lag.ms": 3_600_000,  # topics that should be cleaned say 0
    "log.cleaner.dedupe.buffer.size": 24 * 64,  # 64 keys a pass
    "log.cleaner.io.buffer.size": 1024,
    "log.flush.offset.checkpoint.interval.ms": 100,
    "log.retention.check.interval.ms": 100,
    "offsets.topic.num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
}
# Topic overrides that leave only the key under test to its broker default.
EAGER = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.compaction.lag.ms": "0",
         "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3600000"}


@pytest.fixture(scope="module")
def cleaning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(tmp_path_factory.mktemp("cleaning") / "data", CLEANING)
    yield running
    running.broker.stop()


@pytest.fixture(scope="module")
def admin(cleaning: Running) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{cleaning.port}")
    yield client
    client.close()


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def cleaner_stats(running: Running) -> dict[str, Any]:
    stats: dict[str, Any] = running.node.ask(Address(running.node.name, "log-cleaner"),
                                             GetStats())
    return stats


def cleaned_up_to(running: Running, topic: str) -> int:
    return int(cleaner_stats(running)["checkpoints"].get(f"{topic}-0", -1))


def produce(running: Running, topic: str, records: list[tuple[bytes, bytes | None]],
            idempotent: bool = False) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{running.port}", "linger.ms": 0,
                         "batch.num.messages": 1, "enable.idempotence": idempotent})
    errors: list[Any] = []
    for key, value in records:
        producer.produce(topic, value, key=key, partition=0,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:3]


def read_all(running: Running, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{running.port}",
                             consumer_timeout_ms=3000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    out = [(r.offset, r.key, r.value) for r in consumer]
    consumer.close()
    return out


def latest_per_key(records: list[tuple[bytes, bytes | None]]) -> dict[bytes, tuple[int, Any]]:
    return {key: (offset, value) for offset, (key, value) in enumerate(records)}


def test_a_compacted_topic_keeps_each_keys_latest_record(cleaning: Running,
                                                         admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("compacted", 1, 1, topic_configs=EAGER)])
    records = [(b"key-%d" % (i % 10), b"value-%d" % i) for i in range(400)]
    produce(cleaning, "compacted", records, idempotent=True)
    wait_until(lambda: cleaned_up_to(cleaning, "compacted") > 300, "a cleaning of most of it")
    end = cleaned_up_to(cleaning, "compacted")  # first: a later pass only cleans more
    got = read_all(cleaning, "compacted")
    latest = latest_per_key(records)
    latest_below_end = latest_per_key(records[:end])
    assert [o for o, _k, _v in got] == sorted({o for o, _k, _v in got})  # offsets rise
    for offset, key, value in got:
        assert records[offset] == (key, value)  # each record is the one written there
        if offset < end:  # cleaned: only each key's latest below the end stays
            assert latest_below_end[key][0] == offset, (offset, key)
    assert {(k, v) for _o, k, v in got} >= {(k, v) for k, (_o, v) in latest.items()}
    assert len(got) < 400
    # confluent-kafka reads the same compacted log
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{cleaning.port}",
                         "group.id": "compacted-reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["compacted"])
    seen: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    while (not seen or seen[-1][0] < got[-1][0]) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    # the cleaner may have gone further meanwhile: it only ever takes records away
    assert set(seen) <= set(got) and seen == sorted(seen)
    assert {(k, v) for _o, k, v in seen} >= {(k, v) for k, (_o, v) in latest.items()}
    stats = cleaner_stats(cleaning)
    assert stats["steps"] * 2 * 1024 >= stats["bytes_read"] > 0  # log.cleaner.io.buffer.size
    assert cleaning.node.actors["log-cleaner"].backoff_ms == 100  # log.cleaner.backoff.ms


def test_tombstones_go_after_the_brokers_delete_retention(cleaning: Running,
                                                          admin: KafkaAdminClient) -> None:
    gone = {k: v for k, v in EAGER.items() if k != "delete.retention.ms"}  # broker's: 1 ms
    admin.create_topics([NewTopic("tombs", 1, 1, topic_configs=gone),
                         NewTopic("tombs-kept", 1, 1, topic_configs=EAGER)])
    records: list[tuple[bytes, bytes | None]] = [(b"k%d" % (i % 5), b"v" * 50)
                                                 for i in range(60)]
    records += [(b"k%d" % i, None) for i in range(5)]  # every key deleted
    records += [(b"other", b"v" * 50) for _ in range(30)]  # so the tombstones are cleanable
    for topic in ("tombs", "tombs-kept"):
        produce(cleaning, topic, records)
    wait_until(lambda: min(cleaned_up_to(cleaning, t) for t in ("tombs", "tombs-kept")) >= 65,
               "both cleaned past the tombstones")
    time.sleep(0.2)  # older than 1 ms by now: the next pass may drop them
    produce(cleaning, "tombs", [(b"other", b"v" * 50)] * 30)
    before = cleaned_up_to(cleaning, "tombs")
    wait_until(lambda: cleaned_up_to(cleaning, "tombs") > before, "another pass")
    kept_keys = {k for _o, k, v in read_all(cleaning, "tombs-kept") if v is None}
    assert kept_keys == {b"k%d" % i for i in range(5)}  # delete.retention.ms 1 h: kept
    assert not [o for o, _k, v in read_all(cleaning, "tombs") if v is None]


def test_the_brokers_compaction_lag_and_dirty_ratio_are_the_topics_defaults(
        cleaning: Running, admin: KafkaAdminClient) -> None:
    """Logs written first (cleanup.policy delete), then made compacted: the first pass
    takes them whole; then a little dirt is enough under the broker's ratio (0.01), not
    under 0.9. A topic left to the broker's lag (1 h) is never cleaned."""
    lagged = {k: v for k, v in EAGER.items() if k != "min.compaction.lag.ms"}  # broker: 1 h
    admin.create_topics([NewTopic("lagged", 1, 1, topic_configs=lagged)])
    produce(cleaning, "lagged", [(b"same", b"v" * 100)] * 80)
    topics = {"picky": {**EAGER, "min.cleanable.dirty.ratio": "0.9"},
              "ratio-default": {k: v for k, v in EAGER.items()
                                if k != "min.cleanable.dirty.ratio"}}
    admin.create_topics([NewTopic(t, 1, 1, topic_configs={**c, "cleanup.policy": "delete"})
                         for t, c in topics.items()])
    distinct = [(b"k%03d" % i, b"v" * 100) for i in range(80)]  # all survive: a big clean part
    for topic, configs in topics.items():
        produce(cleaning, topic, distinct)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)])
    wait_until(lambda: min(cleaned_up_to(cleaning, t) for t in topics) > 0,
               "the first cleanings")
    marks = {t: cleaned_up_to(cleaning, t) for t in topics}
    for topic in topics:  # a little dirt: the old active segment and these
        produce(cleaning, topic, [(b"fresh-%d" % i, b"x" * 100) for i in range(12)])
    wait_until(lambda: cleaned_up_to(cleaning, "ratio-default") > marks["ratio-default"],
               "ratio-default cleaned again")
    assert cleaned_up_to(cleaning, "picky") == marks["picky"]
    assert cleaned_up_to(cleaning, "lagged") == -1  # younger than 1 h: never cleaned
    assert len(read_all(cleaning, "lagged")) == 80


def test_a_small_key_map_cleans_in_several_passes(cleaning: Running,
                                                  admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("wide", 1, 1, topic_configs=EAGER)])
    records = [(b"key-%03d" % (i % 150), b"v%d" % i) for i in range(600)]  # 150 keys
    passes = cleaner_stats(cleaning)["passes"]
    produce(cleaning, "wide", records)
    wait_until(lambda: cleaned_up_to(cleaning, "wide") >= 500, "the passes to get through")
    assert cleaner_stats(cleaning)["passes"] - passes >= 3  # 64 keys a pass
    got = read_all(cleaning, "wide")
    latest = latest_per_key(records)
    assert {(k, v) for _o, k, v in got} >= {(k, v) for k, (_o, v) in latest.items()}


def test_consumer_offsets_is_compacted_and_a_restart_keeps_the_latest_commits(
        tmp_path: Path) -> None:
    running = Running(tmp_path / "data", {**CLEANING, "log.cleaner.min.compaction.lag.ms": 0,
                                          "log.cleaner.delete.retention.ms": 86_400_000})
    try:
        bootstrap = f"127.0.0.1:{running.port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)

        def policy() -> Any:
            try:
                described = admin.describe_configs(
                    [ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets")])
            except Exception:  # not created yet
                return None
            return described["topic"]["__consumer_offsets"].get("cleanup.policy")

        wait_until(lambda: policy() is not None, "the coordinator to create __consumer_offsets")
        assert policy()["value"] == "compact"
        # a smaller segment for the test, so that commits fill and roll several
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets",
                                             {"segment.bytes": "4096"})])
        admin.create_topics([NewTopic("work", 1, 1)])
        produce(running, "work", [(None, b"x")] * 5)  # type: ignore[list-item]
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="committer",
                                 enable_auto_commit=False)
        tp = TopicPartition("work", 0)
        consumer.assign([tp])
        from kafka.structs import OffsetAndMetadata

        for i in range(300):
            consumer.commit({tp: OffsetAndMetadata(i % 6, "", -1)})
        consumer.close()
        offsets_dir = running.data_dir / "__consumer_offsets-0"
        # 300 commit records of over 100 bytes each were written (the cleaner may start
        # while they are): the cleaned log keeps one per key plus the active segment.
        # The shard swaps the files first and then tells the cleaner, which records the
        # pass in its checkpoint: both are seen, in that order, a moment apart.
        wait_until(lambda: log_bytes(offsets_dir) < 300 * 100 / 3
                   and cleaned_up_to(running, "__consumer_offsets") > 0,
                   "__consumer_offsets cleaned and the pass checkpointed")
        assert admin.list_group_offsets("committer")["committer"][tp].offset == 299 % 6
        admin.close()
    finally:
        running.broker.stop()
    running = Running(tmp_path / "data", CLEANING)  # the coordinator reads the compacted log
    try:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{running.port}")

        def loaded() -> Any:
            try:
                return admin.list_group_offsets("committer")["committer"]
            except Exception:
                return None

        wait_until(lambda: loaded() is not None, "the coordinator to load")
        assert loaded()[TopicPartition("work", 0)].offset == 299 % 6
        admin.close()
    finally:
        running.broker.stop()


def test_altering_cleanup_policy_to_compact_cleans_a_live_topic(
        cleaning: Running, admin: KafkaAdminClient) -> None:
    plain = {"segment.bytes": "1024", "min.compaction.lag.ms": "0",
             "min.cleanable.dirty.ratio": "0.01"}
    admin.create_topics([NewTopic("turned", 1, 1, topic_configs=plain)])
    produce(cleaning, "turned", [(b"k", b"v" * 100)] * 60)
    time.sleep(0.5)
    assert cleaned_up_to(cleaning, "turned") == -1  # delete: not the cleaner's
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "turned",
                                        {**plain, "cleanup.policy": "compact"})])
    wait_until(lambda: cleaned_up_to(cleaning, "turned") > 0, "the cleaner to take it")
    assert len(read_all(cleaning, "turned")) < 60


def test_an_actorlog_serve_process_compacts_and_a_kill_keeps_the_compacted_log(
        tmp_path: Path) -> None:
    """`actorlog serve` as a user runs it: kafka-python writes keyed records and
    tombstones, reads back each key's latest value once the broker's log says it
    cleaned, and reads the same after a SIGKILL and a restart."""
    from kafka import KafkaProducer

    from tests.broker.conftest import BrokerProcess

    broker = BrokerProcess(tmp_path / "data", config={
        "log.cleaner.backoff.ms": 100, "log.cleaner.delete.retention.ms": 1,
        "log.flush.offset.checkpoint.interval.ms": 100}).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([NewTopic("users", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01"})])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=512)
        written: list[tuple[bytes, bytes | None]] = []
        for i in range(400):
            written.append((b"user-%d" % (i % 8), b"profile-%d" % i))
        written += [(b"user-%d" % i, None) for i in range(3)]  # users 0-2 deleted
        written += [(b"filler", b"f" * 40) for _ in range(60)]  # the tombstones' segment closes
        for key, value in written:
            producer.send("users", key=key, value=value, partition=0)
        producer.flush(30)
        producer.close()
        expected = {k: v for k, v in written if v is not None}
        for k in (b"user-0", b"user-1", b"user-2"):
            del expected[k]

        def read_back() -> list[tuple[int, bytes | None, bytes | None]]:
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap,
                                     consumer_timeout_ms=3000)
            tp = TopicPartition("users", 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            end = consumer.end_offsets([tp])[tp]
            got = []
            for r in consumer:  # to the log's end (a filler), not 3 s of nothing more
                got.append((r.offset, r.key, r.value))
                if r.offset >= end - 1:
                    break
            consumer.close()
            return got

        def check(got: list[tuple[int, bytes | None, bytes | None]]) -> None:
            assert [o for o, _k, _v in got] == sorted({o for o, _k, _v in got})
            for offset, key, value in got:
                assert written[offset] == (key, value)  # never moved, never reused
            latest = {k: v for _o, k, v in got}
            assert {k: v for k, v in latest.items() if v is not None} == expected

        wait_until(lambda: "cleaned users-0" in broker.log(), "the broker's cleaner")
        # the pass that first keeps a tombstone stamps its delete horizon (that pass's time
        # + delete.retention.ms, 1 ms here); a later pass drops it: more filler closes
        # another segment for one (bounded: a pass or two is enough)
        for _ in range(20):
            if not [1 for _o, _k, v in read_back() if v is None]:
                break
            more = [(b"filler", b"f" * 40) for _ in range(60)]
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0,
                                     batch_size=512)
            for key, value in more:
                producer.send("users", key=key, value=value, partition=0)
            producer.flush(30)
            producer.close()
            written += more
        assert not [1 for _o, _k, v in read_back() if v is None], "the tombstones stay"
        before = read_back()
        check(before)
        assert len(before) < 100  # most of the 463 records were superseded
        broker.kill()
        broker.start()
        after = read_back()
        check(after)
        assert {o for o, _k, _v in after} <= {o for o, _k, _v in before}
    finally:
        broker.stop()


def read_committed(running: Running, topic: str) -> dict[bytes | None, bytes | None]:
    """Each key's last value as a read_committed confluent-kafka consumer reads the log."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{running.port}",
                         "group.id": f"{topic}-committed-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got: dict[bytes | None, bytes | None] = {}
    idle = 0
    while idle < 4:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
        elif not msg.error():
            idle = 0
            got[msg.key()] = msg.value()
    consumer.close()
    return got


def test_aborted_and_open_transactions_never_shadow_committed_records(
        cleaning: Running, admin: KafkaAdminClient) -> None:
    """As Kafka's cleaner: an aborted transaction's records are no key's latest (they
    would have the committed values before them cleaned away: committed data lost), and
    nothing from the first open transaction's start (the LSO) on is cleaned (its outcome
    is not known yet)."""
    admin.create_topics([NewTopic("txn-compacted", 1, 1, topic_configs=EAGER)])
    keys = [b"k%d" % i for i in range(10)]
    txn = Producer({"bootstrap.servers": f"127.0.0.1:{cleaning.port}", "linger.ms": 0,
                    "batch.num.messages": 1, "transactional.id": "txn-compacted"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for key in keys:
        txn.produce("txn-compacted", b"committed", key=key, partition=0)
    txn.commit_transaction(30)
    txn.begin_transaction()
    for key in keys:
        txn.produce("txn-compacted", b"aborted", key=key, partition=0)
    assert txn.flush(30) == 0  # written, then aborted
    txn.abort_transaction(30)
    produce(cleaning, "txn-compacted", [(b"filler-%d" % i, b"f" * 60) for i in range(80)])
    txn.begin_transaction()
    for key in keys[:3]:
        txn.produce("txn-compacted", b"open", key=key, partition=0)
    assert txn.flush(30) == 0  # written, its outcome not known while the cleaner runs
    # others' records after it, so the open transaction's lie in closed segments
    produce(cleaning, "txn-compacted", [(b"filler-%d" % i, b"g" * 60) for i in range(80)])
    wait_until(lambda: cleaned_up_to(cleaning, "txn-compacted") > 21,
               "a cleaning past the aborted transaction")
    time.sleep(2)  # the cleaner's chances to go further
    assert {k: v for k, v in read_committed(cleaning, "txn-compacted").items()
            if k in keys} == {key: b"committed" for key in keys}
    txn.abort_transaction(30)
    produce(cleaning, "txn-compacted", [(b"filler-%d" % i, b"h" * 60) for i in range(80)])
    wait_until(lambda: cleaned_up_to(cleaning, "txn-compacted") > 186,
               "a cleaning past the second abort")
    assert {k: v for k, v in read_committed(cleaning, "txn-compacted").items()
            if k in keys} == {key: b"committed" for key in keys}


def test_an_aborted_transactional_offset_commit_never_shadows_the_committed_offset(
        tmp_path: Path) -> None:
    """send_offsets_to_transaction, then abort: the group's offset stays the one it
    committed, after __consumer_offsets is cleaned and the coordinator reloads it."""
    settings = {**CLEANING, "log.cleaner.min.compaction.lag.ms": 0,
                "transaction.state.log.num.partitions": 1}
    running = Running(tmp_path / "data", settings)
    tp = TopicPartition("work", 0)
    try:
        bootstrap = f"127.0.0.1:{running.port}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("work", 1, 1)])
        produce(running, "work", [(b"k", b"x")] * 5)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos",
                             "enable.auto.commit": False})
        from confluent_kafka import TopicPartition as CTP

        consumer.commit(offsets=[CTP("work", 0, 3)], asynchronous=False)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets",
                                             {"segment.bytes": "4096"})])
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-txn"})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("work", b"y", key=b"k", partition=0)
        txn.send_offsets_to_transaction([CTP("work", 0, 5)],
                                        consumer.consumer_group_metadata(), 30)
        txn.abort_transaction(30)
        # the abort's marker (written after EndTxn answers) settles the pending offset
        # before the filler: the cleaning below then passes an aborted commit
        wait_complete(running.port, "eos-txn", "CompleteAbort")
        consumer.close()
        filler = KafkaConsumer(bootstrap_servers=bootstrap, group_id="filler",
                               enable_auto_commit=False)
        filler.assign([tp])
        from kafka.structs import OffsetAndMetadata

        for i in range(300):  # rolls segments past the aborted commit: cleanable
            filler.commit({tp: OffsetAndMetadata(i % 6, "", -1)})
        filler.close()
        wait_until(lambda: cleaned_up_to(running, "__consumer_offsets") > 0,
                   "__consumer_offsets cleaned")
        assert admin.list_group_offsets("eos")["eos"][tp].offset == 3
        admin.close()
    finally:
        running.broker.stop()
    running = Running(tmp_path / "data", settings)  # the coordinator reads the cleaned log
    try:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{running.port}")

        def loaded() -> Any:
            try:
                return admin.list_group_offsets("eos")["eos"]
            except Exception:
                return None

        wait_until(lambda: loaded() is not None, "the coordinator to load")
        assert tp in loaded() and loaded()[tp].offset == 3, loaded()
        admin.close()
    finally:
        running.broker.stop()


def test_a_corrupt_cleaner_checkpoint_is_read_as_empty_and_the_broker_compacts(
        tmp_path: Path) -> None:
    """Kafka's cleaner logs an unreadable checkpoint and starts with none; the
    CheckpointError stopped the cleaner's start, and with it the broker's."""
    from actors.core.checkpoint import CheckpointError, read_offset_checkpoint
    from actors.core.log_cleaner import CLEANER_CHECKPOINT

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / CLEANER_CHECKPOINT).write_bytes(b"0\nthree\nnot a checkpoint\n")
    running = Running(data_dir, CLEANING)
    try:
        client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{running.port}")
        try:
            client.create_topics([NewTopic("after-garbage", 1, 1, topic_configs=EAGER)])
        finally:
            client.close()
        records = [(b"key-%d" % (i % 5), b"value-%d" % i) for i in range(200)]
        produce(running, "after-garbage", records)
        wait_until(lambda: cleaned_up_to(running, "after-garbage") > 100, "a cleaning")
        assert len(read_all(running, "after-garbage")) < 200

        def checkpointed() -> int:
            try:
                found = read_offset_checkpoint(data_dir / CLEANER_CHECKPOINT)
            except CheckpointError:  # the garbage, until the first pass's write
                return -1
            return found.get(("after-garbage", 0), -1)

        wait_until(lambda: checkpointed() > 100, "the checkpoint written anew")
    finally:
        running.broker.stop()
