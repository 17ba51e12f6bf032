"""`actorlog bench memory`: what a broker holds in memory for data and for big fetches.

Every figure is read from a broker process this benchmark starts (from a
command template, as `bench sweep` does) and from its ``/proc/<pid>/status``:

- ``retained``: anonymous memory (RssAnon) grown per GB appended to one
  partition, after a 64 MB warm-up (one-time allocations are not growth);
- ``pipelined``: peak resident memory (VmRSS) grown while one client sends
  ``--fetches`` pipelined Fetch requests of ``--fetch-mb`` each and never
  reads a byte of the answers;
- ``slow``: peak VmRSS grown while ``--slow-consumers`` clients each ask for
  ``--fetch-mb`` and read their answers at ``--slow-kib-per-s``;
- ``consume``: a confluent-kafka consumer reads the first ``--consume-mb`` of
  the partition from disk (the segment files' pages are dropped from the page
  cache first, file by file, with ``posix_fadvise``), in MB/s of record values.
  Needs the bench extra; skipped without it.

The broker is restarted (same data dir) before each of the last three, so
each starts from a fresh process. With ``--baseline-cmd`` (for example an
older checkout: ``env -C /path/to/old PYTHONPATH=/path/to/old {python} -m
actors.cli serve --listen 127.0.0.1:{port} --data-dir {data_dir} --config
{config}``; the ``-C`` matters: ``python -m`` puts the working directory
ahead of PYTHONPATH, so started from this checkout it would run this code) the
same rounds run against it too, alternating which goes first; the baseline
gets no settings (an older release may not know the keys). Ratios are higher
is better: the targets of issue 13 (3 MB per GB; 400 MB for 8 unread 100 MB
fetches) over the candidate's figure, and with a baseline, the baseline's
memory over the candidate's and the candidate's consume speed over the
baseline's. Each figure is given as min/median/max over ``--rounds``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from kafka.protocol.parser import KafkaProtocol

from actors.core.record_batch import build_batch
from bench.contract import min_median_max
from bench.peers import ACTORLOG_TEMPLATE, BrokerProcess, start_broker
from wire import kafka_codec as kc

BENCH_NAME = "memory"
MB = 1024 * 1024
TOPIC = "retained"
RECORD_BYTES = 100 * 1024
RECORDS_PER_BATCH = 10
WARM_UP_MB = 64
PRODUCE_PIPELINE = 8
TARGET_RSS_ANON_MB_PER_GB = 3.0
TARGET_PIPELINED_GROWTH_MB = 400.0
# The settings that bound each figure, given to the candidate (its defaults, written out).
BOUNDING_SETTINGS: dict[str, object] = {
    "fetch.max.bytes": 57671680,
    "max.unsent.response.bytes.per.connection": 104857600,
    "queued.max.request.bytes": 268435456,
    "max.inflight.requests.per.connection": 64,
    "log.index.size.max.bytes": 10485760,
}
PRODUCE, FETCH, CREATE_TOPICS = 0, 1, 19


# ------------------------------------------------------------------ /proc
def proc_status_kib(pid: int, field: str) -> int:
    """A ``kB`` line of /proc/<pid>/status (VmRSS, RssAnon)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


class PeakSampler:
    """The largest value of a /proc/<pid>/status field while running (every 20 ms)."""

    def __init__(self, pid: int, field: str = "VmRSS") -> None:
        self.pid = pid
        self.field = field
        self.peak = proc_status_kib(pid, field)
        self.last = self.peak
        self.last_growth_ns = time.monotonic_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                value = proc_status_kib(self.pid, self.field)
            except (OSError, RuntimeError):
                return
            if value > self.peak:
                self.peak = value
                self.last_growth_ns = time.monotonic_ns()
            self.last = value

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def quiet_for(self, seconds: float) -> bool:
        """No new peak for this long."""
        return time.monotonic_ns() - self.last_growth_ns >= seconds * 1e9


# ------------------------------------------------------------ a raw client
def _to_library(field_struct: Any, data_class: Any, values: dict[str, Any], version: int) -> Any:
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        field = field_struct.fields[name]
        if field.is_struct_array() and value is not None:
            value = [_to_library(field.array_of, field.data_class, v, version) for v in value]
        elif field.is_struct() and value is not None:
            value = _to_library(field, field.data_class, value, version)
        kwargs[name] = value
    if field_struct is getattr(data_class, "_struct", None):
        kwargs["version"] = version
    return data_class(**kwargs)


def build_request(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A kafka-python request object (its own classes encode it, as its client does)."""
    cls = kc.request_class(api_key, version)
    return _to_library(cls._struct, cls, values, version)


def fetch_v4_values(offset: int, max_bytes: int) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": 0,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]}


def raw_frames(api_key: int, version: int, values: dict[str, Any], count: int,
               client_id: str) -> bytes:
    """``count`` copies of one request, numbered 1..count, as a client writes them."""
    out = bytearray()
    for correlation_id in range(1, count + 1):
        request = build_request(api_key, version, values)
        request.with_header(correlation_id=correlation_id, client_id=client_id)
        out += request.encode(framed=True, header=True)
    return bytes(out)


class Client:
    """One connection: requests out, responses in, in order (kafka-python's parser)."""

    def __init__(self, port: int, timeout_s: float = 120.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.protocol = KafkaProtocol(client_id="bench-memory")

    def close(self) -> None:
        self.sock.close()

    def pipeline(self, requests: list[tuple[int, int, dict[str, Any]]]) -> list[Any]:
        for api_key, version, values in requests:
            self.protocol.send_request(build_request(api_key, version, values))
        self.sock.sendall(bytes(self.protocol.send_bytes()))
        responses: list[Any] = []
        while len(responses) < len(requests):
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            responses.extend(r for _cid, r in self.protocol.receive_bytes(data))
        return responses

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        return self.pipeline([(api_key, version, values)])[0]


def create_topic(client: Client) -> None:
    response = client.call(CREATE_TOPICS, 7, {
        "topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 30_000, "validate_only": False})
    code = response.topics[0].error_code
    if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"cannot create topic {TOPIC}: error {code}")


def produce_mb(client: Client, megabytes: int, batch: bytes) -> int:
    """Append about ``megabytes`` of ``batch`` copies, PRODUCE_PIPELINE requests at a time;
    the records appended."""
    values = {"transactional_id": None, "acks": 1, "timeout_ms": 30_000,
              "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    requests = max(1, megabytes * MB // len(batch))
    done = 0
    while done < requests:
        n = min(PRODUCE_PIPELINE, requests - done)
        for response in client.pipeline([(PRODUCE, 9, values)] * n):
            part = response.responses[0].partition_responses[0]
            if part.error_code != 0:
                raise RuntimeError(f"produce failed with error {part.error_code}")
        done += n
    return requests * RECORDS_PER_BATCH


def drop_page_cache(directory: Path) -> int:
    """Write back and drop the cached pages of every file under ``directory``; the files."""
    count = 0
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return count




# --------------------------------------------------------------- the phases
class Settings:
    """What one run measures (the command's options)."""

    def __init__(self, **kw: Any) -> None:
        self.retain_mb: int = kw["retain_mb"]
        self.fetches: int = kw["fetches"]
        self.fetch_mb: int = kw["fetch_mb"]
        self.slow_consumers: int = kw["slow_consumers"]
        self.slow_kib_per_s: int = kw["slow_kib_per_s"]
        self.window_s: float = kw["window_s"]
        self.consume_mb: int = kw["consume_mb"]
        self.rounds: int = kw["rounds"]

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def measure_retained(broker: BrokerProcess, s: Settings, batch: bytes) -> dict[str, float]:
    assert broker.pid is not None
    client = Client(broker.port)
    try:
        create_topic(client)
        records = produce_mb(client, WARM_UP_MB, batch)
        client.call(FETCH, 4, fetch_v4_values(0, MB))  # the read path, once
        time.sleep(0.5)
        before = proc_status_kib(broker.pid, "RssAnon")
        start = time.monotonic()
        records += produce_mb(client, s.retain_mb, batch)
        elapsed = time.monotonic() - start
        time.sleep(1.0)
        after = proc_status_kib(broker.pid, "RssAnon")
    finally:
        client.close()
    gb = s.retain_mb / 1024
    return {"rss_anon_before_mb": before / 1024, "rss_anon_after_mb": after / 1024,
            "rss_anon_mb_per_gb": (after - before) / 1024 / gb,
            "produce_mb_per_s": s.retain_mb / max(elapsed, 1e-9), "records": records}


def _warm_fetch(broker: BrokerProcess) -> None:
    client = Client(broker.port)
    try:
        client.call(FETCH, 4, fetch_v4_values(0, MB))
    finally:
        client.close()


def measure_pipelined(broker: BrokerProcess, s: Settings) -> dict[str, float]:
    """One client pipelines the fetches and never reads; the window ends once RSS has not
    grown for 2 s (at least 3 s, at most ``window_s`` + 10 s)."""
    assert broker.pid is not None
    _warm_fetch(broker)
    before = proc_status_kib(broker.pid, "VmRSS")
    frames = raw_frames(FETCH, 4, fetch_v4_values(0, s.fetch_mb * MB), s.fetches, "unread")
    silent = socket.create_connection(("127.0.0.1", broker.port), timeout=60)
    silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    try:
        with PeakSampler(broker.pid) as sampler:
            silent.sendall(frames)
            start = time.monotonic()
            while time.monotonic() - start < s.window_s + 10:
                time.sleep(0.1)
                if time.monotonic() - start >= 3 and sampler.quiet_for(2.0):
                    break
        peak = sampler.peak
    finally:
        silent.close()
    return {"rss_before_mb": before / 1024, "rss_peak_mb": peak / 1024,
            "rss_growth_mb": (peak - before) / 1024}


def _slow_reader(port: int, offset: int, s: Settings, stop: threading.Event,
                 read_bytes: list[int]) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(raw_frames(FETCH, 4, fetch_v4_values(offset, s.fetch_mb * MB), 1, "slow"))
        chunk = 64 * 1024
        pause = chunk / (s.slow_kib_per_s * 1024)
        sock.settimeout(1.0)
        while not stop.is_set():
            try:
                data = sock.recv(chunk)
            except TimeoutError:
                continue
            if not data:
                return
            read_bytes.append(len(data))
            stop.wait(pause)
    except OSError:
        return
    finally:
        sock.close()


def measure_slow(broker: BrokerProcess, s: Settings, records: int) -> dict[str, float]:
    """Slow consumers read for ``window_s``; peak RSS growth meanwhile."""
    assert broker.pid is not None
    _warm_fetch(broker)
    before = proc_status_kib(broker.pid, "VmRSS")
    stop = threading.Event()
    read_bytes: list[int] = []
    step = max(1, records // max(1, s.slow_consumers))
    threads = [threading.Thread(target=_slow_reader, daemon=True,
                                args=(broker.port, i * step, s, stop, read_bytes))
               for i in range(s.slow_consumers)]
    with PeakSampler(broker.pid) as sampler:
        for thread in threads:
            thread.start()
        stop.wait(s.window_s)
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    return {"rss_before_mb": before / 1024, "rss_peak_mb": sampler.peak / 1024,
            "rss_growth_mb": (sampler.peak - before) / 1024,
            "read_mb": sum(read_bytes) / MB}


def measure_consume(broker: BrokerProcess, s: Settings, batch_bytes: int,
                    available: int) -> dict[str, float] | None:
    try:
        from bench.load import run_consume
        from bench.load_consume import ConsumeConfig
    except ImportError:
        return None
    files = drop_page_cache(broker.data_dir)
    records = min(available, max(1, s.consume_mb * MB // batch_bytes) * RECORDS_PER_BATCH)
    config = ConsumeConfig(bootstrap=broker.bootstrap, topic=TOPIC, num_records=records,
                           processes=1, time_limit_s=600.0)
    results = run_consume(config)
    return {"mb_per_s": float(results["mb_per_s"]), "consumed": float(results["consumed"]),
            "elapsed_s": float(results["elapsed_s"]), "files_dropped_from_cache": float(files)}


def _restart(broker: BrokerProcess) -> None:
    broker.stop(timeout_s=60, keep_data_dir=True)
    broker.start(timeout_s=60)


def run_side(template: str, settings: dict[str, object], s: Settings, base: Path, label: str,
             log: Callable[[str], None]) -> dict[str, Any]:
    """One round on one broker: the four phases, a fresh process for each but the first."""
    data_dir = base / label
    batch = build_batch([os.urandom(RECORD_BYTES) for _ in range(RECORDS_PER_BATCH)],
                        timestamps_ms=[int(time.time() * 1000)] * RECORDS_PER_BATCH)
    broker = start_broker(template, data_dir=data_dir, settings=settings, timeout_s=60)
    out: dict[str, Any] = {}
    try:
        log(f"{label}: retained ({s.retain_mb} MB)")
        out["retained"] = measure_retained(broker, s, batch)
        records = int(out["retained"]["records"])
        _restart(broker)
        log(f"{label}: {s.fetches} pipelined fetches of {s.fetch_mb} MB, never read")
        out["pipelined"] = measure_pipelined(broker, s)
        _restart(broker)
        log(f"{label}: {s.slow_consumers} slow consumers")
        out["slow"] = measure_slow(broker, s, records)
        _restart(broker)
        log(f"{label}: consume {s.consume_mb} MB from disk")
        consume = measure_consume(broker, s, len(batch), records)
        if consume is not None:
            out["consume"] = consume
    finally:
        broker.stop(timeout_s=60, keep_data_dir=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


FIGURES: dict[str, tuple[str, str]] = {
    # name -> (phase, key)
    "rss_anon_mb_per_gb": ("retained", "rss_anon_mb_per_gb"),
    "pipelined_rss_growth_mb": ("pipelined", "rss_growth_mb"),
    "slow_rss_growth_mb": ("slow", "rss_growth_mb"),
    "consume_mb_per_s": ("consume", "mb_per_s"),
    "produce_mb_per_s": ("retained", "produce_mb_per_s"),
}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds}
    for name, (phase, key) in FIGURES.items():
        values = [r[phase][key] for r in rounds if phase in r]
        if values:
            out[name] = min_median_max(values)
    return out


def ratios_of(candidate: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, float]:
    """Higher is better; 1.0 is parity with the target or the baseline."""
    def median(side: dict[str, Any], name: str) -> float | None:
        spread = side.get(name)
        return None if spread is None else float(spread["median"])

    ratios: dict[str, float] = {}
    anon = median(candidate, "rss_anon_mb_per_gb")
    if anon is not None:
        ratios["rss_anon_per_gb_target_over_candidate"] = (
            TARGET_RSS_ANON_MB_PER_GB / max(anon, 0.1))
    pipelined = median(candidate, "pipelined_rss_growth_mb")
    if pipelined is not None:
        ratios["pipelined_fetches_rss_target_over_candidate"] = (
            TARGET_PIPELINED_GROWTH_MB / max(pipelined, 1.0))
    if baseline is None:
        return ratios
    # Floors: below 1 MB (per GB) a figure is measurement noise, not memory held.
    for name, floor in (("rss_anon_mb_per_gb", 1.0), ("pipelined_rss_growth_mb", 1.0),
                        ("slow_rss_growth_mb", 1.0)):
        mine, theirs = median(candidate, name), median(baseline, name)
        if mine is not None and theirs is not None:
            ratios[f"{name}_baseline_over_candidate"] = max(theirs, floor) / max(mine, floor)
    mine, theirs = median(candidate, "consume_mb_per_s"), median(baseline, "consume_mb_per_s")
    if mine is not None and theirs:
        ratios["consume_mb_per_s_candidate_over_baseline"] = mine / theirs
    return ratios


def run_bench(s: Settings, template: str, baseline: str | None, directory: str | None,
              log: Callable[[str], None]) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="actorlog-bench-memory-", dir=directory))
    sides: dict[str, list[dict[str, Any]]] = {"candidate": []}
    if baseline:
        sides["baseline"] = []
    try:
        for rnd in range(s.rounds):
            order = ["candidate", "baseline"] if rnd % 2 == 0 else ["baseline", "candidate"]
            for side in order:
                if side not in sides:
                    continue
                cmd = template if side == "candidate" else str(baseline)
                settings = BOUNDING_SETTINGS if side == "candidate" else {}
                sides[side].append(run_side(cmd, settings, s, base, f"{side}-{rnd}", log))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    results = {side: summarize(rounds) for side, rounds in sides.items()}
    ratios = ratios_of(results["candidate"], results.get("baseline"))
    return {"results": results, "ratios": ratios}


def _fmt(spread: dict[str, float] | None) -> str:
    if spread is None:
        return "-"
    return f"{spread['min']:.1f} / {spread['median']:.1f} / {spread['max']:.1f}"


def print_summary(report: dict[str, Any], s: Settings) -> None:
    from rich.console import Console
    from rich.table import Table

    results = report["results"]
    table = Table(title=f"bench memory: min / median / max over {s.rounds} round(s)")
    table.add_column("figure")
    for side in results:
        table.add_column(side, justify="right")
    labels = {
        "rss_anon_mb_per_gb": f"RssAnon growth, MB per GB retained ({s.retain_mb} MB appended)",
        "pipelined_rss_growth_mb": (f"VmRSS growth, MB: {s.fetches} pipelined fetches of "
                                    f"{s.fetch_mb} MB, never read"),
        "slow_rss_growth_mb": (f"VmRSS growth, MB: {s.slow_consumers} consumers reading "
                               f"{s.slow_kib_per_s} KiB/s for {s.window_s:g} s"),
        "consume_mb_per_s": f"consume {s.consume_mb} MB from disk, MB/s",
        "produce_mb_per_s": "produce while retaining, MB/s",
    }
    for name, label in labels.items():
        table.add_row(label, *(_fmt(results[side].get(name)) for side in results))
    Console().print(table)
    bounds = ", ".join(f"{k}={v}" for k, v in BOUNDING_SETTINGS.items())
    print(f"candidate settings (what bounds each figure): {bounds}")
    for name, value in report["ratios"].items():
        print(f"ratio {name}: {value:.2f}")


@click.command(name=BENCH_NAME)
@click.option("--broker-cmd", "template", default="actorlog", show_default=True,
              help=f"command template of the broker measured ('actorlog' is {ACTORLOG_TEMPLATE!r})")
@click.option("--baseline-cmd", default=None,
              help="command template of a baseline broker measured the same way, alternating")
@click.option("--retain-mb", type=click.IntRange(min=16), default=2048, show_default=True)
@click.option("--fetches", type=click.IntRange(min=1, max=64), default=8, show_default=True)
@click.option("--fetch-mb", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--slow-consumers", type=click.IntRange(min=1, max=256), default=16,
              show_default=True)
@click.option("--slow-kib-per-s", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--window-s", type=click.FloatRange(min=1, max=600), default=10.0,
              show_default=True, help="how long slow consumers read (and the fetch window)")
@click.option("--consume-mb", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1, max=20), default=3, show_default=True)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="where the brokers' data dirs go (default: the temp dir)")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None)
def command(template: str, baseline_cmd: str | None, directory: str | None,
            json_path: str | None, **kw: Any) -> None:
    """Broker memory for retained data, unread fetches and slow consumers; consume speed."""
    s = Settings(**kw)
    if s.consume_mb > s.retain_mb + WARM_UP_MB:
        raise click.BadParameter(f"--consume-mb {s.consume_mb} is more than is retained "
                                 f"({s.retain_mb + WARM_UP_MB} MB)")
    report = run_bench(s, template, baseline_cmd, directory,
                       lambda text: print(text, flush=True))
    print_summary(report, s)
    if json_path:
        config = {**s.to_json(), "broker_cmd": template, "baseline_cmd": baseline_cmd,
                  "candidate_settings": BOUNDING_SETTINGS,
                  "targets": {"rss_anon_mb_per_gb": TARGET_RSS_ANON_MB_PER_GB,
                              "pipelined_rss_growth_mb": TARGET_PIPELINED_GROWTH_MB}}
        doc = {"bench": BENCH_NAME, "config": config, "results": report["results"],
               "ratios": report["ratios"]}
        Path(json_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


__all__ = ["command", "run_bench"]
