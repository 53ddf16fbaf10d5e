"""MessageSet v0/v1 → RecordBatch v2 (brook.record.legacy), on hand-built message sets."""

from __future__ import annotations

import struct
import zlib

import pytest

from brook.record import (
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    iter_records,
    read_header,
)
from brook.record.compression import compress
from brook.record.legacy import message_set_to_batch

NOW_MS = 1_700_000_000_000


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def _message(
    key: bytes | None, value: bytes | None, *, magic: int = 0, attributes: int = 0, ts: int = -1
) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", ts)
    body += _bytes(key) + _bytes(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _converted(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    batch = message_set_to_batch(data, now_ms=NOW_MS)
    return [(r.timestamp, r.key, r.value) for r in iter_records(batch)]


def test_magic_0_and_1_messages_keep_keys_values_and_v1_timestamps() -> None:
    data = _message(b"k", b"v") + _message(None, b"w", magic=1, ts=123) + _message(b"x", None)
    assert _converted(data) == [(NOW_MS, b"k", b"v"), (123, None, b"w"), (NOW_MS, b"x", None)]


def test_a_gzip_wrapper_becomes_a_gzip_batch_of_its_inner_messages() -> None:
    inner = _message(b"a", b"1") + _message(b"b", b"2")
    wrapper = _message(None, compress(Compression.GZIP, inner), attributes=Compression.GZIP)
    batch = message_set_to_batch(wrapper, now_ms=NOW_MS)
    assert read_header(batch).compression is Compression.GZIP
    assert _converted(wrapper) == [(NOW_MS, b"a", b"1"), (NOW_MS, b"b", b"2")]


@pytest.mark.parametrize(
    "data",
    [
        _message(b"k", b"v")[:-1],  # truncated
        _message(b"k", b"v")[:-1] + b"w",  # CRC mismatch
        _message(
            None,
            compress(
                Compression.GZIP,
                _message(None, compress(Compression.GZIP, _message(b"a", b"1")), attributes=1),
            ),
            attributes=1,
        ),  # nested compression
        _message(b"k", b"v", attributes=5),  # unknown codec
    ],
)
def test_damaged_message_sets_are_refused_as_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        message_set_to_batch(data, now_ms=NOW_MS)


def test_an_empty_message_set_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        message_set_to_batch(b"", now_ms=NOW_MS)
