"""The data and admin APIs' messages against kafka-python's independent protocol classes, in
every version the gateway serves: our encoding decodes there to what was sent, and re-encodes
to the same bytes. The handlers themselves are exercised over a real cluster in
tests/compat/test_gateway_api_versions.py."""

from __future__ import annotations

from typing import Any

import pytest
from brook_gateway.apis import RECOMMENDED_VERSIONS
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import REQUESTS, RESPONSES, ApiKey
from gateway_support import assert_same_bytes_as_kafka_python
from kafka.protocol.admin import configs as kafka_configs
from kafka.protocol.admin import topics as kafka_topics
from kafka.protocol.consumer import fetch as kafka_fetch
from kafka.protocol.consumer import offsets as kafka_offsets
from kafka.protocol.producer import produce as kafka_produce

_LEADER = {"leader_id": 3001, "leader_epoch": 4}
_TOPIC_ID = bytes(range(16))
_ENDPOINTS = [{"node_id": 3001, "host": "gw-1", "port": 9092, "rack": None}]

# api -> (request class, request, response class, response, lowest version to check)
_SAMPLES: dict[ApiKey, tuple[Any, Message, Any, Message, int]] = {
    ApiKey.PRODUCE: (
        kafka_produce.ProduceRequest,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 1, "records": b"\x00batch"}]}
            ],
        },
        kafka_produce.ProduceResponse,
        {
            "responses": [
                {
                    "name": "t",
                    "partition_responses": [
                        {
                            "index": 1,
                            "error_code": 6,
                            "base_offset": -1,
                            "log_append_time_ms": -1,
                            "log_start_offset": 5,
                            "record_errors": [
                                {"batch_index": 0, "batch_index_error_message": "bad"}
                            ],
                            "error_message": "not the leader",
                            "current_leader": _LEADER,
                        }
                    ],
                }
            ],
            "throttle_time_ms": 0,
            "node_endpoints": _ENDPOINTS,
        },
        3,
    ),
    ApiKey.FETCH: (
        kafka_fetch.FetchRequest,
        {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 1,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition": 1,
                            "current_leader_epoch": 4,
                            "fetch_offset": 17,
                            "last_fetched_epoch": 3,
                            "log_start_offset": -1,
                            "partition_max_bytes": 65536,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        kafka_fetch.FetchResponse,
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "error_code": 0,
                            "high_watermark": 20,
                            "last_stable_offset": 20,
                            "log_start_offset": 0,
                            "diverging_epoch": {"epoch": 2, "end_offset": 15},
                            "current_leader": _LEADER,
                            "snapshot_id": {"end_offset": 9, "epoch": 1},
                            "aborted_transactions": [],
                            "preferred_read_replica": -1,
                            "records": b"\x00batch",
                        }
                    ],
                }
            ],
        },
        4,
    ),
    ApiKey.LIST_OFFSETS: (
        kafka_offsets.ListOffsetsRequest,
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 1, "current_leader_epoch": 4, "timestamp": -3},
                        {"partition_index": 2, "current_leader_epoch": -1, "timestamp": 1_700},
                    ],
                }
            ],
        },
        kafka_offsets.ListOffsetsResponse,
        {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "error_code": 0,
                            "timestamp": 1_800,
                            "offset": 17,
                            "leader_epoch": 3,
                        },
                        {
                            "partition_index": 2,
                            "error_code": 74,
                            "timestamp": -1,
                            "offset": -1,
                            "leader_epoch": -1,
                        },
                    ],
                }
            ],
        },
        1,
    ),
    ApiKey.CREATE_TOPICS: (
        kafka_topics.CreateTopicsRequest,
        {
            "topics": [
                {
                    "name": "t",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [],
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                },
                {
                    "name": "placed",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [{"name": "cleanup.policy", "value": None}],
                },
            ],
            "timeout_ms": 30000,
            "validate_only": True,
        },
        kafka_topics.CreateTopicsResponse,
        {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": "t",
                    "topic_id": _TOPIC_ID,
                    "error_code": 0,
                    "error_message": None,
                    "topic_config_error_code": 0,
                    "num_partitions": 3,
                    "replication_factor": 2,
                    "configs": [
                        {
                            "name": "retention.ms",
                            "value": "1000",
                            "read_only": False,
                            "config_source": 1,
                            "is_sensitive": False,
                        }
                    ],
                },
                {
                    "name": "taken",
                    "topic_id": bytes(16),
                    "error_code": 36,
                    "error_message": "exists",
                    "topic_config_error_code": 0,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": [],
                },
            ],
        },
        2,
    ),
    ApiKey.DELETE_TOPICS: (
        kafka_topics.DeleteTopicsRequest,
        {
            "topics": [
                {"name": "t", "topic_id": bytes(16)},
                {"name": None, "topic_id": _TOPIC_ID},
            ],
            "topic_names": ["t", "u"],
            "timeout_ms": 30000,
        },
        kafka_topics.DeleteTopicsResponse,
        {
            "throttle_time_ms": 0,
            "responses": [
                {"name": "t", "topic_id": _TOPIC_ID, "error_code": 0, "error_message": None},
                {"name": "u", "topic_id": bytes(16), "error_code": 3, "error_message": "unknown"},
            ],
        },
        0,
    ),
    ApiKey.DESCRIBE_CONFIGS: (
        kafka_configs.DescribeConfigsRequest,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "t", "configuration_keys": ["retention.ms"]},
                {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
            ],
            "include_synonyms": True,
            "include_documentation": True,
        },
        kafka_configs.DescribeConfigsResponse,
        {
            "throttle_time_ms": 0,
            "results": [
                {
                    "error_code": 0,
                    "error_message": None,
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [
                        {
                            "name": "retention.ms",
                            "value": "1000",
                            "read_only": False,
                            "is_default": False,
                            "config_source": 1,
                            "is_sensitive": False,
                            "synonyms": [{"name": "retention.ms", "value": "1000", "source": 1}],
                            "config_type": 5,
                            "documentation": "How long a record is kept.",
                        }
                    ],
                }
            ],
        },
        0,
    ),
    ApiKey.ALTER_CONFIGS: (
        kafka_configs.AlterConfigsRequest,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [
                        {"name": "retention.ms", "value": "1000"},
                        {"name": "cleanup.policy", "value": None},
                    ],
                }
            ],
            "validate_only": True,
        },
        kafka_configs.AlterConfigsResponse,
        {
            "throttle_time_ms": 0,
            "responses": [
                {
                    "error_code": 40,
                    "error_message": "bad value",
                    "resource_type": 2,
                    "resource_name": "t",
                }
            ],
        },
        0,
    ),
    ApiKey.CREATE_PARTITIONS: (
        kafka_topics.CreatePartitionsRequest,
        {
            "topics": [
                {
                    "name": "t",
                    "count": 4,
                    "assignments": [{"broker_ids": [1]}, {"broker_ids": [2]}],
                },
                {"name": "u", "count": 2, "assignments": None},
            ],
            "timeout_ms": 30000,
            "validate_only": False,
        },
        kafka_topics.CreatePartitionsResponse,
        {
            "throttle_time_ms": 0,
            "results": [
                {"name": "t", "error_code": 0, "error_message": None},
                {"name": "u", "error_code": 37, "error_message": "fewer than now"},
            ],
        },
        0,
    ),
}

_CASES = [
    pytest.param(api, version, direction, id=f"{api.name}-v{version}-{direction}")
    for api, sample in _SAMPLES.items()
    for version in range(sample[4], RECOMMENDED_VERSIONS[api][1] + 1)
    for direction in ("request", "response")
]


@pytest.mark.parametrize(("api", "version", "direction"), _CASES)
def test_api_messages_are_byte_identical_to_kafka_pythons(
    api: ApiKey, version: int, direction: str
) -> None:
    request_class, request, response_class, response, _ = _SAMPLES[api]
    if direction == "request":
        assert_same_bytes_as_kafka_python(request_class, REQUESTS[api], version, request)
    else:
        assert_same_bytes_as_kafka_python(response_class, RESPONSES[api], version, response)
