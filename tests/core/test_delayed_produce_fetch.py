"""DelayedProduce and DelayedFetch: each completion rule, expiry, and through a purgatory."""

from __future__ import annotations

from actors.core.delayed_operation import DelayedOperationPurgatory
from actors.core.delayed_produce_fetch import (
    DelayedFetch,
    DelayedProduce,
    FetchPartitionStatus,
    PartitionStatus,
    ProduceOutcome,
    ProducePartitionResponse,
    ProducePartitionStatus,
    SegmentPosition,
    TopicPartition,
)
from wire.errors import ErrorCode

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def status(
    tp: TopicPartition,
    *,
    hw: int = 0,
    leo: int | None = None,
    is_leader: bool = True,
    epoch: int = 3,
    isr: int = 3,
    min_isr: int = 2,
    hw_pos: tuple[int, int] = (0, 0),
    leo_pos: tuple[int, int] | None = None,
    since: int = -1,
) -> PartitionStatus:
    return PartitionStatus(
        tp.topic,
        tp.partition,
        high_watermark=hw,
        log_end_offset=hw if leo is None else leo,
        is_leader=is_leader,
        leader_epoch=epoch,
        isr_size=isr,
        min_insync_replicas=min_isr,
        high_watermark_position=SegmentPosition(*hw_pos),
        log_end_position=SegmentPosition(*(hw_pos if leo_pos is None else leo_pos)),
        leader_since_epoch=since,
    )


# -- DelayedProduce ---------------------------------------------------------------


def produce() -> DelayedProduce:
    partitions = {
        A: ProducePartitionStatus(
            required_offset=10,
            base_offset=5,
            log_append_time_ms=-1,
            log_start_offset=0,
            leader_epoch=3,
        ),
        B: ProducePartitionStatus(
            required_offset=20, base_offset=18, log_append_time_ms=-1, log_start_offset=0
        ),
    }
    return DelayedProduce(1000, partitions)


def test_produce_completes_when_every_partition_reached_its_offset() -> None:
    purgatory = DelayedOperationPurgatory()
    op = produce()
    assert op.watch_keys == (A, B)
    assert purgatory.try_complete_else_watch(op, op.watch_keys, {A: status(A, hw=9)}) is False
    assert purgatory.check_and_complete(A, status(A, hw=10)) == []
    assert op.pending_partitions == {B}
    assert purgatory.check_and_complete(B, status(B, hw=19)) == []
    assert purgatory.check_and_complete(B, status(B, hw=25)) == [op]
    assert op.outcome == ProduceOutcome(
        {
            A: ProducePartitionResponse(ErrorCode.NONE, 5, -1, 0),
            B: ProducePartitionResponse(ErrorCode.NONE, 18, -1, 0),
        },
        timed_out=False,
    )


def test_produce_accepts_plain_tuple_keys() -> None:
    op = DelayedProduce(1000, {("t", 0): ProducePartitionStatus(required_offset=3)})
    purgatory = DelayedOperationPurgatory()
    purgatory.try_complete_else_watch(op, [("t", 0)])
    assert purgatory.check_and_complete(("t", 0), status(A, hw=3)) == [op]
    assert op.outcome.responses[("t", 0)].error_code == ErrorCode.NONE


def test_produce_leader_moved_answers_not_leader_for_that_partition_only() -> None:
    op = produce()
    op.observe(A, status(A, hw=0, is_leader=False))
    assert op.try_complete() is False  # B still waits
    op.observe(B, status(B, hw=20))
    assert op.try_complete() is True
    errors = {tp: r.error_code for tp, r in op.outcome.responses.items()}
    assert errors == {A: ErrorCode.NOT_LEADER_OR_FOLLOWER, B: ErrorCode.NONE}


def test_produce_leader_epoch_change_counts_as_leader_moved() -> None:
    op = produce()
    op.observe(A, status(A, hw=50, epoch=4))  # a new epoch: our append may be gone
    op.observe(B, status(B, hw=50, epoch=4))  # B recorded no epoch: only HW matters
    assert op.try_complete()
    assert op.outcome.responses[A].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert op.outcome.responses[B].error_code == ErrorCode.NONE


def test_produce_a_leader_that_stayed_over_a_new_epoch_still_waits_for_the_high_watermark() -> None:
    # A at epoch 3; the controller took a follower out of the ISR (epoch 4, same leader)
    op = produce()
    op.observe(A, status(A, hw=5, epoch=4, since=2))
    assert op.pending_partitions == {A, B}
    op.observe(A, status(A, hw=10, epoch=4, since=2))
    op.observe(B, status(B, hw=20, epoch=4, since=4))
    assert op.try_complete()
    assert op.outcome.responses[A] == ProducePartitionResponse(ErrorCode.NONE, 5, -1, 0)
    # led again from epoch 4 on (another leader between): the append may be gone
    op = produce()
    op.observe(A, status(A, hw=50, epoch=5, since=4))
    op.observe(B, status(B, hw=50))
    assert op.try_complete()
    assert op.outcome.responses[A].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_produce_isr_below_min_insync_replicas_answers_not_enough_replicas_after_append() -> None:
    op = produce()
    op.observe(A, status(A, hw=2, isr=1, min_isr=2))
    op.observe(B, status(B, hw=20, isr=1, min_isr=2))  # reached, but the ISR is too small
    assert op.try_complete()
    errors = {tp: r.error_code for tp, r in op.outcome.responses.items()}
    assert errors == {
        A: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        B: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }


def test_produce_settled_partition_keeps_its_answer() -> None:
    op = produce()
    op.observe(A, status(A, hw=10))
    op.observe(A, status(A, hw=10, is_leader=False))  # too late to change A's answer
    op.observe(B, status(B, hw=20))
    assert op.try_complete()
    assert op.outcome.responses[A].error_code == ErrorCode.NONE


def test_produce_expiry_times_out_only_the_unfinished_partitions() -> None:
    purgatory = DelayedOperationPurgatory()
    op = produce()
    purgatory.try_complete_else_watch(op, op.watch_keys)
    purgatory.check_and_complete(A, status(A, hw=10))
    assert purgatory.expire(op) is True
    assert op.outcome.timed_out
    errors = {tp: r.error_code for tp, r in op.outcome.responses.items()}
    assert errors == {A: ErrorCode.NONE, B: ErrorCode.REQUEST_TIMED_OUT}
    # The HW arriving after the expiry changes nothing.
    assert purgatory.check_and_complete(B, status(B, hw=20)) == []
    assert op.outcome.responses[B].error_code == ErrorCode.REQUEST_TIMED_OUT


def test_produce_partition_with_local_error_is_not_waited_on() -> None:
    op = DelayedProduce(
        1000,
        {
            A: ProducePartitionStatus(required_offset=-1, error_code=ErrorCode.MESSAGE_TOO_LARGE),
            B: ProducePartitionStatus(required_offset=20),
        },
    )
    assert op.watch_keys == (B,)
    op.observe(B, status(B, hw=20))
    assert op.try_complete()
    assert op.outcome.responses[A].error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_produce_with_only_failed_partitions_completes_at_once() -> None:
    op = DelayedProduce(1000, {A: ProducePartitionStatus(-1, error_code=ErrorCode.CORRUPT_MESSAGE)})
    purgatory = DelayedOperationPurgatory()
    assert purgatory.try_complete_else_watch(op, [A]) is True
    assert op.outcome.responses[A].error_code == ErrorCode.CORRUPT_MESSAGE
    assert purgatory.num_delayed == 0


# -- DelayedFetch ------------------------------------------------------------------


def fetch(
    min_bytes: int = 100, *, from_follower: bool = False, epoch: int | None = None
) -> DelayedFetch:
    return DelayedFetch(
        500,
        {
            A: FetchPartitionStatus(
                10, SegmentPosition(0, 1000), max_bytes=1 << 20, current_leader_epoch=epoch
            ),
            B: FetchPartitionStatus(40, SegmentPosition(30, 200), max_bytes=60),
        },
        min_bytes=min_bytes,
        from_follower=from_follower,
    )


def test_fetch_accumulates_bytes_across_partitions_until_min_bytes() -> None:
    purgatory = DelayedOperationPurgatory()
    op = fetch(min_bytes=100)
    assert purgatory.try_complete_else_watch(op, op.watch_keys) is False
    assert purgatory.check_and_complete(A, status(A, hw=12, hw_pos=(0, 1070))) == []
    assert op.accumulated_bytes == 70
    # B has 500 bytes more but its fetch size caps what it adds at 60.
    assert purgatory.check_and_complete(B, status(B, hw=45, hw_pos=(30, 700))) == [op]
    assert op.accumulated_bytes == 130
    assert op.outcome.reason == "min_bytes" and not op.outcome.timed_out
    assert op.outcome.read == (A, B) and op.outcome.errors == {}


def test_fetch_accepts_positions_as_plain_pairs() -> None:
    op = DelayedFetch(500, {A: FetchPartitionStatus(10, (0, 1000), max_bytes=100)}, min_bytes=50)  # type: ignore[arg-type]
    op.observe(A, status(A, hw=12)._replace(high_watermark_position=[0, 1060]))  # type: ignore[arg-type]
    assert op.accumulated_bytes == 60 and op.try_complete()


def test_fetch_uses_the_latest_status_not_a_sum_of_updates() -> None:
    op = fetch(min_bytes=100)
    op.observe(A, status(A, hw=11, hw_pos=(0, 1050)))
    op.observe(A, status(A, hw=12, hw_pos=(0, 1090)))
    assert op.accumulated_bytes == 90
    assert op.try_complete() is False


def test_consumer_fetch_waits_for_the_high_watermark_follower_for_the_log_end() -> None:
    appended = status(A, hw=10, leo=20, hw_pos=(0, 1000), leo_pos=(0, 5000))
    consumer, follower = fetch(min_bytes=1), fetch(min_bytes=1, from_follower=True)
    consumer.observe(A, appended)
    follower.observe(A, appended)
    assert consumer.accumulated_bytes == 0 and consumer.try_complete() is False
    assert follower.accumulated_bytes == 4000 and follower.try_complete() is True


def test_fetch_completes_when_its_offset_left_the_active_segment() -> None:
    op = fetch(min_bytes=10**9)
    op.observe(A, status(A, hw=11, hw_pos=(11, 0)))  # a roll: the end is in a newer segment
    assert op.try_complete()
    assert op.outcome.reason == "segment_changed" and op.outcome.read == (A, B)


def test_fetch_completes_when_the_end_is_on_an_older_segment() -> None:
    op = fetch(min_bytes=10**9)
    op.observe(B, status(B, hw=35, hw_pos=(20, 900)))  # truncated below the fetch offset
    assert op.try_complete()
    assert op.outcome.reason == "segment_changed"


def test_fetch_completes_when_a_leader_moved_and_skips_reading_it() -> None:
    op = fetch(min_bytes=10**9)
    op.observe(B, status(B, is_leader=False))
    assert op.try_complete()
    assert op.outcome.reason == "leader_moved"
    assert op.outcome.read == (A,)
    assert op.outcome.errors == {B: ErrorCode.NOT_LEADER_OR_FOLLOWER}


def test_fetch_with_a_stale_or_future_leader_epoch_completes() -> None:
    stale = fetch(min_bytes=10**9, epoch=2)
    stale.observe(A, status(A, epoch=3, hw=10, hw_pos=(0, 1000)))
    assert stale.try_complete()
    assert stale.outcome.errors == {A: ErrorCode.FENCED_LEADER_EPOCH}
    future = fetch(min_bytes=10**9, epoch=5)
    future.observe(A, status(A, epoch=3, hw=10, hw_pos=(0, 1000)))
    assert future.try_complete()
    assert future.outcome.errors == {A: ErrorCode.UNKNOWN_LEADER_EPOCH}


def test_fetch_at_the_end_has_nothing_and_waits() -> None:
    op = fetch(min_bytes=1)
    op.observe(A, status(A, hw=10, hw_pos=(0, 1000)))
    assert op.accumulated_bytes == 0 and op.try_complete() is False


def test_fetch_expiry_answers_with_what_is_there() -> None:
    purgatory = DelayedOperationPurgatory()
    op = fetch(min_bytes=100)
    purgatory.try_complete_else_watch(op, op.watch_keys, {A: status(A, hw=11, hw_pos=(0, 1010))})
    assert purgatory.expire(op)
    assert op.outcome.timed_out and op.outcome.reason == "timed_out"
    assert op.outcome.read == (A, B)
