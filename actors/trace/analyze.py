"""`actorlog trace analyze`: a PySpark job over every node's trace records.

Input: the nodes' trace files (``wire/trace_format.py``), read by Spark where
they lie: they are Parquet, one record per hop. Only a file still being
written (copied with a footer) and version 1 msgpack files (converted once)
go through ``REPORT_DIR/staging`` (``actors.trace.store.parquet_inputs``).
Output, under REPORT_DIR:

  requests/   one row per sampled request: trace_id, node, processor,
              conn_id, corr_id, api_key, api, t_in_ns, t_out_ns, responses,
              bytes_out, total_ns and the stages (``actors/trace/spans.py``
              defines them: request_queue_ns, local_ns, remote_ns,
              response_queue_ns, send_ns; they add up to total_ns), handler
  actors/     per (node, actor): messages handled, mailbox wait p50/p99,
              handling p50/p99 (us), busy_fraction = handling time of sampled
              messages / the node's traced time span
  seconds/    per (second, api): requests answered, bytes out, errors
              (requests with no response in the traces: records carry no
              Kafka error codes)
  violations/ ordering and answer-count violations (see ``ordering_check``)
  replication/ per second, leader, follower, partition: the followers' fetch
              offsets against the leader's log end (lag in records)
  produce_waits/ per sampled acks=all produce that waited for followers: local
              append, waiting for followers, response (``replication_tables``)
  summary.json, report.html and the PNG plots it shows.

Spark settings (``spark_settings``): ``small`` for one machine (few shuffle
partitions, the C2 JIT, adaptive execution, broadcast joins of the small
tables); ``big`` for a cluster (``--master spark://HOST:PORT``): shuffle
partitions from the cluster's cores, bigger broadcasts. The job is the same.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from actors.trace.spans import causal
from actors.trace.store import parquet_inputs
from wire.api_versions import API_SNAKE_NAMES, STAGES

INSTALL_HINT = (
    "trace analyze needs PySpark and pyarrow (and matplotlib for the plots): "
    "pip install 'actorlog[spark]' matplotlib   (or .venv/bin/pip install "
    "'pyspark>=3.5,<5' pyarrow matplotlib); Spark also needs Java 17 "
    "(apt-get install openjdk-17-jre-headless)"
)

PROFILES = ("small", "big")


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


JAVA_OPTS = (
    "-XX:+UseParallelGC -XX:MetaspaceSize=256m "
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=20000 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=200000"
)
"""The JVM's options unless ``ACTORLOG_SPARK_JAVA_OPTS`` replaces them. A job of a
minute spends as much CPU in the C2 compiler as in its tasks with the JVM's defaults
(10M records here: 39 s of C2 against 61 s of tasks, on 2 cores): most of what C2
compiles is lukewarm (class loading, serialization, Janino, each query's generated
code). C2 thresholds 10x the defaults leave that to C1 and compile the hot loops
sooner (a shorter C2 queue): 21 s of C2 and 49 s of tasks. C1 alone is slower on
10M records (82 s against 70 s). A first metaspace of 256 MB saves the four full
collections Spark's class loading otherwise triggers."""


def spark_settings(profile: str, cores: int | None = None) -> dict[str, str]:
    """Spark configuration for a small machine or a big cluster.

    small: this 2-core box. Shuffle partitions = 2 per core (the default 200
    would make 200 tiny tasks of a few thousand rows); the C2 JIT with higher
    thresholds (``JAVA_OPTS``); adaptive execution to coalesce what is left.
    big: a cluster. Shuffle partitions = 3 per core of the cluster (``cores``;
    at least 64), adaptive execution with skew handling, broadcasts of tables
    up to 64 MB (the name and connection tables always are).
    """
    cores = cores or os.cpu_count() or 1
    common = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.parquet.enableVectorizedReader": "true",
        "spark.driver.extraJavaOptions": os.environ.get("ACTORLOG_SPARK_JAVA_OPTS", JAVA_OPTS),
        "spark.executor.extraJavaOptions": os.environ.get("ACTORLOG_SPARK_JAVA_OPTS",
                                                          JAVA_OPTS),
    }
    if profile == "small":
        return {
            **common,
            "spark.driver.memory": os.environ.get("ACTORLOG_SPARK_DRIVER_MEMORY", "3g"),
            "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
            "spark.sql.autoBroadcastJoinThreshold": str(32 << 20),
            "spark.sql.files.maxPartitionBytes": str(128 << 20),
        }
    if profile == "big":
        return {
            **common,
            "spark.driver.memory": os.environ.get("ACTORLOG_SPARK_DRIVER_MEMORY", "4g"),
            "spark.sql.shuffle.partitions": str(max(64, 3 * cores)),
            "spark.sql.adaptive.skewJoin.enabled": "true",
            "spark.sql.autoBroadcastJoinThreshold": str(64 << 20),
            "spark.sql.files.maxPartitionBytes": str(256 << 20),
        }
    raise ValueError(f"unknown Spark profile {profile!r}; use one of {', '.join(PROFILES)}")


def default_profile(master: str) -> str:
    return "small" if master.startswith("local") else "big"


def spark_session(master: str = "local[*]", profile: str | None = None,
                  shuffle_partitions: int | None = None, cores: int | None = None) -> Any:
    """A Spark session whose Python workers run this interpreter (so they import the project)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = spark_settings(profile or default_profile(master), cores)
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    builder = SparkSession.builder.master(master).appName("actorlog-trace-analyze")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ------------------------------------------------------------------ tables
def node_anchors(paths: list[Path]) -> dict[str, int]:
    """Per node its anchor, the median of its records' clock_offset_ns corrected so no
    crossing is received before it was sent (as actors/trace/spans.py); computed with
    pyarrow, off Spark: two columns of every record, four of the ``net`` records (one
    per message that crossed nodes)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = ds.dataset([str(p) for p in paths], format="parquet")
    grouped = data.to_table(columns=["node", "clock_offset_ns"]).group_by("node").aggregate(
        [("clock_offset_ns", "approximate_median")])
    anchors = {row["node"]: int(row["clock_offset_ns_approximate_median"])
               for row in grouped.to_pylist()}
    nets = data.to_table(columns=["node", "sender", "sent_ns", "recv_ns"],
                         filter=pc.field("kind") == "net")
    nets = nets.append_column("gap", pc.subtract(nets["sent_ns"], nets["recv_ns"]))
    least_gap: dict[tuple[str, str], int] = {}
    for row in nets.group_by(["sender", "node"]).aggregate([("gap", "max")]).to_pylist():
        source = str(row["sender"]).rpartition("@")[2]
        if source and source != row["node"]:
            key = (source, row["node"])
            least_gap[key] = max(least_gap.get(key, row["gap_max"]), row["gap_max"])
    return causal(anchors, least_gap)


def load_records(spark: Any, paths: list[Path], anchors: dict[str, int]) -> Any:
    """The records with their times on the reference clock: ``t_sent`` (the sender's
    node), ``t_recv`` and ``t_done`` (the writing node)."""
    from pyspark.sql import functions as F

    from wire.trace_format import FIELD_TYPES

    types = {"str": "string", "int": "long", "int32": "int"}
    schema = ", ".join(f"`{name}` {types[t]}" for name, t in FIELD_TYPES)
    ev = spark.read.schema(schema).parquet(*[str(p) for p in paths])
    c = F.col
    if len(set(anchors.values())) <= 1:  # one node, or clocks that agree: one constant
        a = F.lit(next(iter(anchors.values()), 0))
        return (ev.withColumn("t_sent", c("sent_ns") + a).withColumn("t_recv", c("recv_ns") + a)
                .withColumn("t_done", c("done_ns") + a))
    amap = F.create_map(*[x for node, off in anchors.items() for x in (F.lit(node), F.lit(off))])
    mine = amap[c("node")]
    theirs = F.coalesce(amap[F.substring_index(c("sender"), "@", -1)], mine)
    sent_a = F.when(c("kind").isin("hop", "net"), theirs).otherwise(mine)
    return (ev.withColumn("t_sent", c("sent_ns") + sent_a)
            .withColumn("t_recv", c("recv_ns") + mine).withColumn("t_done", c("done_ns") + mine))


def _actor_stats(hops: Any) -> tuple[Any, dict[int, tuple[str, str]]]:
    """Per (node, actor): messages, mailbox and handling p50/p99 (us), busy time and
    fraction, first and last times; a small DataFrame, computed once. And the names of
    the actors: ``who`` (xxhash64 of node and actor) -> (node, actor)."""
    from pyspark.sql import functions as F

    c = F.col
    # The aggregate holding percentile_approx is not code-generated: its inputs are
    # computed in the code-generated projection below it rather than row by row in it.
    stats = (
        hops.select("node", "actor", "t_recv", "t_done",
                    ((c("t_recv") - c("t_sent")) / 1000.0).alias("mailbox_us"),
                    ((c("t_done") - c("t_recv")) / 1000.0).alias("handling_us"),
                    (c("t_done") - c("t_recv")).alias("busy"))
        .groupBy("node", "actor")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.percentile_approx("mailbox_us", [0.5, 0.99], 1000).alias("mailbox"),
            F.percentile_approx("handling_us", [0.5, 0.99], 1000).alias("handling"),
            F.sum("busy").alias("busy_ns"),
            F.min("t_recv").alias("t_first"),
            F.max("t_done").alias("t_last"),
        )
        .withColumn("who", F.xxhash64("node", "actor"))
        .collect()
    )
    span: dict[str, tuple[int, int]] = {}
    for r in stats:
        lo, hi = span.get(r["node"], (r["t_first"], r["t_last"]))
        span[r["node"]] = (min(lo, r["t_first"]), max(hi, r["t_last"]))
    rows = [
        (r["node"], r["actor"], r["messages"], r["mailbox"][0], r["mailbox"][1],
         r["handling"][0], r["handling"][1], r["busy_ns"] / 1e9,
         r["busy_ns"] / max(span[r["node"]][1] - span[r["node"]][0], 1), r["t_first"],
         r["t_last"])
        for r in sorted(stats, key=lambda r: (r["node"], r["actor"]))
    ]
    names = {r["who"]: (r["node"], r["actor"]) for r in stats}
    return hops.sparkSession.createDataFrame(
        rows, "node string, actor string, messages long, mailbox_p50_us double, "
              "mailbox_p99_us double, handling_p50_us double, handling_p99_us double, "
              "busy_s double, busy_fraction double, t_first long, t_last long"), names


def _lookup(table: dict[int, str], key: Any) -> Any:
    """``table[key]`` as a Spark expression (null when absent): a literal map, as the
    actors are few, instead of a join with a DataFrame made on the driver."""
    from pyspark.sql import functions as F

    if not table:
        return F.lit(None).cast("string")
    pairs = [x for k, v in table.items() for x in (F.lit(k).cast("long"), F.lit(v))]
    return F.create_map(*pairs)[key]


HANDLER_PREFIX = "handler-"
"""The broker names its request handlers ``handler-<i>`` (``Topology.handler_for_conn``)."""


def build_tables(ev: Any) -> dict[str, Any]:
    """The requests and actors DataFrames (``request_tables`` derives the others).

    One pass groups the records by trace, and Spark combines each trace's
    records where they are read (a trace's records sit together in one file),
    so little crosses the shuffle. A request's times and identity come from its
    request record and its KafkaRequest and KafkaResponse hops. ``local`` is the
    handler's time on the trace's hops clipped to [recv(KafkaRequest),
    send(KafkaResponse)] (``actors/trace/spans.py``); one pass gets it exactly
    from sums over the handler's hops, because an actor handles one message at
    a time: the hops before the one that sent the response count whole, that
    one counts up to the send (``S - (D - T)``). Traces where that does not hold
    (more than one handler, or hops at the handler after the response) get no
    stages rather than wrong ones. Aggregation buffers hold numbers only (Spark
    hash-aggregates those), so an actor is carried as ``who`` = xxhash64(node,
    actor) and named at the end from the small actors table.
    """
    from pyspark.sql import functions as F

    c, w = F.col, F.when
    kind, mt = c("kind"), c("msg_type")
    hop = kind == "hop"
    # each record's role once, as small ints the aggregates below only compare
    ev = (
        ev.filter(kind.isin("hop", "request"))
        .withColumn("who", F.xxhash64("node", "actor"))
        .withColumn("role", w(kind == "request", 1)
                    .when(hop & (mt == "KafkaRequest"), 2)
                    .when(hop & (mt == "KafkaResponse"), 3).otherwise(0))
        .withColumn("at_handler", hop & c("actor").startswith(HANDLER_PREFIX))
    )
    is_rq, is_kreq, is_kresp = c("role") == 1, c("role") == 2, c("role") == 3
    is_hop, at_handler = c("kind") == "hop", c("at_handler")
    per_trace = (
        # only the records some aggregate below takes (the others, e.g. hops at a shard,
        # would add nothing but rows to group)
        ev.filter((c("trace_id") != 0) & ((c("role") != 0) | at_handler))
        .groupBy("trace_id")
        .agg(
            F.min(w(is_rq, c("t_recv"))).alias("t_in_ns"),
            F.min(w(is_rq, c("t_done"))).alias("t_out_ns"),
            F.count(w(is_rq, 1)).alias("responses"),
            F.sum(w(is_rq, c("bytes_out"))).alias("bytes_out"),
            F.max(w(is_rq, c("who"))).alias("proc_who"),
            F.max(w(is_rq | is_kreq, c("conn_id"))).alias("conn_id"),
            F.max(w(is_rq | is_kreq, c("corr_id"))).alias("corr_id"),
            F.max(w(is_rq | is_kreq, c("api_key"))).alias("api_key"),
            F.min(w(is_kreq, c("t_sent"))).alias("t_req_sent"),
            F.min(w(is_kreq, c("t_recv"))).alias("t_req_recv"),
            F.max(w(is_kreq, c("who"))).alias("handler_who"),
            F.max(w(is_kreq, F.xxhash64(F.substring_index(c("sender"), "@", -1),
                                        F.substring_index(c("sender"), "@", 1)))
                  ).alias("kreq_proc_who"),
            F.min(w(is_kresp, c("t_sent"))).alias("t_resp_send"),
            F.min(w(is_kresp, c("t_recv"))).alias("t_resp_recv"),
            F.max(w(is_kresp, c("parent_span_id"))).alias("resp_parent"),
            F.min(w(at_handler, c("who"))).alias("h_who_min"),
            F.max(w(at_handler, c("who"))).alias("h_who_max"),
            F.sum(w(at_handler, c("t_done") - c("t_recv"))).alias("h_busy"),
            F.min(w(at_handler, c("t_recv"))).alias("h_first"),
            F.max(w(at_handler, c("t_done"))).alias("h_last_done"),
            F.max_by(w(at_handler, c("span_id")), w(at_handler, c("t_recv"))).alias("h_last"),
        )
        .filter(c("t_in_ns").isNotNull() | c("t_req_sent").isNotNull())
    )
    t1, t2 = c("t_req_recv"), c("t_resp_send")
    exact = (
        (c("h_who_min") == c("handler_who")) & (c("h_who_max") == c("handler_who"))
        & (c("h_first") == t1) & (c("h_last") == c("resp_parent")) & (c("h_last_done") >= t2)
    )
    local = c("h_busy") - (c("h_last_done") - t2)
    complete = (
        c("t_out_ns").isNotNull() & t1.isNotNull() & t2.isNotNull()
        & c("t_resp_recv").isNotNull() & exact
    )
    api_map = F.create_map(*[x for k, v in API_SNAKE_NAMES.items() for x in (F.lit(k), F.lit(v))])
    finished = c("t_in_ns").isNotNull()
    req = per_trace.select(
        "trace_id",
        F.coalesce(c("t_in_ns"), c("t_req_sent")).alias("t_in_ns"),
        "t_out_ns",
        "responses",
        F.coalesce(c("bytes_out"), F.lit(0)).alias("bytes_out"),
        w(finished, c("proc_who")).otherwise(c("kreq_proc_who")).alias("proc_who"),
        "conn_id",
        "corr_id",
        "api_key",
        "handler_who",
        w(complete, t1 - c("t_in_ns")).alias("request_queue_ns"),
        w(complete, local).alias("local_ns"),
        w(complete, t2 - t1 - local).alias("remote_ns"),
        w(complete, c("t_resp_recv") - t2).alias("response_queue_ns"),
        w(complete, c("t_out_ns") - c("t_resp_recv")).alias("send_ns"),
    )
    # every actor that handled a hop: the actors table, and the names of ``who``
    actor_stats, names = _actor_stats(ev.filter(is_hop))
    requests = (
        req.withColumn("node", _lookup({w: n for w, (n, _) in names.items()}, c("proc_who")))
        .withColumn("processor", _lookup({w: a for w, (_, a) in names.items()},
                                         c("proc_who")))
        .withColumn("handler", _lookup({w: f"{a}@{n}" for w, (n, a) in names.items()},
                                       c("handler_who")))
        .withColumn("api", F.coalesce(api_map[c("api_key")],
                                      F.concat(F.lit("api_"), c("api_key").cast("string"))))
        .withColumn("total_ns", c("t_out_ns") - c("t_in_ns"))
        .select(
            "trace_id", "node", "processor", "conn_id", "corr_id", "api_key", "api",
            "t_in_ns", "t_out_ns", "responses", "bytes_out", "total_ns",
            *[f"{s}_ns" for s in STAGES], "handler",
        )
    )
    actors = actor_stats.drop("t_first", "t_last")
    return {"requests": requests, "actors": actors}


def request_tables(requests: Any) -> dict[str, Any]:
    """The seconds and violations DataFrames, from the requests table (as written: the
    job reads it back rather than caching it, which costs more than the read)."""
    from pyspark.sql import functions as F

    c, w = F.col, F.when
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
    return {"seconds": seconds, "violations": ordering_check(requests)}


LAG_BUCKET_S = 1
"""The time bucket of the replication lag table, seconds."""


def replication_records(ev: Any) -> Any:
    """The few records the replication tables take (replica and wait records, replica
    fetch hops), to read from the trace files once (cached) rather than three times."""
    from pyspark.sql import functions as F

    c = F.col
    return ev.filter(c("kind").isin("replica", "wait")
                     | ((c("kind") == "hop") & (c("msg_type") == "ReplicaFetch"))).select(
        "kind", "msg_type", "trace_id", "node", "sender", "detail", "offset", "t_recv",
        "t_done", "link_trace_id")


def replication_tables(few: Any, requests: Any) -> dict[str, Any]:
    """The replication and produce_waits DataFrames (traces of a cluster), from
    ``replication_records``.

    replication: per (second, leader node, follower node, partition), from the
    ``replica`` records of sampled replica fetches: fetches, the follower's
    fetch offset (min, max), the leader's log end offset (max) and the lag in
    records (leader log end - fetch offset: max and mean over the fetches).
    produce_waits: per sampled produce that waited in the leader's purgatory
    (a ``wait`` record "DelayedProduce"): append_ns (net in to the start of the
    wait: request queue, the local append, its group commit), followers_ns (the
    wait, until the followers' fetches moved the high watermark), response_ns
    (the answer to net out), total_ns, the follower whose fetch completed it.
    """
    from pyspark.sql import functions as F

    c = F.col
    rep = (
        few.filter(c("kind") == "replica")
        .withColumn("leo", F.regexp_extract("detail", r" leo (-?\d+)$", 1).cast("long"))
        .withColumn("partition", F.regexp_extract("detail", r"^(.*) leo -?\d+$", 1))
        .withColumn("lag", c("leo") - c("offset"))
        .withColumn("second", F.floor(c("t_done") / (LAG_BUCKET_S * 1e9)).cast("long")
                    * LAG_BUCKET_S)
    )
    replication = (
        rep.groupBy("second", c("node").alias("leader"), c("sender").alias("follower"),
                    "partition")
        .agg(F.count(F.lit(1)).alias("fetches"),
             F.min("offset").alias("fetch_offset_min"),
             F.max("offset").alias("fetch_offset_max"),
             F.max("leo").alias("leader_log_end_max"),
             F.max("lag").alias("lag_max"),
             F.avg("lag").alias("lag_mean"))
    )
    waits = (
        few.filter((c("kind") == "wait") & (c("msg_type") == "DelayedProduce"))
        .select("trace_id", c("t_recv").alias("t_wait"), c("t_done").alias("t_acked"),
                c("link_trace_id"), c("offset").alias("fetch_offset"))
    )
    fetchers = (
        few.filter((c("kind") == "hop") & (c("msg_type") == "ReplicaFetch"))
        .groupBy(c("trace_id").alias("link_trace_id"))
        .agg(F.first("sender").alias("fetch_sender"))
    )
    produce_waits = (
        requests.filter(c("api") == "produce").select("trace_id", "node", "t_in_ns", "t_out_ns")
        .join(waits, "trace_id")
        .join(fetchers, "link_trace_id", "left")
        .select(
            "trace_id", "node", "t_in_ns",
            (c("t_wait") - c("t_in_ns")).alias("append_ns"),
            (c("t_acked") - c("t_wait")).alias("followers_ns"),
            (c("t_out_ns") - c("t_acked")).alias("response_ns"),
            (c("t_out_ns") - c("t_in_ns")).alias("total_ns"),
            F.substring_index("fetch_sender", "@", -1).alias("acked_by"),
            F.substring_index("fetch_sender", "@", 1).alias("acked_by_fetcher"),
            "fetch_offset",
        )
    )
    return {"replication": replication, "produce_waits": produce_waits}


def ordering_check(requests: Any) -> Any:
    """Violations: responses that left a connection out of request order, and bad answer counts.

    A connection is (node, processor, conn_id); its requests are ordered by
    net in time (the Processor numbers them in that order). ``out_of_order``:
    a response written after the response of a later request (compared by
    net out time). ``answered_twice``: a request with more than one response.
    ``unanswered_produce``: a produce with no response although a later request
    of its connection was answered (so it was not merely still in flight when
    the trace ended). One window over each connection's requests in arrival
    order finds them all (one sort).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    c, w = F.col, F.when
    conn = ["node", "processor", "conn_id"]
    # Newest first, so "every later request" is a frame that only grows (Spark adds each
    # row once; a frame that shrinks, "from here to the end", is recomputed per row).
    newest_first = Window.partitionBy(*conn).orderBy(c("t_in_ns").desc(), c("corr_id").desc())
    later = newest_first.rowsBetween(Window.unboundedPreceding, -1)
    whole = newest_first.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    r = (
        requests.select(*conn, "trace_id", "corr_id", "api", "t_in_ns", "t_out_ns",
                        "responses")
        .withColumn("rank_desc", F.row_number().over(newest_first))
        .withColumn("n", F.count(F.lit(1)).over(whole))
        .withColumn("first_later_out", F.min("t_out_ns").over(later))
        .withColumn("first_later_rank_desc", F.min_by("rank_desc", "t_out_ns").over(later))
        .withColumn("later_answered", F.max(w(c("t_out_ns").isNotNull(), 1)).over(later))
        .withColumn("in_rank", c("n") - c("rank_desc") + 1)
        .withColumn("first_later_rank", c("n") - c("first_later_rank_desc") + 1)
    )
    detail = F.concat(
        F.lit("response to request #"), c("in_rank").cast("string"),
        F.lit(" left after the response to request #"), c("first_later_rank").cast("string"))
    violations = r.select(
        *conn, "trace_id", "corr_id", "api",
        F.array_compact(F.array(
            w(c("t_out_ns") > c("first_later_out"),
              F.struct(F.lit("out_of_order").alias("violation"), detail.alias("detail"))),
            w(c("responses") > 1,
              F.struct(F.lit("answered_twice").alias("violation"),
                       F.concat(c("responses").cast("string"), F.lit(" responses"))
                       .alias("detail"))),
            w((c("api") == "produce") & c("t_out_ns").isNull() & (c("later_answered") == 1),
              F.struct(F.lit("unanswered_produce").alias("violation"),
                       F.lit("no response, a later request was answered").alias("detail"))),
        )).alias("found"),
    )
    return (violations.select(*conn, "trace_id", "corr_id", "api", F.explode("found").alias("v"))
            .select(*conn, "trace_id", "corr_id", "api", "v.violation", "v.detail"))


# ------------------------------------------------------------------ the job
def analyze(
    dirs: list[Path], out: Path, master: str = "local[*]", spark: Any = None, plots: bool = True,
    profile: str | None = None,
) -> dict[str, Any]:
    """Run the whole job; returns the summary (also written to ``out/summary.json``)."""
    require_extras()
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    own = spark is None
    started: dict[str, Any] = {}
    starting = None
    if own:
        # Spark's JVM starts (about 10 s, mostly class loading) while pyarrow reads the
        # anchors: the two overlap on a small machine's cores
        def start() -> None:
            t = time.perf_counter()
            try:
                started["spark"] = spark_session(master, profile)
            except BaseException as e:  # re-raised by the caller's thread
                started["error"] = e
            timings["spark_start_s"] = time.perf_counter() - t

        starting = threading.Thread(target=start, name="spark-start", daemon=True)
        starting.start()
    t0 = time.perf_counter()
    try:
        paths, inputs = parquet_inputs(dirs, out / "staging")
        if not paths:
            raise FileNotFoundError(f"no trace files under {', '.join(map(str, dirs))}")
        anchors = node_anchors(paths)
    except BaseException:
        if starting is not None:
            starting.join()
            if "spark" in started:
                started["spark"].stop()
        raise
    timings["prepare_s"] = time.perf_counter() - t0
    if starting is not None:
        t1 = time.perf_counter()
        starting.join()
        timings["spark_wait_s"] = time.perf_counter() - t1
        if "error" in started:
            raise started["error"]
        spark = started["spark"]
    else:
        timings["spark_start_s"] = 0.0
    t2 = time.perf_counter()
    try:
        ev = load_records(spark, paths, anchors)
        tables = build_tables(ev)
        timings["actors_s"] = time.perf_counter() - t2  # build_tables collects them

        def write(name: str, table: Any) -> None:
            t = time.perf_counter()
            table.write.mode("overwrite").parquet(str(out / name))
            timings[f"{name}_s" if name != "actors" else "actors_write_s"] = \
                time.perf_counter() - t

        write("requests", tables["requests"])
        write("actors", tables["actors"])
        # the tables built on the requests read them back (a few columns of a small file)
        requests = spark.read.parquet(str(out / "requests"))
        few = replication_records(ev).cache()
        later = {**request_tables(requests), **replication_tables(few, requests)}
        for name in ("seconds", "violations", "replication", "produce_waits"):
            write(name, later[name])
        few.unpersist()
    finally:
        if own:
            spark.stop()
    timings["job_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    summary, actors, seconds, hists = summarize(out, paths)
    replication = summarize_replication(out, summary)
    summary["inputs"] = inputs
    summary["anchors_ns"] = anchors
    if plots:
        write_report(out, summary, actors, seconds, hists, replication)
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

    records = sum(pq.ParquetFile(str(p)).metadata.num_rows for p in event_paths)
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
        "records": records,
        "requests": req.num_rows,
        "incomplete_requests": int((~complete).sum()),
        "per_api_us": per_api,
        "violation_count": len(viol),
        "violations": viol[:1000],
    }
    return summary, actors, seconds, hists


WAIT_PARTS = ("append", "followers", "response")


def summarize_replication(out: Path, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Adds ``replication`` (per follower: fetches, max and mean lag) and
    ``produce_wait_us`` (p50/p99 of append, followers, response, total) to the
    summary; returns the replication rows for the report."""
    import numpy as np

    rows = sorted(_read_table(out / "replication").to_pylist(),
                  key=lambda r: (r["leader"], r["follower"], r["partition"], r["second"]))
    per: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = f"{r['follower']} <- {r['leader']} {r['partition']}"
        d = per.setdefault(key, {"fetches": 0, "lag_max": 0, "lag_sum": 0.0})
        d["fetches"] += r["fetches"]
        d["lag_max"] = max(d["lag_max"], r["lag_max"])
        d["lag_sum"] += r["lag_mean"] * r["fetches"]
    summary["replication"] = {
        k: {"fetches": d["fetches"], "lag_max": d["lag_max"],
            "lag_mean": d["lag_sum"] / max(d["fetches"], 1)} for k, d in sorted(per.items())}
    waits = _read_table(out / "produce_waits")
    parts: dict[str, Any] = {"produces": waits.num_rows}
    if waits.num_rows:
        for name in (*WAIT_PARTS, "total"):
            us = waits.column(f"{name}_ns").to_numpy(zero_copy_only=False).astype("float64")
            us = us[~np.isnan(us)] / 1000.0
            if len(us):
                parts[name] = {"p50": float(np.percentile(us, 50)),
                               "p99": float(np.percentile(us, 99))}
        acked = waits.column("acked_by").to_pylist()
        parts["acked_by"] = {n: acked.count(n) for n in sorted({a for a in acked if a})}
    summary["produce_wait_us"] = parts
    return rows


def write_report(
    out: Path,
    summary: dict[str, Any],
    actors: list[dict[str, Any]],
    seconds: list[dict[str, Any]],
    hists: dict[str, Any],
    replication: list[dict[str, Any]] | None = None,
) -> None:
    """report.html with PNG plots: latency per API and stage, throughput, mailbox waits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pngs: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        pngs.append(name)

    for api, per in sorted(hists.items()):
        fig, ax = plt.subplots(figsize=(8, 4))
        for stage, pts in per.items():
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=stage)
        ax.set_xscale("log")
        ax.set_xlabel("microseconds")
        ax.set_ylabel("requests")
        ax.set_title(f"{api}: latency by stage")
        ax.legend(fontsize=8)
        save(fig, f"latency_{api}.png")
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
        save(fig, "throughput.png")
    if actors:
        fig, ax = plt.subplots(figsize=(8, max(3, 0.3 * len(actors))))
        labels = [f"{a['actor']}@{a['node']}" for a in actors]
        ax.barh(labels, [a["mailbox_p99_us"] or 0 for a in actors], label="p99", color="#e88")
        ax.barh(labels, [a["mailbox_p50_us"] or 0 for a in actors], label="p50", color="#48c")
        ax.set_xlabel("mailbox wait, microseconds")
        ax.legend(fontsize=8)
        save(fig, "mailbox.png")

    if replication:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        t0 = min(r["second"] for r in replication)
        for key in sorted({(r["leader"], r["follower"], r["partition"]) for r in replication}):
            pts = [(r["second"] - t0, r["lag_max"]) for r in replication
                   if (r["leader"], r["follower"], r["partition"]) == key]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".",
                    label=f"{key[1]} <- {key[0]} {key[2]}")
        ax.set_xlabel("seconds")
        ax.set_ylabel("lag, records (max)")
        ax.set_title("replication lag per follower")
        ax.legend(fontsize=8)
        save(fig, "replication_lag.png")
    waits = summary.get("produce_wait_us", {})
    if waits.get("produces"):
        fig, ax = plt.subplots(figsize=(8, 3))
        for q, color in (("p99", "#e88"), ("p50", "#48c")):
            ax.barh(list(WAIT_PARTS), [waits.get(p, {}).get(q, 0) for p in WAIT_PARTS],
                    label=q, color=color)
        ax.set_xlabel("microseconds")
        ax.set_title("acks=all produce: where the wait went")
        ax.legend(fontsize=8)
        save(fig, "produce_wait.png")

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
    rep_rows = [[k, d["fetches"], d["lag_max"], d["lag_mean"]]
                for k, d in summary.get("replication", {}).items()]
    wait_rows = [[waits.get("produces", 0)] + [
        f"{_fmt(waits[p]['p50'])} / {_fmt(waits[p]['p99'])}" if p in waits else ""
        for p in (*WAIT_PARTS, "total")]]
    viol_head = ["node", "processor", "conn", "corr_id", "api", "violation", "detail"]
    actor_head = ["node", "actor", "messages", "mailbox p50 us", "mailbox p99 us",
                  "handling p50 us", "handling p99 us", "busy fraction"]
    viol_html = table(viol_rows, viol_head) if viol_rows else "<p>No violations.</p>"
    html = f"""<!doctype html><html><head><meta charset="utf-8"><title>actorlog trace report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head><body>
<h1>actorlog trace report</h1>
<p>{summary["records"]} records, {summary["requests"]} sampled requests
({summary["incomplete_requests"]} incomplete), {summary["violation_count"]} violations.
Stage definitions: request_queue = handler receive - net_in; local = handler busy on the request;
remote = waiting on other actors; response_queue = Processor receive - handler send;
send = net_out - Processor receive.</p>
<h2>Latency per API, p50 / p99 (us)</h2>
{table(api_rows, ["api", "requests", "total", *STAGES])}
<h2>Ordering and answer checks</h2>
{viol_html}
<h2>Replication lag per follower (records)</h2>
{table(rep_rows, ["follower <- leader partition", "fetches", "lag max", "lag mean"])
 if rep_rows else "<p>No sampled replica fetches.</p>"}
<h2>acks=all produce waits, p50 / p99 (us)</h2>
{table(wait_rows, ["produces", *WAIT_PARTS, "total"])
 if waits.get("produces") else "<p>No sampled produce waited for followers.</p>"}
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
