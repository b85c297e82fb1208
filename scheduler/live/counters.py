"""What the live handlers count, as the protocols they count through.

The handlers are sans-I/O and know nothing of Prometheus: they count through
:class:`HandlerMetrics`, which says which counters and histograms they touch
and how (``labels(...).inc()``, ``inc()``, ``observe()``). The runtime's
``scheduler.runtime.exporter.SchedulerMetrics`` is one (its Prometheus
counters and journaled counters have these methods); a test may pass its own.
Label values are the bounded sets the exporter declares (reasons, states,
directions, outcomes).
"""

from __future__ import annotations

from typing import Protocol


class Count(Protocol):
    """A counter without labels, or one series of a labelled one."""

    def inc(self, amount: float = 1) -> None: ...


class Labelled(Protocol):
    """A counter with labels: ``labels(reason="...")`` is the series to count on."""

    def labels(self, **labels: str) -> Count: ...


class Observed(Protocol):
    """A histogram."""

    def observe(self, amount: float) -> None: ...


class HandlerMetrics(Protocol):
    """The scheduler's counters the live handlers count on."""

    @property
    def submissions(self) -> Labelled:
        """By ``result``: accepted, rejected, duplicate."""

    @property
    def rejections(self) -> Labelled:
        """By ``reason`` a submission was refused."""

    @property
    def bad_messages(self) -> Labelled:
        """By ``reason`` a payload was refused on receipt."""

    @property
    def jobs_finished(self) -> Labelled:
        """By final ``state``."""

    @property
    def requeues(self) -> Count: ...

    @property
    def requeues_uncharged(self) -> Labelled:
        """By ``cause`` of a requeue not charged to the job's budget."""

    @property
    def agents_lost(self) -> Labelled:
        """By ``reason`` the agent was noticed lost."""

    @property
    def agents_suspect(self) -> Count: ...

    @property
    def stale_reports(self) -> Count: ...

    @property
    def agent_holds(self) -> Labelled:
        """By ``outcome`` of a hold for adoption."""

    @property
    def adopted_parts(self) -> Count: ...

    @property
    def job_resizes(self) -> Labelled:
        """By ``direction``: shrink, expand."""

    @property
    def part_launch(self) -> Observed:
        """Wall seconds from a part's start command to its process running."""

    def job_finished(self, *, procs: int, submit: float, start: float, end: float) -> None:
        """A job finished: its wait, response and slowdown observed (cluster seconds)."""
