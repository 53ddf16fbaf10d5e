"""Client quotas at a storage node, for gRPC clients that produce to and fetch from it
directly (brook_storage_node.client_quotas): an SDK producer whose client id is limited to
1 MiB/s gets that rate while an unlimited one beside it gets the four times as much it asks
for; raw calls show the
throttle in throttle_time_ms, answered that much later, for Produce and Fetch, and nothing for
a client id without a quota.

The node measures over 2 samples of 1 s (``quota.window.num=2``) instead of Kafka's 11, as the
gateway's test does (tests/compat/test_client_quotas.py): with 11 a new client may send 10 s of
its quota before its first throttle, and a test of a few seconds would measure that burst.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Final

import pytest
from cluster_fixture import shared_cluster, wait_until
from storage_rpc import RPC_TIMEOUT_S, code_of, storage_stub

from brook.client import Producer, RecordFuture
from brook.client.admin import Admin, NewTopic
from brook.client.quotas import ClientQuotaEntity
from brook.errors import ErrorCode
from brook.launcher import LocalCluster, Role
from brook.rpc.channels import client_id_metadata
from brook.v1 import common_pb2, storage_pb2

pytestmark = pytest.mark.integration

LIMIT_BYTES_PER_S: Final = 1_048_576
VALUE_BYTES: Final = 10_000
BATCH_BYTES: Final = 65_536
UNLIMITED_PACE_BYTES_PER_S: Final = 4 * LIMIT_BYTES_PER_S
TIMEOUT_S: Final = 30.0
# Measured after the warm-up: the first second of a new quota group may burst (one window).
WARM_UP_S: Final = 2.0
MEASURED_S: Final = 8.0
LIMITED_TOPIC: Final = "quota-limited"
UNLIMITED_TOPIC: Final = "quota-unlimited"
RAW_TOPIC: Final = "quota-raw"
# The raw calls' quotas: 100 KB/s each way, so one 150 KB call is over by half a window.
RAW_LIMIT_BYTES_PER_S: Final = 100_000
RAW_VALUE_BYTES: Final = 150_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "storage-quotas",
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        config_overrides={
            "storage-node": {"quota.window.num": "2", "quota.window.size.seconds": "1"}
        },
    ) as running:
        with Admin(running.controller_bootstrap_servers) as admin:
            quotas = {
                ClientQuotaEntity({"client-id": "limited"}): {
                    "producer_byte_rate": LIMIT_BYTES_PER_S
                },
                ClientQuotaEntity({"client-id": "raw-limited"}): {
                    "producer_byte_rate": RAW_LIMIT_BYTES_PER_S,
                    "consumer_byte_rate": RAW_LIMIT_BYTES_PER_S,
                },
            }
            assert admin.alter_client_quotas(quotas) == dict.fromkeys(quotas)
            # Created after the quotas: a node that serves the topics has applied the quotas
            # (metadata is applied in log order).
            topics = [NewTopic(name, 1, 1) for name in (LIMITED_TOPIC, UNLIMITED_TOPIC, RAW_TOPIC)]
            assert all(error is None for error in admin.create_topics(topics).values())
        address = running.grpc_address("storage-node-1")
        wait_until(
            lambda: all(_led(address, t) for t in (LIMITED_TOPIC, UNLIMITED_TOPIC, RAW_TOPIC)),
            "the node to lead the topics",
            TIMEOUT_S,
        )
        yield running


def _led(address: str, topic: str) -> bool:
    request = storage_pb2.ListOffsetsRequest(
        partitions=[
            storage_pb2.ListOffsetsPartition(
                topic=topic, partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
            )
        ]
    )
    answer = storage_stub(address).ListOffsets(request, timeout=RPC_TIMEOUT_S).partitions[0]
    return code_of(answer) is ErrorCode.NONE


class _Producer:
    """An SDK producer sending 10 KB records on a thread of its own, as fast as it is let or
    at ``pace_bytes_per_s``; when each record was acknowledged."""

    def __init__(
        self, bootstrap: str, topic: str, client_id: str, pace_bytes_per_s: float | None = None
    ) -> None:
        # A small buffer: what is still buffered when the test ends is sent at the limited
        # producer's pace before its close returns.
        self._producer = Producer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            linger_ms=5,
            batch_size=BATCH_BYTES,
            buffer_memory=2 * LIMIT_BYTES_PER_S,
        )
        self._topic = topic
        self._pace_bytes_per_s = pace_bytes_per_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.acked_at: list[float] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=client_id, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        value = b"q" * VALUE_BYTES
        started_s = time.monotonic()
        sent = 0
        while not self._stop.is_set():
            if self._pace_bytes_per_s is not None:
                ahead_s = sent / self._pace_bytes_per_s - (time.monotonic() - started_s)
                if ahead_s > 0:
                    self._stop.wait(ahead_s)
                    continue
            self._producer.send(self._topic, value).add_done_callback(self._acked)
            sent += VALUE_BYTES

    def _acked(self, future: RecordFuture) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acked_at.append(time.monotonic())
            else:
                self.errors.append(error)

    def rate(self, start_s: float, end_s: float) -> float:
        """Bytes per second acknowledged between ``start_s`` and ``end_s``."""
        with self._lock:
            acked = sum(1 for at in self.acked_at if start_s <= at < end_s)
        return acked * VALUE_BYTES / (end_s - start_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        self._producer.close(TIMEOUT_S)


def test_an_sdk_producer_limited_to_1_mib_s_gets_it_and_an_unlimited_one_is_not_held(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers(Role.STORAGE_NODE)
    limited = _Producer(bootstrap, LIMITED_TOPIC, "limited")
    # Paced rather than greedy: a greedy producer would take the test process's and the
    # node's CPU from the limited one, whose rate is what is measured.
    unlimited = _Producer(bootstrap, UNLIMITED_TOPIC, "unlimited", UNLIMITED_PACE_BYTES_PER_S)
    try:
        limited.start()
        unlimited.start()
        wait_until(
            lambda: bool(limited.acked_at and unlimited.acked_at), "first deliveries", TIMEOUT_S
        )
        start_s = time.monotonic() + WARM_UP_S
        end_s = start_s + MEASURED_S
        time.sleep(end_s - time.monotonic())  # load is what the test measures
    finally:
        limited.close()
        unlimited.close()
    assert limited.errors == [] and unlimited.errors == []
    limited_rate = limited.rate(start_s, end_s)
    unlimited_rate = unlimited.rate(start_s, end_s)
    report = f"limited {limited_rate:,.0f} B/s, unlimited {unlimited_rate:,.0f} B/s"
    # The guarantee is the bound: never more than the quota (20 % for the windows' sampling).
    # Delayed answers leave it a little below when the machine is loaded (0-7 % alone, up to
    # ~20 % with a test suite beside it), so below only "served, not starved" is asserted;
    # the gateway's muting meets the quota within 20 % both ways (tests/compat).
    assert limited_rate <= 1.2 * LIMIT_BYTES_PER_S, report
    assert limited_rate >= 0.5 * LIMIT_BYTES_PER_S, report
    # The unlimited producer gets the four times the limit it asks for: it is not held to the
    # other's quota, nor to any.
    assert abs(unlimited_rate - UNLIMITED_PACE_BYTES_PER_S) <= 0.2 * UNLIMITED_PACE_BYTES_PER_S, (
        report
    )


def _produce_records(
    address: str, client_id: str
) -> tuple[storage_pb2.ProduceRecordsResponse, float]:
    """A ProduceRecords of one 150 KB record as ``client_id``: its answer and how long it took."""
    request = storage_pb2.ProduceRecordsRequest(
        acks=storage_pb2.ACKS_ALL,
        partitions=[
            storage_pb2.PartitionRecords(
                topic=RAW_TOPIC,
                partition=0,
                records=[common_pb2.Record(value=os.urandom(RAW_VALUE_BYTES))],
            )
        ],
    )
    started = time.monotonic()
    response = storage_stub(address).ProduceRecords(
        request, timeout=RPC_TIMEOUT_S, metadata=client_id_metadata(client_id)
    )
    assert code_of(response.partitions[0]) is ErrorCode.NONE
    return response, time.monotonic() - started


def _fetch(address: str, client_id: str) -> tuple[storage_pb2.FetchResponse, float]:
    request = storage_pb2.FetchRequest(
        max_bytes=1 << 20,
        partitions=[storage_pb2.FetchPartition(topic=RAW_TOPIC, partition=0, fetch_offset=0)],
    )
    started = time.monotonic()
    response = storage_stub(address).Fetch(
        request, timeout=RPC_TIMEOUT_S, metadata=client_id_metadata(client_id)
    )
    assert code_of(response.partitions[0]) is ErrorCode.NONE
    return response, time.monotonic() - started


def test_a_call_over_its_quota_carries_its_throttle_and_is_answered_that_much_later(
    cluster: LocalCluster,
) -> None:
    address = cluster.grpc_address("storage-node-1")
    # 150 KB over the 1 s a new rate counts at least, against 100 KB/s: half a window over.
    throttled, took_s = _produce_records(address, "raw-limited")
    assert throttled.throttle_time_ms == pytest.approx(500, abs=50)
    assert took_s >= throttled.throttle_time_ms / 1000 - 0.005
    # A client id without a quota is not measured, whatever another's state.
    free, _ = _produce_records(address, "raw-free")
    assert free.throttle_time_ms == 0
    # Fetch: the response's size is what counts (the two records, some 300 KB, which do not
    # compress).
    fetched, took_s = _fetch(address, "raw-limited")
    assert len(fetched.partitions[0].records) >= 2 * RAW_VALUE_BYTES
    assert fetched.throttle_time_ms > 0
    assert took_s >= fetched.throttle_time_ms / 1000 - 0.005
    assert _fetch(address, "raw-free")[0].throttle_time_ms == 0
