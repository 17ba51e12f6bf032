"""Property test: log compaction against a model of every record ever appended.

Random appends (keyed records and tombstones, plain and idempotent producers,
uncompressed and gzip batches), rolls, clock moves, cleanings (with key maps
large and tiny) and clean or unclean reopens. After every step:

* the log is a subsequence of what was appended: every record is the one
  appended at its offset, offsets only rise (never reused, order kept);
* the latest record of every key is there, unless it is a tombstone whose
  delete horizon (the time of the first cleaning that kept it, plus
  delete.retention.ms: KIP-534's, stamped in its batch) has passed;
* below a cleaning's end, a record stays only if it is its key's latest
  there;
* a cleaning leaves no tombstone below its end whose delete horizon has
  passed, and every record keeps its own timestamp (a stamped batch's records
  are re-encoded against its new base timestamp);
* the active segment is not touched; high watermark and log end do not move;
* each idempotent producer's state (epoch, last sequence and offsets) is the
  same after cleaning and after a reopen, and its last batch retried is still
  recognised as a duplicate.
"""

from __future__ import annotations

import os
import shutil
import struct
from dataclasses import dataclass

import crc32c
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kafka.codec import gzip_encode

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import HEADER_SIZE, build_batch
from tests.core.log_cleaner_harness import clean_once, read_batch_spans, read_log
from tests.fixtures.scratch import scratch_dir

DELETE_RETENTION_MS = 1_000
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


def gzip_batch(batch: bytes) -> bytes:
    """The same batch with its records section gzip-compressed (attributes codec 1)."""
    head, records = bytearray(batch[:HEADER_SIZE]), gzip_encode(batch[HEADER_SIZE:])
    struct.pack_into(">h", head, 21, 1)
    body = bytes(head[21:]) + records
    struct.pack_into(">i", head, 8, 9 + len(body))
    struct.pack_into(">I", head, 17, crc32c.crc32c(body))
    return bytes(head[:21]) + body


@dataclass(frozen=True)
class Appended:
    key: bytes
    value: bytes | None
    timestamp_ms: int
    batch_base: int


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Durability is the crash tests' subject; here fsync only costs seconds.
        self.real_fsync = os.fsync
        os.fsync = lambda fd: None
        self.tmp = scratch_dir("cleaner-prop-")  # in memory: tests/fixtures/scratch.py
        self.dir = self.tmp / "t-0"
        self.records: dict[int, Appended] = {}
        self.now_ms = 10_000
        self.checkpoints: dict[tuple[str, int], int] = {}
        self.producers: dict[int, tuple[int, int, int]] = {}  # pid -> next seq, base, last
        self.passes = 0
        self.last_batch_bytes: dict[int, bytes] = {}
        # tombstone offset -> the time of the first cleaning that kept it (its horizon is
        # that plus delete.retention.ms)
        self.stamped: dict[int, int] = {}

    def teardown(self) -> None:
        os.fsync = self.real_fsync
        if hasattr(self, "log"):
            self.log.close_without_flush()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(segment_bytes=st.sampled_from([300, 600, 2000]),
                index_interval_bytes=st.sampled_from([0, 100, 4096]))
    def open_log(self, segment_bytes: int, index_interval_bytes: int) -> None:
        self.config = LogConfig(segment_bytes=segment_bytes,
                                index_interval_bytes=index_interval_bytes,
                                cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0,
                                delete_retention_ms=DELETE_RETENTION_MS)
        self.log = PartitionLog.open(self.dir, "t", 0, self.config, self.now_ms)

    # ------------------------------------------------------------------ rules

    @rule(batches=st.lists(st.tuples(
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
        st.lists(st.booleans(), min_size=4, max_size=4),
        st.sampled_from([None, 7, 8]), st.booleans()), min_size=1, max_size=6))
    def append(self, batches: list[tuple[list[bytes], list[bool], int | None, bool]]) -> None:
        for keys, tombstones, producer, compressed in batches:
            self._append(keys, tombstones, producer, compressed)

    def _append(self, keys: list[bytes], tombstones: list[bool], producer: int | None,
                compressed: bool) -> None:
        values: list[bytes | None] = [
            None if dead else b"%s@%d" % (k, len(self.records))
            for k, dead in zip(keys, tombstones, strict=False)]
        extra = {}
        if producer is not None:
            seq = self.producers.get(producer, (0, -1, -1))[0]
            extra = {"producer_id": producer, "producer_epoch": 0, "base_sequence": seq}
        batch = build_batch(values, keys=list(keys), timestamps_ms=[self.now_ms] * len(keys),
                            **extra)  # type: ignore[arg-type]
        if compressed:
            batch = gzip_batch(batch)
        info = self.log.append_as_leader(batch, 0, self.now_ms)
        self.log.update_high_watermark(self.log.log_end_offset)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.records[info.first_offset + i] = Appended(k, v, self.now_ms, info.first_offset)
        if producer is not None:
            self.last_batch_bytes[producer] = batch
            self.producers[producer] = (extra["base_sequence"] + len(keys), info.first_offset,
                                        info.last_offset)

    @rule(ms=st.sampled_from([1, 300, 5_000]))
    def advance(self, ms: int) -> None:
        self.now_ms += ms

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now_ms)

    @rule(dedupe_keys=st.sampled_from([3, 4, 5, 1000, 1000]),
          io_bytes=st.sampled_from([100, 5000]), roll_first=st.booleans())
    def clean(self, dedupe_keys: int, io_bytes: int, roll_first: bool) -> None:
        log = self.log
        if roll_first:
            log.roll(self.now_ms)
        log.flush(self.now_ms)  # the recovery point the cleaner may go up to
        active = log.segments[-1]
        active_bytes = active.read(0, active.size)
        hw, leo, active_base = log.high_watermark, log.log_end_offset, active.base_offset
        before = {pid: (e.producer_epoch, e.last_seq, e.last_offset)
                  for pid, e in log.producer_state.producers.items()}
        self.passes += 1
        try:
            plan = clean_once(log, self.checkpoints, log.recovery_point, self.now_ms,
                              dedupe_bytes=24 * dedupe_keys, io_bytes=io_bytes,
                              pass_id=self.passes)
        except Exception as exc:  # a key map too small for one segment is refused
            assert "dedupe.buffer.size" in str(exc), exc
            event("key map too small for a segment")
            return
        assert log.segments[-1].base_offset == active_base
        assert log.segments[-1].read(0, log.segments[-1].size) == active_bytes
        assert (log.high_watermark, log.log_end_offset) == (hw, leo)
        assert {pid: (e.producer_epoch, e.last_seq, e.last_offset)
                for pid, e in log.producer_state.producers.items()} == before
        if plan is None:
            return
        end = plan.end_offset
        event("cleaned" + (" part of the dirty range" if end < log.active_segment_base_offset
                           else ""))
        latest_below: dict[bytes, int] = {}
        for offset, rec in self.records.items():
            if offset < end:
                latest_below[rec.key] = max(latest_below.get(rec.key, -1), offset)
        for record, _batch_base, _pid in read_log(log):
            if record.offset >= end:
                continue
            assert record.offset == latest_below[record.key], (record, latest_below)
            if record.value is None:
                stamped = self.stamped.setdefault(record.offset, self.now_ms)
                assert stamped + DELETE_RETENTION_MS > self.now_ms, \
                    f"tombstone kept past its horizon at {record.offset}"
                event("tombstone kept" if stamped == self.now_ms else "tombstone still young")
        if any(o < end and r.value is None and self.stamped.get(o, self.now_ms)
               + DELETE_RETENTION_MS <= self.now_ms for o, r in self.records.items()):
            event("tombstones past their horizon below the end")

    @rule(clean_shutdown=st.booleans())
    def reopen(self, clean_shutdown: bool) -> None:
        recovery_point = self.log.recovery_point
        if clean_shutdown:
            self.log.close(self.now_ms)
        else:
            self.log.flush(self.now_ms)  # what was acknowledged is on disk
            recovery_point = self.log.recovery_point
            self.log.close_without_flush()
        self.log = PartitionLog.open(self.dir, "t", 0, self.config, self.now_ms,
                                     recovery_point=recovery_point,
                                     high_watermark=max(self.records, default=-1) + 1,
                                     clean_shutdown=clean_shutdown)
        for pid, batch in self.last_batch_bytes.items():  # a retry is still a duplicate
            _seq, base, last = self.producers[pid]
            info = self.log.append_as_leader(batch, 0, self.now_ms)
            assert info.duplicate and (info.first_offset, info.last_offset) == (base, last)

    # ------------------------------------------------------------- invariants

    @invariant()
    def a_compaction_of_what_was_appended(self) -> None:
        if not hasattr(self, "log"):
            return
        seen: list[int] = []
        present: dict[int, bytes | None] = {}
        for record, batch_base, _pid in read_log(self.log):
            appended = self.records.get(record.offset)
            assert appended is not None, f"offset {record.offset} was never appended"
            assert (record.key, record.value, record.timestamp_ms) == (
                appended.key, appended.value, appended.timestamp_ms)
            assert batch_base == appended.batch_base  # batches keep their base offsets
            seen.append(record.offset)
            present[record.offset] = record.value
        assert seen == sorted(set(seen)), "offsets must rise, each once"
        latest: dict[bytes, int] = {}
        for offset, rec in self.records.items():
            latest[rec.key] = max(latest.get(rec.key, -1), offset)
        for key, offset in latest.items():
            rec = self.records[offset]
            expired = self.stamped.get(offset, self.now_ms) + DELETE_RETENTION_MS \
                <= self.now_ms
            if rec.value is not None or not expired:
                assert offset in present, f"the latest record of {key!r} ({offset}) is gone"

    @invariant()
    def producers_are_known(self) -> None:
        if not hasattr(self, "log"):
            return
        state = self.log.producer_state.producers
        batches = set(read_batch_spans(self.log))
        for pid, (next_seq, base, last) in self.producers.items():
            assert (base, last, pid) in batches, f"producer {pid}'s last batch is gone"
            entry = state[pid]
            assert (entry.last_seq, entry.batches[-1].first_offset, entry.last_offset) == (
                next_seq - 1, base, last)


CleanerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestCleaner = CleanerMachine.TestCase
