"""What only the cluster itself may write, shared by the services that enforce it.

The group coordinators write ``__consumer_offsets`` partition p as producer id
``RESERVED_PRODUCER_ID_BASE + p``, and the transaction coordinators (the same processes)
write ``__transaction_state`` partition p as ``TRANSACTION_STATE_PRODUCER_ID_BASE + p``; both
fence deposed owners with the producer epoch (docs/decisions.md, "Fencing coordinator
writes"). The controllers never hand out a producer id block reaching the range, and the
storage nodes refuse a batch carrying one unless the produce request says it comes from a
coordinator (ProduceRequest.origin): a client writing such an id, by mistake or not, could
otherwise fence every coordinator of that partition.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "OFFSETS_TOPIC",
    "RESERVED_PRODUCER_ID_BASE",
    "TRANSACTION_STATE_PRODUCER_ID_BASE",
    "is_reserved_producer_id",
]

# The internal topic of committed offsets (Kafka's name), whose metadata also lists the group
# coordinators to clients that know only storage nodes.
OFFSETS_TOPIC: Final = "__consumer_offsets"

# Far above any id the controllers' 1000-id blocks reach (2**62 blocks), and below the int64
# limit by as many ids as there could be __consumer_offsets and __transaction_state
# partitions.
RESERVED_PRODUCER_ID_BASE: Final = 2**62
# __transaction_state's writers: above every __consumer_offsets writer (a partition count is
# an int32).
TRANSACTION_STATE_PRODUCER_ID_BASE: Final = RESERVED_PRODUCER_ID_BASE + 2**31


def is_reserved_producer_id(producer_id: int) -> bool:
    return producer_id >= RESERVED_PRODUCER_ID_BASE
