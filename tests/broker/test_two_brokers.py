"""Two brokers on one host never share a data dir or a gateway.

A second `actorlog serve` on a data dir in use is refused with one line that
names the holder's pid, and the first keeps every record. Two brokers side by
side (each with its own data dir, both named node-1 by default) serve their
own clients; each has its own gateway socket, and a node of this test
process reaches neither broker's actors through the default endpoint, nor
can it take over a broker's socket.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from actors.broker import gateway_ipc_dir
from actors.runtime.address import Address
from actors.runtime.node import Directory, Node, NodeEndpoint, NodeError, default_ipc_dir
from tests.broker.simple_clients import consume_all, produce
from tests.fixtures.broker import ROOT, BrokerProcess, free_port
from wire.runtime_messages import Ping

pytestmark = [pytest.mark.multiprocess, pytest.mark.clients]


def serve(data_dir: Path, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
         "--data-dir", str(data_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


def test_second_broker_on_a_data_dir_is_refused_and_the_first_keeps_its_records(
        tmp_path: Path) -> None:
    first = BrokerProcess(tmp_path / "data").start()
    try:
        assert first.proc is not None
        produce(first.bootstrap, "kept", [b"a", b"b", b"c"])
        meta = (first.data_dir / "meta.properties").read_text()

        second = serve(first.data_dir)

        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("Error: ")
        assert f"pid {first.proc.pid}" in lines[0]
        assert str(first.data_dir) in lines[0] and "--data-dir" in lines[0]
        assert (first.data_dir / "meta.properties").read_text() == meta
        produce(first.bootstrap, "kept", [b"d"])
        assert consume_all(first.bootstrap, "kept", 4) == [b"a", b"b", b"c", b"d"]
    finally:
        assert first.stop() == 0, first.log()[-3000:]
    again = BrokerProcess(first.data_dir, log_name="again.log").start()  # the lock went with it
    try:
        assert consume_all(again.bootstrap, "kept", 4) == [b"a", b"b", b"c", b"d"]
    finally:
        assert again.stop() == 0, again.log()[-3000:]


def _wait_for_text(broker: BrokerProcess, text: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in broker.log():
            return True
        time.sleep(0.05)
    return False


def test_two_brokers_side_by_side_serve_their_own_clients_through_their_own_gateways(
        tmp_path: Path) -> None:
    a = BrokerProcess(tmp_path / "a-data", log_name="a.log").start()
    b = BrokerProcess(tmp_path / "b-data", log_name="b.log").start()
    probe: Node | None = None
    try:
        produce(a.bootstrap, "t", [b"from-a-1", b"from-a-2"])
        produce(b.bootstrap, "t", [b"from-b-1"])
        assert consume_all(a.bootstrap, "t", 2) == [b"from-a-1", b"from-a-2"]
        assert consume_all(b.bootstrap, "t", 1) == [b"from-b-1"]

        base = default_ipc_dir()
        ipc = {name: gateway_ipc_dir(base, broker.data_dir.resolve(), "node-1")
               for name, broker in (("a", a), ("b", b))}
        assert ipc["a"] != ipc["b"]
        for name, broker in (("a", a), ("b", b)):
            assert f"listening on ipc://{ipc[name]}/node-1.gw" in broker.log()
            assert Path(ipc[name], "node-1.gw").exists()

        # A node of this process cannot take over a broker's gateway socket ...
        with pytest.raises(NodeError, match="in use by another process"):
            Node("node-1", endpoint=NodeEndpoint("127.0.0.1", 0, ipc["a"])).start()
        # ... and the default endpoint of node-1 reaches neither broker: a message
        # there is lost, while the same message to broker a's real endpoint reaches
        # it (and is logged as a dead letter: no actor has that name).
        lost, control = f"probe-{uuid.uuid4().hex}", f"probe-{uuid.uuid4().hex}"
        own_ipc = tempfile.mkdtemp(prefix="probe-", dir=base)
        probe = Node("probe", directory=Directory({"node-1": NodeEndpoint("127.0.0.1", 0, base)}),
                     endpoint=NodeEndpoint("127.0.0.1", 0, own_ipc)).start()
        probe.tell(Address("node-1", lost), Ping(1, 0))
        probe.directory.add("node-1", NodeEndpoint("127.0.0.1", 0, ipc["a"]))
        probe.tell(Address("node-1", control), Ping(2, 0))  # a new address: a new link
        assert _wait_for_text(a, control), a.log()[-2000:]
        assert lost not in a.log() and lost not in b.log()
        assert control not in b.log()
    finally:
        if probe is not None:
            probe.shutdown(timeout=5)
            shutil.rmtree(own_ipc, ignore_errors=True)
        codes = (a.stop(), b.stop())
    assert codes == (0, 0), a.log()[-2000:] + b.log()[-2000:]
    for name in ("a", "b"):  # a clean stop removes the gateway's socket and directory
        assert not Path(ipc[name]).exists()
