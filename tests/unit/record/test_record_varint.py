"""Zig-zag varints: boundaries, limits, and agreement with kafka-python's encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.util import decode_varint, encode_varint

from brook.record import CorruptRecordError
from brook.record.varint import (
    read_varint,
    read_varlong,
    size_of_varint,
    write_varint,
    write_varlong,
)

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(value=INT32)
def test_varint_bytes_match_kafka_python_and_round_trip(value: int) -> None:
    ours = bytearray()
    write_varint(value, ours)
    theirs = bytearray()
    encode_varint(value, theirs.append)
    assert ours == theirs
    assert len(ours) == size_of_varint(value)
    assert read_varint(ours, 0) == (value, len(ours))
    assert decode_varint(bytes(ours), 0)[0] == value


@settings(max_examples=200, deadline=None)
@given(value=INT64)
def test_varlong_round_trips_and_is_read_by_kafka_python(value: int) -> None:
    ours = bytearray()
    write_varlong(value, ours)
    assert len(ours) == size_of_varint(value) <= 10
    assert read_varlong(ours, 0) == (value, len(ours))
    assert decode_varint(bytes(ours), 0)[0] == value


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01")],
)
def test_zigzag_encoding_of_small_values(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(value, out)
    assert bytes(out) == encoded


def test_values_outside_the_type_are_refused_on_write() -> None:
    with pytest.raises(ValueError, match="int32"):
        write_varint(2**31, bytearray())
    with pytest.raises(ValueError, match="int64"):
        write_varlong(-(2**63) - 1, bytearray())


def test_truncated_overlong_and_too_wide_varints_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="int32"):
        read_varint(b"\xff\xff\xff\xff\x1f", 0)  # 35 bits
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)
    with pytest.raises(CorruptRecordError, match="int64"):
        read_varlong(b"\xff" * 9 + b"\x7f", 0)  # 70 bits
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_varint(memoryview(b""), 0)
