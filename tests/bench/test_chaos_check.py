"""The chaos checker finds planted loss, duplication, reordering, moves and skipped commits."""

from __future__ import annotations

from bench.chaos_check import Fault, Sent, Stored, check

START = 1_000_000


def clean_run(n: int = 20) -> tuple[list[Sent], list[Stored]]:
    """Producer 1 sends n records round robin to partitions 0 and 1; all acked and stored."""
    sent, stored = [], []
    offsets = {0: 0, 1: 0}
    for seq in range(n):
        p = seq % 2
        t = START + seq * 100
        sent.append(Sent(1, seq, p, t, t + 10, offsets[p]))
        stored.append(Stored(p, offsets[p], 1, seq))
        offsets[p] += 1
    return sent, stored


def test_a_clean_run_has_nothing_to_report() -> None:
    sent, stored = clean_run()
    result = check(sent, stored, stored, {0: 10, 1: 10}, [], START, START + 2000)
    assert result.ok
    assert (result.acked, result.lost, result.duplicated, result.reordered, result.moved,
            result.skipped) == (20, 0, 0, 0, 0, 0)
    assert result.availability == 1.0
    assert result.to_json(7)["seed"] == 7


def test_planted_loss_duplication_and_reordering_are_counted() -> None:
    sent, stored = clean_run()
    # seqs 15 and 17 acked (and stored) in the wrong order in partition 1
    sent[15], sent[17] = (Sent(1, 15, 1, sent[15].send_ms, sent[15].ack_ms, 8),
                          Sent(1, 17, 1, sent[17].send_ms, sent[17].ack_ms, 7))
    stored[15], stored[17] = Stored(1, 8, 1, 15), Stored(1, 7, 1, 17)
    del stored[4]                                   # seq 4 (partition 0, offset 2) lost
    stored.append(Stored(1, 10, 1, 7))              # seq 7 written twice
    stored.append(Stored(0, 10, 1, 2))              # seq 2 again, after higher seqs
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert not result.ok
    assert result.lost == 1
    assert result.duplicated == 2   # a later copy is not counted again as reordered
    assert result.reordered == 1
    assert result.examples["reordered"] == [
        "partition 1 offset 8: producer 1 seq 15 after seq 17"]
    assert result.examples["lost"] == [
        "producer 1 seq 4: acked at partition 0 offset 2, not in the log"]


def test_an_acked_record_found_elsewhere_was_moved() -> None:
    sent, stored = clean_run()
    stored[3] = Stored(1, 99, 1, 3)                 # acked at 1/1, the log has it at 1/99
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert (result.lost, result.moved) == (0, 1)


def test_a_record_acknowledged_without_an_offset_is_checked_too() -> None:
    """librdkafka's idempotent producer reports records of a request whose answer was lost as
    persisted, offset unknown, once a later batch is acknowledged: they count as acknowledged
    (they were left out of the loss check), and are found wherever the log has them."""
    sent, stored = clean_run()
    sent[4] = Sent(1, 4, 0, sent[4].send_ms, sent[4].ack_ms, None)   # stored at 0/2
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert result.ok and (result.acked, result.lost, result.moved) == (20, 0, 0)
    del stored[4]
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert (result.acked, result.lost) == (20, 1)
    assert result.examples["lost"] == [
        "producer 1 seq 4: acked at partition 0 offset unknown, not in the log"]


def test_a_record_acknowledged_without_an_offset_found_in_another_partition_moved() -> None:
    """Its offset unknown, a record is still checked for its partition: one found in
    another partition alone was moved."""
    sent, stored = clean_run()
    sent[3] = Sent(1, 3, 1, sent[3].send_ms, sent[3].ack_ms, None)   # acked at 1/?
    stored[3] = Stored(0, 99, 1, 3)                                 # the log has it at 0/99
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert not result.ok and (result.lost, result.moved) == (0, 1)
    assert result.examples["moved"] == ["producer 1 seq 3: acked at 1/?, found at 0/99"]
    stored.append(Stored(1, 100, 1, 3))          # a copy in its own partition too: not moved
    result = check(sent, stored, stored, {}, [], START, START + 2000)
    assert (result.moved, result.duplicated) == (0, 1)


def test_a_commit_past_an_unread_record_is_skipped() -> None:
    sent, stored = clean_run()
    delivered = [s for s in stored if not (s.partition == 1 and s.offset == 3)]
    assert check(sent, stored, delivered, {1: 3}, [], START, START + 2000).skipped == 0
    result = check(sent, stored, delivered, {1: 4}, [], START, START + 2000)
    assert result.skipped == 1


def test_unacknowledged_records_may_be_missing_but_not_duplicated() -> None:
    sent, stored = clean_run(4)
    sent.append(Sent(1, 4, 0, START + 500, error="timed out"))
    assert check(sent, stored, stored, {}, [], START, START + 1000).ok
    stored += [Stored(0, 2, 1, 4), Stored(0, 3, 1, 4)]
    result = check(sent, stored, stored, {}, [], START, START + 1000)
    assert (result.failed, result.lost, result.duplicated) == (1, 0, 1)


def test_availability_counts_seconds_with_an_acknowledgement() -> None:
    sent = [Sent(1, i, 0, START + t, START + t + 5, i) for i, t in enumerate((0, 200, 2500))]
    stored = [Stored(0, i, 1, i) for i in range(3)]
    result = check(sent, stored, stored, {}, [], START, START + 4000)
    assert result.availability == 0.5  # seconds 0 and 2 of 4


def test_failover_is_the_first_ack_after_the_fault_on_the_partitions_it_led() -> None:
    sent, stored = clean_run(40)
    # a fault at +1000 ms on the leader of partition 0: acks of records sent after it
    # come from +1000 on (seq 10 is sent at +1000, acked 10 ms later)
    faults = [Fault("kill", 3, START + 1000, START + 3000, (0,)),
              Fault("pause", 2, START + 1500, START + 2000, ()),         # led nothing
              Fault("netem", 1, START + 1600, START + 2000, (0, 1)),     # slows, no failover
              Fault("isolate", 1, START + 9000, START + 9500, (0, 1))]  # nothing after it
    result = check(sent, stored, stored, {}, faults, START, START + 10_000)
    assert result.failover_ms == [10]
    assert result.unrecovered_faults == 1
    assert result.failover_summary() == {"min": 10, "median": 10, "max": 10, "count": 1}
