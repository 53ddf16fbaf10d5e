"""Which __consumer_offsets partition a group belongs to, and which of them this coordinator
owns.

The group-to-partition function is Kafka's exactly (``Utils.abs(groupId.hashCode()) %
partitions``), so a group lands on the same partition number as it would in Kafka, and tools
that compute it agree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "OFFSETS_TOPIC",
    "OwnedPartition",
    "PartitionLoad",
    "java_string_hash",
    "offsets_partition_for",
]

OFFSETS_TOPIC = "__consumer_offsets"
_INT32_MIN = -(2**31)


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    encoded = value.encode("utf-16-be")
    h = 0
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def offsets_partition_for(group_id: str, partitions: int) -> int:
    if partitions <= 0:
        raise ValueError(f"__consumer_offsets has {partitions} partitions; it needs at least 1")
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    return (0 if h == _INT32_MIN else abs(h)) % partitions


class PartitionLoad(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


@dataclass(slots=True)
class OwnedPartition:
    partition: int
    coordinator_epoch: int
    load: PartitionLoad = PartitionLoad.LOADING
