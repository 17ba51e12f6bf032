"""Invariants of a simulated run, checked while it runs and at its end.

Control plane (checked every few hundred simulated milliseconds):

- at most one broker is ever the active controller of a controller epoch, and
  ``/controller_epoch`` never goes back;
- a partition's leader epoch in ZooKeeper never goes back, and one leader
  epoch names one leader;
- on every node, a partition's leader epoch and high watermark never go back
  within one life of the node, and no two nodes lead one partition in the same
  leader epoch (one node leading an epoch again in a later life, as Kafka's
  controller allows when it did not see the node restart, is counted as
  ``epoch_led_again_after_restart``). One exception to the high
  watermark, the crash election below: a replica whose watermark was H may
  fall back to h < H when the first leadership seen after the record at h was
  committed (after a check last saw every replica's high watermark at or below
  h) to start at or below h was a crash election (counted as
  ``hw_back_after_crash_election``). Its leader's crash may also come before
  that commit when its log held offset h at the crash (the leader counted the
  fetch it had acknowledged h with before it crashed, not knowing of the
  crash, and committed h on it later: sim seed 145) and after h was written:
  acks=all promises a record in the ISR's memory, not on its disks, so the
  crash loses it all the same.

Purgatory (checked on every delivery): a delayed produce or fetch that a
handler parked (WatchProduce, WatchFetch) is answered (ProduceReady,
FetchReady) at most once, and, once the run settled, exactly once unless its
node died or its wait has not run out yet: replica fetchers long-poll until
the very end, so the last fetches of each follower are still parked then,
rightly; an operation must be answered once its deadline (max_wait_ms or
timeout_ms after it was parked) is EXPIRY_GRACE_MS behind the end.

Data (at the end, on the logs themselves), held to what Kafka promises:

- acknowledged records are readable: a record acknowledged to an acks=all
  producer is, at its acknowledged offset and with its value, in the log of
  the partition's final leader and in every live replica's log below that
  replica's high watermark (unless that replica has not fetched since a crash
  election, below: it still holds what the election lost). Acks=1 records are
  not held to it (Kafka loses them when leadership moves before a follower
  fetched them): the ones missing from the final leader's log are counted as
  ``acks1_lost``.
  The one exception, the crash election: the record is excused (counted as
  ``acks_all_lost_to_crash_election``) when the first leader epoch after the one
  it was acknowledged in (the epoch its leader's epoch cache gave its offset when the
  answer came, not the last one a check saw) to start at or below its offset was led by a
  broker that crashed after the record was made and before it led that epoch (a
  leader that never had it, without a crash, is a violation). That broker lost the record
  with its log's unflushed tail at the crash, came back as the ISR's last
  member or still in the ISR (its leader had not had replica.lag.time.max.ms
  to drop it, or no controller saw it die while its old ZooKeeper session
  lived), and was elected when the leader failed in turn: two failures, one of
  them a disk losing what was not fsynced, which Kafka in ZooKeeper mode does
  not survive either (with log.flush.interval.messages above 1; KIP-966).
  A check sees a leadership only if it lasted to one of the checks every
  ``check_every_ms``: a shorter one excuses nothing (a stricter checker).
- a record the consumer fetched from a broker that has not crashed since is
  that broker's record at that offset (same crash-election exception, judged from
  the leader epoch the record's batch carries);
- replicas agree below the high watermark: two live replicas of a partition
  hold the same records below the lower of their high watermarks (same
  crash-election exception: a replica that has not fetched from the elected
  leader since still holds what that leader lost);
- no log holds one producer's sequence twice; one producer's sequences grow
  with the offsets of a log.

Liveness (at the end, after every fault was healed and the run settled): a
controller is active, every partition of the run's topics has a live leader, and
every live replica is back in its partition's ISR (in ZooKeeper and at the
leader): a follower whose fetch was lost asks again after
replica.socket.timeout.ms, and the run settles past that (SimOptions.caught_up_ms).

A partition moved (``--reassign``, AlterPartitionReassignments) ends, once settled,
with no reassignment in its znode, with the replica set its answers said (the target;
the original set when a cancel was answered NONE; either when an answer was lost),
and a leader and ISR within that set; a live broker the move dropped still holding
the partition is counted (``removed_replicas_kept``: Kafka's controller does not try
a deletion again either once it failed over).

Clients (as they go): a producer id is handed out once; a group member's
generations only grow while one coordinator serves the group without a break;
an offset fetched as committed is one a member committed.

Also a violation: an actor that crashed (its supervision restarted it) or an
exception that escaped an actor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from actors.core.cluster_model import TopicPartition
from actors.core.log_epoch_cache import LeaderEpochCache
from actors.core.partition_log import FlushFailedError
from actors.metadata import znodes
from actors.runtime.actor import Actor
from actors.sim.clients import Ack, History, batch_records
from actors.sim.node import SimNode
from wire import registry
from wire.broker_messages import FetchReady, ProduceReady, WatchFetch, WatchProduce

if TYPE_CHECKING:
    from actors.sim.cluster import SimCluster

_WATCH_FETCH = registry.type_id_of(WatchFetch)
_WATCH_PRODUCE = registry.type_id_of(WatchProduce)
_FETCH_READY = registry.type_id_of(FetchReady)
_PRODUCE_READY = registry.type_id_of(ProduceReady)


EXPIRY_GRACE_MS = 1_000  # timer tick + in-node deliveries, far above either in the simulator


class Violation(Exception):
    """An invariant does not hold; the message says which and where."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


class StorageFailure(NamedTuple):
    """An fsync of a replica's log failed (EIO), losing what the file had not synced:
    when, whether the replica led an ISR of itself alone then, the leader epoch it held,
    and its log's recovery point then (below it, everything was synced already)."""

    at_ms: float
    alone: bool
    leader_epoch: int = -1
    durable_end: int = 0


@dataclass
class Checker:
    cluster: SimCluster
    history: History
    topics: dict[str, int]
    controllers_by_epoch: dict[int, int] = field(default_factory=dict)
    zk_controller_epoch: int = 0
    zk_leader_epochs: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    node_leader_epochs: dict[tuple[int, int, str, int], int] = field(default_factory=dict)
    node_high_watermarks: dict[tuple[int, int, str, int], int] = field(default_factory=dict)
    # the log each of those was read from: another log in the same life is a replica
    # deleted and made again (a reassignment removed it and a later one added it back),
    # which starts empty
    node_logs: dict[tuple[int, int, str, int], Any] = field(default_factory=dict)
    parked: dict[tuple[str, int, str, int], int] = field(default_factory=dict)
    deadlines_ms: dict[tuple[str, int, str, int], float] = field(default_factory=dict)
    checks: int = 0
    last_check_ms: float = 0.0
    # when each broker crashed (simulated ms), as the run struck it
    crash_times_ms: dict[int, list[float]] = field(default_factory=dict)
    # broker -> [(when it crashed, (topic, partition) -> its log end offset then)]: what
    # each crash lost the tail of (a crash while the broker was not up: an empty map)
    ends_at_crash: dict[int, list[tuple[float, dict[tuple[str, int], int]]]] = field(
        default_factory=dict)
    # (broker, life) -> (topic, partition) -> (log start, log end, leader epoch cache
    # entries) of its logs when that life ended in a crash: what an answer still on its way
    # from that life is dated with (note_ack)
    logs_at_crash: dict[tuple[int, int], dict[tuple[str, int], tuple[int, int, LeaderEpochCache]]
                        ] = field(default_factory=dict)
    acks_dated_at_crash: int = 0   # answers note_ack dated from a life that crashed since
    # (broker, topic, partition) -> [(when an fsync of that replica's log failed (EIO) and
    # lost what the file had not synced, whether it led an ISR of itself alone then)]: a
    # crash of that one replica, which excuses a loss only where it led alone then and
    # leads next (nobody else had the records; ``_crash_election``)
    storage_failures: dict[tuple[int, str, int], list[StorageFailure]] = field(
        default_factory=dict)
    # (broker, topic, partition) whose last storage failure is healed: a check saw it back
    # in the ISR (in ZooKeeper, with another leader, at a leader epoch after the failure's)
    # with its shard's failed mark gone. Taken offline for that failure after that, it
    # is a healthy replica wrongly taken offline: no excuse in check_live
    storage_healed: set[tuple[int, str, int]] = field(default_factory=set)
    # (broker, life, topic, partition) -> the log its shard had when its fsync failed: the
    # first check that finds another (the shard reopened it) excuses its high watermark
    # going back; from then until it has a role again, its leader epoch -1
    failed_logs: dict[tuple[int, int, str, int], Any] = field(default_factory=dict)
    awaiting_role: set[tuple[int, int, str, int]] = field(default_factory=set)
    # (topic, partition, leader epoch) -> [(leader, its life, the epoch's start offset in its
    # log, first seen at ms)]: every leadership a check saw (two only when a restarted
    # leader was given its old epoch again)
    leaderships: dict[tuple[str, int, int], list[tuple[int, int, int, float]]] = field(
        default_factory=dict)
    # (topic, partition) -> [(high watermark, the last check before any replica was seen
    # at it)], growing: a record below that watermark was committed after that time
    committed_ms: dict[tuple[str, int], list[tuple[int, float, float]]] = field(
        default_factory=dict)  # (high watermark, last check before it, the check that saw it)
    # (topic, partition) -> [(log end offset, the last check before any replica was seen at
    # it, the check that saw it)], growing: a record below that offset was written after
    # that time
    written_ms: dict[tuple[str, int], list[tuple[int, float, float]]] = field(
        default_factory=dict)
    # what Kafka does not promise, counted (reported in the run's stats, not violations)
    counted: dict[str, int] = field(default_factory=lambda: {
        "acks1_lost": 0, "acks_all_lost_to_crash_election": 0,
        "hw_back_after_crash_election": 0, "fetched_lost_to_crash_election": 0,
        "replicas_differ_after_crash_election": 0, "epoch_led_again_after_restart": 0,
        "hw_back_after_storage_failure": 0, "offline_after_storage_failure": 0,
        "fetched_lost_to_storage_failure": 0})

    # --------------------------------------------------------------- purgatory
    def observe(self, node: SimNode, actor: Actor, s_node: str, s_name: str,
                entries: list[Any]) -> None:
        for entry in entries:
            type_id = entry[0]
            if type_id == _WATCH_FETCH:
                self._park(node, s_name, entry[6][0], "fetch", entry[6][2])
            elif type_id == _WATCH_PRODUCE:
                body = entry[6]
                self._park(node, body[1], body[0], "produce", body[2])
            elif type_id in (_FETCH_READY, _PRODUCE_READY):
                kind = "fetch" if type_id == _FETCH_READY else "produce"
                key = (node.name, node.incarnation, f"{actor.name}/{kind}", entry[6][0])
                answers = self.parked.get(key)
                if answers is None:
                    continue  # parked before the observer saw it (never, while it runs)
                if answers >= 1:
                    raise Violation(
                        "purgatory answers exactly once",
                        f"delayed {kind} {entry[6][0]} of {actor.name}@{node.name} answered "
                        f"twice (from {s_name}@{s_node})")
                self.parked[key] = answers + 1

    def _park(self, node: SimNode, handler: str, req_id: int, kind: str, wait_ms: int) -> None:
        key = (node.name, node.incarnation, f"{handler}/{kind}", req_id)
        self.parked[key] = 0
        self.deadlines_ms[key] = self._now_ms() + max(0, wait_ms)

    def _now_ms(self) -> float:
        return self.cluster.world.kernel.now_ns / 1_000_000

    # ----------------------------------------------------------- control plane
    def check(self) -> None:
        self.checks += 1
        cluster = self.cluster
        for broker_id in sorted(cluster.brokers):
            controller = cluster.controller_actor(broker_id)
            if controller is None or not controller.driver.active:
                continue
            fence = controller.driver.fence
            assert fence is not None
            holder = self.controllers_by_epoch.setdefault(fence.epoch, broker_id)
            if holder != broker_id:
                raise Violation("one active controller per epoch",
                                f"brokers {holder} and {broker_id} both active in controller "
                                f"epoch {fence.epoch}")
        zk = cluster.zk
        epoch_node = zk.nodes.get(znodes.CONTROLLER_EPOCH)
        if epoch_node is not None:
            epoch = znodes.decode_controller_epoch(epoch_node.data)
            if epoch < self.zk_controller_epoch:
                raise Violation("controller epoch only grows",
                                f"/controller_epoch went from {self.zk_controller_epoch} "
                                f"to {epoch}")
            self.zk_controller_epoch = epoch
        for tp, state in self._zk_partition_states(zk):
            topic, p = tp.topic, tp.partition
            before = self.zk_leader_epochs.get(tp)
            if before is not None:
                old_epoch, old_leader = before
                if state.leader_epoch < old_epoch:
                    raise Violation("leader epochs only grow",
                                    f"{topic}-{p} in ZooKeeper went from leader epoch "
                                    f"{old_epoch} to {state.leader_epoch}")
                if state.leader_epoch == old_epoch and state.leader != old_leader:
                    raise Violation("one leader per leader epoch",
                                    f"{topic}-{p} leader epoch {old_epoch} named leader "
                                    f"{old_leader}, then {state.leader}")
            self.zk_leader_epochs[tp] = (state.leader_epoch, state.leader)
            self._note_healed(tp, state)
        self._leaderships()
        leaders: dict[tuple[str, int, int], int] = {}
        for broker_id, broker in sorted(cluster.brokers.items()):
            if broker.state != "up":
                continue
            for shard in broker.shards():
                for (topic, p), state in sorted(shard.partitions.items()):
                    key = (broker_id, broker.lives, topic, p)
                    failed_log = self.failed_logs.get(key)
                    reopened = failed_log is not None and state.log is not failed_log
                    if reopened:
                        # the first check since the shard reopened the log whose fsync failed
                        del self.failed_logs[key]
                        self.awaiting_role.add(key)
                    before_epoch = self.node_leader_epochs.get(key, -1)
                    if key in self.awaiting_role and state.leader_epoch >= 0:
                        self.awaiting_role.discard(key)
                    if state.leader_epoch < before_epoch and not (
                            state.leader_epoch < 0 and key in self.awaiting_role):
                        # (-1 on the replica whose fsync failed, from its reopen to its next
                        # role: it waits for one out of the ISR)
                        raise Violation("leader epochs only grow",
                                        f"{topic}-{p} on broker {broker_id} went from leader "
                                        f"epoch {before_epoch} to {state.leader_epoch}")
                    self.node_leader_epochs[key] = max(state.leader_epoch, before_epoch)
                    hw = state.log.high_watermark
                    before_log = self.node_logs.get(key)
                    if before_log is not None and state.log is not before_log \
                            and not reopened:
                        self.node_high_watermarks.pop(key, None)
                    self.node_logs[key] = state.log
                    before_hw = self.node_high_watermarks.get(key, -1)
                    if hw < before_hw and reopened:
                        # its disk failed an fsync and lost what was not synced: the shard
                        # reopened the log short (the replica leaves the ISR and catches
                        # up; that no acknowledged record is lost is check_data's)
                        self.counted["hw_back_after_storage_failure"] += 1
                    elif hw < before_hw:
                        if not self._lost_to_crash_election(topic, p, hw):
                            raise Violation("the high watermark never goes back",
                                            f"{topic}-{p} on broker {broker_id} went from high "
                                            f"watermark {before_hw} to {hw}")
                        self.counted["hw_back_after_crash_election"] += 1
                    self.node_high_watermarks[key] = hw
                    marks = self.committed_ms.setdefault((topic, p), [])
                    if not marks or hw > marks[-1][0]:
                        marks.append((hw, self.last_check_ms, self._now_ms()))
                    ends = self.written_ms.setdefault((topic, p), [])
                    end = state.log.log_end_offset
                    if not ends or end > ends[-1][0]:
                        ends.append((end, self.last_check_ms, self._now_ms()))
                    if state.leader_id == broker_id and state.leader_epoch >= 0:
                        other = leaders.setdefault((topic, p, state.leader_epoch), broker_id)
                        if other != broker_id:
                            raise Violation("one leader per leader epoch",
                                            f"brokers {other} and {broker_id} both lead "
                                            f"{topic}-{p} in leader epoch {state.leader_epoch}")
        self._actor_health()
        self.last_check_ms = self._now_ms()

    def _leaderships(self) -> None:
        """Every leadership seen, first: a leader epoch names one life of one broker."""
        for broker_id, broker in sorted(self.cluster.brokers.items()):
            if broker.state != "up":
                continue
            for shard in broker.shards():
                for (topic, p), state in sorted(shard.partitions.items()):
                    if not state.is_leader or state.leader_epoch < 0:
                        continue
                    seen = self.leaderships.setdefault((topic, p, state.leader_epoch), [])
                    if any(b == broker_id and life == broker.lives for b, life, _s, _t in seen):
                        continue
                    if seen and seen[0][0] != broker_id:
                        raise Violation(
                            "one leader per leader epoch",
                            f"{topic}-{p} leader epoch {state.leader_epoch} led by broker "
                            f"{seen[0][0]}, then by broker {broker_id}")
                    if seen:
                        # Kafka does this too: a controller that did not see the leader
                        # restart gives it its old epoch again; the restarted log may differ
                        # from what followers fetched in that epoch (replicas agree below
                        # the high watermark is what would catch the harm)
                        self.counted["epoch_led_again_after_restart"] += 1
                    seen.append((broker_id, broker.lives, state.epoch_start_offset,
                                 self._now_ms()))

    def note_crash(self, broker_id: int) -> None:
        """The run crashes ``broker_id`` now (its unflushed log tails are lost). What its
        logs hold first (their bounds and leader epoch caches, read without touching a
        file), for the answers it sent that have not arrived yet."""
        self.crash_times_ms.setdefault(broker_id, []).append(self._now_ms())
        ends: dict[tuple[str, int], int] = {}
        self.ends_at_crash.setdefault(broker_id, []).append((self._now_ms(), ends))
        broker = self.cluster.brokers[broker_id]
        if broker.state != "up":
            return
        held: dict[tuple[str, int], tuple[int, int, LeaderEpochCache]] = {}
        for shard in broker.shards():
            for (topic, p), state in sorted(shard.partitions.items()):
                log = state.log
                # every partition's end: the high watermark check covers the internal
                # topics too (a crash election of __consumer_offsets went unexcused without)
                ends[(topic, p)] = log.log_end_offset
                if topic in self.topics:
                    cache = LeaderEpochCache(None)
                    cache.entries = list(log.epoch_cache.entries)
                    held[(topic, p)] = (log.log_start_offset, log.log_end_offset, cache)
        self.logs_at_crash[(broker_id, broker.lives)] = held

    def note_storage_failure(self, broker_id: int, topic: str, partition: int) -> None:
        """An fsync of ``broker_id``'s log of ``topic-partition`` failed and lost what the
        file had not synced: a crash of that one replica. It excuses a loss only where
        that replica led an ISR of itself alone then, and leads next (nobody else had the
        records: a crash election's loss, not a bug); its high watermark going back only at the
        first check after its shard reopened the log, and its leader epoch -1 only from
        then until its next role."""
        broker = self.cluster.brokers[broker_id]
        alone = False
        leader_epoch = -1
        durable_end = 0
        if broker.state == "up":
            for shard in broker.shards():
                state = shard.partitions.get((topic, partition))
                if state is not None:
                    self.failed_logs[(broker_id, broker.lives, topic, partition)] = state.log
                    alone = state.is_leader and set(state.isr) == {broker_id}
                    leader_epoch = state.leader_epoch
                    # what it had synced: the failed fsync can lose only from there
                    durable_end = state.log.recovery_point
        self.storage_failures.setdefault((broker_id, topic, partition), []).append(
            StorageFailure(self._now_ms(), alone, leader_epoch, durable_end))
        self.storage_healed.discard((broker_id, topic, partition))

    def _committed_after(self, topic: str, p: int, offset: int) -> tuple[float, float]:
        """When the record at ``offset`` was committed: after the first time returned (the
        last check before a replica's high watermark was seen above it) and before the
        second (the check that saw it)."""
        for hw, before_ms, at_ms in self.committed_ms.get((topic, p), []):
            if hw > offset:
                return before_ms, at_ms
        return self.last_check_ms, self._now_ms()

    def _written_after(self, topic: str, p: int, offset: int) -> float:
        """The last check before any replica's log was seen to hold ``offset``: the record
        there was written after it."""
        for end, before_ms, _at_ms in self.written_ms.get((topic, p), []):
            if end > offset:
                return before_ms
        return self.last_check_ms

    def _lost_to_crash_election(self, topic: str, p: int, offset: int) -> bool:
        """Whether the committed record at ``offset`` went with a crash election: the first
        leadership seen after it was committed to start at or below it was led by a broker
        that crashed before it led, after the commit (``_crash_election``), or before the
        commit and after the record was written, holding ``offset`` in its log at the
        crash.

        The second: a leader computes its high watermark from its followers' last fetches
        and does not know a follower crashed until replica.lag.time.max.ms or the
        controller says so; a follower that fetched past ``offset`` and then crashed with
        it unflushed may be what commits it (sim seed 145: the leader shrank its ISR to
        itself and that follower after the crash and so raised its high watermark; its
        session expired; the controller elected the crashed follower, back without the
        tail, as the ISR's last live member). What a crash cannot lose, a log that never
        held the offset, stays a violation."""
        since_ms, committed_at_ms = self._committed_after(topic, p, offset)
        if self._crash_election(topic, p, offset, since_ms, committed_at_ms):
            return True
        return self._crash_election(topic, p, offset, self._written_after(topic, p, offset),
                                    committed_at_ms, held=True)

    def _crash_election(self, topic: str, p: int, offset: int, since_ms: float,
                        leaders_from_ms: float | None = None,
                        after: tuple[int, int, int] = (-1, -1, -1), held: bool = False) -> bool:
        """Whether the record at ``offset`` of ``topic-p`` went with a crash election.

        Take the first leadership (by leader epoch, then first sight) that started at or
        below ``offset``, was first seen after ``leaders_from_ms`` (default ``since_ms``)
        and comes after ``after`` (epoch, broker, life: the leadership the record was
        acknowledged in; the same epoch counts again in a later life of its leader): it
        is a crash election if its leader crashed after ``since_ms`` and before it was
        seen leading. That replica lost the tail of its log at the crash (writes after
        its last fsync), came back as the ISR's last member or still in the ISR, and was
        elected; every other replica then truncated to its log. Kafka does not promise
        to keep what was committed through that double failure (KIP-966). With ``held``
        the crash counts only when its leader's log held ``offset`` then (note_crash)."""
        first = min(((e, entry[3], entry) for (t, q, e), entries in self.leaderships.items()
                     if t == topic and q == p and e >= after[0]
                     for entry in entries
                     if (e > after[0] or entry[:2] != after[1:]) and entry[2] <= offset
                     and entry[3] > (since_ms if leaders_from_ms is None else leaders_from_ms)),
                    default=None)
        if first is None:
            return False
        broker_id, _life, _start, seen_ms = first[2]
        if held:
            return any(since_ms < t <= seen_ms and ends.get((topic, p), -1) > offset
                       for t, ends in self.ends_at_crash.get(broker_id, []))
        if any(since_ms < t <= seen_ms for t in self.crash_times_ms.get(broker_id, [])):
            return True
        # its fsync of this very log failed while it led an ISR of itself alone: nobody else
        # had what it lost (a follower, or a leader with another ISR member, that failed
        # must not lead without it: no excuse)
        return any(since_ms < f.at_ms <= seen_ms and f.alone
                   for f in self.storage_failures.get((broker_id, topic, p), []))

    def _lost_to_own_storage_failure(self, broker_id: int, topic: str, p: int,
                                     offset: int, since_ms: float) -> bool:
        """Whether ``broker_id``'s log of ``topic-p`` lacks a record made after ``since_ms``
        because its own fsync of that log failed after that and dropped the unsynced tail
        (the fault itself), and nothing since made another replica's log its: the
        partition is offline (no leader in ZooKeeper) with the broker in its ISR, so no
        election or truncation can have taken the record from it. (Seed 6, eio, crash and
        expire: broker 3 crashed with audit-0's offsets 20-22 unflushed, then broker 2's
        fsync failed with them unsynced; both copies lost to the disk, the partition kept
        offline rather than lead on without them.) Only an offset at or above the log's
        recovery point when the fsync failed: below it was synced, and no fsync loses it."""
        if not any(f.at_ms > since_ms and offset >= f.durable_end
                   for f in self.storage_failures.get((broker_id, topic, p), [])):
            return False  # no failure after it, or the record was synced before it
        node = self.cluster.zk.nodes.get(znodes.partition_state_path(TopicPartition(topic, p)))
        if node is None:
            return False
        state = znodes.decode_partition_state(TopicPartition(topic, p), node.data, node.version)
        return state.leader < 0 and broker_id in state.isr

    def note_ack(self, ack: Ack) -> None:
        """An acknowledgement was just recorded: date it with the leader epoch its leader wrote
        the batch in, from that leader's epoch cache when the answer arrives, or, when that
        leader crashed after it answered, from its cache at the crash (note_crash): the last
        moment it was read, and still after the answer left. A check every
        ``check_every_ms`` may not have seen that epoch yet: a leader can move to a new epoch
        (the controller bumps it when a follower leaves the ISR) a few milliseconds before
        it acknowledges. Left unknown (-1) when the leader no longer holds the batch."""
        broker = self.cluster.brokers.get(ack.broker_id)
        if broker is None:
            return
        held: tuple[int, int, LeaderEpochCache] | None = None
        if broker.lives == ack.broker_life and broker.state == "up":
            for shard in broker.shards():
                state = shard.partitions.get((ack.topic, ack.partition))
                if state is not None:
                    log = state.log
                    held = (log.log_start_offset, log.log_end_offset, log.epoch_cache)
                    break
        else:
            held = self.logs_at_crash.get((ack.broker_id, ack.broker_life), {}).get(
                (ack.topic, ack.partition))
            if held is not None:
                self.acks_dated_at_crash += 1
        if held is None:
            return
        start, end, cache = held
        if start <= ack.base_offset and ack.base_offset + len(ack.values) <= end:
            ack.leader_epoch = cache.epoch_for_offset(ack.base_offset)

    def _ack_epoch(self, ack: Ack) -> int:
        """The leader epoch the acknowledged record was written in: the one dated when it was
        acknowledged (note_ack), else the latest a check saw its broker (in that life) lead
        its partition in before the answer, or, when the first check of that leadership came
        after the answer, the first it led (-1: none seen)."""
        if ack.leader_epoch >= 0:
            return ack.leader_epoch
        ack_ms = ack.time_ns / 1_000_000
        led = sorted((seen_ms, e) for (t, q, e), entries in self.leaderships.items()
                     if t == ack.topic and q == ack.partition
                     for b, lf, _start, seen_ms in entries
                     if b == ack.broker_id and lf == ack.broker_life)
        before = [e for seen_ms, e in led if seen_ms <= ack_ms]
        if before:
            return max(before)
        return led[0][1] if led else -1

    def _written_in(self, topic: str, p: int, epoch: int, broker_id: int,
                    life: int) -> tuple[int, int, int]:
        """The leadership a fetched record was written in, as ``_crash_election`` takes it
        (epoch, leader, its life): the record's batch carries the epoch; its leader is the
        broker it was fetched from when that broker (in that life) was seen leading the
        epoch, else the first leader seen in it (-1, -1: none seen; (-1, -1, -1): the batch
        carried no epoch)."""
        if epoch < 0:
            return -1, -1, -1
        leaders = [(b, lf) for b, lf, _start, _seen in self.leaderships.get((topic, p, epoch), [])]
        if (broker_id, life) in leaders:
            return epoch, broker_id, life
        return (epoch, *leaders[0]) if leaders else (epoch, -1, -1)

    def _actor_health(self) -> None:
        world = self.cluster.world
        if world.failures:
            raise Violation("no actor loop fails", world.failures[0])
        # a shard whose flush failed restarts (it reopens its logs): a crash each, counted
        # by the restarts supervision made for a FlushFailedError
        restarts = {b.node.name: sum(n for a in b.node.actors.values()
                                     for cause, n in a.restarts_by_cause.items()
                                     if issubclass(cause, FlushFailedError))
                    for b in self.cluster.brokers.values() if b.node is not None}
        for node in world.nodes.values():
            if (node.metrics.get("actor_crashes") or 0) > restarts.get(node.name, 0):
                raise Violation("no actor crashes",
                                f"an actor of {node.name} crashed (see the log for its traceback)")
        if self.history.problems:
            raise Violation(*self.history.problems[0])

    # ------------------------------------------------------------------- final
    def check_final(self) -> None:
        """Everything, once the run settled."""
        self.check()
        self.check_settled_purgatory()
        self.check_data()
        self.check_replicas_agree()

    def check_settled_purgatory(self) -> None:
        cluster = self.cluster
        now_ms = self._now_ms()
        for key, answers in sorted(self.parked.items()):
            node_name, incarnation, what, req_id = key
            node = cluster.world.nodes.get(node_name)
            due = self.deadlines_ms.get(key, 0) + EXPIRY_GRACE_MS <= now_ms
            if answers == 0 and due and node is not None and node.incarnation == incarnation \
                    and not node.crashed:
                raise Violation("purgatory answers exactly once",
                                f"delayed {what} {req_id} on {node_name} never answered")

    def check_data(self) -> None:
        cluster = self.cluster
        logs = self._logs()
        hws = self._high_watermarks()
        for ack in self.history.acks:
            leader = self.zk_leader_epochs.get(TopicPartition(ack.topic, ack.partition))
            final = logs.get((leader[1], ack.topic, ack.partition)) if leader else None
            if ack.acks != -1:
                # acks=1: Kafka keeps the record only if a follower fetched it before
                # leadership moved; a loss is counted, not a violation
                if final is not None:
                    self.counted["acks1_lost"] += sum(
                        1 for i, value in enumerate(ack.values)
                        if _value(final.get(ack.base_offset + i)) != value)
                continue
            for i, value in enumerate(ack.values):
                offset = ack.base_offset + i
                holders = [(b, records) for (b, t, q), records in sorted(logs.items())
                           if t == ack.topic and q == ack.partition
                           and (records is final or offset < hws[(b, t, q)])]
                for broker_id, records in holders:
                    found = records.get(offset)
                    if found is not None and found[2] == value:
                        continue
                    if self._crash_election(
                            ack.topic, ack.partition, offset,
                            self.history.created_ms.get(value, 0.0),
                            after=(self._ack_epoch(ack), ack.broker_id, ack.broker_life)):
                        self.counted["acks_all_lost_to_crash_election"] += 1
                        break
                    if records is not final and self._lost_to_crash_election(
                            ack.topic, ack.partition, offset):
                        # a follower that has not fetched since a crash election: what it
                        # holds there (below its own, older, high watermark) is what that
                        # election lost, not this record's place
                        self.counted["replicas_differ_after_crash_election"] += 1
                        continue
                    raise Violation(
                        "acknowledged records are readable",
                        f"{ack.topic}-{ack.partition} offset {offset} on broker {broker_id} "
                        f"holds {found[2] if found else None!r}, acknowledged (acks=all, by "
                        f"broker {ack.broker_id}) as {value!r}")
        for (topic, p), consumed in sorted(self.history.consumed.items()):
            for offset, fetched, broker_id, life, epoch in consumed:
                broker = cluster.brokers[broker_id]
                kept = logs.get((broker_id, topic, p))
                if broker.lives != life or broker.state != "up" or kept is None:
                    continue
                found = kept.get(offset)
                if found is None and fetched is not None and self._lost_to_own_storage_failure(
                        broker_id, topic, p, offset, self.history.created_ms.get(fetched, 0.0)):
                    self.counted["fetched_lost_to_storage_failure"] += 1
                    continue
                if found is None or found[2] != fetched:
                    if fetched is not None and self._crash_election(
                            topic, p, offset, self.history.created_ms.get(fetched, 0.0),
                            after=self._written_in(topic, p, epoch, broker_id, life)):
                        self.counted["fetched_lost_to_crash_election"] += 1
                        continue
                    raise Violation(
                        "fetched records are the log's",
                        f"{topic}-{p} offset {offset} fetched from broker {broker_id} as "
                        f"{fetched!r}; its log holds {found[2] if found else None!r}")
        for (broker_id, topic, p), records in sorted(logs.items()):
            seen: set[tuple[int, int]] = set()
            last_seq: dict[int, int] = {}
            for offset in sorted(records):
                pid, seq, stored = records[offset]
                if pid < 0:
                    continue
                if (pid, seq) in seen:
                    raise Violation("no record duplicated",
                                    f"{topic}-{p} on broker {broker_id} holds producer {pid} "
                                    f"sequence {seq} twice (offset {offset}, {stored!r})")
                seen.add((pid, seq))
                if seq <= last_seq.get(pid, -1):
                    raise Violation("per-partition order",
                                    f"{topic}-{p} on broker {broker_id}: producer {pid} "
                                    f"sequence {seq} at offset {offset} after sequence "
                                    f"{last_seq[pid]}")
                last_seq[pid] = seq

    def check_live(self) -> None:
        cluster = self.cluster
        active = [b for b in sorted(cluster.brokers)
                  if (c := cluster.controller_actor(b)) is not None and c.driver.active]
        if not active:
            raise Violation("a controller is elected", "no active controller after the run settled")
        missing = sorted(t for t in self.topics if t not in self.history.topics_created)
        if missing:
            raise Violation("topics are created", f"{missing} not created after the run settled")
        states = dict(self._zk_partition_states(cluster.zk))
        controller = cluster.controller_actor(active[0])
        assert controller is not None
        failed_known = controller.driver.core.failed_replicas
        for topic, count in sorted(self.topics.items()):
            for p in range(count):
                tp = TopicPartition(topic, p)
                leader = self.zk_leader_epochs.get(tp)
                state = states.get(tp)
                if state is not None and state.leader < 0 and state.isr and all(
                        (r, topic, p) in self.storage_failures
                        and (r, topic, p) not in self.storage_healed
                        and r in failed_known.get(tp, {}) for r in state.isr):
                    # Offline, as Kafka leaves it: the ISR's only members lost records to a
                    # failed fsync (and did not lead alone then: a replica out of the ISR
                    # may have what they lost); only an unclean election, or an operator,
                    # brings it back. Electing them would truncate acknowledged records away
                    self.counted["offline_after_storage_failure"] += 1
                    continue
                if leader is None or leader[1] not in cluster.brokers or not cluster.up(leader[1]):
                    raise Violation("every partition has a live leader",
                                    f"{topic}-{p} has leader {leader[1] if leader else None} "
                                    f"after the run settled")

    def check_replicas_back(self) -> None:
        """Once settled, every live replica of a partition is back in its ISR, in ZooKeeper
        and at its leader: a follower fetches again after any fault was healed."""
        cluster = self.cluster
        for tp, state in self._zk_partition_states(cluster.zk):
            topic, p = tp.topic, tp.partition
            leader = cluster.brokers.get(state.leader)
            if leader is None or leader.state != "up":
                continue
            for shard in leader.shards():
                held = shard.partitions.get((topic, p))
                if held is None:
                    continue
                out = sorted(r for r in held.replicas
                             if cluster.up(r) and (r not in state.isr or r not in held.isr))
                if out:
                    raise Violation("every live replica is back in the ISR",
                                    f"{topic}-{p}: live replicas {out} out of the ISR "
                                    f"{sorted(state.isr)} (leader {state.leader}: "
                                    f"{sorted(held.isr)}) after the run settled")

    def check_reassignments(self) -> None:
        """Once settled, a partition moved ends with the replica set its answers said, its
        leader and ISR within it, and no reassignment left in its znode."""
        cluster = self.cluster
        last = {(m.topic, m.partition): m for m in self.history.reassignments}
        for _tp, move in sorted(last.items()):   # a later move of a partition starts where
            allowed = move.outcomes()              # the one before ended
            if not allowed:
                continue
            tp = TopicPartition(move.topic, move.partition)
            node = cluster.zk.nodes.get(znodes.topic_path(move.topic))
            assert node is not None, f"no znode for topic {move.topic}"
            assignment = znodes.decode_topic_assignment(move.topic, node.data).\
                replica_assignment(move.partition)
            said = f"{tp}: {'; '.join(move.steps)}"
            if assignment.being_reassigned:
                raise Violation("reassignments complete",
                                f"{tp} still moving after the run settled: replicas "
                                f"{list(assignment.replicas)}, adding "
                                f"{list(assignment.adding)}, removing "
                                f"{list(assignment.removing)} ({said})")
            back_further = (move.cancelled or move.unknown) and any(
                set(assignment.replicas) == set(e) for e in move.earlier)
            if assignment.replicas not in allowed and not back_further:
                raise Violation("reassignments complete",
                                f"{tp} ends with replicas {list(assignment.replicas)}, not "
                                f"{' or '.join(str(list(a)) for a in sorted(allowed))} "
                                f"({said})")
            states = dict(self._zk_partition_states(cluster.zk))
            state = states.get(tp)
            if state is not None and (state.leader not in assignment.replicas
                                      or not set(state.isr) <= set(assignment.replicas)):
                raise Violation("reassignments complete",
                                f"{tp} led by {state.leader} with ISR {sorted(state.isr)} "
                                f"outside its replicas {list(assignment.replicas)} ({said})")
            kept = 0
            for broker_id, broker in sorted(cluster.brokers.items()):
                if broker_id in assignment.replicas or broker.state != "up":
                    continue
                kept += sum(1 for shard in broker.shards()
                            if (move.topic, move.partition) in shard.partitions)
            self.counted["removed_replicas_kept"] = \
                self.counted.get("removed_replicas_kept", 0) + kept

    def _note_healed(self, tp: TopicPartition, state: Any) -> None:
        """A replica whose storage failed is healed once seen in the ISR in ZooKeeper led
        by another broker, at a leader epoch after its failure's, with its shard's failed
        mark gone (it took a role, caught up, and its leader took it back)."""
        if state.leader < 0:
            return
        for r in state.isr:
            key = (r, tp.topic, tp.partition)
            failures = self.storage_failures.get(key)
            if r == state.leader or not failures or key in self.storage_healed \
                    or state.leader_epoch <= failures[-1].leader_epoch:
                continue
            broker = self.cluster.brokers.get(r)
            if broker is None or broker.state != "up":
                continue
            for shard in broker.shards():
                hosted = shard.hosted.get((tp.topic, tp.partition))
                if hosted is not None and hosted.storage_failed is None \
                        and (tp.topic, tp.partition) in shard.partitions:
                    self.storage_healed.add(key)

    def _zk_partition_states(self, zk: Any) -> Iterator[tuple[TopicPartition, Any]]:
        """The run's partitions that ZooKeeper holds a state for, decoded, in topic order."""
        for topic, count in sorted(self.topics.items()):
            for p in range(count):
                tp = TopicPartition(topic, p)
                node = zk.nodes.get(znodes.partition_state_path(tp))
                if node is not None:
                    yield tp, znodes.decode_partition_state(tp, node.data, node.version)

    def check_replicas_agree(self) -> None:
        """Once settled, two live replicas of a partition hold the same records below the
        lower of their high watermarks."""
        logs = self._logs()
        hws = self._high_watermarks()
        by_tp: dict[tuple[str, int], list[int]] = {}
        for broker_id, topic, p in sorted(logs):
            by_tp.setdefault((topic, p), []).append(broker_id)
        for (topic, p), brokers in sorted(by_tp.items()):
            for i, a in enumerate(brokers):
                for b in brokers[i + 1:]:
                    below = min(hws[(a, topic, p)], hws[(b, topic, p)])
                    log_a, log_b = logs[(a, topic, p)], logs[(b, topic, p)]
                    for offset in sorted(set(log_a) | set(log_b)):
                        if offset >= below:
                            break
                        if log_a.get(offset) != log_b.get(offset):
                            if self._lost_to_crash_election(topic, p, offset):
                                # one of them has not fetched from the crash-elected leader
                                # since (it still holds what that leader lost)
                                self.counted["replicas_differ_after_crash_election"] += 1
                                break
                            raise Violation(
                                "replicas agree below the high watermark",
                                f"{topic}-{p} offset {offset} (below high watermark {below}): "
                                f"broker {a} holds {_value(log_a.get(offset))!r}, broker {b} "
                                f"{_value(log_b.get(offset))!r}")

    def _high_watermarks(self) -> dict[tuple[int, str, int], int]:
        out: dict[tuple[int, str, int], int] = {}
        for broker_id, broker in sorted(self.cluster.brokers.items()):
            if broker.state != "up":
                continue
            for shard in broker.shards():
                for (topic, p), state in sorted(shard.partitions.items()):
                    if topic in self.topics:
                        out[(broker_id, topic, p)] = state.log.high_watermark
        return out

    def _logs(self) -> dict[tuple[int, str, int], dict[int, tuple[int, int, bytes | None]]]:
        """offset -> (producer id, sequence, value) of every record in every live log."""
        out: dict[tuple[int, str, int], dict[int, tuple[int, int, bytes | None]]] = {}
        for broker_id, broker in sorted(self.cluster.brokers.items()):
            if broker.state != "up":
                continue
            for shard in broker.shards():
                for (topic, p), state in sorted(shard.partitions.items()):
                    if topic not in self.topics:
                        continue
                    out[(broker_id, topic, p)] = read_log(state.log)
        return out


def _value(record: tuple[int, int, bytes | None] | None) -> bytes | None:
    return record[2] if record is not None else None


def read_log(log: Any) -> dict[int, tuple[int, int, bytes | None]]:
    records: dict[int, tuple[int, int, bytes | None]] = {}
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        info = log.read(offset, 1 << 20)
        data = bytes(info.records)
        if not data:
            break
        batch = batch_records(data)
        if not batch:
            break
        for record_offset, pid, seq, value in batch:
            records[record_offset] = (pid, seq, value)
        offset = batch[-1][0] + 1
    return records

