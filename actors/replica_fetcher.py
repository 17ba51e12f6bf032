"""ReplicaFetcher: a follower node's fetcher of one leader node (Kafka's ReplicaFetcherThread).

One actor per (leader broker, fetcher id), named
``replica-fetcher-<leader>-<id>``; the ReplicaManager gives it partitions
(``hash(topic, partition) % num.replica.fetchers``) and takes them away as
leadership changes. A thin shell over ``FetcherCore``: it asks each new
partition's shard where its log ends, sends one ReplicaFetch at a time to a
RequestHandler of the leader's node (over the gateways; batches come back as
bytes), and hands each partition's answer to its shard (FollowerApply), the
only writer of the log. The handler is one the leader runs: picked by the
leader's handler count (nodes may run different ``num.io.threads``), which
the ReplicaManager passes on from the controller's LeaderAndIsr. The next
fetch leaves once every answer is applied. A fetcher left without partitions
sends nothing until it is given some.
"""

from __future__ import annotations

import itertools
from typing import Any

from actors.core.fetcher_state import FetcherConfig, FetcherCore
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from actors.topology import Topology, peer_handler
from wire.broker_messages import GetStats
from wire.replication_messages import (
    AddFetcherPartitions,
    FollowerApplied,
    FollowerApply,
    FollowerApplyRow,
    RemoveFetcherPartitions,
    ReplicaFetch,
    ReplicaFetchResponse,
)


def fetcher_name(leader: int, fetcher_id: int) -> str:
    return f"replica-fetcher-{leader}-{fetcher_id}"


class ReplicaFetcher(Actor):
    mailbox_size = 0  # unbounded: answers from the leader and the shards must never wait

    def __init__(self, node: Any, name: str, *, topology: Topology, config: FetcherConfig,
                 leader: int, fetcher_id: int, clock: Clock, leader_handlers: int = 0,
                 **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.topology = topology
        self.fetcher_config = config
        self.leader = leader
        self.fetcher_id = fetcher_id
        self.clock = clock
        self.leader_handlers = leader_handlers
        self.target = self._target(leader_handlers)
        self.stopping = False  # (kept by a restart after a crash: the node still stops)

    def _target(self, leader_handlers: int) -> Address:
        """The leader node's handler this fetcher talks to (one, so its fetches stay in
        order), chosen among the ``leader_handlers`` the leader runs (0: unknown, handler-0)."""
        return peer_handler(self.leader, leader_handlers,
                            self.fetcher_config.replica_id + self.fetcher_id)

    def setup(self) -> None:
        self.core = FetcherCore(self.fetcher_config)
        # Ids of this life alone (as RequestHandler's): an answer meant for a previous
        # process of this node (restarted on the same gateway) must not be taken for one
        # to this fetcher's request, as fetch answers carry no offset to check. 2^20 ids
        # per millisecond between two lives.
        self.req_ids = itertools.count(1 + ((self.clock.wall_ms() % (1 << 31)) << 20))
        self.timeouts = 0

    def on_stopping(self) -> None:
        """The node stops: no new fetch (what a fetch in flight brings is still applied).
        A follower fetching under a producer's load kept messages moving, and the node's
        shutdown waited its whole timeout for a quiet that never came."""
        self.stopping = True

    @handles(AddFetcherPartitions)
    def on_add(self, msg: AddFetcherPartitions) -> None:
        if msg.leader_handlers != self.leader_handlers:
            # The leader came back with another num.io.threads. One fetch is in flight at
            # most: the next one goes to the new handler, nothing overtakes anything.
            self.leader_handlers = msg.leader_handlers
            self.target = self._target(msg.leader_handlers)
            self.log.info("broker {} runs {} handler(s): fetching from {}", self.leader,
                          msg.leader_handlers or "?", self.target.name)
        self.core.add(list(msg.rows))
        self._pump()

    @handles(RemoveFetcherPartitions)
    def on_remove(self, msg: RemoveFetcherPartitions) -> None:
        self.core.remove([(r.topic, r.partition) for r in msg.rows])
        self._pump()

    @handles(ReplicaFetchResponse)
    def on_fetch_response(self, msg: ReplicaFetchResponse) -> None:
        apply = self.core.on_fetch_response(msg.req_id, list(msg.rows), self.clock.now_ms())
        self._to_shards(apply)
        self._pump()

    @handles(FollowerApplied)
    def on_applied(self, msg: FollowerApplied) -> None:
        self.core.on_applied(msg.req_id, list(msg.rows), self.clock.now_ms())
        self._pump()

    def _to_shards(self, rows: list[FollowerApplyRow]) -> None:
        by_shard: dict[Address, list[FollowerApplyRow]] = {}
        for row in rows:
            by_shard.setdefault(self.topology.shard_for(row.topic, row.partition), []).append(row)
        for shard, shard_rows in by_shard.items():
            req_id = next(self.req_ids)
            self.core.sent_to_shard(req_id, shard_rows, self.clock.now_ms())
            self.tell(shard, FollowerApply(req_id, shard_rows))

    def _pump(self) -> None:
        """Ask new partitions' shards for their state, and fetch when nothing is pending."""
        now = self.clock.now_ms()
        self.core.wake(now)
        init = self.core.to_initialise()
        if init:
            self._to_shards(init)
        # a fetcher spawned once its node stopped intake (the metadata still moves
        # partitions while processes 1.. stop) never got on_stopping
        if self.stopping or self.node.intake_stopped:
            return
        req_id = next(self.req_ids)
        rows = self.core.next_fetch(req_id, now)
        if rows:
            cfg = self.fetcher_config
            # Each fetch starts a chain of its own (sampled like a Kafka request): the
            # leader's traces of a produce it acknowledges link to it.
            self.tell_traced(self.target, ReplicaFetch(req_id, cfg.replica_id,
                                                       cfg.max_wait_ms, cfg.min_bytes,
                                                       cfg.max_bytes, rows),
                             self._tracer.sample() if self._tracer.enabled else 0)

    def poll_timeout_ms(self) -> int | None:
        deadline = self.core.next_deadline_ms()
        if deadline is None:
            return None
        return max(0, deadline - self.clock.now_ms())

    def on_turn(self) -> None:
        now = self.clock.now_ms()
        waited = self.core.check_timeout(now)
        if waited is not None:
            self.timeouts += 1
            if waited < self.fetcher_config.request_timeout_ms:
                # never answered yet: its node may not have learnt this one's yet
                self.log.info("fetch to broker {} unanswered for {} ms (none answered yet); "
                              "fetching again", self.leader, waited)
            else:
                self.log.warning("fetch to broker {} unanswered for {} ms; fetching again",
                                 self.leader, waited)
        self._pump()

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        return {**self.core.stats(), "leader": self.leader, "timeouts": self.timeouts,
                "target": self.target.name}
