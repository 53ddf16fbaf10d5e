"""A node's life in the cluster: registration, heartbeats, the lease, controlled shutdown
(Kafka's BrokerLifecycleManager).

1. **Register** with a fresh incarnation id (a UUID per process start), the node's role,
   advertised endpoints, rack and the cluster id stored in its data directories. The answer
   is a broker epoch, and the cluster id, which is stored if it was not yet.
   INCONSISTENT_CLUSTER_ID (the data belongs to another cluster) stops the process with a
   message saying so; DUPLICATE_BROKER_REGISTRATION (the previous incarnation's lease is still
   running, after a crash) is tried again until it has expired.
2. **Heartbeat** every broker.heartbeat.interval.ms with the metadata offset applied so far.
   A registered node starts fenced; the controllers unfence it once that offset has reached
   its registration. While fenced the node heartbeats again as soon as it has applied more
   metadata, so that it is unfenced without waiting a whole interval.
3. **The lease** (``BrokerLease``): a heartbeat sent at t and answered "not fenced" lets the node
   lead until t + min(broker.session.timeout.ms, the lease granted). It ends earlier when
   the answer says fenced, and it is re-acquired only after the node has applied every
   metadata record the answering controller had when it unfenced the node: while the node was
   without a lease the controllers may have moved its leaderships away and back, and leading
   on an image that misses that would be leading in an old epoch. STALE_BROKER_EPOCH or
   BROKER_ID_NOT_REGISTERED ends the lease too and the node registers again (same
   incarnation).
4. **Controlled shutdown**: heartbeats carry want_shut_down until the controllers answer
   should_shut_down, meaning they have moved every leadership away; then the node stops.

Heartbeat answers stamped with a controller epoch older than the newest seen are ignored.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from brook.config import Config, Listener
from brook.errors import ErrorCode
from brook.membership.controller_client import ControllerClient, ControllerUnavailableError
from brook.membership.lease import BrokerLease, LeaseListener
from brook.membership.meta_properties import MetaPropertiesError, MetaPropertiesStore
from brook.membership.metadata_watcher import AppliedMetadataOffset
from brook.rpc.backoff import RetryBackoff, backoff_s
from brook.v1 import admin_pb2, common_pb2, controller_pb2

__all__ = [
    "BrokerLifecycleManager",
    "LifecycleSettings",
    "LifecycleState",
    "MembershipError",
    "RegistrationTimeoutError",
]

# While fenced or shutting down, a heartbeat follows an event (metadata applied, shutdown
# asked) at once, but never closer than this to the previous one.
URGENT_HEARTBEAT_SPACING_MS_MIN: Final = 10
# A heartbeat attempt may take this share of the session: a controller that hangs (stopped,
# not dead) leaves time to try the others before the lease lapses.
HEARTBEAT_ATTEMPTS_PER_SESSION: Final = 3

_log = logging.getLogger(__name__)


class MembershipError(Exception):
    """The node cannot be part of the cluster as configured; the message says why and what
    to change. Start-up fails with it."""


class RegistrationTimeoutError(MembershipError):
    """No controller accepted the registration in time (an operating condition: retried by a
    running node, fatal only at start-up)."""


class LifecycleState(enum.Enum):
    NOT_REGISTERED = "not registered"
    FENCED = "fenced"
    ACTIVE = "active"
    SHUT_DOWN = "shut down"


@dataclass(frozen=True)
class LifecycleSettings:
    node_id: int
    role: common_pb2.NodeRole
    endpoints: tuple[Listener, ...]
    rack: str
    heartbeat_interval_ms: int
    session_timeout_ms: int
    request_timeout_ms: int
    retry_backoff: RetryBackoff

    @classmethod
    def from_config(
        cls,
        config: Config,
        role: common_pb2.NodeRole,
        extra_endpoints: Sequence[Listener] = (),
    ) -> LifecycleSettings:
        has_rack = "broker.rack" in config.definition
        rack = config.get_optional_string("broker.rack") if has_rack else None
        return cls(
            node_id=config.get_int("node.id"),
            role=role,
            endpoints=(*config.get_listeners("advertised.listeners"), *extra_endpoints),
            rack=rack or "",
            heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            request_timeout_ms=config.get_int("request.timeout.ms"),
            retry_backoff=RetryBackoff(
                config.get_int("retry.backoff.ms"), config.get_int("retry.backoff.max.ms")
            ),
        )


def _endpoints(listeners: Sequence[Listener]) -> list[common_pb2.Endpoint]:
    return [common_pb2.Endpoint(listener=e.name, host=e.host, port=e.port) for e in listeners]


class BrokerLifecycleManager:
    """Drives one process's membership. ``register`` then ``run`` (a background task) and
    ``wait_until_active``; ``controlled_shutdown`` when the process is asked to stop."""

    def __init__(
        self,
        client: ControllerClient,
        settings: LifecycleSettings,
        *,
        applied: AppliedMetadataOffset,
        lease: BrokerLease,
        meta: MetaPropertiesStore | None,
        listener: LeaseListener | None = None,
    ) -> None:
        self._client = client
        self.settings = settings
        self._applied = applied
        self.lease = lease
        self._meta = meta
        self._listener = listener
        self.incarnation_id = str(uuid.uuid4())
        self.broker_epoch = -1
        self.cluster_id: str | None = None
        self.state = LifecycleState.NOT_REGISTERED
        self._leading = False
        self._want_shut_down = False
        self._shut_down = asyncio.Event()
        self._ever_active = asyncio.Event()
        self._wake = asyncio.Event()
        self._expiry: asyncio.TimerHandle | None = None
        self._last_sent = float("-inf")
        self._last_reported_offset = -1
        self.last_problem = "no heartbeat answered yet"
        applied.on_advance(self._wake.set)

    def set_listener(self, listener: LeaseListener) -> None:
        self._listener = listener

    # -- registration -------------------------------------------------------------------------

    async def load_cluster_id(self) -> str | None:
        """The cluster id stored in the data directories (MembershipError if they are not
        usable by this node)."""
        if self._meta is None:
            return None
        try:
            self.cluster_id = await asyncio.to_thread(self._meta.load)
        except MetaPropertiesError as exc:
            raise MembershipError(str(exc)) from None
        return self.cluster_id

    async def register(self, timeout_s: float) -> None:
        """Registers (again, after STALE_BROKER_EPOCH, with the same incarnation). Retries
        what may pass (no active controller, DUPLICATE_BROKER_REGISTRATION) until
        ``timeout_s``, then RegistrationTimeoutError; MembershipError for a refusal."""
        settings = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        failures = 0
        while True:
            request = controller_pb2.RegisterBrokerRequest(
                node_id=settings.node_id,
                incarnation_id=self.incarnation_id,
                role=settings.role,
                endpoints=_endpoints(settings.endpoints),
                rack=settings.rack,
                cluster_id=self.cluster_id or "",
            )
            try:
                answer = await self._client.register_broker(request, deadline - loop.time())
            except ControllerUnavailableError as exc:
                problem = str(exc)
            else:
                code = answer.error_code
                message = answer.response.error_message
                if code is ErrorCode.NONE:
                    await self._registered(answer.response)
                    return
                if code is ErrorCode.INCONSISTENT_CLUSTER_ID:
                    raise MembershipError(
                        f"INCONSISTENT_CLUSTER_ID: the data directories of node "
                        f"{settings.node_id} belong to cluster {self.cluster_id}, but the "
                        f"controllers at {','.join(self._client.addresses)} run another "
                        f"cluster ({message}). Point controller.quorum.bootstrap.servers at "
                        "that cluster's controllers, or give this node empty data directories "
                        "to join this one."
                    )
                if code is not ErrorCode.DUPLICATE_BROKER_REGISTRATION and not code.retriable:
                    raise MembershipError(
                        f"the controllers refused to register node {settings.node_id}: "
                        f"{code.name}: {message}"
                    )
                problem = f"{code.name}: {message}"
            failures += 1
            wait_s = backoff_s(settings.retry_backoff, failures)
            if loop.time() + wait_s >= deadline:
                raise RegistrationTimeoutError(
                    f"node {settings.node_id} could not register with the controllers within "
                    f"{timeout_s * 1000:.0f} ms: {problem}"
                )
            _log.info("registration not accepted yet; trying again", extra={"reason": problem})
            await asyncio.sleep(wait_s)

    async def _registered(self, response: controller_pb2.RegisterBrokerResponse) -> None:
        if self.cluster_id is not None and response.cluster_id != self.cluster_id:
            raise MembershipError(
                f"the controllers registered node {self.settings.node_id} in cluster "
                f"{response.cluster_id!r}, but its data belongs to cluster {self.cluster_id}"
            )
        if self._meta is not None and self.cluster_id is None:
            try:
                await asyncio.to_thread(self._meta.store, response.cluster_id)
            except (MetaPropertiesError, OSError, ValueError) as exc:
                raise MembershipError(f"cannot record the cluster id: {exc}") from None
        self.cluster_id = response.cluster_id
        self.broker_epoch = response.broker_epoch
        self.state = LifecycleState.FENCED
        # The next heartbeat goes out at once: it is what unfences the node.
        self._last_sent = float("-inf")
        _log.info(
            "registered with the controllers",
            extra={
                "cluster_id": response.cluster_id,
                "broker_epoch": response.broker_epoch,
                "incarnation_id": self.incarnation_id,
            },
        )

    # -- heartbeats -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats until controlled shutdown completes (a background task). Raises
        MembershipError only for what no retry can fix."""
        session_s = self.settings.session_timeout_ms / 1000
        try:
            while self.state is not LifecycleState.SHUT_DOWN:
                if self.state is LifecycleState.NOT_REGISTERED:
                    try:
                        await self.register(max(session_s, self._interval_s()))
                    except RegistrationTimeoutError as exc:
                        self.last_problem = str(exc)
                        _log.warning("still not registered", extra={"reason": str(exc)})
                    continue
                await self._wait_until_due()
                await self._heartbeat()
        finally:
            self._cancel_expiry()

    def _interval_s(self) -> float:
        return self.settings.heartbeat_interval_ms / 1000

    def _due(self) -> float:
        interval_s = self._interval_s()
        urgent = self._want_shut_down or (
            self.state is LifecycleState.FENCED
            and self._applied.offset > self._last_reported_offset
        )
        if urgent:
            spacing_ms = max(self.settings.retry_backoff.base_ms, URGENT_HEARTBEAT_SPACING_MS_MIN)
            interval_s = min(interval_s, spacing_ms / 1000)
        return self._last_sent + interval_s

    async def _wait_until_due(self) -> None:
        while True:
            # Cleared before the check, so an event between the two is not lost.
            self._wake.clear()
            wait_s = self._due() - time.monotonic()
            if wait_s <= 0:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), wait_s)
            except TimeoutError:
                return

    async def _heartbeat(self) -> None:
        settings = self.settings
        sent_at = time.monotonic()
        self._last_sent = sent_at
        self._last_reported_offset = self._applied.offset
        request = controller_pb2.BrokerHeartbeatRequest(
            node_id=settings.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self._last_reported_offset,
            want_shut_down=self._want_shut_down,
        )
        # A heartbeat answered after the lease it would renew has lapsed renews nothing; and
        # one controller that never answers must leave time to ask another within the lease.
        timeout_s = min(settings.request_timeout_ms, settings.session_timeout_ms) / 1000
        attempt_s = settings.session_timeout_ms / 1000 / HEARTBEAT_ATTEMPTS_PER_SESSION
        try:
            answer = await self._client.broker_heartbeat(request, timeout_s, attempt_s)
        except ControllerUnavailableError as exc:
            self.last_problem = str(exc)
            _log.warning("heartbeat not answered", extra={"reason": str(exc)})
            return
        response = answer.response
        if not self._client.observe_epoch(response.controller_epoch):
            self.last_problem = f"a deposed controller ({answer.address}) answered"
            return
        code = answer.error_code
        if code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            self._lose_lease(f"the controllers answered {code.name}: {response.error_message}")
            self.state = LifecycleState.NOT_REGISTERED
            return
        if code is not ErrorCode.NONE:
            self.last_problem = f"{code.name}: {response.error_message}"
            _log.warning("heartbeat refused", extra={"reason": self.last_problem})
            return
        if self._want_shut_down and response.should_shut_down:
            self._lose_lease(
                "this node is shutting down; its leaderships have moved", expected=True
            )
            self.state = LifecycleState.SHUT_DOWN
            self._shut_down.set()
            return
        if response.is_fenced:
            why = "" if response.is_caught_up else " until it catches up with the metadata"
            self.last_problem = f"the controllers keep this node fenced{why}"
            self._lose_lease(f"the controllers have fenced this node{why}")
            self.state = LifecycleState.FENCED
            return
        lease_ms = settings.session_timeout_ms
        if response.lease_ms > 0:
            lease_ms = min(lease_ms, response.lease_ms)
        expires_at = sent_at + lease_ms / 1000
        if self.lease.active:
            self.lease.grant(expires_at)
            self._arm_expiry(expires_at)
            return
        if self.state is LifecycleState.ACTIVE:
            # The lease lapsed while this heartbeat was under way; its timer has not run yet.
            self._on_expiry()
        await self._activate(answer.address, expires_at)

    async def _activate(self, address: str, expires_at: float) -> None:
        """Leads again once this node has applied what the controller at ``address`` had
        when it answered that the node is unfenced (see the module doc)."""
        remaining_s = expires_at - time.monotonic()
        try:
            cluster = await self._client.describe_cluster(address, remaining_s)
        except ControllerUnavailableError as exc:
            self.last_problem = str(exc)
            return
        me = next((n for n in cluster.nodes if n.node_id == self.settings.node_id), None)
        if not self._usable(me):
            self.last_problem = f"controller {address} does not show this node unfenced yet"
            return
        caught_up = await self._applied.wait_for(
            cluster.metadata_offset, expires_at - time.monotonic()
        )
        if not caught_up or time.monotonic() >= expires_at or self._want_shut_down:
            self.last_problem = (
                f"the metadata applied here ({self._applied.offset}) did not reach offset "
                f"{cluster.metadata_offset} within the lease"
            )
            return
        if self.state is not LifecycleState.FENCED:
            return
        self.lease.grant(expires_at)
        self._arm_expiry(expires_at)
        self.state = LifecycleState.ACTIVE
        self._ever_active.set()
        self.last_problem = ""
        if not self._leading:
            self._leading = True
            _log.info(
                "unfenced: leading partitions",
                extra={"broker_epoch": self.broker_epoch, "metadata_offset": self._applied.offset},
            )
            if self._listener is not None:
                self._listener.on_lease_acquired()

    def _usable(self, me: admin_pb2.NodeDescription | None) -> bool:
        return me is not None and me.broker_epoch == self.broker_epoch and not me.fenced

    # -- the lease ----------------------------------------------------------------------------

    def _arm_expiry(self, expires_at: float) -> None:
        self._cancel_expiry()
        delay_s = max(0.0, expires_at - time.monotonic())
        self._expiry = asyncio.get_running_loop().call_later(delay_s, self._on_expiry)

    def _cancel_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _on_expiry(self) -> None:
        self._expiry = None
        if self.lease.active:
            return
        if self.state is LifecycleState.ACTIVE:
            self.state = LifecycleState.FENCED
        self._lose_lease(
            f"no successful heartbeat within {self.settings.session_timeout_ms} ms "
            "(broker.session.timeout.ms); the controllers fence such a node"
        )

    def _lose_lease(self, reason: str, *, expected: bool = False) -> None:
        self._cancel_expiry()
        self.lease.revoke(reason)
        if self.state is LifecycleState.ACTIVE:
            self.state = LifecycleState.FENCED
        if not self._leading:
            return
        self._leading = False
        _log.log(
            logging.INFO if expected else logging.WARNING,
            "no longer leading partitions",
            extra={"reason": reason},
        )
        if self._listener is not None:
            self._listener.on_lease_lost(reason)

    # -- waiting and stopping -----------------------------------------------------------------

    async def wait_until_active(self, timeout_s: float) -> None:
        """Returns once the node has first been unfenced and caught up; MembershipError after
        ``timeout_s``, saying what it was waiting for."""
        try:
            await asyncio.wait_for(self._ever_active.wait(), timeout_s)
        except TimeoutError:
            raise MembershipError(
                f"node {self.settings.node_id} was not unfenced by the controllers within "
                f"{timeout_s * 1000:.0f} ms (state {self.state.value}; {self.last_problem})"
            ) from None

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Asks the controllers to move this node's leaderships away; True once they say it
        may stop, False if that did not happen within ``timeout_s`` (the node stops anyway:
        its lease runs out and the controllers fence it)."""
        if self.broker_epoch < 0:
            return False
        self._want_shut_down = True
        self._wake.set()
        try:
            await asyncio.wait_for(self._shut_down.wait(), timeout_s)
        except TimeoutError:
            _log.warning(
                "controlled shutdown did not complete in time",
                extra={"timeout_ms": round(timeout_s * 1000), "reason": self.last_problem},
            )
            return False
        _log.info("controlled shutdown complete: leaderships moved to other nodes")
        return True
