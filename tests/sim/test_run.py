"""Whole runs: the real control plane of a 3-node cluster under faults, replay, plants."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from actors.sim import run as sim_run
from actors.sim.plants import PLANTS, PlantUnavailable, planted
from actors.sim.run import SimOptions, crc, run_seed, trace_bytes
from actors.sim.world import SimWorld
from wire import registry
from wire.admin_messages import CleanableLogsDone

# Seeds that once failed, kept so the bug stays fixed: (seed, steps). A seed replays its
# bug only while the workload draws the same numbers; when the workload changes, the bug
# moves to a fixed scenario in test_regressions.py (as seed 3039's did: two nodes' first
# InitProducerId in one millisecond handed out one producer id twice).
# Seed 80 (12 steps): an ISR expansion timed out while ZooKeeper was down but was written;
# the leader took it as not made, and acknowledged alone what the follower the controller
# then elected lacked (the high watermark went from 184 to 137).
# Seed 329 (12 steps): that expansion, sent again, and the first send both waited for
# ZooKeeper; the second's write was refused for the version the first had just moved and
# the leader was answered INVALID_UPDATE_VERSION. It passes now because no AlterPartition
# answer ends a leadership: the leader holds the change and goes on leading.
REGRESSION_SEEDS: list[tuple[int, int]] = [(2094, 5), (80, 12), (329, 12)]
# A fixed set, run every time, sized to the suite's budget: 20 seeds until the runs' logs
# moved to /dev/shm and the kernel loop was trimmed (`flock /tmp/bench.lock actorlog sim
# --seeds 20 --start 1000 --steps 5`, 3 runs each, interleaved on a shared machine: 12.3/
# 14.9/16.1 seeds a minute before, 14.0/19.4/26.6 after), so 24 now at about the old wall
# time; `actorlog sim --seeds 40 --start 1000 --steps 5` runs more (1000-1029 pass). CI runs
# 300 more with these options after the suite, outside it: .ci/sim-sweep (seeds 2000-2299,
# `--jobs auto`); a seed it finds failing comes here once fixed. With the sweep in CI, the
# suite's own set went back to 12 (its seconds went to the --jobs tests and the longer
# settle); 1000-1023 pass.
CI_SEEDS = range(1000, 1012)
# The fault mix of seeds 3 and 5: leadership moved by crashes and session expiries (a crashed
# broker stays registered until its session expires), frames dropped at a gateway.
GATEWAY_CRASH_EXPIRE = SimOptions(steps=12, faults=("gateway", "crash", "expire"),
                                  acks_all_producers=2)
# A failing disk (the eio fault, struck only when named): the next fsync of a partition log
# on a node fails with EIO and the bytes it had not synced are gone. The shard restarted and
# reopened the log short, and its replica came back with the role it had: a leader at the
# same leader epoch, whose followers then truncated to it (before the failed replica took no
# role in the ISR until the controller elected without it, 11 of seeds 1-12 broke an
# invariant with EIO alone: 'the high watermark never goes back' on the followers, 'fetched
# records are the log's'; 7 of 12 with crashes and session expiries too). Seeds 1-40 with
# EIO, and 1-40 with crashes and expiries too, pass now.
EIO = SimOptions(steps=4, faults=("eio",), acks_all_producers=2)
EIO_CRASH_EXPIRE = SimOptions(steps=8, faults=("eio", "crash", "expire"), acks_all_producers=2)
# Seed 32 with EIO alone passed, but lost 36 fetched records, excused as a crash election:
# a follower's restored role said it was out of the ISR (the leader had taken it back since,
# unknown to it), so it took the role and was not reported; still in the ISR with its short
# log, it was elected when the leader's disk failed. Restored roles are refused now, and with
# EIO alone no loss is excused (no ISR was down to one replica).
# Seed 3 (EIO, crashes, expiries): broker 2's fsync failed leading events-0 with ISR
# [1, 2, 3]; 1 and 3 expired and crashed before the report was handled, leaving ISR [2];
# led on (as before), 2's short log would truncate what 1 or 3 may hold: it stays offline,
# as in Kafka. Seed 6: audit-0's 20-22 were lost by both replicas' disks (3's crash, 2's
# failed fsync), the partition offline. Seed 22: broker 1 led audit-1 alone when its fsync
# failed and led on, the loss excused only because it led alone then.
EIO_RUNS: list[tuple[int, SimOptions]] = [(2, EIO), (3, EIO), (8, EIO), (32, EIO),
                                          (3, EIO_CRASH_EXPIRE), (6, EIO_CRASH_EXPIRE),
                                          (7, EIO_CRASH_EXPIRE), (22, EIO_CRASH_EXPIRE)]
# A partition moved to another replica set during the faults (and at times the move
# cancelled): the run ends with the set the answers said.
REASSIGN = SimOptions(steps=10, reassign=1)
# Fixed (in the sim's workload): seed 559 with REASSIGN_5, 'reassignments complete':
# events-0 moved [2, 1, 3] -> [4, 3, 2] -> [1, 3, 2] -> [5, 3, 1], each next move asked for
# once the last was answered (written, not complete); the last move's cancel, its answers
# lost, ended with [3, 2, 4]: a cancel goes back to the replicas before the first move still
# in progress (Kafka's originReplicas), [4, 3, 2] here, which the check did not allow.
REASSIGN_5 = SimOptions(nodes=5, steps=10, reassign=3, acks_all_producers=2)
REASSIGN_3 = SimOptions(steps=10, reassign=3)
# Seeds that once failed under options of their own: (seed, options); see below for each.
REGRESSION_RUNS: list[tuple[int, SimOptions]] = [(5, GATEWAY_CRASH_EXPIRE),
                                                  (20, GATEWAY_CRASH_EXPIRE),
                                                  (42, GATEWAY_CRASH_EXPIRE),
                                                  (559, REASSIGN_5),
                                                  (110, REASSIGN_3)]


# Settled findings (see actors/sim/invariants.py): seeds 1001, 5000 and 5005 lost acks=1
# records when leadership moved (counted as acks1_lost, not a violation); seeds 5002, 5003,
# 1062 and 1069 lost committed records to a crash election (a replica that lost its
# unflushed tail at a crash was elected from the ISR), which Kafka does not survive either.
#
# seed 3, SimOptions(steps=12, faults=("gateway", "crash", "expire"), acks_all_producers=2)
# (test_a_leader_restarted_while_no_controller_watched_gets_a_new_leader_epoch) failed
# 'replicas agree below the high watermark' (events-0 offset 102): broker 2 led leader epoch
# 1 from offset 84, crashed (losing part of that epoch), restarted, and was given leader
# epoch 1 again by a controller elected after the restart (its own), which had never seen
# the old registration go, so it wrote other records from 84 in the same epoch; broker 3 had
# fetched the first life's epoch 1 and, the diverging-epoch check comparing epochs, not
# records, kept them below the high watermark. Fixed as Kafka's bounced broker (KIP-380),
# seen through the store: a leader or ISR member whose broker epoch (its registration's
# czxid) is newer than the zxid that wrote the partition's state names a previous life, and
# the broker-change rule re-elects with leader epoch + 1 before any LeaderAndIsr goes out.
#
# Fixed: seed 11, SimOptions(steps=8), 'a controller is elected': after ZooKeeper sessions
# expired during a ZooKeeper outage, broker 3 was elected in its new session (reading a
# ControllerChanged of its old one), then read the old session's expiry and resigned, keeping
# /controller; elect() saw /controller taken and stopped, so no broker was controller again.
# Session notices now name their session and count only for it, and a /controller held by the
# broker's own session makes it act again (tests/sim/test_regressions.py replays the seed).
#
# Fixed (in the checker): seed 5 with seed 3's options (REGRESSION_RUNS), 'acknowledged
# records are readable' (events-1 offset 44 on broker 1 held producer-0's record, not the
# acks=all one broker 1 acknowledged there). Broker 1 moved to leader epoch 1 at offset 44
# (5.25 s: broker 3's session expired, the controller bumped the epoch) and acknowledged the
# record at 5343 ms with the ISR [1, 2, 3] holding it; broker 3 crashed at 6130 ms with its
# recovery point at 42 and lost it; its old session still alive, the controller elected it
# (leader epoch 2, ISR [2, 3]) when broker 1's session expired at 8686 ms; brokers 1 and 2
# (which had fsynced it) crashed in turn, and broker 3 came back leading epoch 3 from offset 42
# with the ISR [3], brokers 1 and 2 truncating to it: the crash election Kafka does not
# survive either. The checker dated the acknowledgement by its checks (every 200 ms), whose
# first sight of epoch 1 came at 5400 ms, after the answer: it took the record for epoch 0's
# and judged broker 1's own epoch 1 as the first leadership after it. Acknowledgements are now
# dated with the epoch the leader's epoch cache gives their offset when the answer arrives.
#
# Fixed (in the checker): seed 20 with the same options (REGRESSION_RUNS), 'fetched records
# are the log's' (audit-0 offset 53, read from broker 2, later another record there). Broker
# 2 led audit-0 (replicas 1, 2) in leader epoch 1 from offset 53 and the consumer read an
# acks=all record there; broker 1, in the ISR, crashed at 13091 ms with its recovery point at
# 44; the controller's preferred-leader rebalance (broker 1 still registered by its old
# session) moved leadership to it, and it came back leading epoch 5 from offset 44 with the
# ISR [1], broker 2 truncating to it: a crash election again (the acknowledgement was
# excused). The check of fetched records judged the rule from the record's making without the
# epoch it was written in, so broker 2's own epoch 1 came first; the consumer now keeps each
# record's batch leader epoch and the rule starts after that leadership. Seed 42 (same
# options) failed the same way: audit-0 offset 54, written by broker 1 in epoch 4 and read
# from it; broker 3 (ISR [1, 3]) crashed with its recovery point at 52, and when broker 1's
# session expired the controller elected broker 3 (still registered by its old session),
# which came back leading from offset 52. Seeds 5-45 with these options pass now.
#
# Fixed: seed 2094, SimOptions(steps=5) (CI's sweep, .ci/sim-sweep), 'every live replica is
# back in the ISR' (audit-0: ZooKeeper's ISR [2], leader 2's [2, 3]). Leader 2 proposed
# shrinking the ISR to [2] at partition epoch 0; the controller wrote it (partition epoch 1)
# but the answer timed out (node-2's gateway dropping frames, its wall clock stepped); the
# leader proposed the same ISR again at partition epoch 0, was refused INVALID_UPDATE_VERSION
# and stopped changing its ISR until a LeaderAndIsr, which an ISR change never sends: replica
# 3 caught up but never rejoined the ISR in ZooKeeper (ineligible for election). The
# controller now answers a stale partition epoch that asks for the ISR the partition already
# has with the current state (Kafka's equalsAllowStalePartitionEpoch).
#
# Fixed: seed 110 with REASSIGN_3 (REGRESSION_RUNS), 'every live replica is back in the
# ISR' (events-0: broker 2 out of the ISR [1, 3] at the end). Broker 2 restarted and waited
# for its old session to expire (30 s simulated); registered again, it was given its role
# and sent its first ReplicaFetch to leader 1 at 30.25 s, before broker 1's controller actor
# had read the new registration (it had forgotten node-2 when the old session went): the
# answer went to dead letters ('no route to actor replica-fetcher-1-0@node-2'; in Kafka it
# goes back on the request's connection, here a reply is routed through the directory), and
# the fetcher waited replica.socket.timeout.ms (30 s) before asking again, past the run's
# end. A fetcher the leader has never answered now asks again after the leader's wait plus
# replica.fetch.backoff.ms, doubling up to replica.socket.timeout.ms
# (actors/core/fetcher_state.py; tests/core/test_fetcher_state.py).
# Since answers wait in their sender until the directory learns the node again as the
# same process (Directory.departed, DEPARTED_HOLD_MS), seed 110 with REASSIGN_3 run in this
# module's context passes with the fetcher's rule taken out, and fails with the rule and
# holding both taken out. The fetcher's rule stays: held answers are not given to a new
# process of the node (a restart), and a run of the same seed from a bare script (other
# imports, another run) fails with the rule taken out.


def test_a_seed_elects_a_controller_creates_topics_and_acknowledges_records() -> None:
    result, world = run_seed(1, SimOptions(steps=3, keep_trace=True))
    assert result.ok, (result.invariant, result.detail, result.tail[-20:])
    assert result.acks > 50 and result.consumed > 0
    assert result.stats["checks"] > 100
    trace = "\n".join(world.trace)
    for what in ("StartController", "LeaderAndIsr", "UpdateMetadata", "CreateTopics",
                 "KafkaRequest", "Append", "WatchFetch", "FetchReady"):
        assert what in trace, what
    assert len(result.faults) == 3


def test_the_same_seed_replays_byte_for_byte() -> None:
    options = SimOptions(steps=3, keep_trace=True)
    first, world_1 = run_seed(77, options)
    second, world_2 = run_seed(77, options)
    _other, world_3 = run_seed(78, options)
    assert trace_bytes(world_1) == trace_bytes(world_2)
    assert first.digest == second.digest and first.acks == second.acks
    assert first.faults == second.faults
    assert trace_bytes(world_1) != trace_bytes(world_3)


def test_a_traced_run_gives_the_process_wide_random_back_as_it_was(tmp_path: Path) -> None:
    """A run with a trace directory seeds the process-wide ``random`` (the trace and span
    ids of ``new_id`` come from it, and must replay); the caller's own sequence goes on
    afterwards as if no run had been."""
    import random

    saved = random.getstate()  # this test's seed is not for the tests after it either
    try:
        random.seed(12345)
        expected = random.Random(12345).random()
        result, _world = run_seed(5, SimOptions(steps=0, settle_ms=1_000, caught_up_ms=None,
                                                produce_after_heal_ms=500),
                                  trace_dir=tmp_path)
        assert result.ok, (result.invariant, result.detail)
        assert list((tmp_path).glob("**/*")), "the run traced nothing"
        assert random.random() == expected
    finally:
        random.setstate(saved)


@pytest.mark.parametrize("sim_dir", ["absolute", "relative", "symlink"])
def test_a_seed_replays_in_whichever_directory_of_the_seed_it_gets(
        sim_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths travel in messages (the log cleaner's rows), and a run takes
    ``seed-<seed>-1`` while another run of its seed (another pytest worker's, another
    process's, one killed that left its directory) holds ``-0``: the trace summed the path
    and changed with it. Here the second run gets ``seed-1-10``, longer than ``seed-1-0``
    (a msgpack string's header counts its length); a relative or symlinked
    ACTORLOG_SIM_DIR is taken out as well."""
    if sim_dir == "relative":
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("ACTORLOG_SIM_DIR", "sims")
        base = tmp_path / "sims"
    elif sim_dir == "symlink":
        (tmp_path / "real").mkdir()
        (tmp_path / "link").symlink_to(tmp_path / "real")
        monkeypatch.setenv("ACTORLOG_SIM_DIR", str(tmp_path / "link"))
        base = tmp_path / "link"
    else:
        monkeypatch.setenv("ACTORLOG_SIM_DIR", str(tmp_path))
        base = tmp_path
    # The run's directory as the brokers name it, seen travelling in the cleaner's rows.
    seen: list[tuple[str, str]] = []

    class _Watched(SimWorld):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            root = str(Path(kwargs["root"]).resolve())
            cleaned = registry.type_id_of(CleanableLogsDone)

            def observe(node: Any, actor: Any, s_node: str, s_name: str,
                        entries: list[Any]) -> None:
                for entry in entries:
                    if entry[0] == cleaned:
                        done = registry.build(CleanableLogsDone, entry[6])
                        seen.extend((root, row.directory) for row in done.rows)
            self.observers.append(observe)

    monkeypatch.setattr(sim_run, "SimWorld", _Watched)
    options = SimOptions(steps=3, keep_trace=True)
    first, world_1 = run_seed(1, options)
    held = base / f"actorlog-sim-{os.getuid()}"
    for n in range(10):   # held by other runs of the seed
        (held / f"seed-1-{n}").mkdir()
    second, world_2 = run_seed(1, options)
    assert not (held / "seed-1-10").exists()   # it ran there, and was removed
    roots = {root for root, _directory in seen}
    assert roots == {str((held / "seed-1-0").resolve()), str((held / "seed-1-10").resolve())}
    assert all(directory.startswith(root + os.sep) for root, directory in seen), seen[:4]
    assert trace_bytes(world_1) == trace_bytes(world_2)
    assert first.digest == second.digest


# A fresh interpreter that imports this checkout (not whichever the venv's editable
# install names: a script run from outside the checkout imports that one) runs the seed.
_FRESH_RUN = """
import sys
from actors.sim.run import SimOptions, crc, run_seed, trace_bytes
result, world = run_seed(82, SimOptions(steps=12, plant="isr-unknown-forgotten",
                                        keep_trace=True))
print(result.ok, result.invariant, crc(trace_bytes(world)))
"""


def test_a_seed_replays_after_other_runs_as_in_a_fresh_process() -> None:
    """The promise a seed makes: the same run, whatever the process did before (another
    seed, another plant, this module's imports) and whatever its string hash seed."""
    run_seed(2, SimOptions(steps=3, plant="hw-ignores-isr"))
    result, world = run_seed(82, SimOptions(steps=12, plant="isr-unknown-forgotten",
                                            keep_trace=True))
    here = f"{result.ok} {result.invariant} {crc(trace_bytes(world))}"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "random"}
    fresh = subprocess.run([sys.executable, "-c", _FRESH_RUN], cwd=root, env=env,
                           capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.strip().splitlines()[-1] == here


# plant -> (the invariant that must catch it, the seeds tried, the run's options). Each
# budget is 30 seeds; it starts at the seed that found the plant when the budget was set
# (scanning from seed 1: the comment says which), so the test runs one seed while the
# workload draws the same numbers, and up to 30 once it draws others. A seed that breaks
# another invariant first does not end the search. The replication plants
# run the faults that move leadership and the ISR (and two acks=all producers where acks=all
# is what the plant breaks), the same seed without the plant holding every invariant.
_LEADERSHIP = ("crash", "pause", "partition", "expire")
PLANT_BUDGETS: dict[str, tuple[str, range, SimOptions]] = {
    "double-complete": ("purgatory answers exactly once", range(1, 31), SimOptions(steps=8)),
    "no-idempotence": ("no record duplicated", range(1, 31), SimOptions(steps=8)),
    # found at seed 1: a consumer read above the real commit point, then it was truncated
    "hw-ignores-isr": ("fetched records are the log's", range(1, 31), SimOptions(steps=8)),
    # found at seed 2 (seed 1 passes): a follower kept a deposed leader's records
    "no-epoch-fence": ("replicas agree below the high watermark", range(2, 32),
                       SimOptions(steps=8, faults=_LEADERSHIP)),
    # found at seed 3 (1 and 2 pass): an acks=all record only its crashed leader had
    "ack-before-replication": ("acknowledged records are readable", range(3, 33),
                               SimOptions(steps=8, faults=("crash", "pause", "gateway"),
                                          acks_all_producers=2)),
    # found at seed 16 (1-15 pass): the leader advanced the high watermark over an ISR it
    # never wrote; the controller elected a replica ZooKeeper still listed, which lacked an
    # acknowledged acks=all record (the same seed without the plant passes)
    "isr-shrink-unpersisted": ("acknowledged records are readable", range(16, 46),
                               SimOptions(steps=8, faults=("partition", "crash", "pause"),
                                          acks_all_producers=2)),
    # found at seed 80, 12 steps, every fault (the sweep's find): an expansion timed out
    # while ZooKeeper was down was written; the leader, back on its ISR of one, raised its
    # high watermark alone and truncated it when it learnt of the leader elected from the
    # written ISR (the same seed without the plant passes: REGRESSION_SEEDS). Since messages
    # to a node whose registration went wait for its new one (route19), seed 80 with the
    # plant passes; seed 82 found it (as it did before): a follower left out of the ISR for
    # good by an ISR answer taken for not made. Since the simulated nodes carry frame
    # incarnations and no ISR answer ends a leadership (the twenty-first stop), every seed
    # draws other numbers: 80-109 pass with the plant, seed 110 finds it the same way
    # (audit-1's follower 2 out of the ISR after the run settled; without the plant it passes)
    "isr-unknown-forgotten": ("every live replica is back in the ISR", range(110, 140),
                              SimOptions(steps=12)),
    # found at seed 1 (events-1 from [3, 2, 1] to [1, 3] ended as [1, 3, 2]); before the
    # checker knew a replica deleted and made again starts empty, as 'the high watermark
    # never goes back' (broker 2's events-1, deleted, then made again by a LeaderAndIsr)
    "reassign-keeps-removed": ("reassignments complete", range(1, 31),
                               SimOptions(steps=10, reassign=1)),
}


@pytest.mark.parametrize("plant", sorted(PLANT_BUDGETS))
def test_a_planted_bug_is_found_within_the_budget(plant: str) -> None:
    # Found: a seed of the budget breaks the plant's invariant. A seed that breaks another
    # one is run again without the plant: broken still, it is a bug of the code (the test
    # fails); else the plant broke it another way, passed over and named in a warning (or
    # in the failure, if no seed breaks the plant's invariant). The test says whether the
    # plant is found, not which seed fails first: that moves whenever the workload draws
    # other numbers.
    invariant, seeds, options = PLANT_BUDGETS[plant]
    unplanted = options
    options = dataclasses.replace(options, plant=plant)
    others: list[tuple[int, str | None, str | None]] = []
    for seed in seeds:
        result, _world = run_seed(seed, options)
        if result.ok:
            continue
        if result.invariant == invariant:
            if others:
                warnings.warn(f"{plant} found at seed {seed}; seeds before it broke other "
                              f"invariants with the plant only: {others}", stacklevel=1)
            return
        without, _world = run_seed(seed, unplanted)
        if not without.ok:
            pytest.fail(f"seed {seed} breaks {without.invariant!r} without the plant "
                        f"{plant}: {without.detail}")
        others.append((seed, result.invariant, result.detail))
    pytest.fail(f"{plant} not found in seeds {seeds.start}-{seeds.stop - 1} by "
                f"{invariant!r}; other invariants broken (with the plant only): {others}")


def test_a_plant_is_undone_after_its_run() -> None:
    from actors.core.controller_state import ControllerCore
    from actors.core.partition_state import PartitionState
    from actors.core.purgatory_core import PurgatoryCore
    from actors.partition_shard import PartitionShard
    owners = {"double-complete": (PurgatoryCore, "_expired"),
              "hw-ignores-isr": (PartitionState, "maybe_increment_high_watermark"),
              "no-epoch-fence": (PartitionShard, "_apply_one"),
              "ack-before-replication": (PartitionShard, "_answer"),
              "isr-shrink-unpersisted": (PartitionShard, "_propose"),
              "reassign-keeps-removed": (ControllerCore, "_write_partition_assignment")}
    for name, (owner, attr) in owners.items():
        before = owner.__dict__[attr]
        with planted(name):
            assert owner.__dict__[attr] is not before, name
        assert owner.__dict__[attr] is before, name
    assert all(p.swaps is not None and not p.needs for p in PLANTS.values())
    with pytest.raises(PlantUnavailable, match="no plant named"), planted("nonsense"):
        pass


@pytest.mark.parametrize(("seed", "steps"), REGRESSION_SEEDS)
def test_regression_seeds(seed: int, steps: int) -> None:
    result, _world = run_seed(seed, SimOptions(steps=steps))
    assert result.ok, (seed, result.invariant, result.detail, result.tail[-30:])


@pytest.mark.timeout(600)  # seconds alone
@pytest.mark.parametrize(("seed", "options"), REGRESSION_RUNS)
def test_regression_runs(seed: int, options: SimOptions) -> None:
    result, _world = run_seed(seed, options)
    assert result.ok, (seed, result.invariant, result.detail, result.faults)


@pytest.mark.timeout(600)  # a minute alone
def test_a_leader_restarted_while_no_controller_watched_gets_a_new_leader_epoch() -> None:
    """Seed 3 (see above): a restarted leader must not be given its old leader epoch."""
    result, _world = run_seed(3, GATEWAY_CRASH_EXPIRE)
    assert result.ok, (result.invariant, result.detail, result.faults)
    assert result.stats["epoch_led_again_after_restart"] == 0


@pytest.mark.timeout(600)
def test_a_follower_that_lost_a_fetch_late_is_back_in_the_isr_when_the_run_ends() -> None:
    """Seed 1005 (five faults: a partition, a pause, two gateways dropping 60% of frames): a
    follower of events-1 lost a fetch shortly before the heal and asked again only after
    replica.socket.timeout.ms (30 s), after the 20 s settle runs had: it was still out of the
    ISR at the end. The run now settles past that timeout."""
    options = SimOptions(steps=5)
    result, _world = run_seed(1005, dataclasses.replace(options, caught_up_ms=None))
    assert (result.invariant, result.detail) == (
        "every live replica is back in the ISR", "events-1: live replicas [3] out of the ISR "
        "[1, 2] (leader 2: [1, 2]) after the run settled")
    result, _world = run_seed(1005, options)
    assert result.ok, (result.invariant, result.detail)


@pytest.mark.timeout(900)  # under a minute alone; a loaded machine may take many times that
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
    # 16 faults a seed; 5000-5005 were this test's findings (see above), all passing now
    for seed in range(5000, 5006):
        result, _world = run_seed(seed, SimOptions(steps=16))
        assert result.ok, (seed, result.invariant, result.detail, result.faults)


@pytest.mark.timeout(600)
def test_a_crash_election_of_consumer_offsets_is_excused_as_one() -> None:
    """Fixed (in the checker): seed 9 with REASSIGN, 'the high watermark never goes back'
    (__consumer_offsets-1 on broker 1 from 8 to 2). Leader 1 (ISR [1, 2, 3]) had its high
    watermark at 2 when broker 3 fetched to 8 and crashed with none of it flushed; broker 2
    crashed too; the leader shrank its ISR to [1, 3] and, counting 3's fetch from before
    its crash as Kafka's leader does within replica.lag.time.max.ms, raised its high
    watermark to 8. Broker 1's session expired, the controller elected broker 3 (its old
    session still alive), which came back leading from offset 1: KIP-966's crash election.
    The checker excuses that when the elected broker's log held the offset at its crash,
    but recorded the logs' ends at a crash for the run's topics only."""
    result, _world = run_seed(9, REASSIGN)
    assert result.ok, (result.invariant, result.detail, result.faults)
    assert result.stats["hw_back_after_crash_election"] >= 1


@pytest.mark.timeout(600)
def test_a_partition_moved_away_and_back_ends_where_its_answers_said() -> None:
    """Seed 102 with three moves: events-1 from [3, 1, 2] to [2, 3] (broker 1's replica
    deleted), then to [3, 2, 1] (made again), that move's cancel first unanswered (ZooKeeper
    down), then refused REASSIGNMENT_IN_PROGRESS while its write waited, then answered
    NO_REASSIGNMENT_IN_PROGRESS: the first cancel was written. The partition ends with
    [3, 2]: a cancel moves back to the original replicas in the order the moving set holds
    them (Kafka's originReplicas), which the check once took for a wrong set."""
    result, _world = run_seed(102, SimOptions(steps=10, reassign=3))
    assert result.ok, (result.invariant, result.detail, result.faults)
    moves = result.stats["reassignments"]
    assert len(moves) == 2 and moves[1][0].endswith("to [3, 2, 1]"), moves


@pytest.mark.parametrize(("seed", "options"), EIO_RUNS)
def test_a_failing_fsync_loses_no_acknowledged_record(seed: int, options: SimOptions) -> None:
    result, _world = run_seed(seed, options)
    assert result.ok, (seed, result.invariant, result.detail, result.faults, result.tail[-20:])
    assert result.stats["disk"]["fsyncs_failed"] >= 1, "no fsync failed: the run tests nothing"
    if options.faults == ("eio",):
        excused = {k: v for k, v in result.stats.items() if k.endswith("crash_election") and v}
        assert not excused, excused
