"""The EG-EDF paper's grid and workload (``workload.grid_preset``, sec. 4 and footnote 2)."""

from __future__ import annotations

import itertools
import statistics
import tomllib
from pathlib import Path

from accordion.commands.generate import write_preset
from accordion.experiments.runs import load_workload
from workload.cluster import parse_cluster
from workload.grid_preset import BM_REF, GridPreset, cluster_toml, grid, records


def test_the_grid_has_the_papers_ranges_and_is_the_same_for_every_seed() -> None:
    machines = grid(GridPreset(seed=1))
    assert len(machines) == 150
    assert all(1 <= cpus <= 16 and 200 <= bm <= 600 for _, cpus, bm in machines)
    assert machines == grid(GridPreset(seed=2, interarrival=5.0))
    spec = parse_cluster(tomllib.loads(cluster_toml(GridPreset())))
    assert [m.speed for m in spec.machines] == [bm / BM_REF for _, _, bm in machines]


def test_the_jobs_have_the_papers_ranges_and_mean_interarrival() -> None:
    recs = records(GridPreset(seed=4, interarrival=12.5))
    assert len(recs) == 3000
    assert all(500 <= r.run_time <= 3000 and 1 <= r.requested_procs <= 8 for r in recs)
    assert all(r.requested_time == r.run_time for r in recs)  # exact estimates (sec. 5)
    gaps = [b.submit_time - a.submit_time for a, b in itertools.pairwise(recs)]
    assert abs(statistics.fmean(gaps) - 12.5) < 1.0  # 2,999 exponential gaps
    assert records(GridPreset(seed=4, interarrival=12.5)) == recs
    assert records(GridPreset(seed=5, interarrival=12.5)) != recs


def test_generated_files_carry_the_deadlines_and_load_as_the_paper_set_up(tmp_path: Path) -> None:
    trace, cluster, count = write_preset(
        "eg-edf-grid", tmp_path / "g.swf", seed=3, interarrival=5.0
    )
    assert count == 3000
    work = load_workload(trace, cluster=cluster)
    share = sum(j.deadline is not None for j in work.jobs) / len(work.jobs)
    assert abs(share - 0.7) < 0.03
    widest = max(m.cpus for m in work.machines)
    assert all(j.procs <= widest for j in work.jobs)  # EG-EDF runs a job on one machine
    for j in work.jobs:
        if j.deadline is not None:
            assert j.runtime is not None
            assert 1.5 * j.runtime <= j.deadline - j.submit <= 4.0 * j.runtime
    again = tmp_path / "again"
    write_preset("eg-edf-grid", again / "g.swf", seed=3, interarrival=5.0)
    assert (again / "g.swf").read_bytes() == trace.read_bytes()
    assert (again / "g.cluster.toml").read_bytes() == cluster.read_bytes()
