"""Driver-side checks that the topics a query names exist, so a missing one fails the query
before any task runs (as Spark's Kafka connector does) instead of each task waiting
``max.block.ms`` for it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

from brook.spark.options import BOOTSTRAP_OPTION, OptionError, require_bootstrap
from brook.tools.options import ToolError, topic_partition_count

__all__ = ["TOPIC_CHECK_TIMEOUT_MS", "TOPIC_MISSING_GRACE_S", "require_topic"]

# Long enough for a cluster that is still starting to answer.
TOPIC_CHECK_TIMEOUT_MS: Final = 30_000
# How long a topic may be reported missing before the check believes it: a topic just created
# reaches the storage nodes' metadata a moment after the controller acknowledged it.
TOPIC_MISSING_GRACE_S: Final = 2.0
_RETRY_S: Final = 0.1


def require_topic(options: Mapping[str, str], topic: str) -> int:
    """The partition count of ``topic``, asking the storage nodes of
    ``kafka.bootstrap.servers``; OptionError when the topic is still missing after
    TOPIC_MISSING_GRACE_S or the cluster does not answer within TOPIC_CHECK_TIMEOUT_MS."""
    servers = [s.strip() for s in require_bootstrap(options).split(",") if s.strip()]
    believe_at = time.monotonic() + TOPIC_MISSING_GRACE_S
    while True:
        try:
            return topic_partition_count(servers, topic, TOPIC_CHECK_TIMEOUT_MS)
        except ToolError as error:
            if time.monotonic() >= believe_at:
                raise OptionError(
                    f"Topic '{topic}' cannot be written: {error} "
                    f"({BOOTSTRAP_OPTION}={','.join(servers)})"
                ) from error
        time.sleep(_RETRY_S)
