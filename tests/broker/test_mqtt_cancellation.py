"""A task cancelled while the bus awaits an ack is cancelled, whatever else arrives.

aiomqtt awaits a PUBACK or SUBACK with ``asyncio.wait_for``, which on Python
3.11 returns the result instead of raising when the cancellation and the ack
arrive in the same loop step. A test agent's task, cancelled at its end while it
published a reply, then waited on its inbox for ever, and the suite with it. The
cases build that step exactly: the ack's future completes, then the task is
cancelled, before either is seen.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from broker.mqtt import _acked


async def _ack_and_cancel_at_once(call: asyncio.Future[None]) -> asyncio.Task[None]:
    """A task awaiting ``call`` through ``asyncio.wait_for``, whose ack and cancellation
    then arrive in one loop step; returns it (done or not)."""

    async def publish() -> None:
        await _acked(asyncio.wait_for(call, timeout=60.0))

    task = asyncio.create_task(publish())
    await asyncio.sleep(0)  # it runs up to the wait for its ack
    call.set_result(None)
    task.cancel()
    return task


async def test_a_cancellation_that_crosses_the_ack_is_raised() -> None:
    ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = await _ack_and_cancel_at_once(ack)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_an_ack_without_a_cancellation_returns() -> None:
    ack: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    ack.set_result(7)
    assert await _acked(asyncio.wait_for(ack, timeout=60.0)) == 7


async def test_a_timeout_around_the_call_still_times_out() -> None:
    """A cancellation that ``asyncio.timeout`` asked for is its own to turn into
    ``TimeoutError`` (it reads it from the same count)."""
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await _acked(asyncio.wait_for(never, timeout=60.0))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12's wait_for raises it")
async def test_python_3_11_wait_for_alone_swallows_it() -> None:
    """Why ``_acked`` exists: without it, the same step returns normally."""
    ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def publish() -> None:
        await asyncio.wait_for(ack, timeout=60.0)

    task = asyncio.create_task(publish())
    await asyncio.sleep(0)
    ack.set_result(None)
    task.cancel()
    await task  # no CancelledError: the cancellation was lost
    assert not task.cancelled()
    assert task.cancelling() == 1
