"""Transactional offsets of one group (Kafka's TxnOffsetCommit): per producer id, the offsets
committed inside its open transaction, pending (invisible to fetches) until the transaction
ends, and the newest producer and coordinator epochs seen for it, which fence older ones.

Which pending offsets a committed transaction makes the group's is Kafka's rule
(``winners``): the most recent commit of a partition wins, ordered by where the commit records
are in __consumer_offsets. A plain commit appended before the transaction's pending record is
overridden; one appended after it, even before the transaction ended or still being appended
when the end is decided, is kept.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from brook_group_coordinator.offsets import GroupOffsets, TopicPartitionKey
from brook_group_coordinator.records import OffsetCommitValue, PendingOffsetValue, TxnEndValue

__all__ = ["GroupTxnOffsets", "PendingOffset", "ProducerTxn", "winners"]


@dataclass(frozen=True, slots=True)
class PendingOffset:
    value: PendingOffsetValue
    # Where its record is in __consumer_offsets.
    record_offset: int

    def committed(self) -> OffsetCommitValue:
        """The offset as the group's once its transaction commits."""
        return OffsetCommitValue(
            offset=self.value.offset,
            leader_epoch=self.value.leader_epoch,
            metadata=self.value.metadata,
            commit_timestamp_ms=self.value.commit_timestamp_ms,
            txn_record_offset=self.record_offset,
        )


@dataclass(slots=True)
class ProducerTxn:
    """One producer id in one group: its newest epochs (-1: none seen) and pending offsets."""

    producer_epoch: int = -1
    coordinator_epoch: int = -1
    pending: dict[TopicPartitionKey, PendingOffset] = field(default_factory=dict)


class GroupTxnOffsets:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerTxn] = {}

    def producer(self, producer_id: int) -> ProducerTxn | None:
        return self.producers.get(producer_id)

    def _producer_of(self, producer_id: int) -> ProducerTxn:
        return self.producers.setdefault(producer_id, ProducerTxn())

    def add_pending(
        self,
        producer_id: int,
        topic: str,
        partition: int,
        value: PendingOffsetValue,
        record_offset: int,
    ) -> None:
        """A later pending offset of the same producer and partition replaces the earlier."""
        producer = self._producer_of(producer_id)
        producer.producer_epoch = max(producer.producer_epoch, value.producer_epoch)
        producer.pending[(topic, partition)] = PendingOffset(value, record_offset)

    def remove_pending(self, producer_id: int, topic: str, partition: int) -> None:
        producer = self.producers.get(producer_id)
        if producer is not None:
            producer.pending.pop((topic, partition), None)

    def saw_end(self, producer_id: int, value: TxnEndValue) -> None:
        producer = self._producer_of(producer_id)
        producer.producer_epoch = max(producer.producer_epoch, value.producer_epoch)
        producer.coordinator_epoch = max(producer.coordinator_epoch, value.coordinator_epoch)

    def has_pending(self, topic: str, partition: int) -> bool:
        return any((topic, partition) in p.pending for p in self.producers.values())

    def has_any_pending(self) -> bool:
        return any(p.pending for p in self.producers.values())

    def pending_keys(self) -> list[tuple[int, str, int]]:
        """(producer id, topic, partition) of every pending offset."""
        return [
            (producer_id, topic, partition)
            for producer_id, producer in self.producers.items()
            for topic, partition in producer.pending
        ]


def winners(
    committed: GroupOffsets,
    pending: dict[TopicPartitionKey, PendingOffset],
    newer: Collection[TopicPartitionKey] = (),
) -> list[tuple[TopicPartitionKey, PendingOffset]]:
    """The pending offsets a commit of their transaction makes the group's: those whose record
    is more recent than the record of the partition's committed offset, if it has one, and
    than any plain commit of the partition not applied yet (``newer``: its record comes after
    every pending record already applied)."""
    found = []
    for (topic, partition), offset in pending.items():
        if (topic, partition) in newer:
            continue
        current = committed.record_offset(topic, partition)
        if current is None or current < offset.record_offset:
            found.append(((topic, partition), offset))
    return found
