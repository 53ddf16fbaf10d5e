"""Client quotas through a real gateway: AlterClientQuotas / DescribeClientQuotas on the wire,
and the issue's Done-when test, two confluent-kafka producers, one whose client id is limited
to 1 MB/s and one unlimited.

The cluster is this module's own (one of each process the producers need) because its gateway
measures quotas over 2 samples of 1 s instead of Kafka's 11: a rate just started counts as
spread over all the samples but one, so with 11 a new client may send 10 s of its quota in a
burst before it is throttled, and 10-15 s of load would measure that burst rather than the
quota. With 2 the burst is one second's worth.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from brook_gateway.protocol.kafka_messages import ApiKey
from cluster_fixture import shared_cluster, wait_until
from test_gateway_fuzz import KafkaGateways, kafka_gateways, kafka_request

from brook.client.admin import Admin
from brook.client.quotas import ClientQuotaEntity
from brook.errors import ErrorCode
from brook.launcher import LocalCluster

LIMIT_BYTES_PER_S: Final = 1_048_576
VALUE_BYTES: Final = 10_000
TIMEOUT_S: Final = 30.0
# The unlimited producer runs alone, beside the limited one, alone, beside it again and alone:
# its baseline is the alone phases, interleaved with the others so that a drift in the
# machine's load over the test (the machine is shared) affects both sides of the comparison
# alike. 12 s of load beside the limited producer, 9 s alone.
WARM_UP_S: Final = 1.0
ALONE_S: Final = 3.0
TOGETHER_S: Final = 6.0
TOGETHER_PHASES: Final = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "quotas",
        controllers=1,
        storage_nodes=1,
        group_coordinators=1,
        gateways=1,
        config_overrides={"gateway": {"quota.window.num": "2", "quota.window.size.seconds": "1"}},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def gateways(cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(cluster)


def _entity(**names: str | None) -> list[dict[str, Any]]:
    return [
        {"entity_type": kind.replace("_", "-"), "entity_name": name} for kind, name in names.items()
    ]


@pytest.mark.parametrize("version", [0, 1])
def test_quotas_are_altered_and_described_through_the_gateway(
    cluster: LocalCluster, gateways: KafkaGateways, version: int
) -> None:
    user = f"wire-user-{version}"

    def alter(entries: list[dict[str, Any]], validate_only: bool = False) -> list[Any]:
        response = kafka_request(
            gateways.address,
            ApiKey.ALTER_CLIENT_QUOTAS,
            version,
            {"entries": entries, "validate_only": validate_only},
            TIMEOUT_S,
        )
        return [(e["error_code"], e["error_message"], e["entity"]) for e in response["entries"]]

    def describe(components: list[dict[str, Any]], strict: bool) -> Any:
        return kafka_request(
            gateways.address,
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            version,
            {"components": components, "strict": strict},
            TIMEOUT_S,
        )

    both = _entity(user=user, client_id=None)
    (answer,) = alter(
        [
            {
                "entity": both,
                "ops": [
                    {"key": "producer_byte_rate", "value": 2048.0, "remove": False},
                    {"key": "request_percentage", "value": 0.0, "remove": True},
                ],
            }
        ]
    )
    assert answer[0] == ErrorCode.NONE
    assert sorted((p["entity_type"], p["entity_name"]) for p in answer[2]) == [
        ("client-id", None),
        ("user", user),
    ]
    (refused,) = alter(
        [{"entity": _entity(user=user), "ops": [{"key": "bogus", "value": 1.0, "remove": False}]}]
    )
    assert refused[0] == ErrorCode.INVALID_REQUEST and "bogus" in refused[1]

    exact_user = {"entity_type": "user", "match_type": 0, "match": user}
    described = describe([exact_user], strict=False)
    assert described["error_code"] == ErrorCode.NONE
    (entry,) = described["entries"]
    assert entry["values"] == [{"key": "producer_byte_rate", "value": 2048.0}]
    assert describe([exact_user], strict=True)["entries"] == []
    bad = describe([{"entity_type": "user", "match_type": 7, "match": None}], strict=False)
    assert bad["error_code"] == ErrorCode.INVALID_REQUEST and bad["entries"] is None


@dataclass
class _Producer:
    """A confluent-kafka producer sending VALUE_BYTES values as fast as it is let, in a thread
    of its own, counting the bytes each delivery report acknowledges and when."""

    bootstrap: str
    topic: str
    client_id: str
    deliveries: list[tuple[float, int]] = field(default_factory=list)
    throttle_events: int = 0
    errors: list[Any] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.client_id, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops producing and waits for what was sent to be answered (a second time: a
        no-op)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT_S)
            assert not self._thread.is_alive()

    def bytes_between(self, start_s: float, end_s: float) -> int:
        return sum(size for at_s, size in self.deliveries if start_s <= at_s < end_s)

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Producer

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                self.deliveries.append((time.monotonic(), len(message.value())))
            elif error.code() != KafkaError._PURGE_QUEUE:
                self.errors.append(error)

        def throttled(event: Any) -> None:
            self.throttle_events += 1

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": self.client_id,
                "linger.ms": 5,
                # Requests of 64 KB: a throttled client's rate moves in small steps.
                "batch.size": 65_536,
                "queue.buffering.max.kbytes": 4096,
                "throttle_cb": throttled,
            }
        )
        value = b"q" * VALUE_BYTES
        while not self._stop.is_set():
            try:
                producer.produce(self.topic, value, on_delivery=delivered)
                producer.poll(0)
            except BufferError:
                producer.poll(0.05)  # the queue is full: wait for deliveries, not spin
        producer.purge(in_flight=False)  # what is sent is answered: nothing fails
        producer.flush(TIMEOUT_S)


def _phase(duration_s: float) -> tuple[float, float]:
    """Lets the producers run for ``duration_s``; when that was."""
    start_s = time.monotonic()
    time.sleep(duration_s)  # load is what the test measures: the producers run meanwhile
    return start_s, time.monotonic()


def _rate(producers: list[_Producer], phases: list[tuple[float, float]]) -> float:
    """Bytes per second the producers had acknowledged over the phases."""
    delivered = sum(p.bytes_between(start_s, end_s) for p in producers for start_s, end_s in phases)
    return delivered / sum(end_s - start_s for start_s, end_s in phases)


def test_a_client_id_limited_to_1_mb_s_gets_it_and_leaves_an_unlimited_producer_its_rate(
    cluster: LocalCluster, gateways: KafkaGateways
) -> None:
    limited_topic, unlimited_topic = "quota-limited", "quota-unlimited"
    with Admin(cluster.bootstrap_servers()) as admin:
        limited = ClientQuotaEntity({"client-id": "limited"})
        assert admin.alter_client_quotas({limited: {"producer_byte_rate": LIMIT_BYTES_PER_S}}) == {
            limited: None
        }
        # Created after the quota: a gateway that shows the topics has applied the quota
        # (metadata is applied in log order).
        from brook.client.admin import NewTopic

        created = admin.create_topics(
            [NewTopic(limited_topic, 1, 1), NewTopic(unlimited_topic, 1, 1)]
        )
        assert created == {limited_topic: None, unlimited_topic: None}

    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": gateways.bootstrap})
    wait_until(
        lambda: {limited_topic, unlimited_topic} <= set(client.list_topics(timeout=5).topics),
        "the gateway to show the topics",
        TIMEOUT_S,
    )

    unlimited = _Producer(gateways.bootstrap, unlimited_topic, "unlimited")
    unlimited.start()
    # (start, end) of each phase in which the unlimited producer runs alone, and of each in
    # which the limited one runs beside it (ended by its stop: what it sent is answered).
    alone: list[tuple[float, float]] = []
    beside: list[tuple[float, float]] = []
    noisy: list[_Producer] = []
    try:
        wait_until(
            lambda: bool(unlimited.deliveries), "the unlimited producer's first delivery", TIMEOUT_S
        )
        time.sleep(WARM_UP_S)  # load is what the test measures: it must run for a while
        for _ in range(TOGETHER_PHASES):
            alone.append(_phase(ALONE_S))
            noisy.append(_Producer(gateways.bootstrap, limited_topic, "limited"))
            noisy[-1].start()
            phase = _phase(TOGETHER_S)
            noisy[-1].stop()
            beside.append(phase)
        alone.append(_phase(ALONE_S))
    finally:
        for producer in (*noisy, unlimited):
            producer.stop()

    assert unlimited.errors == [] and all(producer.errors == [] for producer in noisy)
    limited_rate = _rate(noisy, beside)
    baseline = _rate([unlimited], alone)
    beside_rate = _rate([unlimited], beside)
    first_s, last_s = alone[0][0], alone[-1][1]
    per_s = [
        round(unlimited.bytes_between(first_s + n, first_s + n + 1) / 1e6)
        for n in range(int(last_s - first_s))
    ]
    report = (
        f"limited {limited_rate:,.0f} B/s, unlimited {beside_rate:,.0f} B/s beside it and "
        f"{baseline:,.0f} B/s alone (MB each second: {per_s})"
    )
    assert abs(limited_rate - LIMIT_BYTES_PER_S) <= 0.2 * LIMIT_BYTES_PER_S, report
    assert abs(beside_rate - baseline) <= 0.2 * baseline, report
    # The gateway told the limited client (throttle_time_ms), and never the other.
    assert all(p.throttle_events > 0 for p in noisy) and unlimited.throttle_events == 0, report
    # The unlimited producer really is faster than the limit, or the test proves nothing.
    assert baseline > 3 * LIMIT_BYTES_PER_S, report
