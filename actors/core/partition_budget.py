"""How many partitions one request, and one node, may take on.

Every partition a node hosts keeps file descriptors open for as long as it is
open: its segments' ``.log`` files (one each) and the active segment's
``.index`` and ``.timeindex``, which are memory maps; CPython's ``mmap`` keeps
a duplicate of the descriptor it maps, so a fresh partition holds three
(measured: ``.log``, ``.index``, ``.timeindex`` in ``/proc/self/fd``), and two
of the process's memory maps (``vm.max_map_count``). A node told to create
more partitions than its limits hold runs out of descriptors part way
(EMFILE) and then cannot accept a connection or open a socket between actors:
the live fuzzer's CreateTopics of 131,073 partitions did that (issue 17).

So the controllers refuse, before anything is written:

* a request adding more than :data:`MAX_PARTITIONS_PER_REQUEST` partitions in
  all, as Kafka's controller does (``MAX_PARTITIONS_PER_BATCH``, KAFKA-17870
  for CreateTopics, KAFKA-19673 for CreatePartitions): every topic of it gets
  POLICY_VIOLATION;
* a topic whose partitions would take a node past what its open-files limit
  (``ulimit -n``, less a reserve for connections, fetches in flight and the
  runtime's own sockets) or its memory-map limit holds: POLICY_VIOLATION with
  the numbers. Kafka's own answer to "too many partitions" is that code; its
  INVALID_PARTITIONS means a count wrong in itself (below 1, or not growing).

Pure: the shell reads the limits (``actors/partition_limits.py``) and hands
them in.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.errors import ErrorCode, KafkaError

MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's MAX_PARTITIONS_PER_BATCH: partitions one CreateTopics or CreatePartitions adds."""

FDS_PER_PARTITION = 3
"""Descriptors an open partition holds: the segment log and the two index maps' duplicates."""

MAPS_PER_PARTITION = 2
"""Memory maps an open partition holds: the active segment's two indexes."""

MIN_RESERVED_FDS = 256
"""Descriptors never given to partitions, at least: connections, fetch regions, sockets."""

MIN_RESERVED_MAPS = 4096
"""Memory maps never given to partitions, at least: libraries, thread stacks, the heap."""


class PolicyViolationError(KafkaError):
    code = ErrorCode.POLICY_VIOLATION


def reserved_fds(open_files_limit: int) -> int:
    """The descriptors kept out of the partitions' reach: an eighth of the limit, at least
    :data:`MIN_RESERVED_FDS`."""
    return max(MIN_RESERVED_FDS, open_files_limit // 8)


@dataclass(frozen=True, slots=True)
class PartitionBudget:
    """One node's limits, as read by its shell."""

    open_files_limit: int
    """The soft RLIMIT_NOFILE of the process that opens the partitions (``ulimit -n``)."""
    max_map_count: int | None = None
    """``vm.max_map_count``, when known."""

    @property
    def reserved_fds(self) -> int:
        return reserved_fds(self.open_files_limit)

    @property
    def reserved_maps(self) -> int:
        if self.max_map_count is None:
            return 0
        return max(MIN_RESERVED_MAPS, self.max_map_count // 8)

    @property
    def max_partitions(self) -> int:
        """Partitions the node can hold open at once (0 when the limit is below the reserve)."""
        by_fds = max(0, self.open_files_limit - self.reserved_fds) // FDS_PER_PARTITION
        if self.max_map_count is None:
            return by_fds
        by_maps = max(0, self.max_map_count - self.reserved_maps) // MAPS_PER_PARTITION
        return min(by_fds, by_maps)

    def describe(self) -> str:
        """The limit in words, for error messages and the log."""
        text = (f"ulimit -n {self.open_files_limit}: {FDS_PER_PARTITION} file descriptors a "
                f"partition, {self.reserved_fds} kept for connections")
        if self.max_map_count is not None:
            text += (f"; vm.max_map_count {self.max_map_count}: {MAPS_PER_PARTITION} maps a "
                     f"partition, {self.reserved_maps} kept")
        return text


def check_request_size(added: int) -> None:
    """POLICY_VIOLATION for a request adding more than Kafka's per-request maximum."""
    if added > MAX_PARTITIONS_PER_REQUEST:
        raise PolicyViolationError(
            f"Excessively large number of partitions per request: {added} partitions asked "
            f"for in all, at most {MAX_PARTITIONS_PER_REQUEST} per request")


def check_node_budget(topic: str, added: int, hosted: int, budget: PartitionBudget,
                      node: str = "this node") -> None:
    """POLICY_VIOLATION when ``added`` more partitions of ``topic`` would take a node that
    holds ``hosted`` past what its limits hold."""
    limit = budget.max_partitions
    if hosted + added > limit:
        raise PolicyViolationError(
            f"topic {topic!r}: {added} new partition(s) would make {hosted + added} on "
            f"{node}, over the {limit} its limits hold ({budget.describe()}); "
            f"{max(0, limit - hosted)} more can be created (raise ulimit -n for more)")


def request_total(counts: list[int]) -> int:
    """The partitions a request adds in all (negative counts, refused elsewhere, add none)."""
    return sum(max(0, c) for c in counts)
