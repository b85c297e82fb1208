"""The import hook that serves the compiled build, and refuses it once a source changed.

Theory of operation. ``python -m compiled.build`` writes its extension modules
into a directory outside the source tree (``.venv/accordion-compiled`` by
default), so a compiled module can never sit beside its source and shadow it
the way an in-place build (``mypyc`` run in the checkout) would. Beside them it
writes ``manifest.json``: the checkout it was built from, the extension
suffix, every compiled module's file, and the SHA-256 of every source the
build depends on (the compiled modules and every project module they import,
since mypyc compiled against their types). The build also drops a ``.pth``
file into the virtualenv, so that every interpreter of it calls
:func:`install` at start-up.

:func:`install` puts a :class:`CompiledFinder` first on ``sys.meta_path``. It
answers only for the modules the manifest lists, and serves the extension
only when, on the first such import, every recorded source still hashes the
same (checked once per process; about a millisecond) and the module's package
comes from the checkout the build was made from. Otherwise it answers
nothing and Python imports the source as usual: an edit to any of those
files turns the whole build off (all or nothing: compiled modules call each
other's native code directly, so half a build cannot be mixed with edited
source) until it is built again. ``ACCORDION_PURE=1`` in the environment
turns it off too (the test command runs the suite on both builds this way).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

MANIFEST = "manifest.json"
#: Set to 1 to import every module from its source even where a fresh build exists.
PURE_ENV = "ACCORDION_PURE"


class Manifest:
    """What a build was made from (``manifest.json``, written by ``compiled.build``).

    A plain class, not a dataclass: this module is imported at every interpreter's
    start-up, and ``dataclasses`` (with ``inspect``) would cost more than the hook.
    """

    __slots__ = ("modules", "root", "sources", "suffix")

    def __init__(
        self, *, root: str, suffix: str, modules: dict[str, str], sources: dict[str, str]
    ) -> None:
        #: The checkout the build was made from.
        self.root = root
        #: The extension suffix of the interpreter that built it.
        self.suffix = suffix
        #: Module name -> extension file, relative to the build directory; the shared
        #: library of the group (``<hash>__mypyc``) is one of them.
        self.modules = modules
        #: Source file (POSIX path relative to ``root``) -> its SHA-256 at the build.
        self.sources = sources

    @classmethod
    def read(cls, build: str) -> Manifest:
        with open(os.path.join(build, MANIFEST), encoding="utf-8") as f:
            raw = json.load(f)
        return cls(
            root=str(raw["root"]),
            suffix=str(raw["suffix"]),
            modules={str(k): str(v) for k, v in raw["modules"].items()},
            sources={str(k): str(v) for k, v in raw["sources"].items()},
        )

    def write(self, build: str) -> None:
        raw = {
            "root": self.root,
            "suffix": self.suffix,
            "modules": self.modules,
            "sources": self.sources,
        }
        with open(os.path.join(build, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(raw, f, indent=1, sort_keys=True)
            f.write("\n")

    @property
    def compiled_modules(self) -> list[str]:
        """The project's modules in the build (not the group's shared library)."""
        return [m for m in self.modules if not m.endswith("__mypyc")]


def file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def staleness(manifest: Manifest) -> str | None:
    """Why the build cannot be used, or None when every recorded source is unchanged."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if manifest.suffix != suffix:
        return f"built for {manifest.suffix}, this interpreter loads {suffix}"
    for rel, digest in manifest.sources.items():
        path = os.path.join(manifest.root, *rel.split("/"))
        if not os.path.isfile(path):
            return f"{rel} is gone"
        if file_digest(path) != digest:
            return f"{rel} changed since the build"
    return None


class CompiledFinder:
    """Serves the manifest's extension modules while the build is fresh (module
    docstring); a meta path finder by its ``find_spec``."""

    def __init__(self, build: str, manifest: Manifest) -> None:
        self.build = build
        self.manifest = manifest
        self._verdict: str | None = None
        self._checked = False
        #: Modules served compiled, in import order (what :func:`describe` reports).
        self.served: list[str] = []

    @property
    def stale(self) -> str | None:
        """Why the build is refused (checked once, at the first import it could serve)."""
        if not self._checked:
            self._verdict = staleness(self.manifest)
            self._checked = True
        return self._verdict

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        rel = self.manifest.modules.get(fullname)
        if rel is None or self.stale is not None:
            return None
        if "." in fullname:
            # The package must be the checkout's: a process that imports the project
            # from another tree (another worktree on PYTHONPATH) gets that tree's source.
            package_dir = os.path.join(self.manifest.root, *fullname.split(".")[:-1])
            if path is None or not any(os.path.normpath(p) == package_dir for p in path):
                return None
        so = os.path.join(self.build, *rel.split("/"))
        self.served.append(fullname)
        loader = importlib.machinery.ExtensionFileLoader(fullname, so)
        return importlib.machinery.ModuleSpec(fullname, loader, origin=so)


def installed() -> CompiledFinder | None:
    """The finder :func:`install` put on ``sys.meta_path``, if any."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder):
            return finder
    return None


def install(build: str) -> CompiledFinder | None:
    """Serve the build at ``build`` from now on (a no-op without one, or under
    ``ACCORDION_PURE=1``); the ``.pth`` file the build writes calls this."""
    if os.environ.get(PURE_ENV, "") not in {"", "0"}:
        return None
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder) and finder.build == build:
            return finder
    if not os.path.isfile(os.path.join(build, MANIFEST)):
        return None
    finder = CompiledFinder(build, Manifest.read(build))
    sys.meta_path.insert(0, finder)
    return finder


def describe() -> str:
    """One line on which build this process imports: compiled, or pure and why."""
    if os.environ.get(PURE_ENV, "") not in {"", "0"}:
        return f"pure Python ({PURE_ENV}=1)"
    finder = installed()
    if finder is None:
        return "pure Python (no compiled build installed)"
    stale = finder.stale
    if stale is not None:
        return f"pure Python (the compiled build is stale: {stale})"
    count = len(finder.manifest.compiled_modules)
    return f"compiled with mypyc ({count} modules from {finder.build})"
