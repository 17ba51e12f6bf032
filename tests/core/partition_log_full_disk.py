"""A partition log on a full disk, at the moment the index needs a new page.

Run as ``python partition_log_full_disk.py DIR`` with DIR on a small file
system of its own (the test mounts a tmpfs in a private mount namespace).
Writing into a hole of a mapped file on a full disk raises SIGBUS and kills
the process; the log must reserve the index's disk blocks before it writes,
and refuse the append instead. Prints one JSON line with what happened.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.core import log_index
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from wire.errors import StorageError

PAGE = 4096


def tiny_batch(value_size: int) -> bytes:
    return build_batch([b"v" * value_size], timestamps_ms=[-1])  # no time index entries


def main(directory: Path) -> None:
    log_index.ALLOCATE_CHUNK = PAGE  # reserve a page at a time: reach the edge sooner
    log = PartitionLog.open(directory / "t-0", "t", 0, LogConfig(index_interval_bytes=0), 0)
    active = log.segments[-1]
    per_page = PAGE // 8
    # Until the index's last reserved page is exactly full while the log's last
    # page still has room for a batch: the next append needs index disk only.
    for _ in range(10 * per_page):
        entries = len(active.index_entries())
        room = -active.size % PAGE
        if entries and entries % per_page == 0 and room >= len(tiny_batch(0)):
            break
        log.append_as_leader(tiny_batch(1), 0, 0)
    else:
        raise SystemExit("never reached a full index page with room in the log's page")
    value = 100
    while len(tiny_batch(value)) > room:
        value -= 1
    fits = tiny_batch(value)
    before = (log.log_end_offset, active.size)
    filler = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(filler, b"\0" * PAGE)
    except OSError:
        pass
    os.close(filler)
    outcome: dict[str, object] = {"room": room, "batch": len(fits)}
    try:
        log.append_as_leader(fits, 0, 0)
        outcome["first"] = "appended"
    except StorageError as exc:
        outcome["first"] = f"StorageError: {exc}"
    outcome["unchanged"] = (log.log_end_offset, active.size) == before
    os.unlink(directory / "filler")
    log.append_as_leader(fits, 0, 0)
    outcome["after_space_freed"] = log.log_end_offset
    log.close()
    log = PartitionLog.open(directory / "t-0", "t", 0, LogConfig(index_interval_bytes=0), 0,
                            clean_shutdown=True)
    outcome["reopened_leo"] = log.log_end_offset
    outcome["last_read"] = bytes(log.read(log.log_end_offset - 1, 1000).records)[17:] == fits[17:]
    log.close()
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
