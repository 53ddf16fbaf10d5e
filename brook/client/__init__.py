"""Brook's Python client SDK: produce to and consume from a Brook cluster over gRPC.

    from brook.client import Consumer, Producer, TopicPartition

    with Producer(bootstrap_servers="127.0.0.1:9101") as producer:
        producer.send("events", b"hello", key=b"user-1")

    with Consumer(bootstrap_servers="127.0.0.1:9101", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", 0)])
        for record in consumer.poll(timeout=1.0):
            print(record.offset, record.key, record.value)

Settings use Kafka's client configuration names and defaults (``brook.client.config``).
``AsyncProducer`` and ``AsyncConsumer`` are the asyncio flavours of the same clients;
``Admin`` creates, describes and deletes topics and reads and changes configuration through
the controllers.
"""

from brook.client.accumulator import RecordFuture
from brook.client.admin import (
    Admin,
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ConsumerGroupState,
    MemberDescription,
    NewTopic,
    NodeDescription,
    OffsetAndMetadata,
    PartitionDescription,
    PartitionLag,
    ProducerState,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
    TransactionState,
)
from brook.client.config import channel_security
from brook.client.consumer import AsyncConsumer, Consumer
from brook.client.errors import (
    ApiError,
    BrookClientError,
    ClientClosedError,
    ClientTimeoutError,
    CommitFailedError,
    ConfigError,
    FencedInstanceIdError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
    UnknownTopicOrPartitionError,
)
from brook.client.group.coordinator import ConsumerGroupMetadata
from brook.client.producer import AsyncProducer, Producer
from brook.client.types import (
    ConsumerRecord,
    OffsetAndTimestamp,
    PreparedTransaction,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AlterConfigOp",
    "ApiError",
    "AsyncConsumer",
    "AsyncProducer",
    "BrookClientError",
    "ClientClosedError",
    "ClientTimeoutError",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "ConsumerGroupState",
    "ConsumerRecord",
    "FencedInstanceIdError",
    "MemberDescription",
    "NewTopic",
    "NoOffsetForPartitionError",
    "NodeDescription",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "PartitionDescription",
    "PartitionLag",
    "PreparedTransaction",
    "Producer",
    "ProducerFencedError",
    "ProducerState",
    "RecordFuture",
    "RecordMetadata",
    "RecordTooLargeError",
    "TimestampType",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
    "TransactionStateError",
    "UnknownTopicOrPartitionError",
    "channel_security",
]
