"""Each client is told the endpoints of the listener it connected on (Kafka's
``request.context.listenerName``), whatever the order of ``listeners``.

One node, SASL_PLAINTEXT first and SSL second, at num.processes 1 and 2: a
confluent-kafka client bootstrapping on the SSL port produces and consumes with a
group (Metadata, then FindCoordinator, send it to the SSL port: were it sent to the
SASL_PLAINTEXT port, its TLS handshake there would fail), and raw Metadata,
FindCoordinator and DescribeCluster over TLS answer the SSL port. The cluster case
is in tests/cluster/test_listener_endpoints_cluster.py.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from bench.certs import Pki, make_pki
from tests.broker.rawclient import METADATA, RawClient
from tests.fixtures.broker import BrokerProcess, free_port

pytestmark = [pytest.mark.clients]

FIND_COORDINATOR, DESCRIBE_CLUSTER = 10, 60


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module", params=[1, 2], ids=["processes1", "processes2"])
def two_listeners(request: pytest.FixtureRequest, pki: Pki,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """SASL_PLAINTEXT first (what the broker used to tell everyone), SSL second."""
    processes = int(request.param)
    sasl_port, ssl_port = free_port(), free_port()
    base = tmp_path_factory.mktemp(f"listeners-p{processes}")
    broker = BrokerProcess(
        base / "data", port=ssl_port,
        listen=f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port}",
        config={"ssl.keystore.location": str(pki.server),
                "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                "num.processes": processes}).start()
    broker.sasl_port = sasl_port  # type: ignore[attr-defined]
    try:
        yield broker
    finally:
        assert broker.stop() == 0, broker.log()[-3000:]


def _ssl(pki: Pki) -> dict[str, Any]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}


def _tls_raw(broker: BrokerProcess, pki: Pki) -> RawClient:
    client = RawClient(broker.port)
    context = ssl.create_default_context(cafile=str(pki.ca))
    client.sock = context.wrap_socket(client.sock, server_hostname="localhost")
    return client


def test_a_client_on_the_second_listener_produces_and_consumes_in_a_group(
        two_listeners: BrokerProcess, pki: Pki) -> None:
    broker = two_listeners
    topic = f"second-{time.time_ns()}"
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "message.timeout.ms": 20000, **_ssl(pki)})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(),
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    left = producer.flush(30)
    assert not left and not errors, (left, errors[:3], broker.log()[-2000:])
    # the client's own view: this broker at the SSL port, the partition led there
    md = producer.list_topics(topic, timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", broker.port)]
    assert md.topics[topic].partitions[0].leader in md.brokers

    group = f"g-{time.time_ns()}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **_ssl(pki)})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(bytes(msg.value()))
        assert got == [f"v{i}".encode() for i in range(5)], broker.log()[-2000:]
        consumer.commit(asynchronous=False)  # through the coordinator FindCoordinator named
        committed = consumer.committed(consumer.assignment(), timeout=10)
        assert [tp.offset for tp in committed] == [5]
    except KafkaException as exc:
        raise AssertionError(f"{exc}: {broker.log()[-2000:]}") from None
    finally:
        consumer.close()


def test_metadata_find_coordinator_and_describe_cluster_answer_the_listener_asked(
        two_listeners: BrokerProcess, pki: Pki) -> None:
    broker = two_listeners
    sasl_port = broker.sasl_port  # type: ignore[attr-defined]
    # several connections: with two processes both serve some
    for i in range(4):
        client = _tls_raw(broker, pki)
        try:
            meta = client.call(METADATA, 9, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_cluster_authorized_operations": False,
                                             "include_topic_authorized_operations": False})
            assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", broker.port)], i
            found = client.call(FIND_COORDINATOR, 4, {"key_type": 0,
                                                      "coordinator_keys": ["g", "h"]})
            assert [(c.error_code, c.host, c.port) for c in found.coordinators] == [
                (0, "127.0.0.1", broker.port)] * 2
            old = client.call(FIND_COORDINATOR, 2, {"key": "t", "key_type": 1})
            assert (old.error_code, old.port) == (0, broker.port)
            cluster = client.call(DESCRIBE_CLUSTER, 0,
                                  {"include_cluster_authorized_operations": False})
            assert [b.port for b in cluster.brokers] == [broker.port]
        finally:
            client.close()
    assert broker.port != sasl_port
