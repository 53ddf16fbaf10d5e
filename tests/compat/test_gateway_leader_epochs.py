"""Leader epochs through the gateway (KIP-320): Metadata shows each partition's epoch, Fetch
fences a client whose epoch is older than the leader's and refuses one from the future, and
OffsetForLeaderEpoch gives the end offset of an epoch from the leader's epoch history, which
is how a consumer detects that the log it read from was truncated.

The leadership really moves (its leader storage node stops), so the epochs are real ones.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import decode_response, encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from cluster_fixture import ClusterFactory, wait_until

from brook.client.admin import Admin, NewTopic
from brook.errors import ErrorCode
from brook.launcher import Role

pytestmark = pytest.mark.integration

TOPIC = "epochs"
RECORDS_PER_EPOCH = 5
WAIT_TIMEOUT_S = 60.0
SOCKET_TIMEOUT_S = 30.0


class _Connection:
    """One Kafka connection to a gateway: a request, then its response."""

    def __init__(self, address: str) -> None:
        host, port = address.split(",")[0].rsplit(":", 1)
        self._socket = socket.create_connection((host, int(port)), SOCKET_TIMEOUT_S)
        self._correlation_id = 0

    def ask(self, api_key: ApiKey, version: int, body: Message) -> Message:
        self._correlation_id += 1
        self._socket.sendall(
            encode_request(api_key, version, self._correlation_id, "epochs-test", body)
        )
        size = int.from_bytes(self._read(4), "big")
        correlation_id, response = decode_response(api_key, version, self._read(size))
        assert correlation_id == self._correlation_id
        return response

    def _read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self._socket.recv(size - len(data))
            assert chunk, "the gateway closed the connection"
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self._socket.close()


def _produce(bootstrap: str, first: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failures: list[Any] = []
    for i in range(first, first + RECORDS_PER_EPOCH):
        producer.produce(
            TOPIC, str(i).encode(), partition=0, on_delivery=lambda e, _: failures.append(e)
        )
    assert producer.flush(WAIT_TIMEOUT_S) == 0
    assert failures == [None] * RECORDS_PER_EPOCH


def _partition(connection: _Connection) -> Message:
    response = connection.ask(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}]})
    (topic,) = response["topics"]
    partition: Message
    (partition,) = topic["partitions"]
    return partition


def _fetch_error(connection: _Connection, epoch: int) -> int:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": epoch,
                        "fetch_offset": 0,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
    }
    response = connection.ask(ApiKey.FETCH, 11, body)
    code: int = response["responses"][0]["partitions"][0]["error_code"]
    return code


def _epoch_end(connection: _Connection, current: int, asked: int) -> Message:
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": 0, "current_leader_epoch": current, "leader_epoch": asked}
                ],
            }
        ],
    }
    answer: Message
    (answer,) = connection.ask(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, body)["topics"][0]["partitions"]
    return answer


def test_fetch_and_offset_for_leader_epoch_check_and_report_real_leader_epochs(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        controllers=1,
        storage_nodes=2,
        group_coordinators=0,
        gateways=1,
        config_overrides={"controller": {"auto.leader.rebalance.enable": "false"}},
    )
    bootstrap = cluster.kafka_bootstrap_servers
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, 1, 2)]) == {TOPIC: None}

        def described() -> Any:
            return admin.describe_topics([TOPIC])[TOPIC].partitions[0]

        wait_until(lambda: len(described().isr) == 2, "a full ISR", WAIT_TIMEOUT_S)
        first_leader = described().leader
        _produce(bootstrap, 0)

        connection = _Connection(bootstrap)
        try:
            first_epoch = _partition(connection)["leader_epoch"]
            assert first_epoch >= 0
            assert _fetch_error(connection, first_epoch) == ErrorCode.NONE
            assert _fetch_error(connection, first_epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH
            end = _epoch_end(connection, first_epoch, first_epoch)
            assert (end["error_code"], end["leader_epoch"], end["end_offset"]) == (
                0,
                first_epoch,
                RECORDS_PER_EPOCH,
            )

            # The leader stops: the other replica leads in a newer epoch.
            stopped = next(
                n
                for n in cluster.names(Role.STORAGE_NODE)
                if cluster.spec(n).node_id == first_leader
            )
            cluster.stop(stopped)
            wait_until(
                lambda: (
                    _partition(connection)["leader_epoch"] > first_epoch
                    and described().leader not in (None, first_leader)
                ),
                "leadership to move",
                WAIT_TIMEOUT_S,
            )
            second_epoch = _partition(connection)["leader_epoch"]
            _produce(bootstrap, RECORDS_PER_EPOCH)

            assert _fetch_error(connection, first_epoch) == ErrorCode.FENCED_LEADER_EPOCH
            assert _fetch_error(connection, second_epoch) == ErrorCode.NONE
            stale = _epoch_end(connection, first_epoch, first_epoch)
            assert stale["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
            # The first epoch ends where the second begins; the second at the log end.
            old = _epoch_end(connection, second_epoch, first_epoch)
            assert (old["error_code"], old["leader_epoch"], old["end_offset"]) == (
                0,
                first_epoch,
                RECORDS_PER_EPOCH,
            )
            new = _epoch_end(connection, second_epoch, second_epoch)
            assert (new["leader_epoch"], new["end_offset"]) == (second_epoch, 2 * RECORDS_PER_EPOCH)
        finally:
            connection.close()
