"""The leader's side of a replication throttle, on a real storage node answering a follower's
ReplicaFetch stream: the throttled bytes it sends keep close to the rate (a parked fetch wakes
when the quota allows the next chunk, not at the end of max_wait_ms), and every throttled
partition of a request gets its turn (one with a backlog does not take every chunk)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
from brook_storage_node.log import TopicPartition
from storage_node_support import (
    QueueMetadataSource,
    batch,
    broker_record,
    config_record,
    free_port,
    partition_record,
    produce_request,
    run,
    running_node,
    snapshot,
    topic_record,
)

from brook.record import read_header
from brook.v1 import metadata_pb2, replica_pb2, replica_pb2_grpc

TOPIC = "throttled"
LEADER = 1
FOLLOWER = 2
RATE = 100_000
EPOCH = 2
BATCHES = 60
MEASURE_S = 3.0
RATE_TOLERANCE = 0.2


def _throttled_metadata(
    ports: dict[int, int], partitions: int, *, side: str, node: int, rate: int
) -> Any:
    """Partitions led by LEADER with FOLLOWER out of the ISR, every replica throttled on
    ``side`` ("leader" or "follower") at ``rate`` bytes/s on ``node``."""
    rate_config = metadata_pb2.MetadataRecord(
        config=metadata_pb2.ConfigRecord(
            resource_type=metadata_pb2.CONFIG_RESOURCE_TYPE_BROKER,
            resource_name=str(node),
            name=f"{side}.replication.throttled.rate",
            value=str(rate),
        )
    )
    return lambda _: QueueMetadataSource(
        snapshot(
            *(broker_record(n, port) for n, port in ports.items()),
            topic_record(TOPIC),
            config_record(TOPIC, f"{side}.replication.throttled.replicas", "*"),
            rate_config,
            *(
                partition_record(
                    TOPIC,
                    index,
                    leader=LEADER,
                    replicas=(LEADER, FOLLOWER),
                    isr=(LEADER,),
                    leader_epoch=EPOCH,
                )
                for index in range(partitions)
            ),
        )
    )


def _next_offset(records: bytes, offset: int) -> int:
    """The offset after the last whole batch of ``records`` (``offset`` if there is none)."""
    position = 0
    while position < len(records):
        header = read_header(records, position)
        offset = header.last_offset + 1
        position += header.size
    return offset


def _fetch_for(tmp_path: Path, partitions: int) -> tuple[dict[int, int], float]:
    """Bytes each partition got over MEASURE_S from a leader with a backlog in every
    partition and nothing produced meanwhile, and the time it took."""

    async def scenario() -> tuple[dict[int, int], float]:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        async with running_node(
            tmp_path / "leader",
            port=ports[LEADER],
            source_for=_throttled_metadata(
                ports, partitions, side="leader", node=LEADER, rate=RATE
            ),
            settings={"node.id": str(LEADER)},
        ) as leader:
            for _ in range(BATCHES):
                for index in range(partitions):
                    await leader.stub.Produce(
                        produce_request(TOPIC, index, batch(10, prefix="x" * 900), acks=1)
                    )
            offsets = dict.fromkeys(range(partitions), 0)
            got = dict.fromkeys(range(partitions), 0)
            async with grpc.aio.insecure_channel(leader.address) as channel:
                stream = replica_pb2_grpc.ReplicaServiceStub(channel).ReplicaFetch()  # type: ignore[no-untyped-call]
                started = time.monotonic()
                while time.monotonic() - started < MEASURE_S:
                    await stream.write(
                        replica_pb2.ReplicaFetchRequest(
                            replica_id=FOLLOWER,
                            broker_epoch=-1,
                            max_wait_ms=500,
                            min_bytes=1,
                            max_bytes=10 << 20,
                            partitions=[
                                replica_pb2.ReplicaFetchPartition(
                                    topic=TOPIC,
                                    partition=index,
                                    fetch_offset=offsets[index],
                                    current_leader_epoch=EPOCH,
                                    last_fetched_epoch=-1,
                                    partition_max_bytes=1 << 20,
                                )
                                for index in range(partitions)
                            ],
                        )
                    )
                    response = await stream.read()
                    for entry in response.partitions:
                        assert entry.error_code == 0, entry
                        got[entry.partition] += len(entry.records)
                        offsets[entry.partition] = _next_offset(
                            bytes(entry.records), offsets[entry.partition]
                        )
                elapsed = time.monotonic() - started
                stream.cancel()
            return got, elapsed

    return run(scenario)


def test_a_throttled_leader_sends_at_its_rate_not_a_chunk_per_long_poll(tmp_path: Path) -> None:
    got, elapsed = _fetch_for(tmp_path, partitions=1)
    rate = got[0] / elapsed
    assert abs(rate - RATE) <= RATE_TOLERANCE * RATE, f"{rate:.0f} B/s for a {RATE} B/s throttle"


def test_every_throttled_partition_of_a_request_gets_its_turn(tmp_path: Path) -> None:
    got, elapsed = _fetch_for(tmp_path, partitions=2)
    assert min(got.values()) > 0.3 * sum(got.values()), got
    assert sum(got.values()) / elapsed <= (1 + RATE_TOLERANCE) * RATE, got


def _all_moved(ends: dict[int, int], partitions: int) -> bool:
    return all(ends.get(index) for index in range(partitions))


def test_a_follower_throttle_smaller_than_a_batch_still_moves_every_partition(
    tmp_path: Path,
) -> None:
    """Only the follower is throttled, at a rate whose chunk (0.1 s of it) is smaller than one
    batch: each throttled partition still gets its turn at being the request's first, where
    the leader sends a whole batch."""
    follower_rate = 20_000
    partitions = 2

    async def scenario() -> dict[int, int]:
        ports = {LEADER: free_port(), FOLLOWER: free_port()}
        fast = {"replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "50"}
        async with running_node(
            tmp_path / "leader",
            port=ports[LEADER],
            source_for=_throttled_metadata(
                ports, partitions, side="follower", node=FOLLOWER, rate=follower_rate
            ),
            settings={"node.id": str(LEADER), **fast},
        ) as leader:
            for _ in range(10):
                for index in range(partitions):
                    await leader.stub.Produce(
                        produce_request(TOPIC, index, batch(10, prefix="x" * 900), acks=1)
                    )
            async with running_node(
                tmp_path / "follower",
                port=ports[FOLLOWER],
                source_for=_throttled_metadata(
                    ports, partitions, side="follower", node=FOLLOWER, rate=follower_rate
                ),
                settings={"node.id": str(FOLLOWER), **fast},
            ) as follower:
                replicas = follower.node.replicas
                assert replicas is not None
                ends: dict[int, int] = {}
                deadline = time.monotonic() + MEASURE_S
                while time.monotonic() < deadline and not all(
                    ends.get(i) for i in range(partitions)
                ):
                    for index in range(partitions):
                        hosted = replicas.partitions.get(TopicPartition(TOPIC, index))
                        ends[index] = hosted.log_end_offset if hosted is not None else 0
                    await asyncio.sleep(0.05)
                return ends

    ends = run(scenario)
    assert all(ends[i] > 0 for i in range(partitions)), ends
