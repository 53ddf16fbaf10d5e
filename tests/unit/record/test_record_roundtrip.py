"""Property tests: what the builder writes, validation accepts and decoding gives back exactly;
patches keep the CRC valid; damage and truncation are always caught."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_test_support import CRC_START, HEADER_BYTES, restamp

from brook.record import (
    BatchBuilder,
    Compression,
    CorruptRecordError,
    RecordError,
    TimestampType,
    assign_offsets,
    build_batch,
    iter_records,
    read_header,
    scan_batches,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
)

MAX_BATCH_BYTES = 8 * 1024 * 1024
EXAMPLES = 40
INT64_MAX = 2**63 - 1

PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

header_keys = st.text(max_size=12)  # unicode, including the empty key
optional_bytes = st.none() | st.binary(max_size=80)
headers = st.lists(st.tuples(header_keys, optional_bytes), max_size=4)
timestamps = st.integers(min_value=0, max_value=INT64_MAX)
records = st.lists(
    st.tuples(timestamps, optional_bytes, optional_bytes, headers), min_size=1, max_size=12
)
codecs = st.sampled_from(list(Compression))
offsets = st.integers(min_value=0, max_value=2**62)


@PROPERTY_SETTINGS
@given(records=records, codec=codecs, base_offset=offsets)
def test_built_batch_validates_and_decodes_to_exactly_the_input(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base_offset: int,
) -> None:
    batch = build_batch(records, compression=codec, base_offset=base_offset)
    (header,) = validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)
    assert header.compression is codec
    assert header.records_count == len(records)
    assert header.base_offset == base_offset
    assert header.max_timestamp == max(r[0] for r in records)
    decoded = list(iter_records(batch))
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (base_offset + i, ts, key, value, hdrs) for i, (ts, key, value, hdrs) in enumerate(records)
    ]


@PROPERTY_SETTINGS
@given(
    records=records,
    codec=codecs,
    base_offset=offsets,
    epoch=st.integers(min_value=-1, max_value=2**31 - 1),
    append_time=timestamps,
)
def test_patching_offsets_epoch_and_append_time_keeps_the_batch_valid(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    base_offset: int,
    epoch: int,
    append_time: int,
) -> None:
    buf = bytearray(build_batch(records, compression=codec))
    assign_offsets(buf, 0, base_offset)
    set_partition_leader_epoch(buf, 0, epoch)
    set_log_append_time(buf, 0, append_time)
    (header,) = validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)
    assert (header.base_offset, header.partition_leader_epoch) == (base_offset, epoch)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == append_time
    decoded = list(iter_records(buf))
    assert [r.offset for r in decoded] == [base_offset + i for i in range(len(records))]
    assert [(r.key, r.value) for r in decoded] == [(k, v) for _, k, v, _ in records]


@pytest.mark.parametrize("codec", list(Compression))
def test_any_single_changed_byte_in_the_crc_range_is_detected(codec: Compression) -> None:
    batch = build_batch(
        [(1_000 + i, b"key", bytes(range(i, i + 30)), [("h", b"v")]) for i in range(5)],
        compression=codec,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )
    for position in range(CRC_START, len(batch)):
        for flip in (0x01, 0x80, 0xFF):
            damaged = bytearray(batch)
            damaged[position] ^= flip
            with pytest.raises(CorruptRecordError, match="CRC"):
                validate_batches(damaged, max_batch_bytes=MAX_BATCH_BYTES)


def test_damage_to_framing_fields_is_rejected_too() -> None:
    """Outside the CRC only baseOffset and partitionLeaderEpoch may change undetected
    (the broker rewrites both); damage to batchLength, magic or the CRC field is caught."""
    batch = build_batch([(1, b"k", b"v" * 40, [])] * 3)
    guarded = [*range(8, 12), *range(16, CRC_START)]
    for position in guarded:
        for flip in (0x01, 0x10, 0xFF):
            damaged = bytearray(batch)
            damaged[position] ^= flip
            with pytest.raises(RecordError):
                validate_batches(damaged, max_batch_bytes=MAX_BATCH_BYTES)


@PROPERTY_SETTINGS
@given(records=records, codec=codecs, data=st.data())
def test_truncation_is_rejected_by_validate_and_an_incomplete_tail_for_scan(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: Compression,
    data: st.DataObject,
) -> None:
    first = build_batch([(0, b"first", b"batch", [])])
    second = build_batch(records, compression=codec, base_offset=1)
    cut = data.draw(st.integers(min_value=1, max_value=len(second) - 1))
    log = first + second[:cut]
    with pytest.raises(CorruptRecordError):
        validate_batches(second[:cut], max_batch_bytes=MAX_BATCH_BYTES)
    with pytest.raises(CorruptRecordError):
        validate_batches(log, max_batch_bytes=MAX_BATCH_BYTES)
    assert [pos for pos, _ in scan_batches(log)] == [0]


def test_every_truncation_point_of_a_batch_is_detected() -> None:
    batch = build_batch(
        [(5, b"k" * 10, b"v" * 100, [("a", None)])] * 4, compression=Compression.SNAPPY
    )
    for cut in range(1, len(batch)):
        with pytest.raises(CorruptRecordError):
            validate_batches(batch[:cut], max_batch_bytes=MAX_BATCH_BYTES)
        assert list(scan_batches(batch[:cut])) == []


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=200), codec=codecs, count=st.integers(min_value=1, max_value=5))
def test_garbage_records_under_a_valid_crc_raise_a_record_error_never_anything_else(
    body: bytes, codec: Compression, count: int
) -> None:
    """A buggy client can sign garbage with a correct CRC; decoding must still fail cleanly."""
    template = build_batch([(0, None, None, [])])
    batch = restamp(
        template[:HEADER_BYTES] + body,
        batch_length=HEADER_BYTES - 12 + len(body),
        attributes=int(codec),
        records_count=count,
        last_offset_delta=count - 1,
    )
    try:
        list(iter_records(batch, max_decompressed_bytes=64 * 1024))
    except RecordError:
        pass


def test_a_record_that_claims_more_bytes_than_the_batch_holds_is_corrupt() -> None:
    batch = bytearray(build_batch([(0, b"k", b"v", [])]))
    batch[HEADER_BYTES] = 0x7E  # record length varint: 63, far more than remains
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    with pytest.raises(CorruptRecordError, match="record 0 claims 63 bytes"):
        list(iter_records(batch))


def test_a_records_count_larger_than_the_records_present_is_corrupt() -> None:
    batch = restamp(build_batch([(0, b"k", b"v", [])] * 2), records_count=3, last_offset_delta=2)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


def test_iter_records_can_skip_the_crc_check_but_not_the_bounds_check() -> None:
    batch = bytearray(build_batch([(0, b"k", b"v", [])]))
    value_at = batch.rindex(b"v")
    batch[value_at] = ord("w")
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(iter_records(batch))
    assert [r.value for r in iter_records(batch, check_crc=False)] == [b"w"]
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_records(batch[:-1], check_crc=False))


def test_iter_records_reads_the_batch_at_a_position() -> None:
    first = build_batch([(0, b"a", b"1", [])])
    second = build_batch([(0, b"b", b"2", []), (1, b"c", b"3", [])], base_offset=1)
    assert [r.key for r in iter_records(first + second, len(first))] == [b"b", b"c"]


def test_builder_reports_size_and_count_and_can_build_twice() -> None:
    builder = BatchBuilder(Compression.NONE)
    assert builder.size_estimate == HEADER_BYTES
    builder.append(10, b"key", b"value", [("h", b"x")])
    builder.append(None, None, None)
    assert builder.records_count == 2
    first = builder.build(base_offset=7)
    assert builder.size_estimate == len(first)
    assert builder.build(base_offset=7) == first
    assert read_header(first).records_count == 2


def test_builder_rejects_bad_input_and_stays_unchanged() -> None:
    builder = BatchBuilder(Compression.GZIP, producer_id=1, producer_epoch=0, base_sequence=0)
    builder.append(5, b"k", b"v")
    before = builder.build()
    with pytest.raises(TypeError):
        builder.append(6, "not bytes", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        builder.append(6, b"k", b"v", [(b"bytes key", b"v")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timestamp"):
        builder.append(-5, b"k", b"v")
    assert builder.records_count == 1
    assert builder.build() == before


def test_builder_rejects_out_of_range_producer_fields_and_empty_builds() -> None:
    with pytest.raises(ValueError, match="producer_epoch"):
        BatchBuilder(producer_epoch=2**15)
    with pytest.raises(ValueError, match="transactional"):
        BatchBuilder(is_transactional=True)
    with pytest.raises(ValueError, match="no records"):
        BatchBuilder().build()
