"""A part's run on its agent: its launch, its supervision and its end, with their times.

Theory of operation. ``nodeagent.agent.admission`` admits a ``StartPart`` and
registers the part at once (its CPUs held, its process ``None``); the launch
itself runs in a helper task (:meth:`PartRuns.begin`), so the drain loop
goes on with the next command while the fork server forks (launches are
pipelined: a burst of starts is in the fork server's socket together). The
helper task is then the part's supervisor: it posts :class:`Launched`,
awaits the process's exit and posts :class:`Exited` (at once, with the
error, if there is no process). Both letters go through the mailbox, so only
the drain loop changes the agent's state, in the order of events: a part's
``Launched`` always precedes its ``Exited``. The drain loop hands them to
:meth:`PartRuns.launched` and :meth:`PartRuns.exited`; after an exit it asks
admission whether a start was waiting for those CPUs.

Supervision also keeps each part's wall-time limit and the SIGKILL that
follows a SIGTERM's grace (:meth:`PartRuns.due`, at the deadline
:meth:`PartRuns.next_deadline` gives the loop), pins an MPI-like part's
ranks once they are found, and watches the parts adopted from a previous
incarnation (``nodeagent.agent.takeover``) the same way.

While a part launches, a cancel, a resize or the agent's shutdown acts on its
account only (``ending``, ``kill_at``, its CPUs and cores); the process gets
the signal, and its ranks their pinning, when it arrives.

Leaving (:meth:`PartRuns.leave`: the agent stops and leaves its parts to its
next incarnation): the supervisors are cancelled without killing their
processes, which go on within their lease, their relay pipes closed, as
after a SIGKILL of the agent.

Times. The agent measures each part on its own monotonic clock (never the
scheduler's, never another host's): its *launch latency*, from the start's
admission to the fork, reported in ``PartStarted.launch_seconds`` and the
``accordion_agent_launch_seconds`` histogram; and its *run*, from the fork to
the end of its work as the job said it (its last progress report, which the
relay sees: the teardown after it is no part of the run) or, when the job
cannot say, to the exit (both stamped by the fork server on
``CLOCK_MONOTONIC``), reported in ``PartFinished.run_seconds``. The
scheduler dates the job's run from these (``scheduler.live.agents``), since its
own handling of the reports comes later by the broker's and its batches'
delays, which at a time scale of 1000 are whole cluster seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator

from broker.topics import Topics
from nodeagent.agent.commands import SUPERVISOR_MARGIN, Commands
from nodeagent.agent.cpuset import SlotPool, find_ranks, pin_part
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.parts import (
    Counters,
    Exited,
    Launched,
    Mail,
    Part,
    PartTable,
    RanksFound,
)
from nodeagent.agent.reports import Reports
from nodeagent.agent.settings import AgentSettings, Reason
from nodeagent.agent.tasks import Tasks
from nodeagent.launch.contract import EXIT_LOST, Launch
from nodeagent.launch.spawn import JobProcess, Spawn, running_since
from nodeagent.survival.lease import AgentLease
from nodeagent.survival.state import StateDir

log = logging.getLogger(__name__)


def _stamp(process: JobProcess, name: str) -> float | None:
    """A launcher's monotonic stamp of ``process`` (``nodeagent.launch.forkserver``), if any."""
    value = getattr(process, name, None)
    return value if isinstance(value, float) else None


class PartRuns:
    """Launch, supervision and end of one agent's parts; see the module docstring."""

    def __init__(
        self,
        *,
        agent_id: str,
        topics: Topics,
        settings: AgentSettings,
        spawn: Spawn,
        mailbox: asyncio.Queue[Mail],
        tasks: Tasks,
        parts: PartTable,
        pool: SlotPool,
        outbox: Outbox,
        reports: Reports,
        lease: AgentLease,
        state: StateDir | None,
        counters: Counters,
        monotonic: Callable[[], float],
        commands: Commands,
    ) -> None:
        self._agent_id = agent_id
        self._topics = topics
        self._settings = settings
        self._spawn = spawn
        self._mailbox = mailbox
        self._tasks = tasks
        self._parts = parts
        self._pool = pool
        self._outbox = outbox
        self._reports = reports
        self._lease = lease
        self._state = state
        #: When the MPI programs' ranks are next checked on their cores (``due``).
        self._pins_checked_at = -math.inf
        self._counters = counters
        self._monotonic = monotonic
        self._commands = commands
        #: The supervisors, by job id and attempt (cancelled when the agent leaves).
        self._supervisors: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._leaving = False

    # -- the helper tasks: they only post to the mailbox -----------------------------

    def begin(self, part: Part, cleared: asyncio.Future[None]) -> None:
        """Start the helper task that launches and then supervises ``part``; its
        process gets its bus once ``cleared`` (its control topic's clear) is done."""
        launch = part.launch
        task = self._tasks.start(self._run(launch, cleared), f"part-{launch.job_id}")
        self._supervise(launch.job_id, part.attempt, task)

    def _supervise(self, job_id: str, attempt: int, task: asyncio.Task[None]) -> None:
        key = (job_id, attempt)
        self._supervisors[key] = task
        task.add_done_callback(lambda _: self._supervisors.pop(key, None))

    def leave(self) -> None:
        """The agent leaves its parts running (the module docstring): cancel every
        supervisor without killing its process."""
        self._leaving = True
        for task in list(self._supervisors.values()):
            task.cancel()

    async def _run(self, launch: Launch, cleared: asyncio.Future[None]) -> None:
        job_id, attempt = launch.job_id, launch.attempt
        try:
            process = await self._spawn(launch)
        except OSError as exc:
            error = f"cannot start its process: {exc}"
            await self._mailbox.put(Exited(job_id, -1, attempt, error=error))
            return
        try:
            # The job's control topic must be clear of an earlier run's retained resize
            # before the job subscribes; its frames are relayed from wait() on, so its
            # process starts meanwhile (a failed publish ends the agent: it raises).
            await cleared
            await self._mailbox.put(Launched(job_id, attempt, process))
            code = await process.wait()
        except BaseException:
            if self._leaving:
                raise  # left for the next incarnation: it runs on within its lease
            # Only an unclean end of the agent gets here (its bus was lost, or its task
            # cancelled): the scheduler will count this part lost, so it must not go
            # on running unseen and holding the CPUs. Reaped before the error goes
            # on: no process outlives its supervisor.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        await self._post_exit(job_id, attempt, code, process)

    def watch(self, job_id: str, attempt: int, process: JobProcess) -> None:
        """Supervise a part this agent did not launch (adopted at start)."""
        task = self._tasks.start(self._watch(job_id, attempt, process), f"adopted-{job_id}")
        self._supervise(job_id, attempt, task)

    async def _watch(self, job_id: str, attempt: int, process: JobProcess) -> None:
        """The supervisor of an adopted part: its exit, as it said it (or lost)."""
        try:
            code = await process.wait()
        except BaseException:
            if self._leaving:
                raise  # left for the next incarnation, as one it forked (``_run``)
            # The agent's unclean end: as for a part it forked (``_run``).
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        await self._post_exit(job_id, attempt, code, process)

    async def _post_exit(self, job_id: str, attempt: int, code: int, process: JobProcess) -> None:
        """Post the part's end, dated when its process was seen to end where that is
        known (the fork server's reap, an adopted pidfd), else now."""
        ended = _stamp(process, "exited_mono")
        await self._mailbox.put(
            Exited(job_id, code, attempt, self._monotonic() if ended is None else ended)
        )

    def find_ranks(self, job_id: str, attempt: int, leader: int, count: int) -> None:
        """Look for an MPI-like part's ranks; they are pinned once found (``ranks_found``)."""
        self._tasks.start(self._find_ranks(job_id, attempt, leader, count), f"ranks-{job_id}")

    async def _find_ranks(self, job_id: str, attempt: int, leader: int, count: int) -> None:
        pids = await find_ranks(leader, count, patience=self._settings.rank_search)
        await self._mailbox.put(RanksFound(job_id, attempt, pids))

    def find_command_ranks(self, job_id: str, attempt: int, supervisor: int) -> None:
        """Look for the ranks of a command's MPI program, if it runs one; pinned once found
        (``ranks_found``)."""
        part = self._parts[job_id]
        part.mpi_ranks = self._commands.mpi_ranks(part.launch)
        if not part.mpi_ranks:
            return
        self._tasks.start(
            self._find_command_ranks(job_id, attempt, part.launch, supervisor, part.mpi_ranks),
            f"ranks-{job_id}",
        )

    async def _find_command_ranks(
        self, job_id: str, attempt: int, launch: Launch, supervisor: int, count: int
    ) -> None:
        # Polled as the MPI-like leader's are, but a launcher takes longer than a fork
        # to start its ranks (it execs, then starts each): the same patience, slower.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.rank_search
        delay = 0.005
        while True:
            part = self._parts.get(job_id)
            if part is None or part.attempt != attempt:
                return  # ended meanwhile (a program that was quick, a cancel)
            ranks = self._commands.ranks(launch, supervisor)
            if len(ranks) >= count or loop.time() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.05)
        pids = tuple(ranks[k].root for k in sorted(ranks))
        await self._mailbox.put(RanksFound(job_id, attempt, pids))

    # -- the drain loop's handlers ---------------------------------------------------

    def launched(self, mail: Launched) -> None:
        # Only its own Exited removes a part, and that comes after this letter.
        part = self._parts[mail.job_id]
        process = mail.process
        part.process = process
        self._counters.started += 1
        # A process that knows when it began running (a fork) dates the part from
        # there; the launch before it is reported on its own.
        # An exec'd process cannot say when it got going: its work, and so its run,
        # count from the admission (its interpreter's start-up is part of the run).
        forked = _stamp(process, "started_mono")
        part.forked = part.received if forked is None else forked
        part.launch_seconds = max(0.0, part.forked - part.received)
        part.started = running_since(process, part.started)
        # A resize while launching restarted a modelled account itself; a command's
        # wall-clock limit counts from its fork whatever happened meanwhile.
        if not part.resized or part.wall_clock:
            part.changed = part.forked
            part.deadline = part.limit_from(part.forked, self._settings.walltime_grace)
        if part.ending is not None:
            # Cancelled, superseded or the agent stopping while it launched.
            part.signal(kill=part.kill_at is None)
            return
        if part.wall_clock and part.resized:
            # Its command pinned itself to the cores of its admission.
            self._commands.repin(part.launch, process.pid, self._pool, part.slots)
        if part.wall_clock:
            # An MPI program's ranks start with all the part's cores; each on its own
            # once they all exist (``ranks_found``).
            self.find_command_ranks(mail.job_id, part.attempt, process.pid)
        if part.launch.mpi is not None:
            # The leader now, so ranks it forks before they are found inherit the
            # part's cores; each rank on its own core once found (``ranks_found``).
            pin_part(self._pool, part.slots, process.pid, ())
            self.find_ranks(mail.job_id, part.attempt, process.pid, part.launch.ranks)
        self._reports.started(part, process.pid)
        log.info(
            "part %s started: pid %d, %d CPUs, rate %.4g, launched in %s, limit in %.3f s",
            mail.job_id,
            process.pid,
            part.cpus,
            part.rate,
            f"{1e3 * part.launch_seconds:.1f} ms",
            part.deadline - part.forked,
        )

    def exited(self, exited: Exited) -> None:
        part = self._parts.pop(exited.job_id)
        self._pool.give(part.slots)
        detail = _read_failure(part.failure_file) if exited.error is None else exited.error
        plan, ended = self._commands.finished(part.launch) if part.wall_clock else (None, None)
        if ended is not None and detail is None and not ended.ok:
            detail = f"the command {ended.describe()}"
        if self._state is not None:
            self._state.remove_part(exited.job_id, exited.attempt)
        if plan is not None:
            # Whatever of its tree is left (its supervisor SIGKILLed), its cgroup, its files.
            self._tasks.start(self._commands.clean(plan), f"clean-{exited.job_id}")
        reason: Reason = "done" if exited.code == 0 else part.ending or "failed"
        if reason == "failed" and (exited.code == EXIT_LOST or self._lease.lapsed()):
            # EXIT_LOST: the process lost its bus or its agent and stopped unseen (or
            # never reached the broker); like a lapsed lease, that is fencing, not the
            # job failing: the scheduler requeues it. A part left by a stopped agent
            # whose lease ran out before this incarnation renewed it ended of that
            # stop: the scheduler does not charge it.
            reason = "stopped" if part.lapsed_on_the_stop() else "fenced"
        if part.resized:
            self._outbox.post(self._topics.job_control(exited.job_id), b"", retain=True)
        run = _run_seconds(part, exited)
        self._reports.finished(
            exited.job_id,
            exited.attempt,
            exited.code,
            reason,
            detail,
            run_seconds=run,
            exit_status=None if ended is None else ended.exit_status,
            signal=None if ended is None else ended.signal,
        )
        log.info(
            "part %s finished: %s (exit code %d)%s%s",
            exited.job_id,
            reason,
            exited.code,
            "" if run is None else f" after {run:.3f} s",
            "" if detail is None else f": {detail}",
        )

    def ranks_found(self, found: RanksFound) -> None:
        part = self._parts.get(found.job_id)
        if part is None or part.attempt != found.attempt:
            return  # it ended meanwhile
        expected = part.mpi_ranks if part.wall_clock else part.launch.ranks
        if len(found.pids) < expected:
            log.warning(
                "part %s: %d of its %d ranks found: they stay on the part's cores",
                found.job_id,
                len(found.pids),
                expected,
            )
        part.ranks = found.pids
        if part.process is None:
            return
        if part.wall_clock:
            self._commands.repin(part.launch, part.process.pid, self._pool, part.slots)
        else:
            pin_part(self._pool, part.slots, part.process.pid, part.ranks)

    # -- timers -------------------------------------------------------------------------

    def end(self, part: Part, reason: Reason, now: float) -> None:
        """End ``part`` for ``reason``: SIGTERM now, SIGKILL after the kill grace (a
        command's supervisor KILLs its tree at that grace itself, and gets a margin)."""
        margin = SUPERVISOR_MARGIN if part.wall_clock else 0.0
        part.end(reason, now + self._settings.kill_grace + margin)

    def end_all(self, reason: Reason, now: float) -> None:
        for part in self._parts.values():
            if part.ending is None:
                self.end(part, reason, now)

    def next_deadline(self) -> float:
        """The next wall-time limit, SIGKILL or rank check due (monotonic; infinity: none)."""
        deadline = math.inf
        if any(self._pinned_ranks()):
            deadline = self._pins_checked_at + self._settings.heartbeat_interval
        for part in self._parts.values():
            if part.ending is None:
                deadline = min(deadline, part.deadline)
            if part.kill_at is not None:
                deadline = min(deadline, part.kill_at)
        return deadline

    def due(self, now: float) -> None:
        if now >= self._pins_checked_at + self._settings.heartbeat_interval:
            self._pins_checked_at = now
            self._keep_ranks_pinned()
        for job_id, part in self._parts.items():
            if part.ending is None and now >= part.deadline:
                log.warning("part %s exceeded its wall time: terminating it", job_id)
                self.end(part, "walltime", now)
            if part.kill_at is not None and now >= part.kill_at:
                log.warning(
                    "part %s outlived SIGTERM by %.1f s: killing it",
                    job_id,
                    self._settings.kill_grace,
                )
                part.kill_at = None  # SIGKILL cannot be ignored: once is enough
                part.signal(kill=True)

    def _pinned_ranks(self) -> Iterator[Part]:
        """The running parts whose MPI program's ranks the agent pins one by one: found
        or not (a launcher slower than the search's patience), they are checked."""
        for part in self._parts.values():
            if part.mpi_ranks and part.ending is None and part.process:
                yield part

    def _keep_ranks_pinned(self) -> None:
        """Put back on its core any thread of a rank that moved, and pin ranks found late.

        Open MPI was seen to move a rank's main thread to another core while it
        starts and then restore a mask saved before the agent pinned it (not its
        hwloc x86 discovery: turned off, it still did); a program may also bind
        itself; a launcher slower than the rank search's patience starts ranks
        after it gave up. The cores are the agent's to give, so it checks every
        MPI part's ranks each heartbeat interval.
        """
        for part in self._pinned_ranks():
            pid = 0 if part.process is None else part.process.pid
            moved = self._commands.repin(part.launch, pid, self._pool, part.slots)
            if moved:
                log.info(
                    "part %s: %d threads of its ranks put back on their cores",
                    part.launch.job_id,
                    moved,
                )


def _run_seconds(part: Part, exited: Exited) -> float | None:
    """The part's run: from its fork to its work's end as the job said (a relayed
    job's last report, on this host's clock, like the fork's stamp), else to its exit.

    Both ends on one host's clocks: no other machine's time is compared.
    """
    process = part.process
    if process is None or part.forked is None:
        return None  # it never ran
    done = getattr(getattr(process, "work_done", None), "at", None)
    if exited.code == 0 and isinstance(done, float):
        return max(0.0, done - part.started)
    return None if exited.at is None else max(0.0, exited.at - part.forked)


def _read_failure(path: str | None) -> str | None:
    """What a part's process wrote into its failure file (removed once read)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(512).strip()
    except FileNotFoundError:
        return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    return text or None
