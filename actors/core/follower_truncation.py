"""Where a follower cuts its log when the leader says it diverges (KIP-101/279/320).

Pure functions of epochs and end offsets, as Kafka's
AbstractFetcherThread.getOffsetTruncationState: the leader answers a fetch
with the end offset of the largest epoch it shares with the follower's last
fetched epoch; the follower looks up its own end of that epoch and keeps the
smaller of the two. If the follower's log has no such epoch, it cuts at the
end of its own largest epoch below and fetches again (the next answer
continues the exchange); if the leader knows no epoch at all, the follower
falls back to its high watermark, the only point known to be committed.
"""

from __future__ import annotations

from typing import NamedTuple

UNDEFINED = -1


class Truncation(NamedTuple):
    offset: int       # cut the log here (nothing at or above it is kept)
    completed: bool   # False: fetch again with the new last epoch; the leader may say more


def truncation_offset(leader_epoch: int, leader_end_offset: int,
                      follower_epoch_end: tuple[int, int], log_end_offset: int,
                      high_watermark: int) -> Truncation:
    """The truncation point for a divergence answer ``(leader_epoch, leader_end_offset)``.

    ``follower_epoch_end`` is the follower's own ``end_offset_for_epoch(leader_epoch)``.
    The result never exceeds the follower's log end offset.
    """
    if leader_end_offset == UNDEFINED:
        return Truncation(min(high_watermark, log_end_offset), True)
    if leader_epoch == UNDEFINED:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end = follower_epoch_end
    if follower_end == UNDEFINED:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    if follower_epoch != leader_epoch:
        return Truncation(min(follower_end, log_end_offset), False)
    return Truncation(min(leader_end_offset, follower_end, log_end_offset), True)


def reset_offset(fetch_offset: int, leader_log_start_offset: int,
                 leader_log_end_offset: int) -> tuple[str, int]:
    """What a follower does after OFFSET_OUT_OF_RANGE (Kafka's handleOutOfRangeError).

    ("truncate", leader LEO) when the leader's log ends below the follower's
    fetch offset (only possible after an unclean election); otherwise
    ("restart", leader log start): the follower's log is emptied and starts
    where the leader's begins.
    """
    if 0 <= leader_log_end_offset < fetch_offset:
        return "truncate", leader_log_end_offset
    return "restart", max(leader_log_start_offset, 0)
