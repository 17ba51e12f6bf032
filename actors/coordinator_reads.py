"""The reads of a coordinator's load, shared by the GroupCoordinator and the
TransactionCoordinator: each reads its log partitions (``__consumer_offsets``,
``__transaction_state``) from their shards to the log end when it becomes their
coordinator. ``LoadReads`` (a pure core) keeps the books of the Reads in flight; this
mixin sends them and, when some are overdue (their shard far behind, or the Read lost with
it), has what is still unread read again. An overdue answer is still taken if it comes
first (the coordinators' ``on_read``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from actors.core.inflight_appends import LoadReads
from actors.runtime.address import Address
from wire.broker_messages import LOG_END_READER, Read, ReadRow

if TYPE_CHECKING:
    from actors.runtime.actor import Actor

    _Base = Actor
else:
    _Base = object

READ_MAX_BYTES = 8 * 1024 * 1024  # one Read's answer, over every partition it names


class LoadReading(_Base):
    """For an Actor with ``reads``, ``read_offsets``, ``phase``, ``retry_at_ms`` and
    ``req_ids``; ``LOG_TOPIC`` names the partitions' topic (in the log lines)."""

    LOG_TOPIC = ""
    reads: LoadReads
    read_offsets: dict[int, int]
    phase: str
    retry_at_ms: int
    req_ids: Iterator[int]

    def _read(self, shard: Address, rows: list[ReadRow]) -> None:
        rid = next(self.req_ids)
        self.reads.sent(rid, {r.partition: r.fetch_offset for r in rows}, self.clock.now_ms())
        self.tell(shard, Read(rid, LOG_END_READER, READ_MAX_BYTES, rows))

    def _expire_reads(self, now: int) -> None:
        """Reads of the load unanswered too long are overdue; once none is left that is
        not, what is still unread is read again (``phase`` "read-retry", at once)."""
        timeout_ms = self.reads.timeout_ms
        late = self.reads.expire(now, self.read_offsets)
        if not late:
            return
        self.log.warning("{} read(s) of {} unanswered after {} ms; reading again (next "
                         "timeout {} ms)", late, self.LOG_TOPIC, timeout_ms,
                         self.reads.timeout_ms)
        if not self.reads.waiting():
            self.phase = "read-retry"
            self.retry_at_ms = now
