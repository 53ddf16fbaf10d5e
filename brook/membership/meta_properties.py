"""``meta.properties``: which node and which cluster a data directory belongs to (Kafka's file).

A node writes it into each of its data directories once the controllers have accepted its
registration, and sends the stored cluster id with every later registration. So a data
directory is never silently adopted by another cluster (the controllers answer
INCONSISTENT_CLUSTER_ID) nor by another node id (refused here, before anything is opened).

The format is Kafka's (a Java properties file, ``version=1``, ``node.id``, ``cluster.id``), so
operators read it as they would a Kafka log dir's. Writes are atomic: a temporary file, fsync,
rename, fsync of the directory; a crash leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from brook.config import ConfigError, load_properties

__all__ = [
    "META_PROPERTIES_FILE",
    "MetaProperties",
    "MetaPropertiesError",
    "MetaPropertiesStore",
    "read_meta_properties",
    "write_meta_properties",
]

META_PROPERTIES_FILE: Final = "meta.properties"
META_PROPERTIES_VERSION: Final = 1
_TEMP_SUFFIX: Final = ".tmp"
# Kafka's cluster ids are 22 characters of URL-safe base64; the bound keeps a damaged file
# from being sent to the controllers as an id.
_CLUSTER_ID_RE: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class MetaPropertiesError(Exception):
    """A data directory that this node must not use as it is (the message says why and what
    to do)."""


@dataclass(frozen=True)
class MetaProperties:
    node_id: int
    cluster_id: str


def _parse(path: Path) -> MetaProperties:
    try:
        raw = load_properties(path)
    except ConfigError as exc:
        # Its messages name the file (and the line).
        raise MetaPropertiesError(str(exc)) from None
    values = {name: setting.value.strip() for name, setting in raw.items()}
    version = values.get("version")
    if version != str(META_PROPERTIES_VERSION):
        raise MetaPropertiesError(
            f"{path}: version {version!r} is not supported (expected {META_PROPERTIES_VERSION})"
        )
    node_text = values.get("node.id", "")
    if not node_text.isdigit():
        raise MetaPropertiesError(f"{path}: node.id {node_text!r} is not a node id")
    cluster_id = values.get("cluster.id", "")
    if not _CLUSTER_ID_RE.match(cluster_id):
        raise MetaPropertiesError(f"{path}: cluster.id {cluster_id!r} is not a cluster id")
    return MetaProperties(int(node_text), cluster_id)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The directory's meta.properties, None if it has none. MetaPropertiesError if the file
    is damaged or of an unknown version."""
    path = directory / META_PROPERTIES_FILE
    if not path.exists():
        return None
    return _parse(path)


def write_meta_properties(directory: Path, properties: MetaProperties) -> None:
    """Replace the directory's meta.properties atomically (the directory must exist)."""
    if not _CLUSTER_ID_RE.match(properties.cluster_id) or properties.node_id < 0:
        raise ValueError(f"not storable: {properties}")
    text = (
        "# Which node and cluster this data directory belongs to; written by Brook.\n"
        f"version={META_PROPERTIES_VERSION}\n"
        f"node.id={properties.node_id}\n"
        f"cluster.id={properties.cluster_id}\n"
    )
    path = directory / META_PROPERTIES_FILE
    temp = path.with_name(path.name + _TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


class MetaPropertiesStore:
    """The meta.properties of every data directory of one node, read and written together.

    Blocking file I/O: call it from a thread (``asyncio.to_thread``) on a server's loop."""

    def __init__(self, directories: Sequence[Path], node_id: int) -> None:
        self.directories = tuple(directories)
        self.node_id = node_id

    def load(self) -> str | None:
        """The cluster id the directories belong to, None if none has joined a cluster yet.

        MetaPropertiesError if a directory belongs to another node, or two directories to
        different clusters."""
        found: dict[Path, MetaProperties] = {}
        for directory in self.directories:
            properties = read_meta_properties(directory)
            if properties is not None:
                found[directory] = properties
        for directory, properties in found.items():
            if properties.node_id != self.node_id:
                raise MetaPropertiesError(
                    f"data directory {directory} belongs to node {properties.node_id}, not to "
                    f"this node ({self.node_id}): fix node.id or log.dirs"
                )
        clusters = {properties.cluster_id for properties in found.values()}
        if len(clusters) > 1:
            listing = ", ".join(f"{d} in {p.cluster_id}" for d, p in sorted(found.items()))
            raise MetaPropertiesError(
                f"the data directories belong to different clusters ({listing}); a node's "
                "directories must all come from one cluster"
            )
        return clusters.pop() if clusters else None

    def store(self, cluster_id: str) -> None:
        """Record ``cluster_id`` in every directory (those already holding it are left
        alone). MetaPropertiesError if one holds another cluster's id."""
        for directory in self.directories:
            properties = read_meta_properties(directory)
            if properties is not None and properties.cluster_id == cluster_id:
                continue
            if properties is not None:
                raise MetaPropertiesError(
                    f"data directory {directory} belongs to cluster {properties.cluster_id}, "
                    f"not {cluster_id}"
                )
            directory.mkdir(parents=True, exist_ok=True)
            write_meta_properties(directory, MetaProperties(self.node_id, cluster_id))
