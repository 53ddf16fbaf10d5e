"""The gateway's per-broker Kafka ports (kafka.node.port.base): for one Kafka listener, a
listener for each storage node the gateway presents, following the metadata.

Metadata shows broker ``n`` at port ``base + n`` of the gateway that presents it
(``ClusterImage.kafka_brokers``), so that each broker id has an address of its own: a client
that keys its connections by address (librdkafka's bootstrap broker, kafkajs's broker pool)
then sees one id per address, and a connection tells which broker it was made to
(``RequestContext.broker_id``). A gateway with several Kafka listeners has one
``NodeListeners`` per listener, each with its own base (``kafka.node.port.stride`` apart), its
ports speaking that listener's protocol. ``sync`` runs after every metadata update: it opens
the listener of every storage node this gateway now presents and closes the rest. A port that
cannot be bound is an operating error, not a reason to stop serving: it is logged and tried
again at the next update or after ``BIND_RETRY_S`` (``retry_failed_binds``; a quiet cluster
sends no updates), and until then clients that reach the broker id through it fail to connect
and retry. A node whose port would pass 65535 is shown at the shared PLAINTEXT address
instead (the same rule in ``node_port``), and logged once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from brook_gateway.cluster_view import KAFKA_LISTENER, PORT_MAX, ClusterImage, node_port
from brook_gateway.server import KafkaServer

__all__ = ["NodeListeners"]

_log = logging.getLogger(__name__)

BIND_RETRY_S: Final = 2.0


class NodeListeners:
    def __init__(
        self,
        server: KafkaServer,
        image: ClusterImage,
        gateway_id: int,
        base: int,
        listener: str = KAFKA_LISTENER,
        ceiling: int = PORT_MAX + 1,
    ):
        """Broker n of ``listener`` at ``base + n``, below ``ceiling`` (the next listener's
        base, ``node_port_ceiling``)."""
        assert base > 0, "per-broker ports are off with base 0"
        self._server = server
        self._image = image
        self._gateway_id = gateway_id
        self._base = base
        self._listener = listener
        self._ceiling = ceiling
        self._overflowing: list[int] = []
        self._failed = False
        self._lock = asyncio.Lock()

    async def retry_failed_binds(self) -> None:
        """Runs until cancelled: every BIND_RETRY_S, syncs again if a listener failed to bind."""
        while True:
            await asyncio.sleep(BIND_RETRY_S)
            if self._failed:
                await self.sync()

    async def sync(self) -> None:
        """Opens the listener of every storage node this gateway presents and closes the
        others'."""
        async with self._lock:
            await self._sync()

    async def _sync(self) -> None:
        self._failed = False
        wanted: dict[int, int] = {}
        overflowing = []
        for node_id in self._image.presented_storage_nodes(self._gateway_id, self._listener):
            port = node_port(self._base, node_id, self._ceiling)
            if port is None:
                overflowing.append(node_id)
            else:
                wanted[node_id] = port
        if overflowing and overflowing != self._overflowing:
            _log.error(
                "storage nodes presented at the listener's shared address: their port would "
                "pass 65535 or reach the next listener's",
                extra={
                    "node_ids": overflowing,
                    "listener": self._listener,
                    "kafka_node_port_base": self._base,
                },
            )
        self._overflowing = overflowing
        open_now = self._server.listener_node_ports(self._listener)
        for node_id in sorted(open_now.keys() - wanted.keys()):
            self._server.close_node_listener(node_id, self._listener)
            _log.info(
                "closed the Kafka listener of a broker this gateway no longer presents",
                extra={"broker_id": node_id, "port": open_now[node_id], "listener": self._listener},
            )
        for node_id in sorted(wanted.keys() - open_now.keys()):
            try:
                await self._server.open_node_listener(node_id, wanted[node_id], self._listener)
            except OSError as e:
                self._failed = True
                _log.error(
                    "cannot listen for a broker; retried at the next metadata update or "
                    f"within {BIND_RETRY_S:g} s",
                    extra={"broker_id": node_id, "port": wanted[node_id], "reason": str(e)},
                )
            else:
                _log.info(
                    "listening for a broker on its own port",
                    extra={"broker_id": node_id, "port": wanted[node_id]},
                )
