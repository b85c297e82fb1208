"""The import contracts break when violated (so "N kept, 0 broken" means something).

Each case copies the project's packages to a temporary directory, plants one
forbidden import, and runs ``lint-imports`` there with the project's own
``pyproject.toml``: it must fail and name the contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "model", "scheduler", "nodeagent", "twin", "workload", "accordion")
LINT = Path(sys.executable).with_name("lint-imports")
SANS_IO = "the scheduler's core, planning, policies and priorities are sans-I/O"
LIVE_SANS_IO = "the scheduler's live handlers are sans-I/O"
LAYERS = "the scheduler's layers point one way"
CLI_LAYERS = "the CLI's parts point one way"
JOB = "the job process imports nothing of the agent but the launch contract"
LAUNCH_CONTRACT = "the launch contract imports nothing of the agent or the job"
#: What the job process may import of nodeagent outside its own package: the launch
#: contract (the launch, exit codes, part key, lease rule; the pipe's frames; a user
#: command's plan, process tree and MPI ranks) and the loop runner both processes share.
JOB_MAY_IMPORT = {
    "nodeagent.launch.command_plan",
    "nodeagent.launch.contract",
    "nodeagent.launch.frames",
    "nodeagent.launch.jobtree",
    "nodeagent.launch.json_fields",
    "nodeagent.launch.mpi_ranks",
    "nodeagent.launch.runner",
}


def contracts() -> list[dict[str, Any]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        config = tomllib.load(f)
    found: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return found


def contract_names() -> list[str]:
    return [c["name"] for c in contracts()]


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("contracts")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, base / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", base / "pyproject.toml")
    return base


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        (
            "scheduler/runtime/journal.py",
            "import msgspec",
            "only the broker package imports msgspec",
        ),
        (
            "accordion/client/live_client.py",
            "import msgspec",
            "only the broker package imports msgspec",
        ),
        (
            "nodeagent/agent/node_agent.py",
            "import aiomqtt",
            "only broker.mqtt imports the MQTT client",
        ),
        ("broker/codec.py", "import paho.mqtt.client", "only broker.mqtt imports the MQTT client"),
        ("broker/topics.py", "import scheduler.core.core", "broker (the wire contract)"),
        (
            "nodeagent/job/sleep_job.py",
            "import scheduler.runtime.actor",
            "nodeagent does not import the scheduler",
        ),
        ("scheduler/policies/easy.py", "import time", SANS_IO),
        ("scheduler/priority/fairshare.py", "import msgspec", SANS_IO),
        ("scheduler/core/core.py", "from broker import topics", SANS_IO),
        ("scheduler/planning/easy_shadow.py", "import random", SANS_IO),
        ("scheduler/policies/dpsa.py", "import asyncio", SANS_IO),
        ("scheduler/live/requests.py", "import time", LIVE_SANS_IO),
        ("scheduler/live/agents.py", "import broker.mqtt", LIVE_SANS_IO),
        ("scheduler/live/dispatch.py", "import scheduler.runtime.clock", LAYERS),
        ("scheduler/core/usage.py", "import scheduler.live.context", LAYERS),
        ("scheduler/planning/profile.py", "import scheduler.policies.easy", LAYERS),
        ("nodeagent/job/mpi.py", "import nodeagent.agent.node_agent", JOB),
        ("nodeagent/job/sleep_job.py", "from nodeagent.launch.spawn import Spawn", JOB),
        ("nodeagent/job/rejoin.py", "import nodeagent.survival.state", JOB),
        ("nodeagent/job/pipe_bus.py", "import nodeagent.launch.pipe", JOB),
        ("nodeagent/launch/contract.py", "import nodeagent.job.ranks", LAUNCH_CONTRACT),
        ("nodeagent/launch/frames.py", "import nodeagent.agent.outbox", LAUNCH_CONTRACT),
        ("accordion/client/replay.py", "import accordion.cluster.processes", CLI_LAYERS),
        ("accordion/experiments/runs.py", "import accordion.commands.options", CLI_LAYERS),
    ],
)
def test_a_planted_import_breaks_its_contract(
    tree: Path, module: str, planted: str, contract: str
) -> None:
    path = tree / module
    original = path.read_text()
    path.write_text(f"{planted}  # planted by the test\n{original}")
    try:
        result = lint(tree)
    finally:
        path.write_text(original)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    # lint-imports wraps long names: compare with white space folded.
    flat = " ".join(output.split())
    (name,) = (n for n in contract_names() if n.startswith(contract))
    assert f"{name} BROKEN" in flat, output


def test_the_tree_as_it_is_keeps_every_contract(tree: Path) -> None:
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


def _nodeagent_modules() -> set[str]:
    """Every module of nodeagent, packages by their own name."""
    found = set()
    for path in (ROOT / "nodeagent").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_job_contract_forbids_all_of_nodeagent_but_the_launch_contract() -> None:
    """A module added to the agent's side is forbidden to the job process from the
    start: the job contract's list names every module outside ``nodeagent.job`` but
    those the job may import (and their packages, which it cannot help importing)."""
    (contract,) = (c for c in contracts() if c["name"] == JOB)
    forbidden: list[str] = contract["forbidden_modules"]
    modules = {m for m in _nodeagent_modules() if m != "nodeagent.job"}
    modules -= {m for m in modules if m.startswith("nodeagent.job.")}
    packages = {m.rsplit(".", i)[0] for m in JOB_MAY_IMPORT for i in range(1, m.count(".") + 1)}

    def covered(module: str) -> bool:
        return any(module == f or module.startswith(f + ".") for f in forbidden)

    assert {f for f in forbidden if f not in modules} == set(), "forbids modules that are gone"
    assert {m for m in JOB_MAY_IMPORT if covered(m)} == set()
    assert sorted(m for m in modules - JOB_MAY_IMPORT - packages if not covered(m)) == []
