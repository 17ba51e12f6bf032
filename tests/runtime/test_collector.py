"""The collector's thresholds in a serving broker process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from actors.runtime.collector import SERVING_GEN0_THRESHOLD, tune_for_serving


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 7, 9)  # odd older ratios: they must be kept as found
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*saved)


def test_serving_raises_the_young_threshold_and_keeps_the_older_ratios(
        thresholds: tuple[int, int, int]) -> None:
    tune_for_serving()
    assert gc.get_threshold() == (SERVING_GEN0_THRESHOLD, 7, 9)
    assert SERVING_GEN0_THRESHOLD > 700
