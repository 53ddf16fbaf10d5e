"""Checkpoint files: small text files replaced atomically (write temp, fsync, rename, fsync dir).

Kafka's format, so an operator can read them: a version line, a count line, then one entry a
line. A crash at any moment leaves either the old file or the new one, never a mix; a stale
``.tmp`` beside it is harmless and overwritten by the next write.

Per data directory (one file for all its partitions, written by the log manager):
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (high watermarks). Per partition: ``leader-epoch-checkpoint``
(see leader_epoch.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final, Generic, TypeVar

from brook_storage_node.log.errors import LogStorageError
from brook_storage_node.log.files import write_atomically
from brook_storage_node.log.topic_partition import TopicPartition

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT: Final = "replication-offset-checkpoint"
TEMP_SUFFIX: Final = ".tmp"
# A checkpoint names every partition of a data directory; this bounds what a reader accepts.
CHECKPOINT_BYTES_MAX: Final = 64 * 1024 * 1024

T = TypeVar("T")


class CheckpointFileError(LogStorageError):
    """A checkpoint file exists but cannot be read or parsed."""


class CheckpointFile(Generic[T]):
    """One checkpoint file holding entries of type ``T``, each formatted as one line."""

    def __init__(
        self,
        path: Path,
        version: int,
        format_entry: Callable[[T], str],
        parse_entry: Callable[[str], T],
    ) -> None:
        self.path = path
        self._version = version
        self._format_entry = format_entry
        self._parse_entry = parse_entry

    def write(self, entries: Iterable[T]) -> None:
        """Replace the file with ``entries``; afterwards they survive a crash or power loss."""
        lines = [self._format_entry(entry) for entry in entries]
        text = f"{self._version}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
        data = text.encode("ascii")
        try:
            write_atomically(self.path, data, TEMP_SUFFIX)
        except OSError as exc:
            raise LogStorageError(f"cannot write checkpoint {self.path}: {exc}") from exc

    def read(self) -> list[T]:
        """The entries, or [] if the file does not exist; CheckpointFileError if it is damaged."""
        try:
            with open(self.path, "rb") as file:
                data = file.read(CHECKPOINT_BYTES_MAX + 1)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CheckpointFileError(f"cannot read checkpoint {self.path}: {exc}") from exc
        if len(data) > CHECKPOINT_BYTES_MAX:
            raise CheckpointFileError(
                f"checkpoint {self.path} is over {CHECKPOINT_BYTES_MAX} bytes"
            )
        try:
            lines = data.decode("ascii").split("\n")
        except UnicodeDecodeError as exc:
            raise CheckpointFileError(f"checkpoint {self.path} is not ASCII text") from exc
        if len(lines) < 3 or lines[-1] != "":
            raise CheckpointFileError(f"checkpoint {self.path} is incomplete")
        version, count, body = lines[0], lines[1], lines[2:-1]
        if version != str(self._version):
            raise CheckpointFileError(
                f"checkpoint {self.path} has version {version!r}; this node writes {self._version}"
            )
        if count != str(len(body)):
            raise CheckpointFileError(
                f"checkpoint {self.path} announces {count!r} entries and holds {len(body)}"
            )
        entries = []
        for number, line in enumerate(body, start=3):
            try:
                entries.append(self._parse_entry(line))
            except ValueError as exc:
                raise CheckpointFileError(f"{self.path}:{number}: {exc}") from exc
        return entries


def parse_non_negative(text: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{what} {text!r} is not a non-negative integer")
    return int(text)


def _format_offset(entry: tuple[TopicPartition, int]) -> str:
    tp, offset = entry
    return f"{tp.topic} {tp.partition} {offset}"


def _parse_offset(line: str) -> tuple[TopicPartition, int]:
    fields = line.split(" ")
    if len(fields) != 3:
        raise ValueError(f"expected 'topic partition offset', got {line!r}")
    topic, partition, offset = fields
    tp = TopicPartition.from_dir_name(f"{topic}-{parse_non_negative(partition, 'partition')}")
    return tp, parse_non_negative(offset, "offset")


class OffsetCheckpointFile:
    """A data directory's offsets by partition (recovery points, log starts, high watermarks)."""

    VERSION: Final = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            path, self.VERSION, _format_offset, _parse_offset
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())
