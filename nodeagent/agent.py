"""The node agent: one actor per machine that starts and supervises job processes.

Theory of operation. The agent is one asyncio task draining one bounded
mailbox; it alone reads and changes its state (the running parts, the CPUs
they hold, the counters). Helper tasks, all named and owned by one TaskGroup,
only post to that mailbox: the bus reader (commands from the scheduler) and
one supervisor per part (awaits the process and posts its exit code). Timers
are not tasks: the drain loop waits on the mailbox until the next deadline
(heartbeat, a part's wall-time limit, a SIGKILL after a SIGTERM's grace) and
handles whatever is due.

Lifecycle, on the agent's topics (``broker.topics``):

- start: subscribe to ``agent_commands(id)``, publish ``AgentOnline``
  (retained) on ``agent_state(id)`` with the machine, a fresh incarnation and
  no running parts. The bus must carry :func:`agent_will` as its Last Will, so
  a killed agent is announced ``AgentOffline(reason="lost")`` by the broker;
- every ``heartbeat_interval`` wall seconds: ``Heartbeat(seq, running)`` on
  ``agent_events(id)``, the first one at once;
- ``StartPart``: idempotent by job id and attempt (a duplicate of a running
  part, or of one this incarnation finished or refused, is ignored). A newer
  attempt of a job whose older attempt still runs here kills the old one and
  starts once it is gone; a start older than the lease (``StartPart.issued``)
  or arriving while the lease has lapsed is refused ``fenced`` (fencing, see
  ``nodeagent.lease``); a start whose CPUs are still held by parts being
  ended waits for them. A part asking more
  CPUs than are free, an allocation outside MPL 1..2, a time scale other than
  the agent's (when it has one) or a process that cannot be started is
  answered ``PartFinished(reason="failed", exit_code=-1)`` and logged. Else the
  agent starts the process and publishes ``PartStarted(pid, at)``;
- ``ResizePart``: checked the same way (an expansion needs free CPUs), then
  republished *retained* on ``job_control(job)`` for the job process (retained
  so it also reaches a process that has not subscribed yet; the agent clears
  it before a part starts and after a resized part ends);
- ``CancelPart``: SIGTERM, SIGKILL after ``kill_grace``; reported
  ``PartFinished(reason="cancelled")`` once the process is gone;
- a process exit: ``PartFinished(exit_code, reason)``: ``done`` for exit 0
  (even if a cancel or a limit raced with the last unit of work: the work was
  done), else the agent's reason for ending it (``cancelled``, ``walltime``,
  ``lost``), else ``failed``;
- clean shutdown (:meth:`NodeAgent.stop`): see "Shutdown rule" below.

Wall-time rule. The scheduler core estimates a job's end from its user wall
time ``walltime`` (work units, reference seconds at MPL 1) divided by the
execution model's rate on its allocation, and moves that estimate when the
job is resized. The agent keeps the same account: the part is killed (reason
``walltime``) once ``walltime`` units' worth of time at its allocation's rate
has passed, plus ``walltime_grace`` wall seconds. At MPL 1 that is
``walltime * ref_speed / pace / time_scale + grace`` wall seconds; a shrunk
part gets proportionally longer, as the scheduler expects. The part's clock
starts at ``PartStarted.at`` for the agent, the scheduler and the job process
alike (the process counts its work from that instant, so its start-up is
part of the modelled run, not added to it). The grace (default 2 s wall)
covers what the model does not: a start-up longer than the whole run (0.2 to
0.5 s here, more on a loaded machine), the process's exit, timer jitter.

Multi-part jobs. ``StartPart`` does not say how many CPUs the job holds on
other agents, so a part of a job spanning machines (``parts > 1``) is taken
to run one process per CPU it starts with (MPL 1 at the job's pace); a
resize changes its MPL from there. A single-part job runs ``job.procs``
processes on its CPUs, its real MPL.

Unclean end. If the bus fails (or the agent's task is cancelled), ``run()``
raises and the supervisors kill their processes: the broker publishes the
will, and the scheduler counts those parts lost without a report.

Shutdown rule. A stopping agent does not take the scheduler's decisions for
it: it terminates its parts, reports each as ``PartFinished(reason="lost")``
(the same reason as a part on an agent that died, so the scheduler applies
one rule, requeue or fail, to both; a part the scheduler itself had asked to
cancel stays ``cancelled``, one that finished stays ``done``), answers a
``StartPart`` arriving meanwhile with ``lost`` too, and then publishes
``AgentOffline(reason="goodbye")`` retained, replacing its ``AgentOnline``.

Times on the wire (``at``, ``started``) are wall seconds since the Unix
epoch; the time compression of each part travels in its ``StartPart``.
Malformed commands (``WireError``) and commands that cannot be applied (a
resize beyond the free CPUs) are counted in ``bad_messages`` and logged; the
loop goes on with the next message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from broker.bus import Bus, BusError, Delivery, Will
from broker.codec import WireError, decode, encode
from broker.messages import (
    AgentOffline,
    AgentOnline,
    CancelPart,
    ExecutionSpec,
    Heartbeat,
    MachineSpec,
    Message,
    PartFinished,
    PartStarted,
    ResizePart,
    RunningPart,
    StartPart,
)
from broker.topics import Topics
from model.execution import DEFAULT_MODEL, ExecutionModel
from model.machine import Machine
from nodeagent.job import EXIT_LOST
from nodeagent.lease import DEFAULT_LEASE, LeaseFile
from nodeagent.spawn import JobProcess, Launch, LaunchError, Spawn, model_of, running_since

log = logging.getLogger(__name__)

Reason = Literal["done", "failed", "cancelled", "walltime", "lost", "fenced"]
REASONS: tuple[Reason, ...] = ("done", "failed", "cancelled", "walltime", "lost", "fenced")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """How the agent behaves; all durations are wall seconds.

    ``time_scale``: when set, the compression this agent accepts (a StartPart
    with another one is refused, so a demo with a misconfigured scheduler fails
    loudly instead of running at the wrong speed); None accepts the scheduler's.
    ``remember_finished``: how many finished job ids are kept for idempotency.
    """

    heartbeat_interval: float = 2.0
    kill_grace: float = 5.0
    walltime_grace: float = 2.0
    time_scale: float | None = None
    mailbox_size: int = 1024
    remember_finished: int = 100_000
    #: Wall seconds a part runs on without the broker acknowledging this agent's
    #: heartbeats (``nodeagent.lease``); 0: no lease. Keep it below the scheduler's
    #: silence limit (6 heartbeats, 12 s by default) and above a broker restart.
    lease: float = DEFAULT_LEASE
    #: Where the lease file goes (None: the system's temporary directory).
    lease_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "kill_grace"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not (self.walltime_grace >= 0 and math.isfinite(self.walltime_grace)):
            raise ValueError(f"walltime_grace must be >= 0, got {self.walltime_grace!r}")
        if self.time_scale is not None and not (
            self.time_scale > 0 and math.isfinite(self.time_scale)
        ):
            raise ValueError(f"time_scale must be > 0, got {self.time_scale!r}")
        if not (self.lease >= 0 and math.isfinite(self.lease)):
            raise ValueError(f"lease must be a finite number >= 0, got {self.lease!r}")
        if self.mailbox_size < 1 or self.remember_finished < 1:
            raise ValueError("mailbox_size and remember_finished must be >= 1")


@dataclass(frozen=True, slots=True)
class AgentStats:
    """What the exporter reads at scrape time (a consistent snapshot)."""

    agent_id: str
    cpus: int
    cpus_busy: int
    parts_running: int
    parts_started: int
    parts_finished: Mapping[str, int]
    bad_messages: int
    heartbeats: int


def execution_model(spec: ExecutionSpec | None) -> ExecutionModel:
    """The model a ``StartPart`` names (its default when it names none)."""
    if spec is None:
        return DEFAULT_MODEL
    return model_of(spec.kind, spec.overhead, spec.ov_min, spec.ov_max, spec.seed)


def machine_spec(machine: Machine) -> MachineSpec:
    """The machine as the agent announces it; ValueError if the scheduler would refuse it."""
    spec = MachineSpec(id=machine.id, cpus=machine.cpus, speed=machine.speed, labels=machine.labels)
    # Checked by the codec the scheduler decodes with: an id or a label it would
    # refuse fails here, at start, not as a registration silently dropped there.
    try:
        decode(encode(AgentOnline(machine=spec)))
    except WireError as exc:
        raise ValueError(f"machine {machine.id!r} cannot be announced: {exc}") from exc
    return spec


def new_incarnation() -> str:
    """A fresh incarnation id: tells this run of an agent from its previous ones."""
    return uuid.uuid4().hex


def agent_will(topics: Topics, agent_id: str, incarnation: str) -> Will:
    """The Last Will the agent's bus must be created with (retained ``AgentOffline(lost)``)."""
    offline = AgentOffline(agent_id=agent_id, incarnation=incarnation, reason="lost")
    return Will(topic=topics.agent_state(agent_id), payload=encode(offline), retain=True)


@dataclass(slots=True, kw_only=True)
class _Part:
    """A running part, as the agent accounts for it (monotonic times)."""

    launch: Launch
    process: JobProcess
    cpus: int
    attempt: int
    started: float  # wall seconds since the epoch (PartStarted.at)
    rate: float
    budget: float  # wall-time units left at ``changed``
    changed: float
    deadline: float  # when the wall-time limit kills it
    ending: Reason | None = None  # why the agent is ending it, if it is
    kill_at: float | None = None
    resized: bool = False


@dataclass(frozen=True, slots=True)
class _Exited:
    job_id: str
    code: int
    attempt: int


@dataclass(frozen=True, slots=True)
class _Reconnected:
    """The bus is connected again (posted by :meth:`NodeAgent.reconnected`)."""


_Mail = Delivery | _Exited | _Reconnected | None  # None only wakes the loop


@dataclass(slots=True)
class _Counters:
    started: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    bad_messages: int = 0
    heartbeats: int = 0
    #: Commands and parts of an attempt other than the one running (fencing).
    stale: int = 0


class NodeAgent:
    """The node agent actor; see the module docstring. ``await run()`` until ``stop()``."""

    def __init__(
        self,
        *,
        bus: Bus,
        topics: Topics,
        machine: Machine,
        spawn: Spawn,
        settings: AgentSettings | None = None,
        incarnation: str | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._bus = bus
        self._topics = topics
        self.machine = machine
        self._spawn = spawn
        self.settings = settings or AgentSettings()
        self.incarnation = incarnation or new_incarnation()
        self._clock = clock
        self._monotonic = monotonic
        self._spec = machine_spec(machine)
        self._commands = topics.agent_commands(machine.id)
        self._events = topics.agent_events(machine.id)
        self._state = topics.agent_state(machine.id)
        self._mailbox: asyncio.Queue[_Mail] = asyncio.Queue(self.settings.mailbox_size)
        self._parts: dict[str, _Part] = {}
        # (job id, attempt) of parts this incarnation ended, for StartPart's idempotency.
        self._finished: OrderedDict[tuple[str, int], Reason] = OrderedDict()
        # A start of a newer attempt waiting for the stale attempt's process to exit.
        self._deferred: dict[str, StartPart] = {}
        # Starts waiting for the CPUs of parts that are being ended, in arrival order.
        self._waiting: list[StartPart] = []
        self._lease: LeaseFile | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._busy = 0
        self._counters = _Counters()
        self._seq = 0
        self._next_heartbeat = 0.0
        self._stop_requested = False
        self._stopping = False
        self._tg: asyncio.TaskGroup | None = None

    @property
    def agent_id(self) -> str:
        return self.machine.id

    def will(self) -> Will:
        return agent_will(self._topics, self.agent_id, self.incarnation)

    def stats(self) -> AgentStats:
        """A snapshot of the counters; safe to call from the exporter's thread."""
        c = self._counters
        return AgentStats(
            agent_id=self.agent_id,
            cpus=self.machine.cpus,
            cpus_busy=self._busy,
            parts_running=len(self._parts),
            parts_started=c.started,
            # The dict's keys never change, so copying it races with nothing.
            parts_finished=dict(c.finished),
            bad_messages=c.bad_messages,
            heartbeats=c.heartbeats,
        )

    def stop(self) -> None:
        """Ask for a clean shutdown (signal-safe); ``run()`` returns once it is done."""
        self._stop_requested = True
        # A full mailbox wakes the loop anyway; the flag is what it reads.
        with contextlib.suppress(asyncio.QueueFull):
            self._mailbox.put_nowait(None)

    async def run(self) -> None:
        """Register, serve commands until ``stop()``, then say goodbye.

        Raises (in an ExceptionGroup) the bus's ``BusError`` if the connection is
        lost; the broker then publishes the will. On that unclean end (or if this
        task is cancelled) the running parts are killed, not reported: the
        scheduler learns of them from the will.
        """
        if self.settings.lease > 0:
            self._lease = LeaseFile(self.settings.lease_dir, prefix=f"accordion-{self.agent_id}-")
            self._lease.renew()
        try:
            await self._serve()
        finally:
            if self._lease is not None:
                self._lease.remove()

    async def _serve(self) -> None:
        await self._bus.subscribe(self._commands)
        online = AgentOnline(
            machine=self._spec, incarnation=self.incarnation, running=(), lease=self.settings.lease
        )
        await self._publish(self._state, online, retain=True)
        log.info("agent %s online (incarnation %s)", self.agent_id, self.incarnation)
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            reader = tg.create_task(self._read_bus(), name=f"agent-{self.agent_id}-bus")
            try:
                await tg.create_task(self._drain(), name=f"agent-{self.agent_id}-mailbox")
            finally:
                reader.cancel()
                if self._heartbeat_task is not None:
                    self._heartbeat_task.cancel()
        goodbye = AgentOffline(
            agent_id=self.agent_id, incarnation=self.incarnation, reason="goodbye"
        )
        await self._publish(self._state, goodbye, retain=True)
        log.info("agent %s said goodbye", self.agent_id)

    # -- helper tasks: they only post to the mailbox ---------------------------------

    async def _read_bus(self) -> None:
        async for delivery in self._bus.deliveries():
            await self._mailbox.put(delivery)

    async def _supervise(self, job_id: str, attempt: int, process: JobProcess) -> None:
        try:
            code = await process.wait()
        except asyncio.CancelledError:
            # Only an unclean end of the agent cancels a supervisor (its bus was
            # lost, or its task cancelled): the scheduler will count this part
            # lost, so it must not go on running unseen and holding the CPUs.
            # Reaped before the cancellation goes on: no process outlives its
            # supervisor.
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        await self._mailbox.put(_Exited(job_id, code, attempt))

    # -- the actor ----------------------------------------------------------------------

    async def _drain(self) -> None:
        self._next_heartbeat = self._monotonic()
        while True:
            if self._stop_requested and not self._stopping:
                self._begin_shutdown()
            await self._due(self._monotonic())
            if self._stopping and not self._parts:
                waiting, self._waiting = self._waiting, []
                for command in waiting:
                    await self._start(command)  # refused "lost": the agent is stopping
                return
            mail = await self._next(self._next_deadline() - self._monotonic())
            if isinstance(mail, Delivery):
                await self._command(mail)
            elif isinstance(mail, _Exited):
                await self._exited(mail)
            elif isinstance(mail, _Reconnected):
                await self._announce()

    async def _next(self, timeout: float) -> _Mail:
        with contextlib.suppress(asyncio.QueueEmpty):
            return self._mailbox.get_nowait()
        if timeout <= 0:
            return None
        try:
            async with asyncio.timeout(timeout):
                return await self._mailbox.get()
        except TimeoutError:
            return None

    def _next_deadline(self) -> float:
        deadline = self._next_heartbeat
        for part in self._parts.values():
            if part.ending is None:
                deadline = min(deadline, part.deadline)
            if part.kill_at is not None:
                deadline = min(deadline, part.kill_at)
        return deadline

    async def _due(self, now: float) -> None:
        if now >= self._next_heartbeat:
            self._heartbeat()
            # From now, not from the missed slot: a stalled loop sends one beat, not a burst.
            self._next_heartbeat = now + self.settings.heartbeat_interval
        for job_id, part in self._parts.items():
            if part.ending is None and now >= part.deadline:
                log.warning("part %s exceeded its wall time: terminating it", job_id)
                self._end(part, "walltime", now)
            if part.kill_at is not None and now >= part.kill_at:
                log.warning(
                    "part %s outlived SIGTERM by %.1f s: killing it",
                    job_id,
                    self.settings.kill_grace,
                )
                part.kill_at = None  # SIGKILL cannot be ignored: once is enough
                with contextlib.suppress(ProcessLookupError):
                    part.process.kill()

    def _heartbeat(self) -> None:
        """Send a heartbeat without waiting for it: its acknowledgement renews the lease.

        The publish runs in a task of its own, so a broker outage (the bus waits
        to reconnect) stalls neither the loop nor the lease's clock; a beat still
        in flight when the next is due is not doubled.
        """
        if self._heartbeat_task is not None and not self._heartbeat_task.done():
            return
        beat = Heartbeat(agent_id=self.agent_id, seq=self._seq, running=self._running())
        self._seq += 1
        if self._tg is None:
            raise RuntimeError("heartbeats are sent by the drain loop, which run() starts")
        self._heartbeat_task = self._tg.create_task(
            self._beat(beat), name=f"agent-{self.agent_id}-heartbeat"
        )

    async def _beat(self, beat: Heartbeat) -> None:
        try:
            await self._publish(self._events, beat)
        except BusError as exc:
            # The broker stayed away past the bus's bound: no renewal (the lease runs
            # out on its own); the next beat tries again.
            log.warning("agent %s: heartbeat %d not sent: %s", self.agent_id, beat.seq, exc)
            return
        self._counters.heartbeats += 1
        if self._lease is not None:
            self._lease.renew()

    async def reconnected(self) -> None:
        """The bus's ``on_reconnect``: announce this agent and its parts again.

        A restarted broker (no persistence) has forgotten the retained
        ``AgentOnline``, and the scheduler may have counted this agent silent
        meanwhile; the announcement and an immediate heartbeat put it right. The
        parts kept running if the outage was shorter than the lease.
        """
        await self._mailbox.put(_Reconnected())

    async def _announce(self) -> None:
        running = self._running()
        online = AgentOnline(
            machine=self._spec,
            incarnation=self.incarnation,
            running=running,
            lease=self.settings.lease,
        )
        await self._publish(self._state, online, retain=True)
        log.info(
            "agent %s announced again after a reconnection: %d part(s)", self.agent_id, len(running)
        )
        self._next_heartbeat = self._monotonic()

    def _running(self) -> tuple[RunningPart, ...]:
        """The parts this agent runs, as heartbeats and announcements list them."""
        return tuple(
            RunningPart(job_id=job_id, cpus=p.cpus, started=p.started, attempt=p.attempt)
            for job_id, p in self._parts.items()
        )

    def lease_lapsed(self) -> bool:
        """Whether the broker has not acknowledged a heartbeat for the lease's length."""
        return self._lease is not None and self._lease.age() > self.settings.lease

    def _end(self, part: _Part, reason: Reason, now: float) -> None:
        part.ending = reason
        part.kill_at = now + self.settings.kill_grace
        with contextlib.suppress(ProcessLookupError):  # it may have exited already
            part.process.terminate()

    def _begin_shutdown(self) -> None:
        self._stopping = True
        log.info("agent %s stopping: ending %d parts", self.agent_id, len(self._parts))
        now = self._monotonic()
        for part in self._parts.values():
            if part.ending is None:
                self._end(part, "lost", now)

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
        return Launch(
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
            lease_file=None if self._lease is None else str(self._lease.path),
            lease=self.settings.lease,
        )

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
        age = self._clock() - command.issued
        if command.issued and self.settings.lease and age > self.settings.lease:
            # Delayed past the lease (this agent was frozen or cut off, or the queue
            # held it): the scheduler may have requeued the job meanwhile. Fencing.
            why = f"the command is {age:.1f} s old, beyond the {self.settings.lease:g} s lease"
            await self._refuse(job.id, attempt, "fenced", why)
            return
        if self.lease_lapsed():
            # Sent while this agent was cut off or frozen: the scheduler may have given
            # the job to another agent since. Fencing: refuse until a heartbeat renews
            # the lease (a current part is then requeued by the scheduler, not run twice).
            await self._refuse(job.id, attempt, "fenced", "the agent's lease has lapsed")
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
        # which died before clearing it) must not reach this process.
        await self._bus.publish(self._topics.job_control(job.id), b"", retain=True)
        # The part's clock starts here, for the job process (its work counts from
        # ``at``), the wall-time limit and the scheduler (PartStarted.at) alike.
        at, now = self._clock(), self._monotonic()
        try:
            launch = self._launch(command, at)
        except LaunchError as exc:
            await self._refuse(job.id, attempt, "failed", str(exc))
            return
        try:
            process = await self._spawn(launch)
        except OSError as exc:
            await self._refuse(job.id, attempt, "failed", f"cannot start its process: {exc}")
            return
        # Launcher hook (nodeagent.forkserver): a process that knows when it began
        # running dates the part from there; the launch is not part of the run.
        launched = running_since(process, at)
        now, at = now + (launched - at), launched
        rate = launch.rate()
        part = _Part(
            launch=launch,
            process=process,
            cpus=command.cpus,
            attempt=attempt,
            started=at,
            rate=rate,
            budget=job.walltime,
            changed=now,
            deadline=self._deadline(now, job.walltime, rate, launch.time_scale),
        )
        self._parts[job.id] = part
        self._busy += part.cpus
        self._counters.started += 1
        if self._tg is None:
            raise RuntimeError("parts are started by the drain loop, which run() starts")
        self._tg.create_task(
            self._supervise(job.id, attempt, process), name=f"agent-{self.agent_id}-part-{job.id}"
        )
        started = PartStarted(
            job_id=job.id, agent_id=self.agent_id, pid=process.pid, at=at, attempt=attempt
        )
        await self._publish(self._events, started)
        log.info(
            "part %s started: pid %d, %d CPUs, rate %.4g, limit in %.3f s",
            job.id,
            process.pid,
            part.cpus,
            rate,
            part.deadline - now,
        )

    def _deadline(self, now: float, budget: float, rate: float, time_scale: float) -> float:
        return now + budget / (rate * time_scale) + self.settings.walltime_grace

    async def _refuse(self, job_id: str, attempt: int, reason: Reason, why: str) -> None:
        log.warning("agent %s: part %s refused (%s): %s", self.agent_id, job_id, reason, why)
        await self._report_finished(job_id, attempt, -1, reason)

    def _kill_stale(self, part: _Part) -> None:
        """End a part of an attempt the scheduler no longer holds: no grace."""
        self._counters.stale += 1
        part.ending = "cancelled"
        part.kill_at = None
        with contextlib.suppress(ProcessLookupError):
            part.process.kill()

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
        part.deadline = self._deadline(now, part.budget, rate, scale)
        self._busy += growth
        forward = ResizePart(
            job_id=command.job_id,
            cpus=command.cpus,
            pace=command.pace,
            job_cpus=command.job_cpus,
            attempt=part.attempt,
            issued=command.issued,
        )
        await self._publish(self._topics.job_control(command.job_id), forward, retain=True)
        log.info(
            "part %s resized to %d CPUs at pace %g", command.job_id, command.cpus, command.pace
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

    # -- events -------------------------------------------------------------------------

    async def _exited(self, exited: _Exited) -> None:
        part = self._parts.pop(exited.job_id)
        self._busy -= part.cpus
        reason: Reason = "done" if exited.code == 0 else part.ending or "failed"
        if reason == "failed" and (exited.code == EXIT_LOST or self.lease_lapsed()):
            # EXIT_LOST: the process lost its bus or its agent and stopped unseen (or
            # never reached the broker); like a lapsed lease, that is fencing, not the
            # job failing: the scheduler requeues it.
            reason = "fenced"
        if part.resized:
            await self._bus.publish(self._topics.job_control(exited.job_id), b"", retain=True)
        await self._report_finished(exited.job_id, exited.attempt, exited.code, reason)
        log.info("part %s finished: %s (exit code %d)", exited.job_id, reason, exited.code)
        deferred = self._deferred.pop(exited.job_id, None)
        if deferred is not None:
            await self._start(deferred)
        waiting, self._waiting = self._waiting, []
        for command in waiting:
            await self._start(command)  # waits again if its CPUs are still being freed

    async def _report_finished(self, job_id: str, attempt: int, code: int, reason: Reason) -> None:
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
        )
        await self._publish(self._events, finished)

    async def _publish(self, topic: str, message: Message, *, retain: bool = False) -> None:
        await self._bus.publish(topic, encode(message), qos=1, retain=retain)


def _mpl_cpus(command: ResizePart) -> int:
    """The CPUs that, with the job's processes, give the resized part's MPL."""
    return command.cpus if command.job_cpus is None else command.job_cpus
