"""Fixtures of the scheduler actor tests (async tests run on both loops: ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.scheduler.runtime.harness import TOPICS, Cluster


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
