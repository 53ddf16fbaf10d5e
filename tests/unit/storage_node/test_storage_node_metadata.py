"""The node's metadata image, the static.topics bridge that feeds it, and the node settings."""

from __future__ import annotations

import pytest
from brook_storage_node.config import CONFIG_DEF
from brook_storage_node.log.node_config import node_log_config, node_log_manager_config
from brook_storage_node.metadata_source import (
    STATIC_PARTITIONS_MAX,
    StaticMetadataSource,
    parse_static_topics,
    static_topic_id,
)
from brook_storage_node.metadata_view import MetadataView, ReplicaChanges
from storage_node_support import (
    NODE_ID,
    OTHER_NODE_ID,
    broker_record,
    config_record,
    delta,
    partition_record,
    snapshot,
    topic_record,
)

from brook.config import ConfigError, RawSetting
from brook.metadata.delta import MetadataUpdate
from brook.record import BATCH_OVERHEAD, TimestampType
from brook.topic_config import SEGMENT_INDEX_BYTES_MIN
from brook.v1 import common_pb2, metadata_pb2


def _parse(**settings: str) -> object:
    raw = {"node.id": "1", **settings}
    return CONFIG_DEF.parse({k.replace("_", "."): RawSetting(v, "test") for k, v in raw.items()})


def _apply(view: MetadataView, update: MetadataUpdate) -> ReplicaChanges:
    """Applies ``update``; what the replica manager is asked to act on."""
    return view.replica_changes(view.apply(update))


def test_snapshot_builds_the_image_and_reports_every_partition_as_changed() -> None:
    view = MetadataView()
    changes = _apply(
        view,
        snapshot(
            broker_record(NODE_ID, 9101),
            topic_record("orders"),
            partition_record("orders", 0),
            partition_record("orders", 1, leader=OTHER_NODE_ID, replicas=(OTHER_NODE_ID, NODE_ID)),
            config_record("orders", "retention.ms", "1000"),
            offset=7,
        ),
    )

    assert view.offset == 7
    assert {(p.topic, p.partition) for p in changes.changed_partitions} == {
        ("orders", 0),
        ("orders", 1),
    }
    assert changes.changed_topic_configs == frozenset({"orders"})
    assert view.partition("orders", 1) is not None
    assert view.partition("orders", 1).leader == OTHER_NODE_ID  # type: ignore[union-attr]
    assert view.topic_configs("orders") == {"retention.ms": "1000"}
    assert view.broker(NODE_ID) is not None


def test_applying_the_same_records_twice_changes_nothing() -> None:
    view = MetadataView()
    records = (topic_record("orders"), partition_record("orders", 0))
    view.apply(snapshot(*records, offset=1))

    again = _apply(view, delta(*records, offset=2))

    assert again.empty
    assert view.offset == 2


def test_delta_reports_only_what_it_changed() -> None:
    view = MetadataView()
    view.apply(snapshot(topic_record("orders"), partition_record("orders", 0), offset=1))

    changes = _apply(
        view,
        delta(
            partition_record("orders", 0, leader_epoch=1),
            config_record("orders", "a", "b"),
            offset=2,
        ),
    )

    assert [(p.partition, p.leader_epoch) for p in changes.changed_partitions] == [(0, 1)]
    assert changes.changed_topic_configs == frozenset({"orders"})
    assert changes.removed_partitions == ()


def test_removed_topic_and_snapshot_without_a_partition_report_it_removed() -> None:
    view = MetadataView()
    view.apply(
        snapshot(
            topic_record("a"), partition_record("a", 0), topic_record("b"), partition_record("b", 0)
        )
    )

    removed = _apply(
        view,
        delta(
            metadata_pb2.MetadataRecord(
                remove_topic=metadata_pb2.RemoveTopicRecord(name="a", topic_id=b"a".ljust(16, b"-"))
            ),
            offset=3,
        ),
    )
    replaced = _apply(view, snapshot(topic_record("c"), partition_record("c", 0), offset=4))

    assert removed.removed_partitions == (("a", 0),)
    assert view.topic("a") is None
    assert replaced.removed_partitions == (("b", 0),)
    assert [p.topic for p in replaced.changed_partitions] == ["c"]


def test_a_topic_recreated_under_its_name_is_removed_then_changed() -> None:
    view = MetadataView()
    view.apply(snapshot(topic_record("t", b"1" * 16), partition_record("t", 0, topic_id=b"1" * 16)))

    changes = _apply(
        view,
        delta(topic_record("t", b"2" * 16), partition_record("t", 0, topic_id=b"2" * 16), offset=5),
    )

    assert changes.removed_partitions == (("t", 0),)
    assert [p.topic_id for p in changes.changed_partitions] == [b"2" * 16]


def test_unset_config_value_removes_the_override() -> None:
    view = MetadataView()
    view.apply(snapshot(config_record("t", "retention.ms", "5")))

    changes = _apply(view, delta(config_record("t", "retention.ms", None), offset=1))

    assert view.topic_configs("t") == {}
    assert changes.changed_topic_configs == frozenset({"t"})


def test_static_topics_parse_counts_and_topic_configs() -> None:
    topics = parse_static_topics(
        ("orders:6", " events : 3 : retention.ms=1000 : compression.type=lz4")
    )

    assert [(t.name, t.partitions, dict(t.configs)) for t in topics] == [
        ("orders", 6, {}),
        ("events", 3, {"retention.ms": "1000", "compression.type": "lz4"}),
    ]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("orders", "needs a partition count"),
        ("orders:0", "partition count must be 1"),
        (f"orders:{STATIC_PARTITIONS_MAX + 1}", "partition count must be 1"),
        ("orders:x", "partition count must be 1"),
        ("bad/name:1", "may only contain"),
        (":1", "topic name must be 1"),
        ("t:1:retention.ms", "is not config=value"),
        ("t:1:retention.ms=soon", 'retention.ms="soon"'),
        ("t:1:no.such.config=1", "unknown topic config no.such.config"),
        ("t:1:min.insync.replicas=0", "min.insync.replicas"),
        ("t:1:a.b=1:a.b=2", "given twice"),
    ],
)
def test_static_topics_refuses_a_bad_entry_naming_it(entry: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_static_topics((entry,))


def test_static_topics_refuses_a_topic_listed_twice() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        parse_static_topics(("t:1", "t:2"))


def test_a_bad_static_topics_value_stops_the_node_config_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"static\.topics=.*partition count"):
        _parse(**{"static.topics": "orders:0"})


def test_static_source_makes_this_node_sole_leader_at_epoch_0_with_stable_topic_ids() -> None:
    config = _parse(
        **{
            "static.topics": "orders:2:retention.ms=60000",
            "advertised.listeners": "GRPC://node-1.example:9101",
            "listeners": "GRPC://0.0.0.0:9101",
            "broker.rack": "r1",
        }
    )
    view = MetadataView()

    view.apply(StaticMetadataSource.from_config(config).snapshot())

    broker = view.broker(1)
    assert broker is not None
    assert (broker.role, broker.rack) == (common_pb2.NODE_ROLE_STORAGE_NODE, "r1")
    assert [(e.listener, e.host, e.port) for e in broker.endpoints] == [
        ("GRPC", "node-1.example", 9101)
    ]
    partitions = sorted(view.partitions(), key=lambda p: p.partition)
    assert [(p.leader, p.leader_epoch, p.replicas, p.isr) for p in partitions] == [
        (1, 0, (1,), (1,)),
        (1, 0, (1,), (1,)),
    ]
    assert {p.topic_id for p in partitions} == {static_topic_id("orders")}
    assert static_topic_id("orders") == static_topic_id("orders") != static_topic_id("order")
    assert view.topic_configs("orders") == {"retention.ms": "60000"}


@pytest.mark.parametrize(
    ("name", "minimum"),
    [
        ("log.segment.bytes", BATCH_OVERHEAD),
        ("message.max.bytes", BATCH_OVERHEAD),
        ("log.index.size.max.bytes", SEGMENT_INDEX_BYTES_MIN),
    ],
)
def test_node_size_settings_refuse_values_no_log_can_use(name: str, minimum: int) -> None:
    assert _parse(**{name: str(minimum)}).get_int(name) == minimum
    with pytest.raises(ConfigError, match=rf"{name}.*less than the minimum {minimum}"):
        _parse(**{name: str(minimum - 1)})


def test_node_log_settings_reach_the_log_layer_with_kafkas_defaults() -> None:
    defaults = node_log_config(_parse())
    manager = node_log_manager_config(_parse())
    assert (defaults.file_delete_delay_ms, defaults.message_timestamp_type) == (
        60000,
        TimestampType.CREATE_TIME,
    )
    assert defaults.cleanup_policy == frozenset({"delete"})
    assert (manager.background_threads, manager.log_flush_offset_checkpoint_interval_ms) == (
        10,
        60000,
    )

    config = _parse(
        **{
            "log.segment.delete.delay.ms": "5",
            "log.message.timestamp.type": "LogAppendTime",
            "log.message.timestamp.difference.max.ms": "1000",
            "log.cleanup.policy": "compact",
            "background.threads": "2",
            "log.flush.scheduler.interval.ms": "100",
            "log.flush.offset.checkpoint.interval.ms": "200",
            "log.flush.start.offset.checkpoint.interval.ms": "300",
        }
    )
    log_config = node_log_config(config)
    manager = node_log_manager_config(config)
    assert log_config.file_delete_delay_ms == 5
    assert log_config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    assert log_config.message_timestamp_difference_max_ms == 1000
    assert log_config.cleanup_policy == frozenset({"compact"})
    assert (
        manager.background_threads,
        manager.log_flush_scheduler_interval_ms,
        manager.log_flush_offset_checkpoint_interval_ms,
        manager.log_flush_start_offset_checkpoint_interval_ms,
    ) == (2, 100, 200, 300)


def test_in_flight_produce_bytes_must_hold_the_largest_request() -> None:
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes"):
        _parse(**{"queued.max.request.bytes": "1000"})
    config = _parse(
        **{
            "queued.max.request.bytes": "2000",
            "socket.request.max.bytes": "2000",
            "message.max.bytes": "1000",
        }
    )
    assert config.get_int("queued.max.request.bytes") == 2000


def test_a_change_to_fields_the_node_does_not_read_takes_no_partition_up_again() -> None:
    view = MetadataView()
    view.apply(snapshot(topic_record("t"), partition_record("t", 0), offset=1))
    reassigning = partition_record("t", 0)
    reassigning.partition.adding_replicas.append(OTHER_NODE_ID)

    changes = _apply(view, delta(reassigning, offset=2))

    assert changes.empty  # make_leader would reset the pending ISR for nothing
    assert view.image.partition(b"t".ljust(16, b"-"), 0) == reassigning.partition
    assert _apply(
        view, delta(partition_record("t", 0, leader_epoch=1), offset=3)
    ).changed_partitions


def test_a_partition_record_whose_topic_name_is_not_its_ids_is_refused() -> None:
    view = MetadataView()
    view.apply(snapshot(topic_record("t"), offset=1))
    unnamed = partition_record("t", 0)
    unnamed.partition.topic = ""

    changes = _apply(view, delta(unnamed, offset=2))

    assert changes.empty
    assert view.partition("", 0) is None and view.partition("t", 0) is None
    assert view.image.partition(b"t".ljust(16, b"-"), 0) is None
