"""The log cleaner's core: choosing a log, passes (whole, partial, lagging), batches
rebuilt as clients read them, the swap refused when the log moved on, gaps on load,
and crashes: at every step of a swap, in-process, and by killing a writer process
that appends and cleans."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from actors.core import log_cleaner
from actors.core.checkpoint import read_offset_checkpoint
from actors.core.log_cleaner import (
    CleanerError,
    CleaningPass,
    CleanRange,
    choose_filthiest,
    describe_cleanable,
    map_capacity,
    plan,
)
from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig, PartitionLog, SwapRefusedError
from actors.core.producer_state import write_snapshot
from actors.core.record_batch import TRANSACTIONAL_BIT, BatchHeader, build_batch, check_batches
from actors.core.segment_swap import (
    MANIFEST,
    STAGING_PREFIX,
    SwapError,
    SwapManifest,
    commit_swap,
    read_manifest,
    stage_txn_indexes,
)
from actors.core.txn_index import AbortedTxn, read_txn_index, txn_index_path
from actors.log_cleaner import cleanable_from_row
from tests.core.log_cleaner_crash_writer import CRASH_CONFIG, KEYS, stream_record
from tests.core.log_cleaner_harness import clean_once, read_batch_spans, read_log
from tests.core.test_log_cleaner_props import gzip_batch
from wire.admin_messages import CleanableLogRow

WRITER = Path(__file__).with_name("log_cleaner_crash_writer.py")
COMPACT = LogConfig(segment_bytes=400, index_interval_bytes=100, cleanup_policy=("compact",),
                    min_cleanable_dirty_ratio=0.0, delete_retention_ms=1_000)


def keyed_log(directory: Path, count: int, keys: int = 4, config: LogConfig = COMPACT,
              tombstone_every: int = 0, ts: int = 1_000) -> PartitionLog:
    log = PartitionLog.open(directory, directory.name.rsplit("-", 1)[0], 0, config, 0)
    for i in range(count):
        dead = tombstone_every and i % tombstone_every == tombstone_every - 1
        value = None if dead else b"v%d" % i
        log.append_as_leader(build_batch([value], keys=[b"k%d" % (i % keys)],
                                         timestamps_ms=[ts + i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    return log


def pairs(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r, _base, _pid in read_log(log)]


def test_the_filthiest_log_over_its_ratio_is_chosen(tmp_path: Path) -> None:
    cleaned = keyed_log(tmp_path / "a-0", 40)
    assert clean_once(cleaned, {}, cleaned.recovery_point, 10_000) is not None
    dirty = keyed_log(tmp_path / "b-0", 40)
    reports = [describe_cleanable(cleaned), describe_cleanable(dirty)]
    rps = {r.key: 10**9 for r in reports}
    checkpoints = {reports[0].key: reports[0].active_base_offset}
    chosen = choose_filthiest(reports, checkpoints, rps, 10_000)
    assert chosen is not None and chosen.log is reports[1] and chosen.dirty_ratio == 1.0
    # nothing dirty in the first; the second is skipped when asked to
    assert choose_filthiest(reports, checkpoints, rps, 10_000, skip=[reports[1].key]) is None
    # under its min.cleanable.dirty.ratio a log waits
    picky = keyed_log(tmp_path / "c-0", 40, config=replace(COMPACT, min_cleanable_dirty_ratio=0.9))
    checkpoints = {}
    assert clean_once(picky, checkpoints, picky.recovery_point, 10_000) is not None
    for i in range(6):
        picky.append_as_leader(build_batch([b"x" * 50], keys=[b"new%d" % i]), 0, 0)
    picky.update_high_watermark(picky.log_end_offset)
    picky.roll(0)
    report = describe_cleanable(picky)
    found = plan(report, checkpoints[report.key], 10**9, 10_000)
    assert found is not None and 0 < found.dirty_ratio < 0.9
    assert choose_filthiest([report], checkpoints, {report.key: 10**9}, 10_000) is None
    for log in (cleaned, dirty, picky):
        log.close()


def test_cleaning_stops_at_the_recovery_point_and_at_young_segments(tmp_path: Path) -> None:
    log = keyed_log(tmp_path / "t-0", 40)
    report = describe_cleanable(log)
    bases = [s.base_offset for s in report.segments]
    assert len(bases) > 3
    found = plan(report, None, bases[2], 10_000)  # checkpointed recovery point
    assert found is not None and found.end == bases[2]
    lagging = replace(describe_cleanable(log), min_compaction_lag_ms=5_000)
    # records are stamped 1000..1039: at 6020 the last ones are younger than the lag
    found = plan(lagging, None, 10**9, 6_020)
    assert found is not None and found.end < report.active_base_offset
    young = next(s for s in report.segments if s.max_timestamp_ms > 6_020 - 5_000)
    assert found.end == young.base_offset
    assert plan(lagging, None, 10**9, 1_000) is None
    log.close()


def test_a_full_key_map_ends_the_pass_at_a_segment_and_the_next_goes_on(tmp_path: Path) -> None:
    log = keyed_log(tmp_path / "t-0", 80, keys=40)
    checkpoints: dict[tuple[str, int], int] = {}
    first = clean_once(log, checkpoints, log.recovery_point, 10_000, dedupe_bytes=24 * 12)
    assert first is not None and first.end_offset < log.active_segment_base_offset
    second = clean_once(log, checkpoints, log.recovery_point, 10_000, dedupe_bytes=24 * 12)
    assert second is not None and second.end_offset > first.end_offset
    while clean_once(log, checkpoints, log.recovery_point, 10_000, dedupe_bytes=24 * 12):
        pass
    assert checkpoints[("t", 0)] == log.active_segment_base_offset
    assert [o for o, _k, _v in pairs(log)] == list(range(40, 80))  # each key's latest
    with pytest.raises(CleanerError, match=r"dedupe\.buffer\.size"):
        clean_once(keyed_log(tmp_path / "u-0", 40, keys=40), {}, 10**9, 10_000,
                   dedupe_bytes=24 * 2)
    log.close()


def test_a_finished_or_aborted_pass_holds_no_key_map(tmp_path: Path) -> None:
    """The key map may hold log.cleaner.dedupe.buffer.size / 24 keys; a pass that is done
    (its swap maybe awaited for long) or aborted lets go of it."""
    log = keyed_log(tmp_path / "t-0", 80, keys=40)
    report = describe_cleanable(log)
    for finish in (True, False):
        chosen = choose_filthiest([report], {}, {report.key: log.recovery_point}, 10_000)
        assert chosen is not None
        cleaning = CleaningPass(chosen, 10_000, map_capacity(1 << 20), 700, 1 + finish)
        while not cleaning.offset_map:  # a segment of keys mapped
            assert not cleaning.step()
        if finish:
            while not cleaning.step():
                pass
            assert cleaning.plan is not None
        else:
            cleaning.abort()
        assert cleaning.offset_map == {} and cleaning._segment_map == {}
    log.close()


def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    log = keyed_log(tmp_path / "t-0", 30, keys=3, tombstone_every=3)  # k2 is always dead
    checkpoints: dict[tuple[str, int], int] = {}
    clean_once(log, checkpoints, log.recovery_point, 1_500)  # young: tombstone stays
    assert (29, b"k2", None) in pairs(log)
    log.append_as_leader(build_batch([b"new"], keys=[b"k0"], timestamps_ms=[9_000]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    clean_once(log, checkpoints, log.recovery_point, 9_500)  # now older than 1000 ms
    assert pairs(log) == [(28, b"k1", b"v28"), (30, b"k0", b"new")]
    log.close()


def test_rebuilt_batches_keep_codec_offsets_and_producer_fields(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0)
    batch = build_batch([b"a1", b"b1", b"a2"], keys=[b"a", b"b", b"a"], timestamps_ms=[5, 6, 7])
    log.append_as_leader(gzip_batch(batch), 0, 0)
    producer = build_batch([b"b2", b"b3"], keys=[b"b", b"b"], producer_id=42, producer_epoch=3,
                           base_sequence=0, timestamps_ms=[8, 9])
    log.append_as_leader(producer, 0, 0)
    newer = build_batch([b"b4"], keys=[b"b"], timestamps_ms=[10])
    log.append_as_leader(newer, 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    clean_once(log, {}, log.recovery_point, 100)
    spans = read_batch_spans(log)
    # the gzip batch lost b1 and a1 but kept its offsets 0..2; the producer's last batch
    # lost both records and stays as an empty batch 3..4; b4 stays
    assert spans == [(0, 2, -1), (3, 4, 42), (5, 5, -1)]
    assert pairs(log) == [(2, b"a", b"a2"), (5, b"b", b"b4")]
    raw = log.read(0, 1 << 20).records
    assert raw[21 + 1] & 0x07 == 1  # attributes: still gzip
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=10**9)
    entry = log.producer_state.producers[42]
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (3, 1, 4)
    assert log.append_as_leader(producer, 0, 0).duplicate
    log.close()


def test_the_swap_is_refused_when_the_log_moved_on(tmp_path: Path) -> None:
    log = keyed_log(tmp_path / "t-0", 40)
    report = describe_cleanable(log)
    rng = plan(report, None, 10**9, 10_000)
    assert rng is not None
    cleaning = CleaningPass(rng, 10_000, map_capacity(1 << 20), 10**6, 1)
    while not cleaning.step():
        pass
    swap = cleaning.plan
    assert swap is not None
    before = pairs(log)
    log.increment_log_start_offset(report.segments[1].base_offset)
    log.delete_old_segments(0, retention=False)  # DeleteRecords took the first segment
    with pytest.raises(SwapRefusedError):
        log.replace_cleaned_segments(swap.staging, swap.old_segments, swap.new_bases,
                                     report.generation, 0)
    log.truncate_to(report.segments[-1].base_offset)
    with pytest.raises(SwapRefusedError, match="truncated"):
        log.replace_cleaned_segments(swap.staging, swap.old_segments, swap.new_bases,
                                     report.generation, 0)
    assert pairs(log) == [p for p in before if report.segments[1].base_offset <= p[0]
                          < report.segments[-1].base_offset]
    log.close()


def test_a_gap_is_trusted_below_the_recovery_point_only(tmp_path: Path) -> None:
    log = keyed_log(tmp_path / "t-0", 40, tombstone_every=4)  # k3 is dead, the last one too
    clean_once(log, {}, log.recovery_point, 10_000)  # stamps the tombstone's horizon
    clean_once(log, {}, log.recovery_point, 12_000)  # past it: the tombstone goes
    after = pairs(log)
    spans = read_batch_spans(log)
    assert spans[0][0] > 0  # the cleaned segment at 0 starts with a later batch
    leo = log.log_end_offset
    assert spans[-1][1] == leo - 2 and log.segments[-1].base_offset == leo  # a gap at 39
    log.close_without_flush()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=leo,
                            high_watermark=leo)
    assert pairs(log) == after and log.log_end_offset == leo
    log.close_without_flush()
    # a cleaned segment whose index is lost is scanned again: its gaps lie below the
    # recovery point, so the scan keeps every batch
    (tmp_path / "t-0" / f"{0:020d}.index").unlink()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=leo,
                            high_watermark=leo)
    assert pairs(log) == after and log.log_end_offset == leo
    log.close_without_flush()
    # below a recovery point of 0, the gap after the cleaned segment reads as lost data
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=0)
    assert log.log_end_offset < leo
    log.close()


# ------------------------------------------------------------------- crashes


def test_a_crash_at_every_step_of_a_swap_leaves_the_old_or_the_new_log(tmp_path: Path) -> None:
    """Snapshot the partition directory after each step (what a crash there leaves), then
    open every snapshot as after an unclean stop: the records, and the aborted
    transactions (read from the .txnindex files below the producer snapshot a clean stop
    before the cleaning left, not found again in the log)."""
    log = keyed_log(tmp_path / "t-0", 60, keys=5)
    log.append_as_leader(_txn_records(7, 0, 0, [b"k1", b"k2"], b"aborted"), 0, 0)  # 60-61
    log.append_control(7, 0, False, 0, 0, 0)                                         # 62
    for i in range(6):
        log.append_as_leader(build_batch([b"v"], keys=[b"k%d" % (i % 5)]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    write_snapshot(log.dir, log.log_end_offset, log.producer_state)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert [a[:3] for a in aborted] == [(7, 60, 62)]
    old = pairs(log)
    rp = log.recovery_point
    snapshots: list[tuple[str, Path]] = []

    def snapshot(step: str) -> None:
        target = tmp_path / f"snap{len(snapshots)}" / "t-0"
        shutil.copytree(log.dir, target)
        snapshots.append((step, target))

    report = describe_cleanable(log)
    rng = choose_filthiest([report], {}, {report.key: rp}, 10_000)
    assert isinstance(rng, CleanRange)
    cleaning = CleaningPass(rng, 10_000, map_capacity(1 << 20), 300, 1)
    while not cleaning.step():
        snapshot("writing the staging copy")
    swap = cleaning.plan
    assert swap is not None
    snapshot("staging complete, not committed")
    log.replace_cleaned_segments(swap.staging, swap.old_segments, swap.new_bases,
                                 report.generation, 0, after_step=snapshot)
    new = pairs(log)
    assert new != old and len(snapshots) > 8
    steps = [s for s, _p in snapshots]
    assert "manifest" in steps and any(s.startswith("move") for s in steps)
    assert any(s.startswith("delete") for s in steps) and "manifest removed" in steps
    for step, directory in snapshots:
        reopened = PartitionLog.open(directory, "t", 0, COMPACT, 0, recovery_point=rp,
                                     high_watermark=rp)
        got = pairs(reopened)
        committed = step not in ("writing the staging copy", "staging complete, not committed")
        assert got == (new if committed else old), step
        assert reopened.aborted_transactions(0, rp) == aborted, step
        assert not (directory / MANIFEST).exists(), step
        assert not [n for n in directory.iterdir() if n.name.startswith(STAGING_PREFIX)], step
        reopened.append_as_leader(build_batch([b"after"], keys=[b"k0"]), 0, 0)
        reopened.close()
    log.close()


def _expected(leo: int) -> dict[int, tuple[bytes, bytes | None]]:
    return {i: stream_record(i) for i in range(leo)}


def _check_compacted_prefix(log: PartitionLog, at_least: int) -> int:
    """The log is the stream's prefix up to its end, compacted: every record is the stream's
    at its offset, offsets rise, and every key's latest record of the prefix is there."""
    leo = log.log_end_offset
    assert leo >= at_least, (leo, at_least)
    stream = _expected(leo)
    offsets = []
    for record, _base, _pid in read_log(log):
        assert (record.key, record.value) == stream[record.offset], record
        offsets.append(record.offset)
    assert offsets == sorted(set(offsets))
    latest = {stream[i][0]: i for i in range(leo)}
    assert set(latest.values()) <= set(offsets), sorted(set(latest.values()) - set(offsets))
    return leo


@pytest.mark.multiprocess
@pytest.mark.parametrize("step", ["manifest", "move", "delete", "manifest removed", None])
def test_killing_a_writer_that_cleans_leaves_a_compacted_prefix(tmp_path: Path,
                                                                 step: str | None) -> None:
    """A writer appends and cleans; it dies right after a swap step (``step``) or at a
    random moment (``None``, several times), and every restart finds a correct log."""
    rng = random.Random(str(step))
    log_dir_path = tmp_path / "logs"
    kept = 0
    for round_ in range(4 if step is None else 2):
        args = [sys.executable, str(WRITER), str(log_dir_path)]
        if step is not None and round_ == 0:
            args.append(step)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == b"ready\n", proc.stderr.read() if proc.stderr else line
            if step is not None and round_ == 0:
                assert proc.wait(timeout=60) == 9, proc.stderr.read() if proc.stderr else ""
            else:
                time.sleep(rng.uniform(0.2, 0.8))  # a random crash point, not a timing check
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        checkpoint = read_offset_checkpoint(log_dir_path / "recovery-point-offset-checkpoint")
        log_dir = LogDir.open(log_dir_path)
        log = log_dir.open_partition("t", 0, CRASH_CONFIG, 0)
        try:
            kept = _check_compacted_prefix(log, max(kept, checkpoint.get(("t", 0), 0)))
            assert not (log.dir / MANIFEST).exists()
        except AssertionError as exc:
            raise AssertionError(f"step {step}, round {round_}: {exc}") from exc
        finally:
            log.close_without_flush()
    assert kept > 50 and kept > KEYS  # the writer really appended and cleaned


def test_a_batch_inflating_past_the_cleaners_bound_is_kept_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cleaner inflates a compressed batch to at most CLEANER_INFLATE_MAX_BYTES (a
    small batch may inflate to gigabytes); past it the batch is kept as it is, its older
    keys not cleaned, and a batch within the bound is cleaned as before."""
    monkeypatch.setattr(log_cleaner, "CLEANER_INFLATE_MAX_BYTES", 4096)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0)
    big = build_batch([bytes(8192), b"small"], keys=[b"a", b"b"], timestamps_ms=[5, 6])
    log.append_as_leader(gzip_batch(big), 0, 0)
    log.append_as_leader(gzip_batch(build_batch([b"b2"], keys=[b"b"], timestamps_ms=[7])),
                         0, 0)
    log.append_as_leader(build_batch([b"a2", b"b3"], keys=[b"a", b"b"], timestamps_ms=[8, 9]),
                         0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    clean_once(log, {}, log.recovery_point, 100)
    # the big batch kept whole (0, 1); the small gzip batch (2) lost its only record
    assert [(o, k) for o, k, _v in pairs(log)] == [(0, b"a"), (1, b"b"), (3, b"a"), (4, b"b")]
    log.close()


def _txn_records(pid: int, epoch: int, seq: int, keys: list[bytes], value: bytes) -> bytes:
    return build_batch([value] * len(keys), keys=keys, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=TRANSACTIONAL_BIT)


def test_a_merge_leaves_no_orphan_txnindex_to_drop_a_later_committed_transaction(
        tmp_path: Path) -> None:
    """The cleaner takes the aborted ranges from the log's own transaction index, and the
    swap carries each cleaned segment's entries into its new segment: a merged-away
    segment's .txnindex is not left behind. Before, it stayed; after a truncation below its
    range, a committed transaction of the same producer re-fetched at those offsets was
    read as aborted by the next pass, and dropped."""
    log = keyed_log(tmp_path / "t-0", 6, keys=1)                  # 0-5: k0, one segment
    first_rolled = log.active_segment_base_offset
    log.append_as_leader(build_batch([b"x"], keys=[b"pad"]), 0, 0)      # 6
    log.append_as_leader(_txn_records(7, 0, 0, [b"a", b"b"], b"aborted"), 0, 0)   # 7-8
    log.append_control(7, 0, False, 0, 0, 0)                            # 9: abort
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    for i in range(4):                                                  # 10-13
        log.append_as_leader(build_batch([b"f"], keys=[b"f%d" % i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    assert first_rolled == 6 and read_txn_index(txn_index_path(log.dir, 6))
    plan = clean_once(log, {}, log.log_end_offset, 10_000)
    assert plan is not None and 6 in [b for b, _ in plan.old_segments]
    assert 6 not in plan.new_bases                      # merged into the segment at 0
    on_disk = {p.name for p in log.dir.glob("*.txnindex")}
    assert on_disk == {f"{b:020d}.txnindex" for b in set(log.txn_index.segment_of)}
    assert [e[:3] for e in log.txn_index.aborted] == [(7, 7, 9)]
    assert set(log.txn_index.segment_of) <= {s.base_offset for s in log.segments}
    # an unclean election: truncated to 7, the new leader's committed transaction of the
    # same producer id at 7-8 fetched
    log.truncate_to(7)
    assert log.txn_index.aborted == []
    assert not list(log.dir.glob("*.txnindex"))
    log.append_as_leader(_txn_records(7, 1, 0, [b"a", b"b"], b"committed"), 0, 0)  # 7-8
    log.append_control(7, 1, True, 0, 0, 0)                                          # 9
    for i in range(4):
        log.append_as_leader(build_batch([b"g"], keys=[b"g%d" % i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    clean_once(log, {}, log.log_end_offset, 10_000)
    kept = {k: v for _o, k, v in pairs(log)}
    assert kept[b"a"] == kept[b"b"] == b"committed"


def test_a_batchs_aborted_transaction_is_found_among_many_ranges(tmp_path: Path) -> None:
    """A batch's aborted transaction is found by bisection among its producer's ranges
    (sorted by first offset): inside a range, at its ends, between ranges, and another
    producer's batch at the same offsets. (The speed, batches x aborts before, is not a
    test's to time.)"""
    count = 5_000
    aborted = tuple(AbortedTxn(7, 10 * i, 10 * i + 5, 10 * i + 6) for i in range(count))
    report = replace(describe_cleanable(keyed_log(tmp_path / "t-0", 1)), aborted=aborted)
    cleaning = CleaningPass(CleanRange(report, 0, 0, 1.0), 0, 16, 1 << 16, 1)
    header = check_batches(build_batch([b"v"], producer_id=7, producer_epoch=0,
                                       base_sequence=0, attributes=TRANSACTIONAL_BIT))[0]
    offsets = range(0, 10 * count, 3)
    found = [cleaning._is_aborted(header._replace(base_offset=o)) for o in offsets]
    assert found == [o % 10 <= 5 for o in offsets]
    assert not cleaning._is_aborted(header._replace(producer_id=8))


def test_the_report_names_its_bound_the_last_stable_offset(tmp_path: Path) -> None:
    """The owner reports its LSO (below the high watermark while a transaction is open),
    under that name in the report and in the shard's row: no caller passes the HW."""
    log = keyed_log(tmp_path / "t-0", 4)
    log.append_as_leader(_txn_records(7, 0, 0, [b"a"], b"open"), 0, 0)
    log.append_as_leader(build_batch([b"x"], keys=[b"b"]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    report = describe_cleanable(log)
    assert report.last_stable_offset == log.last_stable_offset == 4 < log.high_watermark
    assert "high_watermark" not in CleanableLogRow._fields
    row = CleanableLogRow(**{f: getattr(report, f, None) for f in CleanableLogRow._fields})
    assert cleanable_from_row(row._replace(segments=[], producer_last_offsets=[],
                                           aborted_txns=[], directory=str(log.dir))
                              ).last_stable_offset == 4


def test_a_merged_segments_aborted_transactions_survive_a_restart(tmp_path: Path) -> None:
    """The cleaned segment holding an abort marker carries its .txnindex entry: after a
    restart, a read_committed fetch still learns the transaction was aborted. Before, the
    merged-away segment's file was the only copy, and the restart deleted it as an orphan:
    the aborted records then read as committed."""
    log = _log_with_a_merged_away_abort(tmp_path / "t-0")
    before = log.aborted_transactions(0, log.log_end_offset)
    assert [a[:3] for a in before] == [(7, 7, 9)]
    plan = clean_once(log, {}, log.log_end_offset, 10_000)
    assert plan is not None and len(plan.new_bases) < len(plan.old_segments)
    leo = log.log_end_offset
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=leo,
                            high_watermark=leo, clean_shutdown=True)
    assert log.aborted_transactions(0, leo) == before
    assert log.txn_index.segment_of == [0]


def test_the_owner_writes_the_cleaned_segments_txnindex_from_its_own_index(
        tmp_path: Path) -> None:
    """The .txnindex of each cleaned segment comes from the log's own index at the swap,
    not from the entries the cleaner was told (a report names only the aborted ranges at or
    above the first dirty offset): a second pass, told of no abort, keeps the entry of the
    marker it merges, and a restart still reads the transaction as aborted. Before, the
    cleaner wrote the files from its report, and that pass emptied them."""
    log = keyed_log(tmp_path / "t-0", 6, keys=1)
    log.append_as_leader(build_batch([b"x"], keys=[b"pad"]), 0, 0)                 # 6
    log.append_as_leader(_txn_records(7, 0, 0, [b"a", b"b"], b"aborted"), 0, 0)    # 7-8
    log.append_control(7, 0, False, 0, 0, 0)                                        # 9
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    before = log.aborted_transactions(0, log.log_end_offset)
    checkpoints: dict[tuple[str, int], int] = {}
    assert clean_once(log, checkpoints, log.log_end_offset, 10_000) is not None
    for _i in range(6):
        log.append_as_leader(build_batch([b"f"], keys=[b"k0"]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    report = replace(describe_cleanable(log), aborted=())
    rng = choose_filthiest([report], checkpoints, {report.key: log.log_end_offset}, 10_000)
    assert rng is not None and rng.first_dirty > before[0].last_offset
    cleaning = CleaningPass(rng, 10_000, map_capacity(1 << 20), 700, 2)
    while not cleaning.step():
        pass
    swap = cleaning.plan
    assert swap is not None and len(swap.new_bases) == 1
    log.replace_cleaned_segments(swap.staging, swap.old_segments, swap.new_bases,
                                 report.generation, 0)
    assert read_txn_index(txn_index_path(log.dir, swap.new_bases[0])) == before
    leo = log.log_end_offset
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=leo,
                            high_watermark=leo, clean_shutdown=True)
    assert log.aborted_transactions(0, leo) == before
    log.close()


def _log_with_a_merged_away_abort(directory: Path) -> PartitionLog:
    """Segments at 0 (k0 x6) and 6 (pad, an aborted transaction of producer 7 at 7-8, its
    marker at 9): a cleaning merges 6 into 0."""
    log = keyed_log(directory, 6, keys=1)
    log.append_as_leader(build_batch([b"x"], keys=[b"pad"]), 0, 0)                 # 6
    log.append_as_leader(_txn_records(7, 0, 0, [b"a", b"b"], b"aborted"), 0, 0)    # 7-8
    log.append_control(7, 0, False, 0, 0, 0)                                        # 9
    for i in range(4):
        log.append_as_leader(build_batch([b"f"], keys=[b"f%d" % i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    return log


@pytest.mark.parametrize("staged", [False, True])
def test_a_version_1_swap_manifest_keeps_the_old_segments_aborted_entries(
        tmp_path: Path, staged: bool) -> None:
    """A swap committed by an actorlog from before (manifest version 1) and finished at the
    next open: the merged-away segment's .txnindex entries go to the new segment holding
    their marker before the old files are deleted, whether that actorlog staged .txnindex
    files (since 5fbf483) or not (before). The live swap writes version 2."""
    log = _log_with_a_merged_away_abort(tmp_path / "t-0")
    before = log.aborted_transactions(0, log.log_end_offset)
    assert [a[:3] for a in before] == [(7, 7, 9)]
    committed = tmp_path / "committed" / "t-0"

    def crash_after_the_manifest(step: str) -> None:
        if step == "manifest":
            shutil.copytree(log.dir, committed)

    swap = clean_once(log, {}, log.log_end_offset, 10_000, after_step=crash_after_the_manifest)
    assert swap is not None and 6 in [b for b, _ in swap.old_segments]
    assert 6 not in swap.new_bases
    leo = log.log_end_offset
    # the producer snapshot a clean stop writes: the reopened log reads the aborted
    # entries below it from the .txnindex files, it does not find the marker again
    write_snapshot(committed, leo, log.producer_state)
    log.close()
    manifest = json.loads((committed / MANIFEST).read_text())
    assert manifest["version"] == 2
    manifest["version"] = 1
    (committed / MANIFEST).write_text(json.dumps(manifest))
    if not staged:
        for path in (committed / swap.staging).glob("*.txnindex"):
            path.unlink()
    assert read_txn_index(txn_index_path(committed, 6))  # the old segment's file
    reopened = PartitionLog.open(committed, "t", 0, COMPACT, 0, recovery_point=leo,
                                 high_watermark=leo, clean_shutdown=True)
    assert reopened.aborted_transactions(0, leo) == before
    assert not (committed / MANIFEST).exists()
    assert [p.name for p in committed.glob("*.txnindex")] == [f"{0:020d}.txnindex"]
    reopened.close()


def test_a_live_swap_needs_every_staged_txnindex_and_a_version_2_manifest(
        tmp_path: Path) -> None:
    log = _log_with_a_merged_away_abort(tmp_path / "t-0")
    report = describe_cleanable(log)
    rng = choose_filthiest([report], {}, {report.key: log.log_end_offset}, 10_000)
    assert rng is not None
    cleaning = CleaningPass(rng, 10_000, map_capacity(1 << 20), 700, 1)
    while not cleaning.step():
        pass
    swap = cleaning.plan
    assert swap is not None
    manifest = SwapManifest(swap.staging, tuple(b for b, _ in swap.old_segments),
                            tuple(swap.new_bases))
    assert manifest.version == 2
    with pytest.raises(SwapError, match=r"\.txnindex is missing"):
        commit_swap(log.dir, manifest)  # the owner has not staged them
    stage_txn_indexes(log.dir, swap.staging,
                      log.txn_index.cleaned_entries(list(manifest.old_bases),
                                                    list(manifest.new_bases)))
    with pytest.raises(SwapError, match="version 2, not 1"):
        commit_swap(log.dir, manifest._replace(version=1))
    assert not (log.dir / MANIFEST).exists()
    (log.dir / MANIFEST).write_text(json.dumps({"version": 3, "staging": swap.staging,
                                                "old": [], "new": []}))
    with pytest.raises(SwapError, match="version 3 is not known"):
        read_manifest(log.dir)
    (log.dir / MANIFEST).unlink()
    log.close()


def test_a_checkpoint_inside_a_segment_keeps_an_aborted_record_below_it_out_of_the_map(
        tmp_path: Path) -> None:
    """The key map takes only records at or above the first dirty offset (Kafka's
    buildOffsetMapForSegment), though the map phase reads a segment from its base: the
    report names only aborts whose marker is at or above it, so an aborted record below a
    checkpoint that falls inside a segment (stale after a truncation or a namesake, or
    left by a crash between a swap and its checkpoint) was taken for its key's latest
    and the committed record before it dropped."""
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100,
                       cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0,
                       delete_retention_ms=1_000)
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, config, 0)
    log.append_as_leader(build_batch([b"v1"], keys=[b"k"]), 0, 0)                  # 0
    log.append_as_leader(_txn_records(7, 0, 0, [b"k"], b"aborted"), 0, 0)          # 1
    log.append_control(7, 0, False, 0, 0, 0)                                       # 2
    for i in range(4):                                                             # 3-6
        log.append_as_leader(build_batch([b"p"], keys=[b"p%d" % i]), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    assert [s.base_offset for s in log.segments][:1] == [0] and log.segments[1].base_offset == 7
    assert clean_once(log, {("t", 0): 3}, log.log_end_offset, 10_000) is not None
    assert (0, b"k", b"v1") in pairs(log)


# ------------------------------------------------------------ delete horizons (KIP-534)


def _horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon as a Kafka 3 client reads it: attribute bit 6 (0x40) set,
    the base timestamp; None: not stamped."""
    return header.base_timestamp if header.attributes & 0x40 else None


def _horizons(log: PartitionLog) -> dict[int, int | None]:
    """Each batch's base offset with its delete horizon (None: not stamped)."""
    out: dict[int, int | None] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        headers = check_batches(log.read(offset, 1 << 20).records)
        if not headers:
            break
        out.update((h.base_offset, _horizon(h)) for h in headers)
        offset = headers[-1].next_offset
    return out


def _reopen(log: PartitionLog) -> PartitionLog:
    leo = log.log_end_offset
    log.close()
    return PartitionLog.open(log.dir, log.topic, 0, COMPACT, 0, recovery_point=leo,
                             high_watermark=leo, clean_shutdown=True)


def test_a_tombstone_stays_delete_retention_after_the_cleaning_that_first_kept_it(
        tmp_path: Path) -> None:
    """Records written long ago (timestamps 1000..): the first cleaning keeps the
    tombstone and stamps its batch's delete horizon (that cleaning's time + 1000 ms), the
    record keeping its own timestamp; a cleaning before the horizon keeps it, a restart
    keeps the horizon, the first cleaning past it drops the tombstone. Before, a tombstone
    went in the first cleaning once its segment's records were older than
    delete.retention.ms: a consumer that had not read it yet never learned of the delete."""
    log = keyed_log(tmp_path / "t-0", 30, keys=3, tombstone_every=3)  # k2 is always dead
    assert clean_once(log, {}, log.recovery_point, 50_000) is not None
    assert (29, b"k2", None) in pairs(log)
    [record] = [r for r, _b, _p in read_log(log) if r.offset == 29]
    assert record.timestamp_ms == 1_000 + 29  # its own time, read as a client reads it
    horizons = _horizons(log)
    assert horizons[29] == 51_000
    assert {o for o, h in horizons.items() if h is not None} == {29}  # no tombstone: as is
    assert clean_once(log, {}, log.recovery_point, 50_999) is not None
    assert (29, b"k2", None) in pairs(log) and _horizons(log)[29] == 51_000  # not restamped
    log = _reopen(log)
    assert _horizons(log)[29] == 51_000
    assert clean_once(log, {}, log.recovery_point, 51_000) is not None
    assert pairs(log) == [(27, b"k0", b"v27"), (28, b"k1", b"v28")]
    log.close()


def test_a_stamped_compressed_batch_keeps_its_codec_and_its_records_times(
        tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0)
    batch = build_batch([b"a1", None, b"c1"], keys=[b"a", b"b", b"c"],
                        timestamps_ms=[500, 400, 700])
    log.append_as_leader(gzip_batch(batch), 0, 0)
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    clean_once(log, {}, log.recovery_point, 10_000)
    raw = log.read(0, 1 << 20).records
    header = check_batches(raw)[0]
    assert header.compression == 1 and _horizon(header) == 11_000
    assert log_cleaner.delete_horizon(header) == 11_000
    assert header.max_timestamp == 700
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r, _b, _p in read_log(log)] == [
        (0, b"a", b"a1", 500), (1, b"b", None, 400), (2, b"c", b"c1", 700)]
    clean_once(log, {}, log.recovery_point, 11_000)
    assert [(r.offset, r.timestamp_ms) for r, _b, _p in read_log(log)] == [(0, 500), (2, 700)]
    log.close()


def _markers(log: PartitionLog) -> list[int]:
    return [b for b, _last, pid in read_batch_spans(log)
            if pid >= 0 and check_batches(log.read(b, 1 << 20).records)[0].is_control]


def test_markers_go_past_their_horizon_once_their_transactions_records_are_gone(
        tmp_path: Path) -> None:
    """Producer 7 commits a and b (superseded later), aborts a, then commits c; producer 9
    commits d (its key's latest: it stays) and then e. A first pass drops the superseded
    and aborted records but keeps their markers (it met their records); the next stamps
    the markers whose transactions are empty; one past the horizon drops them, and the
    abort's .txnindex entry with its marker. The markers of transactions with records
    left, and each producer's last, stay; read_committed still reads the committed
    values, and a restart reads no open transaction and no abort."""
    log = keyed_log(tmp_path / "t-0", 6, keys=1)                                   # 0-5
    log.append_as_leader(_txn_records(7, 0, 0, [b"a", b"b"], b"c1"), 0, 0)         # 6-7
    log.append_control(7, 0, True, 0, 0, 0)                                         # 8
    log.append_as_leader(_txn_records(7, 0, 2, [b"a"], b"aborted"), 0, 0)          # 9
    log.append_control(7, 0, False, 0, 0, 0)                                        # 10
    log.append_as_leader(build_batch([b"a2", b"b2"], keys=[b"a", b"b"]), 0, 0)      # 11-12
    log.append_as_leader(_txn_records(7, 0, 3, [b"c"], b"c1"), 0, 0)               # 13
    log.append_control(7, 0, True, 0, 0, 0)                                         # 14
    log.append_as_leader(_txn_records(9, 0, 0, [b"d"], b"d1"), 0, 0)               # 15
    log.append_control(9, 0, True, 0, 0, 0)                                         # 16
    log.append_as_leader(_txn_records(9, 0, 1, [b"e"], b"e1"), 0, 0)               # 17
    log.append_control(9, 0, True, 0, 0, 0)                                         # 18
    for i in range(4):
        log.append_as_leader(build_batch([b"f"], keys=[b"f%d" % i]), 0, 0)         # 19-22
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    assert [e[:3] for e in log.txn_index.aborted] == [(7, 9, 10)]
    assert clean_once(log, {}, log.recovery_point, 10_000) is not None
    assert _markers(log) == [8, 10, 14, 16, 18]  # records of 8 and 10 were met: kept
    assert all(h is None for h in _horizons(log).values())
    assert clean_once(log, {}, log.recovery_point, 10_000) is not None
    horizons = _horizons(log)
    assert (horizons[8], horizons[10]) == (11_000, 11_000)
    assert horizons[14] is horizons[16] is horizons[18] is None
    log = _reopen(log)
    assert clean_once(log, {}, log.recovery_point, 10_999) is not None
    assert _markers(log) == [8, 10, 14, 16, 18]
    assert clean_once(log, {}, log.recovery_point, 11_000) is not None
    assert _markers(log) == [14, 16, 18]
    assert log.txn_index.aborted == [] and log.aborted_transactions(0, log.log_end_offset) == []
    assert not [p for p in log.dir.glob("*.txnindex") if read_txn_index(p)]
    kept = {k: v for _o, k, v in pairs(log)}
    assert (kept[b"a"], kept[b"b"], kept[b"c"], kept[b"d"]) == (b"a2", b"b2", b"c1", b"d1")
    log = _reopen(log)
    assert log.last_stable_offset == log.high_watermark == log.log_end_offset
    assert log.aborted_transactions(0, log.log_end_offset) == []
    assert clean_once(log, {}, log.recovery_point, 100_000) is not None
    assert _markers(log) == [14, 16, 18]  # their records stay, or their producer's last
    log.close()


def test_only_the_marker_of_a_producers_current_epoch_stays_for_good(tmp_path: Path) -> None:
    """Producer 5 commits a (superseded later) in epoch 0; then an abort marker bumps it to
    epoch 1 (a fenced producer), with no batch since. The epoch-1 marker holds the epoch a
    restart must fence with: it stays. The epoch-0 commit, its records gone, goes past its
    horizon, as Kafka's. Before, every marker of a producer with no batch in its epoch
    stayed for good."""
    log = keyed_log(tmp_path / "t-0", 6, keys=1)                                   # 0-5
    log.append_as_leader(_txn_records(5, 0, 0, [b"a"], b"a1"), 0, 0)               # 6
    log.append_control(5, 0, True, 0, 0, 0)                                         # 7
    log.append_control(5, 1, False, 0, 0, 0)                                        # 8
    for i in range(4):
        log.append_as_leader(build_batch([b"a2"], keys=[b"a%d" % (i % 2)]), 0, 0)  # 9-12
    log.append_as_leader(build_batch([b"a3"], keys=[b"a"]), 0, 0)                   # 13
    log.update_high_watermark(log.log_end_offset)
    log.roll(0)
    log.flush(0)
    entry = log.producer_state.producers[5]
    assert (entry.producer_epoch, entry.last_offset) == (1, -1)  # no batch in epoch 1
    assert clean_once(log, {}, log.recovery_point, 10_000) is not None
    assert _markers(log) == [7, 8]  # 7's record was met
    assert clean_once(log, {}, log.recovery_point, 10_000) is not None
    assert (_horizons(log)[7], _horizons(log)[8]) == (11_000, None)
    assert clean_once(log, {}, log.recovery_point, 11_000) is not None
    assert _markers(log) == [8]
    assert clean_once(log, {}, log.recovery_point, 100_000) is not None
    assert _markers(log) == [8]
    assert check_batches(log.read(8, 1 << 20).records)[0].producer_epoch == 1
    log.close()


def test_a_truncation_into_a_cleaned_gap_ends_the_log_at_the_truncation_offset(
        tmp_path: Path) -> None:
    """A follower's cleaned log holds only offsets 56-59 in its first segment: truncated to
    10 (its new leader's log ends there), its log ends at 10 and the leader's records from
    10 on are appended. Before, it ended at 56 (the first batch dropped): past the leader's
    end, so the follower's fetch was out of range and it truncated to 10 again, forever."""
    log = keyed_log(tmp_path / "t-0", 60, keys=4)
    clean_once(log, {}, log.recovery_point, 10_000)
    assert read_batch_spans(log)[0] == (56, 56, -1)
    assert log.truncate_to(10)
    assert log.log_end_offset == 10 and read_batch_spans(log) == []
    log.append_as_follower(build_batch([b"new"], keys=[b"k0"], base_offset=10), 0)
    assert log.log_end_offset == 11 and pairs(log) == [(10, b"k0", b"new")]
    log.flush(0)
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", "t", 0, COMPACT, 0, recovery_point=11)
    assert log.log_end_offset == 11 and pairs(log) == [(10, b"k0", b"new")]
    log.close()
