"""Byte compatibility with an implementation we did not write: kafka-python's record batches.

kafka-python's DefaultRecordBatchBuilder / DefaultRecordBatch encode and decode v2 batches
independently of our code, with its own codecs (python-snappy in xerial framing, lz4 with
content size, zstandard). Each direction is checked for every codec.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from brook.record import Compression, build_batch, iter_records, read_header, validate_batches

MAX_BATCH_BYTES = 8 * 1024 * 1024
INT64_MAX = 2**63 - 1

Records = list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]

optional_bytes = st.none() | st.binary(max_size=80)
headers = st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3)
records_strategy = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2**50), optional_bytes, optional_bytes, headers),
    min_size=1,
    max_size=10,
)
codecs = st.sampled_from(list(Compression))
producer = st.one_of(
    st.just((-1, -1, -1)),
    st.tuples(
        st.integers(min_value=0, max_value=INT64_MAX),
        st.integers(min_value=0, max_value=2**15 - 1),
        st.integers(min_value=0, max_value=2**31 - 1000),
    ),
)
COMPAT_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _kafka_python_batch(
    records: Records,
    codec: Compression,
    producer_fields: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    producer_id, producer_epoch, base_sequence = producer_fields
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=MAX_BATCH_BYTES,
    )
    for offset, (timestamp, key, value, hdrs) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, hdrs) is not None
    return bytes(builder.build())


@COMPAT_SETTINGS
@given(records=records_strategy, codec=codecs, producer_fields=producer)
def test_kafka_python_decodes_our_batches_to_the_same_records(
    records: Records, codec: Compression, producer_fields: tuple[int, int, int]
) -> None:
    producer_id, producer_epoch, base_sequence = producer_fields
    ours = build_batch(
        records,
        compression=codec,
        base_offset=1_000,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    theirs = DefaultRecordBatch(bytearray(ours))
    assert theirs.validate_crc()
    assert theirs.compression_type == int(codec)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == producer_fields
    assert theirs.next_offset == 1_000 + len(records)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (1_000 + i, ts, key, value, hdrs) for i, (ts, key, value, hdrs) in enumerate(records)
    ]


@COMPAT_SETTINGS
@given(records=records_strategy, codec=codecs, producer_fields=producer)
def test_we_validate_and_decode_kafka_python_batches_to_the_same_records(
    records: Records, codec: Compression, producer_fields: tuple[int, int, int]
) -> None:
    theirs = _kafka_python_batch(records, codec, producer_fields)
    (header,) = validate_batches(theirs, max_batch_bytes=MAX_BATCH_BYTES)
    # kafka-python sends uncompressed when compressing does not shrink the records.
    assert header.compression in (codec, Compression.NONE)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer_fields
    assert [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in iter_records(theirs)
    ] == [(i, ts, key, value, hdrs) for i, (ts, key, value, hdrs) in enumerate(records)]


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_kafka_python_compressed_batches_really_use_the_codec_and_decode(
    codec: Compression,
) -> None:
    records: Records = [
        (1_000 + i, b"key", b"compressible " * 30, [("n", b"%d" % i)]) for i in range(40)
    ]
    theirs = _kafka_python_batch(records, codec)
    assert read_header(theirs).compression is codec
    if codec is Compression.SNAPPY:
        assert theirs[61:69] == b"\x82SNAPPY\x00"  # kafka-python writes the xerial framing
    assert [(r.key, r.value) for r in iter_records(theirs)] == [(k, v) for _, k, v, _ in records]


@COMPAT_SETTINGS
@given(records=records_strategy, producer_fields=producer)
def test_uncompressed_batches_are_byte_identical_to_kafka_pythons(
    records: Records, producer_fields: tuple[int, int, int]
) -> None:
    producer_id, producer_epoch, base_sequence = producer_fields
    # kafka-python leaves partitionLeaderEpoch 0 where the Java client writes -1.
    ours = build_batch(
        records,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=0,
    )
    assert ours == _kafka_python_batch(records, Compression.NONE, producer_fields)


def test_kafka_python_reads_a_log_of_our_batches_back_to_back() -> None:
    batches = [
        build_batch([(i, b"k", b"v%d" % i, [])], compression=codec, base_offset=i)
        for i, codec in enumerate(Compression)
    ]
    log = MemoryRecords(b"".join(batches))
    seen: list[bytes] = []
    while log.has_next():
        batch = log.next_batch()
        assert batch.validate_crc()
        seen.extend(r.value for r in batch)
    assert seen == [b"v%d" % i for i in range(len(batches))]
