"""The replicated state machine: deterministic, idempotent, never raising, compare-and-set, and
snapshots that restore it exactly."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from brook_controller.commands import (
    Command,
    CommandKind,
    decode_command,
    encode_command,
    state_digest,
)
from brook_controller.image import ControllerImage, broker_key, topic_name_key
from brook_controller.snapshot import SnapshotError
from brook_controller.state_machine import ApplyStatus, MetadataStateMachine
from hypothesis import given, settings
from hypothesis import strategies as st

from brook.v1 import metadata_pb2


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[metadata_pb2.MetadataRecord]]] = []
        self.resets: list[ControllerImage] = []

    def on_records(self, offset: int, records: Sequence[metadata_pb2.MetadataRecord]) -> None:
        self.batches.append((offset, list(records)))

    def on_reset(self, image: ControllerImage) -> None:
        self.resets.append(image)


def _broker(node_id: int, epoch: int = 1, fenced: bool = True) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(node_id=node_id, broker_epoch=epoch, fenced=fenced)
    )


def _topic(name: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        topic=metadata_pb2.TopicRecord(name=name, topic_id=uuid.uuid4().bytes)
    )


def _command(
    records: Sequence[metadata_pb2.MetadataRecord],
    *,
    term: int = 1,
    preconditions: dict[str, bytes] | None = None,
    request_id: bytes | None = None,
) -> bytes:
    return encode_command(
        Command(
            CommandKind.RECORDS,
            term,
            request_id=request_id or uuid.uuid4().bytes,
            preconditions=preconditions or {},
            records=records,
        )
    )


def test_applied_records_advance_the_offset_and_reach_the_listener_in_order() -> None:
    listener = Recorder()
    machine = MetadataStateMachine(listener)

    first = machine.apply(_command([_broker(1), _broker(2)]))
    second = machine.apply(_command([_topic("t")]))

    assert (first.status, first.offset) == (ApplyStatus.APPLIED, 1)
    assert (second.status, second.offset) == (ApplyStatus.APPLIED, 2)
    assert [offset for offset, _ in listener.batches] == [1, 2]
    assert sorted(machine.image.brokers) == [1, 2]


def test_a_command_applied_twice_changes_the_state_once() -> None:
    machine = MetadataStateMachine(Recorder())
    command = _command([_topic("once")], request_id=b"r" * 16)

    first = machine.apply(command)
    digest = machine.image.digest()
    again = machine.apply(command)

    assert first.status is ApplyStatus.APPLIED
    assert (again.status, again.offset) == (ApplyStatus.DUPLICATE, first.offset)
    assert machine.image.digest() == digest


def test_a_decision_made_on_state_that_has_since_changed_is_refused_and_changes_nothing() -> None:
    machine = MetadataStateMachine(Recorder())
    seen = {broker_key(1): state_digest(machine.image.version(broker_key(1)))}
    machine.apply(_command([_broker(1, epoch=1)]))
    digest = machine.image.digest()

    outcome = machine.apply(_command([_broker(1, epoch=9)], preconditions=seen))

    assert outcome.status is ApplyStatus.CONFLICT and "broker/1" in outcome.detail
    assert machine.image.digest() == digest
    assert machine.image.brokers[1].broker_epoch == 1


def test_a_command_from_a_deposed_leaders_term_is_refused_after_a_newer_terms_command() -> None:
    machine = MetadataStateMachine(Recorder())
    machine.apply(encode_command(Command(CommandKind.NO_OP, term=5)))

    stale = machine.apply(_command([_topic("late")], term=4))
    current = machine.apply(_command([_topic("on-time")], term=5))

    assert stale.status is ApplyStatus.STALE_TERM
    assert current.status is ApplyStatus.APPLIED
    assert list(machine.image.topic_ids) == ["on-time"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_apply_never_raises_on_arbitrary_bytes_and_refuses_what_it_cannot_decode(
    data: bytes,
) -> None:
    machine = MetadataStateMachine(Recorder())

    outcome = machine.apply(data)

    assert outcome.status in set(ApplyStatus)
    if outcome.status is ApplyStatus.MALFORMED:
        assert machine.image.offset == -1


def test_every_truncation_of_a_command_is_refused_as_malformed() -> None:
    data = _command([_broker(1), _topic("t")], preconditions={topic_name_key("t"): b"\0" * 32})
    machine = MetadataStateMachine(Recorder())

    statuses = {machine.apply(data[:cut]).status for cut in range(len(data))}

    assert statuses == {ApplyStatus.MALFORMED}
    assert machine.image.offset == -1
    assert decode_command(data).records[1].topic.name == "t"


def test_a_snapshot_restores_the_image_the_term_and_the_request_ids(tmp_path: Path) -> None:
    original = MetadataStateMachine(Recorder())
    repeated = _command([_topic("kept")], term=3, request_id=b"k" * 16)
    original.apply(_command([_broker(1), _broker(2, fenced=False)], term=3))
    original.apply(repeated)
    path = tmp_path / "snapshot.sst"
    original.write_snapshot(path, b"engine bytes")

    listener = Recorder()
    restored = MetadataStateMachine(listener)
    engine_data = restored.load_snapshot(path, tmp_path)

    assert engine_data == b"engine bytes"
    assert restored.image.digest() == original.image.digest()
    assert restored.max_term == 3
    assert restored.apply(repeated).status is ApplyStatus.DUPLICATE
    assert restored.apply(_command([_topic("old")], term=2)).status is ApplyStatus.STALE_TERM
    assert [image.digest() for image in listener.resets] == [original.image.digest()]
    assert list(tmp_path.iterdir()) == [path], "the scratch database is removed"


@pytest.mark.parametrize("damage", ["truncated", "flipped", "missing", "not-a-table"])
def test_a_damaged_snapshot_is_refused_and_leaves_the_state_as_it_was(
    tmp_path: Path, damage: str
) -> None:
    source = MetadataStateMachine(Recorder())
    source.apply(_command([_topic(f"t{i}") for i in range(50)]))
    path = tmp_path / "snapshot.sst"
    source.write_snapshot(path, b"")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        middle = len(data) // 3
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    elif damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"not a RocksDB table")
    machine = MetadataStateMachine(Recorder())
    machine.apply(_command([_broker(7)]))
    digest = machine.image.digest()

    with pytest.raises(SnapshotError):
        machine.load_snapshot(path, tmp_path)

    assert machine.image.digest() == digest
