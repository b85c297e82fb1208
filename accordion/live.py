"""The client side of the live runtime: ask the scheduler, replay a trace, watch.

Theory of operation
-------------------
A :class:`LiveClient` is one bus connection with a client id of its own. On
entry it subscribes to ``topics.replies(client_id)`` (and, for a watcher, to
``topics.events`` and ``topics.cluster``) *before* any request goes out, so a
reply can never arrive before someone listens for it. One named reader task
owns the bus's deliveries: a reply is matched to its request by
``request_id`` and resolves that request's future; ``JobEvent`` and
``ClusterSummary`` messages go to a bounded queue that a watcher drains (when
the watcher lags, the oldest are dropped and counted: they are QoS 0 news, and
the scheduler's ``StatusReply`` is the authority).

Every request gets a fresh ``request_id`` and names this client in
``reply_to`` (the scheduler only ever answers on ``topics.replies(reply_to)``).
A request whose reply does not come within ``timeout`` seconds raises
:class:`NoReplyError`; an ``ErrorReply`` raises :class:`RefusedError` with the
scheduler's words. Submissions are idempotent by job id, so a submission that
timed out may be sent again unchanged without making a second job. All of it
works on MQTT 3.1.1 (the embedded broker) as well as 5: the correlation id and
the reply address travel in the payload.

Also here, so that ``accordion submit``, ``accordion replay``, ``accordion up
--demo`` and the benchmarks run the same code: the job-spec builders (wall
times written as sbatch writes them), the conversion of trace jobs to specs,
and the replay loop. A replay sends the jobs due at the same instant as one
``SubmitJobs``, ``(submit - first submit) / K`` wall seconds after it starts,
with up to ``max_in_flight`` requests awaiting their reply, and :func:`follow`
counts the jobs that ended from their ``JobEvent`` s, polling ``StatusReply``
now and then for the events it may have missed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from broker.bus import Bus, BusError, Delivery
from broker.codec import WireError, decode, encode
from broker.messages import (
    AnyMessage,
    CancelJob,
    CancelReply,
    ClusterSummary,
    ErrorReply,
    JobEvent,
    JobSpec,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
    Workload,
)
from broker.mqtt import MqttBus, MqttSettings
from broker.topics import DEFAULT_ROOT, Topics
from model.job import Job

log = logging.getLogger(__name__)

BROKER_ENV = "ACCORDION_BROKER"
ROOT_ENV = "ACCORDION_ROOT"
DEFAULT_BROKER = "mqtt://127.0.0.1:1883"
DEFAULT_TIMEOUT = 10.0
#: Jobs per SubmitJobs at most: a bigger instant is split (a message stays below ~1 MB).
MAX_JOBS_PER_REQUEST = 5000
#: JobEvent states after which a job never changes again.
FINAL_STATES = frozenset({"finished", "failed", "cancelled"})

T = TypeVar("T")
Watched = JobEvent | ClusterSummary


class LiveError(RuntimeError):
    """A request the scheduler did not answer as asked."""


class NoReplyError(LiveError):
    """No reply within the timeout (scheduler down, another broker or topic root)."""


class RefusedError(LiveError):
    """The scheduler answered with an ``ErrorReply``."""


def new_client_id(prefix: str = "accordion-cli") -> str:
    """A client id nobody else uses (MQTT drops the older of two equal ids)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_request_id() -> str:
    return uuid.uuid4().hex


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed, as the actors do."""
    try:
        import uvloop  # noqa: PLC0415 (optional: plain asyncio without it)
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


# -- the client -------------------------------------------------------------------


class LiveClient:
    """Requests to the scheduler over a connected bus (see the module docstring).

    Use as ``async with LiveClient(bus, topics) as client``; ``watch=True``
    also subscribes to job events and the retained cluster summary.
    """

    def __init__(
        self,
        bus: Bus,
        topics: Topics,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        watch: bool = False,
        watch_queue: int = 10_000,
        where: str = "the broker",
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self._bus = bus
        self._topics = topics
        self.timeout = timeout
        self._watch = watch
        self._where = where
        self._replies = topics.replies(bus.client_id)
        self._pending: dict[str, asyncio.Future[AnyMessage]] = {}
        self._watched: asyncio.Queue[Watched | None] = asyncio.Queue(watch_queue)
        self._reader: asyncio.Task[None] | None = None
        self._lost: BusError | None = None
        #: Watched messages dropped because the watcher lagged behind.
        self.dropped = 0
        #: Replies nobody waited for (late, after a timeout) or that did not decode.
        self.unmatched = 0

    @property
    def client_id(self) -> str:
        return self._bus.client_id

    @property
    def topics(self) -> Topics:
        return self._topics

    async def __aenter__(self) -> Self:
        if self._reader is not None:
            raise RuntimeError("a LiveClient is not reentrant")
        # The reader runs before the subscriptions: the cluster summary is retained
        # and arrives as soon as we subscribe to it.
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"live-client-reader-{self.client_id}"
        )
        try:
            await self._bus.subscribe(self._replies, qos=1)
            if self._watch:
                await self._bus.subscribe(self._topics.events, qos=1)
                await self._bus.subscribe(self._topics.cluster, qos=1)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None:
            return
        reader.cancel()
        # asyncio.wait, not ``await reader``: a cancellation of *this* task must still
        # propagate, and only the reader's own cancellation is expected here.
        await asyncio.wait([reader])
        if not reader.cancelled() and (error := reader.exception()) is not None:
            raise error

    async def _read(self) -> None:
        try:
            async for delivery in self._bus.deliveries():
                self._dispatch(delivery)
            self._lost = BusError(f"the connection to {self._where} was closed")
        except BusError as exc:
            self._lost = exc
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BusError(str(self._lost)))
        self._offer(None)  # wakes a watcher: the stream has ended

    def _dispatch(self, delivery: Delivery) -> None:
        if not delivery.payload:
            return  # a retained message being cleared
        try:
            message = decode(delivery.payload)
        except WireError as exc:
            self.unmatched += 1
            log.warning("undecodable message on %s: %s", delivery.topic, exc)
            return
        if delivery.topic == self._replies:
            self._answer(message)
        elif isinstance(message, JobEvent | ClusterSummary):
            self._offer(message)
        else:
            self.unmatched += 1
            log.info("ignored %s on %s", type(message).__name__, delivery.topic)

    def _answer(self, message: AnyMessage) -> None:
        request_id = getattr(message, "request_id", None)
        future = self._pending.get(request_id) if isinstance(request_id, str) else None
        if future is None or future.done():
            # A reply after its request timed out, or an ErrorReply the scheduler
            # could not correlate (it could not read our request_id).
            self.unmatched += 1
            log.info("reply to no pending request: %s", _kind_of(message))
            return
        if isinstance(message, ErrorReply):
            future.set_exception(RefusedError(f"the scheduler refused it: {message.error}"))
        else:
            future.set_result(message)

    def _offer(self, item: Watched | None) -> None:
        if not self._watch and item is not None:
            return
        while True:
            try:
                self._watched.put_nowait(item)
                return
            except asyncio.QueueFull:
                self._watched.get_nowait()
                self.dropped += 1

    # -- requests --------------------------------------------------------------

    async def _ask(
        self, message: SubmitJobs | CancelJob | StatusRequest, timeout: float | None
    ) -> AnyMessage:
        if self._reader is None:
            raise RuntimeError("use `async with LiveClient(...)` before asking")
        if self._lost is not None:
            raise BusError(str(self._lost))
        wait = self.timeout if timeout is None else timeout
        future: asyncio.Future[AnyMessage] = asyncio.get_running_loop().create_future()
        self._pending[message.request_id] = future
        try:
            await self._bus.publish(self._topics.requests, encode(message), qos=1)
            async with asyncio.timeout(wait):
                return await future
        except TimeoutError:
            raise NoReplyError(
                f"no reply from the scheduler in {wait:g} s on {self._where}, topic root "
                f"{self._topics.root!r}: is it running there?"
            ) from None
        finally:
            del self._pending[message.request_id]

    async def submit(self, jobs: Sequence[JobSpec], *, timeout: float | None = None) -> SubmitReply:
        """Submit ``jobs`` as one request; one ``SubmitResult`` per job comes back."""
        if not jobs:
            raise ValueError("submit needs at least one job")
        request = SubmitJobs(request_id=new_request_id(), reply_to=self.client_id, jobs=tuple(jobs))
        return _expect(await self._ask(request, timeout), SubmitReply)

    async def cancel(self, job_id: str, *, timeout: float | None = None) -> CancelReply:
        request = CancelJob(request_id=new_request_id(), reply_to=self.client_id, job_id=job_id)
        return _expect(await self._ask(request, timeout), CancelReply)

    async def status(self, *, timeout: float | None = None) -> StatusReply:
        request = StatusRequest(request_id=new_request_id(), reply_to=self.client_id)
        return _expect(await self._ask(request, timeout), StatusReply)

    # -- watching --------------------------------------------------------------

    async def next_watched(self, timeout: float | None = None) -> Watched | None:
        """The next event or cluster summary; None after ``timeout`` seconds.

        Raises :class:`~broker.bus.BusError` once the connection is gone.
        """
        if not self._watch:
            raise RuntimeError("this client was not opened with watch=True")
        try:
            async with asyncio.timeout(timeout):
                item = await self._watched.get()
        except TimeoutError:
            return None
        if item is None:
            self._offer(None)  # every later call must see the end too
            raise BusError(str(self._lost))
        return item

    async def watched(self) -> AsyncIterator[Watched]:
        """Every event and cluster summary, until the connection ends (BusError)."""
        while True:
            item = await self.next_watched()
            if item is not None:
                yield item


M = TypeVar("M")


def _kind_of(message: AnyMessage) -> str:
    request_id = getattr(message, "request_id", None)
    return f"{type(message).__name__} (request {request_id})"


def _expect(reply: AnyMessage, kind: type[M]) -> M:
    if not isinstance(reply, kind):
        raise LiveError(f"expected a {kind.__name__}, the scheduler sent {reply!r}")
    return reply


@asynccontextmanager
async def connect(
    broker: str = DEFAULT_BROKER,
    root: str = DEFAULT_ROOT,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    watch: bool = False,
    client_id: str | None = None,
) -> AsyncIterator[LiveClient]:
    """A :class:`LiveClient` on the MQTT broker at ``broker`` (``mqtt://host[:port]``)."""
    settings = MqttSettings.from_url(broker)
    topics = Topics(root)
    async with (
        MqttBus(settings, client_id or new_client_id()) as bus,
        LiveClient(bus, topics, timeout=timeout, watch=watch, where=settings.url) as client,
    ):
        yield client


# -- job specs ----------------------------------------------------------------------

_DURATION_FORMS = "seconds, M:SS, H:MM:SS or D-H:MM:SS"


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds from ``S``, ``M:SS``, ``H:MM:SS``, ``D-H``, ``D-H:MM`` or ``D-H:MM:SS``.

    As sbatch's ``--time`` writes them, except that a bare number is seconds
    (sbatch reads minutes): the cluster's time unit is the second everywhere.
    """
    raw = text.strip()
    try:
        days = 0.0
        rest = raw
        if "-" in raw:
            d, _, rest = raw.partition("-")
            days = float(int(d))
        fields = rest.split(":")
        if not 1 <= len(fields) <= 3 or any(not f for f in fields):
            raise ValueError(raw)
        if "-" in raw:
            # D-H, D-H:MM, D-H:MM:SS: the first field after the day is hours.
            fields += ["0"] * (3 - len(fields))
        units = (1.0, 60.0, 3600.0)
        seconds = 0.0
        for i, value in enumerate(reversed(fields)):
            number = float(value) if i == 0 else float(int(value))
            if i < len(fields) - 1 and not 0 <= number < 60:
                raise ValueError(raw)  # minutes and seconds below a larger unit
            seconds += number * units[i]
        seconds += days * 86400.0
    except ValueError:
        raise ValueError(f"{what} {text!r}: expected {_DURATION_FORMS}") from None
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"{what} {text!r} must be more than 0 seconds")
    return seconds


def checked(spec: JobSpec) -> JobSpec:
    """``spec`` if the scheduler will decode it; else ValueError in msgspec's words.

    Structs built in code are not validated (msgspec checks constraints on
    decode), so the spec makes the round trip the scheduler will make.
    """
    try:
        decode(encode(SubmitJobs(jobs=(spec,))))
    except WireError as exc:
        why = str(exc).removeprefix("invalid message: ").replace("$.jobs[0].", "")
        raise ValueError(f"job {spec.id!r} cannot be sent: {why}") from exc
    return spec


def job_spec(
    *,
    job_id: str,
    procs: int,
    walltime: float,
    work: float | None = None,
    workload: Workload = "sleep",
    user: str = "nobody",
    account: str = "nobody",
    qos: int = 0,
    deadline: float | None = None,
    malleable: bool = False,
    cpu_util: float = 1.0,
    ref_speed: float = 1.0,
) -> JobSpec:
    """The spec of one job as ``accordion submit`` sends it; ``work`` defaults to ``walltime``."""
    return checked(
        JobSpec(
            id=job_id,
            procs=procs,
            walltime=walltime,
            work=walltime if work is None else work,
            workload=workload,
            user=user,
            group=account,
            qos=qos,
            deadline=deadline,
            malleable=malleable,
            cpu_util=cpu_util,
            ref_speed=ref_speed,
        )
    )


def spec_of(job: Job, *, prefix: str = "") -> JobSpec:
    """A trace job as a live job: its real run time becomes the sleep workload's work.

    The deadline becomes relative to the submission (the wire's convention);
    the id gets ``prefix``, so one trace can be replayed twice on one scheduler.
    """
    deadline = None if job.deadline is None else max(job.deadline - job.submit, 1e-3)
    return checked(
        JobSpec(
            id=f"{prefix}{job.id}",
            procs=job.procs,
            walltime=job.walltime,
            work=job.walltime if job.runtime is None else job.runtime,
            user=job.user,
            group=job.group,
            qos=job.qos,
            deadline=deadline,
            malleable=job.malleable,
            cpu_util=job.cpu_util,
            ref_speed=job.ref_speed,
        )
    )


# -- replay ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arrival:
    """Jobs submitted together, ``at`` cluster seconds after the first arrival."""

    at: float
    jobs: tuple[JobSpec, ...]


def arrivals(jobs: Sequence[Job], *, prefix: str = "") -> list[Arrival]:
    """Trace jobs (in submit order) grouped by submit instant, one request each.

    An instant with more than :data:`MAX_JOBS_PER_REQUEST` jobs is split into
    several requests at the same time.
    """
    if not jobs:
        return []
    first = jobs[0].submit
    out: list[Arrival] = []
    group: list[JobSpec] = []
    at = 0.0
    for job in jobs:
        offset = job.submit - first
        if offset < at:
            raise ValueError(f"jobs must be in submit order: {job.id!r} comes too late")
        if group and (offset != at or len(group) == MAX_JOBS_PER_REQUEST):
            out.append(Arrival(at, tuple(group)))
            group = []
        at = offset
        group.append(spec_of(job, prefix=prefix))
    out.append(Arrival(at, tuple(group)))
    return out


@dataclass(slots=True)
class ReplayState:
    """What a replay has done so far; updated in place, read by progress displays."""

    expected: frozenset[str]
    sent: int = 0
    accepted: set[str] = field(default_factory=set)
    duplicate: int = 0
    rejected: dict[str, str] = field(default_factory=dict)
    #: Job id -> final state; "left" when only a StatusReply showed it gone.
    ended: dict[str, str] = field(default_factory=dict)
    replay_done: bool = False
    #: Most wall seconds a request went out after its due time (the client lagging).
    late_max: float = 0.0
    wall_seconds: float = 0.0
    #: Accepted jobs that have ended, kept as a count: progress displays read it
    #: at every event, and a replay may have hundreds of thousands of jobs.
    finished: int = 0

    @property
    def total(self) -> int:
        return len(self.expected)

    @property
    def all_ended(self) -> bool:
        return self.replay_done and self.finished == len(self.accepted)

    def record(self, reply: SubmitReply) -> None:
        """A submission's reply (its jobs' events may have come first)."""
        for result in reply.results:
            if not result.accepted:
                self.rejected[result.job_id] = result.reason or "no reason given"
                continue
            self.duplicate += result.duplicate
            if result.job_id not in self.accepted:
                self.accepted.add(result.job_id)
                self.finished += result.job_id in self.ended

    def end(self, job_id: str, state: str) -> bool:
        """Job ``job_id`` ended in ``state``; False if it was known to have ended."""
        if job_id in self.ended or job_id not in self.expected:
            return False
        self.ended[job_id] = state
        self.finished += job_id in self.accepted
        return True


Changed = Callable[[ReplayState], None]


async def replay(
    client: LiveClient,
    plan: Sequence[Arrival],
    *,
    time_scale: float,
    state: ReplayState | None = None,
    on_change: Changed | None = None,
    max_in_flight: int = 64,
) -> ReplayState:
    """Send ``plan`` at its compressed times (``at / time_scale`` wall seconds).

    Requests go out in order; their replies are awaited concurrently (at most
    ``max_in_flight`` at a time), so a slow reply never delays the next
    arrival. The first error (no reply, connection lost) stops the replay and
    is raised once the requests in flight have been answered.
    """
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValueError(f"time scale must be > 0, got {time_scale!r}")
    if state is None:
        state = ReplayState(frozenset(s.id for a in plan for s in a.jobs))
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    errors: list[LiveError | BusError] = []
    t0 = loop.time()

    async def one(arrival: Arrival) -> None:
        try:
            reply = await client.submit(arrival.jobs)
        except (LiveError, BusError) as exc:
            errors.append(exc)
            return
        finally:
            slots.release()
        state.record(reply)
        if on_change is not None:
            on_change(state)

    async with asyncio.TaskGroup() as tg:
        for i, arrival in enumerate(plan):
            due = t0 + arrival.at / time_scale
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            if errors:
                slots.release()
                break
            state.late_max = max(state.late_max, loop.time() - due)
            state.sent += len(arrival.jobs)
            tg.create_task(one(arrival), name=f"replay-submit-{i}")
    state.wall_seconds = loop.time() - t0
    state.replay_done = True
    if on_change is not None:
        on_change(state)
    if errors:
        raise errors[0]
    return state


async def follow(
    client: LiveClient,
    state: ReplayState,
    *,
    on_change: Changed | None = None,
    poll: float = 1.0,
) -> ReplayState:
    """Wait until every accepted job of ``state`` has ended (the client must watch).

    Ends are taken from ``JobEvent`` s. Events are QoS 0 and may be missed, so
    when no job has ended for ``poll`` seconds a ``StatusReply`` marks the
    accepted jobs that are neither queued nor running as ended ("left"). Only
    then: a status lists the whole queue, too big to ask for every second of a
    long replay while events flow.
    """
    loop = asyncio.get_running_loop()
    next_poll = loop.time() + poll
    while not state.all_ended:
        item = await client.next_watched(timeout=max(0.0, next_poll - loop.time()))
        changed = False
        if isinstance(item, JobEvent) and item.state in FINAL_STATES:
            changed = state.end(item.job_id, item.state)
        if changed:
            next_poll = loop.time() + poll
        elif loop.time() >= next_poll:
            status = await client.status()
            present = {j.id for j in status.queue} | {j.id for j in status.running}
            for job_id in state.accepted - present - state.ended.keys():
                changed = state.end(job_id, "left") or changed
            next_poll = loop.time() + poll
        if changed and on_change is not None:
            on_change(state)
    return state


async def replay_and_follow(
    client: LiveClient,
    plan: Sequence[Arrival],
    *,
    time_scale: float,
    on_change: Changed | None = None,
    poll: float = 1.0,
) -> ReplayState:
    """:func:`replay` and :func:`follow` together: returns once every job has ended."""
    state = ReplayState(frozenset(s.id for a in plan for s in a.jobs))
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(
                replay(client, plan, time_scale=time_scale, state=state, on_change=on_change),
                name="replay-send",
            )
            tg.create_task(
                follow(client, state, on_change=on_change, poll=poll), name="replay-follow"
            )
    except* (LiveError, BusError) as group:
        # One clear error for the caller, not a group: the other task was only cancelled.
        raise group.exceptions[0] from None
    return state
