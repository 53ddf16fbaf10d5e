"""Following the metadata log: snapshot then deltas, resumed after reconnecting, stale
controller epochs and old offsets ignored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from membership_support import (
    FakeQuorum,
    client_for,
    free_port,
    run,
    running_quorum,
    topic_record,
)

from brook.membership import ControllerClient, MetadataWatcher
from brook.v1 import controller_pb2

MESSAGE_TIMEOUT_S = 5.0


async def _next(
    updates: AsyncIterator[controller_pb2.WatchMetadataResponse],
) -> controller_pb2.WatchMetadataResponse:
    return await asyncio.wait_for(anext(updates), MESSAGE_TIMEOUT_S)


def _topics(message: controller_pb2.WatchMetadataResponse) -> list[str]:
    return [r.topic.name for r in message.records if r.WhichOneof("record") == "topic"]


async def _watch(
    quorum: FakeQuorum, *addresses: str, idle_reconnect_s: float = 10.0
) -> tuple[ControllerClient, MetadataWatcher, AsyncIterator[controller_pb2.WatchMetadataResponse]]:
    client = client_for(quorum, *addresses)
    watcher = MetadataWatcher(client, 1, idle_reconnect_s=idle_reconnect_s)
    return client, watcher, watcher.updates()


def test_the_stream_opens_with_a_snapshot_then_deltas_in_log_order() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            quorum.append(topic_record("a"))
            client, watcher, updates = await _watch(quorum)
            try:
                first = await _next(updates)
                quorum.append(topic_record("b"))
                quorum.append(topic_record("c"))
                second = await _next(updates)
                third = second if second.offset == quorum.offset else await _next(updates)
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert first.snapshot and first.offset == 1 and _topics(first) == ["a"]
            assert not second.snapshot and _topics(second)[0] == "b"
            assert third.offset == quorum.offset == watcher.position
            request = quorum.controllers[1001].watch_requests[0]
            assert (request.node_id, request.after_offset) == (1, -1)

    run(scenario)


def test_after_a_controller_goes_the_stream_resumes_elsewhere_after_the_last_offset() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=2) as quorum:
            first_controller, second_controller = quorum.controllers.values()
            client, watcher, updates = await _watch(
                quorum, first_controller.address, second_controller.address
            )
            try:
                snapshot = await _next(updates)
                quorum.append(topic_record("a"))
                delta = await _next(updates)
                await first_controller.stop()
                quorum.append(topic_record("b"))
                resumed = await _next(updates)
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert snapshot.snapshot and _topics(delta) == ["a"]
            assert [r.after_offset for r in second_controller.watch_requests] == [delta.offset]
            assert not resumed.snapshot
            assert _topics(resumed) == ["b"]
            assert resumed.offset == delta.offset + 1
            assert watcher.reconnects >= 1

    run(scenario)


def test_messages_of_a_deposed_controller_are_dropped_and_the_log_is_resumed_elsewhere() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=2) as quorum:
            quorum.epoch = 5
            deposed, current = quorum.controllers.values()
            client, _, updates = await _watch(quorum, deposed.address, current.address)
            try:
                snapshot = await _next(updates)
                deposed.watch_epoch = 4
                quorum.append(topic_record("a"))
                delta = await _next(updates)
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert snapshot.controller_epoch == 5
            # The deposed controller's copy of the record was never yielded; the current
            # one's was, resumed right after the snapshot, with no hole and no snapshot.
            assert delta.controller_epoch == 5
            assert _topics(delta) == ["a"]
            assert [r.after_offset for r in current.watch_requests] == [snapshot.offset]

    run(scenario)


def test_a_silent_stream_is_replaced_and_resumed_without_a_new_snapshot() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=2) as quorum:
            client, watcher, updates = await _watch(quorum, idle_reconnect_s=0.1)
            try:
                snapshot = await _next(updates)
                pending = asyncio.ensure_future(_next(updates))
                await asyncio.sleep(0.5)
                quorum.append(topic_record("a"))
                delta = await pending
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert watcher.reconnects >= 2
            requests = [r for c in quorum.controllers.values() for r in c.watch_requests]
            assert sorted(r.after_offset for r in requests)[1:] == [snapshot.offset] * (
                len(requests) - 1
            )
            assert not delta.snapshot and _topics(delta) == ["a"]

    run(scenario)


def test_messages_at_or_behind_the_applied_offset_are_skipped() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=2) as quorum:
            for name in ("a", "b", "c"):
                quorum.append(topic_record(name))
            latest = quorum.offset
            ahead, lagging = quorum.controllers.values()
            # The lagging controller no longer holds the log after the watcher's offset
            # and has applied less of it: it answers with an older snapshot.
            lagging.max_offset = quorum.offset - 2
            lagging.always_snapshot = True
            client, watcher, updates = await _watch(quorum, ahead.address, lagging.address)
            try:
                snapshot = await _next(updates)
                await ahead.stop()
                pending = asyncio.ensure_future(_next(updates))
                await asyncio.sleep(0.3)
                lagging.max_offset = None
                quorum.wake()
                await asyncio.sleep(0.3)
                assert not pending.done()
                quorum.append(topic_record("d"))
                newer = await pending
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert snapshot.offset == latest
            assert not newer.snapshot
            assert newer.offset == latest + 1 == watcher.position
            assert _topics(newer) == ["d"]

    run(scenario)


def test_a_controller_that_does_not_answer_is_passed_over_for_the_next() -> None:
    async def scenario() -> None:
        async with running_quorum(controllers=1) as quorum:
            live = quorum.controllers[1001]
            client, _, updates = await _watch(quorum, f"127.0.0.1:{free_port()}", live.address)
            try:
                snapshot = await _next(updates)
            finally:
                await updates.aclose()  # type: ignore[attr-defined]
                await client.close()

            assert snapshot.snapshot
            assert len(live.watch_requests) == 1

    run(scenario)
