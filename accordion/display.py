"""The consoles the commands print on, and their progress bars.

Tables go to stdout (:data:`out_console`); progress, notes and errors to
stderr (:data:`err_console`), so piped output stays the result alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:  # the replay's types only: display stays below the client in imports
    from accordion.client.replay import Changed, ReplayState
    from broker.messages import JobEvent

# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
out_console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)


def note(text: str) -> None:
    """One plain line on stderr (no markup guessing, no wrapping)."""
    err_console.print(text, highlight=False, soft_wrap=True)


@contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A twin replay's bar: jobs done of the total."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def replay_display(total: int, *, follow: bool, enabled: bool) -> Iterator[Changed | None]:
    """A live replay's bars: jobs submitted and (when followed) jobs ended."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description:>9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TimeElapsedColumn(),
        console=err_console,
    ) as bar:
        sent = bar.add_task("submitted", total=total)
        ended = bar.add_task("finished", total=total) if follow else None
        shown: list[JobEvent | None] = [None]

        def update(state: ReplayState) -> None:
            resize = state.last_resize
            if resize is not None and resize is not shown[0]:
                # A line per resize above the bars: jobs shrinking and expanding live.
                shown[0] = resize
                bar.console.print(
                    f"t={resize.at:,.1f}  job {resize.job_id}  {resize.detail}  "
                    f"({state.shrinks} shrinks, {state.expands} expands so far)",
                    highlight=False,
                    soft_wrap=True,
                )
            bar.update(sent, completed=state.sent)
            if ended is not None:
                # Rejected jobs never run: they leave the bar's total.
                bar.update(ended, completed=state.finished, total=total - len(state.rejected))

        yield update
