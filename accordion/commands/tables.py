"""Every table the commands print, and how their numbers are written.

One place for the rich tables (metrics of a run, a comparison, the live
cluster's status, the processes of ``accordion up``, the demo's live-vs-twin
report, the policies) and the formats of their numbers, so a metric reads the
same wherever it is shown.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from accordion.client.live_client import BROKER_ENV
from accordion.cluster.local_cluster import LocalCluster
from accordion.display import out_console
from accordion.experiments.demo import DemoPlan, DemoReport, difference
from accordion.experiments.runs import Run
from broker.auth import PROBE_SUFFIX
from broker.messages import StatusReply
from broker.topics import DEFAULT_ROOT
from scheduler.policies.registry import POLICIES, PRIORITIES, policy_options
from workload.cluster import ClusterSpec

#: (summary key path, label, format) of the rows the tables show.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("metrics.jobs", "jobs", "{:.0f}"),
    ("metrics.makespan", "makespan (s)", "{:.0f}"),
    ("metrics.wait_mean", "mean wait (s)", "{:.1f}"),
    ("metrics.wait_p95", "p95 wait (s)", "{:.1f}"),
    ("metrics.response_mean", "mean response (s)", "{:.1f}"),
    ("metrics.bounded_slowdown_mean", "mean bounded slowdown (tau {tau:g} s)", "{:.3f}"),
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


def metric(data: dict[str, Any], path: str) -> float:
    node: Any = data
    for key in path.split("."):
        node = node[key]
    return float(node)


def resize_line(counters: dict[str, int]) -> str:
    """The twin's resize figures (``FcfsMalleable``'s counters) as one line."""
    shrinks, expands = counters.get("shrinks", 0), counters.get("expands", 0)
    return f"resizes: {shrinks} shrinks, {expands} expands"


def row_label(label: str, summary: dict[str, Any]) -> str:
    """A row's label with the run's own parameters filled in (the ``--tau`` it used)."""
    return label.format(tau=metric(summary, "metrics.tau")) if "{tau" in label else label


def print_metrics(title: str, column: str, summary: dict[str, Any]) -> None:
    """One run's metrics (``simulate``)."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column(column, justify="right")
    for path, label, fmt in ROWS:
        table.add_row(row_label(label, summary), fmt.format(metric(summary, path)))
    out_console.print(table)


def print_policies(*, verbose: bool) -> None:
    """The registry; with ``verbose`` every policy's options, types and defaults."""
    table = Table(title="policies (POLICY[:PRIORITY])")
    table.add_column("name")
    table.add_column("what it does")
    if verbose:
        table.add_column("--policy-opt KEY=VALUE")
        table.add_column("type")
        table.add_column("default", justify="right")
    for info in POLICIES.values():
        if not verbose:
            table.add_row(info.name, info.summary)
            continue
        options = policy_options(info.name)
        if not options:
            table.add_row(info.name, info.summary, "(none)", "", "")
        for i, option in enumerate(options):
            first = i == 0
            table.add_row(
                info.name if first else "",
                info.summary if first else "",
                option.key,
                option.kind,
                _shown(option.default),
            )
    out_console.print(table)
    out_console.print("priority sources: " + ", ".join(PRIORITIES))
    if verbose:
        # A priority source's fields are options of every policy that takes it.
        sources = Table(title="priority sources' options (POLICY:PRIORITY, e.g. easy:fairshare)")
        for name in ("source", "--policy-opt KEY=VALUE", "type", "default"):
            sources.add_column(name, justify="right" if name == "default" else "left")
        for prio in PRIORITIES:
            keys = [o for o in policy_options(f"easy:{prio}") if o.key.startswith("priority.")]
            if not keys:
                sources.add_row(prio, "(none)", "", "")
            for i, option in enumerate(keys):
                sources.add_row(
                    prio if i == 0 else "", option.key, option.kind, _shown(option.default)
                )
        out_console.print(sources)


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def change(value: float, base: float) -> str:
    if base == 0:
        return "" if value == 0 else " (n/a)"
    return f" ({(value - base) / abs(base):+.1%})"


def print_compare(name: str, n_jobs: int, runs: list[Run], base: Run) -> None:
    table = Table(title=f"{name}: {n_jobs} jobs; change against {base.spec}")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.spec + (" (baseline)" if run is base else ""), justify="right")
    for path, label, fmt in ROWS:
        b = metric(base.summary, path)
        cells = []
        for run in runs:
            v = metric(run.summary, path)
            cells.append(fmt.format(v) + ("" if run is base else change(v, b)))
        # Every compared run is scored with the one --tau, so the baseline's labels all.
        table.add_row(row_label(label, base.summary), *cells)
    out_console.print(table)


def print_status(reply: StatusReply, *, user: str | None = None) -> None:
    """One page of a status: its machines (the first page's), running and queued jobs,
    and the totals of what its filters select."""
    now = reply.now
    if reply.machines:
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
            # The agent's state when the scheduler says it (draining, stopped, held ...).
            state = m.state.value if m.state is not None else "online" if m.online else "offline"
            machines.add_row(m.id, str(m.cpus), f"{m.speed:g}", str(m.free), state)
        out_console.print(machines)
    totals = reply.totals
    whose = f" of {user}" if user is not None else ""
    running = Table(
        title=f"running{whose}: {totals.running:,} jobs, {totals.cpus:,} CPUs asked for; "
        f"{len(reply.running)} on this page (MPL = processes per CPU; above 1 the job runs "
        "shrunk)"
    )
    for name in ("job", "user", "procs", "CPUs", "MPL", "started", "running (s)", "parts", "state"):
        right = name in ("procs", "CPUs", "MPL", "started")
        running.add_column(name, justify="right" if right else "left")
    for j in reply.running:
        start = j.start if j.start is not None else now
        parts = ", ".join(f"{p.machine}:{p.cpus}" for p in j.parts)
        cpus = sum(p.cpus for p in j.parts)
        running.add_row(
            j.id,
            j.user,
            str(j.procs),
            str(cpus),
            f"{j.procs / cpus:.2f}" if cpus else "-",
            f"{start:,.1f}",
            f"{now - start:,.1f}",
            parts,
            "reconciling" if j.reconciling else j.state.value,
        )
    out_console.print(running)
    queue = Table(
        title=f"queue{whose}: {totals.queued:,} jobs; {len(reply.queue)} on this page "
        "(times in cluster seconds)"
    )
    for name in ("job", "user", "procs", "submitted", "waiting (s)"):
        queue.add_column(name, justify="left" if name in ("job", "user") else "right")
    for j in reply.queue:
        queue.add_row(j.id, j.user, str(j.procs), f"{j.submit:,.1f}", f"{now - j.submit:,.1f}")
    out_console.print(queue)
    limit = reply.max_user_cpus
    if limit is not None:
        out_console.print(
            f"per-user CPU limit: {limit:,} (a queued job that would take its user past it "
            "waits for their running jobs to end)",
            highlight=False,
        )
    if totals.by_user:
        users = Table(title=f"users with jobs: {totals.users:,} (those with most below)")
        for name in ("user", "queued", "running", "CPUs"):
            users.add_column(name, justify="left" if name == "user" else "right")
        for u in totals.by_user:
            held = limit is not None and u.queued and u.cpus >= limit
            users.add_row(
                u.user,
                f"{u.queued:,}",
                f"{u.running:,}",
                f"{u.cpus:,}" + (" (at limit)" if held else ""),
            )
        out_console.print(users)


def print_endpoints(local: LocalCluster, spec: ClusterSpec) -> None:
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
    if local.auth_files is not None:
        # An agent's probe login is its own (``broker.auth``): not one to hand out.
        logins = sorted(
            (login, path)
            for login, path in local.auth_files.env_files.items()
            if not login.endswith(PROBE_SUFFIX)
        )
        out_console.print(
            "logins (Mosquitto password and ACL files in "
            f"{local.auth_files.password_file.parent}); to be one of them, "
            "`set -a; . FILE; set +a`:\n"
            + "\n".join(f"  {login}: {path}" for login, path in logins),
            highlight=False,
            soft_wrap=True,
        )
    out_console.print(
        f"metrics (Prometheus text): {local.scheduler_metrics} and the agents' above\n"
        f"try: accordion submit {flags} -n 4 -t 120   "
        f"(or export {BROKER_ENV}={local.broker_url}; then accordion status, accordion watch)",
        highlight=False,
        soft_wrap=True,
    )


def print_demo(spec: ClusterSpec, plan: DemoPlan, report: DemoReport) -> None:
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
        a, b = metric(live, path), metric(twin, path)
        change = difference(a, b)
        table.add_row(
            row_label(label, twin),
            fmt.format(a),
            fmt.format(b),
            "" if change is None else f"{change:+.1%}",
        )
    d, t = report.live_decisions, report.twin_decisions
    table.add_row("decision time mean (ms, wall)", f"{d.mean_ms:.3f}", f"{t.mean_ms:.3f}", "")
    table.add_row("decision time p99 (ms, wall)", f"<= {d.p99_ms_at_most:g}", f"{t.p99_ms:.3f}", "")
    table.add_row("decisions", f"{d.count:,}", f"{t.count:,}", "")
    lr, tr = report.live_resizes, report.twin_resizes
    for label, a_n, b_n in (
        ("shrinks (running jobs)", lr.shrinks, tr.shrinks),
        ("expands (running jobs)", lr.expands, tr.expands),
    ):
        change = difference(a_n, b_n)
        table.add_row(label, str(a_n), str(b_n), "" if change is None else f"{change:+.1%}")
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
