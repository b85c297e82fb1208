"""``accordion ui`` in a real browser against a live local cluster, forged events and all.

The page is served by ``accordion ui`` as a user starts it (a subprocess on
a free port), loaded in headless Chromium, and must show a job submitted
after it loaded: running with its CPUs and MPL, waiting in the queue with
its state and predicted start (the predicted start is a dash until the
scheduler sends one), and drawn in the Gantt chart. On the way, junk bytes
and forged job events are published on the events topic (a broker without
logins lets anyone): the page must drop the forged ones, count them, and
lose none of the real jobs. The screenshot is left in ``test-artifacts/``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from accordion.client.live_client import run_async
from accordion.cluster.local_cluster import LocalCluster
from broker.codec import encode
from broker.messages import JobEvent, PartSpec
from broker.mqtt import MqttBus, MqttSettings
from broker.vocabulary import JobEventKind
from tests.accordion.live.cli_harness import cli, status_of, wait_until
from tests.browser import ARTIFACTS, chromium

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def beside(call: Callable[[], T]) -> T:
    """``call()`` in another thread: Playwright's sync API owns this thread's event loop,
    and the client (the CLI's ``run_async``) needs one of its own."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@pytest.fixture
def ui(live_cluster: LocalCluster) -> Iterator[str]:
    """``accordion ui`` on a free port; yields its URL; stopped by Ctrl-C (SIGINT)."""
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from accordion.cli import main; main()",
            "ui",
            "--port",
            "0",
            "--refresh",
            "1",
            "--broker",
            live_cluster.broker_url,
            "--root",
            live_cluster.root,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once it listens ('' if it died)
        try:
            assert line.startswith("serving http://"), line
            yield line.split()[1]
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
        # Ctrl-C is how it ends: cleanly, and without a traceback.
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err


def forge(cluster: LocalCluster, real_job: str) -> int:
    """Junk and forged events on the cluster's events topic; how many were forged events."""
    forged = [
        # A job that does not exist, on a machine that does not exist.
        JobEvent(
            job_id="ghost",
            seq=1,
            event=JobEventKind.RUNNING,
            at=1.0,
            parts=(PartSpec("nowhere", 4096),),
        ),
        # A real job's event far ahead of its sequence, saying it finished.
        JobEvent(job_id=real_job, seq=999, event=JobEventKind.FINISHED, at=2.0),
    ]

    async def publish() -> None:
        settings = MqttSettings.from_url(cluster.broker_url)
        async with MqttBus(settings, f"forger-{uuid.uuid4().hex[:8]}") as bus:
            topic = f"{cluster.root}/events"
            await bus.publish(topic, b"\x00not msgpack", qos=1)
            await bus.publish(
                topic,
                encode(JobEvent(job_id="-", event=JobEventKind.QUEUED, at=0.0, seq=1)) + b"junk",
                qos=1,
            )
            for event in forged:
                await bus.publish(topic, encode(event), qos=1)

    run_async(publish())
    return len(forged)


def test_the_page_shows_a_submitted_job_running_queued_and_in_the_chart(
    live_cluster: LocalCluster, ui: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    big, small = f"ui-big-{tag}", f"ui-small-{tag}"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(ui)
        page.wait_for_function(
            "document.querySelectorAll('#machines tbody tr').length === 2", timeout=30_000
        )
        # Fills every CPU for a while (600 cluster s at time scale 10), so the next waits.
        submitted = beside(
            lambda: cli(
                live_cluster, "submit", "--id", big, "-n", "6", "-t", "900", "--work", "600"
            )
        )
        assert submitted.exit_code == 0, submitted.output
        submitted = beside(
            lambda: cli(
                live_cluster, "submit", "--id", small, "-n", "2", "-t", "60", "--work", "30"
            )
        )
        assert submitted.exit_code == 0, submitted.output
        try:
            page.wait_for_selector(f"#running tr[data-job='{big}']", timeout=30_000)
            page.wait_for_selector(f"#queue tr[data-job='{small}']", timeout=30_000)
            forged = beside(lambda: forge(live_cluster, big))
            # The page drops both forged events once the history has been asked.
            page.wait_for_function(
                f"document.getElementById('error').textContent.startsWith('{forged} job events')",
                timeout=30_000,
            )
            running = page.locator(f"#running tr[data-job='{big}'] td").all_inner_texts()
            queued = page.locator(f"#queue tr[data-job='{small}'] td").all_inner_texts()
            drawn = page.evaluate(
                """() => {
                    const doc = Bokeh.documents[Bokeh.documents.length - 1];
                    const jobs = doc.get_model_by_name("run").data.job;
                    const planned = doc.get_model_by_name("planned").data.job;
                    return [Array.from(jobs), Array.from(planned), doc.get_model_by_name("y").end];
                }"""
            )
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "ui.png"), full_page=True)
        finally:
            for job in (small, big):
                beside(lambda job=job: cli(live_cluster, "cancel", job))
    assert not errors
    # job, user, processes, CPUs, MPL, on, started, expected end
    assert running[0] == big
    assert running[2:5] == ["6", "6", "1.00"]
    # job, user, state, processes, submitted, wall time, predicted start, why it waits
    assert queued[0] == small
    assert queued[2:4] == ["queued", "2"]
    run_jobs, planned_jobs, rows = drawn
    assert big in run_jobs  # ran up to now ...
    assert big in planned_jobs  # ... and its estimated rest
    # Nothing of the forged job: no bar, and no band for its machine (4 + 2 CPUs only).
    assert "ghost" not in run_jobs
    assert rows == 6


def test_gantt_live_draws_a_running_job_with_its_planned_rest(
    live_cluster: LocalCluster, tmp_path: Path
) -> None:
    job = f"gantt-live-{uuid.uuid4().hex[:6]}"
    submitted = cli(live_cluster, "submit", "--id", job, "-n", "2", "-t", "900", "--work", "600")
    assert submitted.exit_code == 0, submitted.output
    try:
        wait_until(lambda: any(j.id == job for j in status_of(live_cluster).running))
        result = cli(live_cluster, "gantt", "--live", "--out", str(tmp_path / "now"))
        assert result.exit_code == 0, result.output
    finally:
        cli(live_cluster, "cancel", job)
    assert (tmp_path / "now.png").read_bytes()[:4] == b"\x89PNG"
    html = (tmp_path / "now.html").read_text()
    assert job in html
    assert html.count(job) >= 2  # a run bar and its planned rest, each in its data source
