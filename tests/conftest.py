"""Shared fixtures: where the real traces are, and the real brokers.

The brokers (``tests.brokers``) are registered here and only here, so one
Mosquitto and one embedded broker serve the whole test run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.brokers import embedded_broker, mosquitto, mqtt_broker, private_mosquitto

__all__ = ["embedded_broker", "mosquitto", "mqtt_broker", "private_mosquitto"]

SHARED = Path(__file__).resolve().parents[2] / "shared"
PWA = SHARED / "workloads" / "pwa"


@pytest.fixture
def pwa() -> Path:
    """The real traces beside the checkout; tests that need them skip when absent."""
    if not PWA.is_dir():
        pytest.skip(f"{PWA} not present")
    return PWA
