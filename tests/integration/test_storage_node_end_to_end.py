"""The storage node as a real process (cluster fixture: one storage node, static.topics, no
controller), driven through raw gRPC stubs with batches built by brook.record: produce and
fetch back, long-poll, SIGKILL and restart, rejected batches, unknown topics, Subscribe,
ListOffsets."""

from __future__ import annotations

import json
import random
import signal
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import crc32c
import grpc
import pytest
from cluster_fixture import STANDALONE_STORAGE_NODE, ClusterFactory, start_standalone_storage_node

from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster
from brook.record import Record, build_batch, iter_records, scan_batches
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

NODE = STANDALONE_STORAGE_NODE
RPC_TIMEOUT_S = 15.0
KILL_WAIT_MS = 5_000
LONG_WAIT_MS = 10_000
# "Promptly" for a woken long poll, on a 2-core machine other engineers share.
PROMPT_S = 1.5
IDLE_WAIT_MS = 800
BASE_TIMESTAMP_MS = 1_700_000_000_000
TOPIC_MAX_MESSAGE_BYTES = 4096

Header = tuple[str, bytes | None]
Sent = tuple[bytes | None, bytes | None, tuple[Header, ...]]


@contextmanager
def _stub(cluster: LocalCluster) -> Iterator[storage_pb2_grpc.StorageServiceStub]:
    with grpc.insecure_channel(cluster.grpc_address(NODE)) as channel:
        yield storage_pb2_grpc.StorageServiceStub(channel)


def _produce(
    stub: storage_pb2_grpc.StorageServiceStub,
    entries: Sequence[tuple[str, int, bytes]],
    acks: int = storage_pb2.ACKS_ALL,
) -> list[storage_pb2.PartitionProduceResponse]:
    reply = stub.Produce(
        storage_pb2.ProduceRequest(
            acks=acks,  # type: ignore[arg-type]
            partitions=[
                storage_pb2.PartitionProduceData(topic=t, partition=p, records=r)
                for t, p, r in entries
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return list(reply.partitions)


def _fetch(
    stub: storage_pb2_grpc.StorageServiceStub,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 0,
) -> storage_pb2.FetchPartitionResponse:
    reply = stub.Fetch(
        storage_pb2.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            partitions=[
                storage_pb2.FetchPartition(topic=topic, partition=partition, fetch_offset=offset)
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return reply.partitions[0]


def _latest(stub: storage_pb2_grpc.StorageServiceStub, topic: str, partition: int) -> int:
    reply = stub.ListOffsets(
        storage_pb2.ListOffsetsRequest(
            partitions=[
                storage_pb2.ListOffsetsPartition(
                    topic=topic, partition=partition, spec=storage_pb2.OFFSET_SPEC_LATEST
                )
            ]
        ),
        timeout=RPC_TIMEOUT_S,
    )
    assert error_code(reply.partitions[0].error_code) is ErrorCode.NONE
    return reply.partitions[0].offset


def _decode(data: bytes, from_offset: int) -> list[Record]:
    return [
        record
        for position, _ in scan_batches(data)
        for record in iter_records(data, position)
        if record.offset >= from_offset
    ]


def _read_all(
    stub: storage_pb2_grpc.StorageServiceStub, topic: str, partitions: Sequence[int]
) -> dict[int, list[Record]]:
    """Every record below the high watermark of each partition, fetching all of them in
    requests small enough to take several rounds."""
    positions = dict.fromkeys(partitions, 0)
    got: dict[int, list[Record]] = {p: [] for p in partitions}
    while True:
        reply = stub.Fetch(
            storage_pb2.FetchRequest(
                max_bytes=16 * 1024,
                partitions=[
                    storage_pb2.FetchPartition(
                        topic=topic, partition=p, fetch_offset=o, partition_max_bytes=6 * 1024
                    )
                    for p, o in positions.items()
                ],
            ),
            timeout=RPC_TIMEOUT_S,
        )
        done = True
        for result in reply.partitions:
            assert error_code(result.error_code) is ErrorCode.NONE, result.error_message
            got[result.partition].extend(_decode(result.records, positions[result.partition]))
            positions[result.partition] = result.next_fetch_offset
            if result.next_fetch_offset < result.high_watermark:
                done = False
        if done:
            return got


def _records(
    partition: int, start: int, count: int
) -> list[tuple[int, bytes, bytes, list[Header]]]:
    return [
        (
            BASE_TIMESTAMP_MS + i,
            f"key-{partition}-{i}".encode(),
            f"value-{partition}-{i}".encode() * (1 + i % 7),
            [("partition", str(partition).encode()), ("seq", str(i).encode()), ("none", None)],
        )
        for i in range(start, start + count)
    ]


def _as_sent(records: Sequence[tuple[int, bytes, bytes, list[Header]]]) -> list[Sent]:
    return [(key, value, tuple(headers)) for _, key, value, headers in records]


def test_records_with_keys_and_headers_come_back_exactly_once_in_order_per_partition(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:4")
    partitions = range(4)
    batches_per_partition, records_per_batch = 12, 40
    sent: dict[int, list[Sent]] = {p: [] for p in partitions}
    with _stub(cluster) as stub:
        for round_ in range(batches_per_partition):
            entries = []
            for p in partitions:
                records = _records(p, round_ * records_per_batch, records_per_batch)
                entries.append(("orders", p, build_batch(records)))
                sent[p].extend(_as_sent(records))
            acks = (storage_pb2.ACKS_LEADER, storage_pb2.ACKS_ALL, storage_pb2.ACKS_UNSPECIFIED)
            results = _produce(stub, entries, acks[round_ % 3])
            assert [error_code(r.error_code) for r in results] == [ErrorCode.NONE] * 4
            assert {r.base_offset for r in results} == {round_ * records_per_batch}

        got = _read_all(stub, "orders", partitions)

    for p in partitions:
        assert [r.offset for r in got[p]] == list(range(len(sent[p])))
        assert [(r.key, r.value, r.headers) for r in got[p]] == sent[p]


def test_long_poll_answers_as_soon_as_data_arrives_and_waits_while_none_does(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:1")
    with _stub(cluster) as stub, ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        idle = _fetch(stub, "orders", 0, 0, max_wait_ms=IDLE_WAIT_MS, min_bytes=1)
        idle_s = time.monotonic() - started
        assert (len(idle.records), idle.next_fetch_offset) == (0, 0)
        assert idle_s >= IDLE_WAIT_MS / 1000 * 0.95

        waiting: Future[storage_pb2.FetchPartitionResponse] = pool.submit(
            _fetch, stub, "orders", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=1
        )
        time.sleep(0.3)
        assert not waiting.done()
        produced_at = time.monotonic()
        _produce(stub, [("orders", 0, build_batch(_records(0, 0, 5)))])
        woken = waiting.result(timeout=RPC_TIMEOUT_S)
        answered_s = time.monotonic() - produced_at

    assert answered_s < PROMPT_S, f"the long poll took {answered_s:.2f} s after the produce"
    assert [r.offset for r in _decode(woken.records, 0)] == list(range(5))


def test_long_poll_waits_for_min_bytes_across_appends(cluster_factory: ClusterFactory) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:1")
    small = build_batch(_records(0, 0, 1))
    with _stub(cluster) as stub, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(
            _fetch, stub, "orders", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=len(small) * 3
        )
        for _ in range(2):
            _produce(stub, [("orders", 0, small)])
        time.sleep(0.3)
        assert not waiting.done(), "answered before min_bytes were there"
        _produce(stub, [("orders", 0, small)])
        woken = waiting.result(timeout=RPC_TIMEOUT_S)

    assert woken.next_fetch_offset == 3


def test_acknowledged_records_survive_sigkill_and_restart(cluster_factory: ClusterFactory) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:2")
    acknowledged: dict[int, list[Sent]] = {0: [], 1: []}
    with _stub(cluster) as stub:
        for i in range(30):
            p = i % 2
            records = _records(p, len(acknowledged[p]), 25)
            acks = storage_pb2.ACKS_ALL if i % 3 else storage_pb2.ACKS_LEADER
            [result] = _produce(stub, [("orders", p, build_batch(records))], acks)
            assert error_code(result.error_code) is ErrorCode.NONE
            assert result.base_offset == len(acknowledged[p])
            acknowledged[p].extend(_as_sent(records))

    cluster.kill(NODE, signal.SIGKILL)
    assert cluster.wait(NODE, timeout_ms=KILL_WAIT_MS).exit_code == -signal.SIGKILL
    cluster_factory.start(cluster, NODE)

    with _stub(cluster) as stub:
        got = _read_all(stub, "orders", (0, 1))
        for p in (0, 1):
            assert [(r.key, r.value, r.headers) for r in got[p]] == acknowledged[p]
            assert _latest(stub, "orders", p) == len(acknowledged[p])
        [after] = _produce(stub, [("orders", 0, build_batch(_records(0, 999, 1)))])
    assert after.base_offset == len(acknowledged[0])


def _corrupt_crc(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    return bytes(damaged)


def _with_records_count(data: bytes, count: int) -> bytes:
    """A batch claiming ``count`` records, with its CRC fixed so only the count is wrong."""
    patched = bytearray(data)
    struct.pack_into(">i", patched, 57, count)
    struct.pack_into(">I", patched, 17, crc32c.crc32c(bytes(patched[21:])))
    return bytes(patched)


def _message_set_v1() -> bytes:
    """One old-format (magic 1) message, as a Kafka client before 0.11 writes it."""
    body = struct.pack(">bbqi", 1, 0, BASE_TIMESTAMP_MS, -1) + struct.pack(">i", 5) + b"hello"
    message = struct.pack(">I", crc32c.crc32c(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def test_malformed_oversized_and_crc_broken_batches_are_rejected_and_the_log_is_unchanged(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(
        cluster_factory, f"orders:1:max.message.bytes={TOPIC_MAX_MESSAGE_BYTES}"
    )
    good = build_batch(_records(0, 0, 10))
    oversized = build_batch([(None, None, b"x" * TOPIC_MAX_MESSAGE_BYTES, ())])
    rejected = [
        ("CRC broken", _corrupt_crc(good), ErrorCode.CORRUPT_MESSAGE, 0),
        ("truncated", good[:-7], ErrorCode.CORRUPT_MESSAGE, 0),
        ("header only", good[:40], ErrorCode.CORRUPT_MESSAGE, 0),
        ("oversized", oversized, ErrorCode.MESSAGE_TOO_LARGE, 0),
        ("second of two broken", good + _corrupt_crc(good), ErrorCode.CORRUPT_MESSAGE, 1),
        ("count mismatch", _with_records_count(good, 11), ErrorCode.INVALID_RECORD, 0),
        ("old format", _message_set_v1(), ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, 0),
        ("empty", b"", ErrorCode.INVALID_RECORD, None),
    ]
    garbage = random.Random(4).randbytes
    with _stub(cluster) as stub:
        [first] = _produce(stub, [("orders", 0, good)])
        assert error_code(first.error_code) is ErrorCode.NONE
        end_before = _latest(stub, "orders", 0)
        bytes_before = _fetch(stub, "orders", 0, 0).records

        for name, data, expected, batch_index in rejected:
            [result] = _produce(stub, [("orders", 0, data)])
            assert error_code(result.error_code) is expected, (name, result.error_message)
            assert result.error_message, name
            assert result.base_offset == -1, name
            indexes = [e.index for e in result.batch_errors]
            assert indexes == ([] if batch_index is None else [batch_index]), name
        for size in (1, 12, 61, 200, 5000):
            [result] = _produce(stub, [("orders", 0, garbage(size))])
            assert error_code(result.error_code) is not ErrorCode.NONE, size

        assert _latest(stub, "orders", 0) == end_before
        assert _fetch(stub, "orders", 0, 0).records == bytes_before
        [after] = _produce(stub, [("orders", 0, good)])
    assert (error_code(after.error_code), after.base_offset) == (ErrorCode.NONE, end_before)


def test_a_compacted_topic_refuses_keyless_records_and_its_log_is_unchanged(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(
        cluster_factory, "table:1:cleanup.policy=compact,plain:1"
    )
    keyed = build_batch([(BASE_TIMESTAMP_MS, b"k", b"v1", ())])
    one_keyless = build_batch(
        [(BASE_TIMESTAMP_MS, b"k", b"v2", ()), (BASE_TIMESTAMP_MS, None, b"v3", ())]
    )
    with _stub(cluster) as stub:
        [first] = _produce(stub, [("table", 0, keyed)])
        assert error_code(first.error_code) is ErrorCode.NONE
        bytes_before = _fetch(stub, "table", 0, 0).records

        [refused] = _produce(stub, [("table", 0, one_keyless)])
        assert error_code(refused.error_code) is ErrorCode.INVALID_RECORD
        assert "Compacted topic cannot accept message without key" in refused.error_message
        assert refused.base_offset == -1
        assert _latest(stub, "table", 0) == 1
        assert _fetch(stub, "table", 0, 0).records == bytes_before

        # A topic without compaction takes the same batch.
        [plain] = _produce(stub, [("plain", 0, one_keyless)])
        assert (error_code(plain.error_code), plain.base_offset) == (ErrorCode.NONE, 0)


def test_unknown_topic_or_partition_is_reported_everywhere(cluster_factory: ClusterFactory) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:2")
    data = build_batch(_records(0, 0, 1))
    with _stub(cluster) as stub:
        produced = _produce(stub, [("nope", 0, data), ("orders", 2, data), ("orders", 1, data)])
        fetched = _fetch(stub, "nope", 0, 0)
        listed = stub.ListOffsets(
            storage_pb2.ListOffsetsRequest(
                partitions=[
                    storage_pb2.ListOffsetsPartition(
                        topic="orders", partition=5, spec=storage_pb2.OFFSET_SPEC_EARLIEST
                    )
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        )

    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert [error_code(r.error_code) for r in produced] == [unknown, unknown, ErrorCode.NONE]
    assert error_code(fetched.error_code) is unknown
    assert error_code(listed.partitions[0].error_code) is unknown


def test_subscribe_streams_new_data_as_it_arrives(cluster_factory: ClusterFactory) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:2")
    rounds, per_round = 8, 10
    expected = {p: _as_sent(_records(p, 0, rounds * per_round)) for p in (0, 1)}
    received: dict[int, list[Sent]] = {0: [], 1: []}
    with _stub(cluster) as stub:
        [before] = _produce(stub, [("orders", 0, build_batch(_records(9, 0, 3)))])
        assert error_code(before.error_code) is ErrorCode.NONE
        stream = stub.Subscribe(
            storage_pb2.SubscribeRequest(
                max_bytes=2048,
                partitions=[
                    storage_pb2.SubscribePartition(
                        topic="orders", partition=0, start=storage_pb2.OFFSET_SPEC_OFFSET, offset=3
                    ),
                    # Partition 1 is empty: offset 0 is its end. Not OFFSET_SPEC_LATEST, which
                    # the node resolves when the request arrives, possibly after the producer
                    # thread below has already written the first round.
                    storage_pb2.SubscribePartition(
                        topic="orders", partition=1, start=storage_pb2.OFFSET_SPEC_OFFSET, offset=0
                    ),
                ],
            ),
            timeout=RPC_TIMEOUT_S * 2,
        )

        def produce_slowly() -> None:
            for i in range(rounds):
                _produce(
                    stub,
                    [
                        ("orders", p, build_batch(_records(p, i * per_round, per_round)))
                        for p in (0, 1)
                    ],
                )
                time.sleep(0.02)

        producer = threading.Thread(target=produce_slowly)
        producer.start()
        try:
            for message in stream:
                for result in message.partitions:
                    assert error_code(result.error_code) is ErrorCode.NONE, result.error_message
                    assert len(result.records) <= 2048 or len(message.partitions) == 1
                    skip = 3 if result.partition == 0 else 0
                    records = _decode(result.records, skip + len(received[result.partition]))
                    received[result.partition].extend((r.key, r.value, r.headers) for r in records)
                if all(len(received[p]) >= len(expected[p]) for p in (0, 1)):
                    break
        finally:
            stream.cancel()
            producer.join()

    assert received == expected


def test_list_offsets_finds_earliest_latest_and_by_timestamp(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(cluster_factory, "orders:1")
    with _stub(cluster) as stub:
        for second in range(3):
            records = [(BASE_TIMESTAMP_MS + second * 1000 + i, b"k", b"v", []) for i in range(5)]
            _produce(stub, [("orders", 0, build_batch(records))])

        def look_up(spec: int, timestamp_ms: int = 0) -> tuple[int, int, int]:
            reply = stub.ListOffsets(
                storage_pb2.ListOffsetsRequest(
                    partitions=[
                        storage_pb2.ListOffsetsPartition(
                            topic="orders",
                            partition=0,
                            spec=spec,  # type: ignore[arg-type]
                            timestamp_ms=timestamp_ms,
                        )
                    ]
                ),
                timeout=RPC_TIMEOUT_S,
            )
            result = reply.partitions[0]
            assert error_code(result.error_code) is ErrorCode.NONE, result.error_message
            return result.offset, result.timestamp_ms, result.leader_epoch

        by_time = storage_pb2.OFFSET_SPEC_TIMESTAMP
        assert look_up(storage_pb2.OFFSET_SPEC_EARLIEST) == (0, -1, 0)
        assert look_up(storage_pb2.OFFSET_SPEC_LATEST) == (15, -1, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS - 1) == (0, BASE_TIMESTAMP_MS, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS + 1000) == (5, BASE_TIMESTAMP_MS + 1000, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS + 1001) == (6, BASE_TIMESTAMP_MS + 1001, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS + 2004) == (14, BASE_TIMESTAMP_MS + 2004, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS + 9999) == (-1, -1, -1)

        stub.DeleteRecords(
            storage_pb2.DeleteRecordsRequest(
                partitions=[
                    storage_pb2.DeleteRecordsPartition(topic="orders", partition=0, offset=5)
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        assert look_up(storage_pb2.OFFSET_SPEC_EARLIEST) == (5, -1, 0)
        assert look_up(by_time, BASE_TIMESTAMP_MS) == (5, BASE_TIMESTAMP_MS + 1000, 0)


def _json_documents(text: str) -> list[dict[str, object]]:
    """The JSON objects the console exporters wrote, among the log's own lines."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith(("ts=", "====")))
    decoder = json.JSONDecoder()
    documents = []
    position = 0
    while (start := body.find("{", position)) != -1:
        document, position = decoder.raw_decode(body, start)
        documents.append(document)
    return documents


def _metric_points(documents: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Data points by metric name, from the last metrics export (cumulative totals)."""
    exports = [d for d in documents if "resource_metrics" in d]
    assert exports, "no metrics were exported"
    points: dict[str, list[dict[str, Any]]] = {}
    for resource in exports[-1]["resource_metrics"]:
        for scope in resource["scope_metrics"]:
            for metric in scope["metrics"]:
                points[metric["name"]] = metric["data"]["data_points"]
    return points


def test_each_request_is_a_span_in_the_callers_trace_and_bytes_are_counted(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = start_standalone_storage_node(
        cluster_factory,
        "orders:1",
        **{"telemetry.traces.exporter": "console", "telemetry.metrics.exporter": "console"},
    )
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    data = build_batch(_records(0, 0, 7))
    with _stub(cluster) as stub:
        stub.Produce(
            storage_pb2.ProduceRequest(
                partitions=[storage_pb2.PartitionProduceData(topic="orders", records=data)]
            ),
            metadata=(("traceparent", f"00-{trace_id}-{parent_id}-01"),),
            timeout=RPC_TIMEOUT_S,
        )
        fetched = _fetch(stub, "orders", 0, 0)
    assert error_code(fetched.error_code) is ErrorCode.NONE
    # Telemetry is flushed on the way out.
    assert cluster.stop(NODE)[NODE].exit_code == 0

    documents = _json_documents(cluster.spec(NODE).log_path.read_text())
    spans = {d["name"]: d for d in documents if "name" in d and "context" in d}
    produce = spans["brook.v1.StorageService/Produce"]
    assert produce["context"]["trace_id"] == f"0x{trace_id}"  # type: ignore[index]
    assert produce["parent_id"] == f"0x{parent_id}"
    assert "brook.v1.StorageService/Fetch" in spans
    points = _metric_points(documents)  # type: ignore[arg-type]
    assert [(p["attributes"], p["value"]) for p in points["brook.storage.bytes_in"]] == [
        ({"topic": "orders"}, len(data))
    ]
    assert [p["value"] for p in points["brook.storage.messages_in"]] == [7]
    assert [p["value"] for p in points["brook.storage.bytes_out"]] == [len(data)]
    methods = {p["attributes"]["rpc.method"] for p in points["brook.storage.request.duration"]}
    assert methods == {"Produce", "Fetch"}
