"""Control batches: transaction markers are built, recognised and decoded."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from brook.record import (
    ControlType,
    InvalidRecordError,
    Record,
    build_batch,
    build_control_batch,
    decode_control_record,
    iter_records,
    read_header,
    validate_batches,
)

MAX_BATCH_BYTES = 1024 * 1024


@pytest.mark.parametrize("control_type", list(ControlType))
def test_marker_batch_is_a_transactional_control_batch_with_one_record(
    control_type: ControlType,
) -> None:
    batch = build_control_batch(
        control_type,
        producer_id=77,
        producer_epoch=3,
        coordinator_epoch=12,
        timestamp_ms=1_700_000_000_000,
        base_offset=40,
        partition_leader_epoch=5,
    )
    (header,) = validate_batches(batch, max_batch_bytes=MAX_BATCH_BYTES)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (77, 3)
    assert header.records_count == 1 and header.base_offset == 40
    (record,) = iter_records(batch)
    assert record.offset == 40
    assert decode_control_record(record) == (control_type, 0, 12)


@pytest.mark.parametrize("control_type", list(ControlType))
def test_kafka_python_reads_our_marker_as_the_same_control_record(
    control_type: ControlType,
) -> None:
    batch = build_control_batch(
        control_type, producer_id=1, producer_epoch=0, coordinator_epoch=4, timestamp_ms=9
    )
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    (record,) = list(theirs)
    assert record.commit is (control_type is ControlType.COMMIT)
    assert record.abort is (control_type is ControlType.ABORT)


def test_the_control_bit_is_what_marks_a_control_batch() -> None:
    ordinary = build_batch([(0, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), [])])
    assert not read_header(ordinary).is_control


def test_newer_versions_with_extra_trailing_fields_are_read() -> None:
    record = Record(
        0, 0, struct.pack(">hh", 1, 1) + b"\x00\x00", struct.pack(">hi", 2, 8) + b"x", ()
    )
    assert decode_control_record(record) == (ControlType.COMMIT, 1, 8)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, struct.pack(">hi", 0, 1), "key of null"),
        (b"\x00\x00\x01", struct.pack(">hi", 0, 1), "key of 3 bytes"),
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "type 2"),
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), "negative key version"),
        (struct.pack(">hh", 0, 0), None, "value of null"),
        (struct.pack(">hh", 0, 0), b"\x00\x00\x00", "value of 3 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -3, 1), "negative version"),
    ],
)
def test_malformed_control_records_are_rejected_as_invalid(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        decode_control_record(Record(9, 0, key, value, ()))


def test_a_marker_needs_a_producer() -> None:
    with pytest.raises(ValueError, match="producer id"):
        build_control_batch(
            ControlType.COMMIT,
            producer_id=-1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=0,
        )
