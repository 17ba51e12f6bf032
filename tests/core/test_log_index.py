"""The mapped offset and time indexes against in-memory models, and their file rules."""

from __future__ import annotations

import os
import shutil
import struct
from bisect import bisect_right
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from actors.core import log_index
from actors.core.log_index import SMALL_INDEX_BYTES, OffsetIndex, TimeIndex
from tests.fixtures.scratch import scratch_dir

BASE = 1_000


class IndexMachine(RuleBasedStateMachine):
    """Appends, lookups (in any order, so the guesses miss as often as they hit),
    truncations, seals, crashes and reloads of both indexes, against two lists."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_dir("index-prop-")  # in memory: tests/fixtures/scratch.py
        self.offsets_model: list[tuple[int, int]] = []  # (offset, position)
        self.times_model: list[tuple[int, int]] = []  # (timestamp, offset)

    def teardown(self) -> None:
        if hasattr(self, "index"):
            self.index.close(trim=False)
            self.times.close(trim=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    @initialize(max_bytes=st.sampled_from([24, 80, 200, 4096]), map_all=st.booleans())
    def open_indexes(self, max_bytes: int, map_all: bool) -> None:
        self.max_bytes = max_bytes
        # Finished indexes this small are read whole, not mapped: map them too, sometimes.
        self.read_whole_up_to = 0 if map_all else SMALL_INDEX_BYTES
        self.index = OffsetIndex(self.tmp / "0.index", BASE, max_bytes)
        self.times = TimeIndex(self.tmp / "0.timeindex", BASE, max_bytes)
        self.index.read_whole_up_to = self.times.read_whole_up_to = self.read_whole_up_to
        self.index.open_writable()
        self.times.open_writable()

    def _writable(self) -> None:
        self.index.open_writable()
        self.times.open_writable()

    @rule(offset_gap=st.integers(1, 50), position_gap=st.integers(1, 5000),
          ts_step=st.integers(-20, 30), roll=st.booleans())
    def append(self, offset_gap: int, position_gap: int, ts_step: int, roll: bool) -> None:
        self._writable()
        last_offset, last_position = self.offsets_model[-1] if self.offsets_model else (
            BASE - offset_gap, -position_gap)
        offset, position = last_offset + offset_gap, last_position + position_gap
        was_full = self.index.is_full
        self.index.append(offset, position)
        if not was_full:
            self.offsets_model.append((offset, position))
        assert self.index.is_full == (len(self.offsets_model) >= self.max_bytes // 8)
        last_ts = self.times_model[-1][0] if self.times_model else -1
        timestamp = max(last_ts + ts_step, -1)
        last_time_offset = self.times_model[-1][1] if self.times_model else BASE
        time_offset = max(offset, last_time_offset)
        room = self.max_bytes // 12 - (0 if roll else 1)
        self.times.maybe_append(timestamp, time_offset, roll=roll)
        if timestamp > last_ts and len(self.times_model) < room:
            self.times_model.append((timestamp, time_offset))

    @rule(data=st.data())
    def lookup_offset(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(BASE - 5, BASE + 60 * max(len(self.offsets_model), 1)))
        keys = [o for o, _ in self.offsets_model]
        slot = bisect_right(keys, target) - 1
        expected = self.offsets_model[slot] if slot >= 0 else (BASE, 0)
        assert self.index.lookup(target) == expected

    @rule(data=st.data())
    def lookup_position(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(-5, 5000 * max(len(self.offsets_model), 1)))
        positions = [p for _, p in self.offsets_model]
        slot = bisect_right(positions, target) - 1
        assert self.index.position_at_most(target) == (positions[slot] if slot >= 0 else 0)

    @rule(data=st.data())
    def lookup_timestamp(self, data: st.DataObject) -> None:
        top = self.times_model[-1][0] + 5 if self.times_model else 5
        target = data.draw(st.integers(-3, top))
        keys = [t for t, _ in self.times_model]
        slot = bisect_right(keys, target) - 1
        assert self.times.lookup(target) == (self.times_model[slot][1] if slot >= 0 else BASE)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        """Cut at a position, and the time index at the offset found there."""
        self._writable()
        top = self.offsets_model[-1][1] + 10 if self.offsets_model else 10
        position = data.draw(st.integers(0, top))
        self.index.truncate_to_position(position)
        self.offsets_model = [e for e in self.offsets_model if e[1] < position]
        offset = data.draw(st.integers(BASE, BASE + 60 * (len(self.times_model) + 1)))
        self.times.truncate_to_offset(offset)
        self.times_model = [e for e in self.times_model if e[1] < offset]

    @rule()
    def seal_and_reload(self) -> None:
        """Roll or clean close: trimmed files, loaded as a finished segment's."""
        self.index.seal()
        self.times.seal()
        assert self.index.path.stat().st_size == 8 * len(self.offsets_model)
        assert self.times.path.stat().st_size == 12 * len(self.times_model)
        self._reload()

    @rule()
    def crash_and_reload(self) -> None:
        """A crash leaves the preallocated files: zeros after the entries, trimmed on load."""
        self._writable()
        self.index.close(trim=False)
        self.times.close(trim=False)
        assert self.index.path.stat().st_size == max(self.max_bytes // 8,
                                                     len(self.offsets_model)) * 8
        self._reload()
        # Zeros alone read as one entry of zeros (the segment tells it from a real
        # one by its first batch): from here on the model has it too.
        if not self.offsets_model:
            self.offsets_model = [(BASE, 0)]
        if not self.times_model and self.max_bytes // 12:
            self.times_model = [(0, BASE)]
        assert self.index.path.stat().st_size == 8 * len(self.offsets_model)

    def _reload(self) -> None:
        self.index = OffsetIndex(self.tmp / "0.index", BASE, self.max_bytes)
        self.times = TimeIndex(self.tmp / "0.timeindex", BASE, self.max_bytes)
        self.index.read_whole_up_to = self.times.read_whole_up_to = self.read_whole_up_to
        assert self.index.load() and self.times.load()
        assert not self.index.is_open and not self.times.is_open

    @rule()
    def release(self) -> None:
        """A finished index unmapped, mapped again by its next lookup."""
        self.index.release()
        self.times.release()

    @invariant()
    def entries_match(self) -> None:
        if not hasattr(self, "index"):
            return
        assert self.index.all_entries() == self.offsets_model
        assert self.times.all_entries() == self.times_model
        last = self.offsets_model[-1] if self.offsets_model else (BASE, 0)
        assert (self.index.last_offset, self.index.last_position) == last
        last_time = self.times_model[-1] if self.times_model else (-1, BASE)
        assert (self.times.last_timestamp, self.times.last_offset) == last_time


IndexMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestIndexModel = IndexMachine.TestCase


# -- loading a file -----------------------------------------------------------------


def write_index(path: Path, entries: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries) + tail)


def test_load_trims_the_zeros_a_crash_leaves(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    write_index(path, [(0, 0), (3, 100), (9, 250)], bytes(8 * 1000))
    index = OffsetIndex(path, 0, 10 * 1024 * 1024)
    assert index.load()
    assert index.entries == 3 and path.stat().st_size == 24
    assert index.lookup(8) == (3, 100)


@pytest.mark.parametrize(("entries", "tail"), [
    ([(0, 0), (3, 100)], b"\x00" * 5),  # not whole entries
    ([(0, 0), (3, 100), (2, 150)], b""),  # offsets go back
    ([(0, 0), (3, 100), (5, 100)], b""),  # positions stand still
    ([(0, 0), (3, 100)], bytes(16) + struct.pack(">ii", 7, 300)),  # data after the zeros
    ([(1, 0), (3, 100)], b""),  # the first entry must be the segment's first batch
    ([(0, 0), (-4, 100)], b""),  # a negative offset
])
def test_load_refuses_a_corrupt_offset_index(tmp_path: Path, entries: list[tuple[int, int]],
                                             tail: bytes) -> None:
    path = tmp_path / "0.index"
    write_index(path, entries, tail)
    assert not OffsetIndex(path, 0, 4096).load()


def test_load_refuses_a_missing_index(tmp_path: Path) -> None:
    assert not OffsetIndex(tmp_path / "0.index", 0, 4096).load()
    assert not TimeIndex(tmp_path / "0.timeindex", 0, 4096).load()


@pytest.mark.parametrize("entries", [
    [(10, 0), (10, 4)],  # timestamps must grow
    [(10, 4), (20, 2)],  # offsets must not go back
    [(-5, 0)],  # no entry for "no timestamp"
])
def test_load_refuses_a_corrupt_time_index(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    path = tmp_path / "0.timeindex"
    path.write_bytes(b"".join(struct.pack(">qi", t, o) for t, o in entries))
    assert not TimeIndex(path, 0, 4096).load()


def test_time_index_keeps_its_last_slot_for_the_roll(tmp_path: Path) -> None:
    times = TimeIndex(tmp_path / "0.timeindex", 0, 36)  # three entries
    times.open_writable()
    for ts in (10, 20, 30):
        times.maybe_append(ts, ts)
    assert times.all_entries() == [(10, 10), (20, 20)] and times.is_full
    times.maybe_append(40, 40, roll=True)
    assert times.all_entries() == [(10, 10), (20, 20), (40, 40)]
    times.seal()
    assert (tmp_path / "0.timeindex").stat().st_size == 36



def test_each_reserved_chunk_is_read_into_the_page_cache_and_left_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reserving reads the new chunk (its pages are then cached when the map writes the
    entries): exactly the chunk, from the file itself, changing nothing in it."""
    monkeypatch.setattr(log_index, "ALLOCATE_CHUNK", 20)  # not a whole number of entries
    reads: list[tuple[int, int, int]] = []
    real_pread = os.pread

    def pread(fd: int, length: int, position: int) -> bytes:
        reads.append((os.fstat(fd).st_ino, position, length))
        return real_pread(fd, length, position)

    monkeypatch.setattr(log_index.os, "pread", pread)
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 800)
    index.open_writable()
    inode = path.stat().st_ino
    entries = [(i * 3, i * 100) for i in range(40)]
    covered = 0
    for n, (offset, position) in enumerate(entries, 1):
        reserved_before = index.reserved_entries
        index.append(offset, position)
        assert index.all_entries() == entries[:n]
        if index.reserved_entries != reserved_before:  # a new chunk: read whole, in order
            chunk = reads[-1]
            assert chunk[0] == inode and chunk[1] == reserved_before * 8
            assert chunk[1] + chunk[2] >= index.reserved_entries * 8
            covered = chunk[1] + chunk[2]
        assert covered >= n * 8
    assert path.read_bytes()[:40 * 8] == b"".join(struct.pack(">ii", o, p) for o, p in entries)
    index.seal()
    assert OffsetIndex(path, 0, 800).load()
