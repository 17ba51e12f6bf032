"""Trace files on disk: find them, read them, follow them, hand them to Spark.

Nodes write version 2 files (Parquet, one record per hop; layout in
``wire/trace_format.py``, codec in ``wire/trace_parquet.py``). Every reader here
returns version 2 records as dicts keyed by ``wire.trace_format.FIELDS``;
version 1 files (msgpack events, from before) are read too and turned into the
same records (:func:`records_from_v1`).

For Spark (:func:`parquet_inputs`), a closed version 2 file is read where it
lies, with no conversion; a file still being written (or cut short by a crash)
is copied with a footer added for its whole row groups; only version 1 files
are converted, once, into a staging directory.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from wire import trace_format as tf
from wire import trace_parquet as tp
from wire.api_versions import api_snake_name

_SUFFIXES = (tf.FILE_SUFFIX, tf.V1_FILE_SUFFIX)


def segments(dirs: list[Path]) -> list[Path]:
    """Every trace file (either version) under the given data dirs, trace dirs or files."""
    out: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            found = [p for suffix in _SUFFIXES for p in d.rglob(f"*{suffix}")]
            out.extend(sorted(found, key=lambda p: (str(p.parent), p.name)))
        elif d.exists():
            out.append(d)
    return out


def _map(path: Path) -> Any:
    """The file's bytes: an mmap for big files (readers slice it), bytes for small ones."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 1 << 20:
            return f.read()
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class HeaderNotWritten(ValueError):
    """A trace file whose header is not whole yet (see ``trace_parquet.HeaderNotWritten``)."""


# ----------------------------------------------------------------- version 2
def read_v2(path: Path, start: int | None = None) -> tuple[dict[str, Any], list[dict[str, Any]],
                                                          int]:
    """A version 2 file's header, its records from ``start`` on, and where they end."""
    data = _map(path)
    try:
        found = tp.scan(data, start)
    except tp.HeaderNotWritten as exc:
        raise HeaderNotWritten(f"{path}: {exc}") from None
    except tp.TraceFileError as exc:
        raise ValueError(f"{path}: {exc}") from None
    records: list[dict[str, Any]] = []
    for rg in found.row_groups:
        names = list(rg.columns)
        records.extend(dict(zip(names, row, strict=True))
                       for row in zip(*rg.columns.values(), strict=True))
    for rec in records:  # fields a later version may lack
        for name in tf.FIELDS:
            if name not in rec:
                rec[name] = "" if name in tf.STRING_FIELDS else (-1 if name == "offset" else 0)
    return found.meta, records, found.end


# ----------------------------------------------------------------- version 1
def _v1_header(obj: Any, path: Path) -> list[str]:
    if not isinstance(obj, dict) or obj.get("format") != tf.FORMAT_NAME:
        raise ValueError(f"{path}: not an actorlog trace file")
    if obj.get("version") != 1:
        raise ValueError(f"{path}: trace format version {obj.get('version')} is not supported")
    return list(obj["fields"])


def read_v1_events(path: Path) -> list[dict[str, Any]]:
    """A version 1 file's whole events as dicts (a torn tail is dropped)."""
    with open(path, "rb") as f:
        data = f.read()
    unpacker = msgpack.Unpacker(raw=False, use_list=False)
    unpacker.feed(data)
    fields: list[str] | None = None
    events: list[dict[str, Any]] = []
    try:
        for obj in unpacker:
            if fields is None:
                fields = _v1_header(obj, path)
            else:
                events.append(dict(zip(fields, obj, strict=False)))
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError):
        if fields is None:
            raise
    if fields is None:
        raise ValueError(f"{path}: empty trace file")
    return events


class V1Converter:
    """Turns version 1 events (send, recv, done per message; net_in, net_out per
    request) into version 2 records as they complete: a hop at its ``done``, a
    request at its ``net_out``. Times become wall clock, like version 2's."""

    def __init__(self) -> None:
        self._sends: dict[tuple[int, int], dict[str, Any]] = {}
        self._recvs: dict[tuple[int, int], dict[str, Any]] = {}
        self._ins: dict[int, dict[str, Any]] = {}

    def feed(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        kind = ev["kind"]
        if kind == "send":
            self._sends[(ev["trace_id"], ev["span_id"])] = ev
        elif kind == "recv":
            self._recvs[(ev["trace_id"], ev["span_id"])] = ev
        elif kind == "net_in":
            self._ins[ev["trace_id"]] = ev
        elif kind == "done":
            key = (ev["trace_id"], ev["span_id"])
            recv = self._recvs.pop(key, None)
            if recv is None:
                return None
            send = self._sends.pop(key, None)
            return _record(
                "hop", recv, sender=recv["peer"], size=recv["bytes"],
                sent=send["wall_ns"] if send is not None else recv["wall_ns"],
                recv=recv["wall_ns"], done=ev["wall_ns"], msg_type=recv["msg_type"])
        elif kind == "net_out":
            net_in = self._ins.get(ev["trace_id"])
            if net_in is None:
                return None
            return _record(
                "request", net_in, sender=net_in["peer"], size=net_in["bytes"],
                sent=net_in["wall_ns"], recv=net_in["wall_ns"], done=ev["wall_ns"],
                msg_type=api_snake_name(net_in["api_key"]), bytes_out=ev["bytes"])
        return None


def _record(kind: str, ev: dict[str, Any], *, sender: str, size: int, sent: int, recv: int,
            done: int, msg_type: str, bytes_out: int = 0) -> dict[str, Any]:
    return {
        "kind": kind, "trace_id": ev["trace_id"],
        "span_id": ev["span_id"] if kind == "hop" else 0,
        "parent_span_id": ev["parent_span_id"] if kind == "hop" else 0,
        "node": ev["node"], "actor": ev["actor"], "sender": sender, "msg_type": msg_type,
        "conn_id": ev["conn_id"], "corr_id": ev["corr_id"], "api_key": ev["api_key"],
        "bytes": size, "bytes_out": bytes_out, "sent_ns": sent, "recv_ns": recv, "done_ns": done,
        "clock_offset_ns": ev["clock_offset_ns"], "link_trace_id": 0, "link_span_id": 0,
        "offset": -1, "detail": "",
    }


def records_from_v1(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Version 2 records for a list of version 1 events (in file order)."""
    conv = V1Converter()
    out = []
    for ev in events:
        rec = conv.feed(ev)
        if rec is not None:
            out.append(rec)
    return out


# ----------------------------------------------------------------- any version
def read_file(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trace file's header and its whole records (version 1 files are converted)."""
    if path.name.endswith(tf.V1_FILE_SUFFIX):
        return {"version": 1}, records_from_v1(read_v1_events(path))
    meta, records, _end = read_v2(path)
    return meta, records


def _listed_files(dirs: list[Path]) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """read_file of every trace file under ``dirs`` that is still there when its turn
    comes (a running node deletes its oldest files past ``trace.files.max``) and has
    its header (a running node's newest file is empty until its first flush)."""
    for path in segments([Path(d) for d in dirs]):
        try:
            yield read_file(path)
        except (FileNotFoundError, HeaderNotWritten):
            continue


def read_trace_dirs(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every whole record of every trace file under ``dirs`` (data dirs, trace dirs, files)."""
    records: list[dict[str, Any]] = []
    for _meta, found in _listed_files(dirs):
        records.extend(found)
    return records


def iter_records(dirs: list[Path]) -> Iterator[dict[str, Any]]:
    for _meta, found in _listed_files(dirs):
        yield from found


class SegmentFollower:
    """The records appended to every trace file of some dirs since the last call."""

    def __init__(self, dirs: list[Path], from_end: bool = False) -> None:
        self.dirs = [Path(d) for d in dirs]
        self._pos: dict[Path, int] = {}
        self._v1: dict[Path, tuple[int, msgpack.Unpacker, list[str] | None, V1Converter]] = {}
        if from_end:
            for path in segments(self.dirs):
                self.poll_file(path, skip=True)

    def poll(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for path in segments(self.dirs):
            records.extend(self.poll_file(path))
        return records

    def poll_file(self, path: Path, skip: bool = False) -> list[dict[str, Any]]:
        try:
            if path.name.endswith(tf.V1_FILE_SUFFIX):
                return self._poll_v1(path, skip)
            _meta, records, end = read_v2(path, self._pos.get(path))
        except FileNotFoundError:
            self._pos.pop(path, None)
            self._v1.pop(path, None)
            return []
        except ValueError:
            return []  # not even a whole header yet
        self._pos[path] = end
        return [] if skip else records

    def _poll_v1(self, path: Path, skip: bool) -> list[dict[str, Any]]:
        pos, unpacker, fields, conv = self._v1.get(path) or (
            0, msgpack.Unpacker(raw=False, use_list=False), None, V1Converter())
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
        unpacker.feed(data)
        out: list[dict[str, Any]] = []
        try:
            for obj in unpacker:
                if fields is None:
                    fields = _v1_header(obj, path)
                    continue
                rec = conv.feed(dict(zip(fields, obj, strict=False)))
                if rec is not None and not skip:
                    out.append(rec)
        except (msgpack.FormatError, msgpack.StackError, ValueError):
            pass
        self._v1[path] = (pos + len(data), unpacker, fields, conv)
        return out


# ------------------------------------------------------------------ for Spark
def parquet_inputs(dirs: list[Path], staging: Path) -> tuple[list[Path], dict[str, int]]:
    """Parquet files Spark can read for every trace file under ``dirs``.

    A closed version 2 file is returned as it is (read in place). A version 2
    file without a footer is copied into ``staging`` with one added for its whole
    row groups. A version 1 file is converted into ``staging`` (in Python, once:
    the result is kept, keyed by the file's name, size and modification time).
    Returns the paths and counts ``{"files", "direct", "salvaged", "converted",
    "reused"}``.
    """
    staging.mkdir(parents=True, exist_ok=True)
    manifest_path = staging / "manifest.json"
    try:
        manifest: dict[str, list[int]] = json.loads(manifest_path.read_text())
    except (FileNotFoundError, ValueError):
        manifest = {}
    counts = {"files": 0, "direct": 0, "salvaged": 0, "converted": 0, "reused": 0}
    outs: list[Path] = []
    keep: set[Path] = set()
    new_manifest: dict[str, list[int]] = {}
    inside = staging.resolve()
    found = [s for s in segments(dirs) if inside not in s.resolve().parents]
    for i, seg in enumerate(found):
        if seg.name.endswith(tf.FILE_SUFFIX):
            try:
                data = _map(seg)
            except FileNotFoundError:
                continue  # a running node deleted it past trace.files.max since the listing
            if tp.footer_start(data) is not None:
                counts["files"] += 1
                outs.append(seg)
                counts["direct"] += 1
                continue
            try:
                whole = tp.salvage(data)
            except tp.HeaderNotWritten:
                continue  # a running node's newest file, its header not flushed yet
            counts["files"] += 1
            out = staging / f"{i:06d}-{seg.name}"
            tmp = out.with_suffix(".tmp")
            tmp.write_bytes(whole)
            os.replace(tmp, out)
            outs.append(out)
            keep.add(out)
            counts["salvaged"] += 1
            continue
        counts["files"] += 1
        st = seg.stat()
        key = str(seg.resolve())
        sig = [st.st_size, st.st_mtime_ns]
        out = staging / f"{i:06d}-{seg.name[: -len(tf.V1_FILE_SUFFIX)]}{tf.FILE_SUFFIX}"
        new_manifest[key] = sig
        keep.add(out)
        outs.append(out)
        if manifest.get(key) == sig and out.exists():
            counts["reused"] += 1
            continue
        write_records(out, records_from_v1(read_v1_events(seg)),
                      {"node": "", "converted_from": seg.name})
        counts["converted"] += 1
    for stale in set(staging.glob(f"*{tf.FILE_SUFFIX}")) - keep:
        stale.unlink()
    manifest_path.write_text(json.dumps(new_manifest))
    return outs, counts


def write_records(path: Path, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """A closed version 2 file holding ``records`` (dicts), written atomically."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        w = tp.SegmentWriter(f, meta)
        rows = [tuple(rec[name] for name in tf.FIELDS) for rec in records]
        for k in range(0, len(rows), 65_536):
            w.write_rows(rows[k:k + 65_536])
        w.close()
    os.replace(tmp, path)
