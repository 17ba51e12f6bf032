"""The cluster fixture's pause holds: a SIGCONT the test did not send is undone and counted
(KeepStopped), so a test of a paused node can tell a step ran with the node awake."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests.fixtures.pids import KeepStopped, process_state


def _until(what: str, check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_stray_sigcont_is_undone_and_counted() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        proc.send_signal(signal.SIGSTOP)
        keeper = KeepStopped(proc, "sleep")
        _until("stopped", lambda: process_state(proc.pid) == "T")
        time.sleep(0.05)
        assert keeper.continued == 0  # its own stop is not counted
        os.kill(proc.pid, signal.SIGCONT)  # from "outside"
        _until("counted", lambda: keeper.continued == 1)
        _until("stopped again", lambda: process_state(proc.pid) == "T")
        time.sleep(0.05)
        assert process_state(proc.pid) == "T" and keeper.continued == 1
        keeper.end()
        proc.send_signal(signal.SIGCONT)  # the test's own: not undone once ended
        _until("running", lambda: process_state(proc.pid) in ("S", "R"))
    finally:
        proc.kill()
        proc.wait()


def test_the_keeper_ends_when_the_process_is_gone() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    proc.send_signal(signal.SIGSTOP)
    keeper = KeepStopped(proc, "sleep")
    _until("stopped", lambda: process_state(proc.pid) == "T")
    proc.kill()
    proc.wait()
    keeper._thread.join(5)
    assert not keeper._thread.is_alive() and keeper.continued == 0
