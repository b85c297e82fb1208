"""The integration tests' brokers come from ``tests/conftest.py`` (one of each per run).

Async tests run on asyncio and on uvloop (``tests/conftest.py`` says which
folders do). ``BrokerEndpoint`` stays importable from here for the modules that
name it.
"""

from __future__ import annotations

from tests.brokers import BrokerEndpoint

__all__ = ["BrokerEndpoint"]
