"""What the scheduler actor publishes of the cluster: its retained summary and its
gauges' state, each built from the live context in one walk.

The actor decides when (``SchedulerActor._refresh``: after a batch that changed
something, at most every ``summary_interval``); these functions only read.
"""

from __future__ import annotations

from broker.messages import ClusterSummary
from scheduler.core.core import SchedulerCore
from scheduler.live.agent_lifecycle import AgentState
from scheduler.live.context import Context
from scheduler.runtime.exporter import GaugeState, MachineGauge
from scheduler.runtime.journal import Journal


def summary_of(core: SchedulerCore, now: float) -> ClusterSummary:
    """The cluster in a line: machines, CPUs, free CPUs, queued and running jobs."""
    online = [m.id for m in core.machines]
    return ClusterSummary(
        now=now,
        machines=len(online),
        cpus=core.total_cpus,
        free=sum(core.free(m) for m in online),
        queued=len(core.queue),
        running=len(core.running) + len(core.pending),
        policy=core.policy.name,
    )


def same_summary(a: ClusterSummary, b: ClusterSummary) -> bool:
    """Equal but for the time stamp (an unchanged cluster is not news)."""
    return (a.machines, a.cpus, a.free, a.queued, a.running, a.policy) == (
        b.machines,
        b.cpus,
        b.free,
        b.queued,
        b.running,
        b.policy,
    )


def gauge_state_of(
    ctx: Context, now: float, *, journal: Journal, time_scale: float, reconciling: bool
) -> GaugeState:
    """The gauges' state at ``now``: every machine, agent state, job and the journal's health."""
    core = ctx.core
    online = sum(1 for ag in ctx.agents.values() if ag.life.available)
    machines = tuple(
        MachineGauge(
            agent_id,
            ag.machine.cpus,
            ag.machine.cpus - core.free(agent_id) if ag.life.available else 0,
            ag.life.available,
        )
        for agent_id, ag in sorted(ctx.agents.items())
    )
    states = dict.fromkeys((s.value for s in AgentState), 0)
    for ag in ctx.agents.values():
        states[ag.life.state.value] += 1
    return GaugeState(
        machine_states=states,
        journal_writable=journal.failure is None,
        journal_held_writes=journal.held_writes,
        queued=len(core.queue),
        running=len(core.running) + len(core.pending),
        cpus=core.total_cpus,
        cpus_free=sum(core.free(m.id) for m in core.machines),
        cpus_configured=ctx.configured_cpus(),
        machines=machines,
        job_cpus={r.job.id: r.cpus for r in core.running},
        job_procs={r.job.id: r.job.procs for r in core.running},
        machines_online=online,
        machines_offline=len(ctx.agents) - online,
        cluster_time=now,
        time_scale=time_scale,
        reconciling=reconciling,
    )
