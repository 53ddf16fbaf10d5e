"""A client core's stop: the channels close whatever its background tasks did, and a timeout
around the close is not swallowed (brook.client.core)."""

from __future__ import annotations

import asyncio

import pytest

from brook.client.config import producer_config
from brook.client.core import ClientCore
from brook.rpc.channels import ChannelPoolClosedError

MESSAGE_BYTES_MAX = 1024 * 1024
ADDRESS = "127.0.0.1:1"
# How long the slow task below takes to wind down once cancelled: far longer than the
# timeout the test puts around stop().
UNWIND_S = 30.0
STOP_TIMEOUT_S = 0.1


class _Core(ClientCore):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(
            producer_config(bootstrap_servers="127.0.0.1:1"),
            loop,
            send_bytes_max=MESSAGE_BYTES_MAX,
            receive_bytes_max=MESSAGE_BYTES_MAX,
        )

    async def start(self) -> None:
        pass


async def _crashes() -> None:
    raise RuntimeError("the background task crashed")


async def _unwinds_slowly() -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.sleep(UNWIND_S)


def test_a_crashed_background_task_is_logged_and_the_channels_still_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        core = _Core(asyncio.get_running_loop())
        core.network.channel(ADDRESS)
        core.run_in_background(_crashes(), "crashes")
        await asyncio.sleep(0)  # the task runs and fails
        await core.stop()
        with pytest.raises(ChannelPoolClosedError):
            core.network.channel("127.0.0.1:2")

    asyncio.run(scenario())
    assert "client background task had failed" in caplog.text


def test_a_timeout_around_stop_is_raised_and_the_channels_close() -> None:
    async def scenario() -> None:
        core = _Core(asyncio.get_running_loop())
        core.network.channel(ADDRESS)
        core.run_in_background(_unwinds_slowly(), "unwinds-slowly")
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await core.stop()
        with pytest.raises(ChannelPoolClosedError):
            core.network.channel("127.0.0.1:2")
        for task in asyncio.all_tasks():
            if task.get_name() == "unwinds-slowly":
                task.cancel()

    asyncio.run(scenario())
