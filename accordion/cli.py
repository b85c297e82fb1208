"""``accordion``: replay traces through the twin, compare policies, run the live cluster.

The twin's commands: ``simulate``, ``compare``, ``generate``, ``policies``.
The live runtime's: ``up`` (a local cluster, ``--demo`` to try it), ``submit``,
``status``, ``cancel``, ``replay``, ``watch``, and ``scheduler`` and ``agent``
(``python -m scheduler`` and ``python -m nodeagent`` with the CLI's
``--broker``). Every live command takes ``--broker mqtt://HOST[:PORT]``
(env ``ACCORDION_BROKER``) and ``--root`` (env ``ACCORDION_ROOT``).

Every user error (unknown policy, missing file, bad trace, bad cluster file,
a broker or scheduler that cannot be reached) ends in one clear line on
stderr and exit status 2; a bug still shows its traceback. A request the
scheduler refuses (a rejected job, a job that cannot be cancelled) is printed
with its reason and exits 1.
"""

from __future__ import annotations

import csv
import getpass
import json
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accordion import sweep_cmd
from accordion.chart import write_chart
from accordion.generate_cmd import write_preset
from accordion.live import (
    BROKER_ENV,
    DEFAULT_BROKER,
    DEFAULT_TIMEOUT,
    ROOT_ENV,
    Changed,
    LiveError,
    ReplayState,
    arrivals,
    connect,
    job_spec,
    parse_duration,
    replay_and_follow,
    run_async,
)
from accordion.live import replay as replay_plan
from accordion.options import (
    CpusOpt,
    MissingUtilOpt,
    ModelOpt,
    TauOpt,
    Window,
    WindowOpt,
    execution_model,
)
from accordion.runs import Run, Variation, load_workload, run_policy, safe_name, write_run
from accordion.up import (
    DEFAULT_CLUSTER,
    DemoPlan,
    DemoReport,
    LiveRun,
    LocalCluster,
    UpError,
    difference,
    plan_demo,
    report_demo,
    run_demo,
)
from broker.bus import BusError
from broker.messages import CancelReply, ClusterSummary, JobEvent, StatusReply, SubmitReply
from broker.mqtt import MqttSettings
from broker.topics import DEFAULT_ROOT
from model.execution import ModelKind
from model.job import JobError
from model.machine import MachineError
from model.metrics import DEFAULT_TAU
from scheduler.placement import PlacementRule
from scheduler.policies.registry import POLICIES, PRIORITIES, UnknownPolicyError, build_policy
from workload.cluster import ClusterError, ClusterSpec, load_cluster
from workload.deadlines import DeadlineRule
from workload.swf import SwfError, write_swf
from workload.swf_rules import SwfRules, load_jobs
from workload.synthetic import SyntheticSpec
from workload.synthetic import generate as generate_records
from workload.synthetic import header as synthetic_header

app = typer.Typer(
    name="accordion",
    help="Accordion: batch-scheduling policies on a discrete-event twin and a live cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets wide tables instead of rich's 80-column default.
out_console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

USER_ERRORS = (
    SwfError,
    ClusterError,
    UnknownPolicyError,
    JobError,
    MachineError,
    FileNotFoundError,
    IsADirectoryError,
    PermissionError,
    ValueError,
    LiveError,
    BusError,
)

#: (summary key path, label, format) of the rows the tables show.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("metrics.jobs", "jobs", "{:.0f}"),
    ("metrics.makespan", "makespan (s)", "{:.0f}"),
    ("metrics.wait_mean", "mean wait (s)", "{:.1f}"),
    ("metrics.wait_p95", "p95 wait (s)", "{:.1f}"),
    ("metrics.response_mean", "mean response (s)", "{:.1f}"),
    ("metrics.bounded_slowdown_mean", "mean bounded slowdown (tau 10 s)", "{:.3f}"),
    ("metrics.slowdown_mean", "mean slowdown", "{:.3f}"),
    ("metrics.malleable_slowdown_mean", "mean slowdown, formula (1)", "{:.3f}"),
    ("metrics.utilisation", "utilisation", "{:.2%}"),
    ("metrics.fragmentation", "fragmentation, formula (2)", "{:.2%}"),
    ("metrics.system_usage", "system usage (EG-EDF)", "{:.2%}"),
    ("metrics.average_mpl", "average MPL", "{:.3f}"),
    ("metrics.deadline_miss_rate", "deadline misses", "{:.2%}"),
    ("performance.decision_time_mean_ms", "decision time mean (ms, wall)", "{:.3f}"),
    ("performance.decision_time_p99_ms", "decision time p99 (ms, wall)", "{:.3f}"),
    ("performance.events_per_second", "events per second (wall)", "{:,.0f}"),
)


def _get(data: dict[str, Any], path: str) -> float:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return float(node)


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except USER_ERRORS as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from exc


@contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
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


TraceArg = Annotated[Path, typer.Argument(help="SWF trace (.swf or .swf.gz)")]
ClusterOpt = Annotated[
    Path | None,
    typer.Option("--cluster", help="cluster file (TOML); default: one machine from the header"),
]
JobsOpt = Annotated[int | None, typer.Option("--jobs", min=1, help="replay only the first N jobs")]
PlacementOpt = Annotated[
    PlacementRule, typer.Option("--placement", help="how jobs are placed on machines")
]
WalltimeOpt = Annotated[
    str,
    typer.Option(
        "--missing-walltime",
        help="estimate for jobs without a requested time: 'runtime', 'runtime*F' or seconds",
    ),
]


DeadlinesOpt = Annotated[
    float | None,
    typer.Option(
        "--deadlines",
        min=0.0,
        max=1.0,
        help="give this share of jobs a deadline (EG-EDF paper: 0.7); see workload/deadlines.py",
    ),
]
SlackOpt = Annotated[
    str, typer.Option("--deadline-slack", help="MIN:MAX slack factors times the wall time")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of the deadline draws")]
MalleableOpt = Annotated[
    bool, typer.Option("--malleable", help="treat every job as malleable (FCFS-malleable paper)")
]
OverheadOpt = Annotated[
    float, typer.Option("--overhead", min=0.0, help="OV of formula (4) while a job runs shrunk")
]


def _rules(missing_walltime: str, missing_util: float = 1.0) -> SwfRules:
    return SwfRules.from_fallback(missing_walltime, missing_cpu_util=missing_util)


def _variation(deadlines: float | None, slack: str, seed: int, malleable: bool) -> Variation:
    rule = None
    if deadlines is not None:
        lo, sep, hi = slack.partition(":")
        try:
            slack_min, slack_max = float(lo), float(hi if sep else lo)
        except ValueError as exc:
            raise ValueError(f"--deadline-slack wants MIN:MAX, got {slack!r}") from exc
        rule = DeadlineRule(share=deadlines, slack_min=slack_min, slack_max=slack_max, seed=seed)
    return Variation(deadlines=rule, malleable=malleable)


@app.command()
def simulate(
    trace: TraceArg,
    policy: Annotated[str, typer.Option("--policy", "-p", help="POLICY[:PRIORITY]")] = "easy",
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="write CSV, JSON, SWF here")] = None,
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    malleable: MalleableOpt = False,
    overhead: OverheadOpt = 0.0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    window: WindowOpt = None,
    tau: TauOpt = DEFAULT_TAU,
    cpus: CpusOpt = None,
    model: ModelOpt = ModelKind.LINEAR,
    missing_util: MissingUtilOpt = 1.0,
) -> None:
    """Replay TRACE under one policy and print its metrics."""
    with user_errors():
        build_policy(policy, placement=placement)  # fail fast on a bad name
        execution = execution_model(model, overhead=overhead, seed=seed)
        workload = load_workload(
            trace,
            cluster=cluster,
            rules=_rules(missing_walltime, missing_util),
            variation=_variation(deadlines, deadline_slack, seed, malleable),
            window=Window.of(window, jobs),
            cpus=cpus,
        )
        with progress_bar(policy, progress and len(workload.jobs) >= 2000) as update:
            run = run_policy(
                workload,
                policy,
                placement=placement,
                execution=execution,
                progress=update,
                tau=tau,
            )
        table = Table(title=f"{workload.name}: {len(workload.jobs)} jobs, policy {policy}")
        table.add_column("metric")
        table.add_column(policy, justify="right")
        for path, label, fmt in ROWS:
            table.add_row(label, fmt.format(_get(run.summary, path)))
        out_console.print(table)
        _print_skipped(workload.skipped)
        if out is not None:
            for written in write_run(out, run):
                out_console.print(f"wrote {written}")


def _print_skipped(skipped: dict[str, int]) -> None:
    if skipped:
        text = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
        out_console.print(f"skipped from the trace: {text}")


@app.command()
def compare(
    trace: TraceArg,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated POLICY[:PRIORITY]; first is baseline")
    ] = "easy,fcfs,fifo-backfill,conservative",
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="policy to compare against (default: first)")
    ] = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[
        Path, typer.Option("--out", help="directory for CSVs, JSON and the chart")
    ] = Path("out/compare"),
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    malleable: MalleableOpt = False,
    overhead: OverheadOpt = 0.0,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    per_job: Annotated[
        bool, typer.Option(help="also write each policy's per-job CSV and SWF schedule")
    ] = True,
    window: WindowOpt = None,
    tau: TauOpt = DEFAULT_TAU,
    cpus: CpusOpt = None,
    model: ModelOpt = ModelKind.LINEAR,
    missing_util: MissingUtilOpt = 1.0,
) -> None:
    """Replay TRACE under several policies; print every metric against a baseline."""
    with user_errors():
        specs = [s.strip() for s in policies.split(",") if s.strip()]
        if not specs:
            raise ValueError("--policies names no policy")
        if len(set(specs)) != len(specs):
            raise ValueError(f"--policies names a policy twice: {policies}")
        for spec in specs:
            build_policy(spec, placement=placement)
        base = baseline or specs[0]
        if base not in specs:
            specs.insert(0, base)
            build_policy(base, placement=placement)
        execution = execution_model(model, overhead=overhead, seed=seed)
        workload = load_workload(
            trace,
            cluster=cluster,
            rules=_rules(missing_walltime, missing_util),
            variation=_variation(deadlines, deadline_slack, seed, malleable),
            window=Window.of(window, jobs),
            cpus=cpus,
        )
        runs: list[Run] = []
        for spec in specs:
            with progress_bar(spec, progress and len(workload.jobs) >= 2000) as update:
                runs.append(
                    run_policy(
                        workload,
                        spec,
                        placement=placement,
                        execution=execution,
                        progress=update,
                        tau=tau,
                    )
                )
        for run in runs:
            write_run(out, run, per_job=per_job)
        base_run = next(r for r in runs if r.spec == base)
        _compare_table(workload.name, len(workload.jobs), runs, base_run)
        _print_skipped(workload.skipped)
        csv_path, json_path, png_path = _write_compare(out, workload.name, runs, base_run)
        out_console.print(
            f"wrote {csv_path}, {json_path}, {png_path} and per-policy files in {out}"
        )


def _delta(value: float, base: float) -> str:
    if base == 0:
        return "" if value == 0 else " (n/a)"
    return f" ({(value - base) / abs(base):+.1%})"


def _compare_table(name: str, n_jobs: int, runs: list[Run], base: Run) -> None:
    table = Table(title=f"{name}: {n_jobs} jobs; change against {base.spec}")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.spec + (" (baseline)" if run is base else ""), justify="right")
    for path, label, fmt in ROWS:
        b = _get(base.summary, path)
        cells = []
        for run in runs:
            v = _get(run.summary, path)
            cells.append(fmt.format(v) + ("" if run is base else _delta(v, b)))
        table.add_row(label, *cells)
    out_console.print(table)


def _flat(run: Run) -> dict[str, Any]:
    row: dict[str, Any] = {"policy": run.spec}
    row.update(run.summary["metrics"])
    row.update({k: v for k, v in run.summary["performance"].items() if k != "time_base"})
    return row


def _write_compare(out: Path, name: str, runs: list[Run], base: Run) -> tuple[Path, Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = [_flat(r) for r in runs]
    base_row = _flat(base)
    numeric = [k for k, v in base_row.items() if isinstance(v, int | float) and k != "policy"]
    csv_path = out / "compare.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["policy", *numeric, *(f"{k}_change_pct" for k in numeric)])
        for row in rows:
            changes = [
                "" if base_row[k] == 0 else f"{100 * (row[k] - base_row[k]) / abs(base_row[k]):.3f}"
                for k in numeric
            ]
            writer.writerow([row["policy"], *(row[k] for k in numeric), *changes])
    json_path = out / "compare.json"
    json_path.write_text(
        json.dumps({"baseline": base.spec, "runs": [r.summary for r in runs]}, indent=2) + "\n",
        encoding="utf-8",
    )
    png_path = out / "compare.png"
    write_chart(png_path, f"{name}: {len(base.result.outcomes)} jobs", rows, [r.spec for r in runs])
    return csv_path, json_path, png_path


@app.command()
def generate(
    out: Annotated[Path, typer.Argument(help="SWF file to write (.swf or .swf.gz)")],
    jobs: Annotated[int, typer.Option("--jobs", min=1)] = 500,
    cpus: Annotated[int, typer.Option("--cpus", min=1)] = 64,
    load: Annotated[float, typer.Option("--load", min=0.01, max=10.0)] = 0.9,
    users: Annotated[int, typer.Option("--users", min=1)] = 12,
    seed: Annotated[int, typer.Option("--seed")] = 1,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="a paper's setup instead: eg-edf-grid writes OUT and OUT's .cluster.toml",
        ),
    ] = None,
    interarrival: Annotated[
        float, typer.Option("--interarrival", min=1e-6, help="preset: mean inter-arrival, s")
    ] = 10.0,
) -> None:
    """Write a small seeded synthetic trace (see workload/synthetic.py for the recipe)."""
    with user_errors():
        if preset is not None:
            trace, cluster_file, count = write_preset(
                preset, out, seed=seed, interarrival=interarrival
            )
            out_console.print(f"wrote {count} jobs to {trace} and the cluster to {cluster_file}")
            return
        spec = SyntheticSpec(jobs=jobs, cpus=cpus, load=load, users=users, seed=seed)
        count = write_swf(out, generate_records(spec), header=synthetic_header(spec))
        out_console.print(f"wrote {count} jobs to {out}")


app.command("sweep")(sweep_cmd.sweep)


@app.command("policies")
def list_policies() -> None:
    """List the policies and priority sources."""
    table = Table(title="policies (POLICY[:PRIORITY])")
    table.add_column("name")
    table.add_column("what it does")
    for info in POLICIES.values():
        table.add_row(info.name, info.summary)
    out_console.print(table)
    out_console.print("priority sources: " + ", ".join(PRIORITIES))


# -- the live runtime -------------------------------------------------------------------

BrokerOpt = Annotated[
    str,
    typer.Option(
        "--broker", envvar=BROKER_ENV, help="the MQTT broker, mqtt://HOST[:PORT] (port 1883)"
    ),
]
RootOpt = Annotated[str, typer.Option("--root", envvar=ROOT_ENV, help="the topic root")]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="seconds to wait for the scheduler's reply"),
]
DURATIONS = "seconds (not sbatch's minutes), M:SS, H:MM:SS or D-H:MM:SS"


class WorkloadKind(StrEnum):
    SLEEP = "sleep"
    MPI = "mpi"


class BrokerKind(StrEnum):
    AUTO = "auto"
    MOSQUITTO = "mosquitto"
    EMBEDDED = "embedded"


def _login() -> str:
    try:
        return getpass.getuser() or "nobody"
    except (OSError, KeyError):  # no login name in the environment or the user database
        return "nobody"


def _refused(text: str) -> typer.Exit:
    """The scheduler said no: its reason on stderr, exit status 1."""
    err_console.print(f"[bold red]error:[/] {text}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


@app.command()
def submit(
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
    malleable: Annotated[
        bool, typer.Option("--malleable", help="may run shrunk, up to 2 processes per CPU")
    ] = False,
    cpu_util: Annotated[
        float, typer.Option("--cpu-util", min=0.01, max=1.0, help="CPU-utilisation fraction u")
    ] = 1.0,
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
            user=user or _login(),
            account=account,
            qos=qos,
            deadline=None if deadline is None else parse_duration(deadline, what="--deadline"),
            malleable=malleable,
            cpu_util=cpu_util,
        )

        async def ask() -> SubmitReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.submit([spec])

        result = run_async(ask()).results[0]
    if not result.accepted:
        raise _refused(f"job {result.job_id} rejected: {result.reason}")
    if parsable:
        out_console.print(result.job_id, highlight=False)
    elif result.duplicate:
        out_console.print(f"job {result.job_id} was already submitted; nothing changed")
    else:
        out_console.print(f"submitted job {result.job_id}", highlight=False)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(metavar="ID", help="the job id")],
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Cancel a queued or running job (exit 1 with the reason if it cannot be)."""
    with user_errors():

        async def ask() -> CancelReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.cancel(job_id)

        reply = run_async(ask())
    if not reply.cancelled:
        raise _refused(f"cannot cancel job {job_id}: {reply.reason}")
    note = f" ({reply.reason})" if reply.reason else ""
    out_console.print(f"cancelled job {job_id}{note}", highlight=False)


@app.command()
def status(
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="show at most this many queued jobs")
    ] = 50,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """The machines, the queue and the running jobs, as the scheduler sees them now."""
    with user_errors():

        async def ask() -> StatusReply:
            async with connect(broker, root, timeout=timeout) as client:
                return await client.status()

        reply = run_async(ask())
    _print_status(reply, limit)


def _print_status(reply: StatusReply, limit: int) -> None:
    now = reply.now
    online = [m for m in reply.machines if m.online]
    cpus = sum(m.cpus for m in online)
    free = sum(m.free for m in online)
    machines = Table(
        title=f"machines: {len(online)} of {len(reply.machines)} online, {free} of {cpus} "
        f"CPUs free; cluster time {now:,.1f} s"
    )
    for name in ("machine", "CPUs", "speed", "free", "state"):
        machines.add_column(name, justify="left" if name in ("machine", "state") else "right")
    for m in reply.machines:
        machines.add_row(
            m.id, str(m.cpus), f"{m.speed:g}", str(m.free), "online" if m.online else "offline"
        )
    out_console.print(machines)
    queue = Table(title=f"queue: {len(reply.queue)} jobs (times in cluster seconds)")
    for name in ("job", "user", "procs", "submitted", "waiting (s)"):
        queue.add_column(name, justify="left" if name in ("job", "user") else "right")
    for j in reply.queue[:limit]:
        queue.add_row(j.id, j.user, str(j.procs), f"{j.submit:,.1f}", f"{now - j.submit:,.1f}")
    if len(reply.queue) > limit:
        queue.add_row(f"... {len(reply.queue) - limit} more", "", "", "", "")
    out_console.print(queue)
    running = Table(title=f"running: {len(reply.running)} jobs")
    for name in ("job", "user", "procs", "started", "running (s)", "parts", "state"):
        running.add_column(name, justify="right" if name in ("procs", "started") else "left")
    for j in reply.running:
        start = j.start if j.start is not None else now
        parts = ", ".join(f"{p.machine}:{p.cpus}" for p in j.parts)
        running.add_row(
            j.id, j.user, str(j.procs), f"{start:,.1f}", f"{now - start:,.1f}", parts, j.state
        )
    out_console.print(running)


@contextmanager
def _replay_display(total: int, *, follow: bool, enabled: bool) -> Iterator[Changed | None]:
    """A progress display of a replay: jobs submitted and (when followed) jobs ended."""
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

        def update(state: ReplayState) -> None:
            bar.update(sent, completed=state.sent)
            if ended is not None:
                # Rejected jobs never run: they leave the bar's total.
                bar.update(ended, completed=state.finished, total=total - len(state.rejected))

        yield update


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


@app.command()
def replay(
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
    malleable: MalleableOpt = False,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    window: WindowOpt = None,
) -> None:
    """Publish TRACE's jobs at their compressed submit times (one request per instant)."""
    with user_errors():
        rules = _rules(missing_walltime)
        prefix = id_prefix if id_prefix is not None else f"r{uuid.uuid4().hex[:6]}-"
        variation = Variation(malleable=malleable)
        picked = Window.of(window, jobs)

        async def go() -> tuple[ReplayState, int, int]:
            async with connect(broker, root, timeout=timeout, watch=wait) as client:
                cluster = await client.status()
                cpus = sum(m.cpus for m in cluster.machines if m.online)
                if not cpus:
                    raise LiveError("no machine is online: start agents first")
                # Jobs wider than the live cluster are skipped as the twin skips them.
                loaded = load_jobs(
                    trace, rules, limit=None if picked is None else picked.stop, total_cpus=cpus
                )
                kept = loaded.jobs if picked is None else loaded.jobs[picked.start :]
                if not kept:
                    raise ValueError(f"{trace}: no job to replay (skipped: {dict(loaded.skipped)})")
                plan = arrivals(variation.apply(kept), prefix=prefix)
                span = plan[-1].at / time_scale
                err_console.print(
                    f"replaying {len(kept)} jobs of {trace.name} as {prefix}*, "
                    f"in {len(plan)} requests over {span:.1f} s wall (time scale {time_scale:g})",
                    highlight=False,
                )
                skipped = sum(loaded.skipped.values())
                total = sum(len(a.jobs) for a in plan)
                with _replay_display(total, follow=wait, enabled=progress) as show:
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
    return f"t={item.at:,.1f}  job {item.job_id}  {item.state}{detail}"


@app.command()
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
    """
    with user_errors():

        async def go() -> None:
            async with connect(broker, root, watch=True) as client:
                loop_end = None if duration is None else time.monotonic() + duration
                seen = 0
                while events is None or seen < events:
                    left = None if loop_end is None else loop_end - time.monotonic()
                    if left is not None and left <= 0:
                        return
                    item = await client.next_watched(timeout=left)
                    if item is None:
                        continue
                    seen += isinstance(item, JobEvent)
                    out_console.print(_watched_line(item), highlight=False, soft_wrap=True)

        try:
            run_async(go())
        except KeyboardInterrupt:
            return  # Ctrl-C is how a watch ends


_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _forward(ctx: typer.Context, broker: str, root: str, program: str) -> list[str]:
    """``--broker`` and ``--root`` as the module's options, then the other arguments."""
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
        raise ValueError(f"use --broker mqtt://HOST:PORT and --root, not {' '.join(clash)}")
    settings = MqttSettings.from_url(broker)
    return [f"--host={settings.host}", f"--port={settings.port}", f"--root={root}", *args]


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def scheduler(
    ctx: typer.Context, broker: BrokerOpt = DEFAULT_BROKER, root: RootOpt = DEFAULT_ROOT
) -> None:
    """Run the live scheduler (`python -m scheduler`'s options; --help lists them)."""
    from scheduler.__main__ import main as scheduler_main  # noqa: PLC0415 (its own start-up)

    with user_errors():
        argv = _forward(ctx, broker, root, "scheduler")
    raise typer.Exit(scheduler_main(argv))


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def agent(
    ctx: typer.Context, broker: BrokerOpt = DEFAULT_BROKER, root: RootOpt = DEFAULT_ROOT
) -> None:
    """Run one node agent, e.g. --name n1 --cpus 8 --speed 2 (`python -m nodeagent`'s options)."""
    from nodeagent.__main__ import main as agent_main  # noqa: PLC0415 (its own start-up)

    with user_errors():
        argv = _forward(ctx, broker, root, "nodeagent")
    raise typer.Exit(agent_main(argv))


# -- accordion up ---------------------------------------------------------------------


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops ``accordion up`` as Ctrl-C does: the cluster in order."""
    raise KeyboardInterrupt


def _print_endpoints(local: LocalCluster, spec: ClusterSpec) -> None:
    kind = {"mosquitto": "Mosquitto", "embedded": "embedded amqtt, MQTT 3.1.1"}.get(
        local.broker_kind, "external"
    )
    table = Table(
        title=f"{spec.name}: {len(spec.machines)} agents, {spec.total_cpus} CPUs, policy "
        f"{local.policy}, time scale {local.time_scale:g} (cluster s = wall s x "
        f"{local.time_scale:g})"
    )
    for name in ("process", "name", "address", "pid", "log"):
        table.add_column(name)
    speeds = spec.speeds
    for e in local.endpoints():
        name = e.name
        if e.role == "agent":
            machine = e.name.removeprefix("agent-")
            cpus = next(m.cpus for m in spec.machines if m.id == machine)
            name = f"{machine} ({cpus} CPUs, speed {speeds[machine]:g})"
        elif e.role == "broker":
            name = kind
        table.add_row(e.role, name, e.address, str(e.pid), str(e.log))
    out_console.print(table)
    flags = f"--broker {local.broker_url}"
    if local.root != DEFAULT_ROOT:
        flags += f" --root {local.root}"
    out_console.print(
        f"metrics (Prometheus text): {local.scheduler_metrics} and the agents' above\n"
        f"try: accordion submit {flags} -n 4 -t 120   "
        f"(or export {BROKER_ENV}={local.broker_url}; then accordion status, accordion watch)",
        highlight=False,
        soft_wrap=True,
    )


def _demo_table(spec: ClusterSpec, plan: DemoPlan, report: DemoReport) -> None:
    live = {"metrics": report.live.as_dict()}
    twin = {"metrics": report.twin.as_dict()}
    table = Table(
        title=f"{spec.name}: {report.jobs} jobs, policy {plan.policy}; "
        "the live cluster against the twin"
    )
    table.add_column("metric")
    table.add_column(f"live ({len(spec.machines)} agents)", justify="right")
    table.add_column("twin", justify="right")
    table.add_column("live vs twin", justify="right")
    for path, label, fmt in ROWS:
        if not path.startswith("metrics."):
            continue
        a, b = _get(live, path), _get(twin, path)
        change = difference(a, b)
        table.add_row(
            label, fmt.format(a), fmt.format(b), "" if change is None else f"{change:+.1%}"
        )
    d, t = report.live_decisions, report.twin_decisions
    table.add_row("decision time mean (ms, wall)", f"{d.mean_ms:.3f}", f"{t.mean_ms:.3f}", "")
    table.add_row("decision time p99 (ms, wall)", f"<= {d.p99_ms_at_most:g}", f"{t.p99_ms:.3f}", "")
    table.add_row("decisions", f"{d.count:,}", f"{t.count:,}", "")
    out_console.print(table)
    out_console.print(
        f"time bases: live in {report.live.time_base}, the twin in {report.twin.time_base}; "
        f"decision times in wall milliseconds. The live run took {report.wall_seconds:.1f} s wall.",
        highlight=False,
        soft_wrap=True,
    )
    parts = []
    for label, a, b in (
        ("mean wait", report.live.wait_mean, report.twin.wait_mean),
        ("mean response", report.live.response_mean, report.twin.response_mean),
        (
            "mean bounded slowdown",
            report.live.bounded_slowdown_mean,
            report.twin.bounded_slowdown_mean,
        ),
    ):
        change = difference(a, b)
        parts.append(f"{label} {'n/a' if change is None else f'{change:+.1%}'}")
    out_console.print(
        "live vs twin: " + ", ".join(parts) + " (the FCFS-malleable paper reports 7 % between "
        "its simulator and its runtime)",
        highlight=False,
        soft_wrap=True,
    )
    states = ", ".join(f"{n} {state}" for state, n in sorted(report.states.items()))
    out_console.print(f"jobs in the journal: {states}", highlight=False)
    if report.rejected:
        out_console.print(f"rejected: {len(report.rejected)}", highlight=False)


@app.command()
def up(
    cluster: Annotated[
        Path | None,
        typer.Option("--cluster", help="cluster file (TOML); default: examples/cluster.toml"),
    ] = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="POLICY[:PRIORITY]")] = "easy",
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
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Start a local cluster from a cluster file: broker, scheduler, agents (Ctrl-C stops).

    With --demo it also replays a demo workload through it and ends with the
    summary metrics, next to the twin's for the same jobs.
    """
    with user_errors():
        spec = load_cluster(cluster if cluster is not None else DEFAULT_CLUSTER)
        build_policy(policy, placement=placement)
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
            )
        scale = plan.time_scale if plan is not None else (time_scale or 1.0)
        # Created when the cluster starts; removed after it unless kept.
        fresh = Path(tempfile.gettempdir()) / f"accordion-up-{uuid.uuid4().hex[:8]}"
        directory = run_dir if run_dir is not None else fresh
        local = LocalCluster(
            spec,
            directory,
            policy=policy,
            placement=placement,
            time_scale=scale,
            broker=broker_kind.value,
            broker_port=broker_port,
            root=root,
        )
    if plan is not None:
        err_console.print(
            f"demo: {len(plan.jobs)} generated jobs (seed {seed}) on {spec.name}; the twin's "
            f"makespan is {plan.twin.makespan:,.0f} s, so time scale {plan.time_scale:g} "
            f"makes it about {plan.twin.makespan / plan.time_scale:.0f} s of wall time",
            highlight=False,
        )
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    failed: str | None = None
    interrupted = False
    report: DemoReport | None = None
    try:
        with local:
            err_console.print(
                f"starting {local.broker_kind} broker, scheduler and {len(spec.machines)} agents "
                f"(run directory {directory})",
                highlight=False,
            )
            run_async(_ready(local))
            _print_endpoints(local, spec)
            if plan is None:
                err_console.print("the cluster is up; Ctrl-C stops it", highlight=False)
                while True:
                    time.sleep(0.5)
                    local.check()
            else:
                live = _run_demo(local, plan, progress)
                local.stop()  # the journal is read once the scheduler has closed it
                report = report_demo(local, plan, live)
    except KeyboardInterrupt:
        err_console.print("stopped: agents, scheduler, broker", highlight=False)
        interrupted = True
    except (UpError, LiveError, BusError) as exc:
        failed = str(exc)
    except TimeoutError:
        failed = "the demo did not end in time; see the logs"
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report is not None and plan is not None:
        _demo_table(spec, plan, report)
    keep_dir = keep or run_dir is not None or failed is not None
    if keep_dir:
        err_console.print(f"run directory kept: {directory}", highlight=False)
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if failed is not None:
        err_console.print(f"[bold red]error:[/] {failed}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if report is not None and not report.ok:
        raise _refused("not every demo job finished (see the journal's states above)")
    if interrupted and plan is not None:
        raise typer.Exit(130)  # a demo cut short did not succeed (128 + SIGINT)


async def _ready(local: LocalCluster) -> None:
    async with connect(local.broker_url, local.root, timeout=2.0) as client:
        await local.ready(client)


def _run_demo(local: LocalCluster, plan: DemoPlan, progress: bool) -> LiveRun:
    total = sum(len(a.jobs) for a in plan.arrivals)
    timeout = 60.0 + 10 * plan.twin.makespan / plan.time_scale
    with _replay_display(total, follow=True, enabled=progress) as show:
        return run_async(run_demo(local, plan, on_change=show, timeout=timeout))


def main() -> None:
    app()


__all__ = ["app", "main", "safe_name"]
