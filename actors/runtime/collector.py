"""The cyclic garbage collector of a serving broker process.

A request makes and drops a few dozen containers (messages, their rows, the
response's dicts), nearly all freed by their reference counts; but the
collector counts every container made less every one freed, and a turn of
the worker loop serving many requests at once runs that count past
CPython's default first threshold (700) several times a second: about one
young collection per 40 small requests in ``bench compare``'s
``small_requests`` load, each walking what the turn holds live at that
moment, and a full one every hundred of them; 3-4% of the broker's CPU for
cycles that are rare. The first threshold is raised so a collection comes
only once that many containers outlive what frees them; the older
generations keep CPython's ratios.
"""

from __future__ import annotations

import gc

# containers made and not freed before a young collection (CPython's default: 700)
SERVING_GEN0_THRESHOLD = 10_000


def tune_for_serving() -> None:
    """Set the collector's thresholds for a broker process that serves requests."""
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(SERVING_GEN0_THRESHOLD, gen1, gen2)


def begin_serving() -> None:
    """A broker process that has started and now serves: what starting made (modules,
    configs, open logs) lives as long as it does, so it goes out of the collector's sight
    (``gc.freeze``) and the full collections a load triggers walk only what serving made
    since, not the whole heap each time; then the serving thresholds. Every process of a
    broker calls this once, after its start."""
    gc.freeze()
    tune_for_serving()
