"""ISR membership, decided by the leader and recorded by the controllers (Kafka's ISR rules).

Every ``replica.lag.time.max.ms / 2`` the leader looks at each partition it leads: an ISR
member that has not caught up (fetched up to the leader's log end offset, see
``Partition.update_follower_end_offset``) for ``replica.lag.time.max.ms`` is removed. A
follower outside the ISR that has caught up (to the HW and into the current epoch) is added
back as soon as its fetch shows it (``on_caught_up``).

Either change goes to the controllers as AlterPartition with the partition epoch and leader
epoch this leader bases it on: compare-and-set, so a leader working from stale metadata
cannot overwrite a newer state. While the request is out, the partition's ``pending_isr``
holds the proposal (the HW counts the larger set meanwhile) and no other change is proposed
for it. On success the answered state is adopted at once (the metadata stream repeats it
later); INVALID_UPDATE_VERSION or FENCED_LEADER_EPOCH mean newer metadata is on its way, so
the proposal is dropped and decided again on that newer state.

Metrics: ``brook.replication.under_replicated_partitions`` (led partitions whose ISR is
smaller than their replication factor: the target's size while a reassignment removes
replicas), ``brook.replication.isr_shrinks`` and ``isr_expands``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Final

from opentelemetry.metrics import CallbackOptions, Observation

from brook.errors import ErrorCode, error_code
from brook.membership.controller_client import ControllerClient, ControllerUnavailableError
from brook.telemetry import meter
from brook.v1 import controller_pb2, metadata_pb2
from brook_storage_node.partition import Partition
from brook_storage_node.replica_manager import ReplicaManager

__all__ = ["IsrManager"]

_log = logging.getLogger(__name__)

# The lag check runs twice per lag period, as Kafka's does, so a lagging follower is out
# within 1.5 periods at most.
CHECKS_PER_LAG_PERIOD: Final = 2


class IsrManager:
    """Create and use on the event loop; ``run`` is the periodic shrink check."""

    def __init__(
        self,
        replicas: ReplicaManager,
        client: ControllerClient | None,
        broker_epoch: Callable[[], int],
        *,
        lag_time_max_ms: int,
    ) -> None:
        """``client`` None: static metadata, nobody to record ISR changes; nothing changes."""
        self._replicas = replicas
        self._client = client
        self._broker_epoch = broker_epoch
        self._lag_time_max_s = lag_time_max_ms / 1000
        self._in_flight: set[asyncio.Task[None]] = set()
        instruments = meter(__name__)
        self.shrinks = instruments.create_counter(
            "brook.replication.isr_shrinks",
            unit="{change}",
            description="ISR shrinks this node recorded as leader",
        )
        self.expands = instruments.create_counter(
            "brook.replication.isr_expands",
            unit="{change}",
            description="ISR expansions this node recorded as leader",
        )
        instruments.create_observable_gauge(
            "brook.replication.under_replicated_partitions",
            callbacks=[self._observe_under_replicated],
            unit="{partition}",
            description="Partitions led here whose ISR is smaller than their replication factor",
        )

    def under_replicated_count(self) -> int:
        return sum(p.under_replicated for p in self._replicas.hosted())

    def _observe_under_replicated(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self.under_replicated_count())]

    async def run(self) -> None:
        """Shrink check, until cancelled."""
        interval_s = self._lag_time_max_s / CHECKS_PER_LAG_PERIOD
        while True:
            await asyncio.sleep(interval_s)
            self.check_lagging()

    def check_lagging(self) -> None:
        """Propose removing every lagging ISR member of every partition led here."""
        for partition in self._replicas.hosted():
            if partition.pending_isr is not None:
                continue
            lagging = partition.out_of_sync_replicas(self._lag_time_max_s)
            if lagging:
                new_isr = tuple(r for r in partition.isr if r not in lagging)
                _log.info(
                    "%s: replicas %s have not caught up for %.0f ms; shrinking the ISR to %s",
                    partition.topic_partition,
                    list(lagging),
                    self._lag_time_max_s * 1000,
                    list(new_isr),
                )
                self._propose(partition, new_isr, shrink=True)

    def on_caught_up(self, partition: Partition, replica_id: int) -> None:
        """A follower outside the ISR has caught up: propose adding it — once the metadata
        says the controllers would take it. A fenced or stopping node's fetches are answered
        (it catches up meanwhile) but not proposed: the controllers would refuse with
        INELIGIBLE_REPLICA, and each of its fetches would propose again."""
        if not partition.may_join_isr(replica_id):
            return
        broker = self._replicas.view.broker(replica_id)
        if broker is None or not broker.isr_eligible:
            return
        new_isr = (*partition.isr, replica_id)
        _log.info(
            "%s: replica %d has caught up; expanding the ISR to %s",
            partition.topic_partition,
            replica_id,
            list(new_isr),
        )
        self._propose(partition, new_isr, shrink=False)

    def _propose(self, partition: Partition, new_isr: tuple[int, ...], *, shrink: bool) -> None:
        if self._client is None:
            return
        partition.pending_isr = new_isr
        task = asyncio.get_running_loop().create_task(
            self._alter(self._client, partition, new_isr, shrink=shrink),
            name=f"alter-isr-{partition.topic_partition}",
        )
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _alter(
        self,
        client: ControllerClient,
        partition: Partition,
        new_isr: tuple[int, ...],
        *,
        shrink: bool,
    ) -> None:
        tp = partition.topic_partition
        info = self._replicas.view.partition(tp.topic, tp.partition)
        request = controller_pb2.AlterPartitionRequest(
            node_id=self._replicas.node_id,
            broker_epoch=self._broker_epoch(),
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic_id=info.topic_id if info is not None else b"",
                    topic=tp.topic,
                    partition=tp.partition,
                    leader_epoch=partition.leader_epoch,
                    partition_epoch=partition.partition_epoch,
                    new_isr=new_isr,
                )
            ],
        )
        applied = False
        try:
            answer = await client.alter_partition(request)
            response = answer.response
            code = error_code(int(response.error_code))
            if code is ErrorCode.NONE and response.partitions:
                result = response.partitions[0]
                code = error_code(int(result.error_code))
                if code is ErrorCode.NONE:
                    applied = self._adopt(partition, result.state)
            if code is not ErrorCode.NONE:
                _log.info(
                    "%s: the controllers refused ISR %s (%s: %s); deciding again on newer metadata",
                    tp,
                    list(new_isr),
                    code.name,
                    response.error_message or response.partitions[0].error_message,
                )
        except ControllerUnavailableError as exc:
            _log.warning("%s: ISR change to %s not recorded: %s", tp, list(new_isr), exc)
        finally:
            if partition.pending_isr is new_isr:
                partition.pending_isr = None
                partition.maybe_increment_high_watermark()
        if applied:
            (self.shrinks if shrink else self.expands).add(1, {"topic": tp.topic})

    @staticmethod
    def _adopt(partition: Partition, state: metadata_pb2.PartitionRecord) -> bool:
        """Take the answered state if it is still this leader's term and newer than known."""
        if state.leader_epoch != partition.leader_epoch or not partition.is_leader:
            return False
        if state.partition_epoch > partition.partition_epoch:
            partition.isr = tuple(state.isr)
            partition.partition_epoch = state.partition_epoch
        return True

    async def close(self) -> None:
        tasks = list(self._in_flight)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
