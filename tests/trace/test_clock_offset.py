"""The clock offset estimate: Ping/Pong exchanges, one-way bounds, no real clock."""

from __future__ import annotations

import pytest

from actors.runtime.tracing import ClockOffsetEstimator, Tracer

SKEW = 3_000_000  # the reference clock is 3 ms ahead of ours


def test_symmetric_exchange_recovers_the_offset_exactly() -> None:
    est = ClockOffsetEstimator()
    assert est.offset_ns == 0 and est.error_bound_ns is None
    est.add_exchange(
        ping_sent_ns=1_000_000, reference_ns=1_000_000 + 50_000 + SKEW, pong_recv_ns=1_100_000
    )
    assert est.offset_ns == SKEW
    assert est.error_bound_ns == 50_000


def test_the_shortest_round_trip_wins_over_a_queued_one() -> None:
    est = ClockOffsetEstimator()
    # the pong waited 900 us in a queue on the way back: a biased sample
    est.add_exchange(0, 100_000 + SKEW, 1_000_000)
    est.add_exchange(2_000_000, 2_020_000 + SKEW, 2_040_000)
    assert est.offset_ns == SKEW


def test_old_samples_leave_the_window() -> None:
    est = ClockOffsetEstimator(window=2)
    est.add_exchange(0, 10 + SKEW, 20)  # best round trip, but the clock has drifted since
    est.add_exchange(100, 150 + 2 * SKEW, 200)
    est.add_exchange(300, 350 + 2 * SKEW, 400)
    assert est.offset_ns == 2 * SKEW


def test_one_way_messages_bound_the_estimate_from_below() -> None:
    est = ClockOffsetEstimator()
    est.add_one_way(sent_reference_ns=5_000_000 + SKEW, recv_own_ns=5_000_200)
    assert est.offset_ns == SKEW - 200  # the delay is unknown: a lower bound
    est.add_exchange(0, 1_000 + SKEW - 1_000_000, 2_000)  # an estimate below the bound
    assert est.offset_ns == SKEW - 200


def test_pong_before_ping_is_refused() -> None:
    with pytest.raises(ValueError, match="pong received before its ping was sent"):
        ClockOffsetEstimator().add_exchange(10, 0, 5)


def test_events_carry_the_offset_set_at_their_time() -> None:
    tracer = Tracer("n", None, 0.0)
    tracer.event("send", 1, 2, 0, "a", "b", "Ping", mono_ns=1, wall_ns=2)
    tracer.set_clock_offset(SKEW)
    tracer.event("send", 1, 3, 0, "a", "b", "Ping", mono_ns=3, wall_ns=4)
    assert [e[-1] for e in tracer._events] == [0, SKEW]
