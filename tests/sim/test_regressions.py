"""Bugs the simulator found, replayed as fixed scenarios on the simulated cluster."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from actors.runtime.directory import Directory, NodeEndpoint
from actors.sim.clients import CLIENT_NODE, INIT_PRODUCER_ID, History, SimClient
from actors.sim.cluster import GATEWAY_PORT, SimCluster
from actors.sim.disk import SimDisk
from actors.sim.network import NetConfig
from actors.sim.world import SimWorld
from actors.topology import broker_node_name


class InitProducerIds(SimClient):
    """At 5 simulated s, one InitProducerId to each of brokers 1 and 2, in the same step."""

    def setup(self) -> None:
        super().setup()
        self.ids: dict[int, int] = {}
        self.sent = False

    def step(self) -> None:
        if self.sent or self.clock.now_ms() < 5_000:
            return
        self.sent = True
        for broker in (1, 2):
            self.send_request(broker, INIT_PRODUCER_ID, 1, {
                "transactional_id": None, "transaction_timeout_ms": 60_000},
                lambda response, broker=broker: self._got(broker, response))

    def _got(self, broker: int, response: Any) -> None:
        if response is not None and response.error_code == 0:
            self.ids[broker] = response.producer_id


def test_two_nodes_first_init_producer_id_in_one_millisecond_get_different_ids(
        tmp_path: Path) -> None:
    """Found as seed 3039 (16 faults): two producers' InitProducerId reached handler 0 of
    two nodes in the same millisecond of their wall clocks, and both got the same producer
    id (each node's base was wall_ms << 20). Here the network's delay is fixed, so both
    requests arrive at the same simulated instant on the two nodes."""
    world = SimWorld(1, net=NetConfig(min_delay_ms=1.0, max_delay_ms=1.0))
    with SimDisk(tmp_path, random.Random(1)) as disk:
        cluster = SimCluster(world, 3, tmp_path, disk, overrides={"num.io.threads": 1})
        brokers = {broker_node_name(b): NodeEndpoint(f"{broker_node_name(b)}.sim", GATEWAY_PORT)
                   for b in cluster.brokers}
        clients = world.add_node(CLIENT_NODE, directory=Directory(dict(brokers)),
                                 endpoint=NodeEndpoint("clients.sim", GATEWAY_PORT))
        assert clients.endpoint is not None
        cluster.extra_endpoints[CLIENT_NODE] = clients.endpoint
        for broker_id in sorted(cluster.brokers):
            cluster.start(broker_id)
        probe = clients.actors[clients.spawn(
            InitProducerIds, "probe", brokers=sorted(cluster.brokers),
            rng=random.Random(1), history=History(), lives=lambda b: 1).name]
        try:
            world.run_for_ms(7_000)
            ids = probe.ids  # type: ignore[attr-defined]
            assert sorted(ids) == [1, 2]
            assert ids[1] != ids[2]
        finally:
            for broker_id in sorted(cluster.brokers):
                cluster.crash(broker_id)
            clients.crash()


def test_a_late_expiry_of_an_old_session_does_not_leave_the_cluster_without_controller(
        ) -> None:
    """Found as seed 11 (8 steps): ZooKeeper down, sessions expired meanwhile. When it was
    back, broker 3 read a ControllerChanged of its old session, was elected in its new one,
    then read its old session's expiry and resigned, keeping /controller (held by its live
    session); its next election saw /controller taken and stopped, so no broker was the
    controller again. A session notice now counts only for the session it names, and a
    /controller held by the broker's own session makes it act (actors/metadata/
    controller_driver.py)."""
    from actors.sim.run import SimOptions, run_seed

    result, _world = run_seed(11, SimOptions(steps=8))
    assert result.ok, (result.invariant, result.detail, result.tail[-20:])
