"""The queue and the running jobs grouped by user and by group, kept by the core.

Fair-share ranks names, not jobs: every queued job of one user has the same
priority, and among themselves they keep submit and arrival order. With the
queue kept per name in arrival order, a priority source can order the whole
queue by sorting the few names that have jobs waiting and concatenating their
lists, instead of building and sorting a key per job at every event (where a
trace replay under fair-share used to spend most of its time). The running jobs per name let it
add the use so far of the queued names' running jobs without walking every
running job.

The core updates the index as jobs enter and leave the queue and hands it to
policies in the snapshot (``Snapshot.by_account``), only while the snapshot's
queue is the whole queue. ``submit_sorted(kind)`` says whether every name's list is
in submit order as well as arrival order (always, unless a job was inserted
behind a later-submitted one); a source that relies on it checks it.

Most policies never read the index (FIFO order needs no names), so an index
given a ``source`` starts *dormant*: it keeps nothing, and the core skips its
updates (``awake`` is false) until a priority source first reads it; it then
builds itself from the source (the queue in arrival order, the running jobs
in start order), which gives the lists the updates would have built, and is
kept up to date from then on. It wakes one kind at a time: a fair-share by
user never reads the groups, so their lists are not kept (half the upkeep of
every job's arrival, start and end) until something reads a group.

What changed since a reader last looked is logged, so a source can keep its
standings between events and work out again only what moved (updated, not
rebuilt): ``touched(kind)`` lists the names whose queued or
running jobs changed, ``job_log()`` the jobs that entered or left the queue.
Both only grow (a reader remembers how far it read) until a bound, when a new
list is started and a reader holding the old one starts afresh. What a source
keeps lives in ``memos``, on the index, so it belongs to this core alone.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from model.job import Job

if TYPE_CHECKING:  # the snapshot module holds the index; no import cycle at run time
    from scheduler.core.snapshot import RunningJob

KINDS = ("user", "group")
_TOUCHED_AT = 1 << 12
"""Names a touched() list holds before a new one is started (its docstring)."""

Source = Callable[[], "tuple[Iterable[Job], Iterable[RunningJob]]"]
"""The queue in arrival order and the running jobs in start order, for a dormant index."""


class QueueIndex:
    """Queued jobs per user and per group, in arrival order (``order``: job id to arrival)."""

    __slots__ = (
        "_joblog",
        "_kinds",
        "_lists",
        "_order",
        "_running",
        "_source",
        "_submit_sorted",
        "_touched",
        "awake",
        "memos",
    )

    def __init__(self, order: Mapping[str, int], source: Source | None = None) -> None:
        self._order = order
        self._lists: dict[str, dict[str, list[Job]]] = {kind: {} for kind in KINDS}
        self._running: dict[str, dict[str, dict[str, RunningJob]]] = {kind: {} for kind in KINDS}
        self._submit_sorted = dict.fromkeys(KINDS, True)
        # Per kind, the names whose queued or running jobs changed, in order
        # (see touched()).
        self._touched: dict[str, list[str]] = {kind: [] for kind in KINDS}
        # The jobs that entered (True) or left (False) the queue, in order (job_log()).
        self._joblog: list[tuple[Job, bool]] = []
        self._source = source
        #: The kinds kept up to date: all of them without a source, else those read.
        self._kinds: tuple[str, ...] = KINDS if source is None else ()
        #: False while dormant (module docstring): updates are the caller's to skip.
        self.awake = source is None
        #: What priority sources keep between events about this core's queue, by
        #: source (``scheduler.priority.fairshare_rank``): it lives here so that it
        #: belongs to one core and cannot leak into another core or replay.
        self.memos: dict[int, object] = {}

    def submit_sorted(self, kind: str) -> bool:
        """Whether every name's list of ``kind`` is in submit order too (module docstring)."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._submit_sorted[kind]

    def _wake(self, kind: str) -> None:
        assert self._source is not None  # only a dormant kind sleeps
        if kind not in KINDS:
            raise KeyError(f"no queue index by {kind!r}")
        queue, running = self._source()
        self._kinds = (*self._kinds, kind)
        self.awake = True
        for job in queue:
            self._add(kind, job)
        for run in running:
            self._add_running(kind, run)

    def running(self, kind: str, name: str) -> Iterable[RunningJob]:
        """The running jobs of ``name`` (in start order)."""
        if kind not in self._kinds:
            self._wake(kind)
        jobs = self._running[kind].get(name)
        return jobs.values() if jobs is not None else ()

    def running_by_name(self, kind: str) -> Mapping[str, Mapping[str, RunningJob]]:
        """Every name's running jobs by job id (in start order), read-only: one
        lookup per event for fair-share, then one per name in a plain dict."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._running[kind]

    def views(
        self, kind: str
    ) -> tuple[Mapping[str, Sequence[Job]], Mapping[str, Mapping[str, RunningJob]], Sequence[str]]:
        """:meth:`lists`, :meth:`running_by_name` and :meth:`touched` in one call
        (fair-share reads all three at every event)."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._lists[kind], self._running[kind], self._touched[kind]

    def touched(self, kind: str) -> Sequence[str]:
        """The names whose queued or running jobs changed, oldest first (a name once
        per change), so a reader that remembers how far it read knows which names
        to look at again. The list only grows, until it reaches ``_TOUCHED_AT``
        names; then a new list is started, and a reader holding the old one (it
        compares identity) must look at every name again."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._touched[kind]

    def _touch(self, kind: str, name: str) -> None:
        touched = self._touched[kind]
        touched.append(name)
        if len(touched) >= _TOUCHED_AT:
            self._touched[kind] = []

    def running_pairs(self, kind: str, names: Iterable[str]) -> list[tuple[str, RunningJob]]:
        """``(name, run)`` for every running job of each of ``names``: one call per
        event for fair-share, not one per name."""
        if kind not in self._kinds:
            self._wake(kind)
        runs = self._running[kind]
        return [(w, r) for w in names if (jobs := runs.get(w)) for r in jobs.values()]

    def add_running(self, run: RunningJob) -> None:
        for kind in self._kinds:
            self._add_running(kind, run)

    def _add_running(self, kind: str, run: RunningJob) -> None:
        job = run.job
        name = job.user if kind == "user" else job.group
        self._running[kind].setdefault(name, {})[job.id] = run
        self._touch(kind, name)

    def remove_running(self, run: RunningJob) -> None:
        job = run.job
        for kind in self._kinds:
            name = job.user if kind == "user" else job.group
            runs = self._running[kind][name]
            del runs[job.id]
            if not runs:
                del self._running[kind][name]
            self._touch(kind, name)

    def names(self, kind: str) -> Collection[str]:
        """Users (or groups) with at least one queued job."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._lists[kind].keys()

    def lists(self, kind: str) -> Mapping[str, Sequence[Job]]:
        """Every name's queued jobs (arrival order), read-only: one lookup per event."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._lists[kind]

    def jobs(self, kind: str, name: str) -> Sequence[Job]:
        """The queued jobs of ``name``, in arrival order."""
        if kind not in self._kinds:
            self._wake(kind)
        return self._lists[kind][name]

    def arrival(self, job_id: str) -> int:
        """The job's place in arrival order (the queue's order)."""
        return self._order[job_id]

    def job_log(self) -> Sequence[tuple[Job, bool]]:
        """``(job, True)`` for each job that entered the queue since the index woke,
        ``(job, False)`` for each that left, oldest first: a reader that keeps
        per-job state (multi-factor) remembers how far it read. Like
        :meth:`touched` it is started afresh at ``_TOUCHED_AT`` entries, and a
        reader holding the old list must build its state again."""
        return self._joblog

    def _log_job(self, job: Job, entered: bool) -> None:
        joblog = self._joblog
        if len(joblog) >= _TOUCHED_AT:
            joblog = self._joblog = []
        joblog.append((job, entered))

    def add(self, job: Job) -> None:
        for kind in self._kinds:
            self._add(kind, job)
        self._log_job(job, True)

    def _add(self, kind: str, job: Job) -> None:
        order = self._order
        name = job.user if kind == "user" else job.group
        jobs = self._lists[kind].setdefault(name, [])
        if not jobs or order[jobs[-1].id] < order[job.id]:
            at = len(jobs)
            jobs.append(job)
        else:
            at = bisect.bisect_right(jobs, order[job.id], key=lambda j: order[j.id])
            jobs.insert(at, job)
        if (at > 0 and jobs[at - 1].submit > job.submit) or (
            at + 1 < len(jobs) and jobs[at + 1].submit < job.submit
        ):
            self._submit_sorted[kind] = False
        self._touch(kind, name)

    def remove(self, job: Job) -> None:
        order = self._order
        for kind in self._kinds:
            name = job.user if kind == "user" else job.group
            lists = self._lists[kind]
            jobs = lists[name]
            if jobs[0] is job:
                # A name's first job (the usual start, its list being in arrival order).
                del jobs[0]
            else:
                # Each list is in arrival order: find the job by bisection, not a scan
                # (a long-queued user's list is long, and every start removes one job).
                at = bisect.bisect_left(jobs, order[job.id], key=lambda j: order[j.id])
                if at == len(jobs) or jobs[at].id != job.id:
                    raise KeyError(f"job {job.id!r} is not in the queue index")
                del jobs[at]
            if not jobs:
                del lists[name]
            self._touch(kind, name)
        self._log_job(job, False)
