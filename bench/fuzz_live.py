"""Live fuzzing: a running broker takes mutated real client frames on many connections
while a well-behaved client produces and consumes the whole time.

The frames are the recorded requests of tests/fuzz_corpus/kafka/ (kafka-python and
confluent-kafka), each sent size-prefixed after one mutation: bits flipped, bytes
overwritten or inserted, the frame cut short, the size prefix changed (larger,
smaller, negative, huge), the API key or version replaced, two frames run together.
Each of ``connections`` sockets sends a few frames, reads and drops whatever comes
back, and is closed and opened again now and then (the broker closes most of them
itself, as Kafka does on a request it cannot read). The rate is bounded
(``rate`` frames/s over all connections), so the run measures robustness, not
overload.

Meanwhile the good client (confluent-kafka) produces numbered records to its own
topic, acks=all, and a consumer reads them back: any delivery or consume error
counts, and at the end every record sent must have been read, in order. The
broker's VmRSS is sampled throughout.
"""

from __future__ import annotations

import contextlib
import errno
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fuzz_targets import corpus_files

# The topic admin seeds (mutated in by default, left out with admin=False): a mutated
# CreateTopics is often still a valid one; one asking for 131,073 partitions once made the
# broker create them until it ran out of file descriptors. The controllers now refuse
# what a request or the node cannot hold (actors/core/partition_budget.py, issue 17).
ADMIN_APIS = frozenset({19, 20, 37})  # CreateTopics, DeleteTopics, CreatePartitions

MUTATIONS = ("flip_bits", "overwrite", "insert", "truncate", "size_prefix", "api_key",
             "api_version", "concatenate", "as_is")


class FrameMutator:
    """Size-prefixed mutations of recorded request frames (one per call), seeded."""

    def __init__(self, seeds: list[bytes], rng: random.Random) -> None:
        if not seeds:
            raise ValueError("no seed frames to mutate")
        self.seeds = seeds
        self.rng = rng

    def next(self) -> tuple[str, bytes]:
        rng = self.rng
        frame = bytearray(rng.choice(self.seeds))
        kind = rng.choice(MUTATIONS)
        prefix: int | None = None
        if kind == "flip_bits":
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(frame))
                frame[i] ^= 1 << rng.randrange(8)
        elif kind == "overwrite":
            i = rng.randrange(len(frame))
            n = rng.randint(1, 8)
            frame[i:i + n] = rng.choice([b"\xff" * n, b"\x00" * n, b"\x7f" * n,
                                         rng.randbytes(n)])
        elif kind == "insert":
            i = rng.randrange(len(frame) + 1)
            frame[i:i] = rng.randbytes(rng.randint(1, 64))
        elif kind == "truncate":
            del frame[rng.randrange(len(frame)):]
        elif kind == "size_prefix":
            prefix = rng.choice([len(frame) + rng.randint(1, 100), max(0, len(frame) - 4), -1,
                                 0, 7, 0x7FFFFFFF, rng.randrange(1 << 31)])
        elif kind == "api_key" and len(frame) >= 2:
            frame[0:2] = struct.pack(">h", rng.choice([rng.randrange(-32768, 32768),
                                                       rng.randrange(0, 80)]))
        elif kind == "api_version" and len(frame) >= 4:
            frame[2:4] = struct.pack(">h", rng.choice([rng.randrange(-32768, 32768),
                                                       rng.randrange(0, 20)]))
        elif kind == "concatenate":
            frame += rng.choice(self.seeds)
        size = len(frame) if prefix is None else prefix
        return kind, struct.pack(">i", size) + bytes(frame)


@dataclass
class FuzzStats:
    frames_sent: int = 0
    bytes_sent: int = 0
    bytes_read: int = 0
    connections_opened: int = 0
    closed_by_broker: int = 0
    connect_failures: int = 0
    by_mutation: dict[str, int] = field(default_factory=dict)


def seed_frames(admin: bool = True) -> list[bytes]:
    """The recorded request frames to mutate (without the topic admin ones when not
    ``admin``)."""
    frames = [p.read_bytes() for p in corpus_files("kafka")]
    return [f for f in frames
            if admin or len(f) < 2 or struct.unpack_from(">h", f)[0] not in ADMIN_APIS]


def fuzz_connections(host: str, port: int, seconds: float, connections: int, rate: float,
                     seed: int, stop: threading.Event | None = None,
                     admin: bool = True) -> FuzzStats:
    """Send mutated frames on ``connections`` sockets for ``seconds`` (one thread)."""
    rng = random.Random(seed)
    mutator = FrameMutator(seed_frames(admin), rng)
    stats = FuzzStats()
    socks: list[socket.socket | None] = [None] * connections
    deadline = time.monotonic() + seconds
    interval = 1.0 / rate if rate > 0 else 0.0
    next_send = time.monotonic()
    slot = 0
    try:
        while time.monotonic() < deadline and not (stop and stop.is_set()):
            sock = socks[slot]
            if sock is None:
                try:
                    sock = socket.create_connection((host, port), timeout=2)
                    sock.setblocking(False)
                    stats.connections_opened += 1
                except OSError:
                    stats.connect_failures += 1
                    time.sleep(0.05)
                    continue
                socks[slot] = sock
            kind, payload = mutator.next()
            alive = _send(sock, payload, stats)
            if alive:
                stats.frames_sent += 1
                stats.by_mutation[kind] = stats.by_mutation.get(kind, 0) + 1
                alive = _drain(sock, stats)
            if not alive or rng.random() < 0.05:  # or we go away, mid-request perhaps
                stats.closed_by_broker += not alive
                with contextlib.suppress(OSError):
                    sock.close()
                socks[slot] = None
            slot = (slot + 1) % connections
            next_send += interval
            pause = next_send - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_send = time.monotonic()
    finally:
        for sock in socks:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
    return stats


def _send(sock: socket.socket, payload: bytes, stats: FuzzStats) -> bool:
    try:
        sent = sock.send(payload)
    except BlockingIOError:
        return True  # the broker stopped reading this one (a bound): try it later
    except OSError:
        return False
    stats.bytes_sent += sent
    return True


def _drain(sock: socket.socket, stats: FuzzStats) -> bool:
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno in (errno.ECONNRESET, errno.EPIPE):
                return False
            return False
        if not data:
            return False
        stats.bytes_read += len(data)


class RssSampler:
    """The broker's VmRSS (MB), sampled every ``interval_s`` in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def read(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError, ValueError):
                self.samples.append(self.read())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


class GoodClient:
    """confluent-kafka: numbered records produced (acks=all) and consumed back, in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.errors: list[str] = []
        self.produced = 0
        self.consumed = 0
        self.out_of_order = 0
        self.delivered = 0
        self.max_gap_s = 0.0  # longest time without a delivered record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GoodClient:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.errors.append("the good client did not finish")

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # reported, the test fails on it
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "linger.ms": 2, "message.timeout.ms": 30000,
                             "client.id": "fuzz-good-producer"})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz-good",
                             "enable.auto.commit": False, "client.id": "fuzz-good-consumer",
                             "enable.partition.eof": False})
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        delivered = 0
        last_delivery = time.monotonic()

        def on_delivery(err: Any, _msg: Any) -> None:
            nonlocal delivered, last_delivery
            if err is not None:
                self.errors.append(f"delivery: {err}")
                return
            now = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, now - last_delivery)
            last_delivery = now
            delivered += 1

        try:
            while not self._stop.is_set() or self.consumed < delivered:
                if not self._stop.is_set():
                    for _ in range(5):
                        producer.produce(self.topic, value=b"%d" % self.produced, partition=0,
                                         on_delivery=on_delivery)
                        self.produced += 1
                    producer.poll(0)
                self._take(consumer.poll(0.05), KafkaError._PARTITION_EOF)
                if self._stop.is_set():
                    if producer.flush(30) != 0:
                        self.errors.append("records left undelivered after 30 s")
                        break
                    deadline = time.monotonic() + 30
                    while self.consumed < delivered and time.monotonic() < deadline:
                        self._take(consumer.poll(0.2), KafkaError._PARTITION_EOF)
                    break
                time.sleep(0.01)
        finally:
            consumer.close()
        self.delivered = delivered


    def _take(self, msg: Any, eof_code: int) -> None:
        """One consumed message (or None): in order, or an error."""
        if msg is None:
            return
        error = msg.error()
        if error is not None:
            if error.code() != eof_code:
                self.errors.append(f"consume: {error}")
            return
        if int(msg.value() or b"-1") != self.consumed:
            self.out_of_order += 1
        self.consumed += 1


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def run_live(host: str, port: int, pid: int, *, seconds: float = 60.0, connections: int = 50,
             rate: float = 1000.0, seed: int = 1, warm_up_s: float = 3.0,
             admin: bool = True) -> dict[str, Any]:
    """Fuzz a running broker while a good client works; returns the results."""
    bootstrap = f"{host}:{port}"
    topic = f"fuzz-good-{seed}-{int(time.time())}"
    create_topic(bootstrap, topic)
    good = GoodClient(bootstrap, topic).start()
    time.sleep(warm_up_s)
    with RssSampler(pid) as rss:
        baseline = rss.read()
        started = time.monotonic()
        stats = fuzz_connections(host, port, seconds, connections, rate, seed, admin=admin)
        fuzz_s = time.monotonic() - started
        good.stop()
        final = rss.read()
    peak = max([baseline, final, *rss.samples])
    return {
        "seconds": round(fuzz_s, 2),
        "connections": connections,
        "admin_seeds": admin,
        "frames_sent": stats.frames_sent,
        "frames_per_s": round(stats.frames_sent / fuzz_s, 1) if fuzz_s else 0.0,
        "bytes_sent": stats.bytes_sent,
        "bytes_read": stats.bytes_read,
        "connections_opened": stats.connections_opened,
        "closed_by_broker": stats.closed_by_broker,
        "connect_failures": stats.connect_failures,
        "by_mutation": stats.by_mutation,
        "good_produced": good.produced,
        "good_delivered": good.delivered,
        "good_consumed": good.consumed,
        "good_out_of_order": good.out_of_order,
        "good_errors": good.errors[:20],
        "good_max_gap_s": round(good.max_gap_s, 3),
        "rss_baseline_mb": round(baseline, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_final_mb": round(final, 1),
        "rss_growth_mb": round(peak - baseline, 1),
    }
