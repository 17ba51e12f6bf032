"""Supervision: what happens when an actor's handler or loop raises.

The actor is restarted in place: its state is torn down and built again by
``setup`` (from durable storage), its mailbox is kept, so the next message is
handled by a fresh instance. Like Erlang's restart intensity, more than
``max_restarts`` crashes within ``restart_window_s`` stop it for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.runtime.actor import Actor


class RestartWindow:
    """The crashes of the last ``window_s`` seconds; the caller passes the time in."""

    __slots__ = ("_times", "max_restarts", "window_s")

    def __init__(self, max_restarts: int, window_s: float) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: list[float] = []

    def crash(self, now_s: float) -> bool:
        """Count a crash at ``now_s``; False once there are too many to restart again."""
        self._times = [t for t in self._times if now_s - t < self.window_s]
        self._times.append(now_s)
        return len(self._times) <= self.max_restarts

    @property
    def recent(self) -> int:
        """Crashes counted in the current window."""
        return len(self._times)


def restart_after_crash(actor: Actor, exc: BaseException, msg: Any) -> None:
    """Log and count the crash, then rebuild the actor's state, or stop it."""
    actor.crashes += 1
    metrics = actor.node.metrics
    metrics.incr("actor_crashes")
    what = type(msg).__name__ if msg is not None else "its loop"
    actor.log.opt(exception=exc).error(
        "actor {} crashed handling {}; restarting it (crash #{})", actor.name, what, actor.crashes
    )
    window = actor.restarts
    if not window.crash(actor.clock.now_ms() / 1000):
        actor.log.error(
            "actor {} crashed {} times in {} s; stopping it", actor.name,
            window.recent, window.window_s,
        )
        metrics.incr("actor_gave_up")
        actor._finish_stop()
        return
    try:
        actor.teardown()
    except Exception:
        actor.log.exception("teardown of {} failed during restart", actor.name)
    actor._quiet_at = -1  # setup() may set a deadline: the loop asks again
    try:
        actor.setup()
        metrics.incr("actor_restarts")
        cause = type(exc)
        actor.restarts_by_cause[cause] = actor.restarts_by_cause.get(cause, 0) + 1
    except Exception:
        actor.log.exception("setup of {} failed during restart; stopping it", actor.name)
        actor._finish_stop()
