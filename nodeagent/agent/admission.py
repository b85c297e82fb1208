"""The agent's commands: admission of starts, resizes and cancels.

The node agent's drain loop hands every delivery on its commands topic to
:meth:`Admission.command`. The rules are in ``nodeagent.agent.node_agent``'s
docstring: idempotent starts, fencing by attempt and lease, CPUs held by
parts being ended, resizes checked like starts. An admitted start is
registered at once (its CPUs and cores held, its record written) and handed
to ``nodeagent.agent.runs`` to launch and supervise; a refused one is
answered ``PartFinished`` (``nodeagent.agent.reports``).

Two kinds of start wait here: the start of a newer attempt of a job whose
older attempt still runs here (it is killed first), and starts whose CPUs
are still held by parts being ended. When a part's process is gone, the
drain loop calls :meth:`Admission.freed`, which admits them again.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable

from broker.bus import Delivery
from broker.codec import WireError, decode, encode
from broker.messages import CancelPart, MpiSpec, ResizePart, StartPart
from broker.topics import Topics
from model.execution import ExecutionModelError, model_of
from nodeagent.agent.cpuset import SlotPool, format_cpuset, pin_part
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.parts import Counters, Part, PartTable, wall_deadline
from nodeagent.agent.reports import Reports
from nodeagent.agent.runs import PartRuns
from nodeagent.agent.settings import AgentSettings, Reason
from nodeagent.launch.contract import Launch, LaunchError, MpiParams, ParamsError
from nodeagent.survival.lease import AgentLease, start_fenced
from nodeagent.survival.state import StateDir

log = logging.getLogger(__name__)


class Admission:
    """One agent's answers to the scheduler's commands; see the module docstring."""

    def __init__(
        self,
        *,
        agent_id: str,
        incarnation: str,
        topics: Topics,
        settings: AgentSettings,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        parts: PartTable,
        pool: SlotPool,
        runs: PartRuns,
        reports: Reports,
        outbox: Outbox,
        lease: AgentLease,
        state: StateDir | None,
        counters: Counters,
    ) -> None:
        self._agent_id = agent_id
        self._incarnation = incarnation
        self._topics = topics
        self._settings = settings
        self._clock = clock
        self._monotonic = monotonic
        self._parts = parts
        self._pool = pool
        self._runs = runs
        self._reports = reports
        self._outbox = outbox
        self._lease = lease
        self._state = state
        self._counters = counters
        # A start of a newer attempt waiting for the stale attempt's process to exit.
        self._deferred: dict[str, StartPart] = {}
        # Starts waiting for the CPUs of parts that are being ended, in arrival order.
        self._waiting: list[StartPart] = []
        self._stopping = False

    @property
    def stopping(self) -> bool:
        """Whether the agent is stopping: every start is refused ``stopped`` (its
        operator's stop, which the scheduler does not charge to the job)."""
        return self._stopping

    def stop(self) -> None:
        self._stopping = True

    def command(self, delivery: Delivery) -> None:
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self.bad(f"malformed command on {delivery.topic}: {exc}")
            return
        if isinstance(message, StartPart):
            self.start(message)
        elif isinstance(message, ResizePart):
            self.resize(message)
        elif isinstance(message, CancelPart):
            self.cancel(message)
        else:
            self.bad(f"{type(message).__name__} is not a command for an agent")

    def bad(self, why: str) -> None:
        self._counters.bad_messages += 1
        log.warning("agent %s: %s", self._agent_id, why)

    def _launch(self, command: StartPart, start_at: float) -> Launch:
        job = command.job
        try:
            execution = model_of(command.execution)
        except ExecutionModelError as exc:
            raise LaunchError(str(exc)) from exc
        # Every part of a job runs at the job's MPL (its processes over all its CPUs)
        # and pace. An older scheduler that does not send job_cpus leaves the MPL of
        # a multi-part job unknown: such a part is then taken to run at MPL 1.
        if command.job_cpus is not None:
            procs, cpus = job.procs, command.job_cpus
        elif command.parts == 1:
            procs, cpus = job.procs, command.cpus
        else:
            procs, cpus = command.cpus, command.cpus
        mpi = _mpi_params(job.mpi) if job.workload == "mpi" else None
        ranks, offset = _rank_share(command)
        return Launch(
            mpi=mpi,
            ranks=ranks if mpi is not None else 0,
            rank_offset=offset if mpi is not None else 0,
            total_ranks=job.procs if mpi is not None else 0,
            part=min(command.part, command.parts - 1),
            parts=command.parts,
            failure_file=self._failure_file(job.id, max(1, command.attempt)),
            start_at=start_at,
            agent=self._agent_id,
            job_id=job.id,
            procs=procs,
            cpus=cpus,
            pace=command.pace,
            work=job.work,
            ref_speed=job.ref_speed,
            cpu_util=job.cpu_util,
            time_scale=command.time_scale,
            workload=job.workload,
            root=self._topics.root,
            attempt=max(1, command.attempt),
            execution=execution,
            lease_file=self._lease.part_file(job.id, max(1, command.attempt)),
            lease=self._settings.lease,
            relay_socket=(
                str(self._state.socket_path)
                if self._state is not None and self._lease.held and self._settings.adopt
                else None
            ),
        )

    def _failure_file(self, job_id: str, attempt: int) -> str:
        folder = self._settings.lease_dir or tempfile.gettempdir()
        name = f"accordion-{self._agent_id}-{self._incarnation[:8]}-{job_id}-{attempt}.failure"
        return os.path.join(folder, name)

    def start(self, command: StartPart) -> None:
        job = command.job
        attempt = max(1, command.attempt)
        running = self._parts.get(job.id)
        if running is not None and attempt > running.attempt:
            # A newer start of a job whose older attempt still runs here (this agent
            # was cut off and the job requeued): fencing kills the stale one, and the
            # new one starts once its CPUs are free.
            log.warning(
                "agent %s: attempt %d of %s supersedes attempt %d: killing it",
                self._agent_id,
                attempt,
                job.id,
                running.attempt,
            )
            self._kill_stale(running)
            self._deferred[job.id] = command
            return
        if running is not None or self._reports.ended(job.id, attempt):
            log.info("agent %s: duplicate StartPart for %s ignored", self._agent_id, job.id)
            return
        if self._stopping:
            self._refuse(job.id, attempt, "stopped", "the agent is stopping")
            return
        # Delayed past the lease (this agent was frozen or cut off, or the queue held
        # it), or sent while its lease had lapsed: the scheduler may have requeued the
        # job meanwhile. Fencing: refused until a heartbeat renews the lease. Nothing
        # from here to the fork waits on the broker (the control topic's clear below
        # is posted, not awaited), so a freeze cannot slip in between: a fork after
        # such a wait once ran a frozen agent's job twice (the fault matrix's
        # agent-freeze row, bench.faults).
        why = start_fenced(
            command.issued, self._clock(), self._settings.lease, self._lease.lapsed()
        )
        if why is not None:
            self._refuse(job.id, attempt, "fenced", why)
            return
        free = self._parts.free
        scale = self._settings.time_scale
        if command.cpus > free:
            if command.cpus <= free + self._parts.ending_cpus():
                # Parts being ended still hold the CPUs (their processes have a grace to
                # exit) while the scheduler, which ended them, counts the CPUs free:
                # Slurm's COMPLETING. The start waits for their exit.
                log.info("agent %s: %s waits for ending parts' CPUs", self._agent_id, job.id)
                self._waiting.append(command)
                return
            self._refuse(job.id, attempt, "failed", f"{command.cpus} CPUs asked, {free} free")
            return
        if scale is not None and command.time_scale != scale:
            why = f"time scale {command.time_scale} is not this agent's {scale}"
            self._refuse(job.id, attempt, "failed", why)
            return
        # A resize retained for an earlier run of this job id (another agent's,
        # which died before clearing it) must not reach this process: its frames
        # are relayed once this clear is acknowledged (``nodeagent.agent.runs``).
        cleared = self._outbox.post(self._topics.job_control(job.id), b"", retain=True)
        # The part's clock starts here for now; once its process runs, from its fork,
        # for the job process (its work counts from ``at``), the wall-time limit and
        # the scheduler (PartStarted.at) alike.
        at, now = self._clock(), self._monotonic()
        try:
            launch = self._launch(command, at)
        except LaunchError as exc:
            self._refuse(job.id, attempt, "failed", str(exc))
            return
        rate = launch.rate()
        part = Part(
            launch=launch,
            process=None,
            cpus=command.cpus,
            attempt=attempt,
            started=at,
            received=now,
            rate=rate,
            budget=job.walltime,
            changed=now,
            deadline=wall_deadline(
                now, job.walltime, rate, launch.time_scale, self._settings.walltime_grace
            ),
        )
        part.failure_file = launch.failure_file
        part.slots = self._pool.take(part.cpus)
        if self._state is not None:
            # Before the fork: a next incarnation finds every part that may run.
            self._state.write_record(part.record())
            if launch.lease_file is not None:
                self._lease.start_part(launch.lease_file)
        self._parts.add(part)
        # The launch and the supervision run in a task of their own: the next command
        # is read while this one forks (``nodeagent.agent.runs``).
        self._runs.begin(part, cleared)

    def freed(self, job_id: str) -> None:
        """The part of ``job_id`` is gone and its CPUs free: admit the newer attempt
        that waited for it, then the starts that waited for CPUs (each waits again if
        its CPUs are still being freed)."""
        deferred = self._deferred.pop(job_id, None)
        if deferred is not None:
            self.start(deferred)
        waiting, self._waiting = self._waiting, []
        for command in waiting:
            self.start(command)

    def refuse_waiting(self) -> None:
        """The agent stops: answer the starts still waiting (for CPUs, or for a stale
        attempt to be gone)."""
        waiting, self._waiting = self._waiting, []
        waiting += self._deferred.values()
        self._deferred = {}
        for command in waiting:
            self.start(command)  # refused "stopped": the agent is stopping

    def _refuse(self, job_id: str, attempt: int, reason: Reason, why: str) -> None:
        log.warning("agent %s: part %s refused (%s): %s", self._agent_id, job_id, reason, why)
        self._reports.finished(job_id, attempt, -1, reason)

    def _kill_stale(self, part: Part) -> None:
        """End a part of an attempt the scheduler no longer holds: no grace."""
        self._counters.stale += 1
        part.ending = "cancelled"
        part.kill_at = None
        part.signal(kill=True)

    def resize(self, command: ResizePart) -> None:
        part = self._parts.get(command.job_id)
        if part is None or part.ending is not None:
            log.info("agent %s: resize of %s ignored: not running", self._agent_id, command.job_id)
            return
        if command.attempt not in (0, part.attempt):
            self._counters.stale += 1
            log.info("agent %s: resize of a stale attempt of %s ignored", self._agent_id, part)
            return
        growth = command.cpus - part.cpus
        free = self._parts.free
        if growth > free:
            self.bad(f"resize of {command.job_id} to {command.cpus} CPUs: only {free} free")
            return
        try:
            rate = part.launch.rate(cpus=_mpl_cpus(command), pace=command.pace)
        except LaunchError as exc:
            self.bad(f"resize refused: {exc}")
            return
        now = self._monotonic()
        scale = part.launch.time_scale
        part.budget = max(0.0, part.budget - part.rate * scale * (now - part.changed))
        part.changed, part.rate, part.resized = now, rate, True
        self._parts.resize(part, command.cpus)
        before = self._pool.cores_of(part.slots)
        part.slots = self._pool.resize(part.slots, command.cpus)
        if part.launch.mpi is not None and part.process is not None:
            # (One still launching is pinned to its slots as it arrives.)
            pin_part(self._pool, part.slots, part.process.pid, part.ranks)
        self._counters.resizes += 1
        part.deadline = wall_deadline(now, part.budget, rate, scale, self._settings.walltime_grace)
        if self._state is not None:
            self._state.write_record(part.record())
        forward = ResizePart(
            job_id=command.job_id,
            cpus=command.cpus,
            pace=command.pace,
            job_cpus=command.job_cpus,
            attempt=part.attempt,
            issued=command.issued,
        )
        self._outbox.post(self._topics.job_control(command.job_id), encode(forward), retain=True)
        log.info(
            "part %s resized to %d CPUs at pace %g: cores %s -> %s",
            command.job_id,
            command.cpus,
            command.pace,
            format_cpuset(before),
            format_cpuset(self._pool.cores_of(part.slots)),
        )

    def cancel(self, command: CancelPart) -> None:
        deferred = self._deferred.get(command.job_id)
        if deferred is not None and command.attempt in (0, deferred.attempt):
            del self._deferred[command.job_id]
        self._waiting = [
            w
            for w in self._waiting
            if not (w.job.id == command.job_id and command.attempt in (0, w.attempt))
        ]
        part = self._parts.get(command.job_id)
        if part is not None and command.attempt not in (0, part.attempt):
            log.info("agent %s: cancel of another attempt of %s ignored", self._agent_id, part)
            return
        if part is None:
            log.info("agent %s: cancel of %s ignored: not running", self._agent_id, command.job_id)
        elif part.ending is None:
            self._runs.end(part, "cancelled", self._monotonic())
        elif part.ending in ("lost", "stopped"):
            part.ending = "cancelled"  # asked by the scheduler while the agent stops


def _rank_share(command: StartPart) -> tuple[int, int]:
    """This part's ranks and its first rank's number in the job.

    The scheduler says (``StartPart.ranks``, ``rank_offset``: the shares of all parts
    sum to ``job.procs``); an older scheduler does not, and a part's share is then
    its CPUs at the job's MPL, which sums right only for even parts. A resize later
    only re-pins the ranks.
    """
    job = command.job
    if command.ranks is not None and command.rank_offset is not None:
        if command.rank_offset + command.ranks > job.procs:
            raise LaunchError(
                f"job {job.id!r}: ranks {command.rank_offset}..."
                f"{command.rank_offset + command.ranks - 1} of a {job.procs}-process job"
            )
        return command.ranks, command.rank_offset
    if command.parts == 1:
        return job.procs, 0
    if command.job_cpus is None:  # the job's MPL unknown: one rank per CPU (MPL 1)
        ranks = command.cpus
    else:
        ranks = max(1, round(command.cpus * job.procs / command.job_cpus))
    ranks = min(ranks, job.procs)
    return ranks, max(0, min(command.part * ranks, job.procs - ranks))


def _mpl_cpus(command: ResizePart) -> int:
    """The CPUs that, with the job's processes, give the resized part's MPL."""
    return command.cpus if command.job_cpus is None else command.job_cpus


def _mpi_params(spec: MpiSpec | None) -> MpiParams:
    """The MPI-like parameters a job carries (their defaults when it carries none)."""
    if spec is None:
        return MpiParams()
    try:
        return MpiParams(
            iterations=spec.iterations,
            compute=spec.compute,
            message_bytes=spec.message_bytes,
            pattern=spec.pattern,
        )
    except ParamsError as exc:
        raise LaunchError(str(exc)) from exc
