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
from tests.runtime.node_actors import GetState, OrderChecker, Sender, SendSeq, Seq
from wire import registry
from wire.envelope import encode_frame, new_entry


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


def test_a_member_claiming_another_nodes_name_is_refused(
        tmp_path: Path, nodes: list[Node], zap_warnings: list[str]) -> None:
    """m holds a valid cluster key; a frame it sends claiming to come from a is dropped by
    b's gateway (logged once with the peer and the claim, counted as a dead letter), and
    honest frames of a and m still arrive."""
    secrets, cluster = _keys(tmp_path)
    (cluster / "m.key").write_bytes((secrets / "m.key").read_bytes())  # m is a member
    directory = {n: NodeEndpoint("127.0.0.1", free_port("127.0.0.1")) for n in ("a", "b", "m")}

    def start(name: str) -> Node:
        identity = CurveSettings(str(secrets / f"{name}.key_secret"), str(cluster)).identity(name)
        node = Node(name, directory=Directory(dict(directory)), endpoint=directory[name],
                    curve=identity).start()
        nodes.append(node)
        return node

    a, b, m = start("a"), start("b"), start("m")
    b.spawn(OrderChecker, "checker")
    a.spawn(Sender, "sender")
    m.spawn(Sender, "m-sender")  # the checker keeps an order per sender name
    a.tell(Address("a", "sender"), SendSeq(100, "b", "checker"))
    wait_for(lambda: a.ask(Address("b", "checker"), GetState())["count"] == 100, timeout=20)

    def forged(n: int) -> bytes:  # what a's sender would send, but from m's socket
        entry = new_entry(registry.type_id_of(Seq), 0, 0, 0, time.time_ns(), 0,
                          Seq("forged", n))
        return encode_frame("a", "sender", "checker", [entry])

    before = b.dead_letters.total
    for n in range(5):
        m.send_raw(Address("b", "checker"), forged(n))
    refusal = ("b: gateway refused a frame from CURVE peer m (127.0.0.1) claiming sender node "
               "a (to checker); its frames claiming a are dropped")
    wait_for(lambda: b.dead_letters.total - before == 5, timeout=20)
    assert zap_warnings.count(refusal) == 1, zap_warnings
    assert b.dead_letters.by_reason()["frame refused"] == 5
    # honest traffic of both flows on, and nothing forged got in
    m.tell(Address("m", "m-sender"), SendSeq(50, "b", "checker"))
    a.tell(Address("a", "sender"), SendSeq(50, "b", "checker"))
    state = wait_for(lambda: (st := a.ask(Address("b", "checker"), GetState()))["count"] == 200
                     and st, timeout=20)
    assert state["last"] == {"sender": 49, "m-sender": 49}
    assert state["out_of_order"] == 1  # a's second run starts again at 0
