"""The fast Produce reader (protocol/produce_request.py) against the schema's generic decoder:
for every frame, the same header and body, or None (then the generic decoder reads it)."""

from __future__ import annotations

from typing import Any

from brook_gateway.protocol.codec import UNKNOWN_TAGS, codec_for
from brook_gateway.protocol.frames import _request_codec, encode_request
from brook_gateway.protocol.kafka_messages import REQUEST_HEADER, ApiKey
from brook_gateway.protocol.primitives import ProtocolError, Reader
from brook_gateway.protocol.produce_request import PRODUCE_FAST_VERSIONS, read_produce_request
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
