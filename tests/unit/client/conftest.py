"""Fixtures of the SDK's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from storage_double import RunningDouble, StorageDouble

TOPIC_PARTITIONS = {"events": 3, "single": 1}


@pytest.fixture
def double() -> Iterator[RunningDouble]:
    """A storage double serving the topics of TOPIC_PARTITIONS; stopped after the test."""
    running = RunningDouble(StorageDouble(dict(TOPIC_PARTITIONS)))
    try:
        yield running
    finally:
        running.stop()
