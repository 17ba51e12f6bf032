"""Synthetic trace files: millions of request traces shaped like the broker's own.

`actorlog trace analyze` must be measured on far more events than a test
broker writes, so this writes trace files (format v1, the node's own
writer layout: ``<out>/<node>/traces/*.trace.msgpack``) for a few nodes,
each request the same 14 events a real produce or fetch records: net_in,
the KafkaRequest hop to a handler, one hop to a shard and its answer, the
KafkaResponse hop back and net_out. Timings are random but causal, nodes
get different clock offsets, and connections answer in request order.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import msgpack

from wire import trace_format as tf

EVENTS_PER_REQUEST = 14
_APIS = ((0, "Append", "AppendDone"), (1, "Read", "ReadDone"))


def generate(
    out: Path,
    events: int,
    nodes: int = 3,
    rate_per_s: float = 20_000.0,
    conns_per_node: int = 32,
    events_per_file: int = 1_000_000,
    seed: int = 1,
) -> int:
    """Write about ``events`` events (whole requests) under ``out``; return how many."""
    rng = random.Random(seed)
    expo = rng.expovariate
    requests = max(1, events // EVENTS_PER_REQUEST)
    base_wall = 1_790_000_000 * 10**9
    per_node: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"node-{n + 1}"
        d = out / name / "traces"
        d.mkdir(parents=True, exist_ok=True)
        per_node.append(
            {
                "name": name,
                "dir": d,
                "mono0": rng.randrange(10**12, 10**13),
                "offset": 0 if n == 0 else rng.randrange(-2_000_000, 2_000_000),  # ns
                "conn_next_free": [0] * conns_per_node,
                "corr": [0] * conns_per_node,
                "packer": msgpack.Packer(),
                "buf": [],
                "in_file": 0,
                "file": None,
                "seq": 0,
            }
        )
    gap_ns = 1e9 / rate_per_s
    t = 0.0
    written = 0
    for r in range(requests):
        t += expo(1.0 / gap_ns)
        nd = per_node[r % nodes]
        c = rng.randrange(conns_per_node)
        api_key, req_t, done_t = _APIS[0] if rng.random() < 0.7 else _APIS[1]
        proc = f"processor-{c % 2}"
        handler = f"handler-{c % 4}"
        shard = f"shard-{rng.randrange(4)}"
        node = nd["name"]
        corr = nd["corr"][c]
        nd["corr"][c] = corr + 1
        tid = rng.getrandbits(63) or 1
        s1, s2, s3, s4 = (rng.getrandbits(63) or 1 for _ in range(4))
        t0 = int(t)
        # causal chain of times (ns, relative to the node's start)
        t_send_req = t0 + 20_000
        t_recv_req = t_send_req + int(expo(1 / 60_000.0))
        t_send_app = t_recv_req + int(expo(1 / 80_000.0))
        t_done_req = t_send_app + 5_000
        t_recv_app = t_send_app + int(expo(1 / 50_000.0))
        t_send_ad = t_recv_app + int(expo(1 / 120_000.0))
        t_done_app = t_send_ad + 4_000
        t_recv_ad = t_send_ad + int(expo(1 / 50_000.0))
        t_send_resp = t_recv_ad + int(expo(1 / 40_000.0))
        t_done_ad = t_send_resp + 4_000
        t_recv_resp = t_send_resp + int(expo(1 / 60_000.0))
        # responses of one connection leave in request order
        t_out = max(t_recv_resp + int(expo(1 / 30_000.0)), nd["conn_next_free"][c] + 1_000)
        nd["conn_next_free"][c] = t_out
        t_done_resp = t_out + 3_000
        peer = f"10.0.0.{c}:5{c:04d}"
        size = 100 + (r % 900)
        m0 = nd["mono0"]
        w0 = base_wall - nd["offset"] - m0
        off = nd["offset"]
        pa = f"{proc}@{node}"
        ha = f"{handler}@{node}"
        sa = f"{shard}@{node}"
        rows = (
            ("net_in", tid, 0, 0, node, proc, peer, "request", c, corr, api_key, size + 4, t0),
            (
                "send",
                tid,
                s1,
                0,
                node,
                proc,
                ha,
                "KafkaRequest",
                c,
                corr,
                api_key,
                size,
                t_send_req,
            ),
            (
                "recv",
                tid,
                s1,
                0,
                node,
                handler,
                pa,
                "KafkaRequest",
                c,
                corr,
                api_key,
                size,
                t_recv_req,
            ),
            ("send", tid, s2, s1, node, handler, sa, req_t, -1, -1, -1, 0, t_send_app),
            (
                "done",
                tid,
                s1,
                0,
                node,
                handler,
                pa,
                "KafkaRequest",
                c,
                corr,
                api_key,
                0,
                t_done_req,
            ),
            ("recv", tid, s2, s1, node, shard, ha, req_t, -1, -1, -1, 0, t_recv_app),
            ("send", tid, s3, s2, node, shard, ha, done_t, -1, -1, -1, 0, t_send_ad),
            ("done", tid, s2, s1, node, shard, ha, req_t, -1, -1, -1, 0, t_done_app),
            ("recv", tid, s3, s2, node, handler, sa, done_t, -1, -1, -1, 0, t_recv_ad),
            (
                "send",
                tid,
                s4,
                s3,
                node,
                handler,
                pa,
                "KafkaResponse",
                c,
                corr,
                api_key,
                60,
                t_send_resp,
            ),
            ("done", tid, s3, s2, node, handler, sa, done_t, -1, -1, -1, 0, t_done_ad),
            (
                "recv",
                tid,
                s4,
                s3,
                node,
                proc,
                ha,
                "KafkaResponse",
                c,
                corr,
                api_key,
                60,
                t_recv_resp,
            ),
            ("net_out", tid, 0, 0, node, proc, peer, "response", c, corr, api_key, 60, t_out),
            (
                "done",
                tid,
                s4,
                s3,
                node,
                proc,
                ha,
                "KafkaResponse",
                c,
                corr,
                api_key,
                0,
                t_done_resp,
            ),
        )
        pack = nd["packer"].pack
        buf = nd["buf"]
        for row in rows:
            mono = m0 + row[12]
            buf.append(pack((*row[:12], mono, mono + w0, off)))
        nd["in_file"] += EVENTS_PER_REQUEST
        written += EVENTS_PER_REQUEST
        if len(buf) >= 50_000:
            _flush(nd, events_per_file)
    for nd in per_node:
        _flush(nd, events_per_file, final=True)
    return written


def _flush(nd: dict[str, Any], events_per_file: int, final: bool = False) -> None:
    if nd["file"] is None and nd["buf"]:
        nd["seq"] += 1
        path = (
            nd["dir"]
            / f"{nd['name']}-{nd['seq']:06d}-{os.getpid()}-{nd['seq']:06d}{tf.FILE_SUFFIX}"
        )
        f = nd["file"] = open(path, "wb")  # noqa: SIM115 - closed once the segment is full
        f.write(
            msgpack.packb(
                {
                    "format": tf.FORMAT_NAME,
                    "version": tf.FORMAT_VERSION,
                    "fields": list(tf.FIELDS),
                    "node": nd["name"],
                    "pid": os.getpid(),
                    "started_wall_ns": 0,
                    "synthetic": True,
                }
            )
        )
    if nd["buf"]:
        nd["file"].write(b"".join(nd["buf"]))
        nd["buf"].clear()
    if nd["file"] is not None and (final or nd["in_file"] >= events_per_file):
        nd["file"].close()
        nd["file"] = None
        nd["in_file"] = 0
