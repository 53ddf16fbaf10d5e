"""The Raft engine behind a small interface of our own (``RaftEngine``), and its implementation
on pysyncobj (``PySyncObjEngine``).

The controller only ever proposes commands, learns their outcome, asks who leads and in which
term, and describes the quorum; the state machine is handed committed commands and asked for
and given snapshots. Nothing else of the engine leaks out, so it can be replaced without
touching the controller's logic.

pysyncobj is used under the conditions the design brief lists, each answering a failure seen
when it was evaluated: unbatched appends (batching gave 100-200 ms commits), a journal file
and a snapshot file, dynamic membership on, a password (its transport unpickles what it
receives), short heartbeat and election timeouts, a connection timeout of at least the longest
election timeout, a 0.5 s reconnect backoff (its 5 s default lets a restarting node depose a
healthy leader), and a 1 s leader fallback (its default lets an isolated leader believe it leads
for 30 s). It runs its own thread; outcomes are handed to the asyncio loop with
``loop.call_soon_threadsafe``, and the state machine's notifications travel the same way in
the same order, so when a proposal's future resolves, the loop has seen its records.

Durability: pysyncobj does not fsync its journal. A controller killed with kill -9 loses
nothing (the page cache survives), but a simultaneous power loss of a majority of controllers
can lose metadata changes that were acknowledged (docs/controller.md).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import json
import logging
import threading
import time
from base64 import b64decode, b64encode
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.node import TCPNode

from brook.errors import BrookError, ErrorCode
from brook.rpc.addresses import parse_address
from brook_controller.snapshot import SnapshotError
from brook_controller.state_machine import ApplyOutcome, MetadataStateMachine

__all__ = [
    "EngineSettings",
    "NotLeaderError",
    "PySyncObjEngine",
    "QuorumStatus",
    "RaftEngine",
    "VoterStatus",
]

JOURNAL_FILE: Final = "raft.journal"
SNAPSHOT_FILE: Final = "raft.snapshot.sst"
# Commands waiting for the engine's thread; more fail at once rather than queue without bound.
COMMAND_QUEUE_MAX: Final = 10_000
# Raft log index -> metadata offset pairs remembered for DescribeQuorum (voters' progress is
# known to the engine as log indexes).
_PROGRESS_POINTS_MAX: Final = 10_000
# Binding the Raft port is retried this often, this far apart, before start-up fails (a
# restarted controller's port can stay busy for a moment).
BIND_ATTEMPTS_MAX: Final = 20
BIND_RETRY_S: Final = 0.25
# The engine thread's longest sleep when idle: it also bounds how late a stop is noticed.
_TICK_S: Final = 0.05
ENGINE_THREAD_NAME: Final = "raft-engine"

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class NotLeaderError(BrookError):
    """This controller does not lead (or stopped leading before the command committed)."""

    def __init__(self, message: str = "this controller is not the active controller") -> None:
        super().__init__(ErrorCode.NOT_CONTROLLER, message)


@dataclass(frozen=True)
class VoterStatus:
    node_id: int
    raft_address: str
    # The metadata offset the voter is known to have reached; -1 if unknown.
    log_end_offset: int
    last_contact_ms: int


@dataclass(frozen=True)
class QuorumStatus:
    leader_id: int | None
    term: int
    committed_offset: int
    voters: tuple[VoterStatus, ...]


class RaftEngine(Protocol):
    """What the controller needs from a Raft implementation."""

    @property
    def node_id(self) -> int: ...

    @property
    def term(self) -> int:
        """The current Raft term: the controller epoch."""

    def leader_id(self) -> int | None:
        """The leader this node knows of (itself included), or None during an election."""

    def is_leader(self) -> bool: ...

    async def propose(self, command: bytes, timeout_s: float) -> ApplyOutcome:
        """Appends a command and waits until it is applied here. Raises NotLeaderError,
        TimeoutError (the command may still commit later) or BrookError."""

    async def describe(self) -> QuorumStatus: ...

    def failure(self) -> BaseException | None:
        """Why this replica cannot go on (its state is incomplete), or None."""

    async def close(self, timeout_s: float) -> None: ...


@dataclass(frozen=True)
class EngineSettings:
    node_id: int
    # Node id -> the RAFT address (host:port) of every voter, this one included.
    voters: Mapping[int, str]
    bind_address: str
    directory: Path
    password: str | None
    heartbeat_interval_ms: int
    election_timeout_ms: int
    connection_timeout_ms: int
    reconnect_backoff_ms: int
    leader_fallback_timeout_ms: int
    snapshot_min_entries: int
    snapshot_interval_ms: int


def _syncobj_address(address: str) -> str:
    """pysyncobj's name for a node: host:port with the host never bracketed (it splits at the
    last colon and resolves the rest, so ``[::1]:9300`` must be given as ``::1:9300``)."""
    host, port = parse_address(address)
    return f"{host}:{port}"


class _Replica(SyncObj):  # type: ignore[misc]
    """pysyncobj's SyncObj with one replicated method: apply a command."""

    def __init__(
        self,
        self_address: str,
        others: Sequence[str],
        conf: SyncObjConf,
        apply: Callable[[bytes], ApplyOutcome],
    ) -> None:
        self._brook_apply = apply
        super().__init__(self_address, list(others), conf)

    @replicated  # type: ignore[untyped-decorator]
    def apply_command(self, command: bytes) -> ApplyOutcome:
        return self._brook_apply(command)


def _encode_entry(entry: tuple[bytes, int, int]) -> list[Any]:
    command, index, term = entry
    return [b64encode(bytes(command)).decode(), int(index), int(term)]


def _decode_entry(value: list[Any]) -> tuple[bytes, int, int]:
    command, index, term = value
    return (b64decode(command), int(index), int(term))


class PySyncObjEngine:
    """``RaftEngine`` on pysyncobj. Create it with ``start`` on the event loop."""

    def __init__(
        self,
        settings: EngineSettings,
        machine: MetadataStateMachine,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._settings = settings
        self._machine = machine
        self._loop = loop
        self._address_to_id = {
            _syncobj_address(address): node_id for node_id, address in settings.voters.items()
        }
        self._progress: collections.deque[tuple[int, int]] = collections.deque(
            maxlen=_PROGRESS_POINTS_MAX
        )
        self._engine_calls: collections.deque[Callable[[], None]] = collections.deque()
        self._engine_calls_lock = threading.Lock()
        self._snapshot_failure: BaseException | None = None
        self._first_tick = threading.Event()
        self._syncobj: _Replica | None = None
        self._state_callbacks: list[Callable[[], None]] = []

    # ----------------------------------------------------------------- life cycle

    @classmethod
    async def start(
        cls,
        settings: EngineSettings,
        machine: MetadataStateMachine,
        *,
        ready_timeout_s: float,
    ) -> PySyncObjEngine:
        """Binds the Raft port, loads the snapshot and journal, and starts the engine's thread.
        Raises RuntimeError if the port cannot be bound or the snapshot cannot be read."""
        engine = cls(settings, machine, asyncio.get_running_loop())
        # Constructed on the loop's (main) thread: pysyncobj's thread stops when the thread
        # that created it ends. The constructor's blocking part is short (a key derivation).
        engine._create()
        try:
            await asyncio.wait_for(asyncio.to_thread(engine._wait_started), ready_timeout_s)
        except BaseException:
            await engine.close(timeout_s=2.0)
            raise
        return engine

    def _create(self) -> None:
        settings = self._settings
        directory = settings.directory
        election_s = settings.election_timeout_ms / 1000
        conf = SyncObjConf(
            password=settings.password,
            appendEntriesUseBatch=False,
            journalFile=str(directory / JOURNAL_FILE),
            fullDumpFile=str(directory / SNAPSHOT_FILE),
            serializer=self._serialize,
            deserializer=self._deserialize,
            dynamicMembershipChange=True,
            appendEntriesPeriod=settings.heartbeat_interval_ms / 1000,
            raftMinTimeout=election_s,
            raftMaxTimeout=2 * election_s,
            connectionTimeout=settings.connection_timeout_ms / 1000,
            connectionRetryTime=settings.reconnect_backoff_ms / 1000,
            leaderFallbackTimeout=settings.leader_fallback_timeout_ms / 1000,
            logCompactionMinEntries=settings.snapshot_min_entries,
            logCompactionMinTime=settings.snapshot_interval_ms / 1000,
            commandsQueueSize=COMMAND_QUEUE_MAX,
            # Commands are proposed only on the leader; one sent during an election fails
            # at once instead of waiting for whoever wins.
            commandsWaitLeader=False,
            bindAddress=_syncobj_address(settings.bind_address),
            bindRetryTime=BIND_RETRY_S,
            maxBindRetries=BIND_ATTEMPTS_MAX,
            autoTickPeriod=_TICK_S,
            onStateChanged=self._on_state_changed,
        )
        own = _syncobj_address(settings.voters[settings.node_id])
        others = [
            _syncobj_address(address)
            for address in settings.voters.values()
            if _syncobj_address(address) != own
        ]
        self._syncobj = _Replica(own, others, conf, self._apply)
        self._syncobj.addOnTickCallback(self._on_tick)

    def _wait_started(self) -> None:
        syncobj = self._require()
        try:
            syncobj.waitBinded()
        except Exception:
            raise RuntimeError(
                f"cannot bind the RAFT listener {self._settings.bind_address} "
                f"({BIND_ATTEMPTS_MAX} attempts)"
            ) from None
        while not self._first_tick.wait(timeout=_TICK_S):
            if not syncobj.tick_thread_alive():
                raise RuntimeError("the Raft engine's thread stopped during start-up")
        if self._snapshot_failure is not None:
            raise RuntimeError(f"cannot load the metadata snapshot: {self._snapshot_failure}")

    async def close(self, timeout_s: float) -> None:
        """Stops the engine's thread (waits at most ``timeout_s``) and closes its files."""
        syncobj, self._syncobj = self._syncobj, None
        if syncobj is None:
            return
        syncobj.destroy()
        # The engine's thread notices the request on its next tick; joined off the loop.
        thread = getattr(syncobj, "_SyncObj__thread", None)
        if isinstance(thread, threading.Thread):
            await asyncio.to_thread(thread.join, timeout_s)
        if syncobj.tick_thread_alive():
            _log.error("the Raft engine's thread did not stop", extra={"timeout_s": timeout_s})

    def _require(self) -> _Replica:
        if self._syncobj is None:
            raise NotLeaderError("the Raft engine is stopped")
        return self._syncobj

    # ----------------------------------------------------------------- engine thread

    def _apply(self, command: bytes) -> ApplyOutcome:
        outcome = self._machine.apply(command)
        syncobj = self._syncobj
        if syncobj is not None:
            # Called before the engine counts the entry as applied: this is its index.
            self._progress.append((syncobj.raftLastApplied + 1, outcome.offset))
        return outcome

    def _on_tick(self) -> None:
        self._first_tick.set()
        with self._engine_calls_lock:
            calls = list(self._engine_calls)
            self._engine_calls.clear()
        for call in calls:
            try:
                call()
            except Exception:
                _log.exception("an engine-thread call failed")

    def _on_state_changed(self, old_state: int, new_state: int) -> None:
        for callback in list(self._state_callbacks):
            self._post(callback)

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the process is exiting

    def _serialize(self, file_name: str, data: tuple[Any, ...]) -> None:
        last_entry, previous_entry, cluster = data
        engine_data = json.dumps(
            {
                "last": _encode_entry(last_entry),
                "previous": _encode_entry(previous_entry),
                "cluster": sorted(str(node) for node in cluster),
            }
        ).encode()
        self._machine.write_snapshot(Path(file_name), engine_data)
        _log.info("wrote a metadata snapshot", extra={"offset": self._machine.offset})

    def _deserialize(self, file_name: str) -> tuple[Any, ...]:
        try:
            engine_data = self._machine.load_snapshot(Path(file_name), self._settings.directory)
            decoded = json.loads(engine_data)
            entries = (_decode_entry(decoded["last"]), _decode_entry(decoded["previous"]))
            cluster = {TCPNode(address) for address in decoded["cluster"]}
        except (SnapshotError, ValueError, KeyError, TypeError) as error:
            # pysyncobj would log this and carry on with an empty state; the controller
            # refuses to run instead (see _wait_started and failure()).
            self._snapshot_failure = error
            _log.critical("cannot load the metadata snapshot", extra={"reason": str(error)})
            raise
        _log.info("loaded a metadata snapshot", extra={"offset": self._machine.offset})
        return (entries[0], entries[1], cluster)

    def failure(self) -> BaseException | None:
        """Set when a snapshot could not be loaded: the state here is incomplete and this
        controller must stop."""
        return self._snapshot_failure

    # ----------------------------------------------------------------- loop side

    @property
    def node_id(self) -> int:
        return self._settings.node_id

    @property
    def term(self) -> int:
        syncobj = self._syncobj
        return int(syncobj.raftCurrentTerm) if syncobj is not None else 0

    def leader_id(self) -> int | None:
        syncobj = self._syncobj
        if syncobj is None:
            return None
        leader = syncobj._getLeader()
        return self._address_to_id.get(str(leader)) if leader is not None else None

    def is_leader(self) -> bool:
        syncobj = self._syncobj
        return syncobj is not None and bool(syncobj._isLeader())

    def on_state_change(self, callback: Callable[[], None]) -> None:
        """``callback`` runs on the loop after each change of Raft role."""
        self._state_callbacks.append(callback)

    async def propose(self, command: bytes, timeout_s: float) -> ApplyOutcome:
        syncobj = self._require()
        if not syncobj._isLeader():
            raise NotLeaderError()
        future: asyncio.Future[ApplyOutcome] = self._loop.create_future()

        def resolve(result: object, error: int) -> None:
            if future.done():
                return
            if error == FAIL_REASON.SUCCESS and isinstance(result, ApplyOutcome):
                future.set_result(result)
            else:
                future.set_exception(_failure(error))

        def on_result(result: object, error: int) -> None:
            self._post(resolve, result, error)

        syncobj.apply_command(command, callback=on_result)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"the change did not commit within {timeout_s * 1000:.0f} ms; it may still commit"
            ) from None

    async def call_on_engine_thread(self, function: Callable[[], _T], timeout_s: float) -> _T:
        """Runs ``function`` on the engine's thread (where its state may be read safely)."""
        future: asyncio.Future[_T] = self._loop.create_future()

        def call() -> None:
            try:
                result = function()
            except BaseException as error:
                self._post(_set_exception, future, error)
            else:
                self._post(_set_result, future, result)

        self._require()
        with self._engine_calls_lock:
            self._engine_calls.append(call)
        return await asyncio.wait_for(future, timeout_s)

    async def describe(self, timeout_s: float = 2.0) -> QuorumStatus:
        return await self.call_on_engine_thread(self._describe_now, timeout_s)

    def _describe_now(self) -> QuorumStatus:
        syncobj = self._require()
        status = syncobj.getStatus()
        leader = self.leader_id()
        own_address = self._settings.voters[self._settings.node_id]
        # Private to pysyncobj, read on its own thread: when the leader last heard from each.
        responses: Mapping[Any, float] = getattr(syncobj, "_SyncObj__lastResponseTime", {})
        now = time.monotonic()
        voters = []
        for node_id, address in sorted(self._settings.voters.items()):
            if address == own_address:
                offset, contact_ms = self._machine.offset, 0
            elif leader == self._settings.node_id:
                node = _syncobj_address(address)
                match_index = status.get(f"match_idx_server_{node}")
                offset = self._offset_at(match_index) if match_index is not None else -1
                contact = next((t for n, t in responses.items() if str(n) == node), None)
                contact_ms = int((now - contact) * 1000) if contact is not None else -1
            else:
                offset, contact_ms = -1, -1
            voters.append(VoterStatus(node_id, address, offset, contact_ms))
        return QuorumStatus(
            leader, int(syncobj.raftCurrentTerm), self._machine.offset, tuple(voters)
        )

    def _offset_at(self, raft_index: int) -> int:
        """The metadata offset after the last entry at or before ``raft_index`` that this node
        applied recently; -1 if that is older than what it remembers."""
        points = list(self._progress)
        position = bisect.bisect_right(points, (raft_index, float("inf")))
        return points[position - 1][1] if position else -1


def _set_result(future: asyncio.Future[_T], result: _T) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _failure(reason: int) -> BaseException:
    if reason in (
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.LEADER_CHANGED,
        FAIL_REASON.DISCARDED,
    ):
        return NotLeaderError("leadership changed before the change committed; it was not applied")
    if reason == FAIL_REASON.QUEUE_FULL:
        return BrookError(
            ErrorCode.REQUEST_TIMED_OUT,
            f"the controller has {COMMAND_QUEUE_MAX} changes waiting; try again",
        )
    return BrookError(
        ErrorCode.REQUEST_TIMED_OUT,
        f"the outcome of the change is unknown (engine reason {reason}); it may have committed",
    )
