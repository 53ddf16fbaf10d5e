"""What ``MetadataImage.replay`` reports as changed (delta.py), what it refuses, and that the
typed reads a ``MetadataCache`` refreshes from each delta equal those rebuilt from the image."""

from __future__ import annotations

import logging
import random
from types import MappingProxyType
from typing import Any

import metadata_support as md
import pytest

from brook.metadata.cache import MetadataCache
from brook.metadata.delta import MetadataDelta, MetadataUpdate
from brook.metadata.image import TOPIC, MetadataImage
from brook.v1 import common_pb2

A, A2, B = b"a".ljust(16, b"-"), b"a2".ljust(16, b"-"), b"b".ljust(16, b"-")


def _snapshot(*records: md.Record, offset: int = 10) -> MetadataUpdate:
    return MetadataUpdate(True, offset, records)


def _delta(*records: md.Record, offset: int = 20) -> MetadataUpdate:
    return MetadataUpdate(False, offset, records)


def _loaded() -> MetadataImage:
    image = MetadataImage()
    image.replay(
        _snapshot(
            md.broker(1, 5),
            md.broker(2001, 6, common_pb2.NODE_ROLE_GROUP_COORDINATOR),
            md.topic("a", A),
            md.partition("a", A, 0, [1]),
            md.partition("a", A, 1, [1]),
            md.coordinator(0, 2001, 1),
            md.coordinator(1, 2001, 1),
        )
    )
    return image


def test_a_partition_changed_then_removed_in_one_delta_is_only_removed() -> None:
    image = _loaded()
    before = image.partition(A, 0)

    delta = image.replay(_delta(md.partition("a", A, 0, [1], epoch=4), md.remove_topic("a", A)))

    assert delta.changed_partitions == {} and delta.changed_topics == {}
    assert set(delta.removed_partitions) == {(A, 0), (A, 1)}
    assert delta.removed_partitions[(A, 0)].leader_epoch == 4  # its last record
    assert delta.previous_partitions[(A, 0)] == before  # what the image held before
    assert set(delta.removed_topics) == {A}
    assert delta.changed_configs == set()  # "a" had none


def test_a_broker_removed_then_registered_again_in_one_delta_is_changed() -> None:
    image = _loaded()
    before = image.brokers[1]

    delta = image.replay(_delta(md.remove_broker(1, 5), md.broker(1, 7)))

    assert delta.removed_brokers == {}
    assert delta.changed_brokers[1].broker_epoch == 7
    assert delta.previous_brokers == {1: before}


def test_a_broker_and_a_partition_new_in_a_delta_had_no_previous_record() -> None:
    delta = _loaded().replay(_delta(md.broker(3, 1), md.broker(3, 2), md.partition("a", A, 2, [1])))

    assert delta.previous_brokers == {3: None}
    assert delta.previous_partitions == {(A, 2): None}


def test_a_snapshot_reports_what_it_removed_including_coordinators() -> None:
    image = _loaded()

    delta = image.replay(
        _snapshot(
            md.broker(1, 5), md.topic("b", B), md.partition("b", B, 0, [1]), md.coordinator(0, 1, 2)
        )
    )

    assert delta.snapshot
    assert set(delta.removed_brokers) == {2001}
    assert set(delta.removed_topics) == {A}
    assert set(delta.removed_partitions) == {(A, 0), (A, 1)}
    assert set(delta.removed_coordinators) == {1}
    assert delta.changed_coordinators[0].coordinator_id == 1
    assert set(delta.changed_brokers) == set()  # broker 1 is as it was
    assert set(delta.changed_partitions) == {(B, 0)}
    assert not delta.empty


def test_a_snapshot_replayed_without_comparing_only_says_it_is_a_snapshot() -> None:
    image, compared = _loaded(), _loaded()
    update = _snapshot(md.broker(1, 5), md.topic("b", B), md.partition("b", B, 0, [1]))

    delta = image.replay(update, compare=False)

    assert delta == MetadataDelta(snapshot=True)
    compared.replay(update)
    assert image.digest() == compared.digest()


@pytest.mark.parametrize("name", ["", "b"])
def test_a_partition_record_naming_another_topic_is_refused(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    image = _loaded()
    digest_before = _loaded().digest()

    with caplog.at_level(logging.ERROR, "brook.metadata.image"):
        delta = image.replay(
            _delta(md.partition(name, A, 0, [2], epoch=9), offset=image.offset + 1)
        )

    assert delta.empty
    assert image.partition(A, 0) == _loaded().partition(A, 0)
    assert image.digest() != digest_before  # the offset moved on; nothing else did
    assert list(image.records()) == list(_loaded().records())
    assert "metadata invariant violated" in caplog.text


def test_a_topic_removal_naming_another_topic_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    image = _loaded()

    with caplog.at_level(logging.ERROR, "brook.metadata.image"):
        delta = image.replay(_delta(md.remove_topic("b", A)))

    assert delta.empty
    assert image.topic_by_name("a") is not None
    assert "metadata invariant violated" in caplog.text


def test_cached_reads_are_read_only_and_configs_once_read_do_not_change() -> None:
    cache = MetadataCache()
    cache.replay(
        _snapshot(md.topic("a", A), md.partition("a", A, 0, [1]), md.config(TOPIC, "a", "x", "1"))
    )
    configs = cache.topic_configs("a")
    info = cache.topic("a")
    assert info is not None

    cache.replay(_delta(md.config(TOPIC, "a", "x", "2"), md.config(TOPIC, "a", "y", "3")))

    assert configs == {"x": "1"}
    assert cache.topic_configs("a") == {"x": "2", "y": "3"}
    assert isinstance(cache.topic_configs("a"), MappingProxyType)
    assert isinstance(info.partitions, MappingProxyType)
    assert cache.image.configs[(TOPIC, "a")] == {"x": "2", "y": "3"}


# -- property: the refreshed cache equals the rebuilt one after every delta --------------------

_TOPICS = [("a", A), ("a", A2), ("b", B)]  # ("a", A2): "a" re-created under a new id


def _random_record(rng: random.Random, epochs: dict[int, int]) -> md.Record:
    kind = rng.randrange(8)
    node_id = rng.choice([1, 2, 3, 2001])
    if kind == 0:
        role = (
            common_pb2.NODE_ROLE_GROUP_COORDINATOR
            if node_id == 2001
            else common_pb2.NODE_ROLE_STORAGE_NODE
        )
        epochs[node_id] = epochs.get(node_id, 0) + rng.randrange(2)
        return md.broker(node_id, epochs[node_id], role, fenced=rng.random() < 0.3)
    if kind == 1:
        return md.remove_broker(node_id, epochs.get(node_id, 0) - rng.randrange(2))
    name, topic_id = rng.choice(_TOPICS)
    if kind == 2:
        return md.topic(name, topic_id)
    if kind == 3:
        return md.remove_topic(name, topic_id)
    if kind == 4:
        return md.config(TOPIC, name, rng.choice(["x", "y"]), rng.choice(["1", "2", None]))
    if kind == 5:
        return md.coordinator(rng.randrange(3), node_id, rng.randrange(3))
    replicas = rng.sample([1, 2, 3], rng.randrange(1, 4))
    return md.partition(
        name,
        topic_id,
        rng.randrange(3),
        replicas,
        epoch=rng.randrange(3),
        adding_replicas=rng.sample([1, 2, 3], rng.randrange(2)),
    )


def _cache_state(cache: MetadataCache) -> dict[str, Any]:
    topics = {
        name: (info.topic_id, info.internal, dict(info.partitions))
        for name, info in cache.topics.items()
    }
    for name, info in cache.topics.items():
        assert cache.topic_by_id(info.topic_id) is info
        for index, p in info.partitions.items():
            assert cache.partition(name, index) is p and p.topic == name
    return {
        "brokers": dict(cache.brokers),
        "topics": topics,
        "configs": {name: dict(cache.topic_configs(name)) for name in ("a", "b")},
    }


def _image_state(image: MetadataImage) -> dict[str, Any]:
    return {
        "brokers": dict(image.brokers),
        "partitions": {
            (p.topic_id, p.partition): p for ps in image.partitions.values() for p in ps.values()
        },
    }


@pytest.mark.parametrize("seed", range(5))
def test_after_each_delta_the_refreshed_cache_equals_one_rebuilt_from_the_image(
    seed: int,
) -> None:
    rng = random.Random(seed)
    epochs: dict[int, int] = {}
    cache = MetadataCache()
    cache.replay(_snapshot(offset=0))
    for offset in range(1, 300):
        records = tuple(_random_record(rng, epochs) for _ in range(rng.randrange(1, 8)))
        before = {k: _copy_all(v) for k, v in _image_state(cache.image).items()}

        delta = cache.replay(MetadataUpdate(False, offset, records))

        rebuilt = MetadataCache()
        rebuilt.replay(_snapshot(*cache.image.records(), offset=offset))
        assert _cache_state(cache) == _cache_state(rebuilt), f"seed {seed}, offset {offset}"
        after = _image_state(cache.image)
        for key in delta.changed_partitions.keys() | delta.removed_partitions.keys():
            assert delta.previous_partitions[key] == before["partitions"].get(key)
            assert after["partitions"].get(key) == delta.changed_partitions.get(key)
        for node_id in delta.changed_brokers.keys() | delta.removed_brokers.keys():
            assert delta.previous_brokers[node_id] == before["brokers"].get(node_id)
            assert after["brokers"].get(node_id) == delta.changed_brokers.get(node_id)
        touched = delta.changed_partitions.keys() | delta.removed_partitions.keys()
        for key in before["partitions"].keys() | after["partitions"].keys():
            if key not in touched:
                assert before["partitions"].get(key) == after["partitions"].get(key)


def _copy_all(records: dict[Any, Any]) -> dict[Any, Any]:
    copied = {}
    for key, record in records.items():
        copied[key] = type(record)()
        copied[key].CopyFrom(record)
    return copied
