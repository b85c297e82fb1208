"""What a job is on the wire: its spec (``JobSpec``, with ``MpiSpec`` for the MPI-like
workload) and a machine's (``MachineSpec``), and the scheduler's rewrites of a spec
(its authenticated owner, its account). ``broker.messages`` says the rules every
message follows.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from broker.command_spec import CommandSpec
from broker.fields import (
    Cpus,
    Fraction,
    Id,
    JobId,
    Name,
    PositiveSeconds,
    Speed,
    Workload,
)
from broker.limits import MAX_MPI_MESSAGE_BYTES


class MpiSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The MPI-like workload's parameters (``nodeagent.job.mpi``): what each rank does.

    Every iteration, each rank burns ``compute`` CPU-seconds (at the job's
    ``ref_speed``; a machine's speed scales them), then exchanges
    ``message_bytes`` with every other rank by ``pattern``: an ``allreduce``
    (element-wise sum of ``message_bytes`` of float64s over all ranks) or a
    ``barrier`` (nobody goes on before everybody arrived). Bounded so a typo
    cannot start a year-long or memory-hungry job.
    """

    iterations: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10
    compute: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 0.1
    #: A part publishes its contribution in one message: below the wire's limit.
    message_bytes: Annotated[int, msgspec.Meta(ge=0, le=MAX_MPI_MESSAGE_BYTES)] = 1024
    pattern: Literal["allreduce", "barrier"] = "allreduce"


class JobSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A job as a client submits it. Times are seconds at the cluster's time base.

    ``work`` is the job's run time on a machine of speed ``ref_speed`` at MPL 1
    (what the sleep workload performs); ``walltime`` is the user's estimate of
    it, the only one the scheduler uses. ``deadline`` is relative to the
    submission.
    """

    id: JobId
    procs: Cpus
    walltime: PositiveSeconds
    #: Positive: a job of no work is a client's mistake (and -0.0 is refused too). The
    #: scheduler also refuses work or wall time beyond its configured maximum.
    work: PositiveSeconds
    workload: Workload = "sleep"
    user: Name = "nobody"
    group: Name = "nobody"
    qos: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0
    deadline: PositiveSeconds | None = None
    #: False marks the job rigid (``accordion submit --rigid``): a policy that folds jobs
    #: (FCFS-malleable) never runs it on fewer CPUs than ``procs``. Jobs are malleable
    #: by default, as in the FCFS-malleable paper.
    malleable: bool = True
    cpu_util: Fraction = 1.0
    ref_speed: Speed = 1.0
    #: The MPI-like workload's parameters (``workload="mpi"``; its defaults when None).
    mpi: MpiSpec | None = None
    #: A user's own command (``workload="command"``, and only then): what the agents run.
    command: CommandSpec | None = None
    #: The name the broker authenticated for this job: set by the scheduler from the
    #: request's topic (a user's login, or the user an admin submitted for), None for
    #: a request without a login. Whatever a client sends here is replaced. An agent
    #: running as root runs a command only for an owner its admin's map names.
    owner: Name | None = None

    def __post_init__(self) -> None:
        if (self.workload == "command") != (self.command is not None):
            raise ValueError('a command goes with workload "command", and only there')


def owned_by(spec: JobSpec, user: str) -> JobSpec:
    """``spec`` with ``user`` as its owner (the scheduler's authenticated submitter)."""
    return spec if spec.user == user else msgspec.structs.replace(spec, user=user)


def authenticated(spec: JobSpec, owner: str | None) -> JobSpec:
    """``spec`` with ``owner`` as the name the broker authenticated for it (None: none)."""
    return spec if spec.owner == owner else msgspec.structs.replace(spec, owner=owner)


def charged_to(spec: JobSpec, account: str) -> JobSpec:
    """``spec`` with ``account`` as its account (``group``): a user's default account."""
    return spec if spec.group == account else msgspec.structs.replace(spec, group=account)


class MachineSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: Id
    cpus: Cpus
    speed: Speed = 1.0
    labels: tuple[Name, ...] = ()
