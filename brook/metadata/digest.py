"""A digest of the cluster metadata: equal for two copies whose records are equal.

An image digests itself (``MetadataImage.digest``), a controller's snapshots record the digest
to check on load, and tools digest the snapshot a controller streams first on WatchMetadata
(``brook.controller_probe``) to compare controllers from outside.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from brook.v1 import metadata_pb2

__all__ = ["metadata_digest"]


def metadata_digest(records: Iterable[metadata_pb2.MetadataRecord], offset: int) -> str:
    """SHA-256 over the offset and the records (each length-prefixed, deterministic bytes), in
    the order given: equal for two replicas whose images are equal, whatever their history.
    A WatchMetadata snapshot is in canonical order, so a tool can compare controllers by
    digesting what each one streams."""
    digest = hashlib.sha256(offset.to_bytes(8, "big", signed=True))
    for record in records:
        data = record.SerializeToString(deterministic=True)
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return digest.hexdigest()
