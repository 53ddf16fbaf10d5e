"""The producer: ``Producer`` (blocking) and ``AsyncProducer`` (asyncio), one core.

    with Producer({"bootstrap.servers": "127.0.0.1:9101", "linger.ms": 10}) as producer:
        future = producer.send("events", b"payload", key=b"user-1")
        producer.flush()
        print(future.result().offset)

    async with AsyncProducer(bootstrap_servers="127.0.0.1:9101") as producer:
        metadata = await producer.send_and_wait("events", b"payload")

``send`` encodes the record into its partition's batch in the caller's thread and returns a
``RecordFuture`` at once; it blocks (the asyncio flavour awaits) only for the metadata of a
topic it has not seen and when ``buffer.memory`` is used up, both bounded by ``max.block.ms``.
The network side runs on an event loop: a private one in a daemon thread for ``Producer``, the
application's for ``AsyncProducer``.

Idempotence is on by default (``enable.idempotence``, as in Kafka 3.x): a retried batch is never
written twice. A producer that another instance fenced fails every pending and later send with
``ProducerFencedError``.

Transactions (``transactional.id``; Kafka's API, see brook.client.transactions)::

    producer = Producer(bootstrap_servers="127.0.0.1:9101", transactional_id="copier-1")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("out", b"derived")
    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
    producer.commit_transaction()   # or abort_transaction()

The transactional methods take a ``timeout`` in seconds (default ``max.block.ms``); an
operation that outlives it goes on in the background, and calling the method again waits for
it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence

from brook.client.accumulator import (
    NeedMemory,
    NeedMetadata,
    ProducerBatch,
    RecordAccumulator,
    RecordFuture,
)
from brook.client.admin import OffsetAndMetadata
from brook.client.config import ClientSettings, ProducerConfig, producer_config
from brook.client.consumer import offsets_to_commit
from brook.client.core import CLOSE_MARGIN_S, ClientCore, start_on_thread
from brook.client.errors import (
    ApiError,
    ClientClosedError,
    ClientTimeoutError,
    TransactionStateError,
    UnknownTopicOrPartitionError,
)
from brook.client.group.coordinator import ConsumerGroupMetadata, storage_node_locator
from brook.client.idempotence import IdempotenceState
from brook.client.runtime import (
    Steps,
    Wakeup,
    drive,
    drive_async,
)
from brook.client.sender import Sender
from brook.client.transactions import Operation, TransactionManager, TransactionTracker
from brook.client.types import Header, PreparedTransaction, RecordMetadata, TopicPartition
from brook.closing import AsyncClosing, Closing
from brook.errors import ErrorCode

__all__ = ["AsyncProducer", "Producer"]

# Produce answers carry no records: a small bound suffices.
_PRODUCE_RESPONSE_BYTES_MAX = 4 * 1024 * 1024
_instances = itertools.count(1)


class _ProducerCore(ClientCore):
    """Everything both flavours share; lives on one event loop."""

    def __init__(self, config: ProducerConfig, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            config,
            loop,
            send_bytes_max=config.max_request_size,
            receive_bytes_max=_PRODUCE_RESPONSE_BYTES_MAX,
        )
        self.config = config
        sender_wakeup = Wakeup(loop)
        state = (
            None if config.transactional_id is None else TransactionTracker(config.transactional_id)
        )
        self.accumulator = RecordAccumulator(
            metadata=self.metadata,
            notifier=self.notifier,
            wakeup=sender_wakeup,
            batch_size=config.batch_size,
            buffer_memory=config.buffer_memory,
            linger_ms=config.linger_ms,
            max_request_size=config.max_request_size,
            delivery_timeout_ms=config.delivery_timeout_ms,
            compression=config.compression,
            partitioner_ignore_keys=config.partitioner_ignore_keys,
            idempotence=IdempotenceState() if config.enable_idempotence else None,
            in_flight_max=config.max_in_flight_requests_per_connection,
            transactions=state,
        )
        self.transactions = (
            None
            if state is None
            else TransactionManager(
                state=state,
                transaction_timeout_ms=config.transaction_timeout_ms,
                two_phase=config.transaction_two_phase_commit,
                accumulator=self.accumulator,
                network=self.network,
                locator=storage_node_locator(
                    self.metadata,
                    self.network,
                    config.bootstrap_servers,
                    config.request_timeout_ms / 1000,
                ),
                request_timeout_ms=config.request_timeout_ms,
                backoff=config.retry_backoff,
                wake_sender=sender_wakeup.set,
            )
        )
        self.sender = Sender(
            config, self.accumulator, self.metadata, self.network, sender_wakeup, self.transactions
        )
        self.metadata.add_listener(sender_wakeup)

    @property
    def default_wait_s(self) -> float:
        """How long a flush or close may take at most when the caller gives no timeout: by
        then every record has been delivered or has expired."""
        return (self.config.delivery_timeout_ms + self.config.request_timeout_ms) / 1000

    async def start(self) -> None:
        self.run_in_background(self.metadata.run(), "brook-producer-metadata")
        self.run_in_background(self.sender.run(), "brook-producer-sender")

    def blocked_send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        timestamp: int | None,
    ) -> Steps[RecordFuture]:
        """send, once the fast path found it must wait for metadata or memory."""
        started = time.monotonic()
        deadline = started + self.config.max_block_ms / 1000
        waiting_for_memory = False
        self.metadata.add_topics((topic,))
        try:
            while True:
                version = self.notifier.version
                try:
                    return self.accumulator.append(topic, value, key, headers, partition, timestamp)
                except NeedMetadata:
                    # Ask again while we wait (the metadata cache spaces the requests).
                    self.metadata.request_update()
                    refused = self.metadata.cluster.unauthorized.get(topic)
                    if refused is not None and self.metadata.refreshed_at >= started:
                        # Said by an answer to this send's own request (not one from before
                        # an ACL may have been granted): fail now, as Kafka's producer does.
                        error: ApiError = ApiError(
                            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            f"not authorized to describe or write topic {topic!r}: {refused}",
                        )
                        self.send_failed(error)
                        batch = ProducerBatch.failed(
                            topic, -1 if partition is None else partition, error
                        )
                        return RecordFuture(batch, 0, -1)
                    if time.monotonic() >= deadline:
                        problem = self._placement_problem(topic, partition)
                        error = UnknownTopicOrPartitionError(problem)
                        self.send_failed(error)
                        batch = ProducerBatch.failed(
                            topic, -1 if partition is None else partition, error
                        )
                        return RecordFuture(batch, 0, -1)
                except NeedMemory as need:
                    if not waiting_for_memory:
                        self.accumulator.begin_memory_wait()
                        waiting_for_memory = True
                    if time.monotonic() >= deadline:
                        raise ClientTimeoutError(
                            f"send waited max.block.ms={self.config.max_block_ms} for "
                            f"{need.needed_bytes} bytes of buffer.memory="
                            f"{self.config.buffer_memory}; records are produced faster than "
                            "the cluster acknowledges them"
                        ) from None
                yield version, max(deadline - time.monotonic(), 0.0)
        except Exception as error:
            self.send_failed(error)
            raise
        finally:
            if waiting_for_memory:
                self.accumulator.end_memory_wait()

    def send_failed(self, error: BaseException) -> None:
        """A send raised ``error`` or returned a future failed with it: the open transaction
        misses that record, so it can no longer commit (Kafka's doSend calls
        maybeTransitionToErrorState). A state error (a send outside a transaction) changes
        nothing."""
        if self.transactions is not None and not isinstance(error, TransactionStateError):
            self.transactions.state.abortable(error)

    def _placement_problem(self, topic: str, partition: int | None) -> str:
        cluster = self.metadata.cluster
        waited = f"within max.block.ms={self.config.max_block_ms}"
        if topic in cluster.missing:
            return f"topic {topic!r} does not exist ({cluster.missing[topic]}) {waited}"
        info = cluster.topics.get(topic)
        if info is not None and partition is not None:
            return (
                f"partition {partition} of topic {topic!r} does not exist {waited} (the topic "
                f"has {info.num_partitions})"
            )
        reason = self.metadata.last_error
        suffix = f": {reason}" if reason else ""
        return f"topic {topic!r} not present in metadata {waited}{suffix}"

    def transactional(self, what: str) -> TransactionManager:
        if self.transactions is None:
            raise TransactionStateError(f"{what} needs a producer with transactional.id set")
        return self.transactions

    def transaction_timeout_s(self, timeout: float | None) -> float:
        """The caller's wait for a transactional method (Kafka: max.block.ms)."""
        return self.config.max_block_ms / 1000 if timeout is None else max(timeout, 0.0)

    def offsets_operation(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group: ConsumerGroupMetadata | str,
    ) -> Callable[[], Operation]:
        """send_offsets_to_transaction's operation, arguments checked."""
        manager = self.transactional("send_offsets_to_transaction")
        chosen = offsets_to_commit(offsets)
        if isinstance(group, str):
            if not group:
                raise ValueError("send_offsets_to_transaction needs a group id")
            # Kafka's deprecated group-id form: no generation check (KIP-447 needs one).
            group = ConsumerGroupMetadata(group, -1, "", None)
        elif not isinstance(group, ConsumerGroupMetadata):
            raise TypeError(f"expected a consumer's group_metadata() or a group id, got {group!r}")
        metadata = group
        return lambda: manager.begin_offsets(chosen, metadata)

    async def flush(self, timeout_s: float) -> None:
        batches = self.accumulator.begin_flush()
        try:
            async with asyncio.timeout(timeout_s):
                for batch in batches:
                    await batch.wait_async()
        except TimeoutError:
            raise ClientTimeoutError(_flush_timeout(batches, timeout_s)) from None
        finally:
            self.accumulator.end_flush()

    def flush_blocking(self, timeout_s: float) -> None:
        batches = self.accumulator.begin_flush()
        try:
            deadline = time.monotonic() + timeout_s
            for batch in batches:
                if not batch.wait(max(deadline - time.monotonic(), 0.0)):
                    raise ClientTimeoutError(_flush_timeout(batches, timeout_s))
        finally:
            self.accumulator.end_flush()

    async def close(self, timeout_s: float) -> None:
        """Deliver what is pending within ``timeout_s``, fail the rest, release everything."""
        deadline = time.monotonic() + timeout_s
        self.accumulator.begin_close()
        try:
            while True:
                version = self.notifier.version
                remaining = deadline - time.monotonic()
                if self.accumulator.incomplete_count == 0 or remaining <= 0:
                    break
                await self.notifier.wait_async(version, remaining)
            if self.transactions is not None:
                await self.transactions.close()
            if self.accumulator.incomplete_count:
                error = ClientClosedError(
                    f"the producer was closed with a {timeout_s} s timeout before the record "
                    "was acknowledged"
                )
                self.accumulator.abort_queued(error)
                await self.sender.abort()
        finally:
            await self.stop()


def _flush_timeout(batches: list[ProducerBatch], timeout_s: float) -> str:
    pending = sum(1 for batch in batches if not batch.done)
    return f"flush did not complete within {timeout_s} s: {pending} batch(es) not yet acknowledged"


class Producer(Closing):
    """A blocking producer; thread-safe: any number of threads may send through one.

    Settings: a dict of Kafka producer settings and/or keyword arguments (``linger_ms=10``),
    see ``brook.client.config``.
    """

    def __init__(self, settings: ClientSettings | None = None, **kwargs: object) -> None:
        self.config = producer_config(settings, **kwargs)
        name = self.config.client_id or f"producer-{next(_instances)}"
        self._thread, self._core = start_on_thread(
            f"brook-{name}", lambda loop: _ProducerCore(self.config, loop)
        )
        self._accumulator = self._core.accumulator
        self._closed = False

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """Queue one record; returns its future at once (see the module docstring)."""
        try:
            return self._accumulator.append(topic, value, key, headers, partition, timestamp)
        except (NeedMetadata, NeedMemory):
            core = self._core
            return drive(
                core.blocked_send(topic, value, key, headers, partition, timestamp),
                core.notifier,
            )
        except Exception as error:
            self._core.send_failed(error)
            raise

    def flush(self, timeout: float | None = None) -> None:
        """Send everything now and wait (up to ``timeout`` seconds) until every record sent
        before the call is acknowledged or failed; raises ClientTimeoutError otherwise."""
        self._core.flush_blocking(self._core.default_wait_s if timeout is None else timeout)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its transaction coordinator: get the producer id
        and a new epoch, fencing older producers with this id and completing their open
        transaction. Once, before the first transaction."""
        manager = self._core.transactional("init_transactions")
        self._run_transactional("init_transactions", manager.begin_init, timeout)

    def begin_transaction(self) -> None:
        """Open a transaction: the records sent until commit_transaction or abort_transaction
        belong to it."""
        self._core.transactional("begin_transaction").state.begin()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit ``offsets`` (the next offsets to read) for the consumer's group as part of
        the transaction: they become the group's committed offsets when it commits, and
        are dropped when it aborts. Pass the consumer's ``group_metadata()``, so that a
        consumer that lost its partitions in a rebalance cannot commit them (KIP-447)."""
        prepare = self._core.offsets_operation(offsets, group_metadata)
        self._run_transactional("send_offsets_to_transaction", prepare, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send every pending record of the transaction, then commit it. Raises
        TransactionAbortableError when one of its sends failed: call abort_transaction.
        After a ClientTimeoutError the outcome is unknown: call commit_transaction again."""
        manager = self._core.transactional("commit_transaction")
        self._run_transactional("commit_transaction", manager.begin_commit, timeout)

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTransaction:
        """Two-phase commit's first phase (KIP-939; needs transaction.two.phase.commit.enable):
        send every pending record of the transaction and leave it open, returning what another
        process needs to end it (``Admin.complete_transaction``). Raises
        TransactionAbortableError when one of its sends failed. The coordinator never aborts
        it for its timeout, and ``close`` leaves it open; only commit_transaction or
        abort_transaction may follow on this producer."""
        manager = self._core.transactional("prepare_transaction")
        self._run_transactional("prepare_transaction", manager.begin_prepare, timeout)
        return manager.prepared()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: its records not sent yet fail with TransactionAbortedError
        and those written are never shown to read_committed consumers."""
        manager = self._core.transactional("abort_transaction")
        self._run_transactional("abort_transaction", manager.begin_abort, timeout)

    def _run_transactional(
        self,
        name: str,
        prepare: Callable[[], Operation],
        timeout: float | None,
    ) -> None:
        core = self._core
        timeout_s = core.transaction_timeout_s(timeout)
        manager = core.transactional(name)
        self._thread.run(
            manager.run_operation(name, prepare, timeout_s), timeout_s + CLOSE_MARGIN_S
        )

    def close(self, timeout: float | None = None) -> None:
        """Deliver pending records (up to ``timeout`` seconds; 0 fails them at once), then
        release the I/O thread and connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._accumulator.begin_close()
        timeout_s = self._core.default_wait_s if timeout is None else max(timeout, 0.0)
        try:
            self._thread.run(self._core.close(timeout_s), timeout_s + CLOSE_MARGIN_S)
        finally:
            self._thread.stop()


class AsyncProducer(AsyncClosing):
    """The asyncio producer: runs on the loop that calls ``start`` (or ``async with``).

    Its methods take the same ``timeout`` (seconds) as the blocking Producer's, so code moves
    between the two unchanged; hence the ASYNC109 exemptions.
    """

    def __init__(self, settings: ClientSettings | None = None, **kwargs: object) -> None:
        self.config = producer_config(settings, **kwargs)
        self._core: _ProducerCore | None = None
        self._closed = False

    async def start(self) -> None:
        if self._core is not None or self._closed:
            raise ClientClosedError("an AsyncProducer is started once")
        self._core = _ProducerCore(self.config, asyncio.get_running_loop())
        await self._core.start()

    def _started(self) -> _ProducerCore:
        if self._core is None:
            raise ClientClosedError("the AsyncProducer is not started: use `async with` or start()")
        return self._core

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """Queue one record and return its (awaitable) future."""
        core = self._started()
        try:
            return core.accumulator.append(topic, value, key, headers, partition, timestamp)
        except (NeedMetadata, NeedMemory):
            return await drive_async(
                core.blocked_send(topic, value, key, headers, partition, timestamp),
                core.notifier,
            )
        except Exception as error:
            core.send_failed(error)
            raise

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        future = await self.send(topic, value, key, headers, partition, timestamp)
        return await future

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        core = self._started()
        await core.flush(core.default_wait_s if timeout is None else timeout)

    async def init_transactions(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """As Producer.init_transactions."""
        core = self._started()
        manager = core.transactional("init_transactions")
        await manager.run_operation(
            "init_transactions", manager.begin_init, core.transaction_timeout_s(timeout)
        )

    def begin_transaction(self) -> None:
        self._started().transactional("begin_transaction").state.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """As Producer.send_offsets_to_transaction."""
        core = self._started()
        prepare = core.offsets_operation(offsets, group_metadata)
        await core.transactional("send_offsets_to_transaction").run_operation(
            "send_offsets_to_transaction", prepare, core.transaction_timeout_s(timeout)
        )

    async def commit_transaction(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """As Producer.commit_transaction."""
        core = self._started()
        manager = core.transactional("commit_transaction")
        await manager.run_operation(
            "commit_transaction", manager.begin_commit, core.transaction_timeout_s(timeout)
        )

    async def prepare_transaction(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> PreparedTransaction:
        """As Producer.prepare_transaction."""
        core = self._started()
        manager = core.transactional("prepare_transaction")
        await manager.run_operation(
            "prepare_transaction", manager.begin_prepare, core.transaction_timeout_s(timeout)
        )
        return manager.prepared()

    async def abort_transaction(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """As Producer.abort_transaction."""
        core = self._started()
        manager = core.transactional("abort_transaction")
        await manager.run_operation(
            "abort_transaction", manager.begin_abort, core.transaction_timeout_s(timeout)
        )

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if self._closed:
            return
        self._closed = True
        core = self._core
        if core is not None:
            await core.close(core.default_wait_s if timeout is None else max(timeout, 0.0))
