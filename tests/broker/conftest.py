"""Fixtures of the broker tests (their async tests run on both loops: ``tests/conftest.py``).

The real brokers come from ``tests/conftest.py`` (one of each for the whole run).
"""

from __future__ import annotations

import pytest
from _pytest.terminal import TerminalReporter

from tests.broker.scenarios import LATENCIES


def pytest_terminal_summary(terminalreporter: TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(LATENCIES, [])
    if lines:
        terminalreporter.section("MQTT QoS 1 request/response round trip (recorded)")
        for line in lines:
            terminalreporter.write_line(line)
