from brook.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConfigResourceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONFIG_RESOURCE_TYPE_UNSPECIFIED: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_TYPE_TOPIC: _ClassVar[ConfigResourceType]
    CONFIG_RESOURCE_TYPE_BROKER: _ClassVar[ConfigResourceType]
CONFIG_RESOURCE_TYPE_UNSPECIFIED: ConfigResourceType
CONFIG_RESOURCE_TYPE_TOPIC: ConfigResourceType
CONFIG_RESOURCE_TYPE_BROKER: ConfigResourceType

class MetadataRecord(_message.Message):
    __slots__ = ("cluster", "broker", "remove_broker", "topic", "remove_topic", "partition", "config", "producer_ids", "coordinator")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    REMOVE_BROKER_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    REMOVE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_IDS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    cluster: ClusterRecord
    broker: BrokerRecord
    remove_broker: RemoveBrokerRecord
    topic: TopicRecord
    remove_topic: RemoveTopicRecord
    partition: PartitionRecord
    config: ConfigRecord
    producer_ids: ProducerIdsRecord
    coordinator: CoordinatorRecord
    def __init__(self, cluster: _Optional[_Union[ClusterRecord, _Mapping]] = ..., broker: _Optional[_Union[BrokerRecord, _Mapping]] = ..., remove_broker: _Optional[_Union[RemoveBrokerRecord, _Mapping]] = ..., topic: _Optional[_Union[TopicRecord, _Mapping]] = ..., remove_topic: _Optional[_Union[RemoveTopicRecord, _Mapping]] = ..., partition: _Optional[_Union[PartitionRecord, _Mapping]] = ..., config: _Optional[_Union[ConfigRecord, _Mapping]] = ..., producer_ids: _Optional[_Union[ProducerIdsRecord, _Mapping]] = ..., coordinator: _Optional[_Union[CoordinatorRecord, _Mapping]] = ...) -> None: ...

class ClusterRecord(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    def __init__(self, cluster_id: _Optional[str] = ...) -> None: ...

class BrokerRecord(_message.Message):
    __slots__ = ("node_id", "broker_epoch", "incarnation_id", "role", "endpoints", "rack", "fenced", "in_controlled_shutdown")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    IN_CONTROLLED_SHUTDOWN_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    broker_epoch: int
    incarnation_id: str
    role: _common_pb2.NodeRole
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    rack: str
    fenced: bool
    in_controlled_shutdown: bool
    def __init__(self, node_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., role: _Optional[_Union[_common_pb2.NodeRole, str]] = ..., endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ..., in_controlled_shutdown: _Optional[bool] = ...) -> None: ...

class RemoveBrokerRecord(_message.Message):
    __slots__ = ("node_id", "broker_epoch")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    broker_epoch: int
    def __init__(self, node_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class TopicRecord(_message.Message):
    __slots__ = ("name", "topic_id", "internal")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    internal: bool
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., internal: _Optional[bool] = ...) -> None: ...

class RemoveTopicRecord(_message.Message):
    __slots__ = ("topic_id", "name")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    name: str
    def __init__(self, topic_id: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class PartitionRecord(_message.Message):
    __slots__ = ("topic_id", "topic", "partition", "replicas", "isr", "leader", "leader_epoch", "partition_epoch", "adding_replicas", "removing_replicas")
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic_id: bytes
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic_id: _Optional[bytes] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class ConfigRecord(_message.Message):
    __slots__ = ("resource_type", "resource_name", "name", "value")
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str
    def __init__(self, resource_type: _Optional[_Union[ConfigResourceType, str]] = ..., resource_name: _Optional[str] = ..., name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ProducerIdsRecord(_message.Message):
    __slots__ = ("node_id", "broker_epoch", "first_producer_id", "size")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    broker_epoch: int
    first_producer_id: int
    size: int
    def __init__(self, node_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., first_producer_id: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class CoordinatorRecord(_message.Message):
    __slots__ = ("offsets_partition", "coordinator_id", "coordinator_epoch")
    OFFSETS_PARTITION_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    offsets_partition: int
    coordinator_id: int
    coordinator_epoch: int
    def __init__(self, offsets_partition: _Optional[int] = ..., coordinator_id: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...
