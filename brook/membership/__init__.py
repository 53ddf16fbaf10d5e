"""Joining the cluster through the controllers, for every process that is not a controller
(storage nodes; group coordinators and gateways later): the controller client, registration
and heartbeats, the lease that allows a node to lead, controlled shutdown, meta.properties and
the WatchMetadata follower. ``ClusterMembership`` puts them together."""

from brook.membership.config import MEMBERSHIP_CHECKS, MEMBERSHIP_KEYS
from brook.membership.controller_client import (
    ControllerAnswer,
    ControllerClient,
    ControllerClientSettings,
    ControllerUnavailableError,
)
from brook.membership.lease import BrokerLease, LeaseListener
from brook.membership.lifecycle import (
    BrokerLifecycleManager,
    LifecycleSettings,
    LifecycleState,
    MembershipError,
    RegistrationTimeoutError,
)
from brook.membership.membership import ClusterMembership
from brook.membership.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    MetaPropertiesStore,
)
from brook.membership.metadata_watcher import AppliedMetadataOffset, MetadataWatcher

__all__ = [
    "MEMBERSHIP_CHECKS",
    "MEMBERSHIP_KEYS",
    "AppliedMetadataOffset",
    "BrokerLease",
    "BrokerLifecycleManager",
    "ClusterMembership",
    "ControllerAnswer",
    "ControllerClient",
    "ControllerClientSettings",
    "ControllerUnavailableError",
    "LeaseListener",
    "LifecycleSettings",
    "LifecycleState",
    "MembershipError",
    "MetaProperties",
    "MetaPropertiesError",
    "MetaPropertiesStore",
    "MetadataWatcher",
    "RegistrationTimeoutError",
]
