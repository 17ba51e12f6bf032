"""Timer: a hierarchical timing wheel behind a mailbox.

Owners send Schedule(key, deadline_ms) and Cancel(key); at the deadline the
Timer sends Expired(key) back to the owner. Its loop sleeps exactly until the
next bucket is due or a message arrives. Time comes from an injected clock.
"""

from __future__ import annotations

from typing import Any

from actors.core.timing_wheel import TimerTask, TimingWheel
from actors.runtime.actor import Actor, handles
from actors.runtime.address import Address
from actors.runtime.clock import Clock
from wire.broker_messages import Cancel, Expired, GetStats, Schedule


class _Entry(TimerTask):
    __slots__ = ("key", "owner")

    def __init__(self, deadline_ms: int, owner: Address, key: int) -> None:
        super().__init__(deadline_ms)
        self.owner = owner
        self.key = key


class Timer(Actor):
    mailbox_size = 0  # unbounded: the Processors bound the requests (queued.max.requests)

    def __init__(self, node: Any, name: str, *, clock: Clock | None = None, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        if clock is not None:
            self.clock = clock

    def setup(self) -> None:
        self.wheel: TimingWheel[_Entry] = TimingWheel(tick_ms=1, wheel_size=20,
                                                     start_ms=self.clock.now_ms())
        self.entries: dict[tuple[Address, int], _Entry] = {}
        self.expired_count = 0

    @handles(Schedule)
    def on_schedule(self, msg: Schedule) -> None:
        assert self.current_sender is not None
        key = (self.current_sender, msg.key)
        old = self.entries.pop(key, None)
        if old is not None:
            old.cancel()
        entry = _Entry(msg.deadline_ms, self.current_sender, msg.key)
        if self.wheel.add(entry):
            self.entries[key] = entry
        else:  # already due
            self._expire(entry)

    @handles(Cancel)
    def on_cancel(self, msg: Cancel) -> None:
        assert self.current_sender is not None
        entry = self.entries.pop((self.current_sender, msg.key), None)
        if entry is not None:
            entry.cancel()

    def _expire(self, entry: _Entry) -> None:
        self.expired_count += 1
        self.tell(entry.owner, Expired(entry.key))

    def poll_timeout_ms(self) -> int | None:
        nxt = self.wheel.next_expiration_ms()
        if nxt is None:
            return None
        return max(0, nxt - self.clock.now_ms())

    def on_turn(self) -> None:
        for entry in self.wheel.advance_clock(self.clock.now_ms()):
            if self.entries.get((entry.owner, entry.key)) is entry:
                del self.entries[(entry.owner, entry.key)]
                self._expire(entry)

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, int]:
        return {"scheduled": len(self.entries), "expired": self.expired_count}
