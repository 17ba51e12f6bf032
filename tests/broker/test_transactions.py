"""Transactional clients fail at once with a clear message until transactions exist (issue 20).

The answer is final for the client (fatal, not retriable): a retriable one
(COORDINATOR_NOT_AVAILABLE) made init_transactions wait out its whole
timeout. The timeout given here is long, so a retriable answer would end in
_TIMED_OUT, not in the error checked.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.errors import TransactionalIdAuthorizationFailedError

from tests.fixtures.broker import BrokerProcess

pytestmark = [pytest.mark.clients]


def test_confluent_kafka_init_transactions_fails_with_a_clear_fatal_error(
        broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn-a"})
    with pytest.raises(KafkaException) as info:
        producer.init_transactions(120)
    error = info.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal() and not error.retriable()
    assert "transactions are not supported by this broker yet" in error.str()


def test_kafka_python_init_transactions_fails_with_a_clear_error(broker: BrokerProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-b",
                             max_block_ms=120_000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)


def test_idempotent_producers_still_work(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    producer.produce("idem", b"v")
    assert producer.flush(30) == 0
