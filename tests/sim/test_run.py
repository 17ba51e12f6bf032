"""Whole runs: the real control plane of a 3-node cluster under faults, replay, plants."""

from __future__ import annotations

import pytest

from actors.sim.plants import PLANTS, PlantUnavailable, planted
from actors.sim.run import SimOptions, run_seed, trace_bytes

# Seeds that once failed, kept so the bug stays fixed: (seed, steps). A seed replays its
# bug only while the workload draws the same numbers; when the workload changes, the bug
# moves to a fixed scenario in test_regressions.py (as seed 3039's did: two nodes' first
# InitProducerId in one millisecond handed out one producer id twice).
REGRESSION_SEEDS: list[tuple[int, int]] = []
CI_SEEDS = range(1000, 1100)   # a fixed set, run every time (about a minute alone)


SIM_FOUND = pytest.mark.xfail(strict=False, reason=(
    "since replication merged, the simulator reports a delayed fetch never answered "
    "(purgatory answers exactly once) on seeds 1 and 1000: not yet told apart from an "
    "invariant that ignores replica fetches of a crashed or paused node"))


@SIM_FOUND
def test_a_seed_elects_a_controller_creates_topics_and_acknowledges_records() -> None:
    result, world = run_seed(1, SimOptions(steps=4, keep_trace=True))
    assert result.ok, (result.invariant, result.detail, result.tail[-20:])
    assert result.acks > 50 and result.consumed > 0
    assert result.stats["checks"] > 100
    trace = "\n".join(world.trace)
    for what in ("StartController", "LeaderAndIsr", "UpdateMetadata", "CreateTopics",
                 "KafkaRequest", "Append", "WatchFetch", "FetchReady"):
        assert what in trace, what
    assert len(result.faults) == 4


def test_the_same_seed_replays_byte_for_byte() -> None:
    options = SimOptions(steps=6, keep_trace=True)
    first, world_1 = run_seed(77, options)
    second, world_2 = run_seed(77, options)
    _other, world_3 = run_seed(78, options)
    assert trace_bytes(world_1) == trace_bytes(world_2)
    assert first.digest == second.digest and first.acks == second.acks
    assert first.faults == second.faults
    assert trace_bytes(world_1) != trace_bytes(world_3)


@SIM_FOUND
@pytest.mark.parametrize(("plant", "invariant"), [
    ("double-complete", "purgatory answers exactly once"),
    ("no-idempotence", "no record duplicated"),
])
def test_a_planted_bug_is_found_within_the_budget(plant: str, invariant: str) -> None:
    options = SimOptions(steps=8, plant=plant)
    found = None
    for seed in range(1, 31):
        result, _world = run_seed(seed, options)
        if not result.ok:
            found = result
            break
    assert found is not None, f"{plant} not found in 30 seeds"
    assert found.invariant == invariant, (found.invariant, found.detail)


def test_a_plant_is_undone_after_its_run_and_replication_plants_say_what_they_need() -> None:
    from actors.core.purgatory_core import PurgatoryCore
    before = PurgatoryCore.__dict__["_expired"]
    with planted("double-complete"):
        assert PurgatoryCore.__dict__["_expired"] is not before
    assert PurgatoryCore.__dict__["_expired"] is before
    for name in ("hw-ignores-isr", "no-epoch-fence", "ack-before-replication",
                 "isr-shrink-unpersisted"):
        assert PLANTS[name].needs
        with pytest.raises(PlantUnavailable, match="replication"), planted(name):
            pass


@pytest.mark.parametrize(("seed", "steps"), REGRESSION_SEEDS)
def test_regression_seeds(seed: int, steps: int) -> None:
    result, _world = run_seed(seed, SimOptions(steps=steps))
    assert result.ok, (seed, result.invariant, result.detail, result.tail[-30:])


@pytest.mark.timeout(900)  # a minute alone; a loaded machine may take many times that
@SIM_FOUND
def test_ci_seeds_hold_every_invariant() -> None:
    failed = []
    for seed in CI_SEEDS:
        result, _world = run_seed(seed, SimOptions(steps=5))
        if not result.ok:
            failed.append((seed, result.invariant, result.detail, result.faults))
            break
    assert not failed, failed


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_more_seeds_with_more_faults_hold_every_invariant() -> None:
    for seed in range(5000, 5050):
        result, _world = run_seed(seed, SimOptions(steps=16))
        assert result.ok, (seed, result.invariant, result.detail, result.faults)
