"""An in-memory StorageService on a real gRPC server, for the SDK's fault tests.

The SDK's happy paths are proven against a real storage node (tests/integration/test_sdk_*).
What a single real node cannot do on demand — answer NOT_LEADER_OR_FOLLOWER for a while, stall
past a timeout, fail one request and not the next, serve a corrupted batch — this double does,
so the client's retry, ordering, timeout and verification logic can be tested. It keeps the
contract's rules that the client relies on: batches validated with the real codec
(``validate_batches``), offsets assigned contiguously per partition (``assign_offsets``),
whole batches returned by Fetch, long-poll that wakes when data arrives.

``faults`` hooks run before the double's own handling: a hook may return a response (which is
sent instead), raise a grpc error through ``context.abort``, sleep, or return None to go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from brook.errors import ErrorCode
from brook.record import (
    RecordError,
    assign_offsets,
    iter_records,
    read_header,
    scan_batches,
    validate_batches,
)
from brook.v1 import common_pb2, storage_pb2, storage_pb2_grpc

NODE_ID = 1
MAX_BATCH_BYTES = 1024 * 1024
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0

Hook = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


@dataclass
class PartitionData:
    batches: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    start_offset: int = 0

    def append(self, records: bytes) -> int:
        """Validate and append ``records``; returns the base offset (raises RecordError)."""
        headers = validate_batches(records, max_batch_bytes=MAX_BATCH_BYTES)
        base = self.next_offset
        buffer = bytearray(records)
        position = 0
        for header in headers:
            assign_offsets(buffer, position, self.next_offset)
            self.batches.append(bytes(buffer[position : position + header.size]))
            self.next_offset += header.records_count
            position += header.size
        return base


class StorageDouble(storage_pb2_grpc.StorageServiceServicer):
    def __init__(self, topics: dict[str, int]) -> None:
        self.address = ""
        self.partitions: dict[tuple[str, int], PartitionData] = {
            (topic, p): PartitionData() for topic, count in topics.items() for p in range(count)
        }
        self.faults: dict[str, Hook] = {}
        self.calls: dict[str, int] = {}
        self.produced: list[storage_pb2.ProduceRequest] = []
        # (arrived, answered, record bytes) of every Fetch, in time.monotonic() seconds.
        self.fetches: list[tuple[float, float, int]] = []
        # A group coordinator's node id served at this double's address too (its servicers
        # given to RunningDouble): GetMetadata lists it as GetMetadata lists coordinators.
        self.coordinator_node_id: int | None = None
        # What GetMetadata names as the controllers (a double also serving AdminService
        # names itself, as a storage node names the controllers it knows).
        self.controller_addresses: list[str] = []
        self._data_arrived: asyncio.Event | None = None

    def _count(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1

    async def _fault(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._count(method)
        hook = self.faults.get(method)
        return None if hook is None else await hook(request, context)

    def append(self, topic: str, partition: int, records: bytes) -> int:
        """Append as Produce does (waking long-polls); raises RecordError."""
        base = self.partitions[(topic, partition)].append(records)
        if self._data_arrived is not None:
            self._data_arrived.set()
        return base

    def records(self, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every stored record of a partition."""
        out = []
        for batch in self.partitions[(topic, partition)].batches:
            out.extend((r.offset, r.key, r.value) for r in iter_records(batch))
        return out

    async def GetMetadata(self, request: Any, context: Any) -> Any:
        if (answer := await self._fault("GetMetadata", request, context)) is not None:
            return answer
        host, port = self.address.rsplit(":", 1)
        names = list(request.topics) or sorted({t for t, _ in self.partitions})
        topics = []
        for name in names:
            count = sum(1 for t, _ in self.partitions if t == name)
            if count == 0:
                topics.append(
                    storage_pb2.TopicMetadata(
                        name=name,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # type: ignore[arg-type]
                        error_message=f"no topic {name}",
                    )
                )
                continue
            topics.append(
                storage_pb2.TopicMetadata(
                    name=name,
                    partitions=[
                        storage_pb2.PartitionMetadata(
                            partition=p, leader_id=NODE_ID, leader_epoch=0, replicas=[NODE_ID]
                        )
                        for p in range(count)
                    ],
                )
            )
        endpoints = [common_pb2.Endpoint(listener="GRPC", host=host, port=int(port))]
        brokers = [
            storage_pb2.BrokerMetadata(
                node_id=NODE_ID, role=common_pb2.NODE_ROLE_STORAGE_NODE, endpoints=endpoints
            )
        ]
        if self.coordinator_node_id is not None:
            brokers.append(
                storage_pb2.BrokerMetadata(
                    node_id=self.coordinator_node_id,
                    role=common_pb2.NODE_ROLE_GROUP_COORDINATOR,
                    endpoints=endpoints,
                )
            )
        return storage_pb2.GetMetadataResponse(
            cluster_id="double",
            brokers=brokers,
            topics=topics,
            controller_addresses=self.controller_addresses,
        )

    async def Produce(self, request: Any, context: Any) -> Any:
        self.produced.append(request)
        if (answer := await self._fault("Produce", request, context)) is not None:
            return answer
        answers = []
        for data in request.partitions:
            answer = storage_pb2.PartitionProduceResponse(
                topic=data.topic, partition=data.partition, base_offset=-1, log_append_time_ms=-1
            )
            if (data.topic, data.partition) not in self.partitions:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[assignment]
            else:
                try:
                    answer.base_offset = self.append(data.topic, data.partition, data.records)
                except RecordError as error:
                    answer.error_code = error.error_code  # type: ignore[assignment]
                    answer.error_message = str(error)
            answers.append(answer)
        return storage_pb2.ProduceResponse(partitions=answers)

    async def Fetch(self, request: Any, context: Any) -> Any:
        if (answer := await self._fault("Fetch", request, context)) is not None:
            return answer
        loop = asyncio.get_running_loop()
        arrived = time.monotonic()
        deadline = loop.time() + request.max_wait_ms / 1000
        while True:
            answers, size = self._read(request)
            remaining = deadline - loop.time()
            if size >= max(request.min_bytes, 1) or remaining <= 0:
                self.fetches.append((arrived, time.monotonic(), size))
                return storage_pb2.FetchResponse(partitions=answers)
            if self._data_arrived is None:
                self._data_arrived = asyncio.Event()
            self._data_arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._data_arrived.wait(), remaining)

    def _read(self, request: Any) -> tuple[list[Any], int]:
        answers = []
        total = 0
        for wanted in request.partitions:
            partition = self.partitions.get((wanted.topic, wanted.partition))
            answer = storage_pb2.FetchPartitionResponse(
                topic=wanted.topic, partition=wanted.partition
            )
            if partition is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[assignment]
            elif not partition.start_offset <= wanted.fetch_offset <= partition.next_offset:
                answer.error_code = ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[assignment]
            else:
                chunks = []
                size = 0
                for batch in partition.batches:
                    header = read_header(batch)
                    if header.last_offset < wanted.fetch_offset:
                        continue
                    if chunks and (
                        size + len(batch) > wanted.partition_max_bytes
                        or total + size + len(batch) > request.max_bytes
                    ):
                        break
                    chunks.append(batch)
                    size += len(batch)
                answer.records = b"".join(chunks)
                answer.high_watermark = partition.next_offset
                answer.log_start_offset = partition.start_offset
                total += size
            answers.append(answer)
        return answers, total

    async def InitProducerId(self, request: Any, context: Any) -> Any:
        # As a node without producer ids (static.topics) answers; the generated default would
        # be a synchronous method, run on an executor thread the tests count as leaked.
        if (answer := await self._fault("InitProducerId", request, context)) is not None:
            return answer
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the storage double has no producer ids")

    async def ListOffsets(self, request: Any, context: Any) -> Any:
        if (answer := await self._fault("ListOffsets", request, context)) is not None:
            return answer
        answers = []
        for wanted in request.partitions:
            partition = self.partitions.get((wanted.topic, wanted.partition))
            answer = storage_pb2.ListOffsetsPartitionResponse(
                topic=wanted.topic, partition=wanted.partition, offset=-1, timestamp_ms=-1
            )
            if partition is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # type: ignore[assignment]
            elif wanted.spec == storage_pb2.OFFSET_SPEC_EARLIEST:
                answer.offset = partition.start_offset
            elif wanted.spec == storage_pb2.OFFSET_SPEC_LATEST:
                answer.offset = partition.next_offset
            elif wanted.spec == storage_pb2.OFFSET_SPEC_TIMESTAMP:
                for batch in partition.batches:
                    found = next(
                        (r for r in iter_records(batch) if r.timestamp >= wanted.timestamp_ms),
                        None,
                    )
                    if found is not None:
                        answer.offset = found.offset
                        answer.timestamp_ms = found.timestamp
                        break
            answers.append(answer)
        return storage_pb2.ListOffsetsResponse(partitions=answers)


class RunningDouble:
    """A StorageDouble served on 127.0.0.1 from a thread of its own (its own event loop);
    ``servicers`` adds more services to the same server (scripted coordinators)."""

    def __init__(
        self, double: StorageDouble, servicers: Callable[[grpc.aio.Server], None] | None = None
    ) -> None:
        self.double = double
        self._servicers = servicers
        self.loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storage-double", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise RuntimeError("the storage double did not start")

    @property
    def address(self) -> str:
        return self.double.address

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()

    async def _start(self) -> None:
        self._server = grpc.aio.server()
        storage_pb2_grpc.add_StorageServiceServicer_to_server(self.double, self._server)
        if self._servicers is not None:
            self._servicers(self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.double.address = f"127.0.0.1:{port}"
        await self._server.start()

    def call(self, function: Callable[[], Any]) -> Any:
        """Run ``function`` on the double's loop (to touch its state safely)."""

        async def run() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(START_TIMEOUT_S)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            await self._server.stop(None)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(STOP_TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(STOP_TIMEOUT_S)


def answer_all(request: Any, code: ErrorCode) -> storage_pb2.ProduceResponse:
    """A Produce answer giving every partition of ``request`` the error ``code``."""
    return storage_pb2.ProduceResponse(
        partitions=[
            storage_pb2.PartitionProduceResponse(
                topic=p.topic,
                partition=p.partition,
                error_code=code,  # type: ignore[arg-type]
                base_offset=-1,
            )
            for p in request.partitions
        ]
    )


def corrupt_first_record(batch: bytes) -> bytes:
    """``batch`` with one byte of its records flipped: its CRC no longer matches."""
    position, header = next(scan_batches(batch))
    damaged = bytearray(batch)
    damaged[position + header.size - 1] ^= 0xFF
    return bytes(damaged)
