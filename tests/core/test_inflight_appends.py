"""InFlightAppends: an append is given up on no earlier than ``wait_ms`` after it was
sent and no later than ``wait_ms + bucket_ms``; answers after that are counted late."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.core.inflight_appends import ID_BAND, InFlightAppends, LoadReads, id_start


def test_appends_expire_by_bucket_in_send_order() -> None:
    appends: InFlightAppends[str] = InFlightAppends(wait_ms=100, bucket_ms=10)
    appends.add(1, "a", now_ms=0)
    appends.add(2, "b", now_ms=9)  # same bucket as 1
    appends.add(3, "c", now_ms=10)  # a new one
    assert appends.next_expiry_ms() == 110
    assert appends.expire(109) == []
    assert appends.expire(110) == [(1, "a"), (2, "b")]
    assert appends.next_expiry_ms() == 120
    assert appends.pop(3) == "c"
    assert appends.next_expiry_ms() is None  # nothing waits: no wake-up
    assert (appends.expired, appends.late, len(appends)) == (2, 0, 0)


def test_an_answer_after_the_timeout_is_counted_late_and_the_burst_logged_once() -> None:
    appends: InFlightAppends[int] = InFlightAppends(wait_ms=100, bucket_ms=10)
    appends.add(1, 11, 0)
    appends.add(2, 12, 0)
    assert appends.expire(200) == [(1, 11), (2, 12)]
    assert appends.first_of_burst()
    assert appends.pop(1) is None and not appends.first_of_burst()
    assert appends.pop(2) is None and not appends.first_of_burst()
    assert appends.late == 2
    appends.add(3, 13, 300)
    assert appends.pop(3) == 13  # answered in time: the burst is over
    assert appends.first_of_burst()


def test_request_ids_must_grow_and_the_waits_be_positive() -> None:
    appends: InFlightAppends[int] = InFlightAppends(wait_ms=100, bucket_ms=10)
    appends.add(5, 0, 0)
    with pytest.raises(ValueError, match="request id 4 is not above 5"):
        appends.add(4, 0, 50)
    with pytest.raises(ValueError, match="must be positive"):
        InFlightAppends(0, 10)


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=60),
       st.integers(1, 50), st.integers(1, 20))
def test_never_early_never_later_than_a_bucket_past_the_wait(
        steps: list[tuple[int, bool]], wait_ms: int, bucket_ms: int) -> None:
    """Random sends, answers and clock steps against a model with a deadline per append."""
    appends: InFlightAppends[int] = InFlightAppends(wait_ms, bucket_ms)
    sent_at: dict[int, int] = {}
    now = 0
    for rid, (step, answer) in enumerate(steps, start=1):
        now += step
        for got_rid, value in appends.expire(now):
            assert value == got_rid
            assert now - sent_at.pop(got_rid) >= wait_ms, "given up on early"
        for waiting_rid, at in sent_at.items():
            assert now - at < wait_ms + bucket_ms, f"{waiting_rid} kept past its bound"
        if answer and sent_at:
            oldest = next(iter(sent_at))
            assert appends.pop(oldest) == oldest
            del sent_at[oldest]
        appends.add(rid, rid, now)
        sent_at[rid] = now
    assert len(appends) == len(sent_at)


def test_a_load_read_overdue_is_still_taken_and_the_timeout_doubles() -> None:
    reads = LoadReads(timeout_ms=100, max_timeout_ms=300)
    reads.sent(1, {0: 0, 1: 5}, now_ms=0)
    assert (reads.waiting(), reads.next_due_ms()) == (True, 100)
    assert reads.expire(99, {0: 0, 1: 5}) == 0
    assert reads.expire(100, {0: 0, 1: 5}) == 1
    assert (reads.waiting(), reads.timeout_ms) == (False, 200)
    reads.sent(2, {0: 0, 1: 5}, now_ms=100)  # read again; the first may still come
    assert reads.next_due_ms() == 300
    assert reads.answered(1) == {0: 0, 1: 5}  # late, still taken
    assert reads.answered(1) is None  # once
    assert reads.waiting()
    assert reads.expire(300, {1: 5}) == 1
    assert reads.timeout_ms == 300  # capped
    reads.sent(3, {1: 5}, now_ms=300)
    assert reads.expire(600, {1: 9}) == 1  # 3 is overdue; 2 and 3 asked offsets read since
    assert reads.answered(2) is None and reads.answered(3) is None
    reads.reset()
    assert (reads.timeout_ms, reads.waiting(), reads.next_due_ms()) == (100, False, None)
    with pytest.raises(ValueError, match="timeout_ms"):
        LoadReads(timeout_ms=0, max_timeout_ms=10)


def test_each_instance_takes_ids_above_the_last_ones() -> None:
    first = id_start(now_ns=1000, floor=0)
    assert first == 1000
    second = id_start(now_ns=1000, floor=first + ID_BAND)  # restarted at the same instant
    assert second >= first + ID_BAND
    assert id_start(now_ns=second + 5 * ID_BAND, floor=second + ID_BAND) == second + 5 * ID_BAND
