"""The gateway's request spans: real Kafka requests through a real gateway server (in-process,
its spans captured in memory) forwarded to a real storage node process (whose own spans go to
its log through the console exporter, so that the trace is followed across the process hop)."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.backend import Backend
from brook_gateway.cluster_view import ClusterImage
from brook_gateway.data_apis import data_handlers
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.server import KafkaServer
from brook_gateway.upstream import Upstreams
from cluster_fixture import ClusterFactory
from gateway_support import LIMITS, LOOPBACK_LISTENERS, RawClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from brook.errors import ErrorCode
from brook.launcher import LocalCluster
from brook.record import BatchBuilder
from brook.telemetry import records_root_spans
from brook.v1 import common_pb2, metadata_pb2

pytestmark = pytest.mark.integration

SCENARIO_TIMEOUT_S = 20.0
TOPIC = "traced"
STORAGE_NODE = "storage-node-1"
STORAGE_NODE_ID = 1
# A storage node in the gateway's metadata that nothing listens for: its calls fail.
DEAD_NODE_ID = 2
DEAD_TOPIC = "leader-gone"
GATEWAY_NODE_ID = 3001
CLIENT_ID = "raw-test"
PRODUCE_VERSION = 8
UPSTREAM_TIMEOUT_MS = 5_000
NODE_PRODUCE_SPAN = '"name": "brook.v1.StorageService/Produce"'
_T = TypeVar("_T")


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(asyncio.wait_for(coro, SCENARIO_TIMEOUT_S))


@pytest.fixture(scope="module")
def storage_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A controller and a storage node serving TOPIC (static: no controller involved) that
    writes its spans to its log."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp("telemetry")) / "clusters")
    failed = True
    try:
        yield factory(
            controllers=1,
            storage_nodes=1,
            group_coordinators=0,
            gateways=0,
            config_overrides={
                STORAGE_NODE: {
                    "static.topics": f"{TOPIC}:1",
                    "telemetry.traces.exporter": "console",
                }
            },
        )
        failed = False
    finally:
        factory.close(keep_files=failed)


def _node(node_id: int, role: int, listener: str, port: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(
            node_id=node_id,
            role=role,  # type: ignore[arg-type]
            endpoints=[common_pb2.Endpoint(listener=listener, host="127.0.0.1", port=port)],
        )
    )


def _partition(topic: str, leader: int) -> list[metadata_pb2.MetadataRecord]:
    topic_id = topic.encode().ljust(16, b"-")
    return [
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name=topic, topic_id=topic_id)),
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                topic_id=topic_id,
                topic=topic,
                partition=0,
                replicas=[leader],
                isr=[leader],
                leader=leader,
            )
        ),
    ]


def _image(storage_port: int, dead_port: int) -> ClusterImage:
    image = ClusterImage()
    image.apply(
        True,
        1,
        [
            _node(GATEWAY_NODE_ID, common_pb2.NODE_ROLE_GATEWAY, "PLAINTEXT", 9092),
            _node(STORAGE_NODE_ID, common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", storage_port),
            _node(DEAD_NODE_ID, common_pb2.NODE_ROLE_STORAGE_NODE, "GRPC", dead_port),
            *_partition(TOPIC, STORAGE_NODE_ID),
            *_partition(DEAD_TOPIC, DEAD_NODE_ID),
        ],
    )
    return image


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class TracedGateway:
    """A gateway's Kafka server and upstreams, both reporting to `provider`."""

    def __init__(self, cluster: LocalCluster, provider: TracerProvider) -> None:
        storage_port = cluster.spec(STORAGE_NODE).ports["GRPC"]
        self.upstreams = Upstreams(
            message_bytes_max=1 << 20,
            request_timeout_ms=UPSTREAM_TIMEOUT_MS,
            tracer_provider=provider,
        )
        backend = Backend(
            node_id=GATEWAY_NODE_ID,
            image=_image(storage_port, _closed_port()),
            upstreams=self.upstreams,
            controllers=(),
        )
        dispatcher = Dispatcher()
        dispatcher.register(api_versions_handler(dispatcher))
        for handler in data_handlers(backend):
            dispatcher.register(handler)
        self.server = KafkaServer(dispatcher, LIMITS, LOOPBACK_LISTENERS, tracer_provider=provider)

    async def __aenter__(self) -> TracedGateway:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()
        await self.upstreams.close()


def _provider(**settings: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(**settings)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _produce_body(topic: str, value: bytes) -> dict[str, Any]:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), b"key", value)
    return {
        "acks": 1,
        "timeout_ms": UPSTREAM_TIMEOUT_MS,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": builder.build()}]}
        ],
    }


async def _exchange(
    client: RawClient, api_key: int, version: int, correlation_id: int, body: dict[str, Any]
) -> tuple[int, int, dict[str, Any]]:
    """(request bytes on the wire, response bytes on the wire, response body)."""
    request = encode_request(api_key, version, correlation_id, CLIENT_ID, body)
    client.writer.write(request)
    await client.writer.drain()
    frame = await client.read_frame()
    answered_id, response = decode_response(api_key, version, frame)
    assert answered_id == correlation_id
    return len(request), 4 + len(frame), response


def _produce_once(
    cluster: LocalCluster, provider: TracerProvider, correlation_id: int, value: bytes
) -> tuple[int, int, dict[str, Any]]:
    """One Produce of `value` to TOPIC through a fresh traced gateway: see `_exchange`."""

    async def scenario() -> tuple[int, int, dict[str, Any]]:
        async with TracedGateway(cluster, provider) as gateway:
            client = await RawClient.connect(gateway.server.port)
            try:
                body = _produce_body(TOPIC, value)
                return await _exchange(
                    client, ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id, body
                )
            finally:
                await client.close()

    return run(scenario())


def _partition_error(response: dict[str, Any]) -> int:
    (topic,) = response["responses"]
    (partition,) = topic["partition_responses"]
    code: int = partition["error_code"]
    return code


def _node_spans(cluster: LocalCluster) -> list[str]:
    """The spans the storage node has written to its log (JSON text, one per entry). The node
    is stopped to flush them (its exporter batches for seconds) and started again."""
    spec = cluster.spec(STORAGE_NODE)
    cluster.stop(STORAGE_NODE)
    try:
        log = spec.log_path.read_text(errors="replace")
    finally:
        cluster.start(STORAGE_NODE)
    return [entry for entry in re.split(r"\n(?=\{)", log) if entry.startswith("{")]


def _only(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    parent_id = parent.context.span_id
    return [span for span in spans if span.parent is not None and span.parent.span_id == parent_id]


def test_produce_is_one_server_span_with_the_storage_call_as_child_continued_by_the_node(
    storage_cluster: LocalCluster,
) -> None:
    provider, exporter = _provider()

    request_bytes, response_bytes, response = _produce_once(storage_cluster, provider, 41, b"v")
    assert _partition_error(response) == ErrorCode.NONE
    spans = list(exporter.get_finished_spans())
    request = _only(spans, "kafka.Produce")
    assert request.kind is trace.SpanKind.SERVER
    assert request.parent is None
    attributes = dict(request.attributes or {})
    assert str(attributes.pop("client.address")).startswith("127.0.0.1:")
    assert attributes == {
        "kafka.api_key": ApiKey.PRODUCE,
        "kafka.api_version": PRODUCE_VERSION,
        "kafka.correlation_id": 41,
        "kafka.client_id": CLIENT_ID,
        "kafka.error_code": ErrorCode.NONE,
        "kafka.request_bytes": request_bytes,
        "kafka.response_bytes": response_bytes,
    }
    (call,) = _children(spans, request)
    assert call.name == "brook.v1.StorageService/Produce"
    assert call.kind is trace.SpanKind.CLIENT
    assert call.context.trace_id == request.context.trace_id
    assert call.attributes is not None
    assert call.attributes["rpc.system"] == "grpc"
    assert call.attributes["rpc.service"] == "brook.v1.StorageService"
    assert call.attributes["rpc.method"] == "Produce"
    assert call.status.status_code is trace.StatusCode.UNSET

    # The storage node continued the trace: its server span's parent is the gateway's call.
    trace_id = f"0x{request.context.trace_id:032x}"
    (node_span,) = [span for span in _node_spans(storage_cluster) if trace_id in span]
    assert NODE_PRODUCE_SPAN in node_span
    assert f'"parent_id": "0x{call.context.span_id:016x}"' in node_span


def test_errors_are_on_the_request_span_and_a_failed_upstream_call_is_an_error_span(
    storage_cluster: LocalCluster,
) -> None:
    provider, exporter = _provider()

    async def scenario() -> int:
        async with TracedGateway(storage_cluster, provider) as gateway:
            client = await RawClient.connect(gateway.server.port)
            try:
                _, _, unknown = await _exchange(
                    client, ApiKey.PRODUCE, PRODUCE_VERSION, 1, _produce_body("nope", b"v")
                )
                _, _, dead = await _exchange(
                    client, ApiKey.PRODUCE, PRODUCE_VERSION, 2, _produce_body(DEAD_TOPIC, b"v")
                )
                await _exchange(client, ApiKey.METADATA, 5, 3, {"topics": None})
            finally:
                await client.close()
        assert _partition_error(unknown) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return _partition_error(dead)

    answered_when_leader_gone = run(scenario())
    assert answered_when_leader_gone != ErrorCode.NONE
    spans = list(exporter.get_finished_spans())
    by_correlation = {
        int(str((span.attributes or {})["kafka.correlation_id"])): span
        for span in spans
        if span.kind is trace.SpanKind.SERVER
    }
    assert sorted(by_correlation) == [1, 2, 3]

    unknown_topic = by_correlation[1]
    assert unknown_topic.name == "kafka.Produce"
    assert unknown_topic.attributes is not None
    assert unknown_topic.attributes["kafka.error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _children(spans, unknown_topic) == []  # routed nowhere: no call was made

    leader_gone = by_correlation[2]
    assert leader_gone.attributes is not None
    (failed_call,) = _children(spans, leader_gone)
    assert failed_call.status.status_code is trace.StatusCode.ERROR
    assert failed_call.attributes is not None
    assert failed_call.attributes["rpc.grpc.status_code"] == 14  # UNAVAILABLE
    # The call's own failure (no answer) and what the client was told (retriable, so that it
    # refreshes its metadata) are both on the trace.
    assert failed_call.attributes["kafka.error_code"] != ErrorCode.NONE
    assert leader_gone.attributes["kafka.error_code"] == answered_when_leader_gone

    metadata = by_correlation[3]
    assert metadata.name == "kafka.Metadata"
    assert metadata.attributes is not None
    assert metadata.attributes["kafka.api_version"] == 5
    assert metadata.attributes["kafka.error_code"] == ErrorCode.NONE
    assert _children(spans, metadata) == []


def test_a_malformed_request_ends_its_span_as_an_error() -> None:
    provider, exporter = _provider()

    async def scenario() -> None:
        server = KafkaServer(
            _api_versions_only(), LIMITS, LOOPBACK_LISTENERS, tracer_provider=provider
        )
        await server.start()
        try:
            client = await RawClient.connect(server.port)
            # An ApiVersions v3 header (v2: client id, no tagged fields) and no body at all.
            client_id = CLIENT_ID.encode()
            frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 9, len(client_id))
            frame += client_id + b"\x00"
            client.writer.write(len(frame).to_bytes(4, "big") + frame)
            await client.writer.drain()
            assert await client.closed_by_server()
            await client.close()
        finally:
            await server.stop()

    run(scenario())
    span = _only(list(exporter.get_finished_spans()), "kafka.ApiVersions")
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["kafka.correlation_id"] == 9
    assert "kafka.response_bytes" not in span.attributes


def _api_versions_only() -> Dispatcher:
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    return dispatcher


def test_with_spans_off_requests_make_no_span_and_send_no_trace_context(
    storage_cluster: LocalCluster,
) -> None:
    provider, exporter = _provider(sampler=ALWAYS_OFF)
    assert not records_root_spans(provider)
    assert records_root_spans(_provider()[0])  # the SDK's default sampler records roots
    before = _node_spans(storage_cluster)

    _, _, response = _produce_once(storage_cluster, provider, 5, b"off")
    assert _partition_error(response) == ErrorCode.NONE
    assert exporter.get_finished_spans() == ()
    # The node records its own span as a root: the gateway passed on no (unsampled) context,
    # which would have made the node's parent-based sampler drop it.
    new = [span for span in _node_spans(storage_cluster)[len(before) :]]
    (node_span,) = [span for span in new if NODE_PRODUCE_SPAN in span]
    assert '"parent_id": null' in node_span
