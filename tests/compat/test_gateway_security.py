"""The gateway's front door with real clients (issue #21): confluent-kafka and kcat over
SASL_SSL with SCRAM-SHA-512, confluent-kafka over SSL with and without a client certificate,
kafkajs with SASL PLAIN over TLS; and what must be refused (a wrong password, an unknown user,
a plaintext client on a TLS listener, an expired or foreign client certificate) refused with
the right error and nothing written.

One cluster (a controller that takes SCRAM users from the tests, security_support.py; a
storage node; a group coordinator) and one gateway process with the four Kafka listeners and
per-broker ports on each: every client is shown the broker at its own listener's port.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.frames import encode_request
from brook_gateway.protocol.kafka_messages import ApiKey
from cluster_fixture import shared_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from node_scripts import run_node_json
from sasl_client import KafkaConnection, ScramClient, authenticate, plain_token
from security_support import (
    SecureGateway,
    TlsFiles,
    create_user,
    make_tls_files,
    secure_gateway,
)
from test_gateway_fuzz import KafkaGateways
from test_kafka_clients import (
    PARTITIONS,
    RECORDS,
    check_round_trip,
    confluent_produce,
    confluent_read_back,
    create_topic_confluent,
)
from test_kcat import _by_position, _consume_from_beginning, _produce

from brook.errors import ErrorCode
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

ALICE: Final = ("alice", "alice-secret")  # SCRAM-SHA-512 and SCRAM-SHA-256
BOB: Final = ("bob", "bob-secret")  # SCRAM-SHA-256 only
NODE_TIMEOUT_S: Final = 90.0
REFUSED_TIMEOUT_MS: Final = 5000
KAFKAJS_SCRIPT: Final = Path(__file__).with_name("kafkajs_sasl_client.mjs")
# The SCRAM-SHA-512 failure message Kafka sends, word for word.
SCRAM_512_FAILED: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-512"
)


@dataclass(frozen=True)
class Secured:
    cluster: LocalCluster
    gateway: SecureGateway
    tls: TlsFiles

    def sasl_ssl(
        self, name: str, password: str, mechanism: str = "SCRAM-SHA-512"
    ) -> dict[str, Any]:
        """confluent-kafka settings for the SASL_SSL listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": name,
            "sasl.password": password,
            "ssl.ca.location": str(self.tls.truststore),
        }

    def tls_context(self, keystore: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.tls.truststore))
        if keystore is not None:
            context.load_cert_chain(str(keystore))
        return context


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tls = make_tls_files(tmp_path_factory.mktemp("tls"))
    with shared_cluster(
        tmp_path_factory,
        "security",
        controllers=1,
        storage_nodes=1,
        group_coordinators=1,
        gateways=0,
        config_overrides={
            "controller": {
                "offsets.topic.num.partitions": "1",
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
            },
            "group-coordinator": {"group.initial.rebalance.delay.ms": "0"},
        },
    ) as cluster:
        # Before the gateway starts: its first metadata (which it waits for) has them.
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            create_user(cluster, *ALICE, mechanism)
        create_user(cluster, *BOB, "SCRAM-SHA-256")
        with secure_gateway(cluster, tmp_path_factory.mktemp("gateway"), tls) as gateway:
            yield Secured(cluster, gateway, tls)


def _high_watermarks(secured: Secured, topic: str) -> list[int]:
    """Each partition's high watermark, read by an authenticated client."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": secured.gateway.bootstrap("SASL_SSL"),
            "group.id": f"{topic}-watermarks",
            **secured.sasl_ssl(*ALICE),
        }
    )
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _new_topic(secured: Secured, topic: str) -> tuple[str, dict[str, Any]]:
    """Creates ``topic`` as alice over SASL_SSL: that listener's bootstrap and settings."""
    bootstrap = secured.gateway.bootstrap("SASL_SSL")
    config = secured.sasl_ssl(*ALICE)
    create_topic_confluent(bootstrap, topic, config)
    return bootstrap, config


def _kcat_options(config: dict[str, Any]) -> list[str]:
    return [arg for key, value in config.items() for arg in ("-X", f"{key}={value}")]


def _refused_producer(bootstrap: str, topic: str, config: dict[str, Any]) -> list[Any]:
    """Produces one record with ``config``, which the gateway must refuse: the errors
    librdkafka reported (error_cb and delivery), after checking that nothing was delivered."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    delivered: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": REFUSED_TIMEOUT_MS,
            "error_cb": errors.append,
            **config,
        }
    )
    producer.produce(
        topic, b"must not be written", on_delivery=lambda e, m: delivered.append((e, m))
    )
    producer.flush(REFUSED_TIMEOUT_MS / 1000 + 5)
    assert delivered and all(error is not None for error, _ in delivered), delivered
    return [*errors, *(error for error, _ in delivered)]


def test_confluent_kafka_over_sasl_ssl_with_scram_sha_512_produces_and_consumes_every_record(
    secured: Secured,
) -> None:
    topic = "sasl-ssl-confluent"
    bootstrap, config = _new_topic(secured, topic)
    offsets = confluent_produce(bootstrap, topic, {"acks": "all", **config})
    assert sorted(offsets) == sorted(i // PARTITIONS for i in range(RECORDS))
    check_round_trip(topic, confluent_read_back(bootstrap, topic, config))


def test_metadata_shows_each_client_the_broker_on_its_own_listener(secured: Secured) -> None:
    from confluent_kafka.admin import AdminClient

    tls = {"ssl.ca.location": str(secured.tls.truststore)}
    settings = {
        "PLAINTEXT": {},
        "SSL": {"security.protocol": "SSL", **tls},
        "SASL_PLAINTEXT": {k: v for k, v in secured.sasl_ssl(*ALICE).items() if "ssl" not in k}
        | {"security.protocol": "SASL_PLAINTEXT"},
        "SASL_SSL": secured.sasl_ssl(*ALICE),
    }
    for listener, config in settings.items():
        admin = AdminClient({"bootstrap.servers": secured.gateway.bootstrap(listener), **config})
        brokers = admin.list_topics(timeout=20).brokers
        shown = {node_id: (str(b.host), b.port) for node_id, b in brokers.items()}
        assert shown == {1: ("127.0.0.1", secured.gateway.node_ports[listener])}, listener


def test_kcat_over_sasl_ssl_with_scram_sha_512_produces_and_consumes_every_record(
    secured: Secured,
) -> None:
    topic = "sasl-ssl-kcat"
    bootstrap, config = _new_topic(secured, topic)
    options = _kcat_options(config)
    gateway = KafkaGateways(bootstrap, ("127.0.0.1", secured.gateway.ports["SASL_SSL"]), {})
    expected = _produce(gateway, topic, *options)
    assert _by_position(_consume_from_beginning(gateway, topic, *options)) == expected


def test_kcat_over_ssl_with_a_client_certificate_produces_and_consumes_every_record(
    secured: Secured,
) -> None:
    topic = "ssl-kcat"
    bootstrap = secured.gateway.bootstrap("SSL")
    config = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(secured.tls.truststore),
        "ssl.certificate.location": str(secured.tls.client_keystore),
        "ssl.key.location": str(secured.tls.client_keystore),
    }
    create_topic_confluent(bootstrap, topic, config)
    options = _kcat_options(config)
    gateway = KafkaGateways(bootstrap, ("127.0.0.1", secured.gateway.ports["SSL"]), {})
    expected = _produce(gateway, topic, *options)
    assert _by_position(_consume_from_beginning(gateway, topic, *options)) == expected


def test_confluent_kafka_over_ssl_with_and_without_a_client_certificate(secured: Secured) -> None:
    bootstrap = secured.gateway.bootstrap("SSL")
    without = {"security.protocol": "SSL", "ssl.ca.location": str(secured.tls.truststore)}
    with_certificate = {
        **without,
        "ssl.certificate.location": str(secured.tls.client_keystore),
        "ssl.key.location": str(secured.tls.client_keystore),
    }
    for topic, config in (("ssl-anonymous", without), ("ssl-certificate", with_certificate)):
        create_topic_confluent(bootstrap, topic, config)
        confluent_produce(bootstrap, topic, {"acks": "all", **config})
        check_round_trip(topic, confluent_read_back(bootstrap, topic, config))


def test_kafkajs_with_sasl_plain_over_tls_produces_and_consumes(secured: Secured) -> None:
    topic = "kafkajs-sasl-plain"
    result = run_node_json(
        KAFKAJS_SCRIPT,
        [secured.gateway.bootstrap("SASL_SSL"), str(secured.tls.truststore), *BOB, topic, "20"],
        packages=["kafkajs"],
        timeout_s=NODE_TIMEOUT_S,
    )
    assert "error" not in result, result
    assert result["received"] == result["sent"]
    assert len(result["sent"]) == 20


def test_kafkajs_with_a_wrong_password_is_refused(secured: Secured) -> None:
    result = run_node_json(
        KAFKAJS_SCRIPT,
        [
            secured.gateway.bootstrap("SASL_SSL"),
            str(secured.tls.truststore),
            "bob",
            "not-bob's",
            "kafkajs-refused",
            "1",
        ],
        packages=["kafkajs"],
        timeout_s=NODE_TIMEOUT_S,
    )
    assert result["error"] == "KafkaJSSASLAuthenticationError", result
    assert "Invalid username or password" in result["message"]


@pytest.mark.parametrize(
    ("name", "password"), [("alice", "wrong-password"), ("nobody", "alice-secret")]
)
def test_a_wrong_password_or_unknown_user_is_refused_and_nothing_is_written(
    secured: Secured, name: str, password: str
) -> None:
    topic = f"refused-{name}"
    bootstrap = secured.gateway.bootstrap("SASL_SSL")
    _new_topic(secured, topic)
    errors = _refused_producer(bootstrap, topic, secured.sasl_ssl(name, password))
    assert any(SCRAM_512_FAILED in str(error) for error in errors), errors
    # The exact answer: SASL_AUTHENTICATION_FAILED with Kafka's message, then the close; the
    # same for both, so a user's existence does not show.
    address = ("127.0.0.1", secured.gateway.ports["SASL_PLAINTEXT"])
    with KafkaConnection(address) as connection:
        answer = authenticate(connection, "SCRAM-SHA-512", name, password)
        assert answer is not None
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer["error_message"] == SCRAM_512_FAILED
        assert connection.closed_by_peer()
    with KafkaConnection(address) as connection:
        answer = authenticate(connection, "PLAIN", name, password)
        assert answer is not None
        assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert connection.closed_by_peer()
    assert _high_watermarks(secured, topic) == [0] * PARTITIONS


def test_a_plaintext_client_on_a_tls_listener_is_refused_and_nothing_is_written(
    secured: Secured,
) -> None:
    topic = "refused-plaintext"
    create_topic_confluent(secured.gateway.bootstrap("SASL_SSL"), topic, secured.sasl_ssl(*ALICE))
    for listener in ("SSL", "SASL_SSL"):
        _refused_producer(secured.gateway.bootstrap(listener), topic, {})
        # No Kafka answer comes back to a Kafka request in the clear.
        with KafkaConnection(("127.0.0.1", secured.gateway.ports[listener])) as connection:
            assert connection.request(ApiKey.API_VERSIONS, 0, {}) is None
    assert _high_watermarks(secured, topic) == [0] * PARTITIONS


@pytest.mark.parametrize("keystore", ["expired_keystore", "foreign_keystore"])
def test_an_expired_or_foreign_client_certificate_is_refused_and_nothing_is_written(
    secured: Secured, keystore: str
) -> None:
    topic = f"refused-{keystore}"
    create_topic_confluent(secured.gateway.bootstrap("SASL_SSL"), topic, secured.sasl_ssl(*ALICE))
    path = str(getattr(secured.tls, keystore))
    config = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(secured.tls.truststore),
        "ssl.certificate.location": path,
        "ssl.key.location": path,
    }
    errors = _refused_producer(secured.gateway.bootstrap("SSL"), topic, config)
    assert errors
    # The TLS handshake itself fails: the gateway does not accept the certificate.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        context = secured.tls_context(getattr(secured.tls, keystore))
        with KafkaConnection(("127.0.0.1", secured.gateway.ports["SSL"]), context) as connection:
            assert connection.request(ApiKey.API_VERSIONS, 0, {}) is None
            raise ConnectionResetError("closed after the handshake")
    assert _high_watermarks(secured, topic) == [0] * PARTITIONS


def test_before_authentication_only_the_sasl_exchange_is_served(secured: Secured) -> None:
    address = ("127.0.0.1", secured.gateway.ports["SASL_PLAINTEXT"])
    with KafkaConnection(address) as connection:
        versions = connection.request(ApiKey.API_VERSIONS, 0, {})
        assert versions is not None and versions["error_code"] == 0
        # Anything else closes the connection, as Kafka does.
        assert connection.request(ApiKey.METADATA, 1, {"topics": None}) is None
    with KafkaConnection(address) as connection:
        answer = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer is not None
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert connection.closed_by_peer()
    # A listener without SASL: SaslHandshake is ILLEGAL_SASL_STATE.
    with KafkaConnection(("127.0.0.1", secured.gateway.ports["PLAINTEXT"])) as connection:
        answer = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert answer is not None and answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE


def test_sasl_serves_requests_after_authenticating_in_either_framing(secured: Secured) -> None:
    address = ("127.0.0.1", secured.gateway.ports["SASL_PLAINTEXT"])
    with KafkaConnection(address) as connection:
        answer = authenticate(connection, "SCRAM-SHA-256", *ALICE)
        assert answer is not None and answer["error_code"] == 0
        metadata = connection.request(ApiKey.METADATA, 1, {"topics": None})
        assert metadata is not None and [b["node_id"] for b in metadata["brokers"]] == [1]
        again = connection.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert again is not None and again["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    # SaslHandshake v0, then raw tokens (clients before Kafka 1.0).
    with KafkaConnection(address) as connection:
        answer = connection.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"})
        assert answer is not None and answer["error_code"] == 0
        client = ScramClient("SCRAM-SHA-512", *ALICE)
        connection.send_frame(client.first())
        server_first = connection.read_frame()
        assert server_first is not None
        connection.send_frame(client.final(server_first))
        server_final = connection.read_frame()
        assert server_final is not None and client.server_verified(server_final)
        metadata = connection.request(ApiKey.METADATA, 1, {"topics": None})
        assert metadata is not None
    with KafkaConnection(address) as connection:
        connection.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        connection.send_frame(plain_token("bob", "bob-secret"))
        assert connection.read_frame() == b""  # PLAIN's empty answer, as Kafka sends it


def test_kcat_with_a_wrong_password_fails(secured: Secured) -> None:
    options = _kcat_options(secured.sasl_ssl("alice", "wrong-password"))
    done = subprocess.run(
        ["kcat", "-b", secured.gateway.bootstrap("SASL_SSL"), "-L", *options, "-m", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Authentication failed" in done.stderr, done.stderr


# -- hostile bytes at the TLS and SASL listeners

FUZZ_EXAMPLES: Final = 300
# Every example ends (the gateway answers what it can, then closes) within this.
FUZZ_EXAMPLE_TIMEOUT_S: Final = 10.0


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _client_hello() -> bytes:
    """The first flight of a real TLS client: its ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


CLIENT_HELLO: Final = _client_hello()
_SCRAM_FIRST: Final = ScramClient("SCRAM-SHA-512", "alice", "x", nonce="fuzz").first()


def _request(api_key: ApiKey, version: int, body: Message) -> bytes:
    return encode_request(api_key, version, 1, "fuzz", body)


def _handshake(mechanism: str, version: int = 1) -> bytes:
    return _request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


@st.composite
def _sasl_payloads(draw: st.DrawFn) -> bytes:
    """What a hostile client sends on a SASL listener: random bytes, handshakes for random
    mechanisms, random or mutated tokens after a valid handshake (framed or raw), SCRAM
    exchanges broken at the second step, oversized frames; possibly cut anywhere."""
    mechanism = draw(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]))
    token = draw(
        st.one_of(
            st.binary(max_size=300),
            st.builds(
                lambda data, at: data[:at] + bytes([data[at % len(data)] ^ 0x41]) + data[at + 1 :],
                st.just(_SCRAM_FIRST),
                st.integers(0, len(_SCRAM_FIRST) - 1),
            ),
        )
    )
    authenticate = _request(
        ApiKey.SASL_AUTHENTICATE, draw(st.integers(0, 1)), {"auth_bytes": token}
    )
    payload = draw(
        st.sampled_from(
            [
                draw(st.binary(max_size=200)),
                _handshake(draw(st.text(max_size=40)), draw(st.integers(0, 1))),
                _handshake(mechanism) + authenticate,
                _handshake(mechanism, 0) + _frame(token),
                _handshake("SCRAM-SHA-512")
                + _request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": _SCRAM_FIRST})
                + _request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token}),
                _handshake(mechanism)
                + authenticate
                + _request(ApiKey.METADATA, 1, {"topics": None}),
                (100_000).to_bytes(4, "big") + token,
                _request(ApiKey.METADATA, 1, {"topics": None}),
            ]
        )
    )
    cut = draw(st.integers(0, len(payload)))
    return payload[: cut if draw(st.booleans()) else len(payload)]


@st.composite
def _tls_payloads(draw: st.DrawFn) -> bytes:
    """What a hostile client sends on a TLS listener: random bytes, a real ClientHello cut
    short or with a byte changed, a Kafka request in the clear."""
    at = draw(st.integers(0, len(CLIENT_HELLO) - 1))
    return draw(
        st.sampled_from(
            [
                draw(st.binary(max_size=400)),
                CLIENT_HELLO[:at],
                CLIENT_HELLO[:at] + bytes([CLIENT_HELLO[at] ^ 0xFF]) + CLIENT_HELLO[at + 1 :],
                _handshake("PLAIN"),
            ]
        )
    )


def _send_and_wait_for_close(sock: socket.socket, payload: bytes) -> None:
    """Sends ``payload``, half-closes, and reads until the gateway closes: it must within
    FUZZ_EXAMPLE_TIMEOUT_S."""
    sock.settimeout(FUZZ_EXAMPLE_TIMEOUT_S)
    with contextlib.suppress(ConnectionResetError, BrokenPipeError, ssl.SSLError):
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + FUZZ_EXAMPLE_TIMEOUT_S
        while sock.recv(4096):
            assert time.monotonic() < deadline, "the gateway kept the connection open"


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    target=st.one_of(
        st.tuples(st.just("SASL_PLAINTEXT"), _sasl_payloads()),
        st.tuples(st.just("SASL_SSL"), _sasl_payloads()),
        st.tuples(st.sampled_from(["SSL", "SASL_SSL"]), _tls_payloads()),
    )
)
def test_hostile_bytes_at_the_tls_and_sasl_listeners_close_only_their_connection(
    secured: Secured, target: tuple[str, bytes]
) -> None:
    listener, payload = target
    address = ("127.0.0.1", secured.gateway.ports[listener])
    sock = socket.create_connection(address, timeout=FUZZ_EXAMPLE_TIMEOUT_S)
    try:
        if listener == "SASL_SSL" and not payload.startswith(CLIENT_HELLO[:3]):
            # SASL garbage inside a real TLS session.
            sock = secured.tls_context().wrap_socket(sock, server_hostname="127.0.0.1")
        _send_and_wait_for_close(sock, payload)
    finally:
        sock.close()
    assert secured.gateway.alive(), secured.gateway.log.read_text()[-4000:]


def test_after_the_fuzzing_a_good_client_is_still_served(secured: Secured) -> None:
    # Runs after the fuzz test (file order), on the same gateway process.
    assert secured.gateway.alive()
    topic = "after-fuzzing"
    bootstrap, config = _new_topic(secured, topic)
    confluent_produce(bootstrap, topic, {"acks": "all", **config})
    check_round_trip(topic, confluent_read_back(bootstrap, topic, config))
