"""Run a process's main coroutine on uvloop when it is installed (asyncio otherwise)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import uvloop

    HAVE_UVLOOP = True
except ImportError:  # optional: a plain asyncio loop runs the same code, only slower
    HAVE_UVLOOP = False


def run(main: Coroutine[Any, Any, T]) -> T:
    if HAVE_UVLOOP:
        return uvloop.run(main)
    return asyncio.run(main)
