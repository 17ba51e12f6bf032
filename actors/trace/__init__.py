"""Reading what the nodes traced: spans, request stages, trace files, exports.

The node's side (sampling and the writer thread) is ``actors.runtime.tracing``;
everything here runs after the fact, on the files it wrote. ``actors.trace.cli``
(the ``actorlog trace`` commands) and ``actors.trace.analyze`` (the PySpark
job, an optional extra) are imported only where they are used.
"""

from __future__ import annotations

from actors.trace.export import to_otlp, to_perfetto
from actors.trace.spans import (
    STAGES,
    RequestTrace,
    Span,
    build_spans,
    format_tree,
    node_anchors,
    request_from_trace,
    request_traces,
)
from actors.trace.store import (
    SegmentFollower,
    iter_records,
    parquet_inputs,
    read_file,
    read_trace_dirs,
    records_from_v1,
    segments,
)

__all__ = [
    "STAGES",
    "RequestTrace",
    "SegmentFollower",
    "Span",
    "build_spans",
    "format_tree",
    "iter_records",
    "node_anchors",
    "parquet_inputs",
    "read_file",
    "read_trace_dirs",
    "records_from_v1",
    "request_from_trace",
    "request_traces",
    "segments",
    "to_otlp",
    "to_perfetto",
]
