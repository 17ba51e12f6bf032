"""The consumer side of the load: plain consume throughput, and end-to-end latency.

Consumers assign partitions explicitly (no group rebalance to wait for, and
the broker needs no group coordinator). For e2e each record carries its
producer-side due time (CLOCK_MONOTONIC, shared by every process on one host)
in its first bytes; the consumer subtracts it from its own clock on receipt.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.load_core import (
    LatencyCounts,
    WorkerGroup,
    WorkerSlot,
    hide_secrets,
    latency_summary_ms,
    merge_encoded,
    merge_errors,
)
from bench.load_produce import E2E_HEADER


@dataclass
class ConsumeConfig:
    """One consume run; also the `config` block of the JSON."""

    bootstrap: str
    topic: str
    num_records: int | None = None  # None: up to the high watermarks seen at start (or duration)
    duration_s: float | None = None
    processes: int = 1
    start: str = "beginning"  # beginning | end
    time_limit_s: float = 300.0
    idle_timeout_s: float = 10.0  # stop after this long without a record once nothing more is due
    batch: int = 10_000  # records asked per consume() call
    client_config: dict[str, str] = field(default_factory=dict)
    e2e_run_id: bytes | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["client_config"] = hide_secrets(self.client_config)  # the JSON is shared
        out["e2e_run_id"] = None if self.e2e_run_id is None else self.e2e_run_id.hex()
        return out

    def consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"actorlog-bench-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
        }
        conf.update(self.client_config)
        return conf


@dataclass
class ConsumerShare:
    config: ConsumeConfig
    partitions: list[tuple[int, int, int]]  # (partition, start offset, end offset or -1)


def plan_partitions(config: ConsumeConfig) -> list[tuple[int, int, int]]:
    """Every partition with its start offset and, when reading 'what is there', its end."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(config.consumer_config())
    try:
        metadata = consumer.list_topics(config.topic, timeout=15)
        topic = metadata.topics.get(config.topic)
        if topic is None or topic.error is not None:
            raise ValueError(
                f"topic {config.topic!r} not found: {None if topic is None else topic.error}"
            )
        plan = []
        bounded = (
            config.num_records is None and config.duration_s is None and config.e2e_run_id is None
        )
        for partition in sorted(topic.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(config.topic, partition), timeout=15
            )
            start = high if config.start == "end" else low
            plan.append((partition, start, high if bounded else -1))
        return plan
    finally:
        consumer.close()


def consume_worker(share: ConsumerShare, slot: WorkerSlot) -> dict[str, Any]:
    """Read the assigned partitions until the count, the end offsets, the duration or the cap."""
    from confluent_kafka import Consumer, TopicPartition

    config = share.config
    run_id = config.e2e_run_id
    header_size = E2E_HEADER.size
    unpack = E2E_HEADER.unpack_from
    consumed = 0
    consumed_bytes = 0
    foreign = 0
    errors: dict[str, dict[str, int]] = {}
    e2e = LatencyCounts()
    poll_latency = LatencyCounts()
    ends = {p: end for p, _start, end in share.partitions if end >= 0}
    pending = {p for p, start, end in share.partitions if end >= 0 and start < end}
    consumer = Consumer(config.consumer_config()) if share.partitions else None
    if consumer is not None:
        consumer.assign(
            [TopicPartition(config.topic, p, start) for p, start, _end in share.partitions]
        )
        consumer.list_topics(config.topic, timeout=15)
    slot.mark_ready()
    if not slot.wait_go(120.0):
        return {"worker_error": "never released by the parent"}
    start_ns = time.monotonic_ns()
    last_record_ns = start_ns
    hard_end_ns = start_ns + int(config.time_limit_s * 1e9)
    end_ns = hard_end_ns
    if config.duration_s is not None:
        end_ns = min(end_ns, start_ns + int(config.duration_s * 1e9))
    bounded_by_offsets = bool(ends) and config.num_records is None
    try:
        while consumer is not None:
            now_ns = time.monotonic_ns()
            if now_ns >= end_ns or slot.stop_requested():
                break
            if bounded_by_offsets and not pending:
                break
            if config.num_records is not None and slot.group_done() >= config.num_records:
                break
            expected = slot.expected_total()
            if expected >= 0:
                if slot.group_done() >= expected:
                    break
                if now_ns - last_record_ns > config.idle_timeout_s * 1e9:
                    break
            t0 = time.monotonic_ns()
            # consume() with a timeout waits to fill the whole batch, which would add
            # its timeout to every e2e latency: take what is queued, else wait for one.
            messages = consumer.consume(config.batch, 0)
            if not messages:
                one = consumer.poll(0.05)
                messages = [] if one is None else [one]
            now_ns = time.monotonic_ns()
            if messages:
                poll_latency.record_us((now_ns - t0) // 1000)
                last_record_ns = now_ns
            # A count is met exactly by one process (several may overshoot by a batch).
            limit = None if config.num_records is None else config.num_records - slot.group_done()
            for msg in messages:
                if limit is not None and limit <= 0:
                    break
                err = msg.error()
                if err is not None:
                    slot_err = errors.setdefault(err.name(), {"code": int(err.code()), "count": 0})
                    slot_err["count"] += 1
                    continue
                if ends:
                    # 'What is there at start' means offsets below the end seen then.
                    partition = msg.partition() or 0
                    offset = msg.offset() or 0
                    end = ends.get(partition, -1)
                    if offset + 1 >= end:
                        pending.discard(partition)
                    if offset >= end:
                        continue
                value = msg.value() or b""
                if run_id is not None:
                    if len(value) < header_size:
                        foreign += 1
                        continue
                    rid, due_ns = unpack(value)
                    if rid != run_id:
                        foreign += 1
                        continue
                    e2e.record_us((now_ns - due_ns) // 1000)
                consumed += 1
                consumed_bytes += len(value)
                if limit is not None:
                    limit -= 1
            slot.report(consumed)
    finally:
        if consumer is not None:
            consumer.close()
    slot.report(consumed)
    return {
        "consumed": consumed,
        "consumed_bytes": consumed_bytes,
        "foreign": foreign,
        "errors": errors,
        "start_ns": start_ns,
        "end_ns": last_record_ns if consumed else time.monotonic_ns(),
        "hist": e2e.encode() if run_id is not None else poll_latency.encode(),
    }


def consumer_group(
    ctx: Any, config: ConsumeConfig, plan: list[tuple[int, int, int]]
) -> WorkerGroup:
    """Deal partitions round robin over the processes."""
    shares = [
        ConsumerShare(config=config, partitions=plan[i :: config.processes])
        for i in range(config.processes)
    ]
    return WorkerGroup(ctx, consume_worker, shares, "consumer")


def summarize_consume(results: list[dict[str, Any]], latency_name: str) -> dict[str, Any]:
    consumed = sum(r["consumed"] for r in results)
    consumed_bytes = sum(r["consumed_bytes"] for r in results)
    start_ns = min(r["start_ns"] for r in results)
    end_ns = max(r["end_ns"] for r in results)
    elapsed_s = max((end_ns - start_ns) / 1e9, 1e-9)
    return {
        "consumed": consumed,
        "elapsed_s": elapsed_s,
        "records_per_s": consumed / elapsed_s,
        "mb_per_s": consumed_bytes / elapsed_s / 1e6,
        "consumed_bytes": consumed_bytes,
        "foreign_records": sum(r["foreign"] for r in results),
        latency_name: latency_summary_ms(merge_encoded(r["hist"] for r in results)),
        "errors": merge_errors(r["errors"] for r in results),
        "workers": len(results),
    }
