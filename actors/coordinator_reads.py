"""The reads of a coordinator's load, shared by the GroupCoordinator and the
TransactionCoordinator: each reads its log partitions (``__consumer_offsets``,
``__transaction_state``) from their shards to the log end when it becomes their
coordinator. ``LoadReads`` (a pure core) keeps the books of the Reads in flight; this
mixin sends them and, when some are overdue (their shard far behind, or the Read lost with
it), has what is still unread read again. An overdue answer is still taken if it comes
first (the coordinators' ``on_read``).

Before its first load a single node's coordinator asks the Controller to create its log
topic; that request is bounded the same way (see CREATE_WAIT_MS), and only the answer to
its latest ask is taken (``_answers_create``: an earlier ask's comes late, if at all)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from actors.core.inflight_appends import LoadReads
from actors.runtime.address import Address
from wire.broker_messages import (
    LOG_END_READER,
    CreateTopicDoneRow,
    CreateTopicRow,
    CreateTopics,
    CreateTopicsDone,
    Read,
    ReadRow,
)
from wire.errors import ErrorCode

if TYPE_CHECKING:
    from actors.runtime.actor import Actor
    from actors.topology import Topology

    _Base = Actor
else:
    _Base = object

# A load's Read is answered with at most LOAD_READ_MAX_BYTES over all its partitions,
# plus one whole batch of the first partition with data (the shard keeps max_bytes as a
# budget, as Kafka's fetch; the partitions it leaves out are read again): with
# actor.threads = single the coordinators run in process 0's worker loop, where decoding
# an answer holds up every request of the process (about 50 ms a MB), so an answer stays
# about a MB whatever the partition count. READ_PARTITION_MAX_BYTES: a row's own limit.
LOAD_READ_MAX_BYTES = 1024 * 1024
READ_PARTITION_MAX_BYTES = 1024 * 1024
# The Controller answers a CreateTopics once the shards opened the partitions and every
# handler applied the new table; it gives up on silent shards after 60 s
# (PENDING_GIVE_UP_NS) and on a silent handler 10 s later (ACK_WAIT_NS). An answer not come
# by CREATE_WAIT_MS after asking was lost: the Controller's process restarted with the
# request unread (a crash of the Controller itself keeps it). The coordinator then asks
# again (creating twice is harmless: TOPIC_ALREADY_EXISTS counts as success), instead of
# refusing every request as loading for good; past both give-ups, so a slow disk is never
# taken for a lost request.
CREATE_WAIT_MS = 75_000
# The Controller's refusal of the name (not a passing failure), asked again seldom:
# INVALID_TOPIC_EXCEPTION, the name's topic removed from ZooKeeper by hand (its replicas
# may remain on the brokers); it lifts only when that topic's znodes are written back or
# the controller moves. Anything else (POLICY_VIOLATION, a partition budget's, too) is
# asked again at the coordinator's RETRY_MS.
REFUSALS = frozenset({int(ErrorCode.INVALID_TOPIC_EXCEPTION)})
REFUSED_RETRY_MS = 10_000


class LoadReading(_Base):
    """For an Actor with ``reads``, ``read_offsets``, ``phase``, ``retry_at_ms`` and
    ``req_ids``; ``LOG_TOPIC`` names the partitions' topic (in the log lines)."""

    LOG_TOPIC = ""
    reads: LoadReads
    read_offsets: dict[int, int]
    phase: str
    retry_at_ms: int
    req_ids: Iterator[int]
    topology: Topology
    create_due_ms: int  # phase "creating": when the Controller's answer is overdue
    creates_lost: int  # CreateTopics whose answer never came (asked again)
    # the request id of the latest CreateTopics asked (None: none yet): only its answer is
    # taken; one to an earlier ask, come after it was given up on, is ignored and counted
    create_req_id: int | None
    create_answers_stale: int
    # the last CreateTopics error logged (code, message): its repeats are not logged again
    create_error_logged: tuple[int, str] | None = None
    # partition -> the last load Read error logged for it (its repeats are not logged again)
    read_errors_logged: dict[int, int] | None = None

    def _ask_create(self, row: CreateTopicRow) -> None:
        """Ask the Controller for the log topic (``phase`` "creating" until it answers)."""
        self.phase = "creating"
        self.create_due_ms = self.clock.now_ms() + CREATE_WAIT_MS
        self.create_req_id = next(self.req_ids)
        self.tell(self.topology.controller, CreateTopics(self.create_req_id, False, [row]))

    def _answers_create(self, msg: CreateTopicsDone) -> bool:
        """Is ``msg`` the answer to the CreateTopics asked last (and still awaited)? An
        answer to an earlier ask (late: given up on at CREATE_WAIT_MS and asked again) says
        nothing of the current one, error or not: ignored, counted and logged."""
        if msg.req_id != self.create_req_id:
            row = msg.rows[0] if msg.rows else None
            if (row is not None and self.phase == "creating"
                    and row.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)):
                return True  # late, but it proves the topic is there: no need to wait on
            self.create_answers_stale += 1
            self.log.warning("a late answer from the Controller to an earlier request {} "
                             "creating {} ({}), ignored: awaiting request {}'s (late answers "
                             "so far: {})", msg.req_id, self.LOG_TOPIC,
                             "no row" if row is None else _code_name(row.error_code),
                             self.create_req_id, self.create_answers_stale)
            return False
        return self.phase == "creating"

    def _create_failed(self, row: CreateTopicDoneRow, retry_ms: int) -> None:
        """The Controller did not make the log topic: asked again after ``retry_ms``
        (``phase`` "create-retry"). An error is logged when it first comes (or changes),
        its repeats only at debug: a refusal (the name's topic removed from ZooKeeper by
        hand, INVALID_TOPIC_EXCEPTION) can last long, and a line every retry would flood
        the log."""
        error = (row.error_code, row.error_message or "")
        if error != self.create_error_logged:
            self.create_error_logged = error
            self.log.error("cannot create {}: {} ({}); asking again every {} ms",
                           self.LOG_TOPIC, _code_name(row.error_code), row.error_message,
                           retry_ms)
        else:
            self.log.debug("cannot create {} yet: {}", self.LOG_TOPIC,
                           _code_name(row.error_code))
        self.phase = "create-retry"
        self.retry_at_ms = self.clock.now_ms() + retry_ms

    def _create_overdue(self, now: int) -> bool:
        """True (and ``phase`` "create-retry", due at once) when the Controller's answer
        is overdue: the request or its answer was lost, so it is asked again."""
        if self.phase != "creating" or now < self.create_due_ms:
            return False
        self.creates_lost += 1
        self.log.warning("no answer from the Controller to creating {} after {} ms; asking "
                         "again (unanswered so far: {})", self.LOG_TOPIC, CREATE_WAIT_MS,
                         self.creates_lost)
        self.phase = "create-retry"
        self.retry_at_ms = now
        return True

    def _read_failed(self, partition: int, code: int) -> None:
        """A load Read's row answered ``code``: read again at the next retry. Logged when
        it first comes for the partition (or changes), its repeats at debug: a partition
        that answers so for long (its old directory not yet deleted, its topic id not
        readable) would log a line every retry."""
        if self.read_errors_logged is None:
            self.read_errors_logged = {}
        logged = self.read_errors_logged
        if logged.get(partition) != code:
            logged[partition] = code
            self.log.warning("reading {}-{} failed with {}; retrying (repeats logged at "
                             "debug)", self.LOG_TOPIC, partition, _code_name(code))
        else:
            self.log.debug("reading {}-{} failed with {} again; retrying", self.LOG_TOPIC,
                           partition, _code_name(code))

    def _read_succeeded(self, partition: int) -> None:
        """A load Read's row answered: a later failure of the partition is news again."""
        if self.read_errors_logged:
            self.read_errors_logged.pop(partition, None)

    def _read_all(self) -> None:
        """One Read per shard of every partition still to read (``read_offsets``)."""
        by_shard: dict[Address, list[int]] = {}
        for p in self.read_offsets:
            by_shard.setdefault(self.topology.shard_for(self.LOG_TOPIC, p), []).append(p)
        for shard, partitions in by_shard.items():
            self._read(shard, partitions)

    def _read_rest(self, rest: list[tuple[int, bool]]) -> None:
        """Read on, from the shard that answered, the partitions of its answer short of
        their log end: ``rest`` holds (partition, whether the answer had records of it).
        Those without go first: the shard left them out (the budget was spent before them,
        or their next batch is larger than what was left of it), and it gives a whole
        batch past the budget only to the first partition with data, so the first of them
        is read in the next Read rather than once every partition before it is read to
        its end. (One that got some records and stopped at a batch past the rest of the
        budget keeps its place.)"""
        if not rest:
            return
        assert self.current_sender is not None
        self._read(self.current_sender, [p for p, got in rest if not got]
                   + [p for p, got in rest if got])

    def _read(self, shard: Address, partitions: list[int]) -> None:
        """A Read of ``partitions`` from their ``read_offsets``, answered with at most
        LOAD_READ_MAX_BYTES over all of them save one whole batch of the first with data."""
        rid = next(self.req_ids)
        rows = [ReadRow(self.LOG_TOPIC, p, self.read_offsets[p], READ_PARTITION_MAX_BYTES)
                for p in partitions]
        self.reads.sent(rid, {r.partition: r.fetch_offset for r in rows}, self.clock.now_ms())
        self.tell(shard, Read(rid, LOG_END_READER, LOAD_READ_MAX_BYTES, rows))

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


def _code_name(code: int) -> str:
    """An error code's name, or the number itself when this version does not know it."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
