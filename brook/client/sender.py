"""The producer's I/O: drains ready batches into produce requests and settles their outcome.

One task on the client's loop. Each pass it expires batches past ``delivery.timeout.ms``,
drains the ready batches into one request per leader node (up to
``max.in.flight.requests.per.connection`` requests per node), and sleeps until a batch fills
up, a linger timer or a retry back-off ends, or a request finishes. Each request is a task of
its own; its answer completes, retries or fails every batch it carried.

An idempotent producer first gets a producer id (InitProducerId, from any storage node) and,
when an answer calls for it, bumps its epoch the same way once nothing is in flight; its
batches' answers are judged by brook.client.idempotence. A transactional producer gets its id
from its transaction coordinator instead (brook.client.transactions): each pass lets the
transaction manager add the partitions that have new batches to the transaction, and an
answer that would bump the epoch fails the batch and the transaction instead (the abort bumps).
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from brook.client.accumulator import (
    DrainedRequest,
    PartitionQueue,
    ProducerBatch,
    RecordAccumulator,
)
from brook.client.config import ProducerConfig
from brook.client.errors import (
    ApiError,
    BrookClientError,
    ClientClosedError,
    ClientTimeoutError,
    api_error,
)
from brook.client.idempotence import FENCING_CODES, Verdict, verdict
from brook.client.metadata import Metadata
from brook.client.runtime import Wakeup
from brook.client.transactions import TransactionManager
from brook.errors import ErrorCode, error_code
from brook.rpc.backoff import backoff_s
from brook.rpc.channels import ChannelPool, client_id_metadata
from brook.rpc.errors import rpc_error
from brook.v1 import storage_pb2

__all__ = ["METADATA_REFRESH_CODES", "Sender"]

_log = logging.getLogger(__name__)

# Errors after which the client's idea of who leads a partition is probably stale.
METADATA_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


# The node refused a batch as too large and wrote none of it: a batch of several records is
# split and sent again (Kafka's Sender does the same on MESSAGE_TOO_LARGE).
SPLIT_CODES = frozenset({ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE})


class Sender:
    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        metadata: Metadata,
        network: ChannelPool,
        wakeup: Wakeup,
        transactions: TransactionManager | None = None,
    ) -> None:
        self._config = config
        self._transactions = transactions
        self._accumulator = accumulator
        self._metadata = metadata
        self._network = network
        self._wakeup = wakeup
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._call_metadata = client_id_metadata(config.client_id)
        # The node's own bound on waiting for replication: a tenth short of ours, so that
        # its REQUEST_TIMED_OUT answer arrives before our deadline cuts the call off.
        self._replication_timeout_ms = max(config.request_timeout_ms * 9 // 10, 1)
        self._in_flight: dict[int, int] = {}
        self._requests: set[asyncio.Task[None]] = set()
        self._idempotence = accumulator.idempotence
        self._init_task: asyncio.Task[None] | None = None
        self._init_attempts = 0
        self._init_retry_at = 0.0

    def _slots(self, node_id: int) -> int:
        in_flight = self._in_flight.get(node_id, 0)
        return self._config.max_in_flight_requests_per_connection - in_flight

    async def run(self) -> None:
        while True:
            try:
                timeout_s = self._run_once()
            except Exception:
                # As Kafka's I/O thread: a bug in one pass must not stop every later one.
                _log.exception("the producer's sender failed a pass; retrying")
                timeout_s = self._config.retry_backoff.max_ms / 1000
            await self._wakeup.wait(timeout_s)

    def _run_once(self) -> float | None:
        """Expire, drain and send; returns how long to sleep (None: until woken)."""
        now = time.monotonic()
        next_expiry = self._accumulator.expire(now)
        if self._transactions is None:
            init_due = self._maybe_init_producer_id(now)
        else:
            init_due = self._transactions.poll(now)
        if init_due is not None:
            next_expiry = min(next_expiry, init_due)
        requests, next_ready, unknown_leader = self._accumulator.drain(
            self._metadata.cluster, now, self._slots
        )
        if unknown_leader:
            self._metadata.request_update()
        for request in requests:
            self._in_flight[request.node_id] = self._in_flight.get(request.node_id, 0) + 1
            task = asyncio.create_task(self._send(request))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        due = next_expiry if next_ready is None else min(next_ready, next_expiry)
        return None if due == float("inf") else max(due - time.monotonic(), 0.0)

    def _maybe_init_producer_id(self, now: float) -> float | None:
        """Start InitProducerId when a producer id or a new epoch is needed and there is
        something to send; returns when to look again (None: an answer or a send wakes us)."""
        idempotence = self._idempotence
        if (
            idempotence is None
            or idempotence.disabled
            or idempotence.fatal_error is not None
            or self._init_task is not None
        ):
            return None
        if idempotence.has_producer_id and not idempotence.bump_reason:
            return None
        # A bump waits until every batch sent under the old epoch is settled or known not to
        # be in the log: the new epoch renumbers what is left.
        if idempotence.bump_reason and not self._accumulator.ready_for_epoch_bump():
            return None
        if not self._accumulator.has_queued():
            return None
        if now < self._init_retry_at:
            return self._init_retry_at
        self._init_task = asyncio.create_task(
            self._init_producer_id(), name="brook-producer-init-producer-id"
        )
        self._requests.add(self._init_task)
        self._init_task.add_done_callback(self._requests.discard)
        return None

    async def _init_producer_id(self) -> None:
        idempotence = self._idempotence
        assert idempotence is not None
        bump = idempotence.has_producer_id
        candidates = list(self._metadata.cluster.brokers.values()) or list(
            self._config.bootstrap_servers
        )
        address = candidates[self._init_attempts % len(candidates)]
        request = storage_pb2.InitProducerIdRequest(
            producer_id=idempotence.producer_id, producer_epoch=idempotence.epoch
        )
        try:
            response = await self._network.storage(address).InitProducerId(
                request, timeout=self._request_timeout_s
            )
            code = error_code(response.error_code)
            text = response.error_message or code.name
        except grpc.aio.AioRpcError as rpc_failure:
            code, text = rpc_error(rpc_failure)
            response = None
        except Exception as defect:
            _log.exception("InitProducerId to %s failed unexpectedly", address)
            code, text = ErrorCode.UNKNOWN_SERVER_ERROR, repr(defect)
            response = None
        finally:
            self._init_task = None
            self._wakeup.set()
        text = f"InitProducerId at {address} failed: {text}"
        if code is ErrorCode.NONE and response is not None:
            _log.info(
                "producer id %d epoch %d%s",
                response.producer_id,
                response.producer_epoch,
                f" (epoch bump: {idempotence.bump_reason})" if bump else "",
            )
            self._init_attempts = 0
            self._accumulator.reset_sequences(response.producer_id, response.producer_epoch)
        elif (
            code is ErrorCode.UNSUPPORTED_VERSION
            and not bump
            and not self._config.idempotence_explicit
        ):
            # enable.idempotence was only defaulted: a cluster without producer ids gets
            # the records without deduplication rather than not at all (as Kafka's default
            # gives way to conflicting settings).
            _log.warning("%s; producing without idempotence (enable.idempotence unset)", text)
            self._accumulator.disable_idempotence()
        elif code in FENCING_CODES:
            self._accumulator.abort_queued(idempotence.fence("InitProducerId", code, text))
        elif code.retriable:
            self._init_attempts += 1
            self._init_retry_at = time.monotonic() + backoff_s(
                self._config.retry_backoff, self._init_attempts
            )
            if code in METADATA_REFRESH_CODES:
                self._metadata.request_update()
            _log.debug("%s; retrying", text)
        else:
            fatal = ApiError(
                code,
                f"{text}; the idempotent producer cannot write without a producer id "
                "(set enable.idempotence=false to produce without deduplication)",
            )
            idempotence.fatal_error = fatal
            self._accumulator.abort_queued(fatal)

    async def abort(self) -> None:
        """Cancel every request in flight; their batches fail with ClientClosedError."""
        tasks = list(self._requests)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _send(self, request: DrainedRequest) -> None:
        try:
            await self._exchange(request)
        except asyncio.CancelledError:
            self._fail_pending(
                request,
                ClientClosedError("the producer was closed before the record was acknowledged"),
            )
            raise
        except Exception as error:
            # Not an answer and not a transport error: a defect. Its records fail rather
            # than hang, and their partitions go on.
            _log.exception("produce request to node %d failed unexpectedly", request.node_id)
            self._fail_pending(request, BrookClientError(f"produce request failed: {error!r}"))
        finally:
            self._in_flight[request.node_id] -= 1
            self._wakeup.set()

    def _fail_pending(self, request: DrainedRequest, error: BaseException) -> None:
        for queue, batches in request.entries:
            pending = [batch for batch in batches if not batch.done]
            if pending:
                self._accumulator.fail(queue, pending, error)

    async def _exchange(self, request: DrainedRequest) -> None:
        compression = self._accumulator.compression
        message = storage_pb2.ProduceRequest(
            acks=self._config.acks,  # type: ignore[arg-type]
            timeout_ms=self._replication_timeout_ms,
            # The leader verifies a transactional batch with this id's coordinator.
            transactional_id=self._config.transactional_id or "",
            partitions=[
                storage_pb2.PartitionProduceData(
                    topic=queue.topic,
                    partition=queue.partition,
                    records=b"".join(batch.seal(compression) for batch in batches),
                )
                for queue, batches in request.entries
            ],
        )
        try:
            response = await self._network.storage(request.address).Produce(
                message, timeout=self._request_timeout_s, metadata=self._call_metadata
            )
        except grpc.aio.AioRpcError as error:
            code, text = rpc_error(error)
            text = f"produce to node {request.node_id} ({request.address}) failed: {text}"
            for queue, batches in request.entries:
                if batches[0].send_order >= 0:
                    self._settle_sequenced(queue, batches[0], code, text, None)
                else:
                    self._settle_failure(queue, batches, code, text)
            return
        answers = {(p.topic, p.partition): p for p in response.partitions}
        for queue, batches in request.entries:
            answer = answers.get((queue.topic, queue.partition))
            if answer is None:
                self._settle_failure(
                    queue,
                    batches,
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"node {request.node_id} answered without {queue.topic}-{queue.partition}",
                )
                continue
            code = error_code(answer.error_code)
            if batches[0].send_order >= 0:
                text = answer.error_message or code.name
                self._settle_sequenced(queue, batches[0], code, text, answer)
            elif code is ErrorCode.NONE:
                self._settle_success(queue, batches, answer)
            else:
                text = answer.error_message or code.name
                self._settle_failure(queue, batches, code, text)

    def _settle_success(
        self,
        queue: PartitionQueue,
        batches: list[ProducerBatch],
        answer: storage_pb2.PartitionProduceResponse,
    ) -> None:
        # The node appends a partition's batches as one contiguous run of offsets, starting
        # at base_offset (-1 with acks=0: offsets unknown).
        self._accumulator.complete(queue, batches, answer.base_offset, answer.log_append_time_ms)

    def _settle_sequenced(
        self,
        queue: PartitionQueue,
        batch: ProducerBatch,
        code: ErrorCode,
        text: str,
        answer: storage_pb2.PartitionProduceResponse | None,
    ) -> None:
        """The answer to one sequenced batch (an idempotent producer sends one per partition)."""
        idempotence = self._idempotence
        assert idempotence is not None
        if code in METADATA_REFRESH_CODES:
            self._metadata.request_update()
        judged = verdict(code, batch.follows_acknowledged)
        if judged is Verdict.ACKNOWLEDGED and answer is not None:
            self._accumulator.complete(
                queue, [batch], answer.base_offset, answer.log_append_time_ms
            )
        elif judged is Verdict.ACKNOWLEDGED_OFFSETS_UNKNOWN:
            self._accumulator.complete(queue, [batch], -1, -1)
        elif idempotence.fatal_error is not None:
            self._accumulator.fail(queue, [batch], idempotence.fatal_error)
        elif (
            judged is Verdict.FENCED
            and code is ErrorCode.INVALID_PRODUCER_EPOCH
            and self._transactions is not None
        ):
            # KIP-588: the coordinator bumped the epoch aborting this transaction (it timed
            # out); the transaction must be aborted, the producer may go on (transactions.py).
            self._accumulator.fail(
                queue, [batch], api_error(code, f"{text} (the transaction must be aborted)")
            )
        elif judged is Verdict.FENCED:
            fenced = idempotence.fence(f"{queue.topic}-{queue.partition}", code, text)
            self._accumulator.fail(queue, [batch], fenced)
            self._accumulator.abort_queued(fenced)
        elif judged is Verdict.FAIL:
            if not (code in SPLIT_CODES and self._split(queue, batch, code, text)):
                self._accumulator.fail(queue, [batch], api_error(code, text))
        elif judged is Verdict.RETRY_AFTER_EPOCH_BUMP and self._transactions is not None:
            # Kafka's transactional producer: the batch fails, the transaction must abort,
            # and the abort bumps the epoch (KIP-360), which renumbers the partitions.
            self._accumulator.fail(
                queue,
                [batch],
                api_error(code, f"{text} (the transaction must be aborted)"),
            )
        else:
            if judged is Verdict.RETRY_AFTER_EPOCH_BUMP:
                batch.unwritten = True
                self._accumulator.producer_unknown(queue)
                idempotence.request_epoch_bump(
                    f"{queue.topic}-{queue.partition} answered {code.name}: {text}"
                )
            _log.debug(
                "retrying sequence %d of %s-%d after %s: %s",
                batch.base_sequence,
                queue.topic,
                queue.partition,
                code.name,
                text,
            )
            failure = self._retry(queue, [batch], code, text)
            if failure is not None:
                self._accumulator.fail(queue, [batch], failure)

    def _split(
        self, queue: PartitionQueue, batch: ProducerBatch, code: ErrorCode, text: str
    ) -> bool:
        """Send the records of a batch the node refused as too large again in smaller batches;
        False for a batch of one record (it fails)."""
        count, size_bytes = batch.count, batch.size_bytes
        if not self._accumulator.split_too_large(queue, batch):
            return False
        _log.info(
            "%s-%d refused a batch of %d records (%d bytes) with %s (%s); sending them again "
            "in %d smaller batches, and %s's batches no longer grow past batch.size",
            queue.topic,
            queue.partition,
            count,
            size_bytes,
            code.name,
            text,
            batch.pieces_left,
            queue.topic,
        )
        return True

    def _retry(
        self, queue: PartitionQueue, batches: list[ProducerBatch], code: ErrorCode, text: str
    ) -> BaseException | None:
        """Requeue ``batches`` for another attempt; returns their error when retries or
        delivery.timeout.ms are used up instead."""
        attempts = max(batch.attempts for batch in batches)
        now = time.monotonic()
        retry_at = now + backoff_s(self._config.retry_backoff, attempts + 1)
        deadline = min(batch.deadline for batch in batches)
        if attempts < self._config.retries and retry_at < deadline:
            self._accumulator.requeue(queue, batches, retry_at)
            return None
        if attempts >= self._config.retries:
            return api_error(code, f"{text} (after {attempts + 1} attempt(s); retries exhausted)")
        return ClientTimeoutError(
            f"delivery.timeout.ms={self._config.delivery_timeout_ms} passed for "
            f"{queue.topic}-{queue.partition}; last error {code.name}: {text}"
        )

    def _settle_failure(
        self, queue: PartitionQueue, batches: list[ProducerBatch], code: ErrorCode, text: str
    ) -> None:
        if code in METADATA_REFRESH_CODES:
            self._metadata.request_update()
        if code in SPLIT_CODES and len(batches) == 1 and self._split(queue, batches[0], code, text):
            return
        if not code.retriable and len(batches) > 1:
            # The node judged the partition's batches together; only one may be at fault.
            self._accumulator.split(queue, batches)
            return
        if code.retriable:
            _log.debug(
                "retrying %d batch(es) of %s-%d after %s: %s",
                len(batches),
                queue.topic,
                queue.partition,
                code.name,
                text,
            )
            error = self._retry(queue, batches, code, text)
            if error is None:
                return
        else:
            error = api_error(code, text)
        self._accumulator.fail(queue, batches, error)
