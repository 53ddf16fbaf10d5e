"""The shared metadata image: upserts, removals, its canonical records and its digest."""

from __future__ import annotations

import uuid

from brook.metadata.delta import MetadataUpdate
from brook.metadata.digest import metadata_digest
from brook.metadata.image import TOPIC, MetadataImage
from brook.v1 import metadata_pb2

TOPIC_ID = uuid.UUID(int=1).bytes


def _records() -> list[metadata_pb2.MetadataRecord]:
    return [
        metadata_pb2.MetadataRecord(cluster=metadata_pb2.ClusterRecord(cluster_id="c")),
        metadata_pb2.MetadataRecord(broker=metadata_pb2.BrokerRecord(node_id=2, broker_epoch=3)),
        metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name="t", topic_id=TOPIC_ID)),
        metadata_pb2.MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                topic_id=TOPIC_ID, topic="t", partition=0, replicas=[2], isr=[2], leader=2
            )
        ),
        metadata_pb2.MetadataRecord(
            config=metadata_pb2.ConfigRecord(
                resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC,
                resource_name="t",
                name="retention.ms",
                value="5",
            )
        ),
        metadata_pb2.MetadataRecord(
            coordinator=metadata_pb2.CoordinatorRecord(offsets_partition=0, coordinator_id=2001)
        ),
    ]


def _security_records() -> list[metadata_pb2.MetadataRecord]:
    return [
        _scram("alice"),
        _acl(b"\x01" * 16),
        _quota("producer_byte_rate", 1e6, ("user", "alice"), ("client-id", None)),
    ]


def _scram(name: str) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        user_scram_credential=metadata_pb2.UserScramCredentialRecord(
            name=name,
            mechanism=metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512,
            salt=b"salt",
            stored_key=b"stored",
            server_key=b"server",
            iterations=4096,
        )
    )


def _acl(acl_id: bytes, resource: str = "orders-") -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        access_control_entry=metadata_pb2.AccessControlEntryRecord(
            id=acl_id,
            resource_type=metadata_pb2.ACL_RESOURCE_TYPE_TOPIC,
            resource_name=resource,
            pattern_type=metadata_pb2.ACL_PATTERN_TYPE_PREFIXED,
            principal="User:alice",
            host="*",
            operation=metadata_pb2.ACL_OPERATION_WRITE,
            permission_type=metadata_pb2.ACL_PERMISSION_TYPE_ALLOW,
        )
    )


def _quota(
    key: str, value: float | None, *entity: tuple[str, str | None]
) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        client_quota=metadata_pb2.ClientQuotaRecord(
            entity=[
                metadata_pb2.ClientQuotaEntityPart(entity_type=kind, entity_name=name)
                for kind, name in entity
            ],
            key=key,
            value=value,
        )
    )


def _image(records: list[metadata_pb2.MetadataRecord]) -> MetadataImage:
    image = MetadataImage()
    for record in records:
        image.apply(record)
    return image


def test_applying_every_record_twice_gives_the_same_image_except_for_the_offset() -> None:
    once = _image(_records())
    twice = _image([record for record in _records() for _ in range(2)])

    assert list(twice.records()) == list(once.records())
    assert (once.offset, twice.offset) == (5, 11)


def test_the_image_rebuilt_from_its_own_records_has_the_same_digest() -> None:
    image = _image(_records())

    rebuilt = MetadataImage.from_records(image.records(), image.offset)

    assert rebuilt.digest() == image.digest()
    assert rebuilt.digest() == metadata_digest(list(image.records()), image.offset)


def test_any_change_or_a_different_offset_changes_the_digest() -> None:
    image = _image(_records())
    digest = image.digest()
    moved = _image(_records())
    moved.apply(
        metadata_pb2.MetadataRecord(broker=metadata_pb2.BrokerRecord(node_id=2, broker_epoch=4))
    )

    assert moved.digest() != digest
    assert metadata_digest(list(image.records()), image.offset + 1) != digest


def test_removing_a_topic_removes_its_partitions_and_configs_and_later_partitions_are_ignored() -> (
    None
):
    image = _image(_records())

    image.apply(
        metadata_pb2.MetadataRecord(
            remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=TOPIC_ID, name="t")
        )
    )
    image.apply(_records()[3])

    assert image.topics == {} and image.partitions == {} and image.topic_ids == {}
    assert (TOPIC, "t") not in image.configs
    assert image.offset == 7


def test_unsetting_a_config_value_removes_the_override() -> None:
    image = _image(_records())

    image.apply(
        metadata_pb2.MetadataRecord(
            config=metadata_pb2.ConfigRecord(
                resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_TOPIC,
                resource_name="t",
                name="retention.ms",
            )
        )
    )

    assert image.resource_configs(TOPIC, "t") == {}


def test_security_records_are_upserted_removed_and_reported_as_a_security_change() -> None:
    image = _image(_records() + _security_records())
    rebuilt = MetadataImage.from_records(image.records(), image.offset)
    assert rebuilt == image and rebuilt.digest() == image.digest()
    assert (
        image.scram_credentials[("alice", metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512)].iterations
        == 4096
    )
    assert image.acls[b"\x01" * 16].resource_name == "orders-"
    assert image.client_quotas == {
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 1e6}
    }

    same = MetadataUpdate(snapshot=False, offset=image.offset + 1, records=(_acl(b"\x01" * 16),))
    assert not image.replay(same).security_changed
    removals = (
        metadata_pb2.MetadataRecord(
            remove_user_scram_credential=metadata_pb2.RemoveUserScramCredentialRecord(
                name="alice", mechanism=metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512
            )
        ),
        metadata_pb2.MetadataRecord(
            remove_access_control_entry=metadata_pb2.RemoveAccessControlEntryRecord(id=b"\x01" * 16)
        ),
        _quota("producer_byte_rate", None, ("client-id", None), ("user", "alice")),
    )
    delta = image.replay(MetadataUpdate(snapshot=False, offset=image.offset + 3, records=removals))
    assert delta.security_changed
    assert not image.scram_credentials and not image.acls and not image.client_quotas


def test_a_snapshot_that_changes_only_an_acl_reports_a_security_change() -> None:
    image = _image(_records() + _security_records())
    scram, _, quota = _security_records()
    records = [*_records(), scram, _acl(b"\x01" * 16, resource="payments-"), quota]
    delta = image.replay(MetadataUpdate(snapshot=True, offset=image.offset, records=tuple(records)))
    assert delta.security_changed and not delta.changed_topics
    assert image.acls[b"\x01" * 16].resource_name == "payments-"
