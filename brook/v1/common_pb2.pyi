from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TimestampType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIMESTAMP_TYPE_UNSPECIFIED: _ClassVar[TimestampType]
    TIMESTAMP_TYPE_CREATE_TIME: _ClassVar[TimestampType]
    TIMESTAMP_TYPE_LOG_APPEND_TIME: _ClassVar[TimestampType]

class CompressionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_TYPE_UNSPECIFIED: _ClassVar[CompressionType]
    COMPRESSION_TYPE_NONE: _ClassVar[CompressionType]
    COMPRESSION_TYPE_GZIP: _ClassVar[CompressionType]
    COMPRESSION_TYPE_SNAPPY: _ClassVar[CompressionType]
    COMPRESSION_TYPE_LZ4: _ClassVar[CompressionType]
    COMPRESSION_TYPE_ZSTD: _ClassVar[CompressionType]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ISOLATION_LEVEL_UNSPECIFIED: _ClassVar[IsolationLevel]
    ISOLATION_LEVEL_READ_UNCOMMITTED: _ClassVar[IsolationLevel]
    ISOLATION_LEVEL_READ_COMMITTED: _ClassVar[IsolationLevel]

class NodeRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_ROLE_UNSPECIFIED: _ClassVar[NodeRole]
    NODE_ROLE_STORAGE_NODE: _ClassVar[NodeRole]
    NODE_ROLE_GROUP_COORDINATOR: _ClassVar[NodeRole]
    NODE_ROLE_GATEWAY: _ClassVar[NodeRole]
    NODE_ROLE_CONTROLLER: _ClassVar[NodeRole]
TIMESTAMP_TYPE_UNSPECIFIED: TimestampType
TIMESTAMP_TYPE_CREATE_TIME: TimestampType
TIMESTAMP_TYPE_LOG_APPEND_TIME: TimestampType
COMPRESSION_TYPE_UNSPECIFIED: CompressionType
COMPRESSION_TYPE_NONE: CompressionType
COMPRESSION_TYPE_GZIP: CompressionType
COMPRESSION_TYPE_SNAPPY: CompressionType
COMPRESSION_TYPE_LZ4: CompressionType
COMPRESSION_TYPE_ZSTD: CompressionType
ISOLATION_LEVEL_UNSPECIFIED: IsolationLevel
ISOLATION_LEVEL_READ_UNCOMMITTED: IsolationLevel
ISOLATION_LEVEL_READ_COMMITTED: IsolationLevel
NODE_ROLE_UNSPECIFIED: NodeRole
NODE_ROLE_STORAGE_NODE: NodeRole
NODE_ROLE_GROUP_COORDINATOR: NodeRole
NODE_ROLE_GATEWAY: NodeRole
NODE_ROLE_CONTROLLER: NodeRole

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class RecordHeader(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("key", "value", "headers", "timestamp_ms", "offset", "timestamp_type")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_TYPE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[RecordHeader]
    timestamp_ms: int
    offset: int
    timestamp_type: TimestampType
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[RecordHeader, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_type: _Optional[_Union[TimestampType, str]] = ...) -> None: ...

class Endpoint(_message.Message):
    __slots__ = ("listener", "host", "port")
    LISTENER_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    listener: str
    host: str
    port: int
    def __init__(self, listener: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class NodeHint(_message.Message):
    __slots__ = ("node_id", "endpoints")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    def __init__(self, node_id: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ...) -> None: ...

class LeaderHint(_message.Message):
    __slots__ = ("leader_id", "leader_epoch", "endpoints")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    leader_epoch: int
    endpoints: _containers.RepeatedCompositeFieldContainer[Endpoint]
    def __init__(self, leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., endpoints: _Optional[_Iterable[_Union[Endpoint, _Mapping]]] = ...) -> None: ...

class EpochEndOffset(_message.Message):
    __slots__ = ("epoch", "end_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    end_offset: int
    def __init__(self, epoch: _Optional[int] = ..., end_offset: _Optional[int] = ...) -> None: ...

class AbortedTransaction(_message.Message):
    __slots__ = ("producer_id", "first_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    first_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., first_offset: _Optional[int] = ...) -> None: ...
