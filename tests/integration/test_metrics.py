"""Prometheus's /metrics on every process of a real cluster (issue #20).

A cluster of two controllers, two storage nodes, a group coordinator and a gateway, each with
its METRICS listener (the launcher gives every process one); a Kafka client produces through
the gateway and a consumer group reads and commits. Then every process is scraped over HTTP and
parsed with prometheus_client's parser. The test proves that:

- every metric docs/metrics.md documents for a role is exported by that role (read from the
  doc, so the doc and the code cannot drift), but the counters of events this run does not
  cause (ISR changes, refusals, cleaning passes);
- the values are the cluster's: records in for the topic >= records produced, no
  under-replicated or offline partitions, exactly one active controller, the group's committed
  offsets and a lag of 0 once it has read everything, a log size for every replica, request
  latencies per Kafka API at the gateway and per gRPC method at the controller and the
  coordinator, an event-loop idle ratio within 0..1;
- bad HTTP input (a wrong path, a huge request head, garbage) gets an error answer and leaves
  the endpoint and the service up.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping

import pytest
from cluster_fixture import ClusterFactory, wait_until
from kafka_round_trip import produce_and_consume
from metrics_doc import SERVICES, documented_metrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from brook.health import check_health
from brook.launcher import METRICS, LocalCluster, Role

pytestmark = pytest.mark.integration

TOPIC = "metered"
GROUP = "metered-readers"
PARTITIONS = 2
RECORDS = 20
HTTP_TIMEOUT_S = 10.0
SETTLE_TIMEOUT_S = 60.0
# Counters (and histograms) of events this run does not cause: they appear from their first
# event on (a quota throttle time is recorded only for clients a quota applies to, and this
# cluster has none).
EVENT_COUNTERS = frozenset(
    {
        "brook_storage_quota_throttle_time_milliseconds",
        "brook_gateway_quota_throttle_time_milliseconds",
        "brook_replication_isr_shrinks_total",
        "brook_replication_isr_expands_total",
        "brook_storage_requests_rejected_total",
        "brook_log_cleaner_bytes_read_bytes_total",
        "brook_log_cleaner_bytes_written_bytes_total",
    }
)

Scrape = dict[str, list[Sample]]


def _get(address: str, path: str = "/metrics") -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=HTTP_TIMEOUT_S) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _scrape(address: str) -> Scrape:
    """Exposed metric name (a counter's with _total) -> its samples."""
    status, body = _get(address)
    assert status == 200, (address, status, body[:200])
    scraped: Scrape = {}
    for family in text_string_to_metric_families(body.decode()):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        scraped[name] = family.samples
    return scraped


def _role_scrapes(cluster: LocalCluster, role: Role) -> list[Scrape]:
    return [_scrape(cluster.processes[name].address(METRICS)) for name in cluster.names(role)]


def _values(
    scrapes: Iterable[Scrape], sample_name: str, labels: Mapping[str, str] | None = None
) -> list[float]:
    family = sample_name.removesuffix("_count").removesuffix("_sum")
    return [
        sample.value
        for scraped in scrapes
        for sample in scraped.get(family, ())
        if sample.name == sample_name
        and all(sample.labels.get(key) == value for key, value in (labels or {}).items())
    ]


def _rpc_calls(scrapes: Iterable[Scrape], service: str, method: str) -> float:
    """Calls of one gRPC method the runtime's interceptor recorded, whatever their status."""
    labels = {"rpc_service": service, "rpc_method": method}
    return sum(_values(scrapes, "brook_rpc_server_duration_milliseconds_count", labels))


def _eventually(check: Callable[[], object], what: str) -> None:
    """Polls `check` (an assertion) until it passes, within SETTLE_TIMEOUT_S."""
    failure: list[AssertionError] = []

    def passes() -> bool:
        try:
            check()
        except AssertionError as error:
            failure[:] = [error]
            return False
        return True

    try:
        wait_until(passes, what, SETTLE_TIMEOUT_S, poll_s=0.5)
    except BaseException:
        if failure:
            raise failure[0] from None
        raise


def test_every_process_serves_the_documented_metrics_with_the_clusters_values(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(
        controllers=2,
        storage_nodes=2,
        group_coordinators=1,
        gateways=1,
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": "2",
                "offsets.topic.replication.factor": "2",
            },
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    )
    produce_and_consume(cluster, TOPIC, PARTITIONS, RECORDS, GROUP, SETTLE_TIMEOUT_S)
    roles = dict(zip(SERVICES, (Role(service) for service in SERVICES), strict=True))
    documented = documented_metrics()

    for service, role in roles.items():
        expected = {m.name for m in documented if service in m.services} - EVENT_COUNTERS

        def all_exported(role: Role = role, expected: set[str] = expected) -> None:
            exported = set().union(*(set(s) for s in _role_scrapes(cluster, role)))
            assert expected <= exported, (role, sorted(expected - exported))

        _eventually(all_exported, f"every documented {service} metric")

    def storage_values() -> None:
        scrapes = _role_scrapes(cluster, Role.STORAGE_NODE)
        topic = {"topic": TOPIC}
        assert sum(_values(scrapes, "brook_storage_messages_in_total", topic)) >= RECORDS
        assert sum(_values(scrapes, "brook_storage_bytes_in_bytes_total", topic)) > 0
        assert sum(_values(scrapes, "brook_storage_bytes_out_bytes_total", topic)) > 0
        assert sum(_values(scrapes, "brook_replication_under_replicated_partitions")) == 0
        for partition in range(PARTITIONS):
            sizes = _values(
                scrapes, "brook_log_size_bytes", {"topic": TOPIC, "partition": str(partition)}
            )
            assert len(sizes) == 2 and min(sizes) > 0, (partition, sizes)
        produce = _values(
            scrapes, "brook_storage_request_duration_milliseconds_count", {"rpc_method": "Produce"}
        )
        assert sum(produce) >= 1

    _eventually(storage_values, "the storage nodes' values")

    def controller_values() -> None:
        scrapes = _role_scrapes(cluster, Role.CONTROLLER)
        assert sorted(_values(scrapes, "brook_controller_active")) == [0, 1]
        assert sum(_values(scrapes, "brook_controller_offline_partitions")) == 0
        assert _rpc_calls(scrapes, "brook.v1.ControllerService", "BrokerHeartbeat") >= 1

    _eventually(controller_values, "the controllers' values")

    def coordinator_values() -> None:
        scrapes = _role_scrapes(cluster, Role.GROUP_COORDINATOR)
        for partition in range(PARTITIONS):
            labels = {"group": GROUP, "topic": TOPIC, "partition": str(partition)}
            assert _values(scrapes, "brook_group_committed_offset", labels) == [
                RECORDS // PARTITIONS
            ]
            assert _values(scrapes, "brook_group_lag", labels) == [0]
        assert _rpc_calls(scrapes, "brook.v1.GroupCoordinatorService", "CommitOffsets") >= 1

    _eventually(coordinator_values, "the group coordinator's values")

    gateway = _role_scrapes(cluster, Role.GATEWAY)
    for api in ("Produce", "Fetch", "Metadata", "OffsetCommit"):
        count = _values(
            gateway, "brook_gateway_request_duration_milliseconds_count", {"kafka_api": api}
        )
        assert sum(count) >= 1, api
    for role in roles.values():
        ratios = _values(_role_scrapes(cluster, role), "brook_event_loop_idle_ratio")
        assert ratios and all(0 <= ratio <= 1 for ratio in ratios), (role, ratios)


def _raw_request(address: str, request: bytes) -> bytes:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=HTTP_TIMEOUT_S) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_bad_http_input_gets_an_error_and_leaves_the_service_up(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(controllers=1, storage_nodes=1, group_coordinators=0, gateways=0)
    spec = cluster.processes["storage-node-1"]
    address = spec.address(METRICS)

    assert _get(address, "/")[0] == 404
    assert _get(address, "/metrics/../secrets")[0] == 404
    huge = b"GET /metrics HTTP/1.1\r\nX-Filler: " + b"x" * 100_000 + b"\r\n\r\n"
    assert _raw_request(address, huge).startswith(b"HTTP/1.1 431 ")
    assert _raw_request(address, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _raw_request(address, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")

    assert "brook_event_loop_idle_ratio" in _scrape(address)
    assert check_health(spec.address(), timeout_ms=int(HTTP_TIMEOUT_S * 1000)).serving
