"""The node's trace writer: batches of any size come out whole and in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.runtime.tracing import Tracer
from actors.trace.store import read_trace_dirs


@pytest.mark.parametrize("batch", [1, 15, 16, 17, 65_535, 65_536, 70_000])
def test_every_batch_size_is_written_whole_and_in_order(tmp_path: Path, batch: int) -> None:
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0)
    (tmp_path / "traces").mkdir()
    try:
        for i in range(batch):
            tracer.event("send", 1, i + 1, 0, "a", "b@n", "Hop", -1, -1, -1, i)
        tracer.flush()
        tracer.event("recv", 1, 1, 0, "b", "a@n", "Hop")
        tracer.flush()
    finally:
        tracer.close()
    events = read_trace_dirs([tmp_path])
    assert [e["bytes"] for e in events[:batch]] == list(range(batch))
    assert [e["kind"] for e in events[batch:]] == ["recv"]
    assert tracer.events_written == batch + 1


def test_segments_rotate_past_the_size_limit_and_old_ones_go(tmp_path: Path) -> None:
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0, file_max_bytes=4096, files_max=3)
    (tmp_path / "traces").mkdir()
    try:
        for round_ in range(10):
            for i in range(40):
                tracer.event("send", 1, round_ * 100 + i + 1, 0, "a", "b@n", "Hop")
            tracer.flush()
    finally:
        tracer.close()
    files = sorted((tmp_path / "traces").iterdir())
    assert len(files) == 3
    events = read_trace_dirs([tmp_path])
    assert events[-1]["span_id"] == 9 * 100 + 40  # the newest survive
