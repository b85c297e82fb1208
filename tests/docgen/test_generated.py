"""The committed reference pages match what the code generates now.

A stale page fails here with the command that regenerates it, so a change to
the CLI, a metric or a wire type reaches the site in the same commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docgen.targets import REGENERATE, ROOT, TARGETS, Target


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.path)
def test_committed_file_matches_the_code(target: Target) -> None:
    assert not target.stale(), f"{target.path} is stale: run {REGENERATE} and commit the result"


def test_yaml_and_json_hold_the_same_document() -> None:
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "docs/reference/asyncapi.yaml").read_text(encoding="utf-8")
    as_json = json.loads((ROOT / "docs/reference/asyncapi.json").read_text(encoding="utf-8"))
    assert yaml.safe_load(text) == as_json


def test_a_stale_page_is_caught(tmp_path: Path) -> None:
    target = Target("page.md", lambda: "new text\n")
    root = tmp_path
    (root / "page.md").write_text("old text\n")
    assert target.stale(root)
    (root / "page.md").write_text("new text\n")
    assert not target.stale(root)


def test_the_readme_stays_a_newcomers_page() -> None:
    """The README is the ten-minute page; everything longer belongs to the site."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the detail to docs/"
