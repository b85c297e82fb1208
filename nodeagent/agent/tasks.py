"""The agent's helper tasks: each named, all in the one TaskGroup its ``run()`` opens.

The agent's collaborators start helper tasks (a part's supervisor, its rank
finder, a heartbeat's publish, the outbox's writers). Each gets this object
at construction; the agent opens it for the length of ``run()``
(:meth:`Tasks.running`), so no task outlives the agent, and a failing one
ends it (the TaskGroup's rule). Starting a task outside ``run()`` is a bug
and raises.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Tasks:
    """Named helper tasks in one TaskGroup; ``prefix`` starts every task's name."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._group: asyncio.TaskGroup | None = None

    @property
    def open(self) -> bool:
        """Whether tasks can be started (``run()`` is running)."""
        return self._group is not None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open the TaskGroup; leaving waits for every task started meanwhile."""
        if self._group is not None:
            raise RuntimeError(f"{self.prefix}: its tasks are running already")
        group = asyncio.TaskGroup()
        try:
            async with group:
                self._group = group
                yield
        finally:
            self._group = None

    def start(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Start ``coro`` as the task ``<prefix>-<name>``."""
        if self._group is None:
            coro.close()
            raise RuntimeError(f"{self.prefix}: task {name} started outside run()")
        return self._group.create_task(coro, name=f"{self.prefix}-{name}")
