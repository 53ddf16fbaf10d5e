"""brook.v1.AdminService: cluster administration (Kafka's AdminClient operations).

Each request is validated resource by resource: an invalid resource gets its own error and
changes nothing, and the valid ones of the same request are committed together in one change.
Writes are answered once committed, within the request's ``timeout_ms`` (REQUEST_TIMED_OUT
otherwise: the change may still commit, as in Kafka). A follower answers writes with
NOT_CONTROLLER on every resource; the admin client then asks DescribeQuorum (any controller)
where the leader is, because these responses have no field for the hint. Reads on the leader
are linearizable; a follower answers them from its committed state.

AlterPartitionReassignments starts, retargets or cancels moves of partitions between nodes
(reassignment.py); each partition succeeds or fails on its own, and the request is answered
once the first step is committed, not when the data has moved: ListPartitionReassignments
shows what is still moving.

CreateAcls, DescribeAcls and DeleteAcls keep Kafka's ACLs in the metadata log (acls.py).
AlterUserScramCredentials / DescribeUserScramCredentials keep users' SCRAM credentials
(scram_credentials.py): results per user, never a salt or a key in an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, Final, TypeVar

from brook.errors import BrookError, ErrorCode
from brook.metadata.image import quota_entity
from brook.v1 import admin_pb2, admin_pb2_grpc, metadata_pb2, storage_pb2
from brook_controller.acls import create_acls, delete_acls, describe_acls
from brook_controller.changes import ChangeSet
from brook_controller.client_quotas import (
    alter_client_quotas,
    describe_client_quotas,
)
from brook_controller.election import preferred_election, unclean_election
from brook_controller.quorum_controller import QuorumController
from brook_controller.reassignment import (
    cancel_reassignment,
    reassigning_partitions,
    start_reassignment,
)
from brook_controller.scram_credentials import alter_credentials, describe_credentials
from brook_controller.topics import (
    alter_configs,
    auto_created_topic,
    create_partitions,
    create_topic,
    delete_topic,
    describe_configs,
    topic_metadata,
)

__all__ = ["AdminServicer"]

# The longest an admin request may ask to wait for its change to commit.
ADMIN_TIMEOUT_MS_MAX: Final = 300_000

_log = logging.getLogger(__name__)
_Resource = TypeVar("_Resource")
_Result = TypeVar("_Result")


def _fail(item: Any, error: BrookError) -> Any:
    item.error_code = error.code
    item.error_message = error.message
    return item


def _per_resource(
    resources: Sequence[_Resource],
    key: Callable[[_Resource], Hashable] | None,
    blank: Callable[[_Resource], _Result],
    apply: Callable[[_Resource, _Result], _Result | None],
) -> list[_Result]:
    """One result per resource: ``apply``'s (or the blank one), or the blank one carrying the
    error it raised. A resource named twice in one request (the same ``key``) is refused, as
    in Kafka; ``key`` None allows repeats."""
    keys = [key(resource) if key is not None else None for resource in resources]
    results = []
    for resource, resource_key in zip(resources, keys, strict=True):
        result = blank(resource)
        try:
            if resource_key is not None and keys.count(resource_key) > 1:
                raise BrookError(ErrorCode.INVALID_REQUEST, "the request names it twice")
            result = apply(resource, result) or result
        except BrookError as error:
            _fail(result, error)
        results.append(result)
    return results


async def _guarded(
    operation: Callable[[], Awaitable[list[_Result]]],
    resources: Sequence[_Resource],
    blank: Callable[[_Resource], _Result],
    name: str,
) -> list[_Result]:
    """Runs a whole-request operation; a request-level failure (NOT_CONTROLLER, a timeout, a
    defect) becomes that error on every resource."""
    try:
        return await operation()
    except BrookError as error:
        failure = error
    except Exception as error:
        _log.exception("%s failed", name)
        failure = BrookError(ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {error!r}")
    return [_fail(blank(resource), failure) for resource in resources]


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    def _deadline(self, timeout_ms: int) -> float:
        return self._controller.deadline(min(timeout_ms, ADMIN_TIMEOUT_MS_MAX))

    # ------------------------------------------------------------------ topics

    async def CreateTopics(
        self, request: admin_pb2.CreateTopicsRequest, context: Any
    ) -> admin_pb2.CreateTopicsResponse:
        settings = self._controller.settings
        defaults = settings.topic_defaults

        def blank(topic: admin_pb2.CreatableTopic) -> admin_pb2.CreateTopicResult:
            return admin_pb2.CreateTopicResult(name=topic.name)

        if request.auto_create and not settings.auto_create_topics:
            # The common case of a gateway asking on a client's behalf (every Metadata request
            # for an unknown name): answered from the settings, with no Raft round trip.
            return admin_pb2.CreateTopicsResponse(topics=_refused_auto_creations(request.topics))

        def decide(changes: ChangeSet) -> list[admin_pb2.CreateTopicResult]:
            pending: list[metadata_pb2.PartitionRecord] = []
            families: set[str] = set()

            def create(
                topic: admin_pb2.CreatableTopic, _: admin_pb2.CreateTopicResult
            ) -> admin_pb2.CreateTopicResult:
                family = topic.name.replace(".", "_")
                if family in families:
                    raise BrookError(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        "the topic collides with another of this request ('.' and '_' are "
                        "the same in metric names)",
                    )
                if request.auto_create:
                    topic = auto_created_topic(topic, settings.auto_create_topics)
                result = create_topic(changes, topic, defaults, pending)
                families.add(family)
                return result

            return _per_resource(request.topics, lambda t: t.name, blank, create)

        results = await _guarded(
            lambda: self._controller.write(
                decide, self._deadline(request.timeout_ms), validate_only=request.validate_only
            ),
            request.topics,
            blank,
            "CreateTopics",
        )
        return admin_pb2.CreateTopicsResponse(topics=results)

    async def DeleteTopics(
        self, request: admin_pb2.DeleteTopicsRequest, context: Any
    ) -> admin_pb2.DeleteTopicsResponse:
        targets = [(name, b"") for name in request.names]
        targets += [("", topic_id) for topic_id in request.topic_ids]

        def blank(target: tuple[str, bytes]) -> admin_pb2.DeleteTopicResult:
            return admin_pb2.DeleteTopicResult(name=target[0], topic_id=target[1])

        def decide(changes: ChangeSet) -> list[admin_pb2.DeleteTopicResult]:
            deleted: set[bytes] = set()

            def delete(
                target: tuple[str, bytes], _: admin_pb2.DeleteTopicResult
            ) -> admin_pb2.DeleteTopicResult:
                result = delete_topic(changes, target[0], target[1] or None)
                if result.topic_id in deleted:
                    raise BrookError(ErrorCode.INVALID_REQUEST, "the request names it twice")
                deleted.add(result.topic_id)
                return result

            return _per_resource(targets, lambda target: target, blank, delete)

        results = await _guarded(
            lambda: self._controller.write(decide, self._deadline(request.timeout_ms)),
            targets,
            blank,
            "DeleteTopics",
        )
        return admin_pb2.DeleteTopicsResponse(topics=results)

    async def DescribeTopics(
        self, request: admin_pb2.DescribeTopicsRequest, context: Any
    ) -> admin_pb2.DescribeTopicsResponse:
        async def describe() -> list[storage_pb2.TopicMetadata]:
            await self._controller.read_point(self._controller.deadline())
            image = self._controller.view.image
            if not request.names:
                return [
                    topic_metadata(image, image.topics[image.topic_ids[name]])
                    for name in sorted(image.topic_ids)
                    if request.include_internal or not image.topics[image.topic_ids[name]].internal
                ]
            found = []
            for name in request.names:
                topic = image.topic_by_name(name)
                if topic is None:
                    found.append(
                        _fail(
                            storage_pb2.TopicMetadata(name=name),
                            BrookError(
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic is named {name!r}"
                            ),
                        )
                    )
                else:
                    found.append(topic_metadata(image, topic))
            return found

        topics = await _guarded(
            describe,
            request.names,
            lambda name: storage_pb2.TopicMetadata(name=name),
            "DescribeTopics",
        )
        return admin_pb2.DescribeTopicsResponse(topics=topics)

    async def CreatePartitions(
        self, request: admin_pb2.CreatePartitionsRequest, context: Any
    ) -> admin_pb2.CreatePartitionsResponse:
        def blank(topic: admin_pb2.CreatePartitionsTopic) -> admin_pb2.CreatePartitionsResult:
            return admin_pb2.CreatePartitionsResult(name=topic.name)

        def decide(changes: ChangeSet) -> list[admin_pb2.CreatePartitionsResult]:
            pending: list[metadata_pb2.PartitionRecord] = []
            return _per_resource(
                request.topics,
                lambda topic: topic.name,
                blank,
                lambda topic, _: create_partitions(changes, topic, pending),
            )

        results = await _guarded(
            lambda: self._controller.write(
                decide, self._deadline(request.timeout_ms), validate_only=request.validate_only
            ),
            request.topics,
            blank,
            "CreatePartitions",
        )
        return admin_pb2.CreatePartitionsResponse(topics=results)

    # ------------------------------------------------------------------ configs

    async def DescribeConfigs(
        self, request: admin_pb2.DescribeConfigsRequest, context: Any
    ) -> admin_pb2.DescribeConfigsResponse:
        def blank(resource: admin_pb2.DescribeConfigsResource) -> admin_pb2.DescribeConfigsResult:
            return admin_pb2.DescribeConfigsResult(resource=resource.resource)

        async def describe() -> list[admin_pb2.DescribeConfigsResult]:
            await self._controller.read_point(self._controller.deadline())
            image = self._controller.view.image

            def fill(
                resource: admin_pb2.DescribeConfigsResource,
                result: admin_pb2.DescribeConfigsResult,
            ) -> None:
                result.configs.extend(
                    describe_configs(
                        image, resource, request.include_synonyms, request.include_documentation
                    )
                )

            # Describing one resource twice is harmless: each gets its own answer.
            return _per_resource(request.resources, None, blank, fill)

        results = await _guarded(describe, request.resources, blank, "DescribeConfigs")
        return admin_pb2.DescribeConfigsResponse(results=results)

    async def AlterConfigs(
        self, request: admin_pb2.AlterConfigsRequest, context: Any
    ) -> admin_pb2.AlterConfigsResponse:
        def blank(resource: admin_pb2.AlterConfigsResource) -> admin_pb2.AlterConfigsResult:
            return admin_pb2.AlterConfigsResult(resource=resource.resource)

        def decide(changes: ChangeSet) -> list[admin_pb2.AlterConfigsResult]:
            return _per_resource(
                request.resources,
                lambda r: (r.resource.type, r.resource.name),
                blank,
                lambda r, _: alter_configs(changes, r.resource, r.configs),
            )

        results = await _guarded(
            lambda: self._controller.write(
                decide, self._controller.deadline(), validate_only=request.validate_only
            ),
            request.resources,
            blank,
            "AlterConfigs",
        )
        return admin_pb2.AlterConfigsResponse(results=results)

    # ------------------------------------------------------------------ cluster

    async def DescribeCluster(
        self, request: admin_pb2.DescribeClusterRequest, context: Any
    ) -> admin_pb2.DescribeClusterResponse:
        try:
            await self._controller.read_point(self._controller.deadline())
        except BrookError as error:
            # The response has no error field: answer from the committed state.
            _log.info("DescribeCluster without a read barrier", extra={"reason": error.message})
        return self._controller.describe_cluster()

    async def ElectLeaders(
        self, request: admin_pb2.ElectLeadersRequest, context: Any
    ) -> admin_pb2.ElectLeadersResponse:
        unclean = request.election_type == admin_pb2.ELECTION_TYPE_UNCLEAN

        def decide(changes: ChangeSet) -> list[admin_pb2.ElectLeadersResult]:
            image = changes.image
            wanted: Sequence[tuple[str, int]] = [
                (tp.topic, tp.partition) for tp in request.partitions
            ]
            if not wanted:
                wanted = [(p.topic, p.partition) for p in image.all_partitions()]
            results = []
            for topic_name, index in wanted:
                result = admin_pb2.ElectLeadersResult(topic=topic_name, partition=index)
                topic = image.topic_by_name(topic_name)
                partition = image.partition(topic.topic_id, index) if topic is not None else None
                if partition is None:
                    _fail(
                        result,
                        BrookError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition"),
                    )
                else:
                    elect = unclean_election if unclean else preferred_election
                    code, message = elect(changes, partition)
                    result.error_code = code  # type: ignore[assignment]
                    result.error_message = message
                results.append(result)
            return results

        results = await _guarded(
            lambda: self._controller.write(decide, self._deadline(request.timeout_ms)),
            request.partitions,
            lambda tp: admin_pb2.ElectLeadersResult(topic=tp.topic, partition=tp.partition),
            "ElectLeaders",
        )
        return admin_pb2.ElectLeadersResponse(results=results)

    # ------------------------------------------------------------------ reassignments

    async def AlterPartitionReassignments(
        self, request: admin_pb2.AlterPartitionReassignmentsRequest, context: Any
    ) -> admin_pb2.AlterPartitionReassignmentsResponse:
        def blank(
            item: admin_pb2.PartitionReassignment,
        ) -> admin_pb2.AlterPartitionReassignmentsResult:
            return admin_pb2.AlterPartitionReassignmentsResult(
                topic=item.topic, partition=item.partition
            )

        def decide(changes: ChangeSet) -> list[admin_pb2.AlterPartitionReassignmentsResult]:
            def alter(item: admin_pb2.PartitionReassignment, _: Any) -> None:
                topic = changes.image.topic_by_name(item.topic)
                partition = (
                    changes.partition(topic.topic_id, item.partition) if topic is not None else None
                )
                if topic is None or partition is None:
                    raise BrookError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition")
                if item.replicas:
                    start_reassignment(changes, partition, list(item.replicas))
                else:
                    cancel_reassignment(changes, partition)

            return _per_resource(
                request.reassignments, lambda item: (item.topic, item.partition), blank, alter
            )

        results = await _guarded(
            lambda: self._controller.write(decide, self._deadline(request.timeout_ms)),
            request.reassignments,
            blank,
            "AlterPartitionReassignments",
        )
        return admin_pb2.AlterPartitionReassignmentsResponse(results=results)

    async def ListPartitionReassignments(
        self, request: admin_pb2.ListPartitionReassignmentsRequest, context: Any
    ) -> admin_pb2.ListPartitionReassignmentsResponse:
        """Partitions named and moving (every moving one when none is named); a partition
        that does not exist, or is not moving, is left out, as in Kafka."""
        try:
            await self._controller.read_point(self._controller.deadline())
        except BrookError as error:
            # The response has no error field: answer from the committed state.
            _log.info(
                "ListPartitionReassignments without a read barrier",
                extra={"reason": error.message},
            )
        image = self._controller.view.image
        wanted = {(tp.topic, tp.partition) for tp in request.partitions}
        return admin_pb2.ListPartitionReassignmentsResponse(
            reassignments=[
                admin_pb2.OngoingReassignment(
                    topic=p.topic,
                    partition=p.partition,
                    replicas=p.replicas,
                    adding_replicas=p.adding_replicas,
                    removing_replicas=p.removing_replicas,
                )
                for p in sorted(reassigning_partitions(image), key=lambda p: (p.topic, p.partition))
                if not wanted or (p.topic, p.partition) in wanted
            ]
        )

    async def UnregisterBroker(
        self, request: admin_pb2.UnregisterBrokerRequest, context: Any
    ) -> admin_pb2.UnregisterBrokerResponse:
        def decide(changes: ChangeSet) -> None:
            broker = changes.broker(request.node_id)
            if broker is None:
                raise BrookError(
                    ErrorCode.BROKER_ID_NOT_REGISTERED, f"node {request.node_id} is not registered"
                )
            if not broker.fenced:
                # Live, or shutting down but not yet fenced: either way still running, and a
                # running node registers again.
                raise BrookError(
                    ErrorCode.INVALID_REQUEST,
                    f"node {request.node_id} is running: stop it first (a running node "
                    "registers again)",
                )
            # Every partition read as a precondition: a move onto the node committed
            # meanwhile makes this decision void.
            current = [changes.partition(p.topic_id, p.partition) for p in changes.partitions()]
            hosted = [
                f"{p.topic}-{p.partition}"
                for p in current
                if p is not None and request.node_id in p.replicas
            ]
            if hosted:
                raise BrookError(
                    ErrorCode.INVALID_REQUEST,
                    f"node {request.node_id} still holds {len(hosted)} replicas "
                    f"({', '.join(hosted[:5])}{', ...' if len(hosted) > 5 else ''}): move them "
                    "away first (brook reassign --decommission)",
                )
            changes.remove_broker(broker)

        try:
            await self._controller.write(decide, self._deadline(request.timeout_ms))
        except BrookError as error:
            return admin_pb2.UnregisterBrokerResponse(
                error_code=error.code,  # type: ignore[arg-type]
                error_message=error.message,
            )
        self._controller.leases.forget(request.node_id)
        return admin_pb2.UnregisterBrokerResponse()

    # ------------------------------------------------------------------ ACLs

    async def CreateAcls(
        self, request: admin_pb2.CreateAclsRequest, context: Any
    ) -> admin_pb2.CreateAclsResponse:
        results = await _guarded(
            lambda: self._controller.write(
                lambda changes: create_acls(changes, request.creations),
                self._deadline(request.timeout_ms),
            ),
            request.creations,
            lambda _: admin_pb2.CreateAclsResult(),
            "CreateAcls",
        )
        return admin_pb2.CreateAclsResponse(results=results)

    async def DescribeAcls(
        self, request: admin_pb2.DescribeAclsRequest, context: Any
    ) -> admin_pb2.DescribeAclsResponse:
        try:
            await self._controller.read_point(self._controller.deadline())
        except BrookError as error:
            return _fail(admin_pb2.DescribeAclsResponse(), error)  # type: ignore[no-any-return]
        return describe_acls(self._controller.view.image.acls.values(), request.filter)

    async def DeleteAcls(
        self, request: admin_pb2.DeleteAclsRequest, context: Any
    ) -> admin_pb2.DeleteAclsResponse:
        results = await _guarded(
            lambda: self._controller.write(
                lambda changes: delete_acls(changes, request.filters),
                self._deadline(request.timeout_ms),
            ),
            request.filters,
            lambda _: admin_pb2.DeleteAclsFilterResult(),
            "DeleteAcls",
        )
        return admin_pb2.DeleteAclsResponse(results=results)

    # ------------------------------------------------------------------ SCRAM credentials

    async def AlterUserScramCredentials(
        self, request: admin_pb2.AlterUserScramCredentialsRequest, context: Any
    ) -> admin_pb2.AlterUserScramCredentialsResponse:
        names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        users = list(dict.fromkeys(names))
        results = await _guarded(
            lambda: self._controller.write(
                lambda changes: alter_credentials(changes, request.deletions, request.upsertions),
                self._deadline(request.timeout_ms),
            ),
            users,
            lambda user: admin_pb2.AlterUserScramCredentialsResult(user=user),
            "AlterUserScramCredentials",
        )
        return admin_pb2.AlterUserScramCredentialsResponse(results=results)

    async def DescribeUserScramCredentials(
        self, request: admin_pb2.DescribeUserScramCredentialsRequest, context: Any
    ) -> admin_pb2.DescribeUserScramCredentialsResponse:
        try:
            await self._controller.read_point(self._controller.deadline())
        except BrookError as error:
            return admin_pb2.DescribeUserScramCredentialsResponse(
                error_code=error.code,  # type: ignore[arg-type]
                error_message=error.message,
            )
        return admin_pb2.DescribeUserScramCredentialsResponse(
            results=describe_credentials(self._controller.view.image, request.users)
        )

    # ------------------------------------------------------------------ client quotas

    async def AlterClientQuotas(
        self, request: admin_pb2.AlterClientQuotasRequest, context: Any
    ) -> admin_pb2.AlterClientQuotasResponse:
        def blank(entry: admin_pb2.ClientQuotaAlteration) -> admin_pb2.AlterClientQuotasResult:
            return admin_pb2.AlterClientQuotasResult(entity=entry.entity)

        def decide(changes: ChangeSet) -> list[admin_pb2.AlterClientQuotasResult]:
            return _per_resource(
                request.entries,
                lambda entry: quota_entity(entry.entity),
                blank,
                lambda entry, _: alter_client_quotas(changes, entry),
            )

        results = await _guarded(
            lambda: self._controller.write(
                decide, self._deadline(request.timeout_ms), validate_only=request.validate_only
            ),
            request.entries,
            blank,
            "AlterClientQuotas",
        )
        return admin_pb2.AlterClientQuotasResponse(entries=results)

    async def DescribeClientQuotas(
        self, request: admin_pb2.DescribeClientQuotasRequest, context: Any
    ) -> admin_pb2.DescribeClientQuotasResponse:
        try:
            await self._controller.read_point(self._controller.deadline())
            entries = describe_client_quotas(
                self._controller.view.image.client_quotas, request.components, request.strict
            )
        except BrookError as error:
            return admin_pb2.DescribeClientQuotasResponse(
                error_code=error.code,  # type: ignore[arg-type]
                error_message=error.message,
            )
        return admin_pb2.DescribeClientQuotasResponse(entries=entries)


def _refused_auto_creations(
    topics: Iterable[admin_pb2.CreatableTopic],
) -> list[admin_pb2.CreateTopicResult]:
    """Each topic's answer while auto.create.topics.enable is false."""
    results = []
    for topic in topics:
        try:
            auto_created_topic(topic, enabled=False)
        except BrookError as e:
            results.append(_fail(admin_pb2.CreateTopicResult(name=topic.name), e))
    return results
