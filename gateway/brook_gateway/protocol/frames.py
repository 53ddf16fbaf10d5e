"""Kafka framing and headers: every request and response is an int32 size followed by that many
bytes of header and body.

The request header version follows from the request: v2 (with tagged fields) when the API
version is flexible, else v1. The response header is v1 when the response is flexible, else
v0, except ApiVersions, whose response header is always v0 so that a client can read the
answer whatever version it asked for (KIP-511).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from brook_gateway.protocol.codec import Message, MessageCodec, codec_for
from brook_gateway.protocol.kafka_messages import (
    REQUEST_HEADER,
    REQUESTS,
    RESPONSE_HEADER,
    RESPONSES,
    ApiKey,
)
from brook_gateway.protocol.primitives import ProtocolError, Reader, Writer
from brook_gateway.protocol.produce_fast import read_produce_request, write_produce_response
from brook_gateway.protocol.schema import in_range

__all__ = [
    "FRAME_SIZE_BYTES",
    "REQUEST_PREFIX_BYTES",
    "RequestHeader",
    "UnknownApiError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "peek_request",
]

FRAME_SIZE_BYTES: Final = 4
# api_key int16, api_version int16, correlation_id int32: the same in every header version, so
# a server can always tell what was asked and whom to answer before parsing anything else.
REQUEST_PREFIX_BYTES: Final = 8


class UnknownApiError(ProtocolError):
    """An API key, or a version of it, that has no schema here."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_request(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without its size prefix)."""
    if len(frame) < REQUEST_PREFIX_BYTES:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    r = Reader(frame)
    return r.int16(), r.int16(), r.int32()


def _request_codec(api_key: int, api_version: int) -> tuple[int, MessageCodec]:
    """(request header version, body codec)."""
    spec = REQUESTS.get(api_key)
    if spec is None:
        raise UnknownApiError(f"unknown API key {api_key}")
    if not in_range(api_version, spec.valid):
        raise UnknownApiError(f"{spec.name} has no version {api_version}")
    body = codec_for(spec, api_version)
    return (2 if body.flexible else 1), body


def decode_request(frame: bytes) -> tuple[RequestHeader, Message]:
    """The header and body of a request frame. Raises UnknownApiError for an API or version
    without a schema and ProtocolError for bytes that do not follow it.

    Bytes after the body are ignored, as Kafka's broker ignores them (it reads what the schema
    says and no more). librdkafka relies on it: its flexible Metadata request for all topics
    (v9+) leaves a 4-byte array-count placeholder where the 1-byte compact count belongs, so 3
    bytes trail the body (librdkafka 2.16, `rd_kafka_MetadataRequest0`).

    Produce v3-v10 is read by its own fast path (produce_fast.py) when it can be; it gives
    what the schema gives, and leaves every other frame to the schema."""
    api_key, api_version, _ = peek_request(frame)
    if api_key == ApiKey.PRODUCE:
        fast = read_produce_request(frame)
        if fast is not None:
            correlation_id, client_id, body = fast
            return RequestHeader(api_key, api_version, correlation_id, client_id), body
    header_version, codec = _request_codec(api_key, api_version)
    r = Reader(frame)
    header = codec_for(REQUEST_HEADER, header_version).read(r)
    body = codec.read(r)
    return (
        RequestHeader(api_key, api_version, header["correlation_id"], header["client_id"]),
        body,
    )


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Message
) -> bytes:
    """A complete request frame, size prefix included (what a client sends)."""
    header_version, codec = _request_codec(api_key, api_version)
    w = Writer()
    w.int32(0)
    header = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": client_id,
    }
    codec_for(REQUEST_HEADER, header_version).write(w, header)
    codec.write(w, body)
    return bytes(_with_size(w.out))


def _response_header_version(api_key: int, flexible: bool) -> int:
    return 1 if flexible and api_key != ApiKey.API_VERSIONS else 0


def encode_response(
    api_key: int, api_version: int, correlation_id: int, body: Message
) -> bytearray:
    """A complete response frame, size prefix included (Produce's by its own fast path when
    it can, produce_fast.py)."""
    if api_key == ApiKey.PRODUCE:
        fast = write_produce_response(api_version, correlation_id, body)
        if fast is not None:
            return fast
    spec = RESPONSES.get(api_key)
    if spec is None:
        raise UnknownApiError(f"unknown API key {api_key}")
    codec = codec_for(spec, api_version)
    w = Writer()
    w.int32(0)
    header_version = _response_header_version(api_key, codec.flexible)
    codec_for(RESPONSE_HEADER, header_version).write(w, {"correlation_id": correlation_id})
    codec.write(w, body)
    return _with_size(w.out)


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Message]:
    """(correlation_id, body) of a response frame without its size prefix (what a client
    reads)."""
    spec = RESPONSES.get(api_key)
    if spec is None:
        raise UnknownApiError(f"unknown API key {api_key}")
    codec = codec_for(spec, api_version)
    r = Reader(frame)
    header_version = _response_header_version(api_key, codec.flexible)
    header = codec_for(RESPONSE_HEADER, header_version).read(r)
    body = codec.read(r)
    if r.remaining:
        raise ProtocolError(f"{r.remaining} bytes left over after the response body")
    return header["correlation_id"], body


def _with_size(out: bytearray) -> bytearray:
    """The frame with its size filled in, as built: not copied into a bytes object, as a
    Fetch response's records would be (a frame is written once and dropped)."""
    out[0:FRAME_SIZE_BYTES] = (len(out) - FRAME_SIZE_BYTES).to_bytes(FRAME_SIZE_BYTES, "big")
    return out
