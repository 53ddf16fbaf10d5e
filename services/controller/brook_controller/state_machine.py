"""The replicated state machine: applies committed commands to the metadata image.

It runs on the Raft engine's thread, in log order, on every controller. ``apply`` is
deterministic (its outcome depends only on the command and the state), idempotent (a command
whose request id was already applied is skipped) and never raises: an exception escaping it
would stop the engine's thread and freeze the quorum. Validation happened on the leader before
the command was proposed; here the command's preconditions are only compared with the current
state (see commands.py), and the records applied if they still hold.

What happens here is handed to a ``StateListener`` (the controller's view on the event loop)
from this thread, in order.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from brook.v1 import metadata_pb2
from brook_controller.commands import Command, CommandKind, decode_command, state_digest
from brook_controller.image import ControllerImage
from brook_controller.snapshot import SnapshotContents, read_snapshot, write_snapshot

__all__ = ["ApplyOutcome", "ApplyStatus", "MetadataStateMachine", "StateListener"]

# How many applied request ids are remembered for deduplication. A duplicate can only come
# from the engine re-delivering a command moments later, so a few thousand is plenty; the
# window is part of the replicated state (and of snapshots), so every replica skips the same.
REQUEST_IDS_REMEMBERED: Final = 4096

_log = logging.getLogger(__name__)


class ApplyStatus(enum.Enum):
    APPLIED = "applied"
    NO_OP = "no-op"
    # The same request id was applied before; nothing changed this time.
    DUPLICATE = "duplicate"
    # A precondition no longer holds: the leader must decide again on the current state.
    CONFLICT = "conflict"
    # Proposed in an older term than a command already applied: its proposer was deposed.
    STALE_TERM = "stale-term"
    # Not a command this code understands; refused identically on every replica.
    MALFORMED = "malformed"


@dataclass(frozen=True)
class ApplyOutcome:
    status: ApplyStatus
    offset: int
    """The image's offset after the command."""
    detail: str = ""


class StateListener(Protocol):
    """Told about every change of the image, on the engine's thread, in order."""

    def on_records(self, offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        """``records`` were applied; the last one is at ``offset``."""

    def on_reset(self, image: ControllerImage) -> None:
        """The image was replaced by a snapshot (at start-up, or sent by the leader)."""


class MetadataStateMachine:
    def __init__(self, listener: StateListener) -> None:
        self._listener = listener
        self._image = ControllerImage()
        self._max_term = 0
        self._request_ids: collections.deque[bytes] = collections.deque()
        self._request_id_set: set[bytes] = set()

    @property
    def offset(self) -> int:
        return self._image.offset

    @property
    def max_term(self) -> int:
        return self._max_term

    @property
    def image(self) -> ControllerImage:
        """For tests and snapshots: only the engine's thread may touch it while it runs."""
        return self._image

    def apply(self, data: bytes) -> ApplyOutcome:
        """Applies one committed command. Never raises."""
        try:
            command = decode_command(data)
        except ValueError as error:
            _log.error("refusing a malformed command", extra={"reason": str(error)})
            return ApplyOutcome(ApplyStatus.MALFORMED, self.offset, str(error))
        except Exception as error:  # a defect in decoding must not stop the quorum
            _log.exception("decoding a command failed")
            return ApplyOutcome(ApplyStatus.MALFORMED, self.offset, repr(error))
        try:
            return self._apply(command)
        except Exception as error:
            # Only a defect gets here. Every replica runs the same code on the same state, so
            # every replica fails the same way; the quorum stays alive to be diagnosed.
            _log.exception("applying a command failed", extra={"offset": self.offset})
            return ApplyOutcome(ApplyStatus.MALFORMED, self.offset, repr(error))

    def _apply(self, command: Command) -> ApplyOutcome:
        if command.term < self._max_term:
            return ApplyOutcome(
                ApplyStatus.STALE_TERM,
                self.offset,
                f"proposed in term {command.term}, after a command of term {self._max_term}",
            )
        self._max_term = command.term
        if command.kind is CommandKind.NO_OP:
            return ApplyOutcome(ApplyStatus.NO_OP, self.offset)
        if command.request_id in self._request_id_set:
            return ApplyOutcome(ApplyStatus.DUPLICATE, self.offset)
        for key, expected in command.preconditions.items():
            try:
                current = state_digest(self._image.version(key))
            except ValueError as error:
                return ApplyOutcome(ApplyStatus.MALFORMED, self.offset, str(error))
            if current != expected:
                return ApplyOutcome(ApplyStatus.CONFLICT, self.offset, f"{key} has changed")
        for record in command.records:
            self._image.apply(record)
        self._remember(command.request_id)
        if command.records:
            self._notify_records(command.records)
        return ApplyOutcome(ApplyStatus.APPLIED, self.offset)

    def _remember(self, request_id: bytes) -> None:
        self._request_ids.append(request_id)
        self._request_id_set.add(request_id)
        while len(self._request_ids) > REQUEST_IDS_REMEMBERED:
            self._request_id_set.discard(self._request_ids.popleft())

    def _notify_records(self, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        try:
            self._listener.on_records(self.offset, records)
        except Exception:
            _log.exception("the state listener failed")

    # ------------------------------------------------------------------ snapshots

    def write_snapshot(self, path: Path, engine_data: bytes) -> None:
        """Writes the current state (on the engine's thread, so it is exactly the state after
        the last applied command). Raises on I/O errors: the engine then keeps its log."""
        write_snapshot(
            path,
            SnapshotContents(self._image, self._max_term, tuple(self._request_ids), engine_data),
        )

    def load_snapshot(self, path: Path, scratch_parent: Path) -> bytes:
        """Replaces the state with a snapshot's; returns the engine's data stored with it.
        Raises SnapshotError, leaving the state as it was."""
        contents = read_snapshot(path, scratch_parent)
        self._image = contents.image
        self._max_term = contents.max_term
        self._request_ids = collections.deque(contents.request_ids)
        self._request_id_set = set(contents.request_ids)
        try:
            self._listener.on_reset(
                ControllerImage.from_records(self._image.records(), self.offset)
            )
        except Exception:
            _log.exception("the state listener failed")
        return contents.engine_data
