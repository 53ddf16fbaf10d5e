"""A Fetch response's byte budget, kept across the storage nodes the gateway reads it from.

Kafka's rules (KIP-74; Fetch v3+ takes partitions in request order): the record bytes of a
response are at most the request's ``max_bytes``, and of each partition at most its
``partition_max_bytes``, in whole batches; the one exception is the first batch of the first
partition with data, which goes whole whatever its size, so that a consumer always progresses.

A storage node keeps these rules for the partitions it is asked about, but a request can name
partitions led by several nodes, asked concurrently, and each node's "first partition with
data" is its own. So the gateway:

- asks each node for a share of ``max_bytes`` (``node_budgets``), in proportion to what its
  partitions may return (the sum of their limits, each at most ``max_bytes``). When those sums
  together fit in ``max_bytes`` (librdkafka's and Java's defaults with up to 50 partitions
  per broker), each node gets its whole sum: nothing is split in the common case.
- cuts the answers in request order (``ResponseBudget``): each partition keeps the whole batches
  that fit its limit and what is left of ``max_bytes``; only the response's first partition with
  data may keep an oversized first batch. The shares sum to at most ``max_bytes`` (plus one byte
  per node when rounding gives 0, which a node would read as "no limit"), so what is cut is
  mostly a node's own oversized first batch: read, not sent, and read again by a later fetch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from brook.record import scan_batches

__all__ = ["ResponseBudget", "node_budgets"]


def node_budgets(max_bytes: int, partition_limits: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The ``max_bytes`` to ask each node for, given the ``partition_max_bytes`` of the
    partitions it is asked about; each at least 1 (a node reads 0 as its own bound)."""
    budget = max(max_bytes, 0)
    weights = {
        node: sum(min(max(limit, 0), budget) for limit in limits)
        for node, limits in partition_limits.items()
    }
    total = sum(weights.values())
    if total <= budget:
        return {node: max(weight, 1) for node, weight in weights.items()}
    return {node: max(budget * weight // total, 1) for node, weight in weights.items()}


class ResponseBudget:
    """What is left of a response's ``max_bytes``, spent partition by partition in request
    order."""

    __slots__ = ("_first", "remaining_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.remaining_bytes = max(max_bytes, 0)
        self._first = True

    def take(self, records: bytes, partition_max_bytes: int) -> int:
        """How many leading bytes of a partition's ``records`` (whole batches, as a node
        answers) the response carries; they are spent. CorruptRecordError when the records
        must be cut and a batch header is impossible."""
        limit = min(max(partition_max_bytes, 0), self.remaining_bytes)
        if len(records) <= limit:
            length = len(records)
        else:
            length = 0
            for position, header in scan_batches(records):
                end = position + header.size
                if end > limit:
                    if length == 0 and self._first:
                        length = end
                    break
                length = end
        if length:
            self._first = False
            self.remaining_bytes = max(self.remaining_bytes - length, 0)
        return length
