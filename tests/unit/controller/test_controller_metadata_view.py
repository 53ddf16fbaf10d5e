"""The controller's event-loop view of the committed metadata: when a node counts as
registered (the offset it must catch up to), and the records a watcher resumes from."""

from __future__ import annotations

from brook_controller.metadata_view import MetadataView

from brook.v1 import metadata_pb2


def _broker(epoch: int, fenced: bool = False) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        broker=metadata_pb2.BrokerRecord(node_id=1, broker_epoch=epoch, fenced=fenced)
    )


def _removal(epoch: int) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        remove_broker=metadata_pb2.RemoveBrokerRecord(node_id=1, broker_epoch=epoch)
    )


def test_a_node_is_registered_at_the_record_that_gave_it_its_broker_epoch() -> None:
    view = MetadataView(retained_records_max=100)

    view.append(1, [metadata_pb2.MetadataRecord(), _broker(5)])
    assert view.registration_offset(1) == 1
    view.append(2, [_broker(5, fenced=True)])  # same registration, changed
    assert view.registration_offset(1) == 1
    view.append(3, [_broker(6)])  # registered again
    assert view.registration_offset(1) == 3
    view.append(5, [_removal(6), _broker(6)])  # removed, then registered with the same epoch
    assert view.registration_offset(1) == 5
    assert [offset for offset, _ in view.records_after(2, 10) or []] == [3, 4, 5]
