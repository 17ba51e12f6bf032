"""A coordinator's appends waiting for their answer, each given up after a bounded wait.

The group and transaction coordinators write their logs by sending an Append to
the partition's shard and waiting for its AppendDone (or the purgatory's
ProduceReady). That answer can be lost: the shard crashed while handling the
Append and was restarted in place, or it never comes in time: the shard's
process died, and the link usually delivers the Append to the restarted process
much later (or not at all). Without a bound the coordinator would wait forever
and the operation behind the write (an offset commit, a group's assignment, a
transaction's transition) would never finish. So an append unanswered ``wait_ms``
after it was sent counts as timed out (Kafka's ``offsets.commit.timeout.ms`` and
the transaction log's append timeout). ``wait_ms`` must be well above the shard's
own wait for the ISR's acks (the same timeout, after which it answers
REQUEST_TIMED_OUT itself, but counted from when its purgatory got the write): the
give-up is for an answer that does not come, never for a slow success. An answer
coming after it is only counted (the caller may still take a success its
operation waits for, as the transaction coordinator does for a completion).

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


# Each instance of a coordinator takes its request ids and timer keys from its own band,
# at least this far above the previous instance's start: wide enough that no instance
# hands out as many ids, narrow enough to stay far below 2**63 after many restarts.
ID_BAND = 1 << 40


def id_start(now_ns: int, floor: int) -> int:
    """Where a (re)started instance's ids start: the monotonic clock, but never below
    ``floor`` (the previous instance's start plus ID_BAND). A restart in place runs at
    the crash's instant, and a manual or simulated clock may not have moved since the
    last start: without the floor the new instance would hand out the old one's ids, and
    a late answer to the old instance would complete the new one's request."""
    return max(now_ns, floor)


class LoadReads:
    """A coordinator's load Reads not answered yet, and the offsets each asked for.

    A shard answers a Read at once, but its answer can be late (a backlog) or lost (its
    process died, or it crashed). A Read unanswered after ``timeout_ms`` is *overdue*:
    the caller reads again, but the overdue one is still accepted if it comes (the caller
    applies a partition's rows only if the offset they start at is still the one to
    read), and the timeout doubles (up to ``max_timeout_ms``) at every expiry, so a shard
    lagging behind for good still finishes the load at its own pace and gets a bounded
    number of extra reads, not one every ``timeout_ms``.
    """

    __slots__ = ("_asked", "_due", "base_ms", "max_timeout_ms", "timeout_ms")

    def __init__(self, timeout_ms: int, max_timeout_ms: int) -> None:
        if not 0 < timeout_ms <= max_timeout_ms:
            raise ValueError(f"need 0 < timeout_ms <= max_timeout_ms, not {timeout_ms} and "
                             f"{max_timeout_ms}")
        self.base_ms = timeout_ms
        self.timeout_ms = timeout_ms
        self.max_timeout_ms = max_timeout_ms
        self._asked: dict[int, dict[int, int]] = {}  # req id -> partition -> offset asked
        self._due: dict[int, int] = {}  # req id -> when overdue (those not overdue yet)

    def reset(self) -> None:
        """A new load: nothing asked, the timeout back to its start."""
        self._asked.clear()
        self._due.clear()
        self.timeout_ms = self.base_ms

    def sent(self, req_id: int, offsets: dict[int, int], now_ms: int) -> None:
        self._asked[req_id] = offsets
        self._due[req_id] = now_ms + self.timeout_ms

    def answered(self, req_id: int) -> dict[int, int] | None:
        """The offsets the Read ``req_id`` asked for, per partition; None when it is not
        one of this load's (an earlier load's, or an earlier instance's)."""
        self._due.pop(req_id, None)
        return self._asked.pop(req_id, None)

    def waiting(self) -> bool:
        """Whether a Read not overdue yet may still be answered."""
        return bool(self._due)

    def next_due_ms(self) -> int | None:
        return min(self._due.values()) if self._due else None

    def expire(self, now_ms: int, to_read: dict[int, int]) -> int:
        """Mark the Reads due by ``now_ms`` overdue (doubling the timeout if any), and
        :meth:`drop_stale` (``to_read``: partition -> offset still to read). Returns how
        many became overdue."""
        late = [rid for rid, due in self._due.items() if now_ms >= due]
        for rid in late:
            del self._due[rid]
        if late:
            self.timeout_ms = min(self.timeout_ms * 2, self.max_timeout_ms)
        self.drop_stale(to_read)
        return len(late)

    def drop_stale(self, to_read: dict[int, int]) -> None:
        """Forget the Reads (overdue or not) none of whose partitions is still to read at
        the offset asked: their answers would change nothing, and the load need not wait
        for them."""
        for rid in [rid for rid, asked in self._asked.items()
                    if all(to_read.get(p) != off for p, off in asked.items())]:
            del self._asked[rid]
            self._due.pop(rid, None)
