"""Streaming reads (spark.readStream.format("brook")): offsets in Spark's Kafka JSON, owned by
Spark's checkpoint.

An offset is ``{"topic": {"0": 23}}``: per partition, the next offset to read. Spark keeps
them in its checkpoint (this reader has no state of its own that a restart needs): a restarted
query plans its next micro-batch from the last end offsets Spark recorded, so it reads on with
no gap and no duplicate. ``initialOffset`` is ``startingOffsets`` (default latest) resolved on
the first run; each ``latestOffset`` re-reads the subscription, so partitions added to a topic
and (``subscribePattern``) new topics join, read from their earliest offset.
``maxOffsetsPerTrigger`` bounds a micro-batch (split across partitions by lag, as Spark does);
``Trigger.AvailableNow`` reads up to the offsets that were latest when it was prepared.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from brook.client.types import TopicPartition
from brook.spark.log_client import EARLIEST, LATEST, LogClient
from brook.spark.offset_ranges import (
    DataLossError,
    OffsetRange,
    check_data_loss,
    offsets_went_back,
    rate_limit,
    read_range,
    resolve,
    split,
    subscribed_partitions,
)
from brook.spark.read_options import offsets_json, parse_read_options

__all__ = ["StreamReader"]

_log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


def _from_json(offsets: dict[str, dict[str, int]]) -> Offsets:
    return {
        TopicPartition(topic, int(partition)): offset
        for topic, partitions in offsets.items()
        for partition, offset in partitions.items()
    }


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of a subscription; offsets as Spark's Kafka source keeps them."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self._options = parse_read_options(options, streaming=True)
        self._client: LogClient | None = None
        self._target: Offsets | None = None
        # Unknown topics and partitions fail the query now, before any micro-batch.
        subscribed_partitions(self._options.subscription, self._driver_client(), strict=True)

    def __getstate__(self) -> dict[str, object]:
        # Tasks get the options; the driver's client (its gRPC channels) stays on the driver.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _driver_client(self) -> LogClient:
        if self._client is None:
            self._client = LogClient(self._options.consumer_config())
        return self._client

    def _partitions(self) -> list[TopicPartition]:
        return subscribed_partitions(
            self._options.subscription, self._driver_client(), strict=False
        )

    def initialOffset(self) -> dict[str, dict[str, int]]:
        client = self._driver_client()
        partitions = subscribed_partitions(self._options.subscription, client, strict=True)
        return offsets_json(
            resolve(
                self._options.starting,
                partitions,
                client,
                fallback_latest=self._options.timestamp_fallback_latest,
            )
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def _latest(self) -> Offsets:
        partitions = self._partitions()
        return self._driver_client().edge_offsets(partitions, LATEST) if partitions else {}

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        begin = _from_json(start)
        latest = self._target if self._target is not None else self._latest()
        # Partitions that joined since ``start`` begin at their earliest offset; partitions
        # that disappeared keep their offset (``partitions`` reports them as data loss).
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin.update(self._driver_client().edge_offsets(new, EARLIEST))
        # A partition whose latest offset is below where the query is (recreated, or its log
        # truncated) lost what the query had not read: an error, or (failOnDataLoss false)
        # read again from its log start up to its new latest (``partitions``).
        backwards = {tp: offset for tp, offset in latest.items() if offset < begin[tp]}
        if backwards and self._options.fail_on_data_loss:
            raise DataLossError(offsets_went_back(begin, backwards))
        end = {tp: offset for tp, offset in latest.items() if tp not in backwards}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        end.update(backwards)
        for tp, offset in begin.items():
            end.setdefault(tp, offset)
        return offsets_json(end)

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        begin = _from_json(start)
        until = _from_json(end)
        client = self._driver_client()
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(client.edge_offsets(new, EARLIEST))
        fail = self._options.fail_on_data_loss
        existing = set(self._partitions())
        gone = [tp for tp in until if tp not in existing]
        if gone and fail:
            named = ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
            raise DataLossError(
                f"{named}: the partition no longer exists. Set the source option "
                "'failOnDataLoss' to 'false' to go on without it."
            )
        readable = [tp for tp in until if tp in existing and until[tp] != begin[tp]]
        backwards = {tp: until[tp] for tp in readable if until[tp] < begin[tp]}
        if backwards and fail:
            raise DataLossError(offsets_went_back(begin, backwards))
        log_start = client.edge_offsets(readable, EARLIEST) if readable else {}
        ranges = []
        for tp in readable:
            if tp in backwards:
                _log.warning("%s", offsets_went_back(begin, {tp: until[tp]}))
                first = log_start[tp]
            else:
                first = check_data_loss(tp, begin[tp], log_start[tp], fail=fail)
            ranges.append(OffsetRange(tp.topic, tp.partition, first, max(first, until[tp])))
        return split(ranges, self._options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(self._options, partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets. Closes the driver's client,
        which the next call opens again."""
        self.stop()

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
