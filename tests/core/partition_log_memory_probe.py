"""Anonymous memory per GB retained in a partition log (issue 13: <= 3 MB per GB).

Run as ``python partition_log_memory_probe.py DIR [--total-mb N] [--min-kib A]
[--max-kib B] [--seconds S]``: appends batches of A..B KiB (prebuilt, reused)
into a real PartitionLog with the default config until N MB or S seconds, and
prints one JSON line with RssAnon (from /proc/self/status) before and after.
A warm-up of 64 MB comes first, so allocations made once (imports, allocator
arenas, the first segment) are not counted as growth per GB. Uses only the
public PartitionLog API, so the same probe measures older implementations.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from pathlib import Path

if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch

WARM_UP_BYTES = 64 * 1024 * 1024


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def make_batches(min_kib: int, max_kib: int, count: int = 32, seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        size = rng.randint(min_kib * 1024, max_kib * 1024)
        records = max(1, min(16, size // 1024))
        value = max(1, size // records - 20)
        out.append(build_batch([rng.randbytes(value) for _ in range(records)],
                               timestamps_ms=[1_700_000_000_000] * records))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--total-mb", type=int, default=3072)
    parser.add_argument("--min-kib", type=int, default=100)
    parser.add_argument("--max-kib", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=240.0)
    args = parser.parse_args()
    batches = make_batches(args.min_kib, args.max_kib)
    log = PartitionLog.open(args.directory / "probe-0", "probe", 0, LogConfig(), 0)
    appended = i = 0
    while appended < WARM_UP_BYTES:
        raw = batches[i % len(batches)]
        log.append_as_leader(raw, 0, 0)
        appended += len(raw)
        i += 1
    gc.collect()
    before = rss_anon_kib()
    start = time.monotonic()
    deadline = start + args.seconds
    target = args.total_mb * 1024 * 1024
    retained = 0
    while retained < target and time.monotonic() < deadline:
        for _ in range(64):
            raw = batches[i % len(batches)]
            log.append_as_leader(raw, 0, 0)
            retained += len(raw)
            i += 1
    elapsed = time.monotonic() - start
    gc.collect()
    after = rss_anon_kib()
    gib = retained / 2**30
    print(json.dumps({
        "retained_bytes": retained, "batches": i, "seconds": round(elapsed, 1),
        "segments": len(log.segment_base_offsets),
        "rss_anon_before_kib": before, "rss_anon_after_kib": after,
        "growth_mib_per_gib": round((after - before) / 1024 / gib, 3) if gib else None,
    }), flush=True)
    log.close_without_flush()


if __name__ == "__main__":
    main()
