"""A ReplicaFetcher's state: which partitions it fetches, where, and which wait.

Kafka's AbstractFetcherThread without the thread: per partition a fetch
state (its leader and epoch, the offset and last epoch the next fetch
starts from, and whether it is ready, being applied by its shard, or backed
off after an error), one fetch in flight at a time, and a fetch sent only
when no answer is still being applied, so a follower's new log end reaches
the leader with the very next fetch (what an acks=all produce waits for).

The shell calls these methods with ``now_ms`` and sends what they return:
ReplicaFetch rows to the leader, FollowerApply rows to the shards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wire.errors import ErrorCode
from wire.replication_messages import (
    FetcherPartitionRow,
    FollowerApplyRow,
    FollowerStateRow,
    ReplicaFetchPartition,
    ReplicaFetchRow,
)

NONE = int(ErrorCode.NONE)
OUT_OF_RANGE = int(ErrorCode.OFFSET_OUT_OF_RANGE)

INIT = "init"          # the shard has not told the offset yet
READY = "ready"        # fetch it
APPLYING = "applying"  # its shard applies an answer (or tells its state)
DELAYED = "delayed"    # backed off after an error until ``delayed_until_ms``

TP = tuple[str, int]


@dataclass
class FetchPartition:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    fetch_offset: int = -1
    last_fetched_epoch: int = -1
    high_watermark: int = -1
    log_start_offset: int = -1
    state: str = INIT
    delayed_until_ms: int = 0
    generation: int = 0   # bumped by every (re)add: answers for an older one are dropped


@dataclass
class FetcherConfig:
    replica_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    request_timeout_ms: int = 30000


@dataclass
class _InFlight:
    req_id: int
    sent_ms: int
    partitions: dict[TP, int]   # -> generation at send time
    timeout_ms: int = 0         # given up this long after it was sent


@dataclass
class FetcherCore:
    config: FetcherConfig
    partitions: dict[TP, FetchPartition] = field(default_factory=dict)
    in_flight: _InFlight | None = None
    applying: dict[int, dict[TP, int]] = field(default_factory=dict)  # req -> tp -> generation
    applying_since: dict[int, int] = field(default_factory=dict)      # req -> sent at (ms)
    generations: int = 0
    fetches: int = 0
    bytes_fetched: int = 0
    largest_response_bytes: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    # Whether the leader's node has answered this fetcher yet, and how many of its fetches
    # went unanswered before that. A reply finds its way back through the leader node's
    # directory, which learns a node that registered again only when its controller actor
    # reads the registration: a first fetch sent before that is answered into dead letters.
    # Until one answer came, a fetch is sent again after the leader's wait plus the back-off,
    # doubling each time, up to ``request_timeout_ms`` (an answer to an abandoned fetch is
    # dropped by its req_id).
    answered: bool = False
    unanswered: int = 0

    # ------------------------------------------------------------ membership
    def add(self, rows: list[FetcherPartitionRow]) -> None:
        """Fetch these from their leader at their epoch; a partition already fetched
        from the same leader at the same epoch goes on as it is."""
        for row in rows:
            key = (row.topic, row.partition)
            current = self.partitions.get(key)
            if (current is not None and current.leader == row.leader
                    and current.leader_epoch == row.leader_epoch):
                continue
            self.generations += 1
            self.partitions[key] = FetchPartition(row.topic, row.partition, row.leader,
                                                  row.leader_epoch,
                                                  generation=self.generations)
            if self.in_flight is not None and key in self.in_flight.partitions:
                self.in_flight = None  # its answer is for the old epoch: fetch anew

    def remove(self, keys: list[TP]) -> None:
        """Stop fetching these; an answer their shards owe is waited for no more (a shard's
        process may have died with it: the next fetch would wait for its timeout)."""
        for key in keys:
            self.partitions.pop(key, None)
        for req_id, generations in list(self.applying.items()):
            for key in keys:
                generations.pop(key, None)
            if not generations:
                del self.applying[req_id]
                self.applying_since.pop(req_id, None)

    @property
    def idle(self) -> bool:
        return not self.partitions

    # ------------------------------------------------------------ shards
    def to_initialise(self) -> list[FollowerApplyRow]:
        """State queries (rows without records) for partitions whose offset is unknown."""
        rows = []
        for p in self.partitions.values():
            if p.state == INIT:
                p.state = APPLYING
                rows.append(FollowerApplyRow(p.topic, p.partition, p.leader_epoch, b"", -1, -1,
                                             -1, -1, -1, -1))
        return rows

    def sent_to_shard(self, req_id: int, rows: list[FollowerApplyRow], now_ms: int = 0) -> None:
        self.applying_since[req_id] = now_ms
        self.applying[req_id] = {(r.topic, r.partition): self.partitions[(r.topic,
                                                                            r.partition)].generation
                                 for r in rows if (r.topic, r.partition) in self.partitions}

    def on_applied(self, req_id: int, rows: list[FollowerStateRow], now_ms: int) -> None:
        generations = self.applying.pop(req_id, None)
        self.applying_since.pop(req_id, None)
        if generations is None:
            return
        answered = set()
        for row in rows:
            key = (row.topic, row.partition)
            answered.add(key)
            p = self.partitions.get(key)
            if p is None or p.generation != generations.get(key):
                continue  # removed or re-added meanwhile: its own query is under way
            if row.error_code != NONE:
                self._back_off(p, row.error_code, now_ms, True)
                continue
            p.fetch_offset = row.log_end_offset
            p.last_fetched_epoch = row.last_fetched_epoch
            p.high_watermark = row.high_watermark
            p.log_start_offset = row.log_start_offset
            p.state = READY
        for key, generation in generations.items():
            p = self.partitions.get(key)
            if key not in answered and p is not None and p.generation == generation:
                self._back_off(p, int(ErrorCode.UNKNOWN_SERVER_ERROR), now_ms, True)

    def _back_off(self, p: FetchPartition, error_code: int, now_ms: int, reinit: bool) -> None:
        """Back the partition off (``replica.fetch.backoff.ms``); with ``reinit`` its shard is
        asked for its state again afterwards, else fetching goes on from where it was."""
        self.errors[error_code] = self.errors.get(error_code, 0) + 1
        p.state = DELAYED
        p.delayed_until_ms = now_ms + self.config.backoff_ms
        if reinit:
            p.fetch_offset = -1

    def wake(self, now_ms: int) -> None:
        """Partitions whose back-off ended: their state is asked again before fetching."""
        for p in self.partitions.values():
            if p.state == DELAYED and now_ms >= p.delayed_until_ms:
                p.state = INIT if p.fetch_offset < 0 else READY

    # ------------------------------------------------------------ fetching
    def next_fetch(self, req_id: int, now_ms: int) -> list[ReplicaFetchRow]:
        """The rows of the next fetch (empty: nothing to send now)."""
        if (self.in_flight is not None or self.applying
                or any(p.state == APPLYING for p in self.partitions.values())):
            return []
        ready = [p for p in self.partitions.values() if p.state == READY]
        if not ready:
            return []
        self.in_flight = _InFlight(req_id, now_ms,
                                   {(p.topic, p.partition): p.generation for p in ready},
                                   self._fetch_timeout_ms())
        self.fetches += 1
        return [ReplicaFetchRow(p.topic, p.partition, p.fetch_offset, p.leader_epoch,
                                p.last_fetched_epoch, self.config.partition_max_bytes,
                                p.log_start_offset)
                for p in ready]

    def _fetch_timeout_ms(self) -> int:
        timeout = self.config.request_timeout_ms
        if self.answered:
            return timeout
        first = max(1, self.config.max_wait_ms + self.config.backoff_ms)
        return min(timeout, first << min(self.unanswered, 30))

    def on_fetch_response(self, req_id: int, rows: list[ReplicaFetchPartition],
                          now_ms: int) -> list[FollowerApplyRow]:
        """What to apply; partitions in error back off. An answer to a fetch that was
        given up (timed out, or a partition of it re-added) is dropped."""
        self.answered = True  # even a late one: the leader's node knows this one
        flight = self.in_flight
        if flight is None or flight.req_id != req_id:
            return []
        self.in_flight = None
        self.largest_response_bytes = max(self.largest_response_bytes,
                                          sum(len(row.records) for row in rows))
        apply: list[FollowerApplyRow] = []
        for row in rows:
            key = (row.topic, row.partition)
            p = self.partitions.get(key)
            if p is None or p.generation != flight.partitions.get(key) or p.state != READY:
                continue
            if row.error_code == OUT_OF_RANGE:
                p.state = APPLYING
                apply.append(FollowerApplyRow(p.topic, p.partition, p.leader_epoch, b"",
                                              row.high_watermark, row.log_start_offset,
                                              row.log_end_offset, -1, -1, p.fetch_offset))
                continue
            if row.error_code != NONE:
                self._back_off(p, row.error_code, now_ms, False)
                continue
            self.bytes_fetched += len(row.records)
            diverging = row.diverging_end_offset >= 0 or row.diverging_epoch >= 0
            # Applied also when only the leader's high watermark or log start moved
            # (DeleteRecords, retention): the follower's log start follows it.
            if (row.records or diverging or row.high_watermark > p.high_watermark
                    or row.log_start_offset > p.log_start_offset):
                p.state = APPLYING
                apply.append(FollowerApplyRow(
                    p.topic, p.partition, p.leader_epoch, b"" if diverging else row.records,
                    row.high_watermark, row.log_start_offset, row.log_end_offset,
                    row.diverging_epoch if diverging else -1,
                    row.diverging_end_offset if diverging else -1, -1))
        return apply

    def check_timeout(self, now_ms: int) -> int | None:
        """Give up a fetch unanswered for ``request_timeout_ms`` (its node may have died; less
        before the leader first answered, see ``answered``), and shard answers that never
        came (their partitions are asked again after a back-off). The fetch's timeout when
        it was given up, else None."""
        for req_id, sent in list(self.applying_since.items()):
            if now_ms - sent >= self.config.request_timeout_ms:
                self.on_applied(req_id, [], now_ms)
        flight = self.in_flight
        if flight is not None and now_ms - flight.sent_ms >= flight.timeout_ms:
            self.in_flight = None
            if not self.answered:
                self.unanswered += 1
            return flight.timeout_ms
        return None

    def next_deadline_ms(self) -> int | None:
        deadlines = [p.delayed_until_ms for p in self.partitions.values() if p.state == DELAYED]
        if self.in_flight is not None:
            deadlines.append(self.in_flight.sent_ms + self.in_flight.timeout_ms)
        deadlines += [sent + self.config.request_timeout_ms
                      for sent in self.applying_since.values()]
        return min(deadlines) if deadlines else None

    def stats(self) -> dict[str, object]:
        return {
            "partitions": {f"{t}-{p}": [fp.leader, fp.leader_epoch, fp.fetch_offset,
                                        fp.last_fetched_epoch, fp.state]
                           for (t, p), fp in self.partitions.items()},
            "fetches": self.fetches,
            "bytes_fetched": self.bytes_fetched,
            "largest_response_bytes": self.largest_response_bytes,
            "errors": {ErrorCode(code).name: n for code, n in self.errors.items()},
            "in_flight": self.in_flight is not None,
        }
