"""Trace segments on disk: find them, read them, follow them, and roll them into Parquet.

Nodes append msgpack (format in ``wire/trace_format.py``): about a
microsecond and a half per event in the node's writer thread, and a crash
loses at most the last partial event. Spark reads Parquet far faster than
msgpack, so analysis converts each segment to one Parquet file with pyarrow
(about 4.4 us per event on this machine, in parallel processes) and keeps
the result in a staging directory keyed by the segment's name, size and
modification time: a closed segment is converted once, however often it is
analysed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgpack

from wire import trace_format as tf

STRING_FIELDS = frozenset({"kind", "node", "actor", "peer", "msg_type"})


def segments(dirs: list[Path]) -> list[Path]:
    """Every trace segment under the given data dirs, trace dirs or files."""
    out: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            out.extend(sorted(d.rglob(f"*{tf.FILE_SUFFIX}")))
        elif d.exists():
            out.append(d)
    return out


def check_header(obj: Any, path: Path) -> list[str]:
    """The event field names of a segment whose header is ``obj``."""
    if not isinstance(obj, dict) or obj.get("format") != tf.FORMAT_NAME:
        raise ValueError(f"{path}: not an actorlog trace file")
    if obj.get("version") not in tf.READABLE_VERSIONS:
        raise ValueError(f"{path}: trace format version {obj.get('version')} is not supported")
    return list(obj["fields"])


def read_rows(path: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    """A segment's field names and its whole events as tuples (a torn tail is dropped)."""
    with open(path, "rb") as f:
        data = f.read()
    unpacker = msgpack.Unpacker(raw=False, use_list=False)
    unpacker.feed(data)
    fields: list[str] | None = None
    rows: list[tuple[Any, ...]] = []
    try:
        for obj in unpacker:
            if fields is None:
                fields = check_header(obj, path)
            else:
                rows.append(obj)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError):
        if fields is None:
            raise
    if fields is None:
        raise ValueError(f"{path}: empty trace file")
    return fields, rows


class SegmentFollower:
    """Reads the events appended to every segment of some dirs since the last call."""

    def __init__(self, dirs: list[Path], from_end: bool = False) -> None:
        self.dirs = dirs
        self._state: dict[Path, tuple[int, msgpack.Unpacker, list[str] | None]] = {}
        if from_end:
            for path in segments(dirs):
                self.poll_file(path, skip=True)

    def poll(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for path in segments(self.dirs):
            events.extend(self.poll_file(path))
        return events

    def poll_file(self, path: Path, skip: bool = False) -> list[dict[str, Any]]:
        pos, unpacker, fields = self._state.get(path, (0, None, None))  # type: ignore[arg-type]
        if unpacker is None:
            unpacker = msgpack.Unpacker(raw=False, use_list=False)
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            self._state.pop(path, None)
            return []
        unpacker.feed(data)
        out: list[dict[str, Any]] = []
        try:
            for obj in unpacker:
                if fields is None:
                    fields = check_header(obj, path)
                elif not skip:
                    out.append(dict(zip(fields, obj, strict=False)))
        except (msgpack.FormatError, msgpack.StackError, ValueError):
            pass
        self._state[path] = (pos + len(data), unpacker, fields)
        return out


# ------------------------------------------------------------------ Parquet
def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [(name, pa.string() if name in STRING_FIELDS else pa.int64()) for name in tf.FIELDS]
    )


def segment_to_parquet(path: Path, out: Path) -> int:
    """Convert one segment; returns its event count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields, rows = read_rows(path)
    schema = arrow_schema()
    if fields != list(tf.FIELDS):  # an older layout: reorder, fill what is missing
        idx = [fields.index(n) if n in fields else None for n in tf.FIELDS]
        rows = [
            tuple(
                r[i] if i is not None else (0 if n not in STRING_FIELDS else "")
                for i, n in zip(idx, tf.FIELDS, strict=False)
            )
            for r in rows
        ]
    arr = pa.array(rows, type=pa.struct(list(schema)))
    table = pa.Table.from_struct_array(arr) if len(rows) else schema.empty_table()
    tmp = out.with_suffix(".tmp")
    pq.write_table(table, tmp, compression="snappy")
    os.replace(tmp, out)
    return len(rows)


def _convert_one(args: tuple[str, str]) -> int:
    return segment_to_parquet(Path(args[0]), Path(args[1]))


def to_parquet(
    dirs: list[Path], staging: Path, workers: int | None = None
) -> tuple[list[Path], dict[str, int]]:
    """Parquet files for every segment under ``dirs``, converting only new or grown ones.

    Returns the Parquet paths and counts ``{"segments", "converted", "reused"}``.
    """
    staging.mkdir(parents=True, exist_ok=True)
    manifest_path = staging / "manifest.json"
    try:
        manifest: dict[str, list[int]] = json.loads(manifest_path.read_text())
    except (FileNotFoundError, ValueError):
        manifest = {}
    todo: list[tuple[str, str]] = []
    outs: list[Path] = []
    new_manifest: dict[str, list[int]] = {}
    for i, seg in enumerate(segments(dirs)):
        st = seg.stat()
        key = str(seg.resolve())
        out = staging / f"{i:06d}-{seg.name[: -len(tf.FILE_SUFFIX)]}.parquet"
        sig = [st.st_size, st.st_mtime_ns]
        outs.append(out)
        new_manifest[key] = sig
        if manifest.get(key) != sig or not out.exists() or manifest.get("#" + key) != [i]:
            todo.append((str(seg), str(out)))
        new_manifest["#" + key] = [i]
    for stale in set(staging.glob("*.parquet")) - set(outs):
        stale.unlink()
    workers = workers or min(4, os.cpu_count() or 1)
    if len(todo) > 1 and workers > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            list(pool.map(_convert_one, todo))
    else:
        for item in todo:
            _convert_one(item)
    manifest_path.write_text(json.dumps(new_manifest))
    return outs, {"segments": len(outs), "converted": len(todo), "reused": len(outs) - len(todo)}


def iter_events(dirs: list[Path]) -> Iterator[dict[str, Any]]:
    for path in segments(dirs):
        fields, rows = read_rows(path)
        for row in rows:
            yield dict(zip(fields, row, strict=False))


def read_trace_file(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and every whole event of one trace file (any readable version), as dicts."""
    with open(path, "rb") as f:
        data = f.read()
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    try:
        for obj in unpacker:
            if header is None:
                if not isinstance(obj, dict) or obj.get("format") != tf.FORMAT_NAME:
                    raise ValueError(f"{path}: not an actorlog trace file")
                if obj.get("version") not in tf.READABLE_VERSIONS:
                    raise ValueError(
                        f"{path}: trace format version {obj.get('version')} is not supported")
                header = obj
                fields = obj["fields"]
                continue
            events.append(dict(zip(fields, obj, strict=False)))  # as the file's header names
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError) as exc:
        if header is None:
            raise
        del exc  # a torn tail after a crash: keep what is whole
    if header is None:
        raise ValueError(f"{path}: empty trace file")
    return header, events


def read_trace_dirs(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every whole event of every trace file under ``dirs`` (data dirs, trace dirs or files)."""
    events: list[dict[str, Any]] = []
    for d in dirs:
        files = sorted(Path(d).rglob(f"*{tf.FILE_SUFFIX}")) if Path(d).is_dir() else [Path(d)]
        for path in files:
            events.extend(read_trace_file(path)[1])
    return events
