"""Configuration: one TOML format, Kafka's key names where Kafka has the concept.

Keys may be written flat and quoted (``"num.io.threads" = 4``) or as nested
tables (``[num.io] threads = 4``); both flatten to the dotted name. Unknown
keys are refused with the file and key named (and the nearest known key
suggested), so a typo never silently leaves a default in place; values out
of their range are refused the same way. Every key does something; those an
upcoming issue will use are listed in ``RESERVED``.
"""

from __future__ import annotations

import difflib
import json
import os
import textwrap
import tomllib
from pathlib import Path
from typing import Any

from actors.security.config import SECURITY_CHOICES, SECURITY_RANGES, SECURITY_SPEC

# key -> (default, type, help). Types: int, float, bool, str. The example config
# (deploy/actorlog.example.toml, `actorlog config example`) is generated from it.
SPEC: dict[str, tuple[Any, type, str]] = {
    # --- node and actor runtime (actorlog's own keys) ---
    "node.name": ("node-1", str, "this node's name in actor addresses"),
    "node.id": (1, int, "the Kafka broker id this node advertises"),
    "actor.gateway.host": ("127.0.0.1", str, "address of this node's gateway socket"),
    "actor.gateway.port": (0, int, "tcp port of the gateway (0: ipc only)"),
    "actor.ipc.dir": ("", str, "base directory of the gateway's ipc:// socket, which is "
                               "<dir>/<hash of the data dir>/<node.name>.gw (empty: "
                               "$ACTORLOG_IPC_DIR or /tmp/actorlog-ipc-UID)"),
    "actor.max.frame.bytes": (16 * 1024 * 1024, int, "larger frames go to dead letters"),
    "actor.batch.max.messages": (256, int, "messages an actor batches into one frame"),
    "actor.threads": ("single", str, "'single': one worker loop per process runs its "
                                     "shards, purgatories, handlers, processors and "
                                     "Acceptors; 'shared': worker loop i runs shard-i and "
                                     "the i-th of the others; 'dedicated': one thread per "
                                     "actor"),
    "actor.threads.scheduling": ("normal", str, "Linux scheduling policy of the worker "
                                               "loops (the shards' threads, and handler-0's "
                                               "in a process without shards): 'normal' "
                                               "(left as started: SCHED_OTHER, or what "
                                               "`chrt` gave the broker) or 'batch' "
                                               "(SCHED_BATCH: a "
                                               "wake-up waits for the running task's slice "
                                               "instead of preempting it, so a loop takes "
                                               "more work a turn)"),
    "trace.sample.ratio": (0.01, float, "share of request chains traced"),
    "trace.file.max.bytes": (64 * 1024 * 1024, int, "a trace file is closed and a new one "
                                                  "started before it grows past this size"),
    "trace.files.max": (16, int, "trace files kept per node; the oldest are deleted"),
    "metrics.port": (0, int, "Prometheus metrics port (0: off)"),
    # --- Kafka broker keys ---
    "listeners": ("127.0.0.1:9092", str, "PROTOCOL://HOST:PORT,... the Kafka listeners bind "
                                         "(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; a bare "
                                         "HOST:PORT is PLAINTEXT), one Acceptor each"),
    "advertised.listeners": ("", str, "PROTOCOL://HOST:PORT,... told to clients (default: "
                                      "listeners)"),
    "log.dirs": ("./actorlog-data", str, "data directories, comma separated, each locked "
                                         "(.lock) while a broker runs; the first holds the logs"),
    "num.processes": (0, int, "OS processes of one broker (0: one per CPU this process may "
                      "use, or $ACTORLOG_NUM_PROCESSES when set): shard i and purgatory i run "
                      "in process i % num.processes (num.processes.shard.placement), "
                      "process 0 owns the groups, controller and "
                      "checkpoints; every process serves connections on every listener "
                      "with Processors and handlers of its own"),
    "num.processes.connection.distribution": (
        "handoff", str, "num.processes > 1: how connections reach the processes; 'handoff': "
                        "process 0 accepts every connection and passes its socket over a "
                        "Unix socket to the live process with the fewest open connections "
                        "(ties in turn), which does the TLS or SASL handshake; 'reuseport': "
                        "each process binds every listener (SO_REUSEPORT) and the kernel "
                        "picks one by a hash of the client's address and port (uneven)"),
    "num.processes.shard.placement": (
        "spread", str, "num.processes > 1: where the partition shards and purgatories run; "
                       "'spread': shard i and purgatory i in process i % num.processes; "
                       "'first': all in process 0, processes 1.. run connections and "
                       "handlers only (a request to several partitions crosses to process 0 "
                       "and back once from processes 1.., never from process 0's "
                       "connections)"),
    "num.network.threads": (2, int, "Processor actors"),
    "num.io.threads": (2, int, "RequestHandler actors"),
    "num.partition.shards": (2, int, "PartitionShard actors"),
    "num.purgatory.shards": (0, int, "PurgatoryShard actors (0: one per process of the "
                                     "broker); purgatory i runs in process i % "
                                     "num.processes (num.processes.shard.placement = "
                                     "spread; all in process 0 with first), and a "
                                     "partition's delayed fetches and "
                                     "acks=-1 produces wait in a purgatory of its shard's "
                                     "process (any, when that process has none)"),
    "num.group.coordinators": (1, int, "GroupCoordinator actors"),
    "num.replica.fetchers": (1, int, "ReplicaFetcher actors per source node; a partition "
                                     "goes to fetcher hash(topic, partition) % this"),
    "queued.max.requests": (500, int, "requests queued towards the handlers before reads pause"),
    "queued.max.request.bytes": (268435456, int, "bytes of requests read and not yet answered "
                                                 "before the Processors stop reading (each "
                                                 "Processor its share; a request begun is "
                                                 "read to its end); -1: no bound (Kafka's "
                                                 "default)"),
    "max.inflight.requests.per.connection": (64, int, "pipelined requests per connection"),
    "max.unsent.response.bytes.per.connection": (104857600, int, "a connection whose answers "
                                                                 "waiting to be written pass "
                                                                 "this many bytes is not read "
                                                                 "until they drain"),
    "socket.request.max.bytes": (104857600, int, "largest request frame accepted"),
    "fetch.max.bytes": (57671680, int, "largest Fetch response (whole batches; the first "
                                       "batch of the first partition with data always goes)"),
    "socket.send.buffer.bytes": (102400, int, "SO_SNDBUF of client sockets (-1: OS default)"),
    "socket.receive.buffer.bytes": (102400, int, "SO_RCVBUF of client sockets (-1: OS default)"),
    "max.connections": (2147483647, int, "connections accepted in all"),
    "max.connections.per.ip": (2147483647, int, "connections accepted per client address"),
    "connections.max.idle.ms": (600000, int, "a connection with nothing in flight and no "
                                           "bytes in or out for this long is closed (-1: never)"),
    "connection.failed.authentication.delay.ms": (100, int, "a connection whose SASL "
                                                            "authentication failed is closed "
                                                            "this long after its refusal is "
                                                            "written (0: at once); less than "
                                                            "connections.max.idle.ms"),
    "auto.create.topics.enable": (True, bool, "create unknown topics on Metadata/Produce"),
    "num.partitions": (1, int, "partitions of auto-created topics"),
    "default.replication.factor": (1, int, "replicas of auto-created topics"),
    "min.insync.replicas": (1, int, "ISR size acks=-1 needs"),
    "message.max.bytes": (1048588, int, "largest record batch accepted"),
    "log.segment.bytes": (1073741824, int, "roll a segment past this size"),
    "log.roll.ms": (None, int, "roll a segment older than this; when not set, "
                              "log.roll.hours gives it (Kafka's precedence)"),
    "log.roll.hours": (168, int, "roll a segment older than this many hours, when "
                                 "log.roll.ms is not set"),
    "log.retention.bytes": (-1, int, "delete old segments past this size (-1: never)"),
    "log.retention.ms": (None, int, "delete segments older than this; when not set, "
                                   "log.retention.minutes, else log.retention.hours gives "
                                   "it (Kafka's precedence; 0 from "
                                   "whichever gives it is refused)"),
    "log.retention.minutes": (None, int, "delete segments older than this many minutes, "
                                         "when log.retention.ms is not set (not set: "
                                         "log.retention.hours)"),
    "log.retention.hours": (168, int, "delete segments older than this many hours, when "
                                      "neither log.retention.ms nor log.retention.minutes "
                                      "is set"),
    "log.index.interval.bytes": (4096, int, "bytes between sparse index entries"),
    "log.index.size.max.bytes": (10485760, int, "offset/time index file size; a segment "
                                                "whose index is full rolls"),
    "log.flush.interval.messages": (2**63 - 1, int, "fsync after this many messages"),
    "log.flush.interval.ms": (None, int, "fsync data this old, at a check of "
                                        "log.flush.scheduler.interval.ms or an append; "
                                        "when not set, log.flush.scheduler.interval.ms "
                                        "gives it (Kafka's precedence)"),
    "log.flush.scheduler.interval.ms": (2**63 - 1, int, "how often each log is checked "
                                                       "for data older than its flush.ms; "
                                                       "the first check runs "
                                                       "log.initial.task.delay.ms after "
                                                       "start, and the default (never) or "
                                                       "0 leaves it the only one; negative "
                                                       "is refused (Kafka takes it as 0). "
                                                       "When log.flush.interval.ms is not "
                                                       "set this is every topic's "
                                                       "flush.ms, which actorlog, unlike "
                                                       "Kafka, also checks at each append: "
                                                       "0 then fsyncs every append"),
    "log.initial.task.delay.ms": (30000, int, "how long after start the first log flush "
                                             "check runs (Kafka's internal key: Kafka's "
                                             "retention and checkpoint tasks wait for it "
                                             "too, actorlog's do not; described only "
                                             "when set, as Kafka's)"),
    "log.message.timestamp.type": ("CreateTime", str, "CreateTime or LogAppendTime"),
    "log.message.timestamp.before.max.ms": (2**63 - 1, int, "a CreateTime record older than "
                                                           "this, by the broker's clock, is "
                                                           "refused (INVALID_TIMESTAMP)"),
    "log.message.timestamp.after.max.ms": (2**63 - 1, int, "a CreateTime record this far "
                                                          "ahead of the broker's clock is "
                                                          "refused (INVALID_TIMESTAMP)"),
    "log.message.timestamp.difference.max.ms": (2**63 - 1, int, "deprecated (Kafka 3.6): "
                                                               "both bounds at once, for "
                                                               "either left unset"),
    "compression.type": ("producer", str, "default compression.type of topics: 'producer' "
                                          "keeps each batch's codec, 'uncompressed', 'gzip', "
                                          "'snappy', 'lz4' or 'zstd' has the leader re-encode "
                                          "a batch of another codec"),
    "log.retention.check.interval.ms": (300000, int, "how often old segments are checked "
                                                    "against retention"),
    "log.flush.offset.checkpoint.interval.ms": (60000, int, "how often the offset checkpoint "
                                                            "files are written"),
    "log.cleanup.policy": ("delete", str, "default cleanup.policy of topics: 'delete' drops "
                                          "old segments, 'compact' keeps each key's latest "
                                          "record, 'compact,delete' both"),
    "log.cleaner.enable": (True, bool, "run the log cleaner (one per log dir) for compacted "
                                       "topics and __consumer_offsets"),
    "log.cleaner.backoff.ms": (15000, int, "how long the cleaner waits when no log needs "
                                          "cleaning"),
    "log.cleaner.min.cleanable.ratio": (0.5, float, "default min.cleanable.dirty.ratio: a log "
                                                    "is cleaned once its uncleaned share of "
                                                    "bytes reaches this"),
    "log.cleaner.delete.retention.ms": (86400000, int, "default delete.retention.ms: a "
                                                       "tombstone goes once its segment's newest "
                                                       "record is older than this"),
    "log.cleaner.min.compaction.lag.ms": (0, int, "default min.compaction.lag.ms: segments "
                                                  "with records younger than this are not "
                                                  "compacted"),
    "log.cleaner.dedupe.buffer.size": (134217728, int, "the cleaner's key map holds this / 24 "
                                                       "keys (Kafka's accounting; Python's dict "
                                                       "takes several times that); a pass "
                                                       "cleans as far as the map reaches"),
    "log.cleaner.io.buffer.size": (524288, int, "bytes the cleaner reads per step; between "
                                                "steps it answers its messages"),
    "replica.lag.time.max.ms": (30000, int, "a follower not caught up to the leader's log "
                                            "end for this long leaves the ISR"),
    "replica.fetch.backoff.ms": (1000, int, "back-off of a partition in error"),
    "replica.fetch.wait.max.ms": (500, int, "longest a replica fetch waits on the leader for "
                                            "replica.fetch.min.bytes"),
    "replica.fetch.min.bytes": (1, int, "bytes a replica fetch waits for"),
    "replica.fetch.max.bytes": (1048576, int, "bytes a replica fetch asks per partition (at "
                                              "least one batch)"),
    "replica.fetch.response.max.bytes": (10485760, int, "bytes a replica fetch asks in all"),
    "replica.socket.timeout.ms": (30000, int, "a replica fetch unanswered this long is "
                                              "given up and sent again"),
    "replica.high.watermark.checkpoint.interval.ms": (5000, int, "how often the high "
                                                                 "watermarks are written to "
                                                                 "replication-offset-checkpoint"),
    "request.timeout.ms": (30000, int, "how long shutdown waits for each actor; a request "
                                      "waiting on another actor twice this long is abandoned "
                                      "(a Produce is answered REQUEST_TIMED_OUT by its own "
                                      "deadline: timeout_ms, and for acks 0 and 1 at least "
                                      "this, acks=0 closing its connection then; a "
                                      "DeleteRecords' by timeout_ms and 1 s; a "
                                      "Fetch's partitions NOT_LEADER_OR_FOLLOWER by its "
                                      "read's deadline, 5 to 10 s and the time to carry "
                                      "its bytes, a ListOffsets', OffsetForLeaderEpoch's "
                                      "and DescribeProducers' by 5 s, a DescribeLogDirs "
                                      "leaving them out by 5 s, for a shard of "
                                      "another process; a group call to the first "
                                      "process COORDINATOR_NOT_AVAILABLE by 5 s, an "
                                      "OffsetCommit by 16.5 s, JoinGroup and SyncGroup "
                                      "not; 200 ms (plus max_wait_ms and the time to "
                                      "carry a read's bytes) while that process is "
                                      "taken as silent (a deadline passed, no answer "
                                      "since), one such call sent to it at a time, the "
                                      "others answered unsent; fixed, not scaled by "
                                      "this)"),
    "group.initial.rebalance.delay.ms": (3000, int, "wait for more members of a new group"),
    "group.min.session.timeout.ms": (6000, int, "smallest session timeout allowed"),
    "group.max.session.timeout.ms": (1800000, int, "largest session timeout allowed"),
    "offsets.topic.num.partitions": (50, int, "partitions of __consumer_offsets"),
    "transaction.state.log.num.partitions": (50, int, "partitions of __transaction_state"),
    "transaction.state.log.replication.factor": (3, int, "replicas of __transaction_state "
                                                         "(at most the live brokers)"),
    "transaction.state.log.min.isr": (2, int, "min.insync.replicas of __transaction_state "
                                              "(at most its replication factor)"),
    "transaction.max.timeout.ms": (900000, int, "largest transaction.timeout.ms a producer may "
                                                "ask for (INVALID_TRANSACTION_TIMEOUT above)"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        10000, int, "how often the transaction coordinators abort transactions past their "
                    "timeout"),
    "producer.id.expiration.ms": (86400000, int, "how long a partition keeps an idle "
                                                 "producer's state (epoch, last sequences) "
                                                 "after its last write; never while its "
                                                 "transaction is open"),
    "producer.id.expiration.check.interval.ms": (600000, int, "how often partitions drop "
                                                             "producer state past "
                                                             "producer.id.expiration.ms"),
    "purge.interval.requests": (1000, int, "the purgatory purges completed operations from "
                                         "its watch lists once about this many are there"),
    # --- a cluster (ZooKeeper); without zookeeper.connect the node is a single broker ---
    "zookeeper.connect": ("", str, "host:port[,host:port...][/chroot] of the cluster's "
                                   "ZooKeeper; empty: a single node with its metadata in its "
                                   "data dir, no ZooKeeper"),
    "zookeeper.session.timeout.ms": (18000, int, "ZooKeeper session timeout: a node that stops "
                                                 "answering is taken for dead after this"),
    "zookeeper.connection.timeout.ms": (0, int, "how long a node waits for ZooKeeper at start "
                                              "(0: zookeeper.session.timeout.ms)"),
    "broker.rack": ("", str, "this node's rack, registered and told to clients (empty: none)"),
    "offsets.topic.replication.factor": (3, int, "replicas of __consumer_offsets (when created "
                                                 "automatically: at most the live brokers)"),
    "unclean.leader.election.enable": (False, bool, "let a replica outside the ISR lead when no "
                                                    "ISR member is alive (may lose records)"),
    "delete.topic.enable": (True, bool, "DeleteTopics deletes; false refuses it"),
    "controlled.shutdown.enable": (True, bool, "on SIGTERM, move this node's leaderships away "
                                               "before it stops"),
    "controlled.shutdown.max.retries": (3, int, "attempts at a controlled shutdown before the "
                                                "node stops anyway"),
    "controlled.shutdown.retry.backoff.ms": (5000, int, "wait between those attempts"),
    "auto.leader.rebalance.enable": (True, bool, "move leaderships back to preferred replicas "
                                                 "when a broker leads too few of its own"),
    "leader.imbalance.per.broker.percentage": (10, int, "share of a broker's preferred "
                                                        "leaderships it may lose before they "
                                                        "are moved back"),
    "leader.imbalance.check.interval.seconds": (300, int, "how often the controller checks "
                                                          "the leader imbalance"),
}


SPEC.update(SECURITY_SPEC)
DEFAULTS: dict[str, Any] = {k: v[0] for k, v in SPEC.items()}  # each key's own default

# Keys read by nothing yet: the issue that will use each. They are accepted
# (a config file written for that issue's release keeps working).
RESERVED: dict[str, str] = {}
for _key, _issue in RESERVED.items():  # the help text says so too
    if "reserved" not in SPEC[_key][2]:
        SPEC[_key] = (*SPEC[_key][:2], f"{SPEC[_key][2]} (reserved: {_issue})")

_MAX_INT = 2**63 - 1
_COUNT = (1, 1_000_000)
_BYTES = (1, 2**31 - 1)
_MS = (1, _MAX_INT)
# Allowed ranges (inclusive) of numeric keys; keys not listed take any value of their type.
RANGES: dict[str, tuple[float, float]] = {
    "node.id": (0, 2**31 - 1),
    "actor.gateway.port": (0, 65535),
    "metrics.port": (0, 65535),
    "actor.max.frame.bytes": (1024, _MAX_INT),
    "actor.batch.max.messages": _COUNT,
    "trace.sample.ratio": (0.0, 1.0),
    "trace.file.max.bytes": (1024, _MAX_INT),
    "trace.files.max": _COUNT,
    "num.processes": (0, 256),
    "num.network.threads": _COUNT,
    "num.io.threads": _COUNT,
    "num.partition.shards": _COUNT,
    "num.purgatory.shards": (0, _COUNT[1]),
    "num.group.coordinators": _COUNT,
    "num.replica.fetchers": _COUNT,
    "queued.max.requests": _COUNT,
    "queued.max.request.bytes": (-1, _MAX_INT),
    "max.inflight.requests.per.connection": _COUNT,
    "max.unsent.response.bytes.per.connection": (1, _MAX_INT),
    "socket.request.max.bytes": _BYTES,
    "fetch.max.bytes": (0, 2**31 - 1),
    "socket.send.buffer.bytes": (-1, 2**31 - 1),
    "socket.receive.buffer.bytes": (-1, 2**31 - 1),
    "max.connections": (0, 2**31 - 1),
    "max.connections.per.ip": (0, 2**31 - 1),
    "connections.max.idle.ms": (-1, _MAX_INT),
    "connection.failed.authentication.delay.ms": (0, 2**31 - 1),
    "num.partitions": _COUNT,
    "default.replication.factor": (1, 32767),
    "min.insync.replicas": (1, 32767),
    "message.max.bytes": (0, 2**31 - 1),
    "log.segment.bytes": (14, 2**31 - 1),
    "log.roll.ms": _MS,
    "log.roll.hours": (1, 2**31 - 1),
    "log.retention.bytes": (-1, _MAX_INT),
    # Kafka's LONG and INTs without a validator: a negative one means no time limit, as -1
    # does (KafkaConfig.logRetentionTimeMillis)
    "log.retention.ms": (-2**63, _MAX_INT),
    "log.retention.minutes": (-2**31, 2**31 - 1),
    "log.retention.hours": (-2**31, 2**31 - 1),
    "log.index.interval.bytes": (0, 2**31 - 1),
    "log.flush.interval.messages": (1, _MAX_INT),
    "log.flush.interval.ms": (0, _MAX_INT),
    "log.flush.scheduler.interval.ms": (0, _MAX_INT),
    "log.initial.task.delay.ms": (0, _MAX_INT),
    "log.message.timestamp.before.max.ms": (0, _MAX_INT),
    "log.message.timestamp.after.max.ms": (0, _MAX_INT),
    "log.message.timestamp.difference.max.ms": (0, _MAX_INT),
    "log.retention.check.interval.ms": _MS,
    "log.flush.offset.checkpoint.interval.ms": (0, 2**31 - 1),
    "log.cleaner.backoff.ms": (0, _MAX_INT),
    "log.cleaner.min.cleanable.ratio": (0.0, 1.0),
    "log.cleaner.delete.retention.ms": (0, _MAX_INT),
    "log.cleaner.min.compaction.lag.ms": (0, _MAX_INT),
    "log.cleaner.dedupe.buffer.size": (1024, _MAX_INT),
    "log.cleaner.io.buffer.size": (1024, 2**31 - 1),
    "replica.lag.time.max.ms": _MS,
    "replica.fetch.backoff.ms": (0, 2**31 - 1),
    "replica.fetch.wait.max.ms": (0, 2**31 - 1),
    "replica.fetch.min.bytes": (1, 2**31 - 1),
    "replica.fetch.max.bytes": _BYTES,
    "replica.fetch.response.max.bytes": _BYTES,
    "replica.socket.timeout.ms": _MS,
    "replica.high.watermark.checkpoint.interval.ms": _MS,
    "request.timeout.ms": _MS,
    "group.initial.rebalance.delay.ms": (0, 2**31 - 1),
    "group.min.session.timeout.ms": (0, 2**31 - 1),
    "group.max.session.timeout.ms": (0, 2**31 - 1),
    "offsets.topic.num.partitions": _COUNT,
    "transaction.state.log.num.partitions": _COUNT,
    "transaction.state.log.replication.factor": (1, 32767),
    "transaction.state.log.min.isr": (1, 32767),
    "transaction.max.timeout.ms": (1, 2**31 - 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (1, 2**31 - 1),
    "producer.id.expiration.ms": (1, 2**31 - 1),
    "producer.id.expiration.check.interval.ms": (1, 2**31 - 1),
    "purge.interval.requests": _COUNT,
    "zookeeper.session.timeout.ms": (1, 2**31 - 1),
    "zookeeper.connection.timeout.ms": (0, 2**31 - 1),
    "offsets.topic.replication.factor": (1, 32767),
    "controlled.shutdown.max.retries": (0, 2**31 - 1),
    "controlled.shutdown.retry.backoff.ms": (0, 2**31 - 1),
    "leader.imbalance.per.broker.percentage": (0, 100),
    "leader.imbalance.check.interval.seconds": (1, 2**31 - 1),
}
# Keys of a whole INT's or LONG's range on which a negative value means no limit.
NEGATIVE_NO_LIMIT = frozenset({"log.retention.ms", "log.retention.minutes",
                               "log.retention.hours"})
# Kafka's internal keys (ConfigDef.defineInternal): DescribeConfigs names one only when it
# is set (ConfigHelper.allConfigs: the originals and the non-internal values).
INTERNAL_KEYS = frozenset({"log.initial.task.delay.ms"})
# Keys Kafka gives, when not set, from others (in a coarser unit, or another key's):
# each with its stand-ins in precedence order and the factor to milliseconds
# (KafkaConfig.logRetentionTimeMillis, logRollTimeMillis, logFlushIntervalMs; the order
# is DynamicBrokerConfig.brokerConfigSynonyms').
DERIVED_MS: dict[str, tuple[tuple[str, int], ...]] = {
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.flush.interval.ms": (("log.flush.scheduler.interval.ms", 1),),  # logFlushIntervalMs
}
# The values a string key may take.
CHOICES: dict[str, tuple[str, ...]] = {
    "actor.threads": ("single", "shared", "dedicated"),
    "actor.threads.scheduling": ("batch", "normal"),
    "num.processes.connection.distribution": ("handoff", "reuseport"),
    "num.processes.shard.placement": ("spread", "first"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "log.cleanup.policy": ("delete", "compact", "compact,delete", "delete,compact"),
    "compression.type": ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
}
RANGES.update(SECURITY_RANGES)
CHOICES.update(SECURITY_CHOICES)
_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


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


def _unknown(key: str, source: str) -> ConfigError:
    near = difflib.get_close_matches(key, SPEC, n=1, cutoff=0.6)
    hint = (f"did you mean {near[0]!r}?" if near
            else "the known keys are listed in deploy/actorlog.example.toml")
    return ConfigError(f"{source}: unknown config key {key!r}; {hint}")


def _default_note(key: str) -> str:
    default = SPEC[key][0]
    return "no default: not set" if default is None else f"default {default!r}"


def _check(key: str, value: Any, source: str) -> Any:
    bounds = RANGES.get(key)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        low, high = bounds
        allowed = (f"at least {low}" if high >= _MAX_INT else f"from {low} to {high}")
        raise ConfigError(f"{source}: {key} = {value!r} is out of range; use a value {allowed} "
                          f"({_default_note(key)})")
    choices = CHOICES.get(key)
    if choices is not None and value not in choices:
        raise ConfigError(f"{source}: {key} = {value!r} is not one of "
                          f"{', '.join(map(repr, choices))}")
    if key == "queued.max.request.bytes" and value == 0:
        raise ConfigError(f"{source}: queued.max.request.bytes = 0 would read no request; use "
                          f"-1 for no bound, or a number of bytes (default {SPEC[key][0]!r})")
    if key == "node.name" and (not value or "/" in value or "@" in value):
        raise ConfigError(f"{source}: node.name = {value!r}: give a non-empty name "
                          f"without '/' or '@'")
    return value


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = SPEC[key][1]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return _check(key, value, source)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return _check(key, int(value), source)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return _check(key, float(value), source)
        if isinstance(value, str):
            try:
                return _check(key, float(value), source)
            except ValueError:
                pass
    elif kind is str and isinstance(value, str):
        return _check(key, value, source)
    raise ConfigError(f"{source}: {key} must be {_TYPE_NAMES.get(kind, kind.__name__)}, "
                      f"got {value!r} ({_default_note(key)})")


NUM_PROCESSES_ENV = "ACTORLOG_NUM_PROCESSES"


def auto_processes() -> int:
    """What ``num.processes = 0`` stands for: $ACTORLOG_NUM_PROCESSES when set (the test
    suite sets 1, so only the brokers a test asks for run several processes), else the
    CPUs this process may run on (its affinity mask, not the host's count)."""
    env = os.environ.get(NUM_PROCESSES_ENV, "").strip()
    if env:
        try:
            count = int(env)
        except ValueError:
            raise ConfigError(f"${NUM_PROCESSES_ENV} = {env!r}: not a whole number; set it "
                              f"to a count of processes (1..256) or unset it") from None
        if not 1 <= count <= 256:
            raise ConfigError(f"${NUM_PROCESSES_ENV} = {count}: out of range 1..256")
        return count
    return max(1, min(256, len(os.sched_getaffinity(0))))


class Config:
    """Resolved settings: defaults, then the file, then command-line overrides."""

    def __init__(self, values: dict[str, Any] | None = None, source: str = "<defaults>") -> None:
        self.values: dict[str, Any] = dict(DEFAULTS)
        self.source = source
        self.set_keys: set[str] = set()
        """Keys a file, a flag or the caller set (the rest hold their defaults)."""
        self.given: dict[str, Any] = {}
        """Each set key's value as given: ``values`` holds what a DERIVED_MS key resolves to
        (a negative log.retention.ms is -1 there); DescribeConfigs shows the key's own, as
        Kafka's does."""
        if values:
            self.update(values, source)
        else:
            self._derive_millis(source)

    def update(self, values: dict[str, Any], source: str = "<overrides>") -> Config:
        for key, value in _flatten(values).items():
            if key not in SPEC:
                raise _unknown(key, source)
            self.values[key] = self.given[key] = _coerce(key, value, source)
            self.set_keys.add(key)
        self._derive_millis(source)
        return self

    def _derive_millis(self, source: str) -> None:
        """Each key of DERIVED_MS as Kafka's KafkaConfig gives it (logRetentionTimeMillis,
        logRollTimeMillis, logFlushIntervalMs): the key itself if set, else the first of
        its stand-ins set, else the last stand-in (the one with a default), in its unit.
        The value everything reads; DescribeConfigs says which key set it.
        log.retention.ms: negative is -1 (no limit), and 0 is refused, as Kafka refuses to
        start on it (every segment would be deleted at each check), naming the key that
        gave it (one ``source``, the update's, set: the key that gives the value can only
        change to, or by, one the update sets). log.roll.ms: each key's range keeps it at
        least 1, as Kafka requires."""
        for target, stand_ins in DERIVED_MS.items():
            given = [(target, 1), *stand_ins]
            key, factor = next(((k, f) for k, f in given if k in self.set_keys), given[-1])
            millis = int(self.values[key]) * factor
            if target == "log.retention.ms":
                if millis == 0:
                    raise ConfigError(f"{source}: {key} = 0 would delete every segment at "
                                      f"each retention check; use -1 for no time limit, or "
                                      f"at least 1")
                millis = max(millis, -1)
            self.values[target] = millis

    @classmethod
    def load(cls, path: Path | str | None, overrides: dict[str, Any] | None = None) -> Config:
        cfg = cls()
        if path is not None:
            p = Path(path)
            try:
                data = tomllib.loads(p.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ConfigError(f"config file {p} does not exist; give the path of a TOML "
                                  f"file (see deploy/actorlog.example.toml)") from None
            except IsADirectoryError:
                raise ConfigError(f"config file {p} is a directory; give the path of a TOML "
                                  f"file (see deploy/actorlog.example.toml)") from None
            except PermissionError:
                raise ConfigError(f"cannot read config file {p}: permission denied; make it "
                                  f"readable by this user (chmod o+r FILE)") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{p}: not valid TOML: not UTF-8 text ({exc.reason} at byte "
                                  f"{exc.start})") from None
            except OSError as exc:
                raise ConfigError(f"cannot read config file {p}: {exc.strerror}") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{p}: not valid TOML: {exc}; see "
                                  f"deploy/actorlog.example.toml for the format") from None
            cfg.update(data, str(p))
            cfg.source = str(p)
        if overrides:
            cfg.update({k: v for k, v in overrides.items() if v is not None}, "command line")
        return cfg

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    return repr(value)


def _allowed(key: str) -> str:
    if key in CHOICES:
        return "one of " + ", ".join(CHOICES[key])
    if key in RANGES:
        low, high = RANGES[key]
        if low == -high - 1:  # a whole INT's or LONG's range: Kafka's key without a validator
            return "any value" + ("; negative: no limit" if key in NEGATIVE_NO_LIMIT else "")
        return f"at least {low}" if high >= _MAX_INT else f"{low} to {high}"
    return ""


def example_toml() -> str:
    """deploy/actorlog.example.toml: every key with its default and meaning."""
    lines = [
        "# actorlog configuration: every key, set to its default, with its meaning.",
        "# Generated from actors/runtime/config.py (SPEC) by `actorlog config example`;",
        "# a test checks that this file matches. Use it with `actorlog serve --config FILE`;",
        "# --listen, --data-dir and the other flags of `serve` override the file.",
    ]
    section = ""
    for key, (default, _kind, meaning) in SPEC.items():
        own = key.split(".")[0] in ("node", "actor", "trace", "metrics")
        title = ("actorlog's own keys: the node, its actors, traces and metrics" if own
                 else "Kafka's broker keys (Kafka's names and defaults)")
        if title != section:
            section = title
            lines += ["", f"# ---- {title} ----"]
        allowed = _allowed(key)
        text = meaning + (f" [{allowed}]" if allowed else "")
        lines.append("")
        lines += textwrap.wrap(text, 88, initial_indent="# ", subsequent_indent="# ")
        if default is None:  # no default (Kafka's null): set only to take precedence
            lines.append(f"# {json.dumps(key)} =")
        elif key in INTERNAL_KEYS:  # set, DescribeConfigs would list it; Kafka's files leave
            lines.append(f"# {json.dumps(key)} = {_toml_value(default)}")  # it out
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(default)}")
    return "\n".join(lines) + "\n"
