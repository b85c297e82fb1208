"""The live benchmark's report: each measurement beside its target and Slurm.

The targets: >= 500 single submissions/s, >= 5,000 jobs/s batched,
submit-to-start p50 < 20 ms, 500 agents. Slurm is quoted, not measured: 50-100
sbatch/s and about 0.5 s from submission to start; the ratios take 100
sbatch/s, the better end.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from bench.live.proc_stats import percentile

console = Console(width=None if sys.stdout.isatty() else 160)

TARGET_SINGLE = 500.0
TARGET_BATCHED = 5000.0
TARGET_P50_MS = 20.0
TARGET_AGENTS = 500
SLURM_SUBMITS = 100.0  # sbatch/s, the better end of 50-100
SLURM_START_MS = 500.0


@dataclass(frozen=True, slots=True)
class Rate:
    """Jobs accepted in wall ``seconds``, and the CPU seconds spent meanwhile."""

    jobs: int
    seconds: float
    scheduler_cpu: float
    client_cpu: float

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_us_per_job(self) -> float:
        return 1e6 * self.scheduler_cpu / self.jobs


@dataclass(frozen=True, slots=True)
class Latency:
    """Submit-to-start samples (ms): to the agent's StartPart, to the client's event."""

    to_agent_ms: list[float]
    to_event_ms: list[float]


@dataclass(frozen=True, slots=True)
class Hosted:
    """One step of agents hosted in one process."""

    agents: int
    online_after_s: float
    still_online: int
    host_cpu_percent: float
    host_rss_mb: float
    scheduler_cpu_percent: float

    @property
    def ok(self) -> bool:
        return self.still_online == self.agents


def ratio(value: float, reference: float) -> str:
    r = value / reference
    return f"{r:,.2f}x" if r < 1 else f"{r:,.1f}x"


def report(
    single: Rate | None,
    batched: Rate | None,
    lat: Latency | None,
    real: list[float] | None,
    hosts: list[Hosted],
) -> None:
    table = Table(title="live runtime on this machine (127.0.0.1, Mosquitto)")
    for name in ("measurement", "measured", "target", "vs target", "Slurm", "vs Slurm"):
        table.add_column(name, justify="left" if name == "measurement" else "right")
    if single is not None:
        table.add_row(
            "single-job submissions accepted/s",
            f"{single.per_second:,.0f}",
            f">= {TARGET_SINGLE:,.0f}",
            ratio(single.per_second, TARGET_SINGLE),
            "50-100 sbatch/s",
            ratio(single.per_second, SLURM_SUBMITS),
        )
    if batched is not None:
        table.add_row(
            "batched jobs accepted/s",
            f"{batched.per_second:,.0f}",
            f">= {TARGET_BATCHED:,.0f}",
            ratio(batched.per_second, TARGET_BATCHED),
            "50-100 jobs/s",
            ratio(batched.per_second, SLURM_SUBMITS),
        )
    if lat is not None:
        for label, values in (
            ("submit to StartPart at the agent", lat.to_agent_ms),
            ("submit to 'running' event at the client", lat.to_event_ms),
        ):
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            table.add_row(
                f"{label}, p50 (ms)",
                f"{p50:.2f}",
                f"< {TARGET_P50_MS:g}",
                ratio(TARGET_P50_MS, p50),
                "~500 ms",
                ratio(SLURM_START_MS, p50),
            )
            table.add_row(f"{label}, p99 (ms)", f"{p99:.2f}", "", "", "", "")
    if real:
        p50, p99 = percentile(real, 0.5), percentile(real, 0.99)
        table.add_row(
            "submit to PartStarted, real agent, p50 (ms)",
            f"{p50:.2f}",
            f"< {TARGET_P50_MS:g}",
            ratio(TARGET_P50_MS, p50),
            "~500 ms",
            ratio(SLURM_START_MS, p50),
        )
        table.add_row("submit to PartStarted, real agent, p99 (ms)", f"{p99:.2f}", "", "", "", "")
    for label, rate in (("single", single), ("batched", batched)):
        if rate is not None:
            table.add_row(
                f"scheduler CPU per job, {label} (us)",
                f"{rate.cpu_us_per_job:,.0f}",
                "",
                "",
                "",
                "",
            )
    if hosts:
        best = max((h.agents for h in hosts if h.ok), default=0)
        table.add_row(
            "agents hosted by one process, all heartbeating",
            f"{best:,}",
            f">= {TARGET_AGENTS}",
            ratio(best, TARGET_AGENTS),
            "",
            "",
        )
    console.print(table)
    if single is not None and batched is not None:
        console.print(
            f"single: {single.jobs:,} jobs in {single.seconds:.2f} s (this client used "
            f"{single.client_cpu:.2f} CPU s, the scheduler {single.scheduler_cpu:.2f}); batched: "
            f"{batched.jobs:,} jobs in {batched.seconds:.2f} s (client {batched.client_cpu:.2f} "
            f"CPU s, scheduler {batched.scheduler_cpu:.2f})",
            highlight=False,
        )
    if hosts:
        steps = Table(title="agents in one process (NodeAgent actors, one MQTT connection each)")
        for name in (
            "agents",
            "all online after (s)",
            "online after 8 s",
            "host CPU %",
            "host RSS (MB)",
            "scheduler CPU %",
        ):
            steps.add_column(name, justify="right")
        for h in hosts:
            steps.add_row(
                str(h.agents),
                f"{h.online_after_s:.1f}",
                f"{h.still_online}",
                f"{h.host_cpu_percent:.0f}",
                f"{h.host_rss_mb:.0f}",
                f"{h.scheduler_cpu_percent:.0f}",
            )
        console.print(steps)
