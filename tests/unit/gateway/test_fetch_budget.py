"""The gateway's Fetch budgeting: what each storage node is asked for, and how the answers are
cut in request order so that a response keeps Kafka's max_bytes and partition_max_bytes, with
only the first batch of the first partition with data allowed to exceed them."""

from __future__ import annotations

import pytest
from brook_gateway.fetch_budget import ResponseBudget, node_budgets

from brook.record import CorruptRecordError, build_batch, scan_batches


def _batches(*value_sizes: int, base_offset: int = 0) -> tuple[bytes, list[int]]:
    """Batches of one record each with values of the given sizes: (bytes, batch sizes)."""
    data = b"".join(
        build_batch([(0, None, b"x" * size, [])], base_offset=base_offset + i)
        for i, size in enumerate(value_sizes)
    )
    sizes = [header.size for _, header in scan_batches(data)]
    assert len(sizes) == len(value_sizes)
    return data, sizes


def test_nodes_get_their_partitions_limits_when_all_fit() -> None:
    assert node_budgets(1000, {"a": [100, 200], "b": [300]}) == {"a": 300, "b": 300}


def test_nodes_share_max_bytes_in_proportion_when_the_limits_exceed_it() -> None:
    budgets = node_budgets(1_000_000, {"a": [1_048_576, 1_048_576], "b": [1_048_576]})
    # Each partition counts for at most max_bytes: 2:1.
    assert budgets == {"a": 666_666, "b": 333_333}
    assert sum(budgets.values()) <= 1_000_000


def test_a_node_is_never_asked_for_zero_bytes() -> None:
    # 0 would read as "the node's own bound" on the wire.
    assert node_budgets(0, {"a": [100], "b": [100]}) == {"a": 1, "b": 1}
    assert node_budgets(-5, {"a": [100]}) == {"a": 1}
    assert node_budgets(1000, {"a": [0], "b": [-1]}) == {"a": 1, "b": 1}
    assert node_budgets(10, {"a": [1_000_000], "b": [1]}) == {"a": 9, "b": 1}


def test_partitions_within_both_limits_go_whole() -> None:
    data, _ = _batches(100, 100)
    budget = ResponseBudget(10 * len(data))
    assert budget.take(data, len(data)) == len(data)
    assert budget.take(data, len(data)) == len(data)
    assert budget.remaining_bytes == 8 * len(data)


def test_the_response_is_cut_at_max_bytes_in_whole_batches() -> None:
    first, first_sizes = _batches(300, 300)
    second, second_sizes = _batches(300, 300, 300)
    max_bytes = len(first) + second_sizes[0] + second_sizes[1] // 2
    budget = ResponseBudget(max_bytes)
    assert budget.take(first, 1_000_000) == len(first)
    # Only the whole batches that fit what is left.
    assert budget.take(second, 1_000_000) == second_sizes[0]
    # What is left is less than a later partition's first batch: it gets no data.
    third, _ = _batches(300)
    assert budget.take(third, 1_000_000) == 0
    assert sum(first_sizes) + second_sizes[0] <= max_bytes


def test_a_partition_is_cut_at_its_partition_max_bytes() -> None:
    data, sizes = _batches(200, 200, 200)
    budget = ResponseBudget(1_000_000)
    assert budget.take(data, sizes[0] + sizes[1]) == sizes[0] + sizes[1]
    assert budget.take(data, sizes[0] + sizes[1] - 1) == sizes[0]


def test_only_the_first_batch_of_the_first_partition_with_data_may_exceed_the_limits() -> None:
    big, big_sizes = _batches(5000, 100)
    budget = ResponseBudget(1000)
    # Partitions without data do not use up the exception.
    assert budget.take(b"", 500) == 0
    assert budget.take(big, 500) == big_sizes[0]
    assert budget.remaining_bytes == 0
    # A second oversized first batch (another node's own "first") is left for a later fetch.
    assert ResponseBudget(1000).take(big, 500) == big_sizes[0]
    after = ResponseBudget(10_000)
    small, small_sizes = _batches(10)
    assert after.take(small, 10_000) == small_sizes[0]
    assert after.take(big, 1000) == 0
    # ... while a later partition's batches that fit still go.
    assert after.take(small, 10_000) == small_sizes[0]


def test_a_zero_or_negative_max_bytes_still_returns_the_first_batch() -> None:
    data, sizes = _batches(10, 10)
    assert ResponseBudget(0).take(data, 1_000_000) == sizes[0]
    assert ResponseBudget(-1).take(data, -1) == sizes[0]


def test_unreadable_records_that_must_be_cut_raise() -> None:
    data, _ = _batches(100, 100)
    corrupt = bytearray(data)
    corrupt[8:12] = (1).to_bytes(4, "big")  # batchLength shorter than a batch header
    with pytest.raises(CorruptRecordError):
        ResponseBudget(10).take(bytes(corrupt), 1_000_000)
