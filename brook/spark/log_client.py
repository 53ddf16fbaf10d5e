"""A blocking client of the storage nodes for the Spark readers: topics and partitions, offset
look-ups and raw fetches, without the consumer's background thread.

The Spark readers need what the SDK's consumer does underneath (GetMetadata, ListOffsets,
Fetch) but not its prefetching or its per-record objects: the driver plans offset ranges, a
task fetches the raw batches of one range and decodes them in bulk
(``brook.spark.arrow_decode``). Requests go to each partition's leader as the metadata names
it; answers that say leadership moved refresh the metadata and are retried, with the consumer
config's backoff, until ``default.api.timeout.ms``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import grpc
from google.protobuf.message import Message

from brook.client.config import ConsumerConfig
from brook.client.errors import ClientTimeoutError, api_error
from brook.client.metadata import EMPTY_CLUSTER, ClusterView, parse_metadata
from brook.client.requests import fetch_request, list_offsets_request
from brook.client.sender import METADATA_REFRESH_CODES
from brook.client.types import TopicPartition
from brook.closing import Closing
from brook.errors import ErrorCode, error_code
from brook.rpc.backoff import backoff_s
from brook.rpc.channels import SyncChannelPool, channel_options
from brook.rpc.errors import rpc_error
from brook.v1 import storage_pb2

__all__ = ["EARLIEST", "LATEST", "LogClient"]

# Spark's Kafka JSON offsets: -2 is a partition's earliest offset, -1 its latest.
EARLIEST: Final = -2
LATEST: Final = -1
_SPECS: Final = {EARLIEST: storage_pb2.OFFSET_SPEC_EARLIEST, LATEST: storage_pb2.OFFSET_SPEC_LATEST}


class LogClient(Closing):
    """GetMetadata, ListOffsets and Fetch of a consumer ``config`` (its bootstrap servers,
    isolation level, timeouts and fetch sizes). Not thread-safe."""

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self._channels = SyncChannelPool(
            channel_options(
                client_id=config.client_id,
                receive_bytes_max=max(config.fetch_max_bytes, config.max_partition_fetch_bytes),
                reconnect_backoff_ms=config.reconnect_backoff_ms,
                reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            ),
            config.security,
        )
        self._cluster = EMPTY_CLUSTER
        self._request_timeout_s = config.request_timeout_ms / 1000

    def close(self) -> None:
        self._channels.close()

    def _deadline(self) -> float:
        return time.monotonic() + self.config.default_api_timeout_ms / 1000

    def _wait(self, deadline: float, failures: int, what: str, problem: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ClientTimeoutError(f"{what} did not succeed in time; last problem: {problem}")
        time.sleep(min(backoff_s(self.config.retry_backoff, failures), remaining))

    def _call(
        self, address: str, method: str, request: Message, wait_s: float = 0.0
    ) -> tuple[Any, str]:
        """``method`` of the storage node at ``address``: (its response, "") or (None, what
        went wrong); bounded by ``request.timeout.ms`` plus ``wait_s`` (a long poll's)."""
        try:
            call = getattr(self._channels.storage(address), method)
            return call(request, timeout=self._request_timeout_s + wait_s), ""
        except grpc.RpcError as error:
            return None, f"{method} via {address}: {rpc_error(error)[1]}"

    # -- metadata --------------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None = None) -> ClusterView:
        """A fresh view of ``topics`` (every non-internal topic when None) from the first
        bootstrap server that answers."""
        deadline = self._deadline()
        failures = 0
        while True:
            problem = "no bootstrap server answered"
            for address in self.config.bootstrap_servers:
                request = storage_pb2.GetMetadataRequest(topics=list(topics or []))
                response, failure = self._call(address, "GetMetadata", request)
                if response is None:
                    problem = failure
                    continue
                view, unresolved = parse_metadata(response, EMPTY_CLUSTER, topics or ())
                if not unresolved:
                    self._cluster = view
                    return view
                problem = f"no usable metadata yet for {', '.join(sorted(unresolved))}"
            failures += 1
            self._wait(deadline, failures, "GetMetadata", problem)

    def partitions(self, topics: Iterable[str]) -> dict[str, int]:
        """Topic -> partition count of the named topics that exist."""
        view = self.metadata(sorted(set(topics)))
        return {name: info.num_partitions for name, info in view.topics.items()}

    def all_topics(self) -> dict[str, int]:
        """Topic -> partition count of every non-internal topic."""
        return {name: info.num_partitions for name, info in self.metadata().topics.items()}

    def _leader(self, tp: TopicPartition) -> str | None:
        leader = self._cluster.leader(tp.topic, tp.partition)
        return None if leader is None else leader[1]

    # -- offsets ---------------------------------------------------------------------------

    def edge_offsets(
        self, partitions: Iterable[TopicPartition], edge: int
    ) -> dict[TopicPartition, int]:
        """The earliest (``EARLIEST``) or latest (``LATEST``) offset of each partition; the
        latest is the last stable offset under read_committed, the high watermark
        otherwise."""
        spec = _SPECS[edge]
        answers = self._list_offsets({tp: (spec, 0) for tp in partitions})
        return {tp: answer.offset for tp, answer in answers.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """For each partition, the first offset whose timestamp is at or after the given one
        (ms since the epoch), None when every record is older."""
        answers = self._list_offsets(
            {tp: (storage_pb2.OFFSET_SPEC_TIMESTAMP, ts) for tp, ts in timestamps.items()}
        )
        return {
            tp: (answer.offset if answer.offset >= 0 else None) for tp, answer in answers.items()
        }

    def _list_offsets(
        self, specs: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse]:
        pending = dict(specs)
        results: dict[TopicPartition, storage_pb2.ListOffsetsPartitionResponse] = {}
        deadline = self._deadline()
        failures = 0
        problem = ""
        if pending:
            self.metadata(sorted({tp.topic for tp in pending}))
        while pending:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                address = self._leader(tp)
                if address is not None:
                    by_leader.setdefault(address, []).append(tp)
            for address, tps in by_leader.items():
                request = list_offsets_request(self.config.isolation_level, tps, pending)
                response, failure = self._call(address, "ListOffsets", request)
                if response is None:
                    problem = failure
                    continue
                for answer in response.partitions:
                    tp = TopicPartition(answer.topic, answer.partition)
                    if tp not in pending:
                        continue
                    code = error_code(answer.error_code)
                    if code is ErrorCode.NONE:
                        results[tp] = answer
                        del pending[tp]
                    elif code.retriable or code in METADATA_REFRESH_CODES:
                        problem = f"{tp.topic}-{tp.partition}: {answer.error_message or code.name}"
                    else:
                        raise api_error(
                            code, f"{tp.topic}-{tp.partition}: {answer.error_message or code.name}"
                        )
            if pending:
                failures += 1
                self._wait(deadline, failures, "ListOffsets", problem or "no leader known")
                self.metadata(sorted({tp.topic for tp in pending}))
        return results

    # -- fetch -----------------------------------------------------------------------------

    def fetch(self, tp: TopicPartition, offset: int) -> storage_pb2.FetchPartitionResponse:
        """One Fetch of ``tp`` from ``offset`` (at most ``max.partition.fetch.bytes``, waiting
        at most ``fetch.max.wait.ms`` for ``fetch.min.bytes``). The answer may carry
        OFFSET_OUT_OF_RANGE (the caller decides about data loss); other errors are retried
        while retriable, then raised as ApiError."""
        config = self.config
        request = fetch_request(config, [(tp, offset, -1)])
        deadline = self._deadline()
        failures = 0
        if self._leader(tp) is None:
            self.metadata([tp.topic])
        while True:
            address = self._leader(tp)
            problem = f"{tp.topic}-{tp.partition} has no leader"
            if address is not None:
                response, failure = self._call(
                    address, "Fetch", request, config.fetch_max_wait_ms / 1000
                )
                if response is None:
                    problem = failure
                else:
                    answer: storage_pb2.FetchPartitionResponse = response.partitions[0]
                    code = error_code(answer.error_code)
                    if code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                        return answer
                    problem = f"{tp.topic}-{tp.partition}: {answer.error_message or code.name}"
                    if not (code.retriable or code in METADATA_REFRESH_CODES):
                        raise api_error(code, problem)
            failures += 1
            self._wait(deadline, failures, "Fetch", problem)
            self.metadata([tp.topic])
