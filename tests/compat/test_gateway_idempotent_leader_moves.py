"""An idempotent librdkafka producer through the gateway while leadership moves back and
forth: no epoch bump, and every acknowledged record exactly once, in order (issue #13).

A Kafka broker serves a connection's requests one at a time, so when leadership moves away
every batch the client pipelined for the partition is refused alike. The gateway used to
route each request by the metadata of the moment: the batch after a refused one reached the
new leader as a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER), librdkafka bumped its producer
epoch and sent its unacknowledged batches again under new sequence numbers, duplicating any
whose append had happened but whose answer was lost (the nemesis found one). librdkafka's
idempotence log ("eos") says when it bumps; a clean leader move must cause none.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Final

import pytest
from cluster_fixture import ClusterFactory, wait_until
from replica_logs import read_to_high_watermarks

from brook.client.admin import Admin, NewTopic
from brook.launcher import Role

pytestmark = pytest.mark.integration

TOPIC: Final = "moves"
PARTITIONS: Final = 3
MOVES: Final = 3
WAIT_TIMEOUT_S: Final = 60.0
PAUSE_BETWEEN_SENDS_S: Final = 0.002
MESSAGE_TIMEOUT_MS: Final = 60_000


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _transient(error: Any) -> bool:
    """A connection to a broker failed (and will be retried): not an error of the producer."""
    from confluent_kafka import KafkaError

    return not error.fatal() and error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
    )


def _leaders(admin: Admin) -> dict[int, int | None]:
    return {p.partition: p.leader for p in admin.describe_topics([TOPIC])[TOPIC].partitions}


def _full(admin: Admin) -> bool:
    partitions = admin.describe_topics([TOPIC])[TOPIC].partitions
    return all(p.leader is not None and len(p.isr) == len(p.replicas) for p in partitions)


def test_leader_moves_make_an_idempotent_librdkafka_producer_bump_no_epoch_and_write_once(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    cluster = cluster_factory(
        controllers=3,
        storage_nodes=3,
        group_coordinators=0,
        gateways=1,
        config_overrides={"controller": {"auto.leader.rebalance.enable": "false"}},
    )
    eos = _Lines()
    client_errors: list[str] = []
    # A stopped node's port refuses connections until it is back, as a stopped Kafka broker's
    # does: librdkafka reports that through error_cb too, and retries.
    transport_errors: list[str] = []
    logger = logging.getLogger(f"librdkafka.{tmp_path.name}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(eos)
    settings: dict[str, Any] = {
        "bootstrap.servers": cluster.kafka_bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": MESSAGE_TIMEOUT_MS,
        "debug": "eos",
        "logger": logger,
        "error_cb": lambda error: (transport_errors if _transient(error) else client_errors).append(
            str(error)
        ),
    }
    if os.environ.get("BROOK_TEST_RDKAFKA_DEBUG"):
        # For diagnosis: librdkafka's own log on stderr, every line even after a fatal error.
        settings["debug"] = os.environ["BROOK_TEST_RDKAFKA_DEBUG"]
        del settings["logger"]
    producer = Producer(settings)
    acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    failures: list[str] = []
    sent = [0] * PARTITIONS

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))
        else:
            acked[message.partition()].append((message.offset(), int(message.value())))

    stop = threading.Event()

    def produce() -> None:
        turn = 0
        while not stop.is_set():
            partition = turn % PARTITIONS
            turn += 1
            try:
                producer.produce(
                    TOPIC, str(sent[partition]).encode(), partition=partition, on_delivery=delivered
                )
            except Exception as error:  # a fatal producer error: record it and stop
                client_errors.append(f"produce: {error}")
                producer.poll(1.0)  # serves the error callback and the last log lines
                return
            sent[partition] += 1
            producer.poll(0)
            time.sleep(PAUSE_BETWEEN_SENDS_S)

    nodes = cluster.names(Role.STORAGE_NODE)
    with Admin(cluster.controller_bootstrap_servers) as admin:
        assert admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]) == {TOPIC: None}
        wait_until(lambda: _full(admin), "leaders and full ISRs", WAIT_TIMEOUT_S)
        thread = threading.Thread(target=produce, name="producer", daemon=True)
        thread.start()
        try:
            for move in range(MOVES):
                victim = nodes[move % len(nodes)]
                victim_id = cluster.spec(victim).node_id
                marks = sum(map(len, acked.values()))
                # A controlled shutdown moves its leaderships away; back up, a preferred
                # election moves them back: two clean moves per round.
                cluster.stop(victim)
                wait_until(
                    lambda v=victim_id: v not in _leaders(admin).values(),  # type: ignore[misc]
                    "leaderships to leave the stopped node",
                    WAIT_TIMEOUT_S,
                )
                cluster_factory.start(cluster, victim)
                wait_until(lambda: _full(admin), "the node back in every ISR", WAIT_TIMEOUT_S)
                admin.elect_leaders()
                wait_until(
                    lambda v=victim_id: v in _leaders(admin).values(),  # type: ignore[misc]
                    "a preferred-leader election to move leadership back",
                    WAIT_TIMEOUT_S,
                )
                wait_until(
                    lambda m=marks: sum(map(len, acked.values())) > m + 100,  # type: ignore[misc]
                    "acknowledgements after the moves",
                    WAIT_TIMEOUT_S,
                )
        finally:
            stop.set()
            thread.join(WAIT_TIMEOUT_S)
            (tmp_path / "librdkafka-eos.log").write_text(
                "\n".join([*eos.lines, *transport_errors, *client_errors])
            )
        assert not client_errors, client_errors
        assert producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 5) == 0
    logger.removeHandler(eos)

    print(f"\n{sum(sent)} sent, {sum(map(len, acked.values()))} acknowledged, {MOVES} rounds")
    bumps = [line for line in eos.lines if "bump" in line.lower()]
    assert not bumps, bumps[:5]
    assert not failures, failures[:5]
    _, records = read_to_high_watermarks(
        cluster.bootstrap_servers(Role.STORAGE_NODE), TOPIC, range(PARTITIONS), WAIT_TIMEOUT_S
    )
    found = {p: [(r.offset, int(r.value or b"")) for r in records[p]] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        numbers = [n for _, n in found[p]]
        assert numbers == list(range(len(numbers))), f"partition {p}: duplicated or reordered"
        assert sorted(acked[p]) == [pair for pair in found[p] if pair in set(acked[p])]
        assert set(acked[p]) <= set(found[p]), f"partition {p}: acknowledged records lost"
