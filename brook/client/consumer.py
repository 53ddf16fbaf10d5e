"""The consumer: ``Consumer`` (blocking) and ``AsyncConsumer`` (asyncio), one core.

    with Consumer(bootstrap_servers="127.0.0.1:9101", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", 0), TopicPartition("events", 1)])
        while True:
            for record in consumer.poll(timeout=1.0):
                handle(record)

Partitions are assigned by the application (consumer groups arrive later). A partition starts
at ``auto.offset.reset`` (latest by default) unless ``seek`` says otherwise. ``poll`` returns
up to ``max.poll.records`` records from prefetched data and starts the next fetch of every
partition it drained, so the next round trip overlaps the application's work.

Like Kafka's consumer, one consumer is meant for one thread (or one task) at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable, Mapping

from brook.client.config import ClientSettings, ConsumerConfig, OffsetResetStrategy, consumer_config
from brook.client.errors import (
    BrookClientError,
    ClientClosedError,
    ClientTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from brook.client.fetcher import Fetcher, SubscriptionState
from brook.client.metadata import Metadata
from brook.client.network import Network
from brook.client.runtime import (
    AsyncClosing,
    Closing,
    LoopThread,
    Notifier,
    Steps,
    Wakeup,
    drive,
    drive_async,
)
from brook.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from brook.v1 import storage_pb2

__all__ = ["AsyncConsumer", "Consumer"]

# Fetch requests name partitions and offsets only.
_FETCH_REQUEST_BYTES_MAX = 4 * 1024 * 1024
# A node returns the first batch of a fetch even when it exceeds fetch.max.bytes (so that a
# consumer always progresses); this much on top of the limits leaves room for such a batch
# (Kafka's default max.message.bytes is 1 MiB).
_OVERSIZED_FIRST_BATCH_BYTES_MAX = 16 * 1024 * 1024
_CLOSE_MARGIN_S = 5.0
_instances = itertools.count(1)


def _topic_partition(value: object) -> TopicPartition:
    if isinstance(value, tuple) and len(value) == 2:
        topic, partition = value
        if isinstance(topic, str) and topic and type(partition) is int and partition >= 0:
            return TopicPartition(topic, partition)
    raise TypeError(f"expected TopicPartition(topic: str, partition: int >= 0), got {value!r}")


def _offset(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    return value


class _ConsumerCore:
    """Everything both flavours share; its I/O lives on one event loop."""

    def __init__(self, config: ConsumerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.notifier = Notifier()
        self.network = Network(
            client_id=config.client_id,
            send_bytes_max=_FETCH_REQUEST_BYTES_MAX,
            receive_bytes_max=max(config.fetch_max_bytes, config.max_partition_fetch_bytes)
            + _OVERSIZED_FIRST_BATCH_BYTES_MAX,
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
        )
        self.metadata = Metadata(
            bootstrap_servers=config.bootstrap_servers,
            network=self.network,
            notifier=self.notifier,
            wakeup=Wakeup(loop),
            backoff=config.retry_backoff,
            request_timeout_ms=config.request_timeout_ms,
            max_age_ms=config.metadata_max_age_ms,
        )
        self.subscriptions = SubscriptionState(config.auto_offset_reset)
        self._fetcher_wakeup = Wakeup(loop)
        self.fetcher = Fetcher(
            config,
            self.subscriptions,
            self.metadata,
            self.network,
            self._fetcher_wakeup,
            self.notifier,
        )
        self.metadata.add_listener(self._fetcher_wakeup)
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False

    @property
    def default_timeout_s(self) -> float:
        return self.config.default_api_timeout_ms / 1000

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.metadata.run(), name="brook-consumer-metadata"),
            asyncio.create_task(self.fetcher.run(), name="brook-consumer-fetcher"),
        ]

    def _check_open(self) -> None:
        if self.closed:
            raise ClientClosedError("the consumer is closed")

    # -- assignment and positions -----------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        wanted = [_topic_partition(tp) for tp in partitions]
        self.subscriptions.assign(wanted)
        self.metadata.set_topics({tp.topic for tp in wanted})
        self._changed()

    def assignment(self) -> set[TopicPartition]:
        with self.subscriptions.lock:
            return set(self.subscriptions.partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._check_open()
        tp = _topic_partition(partition)
        position = _offset(offset, "offset")
        with self.subscriptions.lock:
            self.subscriptions.state(tp).seek(position, None)
        self._changed()

    def seek_to(
        self, partitions: Iterable[TopicPartition] | None, strategy: OffsetResetStrategy
    ) -> None:
        """Move to the beginning or end, looked up when the next fetch needs it (as Kafka)."""
        self._check_open()
        with self.subscriptions.lock:
            targets = (
                list(self.subscriptions.partitions)
                if partitions is None
                else [_topic_partition(tp) for tp in partitions]
            )
            states = [self.subscriptions.state(tp) for tp in targets]
            for state in states:
                state.seek(None, strategy)
        self._changed()

    def _changed(self) -> None:
        self._fetcher_wakeup.set()
        self.notifier.notify()

    def position_steps(self, partition: TopicPartition, timeout_s: float) -> Steps[int]:
        self._check_open()
        tp = _topic_partition(partition)
        deadline = time.monotonic() + timeout_s
        while True:
            version = self.notifier.version
            with self.subscriptions.lock:
                state = self.subscriptions.state(tp)
                error, position, reset = state.error, state.position, state.reset
            if error is not None:
                raise error
            if position is not None and reset is None:
                return position
            if reset is None:
                raise NoOffsetForPartitionError([tp])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ClientTimeoutError(
                    f"position of {tp.topic}-{tp.partition} not known within {timeout_s} s "
                    f"({self.metadata.last_error or 'waiting for its offset look-up'})"
                )
            yield version, remaining

    # -- poll -------------------------------------------------------------------------------

    def poll_steps(self, timeout_s: float) -> Steps[list[ConsumerRecord]]:
        self._check_open()
        if not self.subscriptions.partitions:
            # As Kafka's consumer: polling with nothing assigned is a mistake, not a wait.
            raise BrookClientError("no partitions are assigned: call assign() before poll()")
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            version = self.notifier.version
            self._raise_partition_errors()
            records = self._collect()
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return records
            yield version, remaining

    def _raise_partition_errors(self) -> None:
        with self.subscriptions.lock:
            states = list(self.subscriptions.partitions.values())
            errors = [state.error for state in states if state.error is not None]
            unpositioned = [
                state.tp
                for state in states
                if state.position is None and state.reset is None and state.error is None
            ]
        out_of_range = [error for error in errors if isinstance(error, OffsetOutOfRangeError)]
        if out_of_range:
            raise OffsetOutOfRangeError(
                {tp: pos for error in out_of_range for tp, pos in error.offsets.items()}
            )
        if errors:
            raise errors[0]
        if unpositioned:
            raise NoOffsetForPartitionError(unpositioned)

    def _collect(self) -> list[ConsumerRecord]:
        """Hand out buffered records, up to max.poll.records, advancing positions."""
        subscriptions = self.subscriptions
        limit = self.config.max_poll_records
        check_crcs = self.config.check_crcs
        out: list[ConsumerRecord] = []
        drained = False
        while len(out) < limit:
            with subscriptions.lock:
                if not subscriptions.completed:
                    break
                fetch = subscriptions.completed[0]
                state = subscriptions.partitions.get(fetch.tp)
                if state is None or state.generation != fetch.generation or state.position is None:
                    subscriptions.completed.popleft()  # seeked or unassigned since the fetch
                    continue
                position = state.position
            if fetch.error is not None:
                if out:
                    break
                raise fetch.error
            # Decoding happens outside the lock so the loop thread never waits for it; only
            # this thread touches a buffered fetch's cursor.
            position = fetch.take(out, position, limit - len(out), check_crcs)
            with subscriptions.lock:
                if state.generation == fetch.generation:
                    state.position = position
                if fetch.exhausted:
                    if subscriptions.completed and subscriptions.completed[0] is fetch:
                        subscriptions.completed.popleft()
                    if state.generation == fetch.generation:
                        state.buffered = False
                        drained = True
        if drained:
            # Fetch again now, while the application processes what it got.
            self._fetcher_wakeup.set()
        return out

    # -- offset look-ups --------------------------------------------------------------------

    @staticmethod
    def timestamp_specs(
        timestamps: Mapping[TopicPartition, int],
    ) -> dict[TopicPartition, tuple[int, int]]:
        return {
            _topic_partition(tp): (storage_pb2.OFFSET_SPEC_TIMESTAMP, _offset(ts, "timestamp"))
            for tp, ts in timestamps.items()
        }

    @staticmethod
    def edge_specs(
        partitions: Iterable[TopicPartition], spec: int
    ) -> dict[TopicPartition, tuple[int, int]]:
        return {_topic_partition(tp): (spec, -1) for tp in partitions}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._check_open()
        answers = await self.fetcher.list_offsets(
            self.timestamp_specs(timestamps), time.monotonic() + timeout_s
        )
        return {
            tp: None
            if answer.offset < 0
            else OffsetAndTimestamp(
                answer.offset,
                answer.timestamp_ms,
                answer.leader_epoch if answer.leader_epoch >= 0 else None,
            )
            for tp, answer in answers.items()
        }

    async def edge_offsets(
        self, partitions: Iterable[TopicPartition], spec: int, timeout_s: float
    ) -> dict[TopicPartition, int]:
        self._check_open()
        answers = await self.fetcher.list_offsets(
            self.edge_specs(partitions, spec), time.monotonic() + timeout_s
        )
        return {tp: answer.offset for tp, answer in answers.items()}

    async def close(self) -> None:
        self.closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.network.close()


class Consumer(Closing):
    """A blocking consumer with manual partition assignment.

    Settings: a dict of Kafka consumer settings and/or keyword arguments
    (``auto_offset_reset="earliest"``), see ``brook.client.config``. Timeouts are in seconds;
    None means ``default.api.timeout.ms``.
    """

    def __init__(self, settings: ClientSettings | None = None, **kwargs: object) -> None:
        self.config = consumer_config(settings, **kwargs)
        name = self.config.client_id or f"consumer-{next(_instances)}"
        self._thread = LoopThread(f"brook-{name}")
        try:
            self._core = _ConsumerCore(self.config, self._thread.loop)
            self._thread.run(self._core.start(), _CLOSE_MARGIN_S)
        except BaseException:
            self._thread.stop()
            raise

    def _timeout_s(self, timeout: float | None) -> float:
        return self._core.default_timeout_s if timeout is None else max(timeout, 0.0)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions (replacing the previous assignment)."""
        self._core.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``partition``."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the first offset of these (default: all assigned) partitions."""
        self._core.seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move past the last record of these (default: all assigned) partitions."""
        self._core.seek_to(partitions, OffsetResetStrategy.LATEST)

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record ``poll`` will return for ``partition``."""
        core = self._core
        return drive(core.position_steps(partition, self._timeout_s(timeout)), core.notifier)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is at or after the given one
        (ms since the epoch), or None when every record is older."""
        timeout_s = self._timeout_s(timeout)
        return self._thread.run(
            self._core.offsets_for_times(timestamps, timeout_s), timeout_s + _CLOSE_MARGIN_S
        )

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        timeout_s = self._timeout_s(timeout)
        return self._thread.run(
            self._core.edge_offsets(partitions, storage_pb2.OFFSET_SPEC_EARLIEST, timeout_s),
            timeout_s + _CLOSE_MARGIN_S,
        )

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The high watermark (the offset the next record will get) of each partition."""
        timeout_s = self._timeout_s(timeout)
        return self._thread.run(
            self._core.edge_offsets(partitions, storage_pb2.OFFSET_SPEC_LATEST, timeout_s),
            timeout_s + _CLOSE_MARGIN_S,
        )

    def poll(self, timeout: float) -> list[ConsumerRecord]:
        """Up to max.poll.records records, waiting up to ``timeout`` seconds for some."""
        core = self._core
        return drive(core.poll_steps(timeout), core.notifier)

    def close(self) -> None:
        """Stop fetching and release the I/O thread and connections. Idempotent."""
        if self._core.closed:
            return
        self._core.closed = True
        try:
            self._thread.run(self._core.close(), _CLOSE_MARGIN_S)
        finally:
            self._thread.stop()


class AsyncConsumer(AsyncClosing):
    """The asyncio consumer: runs on the loop that calls ``start`` (or ``async with``).

    Its methods take the same ``timeout`` (seconds) as the blocking Consumer's, so code moves
    between the two unchanged; hence the ASYNC109 exemptions.
    """

    def __init__(self, settings: ClientSettings | None = None, **kwargs: object) -> None:
        self.config = consumer_config(settings, **kwargs)
        self._core: _ConsumerCore | None = None

    async def start(self) -> None:
        if self._core is not None:
            raise ClientClosedError("an AsyncConsumer is started once")
        self._core = _ConsumerCore(self.config, asyncio.get_running_loop())
        await self._core.start()

    def _started(self) -> _ConsumerCore:
        if self._core is None:
            raise ClientClosedError("the AsyncConsumer is not started: use `async with` or start()")
        return self._core

    def _timeout_s(self, timeout: float | None) -> float:
        return self._started().default_timeout_s if timeout is None else max(timeout, 0.0)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._started().assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._started().assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._started().seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._started().seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._started().seek_to(partitions, OffsetResetStrategy.LATEST)

    async def position(
        self,
        partition: TopicPartition,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> int:
        core = self._started()
        return await drive_async(
            core.position_steps(partition, self._timeout_s(timeout)), core.notifier
        )

    async def offsets_for_times(
        self,
        timestamps: Mapping[TopicPartition, int],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._started().offsets_for_times(timestamps, self._timeout_s(timeout))

    async def beginning_offsets(
        self,
        partitions: Iterable[TopicPartition],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, int]:
        return await self._started().edge_offsets(
            partitions, storage_pb2.OFFSET_SPEC_EARLIEST, self._timeout_s(timeout)
        )

    async def end_offsets(
        self,
        partitions: Iterable[TopicPartition],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, int]:
        return await self._started().edge_offsets(
            partitions, storage_pb2.OFFSET_SPEC_LATEST, self._timeout_s(timeout)
        )

    async def poll(self, timeout: float) -> list[ConsumerRecord]:  # noqa: ASYNC109
        core = self._started()
        return await drive_async(core.poll_steps(timeout), core.notifier)

    async def close(self) -> None:
        core = self._core
        if core is not None and not core.closed:
            await core.close()
