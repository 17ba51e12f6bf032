"""A ClusterController restarted after a crash never hands out a topic id again.

Its topic ids come from a seeded generator in the simulator (a seed's run replays).
Made again at each setup from the assignments' generator, which a crash-restart need
not have moved, it gave the same ids again: a namesake created then could get the id of
a dead topic whose directories a node still holds, and serve them."""

from __future__ import annotations

import random
from pathlib import Path

from actors.runtime.supervision import restart_after_crash
from actors.sim.disk import SimDisk
from actors.sim.run import SimOptions, _Run


def test_a_crash_restart_does_not_replay_the_topic_ids(tmp_path: Path) -> None:
    with SimDisk(tmp_path, random.Random(1)) as disk:
        sim = _Run(3, SimOptions(), tmp_path, disk)
        sim.start()
        try:
            sim.world.run_for_ms(2_000)
            seen: list[bytes] = []
            for broker_id in sorted(sim.cluster.brokers):
                controller = sim.cluster.controller_actor(broker_id)
                assert controller is not None and controller.seeded
                for _ in range(3):
                    seen.append(controller.core._random_bytes(16))
                    restart_after_crash(controller, RuntimeError("a test's crash"), None)
            assert len(set(seen)) == len(seen), "a restarted controller gave an id again"
        finally:
            sim.close()
