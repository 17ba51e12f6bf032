"""Configuration: one TOML format, Kafka's key names where Kafka has the concept.

Keys may be written flat and quoted (``"num.io.threads" = 4``) or as nested
tables (``[num.io] threads = 4``); both flatten to the dotted name. Unknown
keys are refused with the file and key named, so a typo never silently
leaves a default in place.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

# key -> (default, type, help). Types: int, float, bool, str, dict.
SPEC: dict[str, tuple[Any, type, str]] = {
    # --- node and actor runtime (actorlog's own keys) ---
    "node.name": ("node-1", str, "this node's name in actor addresses"),
    "node.id": (1, int, "the Kafka broker id this node advertises"),
    "actor.gateway.host": ("127.0.0.1", str, "address of this node's gateway socket"),
    "actor.gateway.port": (0, int, "tcp port of the gateway (0: ipc only)"),
    "actor.ipc.dir": ("", str, "directory for ipc:// sockets (empty: /tmp/actorlog-ipc-UID)"),
    "actor.mailbox.size": (1000, int, "frames a mailbox holds before senders wait"),
    "actor.max.frame.bytes": (16 * 1024 * 1024, int, "larger frames go to dead letters"),
    "actor.batch.max.messages": (256, int, "messages an actor batches into one frame"),
    "actor.threads": ("shared", str, "'shared': worker threads run several actors; "
                                     "'dedicated': one thread per actor"),
    "cluster.nodes": ({}, dict, "name -> 'host:port' of every node's gateway"),
    "trace.sample.ratio": (0.01, float, "share of request chains traced"),
    "trace.file.max.bytes": (64 * 1024 * 1024, int, "rotate a trace file past this size"),
    "trace.files.max": (16, int, "trace files kept per node"),
    "metrics.port": (0, int, "Prometheus metrics port (0: off)"),
    # --- Kafka broker keys ---
    "listeners": ("127.0.0.1:9092", str, "HOST:PORT the Kafka listener binds"),
    "advertised.listeners": ("", str, "HOST:PORT told to clients (default: listeners)"),
    "log.dirs": ("./actorlog-data", str, "data directory"),
    "num.network.threads": (2, int, "Processor actors"),
    "num.io.threads": (2, int, "RequestHandler actors"),
    "num.partition.shards": (2, int, "PartitionShard actors"),
    "num.purgatory.shards": (1, int, "PurgatoryShard actors"),
    "num.group.coordinators": (1, int, "GroupCoordinator actors"),
    "num.replica.fetchers": (1, int, "ReplicaFetcher actors per source node"),
    "queued.max.requests": (500, int, "requests queued towards the handlers before reads pause"),
    "max.inflight.requests.per.connection": (64, int, "pipelined requests per connection"),
    "socket.request.max.bytes": (104857600, int, "largest request frame accepted"),
    "socket.send.buffer.bytes": (102400, int, "SO_SNDBUF of client sockets (-1: OS default)"),
    "socket.receive.buffer.bytes": (102400, int, "SO_RCVBUF of client sockets (-1: OS default)"),
    "max.connections": (2147483647, int, "connections accepted in all"),
    "max.connections.per.ip": (2147483647, int, "connections accepted per client address"),
    "connections.max.idle.ms": (600000, int, "idle connections are closed after this"),
    "auto.create.topics.enable": (True, bool, "create unknown topics on Metadata/Produce"),
    "num.partitions": (1, int, "partitions of auto-created topics"),
    "default.replication.factor": (1, int, "replicas of auto-created topics"),
    "min.insync.replicas": (1, int, "ISR size acks=-1 needs"),
    "message.max.bytes": (1048588, int, "largest record batch accepted"),
    "log.segment.bytes": (1073741824, int, "roll a segment past this size"),
    "log.roll.ms": (604800000, int, "roll a segment older than this"),
    "log.retention.bytes": (-1, int, "delete old segments past this size (-1: never)"),
    "log.retention.ms": (604800000, int, "delete segments older than this"),
    "log.index.interval.bytes": (4096, int, "bytes between sparse index entries"),
    "log.index.size.max.bytes": (10485760, int, "offset/time index file size; a segment "
                                                "whose index is full rolls"),
    "log.flush.interval.messages": (2**63 - 1, int, "fsync after this many messages"),
    "log.flush.interval.ms": (2**63 - 1, int, "fsync after this long"),
    "log.message.timestamp.type": ("CreateTime", str, "CreateTime or LogAppendTime"),
    "log.retention.check.interval.ms": (300000, int, "how often retention runs"),
    "log.flush.offset.checkpoint.interval.ms": (60000, int, "how often checkpoints are written"),
    "replica.lag.time.max.ms": (30000, int, "ISR shrink threshold"),
    "replica.fetch.backoff.ms": (1000, int, "back-off of a partition in error"),
    "request.timeout.ms": (30000, int, "internal ask timeout"),
    "group.initial.rebalance.delay.ms": (3000, int, "wait for more members of a new group"),
    "group.min.session.timeout.ms": (6000, int, "smallest session timeout allowed"),
    "group.max.session.timeout.ms": (1800000, int, "largest session timeout allowed"),
    "offsets.topic.num.partitions": (50, int, "partitions of __consumer_offsets"),
    "purge.interval.requests": (1000, int, "purgatory purge trigger"),
}


class ConfigError(ValueError):
    pass


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict) and full not in SPEC:
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = SPEC[key][1]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif kind is str:
        if isinstance(value, str):
            return value
    elif kind is dict:
        if isinstance(value, dict):
            return dict(value)
    raise ConfigError(f"{source}: {key} must be {kind.__name__}, got {value!r}")


class Config:
    """Resolved settings: defaults, then the file, then command-line overrides."""

    def __init__(self, values: dict[str, Any] | None = None, source: str = "<defaults>") -> None:
        self.values: dict[str, Any] = {k: v[0] for k, v in SPEC.items()}
        self.source = source
        if values:
            self.update(values, source)

    def update(self, values: dict[str, Any], source: str = "<overrides>") -> Config:
        for key, value in _flatten(values).items():
            if key not in SPEC:
                raise ConfigError(f"{source}: unknown config key {key!r}")
            self.values[key] = _coerce(key, value, source)
        return self

    @classmethod
    def load(cls, path: Path | str | None, overrides: dict[str, Any] | None = None) -> Config:
        cfg = cls()
        if path is not None:
            p = Path(path)
            try:
                data = tomllib.loads(p.read_text())
            except FileNotFoundError:
                raise ConfigError(f"config file {p} does not exist") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{p}: not valid TOML: {exc}") from None
            cfg.update(data, str(p))
            cfg.source = str(p)
        if overrides:
            cfg.update({k: v for k, v in overrides.items() if v is not None}, "command line")
        return cfg

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)
