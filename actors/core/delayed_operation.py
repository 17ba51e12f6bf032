"""Delayed operations and the purgatory's watcher lists: pure cores.

Kafka's DelayedOperation / DelayedOperationPurgatory, rebuilt for a broker
where one actor owns a set of watch keys and gets every event as a message.
Nothing here reads a clock, locks, or does I/O:

- A :class:`DelayedOperation` cannot read partition or group state itself.
  The owner hands it the latest status of a key (:meth:`observe`), then asks
  :meth:`try_complete`. Completing records an *effect* in ``outcome`` (the
  response payload); the actor shell turns it into messages.
- Completion and expiry may arrive in either order; ``_state`` makes the
  first one win and the second a no-op, so exactly one outcome exists.
- :class:`DelayedOperationPurgatory` keeps one watcher list per key. An
  operation completed through one key (or expired) stays in its other lists
  until that key is checked or the lists are purged; purging happens when
  Kafka's estimate of completed-but-watched operations (operations watched
  since the last purge minus the ones still delayed) passes
  ``purge_interval_requests``, so memory follows live operations.

Every operation is a :class:`TimerTask`, so the Timer actor can hold it in a
timing wheel directly (or wrap an id in a task of its own).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, NamedTuple

from actors.core.timing_wheel import TimerTask

__all__ = [
    "DelayedOperation",
    "DelayedOperationPurgatory",
    "EmptyWatchKeysError",
    "OperationCompletedError",
    "OperationWatchedError",
    "PurgatoryMetrics",
]

_PENDING = 0
_COMPLETED = 1
_EXPIRED = 2


class EmptyWatchKeysError(ValueError):
    """An operation was offered to a purgatory with no key to watch it under."""

    def __init__(self) -> None:
        super().__init__("an operation needs at least one watch key")


class OperationCompletedError(ValueError):
    """A completed (or expired) operation was offered to a purgatory."""

    def __init__(self) -> None:
        super().__init__("operation is already completed")


class OperationWatchedError(ValueError):
    """An operation was offered to a purgatory while already watched by one."""

    def __init__(self) -> None:
        super().__init__("operation is already watched by a purgatory")


class DelayedOperation(TimerTask):
    """A response waiting for a condition or for its deadline, whichever comes first.

    Subclasses define :meth:`try_complete` (check the condition with what
    :meth:`observe` recorded; call :meth:`force_complete` when it holds) and
    :meth:`on_complete` (store the response in ``outcome``; ``timed_out``
    tells whether expiry got there first). :meth:`on_expiration` is an
    optional hook that runs after ``on_complete`` on expiry only.
    """

    __slots__ = ("_purgatory", "_state", "outcome")

    def __init__(self, deadline_ms: int) -> None:
        super().__init__(deadline_ms)
        self._state = _PENDING
        # The effect of completion, set by on_complete; None while pending.
        self.outcome: Any = None
        # The purgatory that counts this operation as delayed, while it does.
        self._purgatory: DelayedOperationPurgatory | None = None

    @property
    def deadline_ms(self) -> int:
        return self.expiration_ms

    @property
    def is_completed(self) -> bool:
        """True once completed or expired (the outcome is then final)."""
        return self._state != _PENDING

    @property
    def timed_out(self) -> bool:
        """True if expiry, not the condition, completed the operation."""
        return self._state == _EXPIRED

    # -- what subclasses implement --------------------------------------------

    def observe(self, key: Hashable, status: Any) -> None:
        """Record the latest status of one watch key (default: ignore it)."""

    def try_complete(self) -> bool:
        """Complete if the condition holds; True only if this call completed it."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Build ``outcome``; runs exactly once, for completion or expiry."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Hook run after ``on_complete`` when the deadline won (default: nothing)."""

    # -- the exactly-once guard -------------------------------------------------

    def force_complete(self) -> bool:
        """Complete now; True for the first caller only, later calls are ignored.

        It does not cancel the operation's timer task: the wheel may belong to
        another actor, so the shell sends the Timer a ``Cancel`` (or calls
        ``cancel()`` when it owns the wheel itself). Call it from the actor
        that owns the watching purgatory: it updates that purgatory's count.
        """
        return self._finish(_COMPLETED)

    def expire(self) -> bool:
        """The deadline passed: complete as timed out unless already completed."""
        if not self._finish(_EXPIRED):
            return False
        self.on_expiration()
        return True

    def _finish(self, state: int) -> bool:
        if self._state != _PENDING:
            return False
        self._state = state
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._num_delayed -= 1
            self._purgatory = None
        self.on_complete()
        return True


class PurgatoryMetrics(NamedTuple):
    """A purgatory's counters; the shell derives rates (expirations per second)."""

    delayed_operations: int  # watched and not yet completed or expired
    watched_keys: int  # keys with a non-empty watcher list
    watcher_entries: int  # (operation, key) entries, completed ones not yet purged included
    estimated_total_operations: int  # watched since the last purge (Kafka's estimate)
    completions: int  # completed by a status check (first check included)
    expirations: int  # expired through the purgatory
    purges: int  # times the purge trigger fired
    purged_entries: int  # watcher entries dropped by those purges


class DelayedOperationPurgatory:
    """Watcher lists for one purgatory shard, driven by its actor's messages.

    The shell's loop: ``try_complete_else_watch`` when an operation is
    created (schedule it on the Timer unless it completed), then
    ``check_and_complete`` on every status change of a key (cancel the timer
    task of each completed operation), and ``expire`` when the Timer reports
    an operation due. Outcomes are read from each operation's ``outcome``.
    """

    __slots__ = (
        "_completions",
        "_estimated_total",
        "_expirations",
        "_num_delayed",
        "_purged_entries",
        "_purges",
        "_watchers",
        "name",
        "purge_interval_requests",
    )

    def __init__(self, name: str = "", purge_interval_requests: int = 1000) -> None:
        if purge_interval_requests < 0:
            raise ValueError(f"purge_interval_requests must be >= 0, got {purge_interval_requests}")
        self.name = name
        self.purge_interval_requests = purge_interval_requests
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._num_delayed = 0
        self._estimated_total = 0
        self._completions = 0
        self._expirations = 0
        self._purges = 0
        self._purged_entries = 0

    # -- queries ---------------------------------------------------------------

    @property
    def num_delayed(self) -> int:
        """Operations watched here that are neither completed nor expired."""
        return self._num_delayed

    @property
    def watched_keys(self) -> int:
        return len(self._watchers)

    def watched(self, key: Hashable) -> int:
        """Entries in ``key``'s watcher list (completed ones not yet purged included)."""
        ops = self._watchers.get(key)
        return 0 if ops is None else len(ops)

    def watcher_entries(self) -> int:
        """All (operation, key) entries held; what purging keeps bounded."""
        return sum(map(len, self._watchers.values()))

    def lingering(self) -> int:
        """Completed operations still held in some watcher list: what purging bounds."""
        return len({id(op) for ops in self._watchers.values() for op in ops
                    if op._state != _PENDING})

    def metrics(self) -> PurgatoryMetrics:
        return PurgatoryMetrics(
            delayed_operations=self._num_delayed,
            watched_keys=len(self._watchers),
            watcher_entries=self.watcher_entries(),
            estimated_total_operations=self._estimated_total,
            completions=self._completions,
            expirations=self._expirations,
            purges=self._purges,
            purged_entries=self._purged_entries,
        )

    # -- the three entry points ------------------------------------------------

    def try_complete_else_watch(
        self,
        op: DelayedOperation,
        keys: Iterable[Hashable],
        statuses: Mapping[Any, Any] | None = None,
    ) -> bool:
        """Complete ``op`` now if it can, else watch it under every key.

        ``statuses`` are the current statuses of (some of) the keys, observed
        before the first check. Returns True if the operation completed now
        (its outcome is ready, nothing to schedule); False if it is watched
        and the shell must schedule it on the Timer at ``op.deadline_ms``.
        One check suffices: the watch and any later status change of these
        keys pass through this purgatory's single mailbox in order, which is
        what Kafka's second ``tryComplete`` guards against across threads.
        """
        keys = tuple(keys)
        if not keys:
            raise EmptyWatchKeysError()
        if op._state != _PENDING:
            raise OperationCompletedError()
        if op._purgatory is not None:
            raise OperationWatchedError()
        if statuses:
            for key, status in statuses.items():
                op.observe(key, status)
        if op.try_complete():
            self._completions += 1
            return True
        if op._state != _PENDING:  # completed without saying so: nothing to watch
            return True
        watchers = self._watchers
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
        op._purgatory = self
        self._num_delayed += 1
        self._estimated_total += 1
        self.maybe_purge()
        return False

    def check_and_complete(self, key: Hashable, status: Any = None) -> list[DelayedOperation]:
        """Hand ``key``'s latest status to its watchers; return those completed now.

        Operations completed elsewhere (another key, expiry) are dropped from
        this key's list on the way, and an emptied list is removed.
        """
        ops = self._watchers.get(key)
        if ops is None:
            return []
        completed: list[DelayedOperation] = []
        remaining: list[DelayedOperation] = []
        for op in ops:
            if op._state != _PENDING:
                continue
            if status is not None:
                op.observe(key, status)
            if op.try_complete():
                completed.append(op)
            elif op._state == _PENDING:
                remaining.append(op)
        if remaining:
            self._watchers[key] = remaining
        else:
            del self._watchers[key]
        self._completions += len(completed)
        if completed:
            self.maybe_purge()
        return completed

    def expire(self, op: DelayedOperation) -> bool:
        """The Timer reports ``op`` due: expire it unless completion won the race.

        True if this call expired it (its outcome is the timed-out one);
        False if it had already completed, in which case nothing changes.
        The operation stays in its watcher lists until checked or purged.
        """
        if not op.expire():
            return False
        self._expirations += 1
        self.maybe_purge()
        return True

    # -- purging ---------------------------------------------------------------

    def maybe_purge(self) -> int:
        """Purge when completed-but-watched operations may exceed the interval.

        Kafka's trigger: the number of operations watched since the last purge
        minus those still delayed estimates how many completed ones linger.
        Returns the number of entries purged (0 if the trigger did not fire).
        """
        if self._estimated_total - self._num_delayed <= self.purge_interval_requests:
            return 0
        self._estimated_total = self._num_delayed
        self._purges += 1
        return self.purge_completed()

    def purge_completed(self) -> int:
        """Drop every completed operation from every watcher list now."""
        purged = 0
        watchers = self._watchers
        for key in list(watchers):
            ops = watchers[key]
            live = [op for op in ops if op._state == _PENDING]
            if len(live) == len(ops):
                continue
            purged += len(ops) - len(live)
            if live:
                watchers[key] = live
            else:
                del watchers[key]
        self._purged_entries += purged
        return purged
