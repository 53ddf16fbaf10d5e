"""StorageService served in-process by the real node (brook.server.serve, real logs on disk):
request validation, limits, acks, leadership changes seen by waiting requests, ProduceRecords
and decoded fetches, offsets, metadata. The done-when scenarios run as separate processes in
tests/integration/test_storage_node_*.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from brook_storage_node.metadata_source import static_topic_id
from brook_storage_node.partition import SEQUENCE_GAP_WAIT_MS
from storage_node_support import (
    NODE_ID,
    OTHER_NODE_ID,
    QueueMetadataSource,
    batch,
    broker_record,
    config_record,
    delta,
    fetch_request,
    partition_record,
    produce_request,
    records,
    run,
    running_node,
    snapshot,
    topic_record,
)

from brook.errors import ErrorCode, error_code
from brook.record import Compression, build_batch, read_header
from brook.v1 import common_pb2, storage_pb2

NONE = ErrorCode.NONE
LONG_WAIT_MS = 10_000
# What "at once" means for a woken long poll on a loaded 2-core machine.
PROMPT_S = 2.0


def _static(topics: str, **settings: str) -> dict[str, str]:
    return {"static.topics": topics, **settings}


def _lagging_isr_source(port: int) -> QueueMetadataSource:
    """orders-0 led here with a follower in the ISR that never reports (its HW never moves);
    orders-1 led here alone; orders-2 led by node 2, replicated here."""
    return QueueMetadataSource(
        snapshot(
            broker_record(NODE_ID, port),
            broker_record(OTHER_NODE_ID, 9999),
            topic_record("orders"),
            partition_record("orders", 0, replicas=(NODE_ID, OTHER_NODE_ID)),
            partition_record("orders", 1),
            partition_record(
                "orders", 2, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID, NODE_ID), leader_epoch=3
            ),
        )
    )


def _sources() -> tuple[list[QueueMetadataSource], Callable[[int], QueueMetadataSource]]:
    made: list[QueueMetadataSource] = []

    def build(port: int) -> QueueMetadataSource:
        made.append(_lagging_isr_source(port))
        return made[-1]

    return made, build


def test_malformed_addresses_are_invalid_request_and_only_valid_entries_append(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:2")) as node:
            data = batch(2)
            reply = await node.stub.Produce(
                storage_pb2.ProduceRequest(
                    acks=storage_pb2.ACKS_LEADER,
                    partitions=[
                        storage_pb2.PartitionProduceData(topic="", partition=0, records=data),
                        storage_pb2.PartitionProduceData(
                            topic="orders", partition=-1, records=data
                        ),
                        storage_pb2.PartitionProduceData(topic="orders", partition=1, records=data),
                    ],
                )
            )
            codes = [error_code(p.error_code) for p in reply.partitions]
            assert codes == [ErrorCode.INVALID_REQUEST] * 2 + [NONE]
            offsets = await node.stub.ListOffsets(
                storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic="orders", partition=p, spec=storage_pb2.OFFSET_SPEC_LATEST
                        )
                        for p in (0, 1)
                    ]
                )
            )
            assert [p.offset for p in offsets.partitions] == [0, 2]

    run(scenario)


@pytest.mark.parametrize("acks", [storage_pb2.ACKS_LEADER, storage_pb2.ACKS_ALL])
def test_a_partition_named_repeatedly_in_one_produce_appends_each_entry_in_order(
    tmp_path: Path, acks: storage_pb2.Acks
) -> None:
    """A Produce call may carry a partition more than once (the gateway merges a connection's
    pipelined requests so): each entry is appended in call order and answered on its own;
    a refused entry (a corrupt batch) refuses only itself."""

    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:2")) as node:
            corrupt = bytearray(batch(1, prefix="bad"))
            corrupt[-1] ^= 0xFF
            entries = [
                ("orders", 0, batch(2, prefix="a")),
                ("orders", 1, batch(1, prefix="x")),
                ("orders", 0, bytes(corrupt)),
                ("orders", 0, batch(3, prefix="b")),
                ("orders", 0, batch(1, prefix="c")),
            ]
            reply = await node.stub.Produce(
                storage_pb2.ProduceRequest(
                    acks=acks,
                    partitions=[
                        storage_pb2.PartitionProduceData(topic=t, partition=p, records=r)
                        for t, p, r in entries
                    ],
                )
            )
            codes = [error_code(p.error_code) for p in reply.partitions]
            assert codes == [NONE, NONE, ErrorCode.CORRUPT_MESSAGE, NONE, NONE]
            assert [(p.topic, p.partition) for p in reply.partitions] == [
                (t, p) for t, p, _ in entries
            ]
            assert [reply.partitions[i].base_offset for i in (0, 1, 3, 4)] == [0, 0, 2, 5]
            fetched = await node.stub.Fetch(fetch_request("orders", 0, 0, decode=True))
            values = [r.value for r in fetched.partitions[0].decoded_records]
            assert values == [
                value
                for prefix, n in (("a", 2), ("b", 3), ("c", 1))
                for _, _, value, _ in records(n, prefix=prefix)
            ]

    run(scenario)


def test_unknown_acks_and_negative_limits_are_refused_for_every_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:1")) as node:
            bad_acks = await node.stub.Produce(produce_request("orders", 0, batch(1), acks=9))
            negative_timeout = await node.stub.Produce(
                produce_request("orders", 0, batch(1), timeout_ms=-1)
            )
            fetches = [
                fetch_request("orders", 0, 0, max_wait_ms=-1),
                fetch_request("orders", 0, 0, min_bytes=-1),
                fetch_request("orders", 0, 0, max_bytes=-1),
                fetch_request("orders", 0, 0, partition_max_bytes=-1),
            ]
            fetched = [await node.stub.Fetch(f) for f in fetches]
            latest = await node.stub.ListOffsets(
                storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic="orders", partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
                        )
                    ]
                )
            )

            assert error_code(bad_acks.partitions[0].error_code) is ErrorCode.INVALID_REQUIRED_ACKS
            assert (
                error_code(negative_timeout.partitions[0].error_code) is ErrorCode.INVALID_REQUEST
            )
            assert [error_code(f.partitions[0].error_code) for f in fetched] == [
                ErrorCode.INVALID_REQUEST
            ] * 4
            assert latest.partitions[0].offset == 0

    run(scenario)


def test_acks_all_times_out_and_bytes_in_flight_are_bounded(tmp_path: Path) -> None:
    async def scenario() -> None:
        _, build = _sources()
        limits = {
            "socket.request.max.bytes": "10000",
            "queued.max.request.bytes": "10000",
            "message.max.bytes": "8000",
        }
        async with running_node(tmp_path, source_for=build, settings=limits) as node:
            big = build_batch([(None, None, b"x" * 6000, ())])
            waiting = asyncio.ensure_future(
                node.stub.Produce(produce_request("orders", 0, big, timeout_ms=500))
            )
            await asyncio.sleep(0.2)

            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await node.stub.Produce(produce_request("orders", 1, big))
            timed_out = await waiting
            after = await node.stub.Produce(produce_request("orders", 1, big))

            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "queued.max.request.bytes=10000" in (refused.value.details() or "")
            result = timed_out.partitions[0]
            assert error_code(result.error_code) is ErrorCode.REQUEST_TIMED_OUT
            assert result.base_offset == 0
            assert error_code(after.partitions[0].error_code) is NONE

    run(scenario)


def test_partition_led_elsewhere_answers_not_leader_with_the_leaders_endpoints(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        _, build = _sources()
        async with running_node(tmp_path, source_for=build) as node:
            produced = await node.stub.Produce(produce_request("orders", 2, batch(1)))
            fetched = await node.stub.Fetch(fetch_request("orders", 2, 0))

            for result in (produced.partitions[0], fetched.partitions[0]):
                assert error_code(result.error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
                hint = result.current_leader
                assert (hint.leader_id, hint.leader_epoch) == (OTHER_NODE_ID, 3)
                assert [(e.host, e.port) for e in hint.endpoints] == [("127.0.0.1", 9999)]

    run(scenario)


def test_leadership_moving_away_answers_a_waiting_fetch_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        sources, build = _sources()
        async with running_node(tmp_path, source_for=build) as node:
            started = time.monotonic()
            waiting = asyncio.ensure_future(
                node.stub.Fetch(
                    fetch_request("orders", 1, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=1)
                )
            )
            await asyncio.sleep(0.2)

            await sources[0].push(
                delta(
                    partition_record(
                        "orders",
                        1,
                        leader=OTHER_NODE_ID,
                        replicas=(OTHER_NODE_ID, NODE_ID),
                        leader_epoch=1,
                    ),
                    offset=1,
                )
            )
            fetched = await waiting

            assert time.monotonic() - started < PROMPT_S
            result = fetched.partitions[0]
            assert error_code(result.error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert result.current_leader.leader_id == OTHER_NODE_ID

    run(scenario)


def test_subscription_reports_and_drops_a_partition_that_loses_leadership(tmp_path: Path) -> None:
    async def scenario() -> None:
        sources, build = _sources()
        async with running_node(tmp_path, source_for=build) as node:
            stream = node.stub.Subscribe(
                storage_pb2.SubscribeRequest(
                    partitions=[
                        storage_pb2.SubscribePartition(
                            topic="orders", partition=1, start=storage_pb2.OFFSET_SPEC_EARLIEST
                        ),
                        storage_pb2.SubscribePartition(topic="nope", partition=0),
                    ]
                )
            )
            first = await stream.read()
            assert [(p.topic, error_code(p.error_code)) for p in first.partitions] == [
                ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            ]
            await node.stub.Produce(produce_request("orders", 1, batch(2)))
            data = await stream.read()
            assert data.partitions[0].next_fetch_offset == 2

            await sources[0].push(
                delta(
                    partition_record(
                        "orders", 1, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID,), leader_epoch=1
                    ),
                    offset=1,
                )
            )
            dropped = await stream.read()
            end = await stream.read()

            assert error_code(dropped.partitions[0].error_code) is ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert end is grpc.aio.EOF
            assert await stream.code() is grpc.StatusCode.OK

    run(scenario)


def test_subscription_ends_cleanly_when_the_node_shuts_down(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:1")) as node:
            stream = node.stub.Subscribe(
                storage_pb2.SubscribeRequest(
                    partitions=[
                        storage_pb2.SubscribePartition(
                            topic="orders", partition=0, start=storage_pb2.OFFSET_SPEC_OFFSET
                        )
                    ]
                )
            )
            await node.stub.Produce(produce_request("orders", 0, batch(1)))
            data = await stream.read()
            assert data.partitions[0].next_fetch_offset == 1
            waiting = asyncio.create_task(stream.read())
            await asyncio.sleep(0.2)
            started = time.monotonic()

            node.stop.set()
            message = await asyncio.wait_for(waiting, PROMPT_S)

            assert message is grpc.aio.EOF
            assert await stream.code() is grpc.StatusCode.OK
            assert time.monotonic() - started < PROMPT_S

    run(scenario)


def test_produce_records_builds_a_batch_in_the_topics_codec_and_fetch_decodes_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        settings = _static("events:1:compression.type=lz4")
        async with running_node(tmp_path, settings=settings) as node:
            sent = [
                common_pb2.Record(
                    key=b"k1",
                    value=b"v1",
                    timestamp_ms=1_700_000_000_000,
                    headers=[
                        common_pb2.RecordHeader(key="h", value=b"x"),
                        common_pb2.RecordHeader(key="null"),
                    ],
                ),
                common_pb2.Record(key=b"k2"),
                common_pb2.Record(value=b""),
            ]
            produced = await node.stub.ProduceRecords(
                storage_pb2.ProduceRecordsRequest(
                    partitions=[storage_pb2.PartitionRecords(topic="events", records=sent)]
                )
            )
            raw = await node.stub.Fetch(fetch_request("events", 0, 0))
            decoded = await node.stub.Fetch(fetch_request("events", 0, 1, decode=True))

            assert error_code(produced.partitions[0].error_code) is NONE
            assert read_header(raw.partitions[0].records).compression is Compression.LZ4
            got = list(decoded.partitions[0].decoded_records)
            assert [r.offset for r in got] == [1, 2]
            assert (got[0].HasField("key"), got[0].key, got[0].HasField("value")) == (
                True,
                b"k2",
                False,
            )
            assert (got[1].HasField("key"), got[1].HasField("value"), got[1].value) == (
                False,
                True,
                b"",
            )
            first = await node.stub.Fetch(fetch_request("events", 0, 0, decode=True))
            record = first.partitions[0].decoded_records[0]
            assert (record.timestamp_ms, record.timestamp_type) == (
                1_700_000_000_000,
                common_pb2.TIMESTAMP_TYPE_CREATE_TIME,
            )
            assert [(h.key, h.HasField("value"), h.value) for h in record.headers] == [
                ("h", True, b"x"),
                ("null", False, b""),
            ]

    run(scenario)


def test_produce_records_refuses_a_bad_record_naming_it_and_appends_nothing(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("events:1")) as node:
            produced = await node.stub.ProduceRecords(
                storage_pb2.ProduceRecordsRequest(
                    partitions=[
                        storage_pb2.PartitionRecords(
                            topic="events",
                            records=[
                                common_pb2.Record(value=b"ok"),
                                common_pb2.Record(timestamp_ms=-5),
                            ],
                        ),
                        storage_pb2.PartitionRecords(topic="events", partition=1),
                    ]
                )
            )
            empty = await node.stub.ProduceRecords(
                storage_pb2.ProduceRecordsRequest(
                    partitions=[storage_pb2.PartitionRecords(topic="events")]
                )
            )
            fetched = await node.stub.Fetch(fetch_request("events", 0, 0))

            result = produced.partitions[0]
            assert error_code(result.error_code) is ErrorCode.INVALID_RECORD
            assert [e.index for e in result.batch_errors] == [1]
            assert (
                error_code(produced.partitions[1].error_code)
                is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            assert error_code(empty.partitions[0].error_code) is ErrorCode.INVALID_RECORD
            assert fetched.partitions[0].high_watermark == 0

    run(scenario)


def test_fetch_budgets_return_the_first_batch_whole_and_nothing_past_the_budget(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:2")) as node:
            big = build_batch([(None, None, b"x" * 3000, ())])
            for partition in (0, 1):
                await node.stub.Produce(produce_request("orders", partition, big))
                await node.stub.Produce(produce_request("orders", partition, big))

            fetched = await node.stub.Fetch(
                storage_pb2.FetchRequest(
                    max_bytes=1000,
                    partitions=[
                        storage_pb2.FetchPartition(topic="orders", partition=p, fetch_offset=0)
                        for p in (0, 1)
                    ],
                )
            )
            per_partition = await node.stub.Fetch(
                storage_pb2.FetchRequest(
                    partitions=[
                        storage_pb2.FetchPartition(
                            topic="orders", partition=p, fetch_offset=0, partition_max_bytes=4000
                        )
                        for p in (0, 1)
                    ],
                )
            )

            first, second = fetched.partitions
            assert (len(first.records), first.next_fetch_offset) == (len(big), 1)
            assert (
                len(second.records),
                error_code(second.error_code),
                second.next_fetch_offset,
            ) == (
                0,
                NONE,
                0,
            )
            assert [len(p.records) for p in per_partition.partitions] == [len(big), len(big)]

    run(scenario)


def test_fetch_offset_bounds_follow_kafka(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:1")) as node:
            for _ in range(3):
                await node.stub.Produce(produce_request("orders", 0, batch(2)))
            at_end = await node.stub.Fetch(fetch_request("orders", 0, 6))
            past_end = await node.stub.Fetch(fetch_request("orders", 0, 7))
            deleted = await node.stub.DeleteRecords(
                storage_pb2.DeleteRecordsRequest(
                    partitions=[
                        storage_pb2.DeleteRecordsPartition(topic="orders", partition=0, offset=2),
                        storage_pb2.DeleteRecordsPartition(topic="orders", partition=0, offset=9),
                    ]
                )
            )
            deleted_once = await node.stub.DeleteRecords(
                storage_pb2.DeleteRecordsRequest(
                    partitions=[
                        storage_pb2.DeleteRecordsPartition(topic="orders", partition=0, offset=2)
                    ]
                )
            )
            beyond_hw = await node.stub.DeleteRecords(
                storage_pb2.DeleteRecordsRequest(
                    partitions=[
                        storage_pb2.DeleteRecordsPartition(topic="orders", partition=0, offset=9)
                    ]
                )
            )
            below_start = await node.stub.Fetch(fetch_request("orders", 0, 1))
            fenced = await node.stub.Fetch(
                storage_pb2.FetchRequest(
                    partitions=[
                        storage_pb2.FetchPartition(
                            topic="orders", partition=0, fetch_offset=2, current_leader_epoch=7
                        )
                    ]
                )
            )

            end = at_end.partitions[0]
            assert (error_code(end.error_code), len(end.records), end.next_fetch_offset) == (
                NONE,
                0,
                6,
            )
            assert error_code(past_end.partitions[0].error_code) is ErrorCode.OFFSET_OUT_OF_RANGE
            assert error_code(deleted.partitions[0].error_code) is ErrorCode.INVALID_REQUEST
            assert deleted_once.partitions[0].low_watermark == 2
            assert error_code(beyond_hw.partitions[0].error_code) is ErrorCode.OFFSET_OUT_OF_RANGE
            below = below_start.partitions[0]
            assert (error_code(below.error_code), below.log_start_offset) == (
                ErrorCode.OFFSET_OUT_OF_RANGE,
                -1,
            )
            assert error_code(fenced.partitions[0].error_code) is ErrorCode.UNKNOWN_LEADER_EPOCH

    run(scenario)


def test_acks_none_answers_without_offsets_and_the_records_arrive(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:1")) as node:
            produced = await node.stub.Produce(
                produce_request("orders", 0, batch(4), acks=storage_pb2.ACKS_NONE)
            )
            fetched = await node.stub.Fetch(
                fetch_request("orders", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=1)
            )

            assert (
                error_code(produced.partitions[0].error_code),
                produced.partitions[0].base_offset,
            ) == (
                NONE,
                -1,
            )
            assert fetched.partitions[0].next_fetch_offset == 4

    run(scenario)


def test_list_offsets_refuses_unknown_specs_and_answers_max_timestamp(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:3")) as node:
            listed = await node.stub.ListOffsets(
                storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic="orders", partition=0, spec=storage_pb2.OFFSET_SPEC_MAX_TIMESTAMP
                        ),
                        storage_pb2.ListOffsetsPartition(topic="orders", partition=1),
                        storage_pb2.ListOffsetsPartition(
                            topic="orders",
                            partition=2,
                            spec=storage_pb2.OFFSET_SPEC_TIMESTAMP,
                            timestamp_ms=-3,
                        ),
                    ]
                )
            )

            assert [error_code(p.error_code) for p in listed.partitions] == [
                NONE,
                ErrorCode.INVALID_REQUEST,
                ErrorCode.INVALID_REQUEST,
            ]
            # An empty partition has no record with a largest timestamp.
            assert listed.partitions[0].offset == -1

    run(scenario)


def test_metadata_lists_this_node_and_its_topics_and_explains_unknown_names(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:2,events:1")) as node:
            everything = await node.stub.GetMetadata(storage_pb2.GetMetadataRequest())
            asked = await node.stub.GetMetadata(
                storage_pb2.GetMetadataRequest(topics=["orders", "missing", "bad name"])
            )

            assert [(b.node_id, b.endpoints[0].port) for b in everything.brokers] == [
                (NODE_ID, node.port)
            ]
            assert [t.name for t in everything.topics] == ["events", "orders"]
            orders = asked.topics[0]
            assert orders.topic_id == static_topic_id("orders")
            assert [
                (p.partition, p.leader_id, p.leader_epoch, list(p.replicas), list(p.isr))
                for p in orders.partitions
            ] == [(0, NODE_ID, 0, [NODE_ID], [NODE_ID]), (1, NODE_ID, 0, [NODE_ID], [NODE_ID])]
            assert [error_code(t.error_code) for t in asked.topics] == [
                NONE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
            ]

    run(scenario)


def test_init_producer_id_is_unimplemented_with_a_reason(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:1")) as node:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await node.stub.InitProducerId(storage_pb2.InitProducerIdRequest())

            assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert "issue #8" in (raised.value.details() or "")

    run(scenario)


def test_long_poll_and_response_size_are_bounded_by_the_nodes_limits(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = {"request.timeout.ms": "300", "fetch.max.bytes": "1024"}
        async with running_node(tmp_path, settings=_static("orders:1", **limits)) as node:
            one = build_batch([(None, None, b"x" * 500, ())])
            for _ in range(3):
                await node.stub.Produce(produce_request("orders", 0, one))

            started = time.monotonic()
            fetched = await node.stub.Fetch(
                fetch_request("orders", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=1_000_000)
            )
            waited_s = time.monotonic() - started

            assert 0.25 <= waited_s < PROMPT_S
            result = fetched.partitions[0]
            assert (len(result.records), result.next_fetch_offset) == (len(one), 1)

    run(scenario)


def test_a_client_that_sends_no_leader_epoch_is_served_after_the_epoch_moved(
    tmp_path: Path,
) -> None:
    """current_leader_epoch is optional: unset means unknown, not epoch 0."""

    def source(port: int) -> QueueMetadataSource:
        return QueueMetadataSource(
            snapshot(
                broker_record(NODE_ID, port),
                topic_record("orders"),
                partition_record("orders", 0, leader_epoch=3),
            )
        )

    async def scenario() -> None:
        async with running_node(tmp_path, source_for=source) as node:
            await node.stub.Produce(produce_request("orders", 0, batch(2)))

            unset = storage_pb2.FetchPartition(topic="orders", partition=0, fetch_offset=0)
            assert not unset.HasField("current_leader_epoch")
            served = await node.stub.Fetch(storage_pb2.FetchRequest(partitions=[unset]))
            stale = await node.stub.Fetch(
                storage_pb2.FetchRequest(
                    partitions=[
                        storage_pb2.FetchPartition(
                            topic="orders", partition=0, fetch_offset=0, current_leader_epoch=0
                        )
                    ]
                )
            )
            latest = await node.stub.ListOffsets(
                storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic="orders", partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
                        )
                    ]
                )
            )

            assert error_code(served.partitions[0].error_code) is ErrorCode.NONE
            assert served.partitions[0].records
            assert error_code(stale.partitions[0].error_code) is ErrorCode.FENCED_LEADER_EPOCH
            assert error_code(latest.partitions[0].error_code) is ErrorCode.NONE
            assert latest.partitions[0].offset == 2

    run(scenario)


def _sequenced(sequence: int) -> bytes:
    return build_batch(
        [(0, None, f"s{sequence}".encode(), ())],
        producer_id=7,
        producer_epoch=0,
        base_sequence=sequence,
    )


def test_a_produce_ahead_of_its_sequence_waits_for_the_one_in_between_arriving_after_it(
    tmp_path: Path,
) -> None:
    """Two pipelined calls reach the node in the wrong order (issue #13): the second batch is
    set aside, not refused, and appended once the first arrives; other partitions of its
    request are not held up by the wait."""

    def request(sequence: int, *others: storage_pb2.PartitionProduceData) -> Any:
        return storage_pb2.ProduceRequest(
            acks=storage_pb2.ACKS_ALL,
            timeout_ms=5000,
            partitions=[
                storage_pb2.PartitionProduceData(
                    topic="orders", partition=0, records=_sequenced(sequence)
                ),
                *others,
            ],
        )

    async def scenario() -> None:
        async with running_node(tmp_path, settings=_static("orders:2")) as node:
            first = await node.stub.Produce(request(0))
            assert error_code(first.partitions[0].error_code) is NONE
            other = storage_pb2.PartitionProduceData(topic="orders", partition=1, records=batch(1))
            ahead = asyncio.ensure_future(node.stub.Produce(request(2, other)))
            while True:  # the other partition is appended before the wait ends
                offsets = await node.stub.ListOffsets(
                    storage_pb2.ListOffsetsRequest(
                        partitions=[
                            storage_pb2.ListOffsetsPartition(
                                topic="orders", partition=1, spec=storage_pb2.OFFSET_SPEC_LATEST
                            )
                        ]
                    )
                )
                if offsets.partitions[0].offset == 1:
                    break
                await asyncio.sleep(0.01)
            assert not ahead.done()
            behind = await node.stub.Produce(request(1))
            assert error_code(behind.partitions[0].error_code) is NONE
            reply = await asyncio.wait_for(ahead, 10)
            assert [error_code(p.error_code) for p in reply.partitions] == [NONE, NONE]
            assert (behind.partitions[0].base_offset, reply.partitions[0].base_offset) == (1, 2)

    run(scenario)


def test_a_batch_behind_one_refused_here_a_moment_ago_is_refused_alike(tmp_path: Path) -> None:
    """Batch 1 is refused (ISR below min.insync.replicas); the ISR recovers; batch 2, sent
    behind it, reaches the node: refused alike, at once, not taken as a sequence gap (a Kafka
    broker serving the connection's requests in order would have refused both; issue #13)."""

    def request(sequence: int, acks: int) -> Any:
        return storage_pb2.ProduceRequest(
            acks=acks,  # type: ignore[arg-type]
            timeout_ms=5000,
            partitions=[
                storage_pb2.PartitionProduceData(
                    topic="orders", partition=0, records=_sequenced(sequence)
                )
            ],
        )

    def isr(*members: int, offset: int) -> Any:
        record = partition_record(
            "orders", 0, replicas=(NODE_ID, OTHER_NODE_ID), isr=members, leader_epoch=0
        )
        return delta(record, offset=offset)

    sources: list[QueueMetadataSource] = []

    def build(port: int) -> QueueMetadataSource:
        sources.append(
            QueueMetadataSource(
                snapshot(
                    broker_record(NODE_ID, port),
                    broker_record(OTHER_NODE_ID, 9999),
                    topic_record("orders"),
                    config_record("orders", "min.insync.replicas", "2"),
                    partition_record(
                        "orders", 0, replicas=(NODE_ID, OTHER_NODE_ID), isr=(NODE_ID,)
                    ),
                )
            )
        )
        return sources[-1]

    async def scenario() -> None:
        async with running_node(tmp_path, source_for=build) as node:
            first = await node.stub.Produce(request(0, storage_pb2.ACKS_LEADER))
            assert error_code(first.partitions[0].error_code) is NONE
            refused = await node.stub.Produce(request(1, storage_pb2.ACKS_ALL))
            assert error_code(refused.partitions[0].error_code) is ErrorCode.NOT_ENOUGH_REPLICAS
            await sources[0].push(isr(NODE_ID, OTHER_NODE_ID, offset=1))
            started = time.monotonic()
            behind = await node.stub.Produce(request(2, storage_pb2.ACKS_LEADER))
            assert error_code(behind.partitions[0].error_code) is ErrorCode.NOT_ENOUGH_REPLICAS
            assert "send it again first" in behind.partitions[0].error_message
            assert time.monotonic() - started < SEQUENCE_GAP_WAIT_MS / 1000
            # The client sends both again, in order: both appended.
            for sequence, offset in ((1, 1), (2, 2)):
                again = await node.stub.Produce(request(sequence, storage_pb2.ACKS_LEADER))
                assert error_code(again.partitions[0].error_code) is NONE
                assert again.partitions[0].base_offset == offset

    run(scenario)
