"""Which partition a log holds, and how that is spelled as its directory name (``topic-N``)."""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

# Kafka's legal topic names: the same characters and length, so names carry over unchanged.
TOPIC_NAME_MAX_CHARS = 249
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
DELETE_DIR_SUFFIX = "-delete"


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        """The partition directory's name: ``topic-partition``, as Kafka names it."""
        return f"{self.topic}-{self.partition}"

    def deleted_dir_name(self) -> str:
        """A unique name for this partition's directory while it is being deleted.

        The suffix makes a half-deleted directory recognisable after a crash; the uuid lets a
        topic be deleted and re-created before the old directory is gone.
        """
        return f"{self.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``topic-partition``; ValueError naming the problem if it is not one."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic:
            raise ValueError(f"directory name {name!r} is not of the form topic-partition")
        if not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
            raise ValueError(f"directory name {name!r} does not end in a partition number")
        check_topic_name(topic)
        return cls(topic, int(partition))


def check_topic_name(topic: str) -> None:
    """ValueError unless ``topic`` is a legal Kafka topic name."""
    if not topic or len(topic) > TOPIC_NAME_MAX_CHARS:
        raise ValueError(f"topic name must be 1 to {TOPIC_NAME_MAX_CHARS} characters: {topic!r}")
    if topic in (".", ".."):
        raise ValueError(f"topic name cannot be {topic!r}")
    if not _TOPIC_RE.match(topic):
        raise ValueError(
            f"topic name {topic!r} may only contain ASCII letters, digits, '.', '_', '-'"
        )
