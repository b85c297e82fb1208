"""The EG-EDF paper's grid and workload, as a seeded generator (``--preset eg-edf-grid``).

Source: the EG-EDF paper (Klusacek, Rudova, Baraglia, Pasquali and Capannini),
sec. 4 and its footnote 2, which fix the setup completely but for a few
details, each stated here:

* **the grid**: 150 machines, each with a CPU count uniform in ``[1, 16]`` and
  a benchmark speed ``BM_m`` uniform in ``[200, 600]`` (whole numbers);
* **the jobs**: 3,000 of them; run time uniform in ``[500, 3000]`` s (whole
  seconds), CPUs uniform in ``[1, 8]``, 70 % with a deadline; arrivals a
  Poisson process, i.e. exponential inter-arrival times, of mean
  ``interarrival`` seconds (the paper: five means in ``[5, 20]``);
* **estimates are exact**: the requested time is the run time (sec. 5:
  "precise job execution time was known");
* **20 repetitions** "with different job attributes values": a repetition is a
  seed. The seed draws the jobs; the grid is drawn once from ``grid_seed``
  (default 0), the same for every repetition and every inter-arrival mean,
  since the paper varies the jobs only.

Choices the paper leaves open:

* ``BM_ref``, the speed run times are measured at, is 400, the mean of
  ``U[200, 600]``: a job's time on machine m is ``runtime * 400 / BM_m``. The
  cluster file gives each machine the relative speed ``BM_m / 400`` (the
  benchmark value is kept in its name, ``m017-bm352``).
* Deadlines: the paper gives the share (70 %) but not the distance. The rule
  is ``workload.deadlines``' default (slack ``U[1.5, 4]``), multiplying the
  real run time (``estimate="runtime"``; here it equals the estimate), seeded
  by the repetition's seed. SWF has no deadline field, so the trace states the
  rule in its header (``workload.deadlines.HEADER_KEY``) and loading applies it.

Every draw comes from ``random.Random`` instances seeded by text (``"grid:0"``,
``"jobs:<seed>"``), so the grid and each repetition's jobs are independent
streams and the same arguments give the same files byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from workload.deadlines import HEADER_KEY, DeadlineRule, rule_to_text
from workload.swf import SwfRecord

PRESET_NAME = "eg-edf-grid"
BM_REF = 400
"""The reference benchmark speed run times are measured at (ours; module docstring)."""
INTERARRIVAL_MEANS = (5.0, 8.75, 12.5, 16.25, 20.0)
"""Five means evenly spread over the paper's ``[5, 20]``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GridPreset:
    """The paper's setup (module docstring); every field can be changed by name."""

    seed: int = 1
    interarrival: float = 10.0
    jobs: int = 3000
    machines: int = 150
    machine_cpus: tuple[int, int] = (1, 16)
    machine_speed: tuple[int, int] = (200, 600)
    job_runtime: tuple[int, int] = (500, 3000)
    job_cpus: tuple[int, int] = (1, 8)
    deadline_share: float = 0.7
    grid_seed: int = 0

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.machines < 1:
            raise ValueError("the grid preset needs at least one job and one machine")
        if not self.interarrival > 0:
            raise ValueError(f"the mean inter-arrival time must be > 0, got {self.interarrival!r}")
        for label, (lo, hi) in (
            ("machine CPUs", self.machine_cpus),
            ("machine speed", self.machine_speed),
            ("job run time", self.job_runtime),
            ("job CPUs", self.job_cpus),
        ):
            if not 1 <= lo <= hi:
                raise ValueError(f"{label} range must satisfy 1 <= low <= high, got {lo}..{hi}")
        if self.job_cpus[1] > self.machine_cpus[1]:
            raise ValueError("a job may need more CPUs than any machine can have")

    @property
    def deadline_rule(self) -> DeadlineRule:
        return DeadlineRule(share=self.deadline_share, estimate="runtime", seed=self.seed)


def grid(preset: GridPreset) -> list[tuple[str, int, int]]:
    """``(name, cpus, BM_m)`` of every machine, drawn from ``grid_seed`` alone.

    A job must fit one machine (EG-EDF runs a job on one machine), so the
    widest machine is raised to the widest job's CPU count when the draws
    left none that wide (stated in the cluster file's comment).
    """
    rng = random.Random(f"grid:{preset.grid_seed}")
    out = []
    for i in range(preset.machines):
        cpus = rng.randint(*preset.machine_cpus)
        speed = rng.randint(*preset.machine_speed)
        out.append((f"m{i:03d}-bm{speed}", cpus, speed))
    widest = max(range(len(out)), key=lambda i: out[i][1])
    if out[widest][1] < preset.job_cpus[1]:
        name, _, speed = out[widest]
        out[widest] = (name, preset.job_cpus[1], speed)
    return out


def cluster_toml(preset: GridPreset) -> str:
    """The grid as a cluster file (``workload.cluster``), speeds relative to ``BM_REF``."""
    machines = grid(preset)
    lines = [
        f"# The EG-EDF paper's grid (sec. 4, footnote 2): {preset.machines} machines,",
        f"# CPUs U{list(preset.machine_cpus)}, benchmark speed U{list(preset.machine_speed)}, "
        f"drawn with grid seed {preset.grid_seed}.",
        f"# speed = BM_m / {BM_REF} (BM_ref, the speed run times refer to); BM_m is in the name.",
        "# Generated by `accordion generate --preset eg-edf-grid` (workload/grid_preset.py).",
        f'name = "{PRESET_NAME}"',
        "reference_speed = 1.0",
    ]
    for name, cpus, speed in machines:
        lines += ["", "[[machine]]", f'name = "{name}"', f"cpus = {cpus}"]
        lines.append(f"speed = {speed / BM_REF!r}")
    return "\n".join(lines) + "\n"


def records(preset: GridPreset) -> list[SwfRecord]:
    """The jobs, in submit order, drawn from ``seed`` and ``interarrival``."""
    rng = random.Random(f"jobs:{preset.seed}")
    rate = 1.0 / preset.interarrival
    t = 0.0
    out: list[SwfRecord] = []
    for number in range(1, preset.jobs + 1):
        runtime = rng.randint(*preset.job_runtime)
        cpus = rng.randint(*preset.job_cpus)
        out.append(
            SwfRecord(
                job_number=number,
                submit_time=round(t),
                wait_time=-1,
                run_time=runtime,
                allocated_procs=cpus,
                avg_cpu_time=-1,
                used_memory=-1,
                requested_procs=cpus,
                requested_time=runtime,
                requested_memory=-1,
                status=1,
                user_id=1,
                group_id=1,
                executable=-1,
                queue=1,
                partition=1,
                preceding_job=-1,
                think_time=-1,
            )
        )
        t += rng.expovariate(rate)
    return out


def header(preset: GridPreset) -> dict[str, str]:
    """The SWF header, with the deadline rule under :data:`HEADER_KEY`."""
    cpus = sum(c for _, c, _ in grid(preset))
    return {
        "Version": "2.2",
        "Computer": f"accordion preset {PRESET_NAME} (EG-EDF paper, sec. 4)",
        "Note": (
            f"generated by accordion (seed {preset.seed}, mean inter-arrival "
            f"{preset.interarrival!r} s); see workload/grid_preset.py"
        ),
        "MaxJobs": str(preset.jobs),
        "MaxRecords": str(preset.jobs),
        "MaxProcs": str(cpus),
        HEADER_KEY: rule_to_text(preset.deadline_rule),
    }
