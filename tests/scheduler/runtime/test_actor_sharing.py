"""A cluster many users share: limits, paged status, bulk cancel, bounded requests, associations.

Each user speaks on their own request topic (``scheduler/requests/<user>``, as
with broker logins) and reads ``users/<user>/replies/<client>``; the admin on
``scheduler/admin/<admin>``. The scheduler runs on the in-process broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from accordion.client.live_client import LiveClient
from broker.codec import decode, encode
from broker.limits import MAX_REPLY_BYTES
from broker.memory import MemoryBroker
from broker.messages import (
    AnyMessage,
    CancelJobs,
    CancelJobsReply,
    ErrorReply,
    HistoryRequest,
    JobEvent,
    JobSpec,
    Message,
    StatusReply,
    StatusRequest,
    SubmitJobs,
    SubmitReply,
)
from broker.vocabulary import BadMessage, JobEventKind, JobState, Rejection
from scheduler.live.associations import associations_from_toml
from scheduler.live.limits import Limits
from scheduler.live.status import Cursor, CursorError
from scheduler.runtime.journal import Journal
from tests.builders import spec as job
from tests.scheduler.runtime.harness import SETTINGS, TOPICS, Cluster, Inbox, eventually

ASSOCIATIONS = associations_from_toml(
    """
    [users.alice]
    accounts = ["physics", "shared"]
    max_qos = 10

    [users.bob]
    accounts = ["biology"]
    max_qos = 100
    """
)


def spec(
    job_id: str,
    procs: int = 1,
    *,
    walltime: float = 100.0,
    user: str = "ann",
    account: str = "nobody",
    qos: int = 0,
) -> JobSpec:
    """A rigid job charged to ``account`` (its ``group``)."""
    return job(job_id, procs, walltime=walltime, user=user, group=account, qos=qos, malleable=False)


class Person:
    """A user (or an admin) on their own topics, as a broker with logins makes them."""

    def __init__(self, broker: MemoryBroker, name: str, *, admin: bool = False) -> None:
        self.name = name
        self.admin = admin
        self.bus = broker.client(f"person-{name}")
        self.inbox = Inbox()
        self._task: asyncio.Task[None] | None = None
        self._n = 0

    async def start(self) -> Person:
        await self.bus.__aenter__()
        await self.bus.subscribe(TOPICS.user_replies(self.name, "cli"))
        self._task = asyncio.create_task(self._read(), name=f"person-{self.name}")
        return self

    async def _read(self) -> None:
        async for d in self.bus.deliveries():
            self.inbox.add(d.topic, decode(d.payload))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.bus.__aexit__(None, None, None)

    def rid(self) -> str:
        self._n += 1
        return f"{self.name}-{self._n}"

    async def send_raw(self, payload: bytes) -> None:
        topic = TOPICS.admin_requests(self.name) if self.admin else TOPICS.user_requests(self.name)
        await self.bus.publish(topic, payload)

    async def ask(self, message: Message) -> AnyMessage:
        await self.send_raw(encode(message))
        rid = getattr(message, "request_id", None)
        return await self.inbox.expect(Message, lambda m: getattr(m, "request_id", 0) == rid)

    async def submit(self, *specs: JobSpec) -> SubmitReply:
        reply = await self.ask(SubmitJobs(request_id=self.rid(), reply_to="cli", jobs=specs))
        assert isinstance(reply, SubmitReply), reply
        return reply

    async def status(self, **filters: object) -> StatusReply:
        reply = await self.ask(StatusRequest(request_id=self.rid(), reply_to="cli", **filters))  # type: ignore[arg-type]
        assert isinstance(reply, StatusReply), reply
        return reply

    async def cancel(self, **what: object) -> CancelJobsReply:
        reply = await self.ask(CancelJobs(request_id=self.rid(), reply_to="cli", **what))  # type: ignore[arg-type]
        assert isinstance(reply, CancelJobsReply), reply
        return reply


def shared(path: Path, **limits: int) -> Cluster:
    """A scheduler with these limits and :data:`ASSOCIATIONS`."""
    return Cluster(
        path, settings=replace(SETTINGS, limits=Limits(**limits), associations=ASSOCIATIONS)
    )


@pytest.fixture
async def people(journal_path: Path) -> AsyncIterator[tuple[Cluster, Person, Person, Person]]:
    """A scheduler (FCFS, max 3 queued per user, 2 jobs per request, 8 CPUs per user,
    requests of at most 4,000 bytes); alice, bob and an admin; a 2-CPU agent that an
    admin's job fills, so the users' jobs queue until a test adds agents."""
    c = shared(
        journal_path,
        max_queued_per_user=3,
        max_jobs_per_request=2,
        max_user_cpus=8,
        max_request_bytes=4000,
    )
    await c.client.start(TOPICS.events)
    await c.start()
    alice = await Person(c.broker, "alice").start()
    bob = await Person(c.broker, "bob").start()
    root = await Person(c.broker, "root", admin=True).start()
    await c.agent("a0", 2)
    await root.submit(spec("blocker", 2, walltime=1e6, user="root"))
    await eventually(lambda: c.state("blocker") == "running")
    try:
        yield c, alice, bob, root
    finally:
        for p in (alice, bob, root):
            await p.close()
        await c.stop()


def refusal(reply: SubmitReply) -> list[tuple[str, Rejection | None]]:
    return [(r.job_id, r.code) for r in reply.results]


async def test_queued_jobs_per_user_are_limited_and_the_refusal_names_the_limit(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    _, alice, bob, _ = people
    first = await alice.submit(spec("a1", account="physics"), spec("a2", account="physics"))
    second = await alice.submit(spec("a3", account="physics"), spec("a4", account="physics"))
    assert refusal(first) + refusal(second) == [
        ("a1", None),
        ("a2", None),
        ("a3", None),
        ("a4", Rejection.QUEUE_LIMIT),
    ]
    why = second.results[1].reason or ""
    assert "max_queued_per_user" in why
    assert "is 3" in why
    assert "--max-queued-per-user" in why
    # Her flood is hers: bob is not held back by it.
    assert refusal(await bob.submit(spec("b1", account="biology"))) == [("b1", None)]
    # A duplicate of an accepted job is still answered as one, limit or not.
    again = await alice.submit(spec("a1", account="physics"))
    assert again.results[0].accepted
    assert again.results[0].duplicate


async def test_a_request_of_too_many_jobs_is_refused_whole(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    c, alice, _, _ = people
    rid = alice.rid()
    jobs = tuple(spec(f"m{i}", account="physics") for i in range(3))
    error = await alice.ask(SubmitJobs(request_id=rid, reply_to="cli", jobs=jobs))
    assert isinstance(error, ErrorReply)
    assert error.code is BadMessage.TOO_MANY
    assert "max_jobs_per_request" in error.error
    assert "2" in error.error
    assert all(c.state(f"m{i}") is None for i in range(3))


async def test_a_request_over_the_byte_bound_is_answered_too_large(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    c, alice, _, _ = people
    rid = alice.rid()
    # Over the byte bound before it is over the jobs bound: the bytes are checked first.
    jobs = tuple(spec(f"{i:02}" + "x" * 120, account="physics") for i in range(30))
    big = SubmitJobs(request_id=rid, reply_to="cli", jobs=jobs)
    payload = encode(big)
    assert len(payload) > 4000
    await alice.send_raw(payload)
    error = await alice.inbox.expect(ErrorReply, lambda e: e.request_id == rid)
    assert error.code is BadMessage.TOO_LARGE
    assert f"{len(payload):,} bytes" in error.error
    assert "max_request_bytes" in error.error
    sample = c.actor.metrics.registry.get_sample_value  # type: ignore[union-attr]
    assert sample("accordion_scheduler_bad_messages_total", {"reason": "too_large"}) == 1


async def test_associations_decide_accounts_and_qos_and_admins_pass(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    c, alice, _, root = people
    reply = await alice.submit(spec("own", account="shared"), spec("bobs", account="biology"))
    assert refusal(reply) == [("own", None), ("bobs", Rejection.ACCOUNT)]
    assert "may not charge account 'biology'" in (reply.results[1].reason or "")
    reply = await alice.submit(spec("fast", qos=1_000_000), spec("dflt"))
    assert refusal(reply) == [("fast", Rejection.QOS), ("dflt", None)]
    assert "QoS up to 10" in (reply.results[0].reason or "")
    # No account named: her default, the first of hers.
    assert c.actor is not None
    assert c.actor.core.job("dflt").group == "physics"
    # The admin submits for anyone, with anything.
    mine = spec("adm", account="biology", qos=999, user="alice")
    assert refusal(await root.submit(mine)) == [("adm", None)]
    # A user no association names may submit nothing.
    carol = await Person(c.broker, "carol").start()
    try:
        reply = await carol.submit(spec("c1"))
        assert refusal(reply) == [("c1", Rejection.ACCOUNT)]
        assert "no association" in (reply.results[0].reason or "")
    finally:
        await carol.close()


async def test_a_job_wider_than_the_per_user_cpu_limit_is_refused_and_others_wait(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    c, alice, bob, _ = people
    await c.agent("big", 16)
    reply = await alice.submit(spec("w", 9, account="physics"), spec("f1", 4, account="physics"))
    assert refusal(reply) == [("w", Rejection.CPU_LIMIT), ("f1", None)]
    assert "max_user_cpus is 8" in (reply.results[0].reason or "")
    await alice.submit(spec("f2", 4, account="physics"), spec("f3", 4, account="physics"))
    await bob.submit(spec("b", 4, account="biology"))
    await eventually(lambda: c.state("b") == "running")
    assert [c.state(j) for j in ("f1", "f2", "f3")] == ["running", "running", "queued"]
    page = await alice.status(user="alice")
    assert (page.totals.queued, page.totals.running, page.totals.cpus) == (1, 2, 8)
    assert page.max_user_cpus == 8
    await c.agents["big"].finish("f1")
    await eventually(lambda: c.state("f3") == "running")


async def test_status_pages_cover_every_job_once_with_totals(journal_path: Path) -> None:
    c = shared(journal_path, max_queued_per_user=1000)
    await c.client.start()
    await c.start()
    alice = await Person(c.broker, "alice").start()
    root = await Person(c.broker, "root", admin=True).start()
    try:
        await c.agent("a1", 2)
        await root.submit(*(spec(f"q{i:03}", user="alice") for i in range(30)))
        await root.submit(*(spec(f"z{i:03}", user="zed") for i in range(10)))
        await eventually(lambda: c.state("q001") == "running")
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await alice.status(limit=7, cursor=cursor, machines=cursor is None)
            pages += 1
            seen += [j.id for j in (*page.running, *page.queue)]
            assert len(page.running) + len(page.queue) <= 7
            assert (page.totals.queued, page.totals.running) == (38, 2)
            assert page.totals.by_user == ()  # a user sees no one else's totals
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert sorted(seen) == sorted(
            [f"q{i:03}" for i in range(30)] + [f"z{i:03}" for i in range(10)]
        )
        assert pages == 6
        mine = await alice.status(user="alice", states=(JobState.QUEUED,))
        assert [j.id for j in mine.queue] == [f"q{i:03}" for i in range(2, 30)]
        assert mine.running == ()
        assert mine.totals.queued == 28
        some = await alice.status(ids=("q000", "z003", "nope"), machines=False)
        assert [j.id for j in some.running] == ["q000"]
        assert [j.id for j in some.queue] == ["z003"]
        assert (some.totals.queued, some.totals.running, some.machines) == (1, 1, ())
        admin = await root.status(limit=0)
        assert [*admin.queue, *admin.running] == []
        assert [m.id for m in admin.machines] == ["a1"]
        assert admin.totals.users == 2
        assert [(u.user, u.queued, u.running) for u in admin.totals.by_user] == [
            ("alice", 28, 2),
            ("zed", 10, 0),
        ]
        bad = await alice.ask(StatusRequest(request_id="bad", reply_to="cli", cursor="x:1"))
        assert isinstance(bad, ErrorReply)
        assert bad.code is BadMessage.INVALID
    finally:
        await alice.close()
        await root.close()
        await c.stop()


async def test_no_status_page_is_larger_than_the_reply_bound(journal_path: Path) -> None:
    c = shared(journal_path, max_queued_per_user=20_000, max_jobs_per_request=5000)
    await c.client.start()
    await c.start()
    root = await Person(c.broker, "root", admin=True).start()
    await c.agent("a0", 1)
    await root.submit(spec("blocker", walltime=1e6, user="root"))
    try:
        # 9,000 jobs of 128-character ids: their rows alone are over 1 MiB.
        ids = [f"{i:05}-" + "x" * 122 for i in range(9000)]
        for i in range(0, len(ids), 4500):
            await root.submit(*(spec(j, user="alice") for j in ids[i : i + 4500]))
        sizes: list[int] = []
        seen = 0
        cursor = None
        while True:
            page = await root.status(cursor=cursor)
            sizes.append(len(encode(page)))
            seen += len(page.queue)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == 9000  # and the blocker, running
        assert len(sizes) >= 2
        assert max(sizes) <= MAX_REPLY_BYTES
        assert sum(sizes) > MAX_REPLY_BYTES  # one reply of it all would have been too large
    finally:
        await root.close()
        await c.stop()


async def test_bulk_cancel_by_user_state_pattern_and_list_answers_counts(
    people: tuple[Cluster, Person, Person, Person],
) -> None:
    c, alice, _, root = people
    await c.agent("a1", 1)
    await root.submit(*(spec(f"s-{i}", user="alice") for i in range(2)))
    await root.submit(spec("t-0", user="alice"), spec("b-0", user="bob"))
    await eventually(lambda: c.state("s-0") == "running")
    # A pattern: alice's queued sweep jobs; her running one is left out by the state.
    reply = await alice.cancel(patterns=("s-*",), states=(JobState.QUEUED,))
    assert (reply.cancelled, reply.not_allowed, reply.skipped) == (1, 0, 0)
    assert c.state("s-1") == "cancelled"
    assert c.state("s-0") == "running"
    # A list: one of hers, one of bob's, one unknown, one ended, one left out by the filter.
    reply = await alice.cancel(
        job_ids=("t-0", "b-0", "nope", "s-1", "s-0"), states=(JobState.QUEUED,)
    )
    assert (
        reply.cancelled,
        reply.not_allowed,
        reply.not_found,
        reply.already_final,
        reply.skipped,
    ) == (1, 1, 1, 1, 1)
    assert c.state("b-0") == "queued"
    # Everything of bob's, by user, from the admin; and alice's running one, by her.
    assert (await root.cancel(user="bob")).cancelled == 1
    assert (await alice.cancel(user="alice")).cancelled == 1
    assert c.state("s-0") == "cancelled"
    events = c.client.inbox.all(JobEvent, lambda e: e.event is JobEventKind.CANCELLED)
    assert sorted(e.job_id for e in events) == ["b-0", "s-0", "s-1", "t-0"]
    nothing = await alice.ask(CancelJobs(request_id="n", reply_to="cli"))
    assert isinstance(nothing, ErrorReply)
    assert nothing.code is BadMessage.INVALID


async def test_a_bulk_cancel_of_thousands_is_one_request_and_one_pass(journal_path: Path) -> None:
    c = shared(journal_path, max_queued_per_user=20_000, max_jobs_per_request=10_000)
    await c.client.start()
    await c.start()
    alice = await Person(c.broker, "alice").start()
    await c.agent("a0", 1)
    # On the topic without a requester the association table applies: a user it names.
    await c.client.submit(spec("blocker", walltime=1e6, user="bob", account="biology"))
    try:
        for n in range(3):
            jobs = [spec(f"f{n}-{i:04}", account="physics") for i in range(5000)]
            assert all(r.accepted for r in (await alice.submit(*jobs[:2500])).results)
            assert all(r.accepted for r in (await alice.submit(*jobs[2500:])).results)
        actor = c.actor
        assert actor is not None
        batches = actor.batches
        reply = await alice.cancel(user="alice", states=(JobState.QUEUED,))
        assert reply.cancelled == 15_000
        assert actor.batches - batches <= 2  # the request's batch (and perhaps a tick)
        assert len(actor.core.queue) == 0
        with Journal(journal_path) as j:
            states = {row.state for row in j.load().jobs}
        assert states == {JobState.CANCELLED, JobState.RUNNING}  # the blocker runs on
    finally:
        await alice.close()
        await c.stop()


async def test_a_history_too_large_for_one_message_is_refused_and_the_client_halves_it(
    journal_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bound of a few events stands in for the wire's 16 MiB.
    monkeypatch.setattr("scheduler.live.requests.MAX_MESSAGE_BYTES", 600)
    c = shared(journal_path, max_queued_per_user=100)
    await c.client.start()
    await c.start()
    try:
        await c.agent("a0", 1)
        ids = [f"h{i:02}" for i in range(12)]
        await c.client.submit(*(spec(j, user="bob", account="biology") for j in ids))
        await eventually(lambda: c.state("h00") == "running")
        await c.client.send(HistoryRequest(request_id="all", reply_to="c1", job_ids=tuple(ids)))
        refused = await c.client.inbox.expect(ErrorReply, lambda e: e.request_id == "all")
        assert refused.code is BadMessage.TOO_LARGE
        assert "ask for fewer jobs" in refused.error
        async with (
            c.broker.client("history-reader") as bus,
            LiveClient(bus, TOPICS) as reader,
        ):
            events = await reader.history(ids)
        assert sorted({e.job_id for e in events}) == ids
        assert [e.event for e in events if e.job_id == "h00"] == [
            JobEventKind.QUEUED,
            JobEventKind.RUNNING,
        ]
    finally:
        await c.stop()


def test_a_cursor_reads_back_as_it_was_handed_out() -> None:
    for text in ("m:", "m:node:1", "r:0", "q:41"):
        assert str(Cursor.parse(text, machines=True)) == text
    assert str(Cursor.parse(None, machines=False)) == "r:"
    for bad in ("x:1", "q:one", "q1"):
        with pytest.raises(CursorError):
            Cursor.parse(bad, machines=True)
