"""What the live scheduler plans and why: ``priority`` and ``whatif``.

``accordion priority`` prints each queued job's priority factor by factor, as
Slurm's ``sprio`` does (``scheduler.priority.factors`` says what each factor
is). ``accordion whatif --policies easy,conservative,fcfs-malleable`` asks
the scheduler for one snapshot and replays it in the twin from now under
each policy (``accordion.experiments.whatif``): their mean predicted wait,
response and bounded slowdown side by side, then each queued job's predicted
start under each. ``accordion status`` shows the live policy's own predicted
starts and reasons.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT, connect, run_async
from accordion.commands.options import (
    BrokerOpt,
    PlacementOpt,
    RootOpt,
    TimeoutOpt,
    policy_opts,
)
from accordion.commands.tables import predicted_start
from accordion.display import out_console
from accordion.errors import UserError, user_errors
from accordion.experiments.whatif import RunTimes, WhatIf, what_if
from broker.insight import PriorityReply, SnapshotReply
from broker.topics import DEFAULT_ROOT
from model.metrics import DEFAULT_TAU
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import build_policy_with, options_for, policy_info


def priority(
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="show at most this many queued jobs")
    ] = 50,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Each queued job's priority, factor by factor (like Slurm's sprio), in the policy's order."""
    with user_errors():

        async def ask() -> PriorityReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.priority()

        reply = run_async(ask())
    names: list[str] = []
    for row in reply.rows:
        for f in row.factors:
            if f.name not in names:
                names.append(f.name)
    out_console.print(
        f"queue by priority: {len(reply.rows)} jobs, policy {reply.policy}, priority "
        f"{reply.source}" + (" (factors weighted: they sum to the priority)" if names else ""),
        highlight=False,
        soft_wrap=True,
    )
    table = Table()
    for name in ("rank", "job", "user", "priority", *names):
        table.add_column(name, justify="left" if name in ("job", "user") else "right")
    for row in reply.rows[:limit]:
        by_name = {f.name: f.value for f in row.factors}
        table.add_row(
            str(row.rank),
            row.job_id,
            row.user,
            "-" if row.priority is None else f"{row.priority:,.4g}",
            *(f"{by_name[n]:,.4g}" if n in by_name else "" for n in names),
        )
    if len(reply.rows) > limit:
        table.add_row("", f"... {len(reply.rows) - limit} more", *[""] * (2 + len(names)))
    out_console.print(table)
    if reply.rows and not names:
        out_console.print(f"{reply.source}: the order is the priority (no factors)")


def whatif(  # noqa: PLR0917 (typer reads the options from the parameters)
    policies: Annotated[
        str,
        typer.Option(
            "--policies", help="comma-separated POLICY[:PRIORITY] to replay the queue under"
        ),
    ] = "easy,conservative,fcfs-malleable",
    runtimes: Annotated[
        RunTimes,
        typer.Option(
            "--runtimes",
            help="what jobs are assumed to run: their estimates, or EASY++'s predictions",
        ),
    ] = RunTimes.ESTIMATE,
    policy_opt: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-opt",
            metavar="KEY=VALUE",
            help="set a parameter of every policy that has KEY (repeatable)",
        ),
    ] = None,
    placement: PlacementOpt = PlacementRule.FASTEST,
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="show the predicted starts of this many jobs")
    ] = 20,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Replay the live queue from now under other policies, side by side (nothing changes
    on the cluster)."""
    with user_errors():
        specs = [s.strip() for s in policies.split(",") if s.strip()]
        if not specs:
            raise UserError("--policies names no policy")
        if len(set(specs)) != len(specs):
            raise UserError(f"--policies names a policy twice: {policies}")
        given = policy_opts(policy_opt)
        options = {spec: options_for(spec, given) for spec in specs}
        unused = [k for k in given if not any(k in o for o in options.values())]
        if unused:
            raise UserError(f"no policy of --policies has option {unused[0]!r}")
        for spec in specs:
            build_policy_with(spec, options[spec], placement=placement)  # a bad name fails here

        async def ask() -> SnapshotReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.snapshot()

        reply = run_async(ask())
        _check_fits(reply, specs)
        answers = what_if(reply, specs, runtimes=runtimes, options=options, placement=placement)
    _print_whatif(reply, answers, runtimes, limit)


def _check_fits(reply: SnapshotReply, specs: list[str]) -> None:
    """A policy that runs a job on one machine cannot replay a job wider than them all."""
    widest = max((m.cpus for m in reply.machines), default=0)
    wide = [j.id for j in reply.queue if j.procs > widest]
    for spec in specs:
        if wide and policy_info(spec).single_machine:
            raise UserError(
                f"{spec} runs each job on one machine, and job {wide[0]} needs more than the "
                f"widest machine's {widest} CPUs"
            )


def _print_whatif(
    reply: SnapshotReply, answers: list[WhatIf], runtimes: RunTimes, limit: int
) -> None:
    now = reply.now
    live = reply.policy
    out_console.print(
        f"what if: {len(reply.queue)} queued and {len(reply.running)} running jobs at cluster "
        f"time {now:,.1f} s, replayed from now in the twin (run times: {runtimes}; live policy "
        f"{live}; cluster seconds; means over the queued jobs)",
        highlight=False,
        soft_wrap=True,
    )
    summary = Table()
    summary.add_column("metric")
    for a in answers:
        summary.add_column(a.spec + (" (live)" if a.spec == live else ""), justify="right")
    rows = (
        ("mean predicted wait (s)", [f"{a.wait_mean:,.1f}" for a in answers]),
        ("mean predicted response (s)", [f"{a.response_mean:,.1f}" for a in answers]),
        (
            f"mean bounded slowdown (tau {DEFAULT_TAU:g} s)",
            [f"{a.bounded_slowdown_mean:.3f}" for a in answers],
        ),
        ("all done in (s)", [f"{a.makespan:,.0f}" for a in answers]),
    )
    for label, cells in rows:
        summary.add_row(label, *cells)
    out_console.print(summary)
    starts = Table(title="predicted starts (cluster seconds, and how long from now)")
    for name in ("job", "user", "procs", "submitted"):
        starts.add_column(name, justify="right" if name in ("procs", "submitted") else "left")
    for a in answers:
        starts.add_column(a.spec, justify="right")
    for job in reply.queue[:limit]:
        starts.add_row(
            job.id,
            job.user,
            str(job.procs),
            f"{job.submit:,.1f}",
            *(predicted_start(a.starts.get(job.id), now) for a in answers),
        )
    if len(reply.queue) > limit:
        starts.add_row(f"... {len(reply.queue) - limit} more", *[""] * (3 + len(answers)))
    out_console.print(starts)


def register(app: typer.Typer) -> None:
    app.command()(priority)
    app.command()(whatif)
