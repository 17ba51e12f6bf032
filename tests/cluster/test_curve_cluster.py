"""CURVE between nodes on real `actorlog serve` processes and a real ZooKeeper (issue 17).

Two nodes with keys from `actorlog keys new` replicate as usual; a node with a
key the cluster does not know registers but none of its frames reaches an
actor of the others (each refuses it once, with its address, in its log),
and a node without keys refuses to start in a cluster that has them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from actors.security.curve import read_key_file
from tests.cluster.test_replication import TOPIC, consume_all, create_topic, produce_acks_all
from tests.fixtures.cluster import ClusterNode, wait_for
from wire import registry
from wire.envelope import encode_frame, new_entry
from wire.runtime_messages import Ping

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]
ROOT = Path(__file__).resolve().parents[2]


def keys_new(out: Path, *names: str) -> None:
    args = [arg for name in names for arg in ("--name", name)]
    subprocess.run([sys.executable, "-m", "actors.cli", "keys", "new", "--out", str(out), *args],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)


def curve_config(secret: Path, public_dir: Path) -> dict[str, Any]:
    return {"actor.curve.secret.key.file": str(secret),
            "actor.curve.public.keys.dir": str(public_dir)}


def test_curve_cluster_replicates_and_refuses_a_foreign_key_and_a_node_without_keys(
        cluster_factory: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys_new(keys, "node-1", "node-2")
    cluster = cluster_factory(size=2, config={"min.insync.replicas": 2}, node_config={
        i: curve_config(keys / f"node-{i}.key_secret", keys / "public") for i in (1, 2)})
    create_topic(cluster, rf=2)
    values = [f"v{i}".encode() for i in range(200)]
    acked, errors = produce_acks_all(cluster, values)
    assert errors == [] and acked == values  # acks=all: the follower fetched over CURVE
    assert consume_all(cluster.bootstrap, expect=200) == values
    for node in cluster.nodes.values():
        assert "CURVE between nodes: key" in node.log()

    # A node without keys: one line, exit status 2, nothing started
    base = tmp_path / "cluster0"
    bare = ClusterNode(4, base, "127.0.0.1", {**cluster.nodes[1].config, "node.id": 4})
    for key in ("actor.curve.secret.key.file", "actor.curve.public.keys.dir"):
        bare.config.pop(key)
    bare.process.config = bare.config
    with pytest.raises(RuntimeError, match="broker exited with 2"):
        bare.start(timeout_s=60)
    line = ("node-1 is registered with CURVE between nodes and this node has none; set "
            "actor.curve.secret.key.file and actor.curve.public.keys.dir (keys from `actorlog "
            "cluster keys --spec FILE` or `actorlog keys new`)")
    assert line in bare.log() and "Traceback" not in bare.log()

    # A stranger: its own key pair, and a keys dir with the cluster's public keys and its own
    foreign = tmp_path / "foreign"
    keys_new(foreign, "node-3")
    for name in ("node-1", "node-2"):
        (foreign / "public" / f"{name}.key").write_bytes((keys / "public" / f"{name}.key")
                                                          .read_bytes())
    stranger = ClusterNode(3, base, "127.0.0.1", {
        **cluster.nodes[1].config, "node.id": 3,
        **curve_config(foreign / "node-3.key_secret", foreign / "public")})
    cluster.nodes[3] = stranger  # stopped with the cluster
    stranger.start(timeout_s=60)
    key = read_key_file(foreign / "public" / "node-3.key", secret=False).public.decode()
    refusal = (f"CURVE peer 127.0.0.1 refused: unknown public key (mechanism CURVE, "
               f"key {key})")
    # Its gateway pings the others' (clock offsets): each of them refuses it, once
    for i in (1, 2):
        member = cluster.nodes[i]
        wait_for(f"node {i} to refuse the stranger", lambda m=member: refusal in m.log(), 30)
        # (said when it first sends to the stranger, which need not precede the refusal)
        wait_for(f"node {i} to find no key of the stranger", lambda m=member: (
            "node node-3 has no CURVE public key in actor.curve.public.keys.dir" in m.log()), 30)
    time.sleep(3)  # it keeps trying
    for i in (1, 2):
        log = cluster.nodes[i].log()
        assert log.count(refusal) == 1, log[-3000:]
        assert "node node-3 has no CURVE public key in actor.curve.public.keys.dir" in log
    # The stranger learns nothing from the controller (no UpdateMetadata reaches it)
    assert TOPIC not in stranger.metadata().topics()
    assert stranger.metadata().controller_id == -1
    stranger.kill()  # its actors wait on sends no member takes: no clean stop to wait for
    more = [f"w{i}".encode() for i in range(50)]
    acked, errors = produce_acks_all(cluster, more)  # and the cluster serves on
    assert errors == [] and acked == more


def test_a_member_key_claiming_another_node_is_refused(cluster_factory: Any,
                                                       tmp_path: Path) -> None:
    """A process holding node-2's valid key pair sends node-1's gateway a frame claiming to
    come from node-1 itself: node-1 drops it and says so once, with the peer and the claim;
    replication between the honest nodes goes on."""
    keys = tmp_path / "keys"
    keys_new(keys, "node-1", "node-2")
    cluster = cluster_factory(size=2, config={"min.insync.replicas": 2}, node_config={
        i: curve_config(keys / f"node-{i}.key_secret", keys / "public") for i in (1, 2)})
    create_topic(cluster, rf=2)
    stolen = read_key_file(keys / "node-2.key_secret")
    target = cluster.nodes[1]
    context = zmq.Context()
    sock = context.socket(zmq.PUSH)
    try:
        sock.linger = 0
        sock.curve_serverkey = read_key_file(keys / "public" / "node-1.key", secret=False).public
        sock.curve_publickey, sock.curve_secretkey = stolen.public, stolen.secret
        sock.connect(f"tcp://{target.host}:{target.gateway_port}")
        entry = new_entry(registry.type_id_of(Ping), 0, 0, 0, time.time_ns(), 0,
                          Ping(1, time.time_ns()))
        for _ in range(3):
            sock.send_multipart([b"_gateway", encode_frame("node-1", "_gateway", "_gateway",
                                                           [entry])])
        refusal = ("gateway refused a frame from CURVE peer node-2 (127.0.0.1) claiming sender "
                   "node node-1 (to _gateway)")
        wait_for("node 1 to refuse the forged frame", lambda: refusal in target.log(), 30)
        time.sleep(1.0)
        assert target.log().count(refusal) == 1
    finally:
        sock.close(0)
        context.term()
    values = [f"v{i}".encode() for i in range(100)]
    acked, errors = produce_acks_all(cluster, values)  # acks=all: node-2's fetches get in
    assert errors == [] and acked == values
