"""Build the compiled core: mypyc over :mod:`compiled.modules`, outside the source tree.

Run by ``ACCORDION_COMPILE=1 scripts/setup`` (or ``.venv/bin/python -m
compiled.build``). It hashes every source the build depends on (the compiled
modules and, transitively, every project module they import), runs mypyc and
the C compiler in a temporary directory, checks that no source changed
meanwhile, writes the manifest (``compiled.hook``) and then swaps the new
build in place of the old one, so a process never sees half a build. Last it
writes the virtualenv's ``accordion-compiled.pth``, which installs the hook
in every interpreter of the virtualenv. ``--remove`` takes both away again.

A build whose sources are all unchanged is not redone (``--force`` redoes it).
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from mypyc.build import mypycify
from setuptools import Distribution

from compiled.hook import MANIFEST, Manifest, file_digest, staleness
from compiled.modules import compiled_sources, module_name

ROOT = Path(__file__).resolve().parents[1]
PTH = "accordion-compiled.pth"
DEFAULT_BUILD = Path(sys.prefix) / "accordion-compiled"


class BuildError(Exception):
    """The build cannot be made as asked (a changed source, a missing compiler)."""


def _module_file(root: Path, name: str) -> str | None:
    """The source of module ``name`` under ``root`` (POSIX, relative), if it is one."""
    parts = name.split(".")
    for candidate in (Path(*parts).with_suffix(".py"), Path(*parts, "__init__.py")):
        if (root / candidate).is_file():
            return candidate.as_posix()
    return None


def _imports(root: Path, rel: str) -> Iterable[str]:
    """Project modules ``rel`` imports (also under ``TYPE_CHECKING``: mypyc used their
    types), and the packages that hold it."""
    name = module_name(rel)
    parts = name.split(".")
    yield from (".".join(parts[:k]) for k in range(1, len(parts)))
    package = parts if rel.endswith("__init__.py") else parts[:-1]
    for node in ast.walk(ast.parse((root / rel).read_text(), rel)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield module
            # ``from a.b import c`` may import the module ``a.b.c``.
            yield from (f"{module}.{alias.name}" for alias in node.names)


def dependencies(root: Path, sources: Iterable[str]) -> list[str]:
    """Every project source file the ``sources`` depend on, themselves included."""
    seen: set[str] = set()
    todo = list(sources)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        for name in _imports(root, rel):
            found = _module_file(root, name)  # None outside the checkout (stdlib, packages)
            if found is not None and found not in seen:
                todo.append(found)
    return sorted(seen)


def hash_sources(root: Path, files: Iterable[str]) -> dict[str, str]:
    return {rel: file_digest(str(root / rel)) for rel in files}


def compile_into(root: Path, sources: list[str], lib: Path, work: Path, *, jobs: int) -> None:
    """mypyc and the C compiler: the extensions of ``sources`` into ``lib``."""
    cwd = Path.cwd()
    os.chdir(root)  # mypyc names each module by its path from here
    try:
        extensions = mypycify(
            sources, opt_level="3", target_dir=str(work / "c"), multi_file=jobs > 1
        )
    finally:
        os.chdir(cwd)
    dist = Distribution({"name": "accordion-compiled", "ext_modules": extensions})
    build_ext = dist.get_command_obj("build_ext")
    build_ext.build_lib = str(lib)
    build_ext.build_temp = str(work / "obj")
    build_ext.parallel = jobs
    dist.run_command("build_ext")


def _extensions(lib: Path) -> dict[str, str]:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    found = {}
    for path in lib.rglob(f"*{suffix}"):
        rel = path.relative_to(lib).as_posix()
        found[rel.removesuffix(suffix).replace("/", ".")] = rel
    return found


def build(
    root: Path,
    out: Path,
    *,
    sources: list[str] | None = None,
    jobs: int = 2,
    force: bool = False,
) -> str:
    """Build (or keep) the compiled core of the checkout ``root`` at ``out``; says which.
    ``sources``: the files to compile (default :func:`compiled.modules.compiled_sources`)."""
    if sources is None:
        sources = compiled_sources(root)
    if not force and (out / MANIFEST).is_file():
        old = Manifest.read(str(out))
        if (
            old.root == str(root)
            and staleness(old) is None
            and set(old.sources) == set(dependencies(root, sources))
        ):
            return f"compiled core up to date ({out})"
    digests = hash_sources(root, dependencies(root, sources))
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accordion-compiled-", dir=out.parent) as tmp:
        lib = Path(tmp) / "lib"
        compile_into(root, sources, lib, Path(tmp), jobs=jobs)
        after = hash_sources(root, dependencies(root, sources))
        if after != digests:
            changed = sorted(
                k for k in after.keys() | digests.keys() if after.get(k) != digests.get(k)
            )
            raise BuildError(f"sources changed during the build: {', '.join(changed)}")
        modules = _extensions(lib)
        missing = {module_name(s) for s in sources} - modules.keys()
        if missing:
            raise BuildError(f"mypyc built no extension for {', '.join(sorted(missing))}")
        Manifest(
            root=str(root),
            suffix=importlib.machinery.EXTENSION_SUFFIXES[0],
            modules=modules,
            sources=digests,
        ).write(str(lib))
        # Swap whole directories: a reader sees the old build or the new one.
        old_dir = Path(tmp) / "old"
        if out.exists():
            out.rename(old_dir)
        lib.rename(out)
    return f"compiled {len(sources)} modules into {out} in {time.perf_counter() - t0:.0f} s"


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH


def write_pth(out: Path) -> None:
    """Install the hook in every interpreter of this virtualenv (site runs the line)."""
    # One line, run by ``site`` at start-up; it does nothing where the project is
    # not importable (``site`` would print a traceback at every start otherwise).
    line = (
        "import importlib.util as _u; _u.find_spec('compiled') is not None and "
        f"__import__('compiled.hook').hook.install({str(out)!r})\n"
    )
    pth_path().write_text(line)


def remove(out: Path) -> None:
    pth_path().unlink(missing_ok=True)
    shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_BUILD, help="the build directory")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to compile")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="C compilers at once")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--remove", action="store_true", help="remove the build and the hook")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if args.remove:
        remove(out)
        print(f"removed {out} and {pth_path()}")
        return
    try:
        print(build(args.root.resolve(), out, jobs=max(1, args.jobs), force=args.force))
    except BuildError as exc:
        sys.exit(f"compiled.build: {exc}")
    write_pth(out)


if __name__ == "__main__":
    main()
