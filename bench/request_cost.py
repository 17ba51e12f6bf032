"""`actorlog bench request-cost`: what one one-record Produce (or Fetch) costs inside the broker.

A broker runs in this process with a profile hook on every actor thread
(``threading.setprofile``, set before the broker starts its threads). A
client on the main thread (not profiled) sends ``--requests`` Produce v9
requests of one 100-byte record, acks=1, one at a time, each answered before
the next. Per request it reports:

* Python function calls and C calls made on the broker's threads, less what
  the same threads do in an idle window of the same length (poll timeouts,
  housekeeping);
* actor hops: the messages actors told each other (``Actor.tell``), by type.

``--api fetch`` counts a consumer's Fetch v12 instead: the records are produced
first, one per request, then each Fetch asks for the next offset with a
partition_max_bytes of 1, so it is answered at once with exactly one batch of
one record (a poll that finds data; a poll that waits adds the purgatory's hops).

``--partitions P --records R`` counts a batched producer's Produce instead: the
topic has P partitions and each request carries one batch of R 100-byte records
for every one of them (the shape of ``bench compare``'s throughput scenarios).
The broker runs in one process, so a partition that would live in another
process at ``num.processes`` > 1 is counted here without its crossing.

The profile hook makes the broker far slower, so this counts work; it times
nothing. To count an older tree the same way, run this file with that tree
first on the path: ``PYTHONPATH=OLD_TREE python bench/request_cost.py``.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import click
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.producer import ProduceRequest

BENCH_NAME = "request-cost"


class _Counts:
    """The profile hook's tallies; switched on and off by the client thread."""

    def __init__(self, tell_code: Any) -> None:
        self.on = False
        self.calls = 0
        self.c_calls = 0
        self.tells: Counter[str] = Counter()
        self.functions: Counter[Any] = Counter()
        self.tell_code = tell_code

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if event == "call":
            self.calls += 1
            self.functions[frame.f_code] += 1
            if frame.f_code is self.tell_code:
                self.tells[type(frame.f_locals.get("msg")).__name__] += 1
        elif event == "c_call":
            self.c_calls += 1

    def take(self) -> tuple[int, int, Counter[str], Counter[Any]]:
        out = (self.calls, self.c_calls, self.tells, self.functions)
        self.calls = self.c_calls = 0
        self.tells = Counter()
        self.functions = Counter()
        return out


def _record_batch(value: bytes, records: int = 1) -> bytes:
    from actors.core.record_batch import build_batch

    return build_batch([value] * records, timestamps_ms=[int(time.time() * 1000)] * records)


class _Client:
    """One connection, one request at a time, frames built by kafka-python's protocol."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.protocol = KafkaProtocol(client_id="request-cost")

    def call(self, request: Any) -> Any:
        self.protocol.send_request(request)
        self.sock.sendall(bytes(self.protocol.send_bytes()))
        while True:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the connection")
            answers = self.protocol.receive_bytes(data)
            if answers:
                return answers[0][1]

    def close(self) -> None:
        self.sock.close()


def _produce_request(topic: str, batch: bytes, partitions: int = 1) -> Any:
    cls = ProduceRequest[9]
    data = [cls.TopicProduceData.PartitionProduceData(index=i, records=batch)
            for i in range(partitions)]
    return cls(transactional_id=None, acks=1, timeout_ms=30000,
               topic_data=[cls.TopicProduceData(name=topic, partition_data=data)])


def _produced(answer: Any) -> bool:
    return all(p.error_code == 0 for p in answer.responses[0].partition_responses)


def _fetch_request(topic: str, offset: int) -> Any:
    cls = FetchRequest[12]
    partition = cls.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1)
    return cls(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
               isolation_level=0, session_id=0, session_epoch=-1,
               topics=[cls.FetchTopic(topic=topic, partitions=[partition])],
               forgotten_topics_data=[], rack_id="")


def _fetched_one(answer: Any) -> bool:
    partition = answer.responses[0].partitions[0]
    return partition.error_code == 0 and bool(partition.records)


def run_bench(requests: int, warmup: int, api: str = "produce", partitions: int = 1,
              records: int = 1, top: int = 40) -> dict[str, Any]:
    if partitions < 1 or records < 1:
        raise click.BadParameter("--partitions and --records must be at least 1")
    if api == "fetch" and (partitions, records) != (1, 1):
        raise click.BadParameter("--partitions and --records count a Produce, not --api fetch")
    from actors.broker import Broker
    from actors.runtime.actor import Actor
    from actors.runtime.config import Config

    counts = _Counts(Actor.tell.__code__)
    data_dir = Path(tempfile.mkdtemp(prefix="request-cost-"))
    config = Config({"listeners": "127.0.0.1:0", "log.dirs": str(data_dir / "data"),
                     "trace.sample.ratio": 0.0, "num.processes": 1,
                     "num.partitions": partitions})  # calls of one process
    threading.setprofile(counts.hook)
    try:
        broker = Broker(config).start()
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    client = _Client(broker.host, broker.port)
    try:
        topic = "cost"
        meta = MetadataRequest[9](topics=[MetadataRequest[9].MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True,
                                  include_topic_authorized_operations=False)
        deadline = time.monotonic() + 30
        batch = _record_batch(b"v" * 100, records)
        request = _produce_request(topic, batch, partitions)
        while True:
            client.call(meta)
            answer = client.call(request)
            if _produced(answer):
                break
            lasting = {p.error_code for p in answer.responses[0].partition_responses} - {
                0, 3, 5, 6}  # all but "not there yet": UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE, ...
            if lasting:
                too_big = (f" (MESSAGE_TOO_LARGE: {records} records a batch are over "
                           f"message.max.bytes)" if 10 in lasting else "")
                raise click.ClickException(
                    f"the produce was refused with error code(s) {sorted(lasting)}{too_big}")
            if time.monotonic() > deadline:
                raise click.ClickException("the topic did not become writable in 30 s")
            time.sleep(0.1)
        if api == "fetch":  # the records to read, one batch each, then warm the fetch path
            for _ in range(warmup + requests):
                client.call(request)
            for offset in range(1, 1 + warmup):
                client.call(_fetch_request(topic, offset))
            fetches = [_fetch_request(topic, 1 + warmup + i) for i in range(requests)]
            counts.on = True
            start = time.monotonic()
            for fetch in fetches:
                answer = client.call(fetch)
                if not _fetched_one(answer):
                    raise click.ClickException(f"fetch failed: {answer}")
        else:
            for _ in range(warmup):
                client.call(request)
            counts.on = True
            start = time.monotonic()
            for _ in range(requests):
                answer = client.call(request)
                if not _produced(answer):
                    raise click.ClickException(f"produce failed: {answer}")
        busy_s = time.monotonic() - start
        counts.on = False
        calls, c_calls, tells, functions = counts.take()
        counts.on = True
        time.sleep(busy_s)  # the same threads with nothing to do, as long
        counts.on = False
        idle_calls, idle_c_calls, idle_tells, _idle_functions = counts.take()
    finally:
        client.close()
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    hops = {name: (n - idle_tells.get(name, 0)) / requests for name, n in tells.items()}
    results = {
        "python_calls_per_request": (calls - idle_calls) / requests,
        "c_calls_per_request": (c_calls - idle_c_calls) / requests,
        "actor_hops_per_request": sum(hops.values()),
        "hops_by_message": dict(sorted(hops.items())),
        "idle_python_calls_per_request": idle_calls / requests,
        "top_functions": [
            [f"{Path(code.co_filename).parent.name}/{Path(code.co_filename).name}:"
             f"{code.co_name}", n / requests]
            for code, n in functions.most_common(max(40, top))],
        "requests": requests,
        "profiled_seconds": busy_s,
    }
    return {"bench": BENCH_NAME, "config": {"requests": requests, "warmup": warmup, "api": api,
                                            "partitions": partitions, "records": records,
                                            "tree": str(Path(sys.modules["actors"].__file__
                                                             or "").parent.parent)},
            "results": results, "ratios": {}}


@click.command(name=BENCH_NAME)
@click.option("--requests", default=1000, show_default=True, help="profiled requests")
@click.option("--warmup", default=200, show_default=True)
@click.option("--top", default=25, show_default=True, help="functions listed")
@click.option("--api", type=click.Choice(["produce", "fetch"]), default="produce",
              show_default=True, help="the request counted: a one-record Produce, or a Fetch "
                                      "answered at once with one record")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="produce: partitions of the topic, each sent one batch per request")
@click.option("--records", type=click.IntRange(min=1), default=1, show_default=True,
              help="produce: 100-byte records in each partition's batch")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="write the report as JSON here")
def command(requests: int, warmup: int, top: int, api: str, partitions: int, records: int,
            json_path: str | None) -> None:
    """Python calls and actor hops of one Produce (acks=1; one record unless --partitions
    or --records say more) inside the broker."""
    report = run_bench(requests, warmup, api, partitions, records, top)
    r = report["results"]
    click.echo(f"tree {report['config']['tree']}")
    click.echo(f"python calls per request: {r['python_calls_per_request']:.0f} "
               f"(idle threads in the same time: {r['idle_python_calls_per_request']:.0f})")
    click.echo(f"C calls per request: {r['c_calls_per_request']:.0f}")
    click.echo(f"actor hops per request: {r['actor_hops_per_request']:.2f}  "
               + ", ".join(f"{k} {v:.2f}" for k, v in r["hops_by_message"].items()))
    click.echo("calls per request by function (the most called):")
    for name, n in r["top_functions"][:top]:
        click.echo(f"  {n:6.2f}  {name}")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    command()
