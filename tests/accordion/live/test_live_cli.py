"""The live CLI against a real scheduler and two agents (speeds 1 and 2) on Mosquitto.

The cluster (``live_cluster``, time scale 10) runs as subprocesses for the
whole module; every test leaves it idle (nothing queued or running).
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accordion.cli import app
from accordion.cluster.local_cluster import LocalCluster
from broker.local import free_port
from scheduler.core.job_lifecycle import JobState
from scheduler.runtime.journal import Journal
from tests.accordion.live.cli_harness import cli, runner, status_of, wait_until, watching
from tests.accordion.live.conftest import local_cluster
from tests.integration.conftest import BrokerEndpoint
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec, generate, header

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def idle(live_cluster: LocalCluster) -> Iterator[None]:
    """Each test starts and ends on an idle cluster."""
    yield
    status = status_of(live_cluster)
    for job in (*status.queue, *status.running):
        cli(live_cluster, "cancel", job.id)
    wait_until(lambda: not status_of(live_cluster).running)


def test_submit_prints_the_job_id(live_cluster: LocalCluster) -> None:
    result = cli(live_cluster, "submit", "-n", "1", "-t", "0:30", "--id", "first")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "submitted job first"
    parsable = cli(live_cluster, "submit", "-n", "1", "-t", "30", "--parsable")
    assert parsable.exit_code == 0, parsable.output
    assert uuid.UUID(parsable.stdout.strip())  # the default id is a fresh uuid


def test_a_rejection_is_printed_with_its_reason(live_cluster: LocalCluster) -> None:
    result = cli(live_cluster, "submit", "-n", "100", "-t", "60", "--id", "too-wide")
    assert result.exit_code == 1
    assert "job too-wide rejected" in result.stderr
    assert "needs 100 CPUs" in result.stderr
    assert "the cluster as configured has 6" in result.stderr
    assert result.stdout == ""


def test_a_duplicate_submission_makes_one_job(live_cluster: LocalCluster) -> None:
    args = ("submit", "-n", "1", "-t", "1:00:00", "-u", "ann", "-A", "physics", "--id", "dup")
    first = cli(live_cluster, *args)
    again = cli(live_cluster, *args)
    assert first.exit_code == again.exit_code == 0, again.output
    assert again.stdout.strip() == "job dup was already submitted; nothing changed"
    status = status_of(live_cluster)
    assert [j.id for j in (*status.queue, *status.running)].count("dup") == 1
    other = cli(live_cluster, "submit", "-n", "2", "-t", "1:00:00", "--id", "dup")
    assert other.exit_code == 1
    assert "already used by a different job" in other.stderr


def test_status_lists_machines_queue_and_running_jobs(live_cluster: LocalCluster) -> None:
    # The whole cluster for an hour of cluster time (6 minutes wall), then one more job.
    assert cli(live_cluster, "submit", "-n", "6", "-t", "3600", "--id", "big").exit_code == 0
    assert cli(live_cluster, "submit", "-n", "1", "-t", "60", "--id", "waits").exit_code == 0
    wait_until(lambda: [j.id for j in status_of(live_cluster).running] == ["big"])
    result = cli(live_cluster, "status")
    assert result.exit_code == 0, result.output
    text = result.stdout
    slow, fast = (m.id for m in live_cluster.spec.machines)
    assert "machines: 2 of 2 online, 0 of 6 CPUs free" in text
    for machine in (slow, fast):
        assert machine in text
    assert "queue: 1 jobs" in text
    assert "waits" in text
    assert "running: 1 jobs" in text
    assert f"{fast}:2" in text
    assert f"{slow}:4" in text


def test_cancel(live_cluster: LocalCluster) -> None:
    assert cli(live_cluster, "submit", "-n", "1", "-t", "3600", "--id", "c1").exit_code == 0
    result = cli(live_cluster, "cancel", "c1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "cancelled job c1"
    again = cli(live_cluster, "cancel", "c1")
    assert again.exit_code == 0
    assert "already cancelled" in again.stdout
    unknown = cli(live_cluster, "cancel", "no-such-job")
    assert unknown.exit_code == 1
    assert "cannot cancel job no-such-job: no job 'no-such-job'" in unknown.stderr


def _journal_times(cluster: LocalCluster, job_id: str) -> tuple[float, float]:
    # Through its reader API, while the scheduler is still writing (WAL lets readers in).
    with Journal(cluster.journal) as journal:
        row = journal.job(job_id)
    assert row is not None
    assert row.state is JobState.FINISHED
    assert row.start is not None
    assert row.end is not None
    return row.start, row.end


def test_run_times_follow_the_execution_model(live_cluster: LocalCluster) -> None:
    """20 units on the speed-2 machine and 10 on the speed-1 one, at time scale 10: 1 s each.

    The journal's start is the scheduler's decision and its end the moment the
    scheduler handled PartFinished; the agent counts the work from just before it
    spawns the process. So the measured run is the model's plus message latency
    and the process's exit (tens of milliseconds here; the interpreter's start-up,
    about 0.4 s, is hidden inside the 1 s run). Tolerance: -0.02 s to +0.3 s wall.
    """
    for args in (
        ("-n", "2", "-t", "60", "--work", "20", "--id", "on-fast"),
        ("-n", "4", "-t", "60", "--work", "10", "--id", "on-slow"),
    ):
        assert cli(live_cluster, "submit", *args).exit_code == 0
    wait_until(lambda: not status_of(live_cluster).running, timeout=30)
    slow, fast = (m.id for m in live_cluster.spec.machines)
    scale = live_cluster.time_scale
    for job_id, machine in (("on-fast", fast), ("on-slow", slow)):
        start, end = _journal_times(live_cluster, job_id)
        wall = (end - start) / scale
        assert 0.98 <= wall <= 1.3, f"{job_id} on {machine}: {wall:.3f} s wall"


def test_metrics_endpoints_serve_prometheus_text(live_cluster: LocalCluster) -> None:
    def families(url: str) -> set[str]:
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain")
            text = response.read().decode()
        return {f.name for f in text_string_to_metric_families(text)}

    scheduler = families(live_cluster.scheduler_metrics)
    assert {
        "accordion_scheduler_queued_jobs",
        "accordion_scheduler_running_jobs",
        "accordion_scheduler_machines_online",
        "accordion_scheduler_time_scale",
        "accordion_scheduler_submissions",
        "accordion_scheduler_jobs_finished",
        "accordion_scheduler_decision_wall_seconds",
    } <= scheduler
    for url in live_cluster.agent_metrics.values():
        assert {
            "accordion_agent_cpus",
            "accordion_agent_cpus_busy",
            "accordion_agent_parts_running",
            "accordion_agent_parts_started",
            "accordion_agent_parts_finished",
            "accordion_agent_heartbeats",
        } <= families(url)


def test_watch_prints_events_as_they_happen(live_cluster: LocalCluster) -> None:
    with watching(live_cluster, events=2, seconds=60) as watcher:
        submitted = cli(live_cluster, "submit", "-n", "1", "-t", "10", "--id", "watched")
        assert submitted.exit_code == 0
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    lines = [line for line in out.splitlines() if "job watched" in line]
    assert "running" in lines[0]
    assert "finished" in lines[1]


def test_replay_finishes_every_job(mosquitto: BrokerEndpoint, tmp_path: Path) -> None:
    trace = tmp_path / "small.swf"
    spec = SyntheticSpec(jobs=20, cpus=6, load=0.9, min_runtime=20, max_runtime=100, seed=3)
    write_swf(trace, generate(spec), header=header(spec))
    with local_cluster(mosquitto, tmp_path / "run", time_scale=100.0) as cluster:
        result = cli(
            cluster,
            "replay",
            str(trace),
            "--time-scale",
            "100",
            "--wait",
            "--id-prefix",
            "t1-",
            "--no-progress",
        )
        assert result.exit_code == 0, result.output
        assert "20 accepted" in result.stdout
        # Ends come from JobEvents, or ("left") from StatusReply when an event was missed.
        assert "ended: " in result.stdout
        assert "not ended" not in result.stdout
        status = status_of(cluster)
        assert not status.queue
        assert not status.running
        # Every one of them really finished, as the journal says.
        with Journal(cluster.journal) as journal:
            states = Counter(job.state.value for job in journal.load().jobs)
        assert states == {"finished": 20}
        # Replaying again with the same prefix is idempotent.
        again = cli(cluster, "replay", str(trace), "--time-scale", "1000", "--id-prefix", "t1-")
        assert again.exit_code == 0, again.output
        assert "20 accepted (20 already submitted)" in again.stdout


def test_unreachable_brokers_and_silent_schedulers_are_user_errors(
    mosquitto: BrokerEndpoint,
) -> None:
    nobody = f"mqtt://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["status", "--broker", nobody])
    assert result.exit_code == 2
    assert "error:" in result.stderr
    assert "cannot connect" in result.stderr
    silent = runner.invoke(
        app, ["status", "--broker", mosquitto.url, "--root", "nobody-here/v1", "--timeout", "0.5"]
    )
    assert silent.exit_code == 2
    assert "no reply from the scheduler in 0.5 s" in silent.stderr
    assert len(silent.stderr.strip().splitlines()) == 1
    bad = runner.invoke(app, ["submit", "--broker", "http://x", "-t", "10"])
    assert bad.exit_code == 2
    assert "expected mqtt://host[:port]" in bad.stderr
    duration = runner.invoke(app, ["submit", "--broker", nobody, "-t", "ten"])
    assert duration.exit_code == 2
    assert "--walltime 'ten'" in duration.stderr


def test_scheduler_and_agent_commands_wrap_the_modules(
    mosquitto: BrokerEndpoint, tmp_path: Path
) -> None:
    help_text = runner.invoke(app, ["agent", "--help"])
    assert help_text.exit_code == 0
    assert "--cpus" in help_text.stdout  # python -m nodeagent's own options
    assert "--broker mqtt://HOST[:PORT]" in help_text.stderr
    clash = runner.invoke(app, ["scheduler", "--host", "x"])
    assert clash.exit_code == 2
    assert "use --broker" in clash.stderr

    tag = uuid.uuid4().hex[:6]
    root = f"wrap-{tag}/v1"
    base = [sys.executable, "-c", "from accordion.cli import main; main()"]
    env_args = ["--broker", mosquitto.url, "--root", root]
    scheduler = subprocess.Popen(
        [*base, "scheduler", *env_args, "--journal", str(tmp_path / "j.sqlite"), "--policy", "fcfs"]
    )
    agent = subprocess.Popen(
        [*base, "agent", *env_args, "--name", f"w-{tag}", "--cpus", "3", "--speed", "1.5"]
    )
    try:

        def online() -> bool:
            result = runner.invoke(app, ["status", *env_args, "--timeout", "1"])
            return (
                result.exit_code == 0
                and f"w-{tag}" in result.stdout
                and "online" in (result.stdout)
            )

        wait_until(online, timeout=30)
    finally:
        for process in (agent, scheduler):
            process.terminate()
            assert process.wait(20) == 0


def test_an_mpi_like_job_runs_end_to_end(live_cluster: LocalCluster) -> None:
    args = ("-n", "2", "-t", "600", "--workload", "mpi", "--iterations", "4")
    result = cli(live_cluster, "submit", *args, "--compute", "0.05", "--id", "mpi-e2e")
    assert result.exit_code == 0, result.output

    def ended() -> bool:
        status = status_of(live_cluster)
        return all(j.id != "mpi-e2e" for j in (*status.queue, *status.running))

    wait_until(ended, timeout=60)
    _journal_times(live_cluster, "mpi-e2e")  # asserts it finished


def test_malformed_mpi_parameters_are_one_line_errors() -> None:
    nobody = f"mqtt://127.0.0.1:{free_port()}"  # refused before any connection
    for flags, why in (
        (("--workload", "mpi", "--iterations", "0"), "mpi.iterations"),
        (("--workload", "mpi", "--compute", "nan"), "--compute must be a finite"),
        (("--workload", "mpi", "--compute", "1e9"), "mpi.compute"),
        (("--workload", "mpi", "--message-bytes", "-1"), "mpi.message_bytes"),
        (("--iterations", "3"), "--iterations: only for --workload mpi"),
    ):
        result = runner.invoke(app, ["submit", "--broker", nobody, "-t", "10", *flags])
        assert result.exit_code == 2, (flags, result.output)
        assert why in result.stderr, (flags, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    bad_pattern = runner.invoke(
        app, ["submit", "--broker", nobody, "--workload", "mpi", "--pattern", "gather"]
    )
    assert bad_pattern.exit_code == 2


def test_status_priority_and_whatif_explain_the_queue(live_cluster: LocalCluster) -> None:
    # The whole cluster for an hour, then a job that waits for it and one behind that.
    assert cli(live_cluster, "submit", "-n", "6", "-t", "3600", "--id", "hour").exit_code == 0
    for job_id, procs in (("next", "6"), ("tiny", "1")):
        assert cli(live_cluster, "submit", "-n", procs, "-t", "60", "--id", job_id).exit_code == 0
    wait_until(lambda: [j.id for j in status_of(live_cluster).running] == ["hour"])
    # Predictions come from the scheduler's periodic pass: wait for one.
    wait_until(lambda: all(j.predicted_start is not None for j in status_of(live_cluster).queue))
    status = status_of(live_cluster)
    rows = {j.id: j for j in status.queue}
    (hour,) = status.running
    assert hour.start is not None
    assert rows["next"].predicted_start == pytest.approx(hour.start + 3600.0)
    assert rows["next"].reason == "resources"
    assert rows["tiny"].reason == "priority"
    assert rows["tiny"].reason_detail == "behind 1 higher-priority job"
    shown = cli(live_cluster, "status")
    assert shown.exit_code == 0, shown.output
    assert "predicted start" in shown.stdout
    assert "resources: its reservation at" in shown.stdout
    assert "priority: behind 1 higher-priority job" in shown.stdout
    ranked = cli(live_cluster, "priority")
    assert ranked.exit_code == 0, ranked.output
    assert "queue by priority: 2 jobs, policy easy, priority fifo" in ranked.stdout
    assert "the order is the priority" in ranked.stdout
    what = cli(live_cluster, "whatif", "--policies", "easy,conservative,fcfs")
    assert what.exit_code == 0, what.output
    for text in ("mean predicted wait (s)", "easy (live)", "conservative", "fcfs", "next"):
        assert text in what.stdout
    # The twin's replay under the live policy predicts what the scheduler does.
    assert f"{rows['next'].predicted_start:,.1f}" in what.stdout
    bad = cli(live_cluster, "whatif", "--policies", "easy,nope")
    assert bad.exit_code == 2
    assert "unknown policy 'nope'" in bad.output
