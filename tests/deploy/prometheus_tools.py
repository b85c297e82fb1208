"""Debian's ``prometheus`` package, which the deploy tests run (``scripts/setup`` installs it)."""

from __future__ import annotations

import os
import shutil

import pytest


def prometheus_tool(name: str) -> str:
    """The path of ``name`` (``prometheus`` or ``promtool``). Without it the test is
    skipped, except in CI, which must have it: there the test fails."""
    found = shutil.which(name)
    if found is None:
        reason = f"{name} is not installed (apt-get install prometheus; scripts/setup does it)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must have it", pytrace=False)
        pytest.skip(reason)
    return found
