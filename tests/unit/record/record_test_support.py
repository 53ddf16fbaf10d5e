"""Helpers for the record codec tests: re-stamp batch header fields and re-frame payloads.

They are written from the format description (seed 001, 5.3.1), not with the codec's own
internals, so a test that uses them checks the codec against the spec rather than itself.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c

HEADER = struct.Struct(">qiibIHiqqqhii")
FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
)
CRC_START = 21  # the CRC covers attributes .. end of batch
HEADER_BYTES = 61


def header_fields(batch: bytes) -> dict[str, int]:
    return dict(zip(FIELDS, HEADER.unpack_from(batch), strict=True))


def restamp(batch: bytes, *, fix_crc: bool = True, **changes: int) -> bytes:
    """Return ``batch`` with header fields replaced and (unless told not to) a fresh CRC."""
    fields = header_fields(batch)
    unknown = set(changes) - set(fields)
    assert not unknown, unknown
    fields.update(changes)
    out = bytearray(batch)
    HEADER.pack_into(out, 0, *fields.values())
    if fix_crc:
        struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def reframe(batch: bytes, codec_id: int, transform: Callable[[bytes], bytes]) -> bytes:
    """Re-encode an uncompressed batch's records with ``transform`` under codec ``codec_id``.

    Used to produce what other clients write (raw snappy, lz4 with content size, zstd without
    it, multi-member gzip), which our own builder never emits.
    """
    fields = header_fields(batch)
    assert fields["attributes"] & 0x07 == 0, "reframe takes an uncompressed batch"
    payload = transform(batch[HEADER_BYTES:])
    body = batch[:HEADER_BYTES] + payload
    return restamp(
        body,
        attributes=(fields["attributes"] & ~0x07) | codec_id,
        batch_length=len(body) - 12,
    )
