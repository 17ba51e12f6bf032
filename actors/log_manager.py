"""LogManager: sole writer of a log dir's checkpoint files and clean-shutdown marker.

Partition shards report their offsets to it; it writes Kafka's three
checkpoint files. At shutdown every shard closes its logs and sends a final
report; only when all of them did is the clean-shutdown marker written.
"""

from __future__ import annotations

from typing import Any

from actors.core.checkpoint import write_atomically
from actors.core.log_dir import CLEAN_SHUTDOWN_FILE, LogDir
from actors.runtime.actor import Actor, handles
from actors.runtime.clock import Clock
from wire.broker_messages import CheckpointOffsets, GetStats


class LogManager(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(
        self, node: Any, name: str, *, log_dir: LogDir, num_shards: int, clock: Clock, **kw: Any
    ) -> None:
        super().__init__(node, name, **kw)
        self.clock = clock  # nothing here reads time yet; held so one clock drives the node
        self.log_dir = log_dir
        self.num_shards = num_shards

    def setup(self) -> None:
        self.closed_shards: set[str] = set()
        self.writes = 0

    @handles(CheckpointOffsets)
    def on_offsets(self, msg: CheckpointOffsets) -> None:
        d = self.log_dir
        for row in msg.rows:
            key = (row.topic, row.partition)
            d.high_watermarks[key] = row.high_watermark
            d.recovery_points[key] = row.recovery_point
            d.log_start_offsets[key] = row.log_start_offset
        for tp in msg.dropped:
            d.forget(tp.topic, tp.partition)
        d.checkpoint([])
        self.writes += 1
        if msg.final:
            self.closed_shards.add(msg.shard)
            if len(self.closed_shards) == self.num_shards:
                write_atomically(d.path / CLEAN_SHUTDOWN_FILE, b"")
                self.log.info("all {} shards closed their logs; clean shutdown marker written",
                              self.num_shards)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {"checkpoint_writes": self.writes, "closed_shards": sorted(self.closed_shards)}
