"""Follower truncation by leader epoch (KIP-101/279/320), on real partition logs.

The rule's cases one by one, then a property: two replicas that take turns
leading (each new leader starts a new epoch at its log end, appends, and the
other copies part of it through the very exchange under test: fetch with its
last epoch, truncate on a divergence answer, append as follower) always end
with identical logs once the last follower has caught up, and the follower
never cuts below what both held in common (its high watermark) without a
divergence answer saying so.
"""

from __future__ import annotations

import shutil

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.core.follower_truncation import Truncation, reset_offset, truncation_offset
from actors.core.partition_log import LogConfig, PartitionLog
from actors.core.partition_state import PartitionState
from actors.core.record_batch import build_batch, check_batches
from tests.fixtures.scratch import scratch_dir


def test_rule_cases() -> None:
    # Same epoch on both sides: the smaller end.
    assert truncation_offset(3, 10, (3, 12), 15, 5) == Truncation(10, True)
    assert truncation_offset(3, 14, (3, 12), 15, 5) == Truncation(12, True)
    # The follower lacks the leader's epoch: cut at its own end of the epoch below, ask again.
    assert truncation_offset(3, 10, (2, 8), 15, 5) == Truncation(8, False)
    # The leader knows no epoch: fall back to the high watermark.
    assert truncation_offset(-1, -1, (-1, -1), 15, 5) == Truncation(5, True)
    # The follower has no epochs at all: the leader's end.
    assert truncation_offset(3, 10, (-1, -1), 15, 5) == Truncation(10, True)
    # Never past the follower's own log end.
    assert truncation_offset(3, 40, (3, 40), 15, 5) == Truncation(15, True)


def test_reset_after_out_of_range() -> None:
    assert reset_offset(50, 0, 40) == ("truncate", 40)   # leader behind: unclean election
    assert reset_offset(5, 20, 60) == ("restart", 20)    # follower behind the log start


def _records(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    out = []
    for segment in log.segments:
        data = segment.read_bytes(0, segment.size) if hasattr(segment, "read_bytes") else None
        if data is None:
            info = log.read(segment.base_offset, 1 << 30, None, True)
            data = bytes(info.records)
        for header in check_batches(data):
            out.append((header.base_offset, header.partition_leader_epoch,
                        data[header.position:header.position + header.size][-8:]))
    return out


def _epoch_at(log: PartitionLog, offset: int) -> int:
    """The epoch the follower's epoch cache gives ``offset``."""
    found = -1
    for epoch, start in log.epoch_cache.entries:
        if start <= offset:
            found = epoch
    return found


def _sync(leader: PartitionState, follower: PartitionLog, max_records: int | None,
          now_ms: int = 0) -> int:
    """The fetch/truncate/append exchange until caught up (or ``max_records`` copied).
    Returns how many truncations the follower made."""
    truncations = 0
    copied = 0
    for _round in range(200):
        offset = follower.log_end_offset
        diverging = leader.diverging_epoch(follower.latest_epoch, offset)
        if diverging is not None:
            hw_before = follower.high_watermark
            cut = truncation_offset(diverging[0], diverging[1],
                                    follower.end_offset_for_epoch(diverging[0]),
                                    follower.log_end_offset, follower.high_watermark)
            assert cut.offset >= min(hw_before, diverging[1]) or diverging[1] < 0
            if follower.truncate_to(cut.offset, now_ms):
                truncations += 1
            continue
        if offset >= leader.log.log_end_offset:
            return truncations
        if max_records is not None and copied >= max_records:
            return truncations
        info = leader.log.read(offset, 1 << 20, None, True)
        headers = check_batches(info.records)
        data = bytes(info.records)
        if max_records is not None:
            keep = headers[:max(1, min(len(headers), max_records - copied))]
            data = data[:keep[-1].position + keep[-1].size]
            headers = keep
        follower.append_as_follower(data, now_ms)
        copied += len(headers)
        follower.update_high_watermark(min(leader.log.high_watermark, follower.log_end_offset))
    raise AssertionError("no convergence in 200 rounds")


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 5)),
                      min_size=1, max_size=8))
def test_replicas_taking_turns_end_with_identical_logs(
        turns: list[tuple[bool, int, int]]) -> None:
    """Each turn: a leader (A or B) at a new epoch appends ``n`` batches; the other copies
    up to ``m`` of what it lacks before the next turn. Finally the follower catches up."""
    tmp = scratch_dir("truncation-")  # in memory: tests/fixtures/scratch.py
    logs = {name: PartitionLog.open(tmp / name / "t-0", "t", 0, LogConfig(), 0)
            for name in ("a", "b")}
    try:
        leader_name = "a"
        for epoch, (switch, n, m) in enumerate(turns):
            if switch:
                leader_name = "b" if leader_name == "a" else "a"
            leader_log = logs[leader_name]
            follower_log = logs["b" if leader_name == "a" else "a"]
            state = PartitionState.hosted(leader_log, 1, 1)
            state.become_leader(epoch, [1], [1, 2], partition_epoch=epoch)
            for i in range(n):
                leader_log.append_as_leader(build_batch([f"{epoch}-{i}".encode()]), epoch, 0)
            _sync(state, follower_log, m)
        state = PartitionState.hosted(logs[leader_name], 1, 1)
        state.become_leader(len(turns), [1], [1, 2], partition_epoch=len(turns))
        follower_log = logs["b" if leader_name == "a" else "a"]
        _sync(state, follower_log, None)
        assert _records(follower_log) == _records(logs[leader_name])
        for offset, epoch, _tail in _records(follower_log):
            assert _epoch_at(follower_log, offset) == epoch
    finally:
        for log in logs.values():
            log.close_without_flush()
        shutil.rmtree(tmp, ignore_errors=True)
