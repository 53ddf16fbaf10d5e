"""The fast Produce reader and writer (protocol/produce_fast.py) against the schema's generic
codec: for every frame, the same header and body, or None (then the generic decoder reads it);
for every answer, the same frame, or None (then the generic encoder writes it)."""

from __future__ import annotations

from typing import Any

from brook_gateway.protocol.codec import UNKNOWN_TAGS, codec_for
from brook_gateway.protocol.frames import _request_codec, encode_request
from brook_gateway.protocol.kafka_messages import REQUEST_HEADER, RESPONSE_HEADER, RESPONSES, ApiKey
from brook_gateway.protocol.primitives import ProtocolError, Reader, Writer
from brook_gateway.protocol.produce_fast import (
    PRODUCE_FAST_VERSIONS,
    read_produce_request,
    write_produce_response,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_text = st.text(max_size=20)
_records = st.none() | st.binary(max_size=300)
_bodies = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | _text,
        "acks": st.integers(-(2**15), 2**15 - 1),
        "timeout_ms": st.integers(-(2**31), 2**31 - 1),
        "topic_data": st.lists(
            st.fixed_dictionaries(
                {
                    "name": _text,
                    "partition_data": st.lists(
                        st.fixed_dictionaries(
                            {"index": st.integers(-(2**31), 2**31 - 1), "records": _records}
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    }
)


def _generic(frame: bytes) -> tuple[int, str | None, dict[str, Any]] | None:
    """What the schema's decoder makes of the frame; None where it refuses it."""
    version = int.from_bytes(frame[2:4], "big", signed=True)
    try:
        header_version, codec = _request_codec(ApiKey.PRODUCE, version)
        r = Reader(frame)
        header = codec_for(REQUEST_HEADER, header_version).read(r)
        return header["correlation_id"], header["client_id"], codec.read(r)
    except ProtocolError:
        return None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(list(PRODUCE_FAST_VERSIONS)),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    client_id=st.none() | _text,
    body=_bodies,
)
def test_reads_every_produce_request_as_the_schema_does(
    version: int, correlation_id: int, client_id: str | None, body: dict[str, Any]
) -> None:
    frame = encode_request(ApiKey.PRODUCE, version, correlation_id, client_id, body)[4:]
    fast = read_produce_request(frame)
    assert fast is not None
    assert fast == _generic(frame)
    assert fast[2] == body


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(list(PRODUCE_FAST_VERSIONS)),
    body=_bodies,
    cut=st.integers(0, 400),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
)
def test_a_damaged_frame_is_read_as_the_schema_reads_it_or_left_to_it(
    version: int, body: dict[str, Any], cut: int, flips: list[tuple[int, int]]
) -> None:
    frame = bytearray(encode_request(ApiKey.PRODUCE, version, 7, "c", body)[4:])
    for at, value in flips:
        if 4 <= at < len(frame):  # keep the API key and version: this is about the body
            frame[at] = value
    damaged = bytes(frame[: max(len(frame) - cut, 8)])
    fast = read_produce_request(damaged)
    if fast is not None:
        generic = _generic(damaged)
        assert generic is not None and UNKNOWN_TAGS not in generic[2]
        assert fast == generic


def test_tagged_fields_are_left_to_the_schema() -> None:
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1, "topic_data": []}
    frame = bytearray(encode_request(ApiKey.PRODUCE, 9, 7, "c", body)[4:])
    assert frame[-1] == 0  # the body's empty tagged-field section
    frame[-1:] = bytes([1, 5, 1, 0xAB])  # one unknown tag (5) of one byte
    assert read_produce_request(bytes(frame)) is None
    generic = _generic(bytes(frame))
    assert generic is not None and generic[2][UNKNOWN_TAGS] == [(5, b"\xab")]


def _generic_response(version: int, correlation_id: int, body: dict[str, Any]) -> bytes | None:
    """The schema's frame for the response; None where it refuses the body."""
    codec = codec_for(RESPONSES[ApiKey.PRODUCE], version)
    w = Writer()
    w.int32(0)
    try:
        header_version = 1 if codec.flexible else 0
        codec_for(RESPONSE_HEADER, header_version).write(w, {"correlation_id": correlation_id})
        codec.write(w, body)
    except ProtocolError:
        return None
    w.out[0:4] = (len(w.out) - 4).to_bytes(4, "big")
    return bytes(w.out)


_ints32 = st.integers(-(2**31), 2**31 - 1)
_ints64 = st.integers(-(2**63), 2**63 - 1)
_partition_answers = st.fixed_dictionaries(
    {
        "index": _ints32,
        "error_code": st.integers(-(2**15), 2**15 - 1),
        "base_offset": _ints64,
        "log_append_time_ms": _ints64,
        "log_start_offset": _ints64,
    },
    optional={
        "error_message": st.none() | _text,
        "record_errors": st.just([])
        | st.lists(
            st.fixed_dictionaries(
                {"batch_index": _ints32, "batch_index_error_message": st.none() | _text}
            ),
            max_size=2,
        ),
        "current_leader": st.fixed_dictionaries({"leader_id": _ints32, "leader_epoch": _ints32}),
    },
)
_responses = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {"name": _text, "partition_responses": st.lists(_partition_answers, max_size=4)}
            ),
            max_size=3,
        ),
        "throttle_time_ms": _ints32,
    },
    optional={
        "node_endpoints": st.just([])
        | st.just([{"node_id": 1, "host": "h", "port": 9092, "rack": None}])
    },
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from(list(PRODUCE_FAST_VERSIONS)),
    correlation_id=_ints32,
    body=_responses,
)
def test_writes_every_produce_response_as_the_schema_does_or_leaves_it(
    version: int, correlation_id: int, body: dict[str, Any]
) -> None:
    fast = write_produce_response(version, correlation_id, body)
    if fast is not None:
        assert bytes(fast) == _generic_response(version, correlation_id, body)


def test_the_gateways_usual_answer_takes_the_fast_path_at_every_version() -> None:
    partition = {
        "index": 3,
        "error_code": 0,
        "base_offset": 1234,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }
    body = {
        "responses": [{"name": "orders", "partition_responses": [partition]}],
        "throttle_time_ms": 0,
        "node_endpoints": [],
    }
    for version in PRODUCE_FAST_VERSIONS:
        fast = write_produce_response(version, 9, body)
        assert fast is not None, version
        assert bytes(fast) == _generic_response(version, 9, body)
    with_hint = {**partition, "current_leader": {"leader_id": 2, "leader_epoch": 5}}
    hinted = {**body, "responses": [{"name": "orders", "partition_responses": [with_hint]}]}
    assert write_produce_response(10, 9, hinted) is None
