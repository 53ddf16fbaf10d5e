"""The cleaner's key -> offset map (Kafka's SkimpyOffsetMap): for each key of the dirty section,
the offset of its last record there.

Keys are stored as their 16-byte MD5 digest (Kafka's choice: a collision, about 2^-64 for a
billion keys, would drop one record of one of the two keys). The map is bounded as Kafka
bounds it: ``dedupe_buffer_bytes`` at 24 bytes per entry (digest and offset), of which the
``load_factor`` share may be used. Python's dict takes more memory than that per entry; the
accounting is Kafka's so that log.cleaner.dedupe.buffer.size means what operators expect.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["BYTES_PER_ENTRY", "OffsetMap", "key_digest"]

DIGEST_BYTES: Final = 16
BYTES_PER_ENTRY: Final = DIGEST_BYTES + 8


def key_digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key digest -> last offset, at most ``capacity`` entries."""

    __slots__ = ("_offsets", "capacity")

    def __init__(self, dedupe_buffer_bytes: int, load_factor: float) -> None:
        if not 0 < load_factor <= 1:
            raise ValueError(f"load factor must be in (0, 1], got {load_factor}")
        self.capacity = int(dedupe_buffer_bytes * load_factor / BYTES_PER_ENTRY)
        if self.capacity < 1:
            raise ValueError(
                f"a dedupe buffer of {dedupe_buffer_bytes} bytes at load factor {load_factor} "
                f"holds no entry ({BYTES_PER_ENTRY} bytes each)"
            )
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def merge(self, entries: dict[bytes, int]) -> bool:
        """Add ``entries`` (the keys of the next segment of the dirty section: their offsets
        are later and win) if they all fit; else change nothing and return False."""
        offsets = self._offsets
        new = sum(1 for digest in entries if digest not in offsets)
        if len(offsets) + new > self.capacity:
            return False
        offsets.update(entries)
        return True

    def get(self, digest: bytes) -> int:
        """The last offset recorded for the key, -1 if none."""
        return self._offsets.get(digest, -1)
