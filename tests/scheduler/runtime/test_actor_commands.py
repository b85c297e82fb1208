"""The scheduler and command jobs: the owner the broker vouches for, every part's host,
the command's end in the final event, the first part's end ending the job."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from broker.codec import encode
from broker.command_spec import CommandSpec, HostSlots
from broker.messages import (
    ErrorReply,
    HistoryReply,
    HistoryRequest,
    JobEvent,
    JobSpec,
    PartFinished,
    SubmitJobs,
    in_stream,
)
from broker.vocabulary import BadMessage, CommandUsers, JobEventKind
from scheduler.runtime.journal import SCHEMA_VERSION, Journal
from tests.scheduler.runtime.harness import TOPICS, Cluster, eventually


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path / "journal.sqlite")
    await c.start()
    await c.client.start(TOPICS.events)
    yield c
    await c.stop()


#: The agents that get command jobs run them (as themselves).
RUNS = CommandUsers.AGENT


def command_spec(
    job_id: str, procs: int = 1, *, user: str = "ann", owner: str | None = None
) -> JobSpec:
    return JobSpec(
        id=job_id,
        procs=procs,
        walltime=100.0,
        work=100.0,
        workload="command",
        user=user,
        owner=owner,
        command=CommandSpec(argv=("./app",), chdir="/home/ann"),
    )


async def test_the_owner_is_who_the_topic_says_never_the_payload(cluster: Cluster) -> None:
    agent = await cluster.agent("a1", 4, commands=RUNS)
    forged = command_spec("open", owner="root")
    await cluster.client.send_raw(encode(SubmitJobs(jobs=(forged,))))
    as_bob = command_spec("user", user="bob", owner="root")
    await cluster.client.send_raw(
        encode(SubmitJobs(jobs=(as_bob,))), topic=TOPICS.user_requests("alice")
    )
    for_carol = command_spec("admin", user="carol", owner="root")
    await cluster.client.send_raw(
        encode(SubmitJobs(jobs=(for_carol,))), topic=TOPICS.admin_requests("boss")
    )
    await eventually(lambda: all(agent.started(j) for j in ("open", "user", "admin")))
    owners = {s.job.id: (s.job.user, s.job.owner) for s in agent.starts()}
    # No login: nobody vouched (a root agent refuses it). A user: that login, whatever
    # the payload says. An admin: the user it names, as root's sbatch --uid.
    assert owners == {
        "open": ("ann", None),
        "user": ("alice", "alice"),
        "admin": ("carol", "carol"),
    }


async def test_every_part_of_a_command_job_is_told_every_host_and_its_share(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 2, commands=RUNS)
    a2 = await cluster.agent("a2", 2, commands=RUNS)
    await cluster.client.submit(command_spec("wide", 4))
    await eventually(lambda: a1.started("wide") and a2.started("wide"))
    (first,), (second,) = a1.starts(), a2.starts()
    assert first.hosts == second.hosts
    assert sorted(first.hosts, key=lambda h: h.machine) == [
        HostSlots(machine="a1", slots=2),
        HostSlots(machine="a2", slots=2),
    ]
    # Each part finds itself at its own number.
    assert (first.hosts[first.part].machine, second.hosts[second.part].machine) == ("a1", "a2")
    # A job of another workload carries none.
    a3 = await cluster.agent("a3", 1)
    await cluster.client.submit(JobSpec(id="sleepy", procs=1, walltime=10, work=10))
    await eventually(lambda: a3.started("sleepy"))
    assert a3.starts()[0].hosts == ()


async def test_the_first_part_ends_the_job_with_its_exit_status(cluster: Cluster) -> None:
    a1 = await cluster.agent("a1", 2, commands=RUNS)
    a2 = await cluster.agent("a2", 2, commands=RUNS)
    await cluster.client.submit(command_spec("w", 4))
    await eventually(lambda: a1.started("w") and a2.started("w"))
    first = next(a for a in (a1, a2) if a.starts()[0].part == 0)
    other = a2 if first is a1 else a1
    await first.event(
        PartFinished(
            job_id="w",
            agent_id=first.id,
            exit_code=0,
            at=0.0,
            reason="done",
            attempt=1,
            exit_status=0,
        )
    )
    end = await cluster.client.inbox.expect(
        JobEvent, lambda e: e.job_id == "w" and e.event is JobEventKind.FINISHED
    )
    assert (end.exit_status, end.signal) == (0, None)
    await eventually(lambda: other.cancels("w") == 1)  # the part that held its CPUs


async def test_a_failed_command_says_its_status_and_why_and_the_journal_keeps_it(
    cluster: Cluster,
) -> None:
    a1 = await cluster.agent("a1", 2, commands=RUNS)
    await cluster.client.submit(command_spec("f", 1), command_spec("k", 1))
    await eventually(lambda: a1.started("f") and a1.started("k"))
    await a1.event(
        PartFinished(
            job_id="f",
            agent_id="a1",
            exit_code=5,
            at=0.0,
            reason="failed",
            attempt=1,
            exit_status=3,
            detail="the command exited with status 3",
        )
    )
    await a1.event(
        PartFinished(
            job_id="k",
            agent_id="a1",
            exit_code=143,
            at=0.0,
            reason="walltime",
            attempt=1,
            signal=9,
            detail="the command was killed by signal 9 (SIGKILL)",
        )
    )
    failed = await cluster.client.inbox.expect(
        JobEvent, lambda e: e.job_id == "f" and e.event is JobEventKind.FAILED
    )
    killed = await cluster.client.inbox.expect(
        JobEvent, lambda e: e.job_id == "k" and e.event is JobEventKind.FAILED
    )
    assert failed.exit_status == 3
    assert failed.detail == "part on a1: failed: the command exited with status 3"
    assert (killed.exit_status, killed.signal) == (None, 9)
    assert "walltime" in killed.detail
    rid = cluster.client.request_id()
    await cluster.client.send(
        HistoryRequest(request_id=rid, reply_to=cluster.client.name, job_ids=("f", "k"))
    )
    history = await cluster.client.inbox.expect(HistoryReply, lambda r: r.request_id == rid)
    assert history.events[-1] == killed
    assert [e for e in history.events if e.job_id == "f"][-1] == failed


async def test_a_malformed_command_is_refused_whole_and_the_next_one_runs(
    cluster: Cluster,
) -> None:
    agent = await cluster.agent("a1", 2, commands=RUNS)
    bad = msgspec.msgpack.encode(
        {
            "kind": "submit_jobs",
            "v": 2,
            "request_id": "bad1",
            "reply_to": cluster.client.name,
            "jobs": [
                {
                    "id": "evil",
                    "procs": 1,
                    "walltime": 1.0,
                    "work": 1.0,
                    "workload": "command",
                    "command": {"argv": ["sh", "-c", "x\u0000y"], "chdir": "relative"},
                }
            ],
        }
    )
    await cluster.client.send_raw(bad)
    error = await cluster.client.inbox.expect(ErrorReply, lambda e: e.request_id == "bad1")
    assert error.code is BadMessage.INVALID
    reply = await cluster.client.submit(command_spec("good"))
    assert reply.results[0].accepted
    await eventually(lambda: agent.started("good"))
    assert not agent.started("evil")


def test_a_schema_8_journal_gains_the_exit_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    Journal(path).close()
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE job_events DROP COLUMN exit_status")
        db.execute("ALTER TABLE job_events DROP COLUMN signal")
        db.execute(
            "INSERT INTO job_events(job_id, seq, at, event, detail, stream) "
            "VALUES ('j', 1, 5.0, 'failed', 'x', 1)"
        )
        db.execute("UPDATE meta SET value='8' WHERE key='schema'")
    journal = Journal(path)
    try:
        (event,) = journal.job_events(["j"])
        assert (event.event, event.exit_status, event.signal) == (JobEventKind.FAILED, None, None)
        ended = JobEvent(job_id="k", event=JobEventKind.FAILED, at=6.0, seq=1, stream=2, signal=9)
        journal.record_event(ended, owner="ann", owner_stream=1)
        # A watcher catching up by number hears how the command ended, as one that was there.
        assert journal.stream_events(1, 10) == ([ended], False)
        assert journal.stream_events(0, 10, owner="ann") == ([in_stream(ended, 1)], False)
    finally:
        journal.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            str(SCHEMA_VERSION),
        )
