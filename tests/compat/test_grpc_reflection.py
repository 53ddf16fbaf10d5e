"""gRPC server reflection (grpc.reflection.v1alpha) on every kind of Brook process, so grpcurl
and other languages' tools can discover the API without the .proto files.

Each process of the compatibility suite's shared cluster (conftest.py) is asked, through
grpc_reflection's own client, which services it serves: exactly its own brook.v1 services, the
standard health service and reflection itself. Each listed service must then resolve to a full
descriptor over the same connection, down to a method's request and response types.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from brook.launcher import LocalCluster, Role

pytestmark = pytest.mark.integration

HEALTH: Final = "grpc.health.v1.Health"
REFLECTION: Final = "grpc.reflection.v1alpha.ServerReflection"
# What each kind of process serves besides health and reflection.
OWN_SERVICES: Final = {
    Role.CONTROLLER: {"brook.v1.ControllerService", "brook.v1.AdminService"},
    Role.STORAGE_NODE: {"brook.v1.StorageService", "brook.v1.ReplicaService"},
    Role.GROUP_COORDINATOR: {
        "brook.v1.GroupCoordinatorService",
        "brook.v1.TransactionCoordinatorService",
    },
    Role.GATEWAY: set(),
}


@pytest.fixture(params=list(OWN_SERVICES), ids=str)
def process(request: pytest.FixtureRequest, compat_cluster: LocalCluster) -> tuple[Role, str]:
    """One process of each role: (role, its gRPC address)."""
    role: Role = request.param
    return role, compat_cluster.grpc_address(compat_cluster.names(role)[0])


@pytest.fixture
def reflection_db(process: tuple[Role, str]) -> Iterator[ProtoReflectionDescriptorDatabase]:
    with grpc.insecure_channel(process[1]) as channel:
        yield ProtoReflectionDescriptorDatabase(channel)


def test_reflection_lists_exactly_the_services_the_process_serves(
    process: tuple[Role, str], reflection_db: ProtoReflectionDescriptorDatabase
) -> None:
    role, _ = process
    listed = list(reflection_db.get_services())
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == OWN_SERVICES[role] | {HEALTH, REFLECTION}


def test_every_listed_service_resolves_to_its_methods_and_message_types(
    reflection_db: ProtoReflectionDescriptorDatabase,
) -> None:
    pool = DescriptorPool(reflection_db)
    for name in reflection_db.get_services():
        service = pool.FindServiceByName(name)
        assert service.methods, f"{name} has no methods"
        for method in service.methods:
            assert pool.FindMethodByName(method.full_name) is method
            for message in (method.input_type, method.output_type):
                assert pool.FindMessageTypeByName(message.full_name) is message


def test_a_storage_node_describes_produce_records_as_the_proto_declares(
    compat_cluster: LocalCluster,
) -> None:
    address = compat_cluster.grpc_address(compat_cluster.names(Role.STORAGE_NODE)[0])
    with grpc.insecure_channel(address) as channel:
        pool = DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        service = pool.FindServiceByName("brook.v1.StorageService")
        method = service.methods_by_name["ProduceRecords"]
        assert method.input_type.full_name == "brook.v1.ProduceRecordsRequest"
        assert method.output_type.full_name == "brook.v1.ProduceRecordsResponse"
        assert not method.server_streaming
        partitions = method.input_type.fields_by_name["partitions"]
        assert partitions.message_type.full_name == "brook.v1.PartitionRecords"
        # Record lives in common.proto: reflection served storage.proto's dependencies too.
        record = partitions.message_type.fields_by_name["records"].message_type
        assert record.full_name == "brook.v1.Record"
        assert record.file.name == "brook/v1/common.proto"
