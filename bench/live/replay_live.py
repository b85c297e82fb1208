"""Benchmark: a compressed trace replayed live, against the twin on the same jobs.

Run on demand (not a test): ``.venv/bin/python -m bench.live.replay_live``. It is
``accordion simulate TRACE --jobs N`` beside ``accordion replay TRACE --jobs N
--time-scale K`` on the same cluster (the trace header's one machine: KTH-SP2
has one 100-CPU machine), under the same policy:

1. the twin runs the jobs (``accordion.experiments.runs.run_policy``);
2. ``accordion up``'s processes (Mosquitto, ``python -m scheduler``, one
   ``python -m nodeagent``) start in a fresh run directory, and the jobs are
   replayed at time scale K until every one has ended
   (``accordion.client.replay.replay_and_follow``, what ``accordion replay --wait``
   runs);
3. the stopped scheduler's journal gives the live schedule
   (``accordion.experiments.demo.outcomes_from_journal``).

It prints mean wait, mean response and mean bounded slowdown of both runs and
their differences (the target: within 5 %), and how much each job's run was
stretched live (its run time live minus in the twin, cluster seconds; a
median of 117 before the agents launched from a warm fork server), and
the agent's launch latency histogram (``accordion_agent_launch_seconds``).

The journal dates a live run by its agents' measurements (``scheduler.live.agents``,
"Run dating"): from the decision plus the part's launch latency, for the run
its agent measured (the fork to the end of its work). So a stretch left here
is the sleep workload's own (a resize's timing, a job whose account ran
late), and the differences in wait are the live path's: launch latency, and
the scheduler hearing of an end later than it happened before it starts the
next job.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from accordion.client.live_client import connect
from accordion.client.replay import arrivals, replay_and_follow
from accordion.cluster.local_cluster import LocalCluster, scrape
from accordion.experiments.demo import difference, live_time_base, outcomes_from_journal
from accordion.experiments.runs import load_workload, run_policy
from model.metrics import compute_metrics
from workload.cluster import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]

PWA = ROOT.parent / "shared" / "workloads" / "pwa"
KTH = PWA / "KTH-SP2-1996-2.1-cln.swf.gz"
PREFIX = "r-"
ROWS = (
    ("mean wait", "wait_mean"),
    ("mean response", "response_mean"),
    ("mean bounded slowdown", "bounded_slowdown_mean"),
    ("mean run", "run_mean"),
    ("makespan", "makespan"),
)


def launch_histogram(text: str) -> tuple[int, float, list[tuple[float, float]]]:
    """(count, sum, [(le, cumulative count)]) of ``accordion_agent_launch_seconds``."""
    count, total, buckets = 0, 0.0, []
    for family in text_string_to_metric_families(text):
        if family.name != "accordion_agent_launch_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                count = int(sample.value)
            elif sample.name.endswith("_sum"):
                total = sample.value
    return count, total, sorted(buckets)


async def follow(local: LocalCluster, plan: list, time_scale: float, timeout: float) -> int:  # type: ignore[type-arg]
    async with connect(local.broker_url, local.root, timeout=10.0, watch=True) as client:
        await local.ready(client)
        async with asyncio.timeout(timeout):
            state = await replay_and_follow(client, plan, time_scale=time_scale)
    return state.finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=KTH)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--time-scale", type=float, default=1000.0)
    parser.add_argument("--policy", default="easy")
    parser.add_argument("--broker-kind", default="auto", choices=["auto", "mosquitto", "embedded"])
    args = parser.parse_args()

    workload = load_workload(args.trace, cluster=None, jobs=args.jobs)
    twin_run = run_policy(workload, args.policy)
    twin = twin_run.metrics
    spec = ClusterSpec(name=workload.name, reference_speed=1.0, machines=workload.machines)
    cpus = sum(m.cpus for m in workload.machines)
    print(
        f"{workload.name}: first {len(workload.jobs)} jobs, {len(workload.machines)} machine(s) "
        f"of {cpus} CPUs, policy {args.policy}, time scale {args.time_scale:g}; the twin's "
        f"makespan {twin.makespan:,.0f} s is {twin.makespan / args.time_scale:.0f} s of wall time"
    )
    with tempfile.TemporaryDirectory(prefix="accordion-replay-live-") as tmp:
        local = LocalCluster(
            spec,
            Path(tmp),
            policy=args.policy,
            time_scale=args.time_scale,
            broker=args.broker_kind,
        )
        t0 = time.monotonic()
        with local:
            timeout = 120.0 + 5 * twin.makespan / args.time_scale
            finished = asyncio.run(
                follow(local, arrivals(workload.jobs, prefix=PREFIX), args.time_scale, timeout)
            )
            agent_text = scrape(next(iter(local.agent_metrics.values())))
            local.stop()
        wall = time.monotonic() - t0
        read = outcomes_from_journal(local.journal, spec.speeds)
    live = compute_metrics(
        read.outcomes, total_cpus=cpus, time_base=live_time_base(read.time_scale)
    )
    print(f"live: {finished} jobs ended in {wall:.0f} s wall; journal states {dict(read.states)}")
    print(f"{'':24} {'twin':>12} {'live':>12} {'difference':>11}")
    worst = 0.0
    for label, name in ROWS:
        t, v = getattr(twin, name), getattr(live, name)
        d = difference(v, t)
        shown = "n/a" if d is None else f"{100 * d:+.1f} %"
        if d is not None and name in ("wait_mean", "response_mean", "bounded_slowdown_mean"):
            worst = max(worst, abs(d))
        print(f"{label:24} {t:12,.1f} {v:12,.1f} {shown:>11}")
    twin_runs = {o.job.id: o.end - o.start for o in twin_run.result.outcomes}
    stretch = sorted(
        (o.end - o.start) - twin_runs[o.job.id.removeprefix(PREFIX)]
        for o in read.outcomes
        if o.job.id.removeprefix(PREFIX) in twin_runs
    )
    if stretch:
        print(
            f"run stretched live (cluster s): median {statistics.median(stretch):+.1f}, "
            f"p95 {stretch[int(0.95 * (len(stretch) - 1))]:+.1f}, max {stretch[-1]:+.1f}, "
            f"min {stretch[0]:+.1f}"
        )
    count, total, buckets = launch_histogram(agent_text)
    if count:
        p50 = next(le for le, n in buckets if n >= 0.5 * count)
        p99 = next(le for le, n in buckets if n >= 0.99 * count)
        print(
            f"launch latency (accordion_agent_launch_seconds): {count} launches, "
            f"mean {1000 * total / count:.1f} ms, p50 <= {1000 * p50:g} ms, "
            f"p99 <= {1000 * p99:g} ms"
        )
    verdict = "met" if worst <= 0.05 else "missed"
    print(
        f"target: wait, response and bounded slowdown within 5 % of the twin: {verdict} "
        f"(worst {100 * worst:.1f} %)"
    )


if __name__ == "__main__":
    main()
