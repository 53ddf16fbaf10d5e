"""Batch reads (spark.read.format("brook")): offset ranges of topic partitions planned on the
driver, read by tasks as Arrow record batches.

The constructor (called by Spark while it plans the query) checks the options, resolves the
subscription and the starting and ending offsets against the cluster and plans the ranges,
so that every mistake fails the query before any task runs. A range whose start is below its
partition's log start offset is data loss (``brook.spark.offset_ranges``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from brook.spark.log_client import EARLIEST, LogClient
from brook.spark.offset_ranges import (
    OffsetRange,
    check_data_loss,
    read_range,
    resolve,
    split,
    subscribed_partitions,
)
from brook.spark.options import OptionError
from brook.spark.read_options import parse_read_options

__all__ = ["BatchReader"]


class BatchReader(DataSourceReader):
    """One read of fixed offset ranges: ``startingOffsets`` (default earliest) to
    ``endingOffsets`` (default latest) of every subscribed partition."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self._options = parse_read_options(options, streaming=False)
        assert self._options.ending is not None
        with LogClient(self._options.consumer_config()) as client:
            partitions = subscribed_partitions(self._options.subscription, client, strict=True)
            start = resolve(
                self._options.starting,
                partitions,
                client,
                fallback_latest=self._options.timestamp_fallback_latest,
            )
            end = resolve(self._options.ending, partitions, client)
            log_start = client.edge_offsets(partitions, EARLIEST) if partitions else {}
        ranges = []
        for tp in partitions:
            if start[tp] > end[tp]:
                raise OptionError(
                    f"{tp.topic}-{tp.partition}: the starting offset {start[tp]} "
                    f"({self._options.starting.option}) is after the ending offset {end[tp]} "
                    f"({self._options.ending.option})"
                )
            first = check_data_loss(
                tp, start[tp], log_start[tp], fail=self._options.fail_on_data_loss
            )
            ranges.append(OffsetRange(tp.topic, tp.partition, first, max(first, end[tp])))
        self._ranges = split(ranges, self._options.min_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        # Spark needs at least one partition; an empty range reads nothing.
        return self._ranges or [OffsetRange("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        if partition.end > partition.start:
            yield from read_range(self._options, partition)
