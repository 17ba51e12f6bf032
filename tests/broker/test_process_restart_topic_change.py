"""A topic change whose message to a shard of process 1 dies with process 1.

num.processes = 2 on a single node: the Controller (process 0) writes a topic change to
the store, then sends it to the shards that own its partitions. Process 1 is paused
(SIGSTOP) so the message to its shard waits unread in its socket, then killed: the
message dies with it. The supervisor starts process 1 again; it tells the Controller
(ProcessStarted), which has the change go on to the new shard at once. The client's
request, asked with a timeout_ms longer than the wait, is answered NONE within seconds.
Before, the Controller was not told: the change waited for a ShardDone that never came,
and its client was answered UNKNOWN_SERVER_ERROR at the Controller's 60 s give-up.

A delete whose DropPartitions died is sent again to the new shard (it opened none of the
topic's partitions, but the directory is on disk, and a namesake would open it): the
directory goes. Real processes, a raw client; process 1's pid and its sockets from /proc.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.core.topic_store import TopicStore
from tests.broker.rawclient import CREATE_TOPICS, DELETE_TOPICS, RawClient
from tests.broker.test_handoff import split_of
from tests.broker.test_processes import owner_process, serving, worker_pids
from tests.fixtures.broker import BrokerProcess
from tests.fixtures.pids import KeepStopped
from tests.fixtures.waiting import wait_for

# The request's timeout_ms: past the few seconds a restart takes, short of the Controller's
# 60 s give-up (PENDING_GIVE_UP_NS): answered NONE only if the change went on at the notice
TIMEOUT_MS = 45_000
# The topics' names: a message naming one is longer than this (Kafka allows 249 characters)
NAME_BYTES = 240


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", config={
        "num.processes": 2, "num.processes.connection.distribution": "handoff"}).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0


def _on_process_1(prefix: str) -> str:
    """A topic name whose one partition a shard of process 1 owns: ``prefix`` made long (a
    message naming it is told from the few small ones process 0 sends process 1 now and
    then by its size in process 1's socket)."""
    long = prefix + "-" + "x" * (NAME_BYTES - len(prefix) - 4)
    return next(name for name in (f"{long}{i}" for i in range(100))
                if owner_process(name, 0) == 1)


def _client_on_process_0(broker: BrokerProcess) -> RawClient:
    """A connection process 0 holds (its requests go on while process 1 is paused)."""
    others = []
    try:
        for i in range(8):
            client = RawClient(broker.port, client_id=f"admin{i}", timeout=TIMEOUT_MS / 1000 + 15)
            client.call(3, 1, {"topics": []})  # a Metadata: the connection is handed by now
            if split_of(broker, client) == 0:
                return client
            others.append(client)
    finally:
        for other in others:
            other.close()
    raise AssertionError("no connection landed on process 0")


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _unread_bytes(pid: int) -> int:
    """Bytes waiting unread in the Unix sockets of process ``pid`` (``ss``)."""
    inodes = _socket_inodes(pid)
    out = subprocess.run(["ss", "-xn"], capture_output=True, text=True, check=True).stdout
    total = 0
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 6 and parts[5] in inodes:
            total += int(parts[2])
    return total


def _stored(broker: BrokerProcess) -> dict[str, Any]:
    try:
        return dict(TopicStore.load(broker.data_dir).topics)
    except ValueError:  # read while it was replaced
        return {}


@pytest.mark.parametrize("change", ["create", "delete"])
def test_a_topic_change_lost_with_process_1_completes_once_it_restarts(
        broker: BrokerProcess, change: str) -> None:
    topic = _on_process_1("moved")
    [worker] = worker_pids(broker)
    client = _client_on_process_0(broker)
    answers: list[Any] = []
    try:
        # a topic change to process 1's shard first (the topic deleted below, or another):
        # the Controller's link to process 1 is connected (to a paused process a new link
        # would keep the message, and the new process would get it)
        first = topic if change == "delete" else _on_process_1("warm")
        response = client.call(CREATE_TOPICS, 7, {
            "topics": [{"name": first, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": TIMEOUT_MS, "validate_only": False})
        assert response.topics[0].error_code == 0
        assert (broker.data_dir / f"{first}-0").is_dir()
        with broker.hold_worker(worker) as process_1:
            assert process_1.send_signal(signal.SIGSTOP)
            keeper = KeepStopped(process_1, "process 1")
            try:
                assert keeper.watching.wait(5), "process 1 did not stop"
                before = _unread_bytes(worker)

                def ask() -> None:
                    if change == "create":
                        answers.append(client.call(CREATE_TOPICS, 7, {
                            "topics": [{"name": topic, "num_partitions": 1,
                                        "replication_factor": 1, "assignments": [],
                                        "configs": []}],
                            "timeout_ms": TIMEOUT_MS, "validate_only": False
                        }).topics[0].error_code)
                    else:
                        answers.append(client.call(DELETE_TOPICS, 5, {
                            "topic_names": [topic], "timeout_ms": TIMEOUT_MS
                        }).responses[0].error_code)

                asking = threading.Thread(target=ask, daemon=True)
                asking.start()
                # written to the store, then sent to process 1's shard: the message waits
                # unread in process 1's socket
                wait_for(lambda: (topic in _stored(broker)) == (change == "create"),
                         "the change written")
                wait_for(lambda: _unread_bytes(worker) >= before + NAME_BYTES,
                         "the change's message in process 1's socket")
                assert not answers, "answered while process 1's shard cannot have applied it"
                killed_at = time.monotonic()
                assert process_1.kill()
                wait_for(process_1.exited, "process 1 to die")
            finally:
                keeper.end()
        wait_for(lambda: worker_pids(broker) != [worker]
                 and serving(broker, worker_pids(broker)[0]), "the restarted process",
                 timeout=60)
        asking.join(TIMEOUT_MS / 1000 + 15)
        took = time.monotonic() - killed_at
        assert answers == [0], (answers, took)
        assert took < 40, f"answered {took:.0f} s after the kill: at the give-up, not the notice"
        if change == "delete":
            wait_for(lambda: not (broker.data_dir / f"{topic}-0").exists(),
                     "the deleted partition's directory to go")
    finally:
        client.close()
