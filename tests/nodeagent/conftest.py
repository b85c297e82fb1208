"""Fixtures of the node agent tests: every async test runs on asyncio and on uvloop.

The real brokers come from ``tests/integration/conftest.py`` (the shared
session fixtures), re-exported here so the agent's integration tests sit
beside its other tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

from tests.integration.conftest import embedded_broker, mosquitto, mqtt_broker

__all__ = ["embedded_broker", "mosquitto", "mqtt_broker"]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: parametrize every async test over these loops."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
