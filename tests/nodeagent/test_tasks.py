"""The agent's helper tasks: named, started only while the agent runs, all awaited."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.agent.tasks import Tasks
from tests.nodeagent.harness import HANG


async def test_tasks_are_named_and_awaited_when_the_group_closes() -> None:
    tasks = Tasks("agent-n1")
    gate = asyncio.Event()
    done: list[str] = []

    async def helper() -> None:
        await gate.wait()
        done.append("helper")

    async with asyncio.timeout(HANG):
        async with tasks.running():
            assert tasks.open
            task = tasks.start(helper(), "part-j1")
            assert task.get_name() == "agent-n1-part-j1"
            gate.set()
        # Leaving waited for it: no helper outlives the agent's run.
        assert done == ["helper"]
    assert not tasks.open


async def test_a_failing_task_ends_the_group() -> None:
    tasks = Tasks("agent-n1")

    async def fails() -> None:
        raise OSError("the bus is gone")

    async def run() -> None:
        async with asyncio.timeout(HANG), tasks.running():
            tasks.start(fails(), "out-x")
            await asyncio.Event().wait()  # cancelled by the group when the task fails

    with pytest.raises(ExceptionGroup) as caught:
        await run()
    assert caught.group_contains(OSError)
    assert not tasks.open


async def test_a_task_outside_run_is_a_bug() -> None:
    tasks = Tasks("agent-n1")

    async def helper() -> None:
        raise AssertionError("never runs")

    # Raises, and closes the coroutine (no "never awaited" warning, an error here).
    with pytest.raises(RuntimeError, match="outside run"):
        tasks.start(helper(), "heartbeat")
    async with tasks.running():
        with pytest.raises(RuntimeError, match="running already"):
            async with tasks.running():
                pass
