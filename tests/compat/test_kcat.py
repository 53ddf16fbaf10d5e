"""kcat (the Debian package, librdkafka inside) against a real Brook cluster through the
gateway: metadata listing, produce with keys and headers, consume from the beginning, each
compression codec, and a consumer group.

The compatibility suite's shared cluster (conftest.py: two storage nodes, two gateways) serves
every test; each works on a topic of its own. Records are read back with kcat's own consumer
and a format string, and checked exactly: partition, offset, key, headers and value. The
compression tests also read the stored batches through a raw Fetch to prove that kcat really
compressed them: an older librdkafka silently sends uncompressed batches when it dislikes
the advertised API versions, and the round trip alone would not notice.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pytest
from test_gateway_fuzz import KafkaGateways, create_topic, kafka_gateways, stored_batch_codecs

from brook.launcher import LocalCluster
from brook.record.batch import Compression

pytestmark = pytest.mark.integration

KCAT_TIMEOUT_S: Final = 60.0
REQUEST_TIMEOUT_S: Final = 20.0
PARTITIONS: Final = 2
RECORDS_PER_PARTITION: Final = 20
# partition, offset, key, headers, value; tabs never occur in what the tests produce.
CONSUME_FORMAT: Final = r"%p\t%o\t%k\t%h\t%s\n"


@pytest.fixture(scope="module")
def gateway(compat_cluster: LocalCluster) -> KafkaGateways:
    return kafka_gateways(compat_cluster)


def _kcat(gateway: KafkaGateways, *args: str, stdin: str | None = None) -> str:
    """kcat's stdout; fails the test with its stderr when it does not succeed in time."""
    assert shutil.which("kcat"), "kcat is not installed: run tools/install-dev"
    command = ["kcat", "-b", gateway.bootstrap, "-X", "socket.timeout.ms=20000", *args]
    try:
        done = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=KCAT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{command} ran longer than {KCAT_TIMEOUT_S} s; stderr: {e.stderr!r}")
    assert done.returncode == 0, f"{command} exited {done.returncode}: {done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str
    headers: str
    """kcat's %h: name=value pairs, comma-separated, in record order."""
    value: str


def _headers_of(partition: int) -> list[tuple[str, str]]:
    # A repeated name and an empty value: both must come back as sent, in order.
    return [("partition", str(partition)), ("trace", "a"), ("trace", "b"), ("empty", "")]


def _produce(gateway: KafkaGateways, topic: str, *options: str) -> list[Record]:
    """Produces RECORDS_PER_PARTITION keyed records with headers to every partition (one kcat
    run per partition, since -H applies to a whole run); returns what must be read back."""
    expected = []
    for partition in range(PARTITIONS):
        headers = _headers_of(partition)
        lines = []
        for i in range(RECORDS_PER_PARTITION):
            key = f"key-{partition}-{i}"
            # Compressible, so librdkafka keeps the compressed batch: it sends a batch that
            # did not shrink uncompressed.
            value = f"{topic} value {partition}.{i} " + "abc" * 40
            lines.append(f"{key}:{value}\n")
            expected.append(
                Record(partition, i, key, ",".join(f"{n}={v}" for n, v in headers), value)
            )
        header_args = [arg for n, v in headers for arg in ("-H", f"{n}={v}")]
        _kcat(
            gateway,
            "-P",
            "-t",
            topic,
            "-p",
            str(partition),
            "-K:",
            *header_args,
            *options,
            stdin="".join(lines),
        )
    return expected


def _parse(output: str) -> list[Record]:
    records = []
    for line in output.splitlines():
        partition, offset, key, headers, value = line.split("\t")
        records.append(Record(int(partition), int(offset), key, headers, value))
    return records


def _consume_from_beginning(gateway: KafkaGateways, topic: str, *options: str) -> list[Record]:
    output = _kcat(
        gateway, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", CONSUME_FORMAT, *options
    )
    return _parse(output)


def _by_position(records: Sequence[Record]) -> list[Record]:
    return sorted(records, key=lambda r: (r.partition, r.offset))


def test_kcat_metadata_list_shows_the_storage_nodes_as_brokers_at_their_gateways(
    gateway: KafkaGateways,
) -> None:
    topic = "kcat-metadata"
    create_topic(gateway.address, topic, PARTITIONS, REQUEST_TIMEOUT_S)
    listing = json.loads(_kcat(gateway, "-L", "-J", "-t", topic))
    brokers = {node_id: f"{host}:{port}" for node_id, (host, port) in gateway.brokers.items()}
    assert {b["id"]: b["name"] for b in listing["brokers"]} == brokers
    (described,) = listing["topics"]
    assert described["topic"] == topic
    partitions = sorted(described["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == list(range(PARTITIONS))
    for p in partitions:
        # Replication factor 1: the one replica leads, under its storage node's id.
        assert p["leader"] in brokers
        assert [r["id"] for r in p["replicas"]] == [p["leader"]]
        assert [r["id"] for r in p["isrs"]] == [p["leader"]]
    # The text listing users read names the same brokers and partitions.
    text = _kcat(gateway, "-L", "-t", topic)
    for node_id, name in brokers.items():
        assert f"broker {node_id} at {name}" in text
    for p in partitions:
        assert f"partition {p['partition']}, leader {p['leader']}," in text


def test_kcat_round_trips_keys_headers_values_and_offsets(gateway: KafkaGateways) -> None:
    topic = "kcat-round-trip"
    create_topic(gateway.address, topic, PARTITIONS, REQUEST_TIMEOUT_S)
    expected = _produce(gateway, topic)
    assert _by_position(_consume_from_beginning(gateway, topic)) == expected
    for partition in range(PARTITIONS):
        codecs = stored_batch_codecs(gateway.address, topic, partition, REQUEST_TIMEOUT_S)
        assert set(codecs) == {Compression.NONE}


@pytest.mark.parametrize(
    "codec",
    [Compression.LZ4, Compression.SNAPPY, Compression.GZIP, Compression.ZSTD],
    ids=lambda codec: codec.name.lower(),
)
def test_kcat_round_trips_records_compressed_with_each_codec(
    gateway: KafkaGateways, codec: Compression
) -> None:
    topic = f"kcat-{codec.name.lower()}"
    create_topic(gateway.address, topic, PARTITIONS, REQUEST_TIMEOUT_S)
    expected = _produce(
        gateway,
        topic,
        "-X",
        f"compression.codec={codec.name.lower()}",
        # Long enough for the whole run to make one batch per partition.
        "-X",
        "linger.ms=200",
    )
    assert _by_position(_consume_from_beginning(gateway, topic)) == expected
    for partition in range(PARTITIONS):
        codecs = stored_batch_codecs(gateway.address, topic, partition, REQUEST_TIMEOUT_S)
        assert set(codecs) == {codec}


def _consume_as_group(gateway: KafkaGateways, group: str, topic: str) -> list[Record]:
    """One run of kcat's balanced consumer: joins ``group``, reads to the end of every
    partition from the committed offsets (the beginning if none), commits and leaves."""
    output = _kcat(
        gateway,
        "-G",
        group,
        "-X",
        "auto.offset.reset=earliest",
        "-e",
        "-q",
        "-f",
        CONSUME_FORMAT,
        topic,
    )
    return _parse(output)


def test_kcat_consumer_group_reads_everything_once_and_resumes_from_its_commits(
    gateway: KafkaGateways,
) -> None:
    topic = "kcat-group"
    group = "kcat-group-readers"
    create_topic(gateway.address, topic, PARTITIONS, REQUEST_TIMEOUT_S)
    first = _produce(gateway, topic)
    assert _by_position(_consume_as_group(gateway, group, topic)) == first
    # The offsets committed on the way out are where the group's next run starts.
    second = [
        Record(r.partition, r.offset + RECORDS_PER_PARTITION, r.key, r.headers, r.value)
        for r in _produce(gateway, topic)
    ]
    assert _by_position(_consume_as_group(gateway, group, topic)) == second
