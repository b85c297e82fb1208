"""The generated files and the function that renders each (one registry of targets)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from docgen import cli, metrics, wire

#: The repository's root: the generated paths are relative to it.
ROOT: Final = Path(__file__).resolve().parent.parent
REGENERATE: Final = ".venv/bin/python -m docgen"


@dataclass(frozen=True, slots=True)
class Target:
    """One generated file: where it lives and what renders its text."""

    path: str
    render: Callable[[], str]

    def stale(self, root: Path = ROOT) -> bool:
        """True when the committed file differs from what the code renders now."""
        path = root / self.path
        return not path.exists() or path.read_text(encoding="utf-8") != self.render()


TARGETS: Final = (
    Target("docs/reference/cli.md", cli.render),
    Target("docs/reference/metrics.md", metrics.render),
    Target("docs/reference/asyncapi.yaml", wire.render_yaml),
    Target("docs/reference/asyncapi.json", wire.render_json),
    Target("docs/reference/wire.md", wire.render_page),
)
