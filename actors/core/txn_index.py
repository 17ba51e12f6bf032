"""A partition's transactions: the ongoing ones, the last stable offset, the aborted index.

Pure (files, no clock, no logging), owned by one PartitionLog.

* Ongoing: per producer id, the first offset of its open transaction (set by
  its first transactional batch, cleared by its commit or abort marker). The
  last stable offset (LSO) is the smallest of them, or the high watermark.
* Aborted: one entry per aborted transaction (producer id, first offset,
  the marker's offset, the LSO after it), in Kafka's ``.txnindex`` layout:
  per segment (the one holding the marker), 34-byte entries of version int16
  (0), producer id int64, first offset int64, last offset int64, last stable
  offset int64. A read_committed Fetch answers the entries that overlap the
  range it reads, so the client can drop the aborted records.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def txn_index_path(directory: Path, segment_base: int) -> Path:
    return directory / f"{segment_base:020d}{TXN_INDEX_SUFFIX}"


def read_txn_index(path: Path) -> list[AbortedTxn]:
    """Entries of one file; a torn last entry (a crash mid-write) is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % _ENTRY.size
    return [AbortedTxn(*fields[1:]) for fields in _ENTRY.iter_unpack(data[:whole])
            if fields[0] == 0]


def write_txn_index(path: Path, entries: list[AbortedTxn]) -> None:
    """A whole file of ``entries`` (a cleaned segment's, in staging), fsynced."""
    with open(path, "wb") as f:
        f.write(b"".join(_ENTRY.pack(0, *e) for e in entries))
        f.flush()
        os.fsync(f.fileno())


def entries_by_segment(entries: list[AbortedTxn],
                       bases: list[int]) -> dict[int, list[AbortedTxn]]:
    """Each of ``bases`` (ascending) with the entries whose marker it holds (the largest
    base at or below the marker's offset); entries below the first base are left out."""
    held: dict[int, list[AbortedTxn]] = {base: [] for base in bases}
    for entry in entries:
        i = bisect_right(bases, entry.last_offset) - 1
        if i >= 0:
            held[bases[i]].append(entry)
    return held


class TransactionIndex:
    """The ongoing transactions and aborted entries of one partition."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its transaction
        self.aborted: list[AbortedTxn] = []  # ascending last offset
        self.segment_of: list[int] = []  # the segment base holding each aborted entry

    # --- state ------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_transactional_batch(self, producer_id: int, base_offset: int) -> None:
        self.ongoing.setdefault(producer_id, base_offset)

    def on_marker(self, producer_id: int, commit: bool, marker_offset: int,
                  segment_base: int, persist: bool = True) -> AbortedTxn | None:
        """A commit or abort marker at ``marker_offset``; an abort is indexed."""
        first = self.ongoing.pop(producer_id, None)
        if commit or first is None:
            return None
        unstable = self.first_unstable_offset()
        entry = AbortedTxn(producer_id, first, marker_offset,
                           marker_offset + 1 if unstable is None else unstable)
        self.aborted.append(entry)
        self.segment_of.append(segment_base)
        if persist:
            with open(txn_index_path(self.dir, segment_base), "ab") as f:
                f.write(_ENTRY.pack(0, *entry))
        return entry

    def collect_aborted(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_offset)."""
        start = bisect_left([a.last_offset for a in self.aborted], fetch_offset)
        return [a for a in self.aborted[start:] if a.first_offset < upper_offset]

    def aborted_between(self, marker_from: int, first_below: int) -> list[AbortedTxn]:
        """The entries whose marker is at or above ``marker_from`` and whose transaction
        begins below ``first_below`` (found by bisection: entries ascend by marker)."""
        start = bisect_left(self.aborted, marker_from, key=lambda a: a.last_offset)
        return [a for a in self.aborted[start:] if a.first_offset < first_below]

    # --- load, truncation, retention -----------------------------------------

    def load(self, segment_bases: list[int], keep_below: int) -> None:
        """Entries from the segments' files whose marker lies below ``keep_below``; the
        rest is rebuilt by the caller's scan (on_marker) from there on (after a crash,
        a truncation, or without a snapshot)."""
        self.aborted, self.segment_of = [], []
        for base in segment_bases:
            entries = read_txn_index(txn_index_path(self.dir, base))
            kept = [e for e in entries if e.last_offset < keep_below]
            if len(kept) != len(entries):
                self._rewrite(base, kept)
            self.aborted.extend(kept)
            self.segment_of.extend([base] * len(kept))

    def drop_segment(self, segment_base: int) -> None:
        """The segment was deleted: its file and entries go."""
        txn_index_path(self.dir, segment_base).unlink(missing_ok=True)
        keep = [i for i, b in enumerate(self.segment_of) if b != segment_base]
        self.aborted = [self.aborted[i] for i in keep]
        self.segment_of = [self.segment_of[i] for i in keep]

    def replace_segments(self, old_bases: list[int], new_bases: list[int],
                         dropped: Collection[int] = ()) -> None:
        """The cleaner swapped ``old_bases`` (consecutive) for ``new_bases``, moving each
        entry's file content into the new segment now holding its marker (the swap moved
        the files): only the owning segment changes. The entries whose marker offset is
        in ``dropped`` (the cleaner dropped the marker) go."""
        gone = set(old_bases)
        if dropped:
            gone_markers = set(dropped)
            keep = [i for i, (entry, base) in enumerate(zip(self.aborted, self.segment_of,
                                                              strict=True))
                    if base not in gone or entry.last_offset not in gone_markers]
            self.aborted = [self.aborted[i] for i in keep]
            self.segment_of = [self.segment_of[i] for i in keep]
        ordered = sorted(new_bases)
        for i, base in enumerate(self.segment_of):
            if base in gone:
                self.segment_of[i] = ordered[
                    max(bisect_right(ordered, self.aborted[i].last_offset) - 1, 0)]

    def cleaned_entries(self, old_bases: list[int], new_bases: list[int],
                        dropped: Collection[int] = ()) -> dict[int, list[AbortedTxn]]:
        """For a cleaner swap of ``old_bases`` (consecutive) by ``new_bases``: each new
        segment with the entries whose marker it will hold (every entry of the old
        segments but those whose marker offset is in ``dropped``: the cleaner dropped
        those markers, past their delete horizon), for its staged ``.txnindex``."""
        gone = set(old_bases)
        gone_markers = set(dropped)
        ordered = sorted(new_bases)
        held: dict[int, list[AbortedTxn]] = {base: [] for base in ordered}
        for entry, base in zip(self.aborted, self.segment_of, strict=True):
            if base in gone and entry.last_offset not in gone_markers:
                held[ordered[max(bisect_right(ordered, entry.last_offset) - 1, 0)]].append(entry)
        return held

    def clear(self) -> None:
        for base in set(self.segment_of):
            txn_index_path(self.dir, base).unlink(missing_ok=True)
        self.ongoing.clear()
        self.aborted, self.segment_of = [], []

    def _rewrite(self, base: int, entries: list[AbortedTxn]) -> None:
        path = txn_index_path(self.dir, base)
        if not entries:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(_ENTRY.pack(0, *e) for e in entries))
        os.replace(tmp, path)
