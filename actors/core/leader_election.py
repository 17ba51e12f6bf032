"""Who leads a partition next: Kafka's controller election rules, as pure functions.

``assignment`` is the partition's replica list (its first entry is the
preferred leader); ``live`` the brokers that may lead (registered and not
shutting down). Every rule walks the assignment in order, so the choice is
deterministic and favours the preferred replica.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_leader(assignment: Sequence[int], isr: Collection[int], live: Collection[int],
                   unclean: bool = False) -> int | None:
    """The first live ISR member; with ``unclean``, failing that, the first live replica.

    An unclean leader may lack acknowledged records: that is why it is off by
    default (``unclean.leader.election.enable``).
    """
    for replica in assignment:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica
    return None


def preferred_leader(assignment: Sequence[int], isr: Collection[int],
                     live: Collection[int]) -> int | None:
    """The preferred replica, if it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(assignment: Sequence[int], isr: Collection[int],
                               live: Collection[int], shutting_down: Collection[int]
                               ) -> int | None:
    """The first live ISR member that is not shutting down."""
    for replica in assignment:
        if replica in live and replica in isr and replica not in shutting_down:
            return replica
    return None
