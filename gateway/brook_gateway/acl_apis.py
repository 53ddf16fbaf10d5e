"""DescribeAcls, CreateAcls and DeleteAcls: forwarded to the active controller's AdminService
(CreateAcls / DescribeAcls / DeleteAcls), which validates each binding and filter with Kafka's
rules (brook.security.acl) and answers with Kafka's error codes.

Kafka's wire codes of resource types, pattern types, operations and permissions are those of
the metadata proto enums, so they pass through unchanged; a code Brook does not know reaches
the controller as it is and is refused there (INVALID_REQUEST) like any unknown element.
Version 0 has no pattern type: its bindings and filters are LITERAL (the schemas' default),
so it neither creates nor sees PREFIXED ACLs, as with Kafka.
"""

from __future__ import annotations

from brook.security.authorizer import ALTER, DESCRIBE
from brook.v1 import admin_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import Authorization, on_cluster
from brook_gateway.backend import Backend
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = ["acl_handlers"]


def _filter(item: Message) -> admin_pb2.AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as the controller's filter (null
    strings match anything)."""
    selection = admin_pb2.AclBindingFilter(
        resource_type=item["resource_type_filter"],
        pattern_type=item["pattern_type_filter"],
        operation=item["operation"],
        permission_type=item["permission_type"],
    )
    for source, target in (
        ("resource_name_filter", "resource_name"),
        ("principal_filter", "principal"),
        ("host_filter", "host"),
    ):
        if item[source] is not None:
            setattr(selection, target, item[source])
    return selection


def _entry(binding: admin_pb2.AclBinding) -> Message:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission_type),
    }


def _describe_acls(backend: Backend) -> ApiHandler:
    """The matching ACLs grouped by resource pattern, in the controller's order."""

    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "DescribeAcls",
                admin_pb2.DescribeAclsRequest(filter=_filter(request)),
                lambda r: [r.error_code],
            )
        except UpstreamError as e:
            return {"error_code": int(e.code), "error_message": str(e) or None, "resources": []}
        resources: dict[tuple[int, str, int], list[Message]] = {}
        for binding in response.acls:
            pattern = (int(binding.resource_type), binding.resource_name, binding.pattern_type)
            resources.setdefault(pattern, []).append(_entry(binding))
        return {
            "throttle_time_ms": 0,
            "error_code": int(response.error_code),
            "error_message": response.error_message or None,
            "resources": [
                {
                    "resource_type": resource_type,
                    "resource_name": name,
                    "pattern_type": pattern_type,
                    "acls": acls,
                }
                for (resource_type, name, pattern_type), acls in resources.items()
            ],
        }

    return ApiHandler(
        ApiKey.DESCRIBE_ACLS,
        handle,
        versions=(0, 3),
        authorization=Authorization("DESCRIBE on the cluster", request=on_cluster(DESCRIBE)),
    )


def _creations_failed(count: int, code: int, message: str | None) -> Message:
    failed: Message = {"error_code": code, "error_message": message}
    return {"throttle_time_ms": 0, "results": [dict(failed) for _ in range(count)]}


def _create_acls(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        creations = [
            admin_pb2.AclBinding(
                resource_type=c["resource_type"],
                resource_name=c["resource_name"],
                pattern_type=c["resource_pattern_type"],
                principal=c["principal"],
                host=c["host"],
                operation=c["operation"],
                permission_type=c["permission_type"],
            )
            for c in request["creations"]
        ]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "CreateAcls",
                admin_pb2.CreateAclsRequest(
                    creations=creations,
                    timeout_ms=int(backend.upstreams.request_timeout_s * 1000),
                ),
                lambda r: [result.error_code for result in r.results],
            )
        except UpstreamError as e:
            return _creations_failed(len(creations), int(e.code), str(e) or None)
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                }
                for result in response.results
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return _creations_failed(len(request["creations"]), code, None)

    return ApiHandler(
        ApiKey.CREATE_ACLS,
        handle,
        versions=(0, 3),
        error_response=error,
        authorization=Authorization("ALTER on the cluster", request=on_cluster(ALTER)),
    )


def _matching_acl(binding: admin_pb2.AclBinding) -> Message:
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": int(binding.pattern_type),
        **_entry(binding),
    }


def _delete_acls(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        filters = [_filter(item) for item in request["filters"]]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "DeleteAcls",
                admin_pb2.DeleteAclsRequest(
                    filters=filters, timeout_ms=int(backend.upstreams.request_timeout_s * 1000)
                ),
                lambda r: [result.error_code for result in r.results],
            )
        except UpstreamError as e:
            return _deletions_failed(len(filters), int(e.code), str(e) or None)
        return {
            "throttle_time_ms": 0,
            "filter_results": [
                {
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                    "matching_acls": [_matching_acl(b) for b in result.matching_acls],
                }
                for result in response.results
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return _deletions_failed(len(request["filters"]), code, None)

    return ApiHandler(
        ApiKey.DELETE_ACLS,
        handle,
        versions=(0, 3),
        error_response=error,
        authorization=Authorization("ALTER on the cluster", request=on_cluster(ALTER)),
    )


def _deletions_failed(count: int, code: int, message: str | None) -> Message:
    failed: Message = {"error_code": code, "error_message": message, "matching_acls": []}
    return {"throttle_time_ms": 0, "filter_results": [dict(failed) for _ in range(count)]}


def acl_handlers(backend: Backend) -> list[ApiHandler]:
    return [_describe_acls(backend), _create_acls(backend), _delete_acls(backend)]
