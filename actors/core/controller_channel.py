"""The controller's requests to the nodes, in order, retried until answered: a pure core.

Kafka's ControllerChannelManager keeps one queue and one send thread per
broker: a request goes out only when the one before it was answered, and is
sent again until it is, or until the broker leaves. The same here, without
threads or a clock: the Controller actor hands in ``now_ms`` and sends what
comes out. Requests to one node therefore arrive in the order the core made
them (UpdateMetadata before the LeaderAndIsr it prepares), even across
resends; a node applies a repeated request harmlessly (its epochs fence it).

Each request gets a correlation id when it goes out (a resend keeps it), and
an answer names the id it answers: only the answer to the request in flight
acknowledges it. A late answer to an earlier request (the node applied it,
answered, and answered its resend too, and the first answer acknowledged it)
names another id and is ignored: it must not be taken for the next request
of its type, which the node may not have applied yet. (A node does not
answer the resend of a request it is still applying: the original's answer
comes when it is done.)

An id is unique per broker and controller term: ``controller_epoch << 32 |
n``, n counting the requests of the term to that broker from 1. A node may
still hold a request of an earlier term (of a controller process since
restarted at the same address, which kept no counter) and answer it late:
its id has the older epoch, so it matches nothing of this term. Within a term
the ids go on across ``remove_broker`` (an answer of the broker's previous
life may still come), and a shell that makes a new channel hands the old
one's ``last_ids`` to it.

A request is a NamedTuple with ``controller_epoch`` and ``correlation_id``
fields: the core sends it with id 0 and the channel sends a copy with the id
set.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

EPOCH_SHIFT = 32  # an id is controller_epoch << EPOCH_SHIFT | its number in the term


@dataclass
class _BrokerQueue:
    waiting: deque[Any] = field(default_factory=deque)
    in_flight: Any = None
    sent_ms: int = 0
    sends: int = 0


class ControllerChannel:
    """Per broker: a queue of requests, one in flight, resent every ``retry_ms`` unanswered."""

    def __init__(self, retry_ms: int, last_ids: dict[int, int] | None = None) -> None:
        if retry_ms < 1:
            raise ValueError(f"retry_ms must be positive, got {retry_ms}")
        self.retry_ms = retry_ms
        self._queues: dict[int, _BrokerQueue] = {}
        # per broker, the last correlation id given (the next request of its term gets one
        # more; the first of a newer term, its epoch's first)
        self._last_ids: dict[int, int] = dict(last_ids or {})
        self.resent = 0
        self.ignored = 0  # answers that named no request in flight (late, or not ours)

    @property
    def last_ids(self) -> dict[int, int]:
        """Per broker, the last correlation id given: a channel made to replace this one
        starts after them."""
        return dict(self._last_ids)

    def enqueue(self, broker_id: int, request: Any, now_ms: int) -> list[tuple[int, Any]]:
        """Queue ``request``; returns what to send now (it, if nothing was in flight)."""
        queue = self._queues.setdefault(broker_id, _BrokerQueue())
        queue.waiting.append(request)
        return self._next(broker_id, queue, now_ms)

    def acknowledge(self, broker_id: int, request_type: type, correlation_id: int,
                    now_ms: int) -> tuple[Any, list[tuple[int, Any]]]:
        """A node answered the request of ``request_type`` with ``correlation_id``: (the
        request it answered and what to send next), or (None, []) when that is not the
        request in flight (a late answer to an earlier one: ignored and counted)."""
        queue = self._queues.get(broker_id)
        in_flight: Any = None if queue is None else queue.in_flight
        if (queue is None or in_flight is None or in_flight.correlation_id != correlation_id
                or type(in_flight) is not request_type):
            self.ignored += 1
            return None, []
        answered, queue.in_flight = queue.in_flight, None
        return answered, self._next(broker_id, queue, now_ms)

    def in_flight(self, broker_id: int) -> Any:
        """The request to ``broker_id`` waiting for its answer (None if none)."""
        queue = self._queues.get(broker_id)
        return None if queue is None else queue.in_flight

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
        """Requests unanswered for ``retry_ms``: send them again (with the same id)."""
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
        request = queue.waiting.popleft()
        # the first of a term is its epoch's first id; then one more each (a term's
        # numbers do not run out: 2**32 requests to one broker)
        correlation_id = max(self._last_ids.get(broker_id, 0) + 1,
                             request.controller_epoch << EPOCH_SHIFT | 1)
        self._last_ids[broker_id] = correlation_id
        queue.in_flight = request._replace(correlation_id=correlation_id)
        queue.sent_ms = now_ms
        queue.sends = 1
        return [(broker_id, queue.in_flight)]
