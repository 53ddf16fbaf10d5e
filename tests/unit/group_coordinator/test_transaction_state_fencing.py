"""__transaction_state written through the coordinators' fenced writer (storage_offsets_log.py
with TRANSACTION_STATE_LOG), against the real storage node served in-process: every batch is
producer id TRANSACTION_STATE_PRODUCER_ID_BASE + partition at the coordinator epoch, and a
deposed transaction coordinator's state change is refused, never applied by the new owner."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from brook_group_coordinator.fencing import TRANSACTION_STATE_LOG
from brook_group_coordinator.ownership import (
    TRANSACTION_STATE_TOPIC,
    transaction_state_partition_for,
)
from brook_group_coordinator.storage_offsets_log import OffsetsLogSettings, StorageOffsetsLog
from brook_group_coordinator.timers import LoopTimers
from brook_group_coordinator.transactions.coordinator import (
    TransactionCoordinator,
    TransactionSettings,
)
from brook_group_coordinator.transactions.state import Transaction, TxnState
from test_offsets_write_fencing import coordinator_metadata

from brook.errors import ErrorCode
from brook.producer_ids import ProducerIdBlock, ProducerIdManager
from brook.record import scan_batches
from brook.reserved import TRANSACTION_STATE_PRODUCER_ID_BASE
from brook.rpc.backoff import RetryBackoff

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage_node"))
from storage_node_support import (
    NODE_ID,
    Node,
    QueueMetadataSource,
    broker_record,
    fetch_request,
    partition_record,
    run,
    running_node,
    snapshot,
    topic_record,
)

PARTITIONS = 2
TXN = "payments"
PARTITION = transaction_state_partition_for(TXN, PARTITIONS)
BACKOFF = RetryBackoff(20, 200)
Lost = list[tuple[int, int, bool]]


class Markers:
    """Markers that never get out: the transaction stays decided, as in a failover."""

    async def write_markers(self, transaction: Transaction, coordinator_epoch: int) -> None:
        await asyncio.Event().wait()


async def _one_block() -> ProducerIdBlock:
    return ProducerIdBlock(0, 1000)


@asynccontextmanager
async def _coordinator(
    node: Node, lost: Lost | None = None
) -> AsyncIterator[TransactionCoordinator]:
    log = StorageOffsetsLog(
        coordinator_metadata(node.port, TRANSACTION_STATE_TOPIC, PARTITIONS),
        OffsetsLogSettings(1_500, 1 << 20, 5_000, BACKOFF),
        TRANSACTION_STATE_LOG,
    )
    producer_ids = ProducerIdManager(_one_block, BACKOFF)
    coordinator = TransactionCoordinator(
        settings=TransactionSettings(900_000, 3_600_000, 5_000, BACKOFF),
        timers=LoopTimers(asyncio.get_running_loop()),
        log=log,
        claims=log,
        producer_ids=producer_ids,
        markers=Markers(),
        partition_count=PARTITIONS,
        on_partition_lost=None if lost is None else lambda p, e, f: lost.append((p, e, f)),
    )
    try:
        yield coordinator
    finally:
        await coordinator.close()
        await producer_ids.close()
        await log.close()


def test_a_deposed_transaction_coordinator_is_fenced_by_the_new_owners_epoch(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        metadata = QueueMetadataSource(
            snapshot(
                topic_record(TRANSACTION_STATE_TOPIC),
                *(partition_record(TRANSACTION_STATE_TOPIC, p) for p in range(PARTITIONS)),
            )
        )
        old_lost: Lost = []
        async with (
            running_node(
                tmp_path / "storage", source_for=lambda port: _with_broker(metadata, port)
            ) as node,
            _coordinator(node, old_lost) as old,
            _coordinator(node) as new,
        ):
            await old.load_partition(PARTITION, 3)
            init = await old.init_producer_id(TXN, 60_000)
            assert init.error is ErrorCode.NONE
            producer = (init.producer_id, init.producer_epoch)
            assert (await old.add_partitions(TXN, *producer, [("t", 0)]))[0] is ErrorCode.NONE

            await new.load_partition(PARTITION, 4)
            error, _, taken_over = new.describe(TXN)
            assert error is ErrorCode.NONE and taken_over is not None
            assert taken_over.state is TxnState.ONGOING

            # The old owner, not knowing, tries to commit: refused, nothing written.
            assert (await old.end_txn(TXN, *producer, True))[0] is ErrorCode.NOT_COORDINATOR
            assert old_lost == [(PARTITION, 3, True)]
            assert (await new.end_txn(TXN, *producer, False))[0] is ErrorCode.NONE

            response = await node.stub.Fetch(fetch_request(TRANSACTION_STATE_TOPIC, PARTITION, 0))
            batches = [
                (h.producer_id, h.producer_epoch)
                for _, h in scan_batches(bytes(response.partitions[0].records))
            ]
            writer = TRANSACTION_STATE_PRODUCER_ID_BASE + PARTITION
            # Fence, InitProducerId, AddPartitions at epoch 3; fence, PrepareAbort at epoch 4.
            assert batches == [(writer, 3)] * 3 + [(writer, 4)] * 2

    run(scenario)


def _with_broker(source: QueueMetadataSource, port: int) -> QueueMetadataSource:
    source.first = snapshot(broker_record(NODE_ID, port), *source.first.records)
    return source
