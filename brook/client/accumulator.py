"""Per-partition accumulation of records into RecordBatch v2 batches (Kafka's RecordAccumulator).

``send`` encodes each record straight into its partition's open batch, in the caller's thread,
and returns a ``RecordFuture``: a three-slot handle that reads its result from the batch once
the batch is acknowledged. Nothing is scheduled per record. The sender (on the client's event
loop) drains whole batches: a partition is ready when its batch is full, has lingered
``linger.ms``, is being retried, or when a flush, a close or a caller blocked on memory needs
everything out now.

Records are encoded by the codec's record encoder (``brook.record.records``), the one
BatchBuilder uses too: ``encode_record_tail`` (key, value, headers; validated) runs before the
lock, ``frame_record`` (length and the deltas that depend on the batch) under it.

Ordering: a partition has at most one produce request in flight (its queue is *muted* until
the answer), and a retried batch goes back to the front of its queue, so retries never reorder
a partition's records. What that costs in pipelining is won back by sending every batch the
partition queued meanwhile in its next request (up to ``max.request.size``), back to back.

An idempotent producer (``idempotence`` given) orders by sequence numbers instead, as Kafka
does: each request carries one batch per partition, numbered when first drained, and a
partition may have up to ``in_flight_max`` of them unacknowledged (one, until its leader has
appended a batch of this producer id: it takes an unknown producer's first batch at any
sequence, so nothing may be sent beside a first batch that could be refused). A batch that must
be retried goes back into its queue in sequence order and is not sent again before every
earlier batch of its partition has been answered (brook.client.idempotence says what each
answer means). Until a batch is drained it keeps taking records past batch.size (up to
``WAITING_BATCH_BYTES_MAX`` and max.request.size): one batch per partition per request would
otherwise make a backlog of small batches cost a request each, where the non-idempotent
producer sends the backlog in one request.

A batch the node refuses as too large (the topic's max.message.bytes is below it) is split
into batches of at most batch.size that take its place, and its sequence range
(``split_too_large``); its topic's batches stop growing from then on.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final, Protocol

from brook.client.errors import (
    BrookClientError,
    ClientClosedError,
    ClientTimeoutError,
    RecordTooLargeError,
)
from brook.client.idempotence import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    IdempotenceState,
    add_sequence,
    restamp,
)
from brook.client.metadata import ClusterView
from brook.client.partitioner import StickyPartitioner, murmur2
from brook.client.runtime import Notifier, Wakeup, resolve_future
from brook.client.transactions import TransactionTracker
from brook.client.types import Header, RecordMetadata
from brook.record import BATCH_OVERHEAD, Compression
from brook.record.batch import TRANSACTIONAL_MASK
from brook.record.records import (
    RECORD_FRAMING_BYTES_MAX,
    decode_records,
    encode_batch,
    encode_record_tail,
    frame_record,
)
from brook.record.varint import encode_varint

__all__ = [
    "ClusterSource",
    "DrainedRequest",
    "NeedMemory",
    "NeedMetadata",
    "PartitionQueue",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordFuture",
    "encode_varint",
]

_log = logging.getLogger(__name__)

# Keys whose murmur2 is remembered; ~1 MB with 16-byte keys.
KEY_HASH_MEMO_ENTRIES_MAX: Final = 16384
_INT64_MAX: Final = 2**63 - 1
# The most an idempotent producer's batch grows to while it waits to be sent (capped by
# max.request.size). About what the non-idempotent
# producer sends per partition per request under the seed benchmark's load (~20 batches of
# 8196 bytes), and far below Kafka's default max.message.bytes (1 MiB), so that a grown
# batch is not refused where its batch.size parts would have been accepted.
WAITING_BATCH_BYTES_MAX: Final = 128 * 1024
# How long a partition's leader is trusted to still know an idempotent producer after its
# last append there. The leader forgets an idle producer after producer.id.expiration.ms (a
# day by default); a partition idle longer than this sends its next first batch alone, which
# costs one round trip.
PRODUCER_STATE_TRUSTED_S: Final = 60.0


class ClusterSource(Protocol):
    """Where the accumulator reads partition counts and leaders (the metadata cache)."""

    @property
    def cluster(self) -> ClusterView: ...


class NeedMetadata(BrookClientError):
    """send cannot place the record until metadata names its topic (and partition)."""


class NeedMemory(BrookClientError):
    """send cannot open a batch until buffer.memory has ``needed_bytes`` free."""

    def __init__(self, needed_bytes: int) -> None:
        super().__init__(f"{needed_bytes} bytes of buffer.memory needed")
        self.needed_bytes = needed_bytes


# Guards the lazily created wait primitives of every batch. Completion is once per batch, so
# one lock for all of them is never contended in practice.
_COMPLETION_LOCK = threading.Lock()


class ProducerBatch:
    """One batch of one partition: open (records appended), sealed, sent, then completed."""

    __slots__ = (
        "_callbacks",
        "_event",
        "_waiters",
        "attempts",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "body",
        "count",
        "created",
        "deadline",
        "done",
        "error",
        "follows_acknowledged",
        "limit_bytes",
        "log_append_time",
        "max_timestamp",
        "parent",
        "partition",
        "payload",
        "pieces",
        "pieces_left",
        "producer_epoch",
        "producer_id",
        "reserved_bytes",
        "retry_at",
        "sealed",
        "send_order",
        "solo",
        "stamp",
        "topic",
        "transactional",
        "unwritten",
    )

    def __init__(
        self, topic: str, partition: int, created: float, deadline: float, reserved_bytes: int
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.body = bytearray()
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = -1
        self.created = created
        self.deadline = deadline
        self.reserved_bytes = reserved_bytes
        # Where the batch stops taking records: batch.size, raised by an idempotent producer
        # while the batch waits to be sent (see append).
        self.limit_bytes = reserved_bytes
        self.attempts = 0
        self.retry_at = 0.0
        self.sealed = False
        # Sent in a request of its own: set after it shared a rejected request with others,
        # so that each batch gets its own verdict.
        self.solo = False
        self.payload: bytes | None = None
        # Idempotence: the producer fields of the header, and the batch's place in its
        # partition's send order (-1: never sent, no sequence yet).
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.send_order = -1
        # Part of a transaction: the batch carries the transactional attribute bit.
        self.transactional = False
        # Whether every earlier batch of the partition was answered when this attempt was
        # sent: only then does OUT_OF_ORDER_SEQUENCE_NUMBER mean a real gap (answers of
        # concurrent requests may arrive in any order).
        self.follows_acknowledged = False
        # The leader said this batch is not in its log and cannot be (a sequence gap or an
        # unknown producer): only a new epoch gets it written.
        self.unwritten = False
        # The producer fields ``payload`` carries (a renumbered batch is restamped).
        self.stamp: tuple[int, int, int] | None = None
        self.base_offset = -1
        self.log_append_time = -1
        # Split after the node refused it as too large (RecordAccumulator.split_too_large): its
        # records went to ``pieces`` ((index of the piece's first record, piece), in order),
        # and it is done when the last of them is. A piece points back at it.
        self.pieces: list[tuple[int, ProducerBatch]] | None = None
        self.pieces_left = 0
        self.parent: ProducerBatch | None = None
        self.error: BaseException | None = None
        self.done = False
        self._event: threading.Event | None = None
        self._waiters: list[asyncio.Future[None]] | None = None
        self._callbacks: list[tuple[Callable[[Any], object], object]] | None = None

    @classmethod
    def failed(cls, topic: str, partition: int, error: BaseException) -> ProducerBatch:
        """A batch that never held records, for the future of a send that could not be placed."""
        batch = cls(topic, partition, 0.0, 0.0, 0)
        batch.error = error
        batch.done = True
        return batch

    @property
    def size_bytes(self) -> int:
        """Uncompressed size: what batch.size and max.request.size are measured against."""
        if self.payload is not None:
            return len(self.payload)
        return BATCH_OVERHEAD + len(self.body)

    def seal(self, compression: Compression) -> bytes:
        """The batch's wire bytes, built once (after it stopped taking records)."""
        payload = self.payload
        stamp = (self.producer_id, self.producer_epoch, self.base_sequence)
        if payload is None:
            payload = encode_batch(
                self.body,
                self.count,
                self.base_timestamp,
                self.max_timestamp,
                int(compression) | (TRANSACTIONAL_MASK if self.transactional else 0),
                producer_id=stamp[0],
                producer_epoch=stamp[1],
                base_sequence=stamp[2],
            )
            self.payload = payload
            self.stamp = stamp
            self.body = bytearray()
        elif stamp != self.stamp:
            # Renumbered by an epoch bump after it was sent: same records, new header.
            payload = restamp(payload, *stamp)
            self.payload = payload
            self.stamp = stamp
        return payload

    # -- completion (on the sender's loop) -----------------------------------------------

    def complete(self, base_offset: int, log_append_time: int) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._finish()

    def finish_split(self) -> None:
        """Every piece is done: wake the waiters on this batch (each record's outcome is its
        piece's)."""
        self._finish()

    def settled(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch that carried record ``index`` of this one to the node, and the record's
        index there (itself, unless it was split)."""
        batch = self
        while batch.pieces is not None:
            for first, piece in reversed(batch.pieces):
                if index >= first:
                    batch, index = piece, index - first
                    break
        return batch, index

    def _finish(self) -> None:
        # Futures keep their batch alive; its bytes are not needed any more.
        self.payload = None
        self.body = bytearray()
        with _COMPLETION_LOCK:
            self.done = True
            event, waiters, callbacks = self._event, self._waiters, self._callbacks
            self._waiters = self._callbacks = None
        if event is not None:
            event.set()
        if waiters:
            for future in waiters:
                resolve_future(future)
        if callbacks:
            for callback, argument in callbacks:
                try:
                    callback(argument)
                except Exception:  # a user callback must not stop the sender
                    _log.exception("a producer send callback raised")

    # -- waiting (any thread or loop) ------------------------------------------------------

    def wait(self, timeout_s: float | None) -> bool:
        """Block until completed; False if ``timeout_s`` passed first."""
        with _COMPLETION_LOCK:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout_s)

    async def wait_async(self) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with _COMPLETION_LOCK:
            if self.done:
                return
            if self._waiters is None:
                self._waiters = []
            self._waiters.append(future)
        await future

    def add_callback(self, callback: Callable[[Any], object], argument: object) -> None:
        """Call ``callback(argument)`` once completed (at once, in this thread, if it is)."""
        # A (function, argument) pair rather than a closure: RecordFuture.add_done_callback
        # is on the send path of applications that watch every record.
        with _COMPLETION_LOCK:
            if not self.done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((callback, argument))
                return
        callback(argument)


class RecordFuture:
    """The outcome of one ``send``: resolves to RecordMetadata or raises the delivery error.

    Works like ``concurrent.futures.Future`` (``result``, ``exception``, ``done``,
    ``add_done_callback``; timeouts in seconds) and can be awaited on any event loop.
    Callbacks run on the producer's I/O loop: keep them short.
    """

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    @property
    def topic(self) -> str:
        return self._batch.topic

    @property
    def partition(self) -> int:
        return self._batch.partition

    def done(self) -> bool:
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Block up to ``timeout`` seconds (None: until delivered or failed)."""
        batch = self._batch
        if not batch.done and not batch.wait(timeout):
            raise ClientTimeoutError(
                f"record for {batch.topic}-{batch.partition} not acknowledged within {timeout} s"
            )
        return self._outcome()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        batch = self._batch
        if not batch.done and not batch.wait(timeout):
            raise ClientTimeoutError(
                f"record for {batch.topic}-{batch.partition} not acknowledged within {timeout} s"
            )
        return batch.settled(self._index)[0].error

    def add_done_callback(self, callback: Callable[[RecordFuture], object]) -> None:
        """Call ``callback(self)`` once done (at once, in this thread, if it already is)."""
        self._batch.add_callback(callback, self)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch = self._batch
        if not batch.done:
            yield from batch.wait_async().__await__()
        return self._outcome()

    def _outcome(self) -> RecordMetadata:
        """The record's metadata, or its delivery error raised (the batch is done)."""
        batch, index = self._batch.settled(self._index)
        if batch.error is not None:
            raise batch.error
        offset = batch.base_offset + index if batch.base_offset >= 0 else -1
        timestamp = batch.log_append_time if batch.log_append_time >= 0 else self._timestamp
        return RecordMetadata(batch.topic, batch.partition, offset, timestamp)


class PartitionQueue:
    """The batches of one partition waiting to be sent, oldest first; the last may be open."""

    __slots__ = (
        "batches",
        "in_flight",
        "last_appended",
        "muted",
        "next_sequence",
        "open",
        "partition",
        "producer_known",
        "sends",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: collections.deque[ProducerBatch] = collections.deque()
        self.open: ProducerBatch | None = None
        # True while a request holds batches of this partition (not idempotent), or while
        # it waits for an answer before it may send (idempotent: a full window, or its
        # node's requests in flight): the answer wakes the sender, a new record need not.
        self.muted = False
        # Idempotent: sequenced batches sent and not yet answered, in send order; the
        # sequence the next new batch gets; how many batches were ever drained.
        self.in_flight: list[ProducerBatch] = []
        self.next_sequence = 0
        self.sends = 0
        # Idempotent: the leader has appended a batch of this partition under the current
        # producer id (in any epoch). Until then one batch at a time: a leader that does not
        # know the producer takes its first batch at any sequence (as Kafka's, since 2.5), so
        # a later batch landing before a refused or failed first one would be kept, and the
        # first one's records would follow it out of order. (A known producer's new epoch must
        # start at sequence 0, so an epoch bump does not make it unknown.) The leader forgets
        # an idle producer (producer.id.expiration.ms): after PRODUCER_STATE_TRUSTED_S without
        # an append, or an answer saying it has lost the state, the partition starts over.
        self.producer_known = False
        self.last_appended = 0.0


class DrainedRequest:
    """Batches for one produce request to one node, grouped by partition, in queue order."""

    __slots__ = ("address", "entries", "node_id")

    def __init__(
        self,
        node_id: int,
        address: str,
        entries: list[tuple[PartitionQueue, list[ProducerBatch]]],
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.entries = entries


class RecordAccumulator:
    """Holds every record between ``send`` and the sender; thread-safe."""

    def __init__(
        self,
        *,
        metadata: ClusterSource,
        notifier: Notifier,
        wakeup: Wakeup,
        batch_size: int,
        buffer_memory: int,
        linger_ms: int,
        max_request_size: int,
        delivery_timeout_ms: int,
        compression: Compression,
        partitioner_ignore_keys: bool,
        partitioner: StickyPartitioner | None = None,
        idempotence: IdempotenceState | None = None,
        in_flight_max: int = 5,
        transactions: TransactionTracker | None = None,
    ) -> None:
        """``transactions``: the producer is transactional (``idempotence`` is then given
        too): records are taken only inside a transaction, and a partition's batches are
        sent only once its coordinator added the partition to the transaction."""
        assert transactions is None or idempotence is not None
        self._metadata = metadata
        self.idempotence = idempotence
        self.transactions = transactions
        # Unacknowledged batches per partition for an idempotent producer.
        self._in_flight_max = in_flight_max
        self._notifier = notifier
        self._wakeup = wakeup
        self._batch_size = batch_size
        self._linger_s = linger_ms / 1000
        self._max_request_size = max_request_size
        # How far an idempotent producer grows a batch that waits to be sent.
        self._waiting_batch_bytes_max = min(
            max_request_size, max(batch_size, WAITING_BATCH_BYTES_MAX)
        )
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self.compression = compression
        self._ignore_keys = partitioner_ignore_keys
        self._sticky = partitioner or StickyPartitioner()
        # Room for key, value and headers: a record must fit one request, and buffer.memory.
        self._record_bytes_max = (
            min(max_request_size, buffer_memory) - BATCH_OVERHEAD - RECORD_FRAMING_BYTES_MAX
        )
        self._buffer_memory = buffer_memory
        self._free_bytes = buffer_memory
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], PartitionQueue] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._memory_waiters = 0
        self._flushes = 0
        self._closing = False
        self.closed = False
        self._drain_start: dict[int, int] = {}
        self._key_hashes: dict[bytes, int] = {}
        # When expire() next has work: the earliest deadline of a queued batch.
        self._next_expiry = float("inf")
        # Topics whose node refused a batch as too large (max.message.bytes below what this
        # producer sends): their waiting batches no longer grow past batch.size.
        self._no_grow_topics: set[str] = set()

    # -- the send path (caller threads) ---------------------------------------------------

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[Header] | None,
        partition: int | None,
        timestamp: int | None,
    ) -> RecordFuture:
        """Encode the record into its partition's open batch.

        Raises NeedMetadata / NeedMemory when the caller must wait (and call again), and
        TypeError, ValueError, RecordTooLargeError or ClientClosedError for records that will
        never be sent.
        """
        if self.closed:
            raise ClientClosedError("the producer is closed")
        idempotence = self.idempotence
        if idempotence is not None and idempotence.fatal_error is not None:
            raise idempotence.fatal_error.with_traceback(None)
        transactions = self.transactions
        if transactions is not None:
            # Fails fast; the check that counts is repeated under the lock below.
            transactions.check_send()
        # Everything that does not depend on the batch is encoded (and checked) before the
        # lock is taken.
        tail = encode_record_tail(key, value, headers)
        tail_bytes = len(tail)
        if tail_bytes > self._record_bytes_max:
            raise RecordTooLargeError(
                f"a record of about {tail_bytes + RECORD_FRAMING_BYTES_MAX} bytes for {topic} is "
                f"larger than the {self._record_bytes_max + RECORD_FRAMING_BYTES_MAX} that fit "
                "one request (max.request.size) and buffer.memory"
            )
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        elif type(timestamp) is not int or not 0 <= timestamp <= _INT64_MAX:
            raise ValueError(
                f"timestamp must be ms since the epoch, an int >= 0, not {timestamp!r}"
            )
        info = self._metadata.cluster.topics.get(topic)
        if info is None:
            raise NeedMetadata(topic)
        num_partitions = len(info.partitions)
        sticky = False
        if partition is None:
            if key is None or self._ignore_keys:
                sticky = True
            else:
                if type(key) is not bytes:
                    key = bytes(key)  # a bytearray or memoryview (checked above): hashable now
                key_hash = self._key_hashes.get(key)
                if key_hash is None:
                    key_hash = self._hash_key(key)
                partition = key_hash % num_partitions
        elif type(partition) is not int or partition < 0:
            raise ValueError(f"partition must be an int >= 0, not {partition!r}")
        elif partition >= num_partitions:
            raise NeedMetadata(topic)
        # acquire/release rather than `with`: half the cost, on the path every record takes.
        lock = self._lock
        lock.acquire()
        try:
            if transactions is not None:
                # Under the lock that leaving IN_TRANSACTION takes (hold_sends): the record
                # joins the open transaction before its commit or abort starts, or fails.
                transactions.check_send()
            if sticky:
                partition = self._sticky.partition(topic, num_partitions, info.available)
            assert partition is not None
            while True:
                queue = self._queues.get((topic, partition))
                if queue is None:
                    queue = self._queues[(topic, partition)] = PartitionQueue(topic, partition)
                batch = queue.open
                if batch is not None:
                    count = batch.count
                    record = frame_record(tail, timestamp - batch.base_timestamp, count)
                    body = batch.body
                    if BATCH_OVERHEAD + len(body) + len(record) <= batch.limit_bytes or count == 0:
                        body += record
                        batch.count = count + 1
                        if timestamp > batch.max_timestamp:
                            batch.max_timestamp = timestamp
                        return RecordFuture(batch, count, timestamp)
                    # Full: it goes out as soon as the sender looks. While the partition has
                    # a request in flight the sender could not send it anyway, and the answer
                    # wakes the sender: waking it now would only cost a GIL hand-over.
                    batch.sealed = True
                    queue.open = None
                    if not queue.muted:
                        self._wakeup.set()
                if sticky:
                    # KIP-480: a keyless record that would start a new batch moves the topic's
                    # sticky partition on first (once per record).
                    sticky = False
                    moved = self._sticky.on_new_batch(
                        topic, num_partitions, info.available, partition
                    )
                    if moved != partition:
                        partition = moved
                        continue
                if self._grow_waiting_batch(queue, tail_bytes):
                    continue
                queue.open = self._new_batch(queue, tail_bytes, timestamp)
                queue.batches.append(queue.open)
                # The sender must start this batch's linger timer (unless an answer in flight
                # for the partition will wake it first, as above).
                if not queue.muted:
                    self._wakeup.set()
        finally:
            lock.release()

    def _grow_waiting_batch(self, queue: PartitionQueue, tail_bytes: int) -> bool:
        """Idempotent: reopen the partition's newest batch for another batch.size of records
        if it is still waiting to be sent (lock held); False: open a new batch instead.

        A Produce request carries one batch per partition when the batches have a producer id
        (the storage node's rule, as Kafka's), so a new batch queued behind a waiting one
        could only go in a later request (or a parallel one): a backlog of small batches would
        cost a request each, where the non-idempotent producer sends a partition's backlog in
        one request. Growing the waiting batch gives the same records per request and delays
        no record: the sender takes the batch as soon as the partition's window and its
        node's requests in flight allow, as it would have taken the first of the small ones.
        Nothing sent changes: a batch gets its sequence, and stops taking records, when it
        is drained."""
        if not queue.batches or not self._sequenced or queue.topic in self._no_grow_topics:
            return False
        last = queue.batches[-1]
        if last.send_order >= 0 or last.payload is not None:
            return False  # a retry, or already encoded
        limit_bytes = last.limit_bytes + self._batch_size
        if (
            limit_bytes > self._waiting_batch_bytes_max
            or BATCH_OVERHEAD + len(last.body) + RECORD_FRAMING_BYTES_MAX + tail_bytes > limit_bytes
            or self._batch_size > self._free_bytes
            # A record joining an old batch would get less than half its delivery.timeout.ms
            # (the timeout runs from the batch's creation, as in Kafka).
            or time.monotonic() > last.deadline - self._delivery_timeout_s / 2
        ):
            return False
        self._free_bytes -= self._batch_size
        last.reserved_bytes += self._batch_size
        last.limit_bytes = limit_bytes
        queue.open = last
        return True

    def _hash_key(self, key: bytes) -> int:
        """toPositive(murmur2(key)), remembered: murmur2 in Python costs about a microsecond,
        and real keys (user ids, device ids) repeat. The memo is bounded by clearing it."""
        key_hash = murmur2(key) & 0x7FFFFFFF
        if len(self._key_hashes) >= KEY_HASH_MEMO_ENTRIES_MAX:
            self._key_hashes.clear()
        self._key_hashes[key] = key_hash
        return key_hash

    def _new_batch(self, queue: PartitionQueue, tail_bytes: int, timestamp: int) -> ProducerBatch:
        """Open a batch (lock held); the caller appends the record on the next pass."""
        # Kafka reserves a whole batch.size per batch; capped so that a batch.size above
        # buffer.memory still leaves room for one batch.
        needed = min(
            max(self._batch_size, BATCH_OVERHEAD + RECORD_FRAMING_BYTES_MAX + tail_bytes),
            self._buffer_memory,
        )
        if needed > self._free_bytes:
            raise NeedMemory(needed)
        self._free_bytes -= needed
        now = time.monotonic()
        batch = ProducerBatch(
            queue.topic, queue.partition, now, now + self._delivery_timeout_s, needed
        )
        batch.base_timestamp = timestamp
        batch.limit_bytes = self._batch_size
        if self.transactions is not None:
            self.transactions.partition_opened(queue.topic, queue.partition)
        self._incomplete.add(batch)
        if batch.deadline < self._next_expiry:
            self._next_expiry = batch.deadline
        return batch

    def hold_sends(self, change: Callable[[], None]) -> None:
        """Run ``change`` with no append in progress (the lock held). A transactional producer
        ends its transaction this way: every send either placed its record (its batch is
        among the incomplete ones a flush waits for) or sees the new state and raises."""
        with self._lock:
            change()

    def has_free_bytes(self, needed: int) -> bool:
        return self._free_bytes >= needed

    def begin_memory_wait(self) -> None:
        """A caller blocks for memory: send everything now, ignoring linger (as Kafka does)."""
        with self._lock:
            self._memory_waiters += 1
        self._wakeup.set()

    def end_memory_wait(self) -> None:
        with self._lock:
            self._memory_waiters -= 1

    # -- the sender's side (the client's loop) ------------------------------------------------

    def drain(
        self, cluster: ClusterView, now: float, request_slots: Callable[[int], int]
    ) -> tuple[list[DrainedRequest], float | None, bool]:
        """Take the ready batches off their queues, grouped into requests per leader node.

        ``request_slots(node_id)`` says how many more requests that node may have in flight.
        Returns the requests, when the next batch becomes ready by time (monotonic, or None)
        and whether some partition had no known leader (metadata should be refreshed).
        """
        next_ready: float | None = None
        unknown_leader = False
        ready: dict[int, tuple[str, list[PartitionQueue]]] = {}
        requests: list[DrainedRequest] = []
        with self._lock:
            send_now = self._flushes > 0 or self._closing or self._memory_waiters > 0
            sequenced = self._sequenced
            bumping = False
            if sequenced:
                idempotence = self.idempotence
                assert idempotence is not None
                if not idempotence.has_producer_id or idempotence.fatal_error is not None:
                    # Waiting for a producer id: the sender is woken when it arrives.
                    return requests, None, False
                bumping = bool(idempotence.bump_reason)
            transactions = self.transactions
            # The clock of last_appended (``now`` may be a caller's "everything is due").
            clock = time.monotonic()
            for queue in self._queues.values():
                if sequenced:
                    if (
                        queue.producer_known
                        and not queue.in_flight
                        and clock - queue.last_appended > PRODUCER_STATE_TRUSTED_S
                    ):
                        queue.producer_known = False
                    # Waiting for a node's request slot lasts until this pass at most.
                    queue.muted = self._window_full(queue)
                if not queue.batches:
                    continue
                if sequenced:
                    if not self._sendable(queue, bumping):
                        continue
                    if transactions is not None and not transactions.send_allowed(
                        queue.topic, queue.partition
                    ):
                        continue  # AddPartitionsToTxn first (the sender starts it)
                elif queue.muted:
                    continue
                due = self._due(queue, send_now)
                if due > now:
                    next_ready = due if next_ready is None else min(next_ready, due)
                    continue
                leader = cluster.leader(queue.topic, queue.partition)
                if leader is None:
                    unknown_leader = True
                    continue
                node_id, address = leader
                ready.setdefault(node_id, (address, []))[1].append(queue)
            for node_id, (address, queues) in ready.items():
                slots = request_slots(node_id)
                # Rotate the starting partition so that, when max.request.size cuts a request
                # short, every partition of the node gets its turn first.
                start = self._drain_start.get(node_id, 0) % len(queues)
                self._drain_start[node_id] = start + 1
                queues = queues[start:] + queues[:start]
                while slots > 0 and queues:
                    if sequenced:
                        entries, queues = self._drain_sequenced(queues, send_now, now, bumping)
                    else:
                        entries, queues = self._drain_request(queues)
                    requests.append(DrainedRequest(node_id, address, entries))
                    slots -= 1
                if sequenced:
                    # Ready, but the node has max.in.flight.requests.per.connection requests
                    # in flight: the partition waits for one of their answers, which wakes
                    # the sender, so send() need not.
                    for queue in queues:
                        queue.muted = True
        return requests, next_ready, unknown_leader

    @property
    def _sequenced(self) -> bool:
        idempotence = self.idempotence
        return idempotence is not None and not idempotence.disabled

    def _due(self, queue: PartitionQueue, send_now: bool) -> float:
        """When the first batch of ``queue`` may go (lock held)."""
        first = queue.batches[0]
        due = first.retry_at
        if not (send_now or first.sealed or first.attempts or len(queue.batches) > 1):
            due = max(due, first.created + self._linger_s)
        return due

    def _sendable(self, queue: PartitionQueue, bumping: bool) -> bool:
        """Idempotent: whether the first batch of ``queue`` may be sent now, by the ordering
        rules (lock held; ``queue.batches`` is not empty). ``bumping``: an epoch bump is
        pending; until it happens only the retries whose outcome is unknown go out, under the
        old epoch, so that none of them is renumbered while it may already be in the log."""
        first = queue.batches[0]
        if bumping and (first.send_order < 0 or first.unwritten):
            return False
        in_flight = queue.in_flight
        if in_flight and not queue.producer_known:
            return False
        if first.send_order < 0:
            # A new batch: the oldest unacknowledged batch and the newest must stay within
            # in_flight_max of each other, not just the count in flight. The leader
            # remembers a producer's last five batches; a retry of one that fell out of
            # that window would be refused as out of order instead of deduplicated.
            return not in_flight or queue.sends - in_flight[0].send_order < self._in_flight_max
        if len(in_flight) >= self._in_flight_max:
            return False
        # A retried batch waits until every batch sent before it has been answered: sent
        # ahead of its predecessor's retry it would only bounce as out of order.
        return not in_flight or in_flight[0].send_order > first.send_order

    def _drain_sequenced(
        self, queues: list[PartitionQueue], send_now: bool, now: float, bumping: bool
    ) -> tuple[list[tuple[PartitionQueue, list[ProducerBatch]]], list[PartitionQueue]]:
        """Idempotent: fill one request with one batch of each of ``queues`` (lock held);
        returns it and the queues that may send another batch in the next request."""
        idempotence = self.idempotence
        assert idempotence is not None
        entries: list[tuple[PartitionQueue, list[ProducerBatch]]] = []
        left: list[PartitionQueue] = []
        size = 0
        for queue in queues:
            batch = queue.batches[0]
            if entries and size + batch.size_bytes > self._max_request_size:
                left.append(queue)
                continue
            queue.batches.popleft()
            if batch is queue.open:
                queue.open = None
            batch.sealed = True
            if batch.send_order < 0:
                batch.send_order = queue.sends
                queue.sends += 1
                batch.producer_id = idempotence.producer_id
                batch.producer_epoch = idempotence.epoch
                batch.base_sequence = queue.next_sequence
                batch.transactional = self.transactions is not None
                queue.next_sequence = add_sequence(queue.next_sequence, batch.count)
            batch.follows_acknowledged = (
                not queue.in_flight or queue.in_flight[0].send_order > batch.send_order
            )
            bisect.insort(queue.in_flight, batch, key=_send_order)
            queue.muted = self._window_full(queue)
            entries.append((queue, [batch]))
            size += batch.size_bytes
            if (
                queue.batches
                and self._sendable(queue, bumping)
                and self._due(queue, send_now) <= now
            ):
                left.append(queue)
        return entries, left

    def _window_full(self, queue: PartitionQueue) -> bool:
        """Idempotent: no new batch of ``queue`` may be sent before an answer (lock held).
        Every answer wakes the sender, so until then send() need not."""
        in_flight = queue.in_flight
        return bool(in_flight) and (
            not queue.producer_known or queue.sends - in_flight[0].send_order >= self._in_flight_max
        )

    def ready_for_epoch_bump(self) -> bool:
        """Idempotent: nothing is in flight and every sequenced batch still queued is known
        not to be in the log, so renumbering it under a new epoch cannot write it twice.
        (Behind an unwritten batch every later one of its partition is unwritten too: the
        leader appends a producer's sequences in order.)"""
        with self._lock:
            for queue in self._queues.values():
                if queue.in_flight:
                    return False
                if queue.batches:
                    first = queue.batches[0]
                    if first.send_order >= 0 and not first.unwritten:
                        return False
            return True

    def has_queued(self) -> bool:
        """Whether some batch waits to be sent."""
        with self._lock:
            return any(queue.batches for queue in self._queues.values())

    def reset_sequences(self, producer_id: int, epoch: int) -> None:
        """Idempotent: a new producer id or epoch: every partition numbers from 0 again, and the
        batches waiting for a retry are renumbered in their order (no batch is in flight)."""
        idempotence = self.idempotence
        assert idempotence is not None
        with self._lock:
            new_producer = producer_id != idempotence.producer_id
            idempotence.producer_id = producer_id
            idempotence.epoch = epoch
            idempotence.bump_reason = ""
            for queue in self._queues.values():
                assert not queue.in_flight, "an epoch changes only with nothing in flight"
                queue.next_sequence = 0
                if new_producer:
                    queue.producer_known = False
                for batch in queue.batches:
                    if batch.send_order < 0:
                        break  # retried batches are in front, new ones behind them
                    batch.producer_id = producer_id
                    batch.producer_epoch = epoch
                    batch.base_sequence = queue.next_sequence
                    batch.unwritten = False
                    queue.next_sequence = add_sequence(queue.next_sequence, batch.count)
        self._wakeup.set()

    def producer_unknown(self, queue: PartitionQueue) -> None:
        """Idempotent: ``queue``'s leader has lost this producer's state (it said so): one
        batch at a time again until it appends one."""
        with self._lock:
            queue.producer_known = False

    def disable_idempotence(self) -> None:
        """Send without sequences from now on (nothing has been sequenced yet)."""
        idempotence = self.idempotence
        assert idempotence is not None
        with self._lock:
            assert not any(q.sends for q in self._queues.values())
            idempotence.disabled = True
        self._wakeup.set()

    def _drain_request(
        self, queues: list[PartitionQueue]
    ) -> tuple[list[tuple[PartitionQueue, list[ProducerBatch]]], list[PartitionQueue]]:
        """Fill one request from ``queues`` (lock held); returns it and the queues left out."""
        entries: list[tuple[PartitionQueue, list[ProducerBatch]]] = []
        left: list[PartitionQueue] = []
        size = 0
        full = False
        for queue in queues:
            taken: list[ProducerBatch] = []
            while queue.batches and not full:
                batch = queue.batches[0]
                if (entries or taken) and (
                    batch.solo or size + batch.size_bytes > self._max_request_size
                ):
                    break
                queue.batches.popleft()
                if batch is queue.open:
                    queue.open = None
                batch.sealed = True
                taken.append(batch)
                size += batch.size_bytes
                full = batch.solo
            if taken:
                queue.muted = True
                entries.append((queue, taken))
            else:
                left.append(queue)
        return entries, left

    def requeue(self, queue: PartitionQueue, batches: list[ProducerBatch], retry_at: float) -> None:
        """Put batches whose request failed back at the front of their queue, in order."""
        with self._lock:
            for batch in reversed(batches):
                batch.attempts += 1
                batch.retry_at = retry_at
                if batch.send_order >= 0:
                    self._requeue_sequenced(queue, batch)
                else:
                    queue.batches.appendleft(batch)
            queue.muted = self._sequenced and self._window_full(queue)
            self._next_expiry = min(self._next_expiry, batches[0].deadline)
        self._wakeup.set()

    @staticmethod
    def _requeue_sequenced(queue: PartitionQueue, batch: ProducerBatch) -> None:
        """Back into the queue in send order, among the other retries (lock held)."""
        queue.in_flight.remove(batch)
        index = 0
        for queued in queue.batches:
            if queued.send_order < 0 or queued.send_order > batch.send_order:
                break
            index += 1
        queue.batches.insert(index, batch)

    def split(self, queue: PartitionQueue, batches: list[ProducerBatch]) -> None:
        """Send each of ``batches`` again in a request of its own (no attempt counted): they
        shared a request that was rejected, and only one of them may be at fault."""
        with self._lock:
            for batch in reversed(batches):
                batch.solo = True
                queue.batches.appendleft(batch)
            queue.muted = False
            self._next_expiry = min(self._next_expiry, batches[0].deadline)
        self._wakeup.set()

    def split_too_large(self, queue: PartitionQueue, batch: ProducerBatch) -> bool:
        """Put the records of ``batch``, refused by the node as too large (nothing written),
        back at the head of ``queue`` as batches of at most batch.size; False when it holds one
        record (which then fails: it can never be written).

        As Kafka's producer (Sender on MESSAGE_TOO_LARGE, RecordAccumulator.splitAndReenqueue):
        the pieces take the refused batch's place and, when it was sequenced, its sequence
        range, first piece at its base sequence, so the batches sent after it keep theirs and
        stay valid (no epoch bump: the refused batch is not in the log). Its topic's batches
        stop growing past batch.size from then on."""
        if batch.count <= 1 or batch.payload is None:
            return False
        pieces = self._pieces(batch, self._batch_size)
        if len(pieces) == 1:
            # Refused at batch.size or below (the topic's limit is lower still): halves, so
            # that repeated refusals end at single records.
            pieces = self._pieces(batch, BATCH_OVERHEAD + len(pieces[0].body) // 2)
        with self._lock:
            self._no_grow_topics.add(queue.topic)
            first_index = 0
            batch.pieces = []
            for piece in pieces:
                batch.pieces.append((first_index, piece))
                first_index += piece.count
            batch.pieces_left = len(pieces)
            batch.payload = None
            if batch.send_order >= 0:
                self._split_sequenced(queue, batch, pieces)
            else:
                queue.batches.extendleft(reversed(pieces))
                queue.muted = False
            self._next_expiry = min(self._next_expiry, batch.deadline)
        self._wakeup.set()
        return True

    def _pieces(self, batch: ProducerBatch, piece_bytes_max: int) -> list[ProducerBatch]:
        """The records of sealed ``batch`` re-encoded into batches of at most
        ``piece_bytes_max`` (uncompressed; a record larger than that alone in its batch), not
        yet placed anywhere."""
        assert batch.payload is not None
        pieces: list[ProducerBatch] = []
        piece: ProducerBatch | None = None
        for _, timestamp, key, value, headers in decode_records(batch.payload, check_crc=False):
            tail = encode_record_tail(key, value, headers)
            if piece is not None:
                record = frame_record(tail, timestamp - piece.base_timestamp, piece.count)
                if BATCH_OVERHEAD + len(piece.body) + len(record) > piece_bytes_max:
                    piece = None
            if piece is None:
                piece = ProducerBatch(
                    batch.topic, batch.partition, batch.created, batch.deadline, 0
                )
                piece.base_timestamp = timestamp
                piece.limit_bytes = piece_bytes_max
                # Never takes records from send(): it is not any queue's open batch.
                piece.sealed = True
                piece.attempts = batch.attempts
                piece.solo = batch.solo
                piece.parent = batch
                pieces.append(piece)
                record = frame_record(tail, 0, 0)
            piece.body += record
            piece.count += 1
            piece.max_timestamp = max(piece.max_timestamp, timestamp)
        return pieces

    def _split_sequenced(
        self, queue: PartitionQueue, batch: ProducerBatch, pieces: list[ProducerBatch]
    ) -> None:
        """Give ``pieces`` the send order and sequence range of ``batch`` and queue them where
        a retry of it would go (lock held)."""
        if batch in queue.in_flight:
            queue.in_flight.remove(batch)
        # The pieces take send orders batch.send_order.. : the batches sent after it move up,
        # keeping their order (send orders only rank a partition's batches).
        shift = len(pieces) - 1
        for later in (*queue.in_flight, *queue.batches):
            if later.send_order > batch.send_order:
                later.send_order += shift
        queue.sends += shift
        sequence = batch.base_sequence
        for number, piece in enumerate(pieces):
            piece.send_order = batch.send_order + number
            piece.producer_id = batch.producer_id
            piece.producer_epoch = batch.producer_epoch
            piece.base_sequence = sequence
            piece.transactional = batch.transactional
            # The node wrote none of it: a pending epoch bump may renumber it safely.
            piece.unwritten = True
            sequence = add_sequence(sequence, piece.count)
        index = 0
        for queued in queue.batches:
            if queued.send_order < 0 or queued.send_order > batch.send_order:
                break
            index += 1
        for number, piece in enumerate(pieces):
            queue.batches.insert(index + number, piece)
        queue.muted = self._window_full(queue)

    def complete(
        self,
        queue: PartitionQueue,
        batches: list[ProducerBatch],
        base_offset: int,
        log_append_time: int,
    ) -> None:
        """The node appended ``batches`` of ``queue`` as one run of offsets from
        ``base_offset`` (-1: offsets not known, acks=0); the partition may send again."""
        offset = base_offset
        for batch in batches:
            batch.complete(offset, log_append_time)
            if offset >= 0:
                offset += batch.count
        self._release(queue, batches, appended=True)

    def fail(
        self, queue: PartitionQueue | None, batches: list[ProducerBatch], error: BaseException
    ) -> None:
        """Fail ``batches`` (of a request to ``queue``'s partition, or None: from the queue);
        a transaction they belong to can no longer commit."""
        for batch in batches:
            batch.fail(error)
        if batches and self.transactions is not None:
            self.transactions.batch_failed(error)
        self._release(queue, batches)

    def _release(
        self,
        queue: PartitionQueue | None,
        batches: list[ProducerBatch],
        *,
        appended: bool = False,
    ) -> None:
        # One lock round for a whole answer: the caller threads contend for this lock on
        # every send, and each wait for it can cost them a GIL hand-over.
        split_done: list[ProducerBatch] = []
        with self._lock:
            if appended and queue is not None:
                queue.producer_known = True
                queue.last_appended = time.monotonic()
            for batch in batches:
                self._free_bytes += batch.reserved_bytes
                batch.reserved_bytes = 0
                self._incomplete.discard(batch)
                if queue is not None and batch.send_order >= 0 and batch in queue.in_flight:
                    queue.in_flight.remove(batch)
                # The last piece of a split batch completes it (and it, its own parent's).
                parent = batch.parent
                while parent is not None:
                    parent.pieces_left -= 1
                    if parent.pieces_left > 0:
                        break
                    self._free_bytes += parent.reserved_bytes
                    parent.reserved_bytes = 0
                    self._incomplete.discard(parent)
                    split_done.append(parent)
                    parent = parent.parent
            if queue is not None:
                # Answers of concurrent requests come in any order: the window stays full
                # while its oldest batch is unanswered.
                queue.muted = self._sequenced and self._window_full(queue)
        for parent in split_done:
            parent.finish_split()
        self._notifier.notify()
        if queue is not None:
            self._wakeup.set()

    def expire(self, now: float) -> float:
        """Fail the queued batches whose delivery.timeout.ms has passed; returns when the next
        queued batch expires (monotonic; inf: none queued). Batches in a request are not
        here: their request's answer decides. Cheap when nothing is due."""
        if now < self._next_expiry:
            return self._next_expiry
        expired: list[ProducerBatch] = []
        with self._lock:
            next_expiry = float("inf")
            for queue in self._queues.values():
                while queue.batches and queue.batches[0].deadline <= now:
                    batch = queue.batches.popleft()
                    if batch is queue.open:
                        queue.open = None
                    expired.append(batch)
                # Deadlines only grow along a queue: retried batches go back in front.
                if queue.batches:
                    next_expiry = min(next_expiry, queue.batches[0].deadline)
            self._next_expiry = next_expiry
        for batch in expired:
            waited_ms = round((now - batch.created) * 1000)
            error = ClientTimeoutError(
                f"expiring {batch.count} record(s) for {batch.topic}-{batch.partition}: "
                f"{waited_ms} ms has passed since batch creation "
                f"(delivery.timeout.ms={round(self._delivery_timeout_s * 1000)})"
            )
            self.fail(None, [batch], error)
        return next_expiry

    def begin_flush(self) -> list[ProducerBatch]:
        """Make everything ready now; returns the batches the flush must wait for."""
        with self._lock:
            self._flushes += 1
            batches = list(self._incomplete)
        self._wakeup.set()
        return batches

    def end_flush(self) -> None:
        with self._lock:
            self._flushes -= 1

    def begin_close(self) -> None:
        """No more sends; everything queued is ready now."""
        with self._lock:
            self.closed = True
            self._closing = True
        self._wakeup.set()

    @property
    def incomplete_count(self) -> int:
        return len(self._incomplete)

    def abort_queued(self, error: BaseException) -> bool:
        """Fail every batch still queued (not those in requests); returns whether one of them
        had been sent before (a retry: its sequence is now a gap in its partition's)."""
        with self._lock:
            aborted = [batch for queue in self._queues.values() for batch in queue.batches]
            for queue in self._queues.values():
                queue.batches.clear()
                queue.open = None
        self.fail(None, aborted, error)
        return any(batch.send_order >= 0 for batch in aborted)


def _send_order(batch: ProducerBatch) -> int:
    return batch.send_order
