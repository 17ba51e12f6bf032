"""Synthetic trace files: millions of request traces shaped like the broker's own.

`actorlog trace analyze` must be measured on far more records than a test
broker writes, so this writes trace files (format v2, with the node's own
writer, ``wire/trace_parquet.py``, laid out as nodes lay them out:
``<out>/<node>/traces/*.trace.parquet``) for a few nodes, each request the same
five records a real produce or fetch writes: the hops KafkaRequest (Processor
to handler), Append or Read (handler to shard), AppendDone or ReadDone (back),
KafkaResponse (handler to Processor), and the request record. Timings are
random but causal, nodes get different clock offsets (their wall clocks are
off by that much), and connections answer in request order.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from wire import trace_format as tf
from wire.trace_parquet import SegmentWriter

RECORDS_PER_REQUEST = 5
EVENTS_PER_REQUEST = RECORDS_PER_REQUEST  # the name the bench used before version 2
_APIS = ((0, "produce", "Append", "AppendDone"), (1, "fetch", "Read", "ReadDone"))
_ROW_GROUP = 65_536


def generate(
    out: Path,
    records: int,
    nodes: int = 3,
    rate_per_s: float = 20_000.0,
    conns_per_node: int = 32,
    records_per_file: int = 1_000_000,
    seed: int = 1,
) -> int:
    """Write about ``records`` records (whole requests) under ``out``; return how many."""
    rng = random.Random(seed)
    expo = rng.expovariate
    getrandbits = rng.getrandbits
    requests = max(1, records // RECORDS_PER_REQUEST)
    base_wall = 1_790_000_000 * 10**9
    per_node: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"node-{n + 1}"
        d = out / name / "traces"
        d.mkdir(parents=True, exist_ok=True)
        per_node.append({
            "name": name,
            "dir": d,
            # this node's wall clock reads (true time - offset); it estimates +offset
            "offset": 0 if n == 0 else rng.randrange(-2_000_000, 2_000_000),
            "conn_next_free": [0] * conns_per_node,
            "corr": [0] * conns_per_node,
            "rows": [],
            "in_file": 0,
            "file": None,
            "writer": None,
            "seq": 0,
        })
    gap_ns = 1e9 / rate_per_s
    t = 0.0
    written = 0
    for r in range(requests):
        t += expo(1.0 / gap_ns)
        nd = per_node[r % nodes]
        node = nd["name"]
        c = rng.randrange(conns_per_node)
        api_key, api, req_t, done_t = _APIS[0] if rng.random() < 0.7 else _APIS[1]
        proc = f"processor-{c % 2}@{node}"
        handler = f"handler-{c % 4}@{node}"
        shard = f"shard-{rng.randrange(4)}@{node}"
        corr = nd["corr"][c]
        nd["corr"][c] = corr + 1
        tid = getrandbits(63) or 1
        s1, s2, s3, s4 = (getrandbits(63) or 1 for _ in range(4))
        w0 = base_wall - nd["offset"]
        t0 = int(t) + w0  # net in, on this node's wall clock
        # a causal chain of times
        t_send_req = t0 + 20_000
        t_recv_req = t_send_req + int(expo(1 / 60_000.0))
        t_send_app = t_recv_req + int(expo(1 / 80_000.0))
        t_done_req = t_send_app + 5_000
        t_recv_app = max(t_send_app + int(expo(1 / 50_000.0)), t_done_req)
        t_send_ad = t_recv_app + int(expo(1 / 120_000.0))
        t_done_app = t_send_ad + 4_000
        t_recv_ad = t_send_ad + int(expo(1 / 50_000.0))
        t_send_resp = t_recv_ad + int(expo(1 / 40_000.0))
        t_done_ad = t_send_resp + 4_000
        t_recv_resp = max(t_send_resp + int(expo(1 / 60_000.0)), t_done_ad)
        # responses of one connection leave in request order
        t_out = max(t_recv_resp + int(expo(1 / 30_000.0)), nd["conn_next_free"][c] + 1_000)
        nd["conn_next_free"][c] = t_out
        t_done_resp = t_recv_resp + 3_000
        peer = f"10.0.0.{c}:5{c:04d}"
        size = 100 + (r % 900)
        off = nd["offset"]
        pn, hn, sn = (x.partition("@")[0] for x in (proc, handler, shard))
        rows = nd["rows"]
        rows += (
            ("hop", tid, s1, 0, node, hn, proc, "KafkaRequest", c, corr, api_key, size, 0,
             t_send_req, t_recv_req, t_done_req, off, 0, 0, -1, ""),
            ("hop", tid, s2, s1, node, sn, handler, req_t, -1, -1, -1, 0, 0,
             t_send_app, t_recv_app, t_done_app, off, 0, 0, -1, ""),
            ("hop", tid, s3, s2, node, hn, shard, done_t, -1, -1, -1, 0, 0,
             t_send_ad, t_recv_ad, t_done_ad, off, 0, 0, -1, ""),
            ("hop", tid, s4, s3, node, pn, handler, "KafkaResponse", c, corr, api_key, 60, 0,
             t_send_resp, t_recv_resp, t_done_resp, off, 0, 0, -1, ""),
            ("request", tid, 0, 0, node, pn, peer, api, c, corr, api_key, size + 4, 64,
             t0, t0, t_out, off, 0, 0, -1, ""),
        )
        nd["in_file"] += RECORDS_PER_REQUEST
        written += RECORDS_PER_REQUEST
        if len(rows) >= _ROW_GROUP:
            _flush(nd, records_per_file)
    for nd in per_node:
        _flush(nd, records_per_file, final=True)
    return written


def _flush(nd: dict[str, Any], records_per_file: int, final: bool = False) -> None:
    if nd["writer"] is None and nd["rows"]:
        nd["seq"] += 1
        path = nd["dir"] / f"{nd['name']}-{nd['seq']:06d}-{os.getpid()}-{nd['seq']:06d}" \
                           f"{tf.FILE_SUFFIX}"
        nd["file"] = open(path, "wb")  # noqa: SIM115 - closed once the file is full
        nd["writer"] = SegmentWriter(nd["file"], {"node": nd["name"], "pid": os.getpid(),
                                                  "started_wall_ns": 0, "synthetic": True})
    if nd["rows"]:
        nd["writer"].write_rows(nd["rows"])
        nd["rows"] = []
    if nd["writer"] is not None and (final or nd["in_file"] >= records_per_file):
        nd["writer"].close()
        nd["file"].close()
        nd["writer"] = nd["file"] = None
        nd["in_file"] = 0
