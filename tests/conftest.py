"""Shared fixtures and hooks: the real brokers, the event loops, where the real traces are.

The brokers (``tests.brokers``) are registered here and only here, so one
Mosquitto and one embedded broker serve the whole test run.

The async tests of the live runtime's packages (:data:`BOTH_LOOPS`) run twice,
on asyncio and on uvloop, the loop the actors run on in production; the other
async tests (the twin's, the benches') run on asyncio only. A test that asks for
the virtual clock (``tests.virtual_clock``) runs on it alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import uvloop

from tests.brokers import embedded_broker, mosquitto, mqtt_broker, private_mosquitto
from tests.virtual_clock import VIRTUAL, VirtualClockLoop

__all__ = ["embedded_broker", "mosquitto", "mqtt_broker", "private_mosquitto"]

SHARED = Path(__file__).resolve().parents[2] / "shared"
PWA = SHARED / "workloads" / "pwa"

TESTS = Path(__file__).resolve().parent
#: Folders (under ``tests/``) whose async tests run on asyncio and on uvloop.
BOTH_LOOPS = (
    Path("broker"),
    Path("integration"),
    Path("nodeagent"),
    Path("accordion/live"),
    Path("scheduler/runtime"),
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: the loops an async test is parametrized over."""
    asked = item.get_closest_marker("asyncio")
    if asked is not None and VIRTUAL in asked.kwargs.get("loop_factories", ()):
        return {VIRTUAL: VirtualClockLoop}
    where = item.path.resolve()
    if any(where.is_relative_to(TESTS / folder) for folder in BOTH_LOOPS):
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
def pwa() -> Path:
    """The real traces beside the checkout; tests that need them skip when absent."""
    if not PWA.is_dir():
        pytest.skip(f"{PWA} not present")
    return PWA
