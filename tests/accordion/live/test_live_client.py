"""The live client (``accordion.client``: ``live_client``, ``specs``, ``replay``) on the
in-process broker, against the real scheduler actor.

The actor runs on a manual clock with fake agents (``tests/scheduler/runtime/harness``);
a fake scheduler stands in where a test needs an answer the actor never gives. The
replay, which paces itself by the event loop's clock, runs on a virtual one
(``tests.virtual_clock``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from accordion.client.live_client import LiveClient
from accordion.client.replay import (
    MAX_JOBS_PER_REQUEST,
    Arrival,
    EventGaps,
    ReplayState,
    arrivals,
    final_states,
    follow,
    replay,
)
from accordion.client.specs import checked, job_spec, parse_duration, spec_of
from accordion.errors import LiveError, NoReplyError, RefusedError, UserError
from broker.bus import BusError, Delivery
from broker.codec import decode, encode
from broker.memory import MemoryBroker, MemoryBus
from broker.messages import (
    ClusterSummary,
    ErrorReply,
    JobEvent,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
    SubmitResult,
)
from broker.vocabulary import BadMessage
from tests.builders import job, spec
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually
from tests.virtual_clock import VIRTUAL


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """The real scheduler actor (EASY) with two fake agents that finish on demand."""
    c = Cluster(tmp_path / "journal.sqlite", policy="easy")
    await c.client.start()
    await c.start()
    await c.agent("slow", 4, speed=1.0)
    await c.agent("fast", 2, speed=2.0)
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[LiveClient]:
    async with (
        cluster.broker.client("live-1") as bus,
        LiveClient(bus, TOPICS, timeout=2.0, watch=True) as live,
    ):
        yield live


# -- requests -----------------------------------------------------------------------


async def test_submit_status_cancel(cluster: Cluster, client: LiveClient) -> None:
    reply = await client.submit([job_spec(job_id="a", procs=2, walltime=60.0)])
    assert reply.results == (SubmitResult("a", True),)
    again = await client.submit([job_spec(job_id="a", procs=2, walltime=60.0)])
    assert again.results == (SubmitResult("a", True, duplicate=True),)
    other = await client.submit([job_spec(job_id="a", procs=1, walltime=60.0)])
    assert not other.results[0].accepted
    assert "different job" in (other.results[0].reason or "")
    wide = await client.submit([job_spec(job_id="wide", procs=7, walltime=60.0)])
    assert not wide.results[0].accepted
    assert "the cluster as configured has 6" in (wide.results[0].reason or "")

    status = await client.status()
    assert [(m.id, m.cpus, m.online) for m in status.machines] == [
        ("fast", 2, True),
        ("slow", 4, True),
    ]
    assert [j.id for j in status.running] == ["a"]
    assert status.running[0].parts[0].machine == "fast"  # the fastest machine that fits

    cancelled = await client.cancel("a")
    assert cancelled.cancelled
    assert (await client.cancel("a")).reason == "already cancelled"
    unknown = await client.cancel("nope")
    assert not unknown.cancelled
    assert unknown.reason == "no job 'nope'"


async def test_replies_go_to_their_own_request(cluster: Cluster, client: LiveClient) -> None:
    # Many requests in flight at once: each gets its own reply back.
    specs = [job_spec(job_id=f"j{i}", procs=1, walltime=60.0) for i in range(40)]
    replies = await asyncio.gather(*(client.submit([s]) for s in specs))
    assert [r.results[0].job_id for r in replies] == [s.id for s in specs]
    statuses = await asyncio.gather(*(client.status() for _ in range(5)))
    assert len({s.request_id for s in statuses}) == 5


async def test_events_and_the_retained_summary_are_watched(
    cluster: Cluster, client: LiveClient
) -> None:
    await client.submit([job_spec(job_id="w", procs=1, walltime=60.0)])
    await eventually(lambda: cluster.agents["fast"].started("w"))
    await cluster.agents["fast"].finish("w")
    seen: list[str] = []
    summaries: list[ClusterSummary] = []
    async with asyncio.timeout(5):
        while "finished" not in seen:
            item = await client.next_watched()
            if isinstance(item, JobEvent) and item.job_id == "w":
                seen.append(item.event)
            elif isinstance(item, ClusterSummary):
                summaries.append(item)
    assert seen == ["queued", "running", "finished"]  # the harness asks for every event
    assert summaries
    assert summaries[0].cpus == 6


async def test_a_client_not_watching_cannot_read_events(cluster: Cluster) -> None:
    async with cluster.broker.client("quiet") as bus, LiveClient(bus, TOPICS) as quiet:
        with pytest.raises(RuntimeError, match="watch=True"):
            await quiet.next_watched(0.01)


# -- a fake scheduler for the answers the actor does not give -------------------------------


async def _fake_scheduler(broker: MemoryBroker, answer: str, listening: asyncio.Event) -> None:
    """Answers every request with an ErrorReply, the wrong kind of reply, or nothing;
    sets ``listening`` once subscribed (a request sent before would be lost)."""
    async with broker.client("fake-scheduler") as bus:
        await bus.subscribe(TOPICS.requests)
        listening.set()
        async for d in bus.deliveries():
            request = decode(d.payload)
            assert isinstance(request, StatusRequest | SubmitJobs)
            reply: ErrorReply | SubmitReply
            if answer == "error":
                reply = ErrorReply(
                    request_id=request.request_id, code=BadMessage.VERSION, error="protocol v9"
                )
            elif answer == "wrong":
                reply = SubmitReply(request_id=request.request_id, results=())
            else:
                continue
            await bus.publish(TOPICS.replies(request.reply_to), encode(reply))


@pytest.mark.parametrize(
    ("answer", "error", "text"),
    [
        ("error", RefusedError, "the scheduler refused it: protocol v9"),
        ("wrong", LiveError, "expected a StatusReply"),
        ("silence", NoReplyError, "no reply from the scheduler in 0.2 s"),
    ],
)
async def test_error_replies_wrong_replies_and_silence_raise(
    answer: str, error: type[Exception], text: str
) -> None:
    broker = MemoryBroker()
    async with asyncio.TaskGroup() as tg:
        listening = asyncio.Event()
        fake = tg.create_task(
            _fake_scheduler(broker, answer, listening), name="test-fake-scheduler"
        )
        await listening.wait()
        async with broker.client("asker") as bus, LiveClient(bus, TOPICS, timeout=0.2) as client:
            with pytest.raises(error, match=text):
                await client.status()
            assert not client._pending  # nothing left waiting
        fake.cancel()


class LosingBus:
    """A memory bus whose connection is lost when the test says so."""

    def __init__(self, inner: MemoryBus) -> None:
        self.inner = inner
        self.lose = asyncio.Event()
        #: Set once a request went out: its reply is then pending.
        self.published = asyncio.Event()

    @property
    def client_id(self) -> str:
        return self.inner.client_id

    async def publish(
        self, topic: str, payload: bytes, *, qos: int = 1, retain: bool = False
    ) -> None:
        await self.inner.publish(topic, payload, qos=qos, retain=retain)
        self.published.set()

    async def subscribe(self, pattern: str, *, qos: int = 1) -> None:
        await self.inner.subscribe(pattern, qos=qos)

    async def deliveries(self) -> AsyncIterator[Delivery]:
        await self.lose.wait()
        if self.lose.is_set():
            raise BusError("connection lost")
        yield Delivery("never", b"")  # an async generator, as Bus.deliveries is


async def test_a_lost_connection_fails_pending_and_later_requests() -> None:
    broker = MemoryBroker()
    async with broker.client("doomed") as inner:
        bus = LosingBus(inner)
        async with LiveClient(bus, TOPICS, timeout=5.0, watch=True) as client:
            asking = asyncio.create_task(client.status(), name="test-ask")
            await bus.published.wait()
            bus.lose.set()
            with pytest.raises(BusError, match="connection lost"):
                await asking
            with pytest.raises(BusError, match="connection lost"):
                await client.status()
            with pytest.raises(BusError, match="connection lost"):
                await client.next_watched(1.0)


# -- specs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("1.5", 1.5),
        ("2:30", 150.0),
        ("1:00:00", 3600.0),
        ("01:02:03", 3723.0),
        ("1-0", 86400.0),
        ("1-2", 93600.0),
        ("1-2:30", 95400.0),
        ("2-00:00:01", 172801.0),
    ],
)
def test_durations_are_read_like_sbatch_but_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "1:60", "1:2:3:4", "abc", "1::2", "inf", "1.5:00"])
def test_bad_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(UserError, match=r"--walltime|more than 0") as info:
        parse_duration(text, what="--walltime")
    assert repr(text) in str(info.value)


def test_specs_are_checked_as_the_scheduler_decodes_them() -> None:
    sent = job_spec(job_id="x", procs=3, walltime=60.0, deadline=600.0, malleable=True)
    assert (sent.work, sent.deadline, sent.malleable) == (60.0, 600.0, True)
    with pytest.raises(UserError, match=r"job 'bad id' cannot be sent: .*`id`"):
        job_spec(job_id="bad id", procs=1, walltime=60.0)
    with pytest.raises(UserError, match="procs"):
        checked(spec("z", 0, walltime=1.0, work=1.0))


def test_trace_jobs_become_specs_with_relative_deadlines() -> None:
    traced = job(
        "7", walltime=100.0, runtime=40.0, submit=100.0, deadline=400.0, user="u1", group="g2"
    )
    spec = spec_of(traced, prefix="r1-")
    assert (spec.id, spec.work, spec.walltime, spec.deadline) == ("r1-7", 40.0, 100.0, 300.0)
    assert (spec.user, spec.group) == ("u1", "g2")


def test_arrivals_group_one_instant_into_one_request() -> None:
    jobs = [job(i, submit=t) for i, t in (("1", 10), ("2", 10), ("3", 25), ("4", 40), ("5", 40))]
    plan = arrivals(jobs, prefix="p-")
    assert [(a.at, [s.id for s in a.jobs]) for a in plan] == [
        (0.0, ["p-1", "p-2"]),
        (15.0, ["p-3"]),
        (30.0, ["p-4", "p-5"]),
    ]
    many = [job(str(i)) for i in range(MAX_JOBS_PER_REQUEST + 3)]
    assert [len(a.jobs) for a in arrivals(many)] == [MAX_JOBS_PER_REQUEST, 3]
    with pytest.raises(ValueError, match="submit order"):
        arrivals([job("1", submit=5.0), job("2", submit=1.0)])


# -- replay --------------------------------------------------------------------------------


@pytest.mark.asyncio(loop_factories=[VIRTUAL])
async def test_replay_sends_each_instant_at_its_compressed_time(
    cluster: Cluster, client: LiveClient
) -> None:
    # On the virtual clock the replay's sleeps end exactly when asked: the instants
    # the spy sees are the plan's, to the float, however loaded the machine is.
    received: list[tuple[float, int]] = []
    loop = asyncio.get_running_loop()
    listening = asyncio.Event()

    async def spy() -> None:
        async with cluster.broker.client("spy") as bus:
            await bus.subscribe(TOPICS.requests)
            listening.set()
            async for d in bus.deliveries():
                message = decode(d.payload)
                if isinstance(message, SubmitJobs):
                    received.append((loop.time(), len(message.jobs)))

    plan = [
        Arrival(0.0, (job_spec(job_id="r1", procs=1, walltime=60.0),)),
        Arrival(
            20.0,
            (
                job_spec(job_id="r2", procs=1, walltime=60.0),
                job_spec(job_id="r3", procs=7, walltime=60.0),  # wider than the cluster
            ),
        ),
        Arrival(30.0, (job_spec(job_id="r4", procs=1, walltime=60.0),)),
    ]
    changes: list[int] = []
    async with asyncio.TaskGroup() as tg:
        spying = tg.create_task(spy(), name="test-spy")
        await listening.wait()
        t0 = loop.time()
        state = await replay(
            client, plan, time_scale=100.0, on_change=lambda s: changes.append(s.sent)
        )
        await eventually(lambda: len(received) == len(plan))
        spying.cancel()
    assert [n for _, n in received] == [1, 2, 1]
    assert [t - t0 for t, _ in received] == pytest.approx([0.0, 0.2, 0.3], abs=1e-9)
    assert state.accepted == {"r1", "r2", "r4"}
    assert list(state.rejected) == ["r3"]
    assert (state.sent, state.total, state.replay_done) == (4, 4, True)
    assert changes[-1] == 4


async def test_follow_ends_when_every_accepted_job_has_ended(
    cluster: Cluster, client: LiveClient
) -> None:
    cluster.agents["fast"].auto_finish = True
    cluster.agents["slow"].auto_finish = True
    traced = [
        job(i, walltime=100.0, runtime=40.0, submit=t) for i, t in (("1", 0), ("2", 0), ("3", 1))
    ]
    plan = arrivals(traced, prefix="f-")
    state = ReplayState(frozenset(s.id for a in plan for s in a.jobs))
    await replay(client, plan, time_scale=100.0, state=state)
    async with asyncio.timeout(10):
        await follow(client, state, poll=0.2)
    assert state.finished == 3
    assert set(state.ended.values()) == {"finished"}


async def test_follow_polls_for_ends_whose_events_were_missed(cluster: Cluster) -> None:
    # A client that joins after the jobs ended saw no event: StatusReply tells it the
    # job is gone, and the journal's history how it ended.
    cluster.agents["fast"].auto_finish = True
    async with cluster.broker.client("early") as bus, LiveClient(bus, TOPICS) as early:
        reply: SubmitReply = await early.submit([job_spec(job_id="gone", procs=1, walltime=9.0)])
    await eventually(lambda: cluster.state("gone") == "finished")
    async with (
        cluster.broker.client("late") as bus,
        LiveClient(bus, TOPICS, watch=True) as late,
    ):
        state = ReplayState(frozenset({"gone"}), replay_done=True)
        state.record(reply)
        async with asyncio.timeout(5):
            await follow(late, state, poll=0.1)
    assert state.ended == {"gone": "finished"}


async def test_history_and_gaps(cluster: Cluster, client: LiveClient) -> None:
    cluster.agents["fast"].auto_finish = True
    await client.submit([job_spec(job_id="h", procs=1, walltime=9.0)])
    await eventually(lambda: cluster.state("h") == "finished")
    events = await client.history(["h", "unknown"])
    assert [(e.seq, e.event) for e in events] == [(1, "queued"), (2, "running"), (3, "finished")]
    assert final_states(events) == {"h": "finished"}
    gaps = EventGaps()
    gaps.seen(events[0])
    last = events[2]
    assert gaps.missed(last)
    assert gaps.fill(last, events) == [events[1]]
    assert not gaps.missed(last)
    assert not EventGaps().missed(events[0])
