"""Fixtures of the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger

from actors.runtime.node import Node


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Nodes a test creates; every one is shut down afterwards."""
    created: list[Node] = []
    yield created
    for node in created:
        node.shutdown(timeout=5)


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """Every line logged during the test, DEBUG and up."""
    lines: list[str] = []
    sink_id = logger.add(lambda m: lines.append(str(m)), level="DEBUG")
    yield lines
    logger.remove(sink_id)
