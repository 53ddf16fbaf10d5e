"""The declarative codec: every API and version the gateway advertises round-trips, and
hand-built bytes from the protocol's rules decode as the spec says."""

from __future__ import annotations

from typing import Any

import pytest
from brook_gateway.apis import RECOMMENDED_VERSIONS
from brook_gateway.protocol.codec import UNKNOWN_TAGS, Message, codec_for
from brook_gateway.protocol.frames import decode_request, encode_request
from brook_gateway.protocol.kafka_messages import REQUESTS, RESPONSES, ApiKey
from brook_gateway.protocol.primitives import ProtocolError, Reader, Writer
from brook_gateway.protocol.schema import FieldSpec, MessageSpec, in_range
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _scalar(field: FieldSpec, nullable: bool) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INTS:
        low, high = _INTS[kind]
        values: st.SearchStrategy[Any] = st.integers(low, high)
    elif kind == "bool":
        values = st.booleans()
    elif kind == "float64":
        values = st.floats(allow_nan=False)
    elif kind == "uuid":
        values = st.binary(min_size=16, max_size=16)
    elif kind == "string":
        values = st.text(max_size=8)
    else:
        values = st.binary(max_size=16)
    return st.none() | values if nullable else values


def _field(field: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    nullable = in_range(version, field.nullable)
    if field.type == "struct":
        element: st.SearchStrategy[Any] = _struct(field.fields, version)
        if nullable and not field.array:
            element = st.none() | element
    else:
        element = _scalar(field, nullable and not field.array)
    if not field.array:
        return element
    items = st.lists(element, max_size=3)
    return st.none() | items if nullable else items


def _struct(fields: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy[Message]:
    present = {
        f.name: _field(f, version)
        for f in fields
        if in_range(version, f.versions) or in_range(version, f.tagged)
    }
    return st.fixed_dictionaries(present)


def _assert_carries(decoded: Any, sent: Any, path: str) -> None:
    """Every value sent came back; fields not sent came back at their defaults."""
    if isinstance(sent, dict):
        for name, value in sent.items():
            _assert_carries(decoded[name], value, f"{path}.{name}")
    elif isinstance(sent, list):
        assert isinstance(decoded, list) and len(decoded) == len(sent), path
        for i, (got, value) in enumerate(zip(decoded, sent, strict=True)):
            _assert_carries(got, value, f"{path}[{i}]")
    else:
        assert decoded == sent, path


def _cases() -> list[tuple[MessageSpec, int]]:
    cases = []
    for api_key, (low, high) in RECOMMENDED_VERSIONS.items():
        for version in range(low, high + 1):
            cases.append((REQUESTS[api_key], version))
            cases.append((RESPONSES[api_key], version))
    return cases


@pytest.mark.parametrize(("spec", "version"), _cases(), ids=[f"{s.name}-v{v}" for s, v in _cases()])
def test_every_advertised_message_version_round_trips(spec: MessageSpec, version: int) -> None:
    codec = codec_for(spec, version)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_struct(spec.fields, version))
    def round_trip(message: Message) -> None:
        encoded = codec.encode(message)
        decoded = codec.decode(encoded)
        _assert_carries(decoded, message, spec.name)
        assert codec.encode(decoded) == encoded

    round_trip()


def test_fields_absent_from_a_version_decode_to_their_schema_defaults() -> None:
    # Fetch v4 has no log_start_offset in its partitions (v5+): the default is -1.
    codec = codec_for(REQUESTS[ApiKey.FETCH], 4)
    request = {
        "replica_id": -1,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5}]}],
    }
    decoded = codec.decode(codec.encode(request))
    partition = decoded["topics"][0]["partitions"][0]
    assert partition["log_start_offset"] == -1
    assert partition["fetch_offset"] == 5
    assert decoded["session_epoch"] == -1


def test_api_versions_v3_request_decodes_from_hand_built_bytes() -> None:
    frame = bytes.fromhex(
        "0012 0003 0000002a"  # api key 18, version 3, correlation id 42
        "0003 616263"  # client id "abc": int16 length even in header v2
        "00"  # header tagged fields
        "05 6b636174"  # client_software_name "kcat" (compact: length + 1)
        "04 312e30"  # client_software_version "1.0"
        "00"  # body tagged fields
    )
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 3, 42)
    assert header.client_id == "abc"
    assert body == {"client_software_name": "kcat", "client_software_version": "1.0"}
    assert encode_request(18, 3, 42, "abc", body)[4:] == frame


def test_librdkafkas_metadata_request_for_all_topics_decodes_despite_its_trailing_bytes() -> None:
    # What librdkafka 2.16 sends for "all topics" at v12: the array count is left as its
    # 4-byte placeholder, read as a null compact array and 3 bytes that follow the body.
    frame = bytes.fromhex(
        "0003 000c 00000003"  # api key 3, version 12, correlation id 3
        "0007 72646b61666b61"  # client id "rdkafka"
        "00"  # header tagged fields
        "00000000"  # the count's placeholder: read as a null array and the body's 3 other bytes
        "01 00 00"  # librdkafka's allow_auto_topic_creation, include_topic_..., tags: left over
    )
    header, body = decode_request(frame)
    assert (header.api_key, header.api_version, header.client_id) == (3, 12, "rdkafka")
    assert body["topics"] is None


def test_metadata_v1_null_topics_differs_from_empty_topics() -> None:
    codec = codec_for(REQUESTS[ApiKey.METADATA], 1)
    assert codec.decode(bytes.fromhex("ffffffff"))["topics"] is None
    assert codec.decode(bytes.fromhex("00000000"))["topics"] == []
    with pytest.raises(ProtocolError, match="invalid array length"):
        codec_for(REQUESTS[ApiKey.METADATA], 0).decode(bytes.fromhex("ffffffff"))


def test_produce_records_pass_through_as_the_same_bytes() -> None:
    batch = bytes(range(256)) * 4  # opaque to the codec: never parsed
    request = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": batch}]}],
    }
    codec = codec_for(REQUESTS[ApiKey.PRODUCE], 8)
    encoded = codec.encode(request)
    assert batch in encoded
    assert codec.decode(encoded)["topic_data"][0]["partition_data"][0]["records"] == batch


def test_tagged_fields_are_written_only_when_not_default_and_unknown_ones_survive() -> None:
    codec = codec_for(RESPONSES[ApiKey.API_VERSIONS], 3)
    plain = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    assert codec.encode(plain) == bytes.fromhex("0000 01 00000000 00")
    tagged = codec.encode({**plain, "finalized_features_epoch": 7})
    assert tagged == bytes.fromhex("0000 01 00000000 01 01 08 0000000000000007")
    assert codec.decode(tagged)["finalized_features_epoch"] == 7
    with_unknown = bytes.fromhex("0000 01 00000000 01 09 02 abcd")
    decoded = codec.decode(with_unknown)
    assert decoded[UNKNOWN_TAGS] == [(9, b"\xab\xcd")]
    assert codec.encode(decoded) == with_unknown


def test_out_of_order_tags_are_rejected() -> None:
    codec = codec_for(RESPONSES[ApiKey.API_VERSIONS], 3)
    with pytest.raises(ProtocolError, match="out of order"):
        codec.decode(bytes.fromhex("0000 01 00000000 02 09 00 05 00"))


def test_every_truncation_of_a_valid_message_is_a_protocol_error() -> None:
    codec = codec_for(RESPONSES[ApiKey.API_VERSIONS], 3)
    message = {
        "error_code": 0,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}],
        "throttle_time_ms": 0,
        "supported_features": [{"name": "f", "min_version": 1, "max_version": 2}],
    }
    encoded = codec.encode(message)
    for cut in range(len(encoded)):
        with pytest.raises(ProtocolError):
            codec.decode(encoded[:cut])


def test_unsigned_varints_match_the_protobuf_encoding() -> None:
    for value, hex_bytes in ((0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02")):
        w = Writer()
        w.uvarint(value)
        assert bytes(w.out).hex() == hex_bytes
        assert Reader(bytes.fromhex(hex_bytes)).uvarint() == value
    with pytest.raises(ProtocolError, match="longer than"):
        Reader(bytes.fromhex("ffffffffff01")).uvarint()


def test_values_that_cannot_be_encoded_are_clear_errors() -> None:
    codec = codec_for(REQUESTS[ApiKey.HEARTBEAT], 1)
    with pytest.raises(ProtocolError, match="generation_id"):
        codec.encode({"group_id": "g", "generation_id": 2**31, "member_id": "m"})
    with pytest.raises(ProtocolError, match="group_id"):
        codec.encode({"group_id": None, "generation_id": 1, "member_id": "m"})
    with pytest.raises(ProtocolError, match="not an int"):
        codec.encode({"group_id": "g", "generation_id": True, "member_id": "m"})


def test_string_that_is_not_utf8_is_a_protocol_error() -> None:
    codec = codec_for(REQUESTS[ApiKey.HEARTBEAT], 0)
    with pytest.raises(ProtocolError, match="UTF-8"):
        codec.decode(bytes.fromhex("0001 ff 00000001 0001 6d"))
