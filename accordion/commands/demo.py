"""``accordion demo``: the ``accordion up --demo`` workload on a cluster that is already running.

What the compose testbed's ``submit`` service runs by default. Unlike
``accordion up --demo`` it starts nothing and cannot choose the time scale:

1. the scheduler's journal (``--journal``, a path this client can read: the
   compose ``submit`` service mounts the scheduler's volume) gives the time
   scale K and the policy the scheduler runs;
2. the scheduler's ``StatusReply`` gives the machines online now, which
   become the twin's cluster, so a testbed scaled to any size is compared
   with a twin of the same size;
3. the seeded synthetic workload of :mod:`accordion.experiments.demo` (job ids
   ``demo-<run>-N``, new for every run) runs in the twin, then is replayed
   live at K and followed until every job has ended;
4. the outcomes of this run's jobs are read from the journal (the scheduler
   journals a job's end before it publishes the event), and the table of
   ``accordion up --demo`` is printed.

The twin runs the policy with its default options (the scheduler's
``--policy-opt`` values are not in the journal). Decision times are read from
the scheduler's ``/metrics`` (``--metrics``) and cover every decision since
the scheduler started, not only this run's.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import uuid
from pathlib import Path
from typing import Annotated

import typer

from accordion.client.live_client import DEFAULT_BROKER, LiveClient, connect, run_async
from accordion.client.replay import replay_and_follow
from accordion.cluster.local_cluster import scrape
from accordion.commands.options import BrokerOpt, RootOpt, TimeoutOpt
from accordion.commands.tables import print_demo
from accordion.display import note, replay_display
from accordion.errors import LiveError, UserError, refused, user_errors
from accordion.experiments.demo import (
    DecisionStats,
    DemoPlan,
    DemoReport,
    decision_stats,
    live_time_base,
    outcomes_from_journal,
    plan_demo,
)
from broker.topics import DEFAULT_ROOT
from model.machine import Machine
from model.metrics import compute_metrics
from scheduler.runtime.journal import Journal
from workload.cluster import ClusterSpec

#: Seconds to wait for a reply: long enough to ride out a scheduler restart (its
#: persistent session keeps the request at the broker, and the restarted scheduler
#: answers it), which a testbed user may do in the middle of a demo.
RESTART_TIMEOUT = 60.0


def _meta(journal: Path) -> tuple[float, str]:
    if not journal.exists():
        raise UserError(f"{journal}: no such journal (mount the scheduler's journal volume)")
    with Journal(journal) as opened:
        meta = opened.meta()
    if meta is None:
        raise UserError(f"{journal}: the scheduler has not started on this journal yet")
    return meta.time_scale, meta.policy


async def _cluster(broker: str, root: str, timeout: float) -> ClusterSpec:
    async with connect(broker, root, timeout=timeout) as client:
        online = await client.machines()
    machines = tuple(Machine(id=m.id, cpus=m.cpus, speed=m.speed) for m in online if m.online)
    if not machines:
        raise UserError("the scheduler knows no machine online")
    return ClusterSpec(name="testbed", reference_speed=1.0, machines=machines)


#: Wall seconds between two looks at the machines while the demo runs.
MACHINE_POLL = 1.0


async def _watch_machines(client: LiveClient, speeds: dict[str, float]) -> None:
    """Record the speed of every machine online, until cancelled.

    The journal names the machines each job ran on, but machines come and go
    during a demo (a testbed scaled up and down, an agent killed) and a
    restarted scheduler forgets the ones that said goodbye, so their speeds are
    collected while they are online. A status request that gets no answer (the
    scheduler restarting) is simply asked again. It shares the replay's
    connection: with logins, a login is one connection at a time (the broker
    makes the login the client id), and the testbed's user has one.
    """
    while True:
        try:
            # Machines only: what a poll costs does not grow with the queue.
            machines = await client.machines(timeout=MACHINE_POLL * 5)
        except LiveError:
            continue
        speeds.update((m.id, m.speed) for m in machines)
        await asyncio.sleep(MACHINE_POLL)


async def _replay(
    broker: str, root: str, plan: DemoPlan, progress: bool, reply_timeout: float
) -> tuple[float, dict[str, float]]:
    """Replay and follow the plan; the wall seconds it took and every machine's speed."""
    total = sum(len(a.jobs) for a in plan.arrivals)
    # Ten times the twin's makespan in wall seconds, plus a minute: a hung run fails.
    timeout = 60.0 + 10 * plan.twin.makespan / plan.time_scale
    speeds: dict[str, float] = {}
    t0 = time.monotonic()
    with replay_display(total, follow=True, enabled=progress) as show:
        async with (
            connect(broker, root, watch=True, timeout=reply_timeout) as client,
            asyncio.timeout(timeout),
            asyncio.TaskGroup() as tg,
        ):
            watcher = tg.create_task(_watch_machines(client, speeds), name="demo-machine-watcher")
            try:
                state = await replay_and_follow(
                    client, plan.arrivals, time_scale=plan.time_scale, on_change=show
                )
            finally:
                watcher.cancel()
    if state.rejected:
        first = next(iter(state.rejected.items()))
        raise refused(f"{len(state.rejected)} demo job(s) rejected, e.g. {first[0]}: {first[1]}")
    return time.monotonic() - t0, speeds


def _decisions(metrics: str | None) -> DecisionStats:
    if metrics is None:
        return DecisionStats(0, float("nan"), float("nan"))
    try:
        return decision_stats(scrape(metrics))
    except (OSError, urllib.error.URLError) as exc:
        raise UserError(f"cannot read the scheduler's metrics at {metrics}: {exc}") from exc


def demo(  # noqa: PLR0917 (typer reads the options from the parameters)
    journal: Annotated[
        Path,
        typer.Option("--journal", help="the running scheduler's journal (read only)"),
    ],
    metrics: Annotated[
        str | None,
        typer.Option("--metrics", help="the scheduler's /metrics URL, for decision times"),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="jobs of the demo")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="seed of the demo workload")] = 1,
    progress: Annotated[bool, typer.Option(help="show progress bars")] = True,
    timeout: TimeoutOpt = RESTART_TIMEOUT,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
) -> None:
    """The demo workload on a running cluster, printed live against the twin."""
    with user_errors():
        time_scale, policy = _meta(journal)
        spec = run_async(_cluster(broker, root, timeout))
        plan = plan_demo(
            spec,
            jobs=jobs,
            seed=seed,
            policy=policy,
            time_scale=time_scale,
            prefix=f"demo-{uuid.uuid4().hex[:6]}-",
        )
        note(
            f"demo: {len(plan.jobs)} generated jobs (seed {seed}) on the {len(spec.machines)} "
            f"machines online; the twin's makespan is {plan.twin.makespan:,.0f} s, about "
            f"{plan.twin.makespan / time_scale:.0f} s of wall time at the scheduler's scale "
            f"{time_scale:g}"
        )
        wall, seen = run_async(_replay(broker, root, plan, progress, timeout))
        read = outcomes_from_journal(journal, {**spec.speeds, **seen}, prefix=plan.prefix)
        if not read.outcomes:
            raise refused(f"no demo job ran to its end (journal {journal})")
        report = DemoReport(
            jobs=len(plan.jobs),
            time_scale=read.time_scale,
            wall_seconds=wall,
            live=compute_metrics(
                read.outcomes,
                total_cpus=spec.total_cpus,
                time_base=live_time_base(read.time_scale),
            ),
            twin=plan.twin,
            live_decisions=_decisions(metrics),
            twin_decisions=plan.twin_decisions,
            states=read.states,
        )
    print_demo(spec, plan, report)
    if not report.ok:
        raise refused("not every demo job finished (see the journal's states above)")


def register(app: typer.Typer) -> None:
    app.command()(demo)
