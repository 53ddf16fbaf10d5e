"""The controllers never hand out the producer ids the group coordinators fence with."""

from __future__ import annotations

import pytest
from brook_controller.quorum_controller import (
    PRODUCER_ID_BLOCK_SIZE,
    RESERVED_PRODUCER_ID_BASE,
    check_producer_id_block,
)
from brook_group_coordinator.fencing import OFFSETS_FENCING_PRODUCER_ID_BASE

from brook.errors import BrookError, ErrorCode


def test_a_producer_id_block_reaching_the_coordinators_reserved_range_is_refused() -> None:
    assert RESERVED_PRODUCER_ID_BASE == OFFSETS_FENCING_PRODUCER_ID_BASE
    check_producer_id_block(RESERVED_PRODUCER_ID_BASE - PRODUCER_ID_BLOCK_SIZE)

    with pytest.raises(BrookError) as refused:
        check_producer_id_block(RESERVED_PRODUCER_ID_BASE - PRODUCER_ID_BLOCK_SIZE + 1)

    assert refused.value.code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "reserved for the group coordinators" in refused.value.message
