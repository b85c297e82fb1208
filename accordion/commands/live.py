"""The live runtime's client commands: ``submit``, ``replay``, ``watch``, and
``scheduler`` and ``agent``, which run ``python -m scheduler`` and ``python -m
nodeagent`` with the CLI's ``--broker`` and ``--root``; ``cancel`` and
``status`` are :mod:`accordion.commands.queue`'s, registered here in between.

Every one takes ``--broker mqtt://HOST[:PORT]`` (env ``ACCORDION_BROKER``) and
``--root`` (env ``ACCORDION_ROOT``). A broker or scheduler that cannot be
reached is a user error (one line, exit 2); a request the scheduler refuses (a
rejected job, a job that cannot be cancelled) is printed with its reason and
exits 1.
"""

from __future__ import annotations

import os
import time
import uuid
from enum import StrEnum
from typing import Annotated

import typer

from accordion.client.catch_up import CatchUp
from accordion.client.live_client import (
    BROKER_ENV,
    DEFAULT_BROKER,
    DEFAULT_TIMEOUT,
    ROOT_ENV,
    broker_settings,
    connect,
    run_async,
)
from accordion.client.replay import ReplayState, arrivals, replay_and_follow
from accordion.client.replay import replay as replay_plan
from accordion.client.specs import job_spec, mpi_of, parse_duration
from accordion.commands import queue
from accordion.commands.options import (
    DURATIONS,
    BrokerOpt,
    JobsOpt,
    RigidOpt,
    RootOpt,
    TimeoutOpt,
    TraceArg,
    WalltimeOpt,
    login_name,
    swf_rules,
)
from accordion.commands.options import variation as variation_of
from accordion.display import err_console, out_console, replay_display
from accordion.errors import LiveError, UserError, parsed, refused, user_errors
from accordion.experiments.twin_options import MissingUtilOpt, Window, WindowOpt
from broker.messages import ClusterSummary, JobEvent, SubmitReply
from broker.settings import (
    ENV_CA,
    ENV_CERT,
    ENV_KEY,
    ENV_PASSWORD,
    ENV_TLS,
    ENV_USERNAME,
    MqttSettings,
)
from broker.topics import DEFAULT_ROOT
from workload.swf_load import load_jobs


class WorkloadKind(StrEnum):
    SLEEP = "sleep"
    MPI = "mpi"


class MpiPattern(StrEnum):
    ALLREDUCE = "allreduce"
    BARRIER = "barrier"


def submit(  # noqa: PLR0917 (typer reads the options from the parameters)
    procs: Annotated[int, typer.Option("--procs", "-n", min=1, help="processes")] = 1,
    walltime: Annotated[
        str, typer.Option("--walltime", "-t", help=f"the wall-time estimate: {DURATIONS}")
    ] = "600",
    work: Annotated[
        str | None,
        typer.Option(
            "--work", help="the real work, seconds at the reference speed (default: --walltime)"
        ),
    ] = None,
    workload: Annotated[
        WorkloadKind, typer.Option("--workload", help="what the job process runs")
    ] = WorkloadKind.SLEEP,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="the job's user (default: your login)")
    ] = None,
    account: Annotated[
        str, typer.Option("--account", "-A", help="account (group, for fair-share)")
    ] = "nobody",
    qos: Annotated[
        int, typer.Option("--qos", "-q", min=0, help="QoS level (the multifactor priority's)")
    ] = 0,
    deadline: Annotated[
        str | None, typer.Option("--deadline", help=f"after the submission: {DURATIONS}")
    ] = None,
    rigid: Annotated[
        bool,
        typer.Option(
            "--rigid",
            help="never run shrunk (jobs are malleable by default: FCFS-malleable may pack "
            "them up to 2 processes per CPU)",
        ),
    ] = False,
    cpu_util: Annotated[
        float, typer.Option("--cpu-util", min=0.01, max=1.0, help="CPU-utilisation fraction u")
    ] = 1.0,
    iterations: Annotated[
        int | None, typer.Option("--iterations", help="mpi: iterations (default 10)")
    ] = None,
    compute: Annotated[
        float | None,
        typer.Option("--compute", help="mpi: CPU seconds per rank per iteration (default 0.1)"),
    ] = None,
    message_bytes: Annotated[
        int | None,
        typer.Option("--message-bytes", help="mpi: bytes each rank exchanges (default 1024)"),
    ] = None,
    pattern: Annotated[
        MpiPattern | None, typer.Option("--pattern", help="mpi: the exchange (default allreduce)")
    ] = None,
    job_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="your job id (default: a new uuid); the same id and flags again is a no-op"
        ),
    ] = None,
    parsable: Annotated[bool, typer.Option("--parsable", help="print only the job id")] = False,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Submit one job; print its id, or the scheduler's reason for rejecting it (exit 1)."""
    with user_errors():
        wall = parse_duration(walltime, what="--walltime")
        spec = job_spec(
            job_id=job_id or str(uuid.uuid4()),
            procs=procs,
            walltime=wall,
            work=None if work is None else parse_duration(work, what="--work"),
            workload=workload.value,
            user=user or login_name(),
            account=account,
            qos=qos,
            deadline=None if deadline is None else parse_duration(deadline, what="--deadline"),
            malleable=not rigid,
            cpu_util=cpu_util,
            mpi=mpi_of(
                workload.value,
                iterations=iterations,
                compute=compute,
                message_bytes=message_bytes,
                pattern=None if pattern is None else pattern.value,
            ),
        )

        async def ask() -> SubmitReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.submit([spec])

        result = run_async(ask()).results[0]
    if not result.accepted:
        raise refused(f"job {result.job_id} rejected: {result.reason}")
    if parsable:
        out_console.print(result.job_id, highlight=False)
    elif result.duplicate:
        out_console.print(f"job {result.job_id} was already submitted; nothing changed")
    else:
        out_console.print(f"submitted job {result.job_id}", highlight=False)


def _print_replay(state: ReplayState, requests: int, *, followed: bool) -> None:
    dup = f" ({state.duplicate} already submitted)" if state.duplicate else ""
    out_console.print(
        f"sent {state.sent} jobs in {requests} requests over {state.wall_seconds:.1f} s wall: "
        f"{len(state.accepted)} accepted{dup}, {len(state.rejected)} rejected",
        highlight=False,
    )
    for job_id, reason in list(state.rejected.items())[:5]:
        out_console.print(f"  rejected {job_id}: {reason}", highlight=False)
    if len(state.rejected) > 5:
        out_console.print(f"  ... and {len(state.rejected) - 5} more rejected", highlight=False)
    if followed:
        ends: dict[str, int] = {}
        for job_id in state.accepted:
            end = state.ended.get(job_id, "not ended")
            ends[end] = ends.get(end, 0) + 1
        text = ", ".join(f"{n} {end}" for end, n in sorted(ends.items()))
        out_console.print(f"ended: {text}", highlight=False)
        # Seen on the watch, so a lower bound if the watcher's queue overflowed.
        out_console.print(
            f"resized while running: {state.shrinks} shrinks, {state.expands} expands",
            highlight=False,
        )


def replay(  # noqa: PLR0917 (typer reads the options from the parameters)
    trace: TraceArg,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            min=1e-6,
            max=1e6,
            help="K, as the scheduler's: submit times are compressed to submit / K wall seconds",
        ),
    ],
    jobs: JobsOpt = None,
    id_prefix: Annotated[
        str | None,
        typer.Option(
            "--id-prefix",
            help="prefix of the job ids (default: a fresh one; reuse one to resend idempotently)",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="also wait until every accepted job has ended")
    ] = False,
    missing_walltime: WalltimeOpt = "runtime",
    missing_util: MissingUtilOpt = 1.0,
    rigid_fraction: RigidOpt = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="seed of the rigid draws")] = 0,
    window: WindowOpt = None,
    mpi_iterations: Annotated[
        int | None,
        typer.Option(
            "--mpi-iterations",
            help="run every job as the MPI-like workload: this many iterations sharing its "
            "run time as compute",
        ),
    ] = None,
    mpi_message_bytes: Annotated[
        int, typer.Option("--mpi-message-bytes", help="with --mpi-iterations: bytes exchanged")
    ] = 1024,
    mpi_pattern: Annotated[
        MpiPattern, typer.Option("--mpi-pattern", help="with --mpi-iterations: the exchange")
    ] = MpiPattern.ALLREDUCE,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Publish TRACE's jobs at their compressed submit times (one request per instant)."""
    with user_errors():
        mpi = (
            None
            if mpi_iterations is None
            else mpi_of(
                "mpi",
                iterations=mpi_iterations,
                message_bytes=mpi_message_bytes,
                pattern=mpi_pattern.value,
            )
        )
        rules = swf_rules(missing_walltime, missing_util)
        picked = parsed(lambda: Window.of(window, jobs), "--window")
        prefix = id_prefix if id_prefix is not None else f"r{uuid.uuid4().hex[:6]}-"
        variation = variation_of(None, "1.5:4", seed, rigid_fraction)

        async def go() -> tuple[ReplayState, int, int]:
            async with connect(broker, root, timeout=timeout, watch=wait) as client:
                machines = await client.machines()
                cpus = sum(m.cpus for m in machines if m.online)
                if not cpus:
                    raise LiveError("no machine is online: start agents first")
                # Jobs wider than the live cluster are skipped as the twin skips them.
                limit = None if picked is None else picked.stop
                loaded = load_jobs(trace, rules, limit=limit, total_cpus=cpus)
                kept = loaded.jobs if picked is None else loaded.jobs[picked.start :]
                if not kept:
                    raise UserError(f"{trace}: no job to replay (skipped: {dict(loaded.skipped)})")
                plan = arrivals(variation.apply(kept), prefix=prefix, mpi=mpi)
                span = plan[-1].at / time_scale
                err_console.print(
                    f"replaying {len(kept)} jobs of {trace.name} as {prefix}*, "
                    f"in {len(plan)} requests over {span:.1f} s wall (time scale {time_scale:g})",
                    highlight=False,
                )
                skipped = sum(loaded.skipped.values())
                total = sum(len(a.jobs) for a in plan)
                with replay_display(total, follow=wait, enabled=progress) as show:
                    if wait:
                        state = await replay_and_follow(
                            client, plan, time_scale=time_scale, on_change=show
                        )
                    else:
                        state = await replay_plan(
                            client, plan, time_scale=time_scale, on_change=show
                        )
                return state, len(plan), skipped

        state, requests, skipped = run_async(go())
    _print_replay(state, requests, followed=wait)
    if skipped:
        out_console.print(f"skipped from the trace: {skipped} (see `accordion simulate`)")
    failed = wait and any(state.ended.get(j) in ("failed", "cancelled") for j in state.accepted)
    if state.rejected or failed:
        raise typer.Exit(1)


def _watched_line(item: JobEvent | ClusterSummary) -> str:
    if isinstance(item, ClusterSummary):
        return (
            f"t={item.now:,.1f}  cluster  {item.machines} machines, {item.free}/{item.cpus} CPUs "
            f"free, {item.queued} queued, {item.running} running, policy {item.policy}"
        )
    detail = f"  {item.detail}" if item.detail else ""
    return f"t={item.at:,.1f}  job {item.job_id}  {item.event}{detail}"


def watch(
    duration: Annotated[
        float | None, typer.Option("--for", min=0.0, help="stop after this many seconds")
    ] = None,
    events: Annotated[
        int | None, typer.Option("--events", min=1, help="stop after this many job events")
    ] = None,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
) -> None:
    """Print job events and the cluster summary as they happen (Ctrl-C stops).

    Times are cluster seconds (= wall seconds x the scheduler's time scale).
    Events missed (a reconnection, a queue that overflowed) are asked of the
    scheduler and printed marked "(from the journal)"; what it cannot give is
    said on stderr.
    """
    with user_errors():

        async def go() -> None:
            async with connect(broker, root, watch=True) as client:
                loop_end = None if duration is None else time.monotonic() + duration
                seen = 0
                catch_up = CatchUp(client)
                await catch_up.start()
                while events is None or seen < events:
                    left = None if loop_end is None else loop_end - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    # Woken at least every second: a reconnection is news with no event.
                    item = await client.next_watched(timeout=min(left or WAKE, WAKE))
                    if isinstance(item, ClusterSummary):
                        out_console.print(_watched_line(item), highlight=False, soft_wrap=True)
                    for shown in await catch_up.take(item if isinstance(item, JobEvent) else None):
                        line = _watched_line(shown.event)
                        line += " (from the journal)" if shown.recovered else ""
                        out_console.print(line, highlight=False, soft_wrap=True)
                        seen += 1
                    for warning in catch_up.warnings:
                        err_console.print(f"watch: {warning}", highlight=False, soft_wrap=True)
                    catch_up.warnings.clear()

        try:
            run_async(go())
        except KeyboardInterrupt:
            return  # Ctrl-C is how a watch ends


#: Wall seconds a watcher waits for an event before it looks whether it reconnected.
WAKE = 1.0


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _forward(ctx: typer.Context, broker: str, root: str, program: str) -> list[str]:
    """``--broker`` and ``--root`` as the module's options, then the other arguments;
    the URL's login and TLS files as ``ACCORDION_MQTT_*`` variables."""
    args = list(ctx.args)
    if any(a in ("-h", "--help") for a in args):
        err_console.print(
            f"accordion {ctx.info_name} runs `python -m {program}` with these options, "
            f"and --broker mqtt://HOST[:PORT] (env {BROKER_ENV}) in place of --host/--port, "
            f"--root (env {ROOT_ENV}).",
            highlight=False,
            soft_wrap=True,
        )
        return args
    clash = [a for a in args if a.split("=")[0] in ("--host", "--port", "--root")]
    if clash:
        raise UserError(f"use --broker mqtt://HOST:PORT and --root, not {' '.join(clash)}")
    settings = broker_settings(broker)
    # What --host/--port cannot say goes where the module reads it: its environment
    # (this process becomes the scheduler or the agent; nothing lands on a command line).
    os.environ.update(settings_env(settings))
    return [f"--host={settings.host}", f"--port={settings.port}", f"--root={root}", *args]


def settings_env(settings: MqttSettings) -> dict[str, str]:
    """The ``ACCORDION_MQTT_*`` variables that carry ``settings``' login and TLS."""
    env: dict[str, str] = {}
    if settings.username:
        env[ENV_USERNAME] = settings.username
    if settings.password is not None:
        env[ENV_PASSWORD] = settings.password
    if settings.tls:
        env[ENV_TLS] = "1"
        for var, path in ((ENV_CA, settings.ca_file), (ENV_CERT, settings.cert_file)):
            if path is not None:
                env[var] = str(path)
        if settings.key_file is not None:
            env[ENV_KEY] = str(settings.key_file)
    return env


def scheduler(
    ctx: typer.Context, broker: BrokerOpt = DEFAULT_BROKER, root: RootOpt = DEFAULT_ROOT
) -> None:
    """Run the live scheduler (`python -m scheduler`'s options; --help lists them)."""
    from scheduler.__main__ import main as scheduler_main  # noqa: PLC0415 (its own start-up)

    with user_errors():
        argv = _forward(ctx, broker, root, "scheduler")
    raise typer.Exit(scheduler_main(argv))


def agent(
    ctx: typer.Context, broker: BrokerOpt = DEFAULT_BROKER, root: RootOpt = DEFAULT_ROOT
) -> None:
    """Run one node agent, e.g. --name n1 --cpus 8 --speed 2 (`python -m nodeagent`'s options)."""
    from nodeagent.__main__ import main as agent_main  # noqa: PLC0415 (its own start-up)

    with user_errors():
        argv = _forward(ctx, broker, root, "nodeagent")
    raise typer.Exit(agent_main(argv))


def register(app: typer.Typer) -> None:
    for command in (submit, queue.cancel, queue.status, replay, watch):
        app.command()(command)
    pass_through = app.command(context_settings=_PASS_THROUGH, add_help_option=False)
    pass_through(scheduler)
    pass_through(agent)
