"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): forwarded to the active
controller's AdminService, whose answers carry Kafka's error codes per user.

Kafka's messages and the AdminService's have the same shape (the client salts and hashes the
password; the mechanism numbers are Kafka's ScramMechanism codes), so each handler only
translates. A controller that cannot be reached fails every user of an alteration, or a
description as a whole, with the code standing for why (NOT_CONTROLLER, REQUEST_TIMED_OUT).
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

__all__ = ["scram_handlers"]


def _describe_user_scram_credentials(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        users = [user["name"] for user in request["users"] or []]
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "DescribeUserScramCredentials",
                admin_pb2.DescribeUserScramCredentialsRequest(users=users),
                lambda r: [r.error_code],
            )
        except UpstreamError as e:
            return _described(int(e.code), str(e) or None, [])
        return _described(
            int(response.error_code),
            response.error_message or None,
            [
                {
                    "user": result.user,
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                    "credential_infos": [
                        {"mechanism": int(info.mechanism), "iterations": info.iterations}
                        for info in result.credential_infos
                    ],
                }
                for result in response.results
            ],
        )

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del request, context
        return _described(code, None, [])

    return ApiHandler(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        handle,
        versions=(0, 0),
        error_response=error,
        authorization=Authorization("DESCRIBE on the cluster", request=on_cluster(DESCRIBE)),
    )


def _described(code: int, message: str | None, results: list[Message]) -> Message:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": results}


def _alter_user_scram_credentials(backend: Backend) -> ApiHandler:
    async def handle(request: Message, context: RequestContext) -> Message:
        del context
        alteration = admin_pb2.AlterUserScramCredentialsRequest(
            deletions=[
                admin_pb2.ScramCredentialDeletion(name=d["name"], mechanism=d["mechanism"])
                for d in request["deletions"]
            ],
            upsertions=[
                admin_pb2.ScramCredentialUpsertion(
                    name=u["name"],
                    mechanism=u["mechanism"],
                    iterations=u["iterations"],
                    salt=u["salt"],
                    salted_password=u["salted_password"],
                )
                for u in request["upsertions"]
            ],
        )
        try:
            response = await backend.upstreams.admin(
                backend.controllers,
                "AlterUserScramCredentials",
                alteration,
                lambda r: [result.error_code for result in r.results],
            )
        except UpstreamError as e:
            return _every_user_failed(request, int(e.code), str(e) or None)
        return {
            "throttle_time_ms": 0,
            "results": [
                {
                    "user": result.user,
                    "error_code": int(result.error_code),
                    "error_message": result.error_message or None,
                }
                for result in response.results
            ],
        }

    def error(request: Message, context: RequestContext, code: int) -> Message:
        del context
        return _every_user_failed(request, code, None)

    return ApiHandler(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        handle,
        versions=(0, 0),
        error_response=error,
        authorization=Authorization("ALTER on the cluster", request=on_cluster(ALTER)),
    )


def _every_user_failed(request: Message, code: int, message: str | None) -> Message:
    """Each user of an alteration (once, in the order first named) failed with ``code``."""
    users = dict.fromkeys(item["name"] for item in (*request["deletions"], *request["upsertions"]))
    return {
        "throttle_time_ms": 0,
        "results": [{"user": user, "error_code": code, "error_message": message} for user in users],
    }


def scram_handlers(backend: Backend) -> list[ApiHandler]:
    return [_describe_user_scram_credentials(backend), _alter_user_scram_credentials(backend)]
