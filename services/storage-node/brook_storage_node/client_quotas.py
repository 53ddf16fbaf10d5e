"""Client quotas on the gRPC calls that produce to and fetch from this node: the SDK and other
gRPC clients that bypass the gateways are held to the same quotas as Kafka clients
(brook.security.quota_engine measures them; brook_gateway.quotas enforces them on Kafka
connections).

Who: the call's principal (brook.security.grpc_identity, asked whether or not the authorizer
is on: a client certificate's name, or a user whose password is checked once and then
cached; a bad credential is refused UNAUTHENTICATED) and its client id, the call metadata
``brook-client-id`` (brook.rpc.channels.client_id_metadata, which the SDK sends with every
Produce and Fetch; "" when absent). The cluster's own calls are not measured: those of a
principal in ``super.users`` (a gateway forwarding its Kafka clients' requests has already
enforced their quotas), and, on a cluster whose processes are not authenticated
(User:ANONYMOUS), calls that name no client id, as the cluster's processes never do.

What: Produce and ProduceRecords by their request size against ``producer_byte_rate``; Fetch
by its response size, and each message of a Subscribe stream by its size, against
``consumer_byte_rate``. ``request_percentage`` is not enforced here: the node's work on a call
is mostly in threads and waits, which Kafka's request-handler time has no counterpart of.

How, Kafka's way for a client without a connection to mute: a call is recorded, then its quota
checked; a throttled Produce or Fetch carries ``throttle_time_ms`` and its response is delayed
by it (Kafka before KIP-219), at most one sample window and never past the call's deadline.
Further calls of a throttled quota group (pipelined ones, another connection's, another node
process's are not: quotas are per node, as Kafka's are per broker) wait until its throttle has
passed before they are handled, as a muted Kafka channel is not read: so pipelining cannot
outrun the quota. A throttled Subscribe pauses before its next message. No quota configured:
one empty-dict check per call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final
from urllib.parse import unquote

from brook.metadata.image import QuotaEntity
from brook.rpc.channels import CLIENT_ID_METADATA_KEY
from brook.security.grpc_identity import GrpcIdentity
from brook.security.principal import ANONYMOUS, Principal
from brook.security.quota_engine import QuotaSensors, Sensor
from brook.telemetry import meter

__all__ = ["CallQuota", "StorageQuotas"]

# A held call or a delayed answer gives up its wait this long before the client's deadline.
_DEADLINE_MARGIN_S: Final = 0.02
# The longest client id taken from call metadata (longer ones are cut: they still group).
_CLIENT_ID_CHARS_MAX: Final = 1024


class CallQuota:
    """The quota one call is measured against (see ``StorageQuotas.admit``): its group's
    sensor, the quota's value, and the quota type its throttles are reported under."""

    __slots__ = ("quota", "quota_type", "sensor")

    def __init__(self, sensor: Sensor, quota: float, quota_type: str) -> None:
        self.sensor = sensor
        self.quota = quota
        self.quota_type = quota_type


class StorageQuotas:
    """The node's client quota enforcement over the client quotas of its metadata image."""

    def __init__(
        self,
        quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        identity: GrpcIdentity,
        super_users: Collection[Principal],
        window_num: int,
        window_size_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``quotas``: the image's client quotas now (they change as metadata arrives)."""
        self._quotas = quotas
        self._identity = identity
        self._super_users = super_users
        self._sensors = QuotaSensors(window_num, window_size_s, clock)
        self._throttles = meter(__name__).create_histogram(
            "brook.storage.quota.throttle.time",
            unit="ms",
            description="Throttle time of calls a client quota applies to (0: not throttled)",
        )

    @property
    def configured(self) -> bool:
        """Whether the image has any client quota (without one no call is measured: produce
        and fetch skip the quota path entirely)."""
        return bool(self._quotas())

    async def admit(self, context: Any, key: str, quota_type: str) -> CallQuota | None:
        """The ``key`` quota this call (its grpc.aio.ServicerContext) is measured against,
        once its group's throttle has passed (or the call's deadline is near); None when no
        quota applies. May abort the call (UNAUTHENTICATED) for a bad credential."""
        quotas = self._quotas()
        if not quotas:
            return None
        client_id = _client_id(context)
        principal = await self._identity.principal_of(context)
        if principal in self._super_users or (client_id is None and principal == ANONYMOUS):
            return None
        measured = self._sensors.measured(quotas, key, principal.name, client_id or "")
        if measured is None:
            return None
        call = CallQuota(*measured, quota_type)
        await self.hold(context, call)
        return call

    async def hold(self, context: Any, call: CallQuota) -> None:
        """Waits until the throttle of ``call``'s group has passed, short of the call's
        deadline. Calls held together leave one by one: the first recorded may throttle the
        group again, and the others wait again."""
        sensor = call.sensor
        while (wait_s := sensor.throttled_until_s - self._sensors.clock()) > 0:
            bounded_s = _bounded_by_deadline(wait_s, context)
            if bounded_s <= 0:
                return
            await asyncio.sleep(bounded_s)
            if bounded_s < wait_s:
                return

    def record(self, call: CallQuota, size_bytes: int) -> int:
        """Records ``size_bytes`` of ``call``: the throttle in ms (0: none)."""
        sensors = self._sensors
        throttle_ms = sensors.record(call.sensor, call.quota, size_bytes, sensors.clock())
        self._throttles.record(throttle_ms, {"quota.type": call.quota_type})
        return throttle_ms

    @staticmethod
    async def delay(context: Any, throttle_ms: int) -> None:
        """Waits out a throttle before answering, short of the call's deadline."""
        if throttle_ms > 0:
            delay_s = _bounded_by_deadline(throttle_ms / 1000, context)
            if delay_s > 0:
                await asyncio.sleep(delay_s)


def _client_id(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_METADATA_KEY:
            text = value if isinstance(value, str) else value.decode(errors="replace")
            return unquote(text[: _CLIENT_ID_CHARS_MAX * 3])[:_CLIENT_ID_CHARS_MAX]
    return None


def _bounded_by_deadline(wait_s: float, context: Any) -> float:
    remaining_s: float | None = context.time_remaining()
    if remaining_s is None:
        return wait_s
    return min(wait_s, remaining_s - _DEADLINE_MARGIN_S)
