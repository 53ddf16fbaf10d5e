"""One cooperative-sticky group member, as a process of its own so that a test can kill it
(no LeaveGroup: the coordinator must expire its session): librdkafka (confluent-kafka, through
the gateways) or Brook's SDK consumer (gRPC to the storage nodes and coordinators).

    python cooperative_member.py CLIENT BOOTSTRAP TOPIC GROUP NAME SESSION_MS HEARTBEAT_MS

CLIENT is ``librdkafka`` or ``sdk``. The member consumes, and after each batch commits
(synchronously) the next offset of every owned partition it read from; its revocation callback
commits the revoked partitions first, so what it gives up is committed before anyone else gets
it. It prints one JSON line per event on stdout, each with ``t`` (time.monotonic(), comparable
across processes on one machine): ``assign``/``revoke``/``lost`` (``partitions``: the
incremental set the client passed, ``t`` when the callback started for assign and when it
ended for revoke and lost), ``records`` (``partition``, ``offsets``), ``commit`` (``offsets``:
partition → committed offset, after the coordinator acknowledged it), ``commit_failed``,
``error``, ``closed``.

It reads commands from stdin, one a line: ``unsubscribe``, ``subscribe``, ``close`` (close
now: the client revokes what the member owns and sends LeaveGroup), ``close-after-revoke``
(close right after the next revocation, while the group's cooperative round is under way).
End of input closes too.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

CONSUME_BATCH_MAX = 500
CONSUME_WAIT_S = 0.1
# A member gives up after this long; the test ends well before.
LIFETIME_S_MAX = 600.0


PartitionsCallback = Callable[[list[int]], None]


@dataclass(frozen=True)
class Member:
    """The member's settings (both clients take Kafka's names) and callbacks."""

    topic: str
    settings: dict[str, object]
    on_assign: PartitionsCallback
    on_revoke: PartitionsCallback
    on_lost: PartitionsCallback


class Client(Protocol):
    """What the member needs of a consumer, for either client."""

    def subscribe(self) -> None: ...

    def unsubscribe(self) -> None: ...

    def poll(self) -> list[tuple[int, int]]:
        """(partition, offset) of the records of one poll."""
        ...

    def commit(self, offsets: dict[int, int]) -> None:
        """Commits synchronously; raises when the coordinator refused."""
        ...

    def close(self) -> None: ...


class Librdkafka:
    def __init__(self, member: Member) -> None:
        from confluent_kafka import Consumer

        self._topic = member.topic
        self._consumer = Consumer(member.settings)
        self._callbacks = {
            "on_assign": lambda _, tps: member.on_assign([tp.partition for tp in tps]),
            "on_revoke": lambda _, tps: member.on_revoke([tp.partition for tp in tps]),
            "on_lost": lambda _, tps: member.on_lost([tp.partition for tp in tps]),
        }

    def subscribe(self) -> None:
        self._consumer.subscribe([self._topic], **self._callbacks)

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def poll(self) -> list[tuple[int, int]]:
        out = []
        for message in self._consumer.consume(CONSUME_BATCH_MAX, CONSUME_WAIT_S):
            if message.error() is not None:
                raise RuntimeError(str(message.error()))
            out.append((message.partition(), message.offset()))
        return out

    def commit(self, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        answer = self._consumer.commit(
            offsets=[TopicPartition(self._topic, p, o) for p, o in sorted(offsets.items())],
            asynchronous=False,
        )
        failed = [tp for tp in answer or [] if tp.error is not None]
        if failed:
            raise RuntimeError(str(failed[0].error))

    def close(self) -> None:
        self._consumer.close()


class Sdk:
    def __init__(self, member: Member) -> None:
        from brook.client import Consumer

        # The SDK has no on_lost: it reports lost partitions through on_revoke.
        self._topic = member.topic
        self._consumer = Consumer({**member.settings, "max.poll.records": CONSUME_BATCH_MAX})
        self._on_assign = member.on_assign
        self._on_revoke = member.on_revoke
        self._subscribed = False

    def subscribe(self) -> None:
        self._subscribed = True
        self._consumer.subscribe(
            [self._topic],
            on_assign=lambda tps: self._on_assign([tp.partition for tp in tps]),
            on_revoke=lambda tps: self._on_revoke([tp.partition for tp in tps]),
        )

    def unsubscribe(self) -> None:
        self._subscribed = False
        self._consumer.unsubscribe()

    def poll(self) -> list[tuple[int, int]]:
        if not self._subscribed:
            return []  # the SDK refuses to poll with nothing assigned
        return [(r.partition, r.offset) for r in self._consumer.poll(CONSUME_WAIT_S)]

    def commit(self, offsets: dict[int, int]) -> None:
        from brook.client import TopicPartition

        self._consumer.commit({TopicPartition(self._topic, p): o for p, o in offsets.items()})

    def close(self) -> None:
        self._consumer.close()


CLIENTS: dict[str, Callable[[Member], Client]] = {"librdkafka": Librdkafka, "sdk": Sdk}


def main() -> None:
    kind, bootstrap, topic, group, name, session_ms, heartbeat_ms = sys.argv[1:8]
    out_lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        line = json.dumps({"t": time.monotonic(), "member": name, "ev": event, **fields})
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    commands: queue.Queue[str] = queue.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("close")

    threading.Thread(target=read_commands, daemon=True).start()

    owned: set[int] = set()
    # partition -> the next offset to read, as far as this member has processed it.
    processed: dict[int, int] = {}
    committed: dict[int, int] = {}
    close_after_revoke = False
    closing = False

    def commit(partitions: set[int]) -> None:
        due = {p: processed[p] for p in partitions if processed.get(p, -1) > committed.get(p, -1)}
        if not due:
            return
        try:
            client.commit(due)
        except Exception as error:
            emit("commit_failed", offsets=due, error=repr(error))
            return
        committed.update(due)
        emit("commit", offsets=due)

    def on_assign(partitions: list[int]) -> None:
        emit("assign", partitions=sorted(partitions))
        owned.update(partitions)

    def on_revoke(partitions: list[int]) -> None:
        nonlocal closing
        commit(set(partitions))
        owned.difference_update(partitions)
        emit("revoke", partitions=sorted(partitions))
        if close_after_revoke:
            closing = True

    def on_lost(partitions: list[int]) -> None:
        owned.difference_update(partitions)
        emit("lost", partitions=sorted(partitions))

    settings: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "partition.assignment.strategy": "cooperative-sticky",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": int(heartbeat_ms),
    }
    client = CLIENTS[kind](Member(topic, settings, on_assign, on_revoke, on_lost))
    client.subscribe()
    subscribed = True
    started = time.monotonic()
    try:
        while not closing and time.monotonic() - started < LIFETIME_S_MAX:
            try:
                # Unsubscribed, a poll returns at once (librdkafka's still serves callbacks):
                # wait for the next command first.
                command = commands.get(block=not subscribed, timeout=CONSUME_WAIT_S)
            except queue.Empty:
                command = ""
            if command == "close":
                break
            if command == "unsubscribe":
                client.unsubscribe()
                subscribed = False
            elif command == "subscribe":
                client.subscribe()
                subscribed = True
            elif command == "close-after-revoke":
                close_after_revoke = True
            try:
                records = client.poll()
            except Exception as error:
                emit("error", error=repr(error))
                continue
            for partition, offset in records:
                if partition not in owned:
                    emit("error", error=f"a record of partition {partition}, not owned")
                emit("records", partition=partition, offsets=[offset])
                processed[partition] = max(processed.get(partition, 0), offset + 1)
            commit(set(owned))
    finally:
        client.close()
        emit("closed")


if __name__ == "__main__":
    main()
