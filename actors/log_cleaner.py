"""LogCleaner: Kafka's log cleaner for one log dir (``cleanup.policy`` compact).

Every ``log.cleaner.backoff.ms`` (at once after a cleaning) it asks each
partition shard for its compacted logs (``CleanableLogs``), reads the
recovery-point checkpoint (it cleans no further) and its own
``cleaner-offset-checkpoint``, and picks the dirtiest log
(actors/core/log_cleaner.py). A pass then runs in steps from this actor's
own thread, one ``log.cleaner.io.buffer.size`` read at a time, answering its
mailbox between steps.

Reading: the shards own the logs, but the segments the cleaner reads are
closed ones, which nothing changes any more; the cleaner opens their files
read-only by path and writes its copies into a staging directory. Nothing it
does touches the files a shard uses.

Swapping: the shard does it, in its own thread (``SwapCleanedSegments``):
it checks the log still has those segments unchanged (retention, DeleteRecords
or a truncation may have taken them meanwhile: then the copy is discarded),
commits the swap manifest, moves the new files in, deletes the old ones and
opens the new segments; a few renames and fsyncs, so its appends wait for
milliseconds, not for the cleaning. A crash at any point leaves the old
segments or the new ones, never a mix (actors/core/segment_swap.py). The
cleaner waits for the answer at most ``swap_timeout_ms``, then goes on with
the other logs: it leaves the staging directory to the shard (which may still
swap it in, or refuse and discard it), and an answer come late still moves
the checkpoint if the swap was done.

Truncation: a shard that truncates a log (a follower's) says so
(``CleanerLogTruncated``); a checkpoint above the log's new active segment is
lowered to it, so the records written again there are dirty (Kafka's
maybeTruncateCheckpoint).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, NamedTuple

from actors.core.checkpoint import (
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offset_checkpoint,
)
from actors.core.log_cleaner import (
    CleanableLog,
    CleanerError,
    CleaningPass,
    PassStats,
    SegmentInfo,
    SwapPlan,
    choose_filthiest,
    map_capacity,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from actors.core.log_dir import partition_dir_name
from actors.core.txn_index import AbortedTxn
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import Clock
from actors.runtime.config import Config
from actors.topology import Topology
from wire.admin_messages import (
    CleanableLogRow,
    CleanableLogs,
    CleanableLogsDone,
    CleanerCheckpointRow,
    CleanerLogTruncated,
    SegmentRow,
    SwapCleanedSegments,
    SwapCleanedSegmentsDone,
)
from wire.broker_messages import GetStats


def cleanable_row(c: CleanableLog) -> CleanableLogRow:
    """A shard's report of one compacted log, as it crosses to the cleaner."""
    return CleanableLogRow(
        c.topic, c.partition, str(c.directory), [SegmentRow(*s) for s in c.segments],
        c.active_base_offset, c.log_start_offset, c.last_stable_offset, c.generation,
        c.min_cleanable_dirty_ratio, c.delete_retention_ms, c.min_compaction_lag_ms,
        c.segment_bytes, c.index_interval_bytes, c.segment_index_bytes,
        [[pid, last, c.producer_epochs.get(pid, -1)]
         for pid, last in c.producer_last_offsets.items()],
        [list(entry) for entry in c.aborted])


def cleanable_from_row(row: CleanableLogRow) -> CleanableLog:
    return CleanableLog(
        row.topic, row.partition, Path(row.directory),
        tuple(SegmentInfo(*s) for s in row.segments), row.active_base_offset,
        row.log_start_offset, row.last_stable_offset, row.generation,
        row.min_cleanable_dirty_ratio, row.delete_retention_ms, row.min_compaction_lag_ms,
        row.segment_bytes, row.index_interval_bytes, row.segment_index_bytes,
        {pid: last for pid, last, _epoch in row.producer_last_offsets},
        tuple(AbortedTxn(*entry) for entry in row.aborted_txns),
        {pid: epoch for pid, _last, epoch in row.producer_last_offsets})


class AskedSwap(NamedTuple):
    """What the answer to a swap needs of its pass: not the pass, whose key map (up to
    ``log.cleaner.dedupe.buffer.size``) would otherwise live as long as the answer is
    awaited, for each of the timed-out swaps still awaited."""
    topic: str
    partition: int
    plan: SwapPlan
    stats: PassStats


class LogCleaner(Actor):
    mailbox_size = 0  # unbounded: only shards answer it, once per question
    # How long a scan waits for the shards' reports. A shard that never answers (stuck, or
    # its answer refused on the way) must not stop cleaning for good: past this, the
    # reports in hand are used, the others' logs wait for a later scan.
    scan_timeout_ms = 60_000
    # How long a pass waits for its swap's answer. A shard that never answers must not
    # stop all cleaning of the node: past this, the cleaner goes on (the shard may still
    # do the swap, from the staging directory left to it; a late answer is still taken).
    swap_timeout_ms = 60_000
    max_unanswered_swaps = 16  # the timed-out swaps whose late answer is still taken

    def __init__(self, node: Any, name: str, *, topology: Topology, config: Config,
                 log_dir: Path, clock: Clock, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.config = config
        self.log_dir = log_dir
        self.clock = clock  # wall time: tombstone and compaction-lag ages, the backoff

    def setup(self) -> None:
        self.backoff_ms = int(self.config["log.cleaner.backoff.ms"])
        self.capacity = map_capacity(int(self.config["log.cleaner.dedupe.buffer.size"]))
        self.io_bytes = int(self.config["log.cleaner.io.buffer.size"])
        try:
            self.checkpoints = read_cleaner_checkpoint(self.log_dir)
        except CheckpointError as exc:
            # As Kafka's cleaner: what it had cleaned is unknown, so every log is dirty
            # from its start; cleaning again is only work, a broker refused is an outage.
            # The next pass writes the file anew.
            self.log.warning("{}; the cleaner starts with no checkpoint (its logs are "
                             "cleaned again from their start)", exc)
            self.checkpoints = {}
        self.ids = itertools.count(1)
        self.scan_id = 0
        self.waiting: set[str] = set()
        self.scan_deadline_ms = 0
        self.unanswered: set[str] = set()  # the shards the last scan gave up on
        self.scan_timeouts = 0
        self.reports: list[CleanableLog] = []
        self.next_scan_ms = self.clock.wall_ms() + self.backoff_ms
        self.current: CleaningPass | None = None
        self.swapping: tuple[int, AskedSwap] | None = None
        self.swap_deadline_ms = 0
        self.swap_timeouts = 0
        self.late_swaps: dict[int, AskedSwap] = {}  # req id -> a swap whose wait timed out
        self.failed: dict[tuple[str, int], int] = {}  # log -> generation it failed at
        self.passes = 0
        self.scans = 0
        self.steps = 0
        self.refused = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.last_ratio = 0.0

    def teardown(self) -> None:
        if self.current is not None:
            self.current.abort()
            self.current = None

    # ------------------------------------------------------------- scanning
    def poll_timeout_ms(self) -> int | None:
        if self.current is not None:
            return 0
        if self.waiting:
            return max(0, self.scan_deadline_ms - self.clock.wall_ms())
        if self.swapping is not None:
            return max(0, self.swap_deadline_ms - self.clock.wall_ms())
        return max(0, self.next_scan_ms - self.clock.wall_ms())

    def on_turn(self) -> None:
        if self.current is not None:
            self._step()
        elif self.waiting:
            if self.clock.wall_ms() >= self.scan_deadline_ms:
                self._scan_timed_out()
        elif self.swapping is not None:
            if self.clock.wall_ms() >= self.swap_deadline_ms:
                self._swap_timed_out()
        elif self.clock.wall_ms() >= self.next_scan_ms:
            self._scan()

    def _swap_timed_out(self) -> None:
        """Go on without the swap's answer. The staging directory stays: the shard may
        still be about to swap it in (deleting it under a swap would break it); a refusal
        discards it there, a restart of the log does for one never asked for."""
        assert self.swapping is not None
        req_id, asked = self.swapping
        self.swapping = None
        self.swap_timeouts += 1
        self.log.warning("no answer from {} in {} ms to the swap of cleaned segments of {}-{}; "
                         "going on with the other logs",
                         self.topology.shard_for(asked.topic, asked.partition).name,
                         self.swap_timeout_ms, asked.topic, asked.partition)
        self.late_swaps[req_id] = asked
        while len(self.late_swaps) > self.max_unanswered_swaps:
            del self.late_swaps[next(iter(self.late_swaps))]
        self.next_scan_ms = self.clock.wall_ms() + self.backoff_ms

    def _scan_timed_out(self) -> None:
        """Go on without the shards that did not answer; a later scan asks them again."""
        self.scan_timeouts += 1
        missing = sorted(self.waiting)
        if set(missing) != self.unanswered:  # once per change, not every scan
            self.log.warning("no cleanable-logs report from {} in {} ms; cleaning the logs "
                             "of the other shards, asking again in the next scan",
                             ", ".join(missing), self.scan_timeout_ms)
        self.unanswered = set(missing)
        self.waiting = set()
        self._forget_gone_logs()
        self._choose()

    def _scan(self) -> None:
        self.scans += 1
        self.scan_id = next(self.ids)
        self.reports = []
        shards = [self.topology.shard(i) for i in range(self.topology.num_shards)]
        self.waiting = {shard.name for shard in shards}
        self.scan_deadline_ms = self.clock.wall_ms() + self.scan_timeout_ms
        checkpoints: dict[str, list[CleanerCheckpointRow]] = {}
        for (topic, partition), offset in self.checkpoints.items():
            checkpoints.setdefault(self.topology.shard_for(topic, partition).name, []).append(
                CleanerCheckpointRow(topic, partition, offset))
        for shard in shards:
            self.tell(shard, CleanableLogs(self.scan_id, checkpoints.get(shard.name, [])))

    @handles(CleanableLogsDone)
    def on_report(self, msg: CleanableLogsDone) -> None:
        if msg.req_id != self.scan_id or self.current_sender is None \
                or self.current_sender.name not in self.waiting:
            return  # an earlier scan's, or one this scan stopped waiting for
        self.waiting.discard(self.current_sender.name)
        self.reports += [cleanable_from_row(row) for row in msg.rows]
        if self.waiting:
            return
        if self.unanswered:
            self.log.info("every shard reports cleanable logs again")
        self.unanswered = set()
        self._forget_gone_logs()
        self._choose()

    def _forget_gone_logs(self) -> None:
        """Drop the checkpoints of logs gone: no answering shard reported them and their
        directory is no more (Kafka keeps the checkpoints of the logs its log dir holds).
        A log not reported but still on disk keeps its checkpoint: a shard opens its logs
        only when told to lead or follow, after a restart the first scans come before
        that. The logs of a shard that did not answer keep theirs too. Only once a scan's
        reports are all in (or given up on): on part of them, the logs of the shards yet
        to answer would lose theirs."""
        reported = {log.key for log in self.reports}
        kept = {k: v for k, v in self.checkpoints.items() if k in reported
                or self.topology.shard_for(*k).name in self.unanswered
                or (self.log_dir / partition_dir_name(*k)).is_dir()}
        if kept != self.checkpoints:
            self.checkpoints = kept
            write_cleaner_checkpoint(self.log_dir, self.checkpoints)

    def _choose(self) -> None:
        now = self.clock.wall_ms()
        self.next_scan_ms = now + self.backoff_ms
        recovery_points = read_offset_checkpoint(self.log_dir / RECOVERY_POINT_OFFSET_CHECKPOINT)
        skip = [log.key for log in self.reports if self.failed.get(log.key) == log.generation]
        chosen = choose_filthiest(self.reports, self.checkpoints, recovery_points, now, skip)
        if chosen is None:
            return
        self.last_ratio = chosen.dirty_ratio
        self.log.debug("cleaning {}-{}: offsets {} to {} dirty ({:.0%} of its bytes)",
                       chosen.log.topic, chosen.log.partition, chosen.first_dirty, chosen.end,
                       chosen.dirty_ratio)
        self.current = CleaningPass(chosen, now, self.capacity, self.io_bytes, next(self.ids))

    # -------------------------------------------------------------- a pass
    def _step(self) -> None:
        cleaning = self.current
        assert cleaning is not None
        self.steps += 1
        try:
            done = cleaning.step()
        except FileNotFoundError as exc:
            # Retention or DeleteRecords took a segment meanwhile: plan again next scan.
            self.current = None
            cleaning.abort()
            self.log.info("cleaning of {}-{} abandoned: {}", cleaning.log.topic,
                          cleaning.log.partition, exc)
            return
        except (CleanerError, OSError) as exc:
            self._give_up(cleaning, str(exc))
            return
        except Exception as exc:
            self.log.exception("cleaning {}-{} failed", cleaning.log.topic, cleaning.log.partition)
            self._give_up(cleaning, repr(exc))
            return
        if not done:
            return
        self.current = None
        plan = cleaning.plan
        assert plan is not None
        req_id = next(self.ids)
        self.swapping = (req_id, AskedSwap(cleaning.log.topic, cleaning.log.partition, plan,
                                           cleaning.stats))
        self.swap_deadline_ms = self.clock.wall_ms() + self.swap_timeout_ms
        log = cleaning.log
        by_base = {s.base_offset: s for s in log.segments}
        self.tell(self.topology.shard_for(log.topic, log.partition), SwapCleanedSegments(
            req_id, log.topic, log.partition, log.generation, plan.staging,
            [SegmentRow(*by_base[base]) for base, _size in plan.old_segments],
            list(plan.new_bases), list(plan.dropped_aborts)))

    def _give_up(self, cleaning: CleaningPass, reason: str) -> None:
        """A log that cannot be cleaned is left alone until it changes (a truncation)."""
        self.current = None
        cleaning.abort()
        log = cleaning.log
        self.failed[log.key] = log.generation
        self.log.error("cannot clean {}-{}: {}; it stays as it is", log.topic, log.partition,
                       reason)

    @handles(SwapCleanedSegmentsDone)
    def on_swapped(self, msg: SwapCleanedSegmentsDone) -> None:
        if self.swapping is not None and self.swapping[0] == msg.req_id:
            asked = self.swapping[1]
            self.swapping = None
        elif msg.req_id in self.late_swaps:
            # the shard answered after the wait timed out; no other swap of the log came
            # in between (a shard answers in order), so a done one still counts
            asked = self.late_swaps.pop(msg.req_id)
            self.log.info("late answer to the swap of {}-{}: {}", msg.topic, msg.partition,
                          "swapped" if msg.swapped else msg.reason)
        else:
            return
        stats, plan = asked.stats, asked.plan
        self.bytes_read += stats.bytes_read
        if not msg.swapped:
            self.refused += 1
            self.log.info("cleaning of {}-{} discarded: {}", msg.topic, msg.partition, msg.reason)
            return
        self.passes += 1
        self.bytes_written += stats.bytes_written
        # The checkpoint follows the swap, never leads it (Kafka's order): killed in
        # between, the next pass cleans a clean range again and the same records come
        # out; written first, a refused or interrupted swap would leave dirty records
        # counted as clean. So a reader can see the cleaned segments a moment before
        # the new checkpoint.
        key = (msg.topic, msg.partition)
        self.checkpoints[key] = plan.end_offset
        write_cleaner_checkpoint(self.log_dir, self.checkpoints)
        self.log.info(
            "cleaned {}-{} up to offset {}: {} of {} records kept, {} tombstones and {} "
            "transaction markers dropped, {} -> {} bytes", msg.topic, msg.partition,
            plan.end_offset, stats.records_kept, stats.records_read,
            stats.tombstones_dropped, stats.markers_dropped,
            sum(size for _b, size in plan.old_segments), stats.bytes_written)
        self.next_scan_ms = self.clock.wall_ms()  # maybe more to do

    @handles(CleanerLogTruncated)
    def on_truncated(self, msg: CleanerLogTruncated) -> None:
        key = (msg.topic, msg.partition)
        checkpoint = self.checkpoints.get(key)
        if checkpoint is None or checkpoint <= msg.offset:
            return
        self.checkpoints[key] = msg.offset
        write_cleaner_checkpoint(self.log_dir, self.checkpoints)
        self.log.info("{}-{} truncated: its cleaner checkpoint goes from {} to {}", msg.topic,
                      msg.partition, checkpoint, msg.offset)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"passes": self.passes, "scans": self.scans, "steps": self.steps,
                "refused": self.refused, "scan_timeouts": self.scan_timeouts,
                "swap_timeouts": self.swap_timeouts, "swapping": self.swapping is not None,
                "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "last_dirty_ratio": self.last_ratio,
                "cleaning": None if self.current is None else
                f"{self.current.log.topic}-{self.current.log.partition}",
                "checkpoints": {f"{t}-{p}": o for (t, p), o in self.checkpoints.items()},
                "failed": sorted(f"{t}-{p}" for t, p in self.failed)}
