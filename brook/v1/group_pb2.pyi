from brook.v1 import common_pb2 as _common_pb2
from brook.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CoordinatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COORDINATOR_TYPE_UNSPECIFIED: _ClassVar[CoordinatorType]
    COORDINATOR_TYPE_GROUP: _ClassVar[CoordinatorType]
    COORDINATOR_TYPE_TRANSACTION: _ClassVar[CoordinatorType]

class GroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATE_UNSPECIFIED: _ClassVar[GroupState]
    GROUP_STATE_EMPTY: _ClassVar[GroupState]
    GROUP_STATE_PREPARING_REBALANCE: _ClassVar[GroupState]
    GROUP_STATE_COMPLETING_REBALANCE: _ClassVar[GroupState]
    GROUP_STATE_STABLE: _ClassVar[GroupState]
    GROUP_STATE_DEAD: _ClassVar[GroupState]
COORDINATOR_TYPE_UNSPECIFIED: CoordinatorType
COORDINATOR_TYPE_GROUP: CoordinatorType
COORDINATOR_TYPE_TRANSACTION: CoordinatorType
GROUP_STATE_UNSPECIFIED: GroupState
GROUP_STATE_EMPTY: GroupState
GROUP_STATE_PREPARING_REBALANCE: GroupState
GROUP_STATE_COMPLETING_REBALANCE: GroupState
GROUP_STATE_STABLE: GroupState
GROUP_STATE_DEAD: GroupState

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("key_type", "keys")
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    key_type: CoordinatorType
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key_type: _Optional[_Union[CoordinatorType, str]] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("coordinators",)
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    coordinators: _containers.RepeatedCompositeFieldContainer[Coordinator]
    def __init__(self, coordinators: _Optional[_Iterable[_Union[Coordinator, _Mapping]]] = ...) -> None: ...

class Coordinator(_message.Message):
    __slots__ = ("key", "error_code", "error_message", "node_id", "endpoints")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    key: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    node_id: int
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    def __init__(self, key: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., node_id: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "reason", "client_id", "client_host")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[JoinGroupProtocol]
    reason: str
    client_id: str
    client_host: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[JoinGroupProtocol, _Mapping]]] = ..., reason: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ...) -> None: ...

class JoinGroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "generation_id", "protocol_type", "protocol_name", "leader_id", "skip_assignment", "member_id", "members", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    skip_assignment: bool
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., leader_id: _Optional[str] = ..., skip_assignment: _Optional[bool] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "protocol_type", "protocol_name", "assignments")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocol_name: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "protocol_type", "protocol_name", "assignment", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    protocol_type: str
    protocol_name: str
    assignment: bytes
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., assignment: _Optional[bytes] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[LeavingMember]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeavingMember, _Mapping]]] = ...) -> None: ...

class LeavingMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "reason")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    reason: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "members", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    members: _containers.RepeatedCompositeFieldContainer[LeavingMemberResult]
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., members: _Optional[_Iterable[_Union[LeavingMemberResult, _Mapping]]] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class LeavingMemberResult(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "error_code", "error_message")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class OffsetCommitPartition(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "committed_leader_epoch", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ("partitions", "coordinator")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartitionResult]
    coordinator: _common_pb2.NodeHint
    def __init__(self, partitions: _Optional[_Iterable[_Union[OffsetCommitPartitionResult, _Mapping]]] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class OffsetCommitPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "partitions", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicPartition]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[_common_pb2.TopicPartition, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetFetchPartitionResult]
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetFetchPartitionResult, _Mapping]]] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class OffsetFetchPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "committed_leader_epoch", "metadata", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., committed_leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message", "state", "protocol_type", "protocol_name", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedGroupMember]
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedGroupMember, _Mapping]]] = ...) -> None: ...

class DescribedGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "metadata", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_HOST_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., client_host: _Optional[str] = ..., metadata: _Optional[bytes] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("states_filter", "types_filter")
    STATES_FILTER_FIELD_NUMBER: _ClassVar[int]
    TYPES_FILTER_FIELD_NUMBER: _ClassVar[int]
    states_filter: _containers.RepeatedScalarFieldContainer[GroupState]
    types_filter: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states_filter: _Optional[_Iterable[_Union[GroupState, str]]] = ..., types_filter: _Optional[_Iterable[str]] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "protocol_type", "state")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    protocol_type: str
    state: GroupState
    def __init__(self, group_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupResult, _Mapping]]] = ...) -> None: ...

class DeleteGroupResult(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteOffsetsRequest(_message.Message):
    __slots__ = ("group_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicPartition]
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[_common_pb2.TopicPartition, _Mapping]]] = ...) -> None: ...

class DeleteOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[DeleteOffsetsPartitionResult]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[DeleteOffsetsPartitionResult, _Mapping]]] = ...) -> None: ...

class DeleteOffsetsPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class TxnCommitOffsetsRequest(_message.Message):
    __slots__ = ("transactional_id", "group_id", "producer_id", "producer_epoch", "generation_id", "member_id", "group_instance_id", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, transactional_id: _Optional[str] = ..., group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class TxnCommitOffsetsResponse(_message.Message):
    __slots__ = ("partitions", "coordinator")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartitionResult]
    coordinator: _common_pb2.NodeHint
    def __init__(self, partitions: _Optional[_Iterable[_Union[OffsetCommitPartitionResult, _Mapping]]] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...

class CompleteTransactionRequest(_message.Message):
    __slots__ = ("group_id", "producer_id", "producer_epoch", "committed", "coordinator_epoch", "transactional_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transactional_id: str
    def __init__(self, group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ..., coordinator_epoch: _Optional[int] = ..., transactional_id: _Optional[str] = ...) -> None: ...

class CompleteTransactionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    coordinator: _common_pb2.NodeHint
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., coordinator: _Optional[_Union[_common_pb2.NodeHint, _Mapping]] = ...) -> None: ...
