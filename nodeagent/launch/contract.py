"""The launch contract: what an agent and the job process it starts both agree on.

The job process (``nodeagent.job``) imports nothing of its agent but this
module and the pipe's frames (``nodeagent.launch.frames``); the agent imports
the job's exit codes from here, not from the job. An import contract in
``pyproject.toml`` keeps it so. What both sides must agree on:

- the job module's name, :data:`JOB_MODULE` (``python -m nodeagent.job``):
  agents start job processes with it, and adoption records and the fault
  bench find them by it in their command lines;
- a :class:`Launch`: everything a job process needs to run one part (which
  job, how many processes on how many CPUs at which pace, how much work, the
  time compression, an MPI-like workload's :class:`MpiParams`). It converts to
  and from the job module's command line, so what the agent decides is
  exactly what the process parses, and what an adoption record keeps
  (:meth:`Launch.from_argv`). It is validated against the execution model at
  construction: an allocation outside MPL 1..2 never reaches a process;
- the exit codes of a job process (:data:`EXIT_DONE` ... :data:`EXIT_CANCELLED`);
- a part's key, ``job@attempt`` (:func:`part_key`): the name of its files in
  the agent's state directory and what a rejoining job says it is;
- the job's side of the lease (:func:`lease_expired`; the agent's side and
  the reasoning are in ``nodeagent.survival.lease``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from broker.limits import MAX_MPI_MESSAGE_BYTES
from broker.topics import DEFAULT_ROOT, Topics
from model.execution import (
    DEFAULT_MODEL,
    AllocationError,
    ExecutionModel,
    ExecutionModelError,
    ModelKind,
    model_of,
)

JOB_MODULE = "nodeagent.job"

EXIT_DONE = 0
"""The work is done."""
EXIT_USAGE = 2
"""Bad options, or a workload this version does not run."""
EXIT_RANK_FAILED = 4
"""An MPI-like part's rank exited before the job's end (its failure file says which and how)."""
EXIT_LOST = 129
"""128 + SIGHUP, as a shell reports a process whose terminal hung up: the bus, the
agent's pipe, the agent itself or its lease is gone, so nobody would hear of the
result. The agent reports such a part ``fenced`` (the scheduler requeues it)."""
EXIT_CANCELLED = 143
"""128 + SIGTERM, as a shell reports a process ended by SIGTERM; also for a CancelPart."""


class LaunchError(ValueError):
    """A launch that cannot run (bad allocation, non-positive scale, ...)."""


Pattern = Literal["allreduce", "barrier"]
PATTERNS: tuple[Pattern, ...] = ("allreduce", "barrier")

MAX_ITERATIONS = 1_000_000
MAX_COMPUTE = 3600.0
#: The wire's bound (``broker.limits``): a part publishes its contribution in one message.
MAX_MESSAGE_BYTES = MAX_MPI_MESSAGE_BYTES


class ParamsError(ValueError):
    """MPI-like parameters out of their bounds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MpiParams:
    """The MPI-like workload of one job (``JobSpec.mpi``), validated and bounded."""

    iterations: int = 10
    compute: float = 0.1
    message_bytes: int = 1024
    pattern: Pattern = "allreduce"

    def __post_init__(self) -> None:
        if not 1 <= self.iterations <= MAX_ITERATIONS:
            raise ParamsError(f"iterations must be in 1..{MAX_ITERATIONS}, got {self.iterations}")
        if not (0 < self.compute <= MAX_COMPUTE and math.isfinite(self.compute)):
            raise ParamsError(f"compute must be in (0, {MAX_COMPUTE:g}] s, got {self.compute!r}")
        if not 0 <= self.message_bytes <= MAX_MESSAGE_BYTES:
            raise ParamsError(
                f"message bytes must be in 0..{MAX_MESSAGE_BYTES}, got {self.message_bytes}"
            )
        if self.pattern not in PATTERNS:
            raise ParamsError(f"pattern must be one of {', '.join(PATTERNS)}: {self.pattern!r}")

    @property
    def doubles(self) -> int:
        """Float64 elements an allreduce sums (0 for a barrier)."""
        return self.message_bytes // 8 if self.pattern == "allreduce" else 0

    def argv(self) -> list[str]:
        return [
            f"--iterations={self.iterations}",
            f"--compute={self.compute!r}",
            f"--message-bytes={self.message_bytes}",
            f"--pattern={self.pattern}",
        ]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--iterations", type=int, default=None, help="MPI-like iterations")
        parser.add_argument("--compute", type=float, default=None, help="CPU s per iteration")
        parser.add_argument("--message-bytes", type=int, default=None)
        parser.add_argument("--pattern", default=None, choices=PATTERNS)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MpiParams | None:
        if args.iterations is None:
            return None
        return cls(
            iterations=args.iterations,
            compute=args.compute,
            message_bytes=args.message_bytes,
            pattern=args.pattern,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One part of one job, as its process runs it.

    ``procs`` and ``cpus`` are the processes and CPUs whose ratio is the part's
    MPL; ``pace`` the speed the job proceeds at (its slowest part's machine);
    ``work`` the units to perform (seconds at ``ref_speed`` and MPL 1);
    ``time_scale`` how many cluster seconds pass per wall second;
    ``start_at`` the wall time (seconds since the epoch) the work is counted
    from: the agent's ``PartStarted.at``, so the time an interpreter takes to
    start is part of the run, as the scheduler sees it (None: from the moment
    the process is ready).
    """

    agent: str
    job_id: str
    procs: int
    cpus: int
    pace: float
    work: float
    ref_speed: float = 1.0
    cpu_util: float = 1.0
    time_scale: float = 1.0
    workload: str = "sleep"
    root: str = DEFAULT_ROOT
    start_at: float | None = None
    #: Which start of the job this part belongs to (fencing); its process ignores
    #: control messages of other attempts.
    attempt: int = 1
    #: The agent's lease file and its length in wall seconds (``nodeagent.survival.lease``);
    #: None: no lease (the process then stops only when its agent dies).
    lease_file: str | None = None
    lease: float = 0.0
    #: The scheduler's execution model (``StartPart.execution``): the sleep
    #: workload's pace follows the same formula the scheduler plans with.
    execution: ExecutionModel = DEFAULT_MODEL
    #: The MPI-like workload (``workload == "mpi"``): its parameters, this part's
    #: rank processes (``ranks``, numbered from ``rank_offset`` in the job), the
    #: job's ``total_ranks``, and which of the job's ``parts`` this is.
    mpi: MpiParams | None = None
    ranks: int = 0
    rank_offset: int = 0
    total_ranks: int = 0
    part: int = 0
    parts: int = 1
    #: Where the process writes why it failed, for ``PartFinished.detail``.
    failure_file: str | None = None
    #: The agent's relay socket (``nodeagent.survival.state``): when set, a relayed process
    #: outlives its agent within its lease and rejoins the next incarnation there
    #: (``nodeagent.job.rejoin``); None: it stops as soon as its relay breaks.
    relay_socket: str | None = None

    @property
    def cpu_seconds(self) -> float:
        """CPU-seconds a rank burns per iteration: ``compute`` scaled like the sleep time."""
        if self.mpi is None:
            return 0.0
        return self.mpi.compute * self.ref_speed / self.pace / self.time_scale

    def __post_init__(self) -> None:
        def finite_positive(name: str, value: float) -> None:
            if not (value > 0 and math.isfinite(value)):
                raise LaunchError(f"job {self.job_id!r}: {name} must be > 0, got {value!r}")

        finite_positive("pace", self.pace)
        finite_positive("ref_speed", self.ref_speed)
        finite_positive("time_scale", self.time_scale)
        if not (self.work >= 0 and math.isfinite(self.work)):
            raise LaunchError(f"job {self.job_id!r}: work must be >= 0, got {self.work!r}")
        if self.start_at is not None and not math.isfinite(self.start_at):
            raise LaunchError(f"job {self.job_id!r}: start_at must be finite")
        if self.attempt < 1:
            raise LaunchError(f"job {self.job_id!r}: attempt must be >= 1, got {self.attempt}")
        if self.lease_file is not None and not (self.lease > 0 and math.isfinite(self.lease)):
            raise LaunchError(f"job {self.job_id!r}: a lease file needs a lease > 0")
        if self.relay_socket is not None and self.lease_file is None:
            # Rejoining is bounded by the lease: without one a part could outlive its
            # agent for ever.
            raise LaunchError(f"job {self.job_id!r}: a relay socket needs a lease file")
        if self.workload == "mpi":
            if self.mpi is None:
                raise LaunchError(f"job {self.job_id!r}: the mpi workload needs its parameters")
            if not 1 <= self.ranks <= self.total_ranks:
                raise LaunchError(f"job {self.job_id!r}: {self.ranks} ranks of {self.total_ranks}")
            if not 0 <= self.part < self.parts:
                raise LaunchError(f"job {self.job_id!r}: part {self.part} of {self.parts}")
        elif self.workload != "sleep":
            raise LaunchError(f"job {self.job_id!r}: unknown workload {self.workload!r}")
        if not 0 < self.cpu_util <= 1:
            raise LaunchError(f"job {self.job_id!r}: cpu_util must be in (0, 1]")
        # Builds every topic this part will use: a name that cannot be a topic
        # level fails here, in the agent, not later in the child.
        Topics(self.root).job_control(self.job_id)
        Topics(self.root).agent_events(self.agent)
        self.rate()

    def rate(self, *, cpus: int | None = None, pace: float | None = None) -> float:
        """Work units per cluster second on this allocation (or on a resized one)."""
        try:
            return self.execution.rate(
                procs=self.procs,
                cpus=self.cpus if cpus is None else cpus,
                speed=self.pace if pace is None else pace,
                ref_speed=self.ref_speed,
                cpu_util=self.cpu_util,
                job_id=self.job_id,
            )
        except AllocationError as exc:
            raise LaunchError(f"job {self.job_id!r}: {exc}") from exc

    def argv(self) -> list[str]:
        """The job module's options for this launch (the transport options excluded)."""
        # repr() of a float round-trips exactly: the child computes the same rate.
        start = [] if self.start_at is None else [f"--start-at={self.start_at!r}"]
        lease = (
            []
            if self.lease_file is None
            else [f"--lease-file={self.lease_file}", f"--lease={self.lease!r}"]
        )
        return [
            f"--root={self.root}",
            f"--agent={self.agent}",
            f"--job-id={self.job_id}",
            f"--procs={self.procs}",
            f"--cpus={self.cpus}",
            f"--pace={self.pace!r}",
            f"--ref-speed={self.ref_speed!r}",
            f"--cpu-util={self.cpu_util!r}",
            f"--work={self.work!r}",
            f"--time-scale={self.time_scale!r}",
            f"--workload={self.workload}",
            f"--attempt={self.attempt}",
            f"--execution-model={self.execution.kind.value}",
            f"--overhead={self.execution.overhead!r}",
            f"--ov-min={self.execution.ov_min!r}",
            f"--ov-max={self.execution.ov_max!r}",
            f"--model-seed={self.execution.seed}",
            *start,
            *lease,
            *([] if self.relay_socket is None else [f"--relay-socket={self.relay_socket}"]),
            *self._mpi_argv(),
        ]

    def _mpi_argv(self) -> list[str]:
        failure = [] if self.failure_file is None else [f"--failure-file={self.failure_file}"]
        if self.mpi is None:
            return failure
        return [
            *self.mpi.argv(),
            f"--ranks={self.ranks}",
            f"--rank-offset={self.rank_offset}",
            f"--total-ranks={self.total_ranks}",
            f"--part={self.part}",
            f"--parts={self.parts}",
            *failure,
        ]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The options :meth:`argv` writes, for the job module's parser."""
        parser.add_argument("--root", default=DEFAULT_ROOT, help="topic root")
        parser.add_argument("--agent", required=True, help="the agent that started this part")
        parser.add_argument("--job-id", required=True)
        parser.add_argument("--procs", type=int, required=True, help="processes of the part")
        parser.add_argument("--cpus", type=int, required=True, help="CPUs of the part")
        parser.add_argument("--pace", type=float, required=True, help="speed of the slowest part")
        parser.add_argument("--ref-speed", type=float, default=1.0)
        parser.add_argument("--cpu-util", type=float, default=1.0)
        parser.add_argument("--work", type=float, required=True, help="work units (ref seconds)")
        parser.add_argument("--time-scale", type=float, default=1.0, help="cluster s per wall s")
        parser.add_argument("--workload", default="sleep")
        parser.add_argument(
            "--start-at", type=float, default=None, help="count the work from (epoch s)"
        )
        parser.add_argument("--attempt", type=int, default=1, help="the job's attempt (fencing)")
        # Parsed under the names ``model.execution.model_of`` reads (``ExecutionParams``).
        parser.add_argument(
            "--execution-model", dest="kind", default="linear", choices=[k.value for k in ModelKind]
        )
        parser.add_argument("--overhead", type=float, default=0.0, help="formula (4)'s OV")
        parser.add_argument("--ov-min", type=float, default=0.0, help="paper model: OV_j's min")
        parser.add_argument("--ov-max", type=float, default=1.0, help="paper model: OV_j's max")
        parser.add_argument(
            "--model-seed", dest="seed", type=int, default=0, help="paper model: OV_j's seed"
        )
        parser.add_argument("--lease-file", default=None, help="the agent's lease file")
        parser.add_argument("--lease", type=float, default=0.0, help="lease length (wall s)")
        parser.add_argument(
            "--relay-socket", default=None, help="rejoin the agent there if the relay breaks"
        )
        MpiParams.add_arguments(parser)
        parser.add_argument("--ranks", type=int, default=0, help="this part's rank processes")
        parser.add_argument("--rank-offset", type=int, default=0)
        parser.add_argument("--total-ranks", type=int, default=0)
        parser.add_argument("--part", type=int, default=0)
        parser.add_argument("--parts", type=int, default=1)
        parser.add_argument("--failure-file", default=None)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Launch:
        try:
            mpi = MpiParams.from_args(args)
        except ParamsError as exc:
            raise LaunchError(f"job {args.job_id!r}: {exc}") from exc
        return cls(
            mpi=mpi,
            ranks=args.ranks,
            rank_offset=args.rank_offset,
            total_ranks=args.total_ranks,
            part=args.part,
            parts=args.parts,
            failure_file=args.failure_file,
            root=args.root,
            agent=args.agent,
            job_id=args.job_id,
            procs=args.procs,
            cpus=args.cpus,
            pace=args.pace,
            ref_speed=args.ref_speed,
            cpu_util=args.cpu_util,
            work=args.work,
            time_scale=args.time_scale,
            workload=args.workload,
            start_at=args.start_at,
            attempt=args.attempt,
            execution=_model(args),
            lease_file=args.lease_file,
            lease=args.lease,
            relay_socket=args.relay_socket,
        )

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> Launch:
        """The launch that :meth:`argv` wrote (an adoption record keeps it); LaunchError
        if these options do not describe one."""
        parser = _OptionsParser(add_help=False)
        cls.add_arguments(parser)
        return cls.from_args(parser.parse_args(list(argv)))


class _OptionsParser(argparse.ArgumentParser):
    """A parser of a launch's options that raises instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise LaunchError(f"launch options: {message}")


def _model(args: argparse.Namespace) -> ExecutionModel:
    try:
        return model_of(args)
    except ExecutionModelError as exc:
        raise LaunchError(str(exc)) from exc


def part_key(job_id: str, attempt: int) -> str:
    """A part's name: its files in the state directory, and a rejoining job's ``HELLO``."""
    return f"{job_id}@{attempt}"


def lease_expired(path: str, lease: float, now: float | None = None) -> bool:
    """The job's side of the lease: whether the lease at ``path`` lapsed (a missing
    file has). The agent renews the file on each heartbeat the broker acknowledged."""
    try:
        mtime = os.stat(path).st_mtime
    except FileNotFoundError:
        return True
    return (time.time() if now is None else now) - mtime > lease
