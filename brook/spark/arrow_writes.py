"""Rows of Arrow record batches sent as records: the one path every Brook writer takes (the
batch and streaming sinks, ``produce``).

The input columns are Spark's Kafka sink's: ``value`` (required; binary or string), ``key``
(binary or string, optional), ``topic`` (string; a row's own topic wins over the ``topic``
option), ``partition`` (int; without one, Kafka's default partitioner chooses: murmur2 of the
key, so a record lands where a Kafka producer would have put it) and ``headers``
(``array<struct<key: string, value: binary>>``).
"""

from __future__ import annotations

import pyarrow as pa

from brook.client import Producer

__all__ = ["check_write_schema", "send_arrow_batch"]


def check_write_schema(schema: pa.Schema, *, default_topic: str | None) -> None:
    """ValueError (Spark's wording) when ``schema`` cannot be written: no ``value`` column, a
    column of the wrong type, or neither a ``topic`` column nor ``default_topic``."""
    raise NotImplementedError


def send_arrow_batch(
    producer: Producer, batch: pa.RecordBatch, *, default_topic: str | None
) -> int:
    """Sends every row of ``batch`` through ``producer`` (queued, not flushed) and returns how
    many; the futures' failures surface at the producer's flush."""
    raise NotImplementedError
