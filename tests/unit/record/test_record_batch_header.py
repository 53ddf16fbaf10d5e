"""The server-side API: header parsing, CRC, append validation, scanning and patching."""

from __future__ import annotations

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from record_test_support import header_fields, restamp

from brook.record import (
    BATCH_OVERHEAD,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    TimestampType,
    UnsupportedCompressionError,
    assign_offsets,
    build_batch,
    iter_records,
    read_header,
    scan_batches,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
    verify_crc,
)

MAX_BATCH_BYTES = 1024 * 1024


def _batch(count: int = 3, **fields: object) -> bytes:
    records = [(1_700_000_000_000 + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(count)]
    return build_batch(records, **fields)  # type: ignore[arg-type]


def test_read_header_returns_every_field_the_builder_wrote() -> None:
    batch = _batch(
        4,
        base_offset=100,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = read_header(batch)
    assert header.base_offset == 100
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.partition_leader_epoch == 9
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.records_count == 4
    assert header.last_offset == 103
    assert header.next_offset == 104
    assert header.last_sequence == 43
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_003
    assert header.is_transactional and header.has_producer_id and not header.is_control
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME


def test_last_sequence_wraps_past_int32_max_like_kafka() -> None:
    batch = _batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert read_header(batch).last_sequence == 0


def test_read_header_reads_at_a_position_inside_a_larger_buffer() -> None:
    first, second = _batch(1), _batch(2, base_offset=1)
    header = read_header(first + second, len(first))
    assert header.base_offset == 1 and header.records_count == 2


@pytest.mark.parametrize("available", [0, 5, 16, 17, 60])
def test_read_header_rejects_fewer_than_61_bytes_as_corrupt(available: int) -> None:
    with pytest.raises(CorruptRecordError, match="truncated") as err:
        read_header(_batch()[:available])
    assert err.value.error_code == 2


def test_read_header_rejects_a_batch_length_shorter_than_the_header() -> None:
    with pytest.raises(CorruptRecordError, match="batchLength 48"):
        read_header(restamp(_batch(), batch_length=48))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_set_formats_are_rejected_naming_the_old_format(magic: int) -> None:
    # kafka-python still writes MessageSet v0/v1 for old brokers: an independent encoder.
    builder = LegacyRecordBatchBuilder(magic, 0, MAX_BATCH_BYTES)
    builder.append(0, timestamp=1_000 if magic else None, key=b"k", value=b"v")
    message_set = bytes(builder.build())
    for call in (
        lambda: read_header(message_set),
        lambda: validate_batches(message_set, max_batch_bytes=MAX_BATCH_BYTES),
    ):
        with pytest.raises(
            InvalidRecordError, match=f"old-format MessageSet \\(magic v{magic}"
        ) as err:
            call()
        assert err.value.error_code == 87


def test_unknown_magic_is_rejected_as_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="unknown magic 3"):
        read_header(restamp(_batch(), magic=3))


def test_verify_crc_accepts_an_intact_batch_and_rejects_a_changed_record_byte() -> None:
    batch = _batch()
    verify_crc(batch, 0, read_header(batch))
    damaged = bytearray(batch)
    damaged[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        verify_crc(damaged, 0, read_header(damaged))


def test_verify_crc_rejects_a_batch_that_runs_past_the_buffer() -> None:
    batch = _batch()
    with pytest.raises(CorruptRecordError, match="truncated"):
        verify_crc(batch[:-1], 0, read_header(batch))


def test_validate_batches_returns_each_header_of_back_to_back_batches() -> None:
    batches = [_batch(1), _batch(5, base_offset=1), _batch(2, compression=Compression.ZSTD)]
    headers = validate_batches(b"".join(batches), max_batch_bytes=MAX_BATCH_BYTES)
    assert [h.records_count for h in headers] == [1, 5, 2]
    assert [h.size for h in headers] == [len(b) for b in batches]


def test_validate_batches_accepts_memoryview_and_bytearray() -> None:
    batch = _batch()
    for buf in (bytearray(batch), memoryview(batch)):
        assert len(validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)) == 1


def test_validate_batches_rejects_a_batch_over_the_size_limit_with_message_too_large() -> None:
    batch = _batch(10)
    assert validate_batches(batch, max_batch_bytes=len(batch))
    with pytest.raises(RecordTooLargeError) as err:
        validate_batches(batch, max_batch_bytes=len(batch) - 1)
    assert err.value.error_code == 10


@pytest.mark.parametrize("trailing", [b"\x00", b"\x02" * 16, b"\x00" * 20, b"\xff" * 70])
def test_validate_batches_rejects_trailing_bytes_after_the_last_batch(trailing: bytes) -> None:
    with pytest.raises(RecordError):
        validate_batches(_batch() + trailing, max_batch_bytes=MAX_BATCH_BYTES)


def test_validate_batches_rejects_an_empty_append() -> None:
    with pytest.raises(InvalidRecordError, match="no record batch"):
        validate_batches(b"", max_batch_bytes=MAX_BATCH_BYTES)


def test_validate_batches_rejects_a_batch_with_no_records() -> None:
    empty = restamp(_batch(1), records_count=0, last_offset_delta=-1)
    with pytest.raises(InvalidRecordError, match="at least one record"):
        validate_batches(empty, max_batch_bytes=MAX_BATCH_BYTES)


def test_validate_batches_rejects_a_count_that_disagrees_with_the_last_offset_delta() -> None:
    # The shape log compaction leaves behind, which a producer never sends.
    compacted = restamp(_batch(3), records_count=2)
    with pytest.raises(InvalidRecordError, match="recordsCount 2 but lastOffsetDelta 2"):
        validate_batches(compacted, max_batch_bytes=MAX_BATCH_BYTES)


def test_validate_batches_rejects_more_uncompressed_records_than_the_bytes_can_hold() -> None:
    # Three records of the smallest possible shape: 7 bytes each.
    batch = build_batch([(0, None, None, [])] * 3)
    assert len(batch) == 61 + 3 * 7
    validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)
    inflated = restamp(batch, records_count=4, last_offset_delta=3)
    with pytest.raises(CorruptRecordError, match="claims 4 records in 21 bytes"):
        validate_batches(inflated, max_batch_bytes=MAX_BATCH_BYTES)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_validate_batches_rejects_undefined_codec_ids_as_unsupported(codec_id: int) -> None:
    batch = restamp(_batch(), attributes=codec_id)
    with pytest.raises(UnsupportedCompressionError, match=f"codec id {codec_id}") as err:
        validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)
    assert err.value.error_code == 76


def test_validate_batches_rejects_a_transactional_batch_without_producer_id() -> None:
    batch = restamp(_batch(), attributes=0x10)
    with pytest.raises(InvalidRecordError, match="no producer id"):
        validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)


def test_validate_batches_rejects_a_max_batch_bytes_below_one_header() -> None:
    with pytest.raises(ValueError, match="max_batch_bytes"):
        validate_batches(_batch(), max_batch_bytes=BATCH_OVERHEAD - 1)


def test_scan_batches_yields_positions_and_stops_quietly_at_a_torn_tail() -> None:
    first, second, third = _batch(1), _batch(2, base_offset=1), _batch(3, base_offset=3)
    log = first + second + third[:-7]
    assert [(pos, h.base_offset) for pos, h in scan_batches(log)] == [
        (0, 0),
        (len(first), 1),
    ]


def test_scan_batches_respects_the_start_and_end_positions() -> None:
    first, second, third = _batch(1), _batch(2, base_offset=1), _batch(3, base_offset=3)
    log = first + second + third
    found = list(scan_batches(log, len(first), len(first) + len(second)))
    assert [(pos, h.base_offset) for pos, h in found] == [(len(first), 1)]


def test_scan_batches_raises_corrupt_on_an_impossible_length() -> None:
    zeroed_tail = _batch(1) + b"\x00" * 64  # a preallocated region after a crash
    scan = scan_batches(zeroed_tail)
    assert next(scan)[0] == 0
    with pytest.raises(CorruptRecordError, match="batchLength 0"):
        next(scan)


def test_scan_batches_reports_a_wrong_magic_in_the_log_as_corruption() -> None:
    with pytest.raises(CorruptRecordError, match="magic"):
        list(scan_batches(restamp(_batch(), magic=1)))


def test_scan_batches_rejects_a_range_outside_the_buffer() -> None:
    with pytest.raises(ValueError, match="outside"):
        list(scan_batches(_batch(), 0, 10_000))


def test_assign_offsets_moves_every_record_offset_and_keeps_the_crc_valid() -> None:
    buf = bytearray(_batch(3, compression=Compression.LZ4))
    assign_offsets(buf, 0, 5_000)
    (header,) = validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)
    assert header.base_offset == 5_000
    assert [r.offset for r in iter_records(buf)] == [5_000, 5_001, 5_002]


def test_assign_offsets_patches_the_batch_at_the_given_position_only() -> None:
    first, second = _batch(1), _batch(2)
    buf = bytearray(first + second)
    assign_offsets(buf, len(first), 1)
    assert [h.base_offset for h in validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)] == [0, 1]


def test_assign_offsets_rejects_offsets_that_would_overflow_int64() -> None:
    buf = bytearray(_batch(3))
    before = bytes(buf)
    with pytest.raises(ValueError, match="overflow"):
        assign_offsets(buf, 0, 2**63 - 2)
    with pytest.raises(ValueError):
        assign_offsets(buf, 0, -1)
    assert buf == before


def test_set_partition_leader_epoch_keeps_the_crc_valid() -> None:
    buf = bytearray(_batch())
    set_partition_leader_epoch(buf, 0, 42)
    (header,) = validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)
    assert header.partition_leader_epoch == 42


def test_set_log_append_time_sets_the_bit_and_max_timestamp_and_a_valid_crc() -> None:
    buf = bytearray(_batch(3, compression=Compression.GZIP))
    set_log_append_time(buf, 0, 1_800_000_000_000)
    (header,) = validate_batches(buf, max_batch_bytes=MAX_BATCH_BYTES)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1_800_000_000_000
    assert header.compression is Compression.GZIP
    # Consumers see the broker's time on every record under LogAppendTime.
    assert {r.timestamp for r in iter_records(buf)} == {1_800_000_000_000}


def test_set_log_append_time_refuses_to_re_sign_a_corrupt_batch() -> None:
    buf = bytearray(_batch())
    buf[-1] ^= 0xFF
    before = bytes(buf)
    with pytest.raises(CorruptRecordError, match="CRC"):
        set_log_append_time(buf, 0, 1)
    assert buf == before


@pytest.mark.parametrize(
    "patch",
    [
        lambda buf, pos: assign_offsets(buf, pos, 1),
        lambda buf, pos: set_partition_leader_epoch(buf, pos, 1),
        lambda buf, pos: set_log_append_time(buf, pos, 1),
    ],
)
def test_patchers_refuse_a_position_that_is_not_a_batch_and_change_nothing(patch: object) -> None:
    buf = bytearray(_batch())
    before = bytes(buf)
    with pytest.raises(InvalidRecordError, match="does not start a v2 record batch"):
        patch(buf, 3)  # type: ignore[operator]
    with pytest.raises(ValueError, match="no complete batch header"):
        patch(buf, len(buf) - 10)  # type: ignore[operator]
    assert buf == before


def test_header_fields_agree_with_an_independent_unpack() -> None:
    batch = _batch(2, producer_id=3, producer_epoch=1, base_sequence=0)
    header = read_header(batch)
    fields = header_fields(batch)
    assert {name: getattr(header, name) for name in fields} == fields
