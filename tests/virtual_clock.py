"""An asyncio event loop on a virtual clock, for tests of code that waits on the loop's time.

:class:`VirtualClockLoop` is an ordinary selector loop whose ``time()`` starts at
0 and moves only when the loop would otherwise wait: when no callback is ready
and no file descriptor has anything to read, it jumps to the next timer instead
of sleeping until it. Code that schedules by the loop's clock (``asyncio.sleep``,
``asyncio.timeout``, ``loop.call_at``) then runs at exactly the instants it
asks for, in no wall time, whatever the machine's load: a test can assert
those instants exactly.

Only for code whose waits are all timers or in-loop events (the in-process
broker, the scheduler actor on a manual clock). A wait on a thread or another
process with a timer pending would see the timer fire first, since the clock
does not wait for them; a wait with no timer pending blocks as usual.

A test asks for this loop with ``@pytest.mark.asyncio(loop_factories=[VIRTUAL])``
(``tests/conftest.py`` offers it to such tests only).
"""

from __future__ import annotations

import asyncio
import selectors

VIRTUAL = "virtual-clock"
"""The loop factory's name, as a test's asyncio mark selects it."""


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that, with nothing ready, moves the clock by the timeout instead of waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer: only a file descriptor can wake the loop
            return super().select(None)
        self.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` is virtual (see the module docstring)."""

    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)

    def time(self) -> float:
        return self._jumping.now
