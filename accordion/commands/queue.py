"""``accordion status`` and ``accordion cancel``: the queue of a shared cluster, a page at a time.

``status`` asks for one page (``broker.messages.StatusRequest``): filters
``--user``, ``--me`` and ``--state``, at most ``--limit`` jobs, and prints the
page, the totals of what the filters select and, when more follows, the
``--cursor`` of the next page. The scheduler never answers with more than
``broker.limits.MAX_REPLY_BYTES``, so a queue of any length costs one small
reply.

``cancel`` takes job ids, shell patterns over ids (``'sweep-*'``) or a
``--user``, narrowed by ``--state``: one id alone is a single cancel (its
reason, exit 1, if it cannot be); anything else is one bulk request
(``CancelJobs``), answered with counts. A user cancels their own jobs; an
admin, anyone's. It exits 1 when something named could not be cancelled
(not found, or not allowed).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT, connect, run_async
from accordion.commands.options import BrokerOpt, RootOpt, TimeoutOpt, login_name
from accordion.commands.tables import print_status
from accordion.display import out_console
from accordion.errors import UserError, refused, user_errors
from broker.messages import CancelJobsReply, CancelReply, StatusReply
from broker.topics import DEFAULT_ROOT
from broker.vocabulary import JobState

#: Characters a job id cannot hold and a shell pattern does.
GLOB_CHARS = frozenset("*?[")


class LiveState(StrEnum):
    """The states a status or a bulk cancel selects by (a job that ended is not listed)."""

    QUEUED = "queued"
    RUNNING = "running"


StateOpt = Annotated[
    list[LiveState] | None,
    typer.Option("--state", help="only jobs in this state (repeatable; default: both)"),
]
UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="only this user's jobs")]
MeOpt = Annotated[
    bool, typer.Option("--me", help="only your own jobs (your login's user, else your OS login)")
]


def _states(states: list[LiveState] | None) -> tuple[JobState, ...]:
    return tuple(JobState(s.value) for s in dict.fromkeys(states or ()))


def status(  # noqa: PLR0917 (typer reads the options from the parameters)
    user: UserOpt = None,
    me: MeOpt = False,
    state: StateOpt = None,
    limit: Annotated[
        int, typer.Option("--limit", min=0, max=10_000, help="at most this many jobs on the page")
    ] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="the page after the one that printed it")
    ] = None,
    machines: Annotated[
        bool, typer.Option("--machines/--no-machines", help="list the machines (first page)")
    ] = True,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """The machines, then a page of the running and queued jobs, with their totals."""
    with user_errors():
        if me and user is not None:
            raise UserError("give --user U or --me, not both")

        async def ask() -> tuple[StatusReply, str | None]:
            async with connect(broker, root, timeout=timeout) as client:
                who = (client.identity or login_name()) if me else user
                reply = await client.status(
                    user=who,
                    states=_states(state),
                    limit=limit,
                    cursor=cursor,
                    machines=machines and cursor is None,
                )
                return reply, who

        reply, who = run_async(ask())
    print_status(reply, user=who)
    if reply.next_cursor is not None:
        out_console.print(
            f"more: the same command with --cursor {reply.next_cursor}", highlight=False
        )


def cancel(  # noqa: PLR0917 (typer reads the options from the parameters)
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ID|PATTERN]...",
            help="job ids, or shell patterns over them ('sweep-*'); with --user, optional",
        ),
    ] = None,
    user: UserOpt = None,
    me: MeOpt = False,
    state: StateOpt = None,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Cancel jobs: one by id (exit 1 with the reason if it cannot be), or many in one
    request (ids, patterns, --user, --state), answered with counts."""
    names = list(dict.fromkeys(targets or ()))
    with user_errors():
        if me and user is not None:
            raise UserError("give --user U or --me, not both")
        if not names and user is None and not me:
            raise UserError("name job ids, id patterns, --user U or --me (every job must be said)")
        patterns = [n for n in names if GLOB_CHARS & set(n)]
        ids = [n for n in names if n not in patterns]
        single = len(ids) == 1 and not patterns and user is None and not me and not state

        async def ask() -> CancelReply | CancelJobsReply:
            async with connect(broker, root, timeout=timeout) as client:
                if single:
                    return await client.cancel(ids[0])
                return await client.cancel_jobs(
                    ids,
                    patterns=patterns,
                    user=(client.identity or login_name()) if me else user,
                    states=_states(state),
                )

        reply = run_async(ask())
    if isinstance(reply, CancelReply):
        if not reply.cancelled:
            raise refused(f"cannot cancel job {reply.job_id}: {reply.reason}")
        note = f" ({reply.reason})" if reply.reason else ""
        out_console.print(f"cancelled job {reply.job_id}{note}", highlight=False)
        return
    if reply.code is not None and not reply.cancelled:
        raise refused(f"cannot cancel: {reply.reason}")
    out_console.print(
        f"cancelled {reply.cancelled:,} jobs; not found {reply.not_found:,}, not allowed "
        f"{reply.not_allowed:,}, already ended {reply.already_final:,}, left out by the "
        f"filters {reply.skipped:,}",
        highlight=False,
    )
    if reply.code is not None:
        # Some chunks of a long list of ids were cancelled before the journal refused.
        raise refused(f"the rest could not be cancelled: {reply.reason}")
    if reply.not_found or reply.not_allowed:
        raise typer.Exit(1)
