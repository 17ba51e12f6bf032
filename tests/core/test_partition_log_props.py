"""Property test: the partition log against an in-memory list of batches.

Random sequences of appends (leader and follower), reads, lookups by
timestamp, high watermark moves, truncations, rolls, retention and clean or
unclean restarts must keep every read equal to what the model says, and every
segment's offset and time index true to its batches.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.core.log_index import SMALL_INDEX_BYTES, OffsetIndex, TimeIndex
from actors.core.partition_log import OPEN_INDEXES_PER_LOG, LogConfig, PartitionLog
from actors.core.record_batch import build_batch, check_batches, patch_base_offset
from tests.fixtures.scratch import scratch_dir


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int
    last_offset: int
    tail: bytes  # bytes from the CRC on: leader append must not change them
    size: int
    max_timestamp: int


class PartitionLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir("plog-prop-")  # in memory: tests/fixtures/scratch.py
        self.dir = self.tmp / "t-0"
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.hw = 0
        self.leo = 0
        self.now_ms = 1_000
        self.counter = 0

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close_without_flush()
        shutil.rmtree(self.tmp, ignore_errors=True)
        OffsetIndex.read_whole_up_to = TimeIndex.read_whole_up_to = SMALL_INDEX_BYTES

    @initialize(
        segment_bytes=st.integers(460, 1200),
        index_interval_bytes=st.sampled_from([0, 64, 200, 4096]),
        segment_index_bytes=st.sampled_from([24, 40, 10 * 1024 * 1024]),
        map_all=st.booleans(),
        retention_bytes=st.sampled_from([-1, 600, 2000]),
        retention_ms=st.sampled_from([-1, 50, 10_000]),
    )
    def open_log(self, segment_bytes: int, index_interval_bytes: int, segment_index_bytes: int,
                 map_all: bool, retention_bytes: int, retention_ms: int) -> None:
        # Finished indexes this small are read whole, not mapped: map them too, sometimes
        # (the partition log keeps at most OPEN_INDEXES_PER_LOG mapped).
        if map_all:
            OffsetIndex.read_whole_up_to = TimeIndex.read_whole_up_to = 0
        self.config = LogConfig(segment_bytes=segment_bytes,
                                index_interval_bytes=index_interval_bytes,
                                segment_index_bytes=segment_index_bytes,
                                retention_bytes=retention_bytes, retention_ms=retention_ms)
        self.log = PartitionLog.open(self.dir, "t", 0, self.config, self.now_ms)

    def _new_batch(self, n: int, value_size: int, age: int = 0) -> bytes:
        """Records stamped ``age`` ms before now (timestamps do not always grow)."""
        self.counter += 1
        values = [self.counter.to_bytes(4, "big") + bytes([i]) * value_size for i in range(n)]
        return build_batch(values, timestamps_ms=[max(self.now_ms - age, 0)] * n)

    def _remember(self, raw: bytes, first_offset: int) -> None:
        offset = first_offset
        for h in check_batches(raw):
            last = offset + h.last_offset_delta
            self.batches.append(ModelBatch(offset, last, raw[h.position + 17:h.position + h.size],
                                           h.size, h.max_timestamp))
            offset = last + 1
        self.leo = offset

    @rule(sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 20), st.integers(0, 40)),
                         min_size=1, max_size=3),
          epoch=st.integers(0, 3), advance=st.integers(0, 30))
    def append_as_leader(self, sizes: list[tuple[int, int, int]], epoch: int,
                         advance: int) -> None:
        self.now_ms += advance
        raw = b"".join(self._new_batch(n, size, age) for n, size, age in sizes)
        info = self.log.append_as_leader(raw, epoch, self.now_ms)
        assert info.first_offset == self.leo
        self._remember(raw, self.leo)
        assert info.last_offset == self.leo - 1

    @rule(n=st.integers(1, 3), size=st.integers(0, 20), age=st.integers(0, 40))
    def append_as_follower(self, n: int, size: int, age: int) -> None:
        raw = bytearray(self._new_batch(n, size, age))
        patch_base_offset(raw, 0, self.leo)
        self.log.append_as_follower(bytes(raw), self.now_ms)
        self._remember(bytes(raw), self.leo)

    @rule(data=st.data(), max_bytes=st.integers(0, 1500), capped=st.booleans(),
          min_one=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, capped: bool, min_one: bool) -> None:
        fetch = data.draw(st.integers(self.log_start, self.leo))
        max_offset = self.hw if capped else None
        got = self.log.read(fetch, max_bytes, max_offset, min_one).records
        hs = check_batches(got)
        allowed = [b for b in self.batches if b.last_offset >= fetch
                   and (max_offset is None or b.last_offset < max_offset)]
        assert len(hs) <= len(allowed)
        for h, want in zip(hs, allowed[:len(hs)], strict=True):
            assert (h.base_offset, h.last_offset) == (want.base_offset, want.last_offset)
            assert bytes(got[h.position + 17:h.position + h.size]) == want.tail
        if hs:
            assert len(got) <= max_bytes or len(hs) == 1
            assert min_one or len(got) <= max_bytes
        elif allowed:
            # Nothing returned although batches exist: only when none fits.
            assert not min_one and allowed[0].size > max_bytes

    @rule(data=st.data(), max_bytes=st.integers(0, 1500), capped=st.booleans(),
          min_one=st.booleans(), region_min_bytes=st.sampled_from([0, 1, 200]))
    def read_region(self, data: st.DataObject, max_bytes: int, capped: bool, min_one: bool,
                    region_min_bytes: int) -> None:
        """A read as a file region holds exactly the bytes the same read returns."""
        fetch = data.draw(st.integers(self.log_start, self.leo))
        max_offset = self.hw if capped else None
        want = bytes(self.log.read(fetch, max_bytes, max_offset, min_one).records)
        info = self.log.read(fetch, max_bytes, max_offset, min_one,
                             region_min_bytes=region_min_bytes)
        if info.region is None:
            assert bytes(info.records) == want
            assert len(want) < max(region_min_bytes, 1)
            return
        region = info.region
        try:
            assert info.records == b""
            assert region.length >= region_min_bytes and region.length > 0
            assert os.pread(region.fd, region.length, region.position) == want
        finally:
            os.close(region.fd)

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        """The first record at or after a time; records of a batch share its timestamp."""
        target = data.draw(st.integers(0, self.now_ms + 5))
        want = next(((max(b.base_offset, self.log_start), b.max_timestamp)
                     for b in self.batches if b.max_timestamp >= target), None)
        assert self.log.offset_for_timestamp(target) == want

    @rule(data=st.data())
    def update_high_watermark(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log_start - 2, self.leo + 2))
        self.hw = min(max(target, self.log_start), self.leo)
        assert self.log.update_high_watermark(target) == self.hw

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(max(self.log_start - 1, 0), self.leo + 1))
        self.log.truncate_to(target, self.now_ms)
        if target >= self.leo:
            return
        if target < self.log_start:
            self.batches, self.log_start, self.leo, self.hw = [], target, target, target
            return
        kept = [b for b in self.batches if b.last_offset < target]
        self.leo = self.batches[len(kept)].base_offset if len(kept) < len(self.batches) \
            else self.leo
        self.batches = kept
        self.hw = min(self.hw, self.leo)

    @rule(offset=st.integers(0, 500))
    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset, self.now_ms)
        self.batches, self.log_start, self.leo, self.hw = [], offset, offset, offset

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now_ms)

    @rule(advance=st.integers(0, 200))
    def delete_old_segments(self, advance: int) -> None:
        self.now_ms += advance
        old_start = self.log_start
        self.log.delete_old_segments(self.now_ms)
        new_start = self.log.log_start_offset
        assert old_start <= new_start <= self.hw
        assert new_start == self.leo or any(b.base_offset == new_start for b in self.batches) \
            or new_start == old_start
        self.batches = [b for b in self.batches if b.last_offset >= new_start]
        self.log_start = new_start

    @rule(clean=st.booleans(), flush=st.booleans())
    def restart(self, clean: bool, flush: bool) -> None:
        log = self.log
        checkpoint = {"recovery_point": log.recovery_point,
                      "log_start_offset": log.log_start_offset,
                      "high_watermark": log.high_watermark}
        if clean:
            log.close(self.now_ms)
            checkpoint["recovery_point"] = log.recovery_point
        else:
            if flush:
                log.flush(self.now_ms)
                checkpoint["recovery_point"] = log.recovery_point
            log.close_without_flush()
        self.log = PartitionLog.open(self.dir, "t", 0, self.config, self.now_ms,
                                     clean_shutdown=clean, **checkpoint)

    @invariant()
    def offsets_match(self) -> None:
        if not hasattr(self, "log"):
            return
        log = self.log
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
            self.log_start, self.hw, self.leo)
        assert log.log_start_offset <= log.recovery_point <= log.log_end_offset or \
            log.recovery_point == log.log_start_offset

    @precondition(lambda self: hasattr(self, "log"))
    @invariant()
    def indexes_match_batches(self) -> None:
        """Offset entries name batch starts, from (base, 0) on; each time entry holds
        the largest timestamp up to the batch it names, the first batch to reach it;
        only the active segment's indexes are writable, finished ones are trimmed."""
        finished = self.log.segments[:-1]
        was_mapped = [s.indexes_open for s in finished]
        assert sum(was_mapped) <= OPEN_INDEXES_PER_LOG
        for i, segment in enumerate(self.log.segments):
            headers = list(segment.iter_headers(0, segment.size))
            starts = {h.position: h.base_offset for h in headers}
            entries = segment.index_entries()
            assert all(starts.get(p) == o for o, p in entries), (entries, starts)
            assert entries == sorted(set(entries))
            assert not headers or entries[0] == (segment.base_offset, 0)
            running, best = -1, []
            for h in headers:
                if h.max_timestamp > running:
                    running = h.max_timestamp
                best.append((running, h))
            for ts, offset in segment.time_index_entries():
                upto = [(r, h) for r, h in best if h.base_offset <= offset]
                assert upto and upto[-1][1].last_offset >= offset and upto[-1][0] == ts
                first = next(h for r, h in best if r == ts)
                assert first.last_offset == offset
            assert segment.max_timestamp_ms == running
            active = i + 1 == len(self.log.segments)
            assert segment.offset_index.writable == active == segment.time_index.writable
            if not active:
                size = segment.index_path.stat().st_size
                assert size == 8 * len(entries)
        for segment, mapped in zip(finished, was_mapped, strict=True):
            if not mapped:
                segment.release_indexes()  # as the log left them

    @precondition(lambda self: hasattr(self, "log"))
    @invariant()
    def full_scan_matches(self) -> None:
        seen: list[tuple[int, int, bytes]] = []
        offset = self.log_start
        while offset < self.leo:
            got = self.log.read(offset, 10_000).records
            hs = check_batches(got)
            assert hs, f"no batch at {offset} below the LEO {self.leo}"
            for h in hs:
                seen.append((h.base_offset, h.last_offset,
                             bytes(got[h.position + 17:h.position + h.size])))
            offset = hs[-1].next_offset
        want = [(b.base_offset, b.last_offset, b.tail) for b in self.batches]
        # The first batch may start below the log start (retention keeps whole batches).
        assert seen == want


PartitionLogMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPartitionLogModel = PartitionLogMachine.TestCase
