"""``NumberedSender``: numbered records (0, 1, 2, ...) sent to every partition of a topic from
a thread while a test breaks things, remembering which numbers were acknowledged. Reading the
partitions back then shows whether an acknowledged record was lost, duplicated or reordered.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from brook.client import Producer

SEND_TIMEOUT_S_DEFAULT: Final = 15.0
PAUSE_BETWEEN_SENDS_S_DEFAULT: Final = 0.01


class NumberedSender:
    """Sends 0, 1, 2, ... to every partition in a thread, one record per partition at a time;
    remembers what was acknowledged and what was sent at all."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        partitions: int,
        *,
        send_timeout_s: float = SEND_TIMEOUT_S_DEFAULT,
        pause_s: float = PAUSE_BETWEEN_SENDS_S_DEFAULT,
        value_bytes: int = 0,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._send_timeout_s = send_timeout_s
        self._pause_s = pause_s
        # Each value is the number, padded with spaces to ``value_bytes`` (int() ignores them).
        self._value_bytes = value_bytes
        self.sent: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="numbered-sender", daemon=True)

    def __enter__(self) -> NumberedSender:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self._send_timeout_s * 2)
        assert not self._thread.is_alive(), "the sender did not stop"

    def acknowledged(self) -> int:
        return sum(map(len, self.acked.values()))

    def _run(self) -> None:
        while not self._stop.is_set():
            futures = []
            for partition in self.sent:
                number = self.sent[partition]
                self.sent[partition] = number + 1
                value = str(number).encode().ljust(self._value_bytes)
                futures.append(
                    (
                        partition,
                        number,
                        self._producer.send(self._topic, value, partition=partition),
                    )
                )
            for partition, number, future in futures:
                try:
                    future.result(self._send_timeout_s)
                except Exception:
                    self.failures += 1
                else:
                    self.acked[partition].append(number)
            time.sleep(self._pause_s)
