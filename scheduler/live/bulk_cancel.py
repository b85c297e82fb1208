"""A bulk cancel: many jobs in one request, answered with counts.

Theory of operation. ``accordion cancel --user U --state queued``, ``accordion
cancel 'sweep-*'`` or a list of ids is one ``CancelJobs``: one request, one
batch of the actor, so one journal transaction, instead of a round trip per
job (ninety thousand of them, after a careless submission). The jobs chosen
(``broker.messages.CancelJobs`` states the rule) are checked as a single
cancel checks one:

- a named id that is no job is ``not_found``; a named job that has already
  ended is ``already_final``; a named job the ``user`` or ``states`` filters
  leave out is ``skipped``;
- a job of another user is ``not_allowed`` unless the requester is an admin
  (or the broker has no logins: nobody is told apart); patterns and a
  ``user`` match only queued and running jobs, so a pattern never counts an
  ended job;
- everything else is cancelled: queued jobs together, in one pass over the
  queue and one journal statement (``Context.cancel_queued``), running jobs
  one by one, their parts told to stop (``Context.cancel_job``). Each gets its
  ``cancelled`` event, as a single cancel's.

A request that names nothing (no ids, no pattern, no user) is refused: "every
job" must be said, as ``--user``. While the journal cannot be written (its
disk full or failing) a bulk cancel does nothing and says so (code
``journal``), as a single cancel does: a cancel is a promise too.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

from broker.messages import CancelJobs, CancelJobsReply
from broker.vocabulary import BadMessage, CancelRefusal
from model.job import Job
from scheduler.core.job_lifecycle import JobState, is_final
from scheduler.live.context import Context

_LIVE = frozenset({JobState.QUEUED, JobState.RUNNING})
DETAIL = "cancelled by a client"


class NothingNamedError(ValueError):
    """A bulk cancel that names no job, pattern or user."""


def cancel_jobs(
    ctx: Context, request: CancelJobs, now: float, *, requester: str | None
) -> CancelJobsReply:
    """Apply ``request`` (module docstring); ``requester``: the user asking, None for an
    admin or a broker without logins. Raises :class:`NothingNamedError`."""
    if not (request.job_ids or request.patterns or request.user is not None):
        raise NothingNamedError("a bulk cancel names job ids, id patterns or a user")
    if ctx.journal.failure is not None:
        reason = f"{ctx.journal.failure}; try again later"
        return CancelJobsReply(
            request_id=request.request_id,
            cancelled=0,
            not_found=0,
            not_allowed=0,
            already_final=0,
            skipped=0,
            code=CancelRefusal.JOURNAL,
            reason=reason,
        )
    core = ctx.core
    states = {JobState(s.value) for s in request.states} or set(_LIVE)
    counts = {"not_found": 0, "not_allowed": 0, "already_final": 0, "skipped": 0}
    chosen: dict[str, JobState] = {}
    named = dict.fromkeys(request.job_ids)
    for job_id in named:
        state = core.state_of(job_id)
        job = core.job(job_id)
        if state is None or job is None:
            counts["not_found"] += 1
        elif requester is not None and job.user != requester:
            counts["not_allowed"] += 1
        elif is_final(state):
            counts["already_final"] += 1
        elif state not in states or (request.user is not None and job.user != request.user):
            counts["skipped"] += 1
        else:
            chosen[job_id] = state
    if request.patterns or not request.job_ids:
        match = _matcher(request.patterns)
        for job, state in _live_jobs(ctx):
            if job.id in named or state not in states:
                continue
            if match is not None and not match.match(job.id):
                continue
            if request.user is not None and job.user != request.user:
                continue
            if requester is not None and job.user != requester:
                counts["not_allowed"] += 1
                continue
            chosen[job.id] = state
    if counts["not_allowed"]:
        ctx.count_bad(
            BadMessage.FORBIDDEN, f"{requester} may not cancel {counts['not_allowed']} jobs"
        )
    queued = [j for j, s in chosen.items() if s is JobState.QUEUED]
    cancelled = ctx.cancel_queued(queued, now, DETAIL)
    for job_id, state in chosen.items():
        if state is JobState.RUNNING:
            ctx.cancel_job(job_id, now, DETAIL)
            cancelled += 1
    return CancelJobsReply(
        request_id=request.request_id,
        cancelled=cancelled,
        not_found=counts["not_found"],
        not_allowed=counts["not_allowed"],
        already_final=counts["already_final"],
        skipped=counts["skipped"],
    )


def _matcher(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def _live_jobs(ctx: Context) -> Iterator[tuple[Job, JobState]]:
    """Every running (or pending) job, then every queued one, in arrival order."""
    core = ctx.core
    running = [r.job for r in core.running] + [p.job for p in core.pending.values()]
    for job in sorted(running, key=lambda j: core.arrival(j.id)):
        yield job, JobState.RUNNING
    for job in list(core.queue):
        yield job, JobState.QUEUED
