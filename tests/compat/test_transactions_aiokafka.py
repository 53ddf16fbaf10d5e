"""aiokafka's transactional producer through the gateway (issue #16).

``AIOKafkaProducer(transactional_id=...)`` runs three transactions over every partition of a
topic: committed; aborted (an exception inside ``async with producer.transaction()``);
committed with offsets for a group (``send_offsets_to_transaction``). An aiokafka consumer with
``isolation_level="read_committed"`` reads exactly the committed records, in order per
partition; confluent-kafka with read_uncommitted reads the aborted ones too; the group's
committed offsets are those the committed transaction sent.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Final

import pytest
from cluster_fixture import wait_until
from test_transactions_confluent import PARTITIONS, TIMEOUT_S, create_topics, records_for
from txn_copy_job import READ_TIMEOUT_S, READ_UNCOMMITTED, Record, read_topics, wait_for_records

pytestmark = pytest.mark.integration

TOPIC: Final = "aiokafka-transactions"
GROUP: Final = "aiokafka-transactions-offsets"
GROUP_OFFSET: Final = 4
# Bounds the whole of _transact: aiokafka waits for a transaction coordinator indefinitely.
TRANSACT_TIMEOUT_S: Final = 120.0


class _Abort(Exception):
    """Raised inside a transaction to make aiokafka abort it."""


async def _transact(bootstrap: str) -> tuple[list[Record], list[Record], list[Record]]:
    """Runs the three transactions; the records each sent, in order."""
    from aiokafka import AIOKafkaProducer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id="aiokafka-transactions",
        enable_idempotence=True,
        request_timeout_ms=int(TIMEOUT_S * 1000),
    )

    async def send(records: list[Record]) -> None:
        for topic, partition, key, value in records:
            await producer.send_and_wait(topic, value, key=key, partition=partition)

    try:
        # Inside the try: start() waits for a transaction coordinator, and a timeout around
        # _transact cancels it there; the producer is stopped either way.
        await producer.start()
        first = records_for([TOPIC], "first", 2)
        async with producer.transaction():
            await send(first)
        aborted = records_for([TOPIC], "aborted", 2)
        with pytest.raises(_Abort):
            async with producer.transaction():
                await send(aborted)
                raise _Abort
        last = records_for([TOPIC], "last", 2)
        async with producer.transaction():
            await send(last)
            offsets = {
                TopicPartition(TOPIC, p): OffsetAndMetadata(GROUP_OFFSET, "")
                for p in range(PARTITIONS)
            }
            await producer.send_offsets_to_transaction(offsets, GROUP)
    finally:
        await producer.stop()
    return first, aborted, last


async def _read_committed(bootstrap: str) -> list[Record]:
    """What an aiokafka read_committed consumer reads from the beginning to the end offsets
    it is told (the last stable offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    records: list[Record] = []
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        async with asyncio.timeout(READ_TIMEOUT_S):
            while any([await consumer.position(tp) < ends[tp] for tp in partitions]):
                batches = await consumer.getmany(timeout_ms=500)
                for batch in batches.values():
                    records.extend((r.topic, r.partition, r.key, r.value) for r in batch)
    finally:
        await consumer.stop()
    return records


async def _group_offsets(bootstrap: str) -> dict[int, int | None]:
    """GROUP's committed offsets of TOPIC, as aiokafka reads them."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


def test_aiokafka_transactional_producer_commits_aborts_and_sends_offsets(bootstrap: str) -> None:
    create_topics(bootstrap, [TOPIC])
    first, aborted, last = asyncio.run(asyncio.wait_for(_transact(bootstrap), TRANSACT_TIMEOUT_S))
    wait_for_records(lambda: asyncio.run(_read_committed(bootstrap)), first + last)
    sent = dict.fromkeys(range(PARTITIONS), GROUP_OFFSET)
    wait_until(
        lambda: asyncio.run(_group_offsets(bootstrap)) == sent,
        f"{GROUP}'s offsets committed in the transaction",
        TIMEOUT_S,
    )
    wait_for_records(
        partial(read_topics, bootstrap, [TOPIC], READ_UNCOMMITTED, PARTITIONS),
        first + aborted + last,
    )
