"""The agent's commands: admission of starts, resizes and cancels.

This is the part of :class:`nodeagent.agent.node_agent.NodeAgent` that answers the
scheduler's commands (the rules are in ``nodeagent.agent.node_agent``'s docstring:
idempotent starts, fencing by attempt and lease, CPUs held by parts being
ended, resizes checked like starts); a part's launch, supervision and end
are ``nodeagent.agent.runs``'s. It is a mixin:
the state it reads and changes is the actor's own, declared below, and only
the actor's drain loop calls it.
"""

from __future__ import annotations

import logging
import os
import tempfile

from broker.bus import Delivery
from broker.codec import WireError, decode, encode
from broker.messages import CancelPart, MpiSpec, ResizePart, StartPart
from nodeagent.agent.cpuset import format_cpuset, pin_part
from nodeagent.agent.parts import Part, RanksFound
from nodeagent.agent.registration import execution_model
from nodeagent.agent.runs import PartRuns
from nodeagent.agent.settings import Reason
from nodeagent.job.ranks import MpiParams, ParamsError
from nodeagent.launch.spawn import Launch, LaunchError
from nodeagent.survival.lease import start_fenced

log = logging.getLogger(__name__)


class Admission(PartRuns):
    """Command handling of the node agent (a mixin of ``NodeAgent``)."""

    # The actor's state that only admission reads (``NodeAgent.__init__`` sets it).
    _stopping: bool
    incarnation: str

    def _end(self, part: Part, reason: Reason, now: float) -> None:
        part.ending = reason
        part.kill_at = now + self.settings.kill_grace
        part.signal(kill=False)

    # -- commands -----------------------------------------------------------------------

    async def _command(self, delivery: Delivery) -> None:
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self._bad(f"malformed command on {delivery.topic}: {exc}")
            return
        if isinstance(message, StartPart):
            await self._start(message)
        elif isinstance(message, ResizePart):
            await self._resize(message)
        elif isinstance(message, CancelPart):
            self._cancel(message)
        else:
            self._bad(f"{type(message).__name__} is not a command for an agent")

    def _bad(self, why: str) -> None:
        self._counters.bad_messages += 1
        log.warning("agent %s: %s", self.agent_id, why)

    def _launch(self, command: StartPart, start_at: float) -> Launch:
        job = command.job
        if job is None:  # checked by the caller; here for the type checker
            raise LaunchError("StartPart without a job")
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
            agent=self.agent_id,
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
            execution=execution_model(command.execution),
            lease_file=self._part_lease(job.id, max(1, command.attempt)),
            lease=self.settings.lease,
            relay_socket=(
                str(self._state_dir.socket_path)
                if self._state_dir is not None and self._lease is not None and self.settings.adopt
                else None
            ),
        )

    def _part_lease(self, job_id: str, attempt: int) -> str | None:
        """The part's lease file: its own in a state directory, else the agent's."""
        if self._lease is None:
            return None
        if self._state_dir is None:
            return str(self._lease.path)
        return str(self._state_dir.part_lease(job_id, attempt))

    def _failure_file(self, job_id: str, attempt: int) -> str:
        folder = self.settings.lease_dir or tempfile.gettempdir()
        name = f"accordion-{self.agent_id}-{self.incarnation[:8]}-{job_id}-{attempt}.failure"
        return os.path.join(folder, name)

    async def _start(self, command: StartPart) -> None:
        job = command.job
        if job is None:
            self._bad("StartPart without a job")
            return
        attempt = max(1, command.attempt)
        running = self._parts.get(job.id)
        if running is not None and attempt > running.attempt:
            # A newer start of a job whose older attempt still runs here (this agent
            # was cut off and the job requeued): fencing kills the stale one, and the
            # new one starts once its CPUs are free.
            log.warning(
                "agent %s: attempt %d of %s supersedes attempt %d: killing it",
                self.agent_id,
                attempt,
                job.id,
                running.attempt,
            )
            self._kill_stale(running)
            self._deferred[job.id] = command
            return
        if running is not None or (job.id, attempt) in self._finished:
            log.info("agent %s: duplicate StartPart for %s ignored", self.agent_id, job.id)
            return
        if self._stopping:
            await self._refuse(job.id, attempt, "lost", "the agent is shutting down")
            return
        # Delayed past the lease (this agent was frozen or cut off, or the queue held
        # it), or sent while its lease had lapsed: the scheduler may have requeued the
        # job meanwhile. Fencing: refused until a heartbeat renews the lease. Nothing
        # from here to the fork waits on the broker (the control topic's clear below
        # is posted, not awaited), so a freeze cannot slip in between: a fork after
        # such a wait once ran a frozen agent's job twice (the fault matrix's
        # agent-freeze row, bench.faults).
        why = start_fenced(command.issued, self._clock(), self.settings.lease, self.lease_lapsed())
        if why is not None:
            await self._refuse(job.id, attempt, "fenced", why)
            return
        free = self.machine.cpus - self._busy
        scale = self.settings.time_scale
        if command.cpus > free:
            ending = sum(p.cpus for p in self._parts.values() if p.ending is not None)
            if command.cpus <= free + ending:
                # Parts being ended still hold the CPUs (their processes have a grace to
                # exit) while the scheduler, which ended them, counts the CPUs free:
                # Slurm's COMPLETING. The start waits for their exit.
                log.info("agent %s: %s waits for ending parts' CPUs", self.agent_id, job.id)
                self._waiting.append(command)
                return
            await self._refuse(job.id, attempt, "failed", f"{command.cpus} CPUs asked, {free} free")
            return
        if scale is not None and command.time_scale != scale:
            why = f"time scale {command.time_scale} is not this agent's {scale}"
            await self._refuse(job.id, attempt, "failed", why)
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
            await self._refuse(job.id, attempt, "failed", str(exc))
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
            deadline=self._deadline(now, job.walltime, rate, launch.time_scale),
        )
        part.failure_file = launch.failure_file
        part.slots = self._pool.take(part.cpus)
        if self._state_dir is not None:
            # Before the fork: a next incarnation finds every part that may run.
            self._record(part)
            if launch.lease_file is not None:
                self._new_part_lease(launch.lease_file)
        self._parts[job.id] = part
        self._busy += part.cpus
        # The launch and the supervision run in a task of their own: the next command
        # is read while this one forks (``nodeagent.agent.runs``).
        self._begin_run(part, cleared)

    async def _refuse(self, job_id: str, attempt: int, reason: Reason, why: str) -> None:
        log.warning("agent %s: part %s refused (%s): %s", self.agent_id, job_id, reason, why)
        await self._report_finished(job_id, attempt, -1, reason)

    def _kill_stale(self, part: Part) -> None:
        """End a part of an attempt the scheduler no longer holds: no grace."""
        self._counters.stale += 1
        part.ending = "cancelled"
        part.kill_at = None
        part.signal(kill=True)

    async def _resize(self, command: ResizePart) -> None:
        part = self._parts.get(command.job_id)
        if part is None or part.ending is not None:
            log.info("agent %s: resize of %s ignored: not running", self.agent_id, command.job_id)
            return
        if command.attempt not in (0, part.attempt):
            self._counters.stale += 1
            log.info("agent %s: resize of a stale attempt of %s ignored", self.agent_id, part)
            return
        growth = command.cpus - part.cpus
        free = self.machine.cpus - self._busy
        if growth > free:
            self._bad(f"resize of {command.job_id} to {command.cpus} CPUs: only {free} free")
            return
        try:
            rate = part.launch.rate(cpus=_mpl_cpus(command), pace=command.pace)
        except LaunchError as exc:
            self._bad(f"resize refused: {exc}")
            return
        now = self._monotonic()
        scale = part.launch.time_scale
        part.budget = max(0.0, part.budget - part.rate * scale * (now - part.changed))
        part.changed, part.rate, part.cpus, part.resized = now, rate, command.cpus, True
        before = self._pool.cores_of(part.slots)
        part.slots = self._pool.resize(part.slots, command.cpus)
        if part.launch.mpi is not None and part.process is not None:
            # (One still launching is pinned to its slots as it arrives.)
            pin_part(self._pool, part.slots, part.process.pid, part.ranks)
        self._counters.resizes += 1
        part.deadline = self._deadline(now, part.budget, rate, scale)
        self._busy += growth
        self._record(part)
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

    def _cancel(self, command: CancelPart) -> None:
        deferred = self._deferred.get(command.job_id)
        if deferred is not None and command.attempt in (0, deferred.attempt):
            del self._deferred[command.job_id]
        self._waiting = [
            w
            for w in self._waiting
            if not (
                w.job is not None
                and w.job.id == command.job_id
                and command.attempt in (0, w.attempt)
            )
        ]
        part = self._parts.get(command.job_id)
        if part is not None and command.attempt not in (0, part.attempt):
            log.info("agent %s: cancel of another attempt of %s ignored", self.agent_id, part)
            return
        if part is None:
            log.info("agent %s: cancel of %s ignored: not running", self.agent_id, command.job_id)
        elif part.ending is None:
            self._end(part, "cancelled", self._monotonic())
        elif part.ending == "lost":
            part.ending = "cancelled"  # asked by the scheduler while the agent stops

    def _ranks_found(self, found: RanksFound) -> None:
        part = self._parts.get(found.job_id)
        if part is None or part.attempt != found.attempt:
            return  # it ended meanwhile
        if len(found.pids) < part.launch.ranks:
            log.warning(
                "part %s: %d of its %d ranks found: they stay on the part's cores",
                found.job_id,
                len(found.pids),
                part.launch.ranks,
            )
        part.ranks = found.pids
        if part.process is not None:
            pin_part(self._pool, part.slots, part.process.pid, part.ranks)


def _rank_share(command: StartPart) -> tuple[int, int]:
    """This part's ranks and its first rank's number in the job.

    The scheduler says (``StartPart.ranks``, ``rank_offset``: the shares of all parts
    sum to ``job.procs``); an older scheduler does not, and a part's share is then
    its CPUs at the job's MPL, which sums right only for even parts. A resize later
    only re-pins the ranks.
    """
    job = command.job
    if job is None:
        raise LaunchError("StartPart without a job")
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
