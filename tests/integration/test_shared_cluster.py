"""A cluster many users share, for real: issue 19's findings 1, 4 and 7 as tests.

One cluster for the module, as ``accordion up --user alice --user bob`` starts
it: its own Mosquitto (the generated configuration, logins and ACLs), a real
scheduler and one real agent, with a limits file (6,000 queued jobs per user)
and an association file. An admin's long job fills the machine, so what the
users submit stays queued for as long as a test needs. The CLI runs as child
processes logged in as the user, as a user would run it.

- *One user cannot deny status to everyone* (finding 1): alice queues 6,000
  jobs with 128-character ids, a queue whose status would be over the reply
  bound; bob's ``accordion status`` answers at once with a page, her 6,001st
  job is refused naming the limit, and one bulk cancel clears her queue.
- *Nothing unbounded reaches the scheduler* (finding 4): twelve 200 MB
  publishes are cut off by the broker, no agent is marked suspect, and the
  scheduler still answers; a 16 MB request is answered (refused for having
  too many jobs), and one past 16 MiB is refused by the client in one line.
- *Accounts and QoS are authorized* (finding 7): alice cannot charge bob's
  account or raise her QoS; the admin may.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accordion.client.live_client import LiveClient, connect, run_async
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from accordion.cluster.wiring import Sharing
from accordion.errors import RefusedError
from bench.faults.raw_mqtt import publish_raw
from broker.bus import MessageTooLargeError
from broker.codec import encode
from broker.limits import MAX_MESSAGE_BYTES, MAX_REPLY_BYTES
from broker.local import mosquitto_binary
from broker.messages import JobSpec, SubmitJobs
from broker.settings import read_secret
from broker.topics import Topics
from broker.vocabulary import BadMessage, JobState, Rejection
from model.machine import Machine
from tests.brokers import _no_mosquitto
from workload.cluster import ClusterSpec

pytestmark = pytest.mark.integration

TAG = uuid.uuid4().hex[:6]
QUEUED_LIMIT = 6000
ACCORDION = str(Path(sys.executable).with_name("accordion"))


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if mosquitto_binary() is None:
        _no_mosquitto()
    run_dir = tmp_path_factory.mktemp("shared")
    limits = run_dir / "limits.toml"
    limits.write_text(f"[limits]\nmax_queued_per_user = {QUEUED_LIMIT}\n")
    assoc = run_dir / "associations.toml"
    assoc.write_text(
        '[users.alice]\naccounts = ["physics"]\nmax_qos = 10\n\n'
        # A replay charges its trace's groups (g1 here): bob's too.
        '[users.bob]\naccounts = ["biology", "g1"]\nmax_qos = 10\n'
    )
    spec = ClusterSpec(
        name=f"shared-{TAG}",
        reference_speed=1.0,
        machines=(Machine(id=f"m-{TAG}", cpus=2),),
    )
    cluster = LocalCluster(
        spec,
        run_dir / "run",
        broker="mosquitto",
        root=f"shared-{TAG}/v3",
        auth=True,
        users=("alice", "bob"),
        heartbeat=0.5,
        sharing=Sharing(limits, assoc),
    )
    with cluster:

        async def fill() -> None:
            async with cluster.connect() as admin:
                await cluster.ready(admin, timeout=60.0)
                blocker = job_spec(job_id=f"blocker-{TAG}", procs=2, walltime=86400.0)
                reply = await admin.submit([blocker])
                assert reply.results[0].accepted, reply

        run_async(fill())
        yield cluster


def as_user(cluster: LocalCluster, login: str) -> AbstractAsyncContextManager[LiveClient]:
    return connect(
        cluster.broker_url, cluster.root, credentials=cluster.credentials(login), timeout=20.0
    )


def cli(cluster: LocalCluster, login: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``accordion ARGS`` as a child process logged in as ``login``."""
    assert cluster.auth_files is not None
    env = {
        **os.environ,
        "ACCORDION_BROKER": cluster.broker_url,
        "ACCORDION_ROOT": cluster.root,
        "ACCORDION_MQTT_USERNAME": login,
        "ACCORDION_MQTT_PASSWORD_FILE": str(cluster.auth_files.secret_of(login)),
    }
    return subprocess.run(
        [ACCORDION, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def scraped(cluster: LocalCluster, name: str) -> float:
    with urllib.request.urlopen(cluster.scheduler_metrics, timeout=10) as response:
        text = response.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def long_ids(prefix: str, n: int) -> list[JobSpec]:
    """``n`` one-CPU jobs of alice with 128-character ids."""
    return [
        job_spec(job_id=f"{prefix}-{i:05}-".ljust(128, "x"), procs=1, walltime=600.0)
        for i in range(n)
    ]


def test_one_users_flood_denies_status_to_no_one(shared: LocalCluster) -> None:
    jobs = long_ids(f"flood-{TAG}", QUEUED_LIMIT)

    async def flood() -> None:
        async with as_user(shared, "alice") as alice:
            for i in range(0, len(jobs), 3000):
                reply = await alice.submit(jobs[i : i + 3000])
                assert all(r.accepted for r in reply.results)
            extra = await alice.submit(long_ids(f"extra-{TAG}", 1))
            result = extra.results[0]
            assert result.code is Rejection.QUEUE_LIMIT
            assert f"max_queued_per_user) is {QUEUED_LIMIT:,}" in (result.reason or "")
            # Her own status, page by page: each under the bound, all of them over it.
            sizes, seen, cursor = [], 0, None
            while True:
                page = await alice.status(user="alice", cursor=cursor, machines=False)
                sizes.append(len(encode(page)))
                seen += len(page.queue)
                assert page.totals.queued == QUEUED_LIMIT
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            assert seen == QUEUED_LIMIT
            assert max(sizes) <= MAX_REPLY_BYTES < sum(sizes)
            # What a replay asks: its own jobs, totals first.
            assert await alice.live_ids([j.id for j in jobs]) == {j.id for j in jobs}

    run_async(flood())
    # bob's status, as a user runs it: one page, the totals, and no wait.
    bob = cli(shared, "bob", "status", "--limit", "5")
    assert bob.returncode == 0, bob.stderr
    # Rich wraps a table's title to the table's width: read the words.
    # Five rows: the admin's running job, then the first four queued.
    assert f"queue: {QUEUED_LIMIT:,} jobs; 4 on this page" in " ".join(bob.stdout.split())
    assert "more: the same command with --cursor" in bob.stdout
    mine = cli(shared, "bob", "status", "--me")
    assert mine.returncode == 0, mine.stderr
    assert "queue of bob: 0 jobs" in " ".join(mine.stdout.split())
    # A restarted scheduler (what restarting `accordion up` on this run directory does)
    # reloads her 6,000 jobs, and the readiness check does not walk them.
    scheduler = next(c for c in shared.children() if c.role == "scheduler")
    scheduler.terminate()
    scheduler.finish(10.0)
    scheduler.restart()

    async def ready_again() -> None:
        async with shared.connect() as admin:
            machines = await shared.ready(admin, timeout=60.0)
            assert [m.online for m in machines] == [True]
            page = await admin.status(user="alice", limit=0)
            assert page.totals.queued == QUEUED_LIMIT

    run_async(ready_again())
    # One request clears her queue, and leaves bob's and the admin's jobs alone.
    cancel = cli(shared, "alice", "cancel", f"flood-{TAG}-*", "--state", "queued")
    assert cancel.returncode == 0, cancel.stderr
    assert f"cancelled {QUEUED_LIMIT:,} jobs" in cancel.stdout
    theirs = cli(shared, "alice", "cancel", f"blocker-{TAG}")
    assert theirs.returncode == 1  # another user's job: answered as unknown
    assert "Traceback" not in theirs.stderr

    async def after() -> None:
        async with as_user(shared, "alice") as alice:
            page = await alice.status(user="alice")
            assert (page.totals.queued, page.totals.running) == (0, 0)
            left = await alice.live_ids([j.id for j in jobs[:10]])
            assert left == set()

    run_async(after())


def test_the_broker_cuts_off_huge_publishes_and_no_agent_turns_suspect(
    shared: LocalCluster,
) -> None:
    assert shared.auth_files is not None
    host, _, port = shared.broker_url.removeprefix("mqtt://").rpartition(":")
    secret = read_secret(shared.auth_files.secret_of("alice~2"))
    topic = Topics(shared.root).user_requests("alice")
    suspect = scraped(shared, "accordion_scheduler_agents_suspect_total")
    bad = scraped(shared, "accordion_scheduler_bad_messages_total")
    for i in range(12):
        raw = publish_raw(
            host,
            int(port),
            topic,
            200_000_000,
            client_id="alice~2",
            username="alice~2",
            password=secret,
        )
        assert raw.cut_off, i
        assert raw.sent < 200_000_000

    async def still_served() -> None:
        async with as_user(shared, "bob") as bob:
            machines = await bob.machines()
            assert [m.online for m in machines] == [True]

    run_async(still_served())
    assert scraped(shared, "accordion_scheduler_agents_suspect_total") == suspect
    # Nothing of them reached the scheduler: not even as a bad message.
    assert scraped(shared, "accordion_scheduler_bad_messages_total") == bad


def test_a_16_mb_request_is_answered_and_a_larger_one_refused_at_once(
    shared: LocalCluster,
) -> None:
    jobs = long_ids(f"big-{TAG}", 57_000)
    size = len(encode(SubmitJobs(request_id="x" * 32, reply_to="y" * 30, jobs=tuple(jobs))))
    assert 16_000_000 <= size <= MAX_MESSAGE_BYTES

    async def ask() -> None:
        async with as_user(shared, "alice") as alice:
            with pytest.raises(RefusedError) as caught:
                await alice.submit(jobs)
            assert caught.value.code == BadMessage.TOO_MANY.value
            assert "57,000 jobs" in str(caught.value)
            assert "max_jobs_per_request" in str(caught.value)
            more = long_ids(f"bigger-{TAG}", 90_000)
            with pytest.raises(MessageTooLargeError, match="message_size_limit"):
                await alice.submit(more)
            page = await alice.status(user="alice")
            assert page.totals.queued == 0  # nothing of either was queued

    run_async(ask())


def test_alice_cannot_charge_bobs_account_or_raise_her_qos(shared: LocalCluster) -> None:
    theirs = cli(shared, "alice", "submit", "-A", "biology", "-t", "60", "--id", f"a1-{TAG}")
    assert theirs.returncode == 1
    assert "may not charge account 'biology'" in theirs.stderr
    assert len(theirs.stderr.strip().splitlines()) == 1
    faster = cli(shared, "alice", "submit", "-q", "1000000", "-t", "60", "--id", f"a2-{TAG}")
    assert faster.returncode == 1
    assert "QoS up to 10, not 1000000" in faster.stderr

    async def admin_may() -> None:
        async with shared.connect() as admin:
            spec = job_spec(
                job_id=f"a3-{TAG}", procs=1, walltime=60.0, user="alice", account="biology", qos=99
            )
            reply = await admin.submit([spec])
            assert reply.results[0].accepted, reply
            done = await admin.cancel_jobs([f"a3-{TAG}"], states=(JobState.QUEUED,))
            assert done.cancelled == 1

    run_async(admin_may())
    own = cli(shared, "alice", "submit", "-t", "60", "--id", f"a4-{TAG}", "--parsable")
    assert own.returncode == 0, own.stderr

    async def charged() -> None:
        async with shared.connect() as admin:
            page = await admin.status(ids=[f"a4-{TAG}"])
            assert [j.user for j in page.queue] == ["alice"]
            assert (await admin.cancel_jobs([f"a4-{TAG}"])).cancelled == 1

    run_async(charged())


def test_a_whole_trace_of_requests_is_not_held_by_the_status_of_a_long_queue(
    shared: LocalCluster, tmp_path: Path
) -> None:
    """``accordion replay`` (as bob) reads machines a page at a time and sends its jobs."""
    trace = tmp_path / "t.swf"
    trace.write_text(
        "; MaxProcs: 2\n"
        + "".join(f"{i + 1} {i * 10} 0 30 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n" for i in range(5))
    )
    out = cli(
        shared,
        "bob",
        "replay",
        str(trace),
        "--time-scale",
        "100",
        "--no-progress",
        "--id-prefix",
        f"rp-{TAG}-",
    )
    assert out.returncode == 0, out.stderr
    assert "5 accepted" in out.stdout

    async def clean() -> None:
        async with shared.connect() as admin:
            assert (await admin.cancel_jobs(patterns=[f"rp-{TAG}-*"])).cancelled == 5

    run_async(clean())
