"""What agents and the scheduler say to each other: an agent's registration,
heartbeats and part reports, and the scheduler's commands to start, resize and
cancel parts. ``broker.messages`` says the rules every message follows.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from broker.command_spec import HostSlots
from broker.fields import (
    Attempt,
    Cpus,
    ExitStatus,
    Id,
    Message,
    Name,
    Seconds,
    Seq,
    Signal,
    Speed,
)
from broker.job_spec import JobSpec, MachineSpec
from broker.vocabulary import (
    CommandUsers,
    MpiLibrary,
)


class RunningPart(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A part an agent is running, as it reports on (re)registration and heartbeats."""

    job_id: Id
    cpus: Cpus
    started: float
    attempt: Attempt = 0


class AgentOnline(Message, tag="agent_online", frozen=True, kw_only=True):
    """Retained on the agent's state topic while it lives."""

    machine: MachineSpec
    incarnation: Id
    running: tuple[RunningPart, ...]
    #: Wall seconds the agent keeps its parts running without the broker acknowledging
    #: its heartbeats (its lease); 0 when it has none. The scheduler checks that it
    #: declares an agent lost only later than that (see ``scheduler.live.agents``).
    lease: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    #: The host CPUs the agent pins its parts' ranks to (``nodeagent.agent.cpuset``); empty
    #: from an agent that does not pin.
    cpuset: Annotated[
        tuple[Annotated[int, msgspec.Meta(ge=0, le=65_535)], ...], msgspec.Meta(max_length=65_536)
    ] = ()
    #: True when the machine declares more CPUs than ``cpuset`` holds: packing is then
    #: emulated (two declared CPUs may share one core), so timings are not physical.
    emulated: bool = False
    #: The measured benchmark score (``nodeagent.speed``, relative to its reference
    #: machine) and its relative spread over the benchmark's rounds; None if not measured.
    speed_score: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None
    speed_spread: Annotated[float, msgspec.Meta(ge=0, le=1e6)] | None = None
    #: True when this agent's parts outlive it within ``lease`` and a next incarnation
    #: for the machine adopts them (``nodeagent.survival.adoption``): on its will, the scheduler
    #: holds its parts for the lease instead of requeueing them at once.
    adopts: bool = False
    #: Whom it runs users' commands as (``off`` unless started with ``--allow-commands``),
    #: and, for ``agent``, its own OS account, which every command job here runs as.
    commands: CommandUsers = CommandUsers.OFF
    runs_as: Name | None = None
    #: The MPI libraries whose programs it can launch (``CommandSpec.mpi``): those whose
    #: launcher, and for MPICH the yield shim, its host has. Empty with commands off.
    #: The scheduler places an MPI job only on an agent that names its library.
    mpi: Annotated[tuple[MpiLibrary, ...], msgspec.Meta(max_length=8)] = ()
    #: True while the agent drains (stopped by its operator with ``--drain-on-stop``):
    #: it runs its parts to their end, takes no new one, then says goodbye. The
    #: scheduler places nothing on it meanwhile.
    draining: bool = False


class AgentOffline(Message, tag="agent_offline", frozen=True, kw_only=True):
    """How an agent left. ``lost``: its Last Will (the broker's). ``goodbye``: it
    retires, its parts over. ``stopping``: its operator stopped it and it will be
    back: its parts run on within its lease for its next incarnation to adopt (an
    agent that ``adopts``), or it ended them, each reported ``stopped``. Either way
    the scheduler charges no job's requeue budget for it."""

    agent_id: Id
    incarnation: Id
    reason: Literal["lost", "goodbye", "stopping"]


class Heartbeat(Message, tag="heartbeat", frozen=True, kw_only=True):
    """The agent's liveness (only the agent's own heartbeat counts as such) and the
    complete list of the parts it runs now."""

    agent_id: Id
    seq: Seq
    running: tuple[RunningPart, ...]


class PartStarted(Message, tag="part_started", frozen=True, kw_only=True):
    job_id: Id
    agent_id: Id
    pid: int
    at: float
    attempt: Attempt = 0
    #: Wall seconds from the agent's admission of the ``StartPart`` to the instant the
    #: part's run counts from (its process's fork), on the agent's own monotonic clock:
    #: its launch latency. 0 for a process that cannot say when it began (an exec'd
    #: one counts its work from the admission); None from an older agent.
    launch_seconds: Seconds | None = None


class PartProgress(Message, tag="part_progress", frozen=True, kw_only=True):
    """Work done so far (units of ``JobSpec.work``), from the job process."""

    job_id: Id
    agent_id: Id
    done: Seconds
    rate: float
    at: float
    attempt: Attempt = 0
    #: MPI-like workload: iterations done, and the CPU utilisation ``u`` measured so
    #: far (compute time over compute plus communication time of the ranks).
    iteration: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cpu_util: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None


class PartFinished(Message, tag="part_finished", frozen=True, kw_only=True):
    """The part's process exited: ``exit_code`` 0 is success; ``reason`` says why not."""

    job_id: Id
    agent_id: Id
    exit_code: int
    at: float
    #: ``fenced``: the agent refused or stopped this attempt for fencing (a start
    #: delayed past its lease, or its lease lapsed): the job goes back to the queue.
    #: ``stopped``: its agent's operator stopped the agent, and the part with it (an
    #: agent that does not adopt, a start that reached a stopping agent, or a part
    #: a successor could not adopt after such a stop): the job goes back to the
    #: queue without charging its requeue budget.
    reason: Literal["done", "failed", "cancelled", "walltime", "lost", "fenced", "stopped"]
    attempt: Attempt = 0
    #: What went wrong, in words, when the part can say (e.g. which MPI rank died).
    detail: Annotated[str, msgspec.Meta(max_length=512)] | None = None
    #: Wall seconds from the process's fork to its exit, on the agent's own monotonic
    #: clock (the scheduler dates the run's end from it, not from when it hears of
    #: it); None for a part whose process never ran, or from an older agent.
    run_seconds: Seconds | None = None
    #: A command job's part that ran the command: its exit status, or the signal that
    #: ended it (one of the two); None for other parts and workloads.
    exit_status: ExitStatus | None = None
    signal: Signal | None = None


class ExecutionSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The execution model the scheduler plans with (``model.execution``), so the
    agents' sleep workload progresses by the same formula: its named ``kind``,
    formula (4)'s fixed ``overhead`` and the ``paper`` model's per-job OV range
    and seed. ``calibrated`` is named so that every kind of ``model.execution`` has
    its wire name, but no StartPart carries a calibration yet: an agent refuses it."""

    kind: Literal["linear", "max", "paper", "calibrated"] = "linear"
    overhead: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    ov_min: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 0.0
    ov_max: Annotated[float, msgspec.Meta(ge=0, le=1e6)] = 1.0
    seed: int = 0


class StartPart(Message, tag="start_part", frozen=True, kw_only=True):
    """Run ``cpus`` CPUs of ``job`` on this agent at the job's ``pace`` (its slowest part's
    machine speed; the reference speed by default, as a machine's)."""

    job: JobSpec
    cpus: Cpus
    pace: Speed = 1.0
    part: Annotated[int, msgspec.Meta(ge=0)] = 0
    parts: Annotated[int, msgspec.Meta(ge=1)] = 1
    time_scale: Annotated[float, msgspec.Meta(gt=0, le=1e6)] = 1.0
    #: The job's CPUs over all its parts: with ``job.procs`` it gives the MPL every
    #: part runs at. None from an older sender: a lone part then has ``cpus``.
    job_cpus: Cpus | None = None
    #: Fencing: which start of the job this is. A report or command of another
    #: attempt is stale; an agent holding an older attempt's part kills it.
    attempt: Attempt = 1
    #: Wall seconds since the epoch when the scheduler sent it (0: not said). An
    #: agent refuses a start older than its lease: it was delayed (the agent frozen
    #: or cut off) long enough that the job may have been given to another agent.
    issued: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    #: The execution model (None from an older sender: the default ``linear``).
    execution: ExecutionSpec | None = None
    #: MPI-like workload: this part's rank processes and the job-wide number of its
    #: first rank. The scheduler splits ``job.procs`` over the parts so they sum to it
    #: (uneven parts get uneven shares). None from an older sender: the agent derives
    #: them from ``cpus`` and ``job_cpus``.
    ranks: Cpus | None = None
    rank_offset: Annotated[int, msgspec.Meta(ge=0, le=1_048_576)] | None = None
    #: Every part of the job, in order (this one is number ``part``): its machine and
    #: its share of the job's processes, what a command job's hostfile and
    #: environment say. Empty from an older sender.
    hosts: Annotated[tuple[HostSlots, ...], msgspec.Meta(max_length=65_536)] = ()


class ResizePart(Message, tag="resize_part", frozen=True, kw_only=True):
    job_id: Id
    cpus: Cpus
    pace: Speed = 1.0
    #: The job's CPUs over all its parts after the resize (see ``StartPart``).
    job_cpus: Cpus | None = None
    attempt: Attempt = 0
    #: Wall seconds since the epoch when the scheduler decided the resize (0: not
    #: said). The sleep workload's progress changes pace from then, as in the twin
    #: and the journal, even if the job process reads it later (still starting).
    issued: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class CancelPart(Message, tag="cancel_part", frozen=True, kw_only=True):
    """End a part; ``attempt`` 0 ends whatever attempt runs, n only attempt n."""

    job_id: Id
    attempt: Attempt = 0
