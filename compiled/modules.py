"""Which modules the compiled build holds: the twin's hot path.

Every module of the scheduler's core, planning, policies and priority sources
and of the twin, and the model modules they run on. Package ``__init__``
modules stay pure (they hold docstrings, a protocol and re-exports). Two model
modules stay pure on purpose: ``model.outcome`` builds its records through the
slot descriptors of its frozen dataclasses (a trick a native class does not
allow), and ``model.metrics`` spends its time in numpy, not in Python. The
policy registry stays pure too: it reads policies' options off their
dataclass fields and type hints at run time, introspection a compiled module
does not support, and it runs once per replay, not per event.
"""

from __future__ import annotations

from pathlib import Path

#: Packages every module of which (but ``__init__``) is compiled.
PACKAGES = (
    "scheduler/core",
    "scheduler/planning",
    "scheduler/policies",
    "scheduler/priority",
    "twin",
)
#: Modules of those packages left pure (see the module docstring).
LEFT_PURE = frozenset({"scheduler/policies/registry.py"})
#: Single modules compiled besides the packages.
SINGLES = ("model/allocation.py", "model/execution.py", "model/job.py", "model/machine.py")


def compiled_sources(root: Path) -> list[str]:
    """The source files to compile, relative to ``root`` (POSIX paths, sorted)."""
    files = [
        path.relative_to(root).as_posix()
        for package in PACKAGES
        for path in (root / package).glob("*.py")
        if path.name != "__init__.py" and path.relative_to(root).as_posix() not in LEFT_PURE
    ]
    return sorted([*files, *SINGLES])


def module_name(relpath: str) -> str:
    """``scheduler/core/core.py`` -> ``scheduler.core.core``."""
    return relpath.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
