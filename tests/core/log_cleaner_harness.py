"""Drives one cleaning of a PartitionLog the way the LogCleaner and its shard do, without
actors: plan, pass in steps, swap in the owner. Shared by the model test and the crash
writer (a subprocess, so this module imports no pytest)."""

from __future__ import annotations

from collections.abc import Callable

from kafka.record import MemoryRecords

from actors.core.log_cleaner import (
    CleaningPass,
    SwapPlan,
    choose_filthiest,
    describe_cleanable,
    map_capacity,
)
from actors.core.partition_log import PartitionLog
from actors.core.record_batch import BatchRecord, check_batches


def clean_once(log: PartitionLog, checkpoints: dict[tuple[str, int], int], recovery_point: int,
               now_ms: int, dedupe_bytes: int = 1 << 20, io_bytes: int = 700,
               pass_id: int = 1,
               after_step: Callable[[str], None] | None = None) -> SwapPlan | None:
    """Plan and run one pass over ``log`` and swap it in; the new first dirty offset goes
    into ``checkpoints``. None when nothing was due."""
    report = describe_cleanable(log, checkpoints.get((log.topic, log.partition)))
    chosen = choose_filthiest([report], checkpoints, {report.key: recovery_point}, now_ms)
    if chosen is None:
        return None
    cleaning = CleaningPass(chosen, now_ms, map_capacity(dedupe_bytes), io_bytes, pass_id)
    while not cleaning.step():
        pass
    plan = cleaning.plan
    assert plan is not None
    log.replace_cleaned_segments(plan.staging, plan.old_segments, plan.new_bases,
                                 report.generation, now_ms, after_step, plan.dropped_aborts)
    checkpoints[report.key] = plan.end_offset
    return plan


def read_log(log: PartitionLog) -> list[tuple[BatchRecord, int, int]]:
    """Every record from the log start with (record, its batch's base offset, producer id),
    read the way a client reads a fetch (kafka-python's record decoder, CRCs checked)."""
    out: list[tuple[BatchRecord, int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = bytes(log.read(offset, 1 << 20).records)
        headers = check_batches(data)  # length, magic, CRC of every batch
        if not headers:
            break
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            out += [(BatchRecord(r.offset, r.timestamp, r.key, r.value), batch.base_offset,
                     batch.producer_id) for r in batch if r.offset >= log.log_start_offset]
        offset = headers[-1].next_offset
    return out


def read_batch_spans(log: PartitionLog) -> list[tuple[int, int, int]]:
    """(base offset, last offset, producer id) of every batch from the log start."""
    out: list[tuple[int, int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        headers = check_batches(log.read(offset, 1 << 20).records)
        if not headers:
            break
        out += [(h.base_offset, h.last_offset, h.producer_id) for h in headers]
        offset = headers[-1].next_offset
    return out
