"""num.processes: one broker over several OS processes, one node id, one listener.

Real processes: ``actorlog serve`` with num.processes = 2 starts a second
process that binds the same port (SO_REUSEPORT) and serves connections with
handlers of its own, while the partitions live in the first. Which process
takes a connection is the kernel's choice, so the tests open many and check
from /proc that both processes hold some.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.rawclient import RawClient, read_records, record_batch, wait_for_log
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.waiting import wait_for

PROCESS_LINE = re.compile(r"process (\d+) \(pid (\d+)\) serves connections")


@pytest.fixture
def two_process_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", config={"num.processes": 2}).start()
    # the second process may take long to start on a loaded machine
    wait_for(lambda: worker_pids(b), what="process 1 serving connections", timeout=60)
    yield b
    if b.proc is not None and b.proc.poll() is None:
        b.stop()


def worker_pids(broker: BrokerProcess) -> list[int]:
    """The pids of processes 1.. in the order the broker started them (last life each)."""
    latest: dict[int, int] = {}
    for index, pid in PROCESS_LINE.findall(broker.log()):
        latest[int(index)] = int(pid)
    return [latest[k] for k in sorted(latest)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def established_inodes(port: int) -> set[str]:
    """Socket inodes of established TCP connections whose local port is ``port``."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as table:
            next(table)
            for line in table:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01":
                    inodes.add(fields[9])
    return inodes


def connections_of(pid: int, inodes: set[str]) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            count += 1
    return count


def test_both_processes_serve_clients_of_one_broker(two_process_broker: BrokerProcess) -> None:
    broker = two_process_broker
    assert broker.proc is not None
    [worker] = worker_pids(broker)
    with RawClient(broker.port) as admin:
        assert admin.create_topic("spread", 2) == 0
    clients = [RawClient(broker.port, client_id=f"c{i}") for i in range(24)]
    try:
        for i, client in enumerate(clients):
            answer = client.produce("spread", i % 2, record_batch([(None, b"v%d" % i)]), acks=1)
            assert answer.error_code == 0, answer
        inodes = established_inodes(broker.port)
        on_main = connections_of(broker.proc.pid, inodes)
        on_worker = connections_of(worker, inodes)
        assert on_main + on_worker == 24
        assert on_main > 0 and on_worker > 0, (on_main, on_worker)
        # every connection reads what every other wrote (one set of partitions)
        for client in clients[:4]:
            values = sorted(v for p in (0, 1)
                            for _o, _k, v in read_records(client.fetch("spread", p, 0).records))
            assert values == sorted(b"v%d" % i for i in range(24))
    finally:
        for client in clients:
            client.close()


def test_a_killed_process_is_restarted_and_the_data_stays(
        two_process_broker: BrokerProcess) -> None:
    broker = two_process_broker
    with RawClient(broker.port) as client:
        assert client.create_topic("kept", 1) == 0
        assert client.produce("kept", 0, record_batch([(None, b"before")]), acks=1
                              ).error_code == 0
    [worker] = worker_pids(broker)
    os.kill(worker, signal.SIGKILL)
    wait_for_log(broker, "exited with -9; restarting it")
    wait_for(lambda: worker_pids(broker) != [worker] and alive(worker_pids(broker)[0]),
             "the restarted process")
    for i in range(12):  # new connections land on either process
        with RawClient(broker.port) as client:
            assert client.produce("kept", 0, record_batch([(None, b"after%d" % i)]), acks=1
                                  ).error_code == 0
    with RawClient(broker.port) as client:
        values = [v for _o, _k, v in read_records(client.fetch("kept", 0, 0).records)]
    assert values == [b"before"] + [b"after%d" % i for i in range(12)]


def test_sigterm_stops_every_process_cleanly(two_process_broker: BrokerProcess) -> None:
    broker = two_process_broker
    [worker] = worker_pids(broker)
    with RawClient(broker.port) as client:
        assert client.create_topic("bye", 1) == 0
    assert broker.stop() == 0
    wait_for(lambda: not alive(worker), "process 1 to exit")
    assert "clean shutdown marker written" in broker.log()


def test_one_process_starts_no_other(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", config={"num.processes": 1}).start()
    try:
        with RawClient(broker.port) as client:
            assert client.create_topic("solo", 1) == 0
        # processes 1.. are ready before the broker says it listens
        assert "serves connections" not in broker.log()
    finally:
        assert broker.stop() == 0


def test_the_processes_of_a_broker_with_curve_talk_over_it(tmp_path: Path) -> None:
    """CURVE keys: the second process has the broker's key pair, and its requests reach
    the first process's partitions through the CURVE gateway."""
    from actors.security.curve import make_node_keys

    public, secret = make_node_keys(tmp_path / "keys", "node-1")
    broker = BrokerProcess(tmp_path / "data", config={
        "num.processes": 2, "actor.curve.secret.key.file": str(secret),
        "actor.curve.public.keys.dir": str(public.parent)}).start()
    try:
        # (the log is written asynchronously: on a loaded machine the line can come >10 s
        # after the broker says it listens)
        [worker] = wait_for(lambda: worker_pids(broker), what="process 1 serving connections",
                            timeout=60)
        assert broker.proc is not None
        with RawClient(broker.port) as admin:
            assert admin.create_topic("curved", 1) == 0
        clients = [RawClient(broker.port, client_id=f"c{i}") for i in range(16)]
        try:
            for i, client in enumerate(clients):
                answer = client.produce("curved", 0, record_batch([(None, b"v%d" % i)]), acks=1)
                assert answer.error_code == 0, answer
            inodes = established_inodes(broker.port)
            assert connections_of(worker, inodes) > 0
        finally:
            for client in clients:
                client.close()
        log = broker.log()
        assert "CURVE between nodes: key" in log and "unknown public key" not in log
        # process 1's frames name its own node, authenticated by the broker's shared key
        assert "gateway refused" not in log
    finally:
        broker.stop()
