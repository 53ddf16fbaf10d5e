"""The acks=all wait: a produce parked until the ISR has its batches (Kafka's DelayedProduce).

An acks=all request is answered once the high watermark of every partition it appended to
has passed the last offset it wrote there, or when its timeout runs out. The wait is one
deadline for the whole request, not one timeout per partition: the partitions are waited for
in turn, each with what is left. The wake-up is the partition's own (``Partition.
wait_for_high_watermark``: a future resolved by the append or replica fetch that moves the
HW), so nothing polls.

A partition that does not get there reports why (REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER if
leadership moved meanwhile, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR that committed it is
below min.insync.replicas); its batch is in the leader's log all the same, so the answer
still says where (Kafka does too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from brook_storage_node.errors import ErrorResult, PartitionError, error_result
from brook_storage_node.log import LogAppendInfo
from brook_storage_node.partition import Partition

__all__ = ["await_replication"]


async def await_replication(
    appended: Sequence[tuple[Partition, LogAppendInfo]], timeout_ms: int
) -> list[ErrorResult | None]:
    """Wait until each partition's HW passes its append, all within ``timeout_ms``; for each,
    in order, None once committed or the error that ended its wait."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    outcomes: list[ErrorResult | None] = []
    for partition, info in appended:
        remaining_s = max(0.0, deadline - loop.time())
        try:
            await partition.wait_for_high_watermark(info.last_offset + 1, remaining_s)
        except PartitionError as exc:
            outcomes.append(error_result(exc))
        else:
            outcomes.append(None)
    return outcomes
