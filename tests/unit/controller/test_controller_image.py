"""The controller's image: object versions for preconditions, topic families, placement load."""

from __future__ import annotations

import uuid

from brook_controller.image import ControllerImage, topic_family_key

from brook.v1 import metadata_pb2

TOPIC_ID = uuid.UUID(int=1).bytes


def _topic(name: str, topic_id: bytes) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id))


def _partition(index: int, replicas: list[int]) -> metadata_pb2.MetadataRecord:
    return metadata_pb2.MetadataRecord(
        partition=metadata_pb2.PartitionRecord(
            topic_id=TOPIC_ID, topic="t", partition=index, replicas=replicas
        )
    )


def _image(records: list[metadata_pb2.MetadataRecord]) -> ControllerImage:
    image = ControllerImage()
    for record in records:
        image.apply(record)
    return image


def test_object_versions_tell_absent_from_present_and_names_that_collide() -> None:
    image = _image([_topic("t", TOPIC_ID)])

    assert image.version("topic/t") != image.version("topic/u") == b""
    assert image.version(topic_family_key("a.b")) == image.version(topic_family_key("a_b"))
    image.apply(_topic("a_b", uuid.UUID(int=2).bytes))
    assert image.version(topic_family_key("a.b")) == b"a_b"
    assert image.topics_colliding_with("a.b") == ["a_b"]


def test_the_load_follows_partitions_as_they_change_and_go_with_their_topic() -> None:
    image = _image([_topic("t", TOPIC_ID), _partition(0, [1, 2]), _partition(1, [2, 3])])
    image.apply(_partition(0, [3, 1]))

    rebuilt = _image(list(image.records()))
    assert image.load == rebuilt.load
    assert image.load.replicas[2] == 1 and image.load.replicas[3] == 2

    image.apply(
        metadata_pb2.MetadataRecord(
            remove_topic=metadata_pb2.RemoveTopicRecord(topic_id=TOPIC_ID, name="t")
        )
    )
    assert image.load == ControllerImage().load
