"""Fetched record batches decoded in bulk into the Kafka source's Arrow schema: every record of
the offset range once, with its key, value, headers, timestamp and type, whatever the codec;
markers and aborted transactions never rows."""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pytest

from brook.client.fetcher import AbortedTransactions
from brook.record import (
    Compression,
    ControlType,
    CorruptRecordError,
    TimestampType,
    build_batch,
    build_control_batch,
)
from brook.record.records import RecordTuple
from brook.spark.arrow_decode import _binary, decode_fetch
from brook.spark.schema import arrow_schema

BASE_MS: Final = 1_700_000_000_000
PRODUCER: Final = 7


def _records(first: int, count: int) -> list[RecordTuple]:
    return [
        (
            BASE_MS + n * 10,
            None if n % 4 == 0 else f"k{n}".encode(),
            None if n % 9 == 0 else f"value {n}".encode() * (n % 3 + 1),
            [("h", str(n).encode()), ("null", None)] if n % 2 else [],
        )
        for n in range(first, first + count)
    ]


def _row(offset: int, record: RecordTuple, timestamp_type: int = 0) -> dict[str, object]:
    timestamp, key, value, headers = record
    return {
        "key": key,
        "value": value,
        "offset": offset,
        "timestamp_ms": timestamp,
        "timestampType": timestamp_type,
        "headers": [{"key": k, "value": v} for k, v in headers],
    }


def _rows(
    buffer: bytes, start: int, end: int, **kwargs: object
) -> tuple[list[dict[str, object]], int]:
    decoded = decode_fetch(buffer, "t", 3, start, end, include_headers=True, **kwargs)  # type: ignore[arg-type]
    assert decoded.batch.schema == arrow_schema(include_headers=True)
    table = decoded.batch.to_pydict()
    assert set(table["topic"]) <= {"t"} and set(table["partition"]) <= {3}
    rows = [
        {
            "key": table["key"][i],
            "value": table["value"][i],
            "offset": table["offset"][i],
            "timestamp_ms": round(table["timestamp"][i].timestamp() * 1000),
            "timestampType": table["timestampType"][i],
            "headers": table["headers"][i],
        }
        for i in range(decoded.batch.num_rows)
    ]
    return rows, decoded.next_offset


@pytest.mark.parametrize("codec", list(Compression))
def test_every_record_of_the_range_once_whatever_the_codec(codec: Compression) -> None:
    first, second = _records(0, 40), _records(40, 25)
    buffer = build_batch(first, compression=codec) + build_batch(
        second, compression=codec, base_offset=40
    )
    everything = [_row(n, record) for n, record in enumerate(first + second)]
    assert _rows(buffer, 0, 65, aborted=None) == (everything, 65)
    # A range inside the batches: the records before and after it are not rows.
    assert _rows(buffer, 5, 52, aborted=None) == (everything[5:52], 52)


def test_a_batch_cut_short_is_left_for_the_next_fetch() -> None:
    buffer = build_batch(_records(0, 10)) + build_batch(_records(10, 10), base_offset=10)
    rows, next_offset = _rows(buffer[:-3], 0, 100, aborted=None)
    assert [row["offset"] for row in rows] == list(range(10))
    assert next_offset == 10


def test_log_append_time_batches_have_their_max_timestamp() -> None:
    records = _records(0, 3)
    buffer = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    rows, _ = _rows(buffer, 0, 3, aborted=None)
    newest = max(record[0] or 0 for record in records)
    assert [(row["timestamp_ms"], row["timestampType"]) for row in rows] == [(newest, 1)] * 3


def test_markers_are_never_rows_and_read_committed_drops_aborted_transactions() -> None:
    def transaction(base: int, outcome: ControlType) -> bytes:
        data = build_batch(
            _records(base, 3),
            base_offset=base,
            producer_id=PRODUCER,
            producer_epoch=0,
            base_sequence=base,
            is_transactional=True,
        )
        marker = build_control_batch(
            outcome,
            producer_id=PRODUCER,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=BASE_MS,
            base_offset=base + 3,
        )
        return data + marker

    buffer = transaction(0, ControlType.ABORT) + transaction(4, ControlType.COMMIT)
    uncommitted, next_offset = _rows(buffer, 0, 8, aborted=None)
    assert [row["offset"] for row in uncommitted] == [0, 1, 2, 4, 5, 6]
    assert next_offset == 8
    committed, next_offset = _rows(buffer, 0, 8, aborted=AbortedTransactions([(PRODUCER, 0)]))
    assert [row["offset"] for row in committed] == [4, 5, 6]
    assert next_offset == 8


def test_a_corrupt_batch_is_an_error_naming_the_partition_and_offset() -> None:
    buffer = bytearray(build_batch(_records(0, 5), base_offset=20))
    buffer[-2] ^= 0xFF
    with pytest.raises(
        CorruptRecordError, match="record batches of t-3 fetched from offset 20 are invalid"
    ):
        decode_fetch(bytes(buffer), "t", 3, 20, 25, aborted=None, include_headers=False)


def test_records_beyond_an_arrow_binary_column_are_refused_not_wrapped() -> None:
    """Spark's binary is Arrow's binary (int32 offsets): more than 2 GiB of records in one
    fetch must fail clearly, not wrap into corrupt rows. (A 2 GiB view of a small buffer: the
    check comes before any byte is read.)"""
    small = pa.py_buffer(b"x" * 16)
    huge = pa.foreign_buffer(small.address, 2**31, base=small)
    with pytest.raises(ValueError, match="more than an Arrow binary column holds"):
        _binary(huge, np.array([0], dtype=np.int64), np.array([1], dtype=np.int64))
