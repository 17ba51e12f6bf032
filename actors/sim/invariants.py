"""Invariants of a simulated run, checked while it runs and at its end.

Control plane (checked every few hundred simulated milliseconds):

- at most one broker is ever the active controller of a controller epoch, and
  ``/controller_epoch`` never goes back;
- a partition's leader epoch in ZooKeeper never goes back, and one leader
  epoch names one leader;
- on every node, a partition's leader epoch and high watermark never go back
  within one life of the node, and no two nodes lead one partition in the same
  leader epoch.

Purgatory (checked on every delivery): a delayed produce or fetch that a
handler parked (WatchProduce, WatchFetch) is answered (ProduceReady,
FetchReady) at most once, and, once the run settled, exactly once unless its
node died.

Data (at the end, on the logs themselves): a record acknowledged (acks=1)
by a leader that has not crashed since is in that leader's log at the offset
it was acknowledged at; a record the consumer fetched from a broker that has
not crashed since is that broker's record at that offset; no log holds one
producer's sequence twice; one producer's sequences grow with the offsets of
a log.

Liveness (at the end, after every fault was healed and the run settled): a
controller is active and every partition of the run's topics has a live leader.

Clients (as they go): a producer id is handed out once; a group member's
generations only grow while one coordinator serves the group without a break;
an offset fetched as committed is one a member committed.

Also a violation: an actor that crashed (its supervision restarted it) or an
exception that escaped an actor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actors.core.cluster_model import TopicPartition
from actors.metadata import znodes
from actors.runtime.actor import Actor
from actors.sim.clients import History, batch_records
from actors.sim.node import SimNode
from wire import registry
from wire.broker_messages import FetchReady, ProduceReady, WatchFetch, WatchProduce

if TYPE_CHECKING:
    from actors.sim.cluster import SimCluster

_WATCH_FETCH = registry.type_id_of(WatchFetch)
_WATCH_PRODUCE = registry.type_id_of(WatchProduce)
_FETCH_READY = registry.type_id_of(FetchReady)
_PRODUCE_READY = registry.type_id_of(ProduceReady)


class Violation(Exception):
    """An invariant does not hold; the message says which and where."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


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
    parked: dict[tuple[str, int, str, int], int] = field(default_factory=dict)
    checks: int = 0

    # --------------------------------------------------------------- purgatory
    def observe(self, node: SimNode, actor: Actor, s_node: str, s_name: str,
                entries: list[Any]) -> None:
        for entry in entries:
            type_id = entry[0]
            if type_id == _WATCH_FETCH:
                self._park(node, s_name, entry[6][0], "fetch")
            elif type_id == _WATCH_PRODUCE:
                body = entry[6]
                self._park(node, body[1], body[0], "produce")
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

    def _park(self, node: SimNode, handler: str, req_id: int, kind: str) -> None:
        self.parked[(node.name, node.incarnation, f"{handler}/{kind}", req_id)] = 0

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
        for topic, count in self.topics.items():
            for p in range(count):
                tp = TopicPartition(topic, p)
                state_node = zk.nodes.get(znodes.partition_state_path(tp))
                if state_node is None:
                    continue
                state = znodes.decode_partition_state(tp, state_node.data, state_node.version)
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
        leaders: dict[tuple[str, int, int], int] = {}
        for broker_id, broker in sorted(cluster.brokers.items()):
            if broker.state != "up":
                continue
            for shard in broker.shards():
                for (topic, p), state in sorted(shard.partitions.items()):
                    key = (broker_id, broker.lives, topic, p)
                    before_epoch = self.node_leader_epochs.get(key, -1)
                    if state.leader_epoch < before_epoch:
                        raise Violation("leader epochs only grow",
                                        f"{topic}-{p} on broker {broker_id} went from leader "
                                        f"epoch {before_epoch} to {state.leader_epoch}")
                    self.node_leader_epochs[key] = state.leader_epoch
                    hw = state.log.high_watermark
                    before_hw = self.node_high_watermarks.get(key, -1)
                    if hw < before_hw:
                        raise Violation("the high watermark never goes back",
                                        f"{topic}-{p} on broker {broker_id} went from high "
                                        f"watermark {before_hw} to {hw}")
                    self.node_high_watermarks[key] = hw
                    if state.leader_id == broker_id and state.leader_epoch >= 0:
                        other = leaders.setdefault((topic, p, state.leader_epoch), broker_id)
                        if other != broker_id:
                            raise Violation("one leader per leader epoch",
                                            f"brokers {other} and {broker_id} both lead "
                                            f"{topic}-{p} in leader epoch {state.leader_epoch}")
        self._actor_health()

    def _actor_health(self) -> None:
        world = self.cluster.world
        if world.failures:
            raise Violation("no actor loop fails", world.failures[0])
        for node in world.nodes.values():
            if node.metrics.get("actor_crashes"):
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

    def check_settled_purgatory(self) -> None:
        cluster = self.cluster
        for key, answers in sorted(self.parked.items()):
            node_name, incarnation, what, req_id = key
            node = cluster.world.nodes.get(node_name)
            if answers == 0 and node is not None and node.incarnation == incarnation \
                    and not node.crashed:
                raise Violation("purgatory answers exactly once",
                                f"delayed {what} {req_id} on {node_name} never answered")

    def check_data(self) -> None:
        cluster = self.cluster
        logs = self._logs()
        for ack in self.history.acks:
            broker = cluster.brokers[ack.broker_id]
            if broker.lives != ack.broker_life or broker.state != "up":
                continue  # the leader crashed since: acks=1 promised nothing more
            records = logs.get((ack.broker_id, ack.topic, ack.partition))
            if records is None:
                continue  # the partition left that broker (deleted, reassigned)
            for i, value in enumerate(ack.values):
                found = records.get(ack.base_offset + i)
                if found is None or found[2] != value:
                    raise Violation(
                        "acknowledged records are readable",
                        f"{ack.topic}-{ack.partition} offset {ack.base_offset + i} on broker "
                        f"{ack.broker_id} holds {found[2] if found else None!r}, acknowledged "
                        f"as {value!r}")
        for (topic, p), consumed in sorted(self.history.consumed.items()):
            for offset, fetched, broker_id, life in consumed:
                broker = cluster.brokers[broker_id]
                records = logs.get((broker_id, topic, p))
                if broker.lives != life or broker.state != "up" or records is None:
                    continue
                found = records.get(offset)
                if found is None or found[2] != fetched:
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
        for topic, count in sorted(self.topics.items()):
            for p in range(count):
                leader = self.zk_leader_epochs.get(TopicPartition(topic, p))
                if leader is None or not cluster.up(leader[1]):
                    raise Violation("every partition has a live leader",
                                    f"{topic}-{p} has leader {leader[1] if leader else None} "
                                    f"after the run settled")

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
