"""Trace events: sampled at the start of a chain, written off the hot path.

Actors append event tuples to a deque (atomic under the GIL, no lock shared
between actors); one writer thread per node drains it into size-bounded,
rotated files under ``<data dir>/traces``.
"""

from __future__ import annotations

import os
import random
import threading
from collections import deque
from pathlib import Path
from typing import Any

import msgpack

from actors.runtime.clock import Clock, SystemClock
from wire import registry
from wire import trace_format as tf

_getrandbits = random.getrandbits
_packb = msgpack.Packer(autoreset=True).pack
_DRAIN_BATCH = 4096  # events per msgpack call in the writer thread (at most 65535)


def new_id() -> int:
    """A random non-zero 63-bit id (0 means "no trace")."""
    return _getrandbits(63) or 1


class Tracer:
    """Per-node trace sampling and event sink."""

    def __init__(
        self,
        node: str,
        directory: Path | None,
        sample_ratio: float = 0.0,
        file_max_bytes: int = 64 * 1024 * 1024,
        files_max: int = 16,
        flush_interval_s: float = 0.2,
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
        self._monotonic_ns = clock.monotonic_ns
        self._wall_ns = clock.wall_ns
        self._events: deque[tuple[Any, ...]] = deque()
        self._flush_interval_s = flush_interval_s
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()  # only the writer thread and close() take it
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._file_bytes = 0
        self._seq = 0
        self.events_written = 0

    # -- sampling ---------------------------------------------------------
    def sample(self) -> int:
        """A new trace id if this chain is sampled, else 0."""
        ratio = self.sample_ratio
        if ratio >= 1.0:
            return new_id()
        if ratio <= 0.0 or random.random() >= ratio:
            return 0
        return new_id()

    # -- events -----------------------------------------------------------
    def event(
        self,
        kind: str,
        trace_id: int,
        span_id: int,
        parent_span_id: int,
        actor: str,
        peer: str,
        msg_type: str,
        conn_id: int = -1,
        corr_id: int = -1,
        api_key: int = -1,
        size: int = 0,
        mono_ns: int | None = None,
        wall_ns: int | None = None,
    ) -> None:
        self._events.append(
            (
                kind,
                trace_id,
                span_id,
                parent_span_id,
                self.node,
                actor,
                peer,
                msg_type,
                conn_id,
                corr_id,
                api_key,
                size,
                self._monotonic_ns() if mono_ns is None else mono_ns,
                self._wall_ns() if wall_ns is None else wall_ns,
                self.clock_offset_ns,
            )
        )

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
        self._drain()
        if self._file is not None:
            self._file.close()
            self._file = None

    def flush(self) -> None:
        """Write out everything queued so far (used by tests and at shutdown)."""
        self._drain()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            self._drain()


    def _drain(self) -> None:
        if not self.enabled:
            return
        with self._drain_lock:
            events = self._events
            popleft = events.popleft
            while events:
                # One msgpack call per batch: pack the batch as an array and drop the
                # array's header, which leaves exactly the events packed back to back.
                # Batches stay small (a few ms of packing) so the actors of this
                # process get the GIL back between them.
                n = min(len(events), _DRAIN_BATCH)
                batch = [popleft() for _ in range(n)]
                data = _packb(batch)[1 if n < 16 else 3:]
                f = self._current_file(len(data))
                f.write(data)
                f.flush()
                self._file_bytes += len(data)
                self.events_written += n

    def _current_file(self, incoming: int) -> Any:
        if self._file is not None and self._file_bytes + incoming <= self.file_max_bytes:
            return self._file
        if self._file is not None:
            self._file.close()
        assert self.directory is not None
        self._seq += 1
        started = self._wall_ns()
        name = f"{self.node}-{started}-{os.getpid()}-{self._seq:06d}{tf.FILE_SUFFIX}"
        # Open across many drains until the next rotation or close(): no `with` block fits.
        self._file = open(self.directory / name, "ab")  # noqa: SIM115
        header = msgpack.packb(
            {
                "format": tf.FORMAT_NAME,
                "version": tf.FORMAT_VERSION,
                "fields": list(tf.FIELDS),
                "node": self.node,
                "pid": os.getpid(),
                "started_wall_ns": started,
            }
        )
        self._file.write(header)
        self._file_bytes = len(header)
        self._rotate()
        return self._file

    def _rotate(self) -> None:
        assert self.directory is not None
        mine = sorted(self.directory.glob(f"{self.node}-*{tf.FILE_SUFFIX}"))
        for old in mine[: max(0, len(mine) - self.files_max)]:
            try:
                old.unlink()
            except FileNotFoundError:
                pass


# --------------------------------------------------------------- what an event says
_TRACE_PLANS: dict[type, tuple[int, int, int, tuple[int, ...]]] = {}


def trace_fields(msg: Any) -> tuple[int, int, int, int]:
    """(conn_id, correlation_id, api_key, payload bytes) of a message, for trace events.

    Where those fields sit is worked out once per message type, so a traced hop
    costs a few index lookups instead of attribute searches and a scan.
    """
    cls = type(msg)
    plan = _TRACE_PLANS.get(cls)
    if plan is None:
        fields = cls._fields
        checks = registry._CHECKS.get(cls, ())

        def index(name: str) -> int:
            return fields.index(name) if name in fields else -1

        plan = _TRACE_PLANS[cls] = (
            index("conn_id"), index("correlation_id"), index("api_key"),
            tuple(i for i, (_f, accepted) in enumerate(checks) if accepted == (bytes,)),
        )
    conn, corr, api, byte_fields = plan
    size = 0
    for i in byte_fields:
        value = msg[i]
        if value is not None:
            size += len(value)
    return (msg[conn] if conn >= 0 else -1, msg[corr] if corr >= 0 else -1,
            msg[api] if api >= 0 else -1, size)
