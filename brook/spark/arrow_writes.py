"""Rows of Arrow record batches sent as records: the one path every Brook writer takes (the
batch and streaming sinks, ``produce`` and ``produce_udf``).

The input columns are Spark's Kafka sink's: ``value`` (required; binary or string), ``key``
(binary or string, optional), ``topic`` (string), ``partition`` (int; without one, Kafka's
default partitioner chooses: murmur2 of the key, so a record lands where a Kafka producer
would have put it) and ``headers`` (``array<struct<key: string, value: binary>>``). Other
columns are ignored. As in Spark, the ``topic`` option, when given, wins over a row's
``topic`` column. A batch is checked whole before its first row is sent (schema, null
topics), so a refused batch sends nothing. Columns are converted to Python values a whole
column at a time (Arrow's own conversion); only the send itself is per record, and it is the
cost that counts: the SDK encodes each record into its partition's batch.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from brook.client import Producer, RecordFuture

__all__ = [
    "WriteSchemaError",
    "check_write_schema",
    "payload_bytes",
    "send_arrow_batch",
    "send_arrow_rows",
]

_BYTES_TYPES: Final = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())
_STRING_TYPES: Final = (pa.string(), pa.large_string())
_INT_TYPES: Final = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


class WriteSchemaError(ValueError):
    """Rows that cannot be written to Brook (Spark's Kafka sink's checks and wording)."""


def check_write_schema(schema: pa.Schema, *, default_topic: str | None) -> None:
    """WriteSchemaError when ``schema`` cannot be written: no ``value`` column, a column of
    the wrong type, or neither a ``topic`` column nor ``default_topic``."""
    names = set(schema.names)
    if "value" not in names:
        raise WriteSchemaError("Required attribute 'value' not found")
    _require(schema, "value", _BYTES_TYPES, "string or binary")
    if "key" in names:
        _require(schema, "key", _BYTES_TYPES, "string or binary")
    if default_topic is None:
        if "topic" not in names:
            raise WriteSchemaError(
                "topic option required when no 'topic' attribute is present. Use the topic "
                "option for setting a topic."
            )
        _require(schema, "topic", _STRING_TYPES, "string")
    if "partition" in names:
        _require(schema, "partition", _INT_TYPES, "int")
    if "headers" in names:
        headers = schema.field("headers").type
        if not (
            pa.types.is_list(headers)
            and pa.types.is_struct(headers.value_type)
            and {f.name for f in headers.value_type} == {"key", "value"}
            and headers.value_type.field("key").type in _STRING_TYPES
            and headers.value_type.field("value").type in _BYTES_TYPES
        ):
            raise WriteSchemaError(
                f"headers attribute type must be array<struct<key:string,value:binary>>, "
                f"not {headers}"
            )


def send_arrow_batch(
    producer: Producer, batch: pa.RecordBatch, *, default_topic: str | None
) -> int:
    """Sends every row of ``batch`` through ``producer`` (queued, not flushed) and returns how
    many; a send's failure surfaces in its future (``send_arrow_rows``), not at the flush.
    WriteSchemaError, before any row is sent, for a batch ``check_write_schema`` refuses or
    with a null topic and no ``default_topic``."""
    return len(send_arrow_rows(producer, batch, default_topic=default_topic))


def send_arrow_rows(
    producer: Producer, batch: pa.RecordBatch, *, default_topic: str | None
) -> list[RecordFuture]:
    """``send_arrow_batch``, returning each row's future in row order: it resolves to where
    the record landed or raises its delivery error."""
    check_write_schema(batch.schema, default_topic=default_topic)
    rows: int = batch.num_rows
    if rows == 0:
        return []
    names = batch.schema.names
    if default_topic is None and batch.column("topic").null_count:
        raise WriteSchemaError(
            "null topic present in the data. Use the topic option for setting a topic."
        )
    values = _bytes_column(batch, "value")
    keys = _bytes_column(batch, "key") if "key" in names else None
    send = producer.send
    if "partition" not in names and "headers" not in names and default_topic is not None:
        # The common case (Spark's key/value DataFrame to one topic) without the per-row
        # arguments that are all None: a tenth of the loop's cost.
        if keys is None:
            return [send(default_topic, value) for value in values]
        return [send(default_topic, value, key) for value, key in zip(values, keys, strict=True)]
    topics: list[str] = (
        [default_topic] * rows if default_topic is not None else batch.column("topic").to_pylist()
    )
    partitions = batch.column("partition").to_pylist() if "partition" in names else _nones(rows)
    headers = _headers_column(batch.column("headers")) if "headers" in names else _nones(rows)
    return [
        send(topic, value, key, row_headers, partition)
        for topic, value, key, row_headers, partition in zip(
            topics, values, keys or _nones(rows), headers, partitions, strict=True
        )
    ]


def payload_bytes(batch: pa.RecordBatch) -> pa.Array:
    """Each row's key and value bytes (what a summary counts as a record's bytes; a null is
    0) as int64, a whole column at a time."""
    sizes = pc.fill_null(pc.binary_length(batch.column("value")), 0).cast(pa.int64())
    if "key" in batch.schema.names:
        keys = pc.fill_null(pc.binary_length(batch.column("key")), 0).cast(pa.int64())
        sizes = pc.add(sizes, keys)
    return sizes


def _require(schema: pa.Schema, name: str, allowed: tuple[pa.DataType, ...], what: str) -> None:
    found = schema.field(name).type
    if found not in allowed:
        raise WriteSchemaError(f"{name} attribute type must be a {what}, not {found}")


def _bytes_column(batch: pa.RecordBatch, name: str) -> list[bytes | None]:
    column = batch.column(name)
    if column.type in _STRING_TYPES:
        # A zero-copy view: UTF-8 strings are their bytes.
        column = column.view(pa.binary() if column.type == pa.string() else pa.large_binary())
    values: list[bytes | None] = column.to_pylist()
    return values


def _headers_column(
    column: pa.Array,
) -> list[list[tuple[str, bytes | None]] | None]:
    out: list[list[tuple[str, bytes | None]] | None] = []
    for row in column.to_pylist():
        if row is None:
            out.append(None)
            continue
        out.append(
            [
                (
                    entry["key"],
                    entry["value"].encode() if isinstance(entry["value"], str) else entry["value"],
                )
                for entry in row
            ]
        )
    return out


def _nones(rows: int) -> list[None]:
    return [None] * rows
