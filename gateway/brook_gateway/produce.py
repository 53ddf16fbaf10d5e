"""Produce: the requests' partitions forwarded to their leader storage nodes (fan_out.py), the
record batches passed through as bytes.

Produce requests are merged on their way to a storage node (ProduceCoalescer), whatever their
acks: a client such as librdkafka pipelines many small requests, each with a batch or two, and
a gRPC call costs the gateway and the node far more than the bytes it carries (bench/README.md,
gateway section). With one call in flight per connection and node, an acks=all call lasts a
replication round and the next carries everything the client sent meanwhile: group commit.

A Kafka broker serves a connection's requests one at a time, so when a partition's leadership
moves away, every request the client pipelined to it fails alike. The gateway serves them
concurrently and routes each by the metadata of the moment, so ProduceAffinity keeps that
behaviour: a connection's requests for a partition follow its earlier ones while those are in
flight, and after one fails unappended, the ones the client had already sent fail alike.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace

from brook.errors import NOT_APPENDED_RETRIABLE, ErrorCode, error_code
from brook.record.errors import RecordError
from brook.record.legacy import message_set_to_batch
from brook.record.sequence import first_batch_sequence, is_ahead
from brook.security.authorizer import WRITE
from brook.v1 import storage_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import Authorization, topic_items, transactional_id_write
from brook_gateway.backend import Backend
from brook_gateway.fan_out import Part, current_leader, fan_out, leader_endpoints
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = [
    "REFUSAL_HOLD_MS",
    "ProduceAffinity",
    "ProduceCoalescer",
    "produce_handler",
]

_log = logging.getLogger(__name__)

_ACKS: Final = {
    0: storage_pb2.ACKS_NONE,
    1: storage_pb2.ACKS_LEADER,
    -1: storage_pb2.ACKS_ALL,
}
# Produce v0-2 carry the old MessageSet formats (v0/v1), which Brook does not store: the
# gateway converts them to RecordBatch v2 (brook.record.legacy), as Kafka 3.x does.
PRODUCE_SERVED_MIN: Final = 0
_PRODUCE_RECORD_BATCH_MIN: Final = 3
# Records bytes one merged Produce call carries at most (a single larger request goes alone):
# far below the node's queued.max.request.bytes and socket.request.max.bytes, so merging never
# makes a call the node would refuse that its parts would not have been refused alone.
PRODUCE_MERGED_BYTES_MAX: Final = 1024 * 1024

ProduceResponses = Sequence[storage_pb2.PartitionProduceResponse]
SendProduce = Callable[[str, storage_pb2.Acks, int, str, list[Part]], Awaitable[ProduceResponses]]
"""(address, acks, timeout_ms, transactional_id, parts) -> one Produce call's responses, in the
order of parts."""
# A lane: (connection, node address, acks, timeout_ms, transactional id).
_LaneKey = tuple[str, str, storage_pb2.Acks, int, str]


@dataclass(slots=True, eq=False)
class _Waiting:
    parts: list[Part]
    size_bytes: int
    done: asyncio.Future[ProduceResponses]
    """Its responses once the call that carried it returned (cancelled: nobody waits)."""
    span: trace.Span
    """The request's span: a call is traced as its first request's child (when recorded)."""


@dataclass(slots=True, eq=False)
class _Lane:
    """The Produce requests of one client connection to one storage node (with one acks,
    timeout and transactional id): at most one call in flight, the requests arriving meanwhile
    wait in order."""

    waiting: deque[_Waiting] = field(default_factory=deque)
    call: asyncio.Task[None] | None = None


class ProduceCoalescer:
    """Merges the Produce requests a client pipelines to one storage node into fewer calls.

    A request takes its place in its lane synchronously (`enqueue`, in the connection's arrival
    order, before any await), and waits for the future it gets. The lane's calls are tasks of
    their own: each carries the oldest waiting requests in arrival order, up to
    ``merged_bytes_max`` of records, and when it returns the next one starts with whatever
    waits. A partition may appear in a call many times: the node appends a call's entries in
    the order they appear, each answered on its own. No request waits for company: an idle lane
    starts a call at once. One call in flight per lane keeps each partition's batches in the
    order the client sent them, as Kafka's one-request-at-a-time connections do.

    The node answers a call's partitions in the order they were sent; each request gets its
    slice. A failed call fails every request it carried with the same error. A request that
    stops waiting (its deadline, its connection closed) takes nothing down with it: the call
    goes on for the others.
    """

    def __init__(self, send: SendProduce, merged_bytes_max: int) -> None:
        if merged_bytes_max < 1:
            raise ValueError(f"merged_bytes_max must be at least 1, not {merged_bytes_max}")
        self._send = send
        self._merged_bytes_max = merged_bytes_max
        self._lanes: dict[_LaneKey, _Lane] = {}

    @property
    def lanes(self) -> int:
        """Lanes with a call in flight (idle lanes are dropped)."""
        return len(self._lanes)

    def enqueue(
        self,
        connection: str,
        address: str,
        acks: storage_pb2.Acks,
        timeout_ms: int,
        parts: list[Part],
        transactional_id: str = "",
    ) -> asyncio.Future[ProduceResponses]:
        """Takes the request's place in its lane; the future holds the node's responses to
        `parts`, in their order, or UpstreamError if the call that carried them got no answer.
        ``transactional_id``: the Kafka request's (a lane's calls carry one). Call in arrival
        order: the place is taken here, not when the future is awaited."""
        key = (connection, address, acks, timeout_ms, transactional_id)
        loop = asyncio.get_running_loop()
        me = _Waiting(
            parts,
            sum(len(records or b"") for _, _, records in parts),
            loop.create_future(),
            trace.get_current_span(),
        )
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.waiting.append(me)
        if lane.call is None or lane.call.done():
            # A context of its own: its calls take their first request's span, never the
            # one of whichever request opened the lane.
            call = lane.call = loop.create_task(self._run(key, lane), context=contextvars.Context())
            call.add_done_callback(functools.partial(self._ended, key, lane))
        return me.done

    async def close(self) -> None:
        """Cancels the lanes' calls (the gateway is stopping); their requests fail."""
        calls = [lane.call for lane in self._lanes.values() if lane.call is not None]
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)

    async def _run(self, key: _LaneKey, lane: _Lane) -> None:
        """The lane's calls, one at a time, while requests wait; each traced as its first
        request's (the task started from an empty context, so attaching here touches no
        other). Whatever ends a call, the requests it carried are answered or failed."""
        while carried := self._take(lane):
            try:
                span = carried[0].span
                if not span.is_recording():
                    await self._call(key, carried)
                    continue
                token = otel_context.attach(trace.set_span_in_context(span))
                try:
                    await self._call(key, carried)
                finally:
                    otel_context.detach(token)
            except Exception as e:
                _fail(carried, _lane_failure(e))
                raise
            except BaseException:
                _fail(carried, _call_cancelled())
                raise

    def _ended(self, key: _LaneKey, lane: _Lane, call: asyncio.Task[None]) -> None:
        """A lane's task ended: the lane is dropped if nothing waits in it. One that ended
        otherwise than by running out of requests (cancelled, even before its first step, or
        failed) fails the requests left waiting, unless a new task has taken the lane over."""
        error = None if call.cancelled() else call.exception()
        if error is not None:
            _log.error("a Produce lane failed", exc_info=error)
        if lane.call is not call:
            return
        lane.call = None
        if error is None and not call.cancelled() and not lane.waiting:
            if self._lanes.get(key) is lane:
                del self._lanes[key]
            return
        _fail(
            list(lane.waiting),
            _lane_failure(error)
            if error is not None
            else UpstreamError(ErrorCode.REQUEST_TIMED_OUT, "the gateway is stopping"),
        )
        lane.waiting.clear()
        if self._lanes.get(key) is lane:
            del self._lanes[key]

    async def _call(self, key: _LaneKey, carried: list[_Waiting]) -> None:
        _, address, acks, timeout_ms, transactional_id = key
        try:
            responses = await self._send(
                address,
                acks,
                timeout_ms,
                transactional_id,
                [part for w in carried for part in w.parts],
            )
        except Exception as e:
            _fail(carried, e)
            return
        expected = sum(len(w.parts) for w in carried)
        if len(responses) != expected:
            _fail(
                carried,
                UpstreamError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"the storage node answered {len(responses)} partitions of {expected}",
                ),
            )
            return
        start = 0
        for waiting in carried:
            end = start + len(waiting.parts)
            if not waiting.done.done():
                waiting.done.set_result(responses[start:end])
            start = end

    def _take(self, lane: _Lane) -> list[_Waiting]:
        """Removes from the lane the requests the next call carries: the oldest still waited
        for, as many as fit in merged_bytes_max (the first whatever its size)."""
        taken: list[_Waiting] = []
        size_bytes = 0
        waiting = lane.waiting
        while waiting:
            head = waiting[0]
            if head.done.done():
                waiting.popleft()  # nobody waits for its answer any more: not sent
                continue
            if taken and size_bytes + head.size_bytes > self._merged_bytes_max:
                break
            waiting.popleft()
            taken.append(head)
            size_bytes += head.size_bytes
        return taken


def _call_cancelled() -> UpstreamError:
    # A new one each time: an exception raised in many tasks gathers their tracebacks.
    return UpstreamError(
        ErrorCode.REQUEST_TIMED_OUT, "the Produce call carrying this request was cancelled"
    )


def _lane_failure(error: BaseException) -> UpstreamError:
    """What the requests of a lane whose task failed unexpectedly are told (a bug: logged)."""
    if isinstance(error, UpstreamError):
        return error
    return UpstreamError(ErrorCode.UNKNOWN_SERVER_ERROR, f"the Produce call failed: {error!r}")


def _fail(carried: list[_Waiting], error: BaseException) -> None:
    """Every request still waiting for the call that carried it gets ``error``."""
    for waiting in carried:
        if not waiting.done.done():
            waiting.done.set_exception(error)


# Of those, the ones after which every Kafka client refreshes its metadata before retrying: a
# batch without producer id (no sequence to recognise its retry by) is refused only after
# these, until that refresh.
_LEADERSHIP: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
# How long a refusal holds for the requests a client pipelined behind the refused one, and a
# pin to a node the metadata no longer names as leader. Pipelined requests arrive within a
# round trip; the client's own retry comes after a metadata refresh and its retry back-off,
# and is told apart by its sequence number (idempotent batches) or by that refresh (others).
# The bound keeps a client that gives up on a batch, or a hung node, from holding others up.
REFUSAL_HOLD_MS: Final = 1000
# Refusals kept at most: a bound on memory whatever the load.
REFUSALS_MAX: Final = 100_000


@dataclass(slots=True)
class _Pin:
    address: str
    calls: int = 0
    # When the metadata was first seen naming another leader (None: it names this one).
    moved_s: float | None = None


@dataclass(slots=True)
class _Refusal:
    code: ErrorCode
    message: str
    # (producer id, epoch, base sequence) of the refused batch; None when not idempotent.
    sequence: tuple[int, int, int] | None
    until_s: float


def _follows(batch: tuple[int, int, int], refused: tuple[int, int, int]) -> bool:
    """Whether ``batch`` starts after the ``refused`` one in the same producer epoch: one
    pipelined behind it, not the client's retry of it."""
    return batch[:2] == refused[:2] and is_ahead(batch[2], refused[2])


class ProduceAffinity:
    """Per connection and partition, what makes pipelined Produce requests fail or succeed as
    they would on a Kafka broker that serves them one at a time.

    - Pinning: while a connection has a request in flight to a node for a partition, its
      later requests for that partition go to that node too, even if the metadata has moved
      the leadership meanwhile: the node answers them in arrival order, so if it refuses the
      first (NOT_LEADER_OR_FOLLOWER) it refuses the rest alike. Routed by the new metadata,
      a later request reached the new leader first and was refused as a sequence gap
      (OUT_OF_ORDER_SEQUENCE_NUMBER), on which librdkafka bumps its producer epoch and sends
      its unacknowledged batches again under new sequence numbers — duplicating any whose
      append had happened but whose answer was lost (found by the nemesis, issue #13). A pin
      is dropped REFUSAL_HOLD_MS after the metadata names another leader, so a hung node does
      not hold a busy connection's partition for a whole request timeout.
    - Refusal: once a batch is refused unappended (``NOT_APPENDED_RETRIABLE``), the
      connection's next requests for the partition whose batches follow it are refused with
      the same error without being sent, until the client sends that batch again (an
      idempotent batch at or before the refused sequence, or of another producer epoch),
      refreshes its metadata (batches without producer id, refused only after a leadership
      error), or REFUSAL_HOLD_MS passes. Not for acks=0, whose client never hears of a refusal.

    Bookkeeping never raises and costs a dict look-up per partition when nothing is refused.
    """

    def __init__(
        self,
        clock_s: Callable[[], float] = time.monotonic,
        hold_ms: int = REFUSAL_HOLD_MS,
        refusals_max: int = REFUSALS_MAX,
    ) -> None:
        assert hold_ms > 0 and refusals_max > 0, (hold_ms, refusals_max)
        self._clock_s = clock_s
        self._hold_s = hold_ms / 1000
        self._refusals_max = refusals_max
        self._pins: dict[tuple[str, str, int], _Pin] = {}
        # In insertion order, which is expiry order (every refusal holds as long).
        self._refusals: dict[tuple[str, str, int], _Refusal] = {}
        self._by_peer: dict[str, set[tuple[str, str, int]]] = {}

    @property
    def pins(self) -> int:
        return len(self._pins)

    @property
    def refusals(self) -> int:
        return len(self._refusals)

    def pinned(self, peer: str, topic: str, partition: int, leader: str | None) -> str | None:
        """Where ``topic``-``partition`` goes for ``peer`` instead of the metadata's
        ``leader`` address, if anywhere."""
        pin = self._pins.get((peer, topic, partition))
        if pin is None:
            return None
        if pin.address == leader:
            pin.moved_s = None
            return None
        now_s = self._clock_s()
        if pin.moved_s is None:
            pin.moved_s = now_s
        elif now_s - pin.moved_s > self._hold_s:
            return None
        return pin.address

    def enter(self, peer: str, address: str, parts: Sequence[Part]) -> None:
        """``parts`` are on their way to ``address`` (call ``leave`` when answered)."""
        for topic, partition, _ in parts:
            key = (peer, topic, partition)
            pin = self._pins.get(key)
            if pin is None or pin.address != address:
                pin = self._pins[key] = _Pin(address, pin.calls if pin is not None else 0)
            pin.calls += 1

    def leave(self, peer: str, parts: Sequence[Part]) -> None:
        for topic, partition, _ in parts:
            key = (peer, topic, partition)
            pin = self._pins.get(key)
            if pin is not None:
                pin.calls -= 1
                if pin.calls <= 0:
                    del self._pins[key]

    def refusal(self, peer: str, part: Part) -> _Refusal | None:
        """The refusal ``part`` gets without being sent, if an earlier one holds."""
        if not self._refusals:
            return None
        self._drop_expired()
        key = (peer, part[0], part[1])
        refusal = self._refusals.get(key)
        if refusal is None:
            return None
        if refusal.sequence is not None:
            sequence = first_batch_sequence(part[2])
            if sequence is None or not _follows(sequence, refusal.sequence):
                # The client's retry of the refused batch (or another epoch): it goes on.
                self._forget(key)
                return None
        return refusal

    def refused(self, peer: str, part: Part, code: ErrorCode, message: str) -> None:
        """``part`` was answered ``code``: remember it if it was refused unappended."""
        if code not in NOT_APPENDED_RETRIABLE:
            return
        key = (peer, part[0], part[1])
        if key in self._refusals:
            return  # the first refusal's sequence is the one the client must send again
        sequence = first_batch_sequence(part[2])
        if sequence is None and code not in _LEADERSHIP:
            return
        self._drop_expired()
        if len(self._refusals) >= self._refusals_max:
            return  # overloaded: no refusal is better than unbounded memory
        self._refusals[key] = _Refusal(code, message, sequence, self._clock_s() + self._hold_s)
        self._by_peer.setdefault(peer, set()).add(key)

    def refreshed(self, peer: str) -> None:
        """The connection asked for metadata: its refusals of batches without a producer id
        end (the client has heard of the refusal, or will retry after this refresh)."""
        keys = self._by_peer.get(peer)
        if keys:
            for key in [k for k in keys if self._refusals[k].sequence is None]:
                self._forget(key)

    def _forget(self, key: tuple[str, str, int]) -> None:
        del self._refusals[key]
        keys = self._by_peer[key[0]]
        keys.discard(key)
        if not keys:
            del self._by_peer[key[0]]

    def _drop_expired(self) -> None:
        now_s = self._clock_s()
        while self._refusals:
            key, oldest = next(iter(self._refusals.items()))
            if oldest.until_s >= now_s:
                return
            self._forget(key)


def _produce_error(request: Message, context: RequestContext, code: int) -> Message:
    del context
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    {"index": p["index"], "error_code": code, "base_offset": -1}
                    for p in t["partition_data"]
                ],
            }
            for t in request["topic_data"]
        ]
    }


# A MessageSet larger than this is converted off the event loop (decompressing and re-encoding
# a large set would hold up every connection of the gateway).
_CONVERT_INLINE_BYTES_MAX: Final = 64 * 1024


async def _converted(backend: Backend, message_set: bytes) -> bytes:
    """A Produce v0-2 MessageSet as one RecordBatch v2 (brook/record/legacy.py), its records
    decompressing to at most socket.request.max.bytes in all: no bigger than a request the
    gateway accepts could carry uncompressed."""
    limit = backend.upstreams.message_bytes_max
    if len(message_set) <= _CONVERT_INLINE_BYTES_MAX:
        return message_set_to_batch(message_set, max_decompressed_bytes=limit)
    return await asyncio.to_thread(
        functools.partial(message_set_to_batch, message_set, max_decompressed_bytes=limit)
    )


async def _send_produce(
    backend: Backend,
    address: str,
    acks: storage_pb2.Acks,
    timeout_ms: int,
    transactional_id: str,
    parts: list[Part],
) -> ProduceResponses:
    """One Produce call to the storage node at ``address`` (a SendProduce, given the backend);
    ``transactional_id`` the Kafka request's, which the node verifies transactional batches
    with."""
    response = await backend.upstreams.call(
        backend.upstreams.storage(address).Produce,
        storage_pb2.ProduceRequest(
            acks=acks,
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
            partitions=[
                storage_pb2.PartitionProduceData(topic=t, partition=p, records=r or b"")
                for t, p, r in parts
            ],
        ),
    )
    partitions: ProduceResponses = response.partitions
    return partitions


@dataclass(frozen=True, slots=True, eq=False)
class _ProduceHandler:
    """The Produce machinery every request of the gateway shares: the cluster, the
    connections' pins and refusals and the merging of their calls. Each request is served by a
    _ProduceRequest of its own."""

    backend: Backend
    affinity: ProduceAffinity
    coalescer: ProduceCoalescer

    async def handle(self, request: Message, context: RequestContext) -> Message | None:
        acks = _ACKS.get(request["acks"])
        if acks is None:
            return _produce_error(request, context, int(ErrorCode.INVALID_REQUIRED_ACKS))
        return await _ProduceRequest(self, request, context, acks).answer()


@dataclass(slots=True, eq=False)
class _ProduceRequest:
    """One Produce request: its partitions converted, checked against the connection's
    refusals, sent to their leaders and answered (None for acks=0, which has no response)."""

    handler: _ProduceHandler
    request: Message
    context: RequestContext
    acks: storage_pb2.Acks
    results: dict[tuple[str, int], Message] = field(default_factory=dict)
    """Each partition's answer, by (topic, partition); a partition left out was not answered."""
    leaders: set[int] = field(default_factory=set)
    """The node ids named in the answers' current_leader hints (KIP-951 node_endpoints)."""
    calls: dict[str, asyncio.Future[ProduceResponses]] = field(default_factory=dict)
    """By node address, the answers of the lane this request's partitions joined there."""

    @property
    def tracked(self) -> bool:
        # acks=0: the client never hears of a refusal, so none holds for it.
        return bool(self.request["acks"] != 0)

    async def answer(self) -> Message | None:
        parts = await self._parts()
        pins = (self.handler.affinity, self.context.peer)
        try:
            await fan_out(
                self.handler.backend, parts, self._call, self._fail, pins, planned=self._enqueue
            )
        finally:
            for future in self.calls.values():
                if not future.done():
                    # The request was cancelled (before or while it waited): its batches are
                    # not sent if not sent already.
                    future.cancel()
                elif not future.cancelled():
                    future.exception()  # retrieved (its failure is answered, or moot)
        if self.request["acks"] == 0:
            return None
        return self._response()

    async def _parts(self) -> list[Part]:
        """The partitions to send: MessageSets (v0-2) converted to RecordBatches, and those
        the connection's earlier refusals hold answered here instead. A partition named twice
        in one request is INVALID_REQUEST, both times, and not sent (a Kafka broker keeps one
        batch per partition of a request; which one is not for a client to guess)."""
        affinity = self.handler.affinity
        named = Counter(
            (t["name"], p["index"]) for t in self.request["topic_data"] for p in t["partition_data"]
        )
        parts = []
        for t in self.request["topic_data"]:
            for p in t["partition_data"]:
                part = (t["name"], p["index"], p["records"])
                if named[(part[0], part[1])] > 1:
                    self._fail(
                        part,
                        ErrorCode.INVALID_REQUEST,
                        f"{part[0]}-{part[1]} appears {named[(part[0], part[1])]} times in one "
                        "Produce request; send each partition once",
                    )
                    continue
                if self.context.api_version < _PRODUCE_RECORD_BATCH_MIN:
                    try:
                        records = await _converted(self.handler.backend, p["records"] or b"")
                    except RecordError as e:
                        self._fail(part, error_code(e.error_code), f"message set: {e}")
                        continue
                    part = (part[0], part[1], records)
                refusal = affinity.refusal(self.context.peer, part) if self.tracked else None
                if refusal is None:
                    parts.append(part)
                else:
                    self._fail(
                        part,
                        refusal.code,
                        "a batch sent before this one on the connection was refused "
                        f"({refusal.message}); refresh the metadata and send both again",
                    )
        return parts

    def _fail(self, part: Part, code: ErrorCode, message: str) -> None:
        if self.tracked:
            self.handler.affinity.refused(self.context.peer, part, code, message)
        self.results[(part[0], part[1])] = {
            "index": part[1],
            "error_code": int(code),
            "base_offset": -1,
            "log_append_time_ms": -1,
            "log_start_offset": -1,
            "error_message": message or None,
        }

    def _enqueue(self, by_address: Mapping[str, list[Part]]) -> None:
        """Joins the lane of every node the request goes to, at once: before any await, so
        that the connection's requests take their places in every lane in the order they
        arrived (a request reaching two nodes must not let a later one overtake it at
        either)."""
        timeout_ms = max(self.request["timeout_ms"], 0)
        # Transactional producers use acks=all (Kafka's clients require it); the node verifies
        # their batches with the transactional id, so a lane's calls carry the one of its
        # requests.
        transactional_id = self.request.get("transactional_id") or ""
        for address, items in by_address.items():
            self.calls[address] = self.handler.coalescer.enqueue(
                self.context.peer, address, self.acks, timeout_ms, items, transactional_id
            )

    async def _call(self, address: str, items: list[Part]) -> None:
        handler = self.handler
        peer = self.context.peer
        responses = await self.calls[address]
        by_key = {(t, p): (t, p, r) for t, p, r in items}
        for r in responses:
            if r.error_code and self.tracked:
                answered = by_key.get((r.topic, r.partition))
                if answered is not None:
                    code = error_code(int(r.error_code))
                    handler.affinity.refused(peer, answered, code, r.error_message)
            self.results[(r.topic, r.partition)] = self._answer(r)

    def _answer(self, r: storage_pb2.PartitionProduceResponse) -> Message:
        answer: Message = {
            "index": r.partition,
            "error_code": int(r.error_code),
            "base_offset": r.base_offset,
            "log_append_time_ms": r.log_append_time_ms,
            "log_start_offset": r.log_start_offset,
            "record_errors": [
                {"batch_index": e.index, "batch_index_error_message": e.message or None}
                for e in r.batch_errors
            ],
            "error_message": r.error_message or None,
        }
        leader = current_leader(self.handler.backend.image, r)
        if leader is not None:
            answer["current_leader"] = leader
            self.leaders.add(leader["leader_id"])
        return answer

    def _response(self) -> Message:
        return {
            "responses": [
                {
                    "name": t["name"],
                    "partition_responses": [
                        self.results.get(
                            (t["name"], p["index"]),
                            {
                                "index": p["index"],
                                "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                            },
                        )
                        for p in t["partition_data"]
                    ],
                }
                for t in self.request["topic_data"]
            ],
            "throttle_time_ms": 0,
            "node_endpoints": leader_endpoints(
                self.handler.backend.image, self.leaders, self.context.listener
            ),
        }


def produce_handler(backend: Backend, affinity: ProduceAffinity) -> ApiHandler:
    send: SendProduce = functools.partial(_send_produce, backend)
    coalescer = ProduceCoalescer(send, PRODUCE_MERGED_BYTES_MAX)
    handler = _ProduceHandler(backend, affinity, coalescer)
    return ApiHandler(
        ApiKey.PRODUCE,
        handler.handle,
        versions=(PRODUCE_SERVED_MIN, 10),
        authorization=Authorization(
            "WRITE on each topic, and on the transactional id of a transactional produce",
            request=transactional_id_write(),
            items=(topic_items("topic_data", "responses", WRITE, serve_empty=True),),
        ),
        error_response=_produce_error,
        close=coalescer.close,
    )
