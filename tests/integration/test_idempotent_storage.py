"""Idempotent producers, storage-node side (issue #8), with real processes.

Batches are built by hand (RecordBatch v2 with producer id, epoch and base sequence) and sent
with raw gRPC Produce, so each test controls exactly what a retry looks like; the log is read
back with Fetch to prove what was (not) appended. Most tests share one small cluster (one
controller, one storage node); failover and id-uniqueness tests start their own three-node one.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cluster_fixture import ClusterFactory, replication_cluster, wait_until

from brook.client.admin import Admin, NewTopic
from brook.errors import ErrorCode, error_code
from brook.launcher import LocalCluster, Role
from brook.record import build_batch
from brook.v1 import controller_pb2, controller_pb2_grpc, storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

RPC_TIMEOUT_S = 10.0
WAIT_TIMEOUT_S = 40.0
POLL_S = 0.05
HEARTBEAT_INTERVAL_MS = 200
SESSION_TIMEOUT_MS = 2000
LAG_TIME_MAX_MS = 2000
FETCH_BYTES_MAX = 1 << 20


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> float:
    return wait_until(condition, what, timeout_s, POLL_S)


def _storage(address: str) -> Any:
    return storage_pb2_grpc.StorageServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]


def _batch(
    producer_id: int,
    epoch: int,
    base_sequence: int,
    values: list[bytes],
    timestamp_ms: int | None = None,
) -> bytes:
    created_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return build_batch(
        [(created_ms, None, value, []) for value in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
    )


def _produce(address: str, topic: str, records: bytes, partition: int = 0) -> Any:
    response = _storage(address).Produce(
        storage_pb2.ProduceRequest(
            acks=storage_pb2.ACKS_ALL,
            partitions=[
                storage_pb2.PartitionProduceData(topic=topic, partition=partition, records=records)
            ],
        ),
        timeout=RPC_TIMEOUT_S,
    )
    return response.partitions[0]


def _init_producer_id(address: str, producer_id: int = -1, epoch: int = -1, **extra: Any) -> Any:
    request = storage_pb2.InitProducerIdRequest(
        producer_id=producer_id, producer_epoch=epoch, **extra
    )
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while True:
        response = _storage(address).InitProducerId(request, timeout=RPC_TIMEOUT_S)
        code = error_code(response.error_code)
        # Retriable while the node fetches its first block of ids.
        if code is not ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return response
        time.sleep(POLL_S)


def _values(address: str, topic: str, partition: int = 0, start_offset: int = 0) -> list[bytes]:
    """Every record value of the partition from ``start_offset`` up to its high watermark."""
    stub = _storage(address)
    values: list[bytes] = []
    offset = start_offset
    while True:
        response = stub.Fetch(
            storage_pb2.FetchRequest(
                max_wait_ms=0,
                max_bytes=FETCH_BYTES_MAX,
                decode_records=True,
                partitions=[
                    storage_pb2.FetchPartition(
                        topic=topic, partition=partition, fetch_offset=offset
                    )
                ],
            ),
            timeout=RPC_TIMEOUT_S,
        ).partitions[0]
        assert error_code(response.error_code) is ErrorCode.NONE, response.error_message
        values.extend(record.value for record in response.decoded_records)
        if response.next_fetch_offset >= response.high_watermark or not response.decoded_records:
            return values
        offset = response.next_fetch_offset


def _create_topic(cluster: LocalCluster, topic: str, replication: int, **configs: str) -> None:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(topic, 1, replication, configs=configs)]) == {
            topic: None
        }

        def ready() -> bool:
            partition = admin.describe_topics([topic])[topic].partitions[0]
            return partition.leader is not None and len(partition.isr) == replication

        _wait(ready, f"{topic} to have a leader and a full ISR")

    # The controllers name the leader a moment before that node has opened the partition
    # (it answers NOT_LEADER_OR_FOLLOWER, "becoming the leader", meanwhile).
    address = _leader_address(cluster, topic)

    def served() -> bool:
        response = _storage(address).ListOffsets(
            storage_pb2.ListOffsetsRequest(
                partitions=[
                    storage_pb2.ListOffsetsPartition(
                        topic=topic, partition=0, spec=storage_pb2.OFFSET_SPEC_LATEST
                    )
                ]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        return error_code(response.partitions[0].error_code) is ErrorCode.NONE

    _wait(served, f"the leader of {topic} to serve it")


def _leader_address(cluster: LocalCluster, topic: str) -> str:
    with Admin(cluster.controller_bootstrap_servers) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader
    assert leader is not None
    return cluster.grpc_address(_node_names(cluster)[leader])


def _node_names(cluster: LocalCluster) -> dict[int, str]:
    return {cluster.spec(name).node_id: name for name in cluster.names(Role.STORAGE_NODE)}


def _ok(response: Any) -> None:
    assert error_code(response.error_code) is ErrorCode.NONE, response.error_message


# -- one controller, one storage node ---------------------------------------------------------


@contextlib.contextmanager
def _shared_factory(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[ClusterFactory], object]
) -> Iterator[ClusterFactory]:
    """A cluster shared by a module's tests; every process it started is stopped after them
    (even when starting failed)."""
    factory = ClusterFactory(Path(tmp_path_factory.mktemp(name)) / "clusters")
    try:
        build(factory)
        yield factory
    finally:
        factory.close(keep_files=False)


@pytest.fixture(scope="module")
def small_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Generator[ClusterFactory, None, None]:
    def build(factory: ClusterFactory) -> object:
        return factory(
            controllers=1,
            storage_nodes=1,
            group_coordinators=0,
            gateways=0,
            config_overrides={"controller": {"offsets.topic.num.partitions": "1"}},
        )

    with _shared_factory(tmp_path_factory, "idempotent", build) as factory:
        yield factory


@pytest.fixture
def small_cluster(small_factory: ClusterFactory) -> LocalCluster:
    return small_factory.clusters[0]


def _node(cluster: LocalCluster) -> str:
    return cluster.grpc_address(cluster.names(Role.STORAGE_NODE)[0])


def test_init_producer_id_hands_out_distinct_ids_at_epoch_zero(small_cluster: LocalCluster) -> None:
    address = _node(small_cluster)
    answers = [_init_producer_id(address) for _ in range(5)]
    for answer in answers:
        _ok(answer)
        assert answer.producer_epoch == 0
    ids = [answer.producer_id for answer in answers]
    assert len(set(ids)) == len(ids)
    assert min(ids) >= 0


def test_init_producer_id_with_an_id_bumps_its_epoch_and_an_exhausted_epoch_gets_a_new_id(
    small_cluster: LocalCluster,
) -> None:
    address = _node(small_cluster)
    first = _init_producer_id(address)
    bumped = _init_producer_id(address, first.producer_id, first.producer_epoch)
    _ok(bumped)
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 1)
    exhausted = _init_producer_id(address, first.producer_id, 32766)
    _ok(exhausted)
    assert exhausted.producer_id != first.producer_id
    assert exhausted.producer_epoch == 0


def test_init_producer_id_refuses_transactional_ids_and_malformed_requests(
    small_cluster: LocalCluster,
) -> None:
    address = _node(small_cluster)
    transactional = _init_producer_id(address, transactional_id="tx-1")
    assert error_code(transactional.error_code) is ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transaction coordinator" in transactional.error_message
    half = _init_producer_id(address, 7, -1)
    assert error_code(half.error_code) is ErrorCode.INVALID_REQUEST
    assert half.producer_id == -1


def test_a_retried_batch_is_appended_once_and_answered_with_its_original_offset(
    small_cluster: LocalCluster,
) -> None:
    address = _node(small_cluster)
    topic = "retried"
    _create_topic(small_cluster, topic, 1)
    producer = _init_producer_id(address)
    pid, epoch = producer.producer_id, producer.producer_epoch
    first = _batch(pid, epoch, 0, [b"a0", b"a1"])
    second = _batch(pid, epoch, 2, [b"b0"])
    answer_first = _produce(address, topic, first)
    answer_second = _produce(address, topic, second)
    _ok(answer_first)
    _ok(answer_second)
    # Both retried, the older one too: each is one of the last five batches.
    retry_first = _produce(address, topic, first)
    retry_second = _produce(address, topic, second)
    _ok(retry_first)
    _ok(retry_second)
    assert retry_first.base_offset == answer_first.base_offset
    assert retry_second.base_offset == answer_second.base_offset
    assert _values(address, topic) == [b"a0", b"a1", b"b0"]
    # The sequence goes on after the retries as if they had not happened.
    _ok(_produce(address, topic, _batch(pid, epoch, 3, [b"c0"])))
    assert _values(address, topic) == [b"a0", b"a1", b"b0", b"c0"]


def test_a_sequence_gap_is_out_of_order_and_appends_nothing(small_cluster: LocalCluster) -> None:
    address = _node(small_cluster)
    topic = "gap"
    _create_topic(small_cluster, topic, 1)
    producer = _init_producer_id(address)
    pid, epoch = producer.producer_id, producer.producer_epoch
    _ok(_produce(address, topic, _batch(pid, epoch, 0, [b"0"])))
    gap = _produce(address, topic, _batch(pid, epoch, 2, [b"2"]))
    assert error_code(gap.error_code) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # Java's producer reads the log start offset to tell a lost state from a real gap.
    assert gap.log_start_offset == 0
    assert _values(address, topic) == [b"0"]
    _ok(_produce(address, topic, _batch(pid, epoch, 1, [b"1"])))
    assert _values(address, topic) == [b"0", b"1"]


def test_an_unknown_producer_is_taken_at_any_sequence_and_then_held_to_order(
    small_cluster: LocalCluster,
) -> None:
    address = _node(small_cluster)
    topic = "unknown-producer"
    _create_topic(small_cluster, topic, 1)
    # An id this partition has never seen (Kafka >= 2.5: its state may have expired).
    pid = _init_producer_id(address).producer_id
    _ok(_produce(address, topic, _batch(pid, 0, 7, [b"7"])))
    _ok(_produce(address, topic, _batch(pid, 0, 8, [b"8"])))
    deleted = (
        _storage(address)
        .DeleteRecords(
            storage_pb2.DeleteRecordsRequest(
                partitions=[storage_pb2.DeleteRecordsPartition(topic=topic, partition=0, offset=1)],
                timeout_ms=int(RPC_TIMEOUT_S * 1000),
            ),
            timeout=RPC_TIMEOUT_S,
        )
        .partitions[0]
    )
    assert error_code(deleted.error_code) is ErrorCode.NONE
    gap = _produce(address, topic, _batch(pid, 0, 10, [b"10"]))
    assert error_code(gap.error_code) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # The partition's real log start, which Java's producer compares with its last ack.
    assert gap.log_start_offset == 1
    assert _values(address, topic, start_offset=1) == [b"8"]


def test_a_producer_fenced_by_an_epoch_bump_is_rejected_and_nothing_it_sends_is_logged(
    small_cluster: LocalCluster,
) -> None:
    address = _node(small_cluster)
    topic = "fenced"
    _create_topic(small_cluster, topic, 1)
    old = _init_producer_id(address)
    pid = old.producer_id
    _ok(_produce(address, topic, _batch(pid, 0, 0, [b"old-0"])))
    new = _init_producer_id(address, pid, old.producer_epoch)
    assert (new.producer_id, new.producer_epoch) == (pid, 1)
    _ok(_produce(address, topic, _batch(pid, 1, 0, [b"new-0"])))
    # The old instance carries on with its next sequence, then retries its first batch.
    for attempt in (_batch(pid, 0, 1, [b"old-1"]), _batch(pid, 0, 0, [b"old-0"])):
        fenced = _produce(address, topic, attempt)
        assert error_code(fenced.error_code) is ErrorCode.INVALID_PRODUCER_EPOCH
    _ok(_produce(address, topic, _batch(pid, 1, 1, [b"new-1"])))
    assert _values(address, topic) == [b"old-0", b"new-0", b"new-1"]


def test_a_retried_duplicate_is_detected_after_a_clean_restart_and_after_kill_9(
    small_factory: ClusterFactory, small_cluster: LocalCluster
) -> None:
    name = small_cluster.names(Role.STORAGE_NODE)[0]
    topic = "restarts"
    _create_topic(small_cluster, topic, 1, **{"segment.bytes": "1024"})
    address = _node(small_cluster)
    producer = _init_producer_id(address)
    pid, epoch = producer.producer_id, producer.producer_epoch
    batches = [_batch(pid, epoch, i, [b"v%03d" % i + b"." * 200]) for i in range(12)]
    offsets = []
    for batch in batches:
        answer = _produce(address, topic, batch)
        _ok(answer)
        offsets.append(answer.base_offset)
    expected = _values(address, topic)
    assert len(expected) == len(batches)
    for how in ("clean", "kill"):
        if how == "clean":
            small_cluster.stop(name)
        else:
            small_cluster.kill(name, signal.SIGKILL)
            small_cluster.wait(name, 10_000)
        small_factory.start(small_cluster, name)
        address = _node(small_cluster)
        # The first produces may meet the node before it leads the partition again.
        _wait(
            lambda node=address: (
                error_code(_produce(node, topic, batches[-1]).error_code) is ErrorCode.NONE
            ),
            f"the node to answer produces after the {how} restart",
        )
        retried = _produce(address, topic, batches[-1])
        _ok(retried)
        assert retried.base_offset == offsets[-1], how
        assert _values(address, topic) == expected, how


# -- three controllers, three storage nodes ---------------------------------------------------

IDS_BEFORE_KILL = 100
# More than one controller block (1000 ids) per node: each node must fetch blocks from the
# controller that took over.
IDS_AFTER_KILL = 1000


@pytest.fixture(scope="module")
def replicated_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Generator[ClusterFactory, None, None]:
    def build(factory: ClusterFactory) -> object:
        return replication_cluster(
            factory,
            controllers=3,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            lag_time_max_ms=LAG_TIME_MAX_MS,
        )

    with _shared_factory(tmp_path_factory, "idempotent-rf3", build) as factory:
        yield factory


def _controller_leader(cluster: LocalCluster) -> str:
    """The name of the active controller, as the quorum reports it."""
    names = {cluster.spec(n).node_id: n for n in cluster.names(Role.CONTROLLER)}
    for name in names.values():
        if not cluster.is_running(name):
            continue
        stub = controller_pb2_grpc.ControllerServiceStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(cluster.grpc_address(name))
        )
        try:
            quorum = stub.DescribeQuorum(
                controller_pb2.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S
            )
        except grpc.RpcError:
            continue
        if quorum.leader_id in names:
            return names[quorum.leader_id]
    pytest.fail("no controller names a leader")


def test_a_batch_retried_on_the_new_leader_after_a_leader_kill_is_a_duplicate(
    replicated_factory: ClusterFactory,
) -> None:
    cluster = replicated_factory.clusters[0]
    topic = "failover"
    _create_topic(cluster, topic, 3, **{"min.insync.replicas": "2"})
    old_leader = _leader_address(cluster, topic)
    producer = _init_producer_id(old_leader)
    pid, epoch = producer.producer_id, producer.producer_epoch
    batches = [_batch(pid, epoch, i, [b"r%d" % i]) for i in range(5)]
    offsets = []
    for batch in batches:
        answer = _produce(old_leader, topic, batch)
        _ok(answer)
        offsets.append(answer.base_offset)
    victim = next(
        name
        for name in cluster.names(Role.STORAGE_NODE)
        if cluster.grpc_address(name) == old_leader
    )
    cluster.kill(victim, signal.SIGKILL)
    cluster.wait(victim, 10_000)
    try:
        _wait(
            lambda: _leader_address(cluster, topic) != old_leader, "a new leader for the partition"
        )
        new_leader = _leader_address(cluster, topic)
        # The response of the last batch "was lost": the producer retries it, and an older one.
        for index in (4, 2):
            retried = _produce(new_leader, topic, batches[index])
            _ok(retried)
            assert retried.base_offset == offsets[index]
        _ok(_produce(new_leader, topic, _batch(pid, epoch, 5, [b"r5"])))
        assert _values(new_leader, topic) == [b"r%d" % i for i in range(6)]
    finally:
        replicated_factory.start(cluster, victim)


def test_producer_ids_never_repeat_across_storage_nodes_and_a_controller_leader_kill(
    replicated_factory: ClusterFactory,
) -> None:
    cluster = replicated_factory.clusters[0]
    nodes = [cluster.grpc_address(name) for name in cluster.names(Role.STORAGE_NODE)]
    ids: list[int] = []

    def take(count: int) -> None:
        for address in nodes:
            for _ in range(count):
                answer = _init_producer_id(address)
                _ok(answer)
                ids.append(answer.producer_id)

    take(IDS_BEFORE_KILL)
    victim = _controller_leader(cluster)
    cluster.kill(victim, signal.SIGKILL)
    cluster.wait(victim, 10_000)
    try:
        take(IDS_AFTER_KILL)
    finally:
        replicated_factory.start(cluster, victim)
    assert len(ids) == len(nodes) * (IDS_BEFORE_KILL + IDS_AFTER_KILL)
    assert len(set(ids)) == len(ids), "a producer id was handed out twice"


EXPIRATION_MS = 2_000
EXPIRATION_CHECK_INTERVAL_MS = 100
BUSY_PAUSE_S = 0.2
# Client timestamps a month old, as MirrorMaker keeps a source's.
OLD_CLIENT_AGE_MS = 30 * 86_400_000


def test_a_busy_producer_with_old_timestamps_keeps_its_state_and_an_idle_one_loses_it(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        config_overrides={
            "controller": {"offsets.topic.num.partitions": "1"},
            "storage-node": {
                "producer.id.expiration.ms": str(EXPIRATION_MS),
                "producer.id.expiration.check.interval.ms": str(EXPIRATION_CHECK_INTERVAL_MS),
            },
        },
    )
    address = _node(cluster)
    topic = "old-timestamps"
    # Time retention would delete month-old records; this test is about producer state.
    _create_topic(cluster, topic, 1, **{"retention.ms": "-1"})
    pid = _init_producer_id(address).producer_id
    old_ms = int(time.time() * 1000) - OLD_CLIENT_AGE_MS
    # Busy for longer than the expiration, every batch a month old by its timestamp.
    batches = []
    started = time.monotonic()
    seq = 0
    last_append_s = 0.0
    while time.monotonic() - started < 1.5 * EXPIRATION_MS / 1000:
        batch = _batch(pid, 0, seq, [b"%d" % seq], timestamp_ms=old_ms)
        last_append_s = time.time()
        _ok(_produce(address, topic, batch))
        batches.append(batch)
        seq += 1
        time.sleep(BUSY_PAUSE_S)
    # Still known: a retry of the last batch is answered as a duplicate, a gap is refused.
    _ok(_produce(address, topic, batches[-1]))
    gap = _produce(address, topic, _batch(pid, 0, seq + 5, [b"gap"], timestamp_ms=old_ms))
    assert error_code(gap.error_code) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _values(address, topic) == [b"%d" % i for i in range(seq)]

    # Idle: once forgotten, the same gap is taken as an unknown producer's first batch.
    def forgotten() -> bool:
        answer = _produce(address, topic, _batch(pid, 0, seq + 5, [b"gap"], timestamp_ms=old_ms))
        return error_code(answer.error_code) is ErrorCode.NONE

    _wait(forgotten, "the idle producer to expire")
    # Duplicates and refused batches do not count as activity; the last append does.
    assert (time.time() - last_append_s) * 1000 >= EXPIRATION_MS
    assert _values(address, topic) == [b"%d" % i for i in range(seq)] + [b"gap"]
