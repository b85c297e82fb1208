"""Fixtures of the node agent tests: every async test runs on asyncio and on uvloop.

The real brokers come from ``tests/conftest.py`` (one of each for the whole run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: parametrize every async test over these loops."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
