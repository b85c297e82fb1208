"""The sans-I/O import contract (pyproject.toml) breaks when a core module imports I/O.

A contract that is never seen to break proves nothing: this copies the
project's packages to a temporary directory, adds one forbidden import to a
module the contract covers, and runs ``lint-imports`` on the copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "model", "scheduler", "nodeagent", "twin", "workload", "accordion")
CONTRACT = "are sans-I/O"


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy first on the path, so its modules, not the checkout's, are analysed.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    lint = Path(sys.executable).parent / "lint-imports"
    return subprocess.run(
        [str(lint), "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=100,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("contracts")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, out / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", out / "pyproject.toml")
    return out


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("scheduler/policies/easy.py", "import time"),
        ("scheduler/priority/fairshare.py", "import msgspec"),
        ("scheduler/core.py", "from broker import topics"),
        ("scheduler/easy_shadow.py", "import random"),
    ],
)
def test_a_forbidden_import_breaks_the_contract(tree: Path, module: str, line: str) -> None:
    path = tree / module
    original = path.read_text()
    try:
        path.write_text(f"{original}\n{line}  # noqa\n")
        broken = lint_imports(tree)
    finally:
        path.write_text(original)
    assert broken.returncode != 0, broken.stdout
    assert f"{CONTRACT} (no clock, no randomness, no wire) BROKEN" in " ".join(
        broken.stdout.split()
    )


def test_the_untouched_copy_keeps_it(tree: Path) -> None:
    kept = lint_imports(tree)
    assert kept.returncode == 0, kept.stdout
