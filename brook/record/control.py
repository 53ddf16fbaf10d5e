"""Control batches: the transaction markers a coordinator writes (seed 001, 5.3.1.1).

A control batch has attribute bit 5 set and holds one control record. Its key is
``version int16, type int16`` (ABORT = 0, COMMIT = 1); for those two types the value is
Kafka's EndTransactionMarker, ``version int16, coordinatorEpoch int32``. Consumers use the
markers to drop aborted transactional records and never hand control records to applications.
"""

from __future__ import annotations

import enum
import struct

from brook.record.batch import Compression
from brook.record.errors import InvalidRecordError
from brook.record.records import BatchBuilder, Record

__all__ = [
    "CONTROL_KEY_VERSION",
    "END_TXN_MARKER_VERSION",
    "ControlType",
    "build_control_batch",
    "control_type_of",
    "decode_control_record",
]

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """The control record types a transactional consumer acts on."""

    ABORT = 0
    COMMIT = 1


def decode_control_record(record: Record) -> tuple[ControlType, int, int]:
    """Return ``(type, key version, coordinator epoch)`` of a transaction marker record.

    Newer key or value versions may append fields; as Kafka's readers do, only the leading
    fields this version knows are read. Raises InvalidRecordError for a short or null key or
    value, a negative version, or a control type other than ABORT / COMMIT.
    """
    if record.key is None or len(record.key) < _KEY.size:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has a key of "
            f"{_length(record.key)} bytes; it needs {_KEY.size} (version, type)"
        )
    version, raw_type = _KEY.unpack_from(record.key)
    if version < 0:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has negative key version {version}"
        )
    try:
        control_type = ControlType(raw_type)
    except ValueError:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has type {raw_type}; only "
            f"ABORT (0) and COMMIT (1) are transaction markers"
        ) from None
    if record.value is None or len(record.value) < _END_TXN_MARKER.size:
        raise InvalidRecordError(
            f"transaction marker at offset {record.offset} has a value of "
            f"{_length(record.value)} bytes; it needs {_END_TXN_MARKER.size} "
            f"(version, coordinator epoch)"
        )
    marker_version, coordinator_epoch = _END_TXN_MARKER.unpack_from(record.value)
    if marker_version < 0:
        raise InvalidRecordError(
            f"transaction marker at offset {record.offset} has negative version {marker_version}"
        )
    return control_type, version, coordinator_epoch


def control_type_of(key: bytes | None) -> ControlType | None:
    """The marker type a control record's ``key`` names, None for a key that names none (too
    short, or another control type): a consumer skips such a record, as Kafka's does."""
    if key is None or len(key) < _KEY.size:
        return None
    _, raw_type = _KEY.unpack_from(key)
    try:
        return ControlType(raw_type)
    except ValueError:
        return None


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a transaction marker batch (transactional + control, one record, uncompressed)."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(
            f"a transaction marker needs a producer id and epoch >= 0, got "
            f"{producer_id} / {producer_epoch}"
        )
    builder = BatchBuilder(
        Compression.NONE,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        partition_leader_epoch=partition_leader_epoch,
        is_control=True,
    )
    key = _KEY.pack(CONTROL_KEY_VERSION, ControlType(control_type))
    value = _END_TXN_MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    builder.append(timestamp_ms, key, value)
    return builder.build(base_offset)


def _length(data: bytes | None) -> str:
    return "null" if data is None else str(len(data))
