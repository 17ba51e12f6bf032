"""Trace records: sampled at the start of a chain, one per hop, written off the hot path.

An actor that has handled a traced message appends one short tuple (``HOP_FIELDS``)
to the tracer's ``hops`` deque (atomic under the GIL, no lock shared between
actors); Processors and gateways append whole records of the other kinds. One
writer thread per node drains both into row groups of size-bounded, rotated
Parquet files under ``<data dir>/traces`` (format: ``wire/trace_format.py``,
codec: ``wire/trace_parquet.py``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import msgpack
from loguru import logger

from actors.runtime.clock import Clock, SystemClock
from wire import registry
from wire import trace_format as tf
from wire.trace_parquet import Pick, Repeat, SegmentWriter

_getrandbits = random.getrandbits
_packb = msgpack.packb
_unpackb = msgpack.unpackb

HOP_FIELDS: tuple[str, ...] = (
    "trace_id", "span_id", "parent_span_id", "actor", "sender", "msg_type",
    "conn_id", "corr_id", "api_key", "bytes", "sent_ns", "recv_ns", "done_ns",
    "clock_offset_ns",
)
"""What an actor appends per handled hop; the other fields of a hop record are
the same for every hop (``kind`` "hop", the node, no link, offset or detail)."""
REQUEST_FIELDS: tuple[str, ...] = (
    "trace_id", "actor", "sender", "msg_type", "conn_id", "corr_id", "api_key", "bytes",
    "bytes_out", "recv_ns", "done_ns", "clock_offset_ns",
)
"""What a Processor appends per finished request (``kind`` "request", sent_ns = recv_ns)."""


def _layout(fields: tuple[str, ...], kind: str, **alias: str) -> dict[str, Any]:
    """Where each record field comes from: a tuple index, or a constant."""
    constants = {"kind": kind, "node": None, "span_id": 0, "parent_span_id": 0, "bytes_out": 0,
                 "link_trace_id": 0, "link_span_id": 0, "offset": -1, "detail": ""}
    out: dict[str, Any] = {}
    for name in tf.FIELDS:
        source = alias.get(name, name)
        out[name] = fields.index(source) if source in fields else Repeat(constants[name], 0)
    return out


_HOP_LAYOUT = _layout(HOP_FIELDS, "hop")
_REQUEST_LAYOUT = _layout(REQUEST_FIELDS, "request", sent_ns="recv_ns")
_RECORD_LAYOUT = {name: i for i, name in enumerate(tf.FIELDS)}
ROW_GROUP_ROWS = 16_384
"""Rows per row group at most (a row group costs the writer a few microseconds a row)."""
PAUSE_ROWS = 2_048
"""The writer lets the actors have the GIL after each column and every this many
rows of a column: it holds the GIL a few hundred microseconds at a time."""
PAUSE_S = 0.00005
"""How long the writer steps aside at a pause (see :func:`_let_others_run`)."""


def new_id() -> int:
    """A random non-zero 63-bit id (0 means "no trace")."""
    return _getrandbits(63) or 1


class Tracer:
    """Per-node trace sampling, record sinks and the writer thread."""

    def __init__(
        self,
        node: str,
        directory: Path | None,
        sample_ratio: float = 0.0,
        file_max_bytes: int = 64 * 1024 * 1024,
        files_max: int = 16,
        flush_interval_s: float = 0.5,
        clock: Clock | None = None,
    ) -> None:
        if not 0.0 <= sample_ratio <= 1.0:
            raise ValueError(f"trace.sample.ratio must be within [0, 1], got {sample_ratio}")
        self.node = node
        self.directory = directory
        self.sample_ratio = sample_ratio if directory is not None else 0.0
        self.enabled = self.sample_ratio > 0.0
        self.file_max_bytes = file_max_bytes
        self.files_max = files_max
        self.clock_offset_ns = 0
        clock = clock or SystemClock()
        self.wall_ns = clock.wall_ns
        """The clock of trace records (wall time, ns): the node's, as the envelopes' send times."""
        self.hops: deque[tuple[Any, ...]] = deque()
        self.requests: deque[tuple[Any, ...]] = deque()
        self.records: deque[tuple[Any, ...]] = deque()
        self._flush_interval_s = flush_interval_s
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()  # only the writer thread and flush/close take it
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._writer: SegmentWriter | None = None
        self._path: Path | None = None
        self._seq = 0
        self._last_write = time.monotonic()
        self.records_written = 0
        self.records_lost = 0  # refused by the file format (see _lost_row_group)
        self._lost_logged: set[type] = set()

    # -- sampling ---------------------------------------------------------
    def sample(self) -> int:
        """A new trace id if this chain is sampled, else 0."""
        ratio = self.sample_ratio
        if ratio >= 1.0:
            return new_id()
        if ratio <= 0.0 or random.random() >= ratio:
            return 0
        return new_id()

    # -- records ----------------------------------------------------------
    def hop(self, trace_id: int, span_id: int, parent_span_id: int, actor: str, sender: str,
            msg_type: str, conn_id: int, corr_id: int, api_key: int, size: int,
            sent_ns: int, recv_ns: int, done_ns: int) -> None:
        """One handled message (``Actor`` appends the same tuple inline)."""
        self.hops.append((trace_id, span_id, parent_span_id, actor, sender, msg_type, conn_id,
                          corr_id, api_key, size, sent_ns, recv_ns, done_ns,
                          self.clock_offset_ns))

    def request(self, trace_id: int, processor: str, peer: str, api: str, conn_id: int,
                corr_id: int, api_key: int, size: int, bytes_out: int, in_ns: int,
                out_ns: int) -> None:
        """A finished Kafka request: the client leg, from net in to net out."""
        self.requests.append((trace_id, processor, peer, api, conn_id, corr_id, api_key, size,
                              bytes_out, in_ns, out_ns, self.clock_offset_ns))

    def record(
        self,
        kind: str,
        trace_id: int,
        span_id: int,
        parent_span_id: int,
        actor: str,
        sender: Any,
        msg_type: Any,
        conn_id: int = -1,
        corr_id: int = -1,
        api_key: int = -1,
        size: int = 0,
        bytes_out: int = 0,
        sent_ns: int = 0,
        recv_ns: int = 0,
        done_ns: int = 0,
        link_trace_id: int = 0,
        link_span_id: int = 0,
        offset: int = -1,
        detail: str = "",
    ) -> None:
        """A record of any kind (``wire/trace_format.py`` says what each field means)."""
        self.records.append((kind, trace_id, span_id, parent_span_id, self.node, actor, sender,
                             msg_type, conn_id, corr_id, api_key, size, bytes_out, sent_ns,
                             recv_ns, done_ns, self.clock_offset_ns, link_trace_id,
                             link_span_id, offset, detail))

    # -- writer -----------------------------------------------------------
    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name=f"trace-writer-{self.node}",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        self._drain(everything=True)
        with self._drain_lock:
            self._close_file()

    def flush(self) -> None:
        """Write out everything queued so far (tests, shutdown)."""
        self._drain(everything=True)

    def _run(self) -> None:
        # Wake often, write when a row group is full or the oldest queued record has
        # waited flush_interval_s: big row groups under load, little delay when quiet.
        tick = min(0.1, self._flush_interval_s)
        while not self._stop.wait(tick):
            if len(self.hops) + len(self.records) >= ROW_GROUP_ROWS or (
                time.monotonic() - self._last_write >= self._flush_interval_s
            ):
                self._drain()

    def _drain(self, everything: bool = False) -> None:
        if not self.enabled:
            return
        with self._drain_lock:
            queues = ((self.hops, _HOP_LAYOUT), (self.requests, _REQUEST_LAYOUT),
                      (self.records, _RECORD_LAYOUT))
            while any(q for q, _layout in queues):
                room = ROW_GROUP_ROWS
                batches = []
                for q, layout in queues:
                    n = min(len(q), room)
                    room -= n
                    if n:
                        popleft = q.popleft
                        batches.append(([popleft() for _ in range(n)], layout))
                try:
                    self._write_row_group(batches)
                except Exception as exc:  # the writer thread must not die of it
                    self._lost_row_group(batches, exc)
                if not everything and sum(len(q) for q, _layout in queues) < ROW_GROUP_ROWS:
                    break  # the rest waits for the next turn: the actors get the GIL back
            self._last_write = time.monotonic()

    def _lost_row_group(self, batches: list[tuple[list[tuple[Any, ...]], dict[str, Any]]],
                        exc: Exception) -> None:
        """A row group that could not be written (a value out of its column's range, or
        the disk refused it): its records are lost, not the tracer (its thread died of
        it, and every later record with it). The file is left as it is, without a footer
        (readers take its whole row groups), and the next records go to a new file."""
        n = sum(len(rows) for rows, _layout in batches)
        self.records_lost += n
        if type(exc) not in self._lost_logged:
            self._lost_logged.add(type(exc))
            why = "the disk refused them" if isinstance(exc, OSError) else \
                "the file format refused them"
            logger.bind(node=self.node).error(
                "trace writer: {} record(s) lost, {} ({}: {}); later records go to a new "
                "file", n, why, type(exc).__name__, exc)
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # its buffered bytes did not fit either: the file keeps what it had
        self._file = None
        self._writer = None

    def _write_row_group(self, batches: list[tuple[list[tuple[Any, ...]], dict[str, Any]]]
                         ) -> None:
        columns: list[list[Any]] = []
        for name in tf.FIELDS:
            parts: list[Any] = []
            for rows, layout in batches:
                source = layout[name]
                if type(source) is Repeat:
                    parts.append(Repeat(self.node if name == "node" else source.value, len(rows)))
                else:
                    parts.append(Pick(rows, source))
            columns.append(parts)
        n = sum(len(rows) for rows, _layout in batches)
        writer = self._current_writer(n)
        writer.write_columns(columns, n, pause=_let_others_run, pause_rows=PAUSE_ROWS)
        self._file.flush()
        self.records_written += n

    def _current_writer(self, rows: int) -> SegmentWriter:
        w = self._writer
        if w is not None:
            per_row = (w.pos / w.num_rows) if w.num_rows else 128
            if (w.pos + rows * per_row <= self.file_max_bytes or w.num_rows == 0) and \
                    w.row_groups < tf.MAX_ROW_GROUPS:
                return w
            self._close_file()
        assert self.directory is not None
        self._seq += 1
        started = self.wall_ns()
        name = f"{self.node}-{started}-{os.getpid()}-{self._seq:06d}{tf.FILE_SUFFIX}"
        path = self.directory / name
        self._file = open(path, "wb")  # noqa: SIM115 - closed at rotation and in close()
        self._path = path
        self._writer = SegmentWriter(self._file, {"node": self.node, "pid": os.getpid(),
                                                  "started_wall_ns": started})
        self._file.flush()  # the header on disk at once: a reader sees a trace file
        self._rotate()
        return self._writer

    def _close_file(self) -> None:
        if self._file is None:
            return
        assert self._writer is not None
        self._writer.close()
        self._file.close()
        self._file = None
        self._writer = None

    def _rotate(self) -> None:
        assert self.directory is not None
        mine = sorted(self.directory.glob(f"{self.node}-*{tf.FILE_SUFFIX}"))
        for old in mine[: max(0, len(mine) - self.files_max)]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass


def _let_others_run() -> None:
    """Between two slices of a row group the writer hands the GIL to any actor that
    wants it, so an actor waits for a slice (a few hundred microseconds), not a
    whole row group (tens of milliseconds).

    Not ``sleep(0)``: that drops the GIL and takes it straight back before a
    waiting thread has woken, so an actor coming back from a system call (every
    poll and send releases the GIL) waited for the interpreter's forced switch
    (``sys.getswitchinterval()``, 5 ms) each time, while the writer was busy. A
    real sleep, however short, lets the waiting thread take the GIL first."""
    time.sleep(PAUSE_S)


# --------------------------------------------------------------- network legs
def net_legs(sender_node: str, sender_name: str, entries: list[Any]) -> bytes | None:
    """What the receiving gateway needs to record the network leg of the traced
    messages in a frame that leaves the node (None when none is traced).

    It travels as a third ZeroMQ part beside the frame, so the gateway, which
    forwards frames without decoding them, reads only this small array:
    ``[sender node, sender name, [[type id, trace id, span id, parent span id,
    send time ns, conn id, correlation id, api key, bytes], ...]]``.
    """
    legs = []
    for entry in entries:
        if entry[1]:
            conn, corr, api, size = trace_fields(entry[6])
            legs.append([entry[0], entry[1], entry[2], entry[3], entry[4], conn, corr, api, size])
    return _packb([sender_node, sender_name, legs]) if legs else None


def record_net_legs(tracer: Tracer, gateway: str, data: bytes, recv_ns: int,
                    done_ns: int) -> int:
    """The gateway's side of :func:`net_legs`: one ``net`` record per leg; returns how many."""
    try:
        s_node, s_name, legs = _unpackb(data)
        sender = f"{s_name}@{s_node}"
        for type_id, tid, span, parent, sent_ns, conn, corr, api, size in legs:
            cls = registry._BY_ID.get(type_id)
            tracer.record("net", tid, span, parent, gateway, sender,
                          cls if cls is not None else f"type_{type_id}", conn, corr, api, size,
                          sent_ns=sent_ns, recv_ns=recv_ns, done_ns=done_ns)
    except (ValueError, TypeError, msgpack.UnpackException):
        return 0
    return len(legs)


# --------------------------------------------------------------- what a record says
_TRACE_PLANS: dict[type, Any] = {}


def trace_fields(msg: Any) -> tuple[int, int, int, int]:
    """(conn_id, correlation_id, api_key, payload bytes) of a message, for trace records.

    Where those fields sit is worked out once per message type and compiled into
    a small function, so a traced hop costs one call and a few index lookups.
    """
    plan = _TRACE_PLANS.get(type(msg))
    if plan is None:
        plan = _TRACE_PLANS[type(msg)] = _plan(type(msg))
    return plan(msg)  # type: ignore[no-any-return]


def _plan(cls: type) -> Any:
    fields = getattr(cls, "_fields", ())
    checks = registry._CHECKS.get(cls, ())

    def at(name: str) -> str:
        return f"m[{fields.index(name)}]" if name in fields else "-1"

    sizes = [f"(len(m[{i}]) if m[{i}] is not None else 0)"
             for i, (_f, accepted) in enumerate(checks) if accepted == (bytes,)]
    # a Kafka request's correlation id rides with its connection; the controller's
    # requests have ids of their own (64-bit, controller epoch << 32 | n), not Kafka's
    corr = at("correlation_id") if "conn_id" in fields else "-1"
    source = (f"lambda m: ({at('conn_id')}, {corr}, {at('api_key')}, "
              f"{' + '.join(sizes) or '0'})")
    return eval(source, {})
