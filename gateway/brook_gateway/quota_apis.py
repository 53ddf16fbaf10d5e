"""DescribeClientQuotas (48) and AlterClientQuotas (49): forwarded to the active controller's
AdminService, whose answers carry Kafka's error codes (INVALID_REQUEST for a bad entity, key,
value or filter). The gateways enforce the committed quotas (brook_gateway.quotas), and the
storage nodes enforce them on gRPC clients (brook_storage_node.client_quotas).
"""

from __future__ import annotations

from typing import Final

from brook.security.authorizer import ALTER_CONFIGS, DESCRIBE_CONFIGS
from brook.v1 import admin_pb2, metadata_pb2
from brook_gateway.apis import ApiHandler, RequestContext
from brook_gateway.authorization import Authorization, on_cluster
from brook_gateway.backend import Backend
from brook_gateway.protocol.codec import Message
from brook_gateway.protocol.kafka_messages import ApiKey
from brook_gateway.upstream import UpstreamError

__all__ = ["quota_handlers"]

# DescribeClientQuotas' match types (0 exact name, 1 default, 2 any) -> the controller's. Any
# other code is left UNSPECIFIED, which the controller refuses with INVALID_REQUEST.
_MATCH_TYPES: Final = {
    0: admin_pb2.CLIENT_QUOTA_MATCH_TYPE_EXACT,
    1: admin_pb2.CLIENT_QUOTA_MATCH_TYPE_DEFAULT,
    2: admin_pb2.CLIENT_QUOTA_MATCH_TYPE_ANY,
}


def _parts(entity: list[Message]) -> list[metadata_pb2.ClientQuotaEntityPart]:
    return [
        metadata_pb2.ClientQuotaEntityPart(
            entity_type=part["entity_type"], entity_name=part["entity_name"]
        )
        for part in entity
    ]


def _entity(parts: list[metadata_pb2.ClientQuotaEntityPart]) -> list[Message]:
    return [
        {
            "entity_type": part.entity_type,
            "entity_name": part.entity_name if part.HasField("entity_name") else None,
        }
        for part in parts
    ]


def _describe_client_quotas(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        components = []
        for component in request["components"]:
            proto = admin_pb2.ClientQuotaFilterComponent(
                entity_type=component["entity_type"],
                match_type=_MATCH_TYPES.get(
                    component["match_type"], admin_pb2.CLIENT_QUOTA_MATCH_TYPE_UNSPECIFIED
                ),
            )
            if component["match"] is not None:
                proto.match = component["match"]
            components.append(proto)
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "DescribeClientQuotas",
                admin_pb2.DescribeClientQuotasRequest(
                    components=components, strict=request["strict"]
                ),
                lambda r: [r.error_code],
            )
        except UpstreamError as e:
            return _describe_failed(int(e.code), str(e) or None)
        if response.error_code:
            return _describe_failed(int(response.error_code), response.error_message or None)
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "entries": [
                {
                    "entity": _entity(list(entry.entity)),
                    "values": [
                        {"key": key, "value": value} for key, value in sorted(entry.values.items())
                    ],
                }
                for entry in response.entries
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return _describe_failed(code, None)

    # v1 is v0 in the flexible encoding.
    return ApiHandler(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        handle,
        versions=(0, 1),
        error_response=error,
        authorization=Authorization(
            "DESCRIBE_CONFIGS on the cluster", request=on_cluster(DESCRIBE_CONFIGS)
        ),
    )


def _describe_failed(code: int, message: str | None) -> Message:
    # Kafka answers a failed description with null entries.
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}


def _alter_client_quotas(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        entries = [
            admin_pb2.ClientQuotaAlteration(
                entity=_parts(entry["entity"]),
                ops=[
                    admin_pb2.ClientQuotaOp(key=op["key"], value=op["value"], remove=op["remove"])
                    for op in entry["ops"]
                ],
            )
            for entry in request["entries"]
        ]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "AlterClientQuotas",
                admin_pb2.AlterClientQuotasRequest(
                    entries=entries, validate_only=request["validate_only"]
                ),
                lambda r: [result.error_code for result in r.entries],
            )
        except UpstreamError as e:
            return _alter_failed(request, int(e.code), str(e) or None)
        return {
            "throttle_time_ms": 0,
            "entries": [
                {
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                    "entity": _entity(list(result.entity)),
                }
                for result in response.entries
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return _alter_failed(request, code, None)

    # v1 is v0 in the flexible encoding.
    return ApiHandler(
        ApiKey.ALTER_CLIENT_QUOTAS,
        handle,
        versions=(0, 1),
        error_response=error,
        authorization=Authorization(
            "ALTER_CONFIGS on the cluster", request=on_cluster(ALTER_CONFIGS)
        ),
    )


def _alter_failed(request: Message, code: int, message: str | None) -> Message:
    """Every entry of an AlterClientQuotas request failed with ``code``."""
    return {
        "throttle_time_ms": 0,
        "entries": [
            {"error_code": code, "error_message": message, "entity": entry["entity"]}
            for entry in request["entries"]
        ],
    }


def quota_handlers(backend: Backend) -> list[ApiHandler]:
    return [_describe_client_quotas(backend), _alter_client_quotas(backend)]
