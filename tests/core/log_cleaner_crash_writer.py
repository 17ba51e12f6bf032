"""The writer process the cleaner crash test kills: it appends a keyed stream to a
compacted log and cleans it, over and over.

Run as ``python log_cleaner_crash_writer.py LOG_DIR [STEP]``: it recovers the log
dir, continues the deterministic stream where the log ends, prints ``ready``,
then appends, flushes, checkpoints and cleans until it is killed. With STEP (a
swap step name such as ``manifest``, ``move``, ``delete``, ``manifest removed``)
it exits abruptly right after that step of its second swap, without closing
anything, as a crash there would leave the files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.core.log_cleaner import read_cleaner_checkpoint, write_cleaner_checkpoint
from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig
from actors.core.record_batch import build_batch
from tests.core.log_cleaner_harness import clean_once

CRASH_CONFIG = LogConfig(segment_bytes=900, index_interval_bytes=200,
                         cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.0,
                         delete_retention_ms=10**12)
KEYS = 7


def stream_record(i: int) -> tuple[bytes, bytes | None]:
    """Record ``i`` of the stream (it lands at offset ``i``): key, value (None: tombstone)."""
    key = b"k%d" % (i % KEYS)
    return key, (None if i % 11 == 5 else b"value-%d-" % i * (1 + i % 4))


def main(log_dir_path: Path, crash_step: str | None) -> None:
    log_dir = LogDir.open(log_dir_path)
    log = log_dir.open_partition("t", 0, CRASH_CONFIG, 0)
    checkpoints = read_cleaner_checkpoint(log_dir_path)
    i = log.log_end_offset
    swaps = 0

    def after_step(name: str) -> None:
        if crash_step is not None and swaps >= 1 and name.startswith(crash_step):
            os._exit(9)

    print("ready", flush=True)
    while True:
        key, value = stream_record(i)
        log.append_as_leader(build_batch([value], keys=[key], timestamps_ms=[i]), 0, 0)
        log.update_high_watermark(log.log_end_offset)
        i += 1
        if i % 10 == 0:
            log.flush(0)
            log_dir.checkpoint([log])
        if i % 25 == 0:
            plan = clean_once(log, checkpoints, log_dir.recovery_points[("t", 0)], 1_000_000,
                              pass_id=i, after_step=after_step)
            if plan is not None:
                swaps += 1
                write_cleaner_checkpoint(log_dir_path, checkpoints)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
