"""The writer process the crash tests kill, and the batch stream it appends.

Kept apart from the test module so the subprocess does not import pytest.
Run as ``python partition_log_crash_writer.py LOG_DIR``: it recovers the log
dir, continues the deterministic stream where the log stands, prints
``ready``, then appends, flushes and checkpoints until it is killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.core.log_dir import LogDir
from actors.core.partition_log import LogConfig
from actors.core.record_batch import build_batch, check_batches

WRITER_CONFIG = LogConfig(segment_bytes=4000, index_interval_bytes=300)


def payload_batch(i: int) -> bytes:
    """Batch number ``i`` of the deterministic stream the writers append."""
    n = 1 + i % 3
    values = [f"batch-{i}-record-{j}-".encode() * (1 + (i * 7 + j) % 5) for j in range(n)]
    return build_batch(values, timestamps_ms=[1_000 + i] * n)


def main(log_dir_path: Path) -> None:
    log_dir = LogDir.open(log_dir_path)
    log = log_dir.open_partition("t", 0, WRITER_CONFIG, 0)
    i = offset = 0
    while offset < log.log_end_offset:
        (h,) = check_batches(payload_batch(i))
        offset += h.last_offset_delta + 1
        i += 1
    print("ready", flush=True)
    while True:
        log.append_as_leader(payload_batch(i), 0, 0)
        log.update_high_watermark(log.log_end_offset)
        i += 1
        if i % 7 == 0:
            log.flush(0)
        if i % 5 == 0:
            log_dir.checkpoint([log])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
