"""The consumer embedded protocol: round trips, and byte-for-byte agreement with kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KafkaAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KafkaSubscription,
)

from brook.client.group.protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from brook.client.types import TopicPartition

_names = st.text(min_size=1, max_size=12)
_partition_lists = st.lists(
    st.builds(TopicPartition, _names, st.integers(min_value=0, max_value=2**31 - 1)),
    max_size=8,
    unique=True,
)


def _grouped(partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The order the wire format yields: grouped by topic in order of first appearance."""
    order: dict[str, list[TopicPartition]] = {}
    for tp in partitions:
        order.setdefault(tp.topic, []).append(tp)
    return [tp for group in order.values() for tp in group]


def _by_topic(partitions: list[TopicPartition]) -> list[tuple[str, list[int]]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return list(grouped.items())


@given(
    topics=st.lists(_names, max_size=6),
    user_data=st.none() | st.binary(max_size=32),
    owned=_partition_lists,
    generation_id=st.integers(min_value=-1, max_value=2**31 - 1),
    rack_id=st.none() | st.text(max_size=8),
)
def test_subscription_v3_round_trips_every_field(
    topics: list[str],
    user_data: bytes | None,
    owned: list[TopicPartition],
    generation_id: int,
    rack_id: str | None,
) -> None:
    original = Subscription(topics, user_data, _grouped(owned), generation_id, rack_id)
    assert decode_subscription(encode_subscription(original, version=3)) == original


def test_older_subscription_versions_drop_the_fields_they_do_not_have() -> None:
    full = Subscription(["a"], b"u", [TopicPartition("a", 1)], 7, "rack-1")
    assert decode_subscription(encode_subscription(full, version=0)) == Subscription(["a"], b"u")
    assert decode_subscription(encode_subscription(full, version=1)) == Subscription(
        ["a"], b"u", [TopicPartition("a", 1)]
    )
    assert decode_subscription(encode_subscription(full, version=2)) == Subscription(
        ["a"], b"u", [TopicPartition("a", 1)], 7
    )


@given(partitions=_partition_lists, user_data=st.none() | st.binary(max_size=32))
def test_assignment_round_trips(partitions: list[TopicPartition], user_data: bytes | None) -> None:
    original = Assignment(_grouped(partitions), user_data)
    for version in range(4):
        assert decode_assignment(encode_assignment(original, version)) == original


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment(partitions=[])


@given(
    topics=st.lists(_names, max_size=5),
    user_data=st.none() | st.binary(max_size=16),
    owned=_partition_lists,
    generation_id=st.integers(min_value=-1, max_value=1000),
    rack_id=st.none() | st.text(max_size=8),
    version=st.integers(min_value=0, max_value=3),
)
def test_subscription_bytes_equal_kafka_pythons(
    topics: list[str],
    user_data: bytes | None,
    owned: list[TopicPartition],
    generation_id: int,
    rack_id: str | None,
    version: int,
) -> None:
    ours = encode_subscription(
        Subscription(topics, user_data, owned, generation_id, rack_id), version
    )
    theirs = KafkaSubscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=[
            KafkaSubscription.TopicPartition(topic=t, partitions=p) for t, p in _by_topic(owned)
        ],
        generation_id=generation_id,
        rack_id=rack_id,
        version=version,
    ).encode(version=version)
    assert ours == theirs
    decoded = KafkaSubscription.decode(ours)
    assert list(decoded.topics) == topics
    assert decoded.user_data == user_data


@given(
    partitions=_partition_lists,
    user_data=st.none() | st.binary(max_size=16),
    version=st.integers(min_value=0, max_value=3),
)
def test_assignment_bytes_equal_kafka_pythons(
    partitions: list[TopicPartition], user_data: bytes | None, version: int
) -> None:
    ours = encode_assignment(Assignment(partitions, user_data), version)
    theirs = KafkaAssignment(
        assigned_partitions=[
            KafkaAssignment.TopicPartition(topic=t, partitions=p) for t, p in _by_topic(partitions)
        ],
        user_data=user_data,
        version=version,
    ).encode(version=version)
    assert ours == theirs
    assert decode_assignment(theirs) == Assignment(_grouped(partitions), user_data)


def test_a_newer_subscription_version_is_read_as_the_newest_known_one() -> None:
    # A future version appends fields; the known prefix must still decode.
    v3 = encode_subscription(Subscription(["a"], None, [], 4, "r"), version=3)
    future = b"\x00\x04" + v3[2:] + b"\x00\x00\x00\x09 extra field"
    assert decode_subscription(future) == Subscription(["a"], None, [], 4, "r")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "version needs 2 bytes"),
        (b"\x00", "version needs 2 bytes"),
        (b"\xff\xff\x00\x00\x00\x00", "negative version"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x05ab", "topic name needs 5 bytes"),
        (b"\x00\x00\x7f\xff\xff\xff", "topics count 2147483647 exceeds"),
        (b"\x00\x00\xff\xff\xff\xfe", "topics count is -2"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe\xff\xff\xff\xff", "not UTF-8"),
        (b"\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff", "topic name is null"),
    ],
)
def test_bad_subscription_bytes_raise_a_clear_value_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_subscription(data)


def test_truncated_assignment_raises_a_clear_value_error() -> None:
    encoded = encode_assignment(Assignment([TopicPartition("t", 3)], b"xyz"))
    for cut in range(1, len(encoded)):
        with pytest.raises(ValueError, match="malformed consumer protocol assignment"):
            decode_assignment(encoded[:cut])


def test_unsupported_encode_version_is_refused() -> None:
    with pytest.raises(ValueError, match="version 4 is not supported"):
        encode_subscription(Subscription(["a"]), version=4)
    with pytest.raises(ValueError, match="version -1 is not supported"):
        encode_assignment(Assignment([]), version=-1)
