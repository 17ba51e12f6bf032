"""The bound on what one request, and one node, may create (issue 17)."""

from __future__ import annotations

import pytest

from actors.core.partition_budget import (
    FDS_PER_PARTITION,
    MAX_PARTITIONS_PER_REQUEST,
    PartitionBudget,
    PolicyViolationError,
    check_node_budget,
    check_request_size,
    request_total,
)
from wire.errors import ErrorCode


def test_the_node_holds_what_its_descriptors_hold_after_the_reserve() -> None:
    budget = PartitionBudget(1024)
    assert budget.reserved_fds == 256
    assert budget.max_partitions == (1024 - 256) // FDS_PER_PARTITION == 256
    assert PartitionBudget(1 << 20).reserved_fds == (1 << 20) // 8
    assert PartitionBudget(100).max_partitions == 0  # below the reserve: nothing


def test_memory_maps_bound_it_too() -> None:
    budget = PartitionBudget(1 << 20, max_map_count=65530)
    assert budget.reserved_maps == 8191
    assert budget.max_partitions == (65530 - 8191) // 2
    assert "vm.max_map_count 65530" in budget.describe()


def test_a_topic_past_the_limit_is_refused_with_the_numbers() -> None:
    budget = PartitionBudget(1024)
    check_node_budget("t", 56, 200, budget)  # exactly full
    with pytest.raises(PolicyViolationError) as err:
        check_node_budget("big", 100_000, 150, budget)
    assert err.value.code == ErrorCode.POLICY_VIOLATION == 44
    assert str(err.value) == (
        "topic 'big': 100000 new partition(s) would make 100150 on this node, over the 256 "
        "its limits hold (ulimit -n 1024: 3 file descriptors a partition, 256 kept for "
        "connections); 106 more can be created (raise ulimit -n for more)")


def test_kafkas_maximum_per_request() -> None:
    check_request_size(MAX_PARTITIONS_PER_REQUEST)
    with pytest.raises(PolicyViolationError, match=r"^Excessively large number of partitions "
                       r"per request: 131073 partitions asked for in all, at most 10000"):
        check_request_size(request_total([131_073]))
    assert request_total([5, -1, 0, 3]) == 8
