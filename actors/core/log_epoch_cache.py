"""The leader epoch cache: which offset each leader epoch started at.

A follower asks the leader for the end offset of its latest epoch and
truncates there before fetching again (KIP-101/279), so the cache must
survive restarts: it is kept in ``leader-epoch-checkpoint`` in the
partition's directory and rewritten (atomically) on every change, which is
rare (once per leader change, truncation or retention step).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from pathlib import Path

from actors.core.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start_offset) entries, both strictly increasing."""

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT if directory is not None else None
        self.entries: list[tuple[int, int]] = []
        if self.path is not None:
            self.entries = _monotonic(read_epoch_checkpoint(self.path))

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def epochs(self) -> list[int]:
        return [epoch for epoch, _ in self.entries]

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset``; returns True if the cache changed.

        A new entry removes every entry with an epoch or start offset not
        below it, so the cache stays monotonic (as Kafka's does).
        """
        if epoch < 0:
            return False
        if self.entries and self.entries[-1][0] == epoch and self.entries[-1][1] <= start_offset:
            return False
        kept = self.entries
        while kept and (kept[-1][0] >= epoch or kept[-1][1] >= start_offset):
            kept = kept[:-1]
        self.entries = [*kept, (epoch, start_offset)]
        self._persist()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers it."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self.entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = self.epochs()
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self.entries[higher][1]
        if higher == 0:
            return requested_epoch, higher_start
        return self.entries[higher - 1][0], higher_start

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in: the entry with the greatest
        start offset not above it (Kafka's ``epochForOffset``); UNDEFINED_EPOCH when
        ``offset`` is below every entry. The caller knows the log holds ``offset``."""
        offsets = [o for _, o in self.entries]
        at = bisect_right(offsets, offset)
        return self.entries[at - 1][0] if at else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (log truncated there)."""
        offsets = [o for _, o in self.entries]
        keep = bisect_left(offsets, end_offset)
        if keep < len(self.entries):
            del self.entries[keep:]
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there."""
        offsets = [o for _, o in self.entries]
        below = bisect_right(offsets, start_offset)  # entries starting at or before it
        if below == 0:
            return
        epoch, offset = self.entries[below - 1]
        if below == 1 and offset == start_offset:
            return
        self.entries = [(epoch, start_offset), *self.entries[below:]]
        self._persist()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._persist()

    def _persist(self) -> None:
        if self.path is not None:
            write_epoch_checkpoint(self.path, self.entries)


def _monotonic(entries: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop entries that break monotonicity (an old file written by a buggy writer)."""
    out: list[tuple[int, int]] = []
    for epoch, offset in entries:
        while out and (out[-1][0] >= epoch or out[-1][1] > offset):
            out.pop()
        out.append((epoch, offset))
    return out
