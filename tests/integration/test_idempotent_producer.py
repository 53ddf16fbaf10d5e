"""The idempotent producer against real clusters (issue #8, done-when).

- Duplicates injected two ways, every record read back once: a batch sent twice because its
  acknowledgement came back later than request.timeout.ms (the retry carries the same
  sequence), and a response lost because the connection died after the append. Both go
  through a real TCP proxy between the SDK and a single storage node whose advertised listener
  is the proxy, so every byte the producer exchanges with the node crosses it.
- The fault test of #6 (kill -9 of each partition's leader in turn during acks=all
  production) with an idempotent producer that retries: zero duplicates and zero losses among
  acknowledged records.
- A fenced producer: a second instance bumps the epoch of the first one's producer id; the
  first one's later sends fail with ProducerFencedError and none of them reaches the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from cluster_fixture import ClusterFactory, wait_until
from test_replication_faults import (
    PARTITIONS,
    _assert_nothing_invented_or_reordered,
    _kill_leaders_in_turn,
)

from brook.client import Producer
from brook.client.admin import Admin, NewTopic
from brook.client.errors import ProducerFencedError
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.record import iter_records, scan_batches
from brook.record.records import encode_batch, encode_record_tail, frame_record
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

TOPIC = "exactly-once"
NODE = "storage-node-1"
RPC_TIMEOUT_S = 10.0
WAIT_TIMEOUT_S = 30.0
RESULT_TIMEOUT_S = 30.0
PROXY_STOP_TIMEOUT_S = 5.0
FETCH_BYTES_MAX = 1 << 20
# The producer's request timeout in the delayed-acknowledgement test: the proxy holds the
# node's answers back past it.
REQUEST_TIMEOUT_MS = 1000


class TcpProxy:
    """A TCP proxy on 127.0.0.1 in a thread of its own, between gRPC clients and one node.

    It knows nothing of HTTP/2: it moves bytes. ``hold_answers`` stops passing the node's
    bytes to the connections open at that moment (they are kept, or dropped with
    ``drop=True``); ``release`` passes the kept ones on; ``cut`` closes those connections
    both ways. Client bytes always pass, and are recorded so that a test can count what the
    client sent.
    """

    def __init__(self) -> None:
        self.target = ""
        self.port = 0
        self.accepted = 0
        self.sent_by_clients = bytearray()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._connections: list[_Connection] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(RPC_TIMEOUT_S):
            raise RuntimeError("the proxy did not start")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = self.target.rsplit(":", 1)
        try:
            node_reader, node_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        connection = _Connection(writer, node_writer)
        self._connections.append(connection)
        await asyncio.gather(
            self._pipe(reader, node_writer, connection, from_client=True),
            self._pipe(node_reader, writer, connection, from_client=False),
            return_exceptions=True,
        )
        connection.close()
        self._connections.remove(connection)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        connection: _Connection,
        *,
        from_client: bool,
    ) -> None:
        while data := await source.read(65536):
            if from_client:
                self.sent_by_clients += data
            elif connection.holding:
                if not connection.drop:
                    connection.held += data
                continue
            sink.write(data)
            await sink.drain()
        connection.close()

    def _call(self, function: object) -> None:
        async def run() -> None:
            assert callable(function)
            function()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(RPC_TIMEOUT_S)

    def hold_answers(self, *, drop: bool = False) -> None:
        def hold() -> None:
            for connection in self._connections:
                connection.holding = True
                connection.drop = drop

        self._call(hold)

    def release(self) -> None:
        def release() -> None:
            for connection in self._connections:
                connection.holding = False
                connection.to_client.write(bytes(connection.held))
                connection.held.clear()

        self._call(release)

    def cut(self) -> None:
        def cut() -> None:
            for connection in self._connections:
                connection.close()

        self._call(cut)

    def stop(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            for connection in list(self._connections):
                connection.close()
            await self._server.wait_closed()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(PROXY_STOP_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(PROXY_STOP_TIMEOUT_S)


class _Connection:
    def __init__(self, to_client: asyncio.StreamWriter, to_node: asyncio.StreamWriter) -> None:
        self.to_client = to_client
        self.to_node = to_node
        self.holding = False
        self.drop = False
        self.held = bytearray()

    def close(self) -> None:
        self.to_client.close()
        self.to_node.close()


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    running = TcpProxy()
    try:
        yield running
    finally:
        running.stop()


def _proxied_node(cluster_factory: ClusterFactory, proxy: TcpProxy) -> LocalCluster:
    """One controller and one storage node that advertises the proxy as its address, so the
    SDK (which connects where metadata says) reaches the node only through the proxy."""
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        config_overrides={NODE: {"advertised.listeners": f"GRPC://{proxy.address}"}},
        start=False,
    )
    proxy.target = cluster.grpc_address(NODE)
    cluster_factory.start(cluster)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, 1, 1)]) == {TOPIC: None}
        wait_until(
            lambda: admin.describe_topics([TOPIC])[TOPIC].partitions[0].leader is not None,
            "a leader for the topic",
            WAIT_TIMEOUT_S,
        )
    return cluster


def _fetch(address: str, topic: str, partition: int) -> tuple[int, bytes]:
    """(high watermark, raw batches from offset 0 up to it) straight from the node, bypassing
    the proxy."""
    chunks: list[bytes] = []
    offset = 0
    with grpc.insecure_channel(address) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
        while True:
            response = stub.Fetch(
                storage_pb2.FetchRequest(
                    max_wait_ms=0,
                    min_bytes=0,
                    max_bytes=FETCH_BYTES_MAX,
                    partitions=[
                        storage_pb2.FetchPartition(
                            topic=topic,
                            partition=partition,
                            fetch_offset=offset,
                            partition_max_bytes=FETCH_BYTES_MAX,
                        )
                    ],
                ),
                timeout=RPC_TIMEOUT_S,
            )
            [answer] = response.partitions
            assert error_code(answer.error_code) is ErrorCode.NONE, answer.error_message
            batches = list(scan_batches(answer.records))
            if not batches or offset >= answer.high_watermark:
                return answer.high_watermark, b"".join(chunks)
            chunks.append(bytes(answer.records))
            offset = batches[-1][1].next_offset


def _log(address: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of the partition, read from the node's log."""
    _, records = _fetch(address, topic, partition)
    return [
        (r.offset, r.value)
        for position, _ in scan_batches(records)
        for r in iter_records(records, position)
    ]


def _producer(bootstrap: str, **settings: int) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 200,
        },
        **settings,
    )


def test_a_batch_resent_after_a_late_acknowledgement_is_written_once(
    cluster_factory: ClusterFactory, proxy: TcpProxy
) -> None:
    cluster = _proxied_node(cluster_factory, proxy)
    node = cluster.grpc_address(NODE)
    marker = b"resent-batch-marker"
    with _producer(
        proxy.address, request_timeout_ms=REQUEST_TIMEOUT_MS, delivery_timeout_ms=20_000
    ) as producer:
        assert producer.send(TOPIC, b"first").result(RESULT_TIMEOUT_S).offset == 0
        proxy.hold_answers()
        future = producer.send(TOPIC, marker)
        # The first attempt times out at request.timeout.ms while its answer is held; the
        # retry goes out on the same connection with the same sequence. Then the node's
        # answers (to both) pass.
        wait_until(
            lambda: proxy.sent_by_clients.count(marker) >= 2,
            "the producer to send the batch a second time",
            WAIT_TIMEOUT_S,
        )
        proxy.release()
        metadata = future.result(RESULT_TIMEOUT_S)
        assert producer.send(TOPIC, b"third").result(RESULT_TIMEOUT_S).offset == 2

    assert metadata.offset == 1
    assert _log(node, TOPIC) == [(0, b"first"), (1, marker), (2, b"third")]


def test_a_response_lost_with_its_connection_after_the_append_is_not_written_twice(
    cluster_factory: ClusterFactory, proxy: TcpProxy
) -> None:
    cluster = _proxied_node(cluster_factory, proxy)
    node = cluster.grpc_address(NODE)
    marker = b"lost-answer-marker"
    with _producer(
        proxy.address, request_timeout_ms=10_000, delivery_timeout_ms=30_000
    ) as producer:
        assert producer.send(TOPIC, b"first").result(RESULT_TIMEOUT_S).offset == 0
        connections_before = proxy.accepted
        proxy.hold_answers(drop=True)
        future = producer.send(TOPIC, marker)
        wait_until(lambda: _fetch(node, TOPIC, 0)[0] == 2, "the node to append", WAIT_TIMEOUT_S)
        assert not future.done(), "the answer was dropped: the producer cannot know yet"
        proxy.cut()
        metadata = future.result(RESULT_TIMEOUT_S)
        assert producer.send(TOPIC, b"third").result(RESULT_TIMEOUT_S).offset == 2

    assert proxy.accepted > connections_before, "the retry went over a new connection"
    assert proxy.sent_by_clients.count(marker) >= 2, "the batch was sent twice"
    assert metadata.offset == 1, "the retry was answered with the original offset"
    assert _log(node, TOPIC) == [(0, b"first"), (1, marker), (2, b"third")]


def test_idempotent_producer_loses_and_duplicates_nothing_while_leaders_are_killed(
    cluster_factory: ClusterFactory,
) -> None:
    outcome = _kill_leaders_in_turn(cluster_factory, "all", idempotent=True)

    _assert_nothing_invented_or_reordered(outcome)
    for p in range(PARTITIONS):
        found = outcome.found[p]
        duplicates = sorted({n for n in found if found.count(n) > 1})
        assert not duplicates, f"partition {p} holds duplicates {duplicates[:20]}"
        missing = sorted(set(outcome.acked[p]) - set(found))
        assert not missing, f"partition {p} lost acknowledged records {missing[:20]}"


def _record_batch(value: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    timestamp = int(time.time() * 1000)
    record = frame_record(encode_record_tail(None, value, None), 0, 0)
    return encode_batch(
        record,
        1,
        timestamp,
        timestamp,
        0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def test_a_fenced_producer_writes_nothing_after_another_instance_bumps_its_epoch(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
    node = cluster.grpc_address(cluster.names(Role.STORAGE_NODE)[0])
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, 1, 1)]) == {TOPIC: None}
    with _producer(node, request_timeout_ms=10_000, delivery_timeout_ms=30_000) as first:
        assert first.send(TOPIC, b"before fencing").result(RESULT_TIMEOUT_S).offset == 0
        _, records = _fetch(node, TOPIC, 0)
        [(_, header)] = list(scan_batches(records))
        assert header.producer_id >= 0, "the idempotent producer stamped its id"

        # A second instance of the same producer takes the id over (KIP-360 epoch bump).
        with grpc.insecure_channel(node) as channel:
            stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
            bumped = stub.InitProducerId(
                storage_pb2.InitProducerIdRequest(
                    producer_id=header.producer_id, producer_epoch=header.producer_epoch
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert error_code(bumped.error_code) is ErrorCode.NONE, bumped.error_message
            assert bumped.producer_id == header.producer_id
            assert bumped.producer_epoch > header.producer_epoch
            answer = stub.Produce(
                storage_pb2.ProduceRequest(
                    acks=storage_pb2.ACKS_ALL,
                    partitions=[
                        storage_pb2.PartitionProduceData(
                            topic=TOPIC,
                            partition=0,
                            records=_record_batch(
                                b"the new instance", bumped.producer_id, bumped.producer_epoch, 0
                            ),
                        )
                    ],
                ),
                timeout=RPC_TIMEOUT_S,
            )
            assert error_code(answer.partitions[0].error_code) is ErrorCode.NONE

        rejected = first.send(TOPIC, b"after fencing")
        with pytest.raises(ProducerFencedError):
            rejected.result(RESULT_TIMEOUT_S)
        with pytest.raises(ProducerFencedError):
            first.send(TOPIC, b"later still")

    assert _log(node, TOPIC) == [(0, b"before fencing"), (1, b"the new instance")]


SMALL_TOPIC = "small-batches"
SMALL_TOPIC_MESSAGE_BYTES_MAX = 16384


def test_a_grown_batch_refused_by_a_topics_small_max_message_bytes_is_split_and_delivered(
    cluster_factory: ClusterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = cluster_factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
    node = cluster.grpc_address(cluster.names(Role.STORAGE_NODE)[0])
    with Admin(cluster.controller_bootstrap_servers) as admin:
        topic = NewTopic(
            SMALL_TOPIC, 1, 1, configs={"max.message.bytes": str(SMALL_TOPIC_MESSAGE_BYTES_MAX)}
        )
        assert admin.create_topics([topic]) == {SMALL_TOPIC: None}
        wait_until(
            lambda: (
                admin.describe_topics([SMALL_TOPIC])[SMALL_TOPIC].partitions[0].leader is not None
            ),
            "a leader for the topic",
            WAIT_TIMEOUT_S,
        )
    sent = [b"split-%05d-" % i + b"s" * 50 for i in range(3000)]
    caplog.set_level("INFO", logger="brook.client.sender")
    # The long linger keeps the first batch waiting while ~190 KB of records arrive: it grows
    # to 128 KiB, far past the topic's limit.
    settings = {"linger.ms": 500, "batch.size": 4096, "delivery.timeout.ms": 60_000}
    with Producer({"bootstrap.servers": node, **settings}) as producer:
        futures = [producer.send(SMALL_TOPIC, value) for value in sent]
        offsets = [future.result(RESULT_TIMEOUT_S).offset for future in futures]

    assert any("MESSAGE_TOO_LARGE" in r.getMessage() for r in caplog.records), (
        "the node refused a grown batch"
    )
    assert offsets == list(range(len(sent)))
    assert _log(node, SMALL_TOPIC) == list(enumerate(sent))
