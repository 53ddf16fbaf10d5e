"""The consumer: ``Consumer`` (blocking) and ``AsyncConsumer`` (asyncio), one core.

    with Consumer(bootstrap_servers="127.0.0.1:9101", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", 0), TopicPartition("events", 1)])
        while True:
            for record in consumer.poll(timeout=1.0):
                handle(record)

Partitions are assigned by the application (``assign``) or by the consumer group
(``subscribe``, with ``group.id``). A partition starts at its committed offset (in a group) or
at ``auto.offset.reset`` (latest by default) unless ``seek`` says otherwise. ``poll`` returns
up to ``max.poll.records`` records from prefetched data and starts the next fetch of every
partition it drained, so the next round trip overlaps the application's work.

Consumer groups (Kafka's classic protocol)::

    consumer = Consumer(group_id="billing", enable_auto_commit=False)
    consumer.subscribe(["orders"], on_assign=print, on_revoke=print)
    while True:
        for record in consumer.poll(timeout=1.0):
            handle(record)
        consumer.commit()

Rebalances happen inside ``poll``, in the caller's thread (or task). Eager (every assignor
but ``cooperative-sticky``): before rejoining, the consumer commits its positions (with
``enable.auto.commit``), calls ``on_revoke`` with every partition it had and gives them all up;
after the group assigned it partitions it positions them at their committed offsets and calls
``on_assign``. Cooperative (KIP-429; ``partition.assignment.strategy=cooperative-sticky``
alone): the consumer keeps its partitions, and ``poll`` keeps returning their records, while
the group rebalances; then it commits (with ``enable.auto.commit``) and revokes only the
partitions the new assignment moved away, calls ``on_assign`` with only the new ones, and, if
it revoked any, rejoins so that they reach their new owner. A member that lost its membership
(session expired) revokes everything without committing: its partitions may be someone
else's already. The callbacks are plain functions taking a list of TopicPartition; they may
call ``commit``, ``seek`` and ``position`` (an AsyncConsumer's callbacks may use the
blocking-free methods and ``commit_async``).

Like Kafka's consumer, one consumer is meant for one thread (or one task) at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from brook.client.admin import OffsetAndMetadata
from brook.client.config import ClientSettings, ConsumerConfig, OffsetResetStrategy, consumer_config
from brook.client.core import CLOSE_MARGIN_S, ClientCore, start_on_thread
from brook.client.errors import (
    BrookClientError,
    ClientClosedError,
    ClientTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from brook.client.fetcher import Fetcher, SubscriptionState
from brook.client.group.assignors import RebalanceProtocol
from brook.client.group.coordinator import (
    ConsumerCoordinator,
    ConsumerGroupMetadata,
    storage_node_locator,
)
from brook.client.runtime import (
    Steps,
    Wakeup,
    drive,
    drive_async,
)
from brook.client.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from brook.closing import AsyncClosing, Closing
from brook.v1 import storage_pb2

__all__ = ["AsyncConsumer", "Consumer", "PartitionsCallback"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

# on_assign / on_revoke: called with the partitions gained or given up.
PartitionsCallback = Callable[[list[TopicPartition]], object]

# Fetch requests name partitions and offsets only.
_FETCH_REQUEST_BYTES_MAX = 4 * 1024 * 1024
# A node returns the first batch of a fetch even when it exceeds fetch.max.bytes (so that a
# consumer always progresses); this much on top of the limits leaves room for such a batch
# (Kafka's default max.message.bytes is 1 MiB).
_OVERSIZED_FIRST_BATCH_BYTES_MAX = 16 * 1024 * 1024
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


def _topics(topics: object) -> list[str]:
    names = [topics] if isinstance(topics, str) else topics
    if not isinstance(names, Iterable):
        raise TypeError(f"expected a topic name or a list of them, got {topics!r}")
    result = list(names)
    for name in result:
        if not isinstance(name, str) or not name:
            raise TypeError(f"topic names must be non-empty strings, got {name!r}")
    return result


def offsets_to_commit(
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` checked, each as an OffsetAndMetadata (what commit and a transactional
    producer's send_offsets_to_transaction take)."""
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        key = _topic_partition(tp)
        if isinstance(value, OffsetAndMetadata):
            _offset(value.offset, f"committed offset of {key.topic}-{key.partition}")
            result[key] = value
        else:
            result[key] = OffsetAndMetadata(
                _offset(value, f"committed offset of {key.topic}-{key.partition}")
            )
    return result


class _ConsumerCore(ClientCore):
    """Everything both flavours share; its I/O lives on one event loop."""

    def __init__(self, config: ConsumerConfig, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            config,
            loop,
            send_bytes_max=_FETCH_REQUEST_BYTES_MAX,
            receive_bytes_max=max(config.fetch_max_bytes, config.max_partition_fetch_bytes)
            + _OVERSIZED_FIRST_BATCH_BYTES_MAX,
        )
        self.config = config
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
        self.closed = False
        self.group: ConsumerCoordinator | None = None
        if config.group_id is not None:
            group_wakeup = Wakeup(loop)
            self.metadata.add_listener(group_wakeup)
            self.group = ConsumerCoordinator(
                group_id=config.group_id,
                group_instance_id=config.group_instance_id,
                config=config,
                metadata=self.metadata,
                network=self.network,
                notifier=self.notifier,
                wakeup=group_wakeup,
                locator=storage_node_locator(
                    self.metadata,
                    self.network,
                    config.bootstrap_servers,
                    config.request_timeout_ms / 1000,
                ),
                assignors=config.partition_assignment_strategy,
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_poll_interval_ms=config.max_poll_interval_ms,
            )
        # Group management: whether subscribe() is in force, its callbacks, the partitions
        # the application was last given (None: none since the last revocation), the join in
        # progress, and commits started but not finished.
        self.subscribed = False
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._owned: list[TopicPartition] | None = None
        self._join: (
            concurrent.futures.Future[
                tuple[list[TopicPartition], dict[TopicPartition, OffsetAndMetadata | None]]
            ]
            | None
        ) = None
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._next_auto_commit = 0.0
        self._cooperative = (
            self.group is not None
            and self.group.rebalance_protocol is RebalanceProtocol.COOPERATIVE
        )

    @property
    def default_timeout_s(self) -> float:
        return self.config.default_api_timeout_ms / 1000

    async def start(self) -> None:
        self.run_in_background(self.metadata.run(), "brook-consumer-metadata")
        self.run_in_background(self.fetcher.run(), "brook-consumer-fetcher")
        if self.group is not None:
            self.run_in_background(self.group.run(), "brook-consumer-group")

    def _check_open(self) -> None:
        if self.closed:
            raise ClientClosedError("the consumer is closed")

    # -- assignment and positions -----------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        if self.subscribed:
            raise BrookClientError(
                "the consumer is subscribed: its partitions come from the group; call "
                "unsubscribe() before assign()"
            )
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
        if not self.subscriptions.partitions and not self.subscribed:
            # As Kafka's consumer: polling with nothing assigned is a mistake, not a wait.
            raise BrookClientError(
                "no partitions are assigned: call assign() or subscribe() before poll()"
            )
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            version = self.notifier.version
            group = self.group
            if self.subscribed and group is not None:
                group.last_poll = time.monotonic()
                if group.fatal_error is not None:
                    raise group.fatal_error
                rebalancing = group.rejoin_needed or self._join is not None
                if self._cooperative and self._owned is not None and rebalancing:
                    # The member keeps consuming what it holds while the group rebalances.
                    yield from self._cooperative_rebalance_steps()
                elif rebalancing or self._owned is None:
                    joined = yield from self._rebalance_steps(deadline)
                    if not joined:
                        return []
                    continue
                if self._join is None:
                    self._maybe_auto_commit()
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

    # -- consumer groups --------------------------------------------------------------------

    def _group(self, what: str) -> ConsumerCoordinator:
        self._check_open()
        if self.group is None:
            raise BrookClientError(f"{what} needs group.id: this consumer belongs to no group")
        return self.group

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: PartitionsCallback | None,
        on_revoke: PartitionsCallback | None,
    ) -> None:
        group = self._group("subscribe")
        names = _topics(topics)
        if not names:
            raise ValueError("subscribe needs at least one topic; unsubscribe() stops consuming")
        if self.subscriptions.partitions and not self.subscribed:
            raise BrookClientError(
                "the consumer has manually assigned partitions: call assign([]) or "
                "unsubscribe() before subscribe()"
            )
        self.subscribed = True
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        # Plain attribute writes and the thread-safe metadata cache; the join itself happens
        # in poll.
        group.subscribe(names)
        self.notifier.notify()

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coro`` on the loop from any thread; waiters wake when it finishes."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        self._pending.add(future)

        def finished(done: concurrent.futures.Future[_T]) -> None:
            self._pending.discard(done)
            self.notifier.notify()

        future.add_done_callback(finished)
        return future

    def _wait_steps(self, future: concurrent.futures.Future[_T], deadline: float) -> Steps[bool]:
        """Wait for ``future`` until ``deadline``; True when it finished."""
        while True:
            version = self.notifier.version
            if future.done():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            yield version, remaining

    def _positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        with self.subscriptions.lock:
            return {
                tp: OffsetAndMetadata(state.position)
                for tp, state in self.subscriptions.partitions.items()
                if state.position is not None
            }

    def _revoke_steps(self, timeout_s: float) -> Steps[None]:
        """Eager revocation: give every partition up (see _give_up_steps)."""
        owned = self._owned
        if owned is None:
            return
        try:
            yield from self._give_up_steps(owned, timeout_s, commit=True)
        finally:
            self._owned = None

    def _give_up_steps(
        self, partitions: list[TopicPartition], timeout_s: float, *, commit: bool
    ) -> Steps[None]:
        """Commit their positions (auto-commit, while the member's generation is current),
        call on_revoke while they are still assigned (so it may commit them too, as with
        Kafka), then drop them from the assignment."""
        group = self.group
        assert group is not None
        if commit and self.config.enable_auto_commit and group.generation_id >= 0:
            leaving = set(partitions)
            offsets = {tp: om for tp, om in self._positions().items() if tp in leaving}
            if offsets:
                deadline = time.monotonic() + timeout_s
                future = self._submit(group.commit(offsets, deadline, group_managed=True))
                if (yield from self._wait_steps(future, deadline + CLOSE_MARGIN_S)):
                    error = future.exception()
                    if error is not None:
                        _log.warning("auto-commit before revoking partitions failed: %s", error)
        try:
            if self._on_revoke is not None:
                self._on_revoke(list(partitions))
        finally:
            gone = set(partitions)
            remaining = [tp for tp in self._owned or [] if tp not in gone]
            self._owned = remaining
            self.subscriptions.assign(remaining)
            self._changed()

    def _cooperative_rebalance_steps(self) -> Steps[None]:
        """One step of a cooperative rebalance (KIP-429), never waiting for the join: start
        it (keeping the partitions), or finish it: revoke what the assignment moved away and
        ask to rejoin if anything was, then add the new partitions."""
        group = self.group
        assert group is not None and self._owned is not None
        timeout_s = self.default_timeout_s
        if self._join is None:
            if group.generation_id < 0:
                # The membership was lost (session expired, generation fenced): the partitions
                # may be another member's already, so nothing is committed (Kafka's
                # onPartitionsLost, whose default is onPartitionsRevoked).
                yield from self._give_up_steps(list(self._owned), timeout_s, commit=False)
            else:
                unsubscribed = [tp for tp in self._owned if tp.topic not in group.topics]
                if unsubscribed:
                    yield from self._give_up_steps(unsubscribed, timeout_s, commit=True)
            self._join = self._submit(self._join_and_fetch(group, list(self._owned)))
            return
        join = self._join
        if not join.done():
            return
        self._join = None
        error = join.exception()
        if isinstance(error, ClientTimeoutError):
            _log.info("joining group %s is taking long: %s", group.group_id, error)
            group.rejoin_needed = True
            return
        if error is not None:
            raise error
        partitions, committed = join.result()
        assigned = set(partitions)
        revoked = [tp for tp in self._owned if tp not in assigned]
        if revoked:
            # The leader gives them to their new owners in the round this rejoin starts (asked
            # for first, so that a failing on_revoke cannot leave the group without it).
            group.rejoin_needed = True
            yield from self._give_up_steps(revoked, timeout_s, commit=True)
        held = set(self._owned)
        added = [tp for tp in partitions if tp not in held]
        self._hold(self._owned + added, committed, added)

    async def _join_and_fetch(
        self, group: ConsumerCoordinator, owned: list[TopicPartition] | None = None
    ) -> tuple[list[TopicPartition], dict[TopicPartition, OffsetAndMetadata | None]]:
        # Joining waits for the whole group (up to the rebalance timeout); a poll that ends
        # sooner leaves it running and the next poll picks it up.
        deadline = time.monotonic() + max(
            self.default_timeout_s, self.config.max_poll_interval_ms / 1000
        )
        held = owned or []
        partitions = await group.join(deadline, held)
        # Partitions the member kept go on from where it is.
        added = [tp for tp in partitions if tp not in set(held)]
        while True:
            try:
                return partitions, await group.fetch_committed(added, deadline)
            except ClientTimeoutError as error:
                if group.rejoin_needed:
                    raise
                # The group is fine, its offsets are not ready (UNSTABLE_OFFSET_COMMIT while
                # a transaction's offsets are pending, a slow coordinator): keep the
                # assignment and ask again, as Kafka's consumer does on every poll.
                _log.info("committed offsets of group %s: %s; asking again", group.group_id, error)
                deadline = time.monotonic() + self.default_timeout_s
            except BaseException:
                # Without positions the assignment cannot be used; join again next poll.
                group.rejoin_needed = True
                raise

    def _rebalance_steps(self, deadline: float) -> Steps[bool]:
        group = self.group
        assert group is not None
        yield from self._revoke_steps(self.default_timeout_s)
        if self._join is None:
            self._join = self._submit(self._join_and_fetch(group))
        join = self._join
        if not (yield from self._wait_steps(join, deadline)):
            return False
        self._join = None
        error = join.exception()
        if isinstance(error, ClientTimeoutError):
            _log.info("joining group %s is taking long: %s", group.group_id, error)
            return False
        if error is not None:
            raise error
        partitions, committed = join.result()
        self._hold(partitions, committed, partitions)
        return True

    def _hold(
        self,
        partitions: list[TopicPartition],
        committed: Mapping[TopicPartition, OffsetAndMetadata | None],
        added: list[TopicPartition],
    ) -> None:
        """Hold ``partitions``, positioning those in ``committed`` at their committed offsets,
        and tell on_assign about ``added``."""
        self.subscriptions.assign(partitions)
        with self.subscriptions.lock:
            for tp, found in committed.items():
                if found is not None:
                    self.subscriptions.state(tp).seek(found.offset, None)
        self._owned = list(partitions)
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        self._changed()
        if self._on_assign is not None:
            self._on_assign(list(added))

    def _maybe_auto_commit(self) -> None:
        if not self.config.enable_auto_commit or self.group is None:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        offsets = self._positions()
        if offsets:
            self._log_failure(self.commit_future(offsets, self.default_timeout_s), "auto-commit")

    @staticmethod
    def _log_failure(future: concurrent.futures.Future[None], what: str) -> None:
        def report(done: concurrent.futures.Future[None]) -> None:
            if not done.cancelled() and done.exception() is not None:
                _log.warning("%s failed: %s", what, done.exception())

        future.add_done_callback(report)

    def commit_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        self._group("commit")
        if offsets is None:
            if self.subscribed and self._owned is None:
                return {}
            return self._positions()
        return offsets_to_commit(offsets)

    def commit_future(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_s: float
    ) -> concurrent.futures.Future[None]:
        group = self._group("commit")
        return self._submit(
            group.commit(offsets, time.monotonic() + timeout_s, group_managed=self.subscribed)
        )

    def committed_future(
        self, partitions: Iterable[TopicPartition], timeout_s: float
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata | None]]:
        group = self._group("committed")
        wanted = [_topic_partition(tp) for tp in partitions]
        return self._submit(group.fetch_committed(wanted, time.monotonic() + timeout_s))

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._group("group_metadata").metadata()

    def leave_steps(self, timeout_s: float) -> Steps[None]:
        """unsubscribe / close: revoke (committing with auto-commit), then leave the group."""
        group = self.group
        if not self.subscribed or group is None:
            return
        join, self._join = self._join, None
        if join is not None:
            join.cancel()
        if group.fatal_error is None:
            yield from self._revoke_steps(timeout_s)
        self._owned = None
        self.subscribed = False
        self.subscriptions.assign([])
        future = self._submit(group.leave("the consumer unsubscribed or closed"))
        yield from self._wait_steps(future, time.monotonic() + timeout_s + CLOSE_MARGIN_S)
        self._changed()

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
        for future in list(self._pending):
            future.cancel()
        await self.stop()


class Consumer(Closing):
    """A blocking consumer: manual partition assignment (``assign``) or a consumer group
    (``subscribe`` with ``group.id``).

    Settings: a dict of Kafka consumer settings and/or keyword arguments
    (``auto_offset_reset="earliest"``), see ``brook.client.config``. Timeouts are in seconds;
    None means ``default.api.timeout.ms``.
    """

    def __init__(self, settings: ClientSettings | None = None, **kwargs: object) -> None:
        self.config = consumer_config(settings, **kwargs)
        name = self.config.client_id or f"consumer-{next(_instances)}"
        self._thread, self._core = start_on_thread(
            f"brook-{name}", lambda loop: _ConsumerCore(self.config, loop)
        )

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
            self._core.offsets_for_times(timestamps, timeout_s), timeout_s + CLOSE_MARGIN_S
        )

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return self._edge_offsets(partitions, storage_pb2.OFFSET_SPEC_EARLIEST, timeout)

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The high watermark (the offset the next record will get) of each partition."""
        return self._edge_offsets(partitions, storage_pb2.OFFSET_SPEC_LATEST, timeout)

    def _edge_offsets(
        self, partitions: Iterable[TopicPartition], spec: int, timeout: float | None
    ) -> dict[TopicPartition, int]:
        timeout_s = self._timeout_s(timeout)
        return self._thread.run(
            self._core.edge_offsets(partitions, spec, timeout_s), timeout_s + CLOSE_MARGIN_S
        )

    def poll(self, timeout: float) -> list[ConsumerRecord]:
        """Up to max.poll.records records, waiting up to ``timeout`` seconds for some.

        When subscribed, poll also takes part in rebalances (see the module docstring) and
        raises FencedInstanceIdError once another consumer took this one's group.instance.id.
        """
        core = self._core
        return drive(core.poll_steps(timeout), core.notifier)

    # -- consumer groups --------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """Consume ``topics`` as a member of group ``group.id``: the group shares their
        partitions among its members. ``on_assign``/``on_revoke`` are called from ``poll``
        with the partitions given to / taken from this consumer. Replaces an earlier
        subscription (a changed topic list rebalances the group)."""
        self._core.subscribe(topics, on_assign, on_revoke)

    def unsubscribe(self) -> None:
        """Give up the partitions (committing them with auto-commit, calling on_revoke) and
        leave the group; the consumer can then assign() or subscribe() again."""
        core = self._core
        core._check_open()
        drive(core.leave_steps(core.default_timeout_s), core.notifier)

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        asynchronous: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition, i.e. the
        next record poll would return) for group ``group.id``.

        A committed offset is the next offset to read, as in Kafka. Returns once the
        coordinator acknowledged the commit; raises CommitFailedError when the group
        rebalanced since the partitions were assigned. ``asynchronous=True`` returns at once
        (a failure is logged; use commit_async to see it)."""
        if asynchronous:
            self.commit_async(offsets)
            return
        core = self._core
        chosen = core.commit_offsets(offsets)
        if not chosen:
            return
        timeout_s = self._timeout_s(timeout)
        future = core.commit_future(chosen, timeout_s)
        _result(future, timeout_s)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> concurrent.futures.Future[None]:
        """Start a commit and return its future (done when the coordinator acknowledged)."""
        core = self._core
        chosen = core.commit_offsets(offsets)
        future = core.commit_future(chosen, core.default_timeout_s)
        core._log_failure(future, "asynchronous commit")
        return future

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None where nothing is committed)."""
        timeout_s = self._timeout_s(timeout)
        return _result(self._core.committed_future(partitions, timeout_s), timeout_s)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group id, generation, member id and group.instance.id."""
        return self._core.group_metadata()

    def close(self) -> None:
        """Leave the group (committing first with auto-commit; a static member stays until
        its session expires), stop fetching and release the I/O thread and connections.
        Idempotent."""
        core = self._core
        if core.closed:
            return
        try:
            drive(core.leave_steps(core.default_timeout_s), core.notifier)
        except Exception as error:  # closing must release the thread whatever happened
            _log.warning("leaving the group on close failed: %s", error)
        core.closed = True
        try:
            self._thread.run(core.close(), CLOSE_MARGIN_S)
        finally:
            self._thread.stop()


def _result(future: concurrent.futures.Future[_T], timeout_s: float) -> _T:
    try:
        return future.result(timeout_s + CLOSE_MARGIN_S)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise ClientTimeoutError(f"operation did not finish within {timeout_s} s") from None


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

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: PartitionsCallback | None = None,
        on_revoke: PartitionsCallback | None = None,
    ) -> None:
        """As Consumer.subscribe; the callbacks run inside ``await poll()``."""
        self._started().subscribe(topics, on_assign, on_revoke)

    async def unsubscribe(self) -> None:
        core = self._started()
        core._check_open()
        await drive_async(core.leave_steps(core.default_timeout_s), core.notifier)

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        asynchronous: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> None:
        """As Consumer.commit."""
        if asynchronous:
            self.commit_async(offsets)
            return
        core = self._started()
        chosen = core.commit_offsets(offsets)
        if chosen:
            await asyncio.wrap_future(core.commit_future(chosen, self._timeout_s(timeout)))

    def commit_async(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> asyncio.Future[None]:
        core = self._started()
        future = core.commit_future(core.commit_offsets(offsets), core.default_timeout_s)
        core._log_failure(future, "asynchronous commit")
        return asyncio.wrap_future(future)

    async def committed(
        self,
        partitions: Iterable[TopicPartition],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        core = self._started()
        return await asyncio.wrap_future(
            core.committed_future(partitions, self._timeout_s(timeout))
        )

    def group_metadata(self) -> ConsumerGroupMetadata:
        return self._started().group_metadata()

    async def close(self) -> None:
        core = self._core
        if core is not None and not core.closed:
            try:
                await drive_async(core.leave_steps(core.default_timeout_s), core.notifier)
            except Exception as error:  # closing must release the connections regardless
                _log.warning("leaving the group on close failed: %s", error)
            await core.close()
