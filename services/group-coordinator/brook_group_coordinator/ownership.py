"""Which __consumer_offsets partition a group belongs to, which __transaction_state partition
a transactional id belongs to, and which of them this coordinator owns.

The key-to-partition function is Kafka's exactly (``Utils.abs(key.hashCode()) % partitions``),
so a group or transactional id lands on the same partition number as it would in Kafka, and
tools that compute it agree. __transaction_state partition p is owned by the owner of
__consumer_offsets partition ``p % offsets partitions``, at that assignment's coordinator epoch
(``offsets_partition_owning``): no metadata of its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "OwnedPartition",
    "PartitionLoad",
    "java_string_hash",
    "offsets_partition_for",
    "offsets_partition_owning",
    "transaction_state_partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
_INT32_MIN = -(2**31)


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    encoded = value.encode("utf-16-be")
    h = 0
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def _partition_for(key: str, partitions: int, topic: str) -> int:
    if partitions <= 0:
        raise ValueError(f"{topic} has {partitions} partitions; it needs at least 1")
    h = java_string_hash(key)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == _INT32_MIN else abs(h)) % partitions


def offsets_partition_for(group_id: str, partitions: int) -> int:
    return _partition_for(group_id, partitions, OFFSETS_TOPIC)


def transaction_state_partition_for(transactional_id: str, partitions: int) -> int:
    return _partition_for(transactional_id, partitions, TRANSACTION_STATE_TOPIC)


def offsets_partition_owning(transaction_state_partition: int, offsets_partitions: int) -> int:
    """The __consumer_offsets partition whose owner owns ``transaction_state_partition``."""
    if offsets_partitions <= 0:
        raise ValueError(f"{OFFSETS_TOPIC} has {offsets_partitions} partitions")
    return transaction_state_partition % offsets_partitions


class PartitionLoad(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(slots=True)
class OwnedPartition:
    partition: int
    coordinator_epoch: int
    load: PartitionLoad = PartitionLoad.LOADING
