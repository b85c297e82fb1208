"""Benchmark: the fault matrix of the live runtime: each fault injected, what was lost counted.

Run on demand (not a test): ``.venv/bin/python -m bench.faults [--rows a,b]``.
Each row starts a fresh local cluster (Mosquitto, the scheduler and three
agents as real processes, supervised and restarted as ``accordion up`` does),
submits a workload, injects one fault while jobs run, waits until every
accepted job has ended, and prints one line of the matrix:

- **accepted**: jobs the scheduler acknowledged (durable in its journal);
- **finished / failed / cancelled**: their final states, from the journal;
- **queued**: accepted jobs still queued or running when the bound ran out;
- **lost**: accepted jobs the journal does not hold in a final state at the end
  (must be 0: queued ones count here too);
- **requeued**: how many times jobs went back to the queue (each is a restart
  from zero of that job);
- **duplicated** and **overlapped**: jobs seen running two attempts at once.
  A sampler thread reads ``/proc`` every 20 ms for the job processes of this
  cluster (``bench/faults/sampler.py``). An overlap that lasted at most
  ``--overlap-allowance`` (0.25 s) is an old attempt leaving after its lease
  lapsed, which the README's fencing bound allows ("up to the exit of a
  process"): **overlapped**. Longer is a job run twice at once beyond the
  bound: **duplicated**, which must be 0. The note names each overlap, its
  length and the old attempt's lease age when it began;
- **recovery**: wall seconds from the fault until the scheduler answered again
  with every machine online (the "back within 5 s of the broker" target);
- **bad counted**: the scheduler's ``bad_messages_total`` delta, for the
  hostile-payload row;
- **effects**: for the rows with logins, what a forgery or a takeover did
  (must be 0).

- **adopted**: parts a restarted agent adopted (the journal's ``adopted``
  events): they went on, neither requeued nor run twice;

Rows: ``baseline`` (no fault), ``agent-kill`` (SIGKILL an agent that is not
restarted: its parts stop by their lease, and the scheduler requeues them
after its hold for adoption), ``agent-restart`` (SIGKILL an agent and restart
it at once for the same machine: it adopts its running parts),
``agent-freeze`` (SIGSTOP an agent past the scheduler's silence limit, then
SIGCONT), ``scheduler-kill`` (SIGKILL the scheduler during a burst of
``--burst`` single submissions; the client resends what was not answered, as
the idempotent protocol allows), ``broker-kill`` (SIGKILL Mosquitto; the
supervisor restarts it on its port), ``job-crash`` (SIGKILL one job process:
that job fails, nothing else), ``hostile`` (``--payloads`` random and mutated
payloads on every topic family; no process of ours may exit), and two rows
with logins and ACLs on (``accordion up --auth``): ``forged`` (a message of
each kind a user or an agent must not send, published by the user "mallory"
and by another agent, each
denied by the broker: an admin spy subscribed to the whole root sees none of
them, mallory's ``#`` reads nothing of alice's, no ghost machine joins, no
job of alice's is cancelled; **effects** counts what got through, 0 is the
target) and ``takeover`` (mallory connects with the scheduler's and an
agent's client ids and holds them while jobs run; **effects** counts the
victims' reconnections and restarts, 0 is the target), and ``oversized``
(issue 19's finding 4, ``bench/faults/size_rows.py``: twelve 200 MB publishes
by a client that is not ours, a 16 MB request and a larger one while jobs
run; **effects** counts suspect agents, publishes the broker took whole, an
unanswered 16 MB request and a larger one sent, 0 is the target). Four rows
are an operator's doing (``bench/faults/stop_rows.py``): ``agent-sigterm``,
``up-restarts``, ``duplicate-agent`` (with logins) and ``full-disk`` (the
journal on a small tmpfs, filled while jobs run: needs root); for them a
failed job or a **charged** requeue (one counted against the job's budget)
is a fault too.

The code: ``bench/faults/cluster.py`` (results, cluster, waits),
``sampler.py`` (``/proc``), ``rows.py``, ``trust_rows.py``, ``size_rows.py``
and ``stop_rows.py`` (the rows), ``disk.py`` (the tmpfs), ``table.py`` (the
printed matrix).

Everything runs on 127.0.0.1. Times are wall seconds; the cluster runs at
time scale ``--time-scale`` (cluster seconds per wall second).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from accordion.client.live_client import run_async  # noqa: E402
from accordion.cluster.local_cluster import LocalCluster  # noqa: E402
from bench.faults.cluster import (  # noqa: E402
    FORGING_AGENT,
    HEARTBEAT,
    Bench,
    Result,
    cluster_spec,
    tally,
    wait_drained,
)
from bench.faults.disk import DiskError, small_tmpfs  # noqa: E402
from bench.faults.rows import (  # noqa: E402
    row_agent_freeze,
    row_agent_kill,
    row_agent_restart,
    row_baseline,
    row_broker_kill,
    row_job_crash,
    row_scheduler_kill,
)
from bench.faults.sampler import ALLOWANCE, Sampler  # noqa: E402
from bench.faults.size_rows import row_oversized  # noqa: E402
from bench.faults.stop_rows import (  # noqa: E402
    DISK_SIZE,
    row_agent_sigterm,
    row_duplicate_agent,
    row_full_disk,
    row_up_restarts,
)
from bench.faults.table import table  # noqa: E402
from bench.faults.trust_rows import row_forged, row_hostile, row_takeover  # noqa: E402

Row = Callable[[Bench, LocalCluster, Sampler, Result, str], Awaitable[set[str]]]
AUTH_ROWS = ("forged", "takeover", "duplicate-agent")
#: Rows of an operator's doing: no job may fail of them, no requeue be charged.
OPERATOR_ROWS = ("agent-sigterm", "up-restarts", "duplicate-agent", "full-disk")
ROWS: dict[str, Row] = {
    "baseline": row_baseline,
    "agent-kill": row_agent_kill,
    "agent-restart": row_agent_restart,
    "agent-freeze": row_agent_freeze,
    "scheduler-kill": row_scheduler_kill,
    "broker-kill": row_broker_kill,
    "job-crash": row_job_crash,
    "hostile": row_hostile,
    "forged": row_forged,
    "takeover": row_takeover,
    "oversized": row_oversized,
    "agent-sigterm": row_agent_sigterm,
    "up-restarts": row_up_restarts,
    "duplicate-agent": row_duplicate_agent,
    "full-disk": row_full_disk,
}


def judge_overlaps(result: Result, sampler: Sampler, allowance: float) -> None:
    """Split the sampler's overlaps at the fencing bound into the row's two columns."""
    within, beyond = sampler.log.within(allowance), sampler.log.beyond(allowance)
    result.duplicated = len({o.job for o in beyond})
    result.overlapped = len({o.job for o in within} - {o.job for o in beyond})
    for label, overlaps in (("DUPLICATE", beyond), ("overlap within bound", within)):
        for o in overlaps:
            result.note = f"{result.note} {label}: {o.describe()};".strip()


async def run_row(bench: Bench, name: str) -> Result:
    run_dir = Path(tempfile.mkdtemp(prefix=f"accordion-faults-{name}-"))
    if name != "full-disk":
        return await _run_row(bench, name, run_dir, None)
    # The full disk's journal on a tmpfs of its own, unmounted after the tally.
    mount = Path(tempfile.mkdtemp(prefix="accordion-faults-disk-"))
    try:
        with small_tmpfs(mount, DISK_SIZE):
            return await _run_row(bench, name, run_dir, mount / "journal.sqlite")
    finally:
        with contextlib.suppress(OSError):
            mount.rmdir()


async def _run_row(bench: Bench, name: str, run_dir: Path, journal: Path | None) -> Result:
    tag = uuid.uuid4().hex[:6]
    cluster = LocalCluster(
        cluster_spec(tag),
        run_dir,
        policy="easy",
        time_scale=bench.time_scale,
        broker="mosquitto",
        root=f"faults-{tag}/v1",
        heartbeat=HEARTBEAT,
        auth=name in AUTH_ROWS,
        users=("alice", "mallory"),
        # An agent login with no agent of its own: the forging agent of row "forged"
        # (a second connection under a running agent's login would take it over).
        extra_agents=(FORGING_AGENT,),
        journal=journal,
    )
    result = Result(name)
    with cluster, Sampler(cluster.root) as sampler:
        supervisor = threading.Event()

        def supervise() -> None:
            while not supervisor.wait(0.2):
                cluster.supervise()

        thread = threading.Thread(target=supervise, daemon=True)
        async with cluster.connect(timeout=10.0) as client:
            await cluster.ready(client, timeout=60.0)
        thread.start()
        try:
            accepted = await ROWS[name](bench, cluster, sampler, result, tag)
            await wait_drained(cluster, accepted)
        finally:
            supervisor.set()
            thread.join(5)
        result.restarts = sum(c.restarts for c in cluster.children())
    judge_overlaps(result, sampler, bench.allowance)
    tally(result, cluster.journal, accepted)
    if not bench.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        result.note = (result.note + f" run dir {run_dir}").strip()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    p.add_argument("--repeat", type=int, default=1, help="run each row this many times")
    p.add_argument("--jobs", type=int, default=40, help="jobs per row")
    p.add_argument("--burst", type=int, default=3000, help="submissions of scheduler-kill")
    p.add_argument("--payloads", type=int, default=10_000, help="payloads of hostile")
    p.add_argument("--time-scale", type=float, default=20.0)
    p.add_argument(
        "--overlap-allowance",
        type=float,
        default=ALLOWANCE,
        help="wall seconds two attempts may overlap within the fencing bound (%(default)s)",
    )
    p.add_argument("--keep", action="store_true", help="keep each row's run directory")
    args = p.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    if args.repeat < 1 or not args.overlap_allowance > 0:
        p.error("--repeat must be at least 1 and --overlap-allowance positive")
    console = Console(width=max(160, Console().width))
    bench = Bench(
        args.time_scale,
        args.jobs,
        args.burst,
        args.payloads,
        args.keep,
        console,
        allowance=args.overlap_allowance,
    )
    for name in [r for r in rows for _ in range(args.repeat)]:
        console.print(f"[bold]{name}[/] ...", highlight=False)
        started = time.monotonic()
        try:
            result = run_async(run_row(bench, name))
        except (RuntimeError, OSError, DiskError) as exc:
            result = Result(name, note=f"ERROR: {exc}")
        bench.results.append(result)
        console.print(f"  done in {time.monotonic() - started:.1f} s", highlight=False)
    console.print(table(bench.results))
    bad = [
        r.row
        for r in bench.results
        if r.lost
        or r.duplicated
        or r.effects
        or r.note.startswith("ERROR")
        or (r.row in OPERATOR_ROWS and (r.charged or r.failed))
    ]
    with contextlib.suppress(Exception):
        console.print(f"rows with loss, duplicates or errors: {', '.join(bad) or 'none'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
