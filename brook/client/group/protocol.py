"""Kafka's consumer embedded protocol: what a consumer puts in JoinGroup and SyncGroup.

The group coordinator treats a member's metadata and assignment as opaque bytes; only the
consumers read them. Brook encodes them exactly as Kafka's ConsumerProtocolSubscription and
ConsumerProtocolAssignment (versions 0-3, big-endian, not flexible), so a Brook consumer and a
Kafka client reaching the group through the gateway understand each other.

Each message starts with an int16 version. Later versions only append fields, so bytes of a
version newer than this module knows are read as the newest known one and the tail ignored,
as Kafka's clients do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from brook.client.types import TopicPartition

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "CONSUMER_PROTOCOL_VERSION_MAX",
    "Assignment",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

# JoinGroup's protocol_type for consumers; the coordinator keeps groups of one type apart.
CONSUMER_PROTOCOL_TYPE = "consumer"
CONSUMER_PROTOCOL_VERSION_MAX = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True)
class Subscription:
    """A member's JoinGroup metadata: the topics it wants and the partitions it holds now.

    ``owned_partitions`` (v1+) and ``generation_id`` (v2+) let a sticky assignor keep
    partitions where they are; ``rack_id`` (v3+) is the consumer's ``client.rack``.
    """

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """What the leader gave one member in SyncGroup."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


def encode_subscription(s: Subscription, version: int = 1) -> bytes:
    """``s`` as ConsumerProtocolSubscription ``version``; fields newer than it are dropped."""
    _check_version(version)
    out = bytearray(_INT16.pack(version))
    out += _INT32.pack(len(s.topics))
    for topic in s.topics:
        _put_string(out, topic)
    _put_bytes(out, s.user_data)
    if version >= 1:
        _put_partitions(out, s.owned_partitions)
    if version >= 2:
        out += _INT32.pack(s.generation_id)
    if version >= 3:
        _put_string(out, s.rack_id)
    return bytes(out)


def decode_subscription(data: bytes) -> Subscription:
    """Read a ConsumerProtocolSubscription; ValueError says what is wrong with bad bytes."""
    reader = _Reader(data, "subscription")
    version = reader.version()
    count = reader.array_length("topics")
    topics = [reader.string("topic name") for _ in range(count)]
    user_data = reader.nullable_bytes("user_data")
    owned: list[TopicPartition] = []
    generation_id = -1
    rack_id: str | None = None
    if version >= 1:
        owned = reader.partitions("owned_partitions")
    if version >= 2:
        generation_id = reader.int32("generation_id")
    if version >= 3:
        rack_id = reader.nullable_string("rack_id")
    return Subscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id,
    )


def encode_assignment(a: Assignment, version: int = 1) -> bytes:
    """``a`` as ConsumerProtocolAssignment ``version`` (all versions share one layout)."""
    _check_version(version)
    out = bytearray(_INT16.pack(version))
    _put_partitions(out, a.partitions)
    _put_bytes(out, a.user_data)
    return bytes(out)


def decode_assignment(data: bytes) -> Assignment:
    """Read a ConsumerProtocolAssignment; empty bytes (a member given nothing, as the
    coordinator answers when the leader sent no assignment for it) mean no partitions."""
    if not data:
        return Assignment(partitions=[])
    reader = _Reader(data, "assignment")
    reader.version()
    partitions = reader.partitions("assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    return Assignment(partitions=partitions, user_data=user_data)


def _check_version(version: int) -> None:
    if not 0 <= version <= CONSUMER_PROTOCOL_VERSION_MAX:
        raise ValueError(
            f"consumer protocol version {version} is not supported "
            f"(0..{CONSUMER_PROTOCOL_VERSION_MAX})"
        )


def _put_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _INT16.pack(-1)
        return
    encoded = value.encode("utf-8")
    if len(encoded) > 0x7FFF:
        raise ValueError(f"string of {len(encoded)} bytes is longer than 32767: {value[:40]!r}")
    out += _INT16.pack(len(encoded))
    out += encoded


def _put_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _INT32.pack(-1)
        return
    out += _INT32.pack(len(value))
    out += value


def _put_partitions(out: bytearray, partitions: list[TopicPartition]) -> None:
    # Kafka groups partitions by topic on the wire; first-appearance order keeps the
    # encoding deterministic for a given list.
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out += _INT32.pack(len(by_topic))
    for topic, numbers in by_topic.items():
        _put_string(out, topic)
        out += _INT32.pack(len(numbers))
        for number in numbers:
            out += _INT32.pack(number)


class _Reader:
    """Reads the protocol's primitive types from ``data``, naming the field that is bad."""

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ValueError(f"consumer protocol {what} must be bytes, not {type(data).__name__}")
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def _fail(self, message: str) -> ValueError:
        return ValueError(f"malformed consumer protocol {self._what}: {message}")

    def _take(self, size: int, field_name: str) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise self._fail(
                f"{field_name} needs {size} bytes at offset {self._pos} but only "
                f"{len(self._data) - self._pos} remain"
            )
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def version(self) -> int:
        version: int = _INT16.unpack(self._take(2, "version"))[0]
        if version < 0:
            raise self._fail(f"negative version {version}")
        return version

    def int32(self, field_name: str) -> int:
        value: int = _INT32.unpack(self._take(4, field_name))[0]
        return value

    def array_length(self, field_name: str) -> int:
        count = self.int32(f"{field_name} count")
        if count < 0:
            raise self._fail(f"{field_name} count is {count}")
        # Each element takes at least two bytes, so a larger count cannot be honest; checking
        # here keeps a corrupt count from driving a huge loop.
        if count > (len(self._data) - self._pos) // 2 + 1:
            raise self._fail(f"{field_name} count {count} exceeds the remaining bytes")
        return count

    def nullable_string(self, field_name: str) -> str | None:
        length: int = _INT16.unpack(self._take(2, f"{field_name} length"))[0]
        if length == -1:
            return None
        if length < 0:
            raise self._fail(f"{field_name} length is {length}")
        raw = self._take(length, field_name)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._fail(f"{field_name} is not UTF-8 ({exc.reason})") from None

    def string(self, field_name: str) -> str:
        value = self.nullable_string(field_name)
        if value is None:
            raise self._fail(f"{field_name} is null")
        return value

    def nullable_bytes(self, field_name: str) -> bytes | None:
        length = self.int32(f"{field_name} length")
        if length == -1:
            return None
        if length < 0:
            raise self._fail(f"{field_name} length is {length}")
        return self._take(length, field_name)

    def partitions(self, field_name: str) -> list[TopicPartition]:
        result: list[TopicPartition] = []
        for _ in range(self.array_length(field_name)):
            topic = self.string(f"{field_name} topic")
            for _ in range(self.array_length(f"{field_name} partitions of {topic!r}")):
                result.append(TopicPartition(topic, self.int32(f"{field_name} partition")))
        return result
