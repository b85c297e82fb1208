"""The integration tests' brokers come from ``tests/conftest.py`` (one of each per run).

``BrokerEndpoint`` stays importable from here for the modules that name it.
"""

from __future__ import annotations

from tests.brokers import BrokerEndpoint

__all__ = ["BrokerEndpoint"]
