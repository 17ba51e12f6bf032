"""The lifetime of file regions (wire/file_region.py) once a segment handed them out.

A region's descriptor is owned by exactly one holder at a time: the message
carrying it, then the Kafka response built from it, then the Processor's
send queue. Every place that drops a region instead of passing it on closes
it here; so does every place that cuts one shorter (a Fetch's byte budget
over several shards), which needs the batch boundaries inside the region:
they come from the 12-byte batch heads, read from the file, never the records.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import Any

from wire.file_region import FileRegion, RegionAt

_HEAD = struct.Struct(">qi")  # base offset, batch length (the log overhead)
LOG_OVERHEAD = _HEAD.size


def close_region(region: FileRegion | RegionAt | None) -> None:
    """Close a region's descriptor (nothing for None; a second close is harmless)."""
    if region is None:
        return
    try:
        os.close(region.fd)
    except OSError:
        pass


def close_regions(rows: Iterable[Any]) -> int:
    """Close the regions of rows that may carry one (``row.region``); how many."""
    closed = 0
    for row in rows:
        region = getattr(row, "region", None)
        if region is not None:
            close_region(region)
            closed += 1
    return closed


def whole_batches_length(region: FileRegion, budget: int) -> int:
    """Bytes of the whole batches at the start of ``region`` that fit in ``budget``.

    The region begins at a batch boundary and holds whole batches; the walk
    reads one batch head per batch (at most what fits in the budget).
    """
    if region.length <= budget:
        return region.length
    end = 0
    while end + LOG_OVERHEAD <= region.length:
        head = os.pread(region.fd, LOG_OVERHEAD, region.position + end)
        if len(head) < LOG_OVERHEAD:
            break
        next_end = end + LOG_OVERHEAD + _HEAD.unpack(head)[1]
        if next_end > budget or next_end > region.length:
            break
        end = next_end
    return end


def first_batch_length(region: FileRegion) -> int:
    """Bytes of the first batch of ``region`` (0 if its head cannot be read)."""
    head = os.pread(region.fd, LOG_OVERHEAD, region.position)
    if len(head) < LOG_OVERHEAD:
        return 0
    return min(region.length, LOG_OVERHEAD + _HEAD.unpack(head)[1])
