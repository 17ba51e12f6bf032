"""Idle connections, oldest activity first (Kafka's Selector.IdleExpiryManager).

A Processor tells it of every connection's activity (accepted, bytes read or
written, an answer queued) and asks, each turn, which connections have been
quiet for ``connections.max.idle.ms``; it closes those. Connections are kept
in order of their last activity, so finding the expired ones costs nothing
while none are. No clock here: the caller hands ``now_ms`` in.
"""

from __future__ import annotations

from collections import OrderedDict


class IdleExpiry:
    """Last activity per connection id; ``max_idle_ms < 0`` turns expiry off."""

    def __init__(self, max_idle_ms: int) -> None:
        self.max_idle_ms = max_idle_ms
        self.enabled = max_idle_ms >= 0
        self._last_ms: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last_ms)

    def update(self, conn_id: int, now_ms: int) -> None:
        """``conn_id`` was active at ``now_ms`` (it becomes the newest)."""
        if self.enabled:
            self._last_ms[conn_id] = now_ms
            self._last_ms.move_to_end(conn_id)

    def remove(self, conn_id: int) -> None:
        self._last_ms.pop(conn_id, None)

    def next_expiry_ms(self) -> int | None:
        """When the quietest connection expires, or None without connections."""
        if not self._last_ms:
            return None
        return next(iter(self._last_ms.values())) + self.max_idle_ms

    def expired(self, now_ms: int) -> list[int]:
        """The connections quiet for at least ``max_idle_ms``, oldest first; they are forgotten."""
        out: list[int] = []
        last = self._last_ms
        while last:
            conn_id, at_ms = next(iter(last.items()))
            if now_ms - at_ms < self.max_idle_ms:
                break
            del last[conn_id]
            out.append(conn_id)
        return out
