"""Kafka RecordBatch v2: the bytes Brook stores, replicates and serves (seed 001, 5.3).

``batch`` is the server's hot path (header, CRC-32C, in-place patches); ``records`` decodes
and builds batches for the SDK and tests; ``compression`` holds the five codecs; ``control``
the transaction markers.
"""

from brook.record.batch import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    TimestampType,
    assign_offsets,
    read_header,
    scan_batches,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batches,
    verify_crc,
)
from brook.record.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from brook.record.control import ControlType, build_control_batch, decode_control_record
from brook.record.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from brook.record.records import (
    BatchBuilder,
    Record,
    RecordFields,
    build_batch,
    decode_records,
    iter_records,
)

__all__ = [
    "BATCH_OVERHEAD",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordError",
    "RecordFields",
    "RecordTooLargeError",
    "TimestampType",
    "UnsupportedCompressionError",
    "assign_offsets",
    "build_batch",
    "build_control_batch",
    "decode_control_record",
    "decode_records",
    "iter_records",
    "read_header",
    "scan_batches",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "validate_batches",
    "verify_crc",
]
