"""A group commit that fails on a full disk.

Run as ``python partition_log_group_commit_full_disk.py DIR`` with DIR on a
small file system of its own (the test mounts a tmpfs in a private mount
namespace). Idempotent batches are staged, the disk is filled, and the
commit must fail with StorageError and put the log back as it was before
them (offsets, high watermark, file, producer sequences); with room again
the same batches append as new ones. Prints one JSON line.

With ``marker`` after DIR the producer is transactional: its committed batches
and their commit marker come first, then the next transaction's first batch
(written: the general path opens the transaction), then the staged ones, which
push the written batches out of the producer's five. Their loss leaves an entry
with no batch and a marker of its epoch, whose next sequence is still any (not 0,
as for an epoch a marker brought).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import TRANSACTIONAL_BIT, build_batch

PAGE = 4096


def main(directory: Path, marker: bool) -> None:
    log = PartitionLog.open(directory / "t-0", "t", 0, LogConfig(), 0)
    attributes = TRANSACTIONAL_BIT if marker else 0
    for seq in range(5):  # some committed data first
        log.append_as_leader(build_batch([b"x" * 100], producer_id=3, producer_epoch=0,
                                         base_sequence=seq, attributes=attributes), 0, 0)
    first_staged = 5
    if marker:
        log.append_control(3, 0, True, 0, 0, 0)
        log.append_as_leader(build_batch([b"x" * 100], producer_id=3, producer_epoch=0,
                                         base_sequence=5, attributes=attributes), 0, 0,
                             defer=True)
        first_staged = 6
    log.update_high_watermark(log.log_end_offset)
    active = log.segments[-1]
    before = [log.log_end_offset, log.high_watermark, active.size]
    staged = [build_batch([b"y" * 3000], producer_id=3, producer_epoch=0, base_sequence=seq,
                          attributes=attributes)
              for seq in range(first_staged, first_staged + 20)]
    filler = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(filler, b"\0" * PAGE)
    except OSError:
        pass
    os.close(filler)
    for batch in staged:
        log.append_as_leader(batch, 0, 0, defer=True)
    log.update_high_watermark(log.log_end_offset)  # as a single-node leader does
    outcome: dict[str, object] = {"before": before, "staged": len(staged)}
    error = log.commit()
    outcome["commit"] = "committed" if error is None else f"StorageError: {error}"
    outcome["back_to"] = [log.log_end_offset, log.high_watermark, active.size]
    outcome["file_size"] = os.path.getsize(active.log_path)
    entry = log.producer_state.producers[3]
    outcome["entry"] = [len(entry.batches), entry.marker_offset]
    os.unlink(directory / "filler")
    try:
        for batch in staged:
            info = log.append_as_leader(batch, 0, 0, defer=True)
            if info.duplicate:
                raise RuntimeError("a lost batch was taken for a duplicate")
        outcome["reappended"] = "appended" if log.commit() is None else "failed"
    except Exception as exc:
        outcome["reappended"] = f"{type(exc).__name__}: {exc}"
    log.close()
    log = PartitionLog.open(directory / "t-0", "t", 0, LogConfig(), 0, clean_shutdown=True)
    outcome["reopened_leo"] = log.log_end_offset
    last = bytes(log.read(log.log_end_offset - 1, 10_000).records)
    outcome["last_read"] = last[17:] == staged[-1][17:]
    log.close()
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] == ["marker"])
