"""__consumer_offsets on the storage nodes: the service's ``OffsetsLog``.

Append: the records become one RecordBatch v2 (``brook.record.build_batch``), produced to the
partition's leader with acks=all, so a commit is acknowledged only once every in-sync replica
has it. The whole append, retries included, is bounded by offsets.commit.timeout.ms.

Read: fetches from the leader in offsets.load.buffer.size chunks, from a start offset up to the
high watermark seen by the first fetch (records above it are not committed, and records
appended while a partition loads are this coordinator's own, applied as they are written).

Routing comes from the coordinator's metadata (``ClusterMetadata``, fed by WatchMetadata).
A leader that moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, a node that does not answer)
is retried after the next metadata update or a back-off, whichever comes first, and only while
the request's time allows. Channels and the mapping of transport failures to Kafka codes are
the SDK's (``brook.client.network``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import grpc

from brook.client.config import RetryBackoff
from brook.client.network import Network, rpc_error
from brook.client.runtime import backoff_s
from brook.config import Config
from brook.errors import BrookError, ErrorCode, error_code
from brook.record import CorruptRecordError, iter_records, scan_batches
from brook.record import build_batch as build_record_batch
from brook.v1 import storage_pb2, storage_pb2_grpc
from brook_group_coordinator.cluster_metadata import ClusterMetadata, PartitionLeader
from brook_group_coordinator.offsets_log import LogRecord
from brook_group_coordinator.ownership import OFFSETS_TOPIC

__all__ = ["OffsetsLogSettings", "StorageOffsetsLog"]

_T = TypeVar("_T")

CLIENT_ID: Final = "group-coordinator"
# Reads retry a leader change this many times in a row before the load fails (and is
# started again by the service while the partition is still assigned here).
READ_ATTEMPTS_MAX: Final = 10


@dataclass(frozen=True, slots=True)
class OffsetsLogSettings:
    commit_timeout_ms: int
    load_buffer_bytes: int
    request_timeout_ms: int
    retry_backoff: RetryBackoff

    @classmethod
    def from_config(cls, config: Config) -> OffsetsLogSettings:
        return cls(
            commit_timeout_ms=config.get_int("offsets.commit.timeout.ms"),
            load_buffer_bytes=config.get_int("offsets.load.buffer.size"),
            request_timeout_ms=config.get_int("request.timeout.ms"),
            retry_backoff=RetryBackoff(
                config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
            ),
        )


class _Retry(Exception):
    """An attempt failed in a way another attempt (after fresh metadata) may fix."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Attempt = Callable[[storage_pb2_grpc.StorageServiceStub, PartitionLeader, float], Awaitable[_T]]


class StorageOffsetsLog:
    def __init__(self, metadata: ClusterMetadata, settings: OffsetsLogSettings) -> None:
        self._metadata = metadata
        self._settings = settings
        self._network = Network(
            client_id=CLIENT_ID,
            send_bytes_max=settings.load_buffer_bytes,
            receive_bytes_max=settings.load_buffer_bytes,
            reconnect_backoff_ms=settings.retry_backoff.base_ms,
            reconnect_backoff_max_ms=settings.retry_backoff.max_ms,
        )

    async def close(self) -> None:
        await self._network.close()

    async def _on_leader(
        self, partition: int, timeout_s: float, attempts_max: int, attempt: Attempt[_T]
    ) -> _T:
        """``attempt`` against the partition's leader, retried after fresh metadata while it
        raises ``_Retry``, at most ``attempts_max`` times and within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        problem = (ErrorCode.REQUEST_TIMED_OUT, "no attempt was made")
        for failures in range(attempts_max):
            seen = self._metadata.offset
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                break
            route = self._metadata.leader(partition)
            if route is None:
                problem = (
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"{OFFSETS_TOPIC}-{partition} has no leader in this coordinator's metadata",
                )
            else:
                leader, address = route
                try:
                    return await attempt(self._network.storage(address), leader, remaining_s)
                except _Retry as retry:
                    problem = (retry.code, f"node {leader.node_id}: {retry.message}")
                except grpc.aio.AioRpcError as error:
                    code, message = rpc_error(error)
                    if not code.retriable:
                        raise BrookError(code, message) from None
                    problem = (code, f"node {leader.node_id}: {message}")
            if self._metadata.offset == seen:
                wait_s = min(
                    backoff_s(self._settings.retry_backoff, failures + 1),
                    deadline - loop.time(),
                )
                await self._metadata.wait_for_change(wait_s)
        code, message = problem
        if code is not ErrorCode.REQUEST_TIMED_OUT and loop.time() >= deadline:
            message = f"timed out after {timeout_s * 1000:.0f} ms; last: {code.name}: {message}"
            code = ErrorCode.REQUEST_TIMED_OUT
        raise BrookError(code, message)

    # -- append ---------------------------------------------------------------------------------

    async def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        if not records:
            raise ValueError("an append needs at least one record")
        now_ms = time.time_ns() // 1_000_000
        batch = build_record_batch([(now_ms, key, value, ()) for key, value in records])
        count = len(records)

        async def produce(
            stub: storage_pb2_grpc.StorageServiceStub, leader: PartitionLeader, remaining_s: float
        ) -> int:
            request = storage_pb2.ProduceRequest(
                acks=storage_pb2.ACKS_ALL,
                timeout_ms=max(1, int(remaining_s * 1000)),
                partitions=[
                    storage_pb2.PartitionProduceData(
                        topic=OFFSETS_TOPIC, partition=partition, records=batch
                    )
                ],
            )
            response = await stub.Produce(request, timeout=remaining_s)
            answer = _only(response.partitions, partition)
            code = error_code(answer.error_code)
            if code is ErrorCode.NONE:
                return int(answer.base_offset) + count - 1
            if code.retriable:
                raise _Retry(code, answer.error_message or code.name)
            raise BrookError(code, answer.error_message or None)

        timeout_s = self._settings.commit_timeout_ms / 1000
        # The deadline bounds the attempts; the count only guards against a tight loop.
        return await self._on_leader(partition, timeout_s, 1_000, produce)

    # -- read -----------------------------------------------------------------------------------

    async def bounds(self, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark) of the partition now."""

        async def list_offsets(
            stub: storage_pb2_grpc.StorageServiceStub, leader: PartitionLeader, remaining_s: float
        ) -> tuple[int, int]:
            # One spec per request: a request names each partition once.
            found: list[int] = []
            for spec in (storage_pb2.OFFSET_SPEC_EARLIEST, storage_pb2.OFFSET_SPEC_LATEST):
                request = storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic=OFFSETS_TOPIC, partition=partition, spec=spec
                        )
                    ]
                )
                response = await stub.ListOffsets(request, timeout=remaining_s)
                for answer in response.partitions:
                    code = error_code(answer.error_code)
                    if code is not ErrorCode.NONE:
                        if code.retriable:
                            raise _Retry(code, answer.error_message or code.name)
                        raise BrookError(code, answer.error_message or None)
                    found.append(int(answer.offset))
            if len(found) != 2:
                raise BrookError(ErrorCode.UNKNOWN_SERVER_ERROR, "ListOffsets answered partly")
            return found[0], found[1]

        return await self._on_leader(
            partition, self._settings.request_timeout_ms / 1000, READ_ATTEMPTS_MAX, list_offsets
        )

    async def read(self, partition: int, from_offset: int) -> AsyncIterator[LogRecord]:
        offset = max(0, from_offset)
        end: int | None = None
        stalls = 0
        while end is None or offset < end:
            response = await self._fetch(partition, offset)
            if offset < response.log_start_offset:
                # Removed by retention or DeleteRecords: nothing of it can be replayed.
                offset = int(response.log_start_offset)
                continue
            if end is None:
                end = int(response.high_watermark)
            records = bytes(response.records)
            before = offset
            try:
                for position, header in scan_batches(records):
                    if header.is_control or header.next_offset <= offset:
                        continue
                    for record in iter_records(records, position):
                        if record.offset < offset or record.offset >= end:
                            continue
                        if record.key is not None:
                            yield LogRecord(record.offset, record.key, record.value)
                    offset = max(offset, header.next_offset)
            except CorruptRecordError as error:
                raise BrookError(
                    ErrorCode.CORRUPT_MESSAGE, f"{OFFSETS_TOPIC}-{partition}: {error}"
                ) from None
            offset = max(offset, int(response.next_fetch_offset))
            if offset > before:
                stalls = 0
                continue
            # Below the first fetch's high watermark but nothing returned: a new leader whose
            # own high watermark has not caught up yet.
            stalls += 1
            if stalls >= READ_ATTEMPTS_MAX:
                raise BrookError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"{OFFSETS_TOPIC}-{partition} returned nothing at offset {offset}, below its "
                    f"high watermark {end}, {stalls} times",
                )
            await asyncio.sleep(backoff_s(self._settings.retry_backoff, stalls))

    async def _fetch(self, partition: int, offset: int) -> storage_pb2.FetchPartitionResponse:
        buffer_bytes = self._settings.load_buffer_bytes

        async def fetch(
            stub: storage_pb2_grpc.StorageServiceStub, leader: PartitionLeader, remaining_s: float
        ) -> storage_pb2.FetchPartitionResponse:
            request = storage_pb2.FetchRequest(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=buffer_bytes,
                partitions=[
                    storage_pb2.FetchPartition(
                        topic=OFFSETS_TOPIC,
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=buffer_bytes,
                    )
                ],
            )
            response = await stub.Fetch(request, timeout=remaining_s)
            answer: storage_pb2.FetchPartitionResponse = _only(response.partitions, partition)
            code = error_code(answer.error_code)
            if code is ErrorCode.NONE:
                return answer
            if code is ErrorCode.OFFSET_OUT_OF_RANGE and offset < answer.log_start_offset:
                return answer
            if code.retriable:
                raise _Retry(code, answer.error_message or code.name)
            raise BrookError(code, answer.error_message or None)

        return await self._on_leader(
            partition, self._settings.request_timeout_ms / 1000, READ_ATTEMPTS_MAX, fetch
        )


_Answer = TypeVar(
    "_Answer", storage_pb2.PartitionProduceResponse, storage_pb2.FetchPartitionResponse
)


def _only(answers: Sequence[_Answer], partition: int) -> _Answer:
    for answer in answers:
        if answer.topic == OFFSETS_TOPIC and answer.partition == partition:
            return answer
    raise BrookError(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"the storage node's answer did not include {OFFSETS_TOPIC}-{partition}",
    )
