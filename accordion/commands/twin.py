"""The twin's commands: ``simulate``, ``compare``, ``generate`` and ``policies``.

``--policy-opt KEY=VALUE`` sets a field of the policy (see
``accordion policies --verbose``). In ``compare`` each option applies to
every compared policy that has that key (``--policy-opt budget=5000`` sets
the budget of every DPSA variant compared and leaves EASY alone); a key that
no compared policy has is an error, and so is a value one of them refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from accordion.commands import sweep
from accordion.commands.generate import write_preset
from accordion.commands.options import (
    ClusterOpt,
    DeadlinesOpt,
    JobsOpt,
    OverheadOpt,
    PlacementOpt,
    PolicyOpt,
    PolicyOptsOpt,
    ProgressOpt,
    RigidOpt,
    SeedOpt,
    SlackOpt,
    TraceArg,
    WalltimeOpt,
    policy_opts,
    swf_rules,
    variation,
)
from accordion.commands.tables import print_compare, print_metrics, print_policies, resize_line
from accordion.display import out_console, progress_bar
from accordion.errors import UserError, parsed, user_errors
from accordion.experiments.runs import (
    Run,
    Workload,
    load_workload,
    run_policy,
    write_compare,
    write_run,
)
from accordion.experiments.twin_options import (
    CalibrationOpt,
    CpusOpt,
    MaxUserCpusOpt,
    MissingUtilOpt,
    ModelOpt,
    TauOpt,
    Window,
    WindowOpt,
    execution_model,
)
from model.execution import ExecutionModel, ModelKind
from model.metrics import DEFAULT_TAU
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import (
    PolicyOptionError,
    build_policy_with,
    options_for,
    policy_options,
)
from workload.swf import write_swf
from workload.synthetic import SyntheticSpec
from workload.synthetic import generate as generate_records
from workload.synthetic import header as synthetic_header


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadInputs:
    """The options ``simulate`` and ``compare`` share, turned into what they replay:
    the workload (trace, machines, SWF rules, deadlines, window) and the execution
    model, parsed in one place so both commands read them alike."""

    cluster: Path | None
    jobs: int | None
    window: str | None
    cpus: int | None
    missing_walltime: str
    missing_util: float
    deadlines: float | None
    deadline_slack: str
    seed: int
    rigid_fraction: float
    model: ModelKind
    overhead: float
    calibration: Path | None = None

    def load(self, trace: Path) -> tuple[Workload, ExecutionModel]:
        """Read ``trace`` with these options; a bad option is a user error."""
        workload = load_workload(
            trace,
            cluster=self.cluster,
            rules=swf_rules(self.missing_walltime, self.missing_util),
            variation=variation(
                self.deadlines, self.deadline_slack, self.seed, self.rigid_fraction
            ),
            window=parsed(lambda: Window.of(self.window, self.jobs), "--window"),
            cpus=self.cpus,
        )
        execution = parsed(
            lambda: execution_model(
                self.model, overhead=self.overhead, seed=self.seed, calibration=self.calibration
            ),
            "--execution-model",
        )
        return workload, execution


def simulate(  # noqa: PLR0917 (typer reads the options from the parameters)
    trace: TraceArg,
    policy: PolicyOpt = "easy",
    policy_opt: PolicyOptsOpt = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="write CSV, JSON, SWF here")] = None,
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    rigid_fraction: RigidOpt = 0.0,
    overhead: OverheadOpt = 0.0,
    window: WindowOpt = None,
    tau: TauOpt = DEFAULT_TAU,
    cpus: CpusOpt = None,
    model: ModelOpt = ModelKind.LINEAR,
    calibration: CalibrationOpt = None,
    missing_util: MissingUtilOpt = 1.0,
    max_user_cpus: MaxUserCpusOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Replay TRACE under one policy and print its metrics."""
    with user_errors():
        options = policy_opts(policy_opt)
        built = build_policy_with(policy, options, placement=placement)  # fail fast on a bad name
        workload, execution = WorkloadInputs(
            cluster=cluster,
            jobs=jobs,
            window=window,
            cpus=cpus,
            missing_walltime=missing_walltime,
            missing_util=missing_util,
            deadlines=deadlines,
            deadline_slack=deadline_slack,
            seed=seed,
            rigid_fraction=rigid_fraction,
            model=model,
            overhead=overhead,
            calibration=calibration,
        ).load(trace)
        # Only the user-input types are caught: a ValueError of a policy shows its traceback.
        with progress_bar(policy, progress and len(workload.jobs) >= 2000) as update:
            run = run_policy(
                workload,
                policy,
                placement=placement,
                execution=execution,
                progress=update,
                options=options,
                tau=tau,
                max_user_cpus=max_user_cpus,
            )
        print_metrics(
            f"{workload.name}: {len(workload.jobs)} jobs, policy {policy}", policy, run.summary
        )
        if getattr(built, "folds", False):
            out_console.print(resize_line(run.summary["policy_counters"]))
        _print_skipped(workload.skipped)
        if out is not None:
            for written in write_run(out, run):
                out_console.print(f"wrote {written}")


def _print_skipped(skipped: dict[str, int]) -> None:
    if skipped:
        text = ", ".join(f"{n} {why}" for why, n in sorted(skipped.items()))
        out_console.print(f"skipped from the trace: {text}")


def _compare_options(specs: list[str], options: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each spec's share of ``options``: the keys it has (see the module docstring)."""
    per_spec = {spec: options_for(spec, options) for spec in specs}
    used = {key for chosen in per_spec.values() for key in chosen}
    unused = [key for key in options if key not in used]
    if unused:
        valid = sorted({o.key for spec in specs for o in policy_options(spec)})
        raise PolicyOptionError(
            f"no compared policy has option {unused[0]!r}; their options: "
            + (", ".join(valid) or "none")
        )
    return per_spec


def compare(  # noqa: PLR0917 (typer reads the options from the parameters)
    trace: TraceArg,
    policies: Annotated[
        str, typer.Option("--policies", help="comma-separated POLICY[:PRIORITY]; first is baseline")
    ] = "easy,fcfs,fifo-backfill,conservative",
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="policy to compare against (default: first)")
    ] = None,
    policy_opt: Annotated[
        list[str] | None,
        typer.Option(
            "--policy-opt",
            metavar="KEY=VALUE",
            help="set a parameter of every compared policy that has KEY (repeatable)",
        ),
    ] = None,
    cluster: ClusterOpt = None,
    jobs: JobsOpt = None,
    out: Annotated[
        Path, typer.Option("--out", help="directory for CSVs, JSON and the chart")
    ] = Path("out/compare"),
    placement: PlacementOpt = PlacementRule.FASTEST,
    missing_walltime: WalltimeOpt = "runtime",
    deadlines: DeadlinesOpt = None,
    deadline_slack: SlackOpt = "1.5:4",
    seed: SeedOpt = 0,
    rigid_fraction: RigidOpt = 0.0,
    overhead: OverheadOpt = 0.0,
    window: WindowOpt = None,
    tau: TauOpt = DEFAULT_TAU,
    cpus: CpusOpt = None,
    model: ModelOpt = ModelKind.LINEAR,
    calibration: CalibrationOpt = None,
    missing_util: MissingUtilOpt = 1.0,
    max_user_cpus: MaxUserCpusOpt = None,
    progress: ProgressOpt = True,
    per_job: Annotated[
        bool, typer.Option(help="also write each policy's per-job CSV and SWF schedule")
    ] = True,
) -> None:
    """Replay TRACE under several policies; print every metric against a baseline."""
    with user_errors():
        specs = [s.strip() for s in policies.split(",") if s.strip()]
        if not specs:
            raise UserError("--policies names no policy")
        if len(set(specs)) != len(specs):
            raise UserError(f"--policies names a policy twice: {policies}")
        base = baseline or specs[0]
        if base not in specs:
            specs.insert(0, base)
        options = _compare_options(specs, policy_opts(policy_opt))
        for spec in specs:
            build_policy_with(spec, options[spec], placement=placement)
        workload, execution = WorkloadInputs(
            cluster=cluster,
            jobs=jobs,
            window=window,
            cpus=cpus,
            missing_walltime=missing_walltime,
            missing_util=missing_util,
            deadlines=deadlines,
            deadline_slack=deadline_slack,
            seed=seed,
            rigid_fraction=rigid_fraction,
            model=model,
            overhead=overhead,
            calibration=calibration,
        ).load(trace)
        runs: list[Run] = []
        for spec in specs:
            with progress_bar(spec, progress and len(workload.jobs) >= 2000) as update:
                runs.append(
                    run_policy(
                        workload,
                        spec,
                        placement=placement,
                        execution=execution,
                        progress=update,
                        options=options[spec],
                        tau=tau,
                        max_user_cpus=max_user_cpus,
                    )
                )
        for run in runs:
            write_run(out, run, per_job=per_job)
        base_run = next(r for r in runs if r.spec == base)
        print_compare(workload.name, len(workload.jobs), runs, base_run)
        _print_skipped(workload.skipped)
        csv_path, json_path, png_path = write_compare(out, workload.name, runs, base_run)
        out_console.print(
            f"wrote {csv_path}, {json_path}, {png_path} and per-policy files in {out}"
        )


def generate(  # noqa: PLR0917 (typer reads the options from the parameters)
    out: Annotated[Path, typer.Argument(help="SWF file to write (.swf or .swf.gz)")],
    jobs: Annotated[int, typer.Option("--jobs", min=1)] = 500,
    cpus: Annotated[int, typer.Option("--cpus", min=1)] = 64,
    load: Annotated[float, typer.Option("--load", min=0.01, max=10.0)] = 0.9,
    users: Annotated[int, typer.Option("--users", min=1)] = 12,
    seed: Annotated[int, typer.Option("--seed")] = 1,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="a paper's setup instead: eg-edf-grid writes OUT and OUT's .cluster.toml",
        ),
    ] = None,
    interarrival: Annotated[
        float, typer.Option("--interarrival", min=1e-6, help="preset: mean inter-arrival, s")
    ] = 10.0,
) -> None:
    """Write a small seeded synthetic trace (see workload/synthetic.py for the recipe)."""
    with user_errors():
        if preset is not None:
            trace, cluster_file, count = parsed(
                lambda: write_preset(preset, out, seed=seed, interarrival=interarrival),
                "--preset",
            )
            out_console.print(f"wrote {count} jobs to {trace} and the cluster to {cluster_file}")
            return
        spec = SyntheticSpec(jobs=jobs, cpus=cpus, load=load, users=users, seed=seed)
        count = write_swf(out, generate_records(spec), header=synthetic_header(spec))
        out_console.print(f"wrote {count} jobs to {out}")


def policies(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="also each policy's --policy-opt keys, types and defaults"
        ),
    ] = False,
) -> None:
    """List the policies and priority sources."""
    print_policies(verbose=verbose)


def register(app: typer.Typer) -> None:
    app.command()(simulate)
    app.command()(compare)
    app.command()(generate)
    app.command("policies")(policies)
    app.command("sweep")(sweep.sweep)
