"""A client's job spec as the core's job, and the admission bounds the wire cannot state.

The wire (``broker.messages``) bounds every field to sane types and ranges;
what depends on this scheduler's configuration is checked here: the longest
wall time and the most work a job may ask for (``ActorSettings.max_walltime``).
"""

from __future__ import annotations

from broker.messages import JobSpec
from model.job import Job
from model.machine import Capability
from scheduler.live.capabilities import MPI_CAPABILITY

#: What a user's command needs of its machines (an agent started with --allow-commands).
COMMAND_NEEDS = frozenset({Capability.COMMANDS})


class SpecError(ValueError):
    """A spec this scheduler refuses (answered in the job's own ``SubmitResult``)."""


def check_spec(spec: JobSpec, *, max_walltime: float) -> None:
    if spec.walltime > max_walltime:
        raise SpecError(
            f"walltime {spec.walltime:g} s is above this scheduler's maximum {max_walltime:g} s"
        )
    if spec.work > max_walltime:
        raise SpecError(
            f"work {spec.work:g} s is above this scheduler's maximum {max_walltime:g} s"
        )


def job_from_spec(spec: JobSpec, submit: float) -> Job:
    """The core's job for a client's spec submitted at ``submit`` (cluster seconds).

    ``work`` becomes the job's run time at its reference speed; the relative
    deadline becomes absolute; a user's command needs a machine that runs commands.
    An MPI program (``CommandSpec.mpi``) needs one that also launches its library,
    and runs on one machine: its launcher starts every rank on its own host.
    Raises :class:`~model.job.JobError` for values a job cannot have.
    """
    needs: frozenset[Capability] = frozenset()
    mpi = spec.command.mpi if spec.command is not None else None
    if spec.workload == "command":
        needs = COMMAND_NEEDS if mpi is None else COMMAND_NEEDS | {MPI_CAPABILITY[mpi]}
    return Job(
        id=spec.id,
        submit=submit,
        procs=spec.procs,
        walltime=spec.walltime,
        runtime=spec.work,
        user=spec.user,
        group=spec.group,
        qos=spec.qos,
        deadline=None if spec.deadline is None else submit + spec.deadline,
        malleable=spec.malleable,
        cpu_util=spec.cpu_util,
        ref_speed=spec.ref_speed,
        needs=needs,
        one_machine=mpi is not None,
    )
