"""Shared fixtures: where the real traces are (tests that need them skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
PWA = SHARED / "workloads" / "pwa"


@pytest.fixture
def pwa() -> Path:
    """The real traces beside the checkout; tests that need them skip when absent."""
    if not PWA.is_dir():
        pytest.skip(f"{PWA} not present")
    return PWA
