"""CURVE between nodes on real sockets: the cluster's nodes talk, a stranger is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from actors.runtime.address import Address
from actors.runtime.node import Directory, Node, NodeEndpoint
from actors.security.curve import CurveSettings, read_key_file, write_keys
from tests.fixtures.broker import free_port
from tests.fixtures.waiting import wait_for
from tests.runtime.node_actors import GetState, OrderChecker, Sender, SendSeq


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    created: list[Node] = []
    yield created
    for node in created:
        node.shutdown(timeout=5)


@pytest.fixture
def zap_warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(f"{m.record['extra'].get('node')}: "
                                             f"{m.record['message']}"), level="WARNING")
    yield lines
    logger.remove(sink)


def _keys(tmp_path: Path) -> tuple[Path, Path]:
    """Secret files of a, b and the stranger m; the cluster's public dir holds a and b.

    The stranger's own dir holds every public key (they are public) and its own."""
    secrets, cluster, stranger = tmp_path / "secrets", tmp_path / "cluster", tmp_path / "m-dir"
    for name in ("a", "b", "m"):
        write_keys(secrets, name)
    for d, names in ((cluster, ("a", "b")), (stranger, ("a", "b", "m"))):
        d.mkdir()
        for name in names:
            (d / f"{name}.key").write_bytes((secrets / f"{name}.key").read_bytes())
    return secrets, cluster


def test_cluster_nodes_talk_over_curve_and_a_stranger_is_refused(
        tmp_path: Path, nodes: list[Node], zap_warnings: list[str]) -> None:
    secrets, cluster = _keys(tmp_path)
    directory = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1")) for n in ("a", "b", "m")}

    def start(name: str, keys_dir: Path) -> Node:
        identity = CurveSettings(str(secrets / f"{name}.key_secret"), str(keys_dir)).identity(name)
        node = Node(name, directory=Directory(dict(directory)), endpoint=directory[name],
                    curve=identity).start()
        nodes.append(node)
        return node

    a, b, m = start("a", cluster), start("b", cluster), start("m", tmp_path / "m-dir")
    b.spawn(OrderChecker, "checker")
    a.spawn(Sender, "sender")
    m.spawn(Sender, "sender")
    a.tell(Address("a", "sender"), SendSeq(500, "b", "checker"))
    state = wait_for(lambda: (st := a.ask(Address("b", "checker"), GetState()))["count"] == 500
                     and st, timeout=20)
    assert state["out_of_order"] == 0 and set(state["last"]) == {"sender"}

    m.tell(Address("m", "sender"), SendSeq(50, "b", "checker"))
    mallory = read_key_file(secrets / "m.key", secret=False).public.decode()
    # m's gateway pings a and b as well: each of them refuses it, once
    refusal = (f"b: CURVE peer 127.0.0.1 refused: unknown public key (mechanism CURVE, "
               f"key {mallory})")
    wait_for(lambda: refusal in zap_warnings, timeout=20)
    time.sleep(1.0)  # the stranger keeps reconnecting: still one line, and nothing arrives
    assert zap_warnings.count(refusal) == 1
    assert b.ask(Address("b", "checker"), GetState(), timeout=10)["count"] == 500

    # b knows no key of m: what b would send there goes to dead letters, logged once
    b.spawn(Sender, "sender")
    b.tell(Address("b", "sender"), SendSeq(3, "m", "checker"))
    b.tell(Address("b", "sender"), SendSeq(3, "m", "checker"))
    keyless = ("b: node m has no CURVE public key in actor.curve.public.keys.dir; messages to it "
               "go to dead letters")
    wait_for(lambda: keyless in zap_warnings, timeout=10)
    time.sleep(0.3)
    assert zap_warnings.count(keyless) == 1
