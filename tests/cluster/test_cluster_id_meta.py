"""A ZooKeeper-mode node takes the cluster id from /cluster/id, a string any Kafka tool or
broker may have written: the data dir's meta.properties keeps it as Java's Properties.store
writes it, and a restart reads back the same id (no 'belongs to cluster' refusal)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kazoo.client import KazooClient

from actors.runtime.properties import read_properties

pytestmark = [pytest.mark.multiprocess]


def test_a_cluster_id_with_a_backslash_and_non_ascii_chars_survives_a_restart(
        cluster_factory: Any, zk_connect: str) -> None:
    cluster_id = "clüster\\id:é-Ω"
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=15)
    try:
        zk.create("/cluster/id", json.dumps({"version": "1", "id": cluster_id}).encode(),
                  makepath=True)
    finally:
        zk.stop()
        zk.close()
    cluster = cluster_factory(size=1)
    node = cluster.nodes[1]
    assert node.metadata().cluster_id == cluster_id
    meta = (node.data_dir / "meta.properties").read_bytes()
    assert meta.isascii() and read_properties(meta.decode())["cluster.id"] == cluster_id
    assert node.stop() == 0, node.log()[-3000:]
    node.start()  # the old writer's UTF-8 bytes read back as another id: refused here
    assert node.metadata().cluster_id == cluster_id
    assert "belongs to cluster" not in node.log()
