"""The chaos benchmark's checker: what happened to every acknowledged record (pure, no I/O).

The benchmark hands in what its clients saw: every record a producer sent
(producer, sequence number, partition, when it was sent) and, for those the
cluster acknowledged, when and at which offset; every record the consumer
group delivered; the offsets the group committed; a final read of every
partition from its start to its end; and the faults it injected with the
partitions each one's node led at that moment. :func:`check` answers, in the
manner of Jepsen's queue checkers:

* lost: acknowledged records the final read does not hold;
* duplicated: extra copies of a sent record in the final read (an
  idempotent producer's retries must not write twice);
* reordered: records of one producer in one partition whose sequence number
  is lower than one before them in offset order (a producer sends in order);
* moved: acknowledged records found at another offset than the one acked
  (the log was rewritten under the client);
* skipped: records below a committed offset of the group that the group
  never delivered (a commit went past an unread record);
* availability: the share of whole seconds of the run with at least one
  acknowledgement;
* failover: per fault that took a leader out (kill, pause, isolate, and
  killproc for the partitions whose shard ran in the killed process; not
  netem, which only slows it down), the time from the fault to the first
  acknowledgement, on the partitions that node led, of a record sent after
  the fault; a fault after which none came is counted as unrecovered.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Partition = int
FAILOVER_KINDS = ("kill", "pause", "isolate", "killproc")


@dataclass(frozen=True)
class Sent:
    """One record a producer sent; ``ack_ms`` is set when its delivery report came, and
    ``offset`` when that report had one. A success without an offset is acknowledged all the
    same: an idempotent producer (librdkafka) reports records as persisted, offset unknown,
    when the answer to their request was lost and a later batch of the same producer was
    acknowledged (the broker has them, in sequence order)."""

    producer: int
    seq: int
    partition: Partition
    send_ms: int
    ack_ms: int | None = None
    offset: int | None = None
    error: str | None = None

    @property
    def acked(self) -> bool:
        return self.ack_ms is not None and self.error is None


@dataclass(frozen=True)
class Stored:
    """One record as a consumer read it: where it is and whose it is."""

    partition: Partition
    offset: int
    producer: int
    seq: int


@dataclass(frozen=True)
class Fault:
    """A fault injected at ``at_ms`` on ``node``, which then led ``led`` partitions."""

    kind: str
    node: int
    at_ms: int
    healed_ms: int | None
    led: tuple[Partition, ...]


@dataclass
class CheckResult:
    sent: int
    acked: int
    failed: int
    read: int
    lost: int
    duplicated: int
    reordered: int
    moved: int
    skipped: int
    availability: float
    failover_ms: list[int]
    unrecovered_faults: int
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered or self.moved
                    or self.skipped)

    def failover_summary(self) -> dict[str, int | None]:
        values = self.failover_ms
        return {"min": min(values) if values else None,
                "median": round(statistics.median(values)) if values else None,
                "max": max(values) if values else None,
                "count": len(values)}

    def to_json(self, seed: int | None) -> dict[str, Any]:
        return {"sent": self.sent, "acked": self.acked, "failed": self.failed,
                "read": self.read, "lost": self.lost, "duplicated": self.duplicated,
                "reordered": self.reordered, "moved": self.moved, "skipped": self.skipped,
                "availability": round(self.availability, 4),
                "failover_ms": self.failover_summary(),
                "failover_ms_all": list(self.failover_ms),
                "unrecovered_faults": self.unrecovered_faults,
                "ok": self.ok, "seed": seed, "examples": self.examples}


def _example(bucket: dict[str, list[str]], kind: str, text: str, limit: int = 5) -> None:
    found = bucket.setdefault(kind, [])
    if len(found) < limit:
        found.append(text)


def check(sent: Sequence[Sent], final: Iterable[Stored], delivered: Iterable[Stored],
          committed: Mapping[Partition, int], faults: Sequence[Fault],
          start_ms: int, end_ms: int) -> CheckResult:
    examples: dict[str, list[str]] = {}
    final_list = list(final)
    where: dict[tuple[int, int], list[Stored]] = {}
    for rec in final_list:
        where.setdefault((rec.producer, rec.seq), []).append(rec)

    acked = [s for s in sent if s.acked]
    lost = 0
    moved = 0
    for s in acked:
        copies = where.get((s.producer, s.seq), [])
        if not copies:
            lost += 1
            _example(examples, "lost", f"producer {s.producer} seq {s.seq}: acked at "
                     f"partition {s.partition} offset "
                     f"{'unknown' if s.offset is None else s.offset}, not in the log")
        # acknowledged without an offset: moved when no copy is in its own partition
        elif not any(c.partition == s.partition and s.offset in (None, c.offset)
                     for c in copies):
            moved += 1
            _example(examples, "moved", f"producer {s.producer} seq {s.seq}: acked at "
                     f"{s.partition}/{'?' if s.offset is None else s.offset}, found at "
                     f"{', '.join(f'{c.partition}/{c.offset}' for c in copies)}")

    duplicated = 0
    for (producer, seq), copies in where.items():
        if len(copies) > 1:
            duplicated += len(copies) - 1
            _example(examples, "duplicated", f"producer {producer} seq {seq} at "
                     f"{', '.join(f'{c.partition}/{c.offset}' for c in copies)}")

    reordered = 0
    by_partition: dict[Partition, list[Stored]] = {}
    for rec in final_list:
        by_partition.setdefault(rec.partition, []).append(rec)
    for partition, records in by_partition.items():
        highest: dict[int, int] = {}
        firsts: set[tuple[int, int]] = set()
        for rec in sorted(records, key=lambda r: r.offset):
            if (rec.producer, rec.seq) in firsts:
                continue  # a later copy: counted as duplicated, not again as reordered
            firsts.add((rec.producer, rec.seq))
            top = highest.get(rec.producer)
            if top is not None and rec.seq < top:
                reordered += 1
                _example(examples, "reordered", f"partition {partition} offset {rec.offset}: "
                         f"producer {rec.producer} seq {rec.seq} after seq {top}")
            else:
                highest[rec.producer] = rec.seq

    seen = {(d.partition, d.offset) for d in delivered}
    skipped = 0
    for rec in final_list:
        upto = committed.get(rec.partition)
        if upto is not None and rec.offset < upto and (rec.partition, rec.offset) not in seen:
            skipped += 1
            _example(examples, "skipped", f"partition {rec.partition} offset {rec.offset}: "
                     f"below the committed offset {upto}, never delivered to the group")

    seconds = max(1, -(-(end_ms - start_ms) // 1000))
    acked_seconds = {(s.ack_ms - start_ms) // 1000 for s in acked
                     if s.ack_ms is not None and start_ms <= s.ack_ms < end_ms}
    availability = len(acked_seconds) / seconds

    failover: list[int] = []
    unrecovered = 0
    for fault in faults:
        if not fault.led or fault.kind not in FAILOVER_KINDS:
            continue
        led = set(fault.led)
        worst = 0
        recovered = True
        for partition in led:
            after = [s.ack_ms for s in acked if s.partition == partition
                     and s.send_ms >= fault.at_ms and s.ack_ms is not None]
            if not after:
                recovered = False
                break
            worst = max(worst, min(after) - fault.at_ms)
        if recovered:
            failover.append(worst)
        else:
            unrecovered += 1
            _example(examples, "unrecovered", f"{fault.kind} of node {fault.node} at "
                     f"{fault.at_ms - start_ms} ms: no later acknowledgement on partitions "
                     f"{sorted(led)}")

    return CheckResult(
        sent=len(sent), acked=len(acked), failed=sum(1 for s in sent if s.error is not None),
        read=len(final_list), lost=lost, duplicated=duplicated, reordered=reordered,
        moved=moved, skipped=skipped, availability=availability, failover_ms=failover,
        unrecovered_faults=unrecovered, examples=examples)
