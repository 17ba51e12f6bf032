"""actor.threads.scheduling's mechanism: a policy for the calling thread only."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from actors.runtime.scheduling import set_thread_policy, thread_policy


def _in_thread(body: Callable[[], Any]) -> list[Any]:
    """What ``body`` returns, run in a new thread of this one."""
    out: list[Any] = []

    def run() -> None:
        out.append(body())

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    return out


def test_a_policy_is_the_calling_threads_and_what_it_starts_inherits_it() -> None:
    main = threading.get_native_id()
    assert thread_policy(main) == "normal"

    def batch_then_child() -> tuple[str | None, str, str]:
        why = set_thread_policy("batch")
        mine = thread_policy(threading.get_native_id())
        child = _in_thread(lambda: thread_policy(threading.get_native_id()))
        return why, mine, str(child[0])

    assert _in_thread(batch_then_child) == [(None, "batch", "batch")]
    assert thread_policy(main) == "normal"  # the other threads keep theirs

    def batch_then_normal() -> tuple[str | None, str]:
        set_thread_policy("batch")
        return set_thread_policy("normal"), thread_policy(threading.get_native_id())

    assert _in_thread(batch_then_normal) == [(None, "normal")]


def test_an_unknown_policy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown scheduling policy 'fifo'; known: normal, batch"):
        set_thread_policy("fifo")
