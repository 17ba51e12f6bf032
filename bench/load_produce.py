"""The producer side of the load: configuration, one worker process, the merged result.

Two ways to send. Closed loop (no target rate): as fast as the client accepts,
latency is librdkafka's own produce()-to-acknowledgement time. Open loop
(`target_rate`): record i of a connection is due at start + i / rate and its
latency counts from that due time, not from when it was actually sent, so a
stalled broker shows up as latency instead of silently lowering the send rate
(no coordinated omission).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from bench.load_core import (
    LatencyCounts,
    WorkerGroup,
    WorkerSlot,
    hide_secrets,
    latency_summary_ms,
    merge_encoded,
    merge_errors,
    split_evenly,
)

# librdkafka's statistics carry the count of Produce requests each connection sent.
STATS_INTERVAL_MS = 200

# e2e records start with this: 8-byte run id, then monotonic send (or due) time in ns.
E2E_HEADER = struct.Struct(">8sq")


@dataclass
class ProduceConfig:
    """Everything one produce run depends on; it is also the `config` block of the JSON."""

    bootstrap: str
    topic: str
    num_records: int | None = 100_000
    duration_s: float | None = None
    record_size: int = 100
    keys: int = 0  # 0: no key (sticky partitioner); N: N distinct keys, round robin
    partitions: int = 3
    acks: str = "1"
    compression: str = "none"
    linger_ms: float = 5.0
    batch_size: int = 65536
    target_rate: float | None = None  # records/s over all processes; None = closed loop
    processes: int = 1
    connections: int = 1  # producer instances (connections to the broker) per process
    records_per_request: int | None = None  # librdkafka batch.num.messages
    max_in_flight: int | None = None
    max_outstanding: int | None = None  # closed loop: unacknowledged records per connection
    time_limit_s: float = 300.0  # hard cap on the sending phase, records left or not
    message_timeout_ms: int = 30_000
    client_config: dict[str, str] = field(default_factory=dict)
    e2e_run_id: bytes | None = None  # set by e2e: values carry E2E_HEADER

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["client_config"] = hide_secrets(self.client_config)  # the JSON is shared
        out["e2e_run_id"] = None if self.e2e_run_id is None else self.e2e_run_id.hex()
        return out

    def outstanding_window(self) -> int:
        """Closed loop sends at most this many unacknowledged records per connection.

        Without a window a client faster than the broker queues up to a million records,
        every latency becomes queueing time, and the final drain takes minutes. The default
        keeps four full batches per partition in flight.
        """
        if self.max_outstanding is not None:
            return self.max_outstanding
        per_batch = self.records_per_request or max(1, self.batch_size // max(1, self.record_size))
        in_flight = self.max_in_flight or 5
        return max(16, min(200_000, in_flight * max(1, self.partitions) * per_batch))

    def producer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "acks": self.acks,
            "compression.type": self.compression,
            "linger.ms": self.linger_ms,
            "batch.size": self.batch_size,
            "message.timeout.ms": self.message_timeout_ms,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False,
        }
        if self.records_per_request is not None:
            conf["batch.num.messages"] = self.records_per_request
        if self.max_in_flight is not None:
            conf["max.in.flight.requests.per.connection"] = self.max_in_flight
        conf.update(self.client_config)
        return conf


@dataclass
class ProducerShare:
    """What one worker process sends: its connections' record counts and rates."""

    config: ProduceConfig
    records: list[int | None]  # per connection; None = until the duration ends
    rates: list[float | None]  # per connection, records/s


class _Connection:
    """One producer instance driven by one thread; its counters are read after join()."""

    def __init__(
        self, config: ProduceConfig, records: int | None, rate: float | None, seed: int
    ) -> None:
        from confluent_kafka import Producer

        self.config = config
        self.records = sys.maxsize if records is None else records
        self.rate = rate
        self.produce_requests = 0
        self._stats_seen = 0
        self.producer = Producer(
            {
                **config.producer_config(),
                "statistics.interval.ms": STATS_INTERVAL_MS,
                "stats_cb": self.on_stats,
            }
        )
        self.latency = LatencyCounts()
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.acked_bytes = 0
        self.errors: dict[str, dict[str, int]] = {}
        self.first_send_ns = 0
        self.last_ack_ns = 0
        rnd = os.urandom(max(config.record_size, E2E_HEADER.size))
        self.payload = rnd[: config.record_size]
        self.keys = [
            b"key-%08d" % ((seed * 7919 + i) % config.keys) for i in range(config.keys)
        ] or None

    def connect(self) -> None:
        """Fetch metadata now so the connection and its setup are outside the measured phase."""
        self.producer.list_topics(self.config.topic, timeout=15)

    def _on_error(self, err: Any) -> None:
        self.failed += 1
        name = err.name()
        slot = self.errors.setdefault(name, {"code": int(err.code()), "count": 0})
        slot["count"] += 1

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._on_error(err)
            return
        self.acked += 1
        self.acked_bytes += len(msg)
        latency = msg.latency()
        self.latency.record_us(
            int(latency * 1_000_000) if latency is not None and latency >= 0 else 0
        )
        self.last_ack_ns = time.monotonic_ns()

    def on_delivery_due(self, due_ns: int, err: Any, msg: Any) -> None:
        if err is not None:
            self._on_error(err)
            return
        self.acked += 1
        self.acked_bytes += len(msg)
        now_ns = time.monotonic_ns()
        self.latency.record_us((now_ns - due_ns) // 1000)
        self.last_ack_ns = now_ns

    def _value(self, due_ns: int) -> bytes:
        run_id = self.config.e2e_run_id
        if run_id is None:
            return self.payload
        return E2E_HEADER.pack(run_id, due_ns) + self.payload[E2E_HEADER.size :]

    def run(self, end_ns: int, stop: WorkerSlot, phase: float = 0.0) -> None:
        """Send until the count is reached, the end time passes, or the parent asks to stop.

        `phase` (0..1) shifts this connection's open-loop schedule by that fraction of
        its interval, so connections do not all send at the same instants.
        """
        from confluent_kafka import KafkaException

        produce = self.producer.produce
        poll = self.producer.poll
        topic = self.config.topic
        keys = self.keys
        nkeys = len(keys) if keys else 0
        rate = self.rate
        interval_ns = int(1e9 / rate) if rate else 0
        start_ns = time.monotonic_ns() + int(phase * interval_ns)
        self.first_send_ns = start_ns
        e2e = self.config.e2e_run_id is not None
        value = self.payload
        window = self.config.outstanding_window()
        sent = 0
        while sent < self.records:
            if not sent & 255:
                if time.monotonic_ns() >= end_ns or stop.stop_requested():
                    break
                poll(0)
            key = keys[sent % nkeys] if keys else None
            if rate:
                due_ns = start_ns + sent * interval_ns
                now_ns = time.monotonic_ns()
                if now_ns < due_ns:
                    wait_ns = due_ns - now_ns
                    if wait_ns >= 1_000_000:
                        # Waiting in poll() serves delivery reports as they arrive, so
                        # their latencies are taken promptly.
                        poll(min(wait_ns / 1e9, 0.05))
                    else:
                        # poll() rounds its timeout down to whole ms and would spin: serve
                        # what is ready, then sleep.
                        poll(0)
                        time.sleep(wait_ns / 1e9)
                    if time.monotonic_ns() >= end_ns or stop.stop_requested():
                        break
                    continue
                callback: Callable[[Any, Any], None] = partial(self.on_delivery_due, due_ns)
                if e2e:
                    value = self._value(due_ns)
            else:
                if sent - self.acked - self.failed >= window:
                    # The window is full: wait in poll(), which returns on the next report.
                    poll(0.01)
                    if time.monotonic_ns() >= end_ns or stop.stop_requested():
                        break
                    continue
                callback = self.on_delivery
                if e2e:
                    value = self._value(time.monotonic_ns())
            try:
                produce(topic, value, key, on_delivery=callback)
            except KafkaException as exc:  # refused by the client itself, e.g. MSG_SIZE_TOO_LARGE
                self._on_error(exc.args[0])
                sent += 1
                continue
            except BufferError:
                poll(0.005)  # the local queue is full: the broker is the bottleneck
                if time.monotonic_ns() >= end_ns or stop.stop_requested():
                    break
                continue
            sent += 1
        self.sent = sent

    def on_stats(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        self.produce_requests = sum(
            int(b.get("req", {}).get("Produce", 0)) for b in stats.get("brokers", {}).values()
        )
        self._stats_seen += 1

    def drain(self, timeout_s: float) -> None:
        """Wait for outstanding acknowledgements; whatever is left is purged and counted as errors.

        Then wait for one more statistics report, so the request count covers the whole run.
        """
        remaining = self.producer.flush(timeout_s)
        if remaining:
            self.producer.purge(in_queue=True, in_flight=True)
            self.producer.flush(5.0)
        seen = self._stats_seen
        deadline = time.monotonic() + 3 * STATS_INTERVAL_MS / 1000
        while self._stats_seen == seen and time.monotonic() < deadline:
            self.producer.poll(0.05)


def produce_worker(share: ProducerShare, slot: WorkerSlot) -> dict[str, Any]:
    """One worker process: a thread per connection, results summed into one dict."""
    config = share.config
    connections = [
        _Connection(config, records, rate, seed=slot.index * 131 + i)
        for i, (records, rate) in enumerate(zip(share.records, share.rates, strict=True))
    ]
    for conn in connections:
        conn.connect()
    slot.mark_ready()
    if not slot.wait_go(120.0):
        return {"worker_error": "never released by the parent"}
    start_ns = time.monotonic_ns()
    hard_end_ns = start_ns + int(config.time_limit_s * 1e9)
    end_ns = hard_end_ns
    if config.duration_s is not None:
        end_ns = min(end_ns, start_ns + int(config.duration_s * 1e9))
    drain_s = max(5.0, config.message_timeout_ms / 1000.0 + 2.0)

    total_conns = config.processes * len(connections)

    def drive(conn: _Connection, global_index: int) -> None:
        conn.run(end_ns, slot, phase=global_index / total_conns)
        conn.drain(drain_s)

    threads = [
        threading.Thread(target=drive, args=(c, slot.index * len(connections) + i), daemon=True)
        for i, c in enumerate(connections)
    ]
    for t in threads:
        t.start()
    while True:
        slot.report(sum(c.acked for c in connections))
        alive = [t for t in threads if t.is_alive()]
        if not alive:
            break
        alive[0].join(0.1)
    latency = LatencyCounts()
    for c in connections:
        latency.merge(c.latency)
    return {
        "sent": sum(c.sent for c in connections),
        "acked": sum(c.acked for c in connections),
        "failed": sum(c.failed for c in connections),
        "acked_bytes": sum(c.acked_bytes for c in connections),
        "produce_requests": sum(c.produce_requests for c in connections),
        "errors": merge_errors(c.errors for c in connections),
        "start_ns": start_ns,
        "end_ns": max(
            [c.last_ack_ns for c in connections if c.last_ack_ns] or [time.monotonic_ns()]
        ),
        "hist": latency.encode(),
    }


def producer_group(ctx: Any, config: ProduceConfig) -> WorkerGroup:
    """Split counts and rate over processes x connections and build the worker group."""
    total_conns = config.processes * config.connections
    if config.num_records is not None:
        per_conn: list[int | None] = list(split_evenly(config.num_records, total_conns))
    else:
        per_conn = [None] * total_conns
    rate = None if config.target_rate is None else config.target_rate / total_conns
    shares = [
        ProducerShare(
            config=config,
            records=per_conn[p * config.connections : (p + 1) * config.connections],
            rates=[rate] * config.connections,
        )
        for p in range(config.processes)
    ]
    return WorkerGroup(ctx, produce_worker, shares, "producer")


def summarize_produce(config: ProduceConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The `results` block: counts, throughput, latency percentiles and errors."""
    sent = sum(r["sent"] for r in results)
    acked = sum(r["acked"] for r in results)
    acked_bytes = sum(r["acked_bytes"] for r in results)
    start_ns = min(r["start_ns"] for r in results)
    end_ns = max(r["end_ns"] for r in results)
    elapsed_s = max((end_ns - start_ns) / 1e9, 1e-9)
    hist = merge_encoded(r["hist"] for r in results)
    records_per_s = acked / elapsed_s
    out: dict[str, Any] = {
        "sent": sent,
        "acked": acked,
        "failed": sum(r["failed"] for r in results),
        "unacknowledged": sent - acked - sum(r["failed"] for r in results),
        "elapsed_s": elapsed_s,
        "records_per_s": records_per_s,
        "mb_per_s": acked_bytes / elapsed_s / 1e6,
        "acked_bytes": acked_bytes,
        "latency": latency_summary_ms(hist),
        "latency_measured_from": "due time (open loop)" if config.target_rate else "produce() call",
        "errors": merge_errors(r["errors"] for r in results),
        "workers": len(results),
    }
    # Counted by librdkafka (retries included); shows whether a broker was sent the
    # request size a scenario intends.
    requests = sum(r["produce_requests"] for r in results)
    out["produce_requests"] = requests
    out["requests_per_s"] = requests / elapsed_s
    out["records_per_request"] = acked / requests if requests else 0.0
    return out
