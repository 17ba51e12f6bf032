"""The ReplicaFetcher's core: partitions asked for their state, one fetch in flight, answers
applied before the next fetch, errors backed off per partition, stale answers dropped."""

from __future__ import annotations

from actors.core.fetcher_state import APPLYING, DELAYED, READY, FetcherConfig, FetcherCore
from wire.errors import ErrorCode
from wire.replication_messages import (
    FetcherPartitionRow,
    FollowerStateRow,
    ReplicaFetchPartition,
)

NONE = int(ErrorCode.NONE)


def core() -> FetcherCore:
    return FetcherCore(FetcherConfig(replica_id=2, backoff_ms=100, request_timeout_ms=1000))


def ready(c: FetcherCore, *parts: tuple[str, int, int, int], now: int = 0) -> None:
    """Add (topic, partition, leo, last epoch) rows and answer their state queries."""
    c.add([FetcherPartitionRow(t, p, 1, 5) for t, p, _leo, _e in parts])
    rows = c.to_initialise()
    assert {(r.topic, r.partition) for r in rows} == {(t, p) for t, p, _l, _e in parts}
    assert all(r.records == b"" and r.leader_epoch == 5 for r in rows)
    c.sent_to_shard(100, rows)
    c.on_applied(100, [FollowerStateRow(t, p, NONE, leo, e, 0, False, 0)
                       for t, p, leo, e in parts], now)


def answer(topic: str, partition: int, error: int = NONE, records: bytes = b"",
           hw: int = 0, diverging: tuple[int, int] = (-1, -1),
           log_start: int = 0) -> ReplicaFetchPartition:
    return ReplicaFetchPartition(topic, partition, error, hw, log_start, 10, diverging[0],
                                 diverging[1], records)


def test_a_fetch_starts_at_the_shards_log_end_with_its_last_epoch() -> None:
    c = core()
    ready(c, ("t", 0, 7, 3), ("t", 1, 0, -1))
    rows = c.next_fetch(1, 0)
    assert [(r.partition, r.fetch_offset, r.current_leader_epoch, r.last_fetched_epoch)
            for r in rows] == [(0, 7, 5, 3), (1, 0, 5, -1)]
    assert c.next_fetch(2, 0) == []  # one in flight


def test_answers_are_applied_before_the_next_fetch_and_move_the_offset() -> None:
    c = core()
    ready(c, ("t", 0, 0, -1), ("t", 1, 0, -1))
    c.next_fetch(1, 0)
    apply = c.on_fetch_response(1, [answer("t", 0, records=b"batch", hw=3), answer("t", 1)], 5)
    assert [(r.partition, r.records, r.leader_high_watermark) for r in apply] == [
        (0, b"batch", 3)]
    assert c.partitions[("t", 0)].state == APPLYING
    assert c.next_fetch(2, 5) == []  # partition 0 is being applied
    c.sent_to_shard(7, apply)
    c.on_applied(7, [FollowerStateRow("t", 0, NONE, 4, 5, 3, False)], 6)
    rows = c.next_fetch(3, 6)
    assert {(r.partition, r.fetch_offset, r.last_fetched_epoch) for r in rows} == {
        (0, 4, 5), (1, 0, -1)}


def test_a_divergence_is_applied_without_records() -> None:
    c = core()
    ready(c, ("t", 0, 45, 0))
    c.next_fetch(1, 0)
    apply = c.on_fetch_response(1, [answer("t", 0, records=b"ignored", diverging=(0, 30))], 1)
    assert [(r.records, r.diverging_epoch, r.diverging_end_offset) for r in apply] == [
        (b"", 0, 30)]


def test_a_partition_in_error_backs_off_while_the_others_go_on() -> None:
    c = core()
    ready(c, ("t", 0, 0, -1), ("t", 1, 0, -1))
    c.next_fetch(1, 0)
    c.on_fetch_response(1, [answer("t", 0, error=int(ErrorCode.FENCED_LEADER_EPOCH)),
                            answer("t", 1)], 10)
    assert c.partitions[("t", 0)].state == DELAYED
    assert [r.partition for r in c.next_fetch(2, 10)] == [1]
    assert c.next_deadline_ms() == 110
    c.on_fetch_response(2, [answer("t", 1)], 20)
    c.wake(109)
    assert c.partitions[("t", 0)].state == DELAYED
    c.wake(110)
    assert c.partitions[("t", 0)].state == READY
    assert {r.partition for r in c.next_fetch(3, 110)} == {0, 1}
    assert c.errors == {int(ErrorCode.FENCED_LEADER_EPOCH): 1}


def test_out_of_range_asks_the_shard_to_reset() -> None:
    c = core()
    ready(c, ("t", 0, 3, 0))
    c.next_fetch(1, 0)
    apply = c.on_fetch_response(1, [answer("t", 0, error=int(ErrorCode.OFFSET_OUT_OF_RANGE))],
                                1)
    assert [r.reset_offset for r in apply] == [3]


def test_a_new_epoch_drops_the_answer_of_the_fetch_in_flight() -> None:
    c = core()
    ready(c, ("t", 0, 4, 5))
    c.next_fetch(1, 0)
    c.add([FetcherPartitionRow("t", 0, 3, 6)])  # a new leader: its state is asked again
    assert c.on_fetch_response(1, [answer("t", 0, records=b"old")], 1) == []
    rows = c.to_initialise()
    assert [(r.partition, r.leader_epoch) for r in rows] == [(0, 6)]
    c.add([FetcherPartitionRow("t", 0, 3, 6)])  # the same again changes nothing
    assert c.to_initialise() == []


def test_an_unanswered_fetch_is_given_up_after_the_timeout() -> None:
    c = core()
    ready(c, ("t", 0, 0, -1))
    c.next_fetch(1, 0)
    assert c.on_fetch_response(1, [answer("t", 0)], 1) == []  # the leader answers
    c.next_fetch(2, 10)
    assert c.next_deadline_ms() == 1010
    assert c.check_timeout(1009) is None
    assert c.check_timeout(1010) == 1000
    assert [r.partition for r in c.next_fetch(3, 1010)] == [0]
    assert c.on_fetch_response(2, [answer("t", 0, records=b"late")], 1011) == []


def test_a_leader_that_never_answered_is_asked_again_sooner() -> None:
    """The leader's node answers through its directory, which may not know this node's new
    registration yet (it answers into dead letters): until a first answer, a fetch is given
    up after the leader's wait plus the back-off (600 ms here), doubling, and the request
    timeout (1000 ms) once the leader answered."""
    c = core()
    ready(c, ("t", 0, 0, -1))
    c.next_fetch(1, 0)
    assert c.next_deadline_ms() == 600
    assert c.check_timeout(599) is None
    assert c.check_timeout(600) == 600
    assert [r.partition for r in c.next_fetch(2, 600)] == [0]
    assert c.next_deadline_ms() == 1600  # 1200, capped at the request timeout
    assert c.check_timeout(1600) == 1000
    c.next_fetch(3, 1600)
    apply = c.on_fetch_response(3, [answer("t", 0, records=b"x", hw=1)], 1700)
    assert [r.records for r in apply] == [b"x"]
    assert c.on_fetch_response(2, [answer("t", 0, records=b"x")], 1701) == []  # abandoned
    c.sent_to_shard(4, apply)
    c.on_applied(4, [FollowerStateRow("t", 0, NONE, 1, 5, 1, False, 0)], 1800)
    c.next_fetch(5, 1800)
    assert c.next_deadline_ms() == 2800


def test_removed_partitions_are_not_fetched_and_their_answers_ignored() -> None:
    c = core()
    ready(c, ("t", 0, 0, -1), ("t", 1, 0, -1))
    c.next_fetch(1, 0)
    c.remove([("t", 0)])
    apply = c.on_fetch_response(1, [answer("t", 0, records=b"x"), answer("t", 1, records=b"y")],
                                1)
    assert [r.partition for r in apply] == [1]
    c.remove([("t", 1)])
    assert c.idle


def test_a_shard_answer_that_never_comes_is_given_up() -> None:
    c = core()
    c.add([FetcherPartitionRow("t", 0, 1, 5)])
    c.sent_to_shard(9, c.to_initialise(), 0)
    assert c.next_fetch(1, 10) == []
    assert c.next_deadline_ms() == 1000
    c.check_timeout(1000)
    assert c.partitions[("t", 0)].state == DELAYED
    c.wake(1100)
    assert [r.partition for r in c.to_initialise()] == [0]


def test_a_moved_leader_log_start_is_applied_and_the_next_fetch_reports_the_followers() -> None:
    """DeleteRecords or retention on the leader: an answer without records but with a higher
    log start goes to the shard; the follower's own log start rides in its next fetches."""
    c = core()
    ready(c, ("t", 0, 10, 5))
    assert [r.log_start_offset for r in c.next_fetch(1, 0)] == [0]
    apply = c.on_fetch_response(1, [answer("t", 0, log_start=6)], 1)
    assert [(r.records, r.leader_log_start_offset) for r in apply] == [(b"", 6)]
    c.sent_to_shard(2, apply)
    c.on_applied(2, [FollowerStateRow("t", 0, NONE, 10, 5, 10, False, 6)], 2)
    assert [r.log_start_offset for r in c.next_fetch(3, 2)] == [6]
    assert c.on_fetch_response(3, [answer("t", 0, log_start=6)], 3) == []  # nothing new


def test_a_partition_removed_while_its_shard_applies_holds_back_no_fetch() -> None:
    """Its shard's process died with the answer (num.processes > 1): once the ReplicaManager
    removes and adds the partition again, the others are fetched without waiting for the
    lost answer's timeout, and the partition is asked for its state anew."""
    c = core()
    ready(c, ("t", 0, 0, -1), ("t", 1, 0, -1))
    c.next_fetch(1, 0)
    apply = c.on_fetch_response(1, [answer("t", 0, records=b"batch", hw=3), answer("t", 1)], 5)
    c.sent_to_shard(7, apply)
    assert c.next_fetch(2, 5) == []  # partition 0's answer is awaited
    c.remove([("t", 0)])
    assert not c.applying
    c.add([FetcherPartitionRow("t", 0, 1, 5)])
    init = c.to_initialise()
    assert [r.partition for r in init] == [0]
    c.sent_to_shard(8, init, 6)
    c.on_applied(8, [FollowerStateRow("t", 0, NONE, 2, 5, 0, False)], 7)
    rows = c.next_fetch(3, 7)  # no wait for answer 7, which never comes
    assert {(r.partition, r.fetch_offset) for r in rows} == {(0, 2), (1, 0)}
