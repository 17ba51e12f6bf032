"""The controller's requests to the nodes, in order, retried until answered: a pure core.

Kafka's ControllerChannelManager keeps one queue and one send thread per
broker: a request goes out only when the one before it was answered, and is
sent again until it is, or until the broker leaves. The same here, without
threads or a clock: the Controller actor hands in ``now_ms`` and sends what
comes out. Requests to one node therefore arrive in the order the core made
them (UpdateMetadata before the LeaderAndIsr it prepares), even across
resends; a node applies a repeated request harmlessly (its epochs fence it).

An answer is matched by the type of request it answers: only the request in
flight can be answered, so a late answer to an earlier resend of the same
request is taken for this one, which is the same request.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _BrokerQueue:
    waiting: deque[Any] = field(default_factory=deque)
    in_flight: Any = None
    sent_ms: int = 0
    sends: int = 0


class ControllerChannel:
    """Per broker: a queue of requests, one in flight, resent every ``retry_ms`` unanswered."""

    def __init__(self, retry_ms: int) -> None:
        if retry_ms < 1:
            raise ValueError(f"retry_ms must be positive, got {retry_ms}")
        self.retry_ms = retry_ms
        self._queues: dict[int, _BrokerQueue] = {}
        self.resent = 0

    def enqueue(self, broker_id: int, request: Any, now_ms: int) -> list[tuple[int, Any]]:
        """Queue ``request``; returns what to send now (it, if nothing was in flight)."""
        queue = self._queues.setdefault(broker_id, _BrokerQueue())
        queue.waiting.append(request)
        return self._next(broker_id, queue, now_ms)

    def acknowledge(self, broker_id: int, request_type: type, now_ms: int
                    ) -> tuple[Any, list[tuple[int, Any]]]:
        """A node answered a request of ``request_type``: (the request it answered, or None if
        none of that type was in flight, and what to send next)."""
        queue = self._queues.get(broker_id)
        if queue is None or queue.in_flight is None or type(queue.in_flight) is not request_type:
            return None, []
        answered, queue.in_flight = queue.in_flight, None
        return answered, self._next(broker_id, queue, now_ms)

    def remove_broker(self, broker_id: int) -> int:
        """The broker left (or came back as a new registration): drop its requests."""
        queue = self._queues.pop(broker_id, None)
        if queue is None:
            return 0
        return len(queue.waiting) + (queue.in_flight is not None)

    def clear(self) -> None:
        """The controller resigned: nothing it queued is sent any more."""
        self._queues.clear()

    def due(self, now_ms: int) -> list[tuple[int, Any]]:
        """Requests unanswered for ``retry_ms``: send them again."""
        out = []
        for broker_id, queue in self._queues.items():
            if queue.in_flight is not None and now_ms - queue.sent_ms >= self.retry_ms:
                queue.sent_ms = now_ms
                queue.sends += 1
                self.resent += 1
                out.append((broker_id, queue.in_flight))
        return out

    def next_deadline_ms(self) -> int | None:
        deadlines = [q.sent_ms + self.retry_ms for q in self._queues.values()
                     if q.in_flight is not None]
        return min(deadlines) if deadlines else None

    def pending(self, broker_id: int | None = None) -> int:
        """Requests not yet answered (of one broker, or of all)."""
        queues = (self._queues.values() if broker_id is None
                  else [self._queues[broker_id]] if broker_id in self._queues else [])
        return sum(len(q.waiting) + (q.in_flight is not None) for q in queues)

    def _next(self, broker_id: int, queue: _BrokerQueue, now_ms: int) -> list[tuple[int, Any]]:
        if queue.in_flight is not None or not queue.waiting:
            return []
        queue.in_flight = queue.waiting.popleft()
        queue.sent_ms = now_ms
        queue.sends = 1
        return [(broker_id, queue.in_flight)]
