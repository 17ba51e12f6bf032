"""Traces of a cluster: an acks=all produce names the follower fetch that acknowledged it.

Three real nodes traced at 1.0, a topic with replication factor 3 and
min.insync.replicas 2, one acks=all produce from confluent-kafka: the leader's
DelayedProduce is completed by a follower's replica fetch, and `trace show`,
the Perfetto export (a flow from the follower's fetch to the completion) and
the records themselves say which fetch it was.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient, NewTopic

from actors.cli import cli
from actors.trace.spans import request_traces
from actors.trace.store import read_trace_dirs
from tests.fixtures.cluster import Cluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]

TOPIC = "traced-replicated"


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["trace", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _linked_produce(dirs: list[Path]) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """Every record, and a produce's wait record that a follower fetch completed."""
    records = read_trace_dirs(dirs)
    produces = {r.trace_id for r in request_traces(records) if r.api == "produce"}
    fetches = {r["trace_id"] for r in records
               if r["kind"] == "hop" and r["msg_type"] == "ReplicaFetch"}
    for rec in records:
        if (rec["kind"] == "wait" and rec["msg_type"] == "DelayedProduce"
                and rec["trace_id"] in produces and rec["link_trace_id"] in fetches
                and any(r["trace_id"] == rec["trace_id"] and r["kind"] == "request"
                        for r in records)):
            return records, rec
    return None


@pytest.fixture(scope="module")
def cluster_traces(zookeeper_server: Any, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[tuple[int, list[Path], list[dict[str, Any]],
                                       dict[str, Any]]]:
    """A 3-node cluster traced at 1.0 after three acks=all produces (RF 3, min ISR 2),
    stopped: the partition's leader, the nodes' data dirs, every record, and a
    DelayedProduce wait that a follower's fetch completed."""
    if not zookeeper_server.running():
        zookeeper_server.start()
        zookeeper_server.wait_serving()
    connect = f"{zookeeper_server.connect_string}/trace-replication-{os.getpid()}"
    cluster = Cluster(tmp_path_factory.mktemp("traced-cluster"), connect, 3, config={
        "trace.sample.ratio": 1.0, "min.insync.replicas": 2,
        "auto.leader.rebalance.enable": False, "replica.fetch.backoff.ms": 100,
    })
    try:
        cluster.start()
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 3,
                                          topic_configs={"min.insync.replicas": "2"})])
        finally:
            admin.close()
        leader = cluster.wait_topic(TOPIC, 1).leaders(TOPIC)[0]
        acked: list[Any] = []
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 0, "message.timeout.ms": 20_000})
        for i in range(3):
            producer.produce(TOPIC, f"v{i}".encode(), partition=0,
                             on_delivery=lambda err, msg: acked.append(err))
            producer.flush(20)
        assert acked == [None, None, None]
        del producer  # it would go on trying to reach the stopped nodes
        dirs = [n.data_dir for n in cluster.nodes.values()]
        deadline = time.monotonic() + 10
        found = _linked_produce(dirs)
        while found is None and time.monotonic() < deadline:
            time.sleep(0.3)  # the nodes' writers flush every half second
            found = _linked_produce(dirs)
        assert found is not None, "no produce trace links to a follower fetch"
    finally:
        cluster.stop()  # the writers close their files
    yield leader, dirs, *found


def test_acks_all_produce_names_the_acknowledging_fetch(
    cluster_traces: tuple[int, list[Path], list[dict[str, Any]], dict[str, Any]],
    tmp_path: Path,
) -> None:
    leader, dirs, records, wait = cluster_traces
    leader_node = f"node-{leader}"
    assert wait["node"] == leader_node and wait["offset"] >= 1
    fetch = next(r for r in records if r["trace_id"] == wait["link_trace_id"]
                 and r["msg_type"] == "ReplicaFetch")
    fetcher, _sep, follower = fetch["sender"].rpartition("@")
    assert follower != leader_node and follower.startswith("node-")
    assert fetcher.startswith(f"replica-fetcher-{leader}-")

    # trace show of the produce lists the fetch under the DelayedProduce wait
    out = _run("show", str(wait["trace_id"]), "--dir", *map(str, dirs))
    assert "request produce" in out
    lines = out.splitlines()
    watch = next(i for i, line in enumerate(lines) if "WatchProduce" in line)
    done = next(i for i, line in enumerate(lines) if "DelayedProduce" in line)
    assert done == watch + 1, out
    assert (f"completed by the replica fetch of {follower} (fetcher {fetcher}, "
            f"fetch offset {wait['offset']})") in lines[done], out
    # the answer goes on in the produce's trace: every stage of the request is known
    assert "ProduceReady" in out and "KafkaResponse" in out, out
    assert "remote" in out and "?" not in lines[1], out

    # the Perfetto export draws a flow from the follower's fetch to the completion
    json_out = tmp_path / "cluster.json"
    _run("export", "--format", "perfetto", "--dir", *map(str, dirs), str(json_out))
    doc = json.loads(json_out.read_text())
    events = doc["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    nodes = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    ends = [e for e in events if e.get("cat") == "ack" and e.get("flow_in")
            and e["args"].get("fetch_trace_id") == f"{wait['link_trace_id']:016x}"]
    assert ends, "no completion slice with a flow from a fetch"
    end = ends[0]
    assert nodes[end["pid"]] == leader_node and end["name"].startswith("DelayedProduce")
    starts = [e for e in events if e.get("bind_id") == end["bind_id"] and e.get("flow_out")]
    assert len(starts) == 1
    start = starts[0]
    assert nodes[start["pid"]] == follower
    assert names[(start["pid"], start["tid"])] == fetcher
    assert start["ts"] <= end["ts"] + end["dur"]


@pytest.mark.slow
def test_analyze_reports_replication_lag_and_produce_waits(
    cluster_traces: tuple[int, list[Path], list[dict[str, Any]], dict[str, Any]],
    spark: object, tmp_path: Path,
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from actors.trace.analyze import analyze

    leader_id, dirs, _records, wait = cluster_traces
    leader = f"node-{leader_id}"
    out = tmp_path / "report"
    summary = analyze(dirs, out, spark=spark)
    # lag per follower over time, from the leader's records of the followers' fetches
    # (the stop moved leaderships at the end: other leaders show up there too)
    lag = [r for r in pq.read_table(out / "replication").to_pylist()
           if r["partition"] == f"{TOPIC}-0" and r["leader"] == leader]
    followers = {f"node-{i}" for i in (1, 2, 3)} - {leader}
    assert {r["follower"] for r in lag} == followers
    for r in lag:
        assert r["leader_log_end_max"] >= r["fetch_offset_max"] >= r["fetch_offset_min"] >= 0
        assert r["lag_max"] >= 0 and r["fetches"] >= 1
    assert max(r["fetch_offset_max"] for r in lag) == 3
    assert max(r["lag_max"] for r in lag) >= 1  # a fetch read a record it did not have
    # the produce waits, split; the parts add up to the request's total
    waits = {r["trace_id"]: r for r in pq.read_table(out / "produce_waits").to_pylist()}
    row = waits[wait["trace_id"]]
    assert row["node"] == leader and row["acked_by"] in followers
    assert row["fetch_offset"] == wait["offset"]
    assert min(row["append_ns"], row["followers_ns"], row["response_ns"]) >= 0
    assert row["append_ns"] + row["followers_ns"] + row["response_ns"] == row["total_ns"]
    assert summary["produce_wait_us"]["produces"] == len(waits) >= 1
    assert set(summary["replication"]) >= {f"{f} <- {leader} {TOPIC}-0" for f in followers}
    assert (out / "replication_lag.png").exists() and (out / "produce_wait.png").exists()
    assert "Replication lag per follower" in (out / "report.html").read_text()
