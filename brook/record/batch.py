"""The RecordBatch v2 header: parse, validate, CRC-check and patch in place (seed 001, 5.3.1).

This is the server hot path. Nothing here decodes records: a batch is checked by its fixed
61-byte header and its CRC-32C, and the broker's only writes (base offset, partition leader
epoch, log-append time) are patched into the caller's buffer.

Layout (big-endian; byte offsets from the start of the batch)::

     0 baseOffset int64         ─┐ LOG_OVERHEAD (12): the log entry's own framing
     8 batchLength int32        ─┘ batchLength counts the bytes after this field
    12 partitionLeaderEpoch int32   not covered by the CRC: the leader stamps it
    16 magic int8 (2)
    17 crc uint32                   CRC-32C of bytes 21 .. end of batch
    21 attributes int16             bits 0-2 codec, 3 timestamp type, 4 transactional,
                                    5 control, 6 delete horizon
    23 lastOffsetDelta int32
    27 baseTimestamp int64
    35 maxTimestamp int64
    43 producerId int64
    51 producerEpoch int16
    53 baseSequence int32
    57 recordsCount int32
    61 records (compressed as one block when the codec is not none)

Old MessageSets (magic 0 and 1) keep their magic byte at the same offset 16, so one byte
tells the formats apart before anything else is trusted.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from brook.record.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from brook.record.varint import INT32_MAX, INT64_MAX

__all__ = [
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Compression",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordError",
    "RecordTooLargeError",
    "TimestampType",
    "UnsupportedCompressionError",
    "assign_offsets",
    "compression_of",
    "read_header",
    "scan_batches",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "validate_batches",
    "verify_crc",
]

Buffer = bytes | bytearray | memoryview
WritableBuffer = bytearray | memoryview

MAGIC = 2
BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12
# batchLength counts everything after itself, so the smallest legal value is the header
# without the log framing.
BATCH_LENGTH_MIN = BATCH_OVERHEAD - LOG_OVERHEAD

# length, attributes, timestampDelta, offsetDelta, key length, value length and header count
# take at least one byte each.
RECORD_BYTES_MIN = 7

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIHiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_UINT16 = struct.Struct(">H")
assert _HEADER.size == BATCH_OVERHEAD


class Compression(enum.IntEnum):
    """The codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Indexed by codec id: the enum's own lookup is several times slower on the append path.
_CODECS = tuple(Compression)


class TimestampType(enum.IntEnum):
    """Attribute bit 3: whose clock the batch's timestamps come from."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The fixed fields of one v2 batch, as read from the wire (attributes unsigned).

    A named tuple, not a frozen dataclass: every append reads a header several times, and a
    tuple is built in C (a frozen dataclass's ``__init__`` sets 13 fields one by one, about
    2 us of the storage node's ~10 us per appended batch)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, log framing included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises UnsupportedCompressionError for the undefined ids 5-7."""
        return compression_of(self.attributes)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from int32 max to 0, as in Kafka."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)


def compression_of(attributes: int) -> Compression:
    """The codec named by ``attributes``; UnsupportedCompressionError for ids 5-7."""
    codec = attributes & COMPRESSION_MASK
    if codec < len(_CODECS):
        return _CODECS[codec]
    raise UnsupportedCompressionError(
        f"record batch names compression codec id {codec}; Kafka defines 0 (none) to 4 (zstd)"
    )


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the fixed header of the batch at ``buf[pos:]``.

    Checks the magic byte (naming the old MessageSet format when it is 0 or 1), that the
    61 header bytes are present and that batchLength is at least the header's own length.
    It does not check the CRC (``verify_crc``) nor that the whole batch is in ``buf``.
    """
    if pos < 0:
        raise ValueError(f"batch position must be >= 0, got {pos}")
    available = len(buf) - pos
    if available > MAGIC_OFFSET:
        _check_magic(buf[pos + MAGIC_OFFSET], pos)
    if available < BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch at byte {pos} is truncated: its header needs {BATCH_OVERHEAD} "
            f"bytes, only {max(available, 0)} available"
        )
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"record batch at byte {pos} has batchLength {header.batch_length}, less than "
            f"the {BATCH_LENGTH_MIN} bytes of its own header"
        )
    return header


def verify_crc(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Check the batch's CRC-32C (attributes to end of batch); raise CorruptRecordError."""
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"record batch at byte {pos} is truncated: batchLength {header.batch_length} "
            f"needs {header.size} bytes, only {len(buf) - pos} available"
        )
    actual = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at byte {pos} (base offset {header.base_offset}) fails its "
            f"CRC-32C: stored {header.crc:#010x}, computed {actual:#010x}"
        )


def validate_batches(buf: Buffer, *, max_batch_bytes: int) -> list[BatchHeader]:
    """Check that ``buf`` is one or more complete, intact batches fit for appending.

    Every batch must parse, pass its CRC, be at most ``max_batch_bytes`` long, use a known
    codec, hold at least one record with recordsCount == lastOffsetDelta + 1 (producers never
    send compacted batches), claim no more uncompressed records than its bytes can hold and,
    when transactional, carry a producer id. Nothing may follow the last batch. Records are
    never decoded. Returns the headers in order.
    """
    if max_batch_bytes < BATCH_OVERHEAD:
        raise ValueError(
            f"max_batch_bytes must be at least {BATCH_OVERHEAD} (one header), got {max_batch_bytes}"
        )
    total = len(buf)
    if total == 0:
        raise InvalidRecordError("the append holds no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        header = read_header(buf, pos)
        if header.size > max_batch_bytes:
            raise RecordTooLargeError(
                f"record batch at byte {pos} is {header.size} bytes, more than the "
                f"{max_batch_bytes} allowed"
            )
        verify_crc(buf, pos, header)
        _check_append_rules(header, pos)
        headers.append(header)
        pos += header.size
    return headers


def scan_batches(
    buf: Buffer, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in ``buf[pos:end]``.

    Stops quietly at an incomplete tail (a torn write, or a read that ended mid-batch) and
    raises CorruptRecordError when a header is impossible, wrong magic included: in our own
    log that is corruption, whatever a client would have been told. CRCs are not checked.
    """
    if end is None:
        end = len(buf)
    if not 0 <= pos <= end <= len(buf):
        raise ValueError(f"scan range [{pos}, {end}) is outside the buffer of {len(buf)} bytes")
    while end - pos >= LOG_OVERHEAD:
        (batch_length,) = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)
        if batch_length < BATCH_LENGTH_MIN:
            raise CorruptRecordError(
                f"record batch at byte {pos} has batchLength {batch_length}, less than "
                f"the {BATCH_LENGTH_MIN} bytes of its own header"
            )
        if pos + LOG_OVERHEAD + batch_length > end:
            return
        try:
            header = read_header(buf, pos)
        except InvalidRecordError as exc:
            raise CorruptRecordError(f"log data is corrupt: {exc}") from exc
        yield pos, header
        pos += header.size


def assign_offsets(buf: WritableBuffer, pos: int, base_offset: int) -> None:
    """Write ``base_offset`` into the batch at ``pos`` (outside the CRC: no recompute)."""
    _check_patchable(buf, pos)
    (last_offset_delta,) = _INT32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)
    if not 0 <= base_offset <= INT64_MAX - max(last_offset_delta, 0):
        raise ValueError(
            f"base offset {base_offset} is negative or would overflow int64 with "
            f"lastOffsetDelta {last_offset_delta}"
        )
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, pos: int, epoch: int) -> None:
    """Stamp the leader epoch into the batch at ``pos`` (outside the CRC: no recompute)."""
    _check_patchable(buf, pos)
    if not -1 <= epoch <= INT32_MAX:
        raise ValueError(f"partition leader epoch must be in [-1, {INT32_MAX}], got {epoch}")
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: WritableBuffer, pos: int, timestamp_ms: int) -> None:
    """Mark the batch at ``pos`` LOG_APPEND_TIME with max timestamp ``timestamp_ms``.

    Both fields are under the CRC, so the CRC is recomputed; it is verified first, because
    recomputing over damaged bytes would turn a corrupt batch into a valid-looking one.
    """
    if not 0 <= timestamp_ms <= INT64_MAX:
        raise ValueError(f"log append time must be a non-negative int64, got {timestamp_ms}")
    _check_patchable(buf, pos)
    header = read_header(buf, pos)
    verify_crc(buf, pos, header)
    _UINT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + header.size])
    _UINT32.pack_into(buf, pos + CRC_OFFSET, crc)


def _check_magic(magic: int, pos: int) -> None:
    if magic == MAGIC:
        return
    if magic in (0, 1):
        raise InvalidRecordError(
            f"record batch at byte {pos} is an old-format MessageSet (magic v{magic}, Kafka "
            f"before 0.11); only RecordBatch v2 (magic 2) is accepted: upgrade the client or "
            f"set its message format / api version to 0.11 or later"
        )
    raise InvalidRecordError(
        f"record batch at byte {pos} has unknown magic {magic}; only magic 2 is accepted"
    )


def _check_append_rules(header: BatchHeader, pos: int) -> None:
    compression_of(header.attributes)
    if header.records_count < 1:
        raise InvalidRecordError(
            f"record batch at byte {pos} has recordsCount {header.records_count}; an append "
            f"needs at least one record"
        )
    if header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch at byte {pos} has recordsCount {header.records_count} but "
            f"lastOffsetDelta {header.last_offset_delta}; a producer's batch has one record "
            f"per offset"
        )
    records_bytes = header.batch_length - BATCH_LENGTH_MIN
    if (
        header.attributes & COMPRESSION_MASK == Compression.NONE
        and header.records_count * RECORD_BYTES_MIN > records_bytes
    ):
        # Without decoding, this is the one check that catches a count the bytes cannot hold;
        # trusting it would let a client advance the log end offset by up to 2^31 for free.
        raise CorruptRecordError(
            f"record batch at byte {pos} claims {header.records_count} records in "
            f"{records_bytes} bytes; an uncompressed record takes at least {RECORD_BYTES_MIN}"
        )
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecordError(
            f"record batch at byte {pos} is transactional but has no producer id "
            f"(producerId {header.producer_id})"
        )


def _check_patchable(buf: WritableBuffer, pos: int) -> None:
    # The patchers write blind into a caller's buffer; these asserts catch a wrong position
    # before it damages a neighbouring batch.
    if pos < 0 or pos + BATCH_OVERHEAD > len(buf):
        raise ValueError(f"no complete batch header at byte {pos} of a {len(buf)}-byte buffer")
    if buf[pos + MAGIC_OFFSET] != MAGIC:
        raise InvalidRecordError(
            f"byte {pos} does not start a v2 record batch (magic {buf[pos + MAGIC_OFFSET]})"
        )
