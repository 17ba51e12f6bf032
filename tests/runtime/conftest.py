"""Fixtures of the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.runtime.node import Node


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Nodes a test creates; every one is shut down afterwards."""
    created: list[Node] = []
    yield created
    for node in created:
        node.shutdown(timeout=5)
