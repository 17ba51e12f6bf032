"""num.processes.connection.distribution = handoff: process 0 accepts every connection
and passes each socket (SCM_RIGHTS over a Unix socket) to the live process with the
fewest open connections, ties in turn.

Real processes, real clients and sockets: which process holds a connection is read
from /proc (the process with the socket's inode among its descriptors).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.certs import make_pki
from bench.scale import LISTEN, tcp_inodes
from tests.broker.rawclient import RawClient, read_records, record_batch, wait_for_log
from tests.broker.test_metrics import scrape
from tests.broker.test_processes import (
    connections_of,
    consume_all,
    established_inodes,
    produce_all,
    record_diff,
    serving,
    topic_over_both_processes,
    worker_pids,
)
from tests.fixtures.broker import BrokerProcess, free_port
from tests.fixtures.process_lock import hold_restart as hold_process_1
from tests.fixtures.waiting import wait_for

HANDOFF = {"num.processes": 2, "num.processes.connection.distribution": "handoff"}


def start_two(data_dir: Path, config: dict[str, object]) -> BrokerProcess:
    # start() returns once process 0 has read process 1's hello on its link (it hands it
    # connections from then on): the first eight connections below split 4/4
    broker = BrokerProcess(data_dir, config=config).start()
    assert "process 1 takes connections of listener PLAINTEXT" in broker.log()
    return broker


@pytest.fixture
def handoff_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = start_two(tmp_path / "data", dict(HANDOFF, **{"metrics.port": free_port()}))
    yield broker
    if broker.proc is not None and broker.proc.poll() is None:
        assert broker.stop() == 0


def split(broker: BrokerProcess, port: int | None = None) -> tuple[int, int]:
    """(connections process 0 holds, connections process 1 holds) on the listener's port."""
    assert broker.proc is not None
    [worker] = worker_pids(broker)
    inodes = established_inodes(port or broker.port)
    return connections_of(broker.proc.pid, inodes), connections_of(worker, inodes)


def test_eight_connections_split_four_four_and_serve_across_processes(
        handoff_broker: BrokerProcess) -> None:
    broker = handoff_broker
    topic, count = "balanced", 4
    _worker, _mine, _theirs = topic_over_both_processes(broker, topic, count)
    clients = [RawClient(broker.port, client_id=f"c{i}") for i in range(8)]
    try:
        for i, client in enumerate(clients):  # (a RawClient connects at its first request)
            answer = client.produce(topic, i % count, record_batch([(None, b"v%d" % i)]),
                                    acks=-1)
            assert answer.error_code == 0, answer
        assert split(broker) == (4, 4)
        # process 0's metrics say so too (each process's count of live connections)
        m = scrape(int(broker.config["metrics.port"]))
        assert [v for k, v in sorted(m.items())
                if k.startswith("actorlog_process_connections{")] == [4, 4]
        assert m[f'actorlog_connections{{listener="{broker.bootstrap}"}}'] == 8
        # every connection reads what every other wrote, whichever process holds it
        for client in clients:
            values = sorted(v for p in range(count)
                            for _o, _k, v in read_records(client.fetch(topic, p, 0).records))
            assert values == sorted(b"v%d" % i for i in range(8))
        # process 1 reports its closes: with its 4 closed, the next 4 all go to it
        theirs = [c for c in clients if split_of(broker, c) == 1]
        assert len(theirs) == 4
        for client in theirs:
            client.close()
        wait_for(lambda: split(broker) == (4, 0), "process 1's connections to close")
        # and its reports to reach process 0, whose count decides where the next ones go
        wait_for(lambda: counted(broker) == [4, 0], "process 0 to count process 1's closes")
        more = [RawClient(broker.port, client_id=f"m{i}") for i in range(4)]
        try:
            for client in more:
                assert client.produce(topic, 0, record_batch([(None, b"m")]), acks=1
                                      ).error_code == 0
            assert split(broker) == (4, 4)
        finally:
            for client in more:
                client.close()
    finally:
        for client in clients:
            client.close()


def counted(broker: BrokerProcess) -> list[float]:
    """The connections of each process as process 0 counts them (its metrics): what it
    hands the next connection by."""
    m = scrape(int(broker.config["metrics.port"]))
    return [v for k, v in sorted(m.items()) if k.startswith("actorlog_process_connections{")]


def split_of(broker: BrokerProcess, client: RawClient) -> int:
    """Which process (0 or 1) holds the broker's end of ``client``'s connection."""
    assert broker.proc is not None and client.sock is not None
    [worker] = worker_pids(broker)
    inodes = tcp_inodes(broker.port, remote_port=client.sock.getsockname()[1])
    if connections_of(broker.proc.pid, inodes):
        return 0
    assert connections_of(worker, inodes) == 1
    return 1


def test_confluent_clients_produce_and_consume_across_handed_connections(
        handoff_broker: BrokerProcess) -> None:
    broker = handoff_broker
    topic, count = "handed", 4
    _worker, _mine, _theirs = topic_over_both_processes(broker, topic, count)
    values = {p: [b"%d-%d" % (p, i) for i in range(50)] for p in range(count)}
    produce_all(broker.bootstrap, topic, values, producers=4)
    assert record_diff(consume_all(broker.bootstrap, topic, count, 50 * count), values) == {}
    log = broker.log()
    assert "handoff link" not in log or "is down" not in log


def test_an_ssl_listener_hands_connections_and_the_handshake_is_the_receivers(
        tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    pki = make_pki(tmp_path / "pki")
    plain_port, ssl_port = free_port(), free_port()
    config = dict(HANDOFF, **{"ssl.keystore.location": str(pki.server),
                              "ssl.truststore.type": "PEM",
                              "ssl.truststore.location": str(pki.ca)})
    broker = BrokerProcess(  # SSL first: the broker fixture talks to the first listener
        tmp_path / "data", port=ssl_port, config=config,
        listen=f"SSL://127.0.0.1:{ssl_port},PLAINTEXT://127.0.0.1:{plain_port}").start()
    try:
        wait_for(lambda: worker_pids(broker), what="process 1 serving connections", timeout=60)
        wait_for(lambda: broker.log().count("process 1 takes connections") == 2,
                 "process 1's links of both listeners")
        with RawClient(plain_port) as admin:
            assert admin.create_topic("secret", 2) == 0
        tls = {"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
               "ssl.ca.location": str(pki.ca)}
        producers = [Producer(dict(tls, **{"acks": "all", "linger.ms": 0}))
                     for _ in range(4)]
        delivered: list[object] = []
        for i, producer in enumerate(producers):
            producer.produce("secret", value=b"s%d" % i, partition=i % 2,
                             on_delivery=lambda err, _msg: delivered.append(err))
            assert producer.flush(30) == 0
        assert delivered == [None] * 4
        # both processes hold SSL connections: the handshakes of process 1's happened there
        on_main, on_worker = split(broker, ssl_port)
        assert on_main > 0 and on_worker > 0, (on_main, on_worker)
        consumer = Consumer(dict(tls, **{"group.id": "g", "enable.auto.commit": False}))
        try:
            consumer.assign([TopicPartition("secret", p, 0) for p in (0, 1)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                for msg in consumer.consume(10, 0.5):
                    assert msg.error() is None, msg.error()
                    got.append(msg.value())
            assert sorted(got) == [b"s0", b"s1", b"s2", b"s3"]
        finally:
            consumer.close()
        del producers
    finally:
        assert broker.stop() == 0


def hold_restart(broker: BrokerProcess, deadline_s: float = 5.0) -> int:
    """The single node's process 1 held back (tests/fixtures/process_lock.py)."""
    return hold_process_1(broker.data_dir, "node-1", deadline_s)


def test_while_process_1_is_down_new_connections_go_to_process_0(
        handoff_broker: BrokerProcess) -> None:
    broker = handoff_broker
    assert broker.proc is not None
    topic, count = "survive", 4
    worker, mine, _theirs = topic_over_both_processes(broker, topic, count)
    values = {p: [b"before-%d-%d" % (p, i) for i in range(50)] for p in range(count)}
    produce_all(broker.bootstrap, topic, values, producers=4)  # every one acknowledged
    wait_for(lambda: split(broker) == (0, 0), "the producers' connections to close")
    # and process 1's reports of its closes to reach process 0, whose count decides
    wait_for(lambda: counted(broker) == [0, 0], "process 0 to count process 1's closes")
    held = [RawClient(broker.port, client_id=f"h{i}") for i in range(4)]
    lock = -1
    try:
        for client in held:
            assert client.produce(topic, mine[0], record_batch([(None, b"x")]), acks=1
                                  ).error_code == 0
        values[mine[0]] += [b"x"] * 4
        assert split(broker) == (2, 2)
        with broker.hold_worker(worker) as process_1:
            assert process_1.kill()
            lock = hold_restart(broker)  # the restarted process 1 waits for it
            wait_for(process_1.exited, "process 1 to die")
        wait_for_log(broker, "process 1's handoff link of listener PLAINTEXT closed")
        # its two connections died with it, process 0's two stay; every new one goes to
        # process 0 (none refused or reset) while process 1 is down
        during = [RawClient(broker.port, client_id=f"d{i}") for i in range(6)]
        held += during
        for i, client in enumerate(during):
            value = b"during-%d" % i
            assert client.produce(topic, mine[0], record_batch([(None, value)]), acks=-1
                                  ).error_code == 0
            values[mine[0]].append(value)
        assert [split_of(broker, c) for c in during] == [0] * 6
        assert connections_of(broker.proc.pid, established_inodes(broker.port)) == 8
        os.close(lock)
        lock = -1
        [restarted] = wait_for(lambda: worker_pids(broker) != [worker] and worker_pids(broker),
                               "the restarted process", timeout=60)
        wait_for(lambda: broker.log().count("process 1 takes connections") == 2,
                 "the restarted process's link")
        # its count started again from 0: the next connections go to it
        more = [RawClient(broker.port, client_id=f"a{i}") for i in range(4)]
        held += more
        for client in more:
            assert client.produce(topic, mine[0], record_batch([(None, b"a")]), acks=1
                                  ).error_code == 0
        values[mine[0]] += [b"a"] * 4
        assert [split_of(broker, c) for c in more] == [1] * 4
        assert serving(broker, restarted)
    finally:
        if lock >= 0:
            os.close(lock)
        for client in held:
            client.close()
    expected = sum(len(v) for v in values.values())
    assert record_diff(consume_all(broker.bootstrap, topic, count, expected), values) == {}


def listening_inodes(port: int) -> set[str]:
    """Socket inodes of TCP sockets listening on ``port``."""
    return tcp_inodes(port, LISTEN)


@pytest.mark.parametrize("distribution", ["reuseport", "handoff"])
def test_reuseport_binds_the_port_in_every_process_handoff_in_process_0_alone(
        tmp_path: Path, distribution: str) -> None:
    config = {"num.processes": 2, "num.processes.connection.distribution": distribution}
    broker = BrokerProcess(tmp_path / "data", config=config).start()
    try:
        [worker] = wait_for(lambda: worker_pids(broker), what="process 1 serving connections",
                            timeout=60)
        assert broker.proc is not None
        listening = listening_inodes(broker.port)
        assert connections_of(broker.proc.pid, listening) == 1
        assert connections_of(worker, listening) == (1 if distribution == "reuseport" else 0)
    finally:
        assert broker.stop() == 0
