"""The default partitioner places keys where Kafka's Java client does; keyless records stick."""

from __future__ import annotations

import random

import pytest
from client_test_support import TOPIC, make_accumulator, static_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.client.partitioner import (
    MURMUR2_SEED,
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# Published murmur2 results of Kafka's Java client (Utils.murmur2), from Kafka's own
# UtilsTest.testMurmur2 and the values other Kafka-compatible clients check against.
KAFKA_MURMUR2_VECTORS: dict[bytes, int] = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}

# The partitions those keys get on a 6- and a 12-partition topic, worked out by hand from the
# published hashes: toPositive(h) = h & 0x7fffffff, then % numPartitions. For example
# "foobar": -790332482 & 0x7fffffff = 1357151166; 1357151166 % 12 = 6.
PINNED_PARTITIONS: dict[bytes, tuple[int, int]] = {
    b"21": (0, 0),
    b"foobar": (0, 6),
    b"a-little-bit-long-string": (2, 8),
    b"a-little-bit-longer-string": (5, 11),
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (5, 5),
    b"abc": (3, 3),
}


def _int32(value: int) -> int:
    """Java int overflow: wrap to [-2^31, 2^31)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _unsigned_shift(value: int, bits: int) -> int:
    """Java's >>> on an int."""
    return (value & 0xFFFFFFFF) >> bits


def reference_murmur2(data: bytes) -> int:
    """The published algorithm written out step by step with Java int semantics, byte by
    byte, independently of the SDK's word-at-a-time version."""
    m = _int32(0x5BD1E995)
    r = 24
    length = len(data)
    h = _int32(MURMUR2_SEED ^ length)
    for i in range(length // 4):
        i4 = i * 4
        k = (
            (data[i4 + 0] & 0xFF)
            + ((data[i4 + 1] & 0xFF) << 8)
            + ((data[i4 + 2] & 0xFF) << 16)
            + ((data[i4 + 3] & 0xFF) << 24)
        )
        k = _int32(k)
        k = _int32(k * m)
        k ^= _unsigned_shift(k, r)
        k = _int32(k)
        k = _int32(k * m)
        h = _int32(h * m)
        h = _int32(h ^ k)
    remainder = length % 4
    tail = length & ~3
    if remainder == 3:
        h = _int32(h ^ ((data[tail + 2] & 0xFF) << 16))
    if remainder >= 2:
        h = _int32(h ^ ((data[tail + 1] & 0xFF) << 8))
    if remainder >= 1:
        h = _int32(h ^ (data[tail] & 0xFF))
        h = _int32(h * m)
    h = _int32(h ^ _unsigned_shift(h, 13))
    h = _int32(h * m)
    h = _int32(h ^ _unsigned_shift(h, 15))
    return h


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_reference_implementation_reproduces_kafkas_published_vectors(
    key: bytes, expected: int
) -> None:
    assert reference_murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_murmur2_equals_the_java_clients_hash(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_the_reference_on_any_bytes(data: bytes) -> None:
    assert murmur2(data) == reference_murmur2(data)


@pytest.mark.parametrize(("key", "partitions"), PINNED_PARTITIONS.items())
def test_keys_land_on_the_partitions_kafkas_java_client_picks(
    key: bytes, partitions: tuple[int, int]
) -> None:
    assert (partition_for_key(key, 6), partition_for_key(key, 12)) == partitions


def test_to_positive_clears_the_sign_bit_instead_of_negating() -> None:
    # abs() would give 2^31 for Integer.MIN_VALUE; Kafka's toPositive gives 0.
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


@pytest.mark.parametrize(("key", "partitions"), PINNED_PARTITIONS.items())
def test_producer_places_keyed_records_by_murmur2(key: bytes, partitions: tuple[int, int]) -> None:
    accumulator = make_accumulator(static_cluster(partitions=12))

    future = accumulator.append(TOPIC, b"value", key, None, None, None)

    assert future.partition == partitions[1]


def test_explicit_partition_overrides_the_key() -> None:
    accumulator = make_accumulator(static_cluster(partitions=12))

    future = accumulator.append(TOPIC, b"value", b"foobar", None, 3, None)

    assert future.partition == 3


def test_keyless_records_stick_to_one_partition_while_its_batch_has_room() -> None:
    accumulator = make_accumulator(static_cluster(partitions=6), batch_size=16384)

    partitions = {
        accumulator.append(TOPIC, b"x" * 100, None, None, None, None).partition for _ in range(50)
    }

    assert len(partitions) == 1


def test_a_full_batch_moves_keyless_records_to_another_partition() -> None:
    accumulator = make_accumulator(static_cluster(partitions=6), batch_size=1024)
    # About 8 records of 110 bytes fill a 1 KiB batch.
    placed = [
        accumulator.append(TOPIC, b"x" * 100, None, None, None, None).partition for _ in range(40)
    ]

    switches = [i for i in range(1, len(placed)) if placed[i] != placed[i - 1]]
    assert switches, "keyless records never left their first partition"
    runs = [b - a for a, b in zip([0, *switches], [*switches, len(placed)], strict=True)]
    # Every partition keeps records until its batch is full (the last run may be short).
    assert all(run == runs[0] for run in runs[:-1])
    assert runs[0] > 1


def test_a_sent_batch_moves_keyless_records_to_another_partition() -> None:
    cluster = static_cluster(partitions=6)
    accumulator = make_accumulator(cluster, batch_size=16384)
    first = accumulator.append(TOPIC, b"x", None, None, None, None).partition

    requests, _, _ = accumulator.drain(cluster, float("inf"), lambda node: 1)
    after = accumulator.append(TOPIC, b"x", None, None, None, None).partition

    assert [queue.partition for queue, _ in requests[0].entries] == [first]
    assert after != first


def test_sticky_partitioner_only_picks_partitions_with_a_leader() -> None:
    partitioner = StickyPartitioner(random.Random(7))
    chosen = {
        partitioner.on_new_batch(TOPIC, 6, (1, 4), previous=p) for p in range(6) for _ in range(20)
    }

    assert chosen <= {1, 4}


def test_sticky_partitioner_never_picks_the_partition_it_leaves_when_another_exists() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    available = tuple(range(6))

    for _ in range(100):
        current = partitioner.partition(TOPIC, 6, available)
        assert partitioner.on_new_batch(TOPIC, 6, available, current) != current


def test_partitioner_ignore_keys_places_keyed_records_like_keyless_ones() -> None:
    accumulator = make_accumulator(static_cluster(partitions=12), ignore_keys=True)

    partitions = {
        accumulator.append(TOPIC, b"v", key, None, None, None).partition
        for key in PINNED_PARTITIONS
    }

    assert len(partitions) == 1
