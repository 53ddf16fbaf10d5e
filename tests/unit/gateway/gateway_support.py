"""A Kafka-protocol server on a free loopback port, a raw client for it, and the cross-check of
the codec against kafka-python's independent protocol classes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from brook_gateway.api_versions import api_versions_handler
from brook_gateway.apis import Dispatcher
from brook_gateway.protocol.codec import Message, codec_for
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.schema import MessageSpec
from brook_gateway.sasl import CredentialLookup
from brook_gateway.server import KafkaListener, KafkaServer, ServerLimits

READ_TIMEOUT_S = 5.0
LIMITS = ServerLimits(
    request_bytes_max=64 * 1024,
    connections_max=20,
    in_flight_per_connection_max=8,
    idle_timeout_ms=10_000,
    request_timeout_ms=5_000,
)
LOOPBACK_LISTENERS = (KafkaListener("PLAINTEXT", "127.0.0.1", 0),)
"""One PLAINTEXT listener on a free loopback port."""


def dispatcher_with_api_versions() -> Dispatcher:
    dispatcher = Dispatcher()
    dispatcher.register(api_versions_handler(dispatcher))
    return dispatcher


@asynccontextmanager
async def running_server(
    dispatcher: Dispatcher | None = None,
    listeners: Sequence[KafkaListener] = LOOPBACK_LISTENERS,
    credentials: CredentialLookup | None = None,
    **limits: Any,
) -> AsyncIterator[KafkaServer]:
    settings = {name: getattr(LIMITS, name) for name in LIMITS.__slots__}
    settings.update(limits)
    server = KafkaServer(
        dispatcher or dispatcher_with_api_versions(),
        ServerLimits(**settings),
        listeners,
        credentials=credentials,
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class RawClient:
    """Writes frames and reads response frames, nothing more."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, api_key: int, version: int, correlation_id: int, body: Message) -> None:
        self.writer.write(encode_request(api_key, version, correlation_id, "raw-test", body))
        await self.writer.drain()

    async def read_frame(self) -> bytes:
        async with asyncio.timeout(READ_TIMEOUT_S):
            size = int.from_bytes(await self.reader.readexactly(4), "big")
            return await self.reader.readexactly(size)

    async def receive(self, api_key: int, version: int) -> tuple[int, Message]:
        return decode_response(api_key, version, await self.read_frame())

    async def closed_by_server(self) -> bool:
        """True once the server closes the connection (EOF), False if it sends anything."""
        async with asyncio.timeout(READ_TIMEOUT_S):
            return await self.reader.read(1) == b""

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


def _carried(decoded: Any, sent: Any, path: str) -> None:
    """Every field kafka-python decoded carries the value sent (bytes come back as str, and
    an authorized-operations bit set as the list of its bits)."""
    if isinstance(decoded, list) and isinstance(sent, int):
        decoded = sum(1 << bit for bit in decoded)
    if isinstance(decoded, dict):
        for name, value in decoded.items():
            _carried(value, sent[name], f"{path}.{name}")
    elif isinstance(decoded, list):
        assert len(decoded) == len(sent), path
        for i, (d, s) in enumerate(zip(decoded, sent, strict=True)):
            _carried(d, s, f"{path}[{i}]")
    elif (
        isinstance(sent, bytes) and len(sent) == 16 and (decoded is None or _is_uuid_text(decoded))
    ):
        # A uuid field (a topic id): kafka-python shows it as text, the zero uuid as None.
        assert decoded == (str(uuid.UUID(bytes=sent)) if any(sent) else None), path
    else:
        expected = sent.decode() if isinstance(sent, bytes) else sent
        assert decoded == expected, path


def _is_uuid_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def assert_same_bytes_as_kafka_python(
    kafka_class: Any, spec: MessageSpec, version: int, sample: Message
) -> None:
    """Our encoding of `sample` decodes in kafka-python to the values sent, and kafka-python
    writes what it read as the same bytes: no field missed or misplaced."""
    ours = codec_for(spec, version).encode(sample)
    theirs = kafka_class.decode(ours, version=version)
    fields = theirs.to_dict()
    _carried(fields, sample, kafka_class.__name__)
    again = kafka_class(version=version, **{name: getattr(theirs, name) for name in fields})
    assert bytes(again.encode(version=version)) == ours
