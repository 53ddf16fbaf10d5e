"""The values the SDK hands to applications: partitions, delivery reports, consumed records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from brook.record import TimestampType

__all__ = [
    "ConsumerRecord",
    "Header",
    "OffsetAndTimestamp",
    "PreparedTransaction",
    "RecordMetadata",
    "TimestampType",
    "TopicPartition",
]

# A record header: Kafka allows repeated keys and a null value.
Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    """One partition of one topic; hashable, so it keys dicts and sets."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a produced record landed.

    ``offset`` is -1 with ``acks=0`` (the node answers before it appends, as in Kafka);
    ``timestamp`` is the log-append time when the topic uses LogAppendTime, else the record's
    create time (the one given to send, or the producer's clock when none was).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """The answer of ``offsets_for_times`` for one partition."""

    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A two-phase transaction left open by ``Producer.prepare_transaction`` (KIP-939): who
    holds these three may end it (``Admin.complete_transaction``), from any process."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class ConsumerRecord:
    """One consumed record. ``timestamp`` is in ms since the epoch, read as ``timestamp_type``
    says; ``leader_epoch`` is that of the batch (None when the batch carries none)."""

    # A plain slotted class: poll builds one per record, and a frozen dataclass costs twice as
    # much to construct.
    __slots__ = (
        "headers",
        "key",
        "leader_epoch",
        "offset",
        "partition",
        "timestamp",
        "timestamp_type",
        "topic",
        "value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: TimestampType,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
        leader_epoch: int | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch

    def _fields(self) -> tuple[object, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
            self.leader_epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
            f"offset={self.offset}, timestamp={self.timestamp}, "
            f"timestamp_type={self.timestamp_type.name}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r}, leader_epoch={self.leader_epoch})"
        )
