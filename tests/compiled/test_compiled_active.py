"""In the test command's compiled pass, the hot path really is the compiled build."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from pathlib import Path

import pytest

from compiled.hook import describe
from compiled.modules import compiled_sources, module_name

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    os.environ.get("ACCORDION_EXPECT_COMPILED") != "1",
    reason="only in the compiled pass of scripts/test (ACCORDION_EXPECT_COMPILED=1)",
)
def test_every_listed_module_is_served_compiled() -> None:
    assert describe().startswith("compiled with mypyc"), describe()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    pure = [
        name
        for name in map(module_name, compiled_sources(REPO))
        if not str(importlib.import_module(name).__file__).endswith(suffix)
    ]
    assert pure == []


def test_the_list_names_the_hot_path() -> None:
    names = {module_name(s) for s in compiled_sources(REPO)}
    assert {"scheduler.core.core", "scheduler.policies.easy", "twin.simulate"} <= names
    assert "scheduler.policies.registry" not in names
    assert not any(n.startswith(("scheduler.live", "scheduler.runtime")) for n in names)
