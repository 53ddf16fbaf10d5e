"""The controller's metadata image: the shared ``MetadataImage`` (brook/metadata/image.py, the
one interpretation of the metadata records) plus what only the controller needs of it:

- the object keys a proposal's preconditions name (see commands.py) and ``version``, the state
  of the object a key names;
- topic families ('.' and '_' folded names, which Kafka refuses to let collide);
- the placement ``Load``, kept as partitions change, so placing new ones does not walk every
  partition, and the count of partitions without a leader (for the offline-partitions gauge).

The image is not thread-safe; the state machine and the controller each own one (see
state_machine.py and metadata_view.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from google.protobuf.message import Message

from brook.metadata.delta import ConfigKey
from brook.metadata.image import BROKER, TOPIC, MetadataImage, QuotaEntity
from brook.metadata.info import NO_LEADER
from brook.v1 import metadata_pb2
from brook_controller.placement import Load

__all__ = [
    "BROKER",
    "TOPIC",
    "ConfigKey",
    "ControllerImage",
    "acls_key",
    "broker_key",
    "client_quota_key",
    "cluster_key",
    "configs_key",
    "coordinator_key",
    "partition_key",
    "producer_ids_key",
    "scram_credential_key",
    "topic_family_key",
    "topic_name_key",
]

# Object keys: what a proposal's preconditions name (see commands.py). Each key identifies one
# object of the image whose state a proposal was computed from.


def cluster_key() -> str:
    return "cluster"


def broker_key(node_id: int) -> str:
    return f"broker/{node_id}"


def topic_name_key(name: str) -> str:
    return f"topic/{name}"


def _fold(name: str) -> str:
    return name.replace(".", "_")


def topic_family_key(name: str) -> str:
    """Kafka refuses topics whose names differ only in '.' versus '_' (their metric names
    collide); this key names every topic of such a family at once."""
    return f"topic-family/{_fold(name)}"


def partition_key(topic_id: bytes, partition: int) -> str:
    return f"partition/{topic_id.hex()}/{partition}"


def configs_key(resource_type: int, resource_name: str) -> str:
    return f"configs/{resource_type}/{resource_name}"


def producer_ids_key() -> str:
    return "producer-ids"


def coordinator_key(offsets_partition: int) -> str:
    return f"coordinator/{offsets_partition}"


def acls_key() -> str:
    """Every ACL at once: ACL changes are rare, and CreateAcls' duplicate check reads them
    all."""
    return "acls"


def scram_credential_key(name: str, mechanism: int) -> str:
    """A user's credential for one mechanism (the name last: it may hold '/')."""
    return f"scram/{mechanism}/{name}"


def client_quota_key(entity: QuotaEntity) -> str:
    """Every quota value of one client quota entity."""
    return f"client-quota/{json.dumps(entity)}"


def _serialize(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


@dataclass
class ControllerImage(MetadataImage):
    """The metadata image with the controller's derived figures and object versions."""

    # Topic names by their '.'/'_'-folded form (see topic_family_key).
    families: dict[str, set[str]] = field(default_factory=dict)
    # Replicas per node, kept as partitions change.
    load: Load = field(default_factory=Load)
    # Partitions without a leader (Kafka's OfflinePartitionsCount), kept as partitions change.
    offline_partitions: int = 0

    def _topic_replaced(
        self, previous: metadata_pb2.TopicRecord | None, current: metadata_pb2.TopicRecord | None
    ) -> None:
        if previous is not None:
            members = self.families.get(_fold(previous.name))
            if members is not None:
                members.discard(previous.name)
                if not members:
                    del self.families[_fold(previous.name)]
        if current is not None:
            self.families.setdefault(_fold(current.name), set()).add(current.name)

    def _partition_replaced(
        self,
        previous: metadata_pb2.PartitionRecord | None,
        current: metadata_pb2.PartitionRecord | None,
    ) -> None:
        if previous is not None:
            self.load.add(previous.replicas, -1)
            self.offline_partitions -= previous.leader == NO_LEADER
        if current is not None:
            self.load.add(current.replicas)
            self.offline_partitions += current.leader == NO_LEADER

    def topics_colliding_with(self, name: str) -> list[str]:
        """Existing topics whose names equal ``name`` once '.' and '_' are treated alike."""
        return sorted(self.families.get(_fold(name), ()))

    def version(self, key: str) -> bytes:
        """The state of the object named by ``key``, as bytes that are equal on two replicas
        exactly when the object is: a proposal's preconditions compare these."""
        kind, _, rest = key.partition("/")
        message: Message | None
        if kind == "cluster":
            message = self.cluster
        elif kind == "broker":
            message = self.brokers.get(int(rest))
        elif kind == "topic":
            message = self.topic_by_name(rest)
        elif kind == "topic-family":
            return b"\0".join(n.encode() for n in self.topics_colliding_with(rest))
        elif kind == "partition":
            topic_hex, _, index = rest.partition("/")
            message = self.partition(bytes.fromhex(topic_hex), int(index))
        elif kind == "configs":
            resource_type, _, resource_name = rest.partition("/")
            values = self.configs.get((int(resource_type), resource_name), {})
            return b"\0".join(f"{n}={v}".encode() for n, v in sorted(values.items()))
        elif kind == "client-quota":
            entity = tuple((entity_type, name) for entity_type, name in json.loads(rest))
            quotas = self.client_quotas.get(entity, {})
            return b"\0".join(f"{k}={v!r}".encode() for k, v in sorted(quotas.items()))
        elif kind == "producer-ids":
            message = self.producer_ids
        elif kind == "coordinator":
            message = self.coordinators.get(int(rest))
        elif kind == "acls":
            # An ACL never changes under its id: the set of ids is the state.
            return b"".join(sorted(self.acls))
        elif kind == "scram":
            mechanism, _, name = rest.partition("/")
            message = self.scram_credentials.get((name, int(mechanism)))
        else:
            raise ValueError(f"unknown object key {key!r}")
        # An absent object and an empty one must differ.
        return b"" if message is None else b"=" + _serialize(message)
