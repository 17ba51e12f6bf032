"""The invariant checker catches what it claims to: each check against a state broken by hand."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.sim.disk import SimDisk
from actors.sim.invariants import Violation
from actors.sim.run import SimOptions, _Run


@pytest.fixture
def run(tmp_path: Path) -> Iterator[_Run]:
    with SimDisk(tmp_path, random.Random(1)) as disk:
        sim = _Run(5, SimOptions(), tmp_path, disk)
        sim.start()
        sim.world.run_for_ms(8_000)
        sim.checker.check()  # holds before anything is broken
        yield sim
        sim.close()


def leading_state(run: _Run) -> tuple[int, object]:
    for broker_id, broker in sorted(run.cluster.brokers.items()):
        for shard in broker.shards():
            for (topic, _p), state in sorted(shard.partitions.items()):
                if state.leader_id == broker_id and topic == "events":
                    return broker_id, state
    raise AssertionError("no leader of events")


def test_a_leader_epoch_going_back_is_caught(run: _Run) -> None:
    _broker, state = leading_state(run)
    state.leader_epoch -= 1  # type: ignore[attr-defined]
    with pytest.raises(Violation, match="leader epochs only grow"):
        run.checker.check()


def test_two_leaders_in_one_leader_epoch_are_caught(run: _Run) -> None:
    broker_id, state = leading_state(run)
    for other_id, broker in sorted(run.cluster.brokers.items()):
        if other_id == broker_id:
            continue
        for shard in broker.shards():
            for key, other in shard.partitions.items():
                if key == (state.log.topic, state.log.partition):  # type: ignore[attr-defined]
                    other.leader_id = other_id
                    other.leader_epoch = state.leader_epoch  # type: ignore[attr-defined]
                    with pytest.raises(Violation, match="one leader per leader epoch"):
                        run.checker.check()
                    return
    raise AssertionError("no follower replica found")


def test_a_second_active_controller_in_one_epoch_is_caught(run: _Run) -> None:
    active = [b for b in run.cluster.brokers
              if (c := run.cluster.controller_actor(b)) is not None and c.driver.active]
    assert len(active) == 1
    fence = run.cluster.controller_actor(active[0]).driver.fence  # type: ignore[union-attr]
    other = next(b for b in run.cluster.brokers if b != active[0])
    run.cluster.controller_actor(other).driver.fence = fence  # type: ignore[union-attr]
    with pytest.raises(Violation, match="one active controller per epoch"):
        run.checker.check()


def test_an_acknowledged_record_missing_from_its_leader_is_caught(run: _Run) -> None:
    run.checker.check_data()
    assert run.history.acks
    ack = run.history.acks[0]
    ack.values[0] = b"never written"
    with pytest.raises(Violation, match="acknowledged records are readable"):
        run.checker.check_data()


def test_an_actor_crash_is_caught(run: _Run) -> None:
    node = run.world.nodes["node-1"]
    node.metrics.incr("actor_crashes")
    with pytest.raises(Violation, match="no actor crashes"):
        run.checker.check()
