"""A part's run on its agent: its launch, its supervision and its end, with their times.

Theory of operation. ``nodeagent.agent.admission`` admits a ``StartPart`` and
registers the part at once (its CPUs held, its process ``None``); the launch
itself runs in a helper task, :meth:`PartRuns._run_part`, so the drain loop
goes on with the next command while the fork server forks (launches are
pipelined: a burst of starts is in the fork server's socket together). The
helper task is then the part's supervisor: it posts :class:`Launched` (the
process, or why there is none), awaits the process's exit and posts
:class:`Exited`. Both letters go through the mailbox, so only the drain loop
changes the agent's state, in the order of events: a part's ``Launched``
always precedes its ``Exited``.

While a part launches, a cancel, a resize or the agent's shutdown acts on its
account only (``ending``, ``kill_at``, its CPUs and cores); the process gets
the signal, and its ranks their pinning, when it arrives.

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
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from broker.bus import Bus
from broker.codec import encode
from broker.messages import PartFinished, PartStarted, StartPart
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.cpuset import CpusetError, SlotPool, find_ranks, pin_part
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.parts import Counters, Exited, Launched, Mail, Part, RanksFound
from nodeagent.agent.settings import AgentSettings, Reason
from nodeagent.launch.contract import EXIT_LOST, Launch
from nodeagent.launch.spawn import JobProcess, Spawn, running_since
from nodeagent.survival.adoption import Adopted, Lost, Survey
from nodeagent.survival.lease import LeaseFile
from nodeagent.survival.state import PartRecord, StateDir, StateError, renew

log = logging.getLogger(__name__)


def _stamp(process: JobProcess, name: str) -> float | None:
    """A launcher's monotonic stamp of ``process`` (``nodeagent.launch.forkserver``), if any."""
    value = getattr(process, name, None)
    return value if isinstance(value, float) else None


class PartRuns:
    """Launch, supervision and end of parts (a mixin of ``NodeAgent``)."""

    # The actor's state (``NodeAgent.__init__`` sets every one).
    machine: Machine
    settings: AgentSettings
    _bus: Bus
    _topics: Topics
    _spawn: Spawn
    _clock: Callable[[], float]
    _monotonic: Callable[[], float]
    _events: str
    _mailbox: asyncio.Queue[Mail]
    _outbox: Outbox
    _parts: dict[str, Part]
    _finished: OrderedDict[tuple[str, int], Reason]
    _deferred: dict[str, StartPart]
    _waiting: list[StartPart]
    _lease: LeaseFile | None
    _busy: int
    _counters: Counters
    _tg: asyncio.TaskGroup | None
    _pool: SlotPool
    _state_dir: StateDir | None
    _survey: Survey | None
    #: Admits a start (``nodeagent.agent.admission``): an exit frees CPUs a start waited for.
    _start: Callable[[StartPart], Awaitable[None]]

    @property
    def agent_id(self) -> str:
        return self.machine.id

    def lease_lapsed(self) -> bool:
        """Whether the broker has not acknowledged a heartbeat for the lease's length."""
        return self._lease is not None and self._lease.age() > self.settings.lease

    # -- the helper task -------------------------------------------------------------

    def _begin_run(self, part: Part, cleared: asyncio.Future[None]) -> None:
        """Start the helper task that launches and then supervises ``part``."""
        if self._tg is None:
            raise RuntimeError("parts are started by the drain loop, which run() starts")
        job_id = part.launch.job_id
        self._tg.create_task(
            self._run_part(part.launch, cleared), name=f"agent-{self.agent_id}-part-{job_id}"
        )

    async def _run_part(self, launch: Launch, cleared: asyncio.Future[None]) -> None:
        job_id, attempt = launch.job_id, launch.attempt
        try:
            process = await self._spawn(launch)
        except OSError as exc:
            await self._mailbox.put(
                Launched(job_id, attempt, None, f"cannot start its process: {exc}")
            )
            return
        try:
            # The job's control topic must be clear of an earlier run's retained resize
            # before the job subscribes; its frames are relayed from wait() on, so its
            # process starts meanwhile (a failed publish ends the agent: it raises).
            await cleared
            await self._mailbox.put(Launched(job_id, attempt, process))
            code = await process.wait()
        except BaseException:
            # Only an unclean end of the agent gets here (its bus was lost, or its task
            # cancelled): the scheduler will count this part lost, so it must not go
            # on running unseen and holding the CPUs. Reaped before the error goes
            # on: no process outlives its supervisor.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        await self._post_exit(job_id, attempt, code, process)

    async def _post_exit(self, job_id: str, attempt: int, code: int, process: JobProcess) -> None:
        """Post the part's end, dated when its process was seen to end where that is
        known (the fork server's reap, an adopted pidfd), else now."""
        ended = _stamp(process, "exited_mono")
        await self._mailbox.put(
            Exited(job_id, code, attempt, self._monotonic() if ended is None else ended)
        )

    # -- the drain loop's handlers ---------------------------------------------------

    async def _launched(self, mail: Launched) -> None:
        # Only its own Exited removes a part, and that comes after this letter.
        part = self._parts[mail.job_id]
        process = mail.process
        if process is None:
            await self._exited(Exited(mail.job_id, -1, mail.attempt), mail.error)
            return
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
        if not part.resized:  # a resize while launching restarted the account itself
            part.changed = part.forked
            part.deadline = self._deadline(
                part.forked, part.budget, part.rate, part.launch.time_scale
            )
        if part.ending is not None:
            # Cancelled, superseded or the agent stopping while it launched.
            part.signal(kill=part.kill_at is None)
            return
        if part.launch.mpi is not None:
            # The leader now, so ranks it forks before they are found inherit the
            # part's cores; each rank on its own core once found (``_ranks_found``).
            pin_part(self._pool, part.slots, process.pid, ())
            if self._tg is None:
                raise RuntimeError("parts are started by the drain loop, which run() starts")
            self._tg.create_task(
                self._find_ranks(mail.job_id, part.attempt, process.pid, part.launch.ranks),
                name=f"agent-{self.agent_id}-ranks-{mail.job_id}",
            )
        started = PartStarted(
            job_id=mail.job_id,
            agent_id=self.agent_id,
            pid=process.pid,
            at=part.started,
            attempt=part.attempt,
            launch_seconds=part.launch_seconds,
        )
        self._post(self._events, started)
        log.info(
            "part %s started: pid %d, %d CPUs, rate %.4g, launched in %s, limit in %.3f s",
            mail.job_id,
            process.pid,
            part.cpus,
            part.rate,
            f"{1e3 * part.launch_seconds:.1f} ms",
            part.deadline - part.forked,
        )

    async def _exited(self, exited: Exited, error: str | None = None) -> None:
        part = self._parts.pop(exited.job_id)
        self._busy -= part.cpus
        self._pool.give(part.slots)
        if self._state_dir is not None:
            self._state_dir.remove_part(exited.job_id, exited.attempt)
        detail = _read_failure(part.failure_file) if error is None else error
        reason: Reason = "done" if exited.code == 0 else part.ending or "failed"
        if reason == "failed" and (exited.code == EXIT_LOST or self.lease_lapsed()):
            # EXIT_LOST: the process lost its bus or its agent and stopped unseen (or
            # never reached the broker); like a lapsed lease, that is fencing, not the
            # job failing: the scheduler requeues it.
            reason = "fenced"
        if part.resized:
            self._outbox.post(self._topics.job_control(exited.job_id), b"", retain=True)
        run = _run_seconds(part, exited)
        await self._report_finished(
            exited.job_id, exited.attempt, exited.code, reason, detail, run_seconds=run
        )
        log.info(
            "part %s finished: %s (exit code %d)%s%s",
            exited.job_id,
            reason,
            exited.code,
            "" if run is None else f" after {run:.3f} s",
            "" if detail is None else f": {detail}",
        )
        deferred = self._deferred.pop(exited.job_id, None)
        if deferred is not None:
            await self._start(deferred)
        waiting, self._waiting = self._waiting, []
        for command in waiting:
            await self._start(command)  # waits again if its CPUs are still being freed

    async def _report_finished(
        self,
        job_id: str,
        attempt: int,
        code: int,
        reason: Reason,
        detail: str | None = None,
        *,
        run_seconds: float | None = None,
    ) -> None:
        self._finished[(job_id, attempt)] = reason
        while len(self._finished) > self.settings.remember_finished:
            self._finished.popitem(last=False)
        self._counters.finished[reason] += 1
        finished = PartFinished(
            job_id=job_id,
            agent_id=self.agent_id,
            exit_code=code,
            at=self._clock(),
            reason=reason,
            attempt=attempt,
            detail=detail,
            run_seconds=run_seconds,
        )
        self._post(self._events, finished)

    def _post(self, topic: str, message: PartStarted | PartFinished) -> None:
        self._outbox.post(topic, encode(message))

    def _deadline(self, now: float, budget: float, rate: float, time_scale: float) -> float:
        return now + budget / (rate * time_scale) + self.settings.walltime_grace

    # -- records and adoption (``nodeagent.survival.state``, ``.adoption``) ----------------

    def _record(self, part: Part) -> None:
        """Write (or rewrite, after a resize) the part's record for a next incarnation."""
        if self._state_dir is None:
            return
        launch = part.launch
        self._state_dir.write_record(
            PartRecord(
                job_id=launch.job_id,
                attempt=part.attempt,
                cpus=part.cpus,
                slots=part.slots,
                argv=tuple(launch.argv()),
                budget=part.budget,
                rate=part.rate,
                changed=part.changed,
                resized=part.resized,
            )
        )

    def _new_part_lease(self, path: str) -> None:
        """A new part's lease starts where the agent's stands (its last acknowledged
        heartbeat), never fresher: the bound is from when the broker last heard us."""
        if self._lease is None:
            return
        renew(path, self._lease.path.stat().st_mtime)

    def _renew_parts(self) -> None:
        """The broker acknowledged a heartbeat: every part's own lease is renewed too."""
        if self._state_dir is None or self._lease is None:
            return
        stamp = self._lease.path.stat().st_mtime
        for part in self._parts.values():
            lease = part.launch.lease_file
            if lease is not None:
                renew(lease, stamp)

    def _take_over(self, survey: Survey) -> None:
        """Account for the parts adopted at start as running (before registering)."""
        self._counters.bad_records += survey.bad_records
        self._counters.not_adopted += len(survey.lost)
        for adopted in survey.adopted:
            try:
                self._adopt(adopted)
            except (CpusetError, StateError) as exc:
                log.error("part %s cannot be adopted: %s: killing it", adopted.launch.job_id, exc)
                with contextlib.suppress(ProcessLookupError):
                    adopted.process.kill()
                survey.lost.append(Lost(adopted.launch.job_id, adopted.record.attempt, str(exc)))
                self._counters.not_adopted += 1

    def _adopt(self, adopted: Adopted) -> None:
        record, launch, forked = adopted.record, adopted.launch, adopted.forked
        if record.cpus > self.machine.cpus - self._busy:
            raise StateError(f"{record.cpus} CPUs recorded, {self.machine.cpus - self._busy} free")
        slots = self._pool.claim(record.slots)
        changed = record.changed if record.resized else forked.mono
        part = Part(
            launch=launch,
            process=adopted.process,
            cpus=record.cpus,
            attempt=record.attempt,
            started=forked.at,
            received=forked.mono,
            rate=record.rate,
            budget=record.budget,
            changed=changed,
            deadline=self._deadline(changed, record.budget, record.rate, launch.time_scale),
            resized=record.resized,
            slots=slots,
            failure_file=launch.failure_file,
            forked=forked.mono,
        )
        self._parts[launch.job_id] = part
        self._busy += part.cpus
        self._counters.adopted += 1
        if launch.mpi is not None:
            # Re-pinned to the same slots: the leader now, its ranks once found.
            pin_part(self._pool, slots, forked.pid, ())

    async def _supervise_adopted(self) -> None:
        """Once the task group runs: supervise the adopted parts, report the lost ones."""
        if self._tg is None:
            raise RuntimeError("adopted parts are supervised once run() started")
        survey = self._survey
        if survey is None:
            return
        for lost in survey.lost:
            # Not remembered as finished here: a (job, attempt) a scheduler with a fresh
            # journal starts again is a new part, not a duplicate of an old process.
            self._counters.finished["fenced"] += 1
            self._post(
                self._events,
                PartFinished(
                    job_id=lost.job_id,
                    agent_id=self.agent_id,
                    exit_code=EXIT_LOST,
                    at=self._clock(),
                    reason="fenced",
                    attempt=lost.attempt,
                    detail=f"not adopted: {lost.why}"[:500],
                ),
            )
        for job_id, part in list(self._parts.items()):
            process = part.process
            if process is None:
                continue
            self._tg.create_task(
                self._watch(job_id, part.attempt, process),
                name=f"agent-{self.agent_id}-adopted-{job_id}",
            )
            if part.launch.mpi is not None:
                self._tg.create_task(
                    self._find_ranks(job_id, part.attempt, process.pid, part.launch.ranks),
                    name=f"agent-{self.agent_id}-ranks-{job_id}",
                )

    async def _watch(self, job_id: str, attempt: int, process: JobProcess) -> None:
        """The supervisor of an adopted part: its exit, as it said it (or lost)."""
        try:
            code = await process.wait()
        except BaseException:
            # The agent's unclean end: as for a part it forked (``_run_part``).
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            raise
        await self._post_exit(job_id, attempt, code, process)

    async def _find_ranks(self, job_id: str, attempt: int, leader: int, count: int) -> None:
        """Helper task: post the part's rank pids once the leader forked them all."""
        pids = await find_ranks(leader, count, patience=self.settings.rank_search)
        await self._mailbox.put(RanksFound(job_id, attempt, pids))


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
