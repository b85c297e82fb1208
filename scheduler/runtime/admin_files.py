"""Reading the files an admin owns: the limits file and the association file.

The formats and their checks are sans-I/O (``scheduler.live.limits``,
``scheduler.live.associations``); this module reads the files, once, where a
program starts: ``python -m scheduler`` and ``accordion up`` (which checks them
before it starts anything, so a mistake is one line and nothing runs). Every
error is a :class:`ValueError` of one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

from scheduler.live.associations import Associations, associations_from_toml
from scheduler.live.limits import DEFAULTS, Limits, limits_from_toml


def read_limits(path: Path | None, **values: int | None) -> Limits:
    """The limits of ``path`` (the defaults without one), overridden by ``values``
    (the options that set one limit each; None: the file's)."""
    limits = DEFAULTS
    if path is not None:
        limits = limits_from_toml(_read(path, "limits file"), str(path))
    return limits.with_values(**values)


def read_associations(path: Path | None) -> Associations | None:
    """The association table of ``path``; None without one (nothing is checked)."""
    if path is None:
        return None
    return associations_from_toml(_read(path, "association file"), str(path))


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read the {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read the {what} {path}: it is not UTF-8 text") from None
