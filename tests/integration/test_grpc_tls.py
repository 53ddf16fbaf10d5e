"""gRPC over mutual TLS between real processes: a controller and a storage node started as
``brook cluster up --tls`` starts them (GRPC:SSL, ssl.client.auth=required,
security.inter.broker.protocol=SSL, certificates of the cluster's own CA), and real clients.

The storage node learns its topics from the controller over mTLS, so a topic created through
the controller and served by the node proves the processes' own channels work too.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cluster_fixture import shared_cluster, wait_until
from cryptography import x509
from tls_cluster import cluster_tls, operator_admin, operator_settings

from brook.client import BrookClientError, Consumer, Producer, TopicPartition
from brook.client.admin import NewTopic
from brook.launcher import LocalCluster
from brook.rpc.channels import ChannelSecurity, sync_channel
from brook.security.certificates import CertificateAuthority
from brook.security.tls import TlsFiles
from brook.v1 import storage_pb2, storage_pb2_grpc

pytestmark = pytest.mark.integration

NODE = "storage-node-1"
TOPIC = "secure"
PARTITIONS = 2
RECORDS = 200
RPC_TIMEOUT_S = 10.0
CONSUME_TIMEOUT_S = 30.0
TOPIC_READY_TIMEOUT_S = 30.0
REFUSED_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with shared_cluster(
        tmp_path_factory,
        "grpc-tls",
        controllers=1,
        storage_nodes=1,
        group_coordinators=0,
        gateways=0,
        tls=True,
        config_overrides={
            "controller": {
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
            }
        },
    ) as started:
        with operator_admin(started) as admin:
            assert admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]) == {TOPIC: None}
        wait_until(
            lambda: _node_knows_topic(started),
            "the storage node to learn the topic from the controller over mTLS",
            TOPIC_READY_TIMEOUT_S,
        )
        yield started


def _node_knows_topic(cluster: LocalCluster) -> bool:
    with sync_channel(
        cluster.grpc_address(NODE), security=cluster_tls(cluster).admin_security()
    ) as ch:
        stub = storage_pb2_grpc.StorageServiceStub(ch)  # type: ignore[no-untyped-call]
        response = stub.GetMetadata(
            storage_pb2.GetMetadataRequest(topics=[TOPIC]), timeout=RPC_TIMEOUT_S
        )
    return any(t.name == TOPIC and len(t.partitions) == PARTITIONS for t in response.topics)


def _end_offsets(cluster: LocalCluster) -> dict[TopicPartition, int]:
    with Consumer(operator_settings(cluster, NODE)) as consumer:
        return consumer.end_offsets(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=RPC_TIMEOUT_S
        )


def _security_of(keystore: Path, truststore: Path) -> ChannelSecurity:
    material = TlsFiles(keystore, truststore).material()
    return ChannelSecurity(
        tls=True, ca_pem=material.ca_pem, key_pem=material.key_pem, chain_pem=material.chain_pem
    )


def _produce_status(cluster: LocalCluster, security: ChannelSecurity) -> grpc.StatusCode:
    """The status of a GetMetadata call to the node with ``security`` (OK when let in)."""
    with sync_channel(cluster.grpc_address(NODE), security=security) as channel:
        stub = storage_pb2_grpc.StorageServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.GetMetadata(storage_pb2.GetMetadataRequest(), timeout=REFUSED_TIMEOUT_S)
        except grpc.RpcError as error:
            assert isinstance(error, grpc.Call)
            code: grpc.StatusCode = error.code()
            return code
    return grpc.StatusCode.OK


def test_the_sdk_produces_and_consumes_over_mutual_tls(cluster: LocalCluster) -> None:
    before = _end_offsets(cluster)
    sent = {(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(RECORDS)}
    with Producer({**operator_settings(cluster, NODE), "linger.ms": 5}) as producer:
        futures = [producer.send(TOPIC, value=value, key=key) for key, value in sent]
        producer.flush(CONSUME_TIMEOUT_S)
        assert all(future.result(0).offset >= 0 for future in futures)
    received: list[tuple[bytes | None, bytes | None]] = []

    def all_received() -> bool:
        received.extend((r.key, r.value) for r in consumer.poll(0.5))
        return len(received) >= RECORDS

    with Consumer(operator_settings(cluster, NODE)) as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        for partition, offset in before.items():
            consumer.seek(partition, offset)
        wait_until(all_received, f"{RECORDS} records back over mTLS", CONSUME_TIMEOUT_S)
    assert sorted(received) == sorted(sent)  # each one, once


def test_a_client_without_a_certificate_is_refused_and_writes_nothing(
    cluster: LocalCluster,
) -> None:
    before = _end_offsets(cluster)
    ca_only = ChannelSecurity(tls=True, ca_pem=cluster_tls(cluster).truststore.read_bytes())
    assert _produce_status(cluster, ca_only) is grpc.StatusCode.UNAVAILABLE
    assert _produce_status(cluster, ChannelSecurity()) is grpc.StatusCode.UNAVAILABLE
    settings = {
        "bootstrap.servers": cluster.grpc_address(NODE),
        "security.protocol": "SSL",
        "ssl.ca.location": str(cluster_tls(cluster).truststore),
        "max.block.ms": 2000,
        "delivery.timeout.ms": 3000,
        "request.timeout.ms": 1000,
        "linger.ms": 0,
    }
    # No handshake, so no metadata: the send gives up after max.block.ms.
    with pytest.raises(BrookClientError):
        with Producer(settings) as producer:
            producer.send(TOPIC, value=b"must not land").result(5)
    assert _end_offsets(cluster) == before


def test_a_certificate_of_another_ca_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    foreign = CertificateAuthority.create("someone else's CA")
    keystore = foreign.issue(tmp_path / "intruder.pem", "admin")
    # It trusts the cluster's CA (the server is genuine); the server does not trust its CA.
    security = _security_of(keystore, cluster_tls(cluster).truststore)
    assert _produce_status(cluster, security) is grpc.StatusCode.UNAVAILABLE


def test_an_expired_certificate_is_refused(cluster: LocalCluster, tmp_path: Path) -> None:
    tls = cluster_tls(cluster)
    authority = CertificateAuthority.load(tls.folder / "ca.key", tls.truststore)
    expired = authority.issue(
        tmp_path / "expired.pem",
        "admin",
        (),
        not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2),
        validity=datetime.timedelta(days=1),
    )
    assert _produce_status(cluster, _security_of(expired, tls.truststore)) is (
        grpc.StatusCode.UNAVAILABLE
    )
    fresh = authority.issue(tmp_path / "fresh.pem", "admin", ())
    assert _produce_status(cluster, _security_of(fresh, tls.truststore)) is grpc.StatusCode.OK


def _served_certificate(cluster: LocalCluster) -> x509.Certificate:
    """The certificate the node's GRPC listener presents to a new connection."""
    tls = cluster_tls(cluster)
    context = ssl.create_default_context(cafile=str(tls.truststore))
    context.load_cert_chain(tls.admin_keystore)
    context.set_alpn_protocols(["h2"])
    host, port = cluster.grpc_address(NODE).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=RPC_TIMEOUT_S) as raw:
        with context.wrap_socket(raw, server_hostname=host) as connection:
            der = connection.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_a_renewed_server_certificate_is_served_without_a_restart(
    cluster: LocalCluster,
) -> None:
    tls = cluster_tls(cluster)
    pid = cluster.pid(NODE)
    old = _served_certificate(cluster)
    authority = CertificateAuthority.load(tls.folder / "ca.key", tls.truststore)
    # Renewed as operators do: the new file written beside the old one, then renamed over
    # it. Every process of the cluster shares the keystore; the node's listener is observed.
    renewed = authority.issue(tls.folder / "renewed.pem", "brook", ("127.0.0.1", "localhost"))
    os.replace(renewed, tls.keystore)
    new = _served_certificate(cluster)
    assert new.serial_number != old.serial_number
    assert (
        new.serial_number
        == x509.load_pem_x509_certificates(tls.keystore.read_bytes())[0].serial_number
    )
    assert cluster.pid(NODE) == pid
    assert _produce_status(cluster, tls.admin_security()) is grpc.StatusCode.OK
