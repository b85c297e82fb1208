"""``accordion watch`` stopped while jobs run, its connection dropped: it catches up.

The issue's finding: a watch stopped for 60 s while 2,000 jobs ran printed 65
of their 4,000 events, recovered none and said nothing. Here a real ``accordion
watch`` process is stopped (SIGSTOP) while a real cluster (its own Mosquitto,
the scheduler, two agents) runs jobs to their end; then the broker is killed
and restarted by the supervisor, so the watcher's connection is gone and
nothing it missed will reach it on its own; then it is continued. It sees
that it reconnected, asks the scheduler for its stream after the last
number it printed, and prints every event the journal holds: the test counts
the events printed against the journal's, one for one.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from accordion.client.catch_up import CatchUp
from accordion.client.live_client import LiveClient, connect, run_async
from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from broker.codec import decode, encode
from broker.memory import MemoryBroker
from broker.messages import EventsReply, EventsRequest, JobEvent
from broker.topics import Topics
from broker.vocabulary import JobEventKind
from scheduler.runtime.journal import Journal
from tests.accordion.live.conftest import two_agents

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[3]
BOUND = 180.0
JOBS = 150
LINE = re.compile(r"^t=\S+\s+job (?P<job>\S+)\s+(?P<event>\w+)")


def _printed(out: Path) -> list[tuple[str, str]]:
    """(job, event) of every job event line the watcher printed."""
    found = []
    for line in out.read_text().splitlines():
        m = LINE.match(line)
        if m:
            found.append((m["job"], m["event"]))
    return found


def _journaled(journal: Path, jobs: list[str]) -> list[tuple[str, str]]:
    with Journal(journal) as j:
        return [(e.job_id, e.event.value) for e in j.job_events(jobs)]


def _until(check: object, cluster: LocalCluster, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out: {what}"
        cluster.supervise()
        time.sleep(0.05)


def test_a_stopped_watcher_that_lost_its_connection_prints_every_event(
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        two_agents(tag),
        tmp_path / "run",
        time_scale=100.0,
        broker="mosquitto",
        root=f"watch-{tag}/v3",
        heartbeat=0.5,
    )
    out, err = tmp_path / "watch.out", tmp_path / "watch.err"
    ids = [f"w{i}" for i in range(JOBS)]
    with cluster:

        async def ready() -> None:
            async with connect(cluster.broker_url, cluster.root, timeout=2.0) as client:
                await cluster.ready(client, timeout=60.0)

        run_async(ready())
        with out.open("w") as stdout, err.open("w") as stderr:
            watcher = subprocess.Popen(
                [sys.executable, "-c", "from accordion.cli import main; main()", "watch"],
                cwd=ROOT,
                env={
                    **os.environ,
                    "PYTHONPATH": str(ROOT),
                    "ACCORDION_BROKER": cluster.broker_url,
                    "ACCORDION_ROOT": cluster.root,
                    "COLUMNS": "200",
                },
                stdout=stdout,
                stderr=stderr,
            )
        try:
            # Subscribed: the retained cluster summary is its first line.
            _until(lambda: "cluster" in out.read_text(), cluster, "the watcher's first line")
            os.kill(watcher.pid, signal.SIGSTOP)

            async def submit() -> None:
                async with connect(cluster.broker_url, cluster.root, timeout=10.0) as client:
                    specs = [job_spec(job_id=i, procs=1, walltime=100.0, work=1.0) for i in ids]
                    reply = await client.submit(specs)
                    assert all(r.accepted for r in reply.results)

            run_async(submit())

            def ended() -> bool:
                with Journal(cluster.journal) as j:
                    return all(
                        (row := j.job(i)) is not None and row.state.value == "finished" for i in ids
                    )

            _until(ended, cluster, "every job finished")
            # The broker goes away and comes back: the stopped watcher's connection is
            # gone, and nothing published meanwhile will ever reach it by itself.
            broker = next(c for c in cluster.children() if c.role == "broker")
            os.kill(broker.pid, signal.SIGKILL)
            _until(lambda: broker.alive() and broker.restarts == 1, cluster, "broker restart")
            journaled = _journaled(cluster.journal, ids)
            assert len(journaled) == 2 * JOBS  # running and finished (job events "lifecycle")
            os.kill(watcher.pid, signal.SIGCONT)
            _until(
                lambda: len([p for p in _printed(out) if p[0] in ids]) >= len(journaled),
                cluster,
                "the watcher to catch up",
            )
        finally:
            watcher.send_signal(signal.SIGCONT)
            watcher.send_signal(signal.SIGINT)
            try:
                watcher.wait(30)
            except subprocess.TimeoutExpired:
                watcher.kill()
                watcher.wait()
    printed = [p for p in _printed(out) if p[0] in ids]
    # One for one: every journaled event printed, none twice.
    assert sorted(printed) == sorted(journaled)
    text = out.read_text()
    assert "(from the journal)" in text
    assert "Traceback" not in err.read_text()


def test_a_watcher_says_so_in_one_line_when_missed_events_cannot_be_had(
    tmp_path: Path,
) -> None:
    # A watcher whose scheduler does not answer its request for what it missed says
    # so, once, and goes on with what it hears.
    async def scenario() -> list[str]:
        broker = MemoryBroker()
        async with (
            broker.client("watcher") as bus,
            LiveClient(bus, Topics("t/v3"), timeout=0.2, watch=True) as client,
        ):
            catch_up = CatchUp(client, last=10)
            event = JobEvent(job_id="j", event=JobEventKind.QUEUED, at=0.0, seq=1, stream=15)
            shown = await catch_up.take(event)
            assert [s.event.stream for s in shown] == [15]  # printed, after the attempt
            return catch_up.warnings

    warnings = asyncio.run(scenario())
    assert len(warnings) == 1
    assert "events after #10 were missed" in warnings[0]
    assert "no reply from the scheduler" in warnings[0]


def test_a_watcher_that_reconnected_asks_again_until_the_scheduler_answers() -> None:
    # After a broker restart the scheduler reconnects too: a watcher's first request
    # may reach nobody. It says so once, asks again at its next wake, and catches up.
    async def scenario() -> tuple[list[str], list[tuple[int | None, bool]], list[str]]:
        broker = MemoryBroker()
        topics = Topics("t/v3")
        async with (
            broker.client("watcher") as bus,
            LiveClient(bus, topics, timeout=0.2, watch=True) as client,
        ):
            catch_up = CatchUp(client, last=2)
            client.reconnected()
            assert await catch_up.take(None) == []  # nobody answers yet
            assert await catch_up.take(None) == []  # asked again, not said again
            said = list(catch_up.warnings)
            async with broker.client("scheduler") as scheduler:
                await scheduler.subscribe(topics.requests)

                async def answer() -> None:
                    async for delivery in scheduler.deliveries():
                        request = decode(delivery.payload)
                        assert isinstance(request, EventsRequest)
                        events = tuple(
                            JobEvent(job_id="j", event=kind, at=float(n), seq=n - 2, stream=n)
                            for n, kind in ((3, JobEventKind.QUEUED), (4, JobEventKind.RUNNING))
                            if n > request.after
                        )
                        reply = EventsReply(request_id=request.request_id, events=events, last=4)
                        await scheduler.publish(topics.replies(request.reply_to), encode(reply))

                responder = asyncio.create_task(answer())
                try:
                    shown = await catch_up.take(None)
                finally:
                    responder.cancel()
            return said, [(s.event.stream, s.recovered) for s in shown], catch_up.warnings

    said, shown, warnings = asyncio.run(scenario())
    assert len(said) == 1
    assert "could not be asked for yet" in said[0]
    assert "asking again" in said[0]
    assert shown == [(3, True), (4, True)]
    assert warnings[1:] == [
        "the events missed (the connection was made again) were asked for again: caught up"
    ]
