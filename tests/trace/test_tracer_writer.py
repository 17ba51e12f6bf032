"""The node's trace writer: row groups of any size come out whole and in order, files rotate."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.runtime.tracing import ROW_GROUP_ROWS, Tracer
from actors.trace import store
from actors.trace.store import read_trace_dirs, segments
from wire import trace_parquet as tp


@pytest.mark.parametrize("batch", [1, 7, 8, 9, 255, 256, 257, ROW_GROUP_ROWS, ROW_GROUP_ROWS + 1])
def test_every_batch_size_is_written_whole_and_in_order(tmp_path: Path, batch: int) -> None:
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0)
    (tmp_path / "traces").mkdir()
    try:
        for i in range(batch):
            # more distinct senders than 8 bits of dictionary index can name
            tracer.hop(1, i + 1, 0, "b", f"a{i % 300}@n", "Hop", -1, -1, -1, i, i, i, i)
        tracer.record("clock", 0, 0, 0, "_gateway", "m", "clock", sent_ns=1, recv_ns=2,
                      done_ns=3)
        tracer.flush()
        tracer.hop(1, 0, 0, "b", "a@n", "Last", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
    finally:
        tracer.close()
    records = read_trace_dirs([tmp_path])
    hops = [r for r in records if r["msg_type"] == "Hop"]
    assert [r["bytes"] for r in hops] == list(range(batch))
    assert [r["sender"] for r in hops] == [f"a{i % 300}@n" for i in range(batch)]
    assert {r["kind"] for r in hops} == {"hop"} and {r["node"] for r in records} == {"n"}
    assert [r["kind"] for r in records if r["msg_type"] != "Hop"] == ["clock", "hop"]
    assert tracer.records_written == batch + 2


def write_rounds(tmp_path: Path, rounds: int, files_max: int) -> None:
    """``rounds`` flushes of 40 hops each through a tracer rotating at 8 KiB."""
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0, file_max_bytes=8192,
                    files_max=files_max)
    (tmp_path / "traces").mkdir()
    try:
        for round_ in range(rounds):
            for i in range(40):
                tracer.hop(1, round_ * 100 + i + 1, 0, "b", "a@n", "Hop", -1, -1, -1, 0, 0, 0, 0)
            tracer.flush()
    finally:
        tracer.close()


def test_files_rotate_past_the_size_limit_and_old_ones_go(tmp_path: Path) -> None:
    write_rounds(tmp_path, rounds=10, files_max=3)
    files = segments([tmp_path])
    assert len(files) == 3
    for f in files:  # every file closed, a complete Parquet file within the bound
        data = f.read_bytes()
        assert tp.footer_start(data) is not None
        assert len(data) <= 8192 + 4096  # one row group past the estimate at most, and a footer
    records = read_trace_dirs([tmp_path])
    assert records[-1]["span_id"] == 9 * 100 + 40  # the newest survive


def test_readers_skip_a_file_rotated_away_after_they_listed_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running node deletes its oldest file past trace.files.max while `actorlog trace`
    or `analyze` goes through the files it listed: the rest are read, nothing raises."""
    write_rounds(tmp_path, rounds=6, files_max=10)
    listed = store.segments
    by_file = {f: [r["span_id"] for r in store.read_file(f)[1]] for f in listed([tmp_path])}
    assert len(by_file) >= 3

    def listed_then_rotated(dirs: list[Path]) -> list[Path]:
        found = listed(dirs)
        found[0].unlink()  # the node's rotation, between the listing and the reads
        return found

    monkeypatch.setattr(store, "segments", listed_then_rotated)
    left = sorted(by_file)[1:]
    assert [r["span_id"] for r in read_trace_dirs([tmp_path])] == [
        s for f in left for s in by_file[f]]
    left = left[1:]
    assert [r["span_id"] for r in store.iter_records([tmp_path])] == [
        s for f in left for s in by_file[f]]
    left = left[1:]
    paths, counts = store.parquet_inputs([tmp_path], tmp_path / "staging")
    assert paths == left and counts["files"] == counts["direct"] == len(left)


@pytest.mark.parametrize("size", [0, 3, 8, 11, 20])
def test_readers_skip_a_file_whose_header_is_not_written_yet(tmp_path: Path, size: int) -> None:
    """A running node's newest file is empty, or holds part of its header, until the
    writer's first flush: `actorlog trace list` and analyze's inputs read the other files
    and say nothing of it (it was "not an actorlog trace file", a traceback)."""
    write_rounds(tmp_path, rounds=3, files_max=10)
    records = read_trace_dirs([tmp_path])
    complete = sorted((tmp_path / "traces").iterdir())[-1].read_bytes()
    # named to sort last, as the newest file of a node does
    newest = tmp_path / "traces" / f"n-9999999999999999999-1-999999{tp.tf.FILE_SUFFIX}"
    newest.write_bytes(complete[:size])
    assert read_trace_dirs([tmp_path]) == records
    assert list(store.iter_records([tmp_path])) == records
    paths, counts = store.parquet_inputs([tmp_path], tmp_path / "staging")
    assert newest not in paths and counts["files"] == len(paths)
    follower = store.SegmentFollower([tmp_path])
    assert follower.poll() == records


def test_a_file_that_is_not_a_trace_file_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / f"n-1-1-000001{tp.tf.FILE_SUFFIX}").write_bytes(b"PAR1xxxxxxxxxxxx")
    with pytest.raises(ValueError, match="not an actorlog trace file"):
        read_trace_dirs([tmp_path])



def test_a_record_the_format_refuses_loses_its_row_group_not_the_tracer(
        tmp_path: Path) -> None:
    """A value out of its column's range (an int32 field given 2**40) fails that row group
    only: it is counted and logged, and the records after it are written to a new file
    and read back (the writer's thread had died of it, and tracing with it)."""
    (tmp_path / "traces").mkdir()
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0)
    try:
        tracer.hop(1, 1, 0, "b", "a@n", "Before", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
        tracer.hop(1, 2, 0, "b", "a@n", "Bad", -1, 1 << 40, -1, 0, 0, 0, 0)
        tracer.flush()
        tracer.hop(1, 3, 0, "b", "a@n", "After", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
    finally:
        tracer.close()
    assert tracer.records_lost == 1
    assert [r["msg_type"] for r in read_trace_dirs([tmp_path])] == ["Before", "After"]
    assert len(segments([tmp_path])) == 2


def test_a_row_group_the_disk_refuses_loses_only_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while a row group is written: counted, and tracing goes on in a new file."""
    import errno

    real = tp.SegmentWriter.write_columns
    failing = {"once": False}

    def write_columns(self: tp.SegmentWriter, *args: object, **kwargs: object) -> int:
        if failing["once"]:
            failing["once"] = False
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tp.SegmentWriter, "write_columns", write_columns)
    (tmp_path / "traces").mkdir()
    tracer = Tracer("n", tmp_path / "traces", sample_ratio=1.0)
    try:
        tracer.hop(1, 1, 0, "b", "a@n", "Before", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
        failing["once"] = True
        tracer.hop(1, 2, 0, "b", "a@n", "Lost", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
        tracer.hop(1, 3, 0, "b", "a@n", "After", -1, -1, -1, 0, 0, 0, 0)
        tracer.flush()
    finally:
        tracer.close()
    assert tracer.records_lost == 1
    assert [r["msg_type"] for r in read_trace_dirs([tmp_path])] == ["Before", "After"]
