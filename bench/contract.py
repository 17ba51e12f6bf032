"""The benchmark JSON contract and the min/median/max spread every benchmark reports.

Standard library only, so that benchmarks of the plain install (no bench extra) use it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def min_median_max(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"min": 0.0, "median": 0.0, "max": 0.0}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_json(
    path: str | Path,
    bench: str,
    config: Mapping[str, Any],
    results: Mapping[str, Any],
    ratios: Mapping[str, float] | None = None,
) -> None:
    """The team's benchmark JSON contract."""
    doc = {
        "bench": bench,
        "config": dict(config),
        "results": dict(results),
        "ratios": dict(ratios or {}),
    }
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
