"""The trace file format (version 2: one record per hop, Parquet), and version 1 for old files.

Version 2: one record per hop
-----------------------------
A node writes ``<data dir>/traces/<node>-<start wall ns>-<pid>-<seq>.trace.parquet``
(``FILE_SUFFIX``), starts a new file past ``trace.file.max.bytes`` (or
``MAX_ROW_GROUPS`` row groups) and keeps the newest ``trace.files.max``. The
file is Parquet as every Parquet reader knows it (Spark reads it directly), with
two additions that make it readable while it is written:

- after the leading ``PAR1`` comes a header block, ``HEADER_MAGIC``, a 4-byte
  little-endian length and that many bytes of JSON::

      {"format": "actorlog-trace", "version": 2, "fields": [[name, type], ...],
       "node": NAME, "pid": PID, "started_wall_ns": NS}

  (Parquet readers never look there: they find every column chunk through the
  footer);
- the node's writer appends whole row groups (one page per column: ``PLAIN``
  for numbers, a ``PLAIN`` dictionary page plus ``RLE_DICTIONARY`` indices for
  names) and writes the footer only when it closes the file. A reader of a file
  without a footer (still being written, or left by a crash) walks the page
  headers from the header block on and keeps every whole row group: a torn tail
  is skipped. ``wire/trace_parquet.py`` is the writer and that reader.

Every record is one row with the columns of ``FIELDS``. Names (type ``str``)
are dictionary-encoded; numbers are int64 (``int``) or int32 (``int32``); -1
means "none" for conn_id, corr_id, api_key and offset; 0 means "none" for ids.

  kind             what the record is (``KINDS``)
  trace_id         63-bit id shared by every record a sampled chain causes
  span_id          the message this hop carried (0 for a request record)
  parent_span_id   the message whose handling sent this one (0: the chain's first)
  node             the node that wrote the record
  actor            hop: the receiver; request: the Processor; net, clock: the gateway
  sender           hop, net: the sender's address NAME@NODE; request: the client's
                   HOST:PORT; clock: the other node
  msg_type         hop, net: the message class; request: the Kafka API (snake case);
                   clock: "clock"
  conn_id, corr_id, api_key   the Kafka request's connection, correlation id, API key
  bytes            hop, net: payload bytes of the message; request: the request frame
  bytes_out        request: the response frame (0 when none was sent); else 0
  sent_ns          hop, net: the sender's wall clock when it sent (stamped in the
                   envelope, so on the *sender's* node clock); request: = recv_ns;
                   clock: our wall clock when the Ping left
  recv_ns          hop: the receiver took it from its mailbox; net: the frame reached
                   the gateway; request: the whole request was read (net in);
                   clock: the peer's wall clock when it answered
  done_ns          hop: its handler returned; net: the frame was handed to the local
                   mailbox; request: the whole response was written (net out), or
                   the request was finished without one (acks=0); clock: the Pong
                   arrived. recv_ns and done_ns are on the writing node's wall clock.
  clock_offset_ns  the writing node's estimate of (reference clock - own wall clock)
                   when it wrote the record, 0 when unknown (the reference is the
                   node whose name sorts first; ``actors.runtime.gateway``)
  link_trace_id, link_span_id   a hop of another chain that caused this one (0: none);
                   e.g. the follower fetch whose acknowledgement completed a
                   DelayedProduce
  offset           a log offset the hop is about (-1: none), e.g. the high watermark
                   that fetch moved to
  detail           a short free-form note ("" when none), e.g. "fetcher 0" or a
                   partition

A ``wait`` record is a delayed operation of the purgatory (written when it is
answered, in the trace of the request that waited): span_id a new id,
parent_span_id the Watch message that started the wait, actor the purgatory
shard, sender the requester (the handler), msg_type "DelayedProduce" or
"DelayedFetch", sent_ns = recv_ns when the wait began, done_ns when it was
answered, detail "completed", "timed out", or which follower fetch moved the
high watermark. When the answer was caused by a traced message of another
chain (a follower's replica fetch: each ReplicaFetch starts a chain of its own),
link_trace_id / link_span_id name it (the PartitionChanged hop in the fetch's
trace); offset is that follower's fetch offset (-1: no follower fetch).

A ``replica`` record is one partition of a traced replica fetch, written by the
leader's partition shard when it reads for the follower: trace_id the fetch's
trace, parent_span_id the ReplicaRead hop, actor the shard, sender the follower's
node, msg_type "ReplicaRead", offset the follower's fetch offset, sent_ns =
recv_ns = done_ns when it was read, detail "<topic>-<partition> leo <leader's log
end offset>" (the lag is that minus offset).

Times are wall clock (``time.time_ns``): within one node every difference is
exact, and across nodes ``t + clock_offset_ns`` puts them on the reference
clock. ``clock`` records (one per Pong) keep the raw Ping/Pong samples, so a
reader can redo the estimate between any two nodes over time.

A produce of one record to one partition writes five records: the hops
KafkaRequest (Processor -> handler), Append (handler -> shard), AppendDone
(shard -> handler), KafkaResponse (handler -> Processor), and the request record
of the client leg. The sender of a message writes nothing; when the message
leaves the node the receiving node's gateway writes a ``net`` record for the
network leg.

Version 1 (msgpack, read only)
------------------------------
``*.trace.msgpack``: a msgpack header map (``format``, ``version`` 1,
``fields``) then one msgpack array per event, fields ``V1_FIELDS``: events
``send``/``recv``/``done`` per message and ``net_in``/``net_out`` per request,
with ``mono_ns`` and ``wall_ns``. Readers turn them into version 2 records
(``actors.trace.store``).
"""

from __future__ import annotations

FORMAT_NAME = "actorlog-trace"
FORMAT_VERSION = 2
READABLE_VERSIONS: tuple[int, ...] = (1, 2)

FIELD_TYPES: tuple[tuple[str, str], ...] = (
    ("kind", "str"),
    ("trace_id", "int"),
    ("span_id", "int"),
    ("parent_span_id", "int"),
    ("node", "str"),
    ("actor", "str"),
    ("sender", "str"),
    ("msg_type", "str"),
    ("conn_id", "int"),
    ("corr_id", "int32"),
    ("api_key", "int32"),
    ("bytes", "int"),
    ("bytes_out", "int"),
    ("sent_ns", "int"),
    ("recv_ns", "int"),
    ("done_ns", "int"),
    ("clock_offset_ns", "int"),
    ("link_trace_id", "int"),
    ("link_span_id", "int"),
    ("offset", "int"),
    ("detail", "str"),
)
FIELDS: tuple[str, ...] = tuple(name for name, _ in FIELD_TYPES)
FIELD_INDEX = {name: i for i, name in enumerate(FIELDS)}
STRING_FIELDS = frozenset(name for name, t in FIELD_TYPES if t == "str")
KINDS = ("hop", "request", "net", "clock", "wait", "replica")
FILE_SUFFIX = ".trace.parquet"
HEADER_MAGIC = b"ALTR"
MAX_ROW_GROUPS = 4096
"""A file is closed after this many row groups, whatever its size, so a quiet
node's footer stays small."""

# ---------------------------------------------------------------- version 1
V1_FIELDS: tuple[str, ...] = (
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
V1_KINDS = ("send", "recv", "done", "net_in", "net_out")
V1_FILE_SUFFIX = ".trace.msgpack"
