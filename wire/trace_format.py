"""The trace file format (version 1), shared by the writer and every reader.

A trace file is a stream of msgpack values. The first is a header map:

    {"format": "actorlog-trace", "version": 1, "fields": [...], "node": NAME,
     "pid": PID, "started_wall_ns": NS}

and every later value is one event: an array in the order of ``fields``.
A file cut short by a crash loses at most its last, partial event; readers
stop at the first value they cannot decode.

Event kinds:
  send     an actor handed a message to the runtime (actor = sender, peer = receiver)
  recv     the receiver took it from its mailbox and starts handling it
  done     the receiver finished handling it
  net_in   a Processor has read a whole request from a client connection
  net_out  a Processor has written a whole response to its connection
Times: ``mono_ns`` is the host's monotonic clock (comparable between
processes of one host); ``wall_ns`` is wall-clock time; ``clock_offset_ns`` is
this node's estimate of (reference clock - own wall clock), 0 when unknown.
"""

from __future__ import annotations

FORMAT_NAME = "actorlog-trace"
FORMAT_VERSION = 1
READABLE_VERSIONS: tuple[int, ...] = (1,)
FIELDS: tuple[str, ...] = (
    "kind",
    "trace_id",
    "span_id",
    "parent_span_id",
    "node",
    "actor",
    "peer",
    "msg_type",
    "conn_id",
    "corr_id",
    "api_key",
    "bytes",
    "mono_ns",
    "wall_ns",
    "clock_offset_ns",
)
FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}
KINDS = ("send", "recv", "done", "net_in", "net_out")
FILE_SUFFIX = ".trace.msgpack"
