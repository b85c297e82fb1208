"""The staleness guard: a compiled module never shadows edited source.

A real mypyc build of a small package in a temporary checkout (about half a
minute: mypy, then the C compiler), imported by fresh interpreters through the
hook, while its source and a module it imports are edited and restored.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiled.build import build, dependencies

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
REPO = Path(__file__).resolve().parents[2]

FAST = '''"""Compiled in the test."""

from pkgx.helper import FACTOR


def scaled(x: int) -> int:
    return FACTOR * x
'''
HELPER = '''"""Left pure, but the compiled module was built against it."""

FACTOR: int = 2
'''


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("checkout")
    (root / "pkgx").mkdir()
    (root / "pkgx" / "__init__.py").write_text('"""A package."""\n')
    (root / "pkgx" / "fast.py").write_text(FAST)
    (root / "pkgx" / "helper.py").write_text(HELPER)
    out = tmp_path_factory.mktemp("venv") / "accordion-compiled"
    build(root, out, sources=["pkgx/fast.py"], jobs=1)
    return root, out


def imported(root: Path, out: Path) -> tuple[str, int, str]:
    """``(pkgx.fast's file, scaled(5), describe())`` in a fresh interpreter."""
    code = (
        f"import json, compiled.hook as h; h.install({str(out)!r}); import pkgx.fast as f; "
        "print(json.dumps([f.__file__, f.scaled(5), h.describe()]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "ACCORDION_PURE"}
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO)])
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    file, value, described = json.loads(proc.stdout.strip().splitlines()[-1])
    return file, value, described


def test_fresh_build_is_served_from_outside_the_source_tree(checkout: tuple[Path, Path]) -> None:
    root, out = checkout
    file, value, _ = imported(root, out)
    assert file == str(out / "pkgx" / f"fast{SUFFIX}")
    assert value == 10
    assert not list(root.rglob(f"*{SUFFIX}")), "nothing compiled sits beside the source"
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["sources"]) == {"pkgx/__init__.py", "pkgx/fast.py", "pkgx/helper.py"}


@pytest.mark.parametrize(
    ("edited", "original", "changed"),
    [
        ("pkgx/fast.py", FAST, FAST.replace("FACTOR * x", "FACTOR * x + 1")),
        # A module the compiled one imports: mypyc compiled against its types.
        ("pkgx/helper.py", HELPER, HELPER.replace("= 2", "= 3")),
    ],
)
def test_an_edited_source_turns_the_build_off_until_restored(
    checkout: tuple[Path, Path], edited: str, original: str, changed: str
) -> None:
    root, out = checkout
    path = root / edited
    path.write_text(changed)
    try:
        file, value, described = imported(root, out)
        assert file == str(root / "pkgx" / "fast.py")
        assert value == (11 if edited.endswith("fast.py") else 15)
        assert f"stale: {edited} changed since the build" in described
    finally:
        path.write_text(original)
    # Hashes, not times: the same bytes again are the build's sources again.
    file, value, _ = imported(root, out)
    assert file.endswith(SUFFIX)
    assert value == 10


def test_a_source_from_another_tree_is_not_shadowed(
    checkout: tuple[Path, Path], tmp_path: Path
) -> None:
    """Another checkout of the same package (e.g. another worktree on the path) gets
    its own source, even while the build's checkout is unchanged."""
    root, out = checkout
    other = tmp_path / "other"
    (other / "pkgx").mkdir(parents=True)
    for name in ("__init__.py", "fast.py", "helper.py"):
        (other / "pkgx" / name).write_text((root / "pkgx" / name).read_text())
    file, value, _ = imported(other, out)
    assert file == str(other / "pkgx" / "fast.py")
    assert value == 10


def test_pure_env_turns_the_hook_off(checkout: tuple[Path, Path]) -> None:
    root, out = checkout
    env = dict(os.environ, ACCORDION_PURE="1", PYTHONPATH=os.pathsep.join([str(root), str(REPO)]))
    code = f"import compiled.hook as h; print(h.install({str(out)!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "None"


def test_the_real_build_depends_on_every_module_the_core_imports() -> None:
    """The project's manifest covers the compiled modules and what they import."""
    deps = dependencies(REPO, ["twin/simulate.py"])
    assert {"twin/simulate.py", "scheduler/core/core.py", "model/job.py"} <= set(deps)
    assert "model/outcome.py" in deps  # left pure, but imported by the twin
    assert all((REPO / d).is_file() for d in deps)
