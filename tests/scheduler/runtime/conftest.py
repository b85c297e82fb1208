"""Fixtures of the scheduler actor tests: every async test runs on asyncio and on uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import pytest
import uvloop

from tests.scheduler.runtime.harness import TOPICS, Cluster


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: parametrize every async test over these loops."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite"


@pytest.fixture
async def cluster(journal_path: Path) -> AsyncIterator[Cluster]:
    """A running scheduler (FCFS) with a connected client; no agents yet."""
    c = Cluster(journal_path)
    await c.client.start(TOPICS.events, TOPICS.cluster)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()
