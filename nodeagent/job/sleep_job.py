"""The job process: one part of one job, running the sleep workload.

Theory of operation. The process is a bus client of its own (MQTT with
``--host/--port``, or its agent's relay with ``--pipe``). It subscribes to
``job_control(J)`` and performs ``work`` units at the rate the one execution
model gives its allocation (``model.execution``, through
:meth:`Launch.rate`): ``rate`` units per cluster second, so ``rate * K`` per
wall second under a time compression ``K``. Progress is computed from the
monotonic clock, not summed over sleeps, so oversleeping never accumulates
error; the loop only sleeps in short steps (``JobSettings.step``) so a
command, a signal or the end of the work is noticed promptly. The work is
counted from ``--start-at`` when given (the agent passes its
``PartStarted.at``, the fork): the process's start-up is then part of the
modelled run instead of being added to it. The last report is dated at the
instant the work was complete on that account, which the loop notices a
timer's slack (or, for a run shorter than the start-up, the start-up) later:
the agent measures the run from the fork to that instant
(``PartFinished.run_seconds``) and the scheduler dates the job by it.

A ``ResizePart`` (new CPUs and pace) folds the progress made so far at the
old rate and goes on at the new one. The agent publishes it *retained* on the
control topic, so a resize sent before this process subscribed still reaches
it. ``CancelPart`` on the control topic, SIGTERM and SIGINT all cancel: the
process reports its progress and exits with :data:`EXIT_CANCELLED`.

Reports (``PartProgress`` on the agent's events topic: ``done`` in work
units, ``rate`` in work units per cluster second, ``at`` in wall seconds since
the epoch) are coalesced: one at the start, one at every rate change, at most
one per ``report_every`` wall seconds in between, and one at the end. A
message costs real CPU in the MQTT client; a report per step would not.

The first report is the process's readiness signal: it is sent once the
process has subscribed to its control topic (over MQTT, once the broker
acknowledged it; over the pipe, the subscription is relayed first), so a
command sent from then on reaches it, and once its SIGTERM and SIGINT
handlers are installed, so a SIGTERM from then on is a clean cancel
(:data:`EXIT_CANCELLED`, not death by the signal). Whoever must know the
process is up (the tests, a watcher) waits for that report, not for a time.

Over the relay (``--pipe``) the bus is ``nodeagent.job.rejoin.RejoiningBus``: a
job launched with ``--relay-socket`` outlives its agent within its lease and
rejoins the next incarnation; every relayed job says its exit code as its
last frame.

Exit codes: :data:`EXIT_DONE` (the work is done), :data:`EXIT_CANCELLED`,
:data:`EXIT_LOST` (the bus, the agent's pipe or the agent itself is gone, so
nobody would hear of the result), :data:`EXIT_USAGE` (bad options, or a
workload this version does not run). The MPI-like workload (``--workload
mpi``) forks its rank processes here, before the event loop starts, and runs
its leader, ``nodeagent.job.mpi.MpiJob``, in place of the sleep loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.bus import Bus, BusError, Delivery
from broker.codec import WireError, decode, encode
from broker.messages import CancelPart, PartProgress, ResizePart
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import Topics
from nodeagent.job.ranks import Rank, fork_ranks
from nodeagent.job.rejoin import RejoiningBus
from nodeagent.launch.contract import (
    EXIT_CANCELLED,
    EXIT_DONE,
    EXIT_LOST,
    EXIT_USAGE,
    Launch,
    LaunchError,
    lease_expired,
    part_key,
)
from nodeagent.launch.runner import run

log = logging.getLogger(__name__)

WORKLOADS = ("sleep", "mpi", "command")

if TYPE_CHECKING:
    from nodeagent.job.command import Prepared as Command


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSettings:
    """``step``: longest sleep between checks; ``report_every``: progress period (wall s)."""

    step: float = 0.1
    report_every: float = 1.0
    inbox_size: int = 64

    def __post_init__(self) -> None:
        if not (self.step > 0 and self.report_every > 0 and self.inbox_size > 0):
            raise ValueError("step, report_every and inbox_size must be positive")


class SleepJob:
    """The sleep workload of one launch, as a tiny actor on ``bus``.

    ``cancel()`` may be called from a signal handler; ``parent_pid``, when
    given, is watched every step: a job whose agent died exits
    (:data:`EXIT_LOST`) instead of running on unseen.
    """

    def __init__(
        self,
        launch: Launch,
        bus: Bus,
        *,
        settings: JobSettings | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        parent_pid: int | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self.launch = launch
        self._bus = bus
        # Called at once when the lease lapses: the real process exits there and then
        # (no goodbye on a bus nobody hears), so the fencing bound is the check's step.
        self._on_fenced = on_fenced
        self._settings = settings or JobSettings()
        self._clock = clock
        self._monotonic = monotonic
        self._parent_pid = parent_pid
        topics = Topics(launch.root)
        self._control = topics.job_control(launch.job_id)
        self._events = topics.agent_events(launch.agent)
        self._inbox: asyncio.Queue[Delivery | None] = asyncio.Queue(self._settings.inbox_size)
        self._cancelled = False
        self._lost: str | None = None
        self.bad_messages = 0
        # Progress: ``done`` units at monotonic time ``changed``, then ``rate`` onwards.
        self.rate = launch.rate()
        self.done = 0.0
        self._changed = 0.0
        #: Monotonic time the work counts from (no resize takes effect before it).
        self._start = 0.0
        #: When the work was complete on its account (monotonic), once it was.
        self._completed: float | None = None
        self.cpus = launch.cpus
        self.pace = launch.pace

    def cancel(self) -> None:
        """Ask the job to stop (signal-safe): it reports and exits EXIT_CANCELLED."""
        self._cancelled = True
        self._wake()

    def _wake(self) -> None:
        # A full inbox wakes the loop anyway; the flag is what it reads.
        with contextlib.suppress(asyncio.QueueFull):
            self._inbox.put_nowait(None)

    async def run(self) -> int:
        """Perform the work; the exit code."""
        if not await self._subscribed():
            return EXIT_CANCELLED
        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(self._read_control(), name=f"job-{self.launch.job_id}-control")
            try:
                return await self._work()
            except BusError as exc:
                log.error("job %s: bus lost while reporting: %s", self.launch.job_id, exc)
                return EXIT_LOST
            finally:
                reader.cancel()

    async def _subscribed(self) -> bool:
        """Subscribe to the control topic; False if cancelled meanwhile.

        A broker that is slow to acknowledge (amqtt under load) must not make
        the job deaf to SIGTERM: the agent's wall-time kill and cancel go on
        working while the subscription is retried.
        """
        subscribing = asyncio.ensure_future(self._bus.subscribe(self._control))
        while not subscribing.done():
            waker = asyncio.ensure_future(self._inbox.get())
            await asyncio.wait({subscribing, waker}, return_when=asyncio.FIRST_COMPLETED)
            if not waker.done():
                waker.cancel()
            if self._cancelled:
                subscribing.cancel()
                with contextlib.suppress(asyncio.CancelledError, BusError):
                    await subscribing
                return False
        subscribing.result()  # a BusError is the caller's
        return True

    async def _read_control(self) -> None:
        try:
            async for delivery in self._bus.deliveries():
                await self._inbox.put(delivery)
        except BusError as exc:
            self._lost = str(exc)
        else:
            self._lost = "the bus closed"
        self._wake()

    def _progress(self, now: float) -> float:
        elapsed = now - self._changed
        return min(self.launch.work, self.done + self.rate * self.launch.time_scale * elapsed)

    async def _report(self, *, late: float = 0.0) -> None:
        """Report the progress ``done`` as of ``late`` seconds ago (now by default)."""
        message = PartProgress(
            job_id=self.launch.job_id,
            agent_id=self.launch.agent,
            done=self.done,
            rate=self.rate,
            at=self._clock() - late,
            attempt=self.launch.attempt,
        )
        await self._bus.publish(self._events, encode(message))

    async def _work(self) -> int:
        launch, settings = self.launch, self._settings
        now = self._monotonic()
        self._changed = now
        if launch.start_at is not None:
            # The work counts from the agent's PartStarted, not from when this
            # interpreter got going: the part then ends when the model says,
            # seen from the scheduler, whatever the start-up took (0.2-0.5 s here).
            self._changed = now - max(0.0, self._clock() - launch.start_at)
        self._start = self._changed
        self._fold(now)
        await self._report()
        next_report = now + settings.report_every
        while True:
            now = self._monotonic()
            done = self._progress(now)
            if done >= launch.work:
                break
            if self._cancelled:
                self._fold(now)
                await self._report()
                return EXIT_CANCELLED
            lost = self._lost_why()
            if lost is not None:
                log.error("job %s: stopping, %s", launch.job_id, lost)
                return EXIT_LOST
            if now >= next_report:
                self._fold(now)
                await self._report()
                next_report = now + settings.report_every
            finish_at = self._changed + (launch.work - self.done) / (self.rate * launch.time_scale)
            timeout = min(settings.step, finish_at - now, next_report - now)
            delivery = await self._next(timeout)
            if delivery is not None and await self._handle(delivery):
                next_report = self._monotonic() + settings.report_every
        # The work was complete at the instant its account says, which this loop
        # noticed a timer's slack (or a slow start-up) later: the last report is
        # dated at that instant, so the run the agent measures ends with the work.
        self._fold(self._monotonic())
        late = 0.0 if self._completed is None else max(0.0, self._changed - self._completed)
        self.done = launch.work
        await self._report(late=late)
        return EXIT_DONE

    def _lost_why(self) -> str | None:
        """Why this part must stop unseen, if it must (bus, agent or lease gone)."""
        if self._lost is not None:
            return self._lost
        if self._parent_pid is not None and os.getppid() != self._parent_pid:
            return "the agent died"
        launch = self.launch
        if launch.lease_file is not None and lease_expired(launch.lease_file, launch.lease):
            log.error("job %s: the agent's lease lapsed: stopping now", launch.job_id)
            if self._on_fenced is not None:
                self._on_fenced()
            return f"the agent's lease lapsed ({launch.lease:g} s without the broker)"
        return None

    def _fold(self, now: float) -> None:
        done = self._progress(now)
        if done >= self.launch.work and self._completed is None:
            # The instant the work was complete on this account (now or earlier).
            rest = (self.launch.work - self.done) / (self.rate * self.launch.time_scale)
            self._completed = min(now, self._changed + rest)
        self.done = done
        self._changed = now

    async def _next(self, timeout: float) -> Delivery | None:
        with contextlib.suppress(asyncio.QueueEmpty):
            return self._inbox.get_nowait()
        if timeout <= 0:
            return None
        try:
            async with asyncio.timeout(timeout):
                return await self._inbox.get()
        except TimeoutError:
            return None

    async def _handle(self, delivery: Delivery) -> bool:
        """Apply one control message; True when it changed the rate (and was reported)."""
        if not delivery.payload:
            return False  # a cleared retained message, not a command
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self.bad_messages += 1
            log.warning("job %s: bad control message: %s", self.launch.job_id, exc)
            return False
        if isinstance(message, CancelPart | ResizePart) and message.attempt not in (
            0,
            self.launch.attempt,
        ):
            return False  # meant for another start of the job (fencing)
        if isinstance(message, CancelPart) and message.job_id == self.launch.job_id:
            self.cancel()
            return False
        if not isinstance(message, ResizePart) or message.job_id != self.launch.job_id:
            self.bad_messages += 1
            log.warning("job %s: unexpected control message %r", self.launch.job_id, message)
            return False
        try:
            cpus = message.cpus if message.job_cpus is None else message.job_cpus
            rate = self.launch.rate(cpus=cpus, pace=message.pace)
        except LaunchError as exc:
            self.bad_messages += 1
            log.warning("job %s: resize refused: %s", self.launch.job_id, exc)
            return False
        now = self._monotonic()
        when = now
        if message.issued > 0:
            # The resize took effect when the scheduler decided it (the twin's instant and
            # the journal's), not when this process, perhaps still starting, read it:
            # the time in between ran at the new rate. (Linear, so folding back past the
            # last fold is exact.)
            when = max(self._start, min(now, now - (self._clock() - message.issued)))
        self._fold(when)
        self.rate, self.cpus, self.pace = rate, message.cpus, message.pace
        self._fold(now)  # the report says what is done now
        await self._report()
        return True


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nodeagent.job", description="Run one part of one job (sleep workload)."
    )
    transport = parser.add_mutually_exclusive_group(required=True)
    transport.add_argument("--host", help="MQTT broker host (the job is an MQTT client)")
    transport.add_argument(
        "--pipe", action="store_true", help="bus frames on stdin/stdout, relayed by the agent"
    )
    parser.add_argument("--port", type=int, default=1883, help="MQTT broker port")
    Launch.add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.workload not in WORKLOADS:
        print(
            f"nodeagent.job: workload {args.workload!r} is not available: this version runs "
            f"only {', '.join(WORKLOADS)}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        launch = Launch.from_args(args)
    except LaunchError as exc:
        print(f"nodeagent.job: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s job {launch.job_id} %(levelname)s %(message)s",
    )
    ranks: list[Rank] = []
    command: Command | None = None
    if launch.mpi is not None:
        # Forked before any event loop exists: a child never inherits a running loop.
        ranks = fork_ranks(
            launch.ranks,
            launch.mpi,
            cpu_seconds=launch.cpu_seconds,
            total_ranks=launch.total_ranks,
        )
    elif launch.workload == "command":
        from nodeagent.job.command import read_plan, start  # noqa: PLC0415 (subclasses SleepJob)

        try:
            command = start(read_plan(launch))  # it forks here too, before the loop
        except (LaunchError, OSError) as exc:
            print(f"nodeagent.job: {exc}", file=sys.stderr)
            return EXIT_USAGE
    return run(_main(args, launch, ranks, command))


def _exit_fenced() -> None:
    """Leave at once: the part must not outlive its lease by a bus teardown."""
    sys.stderr.flush()
    os._exit(EXIT_LOST)


async def _main(
    args: argparse.Namespace, launch: Launch, ranks: list[Rank], command: Command | None = None
) -> int:
    client_id = f"job-{launch.agent}-{launch.job_id}"
    if args.pipe:
        try:
            bus = await RejoiningBus.stdio(
                client_id,
                key=part_key(launch.job_id, launch.attempt),
                socket_path=launch.relay_socket,
                lease_file=launch.lease_file,
                lease=launch.lease,
            )
            return await _serve(bus, launch, ranks, None, command)
        except (BusError, _NotConnectedError) as exc:
            log.error("job %s: %s", launch.job_id, exc.__cause__ or exc)
            return EXIT_LOST
    # The pipe ends when the agent dies; over MQTT the job watches its parent. A
    # broker that is restarting when the job starts is waited for, as long as the
    # lease allows (the agent's heartbeats cannot be renewed meanwhile either).
    # A short SUBACK bound: a broker that drops a SUBSCRIBE (amqtt under load) is
    # asked again after 2 s, not 10 s, which at a high time scale is a long run.
    settings = MqttSettings(host=args.host, port=args.port, ack_timeout=2.0)
    patience = launch.lease if launch.lease_file is not None else CONNECT_PATIENCE
    deadline = time.monotonic() + patience
    delay = 0.05
    while True:
        try:
            return await _serve(MqttBus(settings, client_id), launch, ranks, os.getppid(), command)
        except _NotConnectedError as exc:
            if time.monotonic() + delay > deadline:
                log.error("job %s: %s", launch.job_id, exc.__cause__)
                return EXIT_LOST
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)


CONNECT_PATIENCE = 10.0
"""Wall seconds a job without a lease waits for its broker to accept it."""


class _NotConnectedError(Exception):
    """The first connection failed (nothing of the job has run yet): try again."""


async def _serve(
    connect: AbstractAsyncContextManager[Bus],
    launch: Launch,
    ranks: list[Rank],
    parent: int | None,
    command: Command | None = None,
) -> int:
    try:
        bus = await connect.__aenter__()
    except BusError as exc:
        raise _NotConnectedError from exc
    code = EXIT_LOST
    try:
        job: SleepJob
        if command is not None:
            from nodeagent.job.command import CommandJob  # noqa: PLC0415 - it subclasses SleepJob

            job = CommandJob(
                launch, bus, command.plan, command.child, parent_pid=parent, on_fenced=_exit_fenced
            )
        elif launch.mpi is not None:
            from nodeagent.job.mpi import MpiJob  # noqa: PLC0415 - it subclasses SleepJob

            job = MpiJob(launch, bus, ranks, parent_pid=parent, on_fenced=_exit_fenced)
        else:
            job = SleepJob(launch, bus, parent_pid=parent, on_fenced=_exit_fenced)
        # Before run(): its first report says the handlers are in place too.
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, job.cancel)
        if command is not None and command.stop.asked:
            job.cancel()  # asked before these handlers were there
        code = await job.run()
        if isinstance(bus, RejoiningBus) and not await bus.finish(code):
            # Its end was not heard (the lease lapsed with no agent to rejoin, or the
            # agent refused it): the part is lost to the scheduler, whatever it did.
            log.error("job %s: its end (exit %d) reached no agent", launch.job_id, code)
            code = EXIT_LOST
    except BusError as exc:
        log.error("job %s: %s", launch.job_id, exc)
    finally:
        with contextlib.suppress(BusError):
            await connect.__aexit__(None, None, None)
    return code
