"""Exactly-once under faults, real processes (issue #16, "Done when").

A consume-transform-produce job (tests/txn_copy_job.py: confluent-kafka through the gateway, a
process of its own) copies topic SOURCE (3 partitions, replication factor 3, filled first with
known records) to topic DESTINATION in transactions, partition p to partition p, the group's
offsets committed in each transaction. While it copies, in turn:

1. the job is killed -9 and restarted with the same transactional.id;
2. the storage node leading DESTINATION's partition 0 is killed -9 (and restarted once the
   job has committed again without it);
3. the transaction coordinator owning the job's transactional.id is killed -9 (the cluster
   has two coordinators: the other one takes its __transaction_state partition over and
   completes or aborts what was in doubt), and restarted;
4. the job is killed -9 again and restarted with an instruction to stop itself (SIGSTOP) in
   its second transaction, after writing records and before committing: a zombie. A
   successor with the same transactional.id starts, fences it and copies on; the zombie is
   then resumed and must exit fenced, its writes refused or aborted.

Each fault must land while the job is still copying (checked), and after each the job must
commit again within a bound, counted from the moment the fault hit. Then: DESTINATION read
with read_committed holds every record of SOURCE exactly once, in order, per partition; the
group's committed offsets equal SOURCE's end offsets. Every wait is bounded; every job
process and the cluster are stopped at the end.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Final

import pytest
from brook_group_coordinator.ownership import transaction_state_partition_for
from cluster_fixture import ClusterFactory, coordinator_owners, pid_alive, wait_until
from txn_copy_job import (
    EXIT_FENCED,
    CopyJob,
    Record,
    assert_copied_exactly_once,
    command_line,
    produce_all,
)

from brook.client.admin import Admin, NewTopic
from brook.launcher import LocalCluster

pytestmark = pytest.mark.integration

SOURCE: Final = "eos-source"
DESTINATION: Final = "eos-destination"
GROUP: Final = "eos-copy"
TRANSACTIONAL_ID: Final = "eos-copy-job"
PARTITIONS: Final = 3
RECORDS_PER_PARTITION: Final = 600
TOTAL_RECORDS: Final = PARTITIONS * RECORDS_PER_PARTITION
# 10 records a transaction, at most 4 transactions a second: ~45 s of copying without faults,
# so that every fault lands while the job is still at work.
RECORDS_PER_TRANSACTION: Final = 10
TRANSACTIONS_PER_S: Final = 4.0
OFFSETS_PARTITIONS: Final = 4
TRANSACTION_STATE_PARTITIONS: Final = 4
SESSION_TIMEOUT_MS: Final = 2000
HEARTBEAT_INTERVAL_MS: Final = 200
LAG_TIME_MAX_MS: Final = 2000
# After a fault the job commits again within this: a leader or coordinator fails over within
# a session, a restarted job waits out its dead predecessor's group session (6 s) and fences
# its transaction; a loaded two-core machine gets a generous margin.
PROGRESS_TIMEOUT_S: Final = 90.0
FINISH_TIMEOUT_S: Final = 180.0
ISR_TIMEOUT_S: Final = 60.0
EXIT_TIMEOUT_S: Final = 60.0
CLIENT_TIMEOUT_S: Final = 30.0
JOB_SCRIPT: Final = Path(__file__).resolve().parents[1] / "txn_copy_job.py"
LOG_TAIL_CHARS: Final = 4000
EVENTS_SHOWN: Final = 3


class JobRuns:
    """The job's runs (processes of tests/txn_copy_job.py, same transactional.id), each with
    its stdout (progress events) and stderr in ``directory``."""

    def __init__(self, directory: Path, job: CopyJob) -> None:
        self._directory = directory
        self.job = job
        self.runs: list[subprocess.Popen[bytes]] = []
        self.current: subprocess.Popen[bytes] | None = None
        """The run that must be alive and copying (None: none must be)."""

    def _path(self, run: subprocess.Popen[bytes], stream: str) -> Path:
        return self._directory / f"job-{self.runs.index(run) + 1}.{stream}"

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        """A new run of the job, to the end of SOURCE; ``extra`` arguments override."""
        index = len(self.runs) + 1
        with (
            open(self._directory / f"job-{index}.out", "wb") as out,
            open(self._directory / f"job-{index}.err", "wb") as err,
        ):
            run = subprocess.Popen(
                [sys.executable, str(JOB_SCRIPT), *command_line(self.job), "--exit-at-end", *extra],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        self.runs.append(run)
        self.current = run
        return run

    def events(self, run: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
        text = self._path(run, "out").read_text()
        # The last line may be half written.
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def describe(self, run: subprocess.Popen[bytes]) -> str:
        err = self._path(run, "err").read_text()[-LOG_TAIL_CHARS:]
        last = self.events(run)[-EVENTS_SHOWN:]
        return (
            f"job run {self.runs.index(run) + 1} (exit {run.poll()}); last events {last}; "
            f"stderr: {err}"
        )

    def committed_records(self) -> int:
        """Records copied and committed so far, by every run: the sum over the partitions of
        the highest offset any run committed for the group."""
        highest: dict[str, int] = {}
        for run in self.runs:
            for event in self.events(run):
                if event["event"] == "committed":
                    for partition, offset in event["positions"].items():
                        highest[partition] = max(highest.get(partition, 0), offset)
        return sum(highest.values())

    def _check_current_alive(self) -> None:
        if self.current is not None and self.current.poll() is not None:
            pytest.fail(f"the job died: {self.describe(self.current)}")

    def wait_for_commits_past(self, mark: int, what: str) -> None:
        def past() -> bool:
            self._check_current_alive()
            return self.committed_records() > mark

        try:
            wait_until(past, f"the job to commit past {mark} records {what}", PROGRESS_TIMEOUT_S)
        except pytest.fail.Exception as timed_out:
            current = "" if self.current is None else f"; {self.describe(self.current)}"
            pytest.fail(f"{timed_out}{current}")

    def mid_run_mark(self, fault: str) -> int:
        """Records committed now, checked to be fewer than all: ``fault`` lands mid-copy."""
        self._check_current_alive()
        committed = self.committed_records()
        assert committed < TOTAL_RECORDS, (
            f"the job had copied everything before {fault}: make it slower "
            "(TRANSACTIONS_PER_S) or the source larger"
        )
        return committed

    def kill(self, run: subprocess.Popen[bytes]) -> None:
        run.send_signal(signal.SIGKILL)
        run.wait(EXIT_TIMEOUT_S)
        if run is self.current:
            self.current = None

    def wait_for_event(self, run: subprocess.Popen[bytes], event: str) -> None:
        def seen() -> bool:
            if run.poll() is not None:
                pytest.fail(f"waiting for {event!r}: {self.describe(run)}")
            return any(e["event"] == event for e in self.events(run))

        wait_until(seen, f"job event {event!r}", PROGRESS_TIMEOUT_S, 0.1)

    def exit_status(self, run: subprocess.Popen[bytes], timeout_s: float) -> int:
        """``run``'s exit status, once it has exited within ``timeout_s``."""
        try:
            return run.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"did not exit within {timeout_s} s: {self.describe(run)}")

    def close(self) -> None:
        """Kills every run still alive and waits for it."""
        for run in self.runs:
            if run.poll() is None:
                run.kill()
                run.wait(EXIT_TIMEOUT_S)
        assert not [run.pid for run in self.runs if pid_alive(run.pid) and run.poll() is None]


def start_cluster(factory: ClusterFactory) -> LocalCluster:
    """One controller, three storage nodes, two coordinators (a successor for the one that
    is killed), one gateway; short leases, so that failovers take seconds."""
    session = {
        "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
    }
    return factory(
        controllers=1,
        storage_nodes=3,
        group_coordinators=2,
        gateways=1,
        config_overrides={
            "controller": {
                "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
                "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS),
            },
            "storage-node": {
                **session,
                "replica.lag.time.max.ms": str(LAG_TIME_MAX_MS),
                "replica.fetch.wait.max.ms": "200",
                "replica.fetch.backoff.ms": "100",
            },
            "group-coordinator": {
                **session,
                "group.initial.rebalance.delay.ms": "0",
                "group.min.session.timeout.ms": "1000",
            },
            "gateway": session,
        },
    )


def full_isr(admin: Admin, topics: Sequence[str] | None) -> bool:
    """Whether every partition of ``topics`` (every topic, internal ones too, when None) has
    a leader and every replica in its ISR."""
    try:
        described = admin.describe_topics(topics, include_internal=topics is None)
    except Exception:
        return False
    partitions = [p for topic in described.values() for p in topic.partitions]
    return bool(partitions) and all(
        p.leader is not None and len(p.isr) == len(p.replicas) for p in partitions
    )


def fill_source(bootstrap: str) -> list[Record]:
    """Writes the known records to SOURCE (idempotent, acks=all, not transactional)."""
    from confluent_kafka import Producer

    records = [
        (SOURCE, p, f"key-{p}-{i}".encode(), f"source:{p}:{i}".encode())
        for i in range(RECORDS_PER_PARTITION)
        for p in range(PARTITIONS)
    ]
    produce_all(Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}), records)
    return records


def node_name(cluster: LocalCluster, node_id: int) -> str:
    return next(n for n in cluster.names() if cluster.spec(n).node_id == node_id)


def transaction_coordinator(cluster: LocalCluster) -> str:
    """The coordinator owning TRANSACTIONAL_ID's __transaction_state partition: the owner of
    the __consumer_offsets partition of the same index modulo its partition count (the
    transactions design, decision 1)."""
    partition = transaction_state_partition_for(TRANSACTIONAL_ID, TRANSACTION_STATE_PARTITIONS)
    owners = coordinator_owners(cluster)
    return node_name(cluster, owners[partition % OFFSETS_PARTITIONS])


@pytest.mark.timeout(900)
def test_copy_job_is_exactly_once_through_job_leader_and_coordinator_kills_and_a_zombie(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = start_cluster(cluster_factory)
    bootstrap = cluster.kafka_bootstrap_servers
    with Admin(cluster.controller_bootstrap_servers) as admin:
        created = admin.create_topics(
            [
                NewTopic(topic, PARTITIONS, 3, configs={"min.insync.replicas": "2"})
                for topic in (SOURCE, DESTINATION)
            ]
        )
        assert created == {SOURCE: None, DESTINATION: None}, created
        wait_until(lambda: full_isr(admin, [SOURCE, DESTINATION]), "full ISRs", ISR_TIMEOUT_S)
        source = fill_source(bootstrap)

        job = CopyJob(
            bootstrap,
            SOURCE,
            DESTINATION,
            GROUP,
            TRANSACTIONAL_ID,
            RECORDS_PER_TRANSACTION,
            TRANSACTIONS_PER_S,
        )
        with closing(JobRuns(tmp_path, job)) as jobs:
            first = jobs.start()
            jobs.wait_for_commits_past(TOTAL_RECORDS // 20, "at the start")

            # 1. The job, killed -9 and restarted with the same transactional.id.
            jobs.kill(first)
            mark = jobs.mid_run_mark("the job kill")
            jobs.start()
            jobs.wait_for_commits_past(mark, "after the job's restart")

            # 2. The storage node leading DESTINATION-0.
            leader = admin.describe_topics([DESTINATION])[DESTINATION].partitions[0].leader
            assert leader is not None
            storage_node = node_name(cluster, leader)
            cluster.kill(storage_node, signal.SIGKILL)
            cluster.wait(storage_node, int(EXIT_TIMEOUT_S * 1000))
            mark = jobs.mid_run_mark(f"the kill of {storage_node}")
            jobs.wait_for_commits_past(mark, f"with {storage_node} down")
            cluster_factory.start(cluster, storage_node)
            wait_until(lambda: full_isr(admin, None), "full ISRs again", ISR_TIMEOUT_S)

            # 3. The transaction coordinator of the job's transactional.id.
            coordinator = transaction_coordinator(cluster)
            cluster.kill(coordinator, signal.SIGKILL)
            cluster.wait(coordinator, int(EXIT_TIMEOUT_S * 1000))
            mark = jobs.mid_run_mark(f"the kill of {coordinator}")
            jobs.wait_for_commits_past(mark, f"with {coordinator} down")
            cluster_factory.start(cluster, coordinator)

            # 4. A zombie: a run stopped inside a transaction, fenced by its successor.
            assert jobs.current is not None
            jobs.kill(jobs.current)
            zombie = jobs.start("--pause-in-transaction", "2")
            jobs.wait_for_event(zombie, "pausing")
            wait_until(
                lambda: Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(") ")[2][0] == "T",
                "the zombie to stop",
                EXIT_TIMEOUT_S,
            )
            # Commits past this are the successor's: the zombie is stopped.
            mark = jobs.mid_run_mark("the zombie")
            successor = jobs.start()
            jobs.wait_for_commits_past(mark, "by the zombie's successor")
            zombie.send_signal(signal.SIGCONT)
            assert jobs.exit_status(zombie, EXIT_TIMEOUT_S) == EXIT_FENCED, jobs.describe(zombie)
            assert jobs.events(zombie)[-1]["event"] == "fenced"

            jobs.current = None  # it exits by itself at the end of the source
            assert jobs.exit_status(successor, FINISH_TIMEOUT_S) == 0, jobs.describe(successor)
            assert jobs.events(successor)[-1] == {"event": "done"}

    # The zombie's records (and any open transaction of a killed run) were written, aborted.
    assert_copied_exactly_once(job, source, PARTITIONS)
