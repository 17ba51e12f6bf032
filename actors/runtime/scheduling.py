"""The Linux scheduling policy of a worker loop's thread (``actor.threads.scheduling``).

A broker's worker loop wakes for every request, answer and frame from a sibling
process. Under SCHED_OTHER each wake-up preempts whatever runs on its CPU (a client, or
the broker's other process) and the loop then runs on cold caches for the little the
wake-up brought. SCHED_BATCH (``sched(7)``: "the scheduler will apply a small
scheduling penalty with respect to wakeup behavior") keeps the loop's fair share of the
CPU but lets the running task finish its slice: what arrives meanwhile is taken in one
turn. On a host whose cores are all busy this costs the broker less CPU per request; on
an idle core a wake-up runs at once either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_POLICY_NAMES = {"normal": "SCHED_OTHER", "batch": "SCHED_BATCH"}
_REFUSALS_SAID: set[str] = set()  # refusals already logged by this process


def apply_to_worker_loop(name: str, warn: Callable[[str], None]) -> None:
    """``actor.threads.scheduling`` for the calling worker loop's thread: 'normal' leaves
    it as it is (SCHED_OTHER, or what ``chrt`` gave the process); otherwise the policy,
    and a refusal is passed to ``warn`` once a process (the loop runs on, as it was)."""
    if name == "normal":
        return
    why = set_thread_policy(name)
    if why is not None and why not in _REFUSALS_SAID:
        _REFUSALS_SAID.add(why)
        warn(f"actor.threads.scheduling = {name}: {why}; the worker loop keeps its policy")


def set_thread_policy(name: str) -> str | None:
    """Give the calling thread the policy ``name`` ('normal' or 'batch', at nice's static
    priority 0). None when done, otherwise why not (an OS without it, a refusal)."""
    attr = _POLICY_NAMES.get(name)
    if attr is None:
        raise ValueError(f"unknown scheduling policy {name!r}; known: {', '.join(_POLICY_NAMES)}")
    policy = getattr(os, attr, None)
    setter = getattr(os, "sched_setscheduler", None)
    if policy is None or setter is None:
        return f"{attr} is not available on this OS"
    try:
        # pid 0 is the calling thread (Linux schedules threads; the policy is per thread,
        # and the threads this one starts later inherit it)
        setter(0, policy, os.sched_param(0))
    except OSError as exc:
        return f"{attr} refused: {exc}"
    return None


def thread_policy(native_id: int) -> str:
    """The policy name of a thread of this process ('normal', 'batch' or another's
    constant name), for tests and diagnostics."""
    policy = os.sched_getscheduler(native_id)
    for name, attr in _POLICY_NAMES.items():
        if getattr(os, attr, None) == policy:
            return name
    return str(policy)
