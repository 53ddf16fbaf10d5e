"""Kafka's request and response schemas as Brook message specs. GENERATED: do not edit.

Written by tools/gen_kafka_protocol.py from the message schemas of Apache Kafka (Apache
License 2.0; ../shared/kafka-protocol/README.md names the commit). Regenerate with
`python tools/gen_kafka_protocol.py`.
"""

from __future__ import annotations

import enum
from typing import Final

from brook_gateway.protocol.schema import HI, NEVER, MessageSpec
from brook_gateway.protocol.schema import FieldSpec as F

__all__ = ["REQUESTS", "REQUEST_HEADER", "RESPONSES", "RESPONSE_HEADER", "ApiKey"]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


REQUEST_HEADER: Final = MessageSpec(
    "RequestHeader",
    None,
    (0, 2),
    (2, HI),
    (
        F("request_api_key", "int16", (0, HI)),
        F("request_api_version", "int16", (0, HI)),
        F("correlation_id", "int32", (0, HI)),
        F("client_id", "string", (1, HI), nullable=(1, HI), flexible=NEVER),
    ),
)


RESPONSE_HEADER: Final = MessageSpec(
    "ResponseHeader",
    None,
    (0, 1),
    (1, HI),
    (F("correlation_id", "int32", (0, HI)),),
)


PRODUCE_REQUEST: Final = MessageSpec(
    "ProduceRequest",
    0,
    (0, 11),
    (9, HI),
    (
        F("transactional_id", "string", (3, HI), nullable=(3, HI), null_default=True),
        F("acks", "int16", (0, HI)),
        F("timeout_ms", "int32", (0, HI)),
        F(
            "topic_data",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partition_data",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("index", "int32", (0, HI)),
                        F("records", "records", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


PRODUCE_RESPONSE: Final = MessageSpec(
    "ProduceResponse",
    0,
    (0, 11),
    (9, HI),
    (
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partition_responses",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                        F("base_offset", "int64", (0, HI)),
                        F("log_append_time_ms", "int64", (2, HI), default=-1),
                        F("log_start_offset", "int64", (5, HI), default=-1),
                        F(
                            "record_errors",
                            "struct",
                            (8, HI),
                            array=True,
                            fields=(
                                F("batch_index", "int32", (8, HI)),
                                F(
                                    "batch_index_error_message",
                                    "string",
                                    (8, HI),
                                    nullable=(8, HI),
                                    null_default=True,
                                ),
                            ),
                        ),
                        F("error_message", "string", (8, HI), nullable=(8, HI), null_default=True),
                        F(
                            "current_leader",
                            "struct",
                            (10, HI),
                            tag=0,
                            tagged=(10, HI),
                            fields=(
                                F("leader_id", "int32", (10, HI), default=-1),
                                F("leader_epoch", "int32", (10, HI), default=-1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        F("throttle_time_ms", "int32", (1, HI)),
        F(
            "node_endpoints",
            "struct",
            (10, HI),
            array=True,
            tag=0,
            tagged=(10, HI),
            fields=(
                F("node_id", "int32", (10, HI)),
                F("host", "string", (10, HI)),
                F("port", "int32", (10, HI)),
                F("rack", "string", (10, HI), nullable=(10, HI), null_default=True),
            ),
        ),
    ),
)


FETCH_REQUEST: Final = MessageSpec(
    "FetchRequest",
    1,
    (0, 17),
    (12, HI),
    (
        F(
            "cluster_id",
            "string",
            (12, HI),
            nullable=(12, HI),
            tag=0,
            tagged=(12, HI),
            null_default=True,
        ),
        F("replica_id", "int32", (0, 14), default=-1),
        F(
            "replica_state",
            "struct",
            (15, HI),
            tag=1,
            tagged=(15, HI),
            fields=(
                F("replica_id", "int32", (15, HI), default=-1),
                F("replica_epoch", "int64", (15, HI), default=-1),
            ),
        ),
        F("max_wait_ms", "int32", (0, HI)),
        F("min_bytes", "int32", (0, HI)),
        F("max_bytes", "int32", (3, HI), default=2147483647),
        F("isolation_level", "int8", (4, HI)),
        F("session_id", "int32", (7, HI)),
        F("session_epoch", "int32", (7, HI), default=-1),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("topic", "string", (0, 12)),
                F("topic_id", "uuid", (13, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition", "int32", (0, HI)),
                        F("current_leader_epoch", "int32", (9, HI), default=-1),
                        F("fetch_offset", "int64", (0, HI)),
                        F("last_fetched_epoch", "int32", (12, HI), default=-1),
                        F("log_start_offset", "int64", (5, HI), default=-1),
                        F("partition_max_bytes", "int32", (0, HI)),
                        F("replica_directory_id", "uuid", (17, HI), tag=0, tagged=(17, HI)),
                    ),
                ),
            ),
        ),
        F(
            "forgotten_topics_data",
            "struct",
            (7, HI),
            array=True,
            fields=(
                F("topic", "string", (7, 12)),
                F("topic_id", "uuid", (13, HI)),
                F("partitions", "int32", (7, HI), array=True),
            ),
        ),
        F("rack_id", "string", (11, HI)),
    ),
)


FETCH_RESPONSE: Final = MessageSpec(
    "FetchResponse",
    1,
    (0, 17),
    (12, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F("error_code", "int16", (7, HI)),
        F("session_id", "int32", (7, HI)),
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("topic", "string", (0, 12)),
                F("topic_id", "uuid", (13, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                        F("high_watermark", "int64", (0, HI)),
                        F("last_stable_offset", "int64", (4, HI), default=-1),
                        F("log_start_offset", "int64", (5, HI), default=-1),
                        F(
                            "diverging_epoch",
                            "struct",
                            (12, HI),
                            tag=0,
                            tagged=(12, HI),
                            fields=(
                                F("epoch", "int32", (12, HI), default=-1),
                                F("end_offset", "int64", (12, HI), default=-1),
                            ),
                        ),
                        F(
                            "current_leader",
                            "struct",
                            (12, HI),
                            tag=1,
                            tagged=(12, HI),
                            fields=(
                                F("leader_id", "int32", (12, HI), default=-1),
                                F("leader_epoch", "int32", (12, HI), default=-1),
                            ),
                        ),
                        F(
                            "snapshot_id",
                            "struct",
                            (12, HI),
                            tag=2,
                            tagged=(12, HI),
                            fields=(
                                F("end_offset", "int64", (0, HI), default=-1),
                                F("epoch", "int32", (0, HI), default=-1),
                            ),
                        ),
                        F(
                            "aborted_transactions",
                            "struct",
                            (4, HI),
                            array=True,
                            nullable=(4, HI),
                            fields=(
                                F("producer_id", "int64", (4, HI)),
                                F("first_offset", "int64", (4, HI)),
                            ),
                        ),
                        F("preferred_read_replica", "int32", (11, HI), default=-1),
                        F("records", "records", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
        F(
            "node_endpoints",
            "struct",
            (16, HI),
            array=True,
            tag=0,
            tagged=(16, HI),
            fields=(
                F("node_id", "int32", (16, HI)),
                F("host", "string", (16, HI)),
                F("port", "int32", (16, HI)),
                F("rack", "string", (16, HI), nullable=(16, HI), null_default=True),
            ),
        ),
    ),
)


LIST_OFFSETS_REQUEST: Final = MessageSpec(
    "ListOffsetsRequest",
    2,
    (0, 10),
    (6, HI),
    (
        F("replica_id", "int32", (0, HI)),
        F("isolation_level", "int8", (2, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("current_leader_epoch", "int32", (4, HI), default=-1),
                        F("timestamp", "int64", (0, HI)),
                        F("max_num_offsets", "int32", (0, 0), default=1),
                    ),
                ),
            ),
        ),
        F("timeout_ms", "int32", (10, HI)),
    ),
)


LIST_OFFSETS_RESPONSE: Final = MessageSpec(
    "ListOffsetsResponse",
    2,
    (0, 10),
    (6, HI),
    (
        F("throttle_time_ms", "int32", (2, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                        F("old_style_offsets", "int64", (0, 0), array=True),
                        F("timestamp", "int64", (1, HI), default=-1),
                        F("offset", "int64", (1, HI), default=-1),
                        F("leader_epoch", "int32", (4, HI), default=-1),
                    ),
                ),
            ),
        ),
    ),
)


METADATA_REQUEST: Final = MessageSpec(
    "MetadataRequest",
    3,
    (0, 12),
    (9, HI),
    (
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            nullable=(1, HI),
            fields=(
                F("topic_id", "uuid", (10, HI)),
                F("name", "string", (0, HI), nullable=(10, HI)),
            ),
        ),
        F("allow_auto_topic_creation", "bool", (4, HI), default=True),
        F("include_cluster_authorized_operations", "bool", (8, 10)),
        F("include_topic_authorized_operations", "bool", (8, HI)),
    ),
)


METADATA_RESPONSE: Final = MessageSpec(
    "MetadataResponse",
    3,
    (0, 12),
    (9, HI),
    (
        F("throttle_time_ms", "int32", (3, HI)),
        F(
            "brokers",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("node_id", "int32", (0, HI)),
                F("host", "string", (0, HI)),
                F("port", "int32", (0, HI)),
                F("rack", "string", (1, HI), nullable=(1, HI), null_default=True),
            ),
        ),
        F("cluster_id", "string", (2, HI), nullable=(2, HI), null_default=True),
        F("controller_id", "int32", (1, HI), default=-1),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("name", "string", (0, HI), nullable=(12, HI)),
                F("topic_id", "uuid", (10, HI)),
                F("is_internal", "bool", (1, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("error_code", "int16", (0, HI)),
                        F("partition_index", "int32", (0, HI)),
                        F("leader_id", "int32", (0, HI)),
                        F("leader_epoch", "int32", (7, HI), default=-1),
                        F("replica_nodes", "int32", (0, HI), array=True),
                        F("isr_nodes", "int32", (0, HI), array=True),
                        F("offline_replicas", "int32", (5, HI), array=True),
                    ),
                ),
                F("topic_authorized_operations", "int32", (8, HI), default=-2147483648),
            ),
        ),
        F("cluster_authorized_operations", "int32", (8, 10), default=-2147483648),
    ),
)


OFFSET_COMMIT_REQUEST: Final = MessageSpec(
    "OffsetCommitRequest",
    8,
    (0, 9),
    (8, HI),
    (
        F("group_id", "string", (0, HI)),
        F("generation_id_or_member_epoch", "int32", (1, HI), default=-1),
        F("member_id", "string", (1, HI)),
        F("group_instance_id", "string", (7, HI), nullable=(7, HI), null_default=True),
        F("retention_time_ms", "int64", (2, 4), default=-1),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("committed_offset", "int64", (0, HI)),
                        F("committed_leader_epoch", "int32", (6, HI), default=-1),
                        F("commit_timestamp", "int64", (1, 1), default=-1),
                        F("committed_metadata", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


OFFSET_COMMIT_RESPONSE: Final = MessageSpec(
    "OffsetCommitResponse",
    8,
    (0, 9),
    (8, HI),
    (
        F("throttle_time_ms", "int32", (3, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


OFFSET_FETCH_REQUEST: Final = MessageSpec(
    "OffsetFetchRequest",
    9,
    (0, 9),
    (6, HI),
    (
        F("group_id", "string", (0, 7)),
        F(
            "topics",
            "struct",
            (0, 7),
            array=True,
            nullable=(2, 7),
            fields=(
                F("name", "string", (0, 7)),
                F("partition_indexes", "int32", (0, 7), array=True),
            ),
        ),
        F(
            "groups",
            "struct",
            (8, HI),
            array=True,
            fields=(
                F("group_id", "string", (8, HI)),
                F("member_id", "string", (9, HI), nullable=(9, HI), null_default=True),
                F("member_epoch", "int32", (9, HI), default=-1),
                F(
                    "topics",
                    "struct",
                    (8, HI),
                    array=True,
                    nullable=(8, HI),
                    fields=(
                        F("name", "string", (8, HI)),
                        F("partition_indexes", "int32", (8, HI), array=True),
                    ),
                ),
            ),
        ),
        F("require_stable", "bool", (7, HI)),
    ),
)


OFFSET_FETCH_RESPONSE: Final = MessageSpec(
    "OffsetFetchResponse",
    9,
    (0, 9),
    (6, HI),
    (
        F("throttle_time_ms", "int32", (3, HI)),
        F(
            "topics",
            "struct",
            (0, 7),
            array=True,
            fields=(
                F("name", "string", (0, 7)),
                F(
                    "partitions",
                    "struct",
                    (0, 7),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, 7)),
                        F("committed_offset", "int64", (0, 7)),
                        F("committed_leader_epoch", "int32", (5, 7), default=-1),
                        F("metadata", "string", (0, 7), nullable=(0, 7)),
                        F("error_code", "int16", (0, 7)),
                    ),
                ),
            ),
        ),
        F("error_code", "int16", (2, 7)),
        F(
            "groups",
            "struct",
            (8, HI),
            array=True,
            fields=(
                F("group_id", "string", (8, HI)),
                F(
                    "topics",
                    "struct",
                    (8, HI),
                    array=True,
                    fields=(
                        F("name", "string", (8, HI)),
                        F(
                            "partitions",
                            "struct",
                            (8, HI),
                            array=True,
                            fields=(
                                F("partition_index", "int32", (8, HI)),
                                F("committed_offset", "int64", (8, HI)),
                                F("committed_leader_epoch", "int32", (8, HI), default=-1),
                                F("metadata", "string", (8, HI), nullable=(8, HI)),
                                F("error_code", "int16", (8, HI)),
                            ),
                        ),
                    ),
                ),
                F("error_code", "int16", (8, HI)),
            ),
        ),
    ),
)


FIND_COORDINATOR_REQUEST: Final = MessageSpec(
    "FindCoordinatorRequest",
    10,
    (0, 6),
    (3, HI),
    (
        F("key", "string", (0, 3)),
        F("key_type", "int8", (1, HI)),
        F("coordinator_keys", "string", (4, HI), array=True),
    ),
)


FIND_COORDINATOR_RESPONSE: Final = MessageSpec(
    "FindCoordinatorResponse",
    10,
    (0, 6),
    (3, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F("error_code", "int16", (0, 3)),
        F("error_message", "string", (1, 3), nullable=(1, 3)),
        F("node_id", "int32", (0, 3)),
        F("host", "string", (0, 3)),
        F("port", "int32", (0, 3)),
        F(
            "coordinators",
            "struct",
            (4, HI),
            array=True,
            fields=(
                F("key", "string", (4, HI)),
                F("node_id", "int32", (4, HI)),
                F("host", "string", (4, HI)),
                F("port", "int32", (4, HI)),
                F("error_code", "int16", (4, HI)),
                F("error_message", "string", (4, HI), nullable=(4, HI)),
            ),
        ),
    ),
)


JOIN_GROUP_REQUEST: Final = MessageSpec(
    "JoinGroupRequest",
    11,
    (0, 9),
    (6, HI),
    (
        F("group_id", "string", (0, HI)),
        F("session_timeout_ms", "int32", (0, HI)),
        F("rebalance_timeout_ms", "int32", (1, HI), default=-1),
        F("member_id", "string", (0, HI)),
        F("group_instance_id", "string", (5, HI), nullable=(5, HI), null_default=True),
        F("protocol_type", "string", (0, HI)),
        F(
            "protocols",
            "struct",
            (0, HI),
            array=True,
            fields=(F("name", "string", (0, HI)), F("metadata", "bytes", (0, HI))),
        ),
        F("reason", "string", (8, HI), nullable=(8, HI), null_default=True),
    ),
)


JOIN_GROUP_RESPONSE: Final = MessageSpec(
    "JoinGroupResponse",
    11,
    (0, 9),
    (6, HI),
    (
        F("throttle_time_ms", "int32", (2, HI)),
        F("error_code", "int16", (0, HI)),
        F("generation_id", "int32", (0, HI), default=-1),
        F("protocol_type", "string", (7, HI), nullable=(7, HI), null_default=True),
        F("protocol_name", "string", (0, HI), nullable=(7, HI)),
        F("leader", "string", (0, HI)),
        F("skip_assignment", "bool", (9, HI)),
        F("member_id", "string", (0, HI)),
        F(
            "members",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("member_id", "string", (0, HI)),
                F("group_instance_id", "string", (5, HI), nullable=(5, HI), null_default=True),
                F("metadata", "bytes", (0, HI)),
            ),
        ),
    ),
)


HEARTBEAT_REQUEST: Final = MessageSpec(
    "HeartbeatRequest",
    12,
    (0, 4),
    (4, HI),
    (
        F("group_id", "string", (0, HI)),
        F("generation_id", "int32", (0, HI)),
        F("member_id", "string", (0, HI)),
        F("group_instance_id", "string", (3, HI), nullable=(3, HI), null_default=True),
    ),
)


HEARTBEAT_RESPONSE: Final = MessageSpec(
    "HeartbeatResponse",
    12,
    (0, 4),
    (4, HI),
    (F("throttle_time_ms", "int32", (1, HI)), F("error_code", "int16", (0, HI))),
)


LEAVE_GROUP_REQUEST: Final = MessageSpec(
    "LeaveGroupRequest",
    13,
    (0, 5),
    (4, HI),
    (
        F("group_id", "string", (0, HI)),
        F("member_id", "string", (0, 2)),
        F(
            "members",
            "struct",
            (3, HI),
            array=True,
            fields=(
                F("member_id", "string", (3, HI)),
                F("group_instance_id", "string", (3, HI), nullable=(3, HI), null_default=True),
                F("reason", "string", (5, HI), nullable=(5, HI), null_default=True),
            ),
        ),
    ),
)


LEAVE_GROUP_RESPONSE: Final = MessageSpec(
    "LeaveGroupResponse",
    13,
    (0, 5),
    (4, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F("error_code", "int16", (0, HI)),
        F(
            "members",
            "struct",
            (3, HI),
            array=True,
            fields=(
                F("member_id", "string", (3, HI)),
                F("group_instance_id", "string", (3, HI), nullable=(3, HI)),
                F("error_code", "int16", (3, HI)),
            ),
        ),
    ),
)


SYNC_GROUP_REQUEST: Final = MessageSpec(
    "SyncGroupRequest",
    14,
    (0, 5),
    (4, HI),
    (
        F("group_id", "string", (0, HI)),
        F("generation_id", "int32", (0, HI)),
        F("member_id", "string", (0, HI)),
        F("group_instance_id", "string", (3, HI), nullable=(3, HI), null_default=True),
        F("protocol_type", "string", (5, HI), nullable=(5, HI), null_default=True),
        F("protocol_name", "string", (5, HI), nullable=(5, HI), null_default=True),
        F(
            "assignments",
            "struct",
            (0, HI),
            array=True,
            fields=(F("member_id", "string", (0, HI)), F("assignment", "bytes", (0, HI))),
        ),
    ),
)


SYNC_GROUP_RESPONSE: Final = MessageSpec(
    "SyncGroupResponse",
    14,
    (0, 5),
    (4, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F("error_code", "int16", (0, HI)),
        F("protocol_type", "string", (5, HI), nullable=(5, HI), null_default=True),
        F("protocol_name", "string", (5, HI), nullable=(5, HI), null_default=True),
        F("assignment", "bytes", (0, HI)),
    ),
)


DESCRIBE_GROUPS_REQUEST: Final = MessageSpec(
    "DescribeGroupsRequest",
    15,
    (0, 5),
    (5, HI),
    (
        F("groups", "string", (0, HI), array=True),
        F("include_authorized_operations", "bool", (3, HI)),
    ),
)


DESCRIBE_GROUPS_RESPONSE: Final = MessageSpec(
    "DescribeGroupsResponse",
    15,
    (0, 5),
    (5, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F(
            "groups",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("group_id", "string", (0, HI)),
                F("group_state", "string", (0, HI)),
                F("protocol_type", "string", (0, HI)),
                F("protocol_data", "string", (0, HI)),
                F(
                    "members",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("member_id", "string", (0, HI)),
                        F(
                            "group_instance_id",
                            "string",
                            (4, HI),
                            nullable=(4, HI),
                            null_default=True,
                        ),
                        F("client_id", "string", (0, HI)),
                        F("client_host", "string", (0, HI)),
                        F("member_metadata", "bytes", (0, HI)),
                        F("member_assignment", "bytes", (0, HI)),
                    ),
                ),
                F("authorized_operations", "int32", (3, HI), default=-2147483648),
            ),
        ),
    ),
)


LIST_GROUPS_REQUEST: Final = MessageSpec(
    "ListGroupsRequest",
    16,
    (0, 5),
    (3, HI),
    (
        F("states_filter", "string", (4, HI), array=True),
        F("types_filter", "string", (5, HI), array=True),
    ),
)


LIST_GROUPS_RESPONSE: Final = MessageSpec(
    "ListGroupsResponse",
    16,
    (0, 5),
    (3, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F("error_code", "int16", (0, HI)),
        F(
            "groups",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("group_id", "string", (0, HI)),
                F("protocol_type", "string", (0, HI)),
                F("group_state", "string", (4, HI)),
                F("group_type", "string", (5, HI)),
            ),
        ),
    ),
)


SASL_HANDSHAKE_REQUEST: Final = MessageSpec(
    "SaslHandshakeRequest",
    17,
    (0, 1),
    NEVER,
    (F("mechanism", "string", (0, HI)),),
)


SASL_HANDSHAKE_RESPONSE: Final = MessageSpec(
    "SaslHandshakeResponse",
    17,
    (0, 1),
    NEVER,
    (F("error_code", "int16", (0, HI)), F("mechanisms", "string", (0, HI), array=True)),
)


API_VERSIONS_REQUEST: Final = MessageSpec(
    "ApiVersionsRequest",
    18,
    (0, 4),
    (3, HI),
    (F("client_software_name", "string", (3, HI)), F("client_software_version", "string", (3, HI))),
)


API_VERSIONS_RESPONSE: Final = MessageSpec(
    "ApiVersionsResponse",
    18,
    (0, 4),
    (3, HI),
    (
        F("error_code", "int16", (0, HI)),
        F(
            "api_keys",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("api_key", "int16", (0, HI)),
                F("min_version", "int16", (0, HI)),
                F("max_version", "int16", (0, HI)),
            ),
        ),
        F("throttle_time_ms", "int32", (1, HI)),
        F(
            "supported_features",
            "struct",
            (3, HI),
            array=True,
            tag=0,
            tagged=(3, HI),
            fields=(
                F("name", "string", (3, HI)),
                F("min_version", "int16", (3, HI)),
                F("max_version", "int16", (3, HI)),
            ),
        ),
        F("finalized_features_epoch", "int64", (3, HI), tag=1, tagged=(3, HI), default=-1),
        F(
            "finalized_features",
            "struct",
            (3, HI),
            array=True,
            tag=2,
            tagged=(3, HI),
            fields=(
                F("name", "string", (3, HI)),
                F("max_version_level", "int16", (3, HI)),
                F("min_version_level", "int16", (3, HI)),
            ),
        ),
        F("zk_migration_ready", "bool", (3, HI), tag=3, tagged=(3, HI)),
    ),
)


CREATE_TOPICS_REQUEST: Final = MessageSpec(
    "CreateTopicsRequest",
    19,
    (0, 7),
    (5, HI),
    (
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("num_partitions", "int32", (0, HI)),
                F("replication_factor", "int16", (0, HI)),
                F(
                    "assignments",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("broker_ids", "int32", (0, HI), array=True),
                    ),
                ),
                F(
                    "configs",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("value", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
        F("timeout_ms", "int32", (0, HI), default=60000),
        F("validate_only", "bool", (1, HI)),
    ),
)


CREATE_TOPICS_RESPONSE: Final = MessageSpec(
    "CreateTopicsResponse",
    19,
    (0, 7),
    (5, HI),
    (
        F("throttle_time_ms", "int32", (2, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("topic_id", "uuid", (7, HI)),
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (1, HI), nullable=(0, HI)),
                F("topic_config_error_code", "int16", (5, HI), tag=0, tagged=(5, HI)),
                F("num_partitions", "int32", (5, HI), default=-1),
                F("replication_factor", "int16", (5, HI), default=-1),
                F(
                    "configs",
                    "struct",
                    (5, HI),
                    array=True,
                    nullable=(5, HI),
                    fields=(
                        F("name", "string", (5, HI)),
                        F("value", "string", (5, HI), nullable=(5, HI)),
                        F("read_only", "bool", (5, HI)),
                        F("config_source", "int8", (5, HI), default=-1),
                        F("is_sensitive", "bool", (5, HI)),
                    ),
                ),
            ),
        ),
    ),
)


DELETE_TOPICS_REQUEST: Final = MessageSpec(
    "DeleteTopicsRequest",
    20,
    (0, 6),
    (4, HI),
    (
        F(
            "topics",
            "struct",
            (6, HI),
            array=True,
            fields=(
                F("name", "string", (6, HI), nullable=(6, HI), null_default=True),
                F("topic_id", "uuid", (6, HI)),
            ),
        ),
        F("topic_names", "string", (0, 5), array=True),
        F("timeout_ms", "int32", (0, HI)),
    ),
)


DELETE_TOPICS_RESPONSE: Final = MessageSpec(
    "DeleteTopicsResponse",
    20,
    (0, 6),
    (4, HI),
    (
        F("throttle_time_ms", "int32", (1, HI)),
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI), nullable=(6, HI)),
                F("topic_id", "uuid", (6, HI)),
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (5, HI), nullable=(5, HI), null_default=True),
            ),
        ),
    ),
)


DELETE_RECORDS_REQUEST: Final = MessageSpec(
    "DeleteRecordsRequest",
    21,
    (0, 2),
    (2, HI),
    (
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(F("partition_index", "int32", (0, HI)), F("offset", "int64", (0, HI))),
                ),
            ),
        ),
        F("timeout_ms", "int32", (0, HI)),
    ),
)


DELETE_RECORDS_RESPONSE: Final = MessageSpec(
    "DeleteRecordsResponse",
    21,
    (0, 2),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("low_watermark", "int64", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


INIT_PRODUCER_ID_REQUEST: Final = MessageSpec(
    "InitProducerIdRequest",
    22,
    (0, 5),
    (2, HI),
    (
        F("transactional_id", "string", (0, HI), nullable=(0, HI)),
        F("transaction_timeout_ms", "int32", (0, HI)),
        F("producer_id", "int64", (3, HI), default=-1),
        F("producer_epoch", "int16", (3, HI), default=-1),
    ),
)


INIT_PRODUCER_ID_RESPONSE: Final = MessageSpec(
    "InitProducerIdResponse",
    22,
    (0, 5),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("producer_id", "int64", (0, HI), default=-1),
        F("producer_epoch", "int16", (0, HI)),
    ),
)


OFFSET_FOR_LEADER_EPOCH_REQUEST: Final = MessageSpec(
    "OffsetForLeaderEpochRequest",
    23,
    (0, 4),
    (4, HI),
    (
        F("replica_id", "int32", (3, HI), default=-2),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("topic", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition", "int32", (0, HI)),
                        F("current_leader_epoch", "int32", (2, HI), default=-1),
                        F("leader_epoch", "int32", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


OFFSET_FOR_LEADER_EPOCH_RESPONSE: Final = MessageSpec(
    "OffsetForLeaderEpochResponse",
    23,
    (0, 4),
    (4, HI),
    (
        F("throttle_time_ms", "int32", (2, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("topic", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("error_code", "int16", (0, HI)),
                        F("partition", "int32", (0, HI)),
                        F("leader_epoch", "int32", (1, HI), default=-1),
                        F("end_offset", "int64", (0, HI), default=-1),
                    ),
                ),
            ),
        ),
    ),
)


ADD_PARTITIONS_TO_TXN_REQUEST: Final = MessageSpec(
    "AddPartitionsToTxnRequest",
    24,
    (0, 5),
    (3, HI),
    (
        F(
            "transactions",
            "struct",
            (4, HI),
            array=True,
            fields=(
                F("transactional_id", "string", (4, HI)),
                F("producer_id", "int64", (4, HI)),
                F("producer_epoch", "int16", (4, HI)),
                F("verify_only", "bool", (4, HI)),
                F(
                    "topics",
                    "struct",
                    (4, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("partitions", "int32", (0, HI), array=True),
                    ),
                ),
            ),
        ),
        F("v3_and_below_transactional_id", "string", (0, 3)),
        F("v3_and_below_producer_id", "int64", (0, 3)),
        F("v3_and_below_producer_epoch", "int16", (0, 3)),
        F(
            "v3_and_below_topics",
            "struct",
            (0, 3),
            array=True,
            fields=(F("name", "string", (0, HI)), F("partitions", "int32", (0, HI), array=True)),
        ),
    ),
)


ADD_PARTITIONS_TO_TXN_RESPONSE: Final = MessageSpec(
    "AddPartitionsToTxnResponse",
    24,
    (0, 5),
    (3, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (4, HI)),
        F(
            "results_by_transaction",
            "struct",
            (4, HI),
            array=True,
            fields=(
                F("transactional_id", "string", (4, HI)),
                F(
                    "topic_results",
                    "struct",
                    (4, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F(
                            "results_by_partition",
                            "struct",
                            (0, HI),
                            array=True,
                            fields=(
                                F("partition_index", "int32", (0, HI)),
                                F("partition_error_code", "int16", (0, HI)),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        F(
            "results_by_topic_v3_and_below",
            "struct",
            (0, 3),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "results_by_partition",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("partition_error_code", "int16", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


ADD_OFFSETS_TO_TXN_REQUEST: Final = MessageSpec(
    "AddOffsetsToTxnRequest",
    25,
    (0, 4),
    (3, HI),
    (
        F("transactional_id", "string", (0, HI)),
        F("producer_id", "int64", (0, HI)),
        F("producer_epoch", "int16", (0, HI)),
        F("group_id", "string", (0, HI)),
    ),
)


ADD_OFFSETS_TO_TXN_RESPONSE: Final = MessageSpec(
    "AddOffsetsToTxnResponse",
    25,
    (0, 4),
    (3, HI),
    (F("throttle_time_ms", "int32", (0, HI)), F("error_code", "int16", (0, HI))),
)


END_TXN_REQUEST: Final = MessageSpec(
    "EndTxnRequest",
    26,
    (0, 5),
    (3, HI),
    (
        F("transactional_id", "string", (0, HI)),
        F("producer_id", "int64", (0, HI)),
        F("producer_epoch", "int16", (0, HI)),
        F("committed", "bool", (0, HI)),
    ),
)


END_TXN_RESPONSE: Final = MessageSpec(
    "EndTxnResponse",
    26,
    (0, 5),
    (3, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("producer_id", "int64", (5, HI), default=-1),
        F("producer_epoch", "int16", (5, HI), default=-1),
    ),
)


WRITE_TXN_MARKERS_REQUEST: Final = MessageSpec(
    "WriteTxnMarkersRequest",
    27,
    (0, 1),
    (1, HI),
    (
        F(
            "markers",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("producer_id", "int64", (0, HI)),
                F("producer_epoch", "int16", (0, HI)),
                F("transaction_result", "bool", (0, HI)),
                F(
                    "topics",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("partition_indexes", "int32", (0, HI), array=True),
                    ),
                ),
                F("coordinator_epoch", "int32", (0, HI)),
            ),
        ),
    ),
)


WRITE_TXN_MARKERS_RESPONSE: Final = MessageSpec(
    "WriteTxnMarkersResponse",
    27,
    (0, 1),
    (1, HI),
    (
        F(
            "markers",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("producer_id", "int64", (0, HI)),
                F(
                    "topics",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F(
                            "partitions",
                            "struct",
                            (0, HI),
                            array=True,
                            fields=(
                                F("partition_index", "int32", (0, HI)),
                                F("error_code", "int16", (0, HI)),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


TXN_OFFSET_COMMIT_REQUEST: Final = MessageSpec(
    "TxnOffsetCommitRequest",
    28,
    (0, 4),
    (3, HI),
    (
        F("transactional_id", "string", (0, HI)),
        F("group_id", "string", (0, HI)),
        F("producer_id", "int64", (0, HI)),
        F("producer_epoch", "int16", (0, HI)),
        F("generation_id", "int32", (3, HI), default=-1),
        F("member_id", "string", (3, HI)),
        F("group_instance_id", "string", (3, HI), nullable=(3, HI), null_default=True),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("committed_offset", "int64", (0, HI)),
                        F("committed_leader_epoch", "int32", (2, HI), default=-1),
                        F("committed_metadata", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


TXN_OFFSET_COMMIT_RESPONSE: Final = MessageSpec(
    "TxnOffsetCommitResponse",
    28,
    (0, 4),
    (3, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_ACLS_REQUEST: Final = MessageSpec(
    "DescribeAclsRequest",
    29,
    (0, 3),
    (2, HI),
    (
        F("resource_type_filter", "int8", (0, HI)),
        F("resource_name_filter", "string", (0, HI), nullable=(0, HI)),
        F("pattern_type_filter", "int8", (1, HI), default=3),
        F("principal_filter", "string", (0, HI), nullable=(0, HI)),
        F("host_filter", "string", (0, HI), nullable=(0, HI)),
        F("operation", "int8", (0, HI)),
        F("permission_type", "int8", (0, HI)),
    ),
)


DESCRIBE_ACLS_RESPONSE: Final = MessageSpec(
    "DescribeAclsResponse",
    29,
    (0, 3),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F(
            "resources",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F("pattern_type", "int8", (1, HI), default=3),
                F(
                    "acls",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("principal", "string", (0, HI)),
                        F("host", "string", (0, HI)),
                        F("operation", "int8", (0, HI)),
                        F("permission_type", "int8", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


CREATE_ACLS_REQUEST: Final = MessageSpec(
    "CreateAclsRequest",
    30,
    (0, 3),
    (2, HI),
    (
        F(
            "creations",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F("resource_pattern_type", "int8", (1, HI), default=3),
                F("principal", "string", (0, HI)),
                F("host", "string", (0, HI)),
                F("operation", "int8", (0, HI)),
                F("permission_type", "int8", (0, HI)),
            ),
        ),
    ),
)


CREATE_ACLS_RESPONSE: Final = MessageSpec(
    "CreateAclsResponse",
    30,
    (0, 3),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
            ),
        ),
    ),
)


DELETE_ACLS_REQUEST: Final = MessageSpec(
    "DeleteAclsRequest",
    31,
    (0, 3),
    (2, HI),
    (
        F(
            "filters",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type_filter", "int8", (0, HI)),
                F("resource_name_filter", "string", (0, HI), nullable=(0, HI)),
                F("pattern_type_filter", "int8", (1, HI), default=3),
                F("principal_filter", "string", (0, HI), nullable=(0, HI)),
                F("host_filter", "string", (0, HI), nullable=(0, HI)),
                F("operation", "int8", (0, HI)),
                F("permission_type", "int8", (0, HI)),
            ),
        ),
    ),
)


DELETE_ACLS_RESPONSE: Final = MessageSpec(
    "DeleteAclsResponse",
    31,
    (0, 3),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "filter_results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F(
                    "matching_acls",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("error_code", "int16", (0, HI)),
                        F("error_message", "string", (0, HI), nullable=(0, HI)),
                        F("resource_type", "int8", (0, HI)),
                        F("resource_name", "string", (0, HI)),
                        F("pattern_type", "int8", (1, HI), default=3),
                        F("principal", "string", (0, HI)),
                        F("host", "string", (0, HI)),
                        F("operation", "int8", (0, HI)),
                        F("permission_type", "int8", (0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_CONFIGS_REQUEST: Final = MessageSpec(
    "DescribeConfigsRequest",
    32,
    (0, 4),
    (4, HI),
    (
        F(
            "resources",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F("configuration_keys", "string", (0, HI), array=True, nullable=(0, HI)),
            ),
        ),
        F("include_synonyms", "bool", (1, HI)),
        F("include_documentation", "bool", (3, HI)),
    ),
)


DESCRIBE_CONFIGS_RESPONSE: Final = MessageSpec(
    "DescribeConfigsResponse",
    32,
    (0, 4),
    (4, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F(
                    "configs",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("value", "string", (0, HI), nullable=(0, HI)),
                        F("read_only", "bool", (0, HI)),
                        F("is_default", "bool", (0, 0)),
                        F("config_source", "int8", (1, HI), default=-1),
                        F("is_sensitive", "bool", (0, HI)),
                        F(
                            "synonyms",
                            "struct",
                            (1, HI),
                            array=True,
                            fields=(
                                F("name", "string", (1, HI)),
                                F("value", "string", (1, HI), nullable=(0, HI)),
                                F("source", "int8", (1, HI)),
                            ),
                        ),
                        F("config_type", "int8", (3, HI)),
                        F("documentation", "string", (3, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


ALTER_CONFIGS_REQUEST: Final = MessageSpec(
    "AlterConfigsRequest",
    33,
    (0, 2),
    (2, HI),
    (
        F(
            "resources",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F(
                    "configs",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("value", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
        F("validate_only", "bool", (0, HI)),
    ),
)


ALTER_CONFIGS_RESPONSE: Final = MessageSpec(
    "AlterConfigsResponse",
    33,
    (0, 2),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
            ),
        ),
    ),
)


SASL_AUTHENTICATE_REQUEST: Final = MessageSpec(
    "SaslAuthenticateRequest",
    36,
    (0, 2),
    (2, HI),
    (F("auth_bytes", "bytes", (0, HI)),),
)


SASL_AUTHENTICATE_RESPONSE: Final = MessageSpec(
    "SaslAuthenticateResponse",
    36,
    (0, 2),
    (2, HI),
    (
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F("auth_bytes", "bytes", (0, HI)),
        F("session_lifetime_ms", "int64", (1, HI)),
    ),
)


CREATE_PARTITIONS_REQUEST: Final = MessageSpec(
    "CreatePartitionsRequest",
    37,
    (0, 3),
    (2, HI),
    (
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("count", "int32", (0, HI)),
                F(
                    "assignments",
                    "struct",
                    (0, HI),
                    array=True,
                    nullable=(0, HI),
                    fields=(F("broker_ids", "int32", (0, HI), array=True),),
                ),
            ),
        ),
        F("timeout_ms", "int32", (0, HI)),
        F("validate_only", "bool", (0, HI)),
    ),
)


CREATE_PARTITIONS_RESPONSE: Final = MessageSpec(
    "CreatePartitionsResponse",
    37,
    (0, 3),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI), null_default=True),
            ),
        ),
    ),
)


DELETE_GROUPS_REQUEST: Final = MessageSpec(
    "DeleteGroupsRequest",
    42,
    (0, 2),
    (2, HI),
    (F("groups_names", "string", (0, HI), array=True),),
)


DELETE_GROUPS_RESPONSE: Final = MessageSpec(
    "DeleteGroupsResponse",
    42,
    (0, 2),
    (2, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(F("group_id", "string", (0, HI)), F("error_code", "int16", (0, HI))),
        ),
    ),
)


INCREMENTAL_ALTER_CONFIGS_REQUEST: Final = MessageSpec(
    "IncrementalAlterConfigsRequest",
    44,
    (0, 1),
    (1, HI),
    (
        F(
            "resources",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
                F(
                    "configs",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("name", "string", (0, HI)),
                        F("config_operation", "int8", (0, HI)),
                        F("value", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
        F("validate_only", "bool", (0, HI)),
    ),
)


INCREMENTAL_ALTER_CONFIGS_RESPONSE: Final = MessageSpec(
    "IncrementalAlterConfigsResponse",
    44,
    (0, 1),
    (1, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F("resource_type", "int8", (0, HI)),
                F("resource_name", "string", (0, HI)),
            ),
        ),
    ),
)


ALTER_PARTITION_REASSIGNMENTS_REQUEST: Final = MessageSpec(
    "AlterPartitionReassignmentsRequest",
    45,
    (0, 0),
    (0, HI),
    (
        F("timeout_ms", "int32", (0, HI), default=60000),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F(
                            "replicas",
                            "int32",
                            (0, HI),
                            array=True,
                            nullable=(0, HI),
                            null_default=True,
                        ),
                    ),
                ),
            ),
        ),
    ),
)


ALTER_PARTITION_REASSIGNMENTS_RESPONSE: Final = MessageSpec(
    "AlterPartitionReassignmentsResponse",
    45,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F(
            "responses",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                        F("error_message", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


LIST_PARTITION_REASSIGNMENTS_REQUEST: Final = MessageSpec(
    "ListPartitionReassignmentsRequest",
    46,
    (0, 0),
    (0, HI),
    (
        F("timeout_ms", "int32", (0, HI), default=60000),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            nullable=(0, HI),
            null_default=True,
            fields=(
                F("name", "string", (0, HI)),
                F("partition_indexes", "int32", (0, HI), array=True),
            ),
        ),
    ),
)


LIST_PARTITION_REASSIGNMENTS_RESPONSE: Final = MessageSpec(
    "ListPartitionReassignmentsResponse",
    46,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("replicas", "int32", (0, HI), array=True),
                        F("adding_replicas", "int32", (0, HI), array=True),
                        F("removing_replicas", "int32", (0, HI), array=True),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_CLIENT_QUOTAS_REQUEST: Final = MessageSpec(
    "DescribeClientQuotasRequest",
    48,
    (0, 1),
    (1, HI),
    (
        F(
            "components",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("entity_type", "string", (0, HI)),
                F("match_type", "int8", (0, HI)),
                F("match", "string", (0, HI), nullable=(0, HI)),
            ),
        ),
        F("strict", "bool", (0, HI)),
    ),
)


DESCRIBE_CLIENT_QUOTAS_RESPONSE: Final = MessageSpec(
    "DescribeClientQuotasResponse",
    48,
    (0, 1),
    (1, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F(
            "entries",
            "struct",
            (0, HI),
            array=True,
            nullable=(0, HI),
            fields=(
                F(
                    "entity",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("entity_type", "string", (0, HI)),
                        F("entity_name", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
                F(
                    "values",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(F("key", "string", (0, HI)), F("value", "float64", (0, HI))),
                ),
            ),
        ),
    ),
)


ALTER_CLIENT_QUOTAS_REQUEST: Final = MessageSpec(
    "AlterClientQuotasRequest",
    49,
    (0, 1),
    (1, HI),
    (
        F(
            "entries",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F(
                    "entity",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("entity_type", "string", (0, HI)),
                        F("entity_name", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
                F(
                    "ops",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("key", "string", (0, HI)),
                        F("value", "float64", (0, HI)),
                        F("remove", "bool", (0, HI)),
                    ),
                ),
            ),
        ),
        F("validate_only", "bool", (0, HI)),
    ),
)


ALTER_CLIENT_QUOTAS_RESPONSE: Final = MessageSpec(
    "AlterClientQuotasResponse",
    49,
    (0, 1),
    (1, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "entries",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F(
                    "entity",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("entity_type", "string", (0, HI)),
                        F("entity_name", "string", (0, HI), nullable=(0, HI)),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST: Final = MessageSpec(
    "DescribeUserScramCredentialsRequest",
    50,
    (0, 0),
    (0, HI),
    (
        F(
            "users",
            "struct",
            (0, HI),
            array=True,
            nullable=(0, HI),
            fields=(F("name", "string", (0, HI)),),
        ),
    ),
)


DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE: Final = MessageSpec(
    "DescribeUserScramCredentialsResponse",
    50,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("error_message", "string", (0, HI), nullable=(0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("user", "string", (0, HI)),
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
                F(
                    "credential_infos",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(F("mechanism", "int8", (0, HI)), F("iterations", "int32", (0, HI))),
                ),
            ),
        ),
    ),
)


ALTER_USER_SCRAM_CREDENTIALS_REQUEST: Final = MessageSpec(
    "AlterUserScramCredentialsRequest",
    51,
    (0, 0),
    (0, HI),
    (
        F(
            "deletions",
            "struct",
            (0, HI),
            array=True,
            fields=(F("name", "string", (0, HI)), F("mechanism", "int8", (0, HI))),
        ),
        F(
            "upsertions",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("mechanism", "int8", (0, HI)),
                F("iterations", "int32", (0, HI)),
                F("salt", "bytes", (0, HI)),
                F("salted_password", "bytes", (0, HI)),
            ),
        ),
    ),
)


ALTER_USER_SCRAM_CREDENTIALS_RESPONSE: Final = MessageSpec(
    "AlterUserScramCredentialsResponse",
    51,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "results",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("user", "string", (0, HI)),
                F("error_code", "int16", (0, HI)),
                F("error_message", "string", (0, HI), nullable=(0, HI)),
            ),
        ),
    ),
)


DESCRIBE_PRODUCERS_REQUEST: Final = MessageSpec(
    "DescribeProducersRequest",
    61,
    (0, 0),
    (0, HI),
    (
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F("partition_indexes", "int32", (0, HI), array=True),
            ),
        ),
    ),
)


DESCRIBE_PRODUCERS_RESPONSE: Final = MessageSpec(
    "DescribeProducersResponse",
    61,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "topics",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("name", "string", (0, HI)),
                F(
                    "partitions",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("partition_index", "int32", (0, HI)),
                        F("error_code", "int16", (0, HI)),
                        F("error_message", "string", (0, HI), nullable=(0, HI), null_default=True),
                        F(
                            "active_producers",
                            "struct",
                            (0, HI),
                            array=True,
                            fields=(
                                F("producer_id", "int64", (0, HI)),
                                F("producer_epoch", "int32", (0, HI)),
                                F("last_sequence", "int32", (0, HI), default=-1),
                                F("last_timestamp", "int64", (0, HI), default=-1),
                                F("coordinator_epoch", "int32", (0, HI)),
                                F("current_txn_start_offset", "int64", (0, HI), default=-1),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    ),
)


DESCRIBE_TRANSACTIONS_REQUEST: Final = MessageSpec(
    "DescribeTransactionsRequest",
    65,
    (0, 0),
    (0, HI),
    (F("transactional_ids", "string", (0, HI), array=True),),
)


DESCRIBE_TRANSACTIONS_RESPONSE: Final = MessageSpec(
    "DescribeTransactionsResponse",
    65,
    (0, 0),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F(
            "transaction_states",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("error_code", "int16", (0, HI)),
                F("transactional_id", "string", (0, HI)),
                F("transaction_state", "string", (0, HI)),
                F("transaction_timeout_ms", "int32", (0, HI)),
                F("transaction_start_time_ms", "int64", (0, HI)),
                F("producer_id", "int64", (0, HI)),
                F("producer_epoch", "int16", (0, HI)),
                F(
                    "topics",
                    "struct",
                    (0, HI),
                    array=True,
                    fields=(
                        F("topic", "string", (0, HI)),
                        F("partitions", "int32", (0, HI), array=True),
                    ),
                ),
            ),
        ),
    ),
)


LIST_TRANSACTIONS_REQUEST: Final = MessageSpec(
    "ListTransactionsRequest",
    66,
    (0, 1),
    (0, HI),
    (
        F("state_filters", "string", (0, HI), array=True),
        F("producer_id_filters", "int64", (0, HI), array=True),
        F("duration_filter", "int64", (1, HI), default=-1),
    ),
)


LIST_TRANSACTIONS_RESPONSE: Final = MessageSpec(
    "ListTransactionsResponse",
    66,
    (0, 1),
    (0, HI),
    (
        F("throttle_time_ms", "int32", (0, HI)),
        F("error_code", "int16", (0, HI)),
        F("unknown_state_filters", "string", (0, HI), array=True),
        F(
            "transaction_states",
            "struct",
            (0, HI),
            array=True,
            fields=(
                F("transactional_id", "string", (0, HI)),
                F("producer_id", "int64", (0, HI)),
                F("transaction_state", "string", (0, HI)),
            ),
        ),
    ),
)


REQUESTS: Final[dict[int, MessageSpec]] = {
    ApiKey.PRODUCE: PRODUCE_REQUEST,
    ApiKey.FETCH: FETCH_REQUEST,
    ApiKey.LIST_OFFSETS: LIST_OFFSETS_REQUEST,
    ApiKey.METADATA: METADATA_REQUEST,
    ApiKey.OFFSET_COMMIT: OFFSET_COMMIT_REQUEST,
    ApiKey.OFFSET_FETCH: OFFSET_FETCH_REQUEST,
    ApiKey.FIND_COORDINATOR: FIND_COORDINATOR_REQUEST,
    ApiKey.JOIN_GROUP: JOIN_GROUP_REQUEST,
    ApiKey.HEARTBEAT: HEARTBEAT_REQUEST,
    ApiKey.LEAVE_GROUP: LEAVE_GROUP_REQUEST,
    ApiKey.SYNC_GROUP: SYNC_GROUP_REQUEST,
    ApiKey.DESCRIBE_GROUPS: DESCRIBE_GROUPS_REQUEST,
    ApiKey.LIST_GROUPS: LIST_GROUPS_REQUEST,
    ApiKey.SASL_HANDSHAKE: SASL_HANDSHAKE_REQUEST,
    ApiKey.API_VERSIONS: API_VERSIONS_REQUEST,
    ApiKey.CREATE_TOPICS: CREATE_TOPICS_REQUEST,
    ApiKey.DELETE_TOPICS: DELETE_TOPICS_REQUEST,
    ApiKey.DELETE_RECORDS: DELETE_RECORDS_REQUEST,
    ApiKey.INIT_PRODUCER_ID: INIT_PRODUCER_ID_REQUEST,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OFFSET_FOR_LEADER_EPOCH_REQUEST,
    ApiKey.ADD_PARTITIONS_TO_TXN: ADD_PARTITIONS_TO_TXN_REQUEST,
    ApiKey.ADD_OFFSETS_TO_TXN: ADD_OFFSETS_TO_TXN_REQUEST,
    ApiKey.END_TXN: END_TXN_REQUEST,
    ApiKey.WRITE_TXN_MARKERS: WRITE_TXN_MARKERS_REQUEST,
    ApiKey.TXN_OFFSET_COMMIT: TXN_OFFSET_COMMIT_REQUEST,
    ApiKey.DESCRIBE_ACLS: DESCRIBE_ACLS_REQUEST,
    ApiKey.CREATE_ACLS: CREATE_ACLS_REQUEST,
    ApiKey.DELETE_ACLS: DELETE_ACLS_REQUEST,
    ApiKey.DESCRIBE_CONFIGS: DESCRIBE_CONFIGS_REQUEST,
    ApiKey.ALTER_CONFIGS: ALTER_CONFIGS_REQUEST,
    ApiKey.SASL_AUTHENTICATE: SASL_AUTHENTICATE_REQUEST,
    ApiKey.CREATE_PARTITIONS: CREATE_PARTITIONS_REQUEST,
    ApiKey.DELETE_GROUPS: DELETE_GROUPS_REQUEST,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: INCREMENTAL_ALTER_CONFIGS_REQUEST,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ALTER_PARTITION_REASSIGNMENTS_REQUEST,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: LIST_PARTITION_REASSIGNMENTS_REQUEST,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DESCRIBE_CLIENT_QUOTAS_REQUEST,
    ApiKey.ALTER_CLIENT_QUOTAS: ALTER_CLIENT_QUOTAS_REQUEST,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
    ApiKey.DESCRIBE_PRODUCERS: DESCRIBE_PRODUCERS_REQUEST,
    ApiKey.DESCRIBE_TRANSACTIONS: DESCRIBE_TRANSACTIONS_REQUEST,
    ApiKey.LIST_TRANSACTIONS: LIST_TRANSACTIONS_REQUEST,
}


RESPONSES: Final[dict[int, MessageSpec]] = {
    ApiKey.PRODUCE: PRODUCE_RESPONSE,
    ApiKey.FETCH: FETCH_RESPONSE,
    ApiKey.LIST_OFFSETS: LIST_OFFSETS_RESPONSE,
    ApiKey.METADATA: METADATA_RESPONSE,
    ApiKey.OFFSET_COMMIT: OFFSET_COMMIT_RESPONSE,
    ApiKey.OFFSET_FETCH: OFFSET_FETCH_RESPONSE,
    ApiKey.FIND_COORDINATOR: FIND_COORDINATOR_RESPONSE,
    ApiKey.JOIN_GROUP: JOIN_GROUP_RESPONSE,
    ApiKey.HEARTBEAT: HEARTBEAT_RESPONSE,
    ApiKey.LEAVE_GROUP: LEAVE_GROUP_RESPONSE,
    ApiKey.SYNC_GROUP: SYNC_GROUP_RESPONSE,
    ApiKey.DESCRIBE_GROUPS: DESCRIBE_GROUPS_RESPONSE,
    ApiKey.LIST_GROUPS: LIST_GROUPS_RESPONSE,
    ApiKey.SASL_HANDSHAKE: SASL_HANDSHAKE_RESPONSE,
    ApiKey.API_VERSIONS: API_VERSIONS_RESPONSE,
    ApiKey.CREATE_TOPICS: CREATE_TOPICS_RESPONSE,
    ApiKey.DELETE_TOPICS: DELETE_TOPICS_RESPONSE,
    ApiKey.DELETE_RECORDS: DELETE_RECORDS_RESPONSE,
    ApiKey.INIT_PRODUCER_ID: INIT_PRODUCER_ID_RESPONSE,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OFFSET_FOR_LEADER_EPOCH_RESPONSE,
    ApiKey.ADD_PARTITIONS_TO_TXN: ADD_PARTITIONS_TO_TXN_RESPONSE,
    ApiKey.ADD_OFFSETS_TO_TXN: ADD_OFFSETS_TO_TXN_RESPONSE,
    ApiKey.END_TXN: END_TXN_RESPONSE,
    ApiKey.WRITE_TXN_MARKERS: WRITE_TXN_MARKERS_RESPONSE,
    ApiKey.TXN_OFFSET_COMMIT: TXN_OFFSET_COMMIT_RESPONSE,
    ApiKey.DESCRIBE_ACLS: DESCRIBE_ACLS_RESPONSE,
    ApiKey.CREATE_ACLS: CREATE_ACLS_RESPONSE,
    ApiKey.DELETE_ACLS: DELETE_ACLS_RESPONSE,
    ApiKey.DESCRIBE_CONFIGS: DESCRIBE_CONFIGS_RESPONSE,
    ApiKey.ALTER_CONFIGS: ALTER_CONFIGS_RESPONSE,
    ApiKey.SASL_AUTHENTICATE: SASL_AUTHENTICATE_RESPONSE,
    ApiKey.CREATE_PARTITIONS: CREATE_PARTITIONS_RESPONSE,
    ApiKey.DELETE_GROUPS: DELETE_GROUPS_RESPONSE,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: INCREMENTAL_ALTER_CONFIGS_RESPONSE,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: LIST_PARTITION_REASSIGNMENTS_RESPONSE,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DESCRIBE_CLIENT_QUOTAS_RESPONSE,
    ApiKey.ALTER_CLIENT_QUOTAS: ALTER_CLIENT_QUOTAS_RESPONSE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
    ApiKey.DESCRIBE_PRODUCERS: DESCRIBE_PRODUCERS_RESPONSE,
    ApiKey.DESCRIBE_TRANSACTIONS: DESCRIBE_TRANSACTIONS_RESPONSE,
    ApiKey.LIST_TRANSACTIONS: LIST_TRANSACTIONS_RESPONSE,
}
