"""`actorlog bench log`: the partition log against plain file I/O on the same bytes.

Append: ``--total-mb`` of ~16 KiB v2 batches (incompressible values), one
batch per ``append_as_leader`` call (one Produce request's records), into a
fresh log; the baseline writes the very same batch bytes with one
``os.write`` each to a plain file in the same directory. Neither fsyncs in
the timed loop (the log's default flush policy leaves it to the OS), so both
measure the path to the page cache: the ratio is the log's own overhead
(header checks, CRC-32C, patching, index, producer state).

Group append: the same, with the log appending as a partition shard does
under load (``--group`` appends staged, then one commit: one writev for all
of them); the raw side still writes each batch with one ``os.write``.

Read: the whole log read front to back with ``read(offset, --fetch-kib)``
(whole batches, as a Fetch would), against ``os.pread`` of the same file in
chunks of the same size. Both are served from the page cache. Finding the
next fetch offset in the returned batches is the client's work and is not
timed.

Random reads: the same data laid out as 1 segment and as ``--segments``
segments; the mean cost of ``read(random offset, max_bytes = one batch)``
for each, over the same offsets in alternating blocks.
Finding the segment is a bisect over the bases and finding the batch a
search of the segment's memory-mapped offset index. A finished segment's
index is not held open: it is mapped on use (one of up to a page is read
whole instead), and a log keeps at most a few mapped, so reads spread over
many segments pay for opening indexes; the ratio says what that costs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.record_batch import build_batch
from bench.contract import min_median_max as _spread

BENCH_NAME = "log"
RATIO_KEYS = ("append_vs_raw", "group_append_vs_raw", "read_vs_raw",
              "random_read_1000_segments_vs_1", "append_vs_raw_cpu", "group_append_vs_raw_cpu")


def make_batches(batch_kib: int, distinct: int, seed: int = 7) -> list[bytes]:
    """``distinct`` batches of about ``batch_kib`` KiB each, 16 records of random bytes."""
    rng = random.Random(seed)
    records = 16
    value_size = max(1, (batch_kib * 1024 - 61) // records - 12)
    return [build_batch([rng.randbytes(value_size) for _ in range(records)],
                        timestamps_ms=[1_700_000_000_000] * records)
            for _ in range(distinct)]




BLOCK = 64  # operations per timed block; log and raw blocks alternate


def run_append(directory: Path, batches: list[bytes], count: int,
               group: int = 1) -> dict[str, float]:
    """Log appends and raw writes of the same batches, in alternating timed blocks.

    Alternating keeps both sides under the same machine load (other work on
    a shared box shifts both, not one), so the ratio is steadier than the
    absolute rates. Each side's CPU time (``time.thread_time``, this thread's user and
    system time) is taken over the same blocks: on a shared machine the wall ratio
    mostly measures preemption, the CPU ratio the work. With ``group`` > 1 the log
    side is a partition shard's group commit: ``group`` appends staged, then one
    commit (one writev); the raw side still writes each batch with its own os.write.
    """
    name = "log" if group == 1 else f"log-group-{group}"
    log = PartitionLog.open(directory / name / "bench-0", "bench", 0, LogConfig(), 0)
    # A leader's epoch is written when it becomes leader (PartitionState.leader_alone,
    # become_leader), not by a Produce: done here before the clock runs. Else the
    # first timed append writes and fsyncs the leader-epoch checkpoint (3-20 ms,
    # several per cent of a 128 MB pass), a cost the raw side has no counterpart of.
    log.assign_epoch_start_offset(0, 0)
    raw_path = directory / ("raw.bin" if group == 1 else f"raw-group-{group}.bin")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    n = len(batches)
    total = sum(len(batches[i % n]) for i in range(count))
    append = log.append_as_leader
    commit = log.commit
    write = os.write
    clock = time.perf_counter
    cpu = time.thread_time
    log_s = raw_s = log_cpu = raw_cpu = 0.0
    block_size = BLOCK if group == 1 else max(group, BLOCK // group * group)
    for block_start in range(0, count, block_size):
        block = range(block_start, min(block_start + block_size, count))
        start_cpu = cpu()
        start = clock()
        if group == 1:
            for i in block:
                append(batches[i % n], 0, 0)
        else:
            for i in block:
                append(batches[i % n], 0, 0, defer=True)
                if (i + 1) % group == 0:
                    commit()
            commit()
        middle = clock()
        middle_cpu = cpu()
        for i in block:
            write(fd, batches[i % n])
        end = clock()
        end_cpu = cpu()
        log_s += middle - start
        raw_s += end - middle
        log_cpu += middle_cpu - start_cpu
        raw_cpu += end_cpu - middle_cpu
    log.close_without_flush()
    os.close(fd)
    mb = total / 1e6
    return {"log_mb_s": mb / log_s, "raw_mb_s": mb / raw_s,
            "log_batches_s": count / log_s, "raw_batches_s": count / raw_s,
            # CPU seconds per side; max(): a side under the clock's resolution
            "log_cpu_s": max(log_cpu, 1e-9), "raw_cpu_s": max(raw_cpu, 1e-9)}


def run_read(directory: Path, fetch_bytes: int) -> dict[str, float]:
    """Read back what run_append wrote, log and raw file in alternating timed blocks."""
    log = PartitionLog.open(directory / "log" / "bench-0", "bench", 0, LogConfig(), 0,
                            clean_shutdown=True)
    fd = os.open(directory / "raw.bin", os.O_RDONLY)
    size = os.fstat(fd).st_size
    leo = log.log_end_offset
    read = log.read
    pread = os.pread
    clock = time.perf_counter
    log_bytes = 0
    offset = position = 0
    chunk = b""
    log_s = raw_s = 0.0
    while offset < leo or position < size:
        for _ in range(8):
            if offset >= leo:
                break
            start = clock()
            data = read(offset, fetch_bytes, None).records
            log_s += clock() - start
            log_bytes += len(data)
            # The next fetch offset comes from the last batch, as a client finds it;
            # that is the client's work, so it is left out of the log's time.
            offset = _next_offset(data)
        start = clock()
        for _ in range(8):
            if position >= size:
                break
            # Keep the buffer until the next read, as the log side keeps its result:
            # both then allocate alike.
            chunk = pread(fd, fetch_bytes, position)
            position += len(chunk)
        raw_s += clock() - start
    log.close_without_flush()
    os.close(fd)
    return {"log_mb_s": log_bytes / 1e6 / log_s, "raw_mb_s": size / 1e6 / raw_s}


def _next_offset(data: bytes | memoryview) -> int:
    """Walk the batch lengths to the last batch; its base offset + delta + 1."""
    view = memoryview(data)
    position = 0
    last = 0
    while position < len(view):
        last = position
        position += int.from_bytes(view[position + 8:position + 12], "big") + 12
    base = int.from_bytes(view[last:last + 8], "big")
    delta = int.from_bytes(view[last + 23:last + 27], "big")
    return base + delta + 1


def _build_log(directory: Path, batches: list[bytes], count: int,
               segments: int) -> PartitionLog:
    """``count`` batches laid out in about ``segments`` segments."""
    n = len(batches)
    total = sum(len(batches[i % n]) for i in range(count))
    segment_bytes = max(total // segments, len(batches[0])) if segments > 1 else total + 1
    log = PartitionLog.open(directory / f"seg{segments}" / "bench-0", "bench", 0,
                            LogConfig(segment_bytes=segment_bytes), 0)
    for i in range(count):
        log.append_as_leader(batches[i % n], 0, 0)
    if segments > 1 and len(log.segments) < segments * 0.9:
        raise click.ClickException(f"wanted {segments} segments, got {len(log.segments)}")
    return log


def run_random_reads(directory: Path, batches: list[bytes], count: int, segments: int,
                     reads: int, seed: int) -> tuple[float, float]:
    """Mean microseconds per read(random offset, one batch): 1 segment, ``segments``.

    The same data in both logs, the same offsets, read in alternating blocks.
    """
    one = _build_log(directory, batches, count, 1)
    many = _build_log(directory, batches, count, segments)
    rng = random.Random(seed)
    offsets = [rng.randrange(one.log_end_offset) for _ in range(reads)]
    fetch_bytes = len(batches[0])  # one batch per read, as a fetch sized for it
    clock = time.perf_counter
    one_s = many_s = 0.0
    for block_start in range(0, reads, BLOCK):
        block = offsets[block_start:block_start + BLOCK]
        start = clock()
        for offset in block:
            one.read(offset, fetch_bytes, None)
        middle = clock()
        for offset in block:
            many.read(offset, fetch_bytes, None)
        end = clock()
        one_s += middle - start
        many_s += end - middle
    one.close_without_flush()
    many.close_without_flush()
    return one_s / reads * 1e6, many_s / reads * 1e6


def run_bench(total_mb: int, batch_kib: int, fetch_kib: int, segments: int, reads: int,
              repeat: int, directory: str | None, group: int = 16) -> dict[str, Any]:
    batches = make_batches(batch_kib, distinct=64)
    count = max(1, total_mb * 1_000_000 // len(batches[0]))
    random_count = max(segments * 2, min(count, 8_000))
    appends: list[dict[str, float]] = []
    groups: list[dict[str, float]] = []
    readings: list[dict[str, float]] = []
    one: list[float] = []
    many: list[float] = []
    for rep in range(repeat):
        root = Path(tempfile.mkdtemp(prefix="log-bench-", dir=directory))
        try:
            appends.append(run_append(root, batches, count))
            groups.append(run_append(root, batches, count, group))
            readings.append(run_read(root, fetch_kib * 1024))
            one_us, many_us = run_random_reads(root, batches, random_count, segments, reads,
                                               rep)
            one.append(one_us)
            many.append(many_us)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def field(rows: list[dict[str, float]], key: str) -> dict[str, float]:
        return _spread([row[key] for row in rows])

    results = {
        "append_log_mb_s": field(appends, "log_mb_s"),
        "append_raw_mb_s": field(appends, "raw_mb_s"),
        "append_log_batches_s": field(appends, "log_batches_s"),
        "append_raw_batches_s": field(appends, "raw_batches_s"),
        "append_log_cpu_s": field(appends, "log_cpu_s"),
        "append_raw_cpu_s": field(appends, "raw_cpu_s"),
        "group_append_log_mb_s": field(groups, "log_mb_s"),
        "group_append_raw_mb_s": field(groups, "raw_mb_s"),
        "read_log_mb_s": field(readings, "log_mb_s"),
        "read_raw_mb_s": field(readings, "raw_mb_s"),
        "random_read_us_1_segment": _spread(one),
        "random_read_us_many_segments": _spread(many),
        "batch_bytes": len(batches[0]),
        "batches_appended": count,
        "random_read_log_batches": random_count,
    }
    ratios = {
        "append_vs_raw": statistics.median(a["log_mb_s"] / a["raw_mb_s"] for a in appends),
        "group_append_vs_raw": statistics.median(g["log_mb_s"] / g["raw_mb_s"] for g in groups),
        "read_vs_raw": statistics.median(r["log_mb_s"] / r["raw_mb_s"] for r in readings),
        "random_read_1000_segments_vs_1": statistics.median(
            o / m for o, m in zip(one, many, strict=True)),
        # as append_vs_raw, by CPU time over the same blocks (raw CPU / log CPU)
        "append_vs_raw_cpu": statistics.median(a["raw_cpu_s"] / a["log_cpu_s"] for a in appends),
        "group_append_vs_raw_cpu": statistics.median(
            g["raw_cpu_s"] / g["log_cpu_s"] for g in groups),
    }
    config = {"total_mb": total_mb, "batch_kib": batch_kib, "fetch_kib": fetch_kib,
              "group": group,
              "segments": segments, "random_reads": reads, "repeat": repeat,
              "directory": directory or tempfile.gettempdir()}
    return {"bench": BENCH_NAME, "config": config, "results": results, "ratios": ratios}


def _print_summary(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    results = report["results"]
    table = Table(title=f"partition log vs plain file I/O ({report['config']['total_mb']} MB of "
                        f"{results['batch_bytes']}-byte batches; min / median / max)")
    table.add_column("measure")
    table.add_column("log", justify="right")
    table.add_column("raw", justify="right")

    def fmt(spread: dict[str, float], digits: int = 0) -> str:
        return " / ".join(f"{spread[k]:,.{digits}f}" for k in ("min", "median", "max"))

    table.add_row("append MB/s", fmt(results["append_log_mb_s"]),
                  fmt(results["append_raw_mb_s"]))
    table.add_row("append batches/s", fmt(results["append_log_batches_s"]),
                  fmt(results["append_raw_batches_s"]))
    table.add_row(f"append MB/s, commit per {report['config']['group']}",
                  fmt(results["group_append_log_mb_s"]), fmt(results["group_append_raw_mb_s"]))
    table.add_row("read MB/s", fmt(results["read_log_mb_s"]), fmt(results["read_raw_mb_s"]))
    table.add_row("random read µs, 1 segment", fmt(results["random_read_us_1_segment"], 1), "")
    table.add_row(f"random read µs, {report['config']['segments']} segments",
                  fmt(results["random_read_us_many_segments"], 1), "")
    console = Console()
    console.print(table)
    for name, value in report["ratios"].items():
        console.print(f"{name}: {value:.3f}")


@click.command(name=BENCH_NAME)
@click.option("--total-mb", default=128, show_default=True, help="bytes appended per pass")
@click.option("--batch-kib", default=16, show_default=True, help="size of each batch")
@click.option("--fetch-kib", default=1024, show_default=True, help="max bytes per read")
@click.option("--segments", default=1000, show_default=True,
              help="segments of the many-segment log for random reads")
@click.option("--random-reads", default=5000, show_default=True)
@click.option("--repeat", default=3, show_default=True, help="timed repetitions")
@click.option("--group", default=16, show_default=True,
              help="appends per group commit (one writev) in the group append figure")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="where the logs go (default: the temp dir)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="write the report as JSON here")
def command(total_mb: int, batch_kib: int, fetch_kib: int, segments: int, random_reads: int,
            repeat: int, group: int, directory: str | None, json_path: str | None) -> None:
    """Partition log append and read throughput against raw file I/O."""
    if group < 2:
        raise click.BadParameter("must be at least 2", param_hint="--group")
    report = run_bench(total_mb, batch_kib, fetch_kib, segments, random_reads, repeat,
                       directory, group)
    _print_summary(report)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
