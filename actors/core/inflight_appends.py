"""A coordinator's appends waiting for their answer, each given up after a bounded wait.

The group and transaction coordinators write their logs by sending an Append to
the partition's shard and waiting for its AppendDone (or the purgatory's
ProduceReady). That answer can be lost: the shard's process died with the
Append in its mailbox, or the shard crashed while handling it and was restarted
in place. Without a bound the coordinator would wait forever and the operation
behind the write (an offset commit, a group's assignment, a transaction's
transition) would never finish. So an append unanswered ``wait_ms`` after it was
sent counts as timed out (Kafka's ``offsets.commit.timeout.ms`` and the
transaction log's append timeout; ``wait_ms`` adds a margin for the shard's own
wait for the ISR's acks, which uses the same timeout and answers
REQUEST_TIMED_OUT itself), and an answer coming after that is only counted.

Request ids must be added in increasing order (a counter). No deadline is kept
per append: appends are grouped by send time in buckets of ``bucket_ms``, each
remembered by its start and its first request id (one small tuple a bucket,
nothing an append), and a whole bucket expires ``wait_ms`` after its end. So an
append times out between ``wait_ms`` and ``wait_ms + bucket_ms`` after it was
sent, never earlier.

Pure: the caller hands in ``now_ms`` and logs what :meth:`expire` and
:meth:`pop` report.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class InFlightAppends(Generic[T]):
    """Request id -> what its answer completes, for the appends not answered yet."""

    __slots__ = ("_buckets", "_troubled", "bucket_ms", "expired", "late", "wait_ms", "waiting")

    def __init__(self, wait_ms: int, bucket_ms: int) -> None:
        if wait_ms <= 0 or bucket_ms <= 0:
            raise ValueError(f"wait_ms and bucket_ms must be positive, not {wait_ms} and "
                             f"{bucket_ms}")
        self.wait_ms = wait_ms
        self.bucket_ms = bucket_ms
        self.waiting: dict[int, T] = {}  # in send order, so in request id order
        self._buckets: deque[tuple[int, int]] = deque()  # (start ms, first request id)
        self.expired = 0  # appends given up on
        self.late = 0  # answers that matched no append waiting
        self._troubled = False  # an expiry or late answer since the last answer in time

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, req_id: int, value: T, now_ms: int) -> None:
        buckets = self._buckets
        if not buckets or now_ms >= buckets[-1][0] + self.bucket_ms:
            if buckets and req_id <= buckets[-1][1]:
                raise ValueError(f"request id {req_id} is not above {buckets[-1][1]}")
            buckets.append((now_ms, req_id))
        self.waiting[req_id] = value

    def pop(self, req_id: int) -> T | None:
        """What the answer to ``req_id`` completes; None (counted as late) when no append
        with that id waits any more: it timed out, or was sent before a restart."""
        value = self.waiting.pop(req_id, None)
        if value is None:
            self.late += 1
            return None
        if not self.waiting:
            self._buckets.clear()
        self._troubled = False
        return value

    def first_of_burst(self) -> bool:
        """True once per burst of expiries and late answers (none answered in time between):
        the caller logs then, not at every one."""
        first = not self._troubled
        self._troubled = True
        return first

    def next_expiry_ms(self) -> int | None:
        """When the oldest bucket expires (None: nothing waits)."""
        buckets = self._buckets
        return buckets[0][0] + self.bucket_ms + self.wait_ms if buckets else None

    def expire(self, now_ms: int) -> list[tuple[int, T]]:
        """The appends whose wait is over, removed: (request id, value) in send order."""
        out: list[tuple[int, T]] = []
        buckets = self._buckets
        waiting = self.waiting
        while buckets and now_ms >= buckets[0][0] + self.bucket_ms + self.wait_ms:
            buckets.popleft()
            limit = buckets[0][1] if buckets else None
            while waiting:
                req_id = next(iter(waiting))
                if limit is not None and req_id >= limit:
                    break
                out.append((req_id, waiting.pop(req_id)))
        self.expired += len(out)
        return out
