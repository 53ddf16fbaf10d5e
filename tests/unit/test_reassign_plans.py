"""The plans ``brook reassign`` makes: --generate's round robin and --decommission's drain."""

from __future__ import annotations

import pytest

from brook.tools.options import UsageError
from brook.tools.reassign import drained_assignment, proposed_assignment


def test_generate_spreads_replicas_and_leaders_over_the_nodes_keeping_the_factor() -> None:
    current = {("t", p): [1, 2] for p in range(4)}
    proposal = proposed_assignment(current, [3, 4, 5])
    assert proposal == {
        ("t", 0): [3, 4],
        ("t", 1): [4, 5],
        ("t", 2): [5, 3],
        ("t", 3): [3, 4],
    }
    with pytest.raises(UsageError, match="more than the 1 nodes"):
        proposed_assignment(current, [3])


def test_a_drain_replaces_the_node_in_place_by_the_least_loaded_other_node() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("t", 2): [3, 1], ("u", 0): [4]}
    drained = drained_assignment(current, 1, live=[1, 2, 3, 4])
    # Loads without node 1: 2 -> 2, 3 -> 2, 4 -> 1. t-0 takes 4 (the least loaded); then t-2
    # takes 2 (2 and 4 tie at 2, the lower id wins); never a node the partition has already.
    assert drained == {("t", 0): [4, 2], ("t", 2): [3, 2]}
    assert all(1 not in replicas for replicas in drained.values())


def test_a_drain_with_no_node_to_take_a_replica_is_refused() -> None:
    with pytest.raises(UsageError, match="no live storage node can take t-0"):
        drained_assignment({("t", 0): [1, 2]}, 1, live=[1, 2])
