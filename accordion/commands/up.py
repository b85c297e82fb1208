"""``accordion up``: a supervised local cluster from a cluster file, and ``--demo``.

The cluster itself is :class:`accordion.cluster.local_cluster.LocalCluster`; the demo is
:mod:`accordion.experiments.demo`. This module is the command: options, the run
directory, the ordered stop on Ctrl-C or SIGTERM, and what is printed. While
it runs, a process of the cluster that dies is restarted (a line on stderr
says which, and its restart count); the cluster is torn down only by Ctrl-C,
SIGTERM, or a process that exits with a usage error. The stop is polite: the
agents leave their jobs running within their lease, so ``accordion up`` again
on the same ``--run-dir`` adopts them, and no job's requeue budget is charged
for it (``--drain-on-stop``: the agents run their jobs to their end first).
"""

from __future__ import annotations

import getpass
import shutil
import signal
import tempfile
import time
import uuid
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from accordion.client.live_client import run_async
from accordion.cluster.local_cluster import DEFAULT_CLUSTER, LocalCluster, Restart
from accordion.cluster.processes import UpError
from accordion.cluster.speed import HostSpeed
from accordion.cluster.wiring import Sharing
from accordion.commands.options import (
    OverheadOpt,
    PlacementOpt,
    PolicyOpt,
    PolicyOptsOpt,
    ProgressOpt,
    RootOpt,
    policy_opts,
)
from accordion.commands.tables import print_demo, print_endpoints
from accordion.display import note, replay_display
from accordion.errors import LiveError, UserError, parsed, refused, user_errors
from accordion.experiments.demo import (
    DemoPlan,
    DemoReport,
    LiveRun,
    plan_demo,
    report_demo,
    run_demo,
)
from accordion.experiments.twin_options import ModelOpt, execution_model
from broker.bus import BusError
from broker.topics import DEFAULT_ROOT
from model.execution import ModelKind
from scheduler.planning.placement import PlacementRule
from workload.cluster import load_cluster

#: Wall seconds between two looks at the children while the cluster runs.
SUPERVISE_PERIOD = 0.2


class BrokerKind(StrEnum):
    AUTO = "auto"
    MOSQUITTO = "mosquitto"
    EMBEDDED = "embedded"


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops ``accordion up`` as Ctrl-C does: the cluster in order."""
    raise KeyboardInterrupt


def _os_login() -> str:
    try:
        return getpass.getuser() or "user"
    except (OSError, KeyError):  # no login name in the environment or the user database
        return "user"


def _print_restart(restart: Restart) -> None:
    note(restart.describe())


def up(  # noqa: PLR0917 (typer reads the options from the parameters)
    cluster: Annotated[
        Path | None,
        typer.Option("--cluster", help="cluster file (TOML); default: examples/cluster.toml"),
    ] = None,
    policy: PolicyOpt = "easy",
    policy_opt: PolicyOptsOpt = None,
    placement: PlacementOpt = PlacementRule.FASTEST,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            min=1e-6,
            max=1e6,
            help="K: cluster seconds per wall second (default 1; with --demo, chosen so the "
            "demo takes --demo-seconds)",
        ),
    ] = None,
    broker_kind: Annotated[
        BrokerKind,
        typer.Option("--broker-kind", help="auto: Mosquitto when installed, else embedded"),
    ] = BrokerKind.AUTO,
    broker_port: Annotated[
        int, typer.Option("--broker-port", min=0, max=65535, help="0: a free port")
    ] = 0,
    root: RootOpt = DEFAULT_ROOT,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo", help="submit a demo workload, show its progress, compare with the twin"
        ),
    ] = False,
    demo_jobs: Annotated[int, typer.Option("--demo-jobs", min=1, help="jobs of the demo")] = 60,
    demo_seconds: Annotated[
        float, typer.Option("--demo-seconds", min=1.0, help="about how long the demo runs, wall")
    ] = 40.0,
    seed: Annotated[int, typer.Option("--seed", help="seed of the demo workload")] = 1,
    keep: Annotated[
        bool, typer.Option("--keep", help="keep the run directory (journal, logs) afterwards")
    ] = False,
    run_dir: Annotated[
        Path | None,
        typer.Option("--run-dir", help="the run directory (kept; default: a temporary one)"),
    ] = None,
    model: ModelOpt = ModelKind.LINEAR,
    overhead: OverheadOpt = 0.0,
    progress: ProgressOpt = True,
    auth: Annotated[
        bool | None,
        typer.Option(
            "--auth/--no-auth",
            help="logins and ACLs generated in the run directory's auth/ (every process "
            "logs in; users read only their own replies and events). Default: on with "
            "Mosquitto; the embedded broker admits everyone",
            show_default=False,
        ),
    ] = None,
    users: Annotated[
        list[str] | None,
        typer.Option("--user", help="with --auth: a user account to create (repeatable)"),
    ] = None,
    limits: Annotated[
        Path | None,
        typer.Option(
            "--limits",
            help="the scheduler's limits file (TOML, [limits]: max_queued_per_user, "
            "max_jobs_per_request, max_user_cpus, max_request_bytes); the options below "
            "override it",
        ),
    ] = None,
    max_queued_per_user: Annotated[
        int | None,
        typer.Option("--max-queued-per-user", min=1, help="jobs one user may have queued [10,000]"),
    ] = None,
    max_jobs_per_request: Annotated[
        int | None,
        typer.Option(
            "--max-jobs-per-request", min=1, help="jobs one submission may carry [10,000]"
        ),
    ] = None,
    max_user_cpus: Annotated[
        int | None,
        typer.Option(
            "--max-user-cpus",
            min=1,
            help="CPUs one user's running jobs may hold; a job past it waits (the demo's twin "
            "applies it too) [no limit]",
        ),
    ] = None,
    max_request_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-request-bytes", min=1, help="the largest request, bytes [16 MiB, the most]"
        ),
    ] = None,
    associations: Annotated[
        Path | None,
        typer.Option(
            "--associations",
            help="the accounts each user may charge and the highest QoS they may ask for "
            "(TOML); default: not checked",
        ),
    ] = None,
    drain_on_stop: Annotated[
        bool,
        typer.Option(
            "--drain-on-stop",
            help="on Ctrl-C, the agents take no new job and run theirs to their end before "
            "they stop (Ctrl-C again: they leave them); default: they leave their jobs "
            "running for the lease, for `up` again on the same --run-dir to adopt",
        ),
    ] = False,
) -> None:
    """Start a local cluster from a cluster file: broker, scheduler, agents (Ctrl-C stops).

    A process that dies is restarted. With --demo it also replays a demo
    workload through it and ends with the summary metrics, next to the twin's
    for the same jobs.
    """
    with user_errors():
        sharing = Sharing(
            limits,
            associations,
            {
                k: v
                for k, v in (
                    ("max_queued_per_user", max_queued_per_user),
                    ("max_jobs_per_request", max_jobs_per_request),
                    ("max_user_cpus", max_user_cpus),
                    ("max_request_bytes", max_request_bytes),
                )
                if v is not None
            },
        )
        in_force = sharing.check()  # the scheduler's reading, before anything starts
        spec = load_cluster(
            cluster if cluster is not None else DEFAULT_CLUSTER, auto_speed=HostSpeed()
        )
        options = policy_opts(policy_opt)
        if model is ModelKind.CALIBRATED:
            raise UserError(
                "--execution-model calibrated is the twin's (simulate, compare, sweep): a live "
                "cluster's agents cannot be given a calibration yet"
            )
        # The same model for the scheduler, its agents and the demo's twin (the seed
        # of the paper model's OV is the demo's --seed).
        execution = parsed(
            lambda: execution_model(model, overhead=overhead, seed=seed), "--execution-model"
        )
        plan: DemoPlan | None = None
        if demo:
            plan = plan_demo(
                spec,
                jobs=demo_jobs,
                seconds=demo_seconds,
                seed=seed,
                policy=policy,
                placement=placement,
                time_scale=time_scale,
                policy_options=options,
                execution=execution,
                max_user_cpus=in_force.max_user_cpus,
            )
        scale = plan.time_scale if plan is not None else (time_scale or 1.0)
        # Created when the cluster starts; removed after it unless kept.
        fresh = Path(tempfile.gettempdir()) / f"accordion-up-{uuid.uuid4().hex[:8]}"
        directory = run_dir if run_dir is not None else fresh
        local = LocalCluster(
            spec,
            directory,
            policy=policy,
            policy_options=options,
            placement=placement,
            time_scale=scale,
            broker=broker_kind.value,
            broker_port=broker_port,
            root=root,
            on_restart=_print_restart,
            execution=execution,
            auth=auth,
            # Without --user, one account for whoever runs it.
            users=users or [_os_login()],
            sharing=sharing,
            drain_on_stop=drain_on_stop,
        )
    if plan is not None:
        note(
            f"demo: {len(plan.jobs)} generated jobs (seed {seed}) on {spec.name}; the twin's "
            f"makespan is {plan.twin.makespan:,.0f} s, so time scale {plan.time_scale:g} "
            f"makes it about {plan.twin.makespan / plan.time_scale:.0f} s of wall time"
        )
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    failed: str | None = None
    interrupted = False
    report: DemoReport | None = None
    try:
        with local:
            note(
                f"starting {local.broker_kind} broker, scheduler and {len(spec.machines)} agents "
                f"(run directory {directory})"
            )
            run_async(_ready(local))
            local.write_endpoints()
            print_endpoints(local, spec)
            if plan is None:
                note("the cluster is up; Ctrl-C stops it")
                while True:
                    local.supervise()
                    time.sleep(SUPERVISE_PERIOD)
            else:
                live = _run_demo(local, plan, progress)
                local.stop()  # the journal is read once the scheduler has closed it
                report = report_demo(local, plan, live)
    except KeyboardInterrupt:
        if drain_on_stop:
            kept = "their jobs ran to their end"
        elif keep or run_dir is not None:
            kept = (
                f"their jobs run on for {local.lease:g} s, for `accordion up --run-dir "
                f"{directory}` to adopt"
            )
        else:
            kept = "their jobs stop with the run directory, which is removed"
        note(f"stopped: agents ({kept}), scheduler, broker")
        interrupted = True
    except (UpError, LiveError, BusError) as exc:
        failed = str(exc)
    except TimeoutError:
        failed = "the demo did not end in time; see the logs"
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report is not None and plan is not None:
        print_demo(spec, plan, report)
    keep_dir = keep or run_dir is not None or failed is not None
    if keep_dir:
        note(f"run directory kept: {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if failed is not None:
        raise refused(failed)
    if report is not None and not report.ok:
        raise refused("not every demo job finished (see the journal's states above)")
    if interrupted and plan is not None:
        raise typer.Exit(130)  # a demo cut short did not succeed (128 + SIGINT)


async def _ready(local: LocalCluster) -> None:
    async with local.connect(timeout=2.0) as client:
        await local.ready(client)


def _run_demo(local: LocalCluster, plan: DemoPlan, progress: bool) -> LiveRun:
    total = sum(len(a.jobs) for a in plan.arrivals)
    timeout = 60.0 + 10 * plan.twin.makespan / plan.time_scale
    with replay_display(total, follow=True, enabled=progress) as show:
        return run_async(run_demo(local, plan, on_change=show, timeout=timeout))


def register(app: typer.Typer) -> None:
    app.command()(up)
