"""Kafka's auto.create.topics.enable, the gateway's half: a Metadata request that allows it
(versions 0-3 always; 4 and later when ``allow_auto_topic_creation`` is set) and names topics
that do not exist asks the controllers to create them (``CreateTopicsRequest.auto_create``).

The setting is the controllers' (docs/configuration.md), so every gateway behaves alike and
the topic gets the controllers' num.partitions and default.replication.factor; they answer
UNKNOWN_TOPIC_OR_PARTITION when it is off and for the cluster's own ``__`` names, and
INVALID_TOPIC_EXCEPTION for invalid names. A created topic is answered in full once this
gateway's metadata shows it (within ``AUTO_CREATE_WAIT_MS``), else LEADER_NOT_AVAILABLE, on
which clients ask again, as Kafka answers while a new topic's leaders are elected. Produce
never creates topics, as in Kafka: a client learns of the topic through Metadata first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from brook.errors import ErrorCode, error_code
from brook.v1 import admin_pb2
from brook_gateway.backend import Backend
from brook_gateway.upstream import UpstreamError

__all__ = [
    "AUTO_CREATE_TIMEOUT_MS",
    "AUTO_CREATE_TOPICS_MAX",
    "AUTO_CREATE_WAIT_MS",
    "TopicAutoCreator",
]

_log = logging.getLogger(__name__)

# The longest the controllers' answer is waited for: Metadata has no timeout of its own, and a
# client waiting on it waits for every topic it asked about (the controllers answer in
# milliseconds when the setting is off, within a Raft commit when on).
AUTO_CREATE_TIMEOUT_MS: Final = 5_000
# The longest a created topic is waited for in this gateway's metadata before it is answered
# LEADER_NOT_AVAILABLE (the client then asks again).
AUTO_CREATE_WAIT_MS: Final = 2_000
# The most unknown topics one Metadata request creates; the rest are answered
# LEADER_NOT_AVAILABLE and created when the client asks again.
AUTO_CREATE_TOPICS_MAX: Final = 100
# Answers passed on to the client as they are; any other failure (no controller, too few storage
# nodes for default.replication.factor) is retriable LEADER_NOT_AVAILABLE, as in Kafka, where
# the broker only logs why the creation it requested failed.
_FINAL: Final = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION})


class TopicAutoCreator:
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def create(self, names: Sequence[str]) -> dict[str, ErrorCode]:
        """The error each of ``names`` (topics this gateway does not know) gets in the Metadata
        answer; NONE: the topic exists now in this gateway's metadata."""
        names = list(dict.fromkeys(names))
        answers = {name: ErrorCode.LEADER_NOT_AVAILABLE for name in names}
        asked = names[:AUTO_CREATE_TOPICS_MAX]
        request = admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(name=n, num_partitions=-1, replication_factor=-1)
                for n in asked
            ],
            timeout_ms=AUTO_CREATE_TIMEOUT_MS,
            auto_create=True,
        )
        backend = self._backend
        try:
            response = await asyncio.wait_for(
                backend.upstreams.admin(
                    backend.controllers,
                    "CreateTopics",
                    request,
                    lambda r: [t.error_code for t in r.topics],
                ),
                AUTO_CREATE_TIMEOUT_MS / 1000,
            )
        except (UpstreamError, TimeoutError) as e:
            _log.warning(
                "creating topics on demand failed", extra={"topics": asked, "error": str(e)}
            )
            return answers
        created = []
        for result in response.topics:
            code = error_code(int(result.error_code))
            if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                created.append(result.name)
            elif code in _FINAL:
                answers[result.name] = code
            else:
                _log.warning(
                    "creating a topic on demand failed",
                    extra={"topic": result.name, "error": result.error_message or code.name},
                )
        if created:
            image = backend.image

            def shown() -> bool:
                return all(n in image.topics and image.topics[n].partitions for n in created)

            await image.wait_until(shown, AUTO_CREATE_WAIT_MS / 1000)
            for name in created:
                state = image.topics.get(name)
                if state is not None and state.partitions:
                    answers[name] = ErrorCode.NONE
        return answers
