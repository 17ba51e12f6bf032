"""The trace file format (version 1), shared by the writer and every reader.

On the node: msgpack segments
------------------------------
A node appends to ``<data dir>/traces/<node>-<start wall ns>-<pid>-<seq>.trace.msgpack``
and starts a new segment past ``trace.file.max.bytes``, keeping the newest
``trace.files.max``. A segment is a stream of msgpack values. The first is a
header map:

    {"format": "actorlog-trace", "version": 1, "fields": [...], "node": NAME,
     "pid": PID, "started_wall_ns": NS}

and every later value is one event: an array in the order of ``fields``.
A file cut short by a crash loses at most its last, partial event; readers
stop at the first value they cannot decode. Appending costs the node's
writer thread about 1.5 us per event and needs no schema machinery.

Fields:
  kind             one of KINDS (below)
  trace_id         63-bit id shared by every event a sampled chain causes (0: untraced)
  span_id          one message: its send, recv and done share it (0 for net_in/net_out)
  parent_span_id   the span of the message whose handling sent this one (0: a root)
  node, actor      where the event happened
  peer             send: receiver address; recv/done: sender address; net_*: client host:port
  msg_type         message class name ("request"/"response" for net_in/net_out)
  conn_id, corr_id, api_key   the Kafka request's connection, correlation id and API (-1: none)
  bytes            payload size (frame size for net_in/net_out)
  mono_ns          the host's monotonic clock (comparable between processes of one host)
  wall_ns          wall-clock time
  clock_offset_ns  this node's estimate of (reference clock - own wall clock), 0 when
                   unknown (``actors.runtime.tracing.ClockOffsetEstimator``)

Event kinds:
  send     an actor handed a message to the runtime (actor = sender, peer = receiver)
  recv     the receiver took it from its mailbox and starts handling it
  done     the receiver finished handling it
  net_in   a Processor has read a whole request from a client connection
  net_out  a Processor has written a whole response to its connection

For analysis: Parquet
---------------------
``actorlog trace analyze`` rolls each segment into one Parquet file (pyarrow,
snappy) with exactly these columns: the five string fields as UTF-8 strings,
every other field as int64. Spark reads that about three times faster than
msgpack (measured for the issue: 34 s vs 95 s for 10 million events).

Versions: a reader accepts every version in READABLE_VERSIONS and maps
fields by name from the header, so a later version may add fields at the end
without breaking older readers' code paths.
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
