"""The integration tests' brokers come from ``tests/conftest.py`` (one of each per run).

Async tests run on asyncio and on uvloop. ``BrokerEndpoint`` stays importable
from here for the modules that name it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

from tests.brokers import BrokerEndpoint

__all__ = ["BrokerEndpoint"]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: parametrize every async test over these loops."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
