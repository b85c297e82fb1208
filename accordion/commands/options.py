"""The command-line options several commands share, and their parsing into values.

Each option is an ``Annotated`` type for typer; the parsers turn the text of
an option into the value the library takes, raising
:class:`~accordion.errors.UserError` for text that is not what the option
wants.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated

import typer

from accordion.client.live_client import BROKER_ENV, ROOT_ENV
from accordion.errors import UserError, parsed
from accordion.experiments.runs import Variation
from scheduler.planning.placement import PlacementRule
from scheduler.policies.registry import parse_policy_opts
from workload.deadlines import DeadlineRule
from workload.rigidity import RigidRule
from workload.swf_rules import SwfRules

TraceArg = Annotated[Path, typer.Argument(help="SWF trace (.swf or .swf.gz)")]
ClusterOpt = Annotated[
    Path | None,
    typer.Option("--cluster", help="cluster file (TOML); default: one machine from the header"),
]
JobsOpt = Annotated[int | None, typer.Option("--jobs", min=1, help="replay only the first N jobs")]
PolicyOpt = Annotated[str, typer.Option("--policy", "-p", help="POLICY[:PRIORITY]")]
PolicyOptsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-opt",
        metavar="KEY=VALUE",
        help="set a policy parameter (repeatable); `accordion policies --verbose` lists them",
    ),
]
PlacementOpt = Annotated[
    PlacementRule, typer.Option("--placement", help="how jobs are placed on machines")
]
WalltimeOpt = Annotated[
    str,
    typer.Option(
        "--missing-walltime",
        help="estimate for jobs without a requested time: 'runtime', 'runtime*F' or seconds",
    ),
]
DeadlinesOpt = Annotated[
    float | None,
    typer.Option(
        "--deadlines",
        min=0.0,
        max=1.0,
        help="give this share of jobs a deadline (EG-EDF paper: 0.7); see workload/deadlines.py",
    ),
]
SlackOpt = Annotated[
    str, typer.Option("--deadline-slack", help="MIN:MAX slack factors times the wall time")
]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of the deadline draws")]
RigidOpt = Annotated[
    float,
    typer.Option(
        "--rigid-fraction",
        min=0.0,
        max=1.0,
        help="make this share of jobs rigid, drawn with --seed (jobs are malleable by "
        "default, as in the FCFS-malleable paper); see workload/rigidity.py",
    ),
]
OverheadOpt = Annotated[
    float, typer.Option("--overhead", min=0.0, help="OV of formula (4) while a job runs shrunk")
]
ProgressOpt = Annotated[bool, typer.Option(help="show a progress bar")]

BrokerOpt = Annotated[
    str,
    typer.Option(
        "--broker", envvar=BROKER_ENV, help="the MQTT broker, mqtt://HOST[:PORT] (port 1883)"
    ),
]
RootOpt = Annotated[str, typer.Option("--root", envvar=ROOT_ENV, help="the topic root")]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="seconds to wait for the scheduler's reply"),
]
DURATIONS = "seconds (not sbatch's minutes), M:SS, H:MM:SS or D-H:MM:SS"


def login_name() -> str:
    """Who runs this command, as the OS says (a job's user without a broker login)."""
    try:
        return getpass.getuser() or "nobody"
    except (OSError, KeyError):  # no login name in the environment or the user database
        return "nobody"


def swf_rules(missing_walltime: str, missing_util: float = 1.0) -> SwfRules:
    """The trace conversion rules of ``--missing-walltime`` and ``--missing-util``."""
    return parsed(
        lambda: SwfRules.from_fallback(missing_walltime, missing_cpu_util=missing_util),
        "--missing-walltime",
    )


def variation(deadlines: float | None, slack: str, seed: int, rigid: float = 0.0) -> Variation:
    """What ``--deadlines``, ``--deadline-slack``, ``--seed`` and ``--rigid-fraction`` add."""
    rule = None
    if deadlines is not None:
        lo, sep, hi = slack.partition(":")
        try:
            slack_min, slack_max = float(lo), float(hi if sep else lo)
        except ValueError as exc:
            raise UserError(f"--deadline-slack wants MIN:MAX, got {slack!r}") from exc
        rule = parsed(
            lambda: DeadlineRule(
                share=deadlines, slack_min=slack_min, slack_max=slack_max, seed=seed
            ),
            "--deadline-slack",
        )
    return Variation(deadlines=rule, rigid=RigidRule(share=rigid, seed=seed) if rigid else None)


def policy_opts(texts: list[str] | None) -> dict[str, str]:
    """``--policy-opt KEY=VALUE`` options as a mapping (checked against a policy later)."""
    return parse_policy_opts(texts or [])
