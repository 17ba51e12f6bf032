"""A restarted cluster process waits for its shards' roles before it serves
(``_wait_for_shards_restored``). A shard slow to answer (it opens its logs as it takes
its roles) is asked again until the shared readiness deadline: before, one ask that timed
out ended the whole wait with "did not answer", and the process served before its shards
held their roles. Real actors in one node; the shard is a stand-in whose first answer is
slow."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from actors import processes
from actors.runtime.actor import Actor, handles
from actors.runtime.node import Node
from actors.topology import Topology
from wire.broker_messages import GetStats


class SlowShard(Actor):
    """Takes longer than an ask's timeout over its first GetStats, then awaits its restore
    for two more answers, then has its roles."""

    def setup(self) -> None:
        self.asked = 0

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> Any:
        self.asked += 1
        if self.asked == 1:
            time.sleep(0.6)
        return {"awaiting_restore": self.asked <= 3, "asked": self.asked}


def test_a_shard_slow_to_answer_is_asked_again_until_its_roles_are_restored(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "READY_ASK_TIMEOUT_S", 0.2)
    topo = Topology(node.name, 1, 1, 1, 1, 1)
    shard = node.spawn(SlowShard, topo.shard(0).name)
    assert processes._wait_for_shards_restored(node, topo, 1, [0], time.monotonic() + 30)
    assert node.ask(shard, GetStats())["asked"] >= 5  # the first answers were still awaiting


def test_the_wait_ends_at_the_deadline(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard whose roles never come: the wait ends at the deadline it is given (the
    shared one that keeps every readiness step within the supervisor's READY_TIMEOUT_S),
    saying so."""
    monkeypatch.setattr(processes, "READY_ASK_TIMEOUT_S", 0.2)

    class NeverRestored(SlowShard):
        @handles(GetStats)
        def stats(self, _msg: GetStats) -> Any:
            return {"awaiting_restore": True}

    topo = Topology(node.name, 1, 1, 1, 1, 1)
    node.spawn(NeverRestored, topo.shard(0).name)
    assert not processes._wait_for_shards_restored(node, topo, 1, [0], time.monotonic() + 1)


class _Stop(Exception):
    pass


def test_a_stop_signal_while_a_process_is_made_is_raised_once_it_is_kept() -> None:
    """The start's SIGTERM handler raises; inside `_signals_held` (a fork and its Popen
    being kept) it must wait for the block's end. The mask alone did not hold it: the
    signal went to another thread, and Python ran the handler in the main thread inside
    the block, so a process could be forked and never stopped or waited for."""
    old = signal.signal(signal.SIGTERM,
                        lambda _s, _f: processes.raise_or_defer(_Stop("stop")))
    go = threading.Event()
    # made before the block: its mask lets SIGTERM in, as the broker's actor threads'
    sender = threading.Thread(target=lambda: go.wait(10) and os.kill(os.getpid(),
                                                                     signal.SIGTERM))
    sender.start()
    steps: list[str] = []
    try:
        with pytest.raises(_Stop), processes._signals_held():
            go.set()
            sender.join(10)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # bytecodes for the handler to run at
                steps.append("inside")
            steps.append("kept")
        assert steps[-1] == "kept"
    finally:
        signal.signal(signal.SIGTERM, old)
