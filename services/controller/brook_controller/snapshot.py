"""Snapshots of the metadata state machine: RocksDB table files written and read with rocksdict.

A snapshot is one SST file (RocksDB's sorted, block-checksummed table format), written with
rocksdict's SstFileWriter. One file, because the Raft engine keeps its snapshot as one file and
streams it to a follower that has fallen behind the compacted log. Reading one ingests it into
a scratch RocksDB instance, which checks its block checksums, and reads it back; the image's
digest, stored alongside, is checked once the records are applied.

Keys (sorted, as an SST requires)::

    m/digest       metadata_digest of the image
    m/engine       the Raft engine's own data (opaque here: log position, voters)
    m/format       b"1"
    m/max-term     highest proposer term applied (decimal)
    m/offset       metadata log offset of the image (decimal)
    m/request-ids  the request ids remembered for deduplication, 16 bytes each, oldest first
    r/<u64 index>  the image's records in canonical order
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rocksdict import IngestExternalFileOptions, Options, Rdict, SstFileWriter

from brook.metadata.digest import metadata_digest
from brook.v1 import metadata_pb2
from brook_controller.image import ControllerImage

__all__ = ["SnapshotContents", "SnapshotError", "read_snapshot", "write_snapshot"]

FORMAT: Final = b"1"
_REQUEST_ID_BYTES: Final = 16
_INDEX: Final = struct.Struct(">Q")


class SnapshotError(Exception):
    """A snapshot file cannot be read: missing, corrupt, or of an unknown format."""


@dataclass(frozen=True)
class SnapshotContents:
    image: ControllerImage
    max_term: int
    request_ids: Sequence[bytes]
    engine_data: bytes


def _options() -> Options:
    return Options(raw_mode=True)


def write_snapshot(path: Path, contents: SnapshotContents) -> None:
    """Writes the snapshot to ``path`` (replacing any file there); RocksDB syncs it on finish."""
    image = contents.image
    writer = SstFileWriter(options=_options())
    writer.open(str(path))
    writer[b"m/digest"] = image.digest().encode()
    writer[b"m/engine"] = contents.engine_data
    writer[b"m/format"] = FORMAT
    writer[b"m/max-term"] = str(contents.max_term).encode()
    writer[b"m/offset"] = str(image.offset).encode()
    writer[b"m/request-ids"] = b"".join(contents.request_ids)
    for index, record in enumerate(image.records()):
        writer[b"r/" + _INDEX.pack(index)] = record.SerializeToString(deterministic=True)
    writer.finish()


def read_snapshot(path: Path, scratch_parent: Path) -> SnapshotContents:
    """Reads a snapshot written by ``write_snapshot``. ``scratch_parent`` holds the temporary
    RocksDB instance it is loaded through (removed before returning). Raises SnapshotError."""
    if not path.is_file():
        raise SnapshotError(f"no snapshot file at {path}")
    scratch = Path(tempfile.mkdtemp(prefix="snapshot-load-", dir=scratch_parent))
    try:
        entries = _load_entries(path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _decode(path, entries)


def _load_entries(path: Path, scratch: Path) -> dict[bytes, bytes]:
    db = Rdict(str(scratch / "db"), _options())
    try:
        ingest = IngestExternalFileOptions()
        # Copy, not move: the Raft engine keeps the file to send to lagging followers.
        ingest.set_move_files(False)
        db.ingest_external_file([str(path)], ingest)
        entries: dict[bytes, bytes] = {}
        for key, value in db.items():
            assert isinstance(key, bytes) and isinstance(value, bytes), "raw mode gives bytes"
            entries[key] = value
        return entries
    except SnapshotError:
        raise
    except Exception as error:  # rocksdict raises plain exceptions for corrupt files
        raise SnapshotError(f"snapshot {path} is not a readable RocksDB table: {error}") from None
    finally:
        db.close()


def _decode(path: Path, entries: dict[bytes, bytes]) -> SnapshotContents:
    def meta(name: str) -> bytes:
        value = entries.get(b"m/" + name.encode())
        if value is None:
            raise SnapshotError(f"snapshot {path} lacks m/{name}")
        return value

    if meta("format") != FORMAT:
        raise SnapshotError(f"snapshot {path} has format {meta('format')!r}, not {FORMAT!r}")
    try:
        offset = int(meta("offset"))
        max_term = int(meta("max-term"))
    except ValueError:
        raise SnapshotError(f"snapshot {path} has a malformed offset or term") from None
    ids_blob = meta("request-ids")
    if len(ids_blob) % _REQUEST_ID_BYTES:
        raise SnapshotError(f"snapshot {path} has a malformed request id list")
    request_ids = [
        ids_blob[i : i + _REQUEST_ID_BYTES] for i in range(0, len(ids_blob), _REQUEST_ID_BYTES)
    ]
    records = []
    for key in sorted(k for k in entries if k.startswith(b"r/")):
        record = metadata_pb2.MetadataRecord()
        try:
            record.ParseFromString(entries[key])
        except Exception:  # protobuf's DecodeError
            raise SnapshotError(f"snapshot {path} has a record that does not parse") from None
        records.append(record)
    image = ControllerImage.from_records(records, offset)
    expected = meta("digest").decode(errors="replace")
    if metadata_digest(records, offset) != expected:
        raise SnapshotError(f"snapshot {path} does not match its digest")
    return SnapshotContents(image, max_term, request_ids, meta("engine"))
