"""The compiled core: a mypyc build of the twin's hot path, and the import hook that loads it.

The scheduler core, its planning, policies and priority sources, the twin's
engine and the model modules they use are strictly typed Python; mypyc (mypy's
own compiler, the one black and mypy ship with) turns them into C extensions.
The build is optional (``ACCORDION_COMPILE=1 scripts/setup``): without it, or
when it is stale, every module is imported from its source as usual.

- :mod:`compiled.modules`: which modules are compiled (one list);
- :mod:`compiled.build`: ``python -m compiled.build`` compiles them into a
  directory outside the source tree and records what it was built from;
- :mod:`compiled.hook`: the import hook that serves a compiled module only
  while every source the build was made from is unchanged.

This package imports nothing of the project: the hook runs before any of it.
"""
