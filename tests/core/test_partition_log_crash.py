"""Crash tests: after a crash the log recovers to a valid prefix of what was appended.

Two kinds of crash points, 200+ in all:

* cut files: write a log, then do to its files what a power cut can do to
  data past the recovery point (cut a segment at a random byte, lose later
  segments or leave them half written, tear or lose the index, garble a
  sector), and reopen as after an unclean stop;
* kill a writer: a subprocess appends, flushes and checkpoints in a loop and
  is SIGKILLed at a random moment; the parent reopens the log dir.

Each time: every batch left is valid, the log is a prefix of what was
appended, nothing below the recovery point is lost, checkpoints parse (never
torn), and the log takes new appends.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.core.checkpoint import read_offset_checkpoint
from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import check_batches
from tests.core.partition_log_crash_writer import WRITER_CONFIG, payload_batch

WRITER = Path(__file__).with_name("partition_log_crash_writer.py")
CUT_CRASH_POINTS = 200
KILL_CRASH_POINTS = 16


def read_all(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, bytes from the CRC on) of every batch, checked."""
    out: list[tuple[int, int, bytes]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        headers = check_batches(data)  # raises on any invalid batch
        assert headers, f"no batch at {offset} below LEO {log.log_end_offset}"
        for h in headers:
            out.append((h.base_offset, h.last_offset, bytes(data[h.position + 17:
                                                                   h.position + h.size])))
        offset = headers[-1].next_offset
    return out


def assert_prefix(log: PartitionLog, count_at_least: int = 0) -> int:
    """The log holds batches 0..k-1 of the stream, exactly; returns k."""
    batches = read_all(log)
    offset = 0
    for i, (base, last, tail) in enumerate(batches):
        expected = payload_batch(i)
        (h,) = check_batches(expected)
        assert (base, last) == (offset, offset + h.last_offset_delta), f"batch {i}"
        assert tail == expected[17:], f"batch {i} differs"
        offset = last + 1
    assert log.log_end_offset == offset
    assert len(batches) >= count_at_least
    return len(batches)


# -- cut files ---------------------------------------------------------------------


def _damage(rng: random.Random, directory: Path, recovery_point: int) -> str:
    """Do one random thing a crash can do past the recovery point; describe it."""
    bases = sorted(int(p.name[:20]) for p in directory.glob("*.log"))
    # Segments holding data past the recovery point.
    at_risk = [b for i, b in enumerate(bases)
               if i + 1 == len(bases) or bases[i + 1] > recovery_point]
    if not at_risk:
        return "nothing at risk"
    base = rng.choice(at_risk)
    log_path = directory / f"{base:020d}.log"
    index_path = directory / f"{base:020d}.index"
    size = log_path.stat().st_size
    # Data below the recovery point inside this segment must survive: find where
    # it ends by scanning whole batches.
    data = log_path.read_bytes()
    safe = 0
    for h in check_batches(data):
        if h.base_offset < recovery_point:
            safe = h.position + h.size
    kind = rng.choice(["cut", "cut", "cut+later", "garble", "tail-garbage", "index"])
    if kind in ("cut", "cut+later"):
        cut = rng.randint(safe, size)
        os.truncate(log_path, cut)
        if kind == "cut+later":
            for later in bases:
                if later > base:
                    later_log = directory / f"{later:020d}.log"
                    os.truncate(later_log, rng.randint(0, later_log.stat().st_size))
        return f"{kind} {log_path.name} at {cut}/{size}"
    if kind == "garble" and size > safe:
        at = rng.randint(safe, size - 1)
        raw = bytearray(data)
        raw[at] ^= 1 << rng.randint(0, 7)
        log_path.write_bytes(bytes(raw))
        return f"flip a bit of {log_path.name} at {at}"
    if kind == "tail-garbage":
        with open(directory / f"{bases[-1]:020d}.log", "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 200)))
        return "garbage after the last batch"
    index_size = index_path.stat().st_size
    os.truncate(index_path, rng.randint(0, index_size))
    if rng.random() < 0.5:
        with open(index_path, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 20)))
    return f"tear {index_path.name}"


def test_recovery_from_cut_files(mem_tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUT_CRASH_POINTS random crash points, each on a fresh log.

    The damage is done explicitly, so fsync adds nothing here but seconds:
    it is stubbed (the writer-kill test below keeps the real one), and the logs
    are in memory (tests/fixtures/scratch.py: ext4's journal made it minutes).
    """
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    for seed in range(CUT_CRASH_POINTS):
        rng = random.Random(seed)
        directory = mem_tmp_path / f"s{seed}" / "t-0"
        config = LogConfig(segment_bytes=rng.choice([400, 700, 2000]),
                           index_interval_bytes=rng.choice([0, 100, 500]))
        log = PartitionLog.open(directory, "t", 0, config, 0)
        total = rng.randint(0, 40)
        flushed_batches = 0
        for i in range(total):
            log.append_as_leader(payload_batch(i), 0, 0)
            if rng.random() < 0.1:
                log.flush(0)
                flushed_batches = i + 1
        recovery_point = log.recovery_point
        log.close_without_flush()
        what = _damage(rng, directory, recovery_point)
        try:
            log = PartitionLog.open(directory, "t", 0, config, 0,
                                    recovery_point=recovery_point)
            kept = assert_prefix(log, count_at_least=flushed_batches)
            assert kept <= total
            log.append_as_leader(payload_batch(kept), 0, 0)
            log.close()
            log = PartitionLog.open(directory, "t", 0, config, 0, clean_shutdown=True)
            assert assert_prefix(log) == kept + 1
            log.close()
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} ({what}): {exc}") from exc


# -- kill a writer -------------------------------------------------------------------

@pytest.mark.multiprocess
def test_recovery_after_killing_a_writer(tmp_path: Path) -> None:
    rng = random.Random(1234)
    log_dir_path = tmp_path / "logs"
    appended_before = 0
    for kill in range(KILL_CRASH_POINTS):
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(log_dir_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line == b"ready\n", proc.stderr.read() if proc.stderr else line
            time.sleep(rng.uniform(0.0, 0.15))  # a random crash point, not a timing assertion
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                     "log-start-offset-checkpoint"):
            read_offset_checkpoint(log_dir_path / name)  # never torn: always parses
        log_dir = LogDir.open(log_dir_path)
        assert not log_dir.had_clean_shutdown
        log = log_dir.open_partition("t", 0, WRITER_CONFIG, 0)
        try:
            kept = assert_prefix(log, count_at_least=appended_before)
        except AssertionError as exc:
            raise AssertionError(f"kill {kill}: {exc}") from exc
        appended_before = kept  # nothing acknowledged by a recovered open is lost later
        log.close_without_flush()
    assert appended_before > KILL_CRASH_POINTS  # the writers really appended between kills
