"""A consume-transform-produce worker (confluent-kafka), run as its own process by
test_transactions.py, which kills it with SIGKILL mid-transaction and starts it again.

    python -m tests.broker.txn_worker BOOTSTRAP INPUT OUTPUT GROUP TXN_ID TOTAL BATCH

Each transaction: up to BATCH input records in, one output record per input
("out-" + value), the consumed positions committed with the transaction
(send_offsets_to_transaction). Prints ``in-txn`` once a transaction's records are
sent (the window the test kills in) and ``committed N`` after each commit; exits
when the committed positions cover TOTAL input records. Every wait is bounded.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer


def main() -> int:
    bootstrap, source, sink, group, txn_id, total_s, batch_s = sys.argv[1:8]
    total, batch = int(total_s), int(batch_s)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(60)  # fences (and aborts) a killed predecessor first
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.instance.id": f"{group}-worker", "session.timeout.ms": 6000,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        messages = consumer.consume(batch, timeout=1.0)
        messages = [m for m in messages if m.error() is None]
        if not messages:
            positions = consumer.position(consumer.assignment())
            if sum(max(p.offset, 0) for p in positions) >= total and positions:
                break
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(sink, key=m.value(), value=b"out-" + m.value())
        producer.flush(30)
        print("in-txn", flush=True)
        time.sleep(0.05)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        done += len(messages)
        print(f"committed {done}", flush=True)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
