"""Rewriting a batch with a subset of its records (brook/record/cleaning.py): the batch keeps
its identity, the kept records their offsets, timestamps, keys, values and headers, for every
codec; empty batches decode; our decoders and kafka-python's agree."""

from __future__ import annotations

import pytest
from brook_storage_node.fetch import decode_records
from kafka.record.default_records import DefaultRecordBatch
from record_test_support import header_fields

from brook.record import (
    Compression,
    CorruptRecordError,
    TimestampType,
    build_batch,
    iter_records,
    read_header,
    scan_batches,
    validate_batches,
    verify_crc,
)
from brook.record.cleaning import record_spans, rewrite_batch
from brook.spark.arrow_decode import decode_fetch

BASE_TS = 1_700_000_000_000
IDENTITY = (
    "base_offset",
    "partition_leader_epoch",
    "magic",
    "last_offset_delta",
    "base_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
)


def _batch(codec: Compression, **kwargs: object) -> bytes:
    records = [
        (BASE_TS + 10 * i, None if i == 2 else b"k%d" % i, None if i == 3 else b"v" * i, ())
        for i in range(6)
    ]
    records[4] = (BASE_TS + 40, b"k4", b"v4", (("h", b"x"), ("n", None)))
    return build_batch(
        records,
        compression=codec,
        base_offset=1000,
        producer_id=7,
        producer_epoch=3,
        base_sequence=50,
        partition_leader_epoch=9,
        **kwargs,  # type: ignore[arg-type]
    )


def _kept(batch: bytes, offsets: set[int]) -> bytes:
    located = record_spans(batch, 0, read_header(batch))
    return rewrite_batch(located, [span for span in located.spans if span.offset in offsets])


@pytest.mark.parametrize("codec", list(Compression))
def test_rewrite_keeps_identity_and_records_for_every_codec(codec: Compression) -> None:
    original = _batch(codec, is_transactional=True)
    before = {record.offset: record for record in iter_records(original)}
    rewritten = _kept(original, {1001, 1003, 1004})
    header = read_header(rewritten)
    verify_crc(rewritten, 0, header)
    old, new = header_fields(original), header_fields(rewritten)
    assert {f: new[f] for f in IDENTITY} == {f: old[f] for f in IDENTITY}
    assert new["attributes"] == old["attributes"]
    assert header.compression is codec and header.is_transactional
    assert header.records_count == 3
    # The last record (offset 1005) went: the last offset delta, and so the producer's last
    # sequence, stays.
    assert header.last_offset == 1005 and header.last_sequence == 55
    assert header.max_timestamp == BASE_TS + 40
    records = list(iter_records(rewritten))
    assert records == [before[1001], before[1003], before[1004]]
    # kafka-python decodes it independently, offsets and all.
    theirs = [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
        for r in DefaultRecordBatch(bytearray(rewritten))
    ]
    assert theirs == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@pytest.mark.parametrize("codec", list(Compression))
def test_empty_batch_keeps_identity_and_decodes_to_nothing(codec: Compression) -> None:
    original = _batch(codec, is_transactional=True)
    empty = _kept(original, set())
    header = read_header(empty)
    verify_crc(empty, 0, header)
    assert header.records_count == 0 and header.size == 61
    assert header.compression is Compression.NONE and header.is_transactional
    old, new = header_fields(original), header_fields(empty)
    assert {f: new[f] for f in IDENTITY} == {f: old[f] for f in IDENTITY}
    assert header.max_timestamp == read_header(original).max_timestamp
    assert list(iter_records(empty)) == []
    assert list(DefaultRecordBatch(bytearray(empty))) == []
    assert [position for position, _ in scan_batches(empty + original)] == [0, 61]
    # A producer never sends such a batch.
    with pytest.raises(Exception, match="recordsCount 0"):
        validate_batches(empty, max_batch_bytes=1 << 20)


def test_keeping_every_record_gives_an_equivalent_batch() -> None:
    original = _batch(Compression.NONE)
    assert _kept(original, set(range(1000, 1006))) == original


def test_log_append_time_batches_keep_their_timestamp() -> None:
    original = _batch(Compression.NONE, timestamp_type=TimestampType.LOG_APPEND_TIME)
    rewritten = _kept(original, {1000})
    assert read_header(rewritten).max_timestamp == read_header(original).max_timestamp
    assert [r.timestamp for r in iter_records(rewritten)] == [read_header(original).max_timestamp]


def test_spans_report_keys_tombstones_offsets_and_timestamps() -> None:
    original = _batch(Compression.GZIP)
    located = record_spans(original, 0, read_header(original))
    assert [(s.offset, s.timestamp, s.key, s.is_tombstone) for s in located.spans] == [
        (1000, BASE_TS, b"k0", False),
        (1001, BASE_TS + 10, b"k1", False),
        (1002, BASE_TS + 20, None, False),
        (1003, BASE_TS + 30, b"k3", True),
        (1004, BASE_TS + 40, b"k4", False),
        (1005, BASE_TS + 50, b"k5", False),
    ]


def test_damaged_batches_are_reported() -> None:
    original = bytearray(_batch(Compression.NONE))
    original[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        record_spans(bytes(original), 0, read_header(original))
    with pytest.raises(CorruptRecordError):
        # Framing damage the CRC is not asked to catch.
        truncated = _batch(Compression.NONE)
        header = read_header(truncated)
        bad = truncated[:61] + b"\x7f" + truncated[62:]
        record_spans(bad, 0, header, check_crc=False)


@pytest.mark.parametrize("codec", list(Compression))
def test_cleaned_batches_decode_with_the_storage_node_and_spark_readers(
    codec: Compression,
) -> None:
    original = _batch(codec)
    located = record_spans(original, 0, read_header(original))
    empty = rewrite_batch(located, [])
    one = rewrite_batch(located, located.spans[4:5])  # offset 1004 of 1000..1005
    later = build_batch([(BASE_TS, b"z", b"later", ())], base_offset=2000)
    data = empty + one + later
    assert [(r.offset, r.key, r.value) for r in decode_records(memoryview(data), 1000)] == [
        (1004, b"k4", b"v4"),
        (2000, b"z", b"later"),
    ]
    decoded = decode_fetch(data, "t", 0, 1000, 2001, aborted=None, include_headers=False)
    assert decoded.batch.column("offset").to_pylist() == [1004, 2000]
    assert decoded.next_offset == 2001
