"""`actorlog trace analyze`: a PySpark job over every node's trace events.

Input: trace segments (msgpack, ``wire/trace_format.py``), rolled to Parquet
by ``actors.trace.store`` into ``REPORT_DIR/events`` (reused across runs).
Output, under REPORT_DIR:

  requests/   one row per sampled request: trace_id, node, processor,
              conn_id, corr_id, api_key, api, t_in_ns, t_out_ns, responses,
              total_ns and the stages (``actors/trace/spans.py``
              defines them: request_queue_ns, local_ns, remote_ns,
              response_queue_ns, send_ns; they add up to total_ns)
  actors/     per (node, actor): messages, mailbox wait p50/p99, handling
              p50/p99 (us), busy_fraction = handling time of sampled
              messages / the node's traced time span
  seconds/    per (second, api): requests answered, bytes out, errors
              (requests with no response in the traces: events carry no
              Kafka error codes)
  violations/ ordering and answer-count violations (see ``ordering_check``)
  summary.json, report.html and the PNG plots it shows.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from actors.trace.store import parquet_inputs
from wire.api_versions import API_SNAKE_NAMES, STAGES

INSTALL_HINT = (
    "trace analyze needs PySpark and pyarrow (and matplotlib for the plots): "
    "pip install 'actorlog[spark]' matplotlib   (or .venv/bin/pip install "
    "'pyspark>=3.5,<5' pyarrow matplotlib); Spark also needs Java 17 "
    "(apt-get install openjdk-17-jre-headless)"
)


JAVA_OPTS = os.environ.get("ACTORLOG_SPARK_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC")


class MissingExtraError(RuntimeError):
    """PySpark, pyarrow or matplotlib is not installed."""


def require_extras() -> None:
    missing = []
    for mod in ("pyspark", "pyarrow", "matplotlib"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise MissingExtraError(f"missing {', '.join(missing)}. {INSTALL_HINT}")


def spark_session(master: str = "local[*]", shuffle_partitions: int | None = None) -> Any:
    """A Spark session whose Python workers run this interpreter (so they import the project)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("actorlog-trace-analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("ACTORLOG_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.parquet.enableVectorizedReader", "true")
        .config("spark.sql.adaptive.enabled", "true")
        # A short job: C1 alone compiles far less than C1+C2 and finishes sooner
        # (measured here on 1M events: 9.5 s vs 13 s for a first query, 0.7 s vs
        # 2.6 s for a second); the parallel collector suits a batch job.
        .config("spark.driver.extraJavaOptions", JAVA_OPTS)
        .config("spark.executor.extraJavaOptions", JAVA_OPTS)
    )
    if shuffle_partitions is None:
        shuffle_partitions = max(2, 2 * (os.cpu_count() or 1))
    builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ------------------------------------------------------------------ tables
def scan_nodes(parquet_paths: list[Path]) -> tuple[dict[str, int], list[tuple[str, str, int, int]]]:
    """Per node its anchor (median of wall + offset - mono, see actors/trace/spans.py), and every
    (node, actor) with its first and last aligned time; computed in pyarrow, off Spark."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    table = ds.dataset([str(p) for p in parquet_paths], format="parquet").to_table(
        columns=["node", "actor", "mono_ns", "wall_ns", "clock_offset_ns"]
    )
    diff = pc.subtract(pc.add(table["wall_ns"], table["clock_offset_ns"]), table["mono_ns"])
    grouped = (
        table.select(["node"])
        .append_column("d", diff)
        .group_by("node")
        .aggregate([("d", "approximate_median")])
    )
    anchors = {row["node"]: int(row["d_approximate_median"]) for row in grouped.to_pylist()}
    spans = (
        table.select(["node", "actor", "mono_ns"])
        .group_by(["node", "actor"])
        .aggregate([("mono_ns", "min"), ("mono_ns", "max")])
        .to_pylist()
    )
    actors = [
        (
            r["node"],
            r["actor"],
            r["mono_ns_min"] + anchors[r["node"]],
            r["mono_ns_max"] + anchors[r["node"]],
        )
        for r in spans
    ]
    return anchors, actors


def load_events(spark: Any, parquet_paths: list[Path]) -> tuple[Any, Any]:
    """Events with ``t`` (aligned time in ns: monotonic + the node's anchor), and the
    small (node, actor, t_first, t_last) table."""
    from pyspark.sql import functions as F

    anchors, actors = scan_nodes(parquet_paths)
    ev = spark.read.parquet(*[str(p) for p in parquet_paths])
    amap = F.create_map(*[x for node, a in anchors.items() for x in (F.lit(node), F.lit(a))])
    names = spark.createDataFrame(actors, "node string, actor string, t_first long, t_last long")
    return ev.withColumn("t", F.col("mono_ns") + amap[F.col("node")]), names


def build_tables(ev: Any, names: Any) -> dict[str, Any]:
    """The requests, actors, seconds and violations DataFrames.

    The events are read once: grouped by (trace_id, span_id) they give one
    row per message (send, recv, done) plus one row per request for its
    net_in/net_out (span 0); grouping those rows by trace gives the requests.
    Aggregation buffers hold only numbers (Spark hash-aggregates those; a
    string falls back to sort-based aggregation), so an actor is carried as
    ``who`` = xxhash64(node, actor) and named from ``names`` at the end.
    """
    from pyspark.sql import functions as F

    c, w = F.col, F.when
    kind, mt = c("kind"), c("msg_type")
    is_net_in = kind == "net_in"
    is_net_out = kind == "net_out"
    rows = (
        ev.withColumn("who", F.xxhash64("node", "actor"))
        .groupBy("trace_id", "span_id")
        .agg(
            F.min(w(kind == "send", c("t"))).alias("t_send"),
            F.min(w(kind == "recv", c("t"))).alias("t_recv"),
            F.min(w(kind == "done", c("t"))).alias("t_done"),
            F.max(w(kind == "recv", c("who"))).alias("who"),
            F.max(w(mt == "KafkaRequest", 1)).alias("is_request"),
            F.max(w(mt == "KafkaResponse", 1)).alias("is_response"),
            F.min(w(is_net_in, c("t"))).alias("t_in_ns"),
            F.min(w(is_net_out, c("t"))).alias("t_out_ns"),
            F.count(w(is_net_out, 1)).alias("responses"),
            F.sum(w(is_net_out, c("bytes"))).alias("bytes_out"),
            F.max(w(is_net_in, c("who"))).alias("proc_who"),
            F.max(w(is_net_in, c("conn_id"))).alias("conn_id"),
            F.max(w(is_net_in, c("corr_id"))).alias("corr_id"),
            F.max(w(is_net_in, c("api_key"))).alias("api_key"),
        )
    ).cache()
    spans = rows.filter(c("span_id") != 0)
    is_req, is_resp = c("is_request") == 1, c("is_response") == 1
    req = (
        rows.filter(c("trace_id") != 0)
        .groupBy("trace_id")
        .agg(
            F.min("t_in_ns").alias("t_in_ns"),
            F.min("t_out_ns").alias("t_out_ns"),
            F.sum("responses").alias("responses"),
            F.sum("bytes_out").alias("bytes_out"),
            F.max("proc_who").alias("proc_who"),
            F.max("conn_id").alias("conn_id"),
            F.max("corr_id").alias("corr_id"),
            F.max("api_key").alias("api_key"),
            F.min(w(is_req, c("t_recv"))).alias("t_req_recv"),
            F.max(w(is_req, c("who"))).alias("handler_who"),
            F.min(w(is_resp, c("t_send"))).alias("t_resp_send"),
            F.min(w(is_resp, c("t_recv"))).alias("t_resp_recv"),
        )
        .filter(c("t_in_ns").isNotNull())
    )
    hs = spans.select(
        "trace_id",
        c("who").alias("handler_who"),
        c("t_recv").alias("h_recv"),
        c("t_done").alias("h_done"),
    )
    local = (
        req.select("trace_id", "handler_who", "t_req_recv", "t_resp_send")
        .join(hs, ["trace_id", "handler_who"])
        .groupBy("trace_id")
        .agg(
            F.sum(
                F.greatest(
                    F.lit(0),
                    F.least(c("h_done"), c("t_resp_send"))
                    - F.greatest(c("h_recv"), c("t_req_recv")),
                )
            ).alias("local_ns")
        )
    )
    complete = (
        c("t_out_ns").isNotNull()
        & c("t_req_recv").isNotNull()
        & c("t_resp_send").isNotNull()
        & c("t_resp_recv").isNotNull()
    )
    api_map = F.create_map(*[x for k, v in API_SNAKE_NAMES.items() for x in (F.lit(k), F.lit(v))])
    names = F.broadcast(names.withColumn("who", F.xxhash64("node", "actor")))
    proc_names = names.select(c("who").alias("proc_who"), "node", c("actor").alias("processor"))
    handler_names = names.select(
        c("who").alias("handler_who"), F.concat_ws("@", "actor", "node").alias("handler")
    )
    requests = (
        req.join(local, "trace_id", "left")
        .join(proc_names, "proc_who", "left")
        .join(handler_names, "handler_who", "left")
        .withColumn(
            "api",
            F.coalesce(api_map[c("api_key")], F.concat(F.lit("api_"), c("api_key").cast("string"))),
        )
        .withColumn("bytes_out", F.coalesce(c("bytes_out"), F.lit(0)))
        .withColumn("total_ns", c("t_out_ns") - c("t_in_ns"))
        .withColumn("request_queue_ns", w(complete, c("t_req_recv") - c("t_in_ns")))
        .withColumn("local_ns", w(complete, F.coalesce(c("local_ns"), F.lit(0))))
        .withColumn("remote_ns", w(complete, c("t_resp_send") - c("t_req_recv") - c("local_ns")))
        .withColumn("response_queue_ns", w(complete, c("t_resp_recv") - c("t_resp_send")))
        .withColumn("send_ns", w(complete, c("t_out_ns") - c("t_resp_recv")))
        .select(
            "trace_id",
            "node",
            "processor",
            "conn_id",
            "corr_id",
            "api_key",
            "api",
            "t_in_ns",
            "t_out_ns",
            "responses",
            "bytes_out",
            "total_ns",
            *[f"{s}_ns" for s in STAGES],
            "handler",
        )
    ).cache()

    node_span = names.groupBy("node").agg(
        ((F.max("t_last") - F.min("t_first")) / 1e9).alias("span_s")
    )
    actors = (
        spans.filter(c("who").isNotNull())
        .withColumn("mailbox_us", (c("t_recv") - c("t_send")) / 1000.0)
        .withColumn("handling_us", (c("t_done") - c("t_recv")) / 1000.0)
        .groupBy("who")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.percentile_approx("mailbox_us", [0.5, 0.99], 1000).alias("mailbox"),
            F.percentile_approx("handling_us", [0.5, 0.99], 1000).alias("handling"),
            (F.sum("handling_us") / 1e6).alias("busy_s"),
        )
        .select(
            "who",
            "messages",
            c("mailbox")[0].alias("mailbox_p50_us"),
            c("mailbox")[1].alias("mailbox_p99_us"),
            c("handling")[0].alias("handling_p50_us"),
            c("handling")[1].alias("handling_p99_us"),
            "busy_s",
        )
        .join(names.select("who", "node", "actor"), "who")
        .join(F.broadcast(node_span), "node")
        .withColumn("busy_fraction", c("busy_s") / F.greatest(c("span_s"), F.lit(1e-9)))
        .drop("span_s", "who")
    )
    seconds = (
        requests.withColumn(
            "second", F.floor(F.coalesce(c("t_out_ns"), c("t_in_ns")) / 1e9).cast("long")
        )
        .groupBy("second", "api")
        .agg(
            F.count(c("t_out_ns")).alias("requests"),
            F.sum(c("bytes_out")).alias("bytes_out"),
            F.count(w(c("t_out_ns").isNull(), 1)).alias("errors"),
        )
    )
    return {
        "requests": requests,
        "actors": actors,
        "seconds": seconds,
        "violations": ordering_check(requests),
    }


def ordering_check(requests: Any) -> Any:
    """Violations: responses that left a connection out of request order, and bad answer counts.

    A connection is (node, processor, conn_id); its requests are ordered by
    net_in time (the Processor numbers them in that order). ``out_of_order``:
    a response written after the response of a later request (compared by
    net_out time). ``answered_twice``: a request with more than one net_out.
    ``unanswered_produce``: a produce with no net_out although a later request
    of its connection was answered (so it was not merely still in flight when
    the trace ended).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c = F.col
    conn = ["node", "processor", "conn_id"]
    r = requests.select(*conn, "trace_id", "corr_id", "api", "t_in_ns", "t_out_ns", "responses")
    r = r.withColumn(
        "in_rank", F.row_number().over(Window.partitionBy(*conn).orderBy("t_in_ns", "corr_id"))
    )
    answered = r.filter(c("t_out_ns").isNotNull())
    prev = (
        Window.partitionBy(*conn)
        .orderBy("t_out_ns", "in_rank")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    ooo = (
        answered.withColumn("max_prev_rank", F.max("in_rank").over(prev))
        .filter(c("max_prev_rank") > c("in_rank"))
        .withColumn("violation", F.lit("out_of_order"))
        .withColumn(
            "detail",
            F.concat(
                F.lit("response to request #"),
                c("in_rank").cast("string"),
                F.lit(" left after the response to request #"),
                c("max_prev_rank").cast("string"),
            ),
        )
    )
    twice = (
        r.filter(c("responses") > 1)
        .withColumn("violation", F.lit("answered_twice"))
        .withColumn("detail", F.concat(c("responses").cast("string"), F.lit(" responses")))
    )
    last_answered = answered.groupBy(*conn).agg(F.max("in_rank").alias("last_answered_rank"))
    unanswered = (
        r.filter((c("api") == "produce") & c("t_out_ns").isNull())
        .join(last_answered, conn)
        .filter(c("last_answered_rank") > c("in_rank"))
        .withColumn("violation", F.lit("unanswered_produce"))
        .withColumn("detail", F.lit("no response, a later request was answered"))
    )
    cols = [*conn, "trace_id", "corr_id", "api", "violation", "detail"]
    return ooo.select(*cols).unionByName(twice.select(*cols)).unionByName(unanswered.select(*cols))


# ------------------------------------------------------------------ the job
def analyze(
    dirs: list[Path], out: Path, master: str = "local[*]", spark: Any = None, plots: bool = True
) -> dict[str, Any]:
    """Run the whole job; returns the summary (also written to ``out/summary.json``)."""
    require_extras()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    paths, conv = to_parquet(dirs, out / "events")
    timings["convert_s"] = time.perf_counter() - t0
    if not paths:
        raise FileNotFoundError(f"no trace segments under {', '.join(map(str, dirs))}")
    t1 = time.perf_counter()
    own = spark is None
    if own:
        spark = spark_session(master)
    timings["spark_start_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    try:
        tables = build_tables(*load_events(spark, paths))
        for name in ("requests", "actors", "seconds", "violations"):
            tables[name].write.mode("overwrite").parquet(str(out / name))
    finally:
        if own:
            spark.stop()
    timings["job_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    summary, actors, seconds, hists = summarize(out, paths)
    summary["segments"] = conv
    if plots:
        write_report(out, summary, actors, seconds, hists)
    timings["report_s"] = time.perf_counter() - t3
    summary["timings"] = timings
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def _read_table(path: Path) -> Any:
    import pyarrow.parquet as pq

    return pq.read_table(str(path))


def summarize(
    out: Path, event_paths: list[Path]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Read the output tables back with pyarrow and numpy: the report needs no Spark."""
    import numpy as np
    import pyarrow.parquet as pq

    events = sum(pq.ParquetFile(str(p)).metadata.num_rows for p in event_paths)
    req = _read_table(out / "requests")
    stage_cols = ["total_ns", *[f"{s}_ns" for s in STAGES]]
    cols = {c: req.column(c).to_numpy(zero_copy_only=False) for c in ["api", *stage_cols]}
    complete = ~np.isnan(cols["send_ns"].astype("float64"))
    per_api: dict[str, Any] = {}
    hists: dict[str, Any] = {}
    apis = cols["api"]
    edges = np.logspace(-1, 7, 161)  # 0.1 us .. 10 s, 20 buckets a decade
    for api in sorted(set(apis.tolist())):
        sel = complete & (apis == api)
        if not sel.any():
            continue
        entry: dict[str, Any] = {"requests": int(sel.sum())}
        hist: dict[str, list[tuple[float, int]]] = {}
        for c in stage_cols:
            us = cols[c][sel].astype("float64") / 1000.0
            entry[c[:-3]] = {
                "p50": float(np.percentile(us, 50)),
                "p99": float(np.percentile(us, 99)),
            }
            counts, _ = np.histogram(np.clip(us, 0.1, 1e7), bins=edges)
            hist[c[:-3]] = [(float(edges[i]), int(n)) for i, n in enumerate(counts) if n]
        per_api[api] = entry
        hists[api] = hist
    viol = _read_table(out / "violations").to_pylist()
    actors = sorted(_read_table(out / "actors").to_pylist(), key=lambda a: (a["node"], a["actor"]))
    seconds = sorted(
        _read_table(out / "seconds").to_pylist(), key=lambda s: (s["second"], s["api"])
    )
    summary = {
        "events": events,
        "requests": req.num_rows,
        "incomplete_requests": int((~complete).sum()),
        "per_api_us": per_api,
        "violation_count": len(viol),
        "violations": viol[:1000],
    }
    return summary, actors, seconds, hists


def write_report(
    out: Path,
    summary: dict[str, Any],
    actors: list[dict[str, Any]],
    seconds: list[dict[str, Any]],
    hists: dict[str, Any],
) -> None:
    """report.html with PNG plots: latency per API and stage, throughput, mailbox waits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pngs = []
    for api, per in sorted(hists.items()):
        fig, ax = plt.subplots(figsize=(8, 4))
        for stage, pts in per.items():
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=stage)
        ax.set_xscale("log")
        ax.set_xlabel("microseconds")
        ax.set_ylabel("requests")
        ax.set_title(f"{api}: latency by stage")
        ax.legend(fontsize=8)
        name = f"latency_{api}.png"
        fig.tight_layout()
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        pngs.append(name)
    if seconds:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        t0 = min(s["second"] for s in seconds)
        for api in sorted({s["api"] for s in seconds}):
            pts = [(s["second"] - t0, s["requests"]) for s in seconds if s["api"] == api]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=api)
        errs: dict[int, int] = {}
        for s in seconds:
            errs[s["second"] - t0] = errs.get(s["second"] - t0, 0) + s["errors"]
        if any(errs.values()):
            ax.plot(sorted(errs), [errs[k] for k in sorted(errs)], "r--", label="errors")
        ax.set_xlabel("seconds")
        ax.set_ylabel("sampled requests / s")
        ax.set_title("throughput")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=80)
        plt.close(fig)
        pngs.append("throughput.png")
    if actors:
        fig, ax = plt.subplots(figsize=(8, max(3, 0.3 * len(actors))))
        labels = [f"{a['actor']}@{a['node']}" for a in actors]
        ax.barh(labels, [a["mailbox_p99_us"] or 0 for a in actors], label="p99", color="#e88")
        ax.barh(labels, [a["mailbox_p50_us"] or 0 for a in actors], label="p50", color="#48c")
        ax.set_xlabel("mailbox wait, microseconds")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "mailbox.png", dpi=80)
        plt.close(fig)
        pngs.append("mailbox.png")

    def table(rows: list[list[Any]], head: list[str]) -> str:
        h = "".join(f"<th>{x}</th>" for x in head)
        b = "".join("<tr>" + "".join(f"<td>{_fmt(x)}</td>" for x in r) + "</tr>" for r in rows)
        return f"<table><tr>{h}</tr>{b}</table>"

    api_rows = []
    for api, d in sorted(summary["per_api_us"].items()):
        api_rows.append(
            [api, d["requests"]]
            + [f"{_fmt(d[s]['p50'])} / {_fmt(d[s]['p99'])}" for s in ("total", *STAGES)]
        )
    actor_rows = [
        [
            a["node"],
            a["actor"],
            a["messages"],
            a["mailbox_p50_us"],
            a["mailbox_p99_us"],
            a["handling_p50_us"],
            a["handling_p99_us"],
            a["busy_fraction"],
        ]
        for a in actors
    ]
    viol_rows = [
        [
            v["node"],
            v["processor"],
            v["conn_id"],
            v["corr_id"],
            v["api"],
            v["violation"],
            v["detail"],
        ]
        for v in summary["violations"][:200]
    ]
    viol_head = ["node", "processor", "conn", "corr_id", "api", "violation", "detail"]
    actor_head = ["node", "actor", "messages", "mailbox p50 us", "mailbox p99 us",
                  "handling p50 us", "handling p99 us", "busy fraction"]
    viol_html = table(viol_rows, viol_head) if viol_rows else "<p>No violations.</p>"
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>actorlog trace report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head><body>
<h1>actorlog trace report</h1>
<p>{summary["events"]} events, {summary["requests"]} sampled requests
({summary["incomplete_requests"]} incomplete), {summary["violation_count"]} violations.
Stage definitions: request_queue = handler receive - net_in; local = handler busy on the request;
remote = waiting on other actors; response_queue = Processor receive - handler send;
send = net_out - Processor receive.</p>
<h2>Latency per API, p50 / p99 (us)</h2>
{table(api_rows, ["api", "requests", "total", *STAGES])}
<h2>Ordering and answer checks</h2>
{viol_html}
<h2>Actors</h2>
{table(actor_rows, actor_head)}
<h2>Plots</h2>
{"".join(f'<p><img src="{p}" alt="{p}"></p>' for p in pngs)}
</body></html>"""
    (out / "report.html").write_text(html)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3f}" if abs(x) < 10 else f"{x:.0f}"
    return "" if x is None else str(x)
