"""This process's limits on open partitions, read for the controllers' checks
(actors/core/partition_budget.py decides with them)."""

from __future__ import annotations

import resource
from pathlib import Path

from actors.core.partition_budget import PartitionBudget

MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")


def read_partition_budget() -> PartitionBudget:
    """The soft open-files limit (as ``ulimit -n`` shows it, after the broker raised it to
    the hard limit) and ``vm.max_map_count`` where Linux says it. Read per request: both
    can change while the node runs (prlimit, sysctl)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 30
    try:
        max_maps: int | None = int(MAX_MAP_COUNT.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        max_maps = None
    return PartitionBudget(int(soft), max_maps)
