"""The fault bench's "oversized message" row: what nothing bounded before (issue 19, finding 4).

While jobs run, a client that is not ours (``bench.faults.raw_mqtt``) publishes
twelve 200 MB messages on the scheduler's request topic; then a 16 MB request
goes out through our client, and one past 16 MiB is tried. Before the wire had
a bound, the twelve took the broker to 1.7 GB and the scheduler to 1.0 GB and
made every agent suspect again and again, and the 16 MB request got no
answer. Now the broker cuts each 200 MB publisher off once its header is
read (``max_packet_size``), the 16 MB request is answered (refused for its
jobs, ``too_many``), and the larger one is refused by the client before it
leaves. **effects** counts what went wrong: agents marked suspect, 200 MB
publishes the broker took whole, an unanswered 16 MB request, a larger one
sent; 0 is the target. **bad counted** is what reached the scheduler as a bad
message: the 16 MB request only (1).
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

from accordion.client.specs import job_spec
from accordion.cluster.local_cluster import LocalCluster
from accordion.errors import RefusedError
from bench.faults.cluster import Bench, Result, running_at_least, scrape_bad, wait_healthy
from bench.faults.raw_mqtt import publish_raw
from bench.faults.rows import row_baseline
from bench.faults.sampler import Sampler
from broker.bus import MessageTooLargeError
from broker.topics import Topics

HUGE = 200_000_000
PUBLISHES = 12


def _scrape(cluster: LocalCluster, name: str) -> float:
    with urllib.request.urlopen(cluster.scheduler_metrics, timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")
    )


async def row_oversized(
    bench: Bench, cluster: LocalCluster, sampler: Sampler, result: Result, tag: str
) -> set[str]:
    accepted = await row_baseline(bench, cluster, sampler, result, tag)
    await running_at_least(cluster, 5)
    suspect = _scrape(cluster, "accordion_scheduler_agents_suspect_total")
    bad = scrape_bad(cluster)
    host, _, port = cluster.broker_url.removeprefix("mqtt://").rpartition(":")
    topic = Topics(cluster.root).requests
    t0 = time.monotonic()
    taken = 0
    read = []
    for i in range(PUBLISHES):
        raw = await asyncio.to_thread(
            publish_raw, host, int(port), topic, HUGE, client_id=f"huge-{tag}-{i}"
        )
        taken += not raw.cut_off
        read.append(raw.sent)
    cut = time.monotonic() - t0
    # ~281 bytes a job: 57,000 jobs with 128-character ids are a 16 MB request.
    big = [
        job_spec(job_id=f"{tag}-big-{i:05}-".ljust(128, "x"), procs=1, walltime=60.0)
        for i in range(57_000)
    ]
    answered = sent_larger = False
    started = time.monotonic()
    async with cluster.connect(timeout=30.0) as client:
        try:
            await client.submit(big)
        except RefusedError as exc:
            answered = exc.code == "too_many"
        answer = time.monotonic() - started
        try:
            await client.submit([*big, *big[:9000]])
            sent_larger = True
        except MessageTooLargeError:
            pass
    result.recovery = await wait_healthy(cluster, t0)
    suspects = _scrape(cluster, "accordion_scheduler_agents_suspect_total") - suspect
    result.effects = int(suspects) + taken + (not answered) + sent_larger
    result.bad_counted = scrape_bad(cluster) - bad
    result.note = (
        f"{PUBLISHES} x 200 MB cut off after {max(read) / 1e6:.1f} MB at most, in {cut:.2f} s; "
        f"{int(suspects)} suspect; 16 MB request answered too_many in {answer:.2f} s; a 19 MB "
        f"one {'SENT' if sent_larger else 'refused by the client'}"
    )
    return accepted
