"""The brook.v1 contract: committed stubs are current, and the API is designed as one piece."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from google.protobuf import descriptor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_protos  # noqa: E402

SERVICES = {
    "storage": "StorageService",
    "replica": "ReplicaService",
    "controller": "ControllerService",
    "admin": "AdminService",
    "group": "GroupCoordinatorService",
    "transaction": "TransactionCoordinatorService",
}


def test_regenerating_stubs_with_grpcio_tools_changes_nothing() -> None:
    assert gen_protos.check() == []


def test_every_proto_file_has_committed_stubs() -> None:
    protos = sorted(p.stem for p in (ROOT / "proto" / "brook" / "v1").glob("*.proto"))
    assert protos, "no .proto files found"
    for name in protos:
        module = importlib.import_module(f"brook.v1.{name}_pb2")
        assert module.DESCRIPTOR.package == "brook.v1"


def _service(module_name: str, service_name: str) -> descriptor.ServiceDescriptor:
    module = importlib.import_module(f"brook.v1.{module_name}_pb2")
    return module.DESCRIPTOR.services_by_name[service_name]


def test_every_service_of_the_system_is_defined_with_its_rpcs() -> None:
    expected = {
        "StorageService": {
            "Produce", "ProduceRecords", "Fetch", "Subscribe", "ListOffsets",
            "GetMetadata", "InitProducerId", "DeleteRecords", "WriteTxnMarkers",
            "DescribeProducers", "DescribeLogDirs",
        },
        "ReplicaService": {"ReplicaFetch", "OffsetForLeaderEpoch"},
        "ControllerService": {
            "RegisterBroker", "BrokerHeartbeat", "WatchMetadata", "AlterPartition",
            "AllocateProducerIds", "DescribeQuorum",
        },
        "AdminService": {
            "CreateTopics", "DeleteTopics", "DescribeTopics", "CreatePartitions",
            "DescribeConfigs", "AlterConfigs", "DescribeCluster", "ElectLeaders",
            "AlterPartitionReassignments", "ListPartitionReassignments", "UnregisterBroker",
            "CreateAcls", "DescribeAcls", "DeleteAcls",
            "AlterUserScramCredentials", "DescribeUserScramCredentials",
            "AlterClientQuotas", "DescribeClientQuotas",
        },
        "GroupCoordinatorService": {
            "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
            "CommitOffsets", "FetchOffsets", "DescribeGroups", "ListGroups", "DeleteGroups",
            "DeleteOffsets",
            "TxnCommitOffsets", "CompleteTransaction",
        },
        "TransactionCoordinatorService": {
            "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
            "DescribeTransactions", "ListTransactions",
        },
    }  # fmt: skip
    for module_name, service_name in SERVICES.items():
        service = _service(module_name, service_name)
        assert {m.name for m in service.methods} == expected[service_name]


def test_streaming_shapes_match_the_design() -> None:
    subscribe = _service("storage", "StorageService").methods_by_name["Subscribe"]
    assert not subscribe.client_streaming and subscribe.server_streaming
    replica_fetch = _service("replica", "ReplicaService").methods_by_name["ReplicaFetch"]
    assert replica_fetch.client_streaming and replica_fetch.server_streaming
    watch = _service("controller", "ControllerService").methods_by_name["WatchMetadata"]
    assert not watch.client_streaming and watch.server_streaming


def test_every_per_partition_result_carries_a_kafka_error_code() -> None:
    from brook.v1 import errors_pb2

    error_enum = errors_pb2.DESCRIPTOR.enum_types_by_name["ErrorCode"]
    checked = 0
    for module_name, service_name in SERVICES.items():
        for method in _service(module_name, service_name).methods:
            stack = [method.output_type]
            seen: set[str] = set()
            while stack:
                message = stack.pop()
                if message.full_name in seen:
                    continue
                seen.add(message.full_name)
                fields = message.fields_by_name
                if "partition" in fields and message.name.endswith(("Response", "Result")):
                    assert "error_code" in fields, f"{message.full_name} has no error_code"
                    assert fields["error_code"].enum_type is error_enum
                    assert "error_message" in fields, f"{message.full_name} has no error_message"
                    checked += 1
                stack.extend(f.message_type for f in message.fields if f.message_type is not None)
    assert checked >= 10


def test_error_codes_have_kafkas_numbers() -> None:
    from brook.v1 import errors_pb2

    code = errors_pb2.ErrorCode
    assert code.Value("ERROR_CODE_NONE") == 0
    assert code.Value("ERROR_CODE_UNKNOWN_SERVER_ERROR") == -1
    assert code.Value("ERROR_CODE_OFFSET_OUT_OF_RANGE") == 1
    assert code.Value("ERROR_CODE_CORRUPT_MESSAGE") == 2
    assert code.Value("ERROR_CODE_UNKNOWN_TOPIC_OR_PARTITION") == 3
    assert code.Value("ERROR_CODE_NOT_LEADER_OR_FOLLOWER") == 6
    assert code.Value("ERROR_CODE_REQUEST_TIMED_OUT") == 7
    assert code.Value("ERROR_CODE_MESSAGE_TOO_LARGE") == 10
    assert code.Value("ERROR_CODE_NOT_ENOUGH_REPLICAS") == 19
    assert code.Value("ERROR_CODE_NOT_ENOUGH_REPLICAS_AFTER_APPEND") == 20
    assert code.Value("ERROR_CODE_NOT_CONTROLLER") == 41
    assert code.Value("ERROR_CODE_INVALID_REQUEST") == 42
    assert code.Value("ERROR_CODE_FENCED_LEADER_EPOCH") == 74
    assert code.Value("ERROR_CODE_FENCED_INSTANCE_ID") == 82
    assert code.Value("ERROR_CODE_INVALID_RECORD") == 87
    assert code.Value("ERROR_CODE_INVALID_UPDATE_VERSION") == 95
    # Contiguous from -1 to the newest code we carry: no number skipped or re-used.
    numbers = sorted(code.values())
    assert numbers == list(range(-1, numbers[-1] + 1))


def test_python_error_table_and_proto_enum_agree_code_for_code() -> None:
    from brook.errors import ErrorCode
    from brook.v1 import errors_pb2

    proto = {
        name.removeprefix("ERROR_CODE_"): number for name, number in errors_pb2.ErrorCode.items()
    }
    python = {member.name: int(member) for member in ErrorCode}
    assert proto == python
