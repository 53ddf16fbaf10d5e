"""Kafka's default partitioner: murmur2 of the key, sticky partitioning for records without.

A keyed record goes to ``toPositive(murmur2(key)) % numPartitions`` exactly as the Java
client (and librdkafka's ``murmur2_random``) computes it, so a key lands on the same partition
whichever of these clients produced it. Records without a key stick to one partition until a
batch for it is complete, then move to another at random (KIP-480): batches fill up quickly
even at low rates, instead of one record per partition per linger period.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

__all__ = ["MURMUR2_SEED", "StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

# Kafka's Utils.murmur2 constants (Austin Appleby's MurmurHash2 with a fixed seed).
MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_POSITIVE_MASK = 0x7FFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's murmur2 of ``data`` as the signed 32-bit int the Java client returns."""
    length = len(data)
    h = MURMUR2_SEED ^ length
    words = length >> 2
    if words:
        # One unpack for every little-endian word: a Python loop over bytes is 4x slower.
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK32
            k ^= k >> _R
            h = ((h * _M) & _MASK32) ^ ((k * _M) & _MASK32)
    tail = length & 3
    if tail:
        base = length - tail
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & _SIGN32 else h


def to_positive(number: int) -> int:
    """Kafka's Utils.toPositive: clears the sign bit (not abs(), which differs for MIN_VALUE)."""
    return number & _POSITIVE_MASK


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for ``key``."""
    return (murmur2(key) & _POSITIVE_MASK) % num_partitions


class StickyPartitioner:
    """Per-topic sticky partition for records without a key (Kafka's StickyPartitionCache).

    Not thread-safe: the producer calls it under its accumulator lock.
    """

    __slots__ = ("_random", "_sticky")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._random = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        """The partition a keyless record of ``topic`` goes to now."""
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions:
            return current
        return self._choose(topic, num_partitions, available, None)

    def on_new_batch(
        self, topic: str, num_partitions: int, available: Sequence[int], previous: int
    ) -> int:
        """A batch of ``previous`` is complete: move on, unless another record already did."""
        current = self._sticky.get(topic)
        if current is not None and current != previous and current < num_partitions:
            return current
        return self._choose(topic, num_partitions, available, previous)

    def _choose(
        self, topic: str, num_partitions: int, available: Sequence[int], previous: int | None
    ) -> int:
        # Prefer partitions with a leader (a record for one without would wait in the
        # accumulator), and never the partition just left when there is any other choice.
        candidates: Sequence[int] = available or range(num_partitions)
        if len(candidates) > 1 and previous is not None:
            candidates = [p for p in candidates if p != previous] or candidates
        chosen = candidates[self._random.randrange(len(candidates))]
        self._sticky[topic] = chosen
        return chosen
