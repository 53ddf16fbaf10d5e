from brook.v1 import common_pb2 as _common_pb2
from brook.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKS_UNSPECIFIED: _ClassVar[Acks]
    ACKS_NONE: _ClassVar[Acks]
    ACKS_LEADER: _ClassVar[Acks]
    ACKS_ALL: _ClassVar[Acks]

class ProduceOrigin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRODUCE_ORIGIN_UNSPECIFIED: _ClassVar[ProduceOrigin]
    PRODUCE_ORIGIN_COORDINATOR: _ClassVar[ProduceOrigin]

class OffsetSpec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OFFSET_SPEC_UNSPECIFIED: _ClassVar[OffsetSpec]
    OFFSET_SPEC_EARLIEST: _ClassVar[OffsetSpec]
    OFFSET_SPEC_LATEST: _ClassVar[OffsetSpec]
    OFFSET_SPEC_TIMESTAMP: _ClassVar[OffsetSpec]
    OFFSET_SPEC_MAX_TIMESTAMP: _ClassVar[OffsetSpec]
    OFFSET_SPEC_OFFSET: _ClassVar[OffsetSpec]
ACKS_UNSPECIFIED: Acks
ACKS_NONE: Acks
ACKS_LEADER: Acks
ACKS_ALL: Acks
PRODUCE_ORIGIN_UNSPECIFIED: ProduceOrigin
PRODUCE_ORIGIN_COORDINATOR: ProduceOrigin
OFFSET_SPEC_UNSPECIFIED: OffsetSpec
OFFSET_SPEC_EARLIEST: OffsetSpec
OFFSET_SPEC_LATEST: OffsetSpec
OFFSET_SPEC_TIMESTAMP: OffsetSpec
OFFSET_SPEC_MAX_TIMESTAMP: OffsetSpec
OFFSET_SPEC_OFFSET: OffsetSpec

class ProduceRequest(_message.Message):
    __slots__ = ("acks", "timeout_ms", "partitions", "transactional_id", "origin")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    acks: Acks
    timeout_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProduceData]
    transactional_id: str
    origin: ProduceOrigin
    def __init__(self, acks: _Optional[_Union[Acks, str]] = ..., timeout_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionProduceData, _Mapping]]] = ..., transactional_id: _Optional[str] = ..., origin: _Optional[_Union[ProduceOrigin, str]] = ...) -> None: ...

class PartitionProduceData(_message.Message):
    __slots__ = ("topic", "partition", "records")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    records: bytes
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., records: _Optional[bytes] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("partitions", "throttle_time_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProduceResponse]
    throttle_time_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionProduceResponse, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class PartitionProduceResponse(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "base_offset", "log_append_time_ms", "log_start_offset", "batch_errors", "current_leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_APPEND_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCH_ERRORS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    batch_errors: _containers.RepeatedCompositeFieldContainer[BatchError]
    current_leader: _common_pb2.LeaderHint
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., base_offset: _Optional[int] = ..., log_append_time_ms: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., batch_errors: _Optional[_Iterable[_Union[BatchError, _Mapping]]] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ...) -> None: ...

class BatchError(_message.Message):
    __slots__ = ("index", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    message: str
    def __init__(self, index: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ProduceRecordsRequest(_message.Message):
    __slots__ = ("acks", "timeout_ms", "partitions")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    acks: Acks
    timeout_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionRecords]
    def __init__(self, acks: _Optional[_Union[Acks, str]] = ..., timeout_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionRecords, _Mapping]]] = ...) -> None: ...

class PartitionRecords(_message.Message):
    __slots__ = ("topic", "partition", "records", "compression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    compression: _common_pb2.CompressionType
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., compression: _Optional[_Union[_common_pb2.CompressionType, str]] = ...) -> None: ...

class ProduceRecordsResponse(_message.Message):
    __slots__ = ("partitions", "throttle_time_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProduceResponse]
    throttle_time_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionProduceResponse, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "partitions", "decode_records")
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DECODE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: _common_pb2.IsolationLevel
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartition]
    decode_records: bool
    def __init__(self, max_wait_ms: _Optional[int] = ..., min_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., isolation_level: _Optional[_Union[_common_pb2.IsolationLevel, str]] = ..., partitions: _Optional[_Iterable[_Union[FetchPartition, _Mapping]]] = ..., decode_records: _Optional[bool] = ...) -> None: ...

class FetchPartition(_message.Message):
    __slots__ = ("topic", "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "last_fetched_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., partition_max_bytes: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("partitions", "throttle_time_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartitionResponse]
    throttle_time_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchPartitionResponse, _Mapping]]] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class FetchPartitionResponse(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "high_watermark", "last_stable_offset", "log_start_offset", "records", "decoded_records", "aborted_transactions", "current_leader", "next_fetch_offset", "diverging_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DECODED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    ABORTED_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    NEXT_FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    decoded_records: _containers.RepeatedCompositeFieldContainer[_common_pb2.Record]
    aborted_transactions: _containers.RepeatedCompositeFieldContainer[_common_pb2.AbortedTransaction]
    current_leader: _common_pb2.LeaderHint
    next_fetch_offset: int
    diverging_epoch: _common_pb2.EpochEndOffset
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., decoded_records: _Optional[_Iterable[_Union[_common_pb2.Record, _Mapping]]] = ..., aborted_transactions: _Optional[_Iterable[_Union[_common_pb2.AbortedTransaction, _Mapping]]] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ..., next_fetch_offset: _Optional[int] = ..., diverging_epoch: _Optional[_Union[_common_pb2.EpochEndOffset, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("partitions", "isolation_level", "max_bytes", "partition_max_bytes", "decode_records")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    DECODE_RECORDS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[SubscribePartition]
    isolation_level: _common_pb2.IsolationLevel
    max_bytes: int
    partition_max_bytes: int
    decode_records: bool
    def __init__(self, partitions: _Optional[_Iterable[_Union[SubscribePartition, _Mapping]]] = ..., isolation_level: _Optional[_Union[_common_pb2.IsolationLevel, str]] = ..., max_bytes: _Optional[int] = ..., partition_max_bytes: _Optional[int] = ..., decode_records: _Optional[bool] = ...) -> None: ...

class SubscribePartition(_message.Message):
    __slots__ = ("topic", "partition", "start", "offset", "current_leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    start: OffsetSpec
    offset: int
    current_leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., start: _Optional[_Union[OffsetSpec, str]] = ..., offset: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[FetchPartitionResponse]
    def __init__(self, partitions: _Optional[_Iterable[_Union[FetchPartitionResponse, _Mapping]]] = ...) -> None: ...

class ListOffsetsRequest(_message.Message):
    __slots__ = ("isolation_level", "partitions")
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    isolation_level: _common_pb2.IsolationLevel
    partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsPartition]
    def __init__(self, isolation_level: _Optional[_Union[_common_pb2.IsolationLevel, str]] = ..., partitions: _Optional[_Iterable[_Union[ListOffsetsPartition, _Mapping]]] = ...) -> None: ...

class ListOffsetsPartition(_message.Message):
    __slots__ = ("topic", "partition", "spec", "timestamp_ms", "current_leader_epoch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    spec: OffsetSpec
    timestamp_ms: int
    current_leader_epoch: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., spec: _Optional[_Union[OffsetSpec, str]] = ..., timestamp_ms: _Optional[int] = ..., current_leader_epoch: _Optional[int] = ...) -> None: ...

class ListOffsetsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ListOffsetsPartitionResponse]
    def __init__(self, partitions: _Optional[_Iterable[_Union[ListOffsetsPartitionResponse, _Mapping]]] = ...) -> None: ...

class ListOffsetsPartitionResponse(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "offset", "timestamp_ms", "leader_epoch", "current_leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    offset: int
    timestamp_ms: int
    leader_epoch: int
    current_leader: _common_pb2.LeaderHint
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ...) -> None: ...

class GetMetadataRequest(_message.Message):
    __slots__ = ("topics", "include_internal")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INTERNAL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    include_internal: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., include_internal: _Optional[bool] = ...) -> None: ...

class GetMetadataResponse(_message.Message):
    __slots__ = ("cluster_id", "controller_id", "brokers", "topics", "metadata_offset", "controller_addresses")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    controller_id: int
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerMetadata]
    topics: _containers.RepeatedCompositeFieldContainer[TopicMetadata]
    metadata_offset: int
    controller_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_id: _Optional[str] = ..., controller_id: _Optional[int] = ..., brokers: _Optional[_Iterable[_Union[BrokerMetadata, _Mapping]]] = ..., topics: _Optional[_Iterable[_Union[TopicMetadata, _Mapping]]] = ..., metadata_offset: _Optional[int] = ..., controller_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerMetadata(_message.Message):
    __slots__ = ("node_id", "role", "endpoints", "rack", "fenced")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    role: _common_pb2.NodeRole
    endpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Endpoint]
    rack: str
    fenced: bool
    def __init__(self, node_id: _Optional[int] = ..., role: _Optional[_Union[_common_pb2.NodeRole, str]] = ..., endpoints: _Optional[_Iterable[_Union[_common_pb2.Endpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., fenced: _Optional[bool] = ...) -> None: ...

class TopicMetadata(_message.Message):
    __slots__ = ("name", "topic_id", "internal", "error_code", "error_message", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    topic_id: bytes
    internal: bool
    error_code: _errors_pb2.ErrorCode
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionMetadata]
    def __init__(self, name: _Optional[str] = ..., topic_id: _Optional[bytes] = ..., internal: _Optional[bool] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionMetadata, _Mapping]]] = ...) -> None: ...

class PartitionMetadata(_message.Message):
    __slots__ = ("partition", "error_code", "leader_id", "leader_epoch", "replicas", "isr", "offline_replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    error_code: _errors_pb2.ErrorCode
    leader_id: int
    leader_epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    offline_replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., leader_id: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., offline_replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "transaction_timeout_ms", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class DeleteRecordsRequest(_message.Message):
    __slots__ = ("partitions", "timeout_ms")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsPartition]
    timeout_ms: int
    def __init__(self, partitions: _Optional[_Iterable[_Union[DeleteRecordsPartition, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteRecordsPartition(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class DeleteRecordsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[DeleteRecordsPartitionResponse]
    def __init__(self, partitions: _Optional[_Iterable[_Union[DeleteRecordsPartitionResponse, _Mapping]]] = ...) -> None: ...

class DeleteRecordsPartitionResponse(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "low_watermark")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LOW_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    low_watermark: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., low_watermark: _Optional[int] = ...) -> None: ...

class WriteTxnMarkersRequest(_message.Message):
    __slots__ = ("markers", "timeout_ms")
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[TxnMarker]
    timeout_ms: int
    def __init__(self, markers: _Optional[_Iterable[_Union[TxnMarker, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class TxnMarker(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "committed", "coordinator_epoch", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicPartition]
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ..., coordinator_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[_common_pb2.TopicPartition, _Mapping]]] = ...) -> None: ...

class WriteTxnMarkersResponse(_message.Message):
    __slots__ = ("markers",)
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    markers: _containers.RepeatedCompositeFieldContainer[TxnMarkerResult]
    def __init__(self, markers: _Optional[_Iterable[_Union[TxnMarkerResult, _Mapping]]] = ...) -> None: ...

class TxnMarkerResult(_message.Message):
    __slots__ = ("producer_id", "partitions")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[TxnMarkerPartitionResult]
    def __init__(self, producer_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TxnMarkerPartitionResult, _Mapping]]] = ...) -> None: ...

class TxnMarkerPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "current_leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    current_leader: _common_pb2.LeaderHint
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ...) -> None: ...

class DescribeProducersRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[_common_pb2.TopicPartition, _Mapping]]] = ...) -> None: ...

class DescribeProducersResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionProducers]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionProducers, _Mapping]]] = ...) -> None: ...

class PartitionProducers(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "current_leader", "producers")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_LEADER_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    current_leader: _common_pb2.LeaderHint
    producers: _containers.RepeatedCompositeFieldContainer[ProducerDescription]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., current_leader: _Optional[_Union[_common_pb2.LeaderHint, _Mapping]] = ..., producers: _Optional[_Iterable[_Union[ProducerDescription, _Mapping]]] = ...) -> None: ...

class ProducerDescription(_message.Message):
    __slots__ = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch", "current_txn_start_offset")
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TXN_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int
    def __init__(self, producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., last_sequence: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., coordinator_epoch: _Optional[int] = ..., current_txn_start_offset: _Optional[int] = ...) -> None: ...

class DescribeLogDirsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicPartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[_common_pb2.TopicPartition, _Mapping]]] = ...) -> None: ...

class DescribeLogDirsResponse(_message.Message):
    __slots__ = ("log_dirs",)
    LOG_DIRS_FIELD_NUMBER: _ClassVar[int]
    log_dirs: _containers.RepeatedCompositeFieldContainer[LogDirDescription]
    def __init__(self, log_dirs: _Optional[_Iterable[_Union[LogDirDescription, _Mapping]]] = ...) -> None: ...

class LogDirDescription(_message.Message):
    __slots__ = ("path", "partitions")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    path: str
    partitions: _containers.RepeatedCompositeFieldContainer[LogDirPartition]
    def __init__(self, path: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[LogDirPartition, _Mapping]]] = ...) -> None: ...

class LogDirPartition(_message.Message):
    __slots__ = ("topic", "partition", "size_bytes", "log_start_offset", "log_end_offset", "compacted", "clean_bytes", "dirty_bytes", "dirty_ratio", "first_dirty_offset", "first_uncleanable_offset", "uncleanable", "uncleanable_reason", "last_cleaned_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOG_START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    CLEAN_BYTES_FIELD_NUMBER: _ClassVar[int]
    DIRTY_BYTES_FIELD_NUMBER: _ClassVar[int]
    DIRTY_RATIO_FIELD_NUMBER: _ClassVar[int]
    FIRST_DIRTY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNCLEANABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    UNCLEANABLE_FIELD_NUMBER: _ClassVar[int]
    UNCLEANABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_CLEANED_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    compacted: bool
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    first_dirty_offset: int
    first_uncleanable_offset: int
    uncleanable: bool
    uncleanable_reason: str
    last_cleaned_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., size_bytes: _Optional[int] = ..., log_start_offset: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., compacted: _Optional[bool] = ..., clean_bytes: _Optional[int] = ..., dirty_bytes: _Optional[int] = ..., dirty_ratio: _Optional[float] = ..., first_dirty_offset: _Optional[int] = ..., first_uncleanable_offset: _Optional[int] = ..., uncleanable: _Optional[bool] = ..., uncleanable_reason: _Optional[str] = ..., last_cleaned_ms: _Optional[int] = ...) -> None: ...
