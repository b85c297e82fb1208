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
  the parts it adopted from a killed predecessor (``nodeagent.survival.adoption``: with
  a state directory, ``--state-dir``, its parts outlive it within their
  lease). The bus must carry :func:`agent_will` as its Last Will, so
  a killed agent is announced ``AgentOffline(reason="lost")`` by the broker;
- every ``heartbeat_interval`` wall seconds: ``Heartbeat(seq, running)`` on
  ``agent_events(id)``, the first one at once;
- ``StartPart``: idempotent by job id and attempt (a duplicate of a running
  part, or of one this incarnation finished or refused, is ignored). A newer
  attempt of a job whose older attempt still runs here kills the old one and
  starts once it is gone; a start older than the lease (``StartPart.issued``)
  or arriving while the lease has lapsed is refused ``fenced`` (fencing, see
  ``nodeagent.survival.lease``); a start whose CPUs are still held by parts being
  ended waits for them. A part asking more
  CPUs than are free, an allocation outside MPL 1..2, a time scale other than
  the agent's (when it has one) or a process that cannot be started is
  answered ``PartFinished(reason="failed", exit_code=-1)`` and logged. Else the
  agent starts the process and publishes ``PartStarted(pid, at)``;
- MPI-like parts (``workload="mpi"``): the agent gives each part slots of its
  real cores (``nodeagent.agent.cpuset``), pins the part's leader to them at once,
  finds its ranks in ``/proc`` and pins them one per slot (two per slot when
  shrunk); a rank's death is named in ``PartFinished.detail`` (read from the
  part's failure file);
- ``ResizePart``: checked the same way (an expansion needs free CPUs), then
  republished *retained* on ``job_control(job)`` for the job process (retained
  so it also reaches a process that has not subscribed yet; the agent clears
  it before a part starts and after a resized part ends); an MPI-like part's
  ranks are re-pinned to the resized slots first, the job is not told;
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
will, and the scheduler counts those parts lost without a report. An agent
killed outright (SIGKILL) cannot: its parts go on within their lease, and a
next incarnation adopts them (``nodeagent.survival.adoption``; the scheduler holds
them for the lease meanwhile, ``scheduler.live.agent_hold``).

Stop rule (DESIGN.md, "Trust and faults": a stop an operator asks for never
costs a job its requeue budget). SIGTERM or SIGINT (:meth:`NodeAgent.stop`):

- *leave* (the default, for an agent whose parts outlive it: a state
  directory, a lease, adoption on): it publishes ``AgentOffline(reason=
  "stopping")`` retained, refuses new starts (``stopped``), waits for the
  parts still being launched (heartbeating meanwhile, which renews their
  lease and which the scheduler no longer counts as proof of life), renews
  the lease once more, and leaves every part running, as a SIGKILL would.
  Its parts run on within their lease for its next incarnation to adopt;
  the scheduler holds them meanwhile (STOPPED), and requeues uncharged
  what is not adopted;
- *drain* (``drain_on_stop``, ``--drain-on-stop``): it announces
  ``AgentOnline(draining=True)`` (the scheduler places nothing more
  there), runs its parts to their end, and then says goodbye
  (``AgentOffline(reason="goodbye")``, retained): it retires. A second
  SIGTERM while it drains leaves instead;
- *end* (an agent whose parts cannot outlive it): it says ``stopping``
  first, then terminates its parts and reports each ``PartFinished(
  reason="stopped")`` (one the scheduler had asked to cancel stays
  ``cancelled``, one that finished stays ``done``); the scheduler requeues
  them uncharged.

The first thing a stop does is note it in the state directory's incarnation
record (``nodeagent.survival.incarnation``), so a successor that finds a part
of it dead reports it ``stopped`` too.

Objects. :class:`NodeAgent` is the actor: its mailbox, its drain loop, its
connection and what it announces on it. The rest is done by collaborators it
builds at construction, each with its own state, handed what they share:

- ``Admission`` (``nodeagent.agent.admission``): the scheduler's commands,
  and the starts that wait for a stale attempt or for CPUs;
- ``PartRuns`` (``nodeagent.agent.runs``): each part's launch, supervision,
  timers and end;
- ``TakeOver`` (``nodeagent.agent.takeover``): the parts a predecessor left;
- ``Reports`` (``nodeagent.agent.reports``) over the ``Outbox``
  (``nodeagent.agent.outbox``): what the scheduler hears of the parts;
- ``Heartbeats`` (``nodeagent.agent.heartbeats``) and the ``AgentLease``
  (``nodeagent.survival.lease``) they renew;
- what they share: the ``PartTable`` and ``Counters``
  (``nodeagent.agent.parts``), the ``SlotPool`` of cores
  (``nodeagent.agent.cpuset``), the state directory
  (``nodeagent.survival.state``) and the helper ``Tasks``
  (``nodeagent.agent.tasks``), opened for the length of ``run()``.

``nodeagent.agent.settings`` and ``nodeagent.agent.registration`` hold its
settings and what it announces.

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
from collections.abc import Callable

from broker.bus import Bus, Delivery, Will
from broker.codec import encode
from broker.messages import AgentOffline, AgentOnline, Message
from broker.topics import Topics
from model.machine import Machine
from nodeagent.agent.admission import Admission
from nodeagent.agent.cpuset import SlotPool, checked_cpuset, own_cpuset
from nodeagent.agent.heartbeats import Heartbeats
from nodeagent.agent.outbox import Outbox
from nodeagent.agent.parts import (
    Counters,
    Exited,
    Launched,
    Mail,
    PartTable,
    RanksFound,
    Reconnected,
)
from nodeagent.agent.registration import agent_will, machine_spec, new_incarnation
from nodeagent.agent.reports import Reports
from nodeagent.agent.runs import PartRuns
from nodeagent.agent.settings import REASONS, AgentSettings, AgentStats, Reason, StopMode
from nodeagent.agent.takeover import TakeOver
from nodeagent.agent.tasks import Tasks
from nodeagent.launch.spawn import Spawn
from nodeagent.survival.adoption import Survey
from nodeagent.survival.lease import AgentLease
from nodeagent.survival.state import StateDir

__all__ = [
    "REASONS",
    "AgentSettings",
    "AgentStats",
    "NodeAgent",
    "Reason",
    "StopMode",
    "agent_will",
    "machine_spec",
    "new_incarnation",
]

log = logging.getLogger(__name__)


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
        state: StateDir | None = None,
        survey: Survey | None = None,
    ) -> None:
        self.machine = machine
        self.settings = settings = settings or AgentSettings()
        self.incarnation = incarnation or new_incarnation()
        self._bus = bus
        self._topics = topics
        self._monotonic = monotonic
        #: The machine's state directory (records, leases, relay socket); None: no records.
        self._state_dir = state
        self._spec = machine_spec(machine)
        self._commands = topics.agent_commands(machine.id)
        self._events = topics.agent_events(machine.id)
        self._state = topics.agent_state(machine.id)
        self._mailbox: asyncio.Queue[Mail] = asyncio.Queue(settings.mailbox_size)
        #: SIGTERMs (or SIGINTs) received; a second one while draining leaves instead.
        self._stops_asked = 0
        #: How this agent stops (the module docstring), once it has begun to.
        self.stopping: StopMode | None = None
        #: Called once a stop has begun (before anything is published): the state
        #: directory's incarnation record notes it.
        self.on_stop: Callable[[StopMode], None] | None = None
        # What the collaborators share, each handed it at construction.
        self._tasks = Tasks(f"agent-{machine.id}")
        self._counters = Counters()
        self._parts = PartTable(machine.cpus)
        cores = settings.cpuset
        self._pool = SlotPool(
            cores=own_cpuset() if cores is None else checked_cpuset(cores), slots=machine.cpus
        )
        self._lease = AgentLease(
            length=settings.lease, state=state, directory=settings.lease_dir, agent_id=machine.id
        )
        self._outbox = Outbox(bus, self._tasks)
        self._reports = Reports(
            outbox=self._outbox,
            topic=self._events,
            agent_id=machine.id,
            clock=clock,
            counters=self._counters,
            remember=settings.remember_finished,
        )
        self._runs = PartRuns(
            agent_id=machine.id,
            topics=topics,
            settings=settings,
            spawn=spawn,
            mailbox=self._mailbox,
            tasks=self._tasks,
            parts=self._parts,
            pool=self._pool,
            outbox=self._outbox,
            reports=self._reports,
            lease=self._lease,
            state=state,
            counters=self._counters,
            monotonic=monotonic,
        )
        self._takeover = TakeOver(
            survey=survey,
            parts=self._parts,
            pool=self._pool,
            runs=self._runs,
            reports=self._reports,
            counters=self._counters,
            walltime_grace=settings.walltime_grace,
        )
        self._admission = Admission(
            agent_id=machine.id,
            incarnation=self.incarnation,
            topics=topics,
            settings=settings,
            clock=clock,
            monotonic=monotonic,
            parts=self._parts,
            pool=self._pool,
            runs=self._runs,
            reports=self._reports,
            outbox=self._outbox,
            lease=self._lease,
            state=state,
            counters=self._counters,
        )
        self._heartbeats = Heartbeats(
            bus=bus,
            topic=self._events,
            agent_id=machine.id,
            interval=settings.heartbeat_interval,
            parts=self._parts,
            lease=self._lease,
            tasks=self._tasks,
            counters=self._counters,
        )

    @property
    def agent_id(self) -> str:
        return self.machine.id

    @property
    def adopts(self) -> bool:
        """Whether this agent's parts outlive it within their lease, to be adopted."""
        return self._state_dir is not None and self.settings.adopt and self.settings.lease > 0

    def will(self) -> Will:
        return agent_will(self._topics, self.agent_id, self.incarnation)

    def lease_lapsed(self) -> bool:
        """Whether the broker has not acknowledged a heartbeat for the lease's length."""
        return self._lease.lapsed()

    def stats(self) -> AgentStats:
        """A snapshot of the counters; safe to call from the exporter's thread."""
        c = self._counters
        return AgentStats(
            agent_id=self.agent_id,
            cpus=self.machine.cpus,
            cpus_busy=self._parts.busy,
            parts_running=len(self._parts),
            parts_started=c.started,
            # The dict's keys never change, so copying it races with nothing.
            parts_finished=dict(c.finished),
            bad_messages=c.bad_messages,
            heartbeats=c.heartbeats,
            emulated=self._pool.emulated,
            cores=len(self._pool.cores),
            speed_score=self.settings.speed_score,
            resizes=c.resizes,
            adopted=c.adopted,
            not_adopted=c.not_adopted,
        )

    @property
    def leaves_parts(self) -> bool:
        """Whether this agent stopped leaving its parts running for its successor (its
        launcher must then not kill them as it closes)."""
        return self.stopping == "leave"

    def stop(self) -> None:
        """Ask for a stop by the stop rule (signal-safe); ``run()`` returns once it is
        done. A second call while draining leaves the parts instead."""
        self._stops_asked += 1
        # A full mailbox wakes the loop anyway; the flag is what it reads.
        with contextlib.suppress(asyncio.QueueFull):
            self._mailbox.put_nowait(None)

    async def reconnected(self) -> None:
        """The bus's ``on_reconnect``: announce this agent and its parts again.

        A restarted broker (no persistence) has forgotten the retained
        ``AgentOnline``, and the scheduler may have counted this agent silent
        meanwhile; the announcement and an immediate heartbeat put it right. The
        parts kept running if the outage was shorter than the lease.
        """
        await self._mailbox.put(Reconnected())

    async def run(self) -> None:
        """Register, serve commands until ``stop()``, then say goodbye.

        Raises (in an ExceptionGroup) the bus's ``BusError`` if the connection is
        lost; the broker then publishes the will. On that unclean end (or if this
        task is cancelled) the running parts are killed, not reported: the
        scheduler learns of them from the will.
        """
        self._lease.take()
        self._takeover.account()
        try:
            await self._serve()
        finally:
            self._lease.release()

    async def _serve(self) -> None:
        await self._bus.subscribe(self._commands)
        # Adopted parts (if any) are listed as running from the first announcement.
        await self._publish(self._state, self._online(), retain=True)
        log.info(
            "agent %s online (incarnation %s, %d adopted part(s))",
            self.agent_id,
            self.incarnation,
            len(self._parts),
        )
        async with self._tasks.running():
            self._takeover.supervise()
            reader = self._tasks.start(self._read_bus(), "bus")
            try:
                await self._tasks.start(self._drain(), "mailbox")
            finally:
                reader.cancel()
                self._heartbeats.cancel()
                if self.leaves_parts:
                    self._runs.leave()
        if self.stopping == "leave":
            log.info(
                "agent %s stopped: %d part(s) left running for its next incarnation",
                self.agent_id,
                len(self._parts),
            )
        elif self.stopping is None or self.stopping == "drain":
            goodbye = AgentOffline(
                agent_id=self.agent_id, incarnation=self.incarnation, reason="goodbye"
            )
            await self._publish(self._state, goodbye, retain=True)
            log.info("agent %s said goodbye", self.agent_id)

    async def _say_stopping(self) -> None:
        stopping = AgentOffline(
            agent_id=self.agent_id, incarnation=self.incarnation, reason="stopping"
        )
        await self._publish(self._state, stopping, retain=True)

    async def _read_bus(self) -> None:
        """Helper task: the commands, into the mailbox."""
        async for delivery in self._bus.deliveries():
            await self._mailbox.put(delivery)

    # -- the actor ----------------------------------------------------------------------

    async def _drain(self) -> None:
        self._heartbeats.soon(self._monotonic())
        while True:
            if self._stops_asked and self.stopping is None:
                await self._begin_stop(self._stop_mode())
            elif self._stops_asked > 1 and self.stopping == "drain":
                log.warning("agent %s: stopped again while it drains", self.agent_id)
                await self._begin_stop("leave" if self.adopts else "end")
            now = self._monotonic()
            if self.stopping != "end":
                self._heartbeats.due(now)
            self._runs.due(now)
            if self._stopped():
                self._admission.refuse_waiting()
                if self.stopping == "leave":
                    # Its parts' lease runs from here, not from up to a heartbeat ago.
                    await self._heartbeats.last()
                return
            beats = self._heartbeats.next_at if self.stopping != "end" else math.inf
            deadline = min(beats, self._runs.next_deadline())
            mail = await self._next(deadline - self._monotonic())
            if isinstance(mail, Delivery):
                self._admission.command(mail)
            elif isinstance(mail, Launched):
                self._runs.launched(mail)
            elif isinstance(mail, Exited):
                self._runs.exited(mail)
                self._admission.freed(mail.job_id)
            elif isinstance(mail, Reconnected):
                await self._announce()
            elif isinstance(mail, RanksFound):
                self._runs.ranks_found(mail)

    async def _next(self, timeout: float) -> Mail:
        with contextlib.suppress(asyncio.QueueEmpty):
            return self._mailbox.get_nowait()
        if timeout <= 0:
            return None
        try:
            async with asyncio.timeout(timeout):
                return await self._mailbox.get()
        except TimeoutError:
            return None

    def _stop_mode(self) -> StopMode:
        if self.settings.drain_on_stop:
            return "drain"
        return "leave" if self.adopts else "end"

    async def _begin_stop(self, mode: StopMode) -> None:
        """Begin a stop by the stop rule (the module docstring)."""
        self.stopping = mode
        if self.on_stop is not None:
            self.on_stop(mode)
        if mode == "drain":
            log.info("agent %s draining: %d part(s) to run to their end", self.agent_id, len(self))
            await self._publish(self._state, self._online(), retain=True)
            return
        # Said first, so the scheduler places nothing more here (and, for parts ended,
        # requeues their jobs uncharged whichever it hears first).
        await self._say_stopping()
        self._admission.stop()
        if mode == "leave":
            log.info("agent %s stopping: leaving %d part(s) running", self.agent_id, len(self))
            return
        self._heartbeats.cancel()
        log.info("agent %s stopping: ending %d part(s)", self.agent_id, len(self))
        self._runs.end_all("stopped", self._monotonic())

    def _stopped(self) -> bool:
        """Whether the stop begun is over: no part left (drain, end), or none still
        being launched (leave: a launched part has its record for the successor)."""
        if self.stopping is None:
            return False
        if self.stopping == "leave":
            return all(part.process is not None for part in self._parts.values())
        return not self._parts

    def __len__(self) -> int:
        return len(self._parts)

    async def _announce(self) -> None:
        running = self._parts.running()
        await self._publish(self._state, self._online(), retain=True)
        log.info(
            "agent %s announced again after a reconnection: %d part(s)", self.agent_id, len(running)
        )
        self._heartbeats.soon(self._monotonic())

    def _online(self) -> AgentOnline:
        return AgentOnline(
            machine=self._spec,
            incarnation=self.incarnation,
            running=self._parts.running(),
            lease=self.settings.lease,
            cpuset=self._pool.cores,
            emulated=self._pool.emulated,
            speed_score=self.settings.speed_score,
            speed_spread=self.settings.speed_spread,
            adopts=self.adopts,
            draining=self.stopping == "drain",
        )

    async def _publish(self, topic: str, message: Message, *, retain: bool = False) -> None:
        """Publish and wait for the acknowledgement (registration and goodbye); a part's
        reports go through the outbox instead (``nodeagent.agent.outbox``)."""
        await self._bus.publish(topic, encode(message), qos=1, retain=retain)
