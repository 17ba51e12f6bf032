"""HeldProcess (tests/fixtures/pids.py): a process the test did not start, signalled
through a pidfd once it is checked to be the one meant, and never after it is gone."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.fixtures.pids import HeldProcess, KeepStopped, ProcessNotHeld, child_of, running


def _until(what: str, check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _grandchild() -> tuple[subprocess.Popen[str], int]:
    """A shell whose child (a sleep) is not this process's: the pid is read from its output,
    as a test reads a broker's process 1 from its log. The shell reaps it."""
    shell = subprocess.Popen(["sh", "-c", "sleep 31 & echo $!; wait; sleep 30"],
                             stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    return shell, int(shell.stdout.readline())


def test_a_held_process_is_signalled_until_it_is_gone_and_never_after() -> None:
    shell, pid = _grandchild()
    try:
        with pytest.raises(ProcessNotHeld, match=rf"the sleep \(pid {pid}\) is not running, "
                                                 rf"or pid {pid} is now another process"):
            HeldProcess.take(pid, "the sleep", child_of(shell.pid + 100000))  # not its parent
        assert HeldProcess.take_if(pid, running("sleep 30")) is None  # not its command line
        with HeldProcess.take(pid, "the sleep", child_of(shell.pid), running("sleep 31")) as held:
            assert held.state() in ("S", "R") and not held.exited()
            assert held.send_signal(signal.SIGSTOP)
            _until("stopped", lambda: held.state() == "T")
            assert held.kill()
            assert held.exited(timeout_s=5)
            _until("reaped by the shell", lambda: not held.send_signal(0))
            assert held.state() is None and not held.kill()  # the pid is no longer its
        assert HeldProcess.take_if(pid, child_of(shell.pid)) is None
    finally:
        shell.kill()
        shell.wait()


def test_keep_stopped_holds_a_held_process_and_ends_when_it_is_gone() -> None:
    shell, pid = _grandchild()
    try:
        held = HeldProcess.take(pid, "the sleep", child_of(shell.pid))
        assert held.send_signal(signal.SIGSTOP)
        keeper = KeepStopped(held, "sleep")
        _until("stopped", lambda: held.state() == "T")
        assert held.send_signal(signal.SIGCONT)  # as a signal from outside would
        _until("counted", lambda: keeper.continued == 1)
        _until("stopped again", lambda: held.state() == "T")
        held.kill()
        keeper._thread.join(5)
        assert not keeper._thread.is_alive() and keeper.continued == 1
        held.close()
    finally:
        shell.kill()
        shell.wait()
